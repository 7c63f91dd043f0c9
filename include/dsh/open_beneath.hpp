// Opening a file for writing beneath the workspace root without a check-then-use race.
//
// `ResolvedPolicy::permits_write` answers for the filesystem as it is at the moment of the
// call; a symlink or directory swapped in between that check and the open is not seen.
// `open_beneath` closes that window on Linux: the kernel itself (openat2 with
// RESOLVE_BENEATH) refuses every resolution that leaves the root while it opens the file.
// Where openat2 is missing (Linux < 5.6, other systems) it throws instead of falling back
// to an unchecked open.
#pragma once

#include <dsh/detail/policy/open_checks.hpp>
#include <dsh/detail/resolve_beneath.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>
#include <dsh/write_error.hpp>

#if !defined(__unix__) && !defined(__APPLE__)
#error "<dsh/open_beneath.hpp> needs a POSIX system (Linux for the race-free open)"
#endif

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh {

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
/// Returns the open descriptor. Throws dsh::WriteError (<dsh/write_error.hpp>; `code()`): EXDEV when the resolution
/// leaves `root` (or an absolute `path` is not spelled under it), ELOOP when `root` itself contains a symbolic link,
/// EINVAL for an empty `path` or a relative `root`, ENOSYS when the kernel has no openat2 (Linux 5.6 or newer is
/// required; there is deliberately no unchecked fallback), and the open's own errno otherwise. The message names `path`
/// and `root`.
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
  detail::BeneathOpen opened = detail::try_open_beneath(root, relative, flags, mode);
  const int error = opened.error;
  if (opened.root_failed) {
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
  if (!opened.file) {
    detail::throw_open_error(error,
                             subject + (error == EXDEV ? ": the path resolves outside the root" : ": open failed"));
  }
  return std::move(opened.file);
#else
  (void)flags;
  (void)mode;
  detail::throw_open_error(ENOSYS, subject + ": this platform has no openat2 with RESOLVE_BENEATH; "
                                             "refusing to open without it");
#endif
}

/// Opens `path` for writing as `policy` allows, for in-process write and edit tools; only a
/// regular file is ever opened.
///
/// read-only: throws dsh::WriteError (EACCES) without touching the filesystem.
/// workspace-write: `open_beneath(policy.workspace_root, path, ...)` (a relative `path` is
/// taken against the workspace root; escapes fail with EXDEV).
/// danger-full-access: a plain open(2) of `path` (relative to the workspace root), no
/// containment.
/// In workspace-write a protected path (docs/enforcement.md#protected-paths) is refused as
/// `permits_write` refuses it, with EACCES naming the path and the rule, before anything is
/// opened; and again after the open, before any byte of the file is changed, when the file
/// opened is a protected one after all (a name swapped for a link after the check, or a hard
/// link to a protected file; a file such a race made the open create stays, empty). When the
/// root's protected paths cannot be known, every path is refused with EACCES naming why.
/// A FIFO, device or socket planted at `path` (or where a symlink there points) is refused
/// and left untouched: an existing file is first looked at through an O_PATH descriptor,
/// which opens no device and waits for no FIFO writer or reader; the open itself adds
/// O_NONBLOCK | O_NOCTTY and never O_TRUNC, its file is checked again with fstat, and only a
/// regular file is then truncated (when `flags` has O_TRUNC) and set back to blocking (unless
/// `flags` has O_NONBLOCK). Without O_TRUNC an existing file keeps whatever lies beyond the bytes
/// written: pass O_TRUNC, or use `dsh::write_file` (<dsh/write_file.hpp>), to replace the whole
/// content. Returns the descriptor; throws dsh::WriteError (`code()`) naming `path` on
/// failure: EPERM for a FIFO, device or socket ("refusing to write to a FIFO: ..."), EISDIR
/// for a directory, EACCES for a protected path, the open's errno otherwise.
[[nodiscard]] inline UniqueFd open_for_write(const ResolvedPolicy& policy, const std::filesystem::path& path,
                                             int flags = O_WRONLY | O_CREAT, ::mode_t mode = 0644) {
  if (policy.mode == SandboxMode::read_only) {
    detail::throw_open_error(EACCES, "open_for_write(" + json_string_literal(path.native()) +
                                         "): the read-only policy refuses every write");
  }
  const bool contained = policy.mode == SandboxMode::workspace_write;
  const std::filesystem::path target = contained || path.is_absolute() ? path : policy.workspace_root / path;
  const std::string subject = "open_for_write(" + json_string_literal(target.native()) + ")";
  detail::ProtectedScan protection;
  if (contained && !path.empty()) {
    protection = detail::protected_entries(policy.workspace_root, policy.protected_paths);
    const std::filesystem::path canonical = canonical_path(path.is_absolute() ? path : policy.workspace_root / path);
    if (std::optional<std::string> refusal = detail::protected_refusal(protection, policy.workspace_root, canonical)) {
      detail::throw_open_error(EACCES, subject + ": " + *refusal);
    }
  }
  // Look before opening: O_PATH opens no device and never waits on a FIFO. A path that
  // cannot be looked at this way is left to the open below, which reports why.
#if defined(__linux__)
  const int look_flags = O_PATH | (flags & O_NOFOLLOW);
  UniqueFd look;
  if (contained) {
    if (!path.empty() && policy.workspace_root.is_absolute()) {
      const std::filesystem::path relative = path.is_absolute() ? path.lexically_relative(policy.workspace_root) : path;
      if (!relative.empty()) {
        look = std::move(detail::try_open_beneath(policy.workspace_root, relative, look_flags, 0).file);
      }
    }
  } else {
    look.reset(::open(target.c_str(), look_flags | O_CLOEXEC));
  }
  if (look) {
    detail::require_regular_file(look.get(), subject);
  }
#endif
  const int open_flags = (flags & ~O_TRUNC) | O_NONBLOCK | O_NOCTTY;
  UniqueFd file;
  if (contained) {
    file = open_beneath(policy.workspace_root, path, open_flags, mode);
  } else {
    file.reset(::open(target.c_str(), open_flags | O_CLOEXEC, mode));
    if (!file) {
      detail::throw_open_error(errno, subject + ": open failed");
    }
  }
  detail::require_regular_file(file.get(), subject); // a file swapped in after the look
#if defined(__linux__)
  if (contained) { // the file opened, whatever its name was when checked above
    std::optional<std::string> refusal;
    if (const std::optional<std::string> opened = detail::recorded_path(file.get())) {
      refusal = detail::protected_refusal(protection, policy.workspace_root, *opened);
    }
    if (const detail::ProtectedEntry* entry = refusal ? nullptr : detail::linked_entry(protection, file.get())) {
      refusal = std::string(entry->kind == detail::ProtectedKind::directory
                                ? "refusing to write a hard link to a file in the protected directory "
                                : "refusing to write a hard link to the protected path ") +
                json_string_literal(entry->path.native()) + " (rule " + json_string_literal(entry->rule) + ")";
    }
    if (refusal) {
      detail::throw_open_error(EACCES, subject + ": " + *refusal);
    }
  }
#endif
  if ((flags & O_TRUNC) != 0 && ::ftruncate(file.get(), 0) != 0) {
    detail::throw_open_error(errno, subject + ": ftruncate failed");
  }
  if ((flags & O_NONBLOCK) == 0) {
    const int status = ::fcntl(file.get(), F_GETFL);
    if (status < 0 || ::fcntl(file.get(), F_SETFL, status & ~O_NONBLOCK) != 0) {
      detail::throw_open_error(errno, subject + ": fcntl(F_SETFL) failed");
    }
  }
  return file;
}

} // namespace dsh
