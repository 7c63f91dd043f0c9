// Shared by the session-log tests: whole-file byte access, fixture copies,
// capturing a LogError, forked children that report back through a pipe, and what such a child
// may become (another user, or the owner of a private mount namespace).
#pragma once

#include <dsh/session_log.hpp>

#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsh {

/// Prints a repair in test failure messages.
inline std::ostream& operator<<(std::ostream& out, const TailRepair& repair) {
  return out << "TailRepair{line " << repair.line << ", offset " << repair.offset << ", removed "
             << repair.removed_bytes << ", recovered " << repair.recovered_rows << "}";
}

} // namespace dsh

namespace dsh::test {

/// Returns the whole content of `path`; throws if it cannot be read.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot read " + path.string());
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Replaces the content of `path` with `bytes`.
inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    throw std::runtime_error("cannot write " + path.string());
  }
}

/// Returns the path of a session-log fixture in tests/fixtures/sessions (read-only: copy it first).
inline std::filesystem::path fixture(std::string_view name) {
  return std::filesystem::path(DSH_FIXTURES_DIR) / "sessions" / name;
}

/// Copies a fixture into `dir` (writable: opening may repair a torn tail); returns the copy.
inline std::filesystem::path copy_fixture(const TempDir& dir, std::string_view name) {
  std::filesystem::path copy = dir / name;
  write_bytes(copy, read_bytes(fixture(name)));
  return copy;
}

/// Runs `action` and returns the LogError it throws; fails the test if it throws none.
inline LogError log_error_from(const std::function<void()>& action) {
  try {
    action();
  } catch (const LogError& error) {
    return error;
  }
  FAIL("expected a dsh::LogError");
  throw std::logic_error("unreachable");
}

/// Returns the LogError that opening `path` throws.
inline LogError open_error(const std::filesystem::path& path) {
  return log_error_from([&] { static_cast<void>(SessionLog::open(path)); });
}

/// The expected message of a LogError about `path`, as `LogError` formats it.
inline std::string log_message(const std::filesystem::path& path, std::size_t line, std::string_view what) {
  return LogError(path, line, what).what();
}

/// The line a header written by `SessionLog::create` has.
inline std::string header_line(std::string_view id, std::int64_t created_at, std::string_view cwd_json = {}) {
  std::string line =
      R"({"type":"session","version":0,"id":")" + std::string(id) + R"(","createdAt":)" + std::to_string(created_at);
  if (!cwd_json.empty()) {
    line += R"(,"cwd":)" + std::string(cwd_json);
  }
  return line + ",\"delegationDepth\":0}\n";
}

/// A forked child process that reports through a pipe; killed if still running at the end.
class Child {
public:
  /// Forks; the child runs `body(write_fd)` and exits with its result (1 if it throws).
  explicit Child(const std::function<int(int)>& body) {
    int fds[2] = {-1, -1};
    if (::pipe(fds) != 0) {
      throw std::runtime_error("pipe failed");
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      ::close(fds[0]);
      int status = 1;
      try {
        status = body(fds[1]);
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    ::close(fds[1]);
    read_fd_ = fds[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      static_cast<void>(wait());
    }
    if (read_fd_ >= 0) {
      ::close(read_fd_);
    }
  }

  /// Returns the child's pid.
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// Returns the read end of the child's pipe.
  [[nodiscard]] int read_fd() const noexcept { return read_fd_; }

  /// Reads exactly `size` bytes the child wrote; returns false at end of file first.
  bool read_exactly(void* out, std::size_t size) const {
    auto* bytes = static_cast<char*>(out);
    while (size > 0) {
      const ssize_t got = ::read(read_fd_, bytes, size);
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got <= 0) {
        return false;
      }
      bytes += got;
      size -= static_cast<std::size_t>(got);
    }
    return true;
  }

  /// Reads everything the child writes until it closes the pipe.
  [[nodiscard]] std::string read_all() const {
    std::string text;
    char buffer[4096];
    for (ssize_t got = 0; (got = ::read(read_fd_, buffer, sizeof buffer)) != 0;) {
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got < 0) {
        break;
      }
      text.append(buffer, static_cast<std::size_t>(got));
    }
    return text;
  }

  /// Waits for the child; returns its raw wait status.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  /// Waits for the child; returns its exit code, or -1 if a signal ended it.
  int exit_code() {
    const int status = wait();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
};

/// The unprivileged user (and group) the tests play other users with: nobody.
inline constexpr ::uid_t nobody_uid = 65534;

/// In a child: becomes uid and gid 65534 (nobody) for good, with no supplementary groups;
/// returns false if the process could not.
[[nodiscard]] inline bool become_nobody() {
  return ::setgroups(0, nullptr) == 0 && ::setgid(nobody_uid) == 0 && ::setuid(nobody_uid) == 0;
}

/// In a child (as root): moves into a mount namespace of its own whose mounts propagate nowhere,
/// so that what it mounts or unmounts ends with it; returns false if it could not.
[[nodiscard]] inline bool enter_private_mount_namespace() {
  return ::unshare(CLONE_NEWNS) == 0 && ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

/// Makes the directory `path` with exactly `mode` (umask aside) and the owner `uid`:`gid`;
/// throws if it cannot.
inline void make_directory(const std::filesystem::path& path, ::mode_t mode, ::uid_t uid = 0, ::gid_t gid = 0) {
  if (::mkdir(path.c_str(), 0700) != 0 || ::chown(path.c_str(), uid, gid) != 0 || ::chmod(path.c_str(), mode) != 0) {
    throw std::runtime_error("cannot make the directory " + path.string());
  }
}

/// Writes all of `text` to `fd` (in a child: reports to the parent).
inline void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t put = ::write(fd, text.data(), text.size());
    if (put < 0 && errno == EINTR) {
      continue;
    }
    if (put <= 0) {
      return;
    }
    text.remove_prefix(static_cast<std::size_t>(put));
  }
}

} // namespace dsh::test
