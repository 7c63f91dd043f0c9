/// @file
/// `FencedCommand`: a command to run under a `PreparedFence`: its argv, environment, stdio, time
/// limit and directory; `spawn`, `run` and `capture`; the supervisor that starts the command, relays
/// its output and ends everything it started; and the start from the fence launcher.
#pragma once

#include <dsh/command_output.hpp>
#include <dsh/denials.hpp>
#include <dsh/detail/canonical.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/detail/process/child_steps.hpp>
#include <dsh/detail/process/command_environment.hpp>
#include <dsh/detail/process/launch_wire.hpp>
#include <dsh/detail/process/launcher_client.hpp>
#include <dsh/detail/process/supervisor.hpp>
#include <dsh/fence_launcher.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/fenced_child.hpp>
#include <dsh/prepared_fence.hpp>
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
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsh {

/// A command to run under a fence: its argv is built and its program found through $PATH
/// at construction, so the child between fork and exec allocates nothing.
///
/// What `spawn` and `run` give the command, in every mode:
/// * stdio: stdin reads /dev/null; stdout and stderr are pipes the host owns and relays (to
///   the host's own stdout and stderr, or to `on_output`'s sink). No descriptor of the host
///   reaches it (everything above 2 is closed on exec: Landlock does not check files opened
///   before the fence), so it can neither truncate, seek nor reopen the host's stdio.
///   `redirect` and `controlling_terminal` hand it a descriptor anyway: the host's choice.
/// * no controlling terminal (TIOCSTI cannot type into the user's shell) and a new session;
///   except that a filtered command (off the terminal family) whose supervisor came from the
///   launcher's zygote stays in the zygote's session with a process group of its own (a new
///   session would be a new scheduling group); default signal dispositions and an empty signal
///   mask.
/// * in read-only and workspace-write: no_new_privs and none of `FENCE_DROPPED_CAPABILITIES`.
/// * a lifetime: a supervisor process, the command's parent and a child subreaper
///   (PR_SET_CHILD_SUBREAPER), inherits every process the command orphans (double forks and
///   setsid included). When the command exits, is killed, reaches `time_limit`, or the host
///   calls `FencedChild::terminate` (or dies), the supervisor kills every descendant and
///   reaps it, walking /proc/thread-self/children until none is left; only then does `wait`
///   return. Why a subreaper: it works unprivileged and as root alike, adds one small
///   vfork to the call, and keeps pids and /proc as the command expects; a PID namespace needs
///   privilege (or a user namespace), a process group or session is left by setsid(2), and a
///   cgroup needs a delegated hierarchy. With the namespace layer (`report().layers`) the
///   supervisor also enters a new PID namespace (in the user namespace it makes for an
///   unprivileged host) before it starts the command, which is then PID 1 of it: when it ends
///   the kernel ends everything left in the namespace, and the walk finds nothing. Neither the
///   host's signal dispositions nor its subreaper flag are touched: the supervisor is a process
///   of its own.
/// * an environment: by default the host's as it was when this object was constructed, without
///   every variable whose name contains KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or
///   AUTH in any case (`removed_env_names` lists them; agent hosts keep model credentials
///   there); `keep_env`, `set_env`, `unset_env`, `clear_env` and `inherit_env` change it. When
///   the fence has a private temporary directory (`PreparedFence::temporary_directory_assignment`),
///   TMPDIR names it, replacing the host's, unless the host gave TMPDIR a value with `set_env`.
///   The program is still found through the host's $PATH (at construction).
/// The working directory is the host's unless `in_directory` is set. Move-only.
class FencedCommand {
public:
  /// Exit status of a child that could not apply the fence, drop its capabilities, or exec
  /// the program for a reason other than "not found".
  static constexpr int cannot_run_exit_code = 126;
  /// Exit status of a child whose program was not found.
  static constexpr int not_found_exit_code = 127;
  /// Exit status of a call ended by its time limit, as timeout(1) reports it.
  static constexpr int timed_out_exit_code = 124;

  /// Keeps `argv` and resolves `argv[0]` now: as given when it contains '/', else the first
  /// executable regular file `<dir>/argv[0]` for the directories of $PATH (default
  /// "/usr/local/bin:/usr/bin:/bin"); unresolved names stay as given and fail at exec.
  /// Throws ConfigError when `argv` is empty.
  /// The environment starts as the class comment's default, read from `environ` now.
  explicit FencedCommand(std::vector<std::string> argv) : args_(std::move(argv)), environment_(environ) {
    if (args_.empty()) {
      throw ConfigError("FencedCommand: argv must name a program, got an empty argv");
    }
    program_ = resolve_program(args_.front());
    for (std::string& arg : args_) {
      argv_.push_back(arg.data());
    }
    argv_.push_back(nullptr);
  }
  FencedCommand(const FencedCommand&) = delete;
  FencedCommand& operator=(const FencedCommand&) = delete;
  /// Transfers the command (the argv and envp pointers stay valid: the strings do not move).
  FencedCommand(FencedCommand&&) noexcept = default;
  /// Transfers the command.
  FencedCommand& operator=(FencedCommand&&) noexcept = default;
  /// Releases the argv and the environment.
  ~FencedCommand() = default;

  /// The host's choice: makes the child's descriptor `child_fd` (0, 1 or 2) a copy of the
  /// parent's `parent_fd` (which must stay open until the child has started) instead of
  /// /dev/null or a relayed pipe; the command can then do with that open file description
  /// whatever its access mode allows (truncate, seek). Returns `*this`. Throws
  /// ConfigError for a `child_fd` other than 0, 1 or 2, or a negative `parent_fd`.
  FencedCommand& redirect(int child_fd, int parent_fd) {
    if (child_fd < 0 || child_fd > 2 || parent_fd < 0) {
      throw ConfigError("FencedCommand::redirect: expected a child descriptor 0, 1 or 2 and an "
                        "open parent descriptor, got " +
                        std::to_string(child_fd) + " <- " + std::to_string(parent_fd));
    }
    stdio_[static_cast<std::size_t>(child_fd)] = parent_fd;
    return *this;
  }

  /// The host's choice, for the terminal family: runs the command on the terminal
  /// `terminal_fd` (the child side of a pseudo-terminal the host opened, e.g. with openpty):
  /// it becomes the controlling terminal of the command's new session and its descriptors 0,
  /// 1 and 2 (a later `redirect` overrides one of them). The descriptor must stay open until
  /// the child has started. Returns `*this`. Throws ConfigError for a negative one.
  FencedCommand& controlling_terminal(int terminal_fd) {
    if (terminal_fd < 0) {
      throw ConfigError("FencedCommand::controlling_terminal: expected an open terminal descriptor, got " +
                        std::to_string(terminal_fd));
    }
    terminal_ = terminal_fd;
    stdio_ = {terminal_fd, terminal_fd, terminal_fd};
    return *this;
  }

  /// Sends the command's output to `sink` instead of the host's stdout and stderr. Returns `*this`.
  FencedCommand& on_output(OutputSink sink) {
    sink_ = std::move(sink);
    return *this;
  }

  /// Ends the call after `limit` of wall-clock time from its start: the command and every
  /// process it started are killed and `wait`/`run` return `timed_out_exit_code`. Returns
  /// `*this`. Throws ConfigError when `limit` is not positive.
  FencedCommand& time_limit(std::chrono::milliseconds limit) {
    if (limit.count() <= 0) {
      throw ConfigError("FencedCommand::time_limit: expected a positive duration, got " +
                        std::to_string(limit.count()) + " ms");
    }
    limit_ms_ = limit.count();
    return *this;
  }

  /// How `spawn` starts the supervisor (default `Launch::automatic`: from the process's
  /// launcher, `FenceLauncher`, when it is configured and usable, else by forking the host).
  /// Returns `*this`.
  FencedCommand& launch(Launch how) noexcept {
    launch_ = how;
    return *this;
  }

  /// Makes the child change to `directory` before it applies the fence. Returns `*this`.
  FencedCommand& in_directory(std::filesystem::path directory) {
    directory_ = std::move(directory);
    return *this;
  }

  /// Gives the command the variable `name` with `value` (replacing the value it would have).
  /// A credential-looking name is the host's choice here, and so is TMPDIR: the fence's
  /// temporary directory then does not replace it. Returns `*this`. Throws ConfigError when
  /// `name` is empty or contains '=' or NUL, or `value` contains NUL (the message names the
  /// variable and where the NUL is, not the value, which may be a secret).
  FencedCommand& set_env(std::string name, std::string value) {
    environment_.set(std::move(name), std::move(value));
    return *this;
  }

  /// Removes the variable `name` from the command's environment. Returns `*this`. Throws
  /// ConfigError when `name` is empty or contains '=' or NUL.
  FencedCommand& unset_env(std::string_view name) {
    environment_.unset(name);
    return *this;
  }

  /// Starts the command's environment empty: only what `set_env` adds (and the fence's TMPDIR).
  /// Returns `*this`.
  FencedCommand& clear_env() {
    environment_.clear();
    return *this;
  }

  /// Back to the default environment (the class comment's), undoing `set_env`, `unset_env`
  /// and `clear_env`; what `keep_env` kept stays kept. Returns `*this`.
  FencedCommand& inherit_env() {
    environment_.inherit();
    return *this;
  }

  /// Passes the host's variable `name` on although its name looks like a credential: now, when
  /// the environment is inherited and the command has no `name` yet, and after every later
  /// `inherit_env`. Returns `*this`. Throws ConfigError when `name` is empty or contains '='
  /// or NUL.
  FencedCommand& keep_env(std::string name) {
    environment_.keep(std::move(name));
    return *this;
  }

  /// The names of the host's variables the credential rule withholds from the command, sorted;
  /// never their values. `keep_env` names are not listed; a name `set_env` gave a value still
  /// is (the host's own value is withheld); empty after `clear_env`.
  [[nodiscard]] std::vector<std::string> removed_env_names() const { return environment_.removed_names(); }

  /// The command's environment as `NAME=VALUE` entries, in the order it gets them, without the
  /// fence's TMPDIR (which is added when the fence has one).
  [[nodiscard]] const std::vector<std::string>& environment() const noexcept { return environment_.entries(); }

  /// The program that will be executed (resolved path, or argv[0] when not found).
  [[nodiscard]] const std::string& program() const noexcept { return program_; }
  /// The arguments, argv[0] first.
  [[nodiscard]] const std::vector<std::string>& args() const noexcept { return args_; }

  /// In a freshly forked child (e.g. forkpty's; not a vfork child: it writes the fence's TMPDIR
  /// into this object's environment array, which must be the child's own copy): enters its own
  /// session (a forkpty child already leads one and keeps its terminal), makes
  /// `controlling_terminal` its terminal, changes directory, copies the descriptors `redirect` named (descriptors not
  /// redirected stay as the caller left them), applies `fence`, drops the capabilities (read-only and workspace-write),
  /// resets signal dispositions and mask, then execs the program with the command's environment (the fence's TMPDIR
  /// included, see the class comment); never returns. No supervisor, relay or time limit: the caller owns the child's
  /// lifetime.
  ///
  /// Async-signal-safe. When a step fails the program is not run: with `error_pipe` >= 0 a
  /// `detail::ChildFailure` record is written to it (fence 1 for the fence and the
  /// capabilities), otherwise one line naming the failed call and errno goes to stderr; the
  /// child exits with `cannot_run_exit_code` (or `not_found_exit_code` when exec reported ENOENT).
  [[noreturn]] void exec_in_child(const PreparedFence& fence, int error_pipe = -1) const noexcept {
    detail::StartPlan plan;
    plan.stdio = stdio_;
    plan.terminal = terminal_;
    detail::reset_signal_dispositions();
#if defined(__linux__)
    if (fence.namespaces_.active) {
      // The session and its terminal are this process's; the command, forked into the new PID
      // namespace as its PID 1, stays in them while this process waits and passes on its end.
      if (const detail::ChildStep failed = detail::enter_own_session(plan.terminal); failed.error != 0) {
        fail_in_child(error_pipe, failed);
      }
      if (fence.namespaces_.user_namespace) {
        if (const ApplyResult entered = detail::enter_user_namespace(fence.namespaces_); !entered.ok()) {
          fail_in_child(error_pipe, {entered.error, entered.step, detail::ChildStage::fence, -1});
        }
      }
      if (const ApplyResult entered = detail::enter_pid_namespace_by_fork(); !entered.ok()) {
        fail_in_child(error_pipe, {entered.error, entered.step, detail::ChildStage::fence, -1});
      }
      plan.supervised = true;
      plan.keep_session = true;
    }
#endif
    fail_in_child(error_pipe, start_in_child(fence, plan));
  }

  /// Starts the command under `fence` with the stdio, session, capabilities, environment and
  /// supervisor described for the class; returns once the program is executing. Call `wait()`
  /// on the result to relay its output and collect its status.
  /// Throws LandlockError when the child could not apply the fence or drop its capabilities;
  /// ProcessError when the supervisor cannot watch the command's processes
  /// (/proc/thread-self/children is missing: Linux 3.17 with CONFIG_PROC_CHILDREN is required;
  /// on other systems always); dsh::SystemError when socketpair/pipe/fork fail or the program
  /// could not be executed.
  /// Nothing is left running when it throws.
  [[nodiscard]] FencedChild spawn(const PreparedFence& fence) const { return start(fence, sink_, {}); }

  /// `spawn(fence)`, then `wait()`: relays the output and returns the exit status as the
  /// shell reports it (`timed_out_exit_code` when the time limit ended the call).
  [[nodiscard]] int run(const PreparedFence& fence) const { return spawn(fence).wait(); }

  /// Runs the command under `fence` as `run` does, with its stdout and stderr captured instead
  /// of relayed (each cut at `options.max_bytes`, the rest read and dropped) and
  /// `options.stdin_bytes` as its stdin, and finds the writes the fence refused it in its stderr
  /// (`PreparedFence::denial_scanner` from the command's directory: `in_directory`, else the
  /// host's working directory). Returns the status, both streams, `truncated`, `denied` and the
  /// denied paths (docs/enforcement.md#denials). Throws ConfigError when stdout or stderr is
  /// redirected or the command runs on a terminal (there is nothing to capture then), and what
  /// `spawn` and `FencedChild::wait` throw. Defined at the end of this file.
  [[nodiscard]] CommandOutput capture(const PreparedFence& fence, CaptureOptions options = {}) const;

  /// Waits for `pid` (retrying on EINTR); returns its exit code, or 128 + the signal number
  /// when it was killed, or -1 when waitpid failed. For children started with
  /// `exec_in_child`; a `FencedChild` has its own `wait()`.
  [[nodiscard]] static int wait_for(::pid_t pid) noexcept {
    const int status = FencedChild::reap(pid);
    return status < 0 ? -1 : exit_status(status);
  }

private:
  friend struct detail::LaunchWire;

  /// The command a supervisor forked from the launcher runs: everything as the host's
  /// FencedCommand resolved it (`program` already found, `environment` final).
  FencedCommand(std::vector<std::string> args, std::string program, detail::CommandEnvironment environment,
                std::filesystem::path directory, long long limit_ms)
      : args_(std::move(args)), program_(std::move(program)), environment_(std::move(environment)),
        directory_(std::move(directory)), limit_ms_(limit_ms) {
    for (std::string& arg : args_) {
      argv_.push_back(arg.data());
    }
    argv_.push_back(nullptr);
  }

  /// `spawn`, with `sink` receiving the output and, when `input` is not empty, a pipe as the
  /// command's stdin that the child's `wait()` writes `input` to (instead of /dev/null or a
  /// `redirect` of descriptor 0).
  [[nodiscard]] FencedChild start(const PreparedFence& fence, OutputSink sink, std::string input) const {
#if defined(__linux__)
    std::array<int, 2> control{-1, -1};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control.data()) != 0) {
      throw SystemError(errno, "FencedCommand::spawn: socketpair");
    }
    UniqueFd host_end{control[0]};
    UniqueFd supervisor_end{control[1]};
    UniqueFd out_read;
    UniqueFd out_write;
    UniqueFd err_read;
    UniqueFd err_write;
    UniqueFd in_read;
    UniqueFd in_write;
    detail::StartPlan plan;
    plan.stdio = stdio_;
    plan.terminal = terminal_;
    plan.null_stdin = true;
    if (!input.empty()) {
      make_pipe(in_read, in_write);
      // Non-blocking for the host alone: the command's end is another open file description.
      if (::fcntl(in_write.get(), F_SETFL, O_NONBLOCK) != 0) {
        throw SystemError(errno, "FencedCommand::spawn: fcntl(O_NONBLOCK)");
      }
      plan.stdio[0] = in_read.get();
    }
    if (plan.stdio[1] < 0) {
      make_pipe(out_read, out_write);
      plan.stdio[1] = out_write.get();
    }
    if (plan.stdio[2] < 0) {
      make_pipe(err_read, err_write);
      plan.stdio[2] = err_write.get();
    }
    std::string note;
    bool launched = false;
    if (launch_ != Launch::fork) {
      // The launcher (or its zygote holding this call's filter) forks the supervisor from its
      // own small image: nothing of the host is copied, whatever its size
      // (docs/performance.md#the-launcher).
      // The host's working directory as the call's (a fork would inherit it).
      const UniqueFd cwd(detail::retry_on_eintr([] { return ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC); }));
      if (!cwd) {
        throw SystemError(errno, "FencedCommand::spawn: open(\".\")");
      }
      ::mode_t mask = 022;
      detail::LauncherClient& client = detail::LauncherClient::instance();
      const detail::LaunchVariant variant = detail::LaunchWire::variant(fence);
      // A running launcher takes the call, and its request, once the thread's status is read;
      // the rest of its fingerprint is read while the supervisor starts the command, whose
      // child waits for the go-ahead before exec. A thread that no longer matches the launcher
      // closes that socket (the child reads end of file and runs nothing) and hands the call
      // over again, the whole fingerprint read first.
      detail::UnconfirmedCall unconfirmed;
      note = client.hand_over(supervisor_end.get(), mask, variant, &unconfirmed);
      if (note.empty()) {
        const bool pending = !unconfirmed.launcher_print.empty();
        // Should this throw, the supervisor reads end of file and exits without running anything.
        detail::LaunchWire::send(host_end.get(), *this, fence, plan, cwd.get(), mask, pending);
        if (pending && client.confirm(unconfirmed)) {
          // A supervisor gone meanwhile refuses it: its report, read below, says why.
          static_cast<void>(::send(host_end.get(), &detail::go_ahead_byte, 1, MSG_NOSIGNAL));
        } else if (pending) {
          host_end.reset();
          supervisor_end.reset();
          if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control.data()) != 0) {
            throw SystemError(errno, "FencedCommand::spawn: socketpair");
          }
          host_end.reset(control[0]);
          supervisor_end.reset(control[1]);
          note = client.hand_over(supervisor_end.get(), mask, variant);
          if (note.empty()) {
            detail::LaunchWire::send(host_end.get(), *this, fence, plan, cwd.get(), mask, false);
          }
        }
        launched = note.empty();
      }
      if (!launched && launch_ == Launch::launcher) {
        throw SystemError(ENOEXEC, "FencedCommand::spawn: cannot run " + json_string_literal(program_) +
                                       " from the fence launcher (Launch::launcher): " + note);
      }
    }
    ::pid_t pid = -1;
    if (!launched) {
      pid = ::fork();
      if (pid < 0) {
        throw SystemError(errno, "FencedCommand::spawn: fork");
      }
      if (pid == 0) {
        supervise(fence, plan, supervisor_end.get());
      }
    }
    supervisor_end.reset();
    out_write.reset();
    err_write.reset();
    in_read.reset();
    FencedChild child(pid, std::move(host_end), std::move(out_read), std::move(err_read), std::move(sink), program_);
    child.launched_ = launched;
    child.launch_note_ = launch_ == Launch::automatic ? std::move(note) : std::string();
    child.in_ = std::move(in_write);
    child.input_ = std::move(input);
    detail::SupervisorReport report{};
    if (!child.read_report(report) || report.kind != detail::SupervisorReport::started) {
      const int status = child.end_supervisor();
      detail::throw_start_failure(program_, to_string(fence.report().mode), report, status);
    }
    if (launched) {
      child.pid_ = report.stage; // the supervisor's pid, which it reports with "started"
    }
    return child;
