// Header hygiene: the version macros match project(VERSION), and inline entities of the headers
// are single entities across translation units (see odr_probe.cpp). That every header compiles
// on its own is checked by CMake's header-set verification, which this test depends on.
#include <dsh/sandbox_policy.hpp>

#include "odr_probe.hpp"
#include "support/catch.hpp"

#include <string_view>

// The expected values come from project(VERSION) in CMakeLists.txt.
static_assert(DSH_SANDBOX_POLICY_VERSION_MAJOR == DSH_EXPECTED_VERSION_MAJOR, "major version != project(VERSION)");
static_assert(DSH_SANDBOX_POLICY_VERSION_MINOR == DSH_EXPECTED_VERSION_MINOR, "minor version != project(VERSION)");
static_assert(DSH_SANDBOX_POLICY_VERSION_PATCH == DSH_EXPECTED_VERSION_PATCH, "patch version != project(VERSION)");
static_assert(std::string_view{DSH_SANDBOX_POLICY_VERSION} == DSH_EXPECTED_VERSION,
              "DSH_SANDBOX_POLICY_VERSION != project(VERSION)");

TEST_CASE("the version macros equal project(VERSION)") {
  CHECK(std::string_view{DSH_SANDBOX_POLICY_VERSION} == std::string_view{DSH_EXPECTED_VERSION});
  CHECK(DSH_SANDBOX_POLICY_VERSION_MAJOR == DSH_EXPECTED_VERSION_MAJOR);
  CHECK(DSH_SANDBOX_POLICY_VERSION_MINOR == DSH_EXPECTED_VERSION_MINOR);
  CHECK(DSH_SANDBOX_POLICY_VERSION_PATCH == DSH_EXPECTED_VERSION_PATCH);
}

TEST_CASE("two translation units see one entity per inline name") {
  const dsh::test::OdrProbe a = dsh::test::odr_probe_a();
  const dsh::test::OdrProbe b = dsh::test::odr_probe_b();

  CHECK(a.policy_context_name == b.policy_context_name);
  CHECK(a.sandbox_modes == b.sandbox_modes);
  CHECK(a.families == b.families);
  CHECK(a.canonicalizer == b.canonicalizer);
  CHECK(a.json_quoter == b.json_quoter);
  CHECK(a.context == b.context);
  CHECK(a.context == "Current DSH file policy: workspace-write. The write and edit tools may modify files under the "
                     "session workspace: \"/odr/root\". Some platform temporary areas may also be writable.");
}
