// Shared by the red-team suites: the hostile command as a shell under a fence, its unfenced
// control run, and hosts that prepare and run fences as root or as an unprivileged user.
#pragma once

#include "support/catch.hpp"
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::test {

/// The unprivileged host's user and group.
inline constexpr ::uid_t nobody = 65534;

/// The argv of `bash -c script` in the C locale (messages byte-stable), with `variables`
/// ("NAME=value") in its environment: the scripts read their targets from them, so no path is quoted into a script.
inline std::vector<std::string> shell_argv(const std::string& script, const std::vector<std::string>& variables) {
  std::vector<std::string> argv{"env", "LC_ALL=C"};
  argv.insert(argv.end(), variables.begin(), variables.end());
  argv.insert(argv.end(), {"bash", "--norc", "--noprofile", "-c", script});
  return argv;
}

/// What a fenced shell printed and how it ended.
struct Shell {
  int status = -1;
  std::string out;
  std::string err;
};

/// The hostile command: `bash -c script` under `fence`, in `cwd`, output captured.
inline Shell shell(const PreparedFence& fence, const std::string& script, const std::filesystem::path& cwd,
                   const std::vector<std::string>& variables = {}) {
  FencedCommand command(shell_argv(script, variables));
  Shell result;
  command.in_directory(cwd).on_output([&result](dsh::CommandStream stream, std::string_view bytes) {
    (stream == dsh::CommandStream::out ? result.out : result.err).append(bytes);
  });
  result.status = command.run(fence);
  return result;
}

/// The control: the same script with no fence at all (a forked child that execs it, its output
/// discarded); returns its exit status.
inline int control_shell(const std::string& script, const std::filesystem::path& cwd,
                         const std::vector<std::string>& variables = {}) {
  std::vector<std::string> args = shell_argv(script, variables);
  std::vector<char*> argv;
  for (std::string& arg : args) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  return unfenced([&] {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null < 0 || ::dup2(null, STDOUT_FILENO) < 0 || ::dup2(null, STDERR_FILENO) < 0 || ::chdir(cwd.c_str()) != 0) {
      return 126;
    }
    ::execvp(argv[0], argv.data());
    return 127;
  });
}

/// Becomes uid and gid 65534 for good, as an unprivileged host runs; stays dumpable, as an
/// ordinary login process is.
inline void become_unprivileged() {
  if (::setgroups(0, nullptr) != 0 || ::setgid(nobody) != 0 || ::setuid(nobody) != 0 ||
      ::prctl(PR_SET_DUMPABLE, 1UL, 0UL, 0UL, 0UL) != 0) {
    ::_exit(251);
  }
}

/// Runs `body` in a forked host process (as uid 65534 when `unprivileged`), guarded by an alarm
/// that kills a hung host; returns the text `body` returned, or what it threw, or how the host
/// died. `body` must not use Catch2: it runs in the copy.
inline std::string as_host(bool unprivileged, const std::function<std::string()>& body) {
  std::array<int, 2> ends{-1, -1};
  REQUIRE(::pipe2(ends.data(), O_CLOEXEC) == 0);
  const dsh::UniqueFd reader{ends[0]};
  dsh::UniqueFd writer{ends[1]};
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(120);
    if (unprivileged) {
      become_unprivileged();
    }
    std::string text;
    try {
      text = body();
    } catch (const std::exception& error) {
      text += std::string("exception: ") + error.what();
    }
    (void)dsh::detail::write_all(writer.get(), text.data(), text.size());
    ::_exit(0);
  }
  writer.reset();
  std::string text;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ::ssize_t got = ::read(reader.get(), buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      break;
    }
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  const int status = FencedCommand::wait_for(pid);
  return status == 0 ? text : text + "<host ended with status " + std::to_string(status) + ">";
}

/// The uid a host runs as.
inline ::uid_t uid_of_host(bool unprivileged) { return unprivileged ? nobody : ::geteuid(); }

/// Gives uid 65534 `path` (and, when it is a directory, the right to enter it).
inline void hand_to_nobody(const std::filesystem::path& path) { REQUIRE(::chown(path.c_str(), nobody, nobody) == 0); }

/// Gives the unprivileged host what it needs of the laboratory: the base traversable, the
/// workspace and the outside directory its own.
inline void open_lab_to_nobody(const Lab& lab) {
  REQUIRE(::chmod(lab.base().c_str(), 0755) == 0);
  hand_to_nobody(lab.workspace());
  hand_to_nobody(lab.outside());
}

} // namespace dsh::test
