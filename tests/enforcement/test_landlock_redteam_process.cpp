// Hostile commands against the process side of the fence (FencedCommand): the command is the
// attacker, the host is trusted. Each attempt runs as a real command under a real fence, on
// real files and pseudo-terminals:
//   * stdio and terminal: TIOCSTI into the terminal it was handed, ftruncate / lseek / reopen
//     of the host's stdout redirected to a file;
//   * capabilities as root: mknod of devices, ptrace of the host, the capability sets;
//   * lifetime: a detached double-forked writer, a background child holding stderr, a
//     leftover flock holder, the time limit, killing its own supervisor.
// Lifetime attempts run in a forked "host" process guarded by an alarm (a hang fails the test
// instead of stalling it), as root and again as the unprivileged uid 65534.
//
// The syscall-level attempts run this test executable itself as the command: when
// DSH_HOSTILE names an attempt, a static initializer performs it and exits before Catch2 starts.
#include "support/hosts.hpp"
#include "support/landlock.hpp"
#include "support/terminal.hpp"

#include <dsh/fence_launcher.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

using namespace dsh;
using namespace dsh::test;

namespace {

// ------------------------------------------------------------------------------------------
// The hostile side: this executable, started as the fenced command with DSH_HOSTILE set.
// ------------------------------------------------------------------------------------------

/// The capabilities of FENCE_DROPPED_CAPABILITIES still in this process's sets.
int report_capabilities() {
  dsh::detail::CapabilityHeader header{dsh::detail::capability_version_3, 0};
  std::array<dsh::detail::CapabilityData, 2> sets{};
  if (::syscall(SYS_capget, &header, sets.data()) != 0) {
    return 90;
  }
  std::uint64_t held = 0;
  for (std::size_t word = 0; word < 2; ++word) {
    held |= std::uint64_t{sets[word].effective | sets[word].permitted | sets[word].inheritable} << (32U * word);
  }
  std::uint64_t bounding = 0;
  std::uint64_t ambient = 0;
  for (const dsh::FenceCapability& capability : dsh::FENCE_DROPPED_CAPABILITIES) {
    const auto number = static_cast<unsigned long>(capability.number);
    if (::prctl(PR_CAPBSET_READ, number, 0UL, 0UL, 0UL) == 1) {
      bounding |= 1ULL << number;
    }
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, number, 0UL, 0UL) == 1) {
      ambient |= 1ULL << number;
    }
  }
  std::printf("held=%llx bounding=%llx ambient=%llx\n",
              static_cast<unsigned long long>(held & dsh::fence_dropped_capabilities()),
              static_cast<unsigned long long>(bounding), static_cast<unsigned long long>(ambient));
  return 0;
}

/// One attempt, named by DSH_HOSTILE, with its argument in DSH_HOSTILE_ARG; prints what the
/// kernel answered (0 or an errno) and returns the exit status.
int hostile(std::string_view action, const std::string& arg) {
  if (action == "tiocsti") { // type into the terminal on stdin, and into the one named `arg`
    const char key = 'X';
    const int on_stdin = errno_of(::ioctl(STDIN_FILENO, TIOCSTI, &key));
    const int fd = ::open(arg.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC);
    const int by_name = fd < 0 ? errno : errno_of(::ioctl(fd, TIOCSTI, &key));
    std::printf("stdin=%d by-name=%d\n", on_stdin, by_name);
    return 0;
  }
  if (action == "stdio") { // truncate, seek and reopen the host's stdout (`arg`: the host's pid)
    const int truncated = errno_of(::ftruncate(STDOUT_FILENO, 0));
    const int seeked = errno_of(::lseek(STDOUT_FILENO, 0, SEEK_SET));
    const int reopened = ::open("/proc/self/fd/1", O_WRONLY | O_TRUNC | O_CLOEXEC);
    const int reopen = reopened < 0 ? errno : errno_of(::write(reopened, "via-proc\n", 9));
    int host = -1;
    if (!arg.empty()) {
      const std::string path = "/proc/" + arg + "/fd/1";
      const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      host = fd < 0 ? errno : 0;
    }
    std::fprintf(stderr, "ftruncate=%d lseek=%d reopen=%d host=%d\n", truncated, seeked, reopen, host);
    return 0;
  }
  if (action == "ptrace") { // attach to the host (`arg`: its pid); SEIZE does not stop it
    const auto pid = static_cast<::pid_t>(std::stol(arg));
    const int seized = errno_of(::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr));
    if (seized == 0) {
      ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
    }
    std::printf("seize=%d\n", seized);
    return 0;
  }
  if (action == "mknod") { // a second /dev/null and a second /dev/loop0 in directory `arg`
    const int character = errno_of(::mknod((arg + "/char").c_str(), S_IFCHR | 0600, ::makedev(1, 3)));
    const int block = errno_of(::mknod((arg + "/block").c_str(), S_IFBLK | 0600, ::makedev(7, 0)));
    std::printf("char=%d block=%d\n", character, block);
    return 0;
  }
  if (action == "process-group") { // join a group of its session (`arg`: the host's), renice "its own"
    // the supervisor's group: the host's when the host forked it, else the launcher's and its zygotes'
    const ::pid_t parent_group = ::getpgid(::getppid());
    const auto host_group = static_cast<::pid_t>(std::stol(arg));
    const bool own_group = ::getpgrp() == ::getpid();
    const bool parent_session = ::getsid(0) == ::getsid(::getppid());
    const int tty = ::open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC);
    const int tty_error = tty < 0 ? errno : 0;
    // the scheduling group it shares with its session (opened for writing, nothing written)
    const int autogroup = ::open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC);
    const int autogroup_error = autogroup < 0 ? errno : 0;
    if (autogroup >= 0) {
      ::close(autogroup);
    }
    const int join_parent = errno_of(::setpgid(0, parent_group));
    const int join_host = errno_of(::setpgid(::getpid(), host_group));
    const int renice = errno_of(::setpriority(PRIO_PGRP, 0, 19));
    // what a command may still do: a group of its own, led by itself or by a child
    const int own = errno_of(::setpgid(0, 0));
    const int explicit_own = errno_of(::setpgid(::getpid(), ::getpid()));
    // refused although harmless: the filter does not know the caller's pid (pinned)
    const int zero_then_pid = errno_of(::setpgid(0, ::getpid()));
    std::printf("own-group=%d parent-session=%d tty=%d autogroup=%d join-parent=%d join-host=%d renice=%d own=%d "
                "explicit-own=%d zero-then-pid=%d\n",
                own_group ? 1 : 0, parent_session ? 1 : 0, tty_error, autogroup_error, join_parent, join_host, renice,
                own, explicit_own, zero_then_pid);
    return 0;
  }
  if (action == "orphan") { // make the kernel SIGHUP group `arg` (default: its session leader's) as orphaned
    const ::pid_t target = arg.empty() ? ::getsid(0) : static_cast<::pid_t>(std::stol(arg));
    std::array<int, 2> ready{-1, -1};
    if (::pipe(ready.data()) != 0) {
      return 90;
    }
    if (::fork() == 0) { // G: its child D joins the target group and stops; G then leaves the session
      const ::pid_t stopped = ::fork();
      if (stopped == 0) {
        if (::setpgid(0, target) != 0) {
          ::_exit(errno);
        }
        ::kill(::getpid(), SIGSTOP);
        ::_exit(0);
      }
      int status = 0;
      ::waitpid(stopped, &status, WUNTRACED);
      const char joined = static_cast<char>(WIFSTOPPED(status) ? 0 : WIFEXITED(status) ? WEXITSTATUS(status) : 99);
      ::setsid(); // D's parent is now outside the session: D no longer ties the group to it
      static_cast<void>(::write(ready[1], &joined, 1));
      ::waitpid(stopped, &status, 0); // until the kernel's SIGHUP, or the end of the call
      ::_exit(0);
    }
    char joined = 99;
    static_cast<void>(::read(ready[0], &joined, 1));
    int tie = -1;
    if (joined == 0) { // X joins too and exits: the group is orphaned, with D stopped in it
      const ::pid_t tying = ::fork();
      if (tying == 0) {
        ::_exit(::setpgid(0, target) != 0 ? errno : 0);
      }
      int status = 0;
      ::waitpid(tying, &status, 0);
      tie = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
      ::usleep(200000); // the kernel's signals are sent as X exits; let them land
    }
    std::printf("join=%d tie=%d\n", joined, tie);
    return 0;
  }
  if (action == "caps") {
    return report_capabilities();
  }
  if (action == "signals") { // the blocked and the ignored signals it started with
    const std::string status = read_file("/proc/self/status");
    for (const std::string_view key : {"SigBlk:", "SigIgn:"}) {
      const std::size_t at = status.find("\n" + std::string(key));
      if (at != std::string::npos) {
        std::printf("%s\n", status.substr(at + 1, status.find('\n', at + 1) - at - 1).c_str());
      }
    }
    return 0;
  }
  return 99;
}

