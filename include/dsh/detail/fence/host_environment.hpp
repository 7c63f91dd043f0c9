/// @file
/// The host's environment variables a fence reads when it is prepared: $TMPDIR, the
/// dynamic loader's search variables and $XDG_RUNTIME_DIR.
#pragma once

#include <cstdlib>

namespace dsh::detail {

/// The variables of the host's environment that decide what a fence guards and where it makes
/// the session's temporary directory, read once per `prepare`. Each is nullptr when unset. Tests
/// build their own, so every branch runs whatever the test process's environment holds.
struct HostEnvironment {
  const char* tmpdir = nullptr;          ///< $TMPDIR
  const char* xdg_runtime_dir = nullptr; ///< $XDG_RUNTIME_DIR: the default home of private temporary directories
  const char* ld_library_path = nullptr; ///< $LD_LIBRARY_PATH: the next host process loads libraries from there
  const char* ld_preload = nullptr;      ///< $LD_PRELOAD: libraries loaded into the next host process
  const char* ld_audit = nullptr;        ///< $LD_AUDIT: auditing libraries loaded into the next host process

  /// The calling process's environment as it is now.
  [[nodiscard]] static HostEnvironment current() noexcept {
    HostEnvironment environment;
    environment.tmpdir = std::getenv("TMPDIR");
    environment.xdg_runtime_dir = std::getenv("XDG_RUNTIME_DIR");
    environment.ld_library_path = std::getenv("LD_LIBRARY_PATH");
    environment.ld_preload = std::getenv("LD_PRELOAD");
    environment.ld_audit = std::getenv("LD_AUDIT");
    return environment;
  }
};

} // namespace dsh::detail
