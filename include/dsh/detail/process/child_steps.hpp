/// @file
/// What a fenced child does between fork and exec, async-signal-safe: its descriptors,
/// capabilities, signals, session and stdio, and how it reports a failed start.
#pragma once

#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dsh::detail {

/// Writes a C string to `fd`; async-signal-safe.
inline void write_text(int fd, const char* text) noexcept { static_cast<void>(write_all(fd, text, std::strlen(text))); }

/// Writes a non-negative number in decimal to `fd`; async-signal-safe.
inline void write_number(int fd, int value) noexcept {
  char digits[16];
  std::size_t at = sizeof digits;
  unsigned rest = value < 0 ? 0U : static_cast<unsigned>(value);
  do {
    digits[--at] = static_cast<char>('0' + rest % 10U);
    rest /= 10U;
  } while (rest != 0U && at > 0);
  static_cast<void>(write_all(fd, digits + at, sizeof digits - at));
}

/// What a child that could not start reports through the spawn pipe.
struct ChildFailure {
  int fence = 0; ///< 1 when applying the fence failed, 0 when exec failed
  int error = 0; ///< errno
};

/// Marks every descriptor above 2 close-on-exec, so that nothing the host opened before the
/// fence (and which Landlock therefore does not check) reaches the command. Async-signal-safe.
inline void close_inherited_descriptors_on_exec() noexcept {
#if defined(__linux__) && defined(SYS_close_range)
  constexpr unsigned close_range_cloexec = 1U << 2;
  if (::syscall(SYS_close_range, 3U, ~0U, close_range_cloexec) == 0) {
    return;
  }
#endif
  const long limit = ::sysconf(_SC_OPEN_MAX);
  const int last = limit > 0 && limit < 65536 ? static_cast<int>(limit) : 65536;
  for (int fd = 3; fd < last; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) {
      ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }
}

/// Closes the descriptors `first`..`last` (inclusive); async-signal-safe.
inline void close_descriptor_range(int first, int last) noexcept {
  if (first > last) {
    return;
  }
#if defined(__linux__) && defined(SYS_close_range)
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), static_cast<unsigned>(last), 0U) == 0) {
    return;
  }
#endif
  const long limit = ::sysconf(_SC_OPEN_MAX);
  const int end = std::min(last, limit > 0 && limit < 65536 ? static_cast<int>(limit) - 1 : 65535);
  for (int fd = first; fd <= end; ++fd) {
    ::close(fd);
  }
}

/// Closes every descriptor except those in `keep` (-1 entries are ignored); async-signal-safe.
inline void close_all_except(std::array<int, 3> keep) noexcept {
  std::sort(keep.begin(), keep.end());
  int from = 0;
  for (const int fd : keep) {
    if (fd >= from) {
      close_descriptor_range(from, fd - 1);
      from = fd + 1;
    }
  }
  close_descriptor_range(from, std::numeric_limits<int>::max());
}

/// Where a child that could not exec the command stopped.
enum class ChildStage : int {
  setup = 0,        ///< session, terminal, directory or descriptors
  fence = 1,        ///< PreparedFence::apply
  capabilities = 2, ///< dropping FENCE_DROPPED_CAPABILITIES
  supervision = 3,  ///< the supervisor could not watch the command's processes
  exec = 4,         ///< execv itself
};

/// The failed step of a child before exec: errno, the call (a string literal), the stage and,
/// for the capability stage, the capability (-1 otherwise). `error` 0 means no failure.
struct ChildStep {
  int error = 0;
  const char* step = "";
  ChildStage stage = ChildStage::setup;
  int capability = -1;
};

#if defined(__linux__)
/// struct __user_cap_header_struct and __user_cap_data_struct of <linux/capability.h>
/// (version 3: two data entries, capabilities 0-31 and 32-63).
struct CapabilityHeader {
  std::uint32_t version;
  int pid;
};
struct CapabilityData {
  std::uint32_t effective;
  std::uint32_t permitted;
  std::uint32_t inheritable;
};
inline constexpr std::uint32_t capability_version_3 = 0x20080522U;
inline constexpr unsigned cap_setpcap = 8;
#endif

