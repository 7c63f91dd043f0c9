/// @file
/// `FencedChild`: a running fenced call as `FencedCommand::spawn` returns it: its supervisor's
/// reports, the relay of its output, `terminate` and `wait`.
#pragma once

#include <dsh/detail/posix.hpp>
#include <dsh/detail/process/supervisor.hpp>
#include <dsh/fence_launcher.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsh {

class FencedCommand;

/// A running fenced command, as `FencedCommand::spawn` returns it: a supervisor process that
/// owns the command and every process it starts. `wait()` relays the output and returns
/// when the call has ended and nothing of it is left. Move-only; destroying a child that was
/// not waited for ends the call (kills all its processes) and reaps the supervisor.
class FencedChild {
public:
  FencedChild(const FencedChild&) = delete;
  FencedChild& operator=(const FencedChild&) = delete;
  /// Transfers the call; `other` owns nothing afterwards.
  FencedChild(FencedChild&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), control_(std::move(other.control_)), out_(std::move(other.out_)),
        err_(std::move(other.err_)), sink_(std::move(other.sink_)), program_(std::move(other.program_)),
        report_(other.report_), report_bytes_(other.report_bytes_), status_(other.status_),
        timed_out_(other.timed_out_), in_(std::move(other.in_)), input_(std::move(other.input_)),
        input_done_(other.input_done_), launched_(other.launched_), supervisor_(std::move(other.supervisor_)),
        launch_note_(std::move(other.launch_note_)) {}
  /// Ends this call (as the destructor does), then takes `other`'s.
  FencedChild& operator=(FencedChild&& other) noexcept {
    if (this != &other) {
      abandon();
      pid_ = std::exchange(other.pid_, -1);
      control_ = std::move(other.control_);
      out_ = std::move(other.out_);
      err_ = std::move(other.err_);
      sink_ = std::move(other.sink_);
      program_ = std::move(other.program_);
      report_ = other.report_;
      report_bytes_ = other.report_bytes_;
      status_ = other.status_;
      timed_out_ = other.timed_out_;
      in_ = std::move(other.in_);
      input_ = std::move(other.input_);
      input_done_ = other.input_done_;
      launched_ = other.launched_;
      supervisor_ = std::move(other.supervisor_);
      launch_note_ = std::move(other.launch_note_);
    }
    return *this;
  }
  /// Ends the call if it was not waited for: every process of it is killed, the supervisor reaped.
  ~FencedChild() { abandon(); }

  /// The supervisor's pid (-1 once the call has ended). It is not the command's: signal the
  /// call through `terminate()`, which ends all of it. A supervisor from the launcher is the
  /// launcher's child, not the host's.
  [[nodiscard]] ::pid_t pid() const noexcept { return pid_; }

  /// How the supervisor was started: `Launch::launcher` (forked from the launcher) or
  /// `Launch::fork` (forked from the host).
  [[nodiscard]] Launch launched_by() const noexcept { return launched_ ? Launch::launcher : Launch::fork; }

  /// Why a call that could have used the launcher (`Launch::automatic`) forked the host
  /// instead; "" when it used the launcher or was asked to fork.
  [[nodiscard]] const std::string& launch_note() const noexcept { return launch_note_; }

  /// Relays the command's output (to the sink, else to the host's own stdout and stderr)
  /// until the call has ended: the command exited, was killed, reached the time limit, or
  /// `terminate()` was called; by then every process it started has been killed and reaped.
  /// Returns the exit code, 128 + the signal number when the command was killed,
  /// `FencedCommand::timed_out_exit_code` (124) when the time limit ended it; the same value
  /// on later calls. Throws ProcessError when the supervisor itself died before reporting
  /// (then processes the command detached may have survived), dsh::SystemError when poll
  /// fails, and whatever the sink throws (the call is then still running: destroy or wait).
  int wait();

  /// True when `wait()` returned because the time limit ended the call.
  [[nodiscard]] bool timed_out() const noexcept { return timed_out_; }

  /// Ends the call now: the supervisor kills the command and everything it started; `wait()`
  /// then returns 137 (SIGKILL) unless the command had already ended.
  void terminate() noexcept {
    if (control_) {
      ::shutdown(control_.get(), SHUT_WR); // the supervisor reads end of file
    }
  }

private:
  friend class FencedCommand;
  FencedChild(::pid_t pid, UniqueFd control, UniqueFd out, UniqueFd err, OutputSink sink, std::string program) noexcept
      : pid_(pid), control_(std::move(control)), out_(std::move(out)), err_(std::move(err)), sink_(std::move(sink)),
        program_(std::move(program)) {}

