#pragma once

// Protected paths beneath a writable root: what git executes or reads as configuration, and
// what the host declares. One list for the three families: `ResolvedPolicy::permits_write`,
// `open_for_write` and the fence's namespace layer all refuse the same entries
// (docs/enforcement.md#protected-paths).

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/detail/text/expectation.hpp>
#include <dsh/detail/text/json_text.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace dsh {

/// Which paths beneath a writable root stay read-only even in workspace-write.
struct ProtectedPathRules {
  /// Apply the default list (docs/enforcement.md#protected-paths): `.git/hooks`,
  /// `.git/config`, `.git/config.worktree`, `.git/commondir`, `.gitmodules`, the same
  /// entries of the git directory a `.git` pointer file names, and the root's `HEAD` (which
  /// would make the root itself a git directory).
  bool defaults = true;
  /// Default entries turned off by name, spelled as in the default list (".gitmodules").
  std::vector<std::string> disabled_defaults{};
  /// More paths, relative to the writable root (or absolute beneath it), files or directories;
  /// one ending in "/" is expected to be a directory, any other a file.
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
  /// What a placeholder made for a missing_file entry must hold so that git reads it as it
  /// reads the absence: empty, except ".\n" for a `commondir` (git refuses to start on an
  /// empty one, and "." names the git directory itself, which is what its absence means).
  std::string placeholder{};
  /// Member-wise equality.
  bool operator==(const ProtectedEntry&) const = default;
};

/// The protected list of one writable root, or why it cannot be known.
struct ProtectedScan {
  std::vector<ProtectedEntry> entries;
  /// Empty when resolved; otherwise what could not be resolved (a `.git` pointer file git
  /// would follow but this library cannot, ...): callers then fail closed.
  std::string problem;
  /// The system call's error when `problem` comes from one; empty otherwise.
  std::error_code error{};
};

/// The names of the default list, in the order a scan lists their entries.
inline constexpr std::array<std::string_view, 5> PROTECTED_DEFAULTS = {
    ".git/hooks", ".git/config", ".git/config.worktree", ".git/commondir", ".gitmodules"};

/// The rule named by the pins and the pointer file, which any enabled `.git/` default implies.
inline constexpr std::string_view PROTECTED_GIT_RULE = ".git";

/// The default list spelled for an error message: `".git/hooks", ".git/config", ...`.
[[nodiscard]] inline std::string protected_defaults_vocabulary() {
  std::string text = "one of ";
  for (std::size_t i = 0; i < PROTECTED_DEFAULTS.size(); ++i) {
    text.append(i == 0 ? "" : ", ");
    append_json_string(text, PROTECTED_DEFAULTS[i]);
  }
  return text;
}

