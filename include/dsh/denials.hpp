// A fence's refused writes as a command reports them on stderr, and the retry the owner's
// escalation choices allow: what `FencedCommand::capture` and `dsh-sandboxed-bash` tell the
// model after a denial (docs/enforcement.md#denials).
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/fence/denial_text.hpp>
#include <dsh/policy_types.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh {

/// Finds, in a fenced command's stderr fed to it chunk by chunk, the writes the fence refused.
///
/// A line counts when it ends in a refusal's reason (EACCES, EPERM, EROFS or EXDEV as the C
/// locale words them), is not a failed read, listing or exec, and names a path (quoted, or the
/// field before the reason) that `refuses` confirms: the fence's policy does not let the command
/// write there, and the host's own permissions do, so the fence, not the file's mode, stopped
/// it. Precision comes first: a line whose path it cannot name or confirm is not a denial.
///
/// Memory and work stay bounded whatever the command writes: of a line it keeps the last
/// `line_limit` bytes (a path found at the start of a longer line's kept tail is not used), it
/// examines at most `max_examined` lines that end in a reason and the first `max_paths_per_line`
/// paths of each, and it keeps at most `max_paths` paths.
class DenialScanner {
public:
  /// The most bytes of one line kept: a reason and two paths of PATH_MAX fit.
  static constexpr std::size_t line_limit = 16384;
  /// The most denied paths kept.
  static constexpr std::size_t max_paths = 16;
  /// The most lines ending in a refusal's reason examined.
  static constexpr std::size_t max_examined = 256;
  /// The most paths of one line examined (each costs a canonicalization and a few system calls
  /// in the host: a line of the command's can quote thousands).
  static constexpr std::size_t max_paths_per_line = 16;

  /// A scanner for a command run under a fence for `policy`, which also grants the directories
  /// `granted` (its private temporary directory, extra writable ones), started in `directory`
  /// (relative paths are taken from there). `restricts`: the fence refuses writes at all (false
  /// for danger-full-access or an unfenced fence: nothing is then a denial).
  DenialScanner(ResolvedPolicy policy, std::vector<std::filesystem::path> granted, std::filesystem::path directory,
                bool restricts)
      : policy_(std::move(policy)), granted_(std::move(granted)), directory_(std::move(directory)),
        restricts_(restricts) {
    line_.reserve(line_limit);
  }

  /// Scans `bytes`, the next chunk of the command's stderr (chunks need not end on a line).
  void feed(std::string_view bytes) {
    for (;;) {
      const std::size_t end = bytes.find('\n');
      append(bytes.substr(0, end));
      if (end == std::string_view::npos) {
        return;
      }
      end_line();
      bytes.remove_prefix(end + 1);
    }
  }

  /// Scans the last line when it had no newline; call once the command has ended.
  void finish() {
    if (!line_.empty() || cut_) {
      end_line();
    }
  }

  /// True when a refused write was found.
  [[nodiscard]] bool denied() const noexcept { return !paths_.empty(); }
  /// The refused paths, canonical, in the order found, without repeats (at most `max_paths`).
  [[nodiscard]] const std::vector<std::filesystem::path>& paths() const noexcept { return paths_; }
  /// The first line that reported a refused write (its last `line_limit` bytes), "" when none.
  [[nodiscard]] const std::string& first_line() const noexcept { return first_line_; }
  /// True when `first_line()` is the tail of a longer line.
  [[nodiscard]] bool first_line_cut() const noexcept { return first_line_cut_; }

