/// @file
/// The file operations of a session log: opening and trusting the file and its directories, making
/// a new file and giving it its name, the bounded file lock, positioned reads, the line walk, and
/// checking that the name still leads to the file.
#pragma once

#include <dsh/detail/path_trust.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/session_log_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh::detail::slog {

/// Returns `"<what>: <strerror(error)>"`.
[[nodiscard]] inline std::string with_errno(std::string_view what, int error) {
  return std::string(what) + ": " + std::generic_category().message(error);
}

/// Opens `path` with `flags` (and O_CLOEXEC); throws LogError for `named` (the file the
/// caller is about) naming the failure. With O_NOFOLLOW, a symbolic link at `path` gets a
/// message that says so and names the option that accepts it.
[[nodiscard]] inline UniqueFd open_file(const std::filesystem::path& path, int flags, mode_t mode,
                                        const std::filesystem::path& named) {
  const int fd = retry_on_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC, mode); });
  if (fd < 0) {
    const int error = errno;
    struct stat status {};
    if (error == ELOOP && (flags & O_NOFOLLOW) != 0 && ::lstat(path.c_str(), &status) == 0 && S_ISLNK(status.st_mode)) {
      throw LogError(named, 0,
                     "cannot open: the name is a symbolic link, which is refused unless "
                     "SessionLogOptions::follow_symlink is set");
    }
    throw LogError(named, 0, with_errno("cannot open", error));
  }
  return UniqueFd(fd);
}

/// Throws ConfigError for options no log can use (a negative lock timeout).
inline void check_options(const SessionLogOptions& options) {
  if (options.lock_timeout.count() < 0) {
    throw ConfigError("session log options: lock_timeout: expected a duration of 0 ms or more; found " +
                      std::to_string(options.lock_timeout.count()) + " ms");
  }
}