#else
    (void)fence;
    (void)sink;
    (void)input;
    throw ProcessError("cannot run " + json_string_literal(program_) +
                           ": supervising a command's processes needs Linux (a child subreaper and "
                           "/proc/thread-self/children)",
                       std::make_error_code(std::errc::function_not_supported));
#endif
  }

  /// The shell's number for a waitpid status.
  [[nodiscard]] static int exit_status(int status) noexcept {
    if (WIFEXITED(status)) {
      return WEXITSTATUS(status);
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }

  [[nodiscard]] static std::string resolve_program(const std::string& name) {
    if (name.find('/') != std::string::npos) {
      return name;
    }
    const char* path_env = std::getenv("PATH");
    const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= search.size()) {
      const std::size_t end = std::min(search.find(':', start), search.size());
      std::string candidate = end == start ? std::string(".") : search.substr(start, end - start);
      candidate.append("/").append(name);
      struct stat info {};
      if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
      start = end + 1;
    }
    return name;
  }

  /// A close-on-exec pipe for one relayed stream.
  static void make_pipe(UniqueFd& reader, UniqueFd& writer) {
    std::array<int, 2> ends{-1, -1};
#if defined(__linux__)
    if (::pipe2(ends.data(), O_CLOEXEC) != 0) {
#else
    if (::pipe(ends.data()) != 0) {
#endif
      throw SystemError(errno, "FencedCommand::spawn: pipe");
    }
    reader.reset(ends[0]);
    writer.reset(ends[1]);
  }

  /// The child's way from fork to exec; returns only when a step failed (that step).
  /// Signal dispositions must already be the defaults (the child shares no handler with the
  /// host then, even after vfork). Async-signal-safe. The fence's TMPDIR goes into the
  /// environment's spare slot here: in the supervisor's memory (a forked copy of the host's,
  /// which vfork shares with the command until exec) or in `exec_in_child`'s forked child,
  /// never in the host's.
  [[nodiscard]] detail::ChildStep start_in_child(const PreparedFence& fence,
                                                 const detail::StartPlan& plan) const noexcept {
    // A command under the system-call filter whose supervisor came from a launcher's zygote
    // stays in the zygote's session, in a process group of its own and with no terminal; any
    // other command leads a new session (its terminal's, in the terminal family).
    const bool filtered = fence.report_.syscall_filter && fence.report_.status != FenceStatus::unrestricted;
    if (const detail::ChildStep failed = plan.keep_session ? detail::ChildStep{}
                                         : filtered && plan.terminal < 0 && plan.zygote_session
                                             ? detail::enter_own_process_group()
                                             : detail::enter_own_session(plan.terminal);
        failed.error != 0) {
      return failed;
    }
    if (!directory_.empty() && ::chdir(directory_.c_str()) != 0) {
      return {errno, "chdir", detail::ChildStage::setup, -1};
    }
    if (const detail::ChildStep failed = detail::install_stdio(plan.stdio, plan.null_stdin); failed.error != 0) {
      return failed;
    }
    if (const ApplyResult applied = fence.enter(plan.bounding, plan.ambient, plan.supervised, plan.ipc_namespace_made);
        !applied.ok()) {
      return {applied.error, applied.step,
              applied.capabilities ? detail::ChildStage::capabilities : detail::ChildStage::fence, applied.capability};
    }
    sigset_t none;
    ::sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) {
      return {errno, "sigprocmask", detail::ChildStage::setup, -1};
    }
    detail::close_inherited_descriptors_on_exec();
    // Last, so that everything above overlaps the host's check of its launcher.
    if (plan.go_ahead >= 0) {
      char word = 0;
      if (detail::retry_on_eintr([&]() noexcept { return ::read(plan.go_ahead, &word, 1); }) != 1 ||
          word != detail::go_ahead_byte) {
        return {ECANCELED, "reading the host's go-ahead", detail::ChildStage::supervision, -1};
      }
    }
    ::execve(program_.c_str(), argv_.data(), environment_.envp(fence.temporary_directory_assignment()));
    return {errno, "execve", detail::ChildStage::exec, -1};
  }

  /// The exit status of a child that stopped at `failed`.
  [[nodiscard]] static int failure_exit_code(const detail::ChildStep& failed) noexcept {
    return failed.stage == detail::ChildStage::exec && failed.error == ENOENT ? not_found_exit_code
                                                                              : cannot_run_exit_code;
  }

  [[noreturn]] static void fail_in_child(int error_pipe, const detail::ChildStep& failed) noexcept {
    const bool fence = failed.stage == detail::ChildStage::fence || failed.stage == detail::ChildStage::capabilities;
    if (error_pipe >= 0) {
      const detail::ChildFailure failure{fence ? 1 : 0, failed.error};
      detail::write_all(error_pipe, reinterpret_cast<const char*>(&failure), sizeof failure);
    } else {
      detail::write_text(STDERR_FILENO, fence ? "dsh: refusing to run the command: the fence could not be "
                                                "applied ("
                                              : "dsh: cannot run the command (");
      detail::write_text(STDERR_FILENO, failed.step);
      detail::write_text(STDERR_FILENO, " failed, errno ");
      detail::write_number(STDERR_FILENO, failed.error);
      detail::write_text(STDERR_FILENO, ")\n");
    }
    ::_exit(failure_exit_code(failed));
  }

