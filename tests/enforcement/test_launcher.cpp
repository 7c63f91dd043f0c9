// The fence launcher (docs/enforcement.md#the-launcher): a call's supervisor is forked from it,
// the command still gets what a fork of the host would give it, a launcher that no longer
// matches the host is replaced, one that cannot be trusted or started is reported (and the host
// forks), and a fenced command can neither end nor change it.
#include "support/hosts.hpp"
#include "support/landlock.hpp"
#include "support/seccomp.hpp"

#include <dsh/detail/process/supervisor.hpp>
#include <dsh/fence_launcher.hpp>
#include <dsh/landlock.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using dsh::FencedCommand;
using dsh::FenceLauncher;
using dsh::Launch;
using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// The text of /proc file `path`, or "" when it cannot be read: the process may end between
/// the open and the read (ESRCH), which an std::ifstream reports by throwing.
std::string proc_text(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return text;
  }
  std::array<char, 4096> buffer{};
  for (::ssize_t got = 0; (got = ::read(fd, buffer.data(), buffer.size())) > 0;) {
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(fd);
  return text;
}

/// The parent pid of `pid` (field 4 of /proc/<pid>/stat), or -1.
::pid_t parent_of(::pid_t pid) {
  const std::string text = proc_text("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return -1;
  }
  std::istringstream rest(text.substr(close + 2));
  std::string state;
  ::pid_t parent = -1;
  rest >> state >> parent;
  return parent;
}

/// True while a thread of the process `pid` has not exited; throws std::runtime_error when the
/// kernel cannot say. Not the state letter of /proc/PID/stat: a leader that exited shows Z while
/// another of its threads (ThreadSanitizer's background thread in a sanitized launcher's zygote)
/// still holds the process's descriptors, and a tsan CI run read such a zygote as gone while
/// its socket still took calls. A pidfd reads ready only once the whole thread group exited.
bool running(::pid_t pid) {
  const auto fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U));
  if (fd < 0) {
    const int error = errno;
    if (error == ESRCH) {
      return false; // reaped
    }
    throw std::runtime_error("pidfd_open(" + std::to_string(pid) + "): " + std::strerror(error));
  }
  pollfd ready{fd, POLLIN, 0};
  const int got = ::poll(&ready, 1, 0);
  const int error = errno;
  ::close(fd);
  if (got < 0) {
    throw std::runtime_error("poll(pidfd of " + std::to_string(pid) + "): " + std::strerror(error));
  }
  return got == 0;
}

/// The children of `pid` (/proc/<pid>/task/<pid>/children), in the kernel's order.
std::vector<::pid_t> children_of(::pid_t pid) {
  const std::string id = std::to_string(pid);
  std::istringstream list(proc_text("/proc/" + id + "/task/" + id + "/children"));
  std::vector<::pid_t> children;
  for (::pid_t child = 0; list >> child;) {
    children.push_back(child);
  }
  return children;
}

/// The children of `parent` other than `excluded`, once there are exactly `count` of them (a
/// zygote forks its spare, and a supervisor exits, on their own time); what there is after
/// five seconds otherwise.
std::vector<::pid_t> children_once(::pid_t parent, std::size_t count, const std::vector<::pid_t>& excluded = {}) {
  std::vector<::pid_t> found;
  for (int i = 0; i < 500; ++i) {
    found.clear();
    for (const ::pid_t child : children_of(parent)) {
      if (std::find(excluded.begin(), excluded.end(), child) == excluded.end()) {
        found.push_back(child);
      }
    }
    if (found.size() == count) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return found;
}

/// A fenced command's five attempts on the process $P, each printing what it did when it
/// succeeds: end it, stop it, limit it, renice it, and read its environment (which takes the
/// ptrace access check).
constexpr const char* attempts_on_p = "kill -KILL $P 2>/dev/null && echo killed $P; "
                                      "kill -STOP $P 2>/dev/null && echo stopped $P; "
                                      "prlimit --pid $P --nofile=1 2>/dev/null && echo limited $P; "
                                      "renice -n 19 -p $P >/dev/null 2>&1 && echo reniced $P; "
                                      "head -c1 /proc/$P/environ >/dev/null 2>&1 && echo traced $P; ";

/// Whether `target` outlived those attempts untouched: "alive", "limits kept", "priority kept"
/// (this process's), a line each.
std::string left_alone(::pid_t target) {
  std::string text = running(target) ? "alive\n" : "gone\n";
  rlimit files{};
  ::prlimit(target, RLIMIT_NOFILE, nullptr, &files);
  text += files.rlim_cur > 1 ? "limits kept\n" : "limits changed\n";
  text += ::getpriority(PRIO_PROCESS, static_cast<id_t>(target)) == ::getpriority(PRIO_PROCESS, 0)
              ? "priority kept\n"
              : "priority changed\n";
  return text;
}

/// The values of NoNewPrivs, Seccomp and Seccomp_filters in `status` (a /proc status text), as
/// "NoNewPrivs=N Seccomp=N Seccomp_filters=N".
std::string filter_fields_in(const std::string& status) {
  std::istringstream lines(status);
  std::string text;
  for (std::string line; std::getline(lines, line);) {
    for (const std::string_view key : {"NoNewPrivs:", "Seccomp:", "Seccomp_filters:"}) {
      if (line.starts_with(key)) {
        const std::size_t value = line.find_first_not_of(" \t", key.size());
        text += (text.empty() ? "" : " ") + std::string(key.substr(0, key.size() - 1)) + "=" +
                (value == std::string::npos ? "" : line.substr(value));
      }
    }
  }
  return text;
}

/// The text of /proc/<pid>/status ("self" when `pid` is 0); "" when it cannot be read.
std::string status_of(::pid_t pid) {
  return proc_text("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/status");
}

/// `filter_fields_in` of /proc/<pid>/status ("self" when `pid` is 0).
std::string filter_fields(::pid_t pid) { return filter_fields_in(status_of(pid)); }

/// The mask of `key` ("CapBnd:", "CapEff:") in /proc/<pid>/status ("self" when `pid` is 0), or
/// all ones when it cannot be read.
std::uint64_t capability_mask(::pid_t pid, std::string_view key) {
  std::istringstream status(status_of(pid));
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(key)) {
      return std::stoull(line.substr(key.size()), nullptr, 16);
    }
  }
  return ~0ULL;
}

/// What a zygote's bounding set should be, from the calling host's: without the capabilities
/// every fenced child drops when the host may lower it (CAP_SETPCAP), else the host's own.
std::uint64_t zygote_bounding_set() {
  const std::uint64_t own = capability_mask(0, "CapBnd:");
  constexpr unsigned cap_setpcap = 8;
  return (capability_mask(0, "CapEff:") >> cap_setpcap & 1U) != 0 ? own & ~dsh::fence_dropped_capabilities() : own;
}

