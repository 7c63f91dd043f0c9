/// @file
/// System calls retried the one way the library retries them: after an interrupting signal.
#pragma once

#include <dsh/unique_fd.hpp>

#include <cerrno>
#include <cstddef>

#include <sys/wait.h>
#include <unistd.h>

namespace dsh::detail {

/// Calls `call` again for as long as it fails with EINTR; returns its last result. `call`
/// returns a signed count or descriptor, negative with errno set on failure.
template <class Call> [[nodiscard]] auto retry_on_eintr(Call&& call) noexcept(noexcept(call())) {
  decltype(call()) result = call();
  while (result < 0 && errno == EINTR) {
    result = call();
  }
  return result;
}

/// Writes all `size` bytes of `data` to `fd`, retrying short and interrupted writes; only
/// async-signal-safe calls, so a forked child may use it. Returns true when every byte was
/// written; false otherwise (errno says why when write(2) failed).
inline bool write_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ::ssize_t written = retry_on_eintr([&]() noexcept { return ::write(fd, data, size); });
    if (written <= 0) {
      return false;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

#if defined(__linux__)
/// waitid's idtype for a pidfd (P_PIDFD, Linux 5.4), which older C libraries do not define.
inline constexpr auto wait_by_pidfd = static_cast<idtype_t>(3);
#endif

} // namespace dsh::detail