#if defined(__linux__)
  /// The supervisor: the forked process between the host and the command. It never returns.
  ///
  /// Blocks every signal (it is stopped only by SIGKILL, and it reads SIGCHLD through a
  /// signalfd), resets the dispositions that are not the default (as its status in /proc
  /// lists them, with its capability sets), becomes a child subreaper, starts the command with
  /// vfork (the command shares this copy of the host only until exec), reports "started",
  /// closes everything of the host it inherited, then reaps until the command ends, the time
  /// limit passes or the host hangs up; kills and reaps every remaining descendant; reports
  /// how the call ended and exits with that status. Async-signal-safe throughout: the host
  /// may have other threads, whose locks this copy of it must never wait for.
  [[noreturn]] void supervise(const PreparedFence& fence, const detail::StartPlan& host_plan,
                              int report_fd) const noexcept {
    supervise(fence, host_plan, report_fd, detail::begin_supervision());
  }

  /// `supervise` in a process that already began its supervision (`begun`): a spare supervisor
  /// of a launcher's zygote, which did so before its call came.
  [[noreturn]] void supervise(const PreparedFence& fence, const detail::StartPlan& host_plan, int report_fd,
                              const detail::Supervision& begun) const noexcept {
    detail::StartPlan plan = host_plan;
    plan.bounding = begun.own.bounding;
    plan.ambient = begun.own.ambient;
    plan.ipc_namespace_made = begun.ipc_namespace_made;
    detail::SupervisorReport report{};
    const auto fail = [&report, report_fd](const detail::ChildStep& failed) noexcept {
      report.kind = detail::SupervisorReport::failed;
      report.stage = static_cast<int>(failed.stage);
      report.error = failed.error;
      report.detail = failed.capability;
      for (std::size_t i = 0; i + 1 < report.step.size() && failed.step[i] != '\0'; ++i) {
        report.step[i] = failed.step[i];
      }
      detail::write_all(report_fd, reinterpret_cast<const char*>(&report), sizeof report);
      ::_exit(failure_exit_code(failed));
    };
    if (begun.failed.error != 0) {
      fail(begun.failed);
    }
    const int children = begun.children;
    const int child_events = begun.child_events;
    // The user and PID namespaces are the supervisor's, so that the command it starts is PID 1
    // of the new one and the kernel ends everything in it with the command.
    if (const ApplyResult entered = fence.enter_supervisor_namespaces(); !entered.ok()) {
      fail({entered.error, entered.step, detail::ChildStage::fence, -1});
    }
    if (fence.enters_user_namespace()) {
      plan.bounding = ~0ULL;
      plan.ambient = 0;
    }
    plan.supervised = true;
    const long long deadline = limit_ms_ > 0 ? detail::monotonic_ms() + limit_ms_ : 0;
    ::pid_t command = -1;
    if (const detail::ChildStep failed = start_command(fence, plan, command); failed.error != 0) {
      fail(failed);
    }
    report.kind = detail::SupervisorReport::started;
    report.stage = ::getpid(); // the supervisor's own pid: the host does not know it when the launcher forked it
    report.detail = command;
    {
      // With a pidfd of itself, by which a host that is not its parent can see it gone.
      const UniqueFd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0U)));
      detail::send_report(report_fd, report, self.get());
    }
    detail::close_all_except({report_fd, children, child_events});
    // The kernel tears a mount namespace down, unmounting its whole tree, as the last process
    // in it exits and before that process can be reaped, so the layer's teardown would delay
    // the end of every call; held here, the namespace goes with this process's exit instead,
    // after the host has its report. Nobody can enter it meanwhile: this descriptor is its
    // only way in. (A command that exits first leaves nothing to hold.)
    const int held_namespace = fence.namespaces_.active ? detail::open_mount_namespace_of(command) : -1;
    static_cast<void>(held_namespace); // closed by _exit

    int status = 0;
    bool command_ended = false;
    bool none_left = false; // waitpid answered ECHILD: no child, so no descendant either
    int ending = detail::command_exited;
    // Reaps what is ready, at most `limit` children; returns true when more may be ready.
    // Bounded, so that a command whose descendants leave zombies faster than they are reaped
    // (chains of fork and exit, each step adopted here) cannot keep the deadline and the
    // host's hang-up from being looked at.
    const auto reap_ready = [&](int limit) noexcept {
      for (int reaped = 0; reaped < limit; ++reaped) {
        int raw = 0;
        const ::pid_t done = ::waitpid(-1, &raw, WNOHANG | __WALL);
        if (done <= 0) {
          none_left = done < 0 && errno == ECHILD;
          return false;
        }
        if (done == command) {
          status = raw;
          command_ended = true;
        }
      }
      return true;
    };
    for (;;) {
      const bool more = reap_ready(detail::reap_batch);
      if (command_ended) {
        break;
      }
      int timeout = more ? 0 : -1;
      if (deadline != 0) {
        const long long remaining = deadline - detail::monotonic_ms();
        if (remaining <= 0) {
          ending = detail::time_limit_reached;
          break;
        }
        if (!more) {
          timeout = static_cast<int>(std::min<long long>(remaining, std::numeric_limits<int>::max()));
        }
      }
      std::array<pollfd, 2> events{{{child_events, POLLIN, 0}, {report_fd, POLLIN, 0}}};
      if (::poll(events.data(), events.size(), timeout) < 0 && errno != EINTR) {
        ending = detail::host_cancelled;
        break;
      }
      if (events[0].revents != 0) {
        signalfd_siginfo drained{};
        while (::read(child_events, &drained, sizeof drained) > 0) {
        }
      }
      if (events[1].revents != 0) { // the host hung up: terminate() or its own death
        ending = detail::host_cancelled;
        break;
      }
    }
    if (!command_ended) {
      ::kill(command, SIGKILL);
    }
    // Kill what is left, reap what is dead, wait for one more, then look again: whoever a
    // killed process orphans is reparented here before its parent can be reaped, so the next
    // look finds it. For the same reason, ECHILD after the command was reaped means nothing of
    // the call is left. As many as the look listed (and a batch more) are reaped at each look,
    // so that the looks stay few: with one reaped per look, the zombies of a flood made the list
    // as long as the flood, read once per zombie (seconds after a time limit).
    while (!none_left) {
      const int listed = detail::kill_listed_children(children);
      static_cast<void>(reap_ready(listed + detail::reap_batch));
      if (none_left) {
        break;
      }
      int raw = 0;
      const ::pid_t done = ::waitpid(-1, &raw, __WALL);
      if (done < 0) {
        if (errno == EINTR) {
          continue;
        }
        break; // ECHILD: nothing of the call is left
      }
      if (done == command && !command_ended) {
        status = raw;
        command_ended = true;
      }
    }
    int exit_code = exit_status(status);
    if (ending == detail::time_limit_reached) {
      exit_code = timed_out_exit_code;
    } else if (ending == detail::host_cancelled && exit_code < 0) {
      exit_code = 128 + SIGKILL;
    }
    report.kind = detail::SupervisorReport::ended;
    report.error = exit_code;
    report.detail = ending;
    detail::write_all(report_fd, reinterpret_cast<const char*>(&report), sizeof report);
    ::_exit(exit_code & 0xff);
  }

  /// Starts the command with vfork and stores its pid in `command`; returns the failed step,
  /// or error 0. The child reports a failure through a close-on-exec pipe (its end closes
  /// when exec succeeds), which works whether vfork shares this memory or, as under some
  /// sanitizers, behaves like fork.
  [[nodiscard]] detail::ChildStep start_command(const PreparedFence& fence, const detail::StartPlan& plan,
                                                ::pid_t& command) const noexcept {
    int ends[2] = {-1, -1};
    if (::pipe2(ends, O_CLOEXEC) != 0) {
      return {errno, "pipe2", detail::ChildStage::supervision, -1};
    }
    command = ::vfork();
    if (command == 0) {
      ::close(ends[0]);
      // If the supervisor dies the command dies with it; what it started is then on its own
      // (LandlockError from wait()).
      ::prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(SIGKILL), 0UL, 0UL, 0UL);
      const detail::ChildStep failed = start_in_child(fence, plan);
      (void)detail::write_all(ends[1], reinterpret_cast<const char*>(&failed), sizeof failed);
      ::_exit(failure_exit_code(failed));
    }
    const int vfork_error = errno;
    ::close(ends[1]);
    if (command < 0) {
      ::close(ends[0]);
      return {vfork_error, "vfork", detail::ChildStage::supervision, -1};
    }
    detail::ChildStep failed{};
    std::size_t got = 0;
    while (got < sizeof failed) {
      const ::ssize_t part = ::read(ends[0], reinterpret_cast<char*>(&failed) + got, sizeof failed - got);
      if (part < 0 && errno == EINTR) {
        continue;
      }
      if (part <= 0) {
        break;
      }
      got += static_cast<std::size_t>(part);
    }
    ::close(ends[0]);
    if (got == 0) {
      return {}; // the pipe closed on exec: the command is running
    }
    int ignored = 0;
    while (::waitpid(command, &ignored, 0) < 0 && errno == EINTR) {
    }
    if (got < sizeof failed || failed.error == 0) {
      return {EIO, "reading the child's start report", detail::ChildStage::supervision, -1};
    }
    return failed;
  }