/// True when the calling process holds CAP_SYS_ADMIN in its effective set (root, outside a
/// container that took it away): it may then give a child new IPC, mount and PID namespaces
/// without a user namespace.
[[nodiscard]] inline bool holds_sys_admin() noexcept {
#if defined(__linux__)
  CapabilityHeader header{capability_version_3, 0};
  std::array<CapabilityData, 2> sets{};
  constexpr unsigned cap_sys_admin = 21;
  return ::syscall(SYS_capget, &header, sets.data()) == 0 && (sets[0].effective >> cap_sys_admin & 1U) != 0;
#else
  return false;
#endif
}

/// What the calling thread's /proc/thread-self/status says about the signals and capabilities
/// a fenced start must reset, as bit masks (bit N - 1 is signal N; bit N is CAP number N). A
/// mask that could not be read stays all ones, which makes the caller reset or drop everything.
struct ThreadStatus {
  std::uint64_t not_default = ~0ULL; ///< signals ignored or caught (SigIgn | SigCgt)
  std::uint64_t bounding = ~0ULL;    ///< the bounding set (CapBnd)
  std::uint64_t ambient = ~0ULL;     ///< the ambient set (CapAmb)
};

/// The 16 hexadecimal digits after `key` at the start of a line of `text`, or nullopt when the
/// line is missing or not exactly that. Async-signal-safe.
[[nodiscard]] inline std::optional<std::uint64_t> status_mask(std::string_view text, std::string_view key) noexcept {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(key)) {
      continue;
    }
    const std::string_view digits = line.substr(key.size());
    if (digits.size() != 16) {
      return std::nullopt;
    }
    std::uint64_t mask = 0;
    for (const char c : digits) {
      const int value = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (value < 0) {
        return std::nullopt;
      }
      mask = mask << 4U | static_cast<std::uint64_t>(value);
    }
    return mask;
  }
  return std::nullopt;
}

/// Reads the calling thread's `ThreadStatus` (one open and a read or two, instead of a system
/// call per signal and per capability). Async-signal-safe: no allocation, a stack buffer.
[[nodiscard]] inline ThreadStatus read_thread_status() noexcept {
  ThreadStatus status;
#if defined(__linux__)
  const int fd = ::open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return status;
  }
  std::array<char, 8192> text; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  std::size_t size = 0;
  for (;;) {
    const ::ssize_t got = retry_on_eintr([&]() noexcept { return ::read(fd, text.data() + size, text.size() - size); });
    if (got <= 0) {
      break;
    }
    size += static_cast<std::size_t>(got);
    if (size == text.size()) {
      break; // a later line may be cut: each mask below is read only from a whole line
    }
  }
  ::close(fd);
  const std::string_view read(text.data(), size);
  const std::string_view whole = read.substr(0, read.rfind('\n') == std::string_view::npos ? 0 : read.rfind('\n') + 1);
  const std::optional<std::uint64_t> ignored = status_mask(whole, "SigIgn:\t");
  const std::optional<std::uint64_t> caught = status_mask(whole, "SigCgt:\t");
  if (ignored && caught) {
    status.not_default = *ignored | *caught;
  }
  status.bounding = status_mask(whole, "CapBnd:\t").value_or(~0ULL);
  status.ambient = status_mask(whole, "CapAmb:\t").value_or(~0ULL);
#endif
  return status;
}

