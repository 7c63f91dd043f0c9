// The unprivileged user the suites play another user or an unprivileged host with (nobody,
// uid and gid 65534), and what a forked child may become before it acts.
#pragma once

#include "support/catch.hpp"

#include <filesystem>

#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::test {

/// The unprivileged user and group: nobody.
inline constexpr ::uid_t nobody = 65534;

/// In a child: becomes uid and gid 65534 for good, with no supplementary groups, and stays
/// dumpable as an ordinary login process is; returns false if the process could not.
[[nodiscard]] inline bool become_nobody() noexcept {
  return ::setgroups(0, nullptr) == 0 && ::setgid(nobody) == 0 && ::setuid(nobody) == 0 &&
         ::prctl(PR_SET_DUMPABLE, 1UL, 0UL, 0UL, 0UL) == 0;
}

/// Gives uid and gid 65534 `path` (and, when it is a directory, the right to enter it); the
/// test stops when it cannot.
inline void hand_to_nobody(const std::filesystem::path& path) { REQUIRE(::chown(path.c_str(), nobody, nobody) == 0); }

/// In a child (as root): moves into a mount namespace of its own whose mounts propagate nowhere,
/// so that what it mounts or unmounts ends with it; returns false if it could not.
[[nodiscard]] inline bool enter_private_mount_namespace() noexcept {
  return ::unshare(CLONE_NEWNS) == 0 && ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

} // namespace dsh::test