/// Throws LogError unless the open log `status` is trusted under `options`: owned by the
/// effective user and writable by nobody else, or explicitly accepted otherwise.
inline void check_trust(const struct stat& status, const SessionLogOptions& options,
                        const std::filesystem::path& path) {
  if (!options.allow_foreign_owner && status.st_uid != ::geteuid()) {
    throw LogError(path, 0,
                   "owned by uid " + std::to_string(status.st_uid) + ", not by the effective uid " +
                       std::to_string(::geteuid()) +
                       " of this process; refused unless SessionLogOptions::allow_foreign_owner is set");
  }
  if (!options.allow_shared_write && (status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw LogError(path, 0,
                   "writable by its group or by other users (mode " + octal_mode(status.st_mode) +
                       "); refused unless SessionLogOptions::allow_shared_write is set");
  }
}

/// Throws LogError, unless `options.allow_shared_directories` is set, when a directory that
/// resolves `path` can be changed by another user (see `untrusted_directory`): such a user could
/// rename another log over this one, and the file's own owner and mode would not show it.
inline void check_directories(const std::filesystem::path& path, const SessionLogOptions& options) {
  if (options.allow_shared_directories) {
    return;
  }
  if (std::string reason = untrusted_directory(path); !reason.empty()) {
    throw LogError(path, 0, reason + "; refused unless SessionLogOptions::allow_shared_directories is set");
  }
}

/// Holds `flock(LOCK_EX)` on a descriptor for its lifetime: the lock every cooperating
/// process takes around reading the tail and appending, so appends never interleave and
/// `seq` stays contiguous across processes. The wait is bounded: it polls with LOCK_NB and
/// short sleeps (no signal or timer is involved) and throws LogError once `timeout` has passed.
class ExclusiveFileLock {
public:
  ExclusiveFileLock(int fd, const std::filesystem::path& path, std::chrono::milliseconds timeout) : fd_(fd) {
    using clock = std::chrono::steady_clock;
    const clock::time_point deadline = clock::now() + timeout;
    std::chrono::microseconds pause{50};
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (error == EINTR) {
        continue;
      }
      if (error != EWOULDBLOCK) {
        throw LogError(path, 0, with_errno("cannot lock", error));
      }
      const clock::time_point now = clock::now();
      if (now >= deadline) {
        throw LogError(path, 0,
                       "cannot lock: another open file description held the lock for the whole lock timeout (" +
                           std::to_string(timeout.count()) + " ms)");
      }
      const auto wait = std::min<clock::duration>(pause, deadline - now);
      const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      const std::timespec request{static_cast<std::time_t>(nanoseconds / 1'000'000'000),
                                  static_cast<long>(nanoseconds % 1'000'000'000)};
      ::nanosleep(&request, nullptr); // an interrupted sleep only polls sooner
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;
  ~ExclusiveFileLock() { ::flock(fd_, LOCK_UN); }

private:
  int fd_;
};

/// Returns the size of the open file; throws LogError unless it is a regular file.
[[nodiscard]] inline std::uint64_t regular_file_size(int fd, const std::filesystem::path& path) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    throw LogError(path, 0, with_errno("cannot stat", errno));
  }
  if (!S_ISREG(status.st_mode)) {
    throw LogError(path, 0, "not a regular file");
  }
  return static_cast<std::uint64_t>(status.st_size);
}

/// Reads exactly `size` bytes at `offset` into `out`; throws LogError if the file ends first.
inline void read_exactly(int fd, const std::filesystem::path& path, char* out, std::size_t size, std::uint64_t offset) {
  while (size > 0) {
    const ssize_t got = retry_on_eintr([&] { return ::pread(fd, out, size, static_cast<off_t>(offset)); });
    if (got < 0) {
      throw LogError(path, 0, with_errno("cannot read", errno));
    }
    if (got == 0) {
      throw LogError(path, 0, "the file shrank while it was being read");
    }
    const auto count = static_cast<std::size_t>(got);
    out += count;
    size -= count;
    offset += count;
  }
}

/// Streams the complete lines of bytes [from, to) of `fd` to `on_row(row, offset)` (the row
/// without its newline, and the file offset where it starts) through a bounded buffer that
/// grows only to hold one long line. Returns the offset just past the last complete line:
/// the bytes from there to `to` are an unterminated (torn) last line.
template <class OnRow> std::uint64_t for_each_row(int fd, const std::filesystem::path& path, std::uint64_t from,
                                                  std::uint64_t to, OnRow&& on_row) {
  constexpr std::uint64_t block = std::uint64_t{1} << 20;
  std::vector<char> buffer(static_cast<std::size_t>(std::clamp<std::uint64_t>(to - from, 1, block)));
  std::uint64_t base = from; // file offset of buffer[0]
  std::size_t held = 0;      // bytes in the buffer
  std::size_t searched = 0;  // bytes known to hold no newline after the last row
  ::posix_fadvise(fd, static_cast<off_t>(from), 0, POSIX_FADV_SEQUENTIAL);
  while (base + held < to) {
    if (held == buffer.size()) {
      buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(to - base, 2 * buffer.size())));
    }
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size() - held, to - base - held));
    read_exactly(fd, path, buffer.data() + held, chunk, base + held);
    held += chunk;
    std::size_t row_start = 0;
    while (const void* newline = std::memchr(buffer.data() + searched, '\n', held - searched)) {
      const auto end = static_cast<std::size_t>(static_cast<const char*>(newline) - buffer.data());
      on_row(std::string_view(buffer.data() + row_start, end - row_start), base + row_start);
      row_start = end + 1;
      searched = row_start;
    }
    std::memmove(buffer.data(), buffer.data() + row_start, held - row_start);
    base += row_start;
    held -= row_start;
    searched = held;
  }
  return base;
}

/// Returns what became of the log's file if the name `path` no longer leads to the open file
/// `opened` (its `fstat`), or nullptr if it still does. `follow` says whether the name was
/// opened through a symbolic link. Throws LogError if the name cannot be examined.
[[nodiscard]] inline const char* lost_file(const struct stat& opened, const std::filesystem::path& path, bool follow) {
  struct stat named {};
  const int result = follow ? ::stat(path.c_str(), &named) : ::lstat(path.c_str(), &named);
  const int error = errno;
  if (result != 0 && error != ENOENT && error != ENOTDIR) {
    throw LogError(path, 0, with_errno("cannot stat", error));
  }
  if (result == 0 && opened.st_nlink > 0) {
    return named.st_dev == opened.st_dev && named.st_ino == opened.st_ino ? nullptr
                                                                          : "another file was put at its name";
  }
  const std::filesystem::path parent = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  struct stat directory {};
  if (::stat(parent.c_str(), &directory) != 0) {
    return "its directory was removed";
  }
  if (opened.st_nlink == 0) {
    return result == 0 ? "it was unlinked, and another file was put at its name" : "it was unlinked";
  }
  return "it was moved away from its name";
}

/// Returns a fresh file name for the file `create` builds beside `name` before linking it, where
/// the filesystem cannot make an unnamed one.
[[nodiscard]] inline std::string staging_name(const std::filesystem::path& name) {
  std::random_device entropy;
  return name.native() + ".creating." + std::to_string(::getpid()) + "." + std::to_string(entropy());
}