[[maybe_unused]] const bool hostile_ran = [] {
  if (const char* action = std::getenv("DSH_HOSTILE"); action != nullptr) {
    const char* arg = std::getenv("DSH_HOSTILE_ARG");
    const int status = hostile(action, arg != nullptr ? arg : "");
    std::fflush(nullptr);
    ::_exit(status);
  }
  return false;
}();

/// A copy of this test executable that every user can run: the unprivileged host (uid 65534)
/// runs it too, and the build tree may sit in a directory only its owner can enter (a 0700
/// scratch directory, a home directory). Made once; removed with the process.
const std::string& hostile_program() {
  static const dsh::test::TempDir dir;
  static const std::string path = [] {
    std::array<char, 4096> self{};
    const ::ssize_t length = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
    REQUIRE(length > 0);
    const std::filesystem::path copy = dir / "hostile";
    std::filesystem::copy_file(std::string(self.data(), static_cast<std::size_t>(length)), copy);
    REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
    REQUIRE(::chmod(copy.c_str(), 0755) == 0);
    return copy.string();
  }();
  return path;
}

/// This test executable as a fenced command performing `action` with `arg`.
FencedCommand hostile_command(const std::string& action, const std::string& arg = {}) {
  return FencedCommand({"env", "DSH_HOSTILE=" + action, "DSH_HOSTILE_ARG=" + arg, hostile_program()});
}

// ------------------------------------------------------------------------------------------
// The host side.
// ------------------------------------------------------------------------------------------

/// `std::to_string` of an errno constant, as the hostile side prints it.
std::string n(int value) { return std::to_string(value); }

/// Puts the terminal whose child side is `slave` in raw mode, so that a key typed into it is
/// readable at once and not echoed.
void make_raw(int slave) {
  termios raw{};
  REQUIRE(::tcgetattr(slave, &raw) == 0);
  ::cfmakeraw(&raw);
  REQUIRE(::tcsetattr(slave, TCSANOW, &raw) == 0);
}