  /// Reads one whole report from the supervisor, and the pidfd that names it when the report
  /// carries one ("started"); false on end of file or error.
  [[nodiscard]] bool read_report(detail::SupervisorReport& report) noexcept {
    auto* bytes = reinterpret_cast<char*>(&report);
    std::size_t got = 0;
    while (got < sizeof report) {
      iovec part{bytes + got, sizeof report - got};
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> space{};
      msghdr message{};
      message.msg_iov = &part;
      message.msg_iovlen = 1;
      message.msg_control = space.data();
      message.msg_controllen = space.size();
      const ::ssize_t n =
          detail::retry_on_eintr([&]() noexcept { return ::recvmsg(control_.get(), &message, MSG_CMSG_CLOEXEC); });
      if (n <= 0) {
        return false;
      }
      for (cmsghdr* attached = CMSG_FIRSTHDR(&message); attached != nullptr;
           attached = CMSG_NXTHDR(&message, attached)) {
        if (attached->cmsg_level == SOL_SOCKET && attached->cmsg_type == SCM_RIGHTS &&
            attached->cmsg_len == CMSG_LEN(sizeof(int))) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(attached), sizeof fd);
          supervisor_.reset(fd);
        }
      }
      got += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Reads what `pipe` has and hands it on; closes `pipe` at end of file. Returns false when
  /// nothing was read.
  bool relay(UniqueFd& pipe, CommandStream stream, std::array<char, 16384>& buffer) {
    const ::ssize_t got = ::read(pipe.get(), buffer.data(), buffer.size());
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
      return false;
    }
    if (got <= 0) {
      pipe.reset();
      return false;
    }
    const std::string_view bytes(buffer.data(), static_cast<std::size_t>(got));
    if (sink_) {
      sink_(stream, bytes);
    } else {
      // When the host's own stream is gone the bytes are dropped; the pipe is still drained.
      (void)detail::write_without_sigpipe(stream == CommandStream::out ? STDOUT_FILENO : STDERR_FILENO, bytes.data(),
                                          bytes.size());
    }
    return true;
  }

  /// Writes the next part of the command's stdin (`in_` is non-blocking); closes `in_` when
  /// all of it is written, or the command closed its end (EPIPE, without SIGPIPE).
  void feed_input() noexcept {
    const std::size_t size = std::min<std::size_t>(input_.size() - input_done_, 65536);
    const ::ssize_t wrote = detail::write_some_without_sigpipe(in_.get(), input_.data() + input_done_, size);
    if (wrote < 0 && (errno == EINTR || errno == EAGAIN)) {
      return;
    }
    input_done_ += wrote > 0 ? static_cast<std::size_t>(wrote) : 0;
    if (wrote < 0 || input_done_ == input_.size()) {
      in_.reset();
    }
  }

  /// Ends the call without relaying and reaps the supervisor; noexcept.
  void abandon() noexcept {
    if (pid_ > 0) {
      terminate();
      end_supervisor();
    }
  }

  /// Waits until the supervisor has ended, with `pid_` -1 afterwards; its raw wait status when
  /// it is the host's child, else -1. A supervisor from the launcher is not the host's child:
  /// its end is the end of file on the socket (its last descriptor of the call closes as it
  /// exits), and waitpid is never called for its pid, which could name another child of the
  /// host by then.
  int end_supervisor() noexcept {
    const ::pid_t pid = std::exchange(pid_, -1);
    if (!launched_) {
      return pid > 0 ? reap(pid) : -1;
    }
    if (control_) {
      std::array<char, 256> rest{};
      while (detail::retry_on_eintr([&]() noexcept { return ::read(control_.get(), rest.data(), rest.size()); }) > 0) {
      }
      control_.reset();
    }
#if defined(__linux__)
    // Its descriptors close before it has exited: wait on its pidfd until the launcher has
    // reaped it (at once: the launcher ignores SIGCHLD), so nothing of the call is left.
    if (supervisor_) {
      pollfd exited{supervisor_.get(), POLLIN, 0};
      static_cast<void>(detail::retry_on_eintr([&]() noexcept { return ::poll(&exited, 1, -1); }));
      // A host that is a child subreaper inherits the supervisors of a launcher it stopped:
      // then it reaps this one itself (P_PIDFD names no other child).
      siginfo_t reaped{};
      const bool ours =
          ::waitid(detail::wait_by_pidfd, static_cast<id_t>(supervisor_.get()), &reaped, WEXITED | WNOHANG) == 0 &&
          reaped.si_pid != 0;
      for (int round = 0;
           !ours && round < 100000 && ::syscall(SYS_pidfd_send_signal, supervisor_.get(), 0, nullptr, 0U) == 0;
           ++round) {
        const timespec pause{0, 10000};
        ::nanosleep(&pause, nullptr);
      }
      supervisor_.reset();
    }
#endif
    return -1;
  }

  /// waitpid for the supervisor (retrying on EINTR); its raw status, or -1.
  [[nodiscard]] static int reap(::pid_t pid) noexcept {
    int status = 0;
    const ::pid_t done = detail::retry_on_eintr([&]() noexcept { return ::waitpid(pid, &status, 0); });
    return done < 0 ? -1 : status;
  }

  ::pid_t pid_ = -1;
  UniqueFd control_;
  UniqueFd out_;
  UniqueFd err_;
  OutputSink sink_;
  std::string program_;
  detail::SupervisorReport report_{}; // kept across calls: a sink that throws interrupts wait()
  std::size_t report_bytes_ = 0;
  int status_ = -1;
  bool timed_out_ = false;
  UniqueFd in_;                // the host's end of the command's stdin while `input_` is written; else closed
  std::string input_;          // the bytes for the command's stdin
  std::size_t input_done_ = 0; // how many of them are written
  bool launched_ = false;      // the supervisor is the launcher's child (Launch::launcher)
  UniqueFd supervisor_;        // a pidfd of the supervisor, sent with its "started" report
  std::string launch_note_;    // why Launch::automatic forked instead
};