/// `filter_fields` of a process that runs under `more` filters than the calling one, with
/// no_new_privs set when `more` is not 0 (or already set here).
std::string filter_fields_beyond_this(int more) {
  std::istringstream own(filter_fields(0));
  std::string no_new_privs;
  std::string mode;
  std::string filters;
  own >> no_new_privs >> mode >> filters;
  const int held = std::stoi(filters.substr(filters.find('=') + 1));
  const bool nnp = more > 0 || no_new_privs == "NoNewPrivs=1";
  return std::string("NoNewPrivs=") + (nnp ? "1" : "0") + " Seccomp=" + (held + more > 0 ? "2" : "0") +
         " Seccomp_filters=" + std::to_string(held + more);
}

/// "as expected" when `text` is `expected`, else both, for the failure message: what a host
/// that computes its own expectation (from its own credentials) returns to the test.
std::string as_expected(const std::string& text, const std::string& expected) {
  if (text == expected) {
    return "as expected";
  }
  std::string both = "expected:\n";
  both.append(expected).append("got:\n").append(text);
  return both;
}

/// The IPC namespace of `pid` as its /proc link reads ("ipc:[4026531839]"), or "" when it
/// cannot be read.
std::string ipc_namespace_of(::pid_t pid) {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/ipc", ignored).native();
}

/// `sleep 30` under `fence` in the laboratory's workspace, started through the launcher.
dsh::FencedChild sleeping_call(const PreparedFence& fence, const Lab& lab) {
  FencedCommand command({"sleep", "30"});
  command.launch(Launch::launcher).in_directory(lab.workspace());
  return command.spawn(fence);
}

/// Runs `each(unprivileged)` for the root host and, when the test runs as root, for uid 65534,
/// with the laboratory opened to uid 65534 and a copy of the launcher it can reach configured
/// (the build's own restored afterwards).
void over_launcher_hosts(const Lab& lab, const std::function<void(bool)>& each) {
  dsh::test::open_lab_to_nobody(lab);
  use_launcher_nobody_reaches(lab);
  const LauncherRestorer restore;
  for (const bool unprivileged : dsh::test::host_table) {
    if (!unprivileged || ::geteuid() == 0) {
      each(unprivileged);
    }
  }
}

} // namespace

TEST_CASE("a fenced call's supervisor is forked from the launcher's side, which serves the next call too") {
  const Lab lab;
  const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write));
  FencedCommand command({"sleep", "30"});
  // Every command runs in the workspace: the test's own directory may be under /tmp, which the
  // namespace layer replaces in the command's view.
  command.launch(Launch::launcher).in_directory(lab.workspace());
  dsh::FencedChild child = command.spawn(fence);
  CHECK(child.launched_by() == Launch::launcher);
  CHECK(child.launch_note().empty());
  const ::pid_t launcher = FenceLauncher::pid();
  REQUIRE(launcher > 0);
  CHECK(parent_of(launcher) == ::getpid());
  // Forked by the launcher's zygote that holds this fence's system-call filter.
  CHECK(parent_of(parent_of(child.pid())) == launcher);
  CHECK(child.pid() != launcher);
  child.terminate();
  CHECK(child.wait() == 128 + SIGKILL);
  CHECK(child.pid() == -1);

  const unsigned starts = FenceLauncher::starts();
  const dsh::test::Shell again = shell(fence, "echo again; exit 3", lab.workspace());
  CHECK(again.status == 3);
  CHECK(again.out == "again\n");
  CHECK(FenceLauncher::pid() == launcher);
  CHECK(FenceLauncher::starts() == starts);
}

TEST_CASE("through the launcher the command gets the host's directory, umask, input and environment of the call") {
  const Lab lab;
  const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write));
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::create_directory(lab.workspace() / "sub");
  const ::mode_t old_mask = ::umask(077);
  std::filesystem::current_path(lab.workspace() / "sub");
  FencedCommand command({"bash", "--norc", "-c", "pwd; umask; cat; echo \"$MARK,${MY_API_KEY-unset}\""});
  command.launch(Launch::launcher).set_env("MARK", "m1");
  dsh::CaptureOptions options;
  options.stdin_bytes = "from stdin\n";
  ::setenv("MY_API_KEY", "sk-secret", 1);
  FencedCommand with_key({"bash", "--norc", "-c", "echo \"${MY_API_KEY-unset}\""});
  ::unsetenv("MY_API_KEY");
  with_key.launch(Launch::launcher).in_directory(lab.workspace());
  const dsh::CommandOutput first = command.capture(fence, options);
  std::filesystem::current_path(lab.workspace());
  ::umask(022);
  const dsh::CommandOutput second = command.capture(fence, options);
  std::filesystem::current_path(before);
  ::umask(old_mask);
  CHECK(first.status == 0);
  CHECK(first.out == (lab.workspace() / "sub").string() + "\n0077\nfrom stdin\nm1,unset\n");
  CHECK(second.out == lab.workspace().string() + "\n0022\nfrom stdin\nm1,unset\n");
  const dsh::CommandOutput key = with_key.capture(fence);
  CHECK(key.out == "unset\n");
}

TEST_CASE("a launcher that no longer matches the host is replaced: credentials and limits of the calling host") {
  if (::geteuid() != 0) {
    WARN("needs root to become another user: not run");
    return;
  }
  const Lab lab;
  dsh::test::open_lab_to_nobody(lab);
  use_launcher_nobody_reaches(lab); // before the fork: the forked host's pin is the copy's
  const LauncherRestorer restore;
  const std::string result = as_host(false, [&] {
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only));
    std::string text = shell(fence, "id -u; ulimit -n", lab.workspace()).out;
    const unsigned starts = FenceLauncher::starts();
    const ::pid_t first = FenceLauncher::pid();
    REQUIRE(first > 0);
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = 77;
    ::setrlimit(RLIMIT_NOFILE, &files);
    // Each command that runs leaves a line: the one handed to the old launcher must not.
    const PreparedFence writing = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write));
    text += shell(writing, "echo ran >> calls; ulimit -n", lab.workspace()).out;
    std::ifstream calls(lab.workspace() / "calls");
    text += std::string(std::istreambuf_iterator<char>(calls), {});
    std::filesystem::remove(lab.workspace() / "calls");
    // The call went to the running launcher before the thread's fingerprint was read; its
    // supervisor got no request (the one line above is the new launcher's), and the old launcher
    // was stopped.
    text += std::to_string(FenceLauncher::starts() - starts) + (FenceLauncher::pid() != first ? " new" : " same") +
            (running(first) ? " first running" : " first gone") + "\n";
    if (!dsh::test::become_nobody()) {
      ::_exit(251);
    }
    const PreparedFence unprivileged = PreparedFence::prepare(lab.policy(SandboxMode::read_only));
    text += shell(unprivileged, "id -u; ulimit -n", lab.workspace()).out;
    text += std::to_string(FenceLauncher::starts() - starts) + "\n" + FenceLauncher::problem();
    return text;
  });
  // A fork of the test host starts its own launcher; the limit and the user each replace it.
  CHECK(result.substr(0, 2) == "0\n");
  CHECK_THAT(result, Catch::Matchers::EndsWith("\n77\nran\n1 new first gone\n65534\n77\n2\n"));
}

