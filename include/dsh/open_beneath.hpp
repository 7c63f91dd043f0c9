// Opening a file for writing beneath the workspace root without a check-then-use race.
//
// `ResolvedPolicy::permits_write` answers for the filesystem as it is at the moment of the
// call; a symlink or directory swapped in between that check and the open is not seen.
// `open_beneath` closes that window on Linux: the kernel itself (openat2 with
// RESOLVE_BENEATH) refuses every resolution that leaves the root while it opens the file.
// Where openat2 is missing (Linux < 5.6, other systems) it throws instead of falling back
// to an unchecked open.
#pragma once

#include <dsh/sandbox_policy.hpp>

#if !defined(__unix__) && !defined(__APPLE__)
#error "<dsh/open_beneath.hpp> needs a POSIX system (Linux for the race-free open)"
#endif

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

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

namespace detail {

#if defined(__linux__)
#if defined(SYS_openat2)
inline constexpr long sys_openat2 = SYS_openat2;
#else
inline constexpr long sys_openat2 = 437; // the same number on every architecture
#endif

// Values of linux/openat2.h, spelled here so older kernel headers still compile.
inline constexpr std::uint64_t resolve_no_magiclinks = 0x02;
inline constexpr std::uint64_t resolve_no_symlinks = 0x04;
inline constexpr std::uint64_t resolve_beneath = 0x08;

/// The kernel's struct open_how (version 0, 24 bytes).
struct OpenHow {
  std::uint64_t flags;
  std::uint64_t mode;
  std::uint64_t resolve;
};

/// openat2(2) with O_CLOEXEC added; returns the descriptor or -1 with errno set. The kernel
/// may answer EAGAIN when a concurrent rename or mount raced a RESOLVE_BENEATH lookup; the
/// lookup is then simply repeated.
[[nodiscard]] inline int openat2_cloexec(int dir_fd, const char* path, int flags, ::mode_t mode,
                                         std::uint64_t resolve) noexcept {
  const bool takes_mode = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
  OpenHow how{static_cast<std::uint64_t>(static_cast<unsigned>(flags | O_CLOEXEC)),
              takes_mode ? static_cast<std::uint64_t>(mode) : 0U, resolve};
  constexpr int attempts = 16;
  long fd = -1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    fd = ::syscall(sys_openat2, dir_fd, path, &how, sizeof how);
    if (fd >= 0 || (errno != EAGAIN && errno != EINTR)) {
      break;
    }
  }
  return static_cast<int>(fd);
}
#endif

/// The text every open_beneath error starts with: names the path and the root.
[[nodiscard]] inline std::string open_beneath_subject(const std::filesystem::path& root,
                                                      const std::filesystem::path& path) {
  return "open_beneath(" + json_string_literal(path.native()) + " beneath " + json_string_literal(root.native()) + ")";
}

[[noreturn]] inline void throw_open_error(int error, const std::string& message) {
  throw std::system_error(error, std::generic_category(), message);
}

} // namespace detail

/// Opens `path` beneath the directory `root`, letting the kernel refuse any escape.
///
/// `root` must be absolute and canonical (no symbolic link in it, as
/// `ResolvedPolicy::workspace_root` is); `path` is relative to `root`, or absolute and then
/// spelled lexically under `root` (it is not normalized: `..` is resolved by the kernel,
/// physically, and may not climb above `root`). Resolution uses openat2(2) with
/// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, so `..`, absolute or relative symlinks, dangling
/// symlinks and /proc magic links that would leave `root` fail at open time, whatever was
/// swapped in after any earlier check. `flags` are open(2) flags (O_CLOEXEC is always
/// added); `mode` is used only with O_CREAT or O_TMPFILE.
/// Returns the open descriptor. Throws std::system_error: EXDEV when the resolution leaves
/// `root` (or an absolute `path` is not spelled under it), ELOOP when `root` itself contains
/// a symbolic link, EINVAL for an empty `path` or a relative `root`, ENOSYS when the kernel
/// has no openat2 (Linux 5.6 or newer is required; there is deliberately no unchecked
/// fallback), and the open's own errno otherwise. The message names `path` and `root`.
[[nodiscard]] inline UniqueFd open_beneath(const std::filesystem::path& root, const std::filesystem::path& path,
                                           int flags, ::mode_t mode = 0644) {
  const std::string subject = detail::open_beneath_subject(root, path);
  if (path.empty() || !root.is_absolute()) {
    detail::throw_open_error(EINVAL, subject + ": needs a non-empty path and an absolute root");
  }
#if defined(__linux__)
  const std::filesystem::path relative = path.is_absolute() ? path.lexically_relative(root) : path;
  if (relative.empty()) {
    detail::throw_open_error(EXDEV, subject + ": the path is not spelled beneath the root");
  }
  const UniqueFd root_fd{detail::openat2_cloexec(AT_FDCWD, root.c_str(), O_PATH | O_DIRECTORY, 0,
                                                 detail::resolve_no_symlinks | detail::resolve_no_magiclinks)};
  if (!root_fd) {
    const int error = errno;
    if (error == ENOSYS) {
      detail::throw_open_error(error, subject + ": openat2 is not available on this kernel (Linux "
                                                "5.6 or newer is required); refusing to open "
                                                "without RESOLVE_BENEATH");
    }
    detail::throw_open_error(error, subject + ": cannot open the root" +
                                        (error == ELOOP ? " (it must be canonical: no symbolic "
                                                          "links)"
                                                        : ""));
  }
  UniqueFd file{detail::openat2_cloexec(root_fd.get(), relative.c_str(), flags, mode,
                                        detail::resolve_beneath | detail::resolve_no_magiclinks)};
  if (!file) {
    const int error = errno;
    detail::throw_open_error(error,
                             subject + (error == EXDEV ? ": the path resolves outside the root" : ": open failed"));
  }
  return file;
#else
  (void)flags;
  (void)mode;
  detail::throw_open_error(ENOSYS, subject + ": this platform has no openat2 with RESOLVE_BENEATH; "
                                             "refusing to open without it");
#endif
}

/// Opens `path` for writing as `policy` allows, for in-process write and edit tools.
///
/// read-only: throws std::system_error(EACCES) without touching the filesystem.
/// workspace-write: `open_beneath(policy.workspace_root, path, flags, mode)` (a relative
/// `path` is taken against the workspace root; escapes fail with EXDEV).
/// danger-full-access: a plain open(2) of `path` (relative to the workspace root), no
/// containment. Returns the descriptor; throws std::system_error naming `path` on failure.
[[nodiscard]] inline UniqueFd open_for_write(const ResolvedPolicy& policy, const std::filesystem::path& path,
                                             int flags = O_WRONLY | O_CREAT, ::mode_t mode = 0644) {
  switch (policy.mode) {
  case SandboxMode::read_only:
    detail::throw_open_error(EACCES, "open_for_write(" + json_string_literal(path.native()) +
                                         "): the read-only policy refuses every write");
  case SandboxMode::workspace_write:
    return open_beneath(policy.workspace_root, path, flags, mode);
  case SandboxMode::danger_full_access:
    break;
  }
  const std::filesystem::path target = path.is_absolute() ? path : policy.workspace_root / path;
  UniqueFd file{::open(target.c_str(), flags | O_CLOEXEC, mode)};
  if (!file) {
    detail::throw_open_error(errno, "open_for_write(" + json_string_literal(target.native()) + "): open failed");
  }
  return file;
}

} // namespace dsh
