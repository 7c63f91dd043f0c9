/// @file
/// The environment a fenced command starts with: the host's without the variables whose names
/// look like credentials, as the host changed it, prebuilt as the array execve(2) takes so that
/// the child between fork and exec allocates nothing.
#pragma once

#include <dsh/policy_types.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// POSIX: the calling process's environment, which <unistd.h> declares only with _GNU_SOURCE.
extern "C" char** environ;

namespace dsh::detail {

/// The words that make a variable's name look like a credential, in any case: agent hosts keep
/// model and service credentials in their environment (`OPENAI_API_KEY`, `GITHUB_TOKEN`,
/// `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `SSH_AUTH_SOCK`), and a fenced command must not read
/// them by default.
inline constexpr std::array<std::string_view, 7> CREDENTIAL_NAME_WORDS{
    "KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH",
};

/// True when `name` contains one of `CREDENTIAL_NAME_WORDS`, ASCII letters compared without case.
[[nodiscard]] constexpr bool looks_like_credential(std::string_view name) noexcept {
  const auto upper = [](char c) noexcept { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; };
  for (const std::string_view word : CREDENTIAL_NAME_WORDS) {
    for (std::size_t at = 0; at + word.size() <= name.size(); ++at) {
      std::size_t same = 0;
      while (same < word.size() && upper(name[at + same]) == word[same]) {
        ++same;
      }
      if (same == word.size()) {
        return true;
      }
    }
  }
  return false;
}

/// The name of an environment entry `NAME=VALUE`: everything before its first '='.
[[nodiscard]] constexpr std::string_view entry_name(std::string_view entry) noexcept {
  return entry.substr(0, std::min(entry.find('='), entry.size()));
}

/// The variables a fenced command gets, and the `envp` its child passes to execve(2).
///
/// Starts as the default: the host's environment as it was at construction, without every
/// variable whose name `looks_like_credential` unless the host keeps that name (`keep`). The
/// entries are held as `NAME=VALUE` strings, and the array of pointers to them is rebuilt
/// after every change, with one spare slot before its terminating null pointer: `envp` fills
/// that slot (or the inherited TMPDIR's) with the fence's TMPDIR in the child, which then
/// neither allocates nor copies. Move-only (the array points into the strings).
class CommandEnvironment {
public:
  /// Copies `host` (an array of `NAME=VALUE` strings ending in a null pointer, like `environ`;
  /// nullptr for none) and starts from the default (`inherit`). A string without '=' or with
  /// an empty name is not a variable and is skipped; of a name given twice, the first entry
  /// counts, as getenv(3) reads it.
  explicit CommandEnvironment(const char* const* host) {
    for (const char* const* at = host; at != nullptr && *at != nullptr; ++at) {
      const std::string_view entry = *at;
      const std::string_view name = entry_name(entry);
      if (name.empty() || name.size() == entry.size() || find(host_, name) != host_.end()) {
        continue;
      }
      host_.emplace_back(entry);
    }
    inherit();
  }
  CommandEnvironment(const CommandEnvironment&) = delete;
  CommandEnvironment& operator=(const CommandEnvironment&) = delete;
  /// Transfers the entries; the array stays valid (the strings do not move).
  CommandEnvironment(CommandEnvironment&&) noexcept = default;
  /// Transfers the entries.
  CommandEnvironment& operator=(CommandEnvironment&&) noexcept = default;
  ~CommandEnvironment() = default;

