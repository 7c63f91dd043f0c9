/// @file
/// The fence launcher: a small process the host starts once, from which every fenced call's
/// supervisor is forked, so that a call costs the same whatever the host's size
/// (docs/enforcement.md#the-launcher, docs/performance.md#the-launcher).
#pragma once

#include <dsh/detail/process/launcher_client.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <sys/types.h>

namespace dsh {

/// How `FencedCommand` starts the supervisor of a call.
enum class Launch {
  /// From the launcher when one is configured and usable, else by forking the host (the
  /// child's `launch_note()` then says why).
  automatic,
  /// By forking the host: what a small, short-lived host (a command-line tool) does best.
  fork,
  /// From the launcher only: a call that cannot have it fails (dsh::SystemError) and runs nothing.
  launcher,
};

/// "automatic", "fork" or "launcher".
[[nodiscard]] constexpr std::string_view to_string(Launch launch) noexcept {
  switch (launch) {
  case Launch::fork:
    return "fork";
  case Launch::launcher:
    return "launcher";
  case Launch::automatic:
    break;
  }
  return "automatic";
}

/// The process's fence launcher (one per host process, started at its first fenced call).
///
/// The program is `dsh-fence-launcher`, which the package installs in
/// `<libexecdir>/dsh-sandbox-policy/`; the CMake target `dsh::sandbox_policy` and the
/// pkg-config file define `DSH_SANDBOX_POLICY_LAUNCHER` to its path, the default used here.
/// A host that includes the headers without them calls `use` (or gets the fork).
class FenceLauncher {
public:
  FenceLauncher() = delete;

  /// Makes `program` (absolute) the launcher of this process's next calls; "" for none, so
  /// that `Launch::automatic` forks. A running launcher of another program is stopped (its
  /// calls go on). Throws ConfigError when `program` is not empty and not absolute.
  static void use(std::filesystem::path program) { detail::LauncherClient::instance().configure(std::move(program)); }

  /// The configured program ("" when none).
  [[nodiscard]] static std::filesystem::path program() { return detail::LauncherClient::instance().state().program; }

  /// The running launcher's pid, or -1 when none runs (it starts at the next call).
  [[nodiscard]] static ::pid_t pid() { return detail::LauncherClient::instance().state().pid; }

  /// How many launchers this process has started: more than one when the host changed what
  /// a command inherits (credentials, namespaces, limits, ...) or a launcher was stopped.
  [[nodiscard]] static unsigned starts() { return detail::LauncherClient::instance().state().starts; }

  /// Why the last call could not use the launcher ("" when it could, or none was tried).
  [[nodiscard]] static std::string problem() { return detail::LauncherClient::instance().state().problem; }

  /// Stops the running launcher; the next call starts a fresh one from the calling thread.
  /// A host that enters a Landlock domain of its own after its first fenced call calls this
  /// (a domain cannot be read back, so the launcher cannot notice it).
  static void restart() { detail::LauncherClient::instance().restart(); }
};

} // namespace dsh
