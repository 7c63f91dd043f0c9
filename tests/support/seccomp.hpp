// Seccomp filters a test child installs in itself to stand in for another machine.
//
// What a container runtime's seccomp profile does to a process that asks for a namespace it may
// not have: unshare(2) and clone(2) with one of the refused CLONE_NEW* flags fail with EPERM,
// and clone3(2), whose flags the filter cannot read, with ENOSYS (so glibc falls back to clone).
// For a test child only: it stands in for a machine that refuses those namespaces, without
// changing machine settings.
#pragma once

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dsh::test {

/// The AUDIT_ARCH_ value seccomp_data.arch carries for this build's ABI; 0 where these
/// filters do not know it.
#if defined(__x86_64__)
inline constexpr std::uint32_t native_audit_arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr std::uint32_t native_audit_arch = AUDIT_ARCH_AARCH64;
#else
inline constexpr std::uint32_t native_audit_arch = 0;
#endif

/// Installs in the calling thread (after no_new_privs, which a fence sets anyway) a filter that
/// refuses unshare and clone with any flag of `namespaces` (CLONE_NEWUSER, CLONE_NEWIPC, ...),
/// with `error` (EPERM as a policy refuses them, ENOSPC as a user at its namespace limit sees).
/// Returns 0, or the errno of the call that failed. Async-signal-safe.
inline int refuse_namespaces(std::uint32_t namespaces, int error = EPERM) noexcept {
  constexpr std::uint32_t arch = native_audit_arch;
  if (arch == 0) {
    return ENOSYS;
  }
  constexpr std::uint32_t nr = offsetof(seccomp_data, nr);
  constexpr std::uint32_t arg0 = offsetof(seccomp_data, args); // low 32 bits on little-endian machines
  constexpr auto stmt = [](std::uint16_t code, std::uint32_t k) { return sock_filter{code, 0, 0, k}; };
  constexpr auto jump = [](std::uint32_t k, std::uint8_t if_true, std::uint8_t if_false) {
    return sock_filter{static_cast<std::uint16_t>(BPF_JMP | BPF_JEQ | BPF_K), if_true, if_false, k};
  };
  const std::array<sock_filter, 12> program{{
      stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      jump(arch, 1, 0),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), // another ABI: not this test's concern
      stmt(BPF_LD | BPF_W | BPF_ABS, nr),
      jump(static_cast<std::uint32_t>(SYS_clone3), 6, 0),  // to ENOSYS
      jump(static_cast<std::uint32_t>(SYS_unshare), 1, 0), // to the flags
      jump(static_cast<std::uint32_t>(SYS_clone), 0, 2),   // to the flags, else allow
      stmt(BPF_LD | BPF_W | BPF_ABS, arg0),
      sock_filter{static_cast<std::uint16_t>(BPF_JMP | BPF_JSET | BPF_K), 1, 0, namespaces}, // to `error`
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA)),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
  }};
  sock_fprog fprog{static_cast<unsigned short>(program.size()), const_cast<sock_filter*>(program.data())};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
    return errno;
  }
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, &fprog) != 0) {
    return errno;
  }
  return 0;
}

/// `refuse_namespaces(CLONE_NEWUSER)`: a machine that refuses user namespaces.
inline int refuse_user_namespaces() noexcept { return refuse_namespaces(CLONE_NEWUSER); }

} // namespace dsh::test