TEST_CASE("a launcher that cannot be used is reported, and Launch::launcher then runs nothing") {
  const LauncherRestorer restore;
  const Lab lab;
  const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write));
  const std::filesystem::path marker = lab.workspace() / "ran";

  const auto attempt = [&](const std::filesystem::path& program) {
    FenceLauncher::use(program);
    FencedCommand automatic(dsh::test::shell_argv("echo ok", {}));
    automatic.in_directory(lab.workspace()).on_output([](dsh::CommandStream, std::string_view) {});
    dsh::FencedChild child = automatic.spawn(fence);
    CHECK(child.launched_by() == Launch::fork);
    std::string note = child.launch_note();
    CHECK(child.wait() == 0);
    CHECK(FenceLauncher::pid() == -1);
    FencedCommand required({"touch", marker.string()});
    required.launch(Launch::launcher).in_directory(lab.workspace());
    try {
      (void)required.run(fence);
      FAIL("Launch::launcher ran without a launcher");
    } catch (const dsh::SystemError& error) {
      CHECK(std::string(error.what())
                .find("cannot run \"/usr/bin/touch\" from the fence launcher (Launch::launcher): " + note) !=
            std::string::npos);
    }
    CHECK_FALSE(std::filesystem::exists(marker));
    return note;
  };

  CHECK(attempt("/nonexistent/dsh-fence-launcher") ==
        "the launcher \"/nonexistent/dsh-fence-launcher\" cannot be examined: No such file or directory");
  CHECK(attempt("/bin/true") ==
        "the launcher \"/bin/true\" cannot be used: it did not answer as dsh-fence-launcher (is it one?)");

  // A copy anyone can replace is never run (as root too: the file's own mode decides).
  const std::filesystem::path copy = lab.outside() / "dsh-fence-launcher";
  std::filesystem::copy_file(built_launcher, copy);
  REQUIRE(::chmod(copy.c_str(), 0777) == 0);
  CHECK(attempt(copy) == "the launcher " + dsh::json_string_literal(copy.string()) + " (mode 0777, owner uid " +
                             std::to_string(::geteuid()) + ") could be replaced by another user");
  REQUIRE(::chmod(copy.c_str(), 0755) == 0);
  REQUIRE(::chmod(lab.outside().c_str(), 0777) == 0);
  CHECK(attempt(copy).find("lies where another user can change it: the directory " +
                           dsh::json_string_literal(lab.outside().string()) + " (mode 0777") != std::string::npos);
  REQUIRE(::chmod(lab.outside().c_str(), 0755) == 0);

  CHECK_THROWS_AS(FenceLauncher::use("relative/dsh-fence-launcher"), dsh::ConfigError);
  // The copy changed since this process first used it (its modes): it is not run again.
  CHECK(attempt(copy) == "the launcher " + dsh::json_string_literal(copy.string()) +
                             " is not the file this process first used (replaced or changed since: device, inode, "
                             "size or times differ); restart the host to use the new one");
  const std::filesystem::path fresh = lab.outside() / "dsh-fence-launcher-2";
  std::filesystem::copy_file(built_launcher, fresh);
  REQUIRE(::chmod(fresh.c_str(), 0755) == 0);
  FenceLauncher::use(fresh);
  const dsh::test::Shell copied = shell(fence, "echo copied", lab.workspace());
  CHECK(copied.out == "copied\n");
  CHECK(FenceLauncher::problem().empty());
  CHECK(parent_of(FenceLauncher::pid()) == ::getpid());
}

TEST_CASE("the launcher's own program refuses to be run by hand") {
  FencedCommand by_hand({built_launcher.string()});
  by_hand.launch(Launch::fork);
  const PreparedFence unrestricted = PreparedFence::prepare(dsh::test::Lab().policy(SandboxMode::danger_full_access));
  const dsh::CommandOutput output = by_hand.capture(unrestricted);
  CHECK(output.status == 2);
  CHECK(output.err == "dsh-fence-launcher: not a program to run by hand: the dsh-sandbox-policy library "
                      "starts it (docs/enforcement.md#the-launcher)\n");
}

TEST_CASE("a workspace holding the launcher is refused, like one holding the host") {
  const Lab lab;
  dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  policy.workspace_root = built_launcher.parent_path();
  try {
    (void)PreparedFence::prepare(policy);
    FAIL("a workspace holding the launcher was granted");
  } catch (const dsh::LandlockError& error) {
    CHECK(std::string(error.what()).find("the fence launcher " + dsh::json_string_literal(built_launcher.string())) !=
          std::string::npos);
  }
}

TEST_CASE("a fenced command can neither end, slow nor trace the launcher or its zygote, as root and as an "
          "unprivileged host") {
  const Lab lab;
  over_launcher_hosts(lab, [&](const bool unprivileged) {
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      CAPTURE(unprivileged, dsh::to_string(mode));
      const std::string result = as_host(unprivileged, [&] {
        // The base fence alone: the namespace layer would not even show the launcher's pid.
        dsh::FenceOptions options;
        options.isolation = dsh::Isolation::off;
        const PreparedFence fence = PreparedFence::prepare(lab.policy(mode), options);
        (void)shell(fence, "true", lab.workspace());
        const ::pid_t launcher = FenceLauncher::pid();
        if (launcher <= 0) {
          return "no launcher: " + FenceLauncher::problem();
        }
        const std::vector<::pid_t> zygotes = children_of(launcher);
        if (zygotes.size() != 1) {
          return "zygotes: " + std::to_string(zygotes.size());
        }
        const ::pid_t zygote = zygotes.front();
        const dsh::test::Shell attack = shell(
            fence,
            std::string("for P in $L $Z; do ") + attempts_on_p +
                "done; "
                // the zygote's process group can be joined (the command stays in the session the
                // zygote leads), but no group can be reniced, not even the caller's own (perl:
                // setpgid)
                "[ \"$(ps -o pgid= -p $$ | tr -d ' ')\" = $$ ] || echo not-own-group; "
                "perl -e 'setpgrp(0, $ARGV[0]) or exit 2; exec qw(renice -n 19 -g 0)' $G >/dev/null 2>&1; "
                "echo \"joined, renice -g: $?\"; "
                "echo done",
            lab.workspace(),
            {"L=" + std::to_string(launcher), "Z=" + std::to_string(zygote), "G=" + std::to_string(::getpgid(zygote))});
        std::string text = attack.out;
        for (const ::pid_t target : {launcher, zygote}) {
          text += left_alone(target);
        }
        text += shell(fence, "echo next", lab.workspace()).out;
        text += FenceLauncher::pid() == launcher ? "same launcher\n" : "another launcher\n";
        text += children_of(launcher) == zygotes ? "same zygote\n" : "another zygote\n";
        return text;
      });
      CHECK(result ==
            "joined, renice -g: 1\ndone\nalive\nlimits kept\npriority kept\nalive\nlimits kept\npriority kept\nnext\n"
            "same launcher\nsame zygote\n");
    }
  });
}