/// The input queued on the terminal `slave` (what its next reader receives), read without waiting.
std::string queued_input(int slave) {
  std::string text;
  pollfd ready{slave, POLLIN, 0};
  while (::poll(&ready, 1, 0) > 0) {
    std::array<char, 64> buffer{};
    const ::ssize_t got = ::read(slave, buffer.data(), buffer.size());
    if (got <= 0) {
      break;
    }
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  return text;
}

/// The control of the TIOCSTI attempts: an unfenced child whose controlling terminal `slave`
/// becomes types "C" into it. Returns 0, the errno of TIOCSTI (EIO where the kernel has it
/// disabled, dev.tty.legacy_tiocsti = 0), or 200 when the terminal could not be taken.
int type_on_own_terminal(int slave) {
  return dsh::test::unfenced([slave] {
    const char key = 'C';
    if (::setsid() < 0 || ::ioctl(slave, TIOCSCTTY, 0) != 0) {
      return 200;
    }
    return errno_of(::ioctl(slave, TIOCSTI, &key));
  });
}

/// What a call printed and how it ended.
using Call = dsh::test::Shell;

/// `dsh::test::as_host`, once this executable's copy exists (made while this process can
/// still read the original).
std::string as_host_with_copy(bool unprivileged, const std::function<std::string()>& body) {
  (void)hostile_program();
  return dsh::test::as_host(unprivileged, body);
}

/// True when process `pid` no longer exists (not even as a zombie).
bool gone(::pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

/// The first line of `text` as a pid (0 when it is not one).
::pid_t first_pid(const std::string& text) {
  const std::string line = text.substr(0, text.find('\n'));
  if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return static_cast<::pid_t>(std::stol(line));
}

const std::array<SandboxMode, 3> all_modes{SandboxMode::read_only, SandboxMode::workspace_write,
                                           SandboxMode::danger_full_access};

/// The unprivileged host of this file is also given the laboratory's temporary area, where its
/// commands write.
std::array<std::filesystem::path, 1> also_to_nobody(const Lab& lab) { return {lab.tmp_area()}; }

/// `dsh::test::open_lab_to_nobody` with the temporary area.
void open_lab_and_tmp_to_nobody(const Lab& lab) { dsh::test::open_lab_to_nobody(lab, also_to_nobody(lab)); }

/// The table host x every mode of this file (see `dsh::test::over_host_mode_table`).
void over_hosts_and_modes(const Lab& lab, const std::function<void(bool unprivileged, SandboxMode mode)>& attempt) {
  dsh::test::over_host_mode_table(lab, all_modes, also_to_nobody(lab), attempt);
}

/// The table of hosts alone (see `dsh::test::over_host_table`).
void over_hosts(const Lab& lab, const std::function<void(bool unprivileged)>& attempt) {
  dsh::test::over_host_table(lab, also_to_nobody(lab), attempt);
}

} // namespace

// ==========================================================================================
// stdio, session and terminal
// ==========================================================================================

TEST_CASE("redteam: the command's stdio is /dev/null and two relayed pipes, in a group or session of its own") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  for (const SandboxMode mode : all_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    FencedCommand command({"bash", "-c",
                           "readlink /proc/self/fd/0; readlink /proc/self/fd/1 | cut -c1-5; "
                           "readlink /proc/self/fd/2 >&2; cat; "
                           "[ \"$(ps -o sid= -p $$ | tr -d ' ')\" = $$ ] && echo own-session; "
                           "[ \"$(ps -o pgid= -p $$ | tr -d ' ')\" = $$ ] && echo own-group; "
                           "tty || echo \"tty=$?\""});
    const Call call = run_captured(command, fence);
    CHECK(call.status == 0);
    // Under the system-call filter, which confines setpgid, the command keeps the host's
    // session (a new one is a new scheduling group); danger-full-access has no filter.
    const std::string session = mode == SandboxMode::danger_full_access ? "own-session\n" : "";
    CHECK(call.out == "/dev/null\npipe:\n" + session + "own-group\nnot a tty\ntty=1\n");
    CHECK(call.err.rfind("pipe:[", 0) == 0);
  }
}

// A filtered command off the terminal family, started from the launcher's zygote, stays in the
// session the zygote leads (a new session is a new scheduling group), in a process group of its
// own; started by a fork of the host it leads a new session, as every unfiltered command does.
// The host here leads a session on a terminal, as a host started from the user's shell does,
// and runs each mode both ways. The command joins its supervisor's group and tries the host's,
// then renices "its own" group, which would be theirs: refused.
TEST_CASE("redteam: a command cannot renice a process group it joins, reach the host's, nor keep the host's "
          "terminal") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const Pty pty(24, 80);
  const int slave = pty.slave();
  open_lab_and_tmp_to_nobody(lab);
  use_launcher_nobody_reaches(lab); // the build directory may be closed to uid 65534
  const LauncherRestorer restore;
  for (const bool unprivileged : host_table) {
    CAPTURE(unprivileged);
    const std::string seen = as_host_with_copy(unprivileged, [&] {
      if (::setsid() < 0 || ::ioctl(slave, TIOCSCTTY, 0) != 0) {
        return std::string("cannot take the terminal: ") + std::strerror(errno);
      }
      const ::pid_t group = ::getpgrp();
      errno = 0;
      const int nice_before = ::getpriority(PRIO_PGRP, 0);
      std::string text;
      for (const Launch how : {Launch::fork, Launch::launcher}) {
        for (const SandboxMode mode : all_modes) {
          const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
          FencedCommand command = hostile_command("process-group", std::to_string(group));
          command.launch(how);
          const Call call = run_captured(command, fence);
          text += std::string(how == Launch::fork ? "fork " : "launcher ") + std::string(dsh::to_string(mode)) + ": " +
                  call.out;
        }
      }
      errno = 0;
      const int nice_after = ::getpriority(PRIO_PGRP, 0);
      const bool terminal_kept = ::tcgetsid(slave) == ::getsid(0);
      text += "host: group " + std::string(::getpgrp() == group ? "kept" : "changed") + ", nice " +
              std::to_string(nice_before) + " -> " + std::to_string(nice_after) + ", terminal " +
              (terminal_kept ? "kept" : "lost") + "\n";
      return text;
    });
    // Through fork every command leads a new session (the host's could hold the user's shell's
    // group): no other group is within the kernel's reach, nor a new group for a session leader.
    // Through the launcher a filtered command stays in the session its zygote leads, in a group
    // of its own: it may join its supervisor's group (each supervisor has its own), never the
    // host's (another session's). Under the filter no group can be reniced, not even its own;
    // the scheduling group is never writable under Landlock. No fenced command has a
    // controlling terminal (ENXIO), and the read fence refuses /dev/tty first (EACCES).
    const auto attempt = [](bool forked, bool filtered) {
      const bool zygote = !forked && filtered;
      const std::string no_group = n(EPERM);
      return "own-group=1 parent-session=" + std::string(zygote ? "1" : "0") +
             " tty=" + (filtered ? n(EACCES) : n(ENXIO)) + " autogroup=" + (filtered ? n(EACCES) : std::string("0")) +
             " join-parent=" + (zygote ? std::string("0") : no_group) + " join-host=" + n(EPERM) +
             " renice=" + (filtered ? n(EPERM) : std::string("0")) + " own=" + (zygote ? std::string("0") : no_group) +
             " explicit-own=" + (zygote ? std::string("0") : no_group) +
             " zero-then-pid=" + (zygote ? std::string("0") : no_group) + "\n";
    };
    std::string expected;
    for (const bool forked : {true, false}) {
      const std::string how = forked ? "fork " : "launcher ";
      for (const SandboxMode mode : all_modes) {
        expected += how;
        expected += dsh::to_string(mode);
        expected += ": ";
        expected += attempt(forked, mode != SandboxMode::danger_full_access);
      }
    }
    CHECK(seen == expected + "host: group kept, nice 0 -> 0, terminal kept\n");
  }
}