/// The one scan behind `protected_entries`: a few lstat calls for a plain repository, a read of
/// each pointer and commondir file, and a walk of `modules/` and `worktrees/`.
// A template only so that it is compiled where a scan is made: <dsh/sandbox_policy.hpp> reaches
// this header through `ResolvedPolicy::permits_write`, and a translation unit that never checks
// a write (most that resolve a policy) then parses the scan but instantiates none of it, about a
// twentieth of its compile time (docs/performance.md, "Compile time"). `Unused` is always void.
template <class Unused = void> class BasicProtectedScanner {
public:
  BasicProtectedScanner(const std::filesystem::path& root, const ProtectedPathRules& rules)
      : root_(root), rules_(rules) {}

  /// Runs the scan once.
  [[nodiscard]] ProtectedScan run() {
    if (!root_.is_absolute()) { // nothing is beneath a root that is not absolute; never the working directory
      fail("protected paths", "an absolute workspace root", root_.native());
      return std::move(scan_);
    }
    if (rules_.defaults) {
      scan_git();
      if (enabled(".gitmodules") && scan_.problem.empty()) {
        protect(root_ / ".gitmodules", false, ".gitmodules");
      }
    }
    for (const std::filesystem::path& extra : rules_.extra) {
      if (!scan_.problem.empty()) {
        break;
      }
      const std::string& text = extra.native();
      const bool directory = text.ends_with('/');
      const std::filesystem::path absolute(lexically_clean(extra.is_absolute() ? extra : root_ / extra));
      if (is_within(absolute, root_)) { // one outside this root is not writable here anyway
        protect(absolute, directory, text);
      }
    }
    if (!scan_.problem.empty()) {
      scan_.entries.clear();
    }
    return std::move(scan_);
  }

private:
  // What git reads in every git directory; the names are the defaults without ".git/".
  struct GitEntry {
    std::string_view name;
    std::string_view rule;
    bool directory;
  };
  static constexpr std::array<GitEntry, 4> GIT_ENTRIES = {{{"hooks", ".git/hooks", true},
                                                           {"config", ".git/config", false},
                                                           {"config.worktree", ".git/config.worktree", false},
                                                           {"commondir", ".git/commondir", false}}};
  /// The names whose presence makes a directory look like a git directory.
  static constexpr std::array<std::string_view, 4> GIT_MARKERS = {"HEAD", "config", "objects", "refs"};
  static constexpr int MAX_DEPTH = 16;             // nested submodules deeper than this fail closed
  static constexpr std::size_t MAX_FILE = 4096;    // a pointer or commondir file longer than this fails closed
  static constexpr std::size_t MAX_ENTRIES = 4096; // a list longer than this fails closed

  [[nodiscard]] bool enabled(std::string_view name) const {
    return rules_.defaults && std::find(rules_.disabled_defaults.begin(), rules_.disabled_defaults.end(), name) ==
                                  rules_.disabled_defaults.end();
  }
  [[nodiscard]] bool any_git_default() const {
    return std::any_of(GIT_ENTRIES.begin(), GIT_ENTRIES.end(),
                       [&](const GitEntry& entry) { return enabled(entry.rule); });
  }

  void fail(std::string_view context, std::string_view expected, const std::string& found, int error = 0) {
    if (scan_.problem.empty()) {
      scan_.problem = expectation_message(context, expected, found);
      if (error != 0) {
        scan_.error = std::error_code(error, std::generic_category());
      }
    }
  }
  [[nodiscard]] static std::string subject(const std::filesystem::path& path) {
    std::string text = "protected path ";
    append_json_string(text, path.native());
    return text;
  }

  /// Lists `path` as `kind` for `rule`, after pinning the directories on the way to it. A
  /// directory pinned earlier that the rule protects whole becomes read-only instead.
  void add(const std::filesystem::path& path, ProtectedKind kind, std::string_view rule,
           std::string_view placeholder = {}) {
    pin_parents(path, rule);
    list(path, kind, rule, placeholder);
  }

  void list(const std::filesystem::path& path, ProtectedKind kind, std::string_view rule,
            std::string_view placeholder = {}) {
    const auto listed = std::find_if(scan_.entries.begin(), scan_.entries.end(),
                                     [&](const ProtectedEntry& e) { return e.path == path; });
    if (listed != scan_.entries.end()) {
      if (listed->kind == ProtectedKind::pinned_directory && kind != ProtectedKind::pinned_directory) {
        listed->kind = kind;
        listed->rule = rule;
      }
      return;
    }
    if (scan_.entries.size() >= MAX_ENTRIES) {
      // A command can make directories in modules/ and worktrees/: past this the list fails
      // closed rather than grow the scan (and the namespace layer's mounts) without bound.
      fail(subject(path), "at most 4096 protected entries beneath a root", "more");
      return;
    }
    scan_.entries.push_back(ProtectedEntry{path, kind, std::string(rule), std::string(placeholder)});
  }

  /// Pins every directory strictly between the root and `path`. The layer's read-only bind of
  /// an entry moves with its parent when the parent is renamed, and the entry's name is then
  /// free to be made again (a worktree's directory holding its `.git` pointer, the directory
  /// holding a git directory, the parents of a host's path): a directory bound onto itself
  /// cannot be renamed or removed (EBUSY). Each was reached by `reach`: a directory, no link.
  void pin_parents(const std::filesystem::path& path, std::string_view rule) {
    if (!is_within(path, root_)) {
      return;
    }
    const std::string& text = path.native();
    std::size_t end = root_.native() == "/" ? 0 : root_.native().size();
    for (;;) {
      end = text.find('/', end + 1);
      if (end == std::string::npos || !scan_.problem.empty()) {
        return;
      }
      list(std::filesystem::path(text.substr(0, end)), ProtectedKind::pinned_directory, rule);
    }
  }

  /// lstat(2) of `path`, remembered for the rest of the scan; nullopt with errno set on failure.
  [[nodiscard]] std::optional<struct stat> look(const std::string& path) {
    if (const auto seen = looked_.find(path); seen != looked_.end()) {
      return seen->second;
    }
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0) {
      return std::nullopt;
    }
    looked_.emplace(path, status);
    return status;
  }

  /// Walks from the root to `path` (beneath it) one component at a time. Returns the lstat of
  /// `path` when every component exists and none is a symbolic link. Otherwise lists the first
  /// missing component (a directory unless it is `path` itself, which is expected to be a
  /// directory when `directory`), or the first component that is not a directory where one is
  /// needed (as a file, so it cannot be replaced by one), or fails on a link; returns nullopt.
  std::optional<struct stat> reach(const std::filesystem::path& path, bool directory, std::string_view rule,
                                   std::string_view placeholder = {}) {
    // Every path reaching here is clean and spelled beneath the root (built from it, cleaned
    // or canonical), so its prefixes are found by its separators.
    const std::string& text = path.native();
    std::size_t end = root_.native() == "/" ? 0 : root_.native().size();
    if (text.size() <= end + 1) {
      return look(root_.native()); // `path` is the root itself
    }
    for (;;) {
      end = text.find('/', end + 1);
      const bool last = end == std::string::npos;
      const std::string prefix = last ? text : text.substr(0, end);
      const std::optional<struct stat> status = look(prefix);
      if (!status) {
        const int error = errno;
        if (error == ENOENT || error == ENOTDIR) {
          add(prefix, last && !directory ? ProtectedKind::missing_file : ProtectedKind::missing_directory, rule,
              last ? placeholder : std::string_view());
        } else {
          fail(subject(prefix), "a path lstat(2) can examine",
               std::error_code(error, std::generic_category()).message(), error);
        }
        return std::nullopt;
      }
      if (S_ISLNK(status->st_mode)) {
        fail(subject(prefix), "no symbolic link on the way to a protected path", "a symbolic link");
        return std::nullopt;
      }
      if (last) {
        return status;
      }
      if (!S_ISDIR(status->st_mode)) {
        add(prefix, ProtectedKind::file, rule);
        return std::nullopt;
      }
    }
  }

  /// Lists the entry `path` for `rule` as it is now (its first missing component when absent);
  /// for a directory, also the files its symbolic links name beneath the root.
  void protect(const std::filesystem::path& path, bool directory, std::string_view rule,
               std::string_view placeholder = {}) {
    if (const std::optional<struct stat> status = reach(path, directory, rule, placeholder)) {
      add(path, S_ISDIR(status->st_mode) ? ProtectedKind::directory : ProtectedKind::file, rule);
      if (S_ISDIR(status->st_mode) && std::find(linked_.begin(), linked_.end(), path) == linked_.end()) {
        linked_.push_back(path); // once: links between two protected directories do not loop
        protect_link_targets(path, rule);
      }
    }
  }

  /// Protects what each symbolic link directly in the protected directory `dir` names beneath
  /// the root: git runs a hook through its link (`hooks/commit-msg -> ../../scripts/commit-msg`
  /// is a common install), so the file it names is the hook. The link's text is followed as
  /// spelled: a link or missing directory on the way is found by `reach` (a link fails closed,
  /// since the command could swap it; a missing part gets its placeholder, as a missing entry
  /// does); a directory named is pinned (no hook, but no file may take its name). Not
  /// followed: a path in a git directory (its index and objects must stay writable: not
  /// covered, docs/enforcement.md), in a directory already protected, or outside the root
  /// where no link brings it back beneath it (that fails closed).
  void protect_link_targets(const std::filesystem::path& dir, std::string_view rule) {
    DIR* stream = ::opendir(dir.c_str());
    if (stream == nullptr) {
      const int error = errno;
      fail(subject(dir), "a directory opendir(3) can read", std::error_code(error, std::generic_category()).message(),
           error);
      return;
    }
    std::vector<std::string> links;
    std::size_t read = 0;
    while (const dirent* entry = ::readdir(stream)) {
      if (++read > MAX_ENTRIES) {
        ::closedir(stream);
        fail(subject(dir), "a protected directory of at most 4096 entries", "more");
        return;
      }
      const std::string_view name(entry->d_name);
      if (name == "." || name == "..") {
        continue;
      }
      bool link = entry->d_type == DT_LNK;
      if (entry->d_type == DT_UNKNOWN) {
        const std::optional<struct stat> child = look(dir / name);
        link = child && S_ISLNK(child->st_mode);
      }
      if (link) {
        links.emplace_back(name);
      }
    }
    ::closedir(stream);
    std::sort(links.begin(), links.end());
    for (const std::string& name : links) {
      if (!scan_.problem.empty()) {
        return;
      }
      protect_link_target(dir / name, rule);
    }
  }

  /// One link of `protect_link_targets`.
  void protect_link_target(const std::filesystem::path& link, std::string_view rule) {
    std::array<char, 4096> text{};
    const ::ssize_t length = ::readlink(link.c_str(), text.data(), text.size());
    if (length <= 0 || static_cast<std::size_t>(length) >= text.size()) {
      const int error = length < 0 ? errno : ENAMETOOLONG;
      fail(subject(link), "a symbolic link readlink(2) can read",
           std::error_code(error, std::generic_category()).message(), error);
      return;
    }
    const std::filesystem::path named(std::string(text.data(), static_cast<std::size_t>(length)));
    // ".." after a name is resolved by the kernel from wherever that name leads (a link the
    // command may make), not lexically: such a text fails closed. Leading ".." climb through
    // the directories on the way to this one, which are no links.
    bool named_part = false;
    for (const std::filesystem::path& part : named.relative_path()) {
      if (part == ".." && named_part) {
        fail(subject(link), "a hook link whose \"..\" come first", named.native());
        return;
      }
      named_part = named_part || (part != ".." && part != "." && !part.empty());
    }
    const std::filesystem::path spelled(lexically_clean(named.is_absolute() ? named : link.parent_path() / named));
    if (!is_within(spelled, root_)) {
      // Outside the root as spelled: nothing there is writable, unless a link there leads back.
      if (is_within(std::filesystem::path(canonical_native(spelled.native())), root_)) {
        fail(subject(link), "a hook link that stays outside the root or names it without another link",
             "a link through " + spelled.native() + " back beneath the root");
      }
      return;
    }
    const auto covered = [&](const std::filesystem::path& path) {
      return std::any_of(visited_.begin(), visited_.end(),
                         [&](const std::filesystem::path& git) { return is_within(path, git); }) ||
             std::any_of(scan_.entries.begin(), scan_.entries.end(), [&](const ProtectedEntry& entry) {
               return (entry.kind == ProtectedKind::directory || entry.kind == ProtectedKind::missing_directory) &&
                      is_within(path, entry.path);
             });
    };
    if (spelled == root_ || covered(spelled)) {
      return;
    }
    // A missing part gets its placeholder in reach; a directory is pinned, so that no file
    // takes its name during the call.
    if (const std::optional<struct stat> status = reach(spelled, false, rule)) {
      add(spelled, S_ISDIR(status->st_mode) ? ProtectedKind::pinned_directory : ProtectedKind::file, rule);
    }
  }

  /// Reads a small file git reads as one line (`.git` pointer, `commondir`); nullopt after fail().
  [[nodiscard]] std::optional<std::string> read_line_file(const std::filesystem::path& path, std::string_view what) {
    UniqueFd file(retry_on_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); }));
    if (!file) {
      const int error = errno;
      fail(subject(path), what, std::error_code(error, std::generic_category()).message(), error);
      return std::nullopt;
    }
    struct stat status {};
    if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
      fail(subject(path), what, "not a regular file");
      return std::nullopt;
    }
    std::string text(MAX_FILE + 1, '\0');
    std::size_t size = 0;
    while (size < text.size()) {
      const ::ssize_t got = retry_on_eintr([&] { return ::read(file.get(), text.data() + size, text.size() - size); });
      if (got < 0) {
        const int error = errno;
        fail(subject(path), what, std::error_code(error, std::generic_category()).message(), error);
        return std::nullopt;
      }
      if (got == 0) {
        break;
      }
      size += static_cast<std::size_t>(got);
    }
    text.resize(size);
    if (size > MAX_FILE) {
      fail(subject(path), what, "a file longer than 4096 bytes");
      return std::nullopt;
    }
    // git reads the line up to its trailing line ends, and a C string ends at NUL.
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
      text.pop_back();
    }
    if (text.find('\0') != std::string::npos) {
      fail(subject(path), what, text);
      return std::nullopt;
    }
    return text;
  }

  /// Whether `head` is a `HEAD` git accepts, as its validate_headref judges one: a symbolic
  /// link whose target begins with `refs/` (core.preferSymlinkRefs; not followed), or a file
  /// that begins with `ref:`, blanks and `refs/`, or with an object id (hex digits, either case).
  [[nodiscard]] static bool holds_head_ref(const std::filesystem::path& head) {
    struct stat status {};
    if (::lstat(head.c_str(), &status) == 0 && S_ISLNK(status.st_mode)) {
      std::array<char, 64> target{};
      const ::ssize_t length = ::readlink(head.c_str(), target.data(), target.size());
      return length > 0 && std::string_view(target.data(), static_cast<std::size_t>(length)).starts_with("refs/");
    }
    UniqueFd file(retry_on_eintr(
        [&] { return ::open(head.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW); }));
    std::array<char, 256> text{};
    const ::ssize_t got =
        file ? retry_on_eintr([&] { return ::read(file.get(), text.data(), text.size()); }) : ::ssize_t{-1};
    std::string_view line(text.data(), got > 0 ? static_cast<std::size_t>(got) : 0);
    if (line.starts_with("ref:")) {
      line.remove_prefix(4);
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t' || line.front() == '\n' ||
                               line.front() == '\r' || line.front() == '\v' || line.front() == '\f')) {
        line.remove_prefix(1);
      }
      return line.starts_with("refs/");
    }
    const std::string_view id = line.substr(0, 40);
    return line.size() >= 40 && std::all_of(id.begin(), id.end(), [](char c) {
             return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
           });
  }

  /// Returns what is not a git directory about canonical `dir` whose common directory is
  /// `common`, as git's is_git_directory checks it: `HEAD` a ref or an object id, `objects`
  /// and `refs` directories. Empty when it is one.
  [[nodiscard]] static std::string not_git_directory(const std::filesystem::path& dir,
                                                     const std::filesystem::path& common) {
    struct stat status {};
    if (::stat(dir.c_str(), &status) != 0 || !S_ISDIR(status.st_mode)) {
      return "no directory";
    }
    if (!holds_head_ref(dir / "HEAD")) {
      return "no HEAD holding a ref or an object id";
    }
    for (const char* name : {"objects", "refs"}) {
      if (::stat((common / name).c_str(), &status) != 0 || !S_ISDIR(status.st_mode)) {
        return std::string("no ") + name + " directory in " + common.native();
      }
    }
    return {};
  }

  /// The common directory of canonical git directory `dir` (its `commondir` file resolved
  /// against it, as git reads it), `dir` itself without one; nullopt after fail().
  [[nodiscard]] std::optional<std::filesystem::path> common_directory(const std::filesystem::path& dir) {
    const std::filesystem::path file = dir / "commondir";
    const std::optional<struct stat> status = look(file);
    if (!status) {
      const int error = errno;
      if (error == ENOENT || error == ENOTDIR) {
        return dir;
      }
      fail(subject(file), "a commondir file lstat(2) can examine",
           std::error_code(error, std::generic_category()).message(), error);
      return std::nullopt;
    }
    if (status->st_size == 0 && S_ISREG(status->st_mode)) {
      fail(subject(file), "a commondir file naming a directory (git refuses an empty one)", "");
      return std::nullopt;
    }
    const std::optional<std::string> text = read_line_file(file, "a commondir file naming a directory");
    if (!text) {
      return std::nullopt;
    }
    const std::filesystem::path named(*text);
    return std::filesystem::path(canonical_native((named.is_absolute() ? named : dir / named).native()));
  }

  /// Lists the entries of the git directory `dir` (canonical) that lie beneath the root, those
  /// of its common directory, and of the git directories in its `modules/` and `worktrees/`.
  void scan_git_directory(const std::filesystem::path& dir, int depth) {
    if (!scan_.problem.empty() || std::find(visited_.begin(), visited_.end(), dir) != visited_.end()) {
      return;
    }
    if (depth > MAX_DEPTH) {
      fail(subject(dir), "submodules nested at most 16 deep", "deeper nesting");
      return;
    }
    visited_.push_back(dir);
    const bool inside = is_within(dir, root_);
    if (inside) {
      if (!reach(dir, true, PROTECTED_GIT_RULE)) {
        return;
      }
      add(dir, ProtectedKind::pinned_directory, PROTECTED_GIT_RULE);
      for (const GitEntry& entry : GIT_ENTRIES) {
        if (enabled(entry.rule)) {
          protect(dir / entry.name, entry.directory, entry.rule, entry.name == "commondir" ? ".\n" : "");
        }
      }
    }
    const std::optional<std::filesystem::path> common = common_directory(dir);
    if (!common) {
      return;
    }
    if (*common != dir) {
      if (std::string found = not_git_directory(*common, *common); !found.empty()) {
        fail(subject(dir / "commondir"), "to name a git common directory", found);
        return;
      }
      if (is_within(*common, root_) && reach(*common, true, PROTECTED_GIT_RULE)) {
        add(*common, ProtectedKind::pinned_directory, PROTECTED_GIT_RULE);
        for (const GitEntry& entry : GIT_ENTRIES) {
          if (enabled(entry.rule) && entry.name != "config.worktree" && entry.name != "commondir") {
            protect(*common / entry.name, entry.directory, entry.rule);
          }
        }
      }
    }
    walk_children(dir, depth);
    walk_children(*common, depth);
  }

  /// Walks `modules/` and `worktrees/` of the git directory `dir` once, when it lies beneath the root.
  void walk_children(const std::filesystem::path& dir, int depth) {
    if (!scan_.problem.empty() || !is_within(dir, root_) ||
        std::find(walked_.begin(), walked_.end(), dir) != walked_.end()) {
      return;
    }
    walked_.push_back(dir);
    walk_modules(dir / "modules", depth);
    walk_worktrees(dir / "worktrees", depth);
  }

  /// The names of the directories in `dir` (beneath the root), or nullopt when it has none or
  /// after fail(): a symbolic link there fails closed.
  [[nodiscard]] std::optional<std::vector<std::string>> subdirectories(const std::filesystem::path& dir) {
    const std::optional<struct stat> status = look(dir);
    if (!status) {
      const int error = errno;
      if (error != ENOENT && error != ENOTDIR) {
        fail(subject(dir), "a path lstat(2) can examine", std::error_code(error, std::generic_category()).message(),
             error);
      }
      return std::nullopt;
    }
    if (S_ISLNK(status->st_mode)) {
      fail(subject(dir), "no symbolic link in a git directory", "a symbolic link");
      return std::nullopt;
    }
    if (!S_ISDIR(status->st_mode)) {
      return std::nullopt;
    }
    DIR* stream = ::opendir(dir.c_str());
    if (stream == nullptr) {
      const int error = errno;
      fail(subject(dir), "a directory opendir(3) can read", std::error_code(error, std::generic_category()).message(),
           error);
      return std::nullopt;
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(stream)) {
      const std::string_view name(entry->d_name);
      if (name == "." || name == "..") {
        continue;
      }
      unsigned char type = entry->d_type;
      if (type == DT_UNKNOWN) {
        const std::optional<struct stat> child = look(dir / name);
        type = !child ? DT_UNKNOWN : S_ISDIR(child->st_mode) ? DT_DIR : S_ISLNK(child->st_mode) ? DT_LNK : DT_REG;
      }
      if (type == DT_LNK) {
        ::closedir(stream);
        fail(subject(dir / name), "no symbolic link in a git directory", "a symbolic link");
        return std::nullopt;
      }
      if (type == DT_DIR) {
        names.emplace_back(name);
      }
    }
    ::closedir(stream);
    std::sort(names.begin(), names.end()); // a stable order, whatever the directory's
    return names;
  }

  /// Walks `modules/` of a git directory: each submodule's git directory (a name may hold
  /// slashes, so the directories on the way are walked too) is pinned and scanned.
  void walk_modules(const std::filesystem::path& dir, int depth) {
    if (depth > MAX_DEPTH) {
      fail(subject(dir), "submodule git directories nested at most 16 deep", "deeper nesting");
      return;
    }
    const std::optional<std::vector<std::string>> names = subdirectories(dir);
    if (!names || names->empty() || !scan_.problem.empty()) {
      return;
    }
    add(dir, ProtectedKind::pinned_directory, PROTECTED_GIT_RULE);
    for (const std::string& name : *names) {
      const std::filesystem::path child = dir / name;
      // A git directory, or one that looks like it although git would not accept it, gets the
      // entries; only a directory with none of git's names is a step of a name with slashes
      // (walking into a git directory's objects/ instead would pin hundreds of directories).
      const bool git_like = std::any_of(GIT_MARKERS.begin(), GIT_MARKERS.end(),
                                        [&](std::string_view marker) { return look(child / marker).has_value(); });
      if (git_like || not_git_directory(child, child).empty()) {
        scan_git_directory(child, depth + 1);
      } else {
        walk_modules(child, depth + 1);
      }
      if (!scan_.problem.empty()) {
        return;
      }
    }
  }

  /// Walks `worktrees/` of a git directory: each linked worktree's own git directory.
  void walk_worktrees(const std::filesystem::path& dir, int depth) {
    const std::optional<std::vector<std::string>> names = subdirectories(dir);
    if (!names || names->empty() || !scan_.problem.empty()) {
      return;
    }
    add(dir, ProtectedKind::pinned_directory, PROTECTED_GIT_RULE);
    for (const std::string& name : *names) {
      const std::filesystem::path child = dir / name;
      scan_git_directory(child, depth + 1);
      // Its `gitdir` file names the worktree's `.git` pointer file; one beneath this root
      // could be pointed at a planted git directory. A stale one (no such file) names nothing.
      // The file is itself protected: this scan finds the pointer through it, and a command
      // that removed or repointed it would have the pointer unprotected at the next call.
      const std::filesystem::path gitdir = child / "gitdir";
      if (!scan_.problem.empty() || !look(gitdir)) {
        continue;
      }
      protect(gitdir, false, PROTECTED_GIT_RULE);
      if (!scan_.problem.empty()) {
        return;
      }
      const std::optional<std::string> text = read_line_file(gitdir, "a gitdir file naming a worktree's .git file");
      if (!text) {
        return;
      }
      const std::filesystem::path named(*text);
      const std::filesystem::path pointer(lexically_clean(named.is_absolute() ? named : child / named));
      if (!text->empty() && is_within(pointer, root_) && look(pointer)) {
        protect(pointer, false, PROTECTED_GIT_RULE);
      }
    }
  }

  /// `<root>/.git` (a directory, a pointer file, or missing), then `<root>/HEAD`.
  void scan_git() {
    if (!any_git_default()) {
      return;
    }
    scan_dot_git();
    if (scan_.problem.empty()) {
      scan_root_head();
    }
  }

  /// `<root>/HEAD`. Where `<root>/.git` is missing or not a git directory (an empty placeholder,
  /// a `.git` whose `HEAD` the command removed), git asks whether the root itself is one, as
  /// it finds a bare repository: a `HEAD` holding a ref, `objects` and `refs`; its `config` and
  /// `hooks` would then be git's. A missing `HEAD` gets an empty placeholder (git does not
  /// accept an empty one); one that is there but holds no ref stays as it is, read-only; one
  /// that holds a ref makes the root a git directory, pinned with its entries.
  void scan_root_head() {
    const std::filesystem::path head = root_ / "HEAD";
    const std::optional<struct stat> status = reach(head, false, PROTECTED_GIT_RULE);
    if (!status) {
      return;
    }
    if (S_ISREG(status->st_mode) && holds_head_ref(head)) {
      scan_git_directory(root_, 0);
      return;
    }
    add(head, S_ISDIR(status->st_mode) ? ProtectedKind::directory : ProtectedKind::file, PROTECTED_GIT_RULE);
  }

  /// `<root>/.git`: a directory, a pointer file, or missing.
  void scan_dot_git() {
    const std::filesystem::path dot_git = root_ / ".git";
    const std::optional<struct stat> status = reach(dot_git, true, first_git_rule());
    if (!status) {
      return;
    }
    if (S_ISDIR(status->st_mode)) {
      // A directory git would not accept (the empty placeholder an earlier call left, one
      // whose HEAD was removed) is read-only whole: pinned with writable contents, as a git
      // directory is, a command could make a repository in it (HEAD, objects, refs, an index
      // naming a planted submodule) that the user's next git runs.
      // It is scanned all the same (what lies outside it, a worktree's pointer, a hook's linked
      // file, stays protected), then listed read-only, which takes the place of its pin.
      const std::optional<std::filesystem::path> common = common_directory(dot_git);
      if (!common) {
        return;
      }
      const bool accepted = not_git_directory(dot_git, *common).empty();
      scan_git_directory(dot_git, 0);
      if (!accepted && scan_.problem.empty()) {
        list(dot_git, ProtectedKind::directory, first_git_rule());
      }
      return;
    }
    // A pointer file: `gitdir: <path>`, relative to the file's directory (git's read_gitfile).
    add(dot_git, ProtectedKind::file, PROTECTED_GIT_RULE);
    constexpr std::string_view expected = "a \"gitdir: <path>\" pointer file naming a git directory";
    const std::optional<std::string> text = read_line_file(dot_git, expected);
    if (!text) {
      return;
    }
    constexpr std::string_view prefix = "gitdir: ";
    if (!text->starts_with(prefix) || text->size() == prefix.size()) {
      fail(subject(dot_git), expected, *text);
      return;
    }
    const std::filesystem::path named(text->substr(prefix.size()));
    const std::filesystem::path gitdir(canonical_native((named.is_absolute() ? named : root_ / named).native()));
    struct stat target {};
    if (::stat(gitdir.c_str(), &target) != 0 || !S_ISDIR(target.st_mode)) {
      fail(subject(dot_git), expected, *text + " (no directory at " + gitdir.native() + ")");
      return;
    }
    const std::optional<std::filesystem::path> common = common_directory(gitdir);
    if (!common) {
      return;
    }
    if (std::string found = not_git_directory(gitdir, *common); !found.empty()) {
      fail(subject(dot_git), expected, *text + " (" + gitdir.native() + " has " + found + ")");
      return;
    }
    scan_git_directory(gitdir, 0);
  }

  [[nodiscard]] std::string_view first_git_rule() const {
    for (const GitEntry& entry : GIT_ENTRIES) {
      if (enabled(entry.rule)) {
        return entry.rule;
      }
    }
    return PROTECTED_GIT_RULE;
  }

  const std::filesystem::path& root_;
  const ProtectedPathRules& rules_;
  ProtectedScan scan_;
  std::unordered_map<std::string, struct stat> looked_;
  std::vector<std::filesystem::path> visited_;
  std::vector<std::filesystem::path> walked_;
  std::vector<std::filesystem::path> linked_;
};