/// Sets no_new_privs and removes `fence_dropped_capabilities()` from the calling process's
/// bounding, ambient, effective, permitted and inheritable sets, then checks the three sets it
/// can read back. `bounding` and `ambient` may name a superset of the process's bounding and
/// ambient sets (`read_thread_status`): a capability outside them is not asked for (by default
/// every one is). Async-signal-safe (raw prctl, capget and capset only). A process without
/// CAP_SETPCAP cannot lower its bounding set; it holds none of those capabilities either, and
/// no_new_privs keeps exec from granting any (set-user-ID bits and file capabilities are
/// ignored), so its bounding set is left as it is. Returns the failed step, or error 0.
[[nodiscard]] inline ChildStep drop_fence_capabilities(std::uint64_t bounding = ~0ULL,
                                                       std::uint64_t ambient = ~0ULL) noexcept {
#if defined(__linux__)
  constexpr ChildStage stage = ChildStage::capabilities;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
    return {errno, "prctl(PR_SET_NO_NEW_PRIVS)", stage, -1};
  }
  CapabilityHeader header{capability_version_3, 0};
  std::array<CapabilityData, 2> sets{};
  if (::syscall(SYS_capget, &header, sets.data()) != 0) {
    return {errno, "capget", stage, -1};
  }
  constexpr std::uint64_t drop = fence_dropped_capabilities();
  const auto held = [&sets]() noexcept {
    std::uint64_t any = 0;
    for (std::size_t word = 0; word < sets.size(); ++word) {
      const std::uint64_t bits = sets[word].effective | sets[word].permitted | sets[word].inheritable;
      any |= bits << (32U * word);
    }
    return any;
  };
  const bool may_lower_bounding = (sets[0].effective >> cap_setpcap & 1U) != 0;
  if ((held() & drop) == 0 && !may_lower_bounding) {
    return {}; // an unprivileged process: nothing held, nothing it may lower
  }
  for (const FenceCapability& capability : FENCE_DROPPED_CAPABILITIES) {
    const auto number = static_cast<unsigned long>(capability.number);
    const std::uint64_t bit = 1ULL << number;
    // EINVAL: the running kernel does not know this capability (or has no ambient set).
    if ((ambient & bit) != 0 && ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, number, 0UL, 0UL) != 0 &&
        errno != EINVAL) {
      return {errno, "prctl(PR_CAP_AMBIENT_LOWER)", stage, capability.number};
    }
    if (may_lower_bounding && (bounding & bit) != 0 && ::prctl(PR_CAPBSET_DROP, number, 0UL, 0UL, 0UL) != 0 &&
        errno != EINVAL) {
      return {errno, "prctl(PR_CAPBSET_DROP)", stage, capability.number};
    }
  }
  for (std::size_t word = 0; word < sets.size(); ++word) {
    const auto keep = static_cast<std::uint32_t>(~(drop >> (32U * word)));
    sets[word].effective &= keep;
    sets[word].permitted &= keep;
    sets[word].inheritable &= keep;
  }
  header = {capability_version_3, 0};
  if (::syscall(SYS_capset, &header, sets.data()) != 0) {
    return {errno, "capset", stage, -1};
  }
  header = {capability_version_3, 0};
  if (::syscall(SYS_capget, &header, sets.data()) != 0) {
    return {errno, "capget", stage, -1};
  }
  if ((held() & drop) != 0) {
    return {EPERM, "capget (a dropped capability is still held)", stage, -1};
  }
  return {};
#else
  return {ENOSYS, "capset", ChildStage::capabilities, -1};
#endif
}

/// Resets the disposition of every signal in `which` (bit N - 1 for signal N; by default all)
/// to the default (the command starts as from a fresh login, whatever the host ignores or
/// catches); async-signal-safe.
inline void reset_signal_dispositions(std::uint64_t which = ~0ULL) noexcept {
#if defined(NSIG)
  constexpr int signal_count = NSIG;
#else
  constexpr int signal_count = 65;
#endif
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  ::sigemptyset(&action.sa_mask);
  for (int signal = 1; signal < signal_count; ++signal) {
    if (signal != SIGKILL && signal != SIGSTOP && (signal > 64 || (which >> (signal - 1) & 1U) != 0)) {
      (void)::sigaction(signal, &action, nullptr); // the C library refuses its own reserved signals
    }
  }
}