/// The file `SessionLog::create` writes before it has the log's name: unnamed (O_TMPFILE), or,
/// where the filesystem cannot make unnamed files, under a staging name beside the log.
struct NewFile {
  UniqueFd fd;         ///< Open for reading and appending.
  std::string staging; ///< The staging name in the directory; empty for an unnamed file.
};

/// Makes the file `SessionLog::create` writes, in the open directory `directory`: unnamed
/// (O_TMPFILE), so that no other process can reach it, let alone replace it, before
/// `link_new_file` gives it its name. Where the filesystem cannot make unnamed files (EOPNOTSUPP;
/// EISDIR from a kernel without O_TMPFILE; EINVAL), it is made under a fresh staging name beside
/// `name`, but only when `untrusted` (what `untrusted_directory` said of the log's path) is empty:
/// in a directory another user may change, that user could rename a file of their choice over the
/// staging name before the link. Throws LogError, having made nothing, otherwise.
[[nodiscard]] inline NewFile make_new_file(int directory, const std::string& name, const std::string& untrusted,
                                           const std::filesystem::path& path) {
  constexpr int flags = O_RDWR | O_APPEND | O_CLOEXEC;
  const int unnamed = retry_on_eintr([&] { return ::openat(directory, ".", flags | O_TMPFILE, 0644); });
  if (unnamed >= 0) {
    return {UniqueFd(unnamed), {}};
  }
  const int error = errno;
  if (error != EOPNOTSUPP && error != EISDIR && error != EINVAL) {
    throw LogError(path, 0, with_errno("cannot create", error), std::error_code(error, std::generic_category()));
  }
  if (!untrusted.empty()) {
    throw LogError(path, 0,
                   with_errno("cannot create: the filesystem cannot make an unnamed file (O_TMPFILE)", error) +
                       ", and a staging name could be replaced before it is linked: " + untrusted +
                       "; nothing was created",
                   std::error_code(error, std::generic_category()));
  }
  NewFile file;
  file.staging = staging_name(name);
  const int staged = retry_on_eintr(
      [&] { return ::openat(directory, file.staging.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW, 0644); });
  if (staged < 0) {
    const int failure = errno;
    throw LogError(path, 0, with_errno("cannot create", failure), std::error_code(failure, std::generic_category()));
  }
  file.fd = UniqueFd(staged);
  return file;
}

/// Gives the new file (open as `fd`; `staging` its staging name, or empty for an unnamed file) the
/// name `name` in `directory`, which fails if the name exists. An unnamed file is linked from its
/// descriptor with AT_EMPTY_PATH (no path is resolved, so nothing can
/// stand in for the file), or, where the kernel refuses that to a process without
/// CAP_DAC_READ_SEARCH, from /proc/self/fd/N with AT_SYMLINK_FOLLOW, which needs no privilege; a
/// staged file from its staging name. Throws LogError, the file keeping no new name, when the link
/// fails: "the file exists" for an existing name.
inline void link_new_file(int directory, int fd, const std::string& staging, const std::string& name,
                          const std::filesystem::path& path) {
  int result = 0;
  if (!staging.empty()) {
    result = ::linkat(directory, staging.c_str(), directory, name.c_str(), 0);
  } else {
    result = ::linkat(fd, "", directory, name.c_str(), AT_EMPTY_PATH);
    if (result != 0 && errno == ENOENT) { // not permitted (or the directory is gone: /proc says which)
      const std::string proc = "/proc/self/fd/" + std::to_string(fd);
      result = ::linkat(AT_FDCWD, proc.c_str(), directory, name.c_str(), AT_SYMLINK_FOLLOW);
      if (result != 0 && errno == ENOENT) {
        throw LogError(path, 0,
                       "cannot create: the new file could not be linked to its name, with AT_EMPTY_PATH nor "
                       "through /proc/self/fd: " +
                           std::generic_category().message(ENOENT) + "; nothing was created",
                       std::error_code(ENOENT, std::generic_category()));
      }
    }
  }
  if (result != 0) {
    const int error = errno;
    throw LogError(path, 0,
                   error == EEXIST ? std::string("cannot create: the file exists") : with_errno("cannot create", error),
                   std::error_code(error, std::generic_category()));
  }
}

/// Returns true if `name` in the directory `directory` is the file `opened` (its `fstat`).
[[nodiscard]] inline bool entry_is(int directory, const char* name, const struct stat& opened) noexcept {
  struct stat entry {};
  return ::fstatat(directory, name, &entry, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(entry.st_mode) &&
         entry.st_dev == opened.st_dev && entry.st_ino == opened.st_ino;
}

} // namespace dsh::detail::slog