inline int FencedChild::wait() {
  if (pid_ < 0) {
    return status_;
  }
  // Not zeroed: only what read() writes is used, and every page written while the supervisor
  // (a forked copy of this process) lives is copied first.
  std::array<char, 16384> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  detail::SupervisorReport& report = report_;
  std::size_t& report_bytes = report_bytes_;
  bool listening = true; // until the end report or the end of file
  while (listening && control_) {
    std::array<pollfd, 4> ready{{{control_.get(), POLLIN, 0},
                                 {out_.get(), POLLIN, 0},
                                 {err_.get(), POLLIN, 0},
                                 {in_ ? in_.get() : -1, POLLOUT, 0}}};
    if (::poll(ready.data(), ready.size(), -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw SystemError(errno, "FencedChild::wait: poll");
    }
    if (ready[1].revents != 0) {
      relay(out_, CommandStream::out, buffer);
    }
    if (ready[2].revents != 0) {
      relay(err_, CommandStream::err, buffer);
    }
    if (ready[3].revents != 0) {
      feed_input();
    }
    if (ready[0].revents != 0) {
      const ::ssize_t got =
          ::read(control_.get(), reinterpret_cast<char*>(&report) + report_bytes, sizeof report - report_bytes);
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got > 0) {
        report_bytes += static_cast<std::size_t>(got);
      }
      if (got <= 0) {
        control_.reset();
      } else if (report_bytes == sizeof report && report.kind == detail::SupervisorReport::ended) {
        listening = false; // the socket's end of file is the supervisor's exit (end_supervisor)
      } else if (report_bytes == sizeof report) {
        report_bytes = 0; // not an end report: keep listening
      }
    }
  }
  in_.reset();
  // The call has ended and its processes are gone: take what they left in the pipes, but
  // never wait for more (a descriptor passed outside the call could keep a pipe open).
  for (UniqueFd* pipe : {&out_, &err_}) {
    const CommandStream stream = pipe == &out_ ? CommandStream::out : CommandStream::err;
    for (int round = 0; *pipe && round < 1024; ++round) {
      pollfd ready{pipe->get(), POLLIN, 0};
      if (::poll(&ready, 1, 0) <= 0 || !relay(*pipe, stream, buffer)) {
        break;
      }
    }
    pipe->reset();
  }
  const bool ended = report_bytes == sizeof report && report.kind == detail::SupervisorReport::ended;
  int raw = -1;
  if (launched_ && ended) {
    // Everything of the call is reaped; what is left is the launcher's child exiting, which
    // the host need not wait for (it is not the host's child, and holds nothing of the call).
    pid_ = -1;
    supervisor_.reset();
  } else {
    raw = end_supervisor();
  }
  control_.reset();
  if (ended) {
    status_ = report.error;
    timed_out_ = report.detail == detail::time_limit_reached;
    return status_;
  }
  status_ = raw < 0 ? -1 : (WIFEXITED(raw) ? WEXITSTATUS(raw) : WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : -1);
  // A supervisor from the launcher has no wait status here: -1 then.
  throw ProcessError("the supervisor of " + json_string_literal(program_) + " ended without reporting (status " +
                     std::to_string(status_) +
                     "): the command was killed with it, but processes it detached may have survived the call");
}

} // namespace dsh
