/// @file
/// The supervisor between the host and a fenced command: its reports, how a call ends, and the
/// plan it starts the command with.
#pragma once

#include <dsh/detail/process/child_steps.hpp>
#include <dsh/errors.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <string>
#include <string_view>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <system_error>
#include <unistd.h>

namespace dsh::detail {

/// What the supervisor reports to the host over its socket, in fixed-size records.
struct SupervisorReport {
  enum Kind : int { none = 0, started = 1, failed = 2, ended = 3 };
  int kind = none;
  int stage = 0;               ///< failed: a ChildStage; started: the supervisor's pid
  int error = 0;               ///< failed: errno; ended: the exit status
  int detail = 0;              ///< started: the command's pid; failed: the capability or -1; ended: an Ending
  std::array<char, 96> step{}; ///< failed: the call, truncated (every step the library names fits)
};

/// Sends `report` on the socket `fd`, with the descriptor `attached` (SCM_RIGHTS) unless it
/// is negative; returns false when the socket refused it. Async-signal-safe.
inline bool send_report(int fd, const SupervisorReport& report, int attached) noexcept {
  iovec part{const_cast<SupervisorReport*>(&report), sizeof report};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> space{};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  if (attached >= 0) {
    message.msg_control = space.data();
    message.msg_controllen = space.size();
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &attached, sizeof attached);
  }
  const ::ssize_t sent = retry_on_eintr([&]() noexcept { return ::sendmsg(fd, &message, MSG_NOSIGNAL); });
  if (sent == static_cast<::ssize_t>(sizeof report)) {
    return true;
  }
  // A part was sent (or none): the rest as plain bytes, the descriptor with the first part only.
  const std::size_t done = sent > 0 ? static_cast<std::size_t>(sent) : 0;
  return sent >= 0 && write_all(fd, reinterpret_cast<const char*>(&report) + done, sizeof report - done);
}

/// How many children a supervisor reaps before it looks at its deadline and its host again: a
/// call's descendants can leave zombies faster than one process reaps them.
inline constexpr int reap_batch = 64;

/// How a supervised call ended.
enum Ending : int { command_exited = 0, time_limit_reached = 1, host_cancelled = 2 };

/// What a supervisor sets up before it knows its call (`begin_supervision`): every signal
/// blocked, its dispositions reset, the child subreaper, its list of children and the
/// signalfd of SIGCHLD. `failed.error` is 0 when each step succeeded; the first that failed is
/// reported on the call that comes (its descriptors are then -1).
struct Supervision {
  ThreadStatus own{};    ///< the supervisor's own status, read once its signals were blocked
  int children = -1;     ///< /proc/thread-self/children, read to kill what is left at the end
  int child_events = -1; ///< a signalfd of SIGCHLD (close-on-exec, non-blocking)
  ChildStep failed{};
  /// A spare made a new IPC namespace for its call's command before the call came.
  bool ipc_namespace_made = false;
};

/// Makes the calling process a supervisor: blocks every signal, resets each disposition its
/// status lists as ignored or caught (and always SIGCHLD, whose default with SA_NOCLDWAIT
/// would reap the command unseen), becomes a child subreaper, opens its children list and a
/// signalfd of SIGCHLD. Nothing in it depends on the call, so a launcher's zygote has a spare
/// supervisor do it while it waits for the next call (run_filtered_zygote). Returns the
/// first failed step in `failed`. Async-signal-safe.
[[nodiscard]] inline Supervision begin_supervision() noexcept {
  Supervision begun;
  sigset_t all;
  ::sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  begun.own = read_thread_status();
  reset_signal_dispositions(begun.own.not_default | 1ULL << (SIGCHLD - 1));
  constexpr ChildStage supervision = ChildStage::supervision;
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0) {
    begun.failed = {errno, "prctl(PR_SET_CHILD_SUBREAPER)", supervision, -1};
    return begun;
  }
  begun.children = ::open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
  if (begun.children < 0) {
    begun.failed = {errno, "open(\"/proc/thread-self/children\")", supervision, -1};
    return begun;
  }
  sigset_t child_signal;
  ::sigemptyset(&child_signal);
  ::sigaddset(&child_signal, SIGCHLD);
  begun.child_events = ::signalfd(-1, &child_signal, SFD_CLOEXEC | SFD_NONBLOCK);
  if (begun.child_events < 0) {
    begun.failed = {errno, "signalfd", supervision, -1};
    ::close(begun.children);
    begun.children = -1;
  }
  return begun;
}