TEST_CASE("a zygote keeps a spare supervisor forked ahead, which serves the next call; a fenced command can neither "
          "end, slow nor trace it, as root and as an unprivileged host") {
  const Lab lab;
  over_launcher_hosts(lab, [&](const bool unprivileged) {
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      CAPTURE(unprivileged, dsh::to_string(mode));
      const std::string result = as_host(unprivileged, [&] {
        dsh::FenceOptions options;
        options.isolation = dsh::Isolation::off; // the layer would hide the zygote's pid
        const PreparedFence fence = PreparedFence::prepare(lab.policy(mode), options);
        (void)shell(fence, "true", lab.workspace());
        const ::pid_t launcher = FenceLauncher::pid();
        const std::vector<::pid_t> zygotes = launcher > 0 ? children_of(launcher) : std::vector<::pid_t>{};
        if (zygotes.size() != 1) {
          return "zygotes: " + std::to_string(zygotes.size()) + " " + FenceLauncher::problem();
        }
        const ::pid_t zygote = zygotes.front();
        // The last call's supervisor ends after its report: wait until the spare alone is left.
        const std::vector<::pid_t> spares = children_once(zygote, 1);
        if (spares.size() != 1) {
          return "children of the zygote between calls: " + std::to_string(spares.size());
        }
        const ::pid_t spare = spares.front();
        // Its first step after the fork (a spare just forked may not have taken it yet).
        for (int i = 0; i < 500 && ::getpgid(spare) != spare; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        std::string text = ::getpgid(spare) == spare ? "a group of its own\n" : "in another group\n";
        // The call the spare takes forks the next spare; the command looks for it (a child of
        // the zygote that is not its own supervisor) and attacks it.
        const dsh::test::Shell attack =
            shell(fence,
                  "n=0; while [ $n -lt 200 ]; do "
                  "for D in /proc/[0-9]*; do P=${D#/proc/}; "
                  "[ \"$(cut -d' ' -f4 $D/stat 2>/dev/null)\" = $Z ] && [ $P != $PPID ] && break 2; done; "
                  "n=$((n+1)); sleep 0.01; done; "
                  "[ $PPID = $S ] && echo served by the spare; " +
                      std::string(attempts_on_p) + "echo done; echo $P",
                  lab.workspace(), {"Z=" + std::to_string(zygote), "S=" + std::to_string(spare)});
        // Its last line is the pid it attacked (read-only cannot write it to a file).
        const std::size_t last = attack.out.rfind('\n', attack.out.size() - 2);
        text += attack.out.substr(0, last + 1);
        ::pid_t next = -1;
        std::istringstream(attack.out.substr(last + 1)) >> next;
        if (next <= 0 || next == spare || parent_of(next) != zygote) {
          return text + "no next spare found: " + std::to_string(next);
        }
        text += left_alone(next);
        FencedCommand command({"sleep", "30"});
        command.launch(Launch::launcher).in_directory(lab.workspace());
        dsh::FencedChild child = command.spawn(fence);
        text += child.pid() == next ? "the next call served by it\n" : "the next call served by another\n";
        child.terminate();
        text += std::to_string(child.wait()) + "\n";
        return text;
      });
      CHECK(result == "a group of its own\nserved by the spare\ndone\nalive\nlimits kept\npriority kept\n"
                      "the next call served by it\n" +
                          std::to_string(128 + SIGKILL) + "\n");
    }
  });
}

TEST_CASE("two running calls and the spare waiting for the next each hold an IPC namespace of their own as root, "
          "and none as an unprivileged host (whose filter refuses System V IPC instead)") {
  const Lab lab;
  over_launcher_hosts(lab, [&](const bool unprivileged) {
    CAPTURE(unprivileged);
    const std::string result = as_host(unprivileged, [&] {
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::off; // the base fence: the layer makes its own namespaces
      const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only), options);
      const std::string host = ipc_namespace_of(::getpid());
      // Namespaces are compared while all are alive: the kernel reuses a dead one's number.
      std::vector<std::string> seen;
      dsh::FencedChild first = sleeping_call(fence, lab);
      dsh::FencedChild second = sleeping_call(fence, lab);
      for (const dsh::FencedChild* call : {&first, &second}) {
        const std::vector<::pid_t> commands = children_of(call->pid()); // the supervisor's one child
        seen.push_back(commands.size() == 1 ? ipc_namespace_of(commands.front()) : "no command");
      }
      // The spare waiting for the next call made that call's namespace already (as root).
      std::string spare_namespace = "no spare";
      const std::vector<::pid_t> zygotes = children_of(FenceLauncher::pid());
      if (zygotes.size() == 1) {
        const std::vector<::pid_t> spares = children_once(zygotes.front(), 1, {first.pid(), second.pid()});
        if (spares.size() == 1) {
          // Made once the spare has begun its supervision, just after its fork (as root).
          spare_namespace = ipc_namespace_of(spares.front());
          for (int i = 0; i < 500 && !unprivileged && spare_namespace == host; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            spare_namespace = ipc_namespace_of(spares.front());
          }
          seen.push_back(spare_namespace);
        }
      }
      first.terminate();
      second.terminate();
      static_cast<void>(first.wait());
      static_cast<void>(second.wait());
      std::string text;
      for (const std::string& namespace_link : seen) {
        text += !namespace_link.starts_with("ipc:[")                        ? "unreadable\n"
                : namespace_link == host                                    ? "the host's\n"
                : std::count(seen.begin(), seen.end(), namespace_link) == 1 ? "its own\n"
                                                                            : "shared with another call\n";
      }
      return text;
    });
    CHECK(result == (unprivileged ? "the host's\nthe host's\nthe host's\n" : "its own\nits own\nits own\n"));
  });
}

