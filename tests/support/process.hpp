// Child processes for every suite: forked children that report to the test through a pipe,
// and the reading and writing of such a pipe. Two shapes, by what the child hands back:
//   * `Child`: a child that writes to the pipe as it goes (progress marks, numbers) while the
//     test reads, and whose exit code is its verdict; killed if the test leaves it running.
//   * `report_from_child`: a child that computes one text, under an alarm that ends a hang; the
//     test compares the text, which also says how the child died when it did not exit 0.
// A child never uses Catch2: it runs in a copy of the test process.
#pragma once

#include "support/catch.hpp"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsh::test {

/// Reads `fd` until end of file, handing each chunk to `take`; retries EINTR and stops at end
/// of file or at any other error.
inline void drain(int fd, const std::function<void(std::string_view)>& take) {
  std::array<char, 65536> buffer{};
  for (;;) {
    const ::ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return;
    }
    take(std::string_view(buffer.data(), static_cast<std::size_t>(got)));
  }
}

/// Everything `fd` yields until end of file (see `drain`).
inline std::string read_to_end(int fd) {
  std::string text;
  drain(fd, [&text](std::string_view bytes) { text.append(bytes); });
  return text;
}

/// Writes all of `text` to `fd`, retrying EINTR; stops silently at any other error (a child
/// whose parent stopped reading has no one left to tell).
inline void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ::ssize_t put = ::write(fd, text.data(), text.size());
    if (put < 0 && errno == EINTR) {
      continue;
    }
    if (put <= 0) {
      return;
    }
    text.remove_prefix(static_cast<std::size_t>(put));
  }
}

/// Waits for `pid`; returns its exit code, 128 + the signal that ended it, or -1 when it
/// cannot be waited for.
inline int wait_exit_code(::pid_t pid) {
  int status = 0;
  ::pid_t done = -1;
  do {
    done = ::waitpid(pid, &status, 0);
  } while (done < 0 && errno == EINTR);
  if (done < 0) {
    return -1;
  }
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
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
  [[nodiscard]] std::string read_all() const { return read_to_end(read_fd_); }

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

/// Runs `body` in a forked child guarded by `alarm_seconds` (a hang ends as SIGALRM) and
/// returns the text it returned, or "exception: what()" when it threw. When the child did not
/// exit 0 (`prepare` failed, it crashed, or the alarm ended it) the text is followed by
/// "<`who` ended with status N>", N as `wait_exit_code` gives it. `prepare` runs first in the
/// child (to become another user, say) and ends the child itself when it fails. The pipe and
/// the fork are required (the test stops when either fails).
inline std::string report_from_child(std::string_view who, unsigned alarm_seconds,
                                     const std::function<std::string()>& body,
                                     const std::function<void()>& prepare = {}) {
  std::array<int, 2> ends{-1, -1};
  REQUIRE(::pipe2(ends.data(), O_CLOEXEC) == 0);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ends[0]);
    ::close(ends[1]);
  }
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ends[0]);
    ::alarm(alarm_seconds);
    if (prepare) {
      prepare();
    }
    std::string text;
    try {
      text = body();
    } catch (const std::exception& error) {
      text = std::string("exception: ") + error.what();
    }
    write_all(ends[1], text);
    ::_exit(0);
  }
  ::close(ends[1]);
  std::string text = read_to_end(ends[0]);
  ::close(ends[0]);
  const int status = wait_exit_code(pid);
  if (status != 0) {
    text += "<" + std::string(who) + " ended with status " + std::to_string(status) + ">";
  }
  return text;
}

} // namespace dsh::test