/// Makes the calling process lead a new session without a controlling terminal, then, when
/// `terminal` >= 0, makes that terminal its controlling terminal. A process that already
/// leads its own session (the child of forkpty(3)) keeps it and the terminal it has. Returns
/// the failed step, or error 0. Async-signal-safe.
[[nodiscard]] inline ChildStep enter_own_session(int terminal) noexcept {
  if (::setsid() < 0) {
    const int error = errno;
    if (error != EPERM || ::getsid(0) != ::getpid()) {
      return {error, "setsid", ChildStage::setup, -1};
    }
  }
  if (terminal >= 0 && ::ioctl(terminal, TIOCSCTTY, 0) != 0) {
    return {errno, "ioctl(TIOCSCTTY)", ChildStage::setup, -1};
  }
  return {};
}

/// Makes the calling process lead a new process group in the session it was started in, with
/// no controlling terminal: the session's terminal, if it has one, is given up (TIOCNOTTY, which
/// for a process that leads no session detaches that process alone, for good: only a session
/// leader acquires a terminal). Why not a new session: on kernels with CONFIG_SCHED_AUTOGROUP
/// every session is a scheduling group of its own, made and freed for every call
/// (docs/performance.md). Only for a command whose supervisor came from a launcher's zygote: the
/// zygote leads a session that holds nothing but the zygote and its calls, each supervisor in a
/// group of its own, so a group the command may join is the zygote's (which ignores SIGHUP, and
/// which the filter refuses to renice) or another call's. A command forked from the host must
/// not share the host's session: it could join the user's shell's process group and make the
/// kernel send it SIGHUP as an orphaned group. When it cannot tell whether a terminal is held
/// (/dev/tty fails otherwise than with ENXIO, the ioctl fails) it leads a new session instead
/// (`enter_own_session`), as strict and slower. Returns the failed step, or error 0.
/// Async-signal-safe.
[[nodiscard]] inline ChildStep enter_own_process_group() noexcept {
  const int terminal = ::open("/dev/tty", O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (terminal < 0 ? errno != ENXIO : ::ioctl(terminal, TIOCNOTTY) != 0) {
    if (terminal >= 0) {
      ::close(terminal);
    }
    return enter_own_session(-1);
  }
  if (terminal >= 0) {
    ::close(terminal);
  }
  if (::setpgid(0, 0) != 0) {
    return {errno, "setpgid", ChildStage::setup, -1};
  }
  return {};
}

/// Makes descriptors 0, 1 and 2 copies of `sources` (-1: leave it, except descriptor 0 with
/// `null_stdin`, which then reads /dev/null). A source that is itself 0, 1 or 2 is copied
/// before any of them is replaced. Returns the failed step, or error 0. Async-signal-safe.
[[nodiscard]] inline ChildStep install_stdio(std::array<int, 3> sources, bool null_stdin) noexcept {
  if (sources[0] < 0 && null_stdin) {
    sources[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (sources[0] < 0) {
      return {errno, "open(\"/dev/null\")", ChildStage::setup, -1};
    }
  }
  for (std::size_t target = 0; target < sources.size(); ++target) {
    int& source = sources[target];
    if (source >= 0 && source <= 2 && source != static_cast<int>(target)) {
      source = ::fcntl(source, F_DUPFD_CLOEXEC, 3);
      if (source < 0) {
        return {errno, "fcntl(F_DUPFD_CLOEXEC)", ChildStage::setup, -1};
      }
    }
  }
  for (std::size_t target = 0; target < sources.size(); ++target) {
    const int source = sources[target];
    const int fd = static_cast<int>(target);
    if (source < 0) {
      continue;
    }
    if (source == fd ? ::fcntl(fd, F_SETFD, 0) != 0 : ::dup2(source, fd) < 0) {
      return {errno, "dup2", ChildStage::setup, -1};
    }
  }
  return {};
}

} // namespace dsh::detail