  /// True when the fence refuses writing `path` (relative to the command's directory) and the
  /// host's permissions would allow it: the fence restricts writes; the canonical path is not
  /// beneath /proc or /sys (whose refusals are about processes, not writes); the policy does not
  /// permit it (`ResolvedPolicy::permits_write`, protected paths included) and no granted
  /// directory holds it; and the host may write it (an existing file: access(W_OK); a missing
  /// one: its directory exists and allows W_OK and X_OK). Never throws for a path it cannot
  /// examine (false then), only std::bad_alloc.
  [[nodiscard]] bool refuses(const std::filesystem::path& path) const { return refused(path).has_value(); }

private:
  /// The canonical path of `path` when `refuses(path)`, else nullopt.
  [[nodiscard]] std::optional<std::filesystem::path> refused(const std::filesystem::path& path) const {
    if (!restricts_ || path.empty() || path.native().find('\0') != std::string::npos) {
      return std::nullopt;
    }
    std::filesystem::path canonical = canonical_path(path.is_absolute() ? path : directory_ / path);
    if (detail::is_within(canonical, "/proc") || detail::is_within(canonical, "/sys") ||
        policy_.permits_write(canonical)) {
      return std::nullopt;
    }
    for (const std::filesystem::path& grant : granted_) {
      if (detail::is_within(canonical, grant)) {
        return std::nullopt;
      }
    }
    struct stat info {};
    bool host_may_write = false;
    if (::lstat(canonical.c_str(), &info) == 0) {
      host_may_write = ::faccessat(AT_FDCWD, canonical.c_str(), W_OK, AT_EACCESS) == 0;
    } else if (errno == ENOENT) {
      const std::filesystem::path parent = canonical.parent_path();
      host_may_write = ::stat(parent.c_str(), &info) == 0 && S_ISDIR(info.st_mode) &&
                       ::faccessat(AT_FDCWD, parent.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
    }
    return host_may_write ? std::optional(std::move(canonical)) : std::nullopt;
  }

  /// Adds `part` to the current line, dropping its oldest bytes beyond `line_limit`.
  void append(std::string_view part) {
    if (part.size() >= line_limit) {
      line_.assign(part.substr(part.size() - line_limit));
      cut_ = true;
      return;
    }
    if (const std::size_t total = line_.size() + part.size(); total > line_limit) {
      line_.erase(0, total - line_limit);
      cut_ = true;
    }
    line_.append(part);
  }

  /// Ends the current line: keeps the refused paths it names.
  void end_line() {
    if (restricts_ && examined_ < max_examined && paths_.size() < max_paths &&
        detail::denial_reason_at(line_) != std::string_view::npos) {
      ++examined_;
      bool named = false;
      const std::vector<std::string> written_paths = detail::denial_paths_in(line_, cut_);
      const std::size_t examined_paths = std::min(written_paths.size(), max_paths_per_line);
      for (const std::string& written : std::span(written_paths).first(examined_paths)) {
        std::optional<std::filesystem::path> path = refused(written);
        if (!path) {
          continue;
        }
        named = true;
        if (paths_.size() < max_paths && std::find(paths_.begin(), paths_.end(), *path) == paths_.end()) {
          paths_.push_back(std::move(*path));
        }
      }
      if (named && first_line_.empty()) {
        first_line_ = line_;
        first_line_cut_ = cut_;
      }
    }
    line_.clear();
    cut_ = false;
  }

  ResolvedPolicy policy_;
  std::vector<std::filesystem::path> granted_;
  std::filesystem::path directory_;
  bool restricts_ = false;
  std::string line_;
  bool cut_ = false; // line_ is the tail of a longer line
  std::size_t examined_ = 0;
  std::vector<std::filesystem::path> paths_;
  std::string first_line_;
  bool first_line_cut_ = false;
};

/// What a call whose writes the fence refused may do next: the narrowest approval among the
/// owner's escalation choices that allows every refused path, if any.
struct RetryAdvice {
  SandboxMode mode = SandboxMode::read_only;   ///< the call's mode
  std::vector<std::filesystem::path> denied{}; ///< the refused paths
  std::optional<SandboxMode> retry_mode{};     ///< the approval to ask for; nullopt when none helps

  /// The guidance for the model, one line; "" when nothing was denied. With a retry mode:
  /// `the <mode> file policy refused a write to "<path>"[ and N other paths]; if this change is
  /// required, ask for approval and retry the call with sandbox_permissions "<retry mode>"`;
  /// without one: `...; no approval this call can ask for allows it, so do not retry it`.
  /// Paths are JSON string literals.
  [[nodiscard]] std::string text() const {
    if (denied.empty()) {
      return {};
    }
    std::string line = "the " + std::string(to_string(mode)) + " file policy refused a write to " +
                       json_string_literal(denied.front().native());
    if (denied.size() > 1) {
      line += " and " + std::to_string(denied.size() - 1) + (denied.size() == 2 ? " other path" : " other paths");
    }
    if (retry_mode) {
      return line + "; if this change is required, ask for approval and retry the call with sandbox_permissions \"" +
             std::string(to_string(*retry_mode)) + "\"";
    }
    return line + "; no approval this call can ask for allows it, so do not retry it";
  }
};

/// The retry for a call under `policy` whose fence refused the writes `denied`: returns the
/// advice whose `retry_mode` is the first (narrowest) of `choices` (the owner's
/// `escalationChoices` for the call's session and family) that is strictly wider than
/// `policy.mode` and permits every path of `denied`, or none. Throws only std::bad_alloc.
[[nodiscard]] inline RetryAdvice retry_advice(const ResolvedPolicy& policy, std::span<const SandboxMode> choices,
                                              std::span<const std::filesystem::path> denied) {
  RetryAdvice advice;
  advice.mode = policy.mode;
  advice.denied.assign(denied.begin(), denied.end());
  if (denied.empty()) {
    return advice;
  }
  for (const SandboxMode choice : choices) {
    if (!is_strictly_wider(choice, policy.mode)) {
      continue;
    }
    ResolvedPolicy wider = policy;
    wider.mode = choice;
    bool permits = true;
    for (const std::filesystem::path& path : denied) {
      permits = permits && wider.permits_write(path);
    }
    if (permits) {
      advice.retry_mode = choice;
      break;
    }
  }
  return advice;
}

} // namespace dsh