// The kernel sends SIGHUP and SIGCONT to every member of a process group that becomes orphaned
// while one of its members is stopped (Landlock's signal scope does not cover signals the kernel
// sends). A command that could put a stopped process into a group of the host's session (the
// user's shell's group, or the host's when it leads its session) could have that group
// hung up. Through fork the command leads its own session, so the host's group is out of reach;
// through the launcher its session is the zygote's, whose group it can orphan: the zygote
// ignores SIGHUP and every supervisor has a group of its own, so the launcher, its zygote and
// the next call carry on. (On this kernel the SIGHUP reaches only the stopped members; mainline
// sends it to the whole group.)
TEST_CASE("redteam: an orphaned process group a command makes hangs up neither the host nor the launcher") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const Pty pty(24, 80);
  const int slave = pty.slave();
  open_lab_and_tmp_to_nobody(lab);
  use_launcher_nobody_reaches(lab); // the build directory may be closed to uid 65534
  const LauncherRestorer restore;
  for (const bool unprivileged : host_table) {
    CAPTURE(unprivileged);
    const std::string seen = as_host_with_copy(unprivileged, [&] {
      static volatile std::sig_atomic_t hangups = 0;
      static volatile std::sig_atomic_t continues = 0;
      struct sigaction count {};
      count.sa_handler = [](int signal) {
        if (signal == SIGHUP) {
          hangups = hangups + 1;
        } else {
          continues = continues + 1;
        }
      };
      ::sigemptyset(&count.sa_mask);
      count.sa_flags = SA_RESTART;
      if (::setsid() < 0 || ::ioctl(slave, TIOCSCTTY, 0) != 0 || ::sigaction(SIGHUP, &count, nullptr) != 0 ||
          ::sigaction(SIGCONT, &count, nullptr) != 0) {
        return std::string("cannot set the host up: ") + std::strerror(errno);
      }
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
      std::string text;
      // fork: aimed at the host's group; launcher: at the zygote's (the command's session leader)
      FencedCommand forked = hostile_command("orphan", std::to_string(::getpgrp()));
      forked.launch(Launch::fork);
      text += "fork: " + run_captured(forked, fence).out;
      FencedCommand warm({"true"});
      warm.launch(Launch::launcher);
      const int warmed = run_captured(warm, fence).status;
      const ::pid_t launcher = FenceLauncher::pid();
      const std::string zygotes =
          read_file("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
      FencedCommand through = hostile_command("orphan");
      through.launch(Launch::launcher);
      text += "launcher: " + run_captured(through, fence).out;
      FencedCommand next({"true"});
      next.launch(Launch::launcher);
      const int after = run_captured(next, fence).status;
      text +=
          "calls " + std::to_string(warmed) + " " + std::to_string(after) + ", launcher " +
          (FenceLauncher::pid() == launcher ? "kept" : "changed") + ", zygotes " +
          (read_file("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children") == zygotes
               ? "kept"
               : "changed") +
          ", host hangups " + std::to_string(hangups) + ", continues " + std::to_string(continues) + "\n";
      return text;
    });
    CHECK(seen == "fork: join=" + n(EPERM) +
                      " tie=-1\nlauncher: join=0 tie=0\ncalls 0 0, launcher kept, zygotes kept, "
                      "host hangups 0, continues 0\n");
  }
}

TEST_CASE("redteam: TIOCSTI cannot type into a terminal the command was handed") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const Pty pty(24, 80);
  const int slave = pty.slave();
  make_raw(slave);
  const std::string& tty_path = pty.name();
  // What the user's shell (the reader of the terminal) would receive.
  const auto injected = [slave] { return queued_input(slave); };

  const int control = type_on_own_terminal(slave);
  if (control == EIO) {
    DSH_TEST_SKIP("this kernel has TIOCSTI disabled (dev.tty.legacy_tiocsti = 0): nothing to attack");
  }
  REQUIRE(control == 0);
  REQUIRE(injected() == "C");

  for (const SandboxMode mode : all_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    FencedCommand command = hostile_command("tiocsti", tty_path);
    command.redirect(STDIN_FILENO, slave); // the host's choice: it hands over the user's terminal
    const Call call = run_captured(command, fence);
    CHECK(call.status == 0);
    if (mode == SandboxMode::danger_full_access && ::geteuid() == 0) {
      // Documented limit: danger-full-access keeps root's CAP_SYS_ADMIN, which lets TIOCSTI
      // type into any terminal it can open.
      CHECK(call.out == "stdin=0 by-name=0\n");
      CHECK(injected() == "XX");
    } else {
      // Opened by name after the fence, the terminal's ioctls are Landlock's to refuse (ABI 5).
      CHECK(call.out == "stdin=" + n(EPERM) + " by-name=" + n(dsh::landlock_abi() >= 5 ? EACCES : EPERM) + "\n");
      CHECK(injected().empty());
    }
  }
  // An unprivileged host, every mode.
  open_lab_and_tmp_to_nobody(lab);
  const std::string seen = as_host_with_copy(true, [&] {
    std::string text;
    for (const SandboxMode mode : all_modes) {
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
      FencedCommand command = hostile_command("tiocsti", tty_path);
      command.redirect(STDIN_FILENO, slave);
      Call call = run_captured(command, fence);
      text += std::string(dsh::to_string(mode)) + ": " + call.out;
    }
    return text;
  });
  // The terminal device is root's (mode 620): opening it by name is refused before TIOCSTI.
  const std::string expected = "stdin=" + n(EPERM) + " by-name=" + n(EACCES) + "\n";
  CHECK(seen == "read-only: " + expected + "workspace-write: " + expected + "danger-full-access: " + expected);
  CHECK(injected().empty());
}