  /// Gives the command `name`=`value`, replacing its value in place or adding it last. A TMPDIR
  /// set here is the host's choice and is not replaced by the fence's. Throws ConfigError when
  /// `name` is empty or contains '=' or NUL, or `value` contains NUL; nothing changes then.
  void set(std::string name, std::string value) {
    check_name("FencedCommand::set_env", name);
    if (const std::size_t nul = value.find('\0'); nul != std::string::npos) {
      // The value may be a credential the host passes on purpose: the message says where it
      // is wrong, never what it holds.
      throw ConfigError("FencedCommand::set_env value of " + json_string_literal(name) +
                        ": expected a value without NUL; found a NUL at byte " + std::to_string(nul) + " of " +
                        std::to_string(value.size()) + " (the value is not shown: it may be a secret)");
    }
    const bool tmpdir = tmpdir_set_ || name == "TMPDIR";
    std::vector<std::string> next = entries_;
    name.push_back('=');
    std::string entry = std::move(value.insert(0, name)); // NAME=VALUE
    if (const auto existing = find(next, entry_name(entry)); existing != next.end()) {
      *existing = std::move(entry);
    } else {
      next.push_back(std::move(entry));
    }
    commit(std::move(next), inherited_, tmpdir);
  }

  /// Removes `name` from the command's environment (nothing when it has none). Throws
  /// ConfigError when `name` is empty or contains '=' or NUL.
  void unset(std::string_view name) {
    check_name("FencedCommand::unset_env", name);
    std::vector<std::string> next = entries_;
    if (const auto existing = find(next, name); existing != next.end()) {
      next.erase(existing);
    }
    commit(std::move(next), inherited_, tmpdir_set_ && name != "TMPDIR");
  }

  /// Starts from an empty environment: the command gets only what `set` gives it (and the
  /// fence's TMPDIR, see `envp`).
  void clear() { commit({}, false, false); }

  /// Back to the default: the host's environment as read at construction, without the
  /// variables that look like credentials except those `keep` named; what `set` and `unset`
  /// did is undone.
  void inherit() {
    std::vector<std::string> next;
    next.reserve(host_.size());
    for (const std::string& entry : host_) {
      if (!withheld(entry_name(entry))) {
        next.push_back(entry);
      }
    }
    commit(std::move(next), true, false);
  }

  /// Keeps the host's variable `name` although its name looks like a credential, now and after
  /// every later `inherit`. When the environment is inherited and the command has no `name`
  /// yet, the host's value is added last. Throws ConfigError when `name` is empty or contains
  /// '=' or NUL.
  void keep(std::string name) {
    check_name("FencedCommand::keep_env", name);
    if (std::binary_search(kept_.begin(), kept_.end(), name)) {
      return;
    }
    std::vector<std::string> next = entries_;
    if (const auto host = find(host_, name); inherited_ && host != host_.end() && find(next, name) == next.end()) {
      next.push_back(*host);
    }
    std::vector<std::string> kept = kept_;
    kept.insert(std::upper_bound(kept.begin(), kept.end(), name), std::move(name));
    commit(std::move(next), inherited_, tmpdir_set_);
    kept_ = std::move(kept);
  }

