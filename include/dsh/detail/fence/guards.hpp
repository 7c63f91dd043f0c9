/// @file
/// The guards of a fence: the paths whose state decides a later call, and why a grant would
/// expose one.
#pragma once

#include <dsh/detail/fence/host_environment.hpp>
#include <dsh/detail/fence/mount_table.hpp>
#include <dsh/detail/observations.hpp>
#include <dsh/detail/process/launcher_client.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace dsh::detail {

/// A path whose state decides a later call's policy, and what a grant must not reach of it.
struct Guard {
  std::string what;                           ///< for messages: "the session log \"/x/s.jsonl\""
  bool content = false;                       ///< its bytes (or, for a directory, its entries) decide too
  std::filesystem::path canonical;            ///< its canonical path, where `content` is checked
  std::vector<std::filesystem::path> entries; ///< every directory entry the kernel reads to resolve it
  /// Where `canonical` lies in its filesystem (nullopt: no mount holds it).
  std::optional<FilesystemLocation> location{};
  /// Where the directory holding each of `entries` lies, in the same order.
  std::vector<std::optional<FilesystemLocation>> entry_directories{};
  /// The link count of a regular file guarded for its content (0 otherwise): above 1, another
  /// name for the same file may lie anywhere on its filesystem.
  std::uint64_t links = 0;
};

/// `directory` joined with the relative `name` by one separator, as `std::filesystem::path`'s
/// `/` joins them (a `directory` ending in '/' gets none).
[[nodiscard]] inline std::string join_native(std::string_view directory, std::string_view name) {
  std::string joined;
  joined.reserve(directory.size() + 1 + name.size());
  joined.append(directory);
  if (!joined.ends_with('/')) {
    joined += '/';
  }
  joined.append(name);
  return joined;
}

/// Appends to `entries` each directory entry that resolving `spelled` reads, as
/// "<canonical directory>/<name>": the components as spelled and, for every symbolic link
/// met, the components of its target, at most `links` links in all (the kernel's limit).
/// `..` reads no entry that a write can replace, so it adds none. Works on the native strings
/// (each guard's path is walked here, and a `std::filesystem::path` splits itself on every
/// construction); an entry is added once.
inline void append_resolution_entries(const std::string& spelled, std::vector<std::filesystem::path>& entries,
                                      int& links) {
  const std::string absolute = absolute_native(spelled);
  std::string prefix = "/";
  // canonical_path(prefix) when the last entry showed it without a second walk: a directory
  // that is not a symbolic link is itself canonical beneath its canonical parent.
  std::optional<std::string> known;
  for (std::size_t from = 0; from < absolute.size();) {
    const std::size_t end = std::min(absolute.find('/', from), absolute.size());
    const std::string_view part = std::string_view(absolute).substr(from, end - from);
    from = end + 1;
    if (part.empty() || part == ".") {
      continue;
    }
    if (part == "..") {
      prefix = join_native(prefix, part);
      known.reset();
      continue;
    }
    const std::string directory = known ? std::move(*known) : canonical_native(prefix);
    known.reset();
    std::string entry = join_native(directory, part);
    prefix = join_native(prefix, part);
    if (std::none_of(entries.begin(), entries.end(),
                     [&](const std::filesystem::path& listed) { return listed.native() == entry; })) {
      entries.emplace_back(entry);
    }
    struct stat status {};
    const bool seen = observed_lstat(entry.c_str(), status) == 0;
    if (seen && S_ISDIR(status.st_mode)) {
      known = std::move(entry);
    } else if (links > 0 && seen && S_ISLNK(status.st_mode)) { // only a link has a target to read
      if (const std::optional<std::filesystem::path> target = dangling_link_target(entry)) {
        --links;
        append_resolution_entries(target->is_absolute() ? target->native() : join_native(directory, target->native()),
                                  entries, links);
      }
    }
  }
}