// The terminal family: the terminal is the command's controlling terminal, on which the kernel
// lets TIOCSTI type without cap_sys_admin (dev.tty.legacy_tiocsti = 1); what it typed would stay
// queued for the host's next call on that terminal, which runs it under its own policy.
TEST_CASE("redteam: the terminal family cannot type into its own terminal for the next call") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const Pty pty(24, 80);
  const int slave = pty.slave();
  make_raw(slave);
  const auto queued = [slave] { return queued_input(slave); }; // what the terminal's next reader gets
  const int control = type_on_own_terminal(slave);
  if (control == EIO) {
    DSH_TEST_SKIP("this kernel has TIOCSTI disabled (dev.tty.legacy_tiocsti = 0): nothing to attack");
  }
  REQUIRE(control == 0);
  REQUIRE(queued() == "C");

  const auto attempts = [&] {
    std::string text;
    // danger-full-access is unrestricted: it may type as it may write the user's shell startup.
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      FenceOptions options;
      options.terminal = pty.name();
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode), options);
      const std::filesystem::path out = lab.outside() / ("tiocsti-" + std::to_string(::geteuid()) + ".out");
      const dsh::UniqueFd file{::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
      if (!file) {
        return std::string("cannot open the output file");
      }
      // Its stdin and /dev/tty are both the controlling terminal.
      FencedCommand command = hostile_command("tiocsti", "/dev/tty");
      command.controlling_terminal(slave).redirect(STDOUT_FILENO, file.get()).in_directory(lab.workspace());
      const int status = command.run(fence);
      text += std::string(dsh::to_string(mode)) + ": " + std::to_string(status) + " " + read_file(out);
      std::filesystem::remove(out);
    }
    return text;
  };
  const std::string refused = "0 stdin=" + n(EPERM) + " by-name=" + n(EPERM) + "\n";
  const std::string expected = "read-only: " + refused + "workspace-write: " + refused;
  CHECK(attempts() == expected);
  CHECK(queued().empty());
  open_lab_and_tmp_to_nobody(lab);
  CHECK(as_host_with_copy(true, attempts) == expected);
  CHECK(queued().empty());
}

TEST_CASE("redteam: the host's stdout redirected to a file cannot be truncated, seeked or reopened") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_hosts_and_modes(lab, [&](bool unprivileged, SandboxMode mode) {
    const std::filesystem::path out_path = lab.outside() / "host-stdout.txt";
    const std::filesystem::path err_path = lab.outside() / "host-stderr.txt";
    write_file(out_path, "host output\n");
    write_file(err_path, "");
    if (unprivileged) {
      dsh::test::hand_to_nobody(out_path);
      dsh::test::hand_to_nobody(err_path);
    }
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string host = as_host_with_copy(unprivileged, [&] {
      // The host's own stdout and stderr are the two files, as after `host > out 2> err`.
      const dsh::UniqueFd out{::open(out_path.c_str(), O_WRONLY | O_APPEND)};
      const dsh::UniqueFd err{::open(err_path.c_str(), O_WRONLY)};
      if (!out || !err || ::dup2(out.get(), STDOUT_FILENO) < 0 || ::dup2(err.get(), STDERR_FILENO) < 0) {
        return std::string("cannot set up the host's stdio");
      }
      // danger-full-access may reopen any file by name, the host's /proc entry included
      // (not part of this attempt: that is the mode's definition).
      const std::string host_pid = mode == SandboxMode::danger_full_access ? "" : std::to_string(::getpid());
      FencedCommand command = hostile_command("stdio", host_pid);
      command.in_directory(lab.workspace());
      return "status=" + std::to_string(command.run(fence)); // relayed to the two files
    });
    CHECK(host == "status=0");
    // The relay appended what the command wrote through /proc/self/fd/1 (its own pipe).
    CHECK(read_file(out_path) == "host output\nvia-proc\n");
    const std::string host_answer = mode == SandboxMode::danger_full_access ? "-1" : n(EACCES);
    CHECK(read_file(err_path) ==
          "ftruncate=" + n(EINVAL) + " lseek=" + n(ESPIPE) + " reopen=0 host=" + host_answer + "\n");
  });
}

TEST_CASE("redteam: redirect hands over the host's descriptor, as documented") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path out_path = lab.outside() / "handed.txt";
  write_file(out_path, "host output\n");
  const dsh::UniqueFd out{::open(out_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC)};
  REQUIRE(out);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  FencedCommand command({"bash", "-c", "echo appended"});
  command.redirect(STDOUT_FILENO, out.get());
  CHECK(command.run(fence) == 0);
  CHECK(read_file(out_path) == "host output\nappended\n");
}

TEST_CASE("redteam: a terminal the host chooses becomes the command's controlling terminal") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  Pty pty(24, 100);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  FencedCommand command({"bash", "--norc", "--noprofile", "-c", "tty; stty size; read line; echo \"got=$line\""});
  command.controlling_terminal(pty.slave()).in_directory(lab.workspace());
  FencedChild child = command.spawn(fence);
  pty.close_slave(); // the terminal closes when the command's side is gone
  const std::string typed = "hello\n";
  REQUIRE(::write(pty.master(), typed.data(), typed.size()) == static_cast<::ssize_t>(typed.size()));
  std::string screen;
  std::array<char, 1024> buffer{};
  for (;;) {
    pollfd ready{pty.master(), POLLIN, 0};
    if (::poll(&ready, 1, 60000) <= 0) { // a guard against a hung command, not a timing assertion
      break;
    }
    const ::ssize_t got = ::read(pty.master(), buffer.data(), buffer.size());
    if (got <= 0) {
      break;
    }
    screen.append(buffer.data(), static_cast<std::size_t>(got));
  }
  CHECK(child.wait() == 0);
  CAPTURE(screen);
  CHECK(screen.find(pty.name() + "\r\n") != std::string::npos);
  CHECK(screen.find("24 100\r\n") != std::string::npos);
  CHECK(screen.find("got=hello\r\n") != std::string::npos);
}

// ==========================================================================================
// capabilities (root)
// ==========================================================================================

