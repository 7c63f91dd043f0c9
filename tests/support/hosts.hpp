// Shared by the red-team suites: the hostile command as a shell under a fence, its unfenced
// control run, hosts that prepare and run fences as root or as an unprivileged user, and the
// tables host x mode the suites run each attempt over.
#pragma once

#include "support/catch.hpp"
#include "support/landlock.hpp"
#include "support/process.hpp"
#include "support/users.hpp"

#include <dsh/fence_launcher.hpp>
#include <dsh/landlock.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::test {

/// The argv of `bash -c script` in the C locale (messages byte-stable), with `variables`
/// ("NAME=value") in its environment: the scripts read their targets from them, so no path is quoted into a script.
inline std::vector<std::string> shell_argv(const std::string& script, const std::vector<std::string>& variables) {
  std::vector<std::string> argv{"env", "LC_ALL=C"};
  argv.insert(argv.end(), variables.begin(), variables.end());
  argv.insert(argv.end(), {"bash", "--norc", "--noprofile", "-c", script});
  return argv;
}

/// What a fenced command printed and how it ended.
struct Shell {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs `command` under `fence` with its output captured through `on_output`.
inline Shell run_captured(FencedCommand& command, const PreparedFence& fence) {
  Shell result;
  command.on_output([&result](dsh::CommandStream stream, std::string_view bytes) {
    (stream == dsh::CommandStream::out ? result.out : result.err).append(bytes);
  });
  result.status = command.run(fence);
  return result;
}

/// The hostile command: `bash -c script` under `fence`, in `cwd`, output captured.
inline Shell shell(const PreparedFence& fence, const std::string& script, const std::filesystem::path& cwd,
                   const std::vector<std::string>& variables = {}) {
  FencedCommand command(shell_argv(script, variables));
  command.in_directory(cwd);
  return run_captured(command, fence);
}

/// The control: the same script with no fence at all (a forked child that execs it, its output
/// discarded); returns its exit status.
inline int control_shell(const std::string& script, const std::filesystem::path& cwd,
                         const std::vector<std::string>& variables = {}) {
  std::vector<std::string> args = shell_argv(script, variables);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
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

/// Runs `body` in a forked host process (as uid 65534 when `unprivileged`, which exits 251
/// when it cannot become that user), guarded by a 120-second alarm that ends a hung host;
/// returns what `report_from_child` gives: the text `body` returned, or what it threw, then how
/// the host died when it did not exit 0. `body` must not use Catch2: it runs in the copy.
inline std::string as_host(bool unprivileged, const std::function<std::string()>& body) {
  return report_from_child("host", 120, body, [unprivileged] {
    if (unprivileged && !become_nobody()) {
      ::_exit(251);
    }
  });
}

/// The uid a host runs as.
inline ::uid_t uid_of_host(bool unprivileged) { return unprivileged ? nobody : ::geteuid(); }

/// Gives the unprivileged host what it needs of the laboratory: the base traversable, the
/// workspace and the outside directory its own, and then each of `also` (a suite's own
/// directories the host writes in).
inline void open_lab_to_nobody(const Lab& lab, std::span<const std::filesystem::path> also = {}) {
  REQUIRE(::chmod(lab.base().c_str(), 0755) == 0);
  hand_to_nobody(lab.workspace());
  hand_to_nobody(lab.outside());
  for (const std::filesystem::path& path : also) {
    hand_to_nobody(path);
  }
}

/// One row of a red-team table: the host that prepares and runs the fence, and the fence's mode.
struct HostRow {
  bool unprivileged = false;                       ///< the host runs as uid 65534, else as root
  SandboxMode mode = SandboxMode::workspace_write; ///< the mode of the fence it runs the attack under
};

/// The table host x mode of the red-team suites: every one of `modes` with the root host, then
/// every one with the unprivileged host (so the laboratory is handed over once, between them).
inline std::vector<HostRow> host_mode_table(std::span<const SandboxMode> modes) {
  std::vector<HostRow> rows;
  for (const bool unprivileged : {false, true}) {
    for (const SandboxMode mode : modes) {
      rows.push_back(HostRow{unprivileged, mode});
    }
  }
  return rows;
}

/// The hosts alone, for a table whose modes vary inside each host's attempt: root, then uid 65534.
inline constexpr std::array<bool, 2> host_table{false, true};

/// Runs `attempt(unprivileged, mode)` for each row of `host_mode_table(modes)`, with the row
/// captured in failure messages; before the first unprivileged row the laboratory is opened to
/// uid 65534 with `open_lab_to_nobody(lab, also)`.
inline void over_host_mode_table(const Lab& lab, std::span<const SandboxMode> modes,
                                 std::span<const std::filesystem::path> also,
                                 const std::function<void(bool unprivileged, SandboxMode mode)>& attempt) {
  bool opened = false;
  for (const HostRow& row : host_mode_table(modes)) {
    if (row.unprivileged && !opened) {
      open_lab_to_nobody(lab, also);
      opened = true;
    }
    CAPTURE(row.unprivileged, dsh::to_string(row.mode));
    attempt(row.unprivileged, row.mode);
  }
}

/// `over_host_mode_table` with the laboratory alone opened to uid 65534.
inline void over_host_mode_table(const Lab& lab, std::span<const SandboxMode> modes,
                                 const std::function<void(bool unprivileged, SandboxMode mode)>& attempt) {
  over_host_mode_table(lab, modes, {}, attempt);
}

/// Runs `attempt(unprivileged)` for each host of `host_table`, the host captured in failure
/// messages; before the unprivileged host the laboratory is opened to uid 65534 with
/// `open_lab_to_nobody(lab, also)`.
inline void over_host_table(const Lab& lab, std::span<const std::filesystem::path> also,
                            const std::function<void(bool unprivileged)>& attempt) {
  for (const bool unprivileged : host_table) {
    CAPTURE(unprivileged);
    if (unprivileged) {
      open_lab_to_nobody(lab, also);
    }
    attempt(unprivileged);
  }
}

/// `over_host_table` with the laboratory alone opened to uid 65534.
inline void over_host_table(const Lab& lab, const std::function<void(bool unprivileged)>& attempt) {
  over_host_table(lab, {}, attempt);
}

#if defined(DSH_SANDBOX_POLICY_LAUNCHER)
/// The launcher this build compiled in.
inline const std::filesystem::path built_launcher = DSH_SANDBOX_POLICY_LAUNCHER;

/// Makes a copy of the build's launcher in the laboratory's base the launcher of this (forked)
/// host: the build directory may be one uid 65534 cannot enter (CI builds under a 0700 mktemp
/// directory), and a host that cannot start its launcher forks instead, which these tests must
/// not mistake for the launcher's behaviour.
inline void use_launcher_nobody_reaches(const Lab& lab) {
  const std::filesystem::path copy = lab.base() / "dsh-fence-launcher";
  if (!std::filesystem::exists(copy)) {
    std::filesystem::copy_file(built_launcher, copy);
    REQUIRE(::chmod(copy.c_str(), 0755) == 0);
  }
  FenceLauncher::use(copy);
}

/// Restores the build's launcher when a test that configured another one ends.
struct LauncherRestorer {
  LauncherRestorer() = default;
  LauncherRestorer(const LauncherRestorer&) = delete;
  LauncherRestorer& operator=(const LauncherRestorer&) = delete;
  LauncherRestorer(LauncherRestorer&&) = delete;
  LauncherRestorer& operator=(LauncherRestorer&&) = delete;
  ~LauncherRestorer() {
    try {
      FenceLauncher::use(built_launcher);
    } catch (const std::exception& error) { // the build's launcher path is absolute: not expected
      std::fprintf(stderr, "cannot restore the build's launcher: %s\n", error.what());
      std::abort();
    }
  }
};
#endif

} // namespace dsh::test