/// The guard for `spelled`: its canonical path, its resolution entries and where each lies in
/// `mounts`. `canonical` is `canonical_path(spelled)` when the caller has it already (nullptr:
/// computed here). Throws what `canonical_path` throws (a relative path when the working
/// directory cannot be read).
[[nodiscard]] inline Guard make_guard(std::string what, const std::filesystem::path& spelled, bool content,
                                      const std::vector<MountEntry>& mounts,
                                      const std::filesystem::path* canonical = nullptr) {
  Guard guard{std::move(what), content, canonical != nullptr ? *canonical : canonical_path(spelled), {}};
  if (spelled.native().find('\0') == std::string::npos) {
    int links = 40;
    append_resolution_entries(spelled.native(), guard.entries, links);
  }
  if (std::find(guard.entries.begin(), guard.entries.end(), guard.canonical) == guard.entries.end() &&
      guard.canonical != guard.canonical.root_path()) {
    guard.entries.push_back(guard.canonical);
  }
  guard.location = locate(mounts, guard.canonical);
  for (const std::filesystem::path& entry : guard.entries) {
    guard.entry_directories.push_back(locate(mounts, entry.parent_path()));
  }
  struct stat info {};
  if (content && observed_stat(guard.canonical.c_str(), info) == 0 && S_ISREG(info.st_mode)) {
    guard.links = static_cast<std::uint64_t>(info.st_nlink);
  }
  return guard;
}

/// Why granting every right beneath the canonical directory `grant` would let a fenced
/// command change what `guard` protects, or "" when it would not. A path's content is
/// reachable when it lies beneath-or-at the grant (or, for a directory, the grant lies
/// beneath it); a directory entry is reachable when the directory holding it lies
/// beneath-or-at the grant (the entry can then be renamed, removed or replaced by a link).
/// Both are judged by spelling and by identity: `regions` (`reachable_beneath` of the grant)
/// are the filesystem locations the grant reaches, bind mounts beneath it included, and a
/// guarded file with more than one name on a filesystem the grant reaches counts as reached.
[[nodiscard]] inline std::string exposure(const Guard& guard, const std::filesystem::path& grant,
                                          const std::vector<FilesystemLocation>& regions) {
  const std::string decides = guard.what + ", which decides later calls";
  if (guard.content && (is_within(guard.canonical, grant) || is_within(grant, guard.canonical))) {
    return "the command could change " + decides;
  }
  for (const std::filesystem::path& entry : guard.entries) {
    if (is_within(entry.parent_path(), grant)) {
      return "the command could replace " + json_string_literal(entry.native()) + " on the way to " + decides;
    }
  }
  const auto through = [](const FilesystemLocation& region) {
    return " (the mount at " + json_string_literal(region.point.native()) + " shows it beneath the grant)";
  };
  for (const FilesystemLocation& region : regions) {
    if (guard.content && guard.location && guard.location->device == region.device &&
        (is_within(guard.location->path, region.path) || is_within(region.path, guard.location->path))) {
      return "the command could change " + decides + through(region);
    }
    for (std::size_t i = 0; i < guard.entries.size(); ++i) {
      const std::optional<FilesystemLocation>& directory = guard.entry_directories[i];
      if (directory && directory->device == region.device && is_within(directory->path, region.path)) {
        return "the command could replace " + json_string_literal(guard.entries[i].native()) + " on the way to " +
               decides + through(region);
      }
    }
    if (guard.links > 1 && guard.location && guard.location->device == region.device) {
      return "the command could change " + decides + ": it has " + std::to_string(guard.links) +
             " names (hard links), and another may lie beneath the grant, on the same filesystem";
    }
  }
  return {};
}

