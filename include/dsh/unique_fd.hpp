/// @file
/// The library's one owner of a POSIX file descriptor.
#pragma once

#include <utility>

#include <unistd.h>

namespace dsh {

/// An owned file descriptor: closed on destruction, move-only.
class UniqueFd {
public:
  /// Holds no descriptor.
  constexpr UniqueFd() noexcept = default;
  /// Takes ownership of `fd` (a negative value means "none").
  constexpr explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  /// Transfers ownership; `other` holds nothing afterwards.
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  /// Closes the held descriptor, then takes `other`'s.
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset(std::exchange(other.fd_, -1));
    }
    return *this;
  }
  /// Closes the held descriptor, if any.
  ~UniqueFd() { reset(); }

  /// The descriptor, or -1 when none is held.
  [[nodiscard]] constexpr int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  [[nodiscard]] constexpr explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership without closing; returns the descriptor (-1 when none).
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the held descriptor (errors from close are ignored) and takes `fd` instead.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

private:
  int fd_ = -1;
};

} // namespace dsh
