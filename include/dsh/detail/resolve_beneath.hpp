/// @file
/// openat2(2) with RESOLVE_BENEATH, the kernel's own check behind `open_beneath`: every
/// resolution that leaves the root is refused while the file is opened.
#pragma once

#include <dsh/unique_fd.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

namespace dsh::detail {

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

/// What `try_open_beneath` got: the descriptor, or the errno and whether it was the root
/// that could not be opened.
struct BeneathOpen {
  UniqueFd file;
  int error = 0;
  bool root_failed = false;
};

/// `open_beneath` without the checks of its arguments and without throwing for the open
/// itself (errno goes to `error`); `relative` is the path relative to `root`, non-empty.
[[nodiscard]] inline BeneathOpen try_open_beneath(const std::filesystem::path& root,
                                                  const std::filesystem::path& relative, int flags, ::mode_t mode) {
  BeneathOpen result;
#if defined(__linux__)
  const UniqueFd root_fd{
      openat2_cloexec(AT_FDCWD, root.c_str(), O_PATH | O_DIRECTORY, 0, resolve_no_symlinks | resolve_no_magiclinks)};
  if (!root_fd) {
    result.error = errno;
    result.root_failed = true;
    return result;
  }
  result.file.reset(
      openat2_cloexec(root_fd.get(), relative.c_str(), flags, mode, resolve_beneath | resolve_no_magiclinks));
  if (!result.file) {
    result.error = errno;
  }
#else
  (void)root;
  (void)relative;
  (void)flags;
  (void)mode;
  result.error = ENOSYS;
  result.root_failed = true;
#endif
  return result;
}

} // namespace dsh::detail
