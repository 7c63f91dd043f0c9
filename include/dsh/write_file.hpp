// The write tool's primitives: replace a file's whole content, and make directories, under the
// same predicate as the fence (the workspace root, the protected paths), never through a
// symbolic link that leaves the root, and creating nothing when the write is refused.
#pragma once

#include <dsh/open_beneath.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>
#include <dsh/write_error.hpp>

#if !defined(__linux__)
#error "<dsh/write_file.hpp> needs Linux (openat2 with RESOLVE_BENEATH)"
#endif

#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <cstddef>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace dsh {

/// How `write_file` writes.
struct WriteOptions {
  /// Make the missing directories above the file (beneath the workspace root in
  /// workspace-write), as `create_directories` makes them. Off by default: a missing parent is
  /// then an error (ENOENT).
  bool create_parents = false;
  /// Replace an existing file atomically: the bytes go to a new file beside it, which is then
  /// renamed over it, so a reader sees the old content or the new, never a mix, and a failed
  /// write leaves the old one. Unset: on when the file exists as a regular file (the new file
  /// gets its permission bits), off for a new file. A symbolic link at the path is written
  /// through in place (renaming over it would replace the link, not the file it names).
  std::optional<bool> atomic{};
  /// fsync(2) the file (and, when it was created or renamed, its directory) before returning.
  bool durable = false;
  /// The permission bits of a new file (before the umask).
  ::mode_t mode = 0644;
};