TEST_CASE("a launcher being replaced is not kept by a forked copy of the host, and is killed after 2 s however "
          "often the host is interrupted") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_launcher_hosts(lab, [&](bool unprivileged) {
    INFO((unprivileged ? "host uid 65534" : "root host"));
    const std::string result = as_host(unprivileged, [&] {
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::off;
      const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only), options);
      const auto milliseconds_since = [](std::chrono::steady_clock::time_point start) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      };
      std::string text;
      // A copy of the host forked without exec holds the launcher's socket: shut down, the
      // launcher still reads end of file at once (closed only, it would wait for the copy).
      (void)shell(fence, "true", lab.workspace());
      const ::pid_t first = FenceLauncher::pid();
      const ::pid_t copy = ::fork();
      if (copy == 0) {
        ::pause();
        ::_exit(0);
      }
      auto start = std::chrono::steady_clock::now();
      FenceLauncher::restart();
      const long long prompt = milliseconds_since(start);
      text += prompt < 1500 ? "at once" : "after " + std::to_string(prompt) + " ms";
      text += running(first) ? ", running\n" : ", gone\n";
      ::kill(copy, SIGKILL);
      ::waitpid(copy, nullptr, 0);
      // A launcher that cannot serve its queue (stopped) is killed once the 2 s are over, with
      // a signal interrupting the host's wait every 100 ms.
      (void)shell(fence, "true", lab.workspace());
      const ::pid_t second = FenceLauncher::pid();
      ::kill(second, SIGSTOP);
      struct sigaction interrupt {};
      interrupt.sa_handler = [](int) {};
      ::sigemptyset(&interrupt.sa_mask);
      ::sigaction(SIGUSR1, &interrupt, nullptr);
      std::atomic<bool> done{false};
      const ::pthread_t host_thread = ::pthread_self();
      std::thread ticker([&] {
        while (!done) {
          ::pthread_kill(host_thread, SIGUSR1);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
      start = std::chrono::steady_clock::now();
      FenceLauncher::restart();
      const long long waited = milliseconds_since(start);
      done = true;
      ticker.join();
      text += waited >= 1900 && waited < 10000 ? "after the wait" : "after " + std::to_string(waited) + " ms";
      text += running(second) ? ", running\n" : ", gone\n";
      return text;
    });
    CHECK(result == "at once, gone\nafter the wait, gone\n");
  });
}

// With the layer a root host's command keeps the IPC namespace its spare supervisor made; an
// unprivileged host's command makes its own in its own user namespace.
TEST_CASE("with the namespace layer each running call has an IPC namespace of its own") {
  const Lab lab;
  over_launcher_hosts(lab, [&](const bool unprivileged) {
    CAPTURE(unprivileged);
    const std::string result = as_host(unprivileged, [&] {
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::required;
      std::optional<PreparedFence> prepared;
      try {
        prepared.emplace(PreparedFence::prepare(lab.policy(SandboxMode::read_only), options));
      } catch (const dsh::LandlockError& error) {
        // Where the system refuses the layer (an unprivileged host's user namespace in a
        // process with another thread: ThreadSanitizer's).
        return std::string("no layer: ") + error.what();
      }
      const PreparedFence& fence = *prepared;
      const std::string host = ipc_namespace_of(::getpid());
      dsh::FencedChild first = sleeping_call(fence, lab);
      dsh::FencedChild second = sleeping_call(fence, lab);
      // Read while both run: the kernel reuses a dead namespace's number.
      std::vector<std::string> commands;
      std::string text;
      for (const dsh::FencedChild* call : {&first, &second}) {
        const std::vector<::pid_t> children = children_of(call->pid()); // the supervisor's one child
        const std::string command = children.size() == 1 ? ipc_namespace_of(children.front()) : "no command";
        const std::string supervisor = ipc_namespace_of(call->pid());
        commands.push_back(command);
        text += !command.starts_with("ipc:[") || !supervisor.starts_with("ipc:[") ? "unreadable"
                : command == host                                                 ? "the host's"
                : command == supervisor                                           ? "its supervisor's"
                                                                                  : "its own";
        text += supervisor == host ? ", supervisor in the host's\n" : ", supervisor in another\n";
      }
      text += commands[0] == commands[1] ? "shared\n" : "two\n";
      first.terminate();
      second.terminate();
      static_cast<void>(first.wait());
      static_cast<void>(second.wait());
      return text;
    });
    if (result.starts_with("no layer: ")) {
      WARN(result);
      return;
    }
    CHECK(result == (unprivileged ? "its own, supervisor in the host's\nits own, supervisor in the host's\ntwo\n"
                                  : "its supervisor's, supervisor in another\nits supervisor's, supervisor in "
                                    "another\ntwo\n"));
  });
}

TEST_CASE("a filtered call's supervisor comes from the launcher's zygote, whose filter its command inherits once; "
          "danger-full-access inherits none") {
  const Lab lab;
  over_launcher_hosts(lab, [&](const bool unprivileged) {
    for (const dsh::Isolation isolation : {dsh::Isolation::off, dsh::Isolation::best_effort}) {
      CAPTURE(unprivileged, dsh::to_string(isolation));
      const std::string result = as_host(unprivileged, [&] {
        std::string text;
        for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write,
                                       SandboxMode::danger_full_access, SandboxMode::workspace_write}) {
          dsh::FenceOptions options;
          options.isolation = isolation;
          const PreparedFence fence = PreparedFence::prepare(lab.policy(mode), options);
          FencedCommand command({"sleep", "30"});
          command.launch(Launch::launcher).in_directory(lab.workspace());
          dsh::FencedChild child = command.spawn(fence);
          const ::pid_t parent = parent_of(child.pid());
          const ::pid_t launcher = FenceLauncher::pid();
          text += std::string(dsh::to_string(mode)) + ": ";
          if (parent == launcher) {
            text += "from the launcher";
          } else if (parent_of(parent) == launcher) {
            text += "from a zygote (" + filter_fields(parent) +
                    (capability_mask(parent, "CapBnd:") == zygote_bounding_set() ? ", bounding set as expected)"
                                                                                 : ", another bounding set)");
          } else {
            text += "from pid " + std::to_string(parent);
          }
          child.terminate();
          static_cast<void>(child.wait());
          FencedCommand status({"cat", "/proc/self/status"});
          status.launch(Launch::launcher).in_directory(lab.workspace());
          const std::string fields = filter_fields_in(status.capture(fence).out);
          text += "; the command " + fields;
          if (isolation == dsh::Isolation::off && mode != SandboxMode::danger_full_access) {
            // Which program: the one refusing System V IPC unless the command has an IPC
            // namespace of its own (a host holding CAP_SYS_ADMIN), where a segment is its own.
            text += shell(fence,
                          "ipcmk -M 4096 >/dev/null 2>&1 && echo ', System V created' || "
                          "echo ', System V refused'",
                          lab.workspace())
                        .out;
          } else {
            text += "\n";
          }
        }
        // Each filtered variant has one zygote, kept for every later call. The supervisors the
        // launcher forked itself (danger-full-access) exit just after their last report: wait
        // for them, so that only zygotes are counted.
        std::vector<::pid_t> zygotes = children_of(FenceLauncher::pid());
        for (int i = 0; i < 500 && zygotes.size() > 1; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          zygotes = children_of(FenceLauncher::pid());
        }
        text += std::to_string(zygotes.size()) + " zygote(s)\n";
        // Against the host's own filters and no_new_privs, which every command inherits (a
        // container's runtime may have installed one): a fenced command holds exactly one more.
        const std::string fenced = filter_fields_beyond_this(1);
        const std::string system_v = isolation != dsh::Isolation::off                  ? "\n"
                                     : !unprivileged && dsh::detail::holds_sys_admin() ? ", System V created\n"
                                                                                       : ", System V refused\n";
        std::string zygote = "from a zygote (";
        zygote.append(fenced).append(", bounding set as expected); the command ").append(fenced).append(system_v);
        std::string expected = "read-only: ";
        expected.append(zygote).append("workspace-write: ").append(zygote);
        expected.append("danger-full-access: from the launcher; the command ").append(filter_fields_beyond_this(0));
        expected.append("\nworkspace-write: ").append(zygote).append("1 zygote(s)\n");
        return as_expected(text, expected);
      });
      CHECK(result == "as expected");
    }
  });
}