/// The directories the dynamic loader of the next host process searches or loads from, as
/// `variable` (LD_LIBRARY_PATH, LD_PRELOAD or LD_AUDIT) with `value` names them: for
/// LD_LIBRARY_PATH each entry (an empty one is the working directory), for the other two the
/// directory of each entry that names a path. A leading $ORIGIN is the host executable's
/// directory; at any other dynamic string token the entry is cut, so that the directory above
/// it, and everything beneath, is guarded.
[[nodiscard]] inline std::vector<std::filesystem::path>
loader_directories(std::string_view variable, std::string_view value, const std::filesystem::path& host) {
  const bool search_path = variable == "LD_LIBRARY_PATH";
  const std::string_view separators = variable == "LD_PRELOAD" ? std::string_view(" :") : std::string_view(":;");
  std::vector<std::filesystem::path> directories;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t end = std::min(value.find_first_of(separators, at), value.size());
    std::string entry(value.substr(at, end - at));
    at = end + 1;
    if (!search_path && entry.find('/') == std::string::npos) {
      continue; // a bare file name is searched for in the library path
    }
    for (const std::string_view origin : {"${ORIGIN}", "$ORIGIN"}) {
      if (entry.starts_with(origin)) {
        entry = host.parent_path().native() + entry.substr(origin.size());
      }
    }
    if (const std::size_t token = entry.find('$'); token != std::string::npos) {
      entry = entry.substr(0, entry.rfind('/', token) == std::string::npos ? 0 : entry.rfind('/', token));
      if (entry.empty()) {
        entry = "/";
      }
    } else if (!search_path) {
      entry = std::filesystem::path(entry).parent_path().native();
    }
    if (entry.empty()) {
      entry = ".";
    }
    if (entry.find('\0') == std::string::npos) {
      directories.emplace_back(std::move(entry));
    }
  }
  return directories;
}

/// The guards of a workspace-write fence, in the order a refusal names them: the running
/// host executable, the directories its loader variables name, an absolute $TMPDIR, the
/// workspace root and, when given, the session cwd as spelled, the session log and the host's
/// protected paths.
/// `canonical_log` is `canonical_path(options.session_log)` when the caller has it (nullptr:
/// computed here).
[[nodiscard]] inline std::vector<Guard> workspace_guards(const ResolvedPolicy& policy, const FenceOptions& options,
                                                         const HostEnvironment& environment,
                                                         const std::vector<MountEntry>& mounts,
                                                         const std::filesystem::path* canonical_log = nullptr) {
  const auto named = [](std::string_view what, const std::filesystem::path& path) {
    return std::string(what) + " " + json_string_literal(path.native());
  };
  std::vector<Guard> guards;
  const std::filesystem::path host = canonical_path("/proc/self/exe");
  // The kernel's name of the file, canonical already.
  guards.push_back(make_guard(named("the host executable", host), host, true, mounts, &host));
  // The launcher runs every later call's supervisor, unfenced, until it is started again.
  const std::filesystem::path launcher = LauncherClient::instance().state().program;
  note_text(Observation::Kind::launcher, "", 0, launcher.native());
  if (!launcher.empty()) {
    guards.push_back(make_guard(named("the fence launcher", launcher), launcher, true, mounts));
  }
  // The next host process loads its libraries from these before any fence exists: a library
  // dropped there runs unfenced, with all the user's rights.
  for (const auto& [variable, value] :
       {std::pair{"LD_LIBRARY_PATH", environment.ld_library_path}, std::pair{"LD_PRELOAD", environment.ld_preload},
        std::pair{"LD_AUDIT", environment.ld_audit}}) {
    if (value == nullptr) {
      continue;
    }
    for (const std::filesystem::path& directory : loader_directories(variable, value, host)) {
      guards.push_back(make_guard(named("the loader directory", canonical_path(directory)) + " of $" + variable,
                                  directory, true, mounts));
    }
  }
  // Even a $TMPDIR that is not granted now decides later calls: replaced by a link into
  // /tmp, it would be granted next time.
  if (environment.tmpdir != nullptr && *environment.tmpdir == '/') {
    guards.push_back(make_guard(named("$TMPDIR", environment.tmpdir), environment.tmpdir, false, mounts));
  }
  guards.push_back(
      make_guard(named("the workspace root", policy.workspace_root), policy.workspace_root, false, mounts));
  if (!options.session_cwd.empty()) {
    if (options.session_cwd.native() == policy.workspace_root.native()) {
      // the same spelling resolves through the same entries: the root's guard, named again
      Guard same = guards.back();
      same.what = named("the session cwd", options.session_cwd);
      guards.push_back(std::move(same));
    } else {
      guards.push_back(make_guard(named("the session cwd", options.session_cwd), options.session_cwd, false, mounts));
    }
  }
  if (!options.session_log.empty()) {
    guards.push_back(
        make_guard(named("the session log", options.session_log), options.session_log, true, mounts, canonical_log));
  }
  for (const std::filesystem::path& path : options.protected_paths) {
    guards.push_back(make_guard(named("the protected path", path), path, true, mounts));
  }
  return guards;
}

} // namespace dsh::detail