/// The protected entries beneath the canonical writable `root` under `rules`: the list of
/// docs/enforcement.md#protected-paths, in the order the scan finds them (the `.git` pin or
/// pointer file, each git directory's entries, the root's `HEAD`, `.gitmodules`, the host's paths), each path
/// once. Returns the scan with `problem` set (and no entry) when the list cannot be known: a
/// pointer or commondir file git would follow that cannot be read or does not name a git
/// directory, a symbolic link on the way to an entry, a path that cannot be examined. Never throws
/// but std::bad_alloc. (`Unused` is always void: see `BasicProtectedScanner`.)
template <class Unused = void>
[[nodiscard]] ProtectedScan protected_entries(const std::filesystem::path& root, const ProtectedPathRules& rules) {
  return BasicProtectedScanner<Unused>(root, rules).run();
}

/// The entry of `scan` that refuses a write to the canonical `target`: one it is or lies
/// beneath, or a pinned directory it is; nullptr when none does.
[[nodiscard]] inline const ProtectedEntry* refusing_entry(const ProtectedScan& scan,
                                                          const std::filesystem::path& target) noexcept {
  for (const ProtectedEntry& entry : scan.entries) {
    if (entry.kind == ProtectedKind::pinned_directory ? target == entry.path : is_within(target, entry.path)) {
      return &entry;
    }
  }
  return nullptr;
}

