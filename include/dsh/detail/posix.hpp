/// @file
/// System calls retried the one way the library retries them: after an interrupting signal;
/// a path opened one component at a time, following no link; and /proc paths that name a
/// process or descriptor by number, formatted without the C library.
#pragma once

#include <dsh/unique_fd.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <string_view>

#include <fcntl.h>
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

/// A path naming a process or descriptor by number, NUL-terminated (`numbered_path`).
struct NumberedPath {
  std::array<char, 64> text{};
  [[nodiscard]] const char* c_str() const noexcept { return text.data(); }
};

/// `prefix`, the decimal digits of `number`, then `suffix`: "/proc/self/fd/7",
/// "/proc/412/ns/mnt". Formatted by hand, so async-signal-safe (a supervisor and a vfork child
/// use it); what would not fit in 63 characters is cut.
[[nodiscard]] inline NumberedPath numbered_path(std::string_view prefix, unsigned long number,
                                                std::string_view suffix) noexcept {
  NumberedPath path;
  std::array<char, 20> digits{}; // the most a 64-bit number has
  std::size_t count = 0;
  do {
    digits[count++] = static_cast<char>('0' + number % 10U);
    number /= 10U;
  } while (number != 0 && count < digits.size());
  std::size_t at = 0;
  const std::size_t room = path.text.size() - 1;
  for (const char c : prefix) {
    if (at < room) {
      path.text[at++] = c;
    }
  }
  while (count > 0 && at < room) {
    path.text[at++] = digits[--count];
  }
  for (const char c : suffix) {
    if (at < room) {
      path.text[at++] = c;
    }
  }
  return path;
}

/// Opens the absolute `path` with `flags` (O_PATH, O_DIRECTORY, ...; O_CLOEXEC and O_NOFOLLOW
/// are added) one component at a time from "/", so that no component, the last included, is
/// followed as a symbolic link: the file opened is the one at `path` as spelled, whatever
/// another process renames meanwhile (a link on the way fails, ENOTDIR; the last component, if
/// a link, fails with ELOOP, or is opened itself with O_PATH and is the caller's to refuse). For
/// callers that cannot use openat2(2) (the command's child, whose filter refuses it) or want
/// one walk for both sides. Returns the descriptor, or -1 with errno set (EINVAL for a path
/// that is not absolute or holds "." or ".." or an empty component, ENAMETOOLONG for a
/// component longer than NAME_MAX). Async-signal-safe.
#if defined(O_PATH) // Linux's; the callers are the namespace layer's, Linux's too
[[nodiscard]] inline int open_without_links(const char* path, int flags) noexcept {
  if (path == nullptr || path[0] != '/') {
    errno = EINVAL;
    return -1;
  }
  int dir = retry_on_eintr([]() noexcept { return ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC); });
  const char* rest = path + 1;
  if (*rest == '\0') {
    if (dir >= 0 && (flags & ~(O_PATH | O_DIRECTORY)) != 0) {
      ::close(dir); // "/" itself, with other flags than a path's
      return retry_on_eintr([&]() noexcept { return ::open("/", flags | O_CLOEXEC); });
    }
    return dir;
  }
  char name[NAME_MAX + 1];
  while (dir >= 0) {
    std::size_t length = 0;
    while (rest[length] != '\0' && rest[length] != '/') {
      ++length;
    }
    const bool last = rest[length] == '\0' || (rest[length] == '/' && rest[length + 1] == '\0');
    if (length == 0 || length > NAME_MAX || (length == 1 && rest[0] == '.') ||
        (length == 2 && rest[0] == '.' && rest[1] == '.')) {
      ::close(dir);
      errno = length > NAME_MAX ? ENAMETOOLONG : EINVAL;
      return -1;
    }
    for (std::size_t i = 0; i < length; ++i) {
      name[i] = rest[i];
    }
    name[length] = '\0';
    const int step = last ? flags : O_PATH | O_DIRECTORY;
    const int next = retry_on_eintr([&]() noexcept { return ::openat(dir, name, step | O_NOFOLLOW | O_CLOEXEC); });
    const int error = errno;
    ::close(dir);
    if (last || next < 0) {
      errno = error;
      return next;
    }
    dir = next;
    rest += length + 1;
  }
  return -1;
}
#endif

#if defined(__linux__)
/// waitid's idtype for a pidfd (P_PIDFD, Linux 5.4), which older C libraries do not define.
inline constexpr auto wait_by_pidfd = static_cast<idtype_t>(3);
#endif

} // namespace dsh::detail
