/// @file
/// The kernel's Landlock interface: the system calls, their structures, the ABI probe and
/// why Landlock is unavailable.
#pragma once

#include <dsh/detail/fence/host_environment.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/syscall.h>

namespace dsh::detail {

/// The result of asking the kernel for its Landlock ABI.
struct LandlockProbe {
  int abi = 0;   ///< 0 when unavailable
  int error = 0; ///< errno of the probe when unavailable
  bool operator==(const LandlockProbe&) const = default;
};

/// Builds the fence of `PreparedFence::prepare` (its friend), with the kernel probe and the
/// host's environment passed in; with `reads_later` it leaves the read fence to the caller
/// (`PreparedFence::fence_reads`, once the namespace layer is planned). Defined in
/// <dsh/prepared_fence.hpp>, after PreparedFence.
[[nodiscard]] PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                          LandlockProbe probe, const HostEnvironment& environment,
                                          bool reads_later = false);

#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
#if defined(SYS_landlock_create_ruleset)
inline constexpr long sys_landlock_create_ruleset = SYS_landlock_create_ruleset;
inline constexpr long sys_landlock_add_rule = SYS_landlock_add_rule;
inline constexpr long sys_landlock_restrict_self = SYS_landlock_restrict_self;
#else // the same numbers on every architecture (older libc headers lack the names)
inline constexpr long sys_landlock_create_ruleset = 444;
inline constexpr long sys_landlock_add_rule = 445;
inline constexpr long sys_landlock_restrict_self = 446;
#endif
inline constexpr unsigned landlock_create_ruleset_version = 1U << 0;
inline constexpr int landlock_rule_path_beneath = 1;

/// struct landlock_ruleset_attr as ABI 6 defines it. The size passed to the kernel is that
/// of the fields its ABI knows (`ruleset_attr_size`).
struct RulesetAttr {
  std::uint64_t handled_access_fs;  ///< ABI 1
  std::uint64_t handled_access_net; ///< ABI 4
  std::uint64_t scoped;             ///< ABI 6
};

/// The size of struct landlock_ruleset_attr on a kernel with Landlock ABI `abi`.
[[nodiscard]] constexpr std::size_t ruleset_attr_size(int abi) noexcept {
  if (abi >= 6) {
    return sizeof(RulesetAttr);
  }
  return abi >= 4 ? offsetof(RulesetAttr, scoped) : offsetof(RulesetAttr, handled_access_net);
}

/// struct landlock_path_beneath_attr (packed, 12 bytes).
struct __attribute__((packed)) PathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};
#endif

/// Asks the running kernel for its Landlock ABI version.
[[nodiscard]] inline LandlockProbe probe_landlock() noexcept {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  const long version = ::syscall(sys_landlock_create_ruleset, nullptr, 0, landlock_create_ruleset_version);
  if (version < 0) {
    return {0, errno};
  }
  return {static_cast<int>(version), 0};
#else
  return {0, ENOSYS};
#endif
}

/// Why Landlock is unavailable, in words a kernel owner can act on.
[[nodiscard]] inline std::string landlock_unavailable_reason(int error) {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  if (error == EOPNOTSUPP) {
    return "Landlock is built into this kernel but disabled (add landlock to the lsm= boot "
           "parameter)";
  }
  if (error == ENOSYS) {
    return "this kernel has no Landlock (Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK=y "
           "is required)";
  }
  return std::string("the Landlock probe failed: ") + std::strerror(error);
#else
  (void)error;
#if defined(__linux__)
  return "this build has Landlock disabled (DSH_SANDBOX_POLICY_NO_LANDLOCK)";
#else
  return "Landlock exists only on Linux; this system has no equivalent fence";
#endif
#endif
}

/// Opens `path` as a Landlock rule anchor (O_PATH, following symlinks); -1 with errno set.
[[nodiscard]] inline int open_rule_anchor(const std::filesystem::path& path, bool directory) noexcept {
#if defined(__linux__)
  return ::open(path.c_str(), O_PATH | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
#else
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
#endif
}

} // namespace dsh::detail