TEST_CASE("a zygote that dies takes its spare with it and is started again at the next call, by the same launcher; "
          "the call it served goes on") {
  const Lab lab;
  const std::string result = as_host(false, [&] {
    dsh::FenceOptions options;
    options.isolation = dsh::Isolation::off;
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
    FencedCommand command({"sleep", "30"});
    command.launch(Launch::launcher).in_directory(lab.workspace());
    dsh::FencedChild child = command.spawn(fence);
    const ::pid_t launcher = FenceLauncher::pid();
    const unsigned starts = FenceLauncher::starts();
    const ::pid_t zygote = parent_of(child.pid());
    if (zygote == launcher || parent_of(zygote) != launcher) {
      return std::string("no zygote");
    }
    // The spare the zygote forked when this call came dies with it, so that nothing holds the
    // dead zygote's socket and the launcher starts a new one.
    const std::vector<::pid_t> spares = children_once(zygote, 1, {child.pid()});
    if (spares.size() != 1) {
      return "spares: " + std::to_string(spares.size());
    }
    ::kill(zygote, SIGKILL);
    for (int i = 0; i < 500 && (running(zygote) || running(spares.front())); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string text = running(zygote) ? "zygote alive\n" : "zygote gone\n";
    text += running(spares.front()) ? "spare alive\n" : "spare gone\n";
    text += running(child.pid()) ? "call goes on\n" : "call ended\n";
    child.terminate();
    text += std::to_string(child.wait()) + "\n";
    const dsh::test::Shell next = shell(fence, "grep '^Seccomp_filters:' /proc/self/status", lab.workspace());
    text += next.out;
    const std::vector<::pid_t> zygotes = children_of(launcher);
    text += zygotes.size() == 1 && zygotes.front() != zygote && running(zygotes.front()) ? "a new zygote\n"
                                                                                         : "no new zygote\n";
    text += FenceLauncher::pid() == launcher && FenceLauncher::starts() == starts ? "same launcher\n"
                                                                                  : "another launcher\n";
    const std::string filters = filter_fields_beyond_this(1);
    const std::string expected = "zygote gone\nspare gone\ncall goes on\n" + std::to_string(128 + SIGKILL) +
                                 "\nSeccomp_filters:\t" + filters.substr(filters.rfind('=') + 1) +
                                 "\na new zygote\nsame launcher\n";
    return as_expected(text, expected);
  });
  CHECK(result == "as expected");
}

/// True once none of `pids` runs, looked at every 10 ms for at most `milliseconds`.
bool all_gone_within(const std::vector<::pid_t>& pids, int milliseconds) {
  for (int waited = 0; waited < milliseconds && std::any_of(pids.begin(), pids.end(), running); waited += 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::none_of(pids.begin(), pids.end(), running);
}

TEST_CASE("once the launcher announced a zygote, the host's calls go to it straight; a restart ends that zygote "
          "too") {
  const Lab lab;
  const std::string result = as_host(false, [&] {
    ::alarm(20); // a call that still went through the stopped launcher would wait for ever
    dsh::FenceOptions options;
    options.isolation = dsh::Isolation::off;
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
    std::string text = shell(fence, "echo first", lab.workspace()).out; // starts the zygote
    const ::pid_t launcher = FenceLauncher::pid();
    const unsigned starts = FenceLauncher::starts();
    const std::vector<::pid_t> zygotes = children_of(launcher);
    text += std::to_string(zygotes.size()) + " zygote\n";
    // Stopped, the launcher takes no call: each of these reaches the zygote without it.
    ::kill(launcher, SIGSTOP);
    for (int call = 0; call < 3; ++call) {
      text += shell(fence, "echo straight", lab.workspace()).out;
    }
    ::kill(launcher, SIGCONT);
    text += FenceLauncher::pid() == launcher && FenceLauncher::starts() == starts ? "same launcher\n"
                                                                                  : "another launcher\n";
    // The host held the zygote's socket too: a restart must close it, or the zygote (and its
    // spare) would wait for calls that never come.
    FenceLauncher::restart();
    text += all_gone_within(zygotes, 5000) ? "zygote gone\n" : "zygote left\n";
    text += shell(fence, "echo after", lab.workspace()).out;
    ::alarm(0);
    return text;
  });
  CHECK(result == "first\n1 zygote\nstraight\nstraight\nstraight\nsame launcher\nzygote gone\nafter\n");
}

// An attacker helper's two leaks: a zygote announced but not yet taken when the launcher was
// stopped stayed queued in the host's socket, which a forked copy of the host kept open, and
// so did the zygote; and a launcher killed from outside left its zygote serving the host.
TEST_CASE("a restart ends a zygote whose announcement is still queued, whatever copy of the host lives; a killed "
          "launcher's zygotes are not used and end") {
  const Lab lab;
  over_launcher_hosts(lab, [&](bool unprivileged) {
    CAPTURE(unprivileged);
    const std::string result = as_host(unprivileged, [&] {
      ::alarm(30);
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::off;
      const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only), options);
      std::string text = shell(fence, "echo first", lab.workspace()).out; // announced, not yet taken
      std::vector<::pid_t> zygotes = children_of(FenceLauncher::pid());
      const ::pid_t copy = ::fork(); // holds the host's sockets, as a fork without exec does
      if (copy == 0) {
        ::pause();
        ::_exit(0);
      }
      FenceLauncher::restart();
      text += std::to_string(zygotes.size()) + " zygote, " +
              (all_gone_within(zygotes, 3000) ? "gone after the restart\n" : "left after the restart\n");
      text += shell(fence, "echo second", lab.workspace()).out;
      text += shell(fence, "echo third", lab.workspace()).out; // the new zygote, taken and used
      const ::pid_t launcher = FenceLauncher::pid();
      const unsigned starts = FenceLauncher::starts();
      zygotes = children_of(launcher);
      ::kill(launcher, SIGKILL);
      while (running(launcher)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      text += shell(fence, "echo fourth", lab.workspace()).out;
      text += FenceLauncher::starts() == starts + 1 ? "a new launcher\n" : "no new launcher\n";
      text += std::to_string(zygotes.size()) + " zygote, " +
              (all_gone_within(zygotes, 3000) ? "gone with its launcher\n" : "left without its launcher\n");
      ::kill(copy, SIGKILL);
      ::waitpid(copy, nullptr, 0);
      ::alarm(0);
      return text;
    });
    CHECK(result == "first\n1 zygote, gone after the restart\nsecond\nthird\nfourth\na new launcher\n1 zygote, "
                    "gone with its launcher\n");
  });
}

TEST_CASE("the first call a new zygote serves may fail to start or be abandoned: its host hears the end at once") {
  const Lab lab;
  const std::string result = as_host(false, [&] {
    ::alarm(20); // a zygote that kept the call's socket would leave this host waiting for ever
    dsh::FenceOptions options;
    options.isolation = dsh::Isolation::off;
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
    std::string text;
    // The launcher's first call starts the zygote, while it holds that call's socket.
    FencedCommand missing({(lab.workspace() / "no-such-program").string()});
    missing.launch(Launch::launcher).in_directory(lab.workspace());
    try {
      text += "status " + std::to_string(missing.run(fence)) + "\n";
    } catch (const dsh::SystemError& error) {
      text += "not started: " + error.code().message() + "\n";
    }
    const ::pid_t launcher = FenceLauncher::pid();
    const std::vector<::pid_t> first = children_of(launcher);
    text += std::to_string(first.size()) + " zygote\n";
    // Again with the next zygote, for a call the host abandons while it runs.
    for (const ::pid_t zygote : first) {
      ::kill(zygote, SIGKILL);
      while (running(zygote)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    {
      FencedCommand sleeper({"sleep", "30"});
      sleeper.launch(Launch::launcher).in_directory(lab.workspace());
      const dsh::FencedChild abandoned = sleeper.spawn(fence);
      text += children_of(launcher) != first ? "a new zygote\n" : "the same zygote\n";
    } // its destructor ends the call and reads its socket to the end
    text += "abandoned\n";
    text += shell(fence, "echo next", lab.workspace()).out;
    ::alarm(0);
    return text;
  });
  CHECK(result ==
        "not started: " + std::generic_category().message(ENOENT) + "\n1 zygote\na new zygote\nabandoned\nnext\n");
}

TEST_CASE(
    "a call that ends without a report says what ended: a wait status when the host forked it and none otherwise") {
  // The first case is what the host hears when a zygote dies between taking a call and forking
  // its supervisor (no wait status exists: the host is not the supervisor's parent).
  const auto message = [](int status) {
    try {
      dsh::detail::throw_start_failure("/usr/bin/sleep", "workspace-write", dsh::detail::SupervisorReport{}, status);
    } catch (const dsh::SystemError& error) {
      return std::string(error.what()) + " [" + std::to_string(error.code().value()) + "]";
    }
    return std::string("nothing thrown");
  };
  const std::string no_child = std::generic_category().message(ECHILD) + " [" + std::to_string(ECHILD) + "]";
  CHECK(message(-1) == "cannot run \"/usr/bin/sleep\": the call ended before its command started (its supervisor, or "
                       "the launcher's process that was to fork it, ended first): " +
                           no_child);
  CHECK(message(9) ==
        "cannot run \"/usr/bin/sleep\": its supervisor ended before starting it (wait status 9): " + no_child);
}

TEST_CASE("when the host dies its launcher, its zygote and the zygote's spare exit and its calls end") {
  const Lab lab;
  std::array<int, 2> ends{-1, -1};
  REQUIRE(::pipe(ends.data()) == 0);
  const ::pid_t host = ::fork();
  REQUIRE(host >= 0);
  if (host == 0) {
    ::close(ends[0]);
    try {
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::off; // $$ is then a pid the test can look up
      const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
      FencedCommand command({"bash", "--norc", "-c", "echo $$ > pid; exec sleep 60"});
      command.in_directory(lab.workspace());
      dsh::FencedChild child = command.spawn(fence);
      const std::string launcher = std::to_string(FenceLauncher::pid()) + "\n";
      (void)dsh::detail::write_all(ends[1], launcher.data(), launcher.size());
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ends[1]);
  std::string text;
  std::array<char, 64> buffer{};
  ::ssize_t got = 0;
  while (text.find('\n') == std::string::npos && (got = ::read(ends[0], buffer.data(), buffer.size())) > 0) {
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(ends[0]);
  const auto launcher = static_cast<::pid_t>(std::stol(text));
  REQUIRE(launcher > 0);
  ::pid_t command = -1;
  for (int i = 0; i < 500 && command <= 0; ++i) {
    std::ifstream pid(lab.workspace() / "pid");
    pid >> command;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(command > 0);
  CHECK(running(command));
  const std::vector<::pid_t> zygotes = children_of(launcher);
  REQUIRE(zygotes.size() == 1); // the zygote that forked the call's supervisor
  CHECK(running(zygotes.front()));
  // The call's supervisor and the spare forked for the next call.
  const std::vector<::pid_t> forked = children_once(zygotes.front(), 2);
  CHECK(forked.size() == 2);
  ::kill(host, SIGKILL);
  CHECK(FencedCommand::wait_for(host) == 128 + SIGKILL);
  bool launcher_gone = false;
  bool command_gone = false;
  bool zygote_gone = false;
  for (int i = 0; i < 500 && !(launcher_gone && command_gone && zygote_gone); ++i) {
    launcher_gone = !running(launcher);
    command_gone = !running(command);
    zygote_gone = !running(zygotes.front()) &&
                  std::none_of(forked.begin(), forked.end(), [](::pid_t pid) { return running(pid); });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(launcher_gone);
  CHECK(command_gone);
  CHECK(zygote_gone);
}

TEST_CASE("a command that replaces a launcher its grant reaches does not get it run: the file is pinned") {
  const Lab lab;
  const std::filesystem::path marker = lab.outside() / "pwned";
  const std::string result = as_host(false, [&] {
    // A fence prepared before the host names a launcher inside its workspace: no guard knew it.
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write));
    std::filesystem::create_directory(lab.workspace() / "bin");
    const std::filesystem::path planted = lab.workspace() / "bin" / "dsh-fence-launcher";
    std::filesystem::copy_file(built_launcher, planted);
    FenceLauncher::use(planted);
    std::string text = shell(fence, "echo first", lab.workspace()).out;
    text += shell(fence,
                  "rm -f bin/dsh-fence-launcher && printf '#!/bin/sh\\nid > \"$M\"\\n' > bin/dsh-fence-launcher && "
                  "chmod 755 bin/dsh-fence-launcher && echo replaced",
                  lab.workspace(), {"M=" + marker.string()})
                .out;
    FenceLauncher::restart(); // as any change of the host's print would
    FencedCommand next(dsh::test::shell_argv("echo next", {}));
    std::string out;
    next.in_directory(lab.workspace()).on_output([&out](dsh::CommandStream, std::string_view bytes) {
      out.append(bytes);
    });
    dsh::FencedChild child = next.spawn(fence);
    text += child.launch_note().find("is not the file this process first used") != std::string::npos ? "refused\n"
                                                                                                     : "used\n";
    (void)child.wait();
    return text + out;
  });
  CHECK(result == "first\nreplaced\nrefused\nnext\n");
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("threads with the same credentials share one launcher; one in a Landlock domain of its own gets its own") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::string result = as_host(false, [&] {
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::danger_full_access));
    (void)shell(fence, "true", lab.workspace());
    const unsigned starts = FenceLauncher::starts();
    std::string text;
    for (int i = 0; i < 3; ++i) {
      std::thread([&] { text += shell(fence, "echo thread", lab.workspace()).out; }).join();
    }
    text += std::to_string(FenceLauncher::starts() - starts) + "\n";
    std::thread([&] {
      // This thread alone refuses making directories anywhere: a fork of it would pass that on.
      dsh::detail::RulesetAttr attributes{};
      attributes.handled_access_fs = 1ULL << 7; // LANDLOCK_ACCESS_FS_MAKE_DIR
      const dsh::UniqueFd ruleset(
          static_cast<int>(::syscall(dsh::detail::sys_landlock_create_ruleset, &attributes, sizeof attributes, 0U)));
      if (!ruleset || ::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0 ||
          ::syscall(dsh::detail::sys_landlock_restrict_self, ruleset.get(), 0U) != 0) {
        text += "no domain\n";
        return;
      }
      text += shell(fence, "mkdir \"$D\" 2>/dev/null && echo made || echo refused", lab.workspace(),
                    {"D=" + (lab.outside() / "made-by-domain").string()})
                  .out;
    }).join();
    text += std::to_string(FenceLauncher::starts() - starts) + "\n";
    return text;
  });
  CHECK(result == "thread\nthread\nthread\n0\nrefused\n1\n");
  CHECK_FALSE(std::filesystem::exists(lab.outside() / "made-by-domain"));
}

TEST_CASE("two threads that differ in what a fork of them passes on call at once, and every call runs once") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_launcher_hosts(lab, [&](bool unprivileged) {
    INFO((unprivileged ? "host uid 65534" : "root host"));
    std::filesystem::remove(lab.workspace() / "calls");
    const std::string result = as_host(unprivileged, [&] {
      // The base fence: the launcher is what is tried here, and the layer would make its
      // placeholders in the workspace as root first, which uid 65534 could not then enter.
      dsh::FenceOptions options;
      options.isolation = dsh::Isolation::off;
      const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
      // Each thread's calls alternate with the other's, so each replaces the launcher the other
      // started (no_new_privs is the thread's own, and a fork of it passes it on); a call already
      // handed to the launcher being replaced must still run, once.
      constexpr int calls = 20;
      std::array<std::string, 2> failures;
      const auto caller = [&](int which) {
        if (which == 1 && ::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
          failures[1] = "no_new_privs refused\n";
          return;
        }
        for (int i = 0; i < calls; ++i) {
          std::string failure;
          try {
            const Shell call = shell(fence, "echo \"$W $I\" >> calls", lab.workspace(),
                                     {"W=" + std::to_string(which), "I=" + std::to_string(i)});
            if (call.status != 0) {
              failure = "exit " + std::to_string(call.status) + ": " + call.err;
            }
          } catch (const std::exception& error) {
            failure = error.what();
          }
          if (!failure.empty()) {
            failures[static_cast<std::size_t>(which)] +=
                std::to_string(which) + " " + std::to_string(i) + ": " + failure + "\n";
          }
        }
      };
      std::thread other(caller, 1);
      caller(0);
      other.join();
      std::ifstream lines(lab.workspace() / "calls");
      std::vector<std::string> ran;
      for (std::string line; std::getline(lines, line);) {
        ran.push_back(line);
      }
      std::sort(ran.begin(), ran.end());
      std::vector<std::string> expected;
      for (int which = 0; which < 2; ++which) {
        for (int i = 0; i < calls; ++i) {
          expected.push_back(std::to_string(which) + " " + std::to_string(i));
        }
      }
      std::sort(expected.begin(), expected.end());
      return failures[0] + failures[1] + (ran == expected ? "each ran once" : std::to_string(ran.size()) + " lines");
    });
    CHECK(result == "each ran once");
  });
}

TEST_CASE("a root host whose system refuses new IPC namespaces gets the host's System V IPC refused, by fork and "
          "by the launcher") {
  DSH_REQUIRE_LANDLOCK();
  if (!dsh::detail::holds_sys_admin() || dsh::detail::probe_syscall_filter() != 0) {
    DSH_TEST_SKIP("needs a host holding CAP_SYS_ADMIN and the system-call filter");
  }
  const Lab lab;
  // A container's seccomp profile or an LSM refuses unshare(CLONE_NEWIPC) with EPERM to a host
  // that holds CAP_SYS_ADMIN: prepare cannot see it (report().ipc_namespace stays true), and
  // the command's child stacks the program that refuses System V IPC instead.
  const std::string result = as_host(false, [&] {
    // The host's own IPC namespace first, so that the count of segments below is this test's
    // alone (other tests make and remove segments at the same time).
    if (::unshare(CLONE_NEWIPC) != 0 || refuse_namespaces(CLONE_NEWIPC) != 0) {
      return std::string("cannot have an IPC namespace and then refuse new ones");
    }
    const int segment = ::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (segment < 0) {
      return std::string("cannot make the host's segment");
    }
    const auto segments = [] {
      ::shm_info info{};
      return ::shmctl(0, SHM_INFO, reinterpret_cast<::shmid_ds*>(&info)) < 0 ? -1L : static_cast<long>(info.used_ids);
    };
    const long before = segments();
    dsh::FenceOptions options;
    options.isolation = dsh::Isolation::off;
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
    std::string text = fence.report().ipc_namespace ? "report: own IPC namespace\n" : "report: System V refused\n";
    for (const Launch launch : {Launch::fork, Launch::launcher}) {
      FencedCommand command(shell_argv("ipcrm -m \"$SEGMENT\" >/dev/null 2>&1 && echo removed || echo kept; "
                                       "ipcmk -M 4096 >/dev/null 2>&1 && echo created || echo refused",
                                       {"SEGMENT=" + std::to_string(segment)}));
      command.launch(launch).in_directory(lab.workspace());
      const dsh::CommandOutput output = command.capture(fence);
      text += std::string(launch == Launch::fork ? "fork" : "launcher") + ": " + output.out;
    }
    ::shmid_ds status{};
    text += ::shmctl(segment, IPC_STAT, &status) == 0 ? "the host's segment is there" : "the host's segment is gone";
    text += segments() == before ? ", no segment added\n" : ", the segments changed\n";
    ::shmctl(segment, IPC_RMID, nullptr);
    return text;
  });
  CHECK(result == "report: own IPC namespace\nfork: kept\nrefused\nlauncher: kept\nrefused\n"
                  "the host's segment is there, no segment added\n");
}
