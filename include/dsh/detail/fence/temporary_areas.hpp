/// @file
/// The temporary areas a workspace-write fence may grant: /tmp, /var/tmp, /dev/shm and an
/// eligible $TMPDIR.
#pragma once

#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsh::detail {

/// The platform temporary areas the workspace-write fence may grant: /tmp, /var/tmp and
/// /dev/shm, canonical and without duplicates.
[[nodiscard]] inline std::vector<std::filesystem::path> platform_temporary_areas() {
  std::vector<std::filesystem::path> areas;
  for (const char* spelled : {"/tmp", "/var/tmp", "/dev/shm"}) {
    std::filesystem::path area = canonical_path(spelled);
    if (std::find(areas.begin(), areas.end(), area) == areas.end()) {
      areas.push_back(std::move(area));
    }
  }
  return areas;
}

/// Why `tmpdir` (the value of $TMPDIR) may not be granted, or "" when it may: it must be an
/// absolute path whose canonical path lies beneath one of `platform_temporary_areas()`.
/// Existence is not checked here.
[[nodiscard]] inline std::string tmpdir_ineligible(std::string_view tmpdir) {
  if (!tmpdir.starts_with('/')) {
    return "not an absolute path";
  }
  if (tmpdir.find('\0') != std::string_view::npos) {
    return "holds a NUL character";
  }
  const std::filesystem::path canonical = canonical_path(std::string(tmpdir));
  for (const std::filesystem::path& area : platform_temporary_areas()) {
    if (is_within(canonical, area)) {
      return {};
    }
  }
  return (canonical.native() == tmpdir ? std::string("not")
                                       : "its canonical path " + json_string_literal(canonical.native()) + " is not") +
         " beneath /tmp, /var/tmp or /dev/shm";
}

/// The temporary areas the workspace-write fence may grant, canonical and without
/// duplicates: `platform_temporary_areas()`, then `tmpdir` when it is non-null and eligible
/// (`tmpdir_ineligible`). Existence is not checked here.
[[nodiscard]] inline std::vector<std::filesystem::path> temporary_areas(const char* tmpdir) {
  std::vector<std::filesystem::path> areas = platform_temporary_areas();
  if (tmpdir != nullptr && tmpdir_ineligible(tmpdir).empty()) {
    std::filesystem::path area = canonical_path(tmpdir);
    if (std::find(areas.begin(), areas.end(), area) == areas.end()) {
      areas.push_back(std::move(area));
    }
  }
  return areas;
}

} // namespace dsh::detail
