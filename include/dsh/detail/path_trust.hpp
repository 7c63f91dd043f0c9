/// @file
/// Trust in a path by the owners and modes of the directories that resolve it, as OpenSSH's
/// StrictModes judges them: could a user other than root and this process's own replace an entry
/// on the way (and so choose the file the path leads to)?
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/observations.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::detail {

/// Returns the permission bits of `mode` (with setuid, setgid and sticky) as four octal digits: "0755", "1777".
[[nodiscard]] inline std::string octal_mode(::mode_t mode) {
  constexpr std::string_view digits = "01234567";
  const auto bits = static_cast<unsigned>(mode & 07777U);
  return {digits[(bits >> 9U) & 7U], digits[(bits >> 6U) & 7U], digits[(bits >> 3U) & 7U], digits[bits & 7U]};
}

namespace path_trust {

/// Calls `lookup(buffer, size, result)` (a getpwuid_r-style call) with a buffer that grows
/// while it answers ERANGE; returns its result code (0 with `*result` null: no such entry).
template <class Lookup, class Entry> int lookup_entry(std::vector<char>& buffer, Entry** result, Lookup&& lookup) {
  buffer.resize(4096);
  for (;;) {
    const int error = lookup(buffer.data(), buffer.size(), result);
    if (error != ERANGE || buffer.size() >= (std::size_t{1} << 24U)) {
      return error;
    }
    buffer.resize(2 * buffer.size());
  }
}

/// Returns true if no user other than the effective user can hold group `gid` (the effective
/// gid): the group database lists no member but the effective user's name, and no other user's
/// password entry has it as the primary group. An unknown group, or a lookup that fails, is
/// false. The password database is enumerated under a lock of this library's own: another
/// enumeration in the process at the same moment is not guarded against.
[[nodiscard]] inline bool group_holds_only_effective_user(::gid_t gid) {
  note_unrepeatable(); // the databases are not read again when a fence is checked again
  if (gid != ::getegid()) {
    return false;
  }
  const ::uid_t uid = ::geteuid();
  std::vector<char> buffer;
  struct passwd self {};
  struct passwd* self_found = nullptr;
  std::string own_name;
  if (lookup_entry(buffer, &self_found,
                   [&](char* data, std::size_t size, struct passwd** result) {
                     return ::getpwuid_r(uid, &self, data, size, result);
                   }) == 0 &&
      self_found != nullptr) {
    own_name = self.pw_name;
  }
  struct group entry {};
  struct group* found = nullptr;
  if (lookup_entry(buffer, &found,
                   [&](char* data, std::size_t size, struct group** result) {
                     return ::getgrgid_r(gid, &entry, data, size, result);
                   }) != 0 ||
      found == nullptr) {
    return false;
  }
  for (char** member = entry.gr_mem; member != nullptr && *member != nullptr; ++member) {
    if (own_name.empty() || own_name != *member) {
      return false;
    }
  }
  static std::mutex enumeration; // setpwent/getpwent_r share one position per process
  const std::lock_guard lock(enumeration);
  ::setpwent();
  bool alone = true;
  for (;;) {
    struct passwd user {};
    struct passwd* next = nullptr;
    const int error = lookup_entry(buffer, &next, [&](char* data, std::size_t size, struct passwd** result) {
      return ::getpwent_r(&user, data, size, result);
    });
    if (error == ENOENT || (error == 0 && next == nullptr)) {
      break;
    }
    if (error != 0) {
      alone = false; // an enumeration that fails cannot show that nobody else holds the group
      break;
    }
    if (user.pw_gid == gid && user.pw_uid != uid) {
      alone = false;
      break;
    }
  }
  ::endpwent();
  return alone;
}

/// Returns why another user could change the entries of the directory `status` (of `name`),
/// or "" if none can.
[[nodiscard]] inline std::string judge(const struct stat& status, const std::string& name) {
  const std::string described = "the directory " + json_string_literal(name) + " (mode " + octal_mode(status.st_mode) +
                                ", owner uid " + std::to_string(status.st_uid) + ", group gid " +
                                std::to_string(status.st_gid) + ")";
  if (status.st_uid != 0 && status.st_uid != ::geteuid()) {
    return described + " is owned by another user than root and the effective uid " + std::to_string(::geteuid());
  }
  // The sticky bit keeps others from renaming or removing entries they do not own.
  if ((status.st_mode & S_ISVTX) != 0) {
    return "";
  }
  if ((status.st_mode & S_IWOTH) != 0 ||
      ((status.st_mode & S_IWGRP) != 0 && !group_holds_only_effective_user(status.st_gid))) {
    return described + " is writable by another user and has no sticky bit";
  }
  return "";
}

/// Returns `directory` joined with the entry `name`.
[[nodiscard]] inline std::string joined(const std::string& directory, std::string_view name) {
  std::string out = directory;
  if (!out.ends_with('/')) {
    out += '/';
  }
  out.append(name);
  return out;
}

/// Returns `"cannot examine <name>: <strerror(error)>"`.
[[nodiscard]] inline std::string unexaminable(const std::string& name, int error) {
  return "cannot examine " + json_string_literal(name) + ": " + std::generic_category().message(error);
}

/// Appends the components of `path` (without its root and empty ones) to the front of `pending`.
inline void push_front_components(std::deque<std::string>& pending, const std::filesystem::path& path) {
  std::vector<std::string> parts;
  for (const std::filesystem::path& part : path.relative_path()) {
    if (!part.empty()) {
      parts.push_back(part.native());
    }
  }
  pending.insert(pending.begin(), parts.begin(), parts.end());
}

} // namespace path_trust

/// Returns "" when no directory whose entries are read to resolve `path` can be changed by a
/// user other than root and the effective user; otherwise one message naming the first such
/// directory, its mode in octal and its owner:
/// `the directory "/srv/logs" (mode 0775, owner uid 1000, group gid 1000) is writable by another
/// user and has no sticky bit`.
///
/// The directories are those the kernel reads: each ancestor from `/` down to the parent of the
/// last component, and for every symbolic link met on the way (the last component's too, as
/// open(2) without O_NOFOLLOW follows it) the directories that resolve its target. A relative
/// `path` is resolved from the working directory's absolute name, so the working directory's
/// ancestors count too. A directory can be changed by another user when it is owned by a uid other
/// than 0 and the effective uid, or, without the sticky bit, when it is writable by others, or
/// writable by its group unless that group is the effective gid and no other user can hold it
/// (the group database lists no member but the effective user's name, and no other user has it
/// as the primary group; an unknown group can hold anyone). The sticky bit makes a writable
/// directory safe: others can then rename or remove only their own entries. Fails closed: a
/// directory or entry that cannot be examined (other than a missing last component), a component
/// that is not a directory, or more than 40 symbolic links is a reason too, and the message says
/// which. Throws only std::bad_alloc.
[[nodiscard]] inline std::string untrusted_directory(const std::filesystem::path& path) {
  using namespace path_trust;
  constexpr int max_links = 40; // the kernel's own limit (ELOOP)
  if (path.empty()) {
    return unexaminable(path.native(), ENOENT); // as open(2) fails on it
  }
  std::deque<std::string> pending;
  push_front_components(pending, path);
  if (!path.is_absolute()) {
    try {
      push_front_components(pending, current_directory());
    } catch (const SystemError& error) {
      return "cannot examine the working directory: " + error.code().message();
    }
  }
  const auto open_root = [] {
    return UniqueFd(retry_on_eintr([] { return ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC); }));
  };
  UniqueFd current = open_root();
  std::string name = "/";
  if (!current) {
    return unexaminable(name, errno);
  }
  int links = 0;
  while (!pending.empty()) {
    const std::string component = std::move(pending.front());
    pending.pop_front();
    if (component == ".") {
      continue; // resolved without reading the directory
    }
    if (component == "..") {
      note_unrepeatable(); // `name` below is lexical: a ".." is walked afresh every time
      // The kernel's ".." of the directory reached, which the walk checked on its way down.
      UniqueFd parent(retry_on_eintr([&] { return ::openat(current.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC); }));
      if (!parent) {
        return unexaminable(joined(name, ".."), errno);
      }
      current = std::move(parent);
      name = name == "/" ? name : std::filesystem::path(name).parent_path().native();
      continue;
    }
    // `component` is looked up in `current`: whoever can change its entries chooses the result.
    struct stat directory {};
    if (::fstat(current.get(), &directory) != 0) {
      return unexaminable(name, errno);
    }
    // Recorded as a reading of `name`: the walk reached it by name, following no link.
    note_status(Observation::Kind::lstat, name, 0, &directory);
    if (std::string reason = judge(directory, name); !reason.empty()) {
      return reason;
    }
    const std::string entry_name = joined(name, component);
    struct stat entry {};
    const int looked = ::fstatat(current.get(), component.c_str(), &entry, AT_SYMLINK_NOFOLLOW);
    note_status(Observation::Kind::lstat, entry_name, looked == 0 ? 0 : errno, &entry);
    if (looked != 0) {
      const int error = errno;
      if (error == ENOENT && pending.empty()) {
        return ""; // a last component still to be created: only its directory is read
      }
      return unexaminable(entry_name, error);
    }
    if (S_ISLNK(entry.st_mode)) {
      if (++links > max_links) {
        return unexaminable(entry_name, ELOOP);
      }
      std::string target(PATH_MAX, '\0');
      const ssize_t length = ::readlinkat(current.get(), component.c_str(), target.data(), target.size());
      if (length < 0 || static_cast<std::size_t>(length) >= target.size()) {
        return unexaminable(entry_name, length < 0 ? errno : ENAMETOOLONG);
      }
      target.resize(static_cast<std::size_t>(length));
      note_text(Observation::Kind::readlink, entry_name, 0, target);
      const std::filesystem::path followed(target);
      push_front_components(pending, followed);
      if (followed.is_absolute()) {
        current = open_root();
        name = "/";
        if (!current) {
          return unexaminable(name, errno);
        }
      }
      continue;
    }
    if (pending.empty()) {
      return ""; // the last component: its own entries are not read to reach it
    }
    if (!S_ISDIR(entry.st_mode)) {
      return unexaminable(entry_name, ENOTDIR);
    }
    UniqueFd next(retry_on_eintr(
        [&] { return ::openat(current.get(), component.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }));
    if (!next) {
      return unexaminable(entry_name, errno);
    }
    current = std::move(next);
    name = entry_name;
  }
  return "";
}

} // namespace dsh::detail
