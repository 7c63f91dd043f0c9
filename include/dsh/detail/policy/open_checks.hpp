/// @file
/// How `open_beneath` and `open_for_write` refuse: the subject their errors name, the
/// dsh::WriteError they throw, and the check that only a regular file is opened for writing.
#pragma once

#include <dsh/policy_types.hpp>
#include <dsh/write_error.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::detail {

/// The text every open_beneath error starts with: names the path and the root.
[[nodiscard]] inline std::string open_beneath_subject(const std::filesystem::path& root,
                                                      const std::filesystem::path& path) {
  return "open_beneath(" + json_string_literal(path.native()) + " beneath " + json_string_literal(root.native()) + ")";
}

[[noreturn]] inline void throw_open_error(int error, const std::string& message) {
  throw WriteError(std::error_code(error, std::generic_category()), message);
}

/// What a file of type `mode` is, for an error message ("a FIFO", ...); "" for a regular file.
[[nodiscard]] constexpr const char* non_regular_kind(::mode_t mode) noexcept {
  if (S_ISREG(mode)) {
    return "";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISCHR(mode)) {
    return "a character device";
  }
  if (S_ISBLK(mode)) {
    return "a block device";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  return "not a regular file";
}

/// Throws when `fd` is open but not on a regular file; `subject` names the call and the path.
inline void require_regular_file(int fd, const std::string& subject) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    detail::throw_open_error(errno, subject + ": fstat failed");
  }
  if (const char* kind = non_regular_kind(info.st_mode); *kind != '\0') {
    detail::throw_open_error(S_ISDIR(info.st_mode) ? EISDIR : EPERM, subject + ": refusing to write to " + kind +
                                                                         ": only regular files are opened for writing");
  }
}

} // namespace dsh::detail