TEST_CASE("redteam: root gives up the dropped capabilities in the fenced modes") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the capability drop is what stands between root and these attempts");
  }
  const Lab lab;
  // Without Landlock (allow_unfenced) the capability drop is all that refuses: exact EPERM.
  const PreparedFence caps_only =
      dsh::detail::prepare_fence(lab.policy(SandboxMode::read_only), {.allow_unfenced = true}, {0, ENOSYS}, nullptr);
  REQUIRE(caps_only.report().status == dsh::FenceStatus::unfenced);

  SECTION("the capability sets") {
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      CAPTURE(dsh::to_string(mode));
      FencedCommand command = hostile_command("caps");
      const Call call = run_captured(command, dsh::test::prepare_base(lab.policy(mode)));
      CHECK(call.out == "held=0 bounding=0 ambient=0\n");
    }
    FencedCommand command = hostile_command("caps");
    CHECK(run_captured(command, caps_only).out == "held=0 bounding=0 ambient=0\n");
    FencedCommand full = hostile_command("caps");
    const Call unrestricted = run_captured(full, dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access)));
    CHECK(unrestricted.out.rfind("held=0 ", 0) != 0); // danger-full-access keeps root's capabilities
  }

  SECTION("mknod of a character and a block device") {
    FencedCommand control = hostile_command("mknod", lab.workspace().string());
    CHECK(run_captured(control, dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access))).out ==
          "char=0 block=0\n"); // possible at all: danger-full-access keeps CAP_MKNOD
    CHECK(exists_nofollow(lab.workspace() / "char"));
    std::filesystem::remove(lab.workspace() / "char");
    std::filesystem::remove(lab.workspace() / "block");

    FencedCommand unfenced = hostile_command("mknod", lab.workspace().string());
    CHECK(run_captured(unfenced, caps_only).out == "char=" + n(EPERM) + " block=" + n(EPERM) + "\n");
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      CAPTURE(dsh::to_string(mode));
      FencedCommand command = hostile_command("mknod", lab.workspace().string());
      const std::string out = run_captured(command, dsh::test::prepare_base(lab.policy(mode))).out;
      if (mode == SandboxMode::read_only) {
        CHECK(out == "char=" + n(EACCES) + " block=" + n(EACCES) + "\n"); // Landlock answers first
      } else {
        // EPERM: the capability is gone; EACCES where Landlock also withholds make_char and
        // make_block beneath the workspace.
        CHECK((out == "char=" + n(EPERM) + " block=" + n(EPERM) + "\n" ||
               out == "char=" + n(EACCES) + " block=" + n(EACCES) + "\n"));
      }
    }
    CHECK_FALSE(exists_nofollow(lab.workspace() / "char"));
    CHECK_FALSE(exists_nofollow(lab.workspace() / "block"));
  }

  SECTION("ptrace of the host") {
    const std::string host = std::to_string(::getpid());
    FencedCommand unfenced = hostile_command("ptrace", host);
    CHECK(run_captured(unfenced, caps_only).out == "seize=" + n(EPERM) + "\n");
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      CAPTURE(dsh::to_string(mode));
      FencedCommand command = hostile_command("ptrace", host);
      CHECK(run_captured(command, dsh::test::prepare_base(lab.policy(mode))).out == "seize=" + n(EPERM) + "\n");
    }
  }
}

TEST_CASE("redteam: root with ambient capabilities and a smaller bounding set gives up the dropped ones") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: only a privileged host can raise ambient capabilities");
  }
  const Lab lab;
  const std::string seen = as_host_with_copy(false, [&] {
    // cap_net_admin (dropped) and cap_chown (kept) inheritable, then ambient; cap_sys_boot
    // (dropped) already gone from the bounding set, which the supervisor then reads as such.
    constexpr unsigned net_admin = 12;
    constexpr unsigned chown = 0;
    constexpr unsigned sys_boot = 22;
    dsh::detail::CapabilityHeader header{dsh::detail::capability_version_3, 0};
    std::array<dsh::detail::CapabilityData, 2> sets{};
    if (::syscall(SYS_capget, &header, sets.data()) != 0) {
      return std::string("capget failed");
    }
    sets[0].inheritable |= (1U << net_admin) | (1U << chown);
    header = {dsh::detail::capability_version_3, 0};
    if (::syscall(SYS_capset, &header, sets.data()) != 0 ||
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, static_cast<unsigned long>(net_admin), 0UL, 0UL) != 0 ||
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, static_cast<unsigned long>(chown), 0UL, 0UL) != 0 ||
        ::prctl(PR_CAPBSET_DROP, static_cast<unsigned long>(sys_boot), 0UL, 0UL, 0UL) != 0) {
      return std::string("setting up the host's capabilities failed");
    }
    FencedCommand command = hostile_command("caps");
    const Call call = run_captured(command, dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write)));
    const bool host_kept =
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, static_cast<unsigned long>(net_admin), 0UL, 0UL) == 1;
    return std::to_string(call.status) + " " + call.out + "host ambient net_admin=" + std::to_string(host_kept);
  });
  CHECK(seen == "0 held=0 bounding=0 ambient=0\nhost ambient net_admin=1");
}

TEST_CASE("redteam: the command starts with no signal ignored or blocked, whatever the host set") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_hosts(lab, [&](bool unprivileged) {
    const std::string seen = as_host_with_copy(unprivileged, [&] {
      // Ignored, caught and blocked signals, real-time ones included: a host may set any.
      for (const int ignored : {SIGHUP, SIGPIPE, SIGUSR1, SIGRTMIN + 3}) {
        std::signal(ignored, SIG_IGN);
      }
      for (const int caught : {SIGUSR2, SIGTERM, SIGRTMIN + 5}) {
        std::signal(caught, [](int) {});
      }
      sigset_t blocked;
      ::sigemptyset(&blocked);
      for (const int signal : {SIGINT, SIGCHLD, SIGRTMIN + 1}) {
        ::sigaddset(&blocked, signal);
      }
      ::sigprocmask(SIG_BLOCK, &blocked, nullptr);
      FencedCommand command = hostile_command("signals");
      const Call call = run_captured(command, dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write)));
      return std::to_string(call.status) + " " + call.out;
    });
    CHECK(seen == "0 SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  });
}