/// The one check of `permits_write` and `open_for_write`: why a write to the canonical
/// `target` beneath the canonical `root` is refused by `scan`, or nullopt when it is not.
[[nodiscard]] inline std::optional<std::string>
protected_refusal(const ProtectedScan& scan, const std::filesystem::path& root, const std::filesystem::path& target) {
  std::string text;
  if (!scan.problem.empty()) {
    text = "the protected paths of ";
    append_json_string(text, root.native());
    text.append(" cannot be resolved, so nothing beneath it is written: ").append(scan.problem);
    return text;
  }
  if (const ProtectedEntry* entry = refusing_entry(scan, target)) {
    text = "refusing to write ";
    append_json_string(text, target.native());
    text.append(target == entry->path ? ": it is the protected path " : ": it lies beneath the protected path ");
    append_json_string(text, entry->path.native());
    text.append(" (rule ");
    append_json_string(text, entry->rule);
    text.append(")");
    return text;
  }
  return std::nullopt;
}

/// `protected_refusal` of a scan made now: the filesystem's answer as it is at this call.
/// (`Unused` is always void: see `BasicProtectedScanner`.)
template <class Unused = void>
[[nodiscard]] std::optional<std::string> protected_refusal(const std::filesystem::path& root,
                                                           const ProtectedPathRules& rules,
                                                           const std::filesystem::path& target) {
  if (!rules.defaults && rules.extra.empty()) {
    return std::nullopt;
  }
  return protected_refusal(protected_entries<Unused>(root, rules), root, target);
}

