/// @file
/// The guards of a fence: the paths whose state decides a later call, and why a grant would
/// expose one.
// Included by <dsh/landlock.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/landlock.hpp>

#ifndef DSH_DETAIL_FENCE_GUARDS_HPP
#define DSH_DETAIL_FENCE_GUARDS_HPP

namespace dsh::detail {

/// A path whose state decides a later call's policy, and what a grant must not reach of it.
struct Guard {
  std::string what;                           ///< for messages: "the session log \"/x/s.jsonl\""
  bool content = false;                       ///< its bytes (or, for a directory, its entries) decide too
  std::filesystem::path canonical;            ///< its canonical path, where `content` is checked
  std::vector<std::filesystem::path> entries; ///< every directory entry the kernel reads to resolve it
};

/// Appends to `entries` each directory entry that resolving `spelled` reads, as
/// "<canonical directory>/<name>": the components as spelled and, for every symbolic link
/// met, the components of its target, at most `links` links in all (the kernel's limit).
/// `..` reads no entry that a write can replace, so it adds none.
inline void append_resolution_entries(const std::string& spelled, std::vector<std::filesystem::path>& entries,
                                      int& links) {
  const std::filesystem::path absolute = absolute_native(spelled);
  std::filesystem::path prefix = absolute.root_path();
  // canonical_path(prefix) when the last entry showed it without a second walk: a directory
  // that is not a symbolic link is itself canonical beneath its canonical parent.
  std::optional<std::filesystem::path> known;
  for (const std::filesystem::path& part : absolute.relative_path()) {
    if (part.empty() || part == ".") {
      continue;
    }
    if (part == "..") {
      prefix /= part;
      known.reset();
      continue;
    }
    const std::filesystem::path directory = known ? std::move(*known) : canonical_path(prefix);
    known.reset();
    std::filesystem::path entry = directory / part;
    prefix /= part;
    if (std::find(entries.begin(), entries.end(), entry) == entries.end()) {
      entries.push_back(entry);
    }
    struct stat status {};
    if (::lstat(entry.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) {
      known = entry;
    } else if (links > 0) {
      if (const std::optional<std::filesystem::path> target = dangling_link_target(entry)) {
        --links;
        append_resolution_entries(target->is_absolute() ? target->native() : (directory / *target).native(), entries,
                                  links);
      }
    }
  }
}

/// The guard for `spelled`: its canonical path and its resolution entries. Throws what
/// `canonical_path` throws (a relative path when the working directory cannot be read).
[[nodiscard]] inline Guard make_guard(std::string what, const std::filesystem::path& spelled, bool content) {
  Guard guard{std::move(what), content, canonical_path(spelled), {}};
  if (spelled.native().find('\0') == std::string::npos) {
    int links = 40;
    append_resolution_entries(spelled.native(), guard.entries, links);
  }
  if (std::find(guard.entries.begin(), guard.entries.end(), guard.canonical) == guard.entries.end() &&
      guard.canonical != guard.canonical.root_path()) {
    guard.entries.push_back(guard.canonical);
  }
  return guard;
}

/// Why granting every right beneath the canonical directory `grant` would let a fenced
/// command change what `guard` protects, or "" when it would not. A path's content is
/// reachable when it lies beneath-or-at the grant (or, for a directory, the grant lies
/// beneath it); a directory entry is reachable when the directory holding it lies
/// beneath-or-at the grant (the entry can then be renamed, removed or replaced by a link).
[[nodiscard]] inline std::string exposure(const Guard& guard, const std::filesystem::path& grant) {
  if (guard.content && (is_within(guard.canonical, grant) || is_within(grant, guard.canonical))) {
    return "the command could change " + guard.what + ", which decides later calls";
  }
  for (const std::filesystem::path& entry : guard.entries) {
    if (is_within(entry.parent_path(), grant)) {
      return "the command could replace " + json_string_literal(entry.native()) + " on the way to " + guard.what +
             ", which decides later calls";
    }
  }
  return {};
}

/// The guards of a workspace-write fence, in the order a refusal names them: the running
/// host executable, an absolute $TMPDIR, the workspace root and, when given, the session cwd
/// as spelled, the session log and the host's protected paths.
[[nodiscard]] inline std::vector<Guard> workspace_guards(const ResolvedPolicy& policy, const FenceOptions& options,
                                                         const char* tmpdir) {
  const auto named = [](std::string_view what, const std::filesystem::path& path) {
    return std::string(what) + " " + json_string_literal(path.native());
  };
  std::vector<Guard> guards;
  const std::filesystem::path host = canonical_path("/proc/self/exe");
  guards.push_back(make_guard(named("the host executable", host), host, true));
  // Even a $TMPDIR that is not granted now decides later calls: replaced by a link into
  // /tmp, it would be granted next time.
  if (tmpdir != nullptr && *tmpdir == '/') {
    guards.push_back(make_guard(named("$TMPDIR", tmpdir), tmpdir, false));
  }
  guards.push_back(make_guard(named("the workspace root", policy.workspace_root), policy.workspace_root, false));
  if (!options.session_cwd.empty()) {
    guards.push_back(make_guard(named("the session cwd", options.session_cwd), options.session_cwd, false));
  }
  if (!options.session_log.empty()) {
    guards.push_back(make_guard(named("the session log", options.session_log), options.session_log, true));
  }
  for (const std::filesystem::path& path : options.protected_paths) {
    guards.push_back(make_guard(named("the protected path", path), path, true));
  }
  return guards;
}

} // namespace dsh::detail

#endif // DSH_DETAIL_FENCE_GUARDS_HPP