TEST_CASE("a host whose SIGCHLD keeps its default action with SA_NOCLDWAIT still gets the exit status") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::string seen = as_host_with_copy(false, [&] {
    struct sigaction no_zombies {};
    no_zombies.sa_handler = SIG_DFL;
    no_zombies.sa_flags = SA_NOCLDWAIT;
    ::sigemptyset(&no_zombies.sa_mask);
    if (::sigaction(SIGCHLD, &no_zombies, nullptr) != 0) {
      return std::string("sigaction failed");
    }
    FencedCommand command({"sh", "-c", "exit 3"});
    return std::to_string(command.run(dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write))));
  });
  CHECK(seen == "3");
}

TEST_CASE("the supervisor reads a mask of /proc/thread-self/status only from a whole, exact line") {
  using dsh::detail::status_mask;
  const std::string_view text =
      "Name:\tx\nSigIgn:\t0000000000001000\nSigCgt:\t00000001800044a3\nCapBnd:\t000001FFFFFFFFFF\n"
      "CapAmb:\t00000000000000\nXSigIgn:\t0000000000000001\n";
  CHECK(status_mask(text, "SigIgn:\t") == std::optional<std::uint64_t>(0x1000));
  CHECK(status_mask(text, "SigCgt:\t") == std::optional<std::uint64_t>(0x1800044a3));
  CHECK(status_mask(text, "CapBnd:\t") == std::nullopt); // upper case is not what the kernel writes
  CHECK(status_mask(text, "CapAmb:\t") == std::nullopt); // too short
  CHECK(status_mask(text, "SigBlk:\t") == std::nullopt); // missing
  CHECK(status_mask("SigIgn:\t00000000000010000\n", "SigIgn:\t") == std::nullopt); // too long
}

TEST_CASE("redteam: an unprivileged host holds nothing to drop and keeps its bounding set") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  open_lab_and_tmp_to_nobody(lab);
  const std::string seen = as_host_with_copy(true, [&] {
    FencedCommand command = hostile_command("caps");
    Call call = run_captured(command, dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write)));
    return std::to_string(call.status) + " " + call.out;
  });
  // no_new_privs keeps exec from gaining what the bounding set still lists.
  char expected[96];
  std::snprintf(expected, sizeof expected, "0 held=0 bounding=%llx ambient=0\n",
                static_cast<unsigned long long>(dsh::fence_dropped_capabilities()));
  CHECK(seen == expected);
}

// ==========================================================================================
// lifetime: nothing of a call outlives it
// ==========================================================================================

TEST_CASE("redteam: a detached double-forked writer dies with the call") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_hosts_and_modes(lab, [&](bool unprivileged, SandboxMode mode) {
    // Where this mode may write: the workspace, or anywhere.
    const std::filesystem::path target =
        (mode == SandboxMode::danger_full_access ? lab.outside() : lab.workspace()) / "late.txt";
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    if (mode != SandboxMode::read_only) { // control: the write itself is allowed in the call
      const std::string now = as_host_with_copy(unprivileged, [&] {
        FencedCommand command({"sh", "-c", "echo now > '" + target.string() + "'"});
        return std::to_string(command.run(fence));
      });
      CHECK(now == "0");
      CHECK(read_file(target) == "now\n");
      std::filesystem::remove(target);
    }
    const std::string out = as_host_with_copy(unprivileged, [&] {
      // The writer reports its pid through a process substitution, whose shell exits at
      // once: the writer is orphaned (a double fork) in a session of its own.
      FencedCommand command(
          {"bash", "-c",
           "exec 3< <(setsid sh -c 'echo $$; exec >/dev/null 2>&1 </dev/null; sleep 0.5; echo late > \"$0\"' '" +
               target.string() + "' &); read writer <&3; echo $writer"});
      Call call = run_captured(command, fence);
      return call.out;
    });
    const ::pid_t writer = first_pid(out);
    CHECK(writer > 0);
    CHECK(gone(writer));
    std::this_thread::sleep_for(std::chrono::milliseconds(800)); // longer than its delay
    CHECK_FALSE(exists_nofollow(target));
  });
}

TEST_CASE("redteam: a background child holding stderr does not hold the host") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_hosts_and_modes(lab, [&](bool unprivileged, SandboxMode mode) {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string out = as_host_with_copy(unprivileged, [&] {
      FencedCommand command({"bash", "-c", "sleep 1000 & echo $!"}); // the sleep keeps stdout and stderr
      Call call = run_captured(command, fence);
      return std::to_string(call.status) + " " + call.out;
    });
    // The host returned (no alarm), with the command's status, and the sleep is gone.
    REQUIRE(out.rfind("0 ", 0) == 0);
    const ::pid_t background = first_pid(out.substr(2));
    CHECK(background > 0);
    CHECK(gone(background));
  });
}

TEST_CASE("redteam: a leftover process holding a flock releases it when the call ends") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path log = lab.outside() / "session.jsonl";
  write_file(log, "{}\n");
  REQUIRE(::chmod(log.c_str(), 0644) == 0);
  over_hosts_and_modes(lab, [&](bool unprivileged, SandboxMode mode) {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string out = as_host_with_copy(unprivileged, [&] {
      // flock needs only a descriptor open for reading, which every fence allows. The holder
      // detaches and reports its pid once it has the lock.
      FencedCommand command({"bash", "-c",
                             "exec 3< <(setsid sh -c 'exec 9<\"$0\"; flock -x 9; echo $$; exec >/dev/null "
                             "2>&1 </dev/null; sleep 1000' '" +
                                 log.string() + "' &); read holder <&3; echo $holder"});
      Call call = run_captured(command, fence);
      const dsh::UniqueFd fd{::open(log.c_str(), O_RDONLY | O_CLOEXEC)};
      const int locked = fd ? errno_of(::flock(fd.get(), LOCK_EX | LOCK_NB)) : -1;
      return call.out + "lock=" + std::to_string(locked);
    });
    const ::pid_t holder = first_pid(out);
    CHECK(holder > 0);
    CHECK(gone(holder));
    CHECK(out.substr(out.find('\n') + 1) == "lock=0");
    CHECK(read_file(log) == "{}\n");
  });
}