/// Opens /proc/<pid>/ns/mnt, the mount namespace of the process `pid` (read-only,
/// close-on-exec), or returns -1. Async-signal-safe.
[[nodiscard]] inline int open_mount_namespace_of(::pid_t pid) noexcept {
  if (pid <= 0) {
    return -1;
  }
  return ::open(numbered_path("/proc/", static_cast<unsigned long>(pid), "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC);
}

/// Sends SIGKILL to every child the calling process has now, as /proc/thread-self/children
/// (`list`, read from its start) names them; returns how many it named. Async-signal-safe.
inline int kill_listed_children(int list) noexcept {
  int listed = 0;
  if (::lseek(list, 0, SEEK_SET) != 0) {
    return listed;
  }
  std::array<char, 512> buffer{};
  long pid = 0;
  bool in_number = false;
  for (;;) {
    const ::ssize_t got = retry_on_eintr([&]() noexcept { return ::read(list, buffer.data(), buffer.size()); });
    if (got <= 0) {
      break;
    }
    for (std::size_t i = 0; i < static_cast<std::size_t>(got); ++i) {
      const char c = buffer[i];
      if (c >= '0' && c <= '9') {
        pid = pid * 10 + (c - '0');
        in_number = true;
      } else if (in_number) {
        ::kill(static_cast<::pid_t>(pid), SIGKILL);
        ++listed;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number) {
    ::kill(static_cast<::pid_t>(pid), SIGKILL);
    ++listed;
  }
  return listed;
}

/// The calling process's monotonic clock in milliseconds; async-signal-safe.
[[nodiscard]] inline long long monotonic_ms() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1000LL + now.tv_nsec / 1000000L;
}

/// Writes `size` bytes to `fd` without letting a closed pipe raise SIGPIPE in the calling
/// process (the signal is blocked in this thread for the write and a SIGPIPE it caused is
/// consumed); returns false when the write failed.
[[nodiscard]] inline bool write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
  sigset_t pipe_only;
  ::sigemptyset(&pipe_only);
  ::sigaddset(&pipe_only, SIGPIPE);
  sigset_t previous;
  if (::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous) != 0) {
    return false;
  }
  sigset_t pending;
  ::sigemptyset(&pending);
  const bool was_pending = ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGPIPE) == 1;
  const bool ok = write_all(fd, data, size);
  if (!ok && errno == EPIPE && !was_pending) {
    const timespec no_wait{};
    static_cast<void>(retry_on_eintr([&]() noexcept { return ::sigtimedwait(&pipe_only, nullptr, &no_wait); }));
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return ok;
}

/// One write(2) of at most `size` bytes to `fd`, without letting a closed pipe raise SIGPIPE
/// in the calling process (as `write_without_sigpipe`); returns what write returned, with errno.
[[nodiscard]] inline ::ssize_t write_some_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
  sigset_t pipe_only;
  ::sigemptyset(&pipe_only);
  ::sigaddset(&pipe_only, SIGPIPE);
  sigset_t previous;
  if (::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous) != 0) {
    return -1;
  }
  sigset_t pending;
  ::sigemptyset(&pending);
  const bool was_pending = ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGPIPE) == 1;
  const ::ssize_t wrote = ::write(fd, data, size);
  const int error = errno;
  if (wrote < 0 && error == EPIPE && !was_pending) {
    const timespec no_wait{};
    static_cast<void>(retry_on_eintr([&]() noexcept { return ::sigtimedwait(&pipe_only, nullptr, &no_wait); }));
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = error;
  return wrote;
}

