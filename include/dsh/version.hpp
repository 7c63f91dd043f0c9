/// @file
/// Version of the dsh-sandbox-policy library. Kept equal to `project(VERSION)` in
/// CMakeLists.txt; a test checks the two against each other.
#pragma once

/// Major version: incompatible API changes.
#define DSH_SANDBOX_POLICY_VERSION_MAJOR 0
/// Minor version: compatible additions.
#define DSH_SANDBOX_POLICY_VERSION_MINOR 1
/// Patch version: compatible fixes.
#define DSH_SANDBOX_POLICY_VERSION_PATCH 0
/// The version as the string "MAJOR.MINOR.PATCH".
#define DSH_SANDBOX_POLICY_VERSION "0.1.0"