TEST_CASE("redteam: the time limit ends the call and everything it started") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_hosts_and_modes(lab, [&](bool unprivileged, SandboxMode mode) {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string out = as_host_with_copy(unprivileged, [&] {
      FencedCommand command({"bash", "-c", "sleep 1000 & echo $!; sleep 1000"});
      std::string printed;
      command.time_limit(std::chrono::milliseconds(300))
          .on_output([&printed](dsh::CommandStream, std::string_view bytes) { printed.append(bytes); });
      FencedChild child = command.spawn(fence);
      const int status = child.wait();
      FencedCommand quick({"sh", "-c", "exit 3"});
      quick.time_limit(std::chrono::minutes(1));
      FencedChild quick_child = quick.spawn(fence);
      const int quick_status = quick_child.wait();
      return std::to_string(status) + (child.timed_out() ? " timed out " : " ended ") + std::to_string(quick_status) +
             (quick_child.timed_out() ? " timed out\n" : " ended\n") + printed;
    });
    CHECK(out.substr(0, out.find('\n')) == "124 timed out 3 ended");
    const ::pid_t background = first_pid(out.substr(out.find('\n') + 1));
    CHECK(background > 0);
    CHECK(gone(background));
  });
  CHECK_THROWS_AS(FencedCommand({"true"}).time_limit(std::chrono::milliseconds(0)), dsh::ConfigError);
}

/// A copy of the zombie flood in `lab`'s base, where both hosts can run it; returns its path.
std::filesystem::path install_zombie_flood(const Lab& lab) {
  std::filesystem::path copy = lab.base() / "dsh_test_zombie_flood";
  std::filesystem::copy_file(DSH_TEST_ZOMBIE_FLOOD, copy, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(copy, std::filesystem::perms(0755));
  return copy;
}

/// How many live processes run `program` (their /proc/<pid>/exe names it).
int processes_running(const std::filesystem::path& program) {
  int count = 0;
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().native();
    std::array<char, 4096> target{};
    if (name.find_first_not_of("0123456789") == std::string::npos &&
        ::readlink((entry.path() / "exe").c_str(), target.data(), target.size() - 1) > 0 &&
        program.native() == target.data()) {
      ++count;
    }
  }
  return count;
}

// The supervisor adopts every orphan of the call (a child subreaper). A command whose
// descendants fork and exit in chains leaves it a zombie per step, faster than it reaps them on
// a busy machine: while it reaped until none was left, it looked at neither its deadline nor
// its host's hang-up (a 300 ms limit ended calls after 0.9-5.6 s here), and its last sweep
// reaped one zombie per read of its children list (11-12 s once the deadline was kept).
TEST_CASE("redteam: a flood of zombies keeps neither the time limit nor terminate() from ending the call") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path flood = install_zombie_flood(lab);
  over_hosts(lab, [&](bool unprivileged) {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
    const std::string out = as_host_with_copy(unprivileged, [&] {
      using clock = std::chrono::steady_clock;
      const auto milliseconds_since = [](clock::time_point start) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
      };
      std::string seen;
      for (int round = 0; round < 2; ++round) {
        // The chains stop by themselves after 10 s: longer than any call here may take.
        FencedCommand limited({flood.string(), "400", "10"});
        limited.time_limit(std::chrono::milliseconds(300)).on_output([](dsh::CommandStream, std::string_view) {});
        const clock::time_point started = clock::now();
        FencedChild child = limited.spawn(fence);
        const int status = child.wait();
        seen += "limit " + std::to_string(status) + (child.timed_out() ? " timed out" : " ended") +
                (milliseconds_since(started) < 2500 ? " in time" : " late") + "\n";
      }
      FencedCommand endless({flood.string(), "400", "10"});
      endless.on_output([](dsh::CommandStream, std::string_view) {});
      FencedChild child = endless.spawn(fence);
      std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the flood under way
      const clock::time_point asked = clock::now();
      child.terminate();
      const int status = child.wait();
      seen += "terminate " + std::to_string(status) + (milliseconds_since(asked) < 2500 ? " in time" : " late") + "\n";
      return seen;
    });
    CHECK(out == "limit 124 timed out in time\nlimit 124 timed out in time\nterminate 137 in time\n");
    CHECK(processes_running(flood) == 0); // every call ended with everything it started
  });
}

TEST_CASE("redteam: terminate() and destroying an unwaited call end everything") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  const std::string out = as_host_with_copy(false, [&] {
    FencedCommand command({"bash", "-c", "sleep 1000 & echo $!; exec sleep 1000"});
    std::string printed;
    command.on_output([&printed](dsh::CommandStream, std::string_view bytes) { printed.append(bytes); });
    FencedChild child = command.spawn(fence);
    child.terminate();
    const int status = child.wait();
    ::pid_t supervisor = 0;
    {
      FencedChild dropped = command.spawn(fence);
      supervisor = dropped.pid();
    } // destroyed without wait(): the call ends, the supervisor is reaped
    return std::to_string(status) + (gone(supervisor) ? " reaped" : " supervisor left");
  });
  CHECK(out == "137 reaped");
}

TEST_CASE("redteam: a command that kills its supervisor does not leave the host waiting") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string out = as_host_with_copy(false, [&] {
      FencedCommand command({"bash", "-c", "kill -9 $PPID 2>/dev/null || echo refused"});
      std::string printed;
      command.on_output([&printed](dsh::CommandStream, std::string_view bytes) { printed.append(bytes); });
      try {
        const int status = command.run(fence);
        return printed + "status=" + std::to_string(status);
      } catch (const dsh::ProcessError& error) {
        return printed + error.what();
      }
    });
    // Where Landlock scopes signals (ABI 6) the supervisor cannot be reached; elsewhere it
    // dies, the command dies with it (parent-death signal) and the host is told.
    if (out.rfind("refused\n", 0) == 0) {
      CHECK(out == "refused\nstatus=0");
    } else {
      CHECK(out == "the supervisor of " + dsh::json_string_literal(FencedCommand({"bash"}).program()) +
                       " ended without reporting (status 137): the command was killed with it, but processes "
                       "it detached may have survived the call");
    }
  }
}