#endif

  std::vector<std::string> args_;
  std::vector<char*> argv_;
  std::string program_;
  detail::CommandEnvironment environment_;
  std::filesystem::path directory_;
  std::array<int, 3> stdio_{-1, -1, -1};
  int terminal_ = -1;
  long long limit_ms_ = 0;
  OutputSink sink_;
  Launch launch_ = Launch::automatic;
};

} // namespace dsh

// FencedCommand::capture: a call's output kept in memory.
namespace dsh {

inline CommandOutput FencedCommand::capture(const PreparedFence& fence, CaptureOptions options) const {
  if (stdio_[1] >= 0 || stdio_[2] >= 0 || terminal_ >= 0) {
    throw ConfigError("FencedCommand::capture: expected stdout and stderr as pipes to capture, got " +
                      std::string(terminal_ >= 0 ? "a controlling terminal" : "a redirect of stdout or stderr"));
  }
  DenialScanner scanner =
      fence.denial_scanner(directory_.empty() ? std::filesystem::path(detail::current_directory()) : directory_);
  CommandOutput output;
  const std::size_t limit = options.max_bytes;
  const auto keep = [&output, limit](std::string& into, std::string_view bytes) {
    const std::size_t room = limit - std::min(limit, into.size());
    into.append(bytes.substr(0, room));
    output.truncated = output.truncated || bytes.size() > room;
  };
  FencedChild child = start(
      fence,
      [&](CommandStream stream, std::string_view bytes) {
        if (stream == CommandStream::err) {
          keep(output.err, bytes);
          scanner.feed(bytes);
        } else {
          keep(output.out, bytes);
        }
      },
      std::move(options.stdin_bytes));
  output.status = child.wait();
  scanner.finish();
  output.denied = scanner.denied();
  output.denied_paths = scanner.paths();
  return output;
}

} // namespace dsh
