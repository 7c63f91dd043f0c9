// Seccomp filters a test child installs in itself to stand in for another machine.
//
// What a container runtime's seccomp profile does to a process that asks for a namespace it may
// not have: unshare(2) and clone(2) with one of the refused CLONE_NEW* flags fail with EPERM,
// and clone3(2), whose flags the filter cannot read, with ENOSYS (so glibc falls back to clone).
// For a test child only: it stands in for a machine that refuses those namespaces, without
// changing machine settings.
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <thread>

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
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
/// answers unshare and clone with any flag of `namespaces` (CLONE_NEWUSER, CLONE_NEWIPC, ...)
/// with `action` (a SECCOMP_RET_ value), and clone3, whose flags it cannot read, with ENOSYS.
/// Returns what seccomp(2) returned (0, or the listener's descriptor when `flags` has
/// SECCOMP_FILTER_FLAG_NEW_LISTENER), or -errno of the call that failed. Async-signal-safe.
inline int namespace_filter(std::uint32_t namespaces, std::uint32_t action, unsigned flags) noexcept {
  constexpr std::uint32_t arch = native_audit_arch;
  if (arch == 0) {
    return -ENOSYS;
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
      sock_filter{static_cast<std::uint16_t>(BPF_JMP | BPF_JSET | BPF_K), 1, 0, namespaces}, // to `action`
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      stmt(BPF_RET | BPF_K, action),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
  }};
  sock_fprog fprog{static_cast<unsigned short>(program.size()), const_cast<sock_filter*>(program.data())};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
    return -errno;
  }
  const long result = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
  return result < 0 ? -errno : static_cast<int>(result);
}

/// Installs in the calling thread (after no_new_privs, which a fence sets anyway) a filter that
/// refuses unshare and clone with any flag of `namespaces` (CLONE_NEWUSER, CLONE_NEWIPC, ...),
/// with `error` (EPERM as a policy refuses them, ENOSPC as a user at its namespace limit sees).
/// Returns 0, or the errno of the call that failed. Async-signal-safe.
inline int refuse_namespaces(std::uint32_t namespaces, int error = EPERM) noexcept {
  const int result =
      namespace_filter(namespaces, SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA), 0U);
  return result < 0 ? -result : 0;
}

/// A namespace limit that comes and goes, as the user's namespace count does when another of
/// its processes takes namespaces and lets them go: while `reached` is true, unshare and clone
/// with any flag of `namespaces` fail with ENOSPC; otherwise they proceed. A filter with a
/// listener, answered by a thread of this object, for a test child only (the filter cannot be
/// taken back, and every process the child starts asks this thread).
class NamespaceLimit {
public:
  /// Installs the filter in the calling thread; `error()` is then 0, or the errno that refused it.
  explicit NamespaceLimit(std::uint32_t namespaces) {
    const int listener = namespace_filter(namespaces, SECCOMP_RET_USER_NOTIF, SECCOMP_FILTER_FLAG_NEW_LISTENER);
    if (listener < 0) {
      error_ = -listener;
      return;
    }
    listener_ = listener;
    std::array<int, 2> ends{-1, -1};
    if (::pipe2(ends.data(), O_CLOEXEC) != 0) {
      error_ = errno;
      return;
    }
    stop_read_ = ends[0];
    stop_write_ = ends[1];
    answerer_ = std::thread([this] { answer(); });
  }
  NamespaceLimit(const NamespaceLimit&) = delete;
  NamespaceLimit& operator=(const NamespaceLimit&) = delete;
  ~NamespaceLimit() {
    if (answerer_.joinable()) {
      const char stop = 's'; // a byte, not the close: a process forked meanwhile may hold this end
      (void)!::write(stop_write_, &stop, 1);
      answerer_.join();
    }
    for (const int fd : {stop_read_, stop_write_, listener_}) {
      if (fd >= 0) {
        (void)::close(fd);
      }
    }
  }
  [[nodiscard]] int error() const noexcept { return error_; }
  /// Makes the limit reached (true) or lifted (false) for the calls that follow.
  void reach(bool reached) noexcept { reached_.store(reached); }

private:
  void answer() noexcept {
    for (;;) {
      std::array<pollfd, 2> wait{{{listener_, POLLIN, 0}, {stop_read_, POLLIN, 0}}};
      if (::poll(wait.data(), wait.size(), -1) < 0) {
        if (errno == EINTR) {
          continue;
        }
        return;
      }
      if (wait[1].revents != 0) {
        return; // the owner is going
      }
      seccomp_notif request{};
      if (::ioctl(listener_, SECCOMP_IOCTL_NOTIF_RECV, &request) != 0) {
        continue; // interrupted, or the caller died before it was read
      }
      seccomp_notif_resp response{};
      response.id = request.id;
      if (reached_.load()) {
        response.error = -ENOSPC;
      } else {
        response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      }
      (void)::ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &response); // ENOENT: the caller died
    }
  }

  int error_ = 0;
  int listener_ = -1;
  int stop_read_ = -1;
  int stop_write_ = -1;
  std::atomic<bool> reached_{true};
  std::thread answerer_;
};

/// `refuse_namespaces(CLONE_NEWUSER)`: a machine that refuses user namespaces.
inline int refuse_user_namespaces() noexcept { return refuse_namespaces(CLONE_NEWUSER); }

} // namespace dsh::test