  /// The names of the host's variables the credential rule withholds from the inherited
  /// environment (those `keep` named excepted), sorted, never a value. A name `set` gave a
  /// value of the host's choosing is still listed: the host's own value was withheld. Empty
  /// after `clear`, which inherits nothing.
  [[nodiscard]] std::vector<std::string> removed_names() const {
    std::vector<std::string> names;
    if (!inherited_) {
      return names;
    }
    for (const std::string& entry : host_) {
      if (withheld(entry_name(entry))) {
        names.emplace_back(entry_name(entry));
      }
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  /// The command's variables as `NAME=VALUE`, in the order they are passed (without the fence's
  /// TMPDIR, which only `envp` adds).
  [[nodiscard]] const std::vector<std::string>& entries() const noexcept { return entries_; }

  /// The array to pass to execve(2): the entries and, when `tmpdir_assignment` is not null and
  /// the host did not `set` TMPDIR itself, `tmpdir_assignment` (`TMPDIR=...`, which must live
  /// until exec) in place of the inherited TMPDIR or, without one, in the spare slot.
  /// Async-signal-safe: it writes one pointer of the prebuilt array and allocates nothing. It
  /// writes that pointer in this object, so call it in the child, whose memory is its own copy
  /// after fork, not in a host thread while another may use the object.
  [[nodiscard]] char* const* envp(const char* tmpdir_assignment) const noexcept {
    envp_[tmpdir_slot_] = tmpdir_assignment != nullptr && !tmpdir_set_
                              ? const_cast<char*>(tmpdir_assignment) // execve(2) does not write it
                              : tmpdir_original_;
    return envp_.data();
  }

  /// The entries `envp(tmpdir_assignment)` would pass, as strings, without writing the array
  /// (for a request to a supervisor the launcher forks). Throws only std::bad_alloc.
  [[nodiscard]] std::vector<std::string> resolved(const char* tmpdir_assignment) const {
    std::vector<std::string> entries = entries_;
    if (tmpdir_assignment != nullptr && !tmpdir_set_) {
      if (tmpdir_slot_ < entries.size()) {
        entries[tmpdir_slot_] = tmpdir_assignment;
      } else {
        entries.emplace_back(tmpdir_assignment);
      }
    }
    return entries;
  }

  /// An environment of exactly `entries` (as `resolved` returned them): `envp` adds nothing.
  [[nodiscard]] static CommandEnvironment exactly(std::vector<std::string> entries) {
    CommandEnvironment environment(nullptr);
    environment.commit(std::move(entries), false, true);
    return environment;
  }

private:
  /// Throws ConfigError naming `context` when `name` cannot name a variable.
  static void check_name(std::string_view context, std::string_view name) {
    if (name.empty() || name.find('=') != std::string_view::npos || name.find('\0') != std::string_view::npos) {
      throw ConfigError(
          expectation_message(context, "a variable name: not empty, without '=' or NUL", std::string(name)));
    }
  }

  /// The entry of `entries` named `name`, or end().
  [[nodiscard]] static std::vector<std::string>::iterator find(std::vector<std::string>& entries,
                                                               std::string_view name) noexcept {
    return std::find_if(entries.begin(), entries.end(),
                        [name](const std::string& entry) noexcept { return entry_name(entry) == name; });
  }

  /// True when the default withholds the host's variable `name`.
  [[nodiscard]] bool withheld(std::string_view name) const {
    return looks_like_credential(name) && !std::binary_search(kept_.begin(), kept_.end(), name, std::less<>());
  }

  /// Makes `next` the entries and rebuilds the array; the array is built first, so a failed
  /// allocation changes nothing.
  void commit(std::vector<std::string> next, bool inherited, bool tmpdir_set) {
    std::vector<char*> envp;
    envp.reserve(next.size() + 2);
    std::size_t slot = next.size();
    char* original = nullptr;
    for (std::size_t i = 0; i < next.size(); ++i) {
      envp.push_back(next[i].data());
      if (!tmpdir_set && entry_name(next[i]) == "TMPDIR") {
        slot = i;
        original = next[i].data();
      }
    }
    envp.push_back(nullptr); // the spare slot
    envp.push_back(nullptr);
    // Moving a vector moves its buffer, not the strings in it: the pointers stay valid.
    entries_ = std::move(next);
    envp_ = std::move(envp);
    tmpdir_slot_ = slot;
    tmpdir_original_ = original;
    inherited_ = inherited;
    tmpdir_set_ = tmpdir_set;
  }

  std::vector<std::string> host_;    // the host's variables at construction, one entry per name
  std::vector<std::string> entries_; // the command's, NAME=VALUE
  std::vector<std::string> kept_;    // keep's names, sorted
  bool inherited_ = true;            // false after clear()
  bool tmpdir_set_ = false;          // the host set TMPDIR itself: the fence's does not replace it
  mutable std::vector<char*> envp_;  // entries_' data, the spare slot, nullptr
  std::size_t tmpdir_slot_ = 0;      // the slot envp() fills: the inherited TMPDIR's, or the spare
  char* tmpdir_original_ = nullptr;  // what that slot holds without the fence's TMPDIR
};

} // namespace dsh::detail