namespace detail {

/// "<what>(<path>)", the subject of a write error.
[[nodiscard]] inline std::string write_subject(std::string_view what, const std::filesystem::path& path) {
  return std::string(what) + "(" + json_string_literal(path.native()) + ")";
}

/// Throws the policy's refusal of `target` (EACCES), naming the mode and the root, unless
/// `policy` permits writing it. Nothing is touched.
inline void require_permitted(const ResolvedPolicy& policy, const std::filesystem::path& target,
                              const std::string& subject) {
  if (policy.permits_write(target)) {
    return;
  }
  std::string why = policy.mode == SandboxMode::read_only
                        ? "the read-only policy refuses every write"
                        : "the workspace-write policy permits writes only beneath the workspace root " +
                              json_string_literal(policy.workspace_root.native()) + ", outside its protected paths";
  if (policy.mode == SandboxMode::workspace_write) {
    const std::filesystem::path absolute = target.is_absolute() ? target : policy.workspace_root / target;
    const detail::ProtectedScan scan = detail::protected_entries(policy.workspace_root, policy.protected_paths);
    if (!scan.problem.empty()) {
      why = "the protected paths beneath " + json_string_literal(policy.workspace_root.native()) +
            " cannot be known: " + scan.problem;
    } else if (std::optional<std::string> refusal =
                   detail::protected_refusal(scan, policy.workspace_root, canonical_path(absolute))) {
      why = *refusal;
    }
  }
  throw_open_error(EACCES, subject + ": " + why);
}

/// The components of `relative` (lexically, no "." or ".." allowed); throws EINVAL naming
/// `subject` for an empty path or a ".." component (a path spelled to climb is refused).
[[nodiscard]] inline std::vector<std::string> components_of(const std::filesystem::path& relative,
                                                            const std::string& subject) {
  std::vector<std::string> parts;
  for (const std::filesystem::path& part : relative) {
    const std::string& name = part.native();
    if (name.empty() || name == ".") {
      continue;
    }
    if (name == ".." || name == "/") {
      throw_open_error(EINVAL, subject + ": a path beneath the root may not climb with \"..\"");
    }
    parts.push_back(name);
  }
  return parts;
}

/// Opens directory `name` in `parent` without following a symbolic link (O_PATH); invalid fd
/// with errno set when it is missing, a link (ELOOP) or not a directory (ENOTDIR).
[[nodiscard]] inline UniqueFd open_directory_at(int parent, const std::string& name) {
  return UniqueFd{::openat(parent, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
}

/// Makes the directories of `relative` beneath the open directory `root` (O_PATH). First walks
/// the existing ones, refusing a symbolic link or a non-directory there (so nothing is made when
/// the path would leave through a link), then makes the missing ones, 0755 before the umask.
/// Returns the descriptor of the last. Throws WriteError naming `subject`.
[[nodiscard]] inline UniqueFd make_directories_beneath(int root, const std::vector<std::string>& parts,
                                                       const std::string& subject) {
  UniqueFd current{::fcntl(root, F_DUPFD_CLOEXEC, 0)};
  if (!current) {
    throw_open_error(errno, subject + ": fcntl(F_DUPFD_CLOEXEC) failed");
  }
  std::size_t index = 0;
  for (; index < parts.size(); ++index) {
    UniqueFd next = open_directory_at(current.get(), parts[index]);
    if (!next) {
      const int error = errno;
      if (error == ENOENT) {
        break; // the first missing one: from here on, made
      }
      struct stat info {};
      const bool link =
          ::fstatat(current.get(), parts[index].c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(info.st_mode);
      throw_open_error(link ? ELOOP : error, subject + ": " + json_string_literal(parts[index]) +
                                                 (link ? " is a symbolic link: directories are made only through "
                                                         "real directories"
                                                       : " is not a directory that can be entered"));
    }
    current = std::move(next);
  }
  for (; index < parts.size(); ++index) {
    if (::mkdirat(current.get(), parts[index].c_str(), 0755) != 0 && errno != EEXIST) {
      throw_open_error(errno, subject + ": mkdirat(" + json_string_literal(parts[index]) + ") failed");
    }
    UniqueFd next = open_directory_at(current.get(), parts[index]);
    if (!next) { // swapped for a link or a file between mkdirat and open: never followed
      throw_open_error(errno, subject + ": " + json_string_literal(parts[index]) + " changed while it was made");
    }
    current = std::move(next);
  }
  return current;
}

/// Writes all of `bytes` to `fd`; throws WriteError naming `subject` on failure.
inline void write_everything(int fd, std::string_view bytes, const std::string& subject) {
  if (!write_all(fd, bytes.data(), bytes.size())) {
    throw_open_error(errno != 0 ? errno : EIO, subject + ": write failed");
  }
}

/// fsync(2) of `fd` when `durable`; throws WriteError naming `subject` on failure.
inline void sync_if(bool durable, int fd, const std::string& subject) {
  if (durable && retry_on_eintr([fd] { return ::fsync(fd); }) != 0) {
    throw_open_error(errno, subject + ": fsync failed");
  }
}

} // namespace detail

/// Makes the directory `path` and the missing ones above it, as `policy` allows.
///
/// read-only: refused. workspace-write: `path` (relative to the workspace root, or absolute and
/// beneath it) must be one `policy.permits_write` allows; the directories are made beneath the
/// root through real directories only: a symbolic link (or a file) on the way is refused before
/// anything is made, and a name swapped for a link while it is made is never followed.
/// danger-full-access: `std::filesystem::create_directories` of the path (relative to the root).
/// Returns true when a directory was made, false when all of them existed. Throws
/// dsh::WriteError (`code()`): EACCES when the policy refuses (naming the mode and the root; then
/// nothing is made), ELOOP for a symbolic link on the way, ENOTDIR, EINVAL for ".." in a
/// workspace-write path, the failed call's errno otherwise.
inline bool create_directories(const ResolvedPolicy& policy, const std::filesystem::path& path) {
  const std::filesystem::path target = path.is_absolute() ? path : policy.workspace_root / path;
  const std::string subject = detail::write_subject("create_directories", target);
  detail::require_permitted(policy, target, subject);
  if (policy.mode == SandboxMode::danger_full_access) {
    std::error_code error;
    const bool made = std::filesystem::create_directories(target, error);
    if (error) {
      detail::throw_open_error(error.value(), subject + ": create_directories failed");
    }
    return made;
  }
  const std::filesystem::path relative = target.lexically_relative(policy.workspace_root);
  const std::vector<std::string> parts = detail::components_of(relative, subject);
  const UniqueFd root = open_beneath(policy.workspace_root, ".", O_PATH | O_DIRECTORY);
  bool existed = true;
  {
    UniqueFd current{::fcntl(root.get(), F_DUPFD_CLOEXEC, 0)};
    for (const std::string& part : parts) {
      UniqueFd next = detail::open_directory_at(current.get(), part);
      if (!next) {
        existed = false;
        break;
      }
      current = std::move(next);
    }
  }
  (void)detail::make_directories_beneath(root.get(), parts, subject);
  return !existed;
}

/// Writes `bytes` as the whole content of the file `path`, as `policy` allows: afterwards the
/// file holds exactly `bytes`, whatever it held before.
///
/// read-only: refused. workspace-write: `path` (relative to the workspace root, or absolute and
/// beneath it) must be one `policy.permits_write` allows (protected paths included), and every
/// open resolves beneath the root (openat2 RESOLVE_BENEATH: a link that leaves it fails);
/// `options.create_parents` makes the missing directories through real directories only (see
/// `create_directories`). danger-full-access: the same steps without containment. An atomic
/// replace (see WriteOptions) writes a new file `.<name>.dsh-<random>` beside the old one, gives
/// it the old one's permission bits and renames it over the old one; on failure that file is
/// removed and the old one is left as it was. Only a regular file is ever written (a FIFO,
/// device or directory at the path is refused, as `open_for_write` refuses it).
/// Throws dsh::WriteError (`code()`): EACCES when the policy refuses (naming the path, the mode
/// and the root; nothing is created then), EXDEV when the path resolves outside the root,
/// ELOOP for a symbolic link on the way to a parent being made, ENOENT for a missing parent
/// without `create_parents`, EPERM or EISDIR for what is not a regular file, the failed call's
/// errno otherwise.
inline void write_file(const ResolvedPolicy& policy, const std::filesystem::path& path, std::string_view bytes,
                       const WriteOptions& options = {}) {
  const std::filesystem::path target = path.is_absolute() ? path : policy.workspace_root / path;
  const std::string subject = detail::write_subject("write_file", target);
  detail::require_permitted(policy, target, subject);
  if (target.filename().empty()) {
    detail::throw_open_error(EISDIR, subject + ": names a directory, not a file");
  }
  const bool contained = policy.mode == SandboxMode::workspace_write;
  const std::filesystem::path parent = target.parent_path();
  const std::string name = target.filename().native();

  // The directory the file lives in, as a descriptor every later step works beneath.
  UniqueFd directory;
  if (contained) {
    const std::filesystem::path relative = parent.lexically_relative(policy.workspace_root);
    const std::vector<std::string> parts = detail::components_of(relative, subject);
    const UniqueFd root = open_beneath(policy.workspace_root, ".", O_PATH | O_DIRECTORY);
    if (options.create_parents) {
      directory = detail::make_directories_beneath(root.get(), parts, subject);
    } else {
      try {
        directory = parts.empty() ? UniqueFd{::fcntl(root.get(), F_DUPFD_CLOEXEC, 0)}
                                  : open_beneath(policy.workspace_root, relative, O_PATH | O_DIRECTORY);
      } catch (const WriteError& error) {
        if (error.code().value() != ENOENT) {
          throw;
        }
        detail::throw_open_error(ENOENT, subject + ": its directory " + json_string_literal(parent.native()) +
                                             " does not exist (WriteOptions::create_parents makes it)");
      }
    }
    // The directory as opened, whatever its name was when checked: a link swapped in on the way
    // may lead elsewhere beneath the root, into a protected directory.
    const std::optional<std::string> opened = detail::recorded_path(directory.get());
    if (!opened) {
      detail::throw_open_error(EIO, subject + ": cannot tell which directory was opened");
    }
    const detail::ProtectedScan scan = detail::protected_entries(policy.workspace_root, policy.protected_paths);
    if (std::optional<std::string> refusal =
            detail::protected_refusal(scan, policy.workspace_root, std::filesystem::path(*opened) / name)) {
      detail::throw_open_error(EACCES, subject + ": " + *refusal);
    }
  } else {
    if (options.create_parents) {
      std::error_code error;
      std::filesystem::create_directories(parent, error);
      if (error) {
        detail::throw_open_error(error.value(), subject + ": create_directories failed");
      }
    }
    directory = UniqueFd{::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
    if (!directory) {
      detail::throw_open_error(errno, subject + ": cannot open its directory");
    }
  }

  struct stat existing {};
  const bool exists = ::fstatat(directory.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0;
  const bool link = exists && S_ISLNK(existing.st_mode);
  if (exists && !link && !S_ISREG(existing.st_mode)) {
    detail::throw_open_error(S_ISDIR(existing.st_mode) ? EISDIR : EPERM,
                             subject + ": refusing to write to " + detail::non_regular_kind(existing.st_mode) +
                                 ": only regular files are written");
  }
  const bool atomic = options.atomic.value_or(exists && !link) && !link;

  if (!atomic) {
    // In place, through open_for_write: contained, regular files only, protected paths checked
    // again against the file actually opened.
    const UniqueFd file = open_for_write(policy, target, O_WRONLY | O_CREAT | O_TRUNC, options.mode);
    detail::write_everything(file.get(), bytes, subject);
    detail::sync_if(options.durable, file.get(), subject);
    if (options.durable && !exists) {
      detail::sync_if(true, UniqueFd{::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)}.get(),
                      subject);
    }
    return;
  }

  // Atomic: a new file beside the old one, renamed over it.
  std::random_device entropy;
  std::array<char, 17> suffix{};
  std::snprintf(suffix.data(), suffix.size(), "%08x%08x", entropy(), entropy());
  const std::string temporary = "." + name + ".dsh-" + suffix.data();
  const UniqueFd writable{::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!writable) {
    detail::throw_open_error(errno, subject + ": cannot open its directory");
  }
  const ::mode_t mode = exists ? (existing.st_mode & 07777) : options.mode;
  UniqueFd file{
      ::openat(writable.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)};
  if (!file) {
    detail::throw_open_error(errno, subject + ": cannot create " + json_string_literal(temporary) + " beside it");
  }
  try {
    if (exists && ::fchmod(file.get(), mode) != 0) { // the old file's bits, whatever the umask
      detail::throw_open_error(errno, subject + ": fchmod failed");
    }
    detail::write_everything(file.get(), bytes, subject);
    detail::sync_if(options.durable, file.get(), subject);
    if (::renameat(writable.get(), temporary.c_str(), writable.get(), name.c_str()) != 0) {
      detail::throw_open_error(errno, subject + ": renameat failed");
    }
  } catch (...) {
    (void)::unlinkat(writable.get(), temporary.c_str(), 0);
    throw;
  }
  detail::sync_if(options.durable, writable.get(), subject);
}

} // namespace dsh