/// The protected entry of `scan` that holds the same file as the open `fd` under another name
/// (a hard link elsewhere beneath the root): a protected file, or a file directly in a
/// protected directory (a hook installed with `ln`); nullptr when none does.
[[nodiscard]] inline const ProtectedEntry* linked_entry(const ProtectedScan& scan, int fd) noexcept {
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || opened.st_nlink < 2) {
    return nullptr;
  }
  const auto same = [&opened](const struct stat& status) {
    return S_ISREG(status.st_mode) && status.st_dev == opened.st_dev && status.st_ino == opened.st_ino;
  };
  for (const ProtectedEntry& entry : scan.entries) {
    struct stat status {};
    if (entry.kind == ProtectedKind::file && ::lstat(entry.path.c_str(), &status) == 0 && same(status)) {
      return &entry;
    }
    if (entry.kind != ProtectedKind::directory) {
      continue;
    }
    DIR* stream = ::opendir(entry.path.c_str());
    if (stream == nullptr) {
      continue; // gone since the scan: nothing in it to be the same file
    }
    bool found = false;
    while (const dirent* child = ::readdir(stream)) {
      // No d_ino shortcut: on overlayfs a directory entry's inode number need not be st_ino.
      if (::fstatat(::dirfd(stream), child->d_name, &status, AT_SYMLINK_NOFOLLOW) == 0 && same(status)) {
        found = true;
        break;
      }
    }
    ::closedir(stream);
    if (found) {
      return &entry;
    }
  }
  return nullptr;
}

} // namespace dsh::detail