/// How a child's start is described to the host: descriptors for 0, 1 and 2 (-1: default),
/// the controlling terminal (-1: none), whether stdin defaults to /dev/null, and supersets of
/// the bounding and ambient capability sets it starts with (all ones: not known).
struct StartPlan {
  std::array<int, 3> stdio{-1, -1, -1};
  int terminal = -1;
  bool null_stdin = false;
  std::uint64_t bounding = ~0ULL;
  std::uint64_t ambient = ~0ULL;
  /// The user and PID namespaces of the namespace layer are entered already (by the supervisor,
  /// or by `exec_in_child` before it forked the command).
  bool supervised = false;
  /// Stay in the caller's session: the command is the child `exec_in_child` forked into the new
  /// PID namespace, and the session (with its controlling terminal) is its parent's.
  bool keep_session = false;
  /// The supervisor was forked from a launcher's zygote, which leads a session of its own that
  /// only its calls share (`run_filtered_zygote`): a command under the filter, off the terminal
  /// family, stays in it with a process group of its own instead of leading a new session.
  bool zygote_session = false;
  /// The call's socket, on which the host sends `go_ahead_byte` once it has confirmed that
  /// the launcher still matches its thread: the command's child reads it just before exec and
  /// runs nothing without it. -1 when none is awaited (a host's fork, a confirmed hand-over).
  int go_ahead = -1;
  /// The supervisor is in a new IPC namespace made for this call (`Supervision`): the child,
  /// whose fence wants one, makes none of its own.
  bool ipc_namespace_made = false;
};

/// The byte of the host's go-ahead (StartPlan::go_ahead).
inline constexpr char go_ahead_byte = 'G';

/// Throws the error a failed start of `program` under the `mode` fence reported (`report`), or
/// that its supervisor died first (`status` is its raw wait status, or negative for a supervisor
/// the launcher forks, which the host cannot wait for): `LandlockError` when the child could not
/// enter the fence or drop its capabilities, `ProcessError` when its processes cannot be
/// supervised, `SystemError` for a failed setup step or exec (its errno), or ECHILD for a
/// supervisor that ended before starting it.
[[noreturn]] inline void throw_start_failure(std::string_view program, std::string_view mode,
                                             const SupervisorReport& report, int status) {
  const std::string what = "cannot run " + json_string_literal(program);
  if (report.kind != SupervisorReport::failed && status < 0) {
    // No wait status to give: the call's socket closed without a report. A zygote killed after
    // the launcher handed it the call, and before it forked the supervisor, ends it so too.
    throw SystemError(ECHILD, what + ": the call ended before its command started (its supervisor, or the launcher's "
                                     "process that was to fork it, ended first)");
  }
  if (report.kind != SupervisorReport::failed) {
    throw SystemError(ECHILD,
                      what + ": its supervisor ended before starting it (wait status " + std::to_string(status) + ")");
  }
  const std::string step(report.step.data());
  const std::string under = what + " under the " + std::string(mode) + " fence: ";
  switch (static_cast<ChildStage>(report.stage)) {
  case ChildStage::fence:
    throw LandlockError(under + "the child could not enter it: " + step + " failed: " + std::strerror(report.error));
  case ChildStage::capabilities: {
    const std::string_view capability = fence_capability_name(report.detail);
    throw LandlockError(under + "the child could not drop its capabilities: " + step +
                        (capability.empty() ? std::string() : " for " + std::string(capability)) +
                        " failed: " + std::strerror(report.error));
  }
  case ChildStage::supervision:
    throw ProcessError(what + ": its processes cannot be supervised, so nothing would end them with the call: " + step +
                           " failed: " + std::strerror(report.error),
                       std::error_code(report.error, std::generic_category()));
  case ChildStage::setup:
    throw SystemError(report.error, what + ": " + step + " failed");
  case ChildStage::exec:
    break;
  }
  throw SystemError(report.error, what);
}

} // namespace dsh::detail
