/// @file
/// The private temporary directory of a session: where it is, how it is made so that only the
/// host's user can change it, and its removal.
#pragma once

#include <dsh/detail/fence/host_environment.hpp>
#include <dsh/detail/observations.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh::detail {

/// 16 hexadecimal digits of the 64-bit FNV-1a hash of `bytes`: a fixed-length file name for
/// any session id or log path (no separator, no NUL, no "..").
[[nodiscard]] inline std::string name_digest(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  std::string digits(16, '0');
  for (std::size_t i = digits.size(); i-- > 0; hash >>= 4U) {
    digits[i] = "0123456789abcdef"[hash & 0xfU];
  }
  return digits;
}

/// "mode 0755, owner uid 1000" for messages.
[[nodiscard]] inline std::string describe_owner_and_mode(const struct stat& info) {
  std::string mode = "0000";
  unsigned bits = static_cast<unsigned>(info.st_mode) & 07777U;
  for (std::size_t i = mode.size(); i-- > 0; bits >>= 3U) {
    mode[i] = static_cast<char>('0' + (bits & 7U));
  }
  return "mode " + mode + ", owner uid " + std::to_string(info.st_uid);
}

/// Why the directory `info` describes is not one only the effective user can change, or "":
/// it must be a directory (not a symbolic link), owned by the effective user, without the
/// write bits `forbidden` names (022: group and other; 077: every bit but the owner's).
[[nodiscard]] inline std::string private_directory_problem(const struct stat& info, ::mode_t forbidden) {
  if (!S_ISDIR(info.st_mode)) {
    return S_ISLNK(info.st_mode) ? "it is a symbolic link" : "it is not a directory";
  }
  if (info.st_uid != ::geteuid() || (info.st_mode & forbidden) != 0) {
    return "expected a directory owned by uid " + std::to_string(::geteuid()) + " with " +
           (forbidden == 077 ? "mode 0700" : "no group or other write bit") + ", found " +
           describe_owner_and_mode(info);
  }
  return {};
}

/// Where private temporary directories are made when the host chose no place: the user's
/// runtime directory when it is an absolute directory of mode 0700 the user owns (a tmpfs the
/// login manager empties at logout), else a directory of the user's own under /tmp.
[[nodiscard]] inline std::filesystem::path default_temporary_root(const char* xdg_runtime_dir) {
  if (xdg_runtime_dir != nullptr && *xdg_runtime_dir == '/' &&
      std::string_view(xdg_runtime_dir).find('\0') == std::string_view::npos) {
    struct stat info {};
    if (observed_lstat(xdg_runtime_dir, info) == 0 && private_directory_problem(info, 077).empty()) {
      return std::filesystem::path(xdg_runtime_dir) / "dsh-sandbox-policy";
    }
  }
  return "/tmp/dsh-sandbox-policy-" + std::to_string(::geteuid());
}

/// The temporary root `options` name, absolute and without a trailing separator. Throws
/// LandlockError naming the value when the host's choice is not absolute.
[[nodiscard]] inline std::filesystem::path temporary_root_of(const FenceOptions& options,
                                                             const HostEnvironment& environment) {
  if (options.temporary_root.empty()) {
    return default_temporary_root(environment.xdg_runtime_dir);
  }
  if (!options.temporary_root.is_absolute() || options.temporary_root.native().find('\0') != std::string::npos) {
    throw LandlockError("FenceOptions::temporary_root: expected an absolute directory, got " +
                        json_string_literal(options.temporary_root.native()));
  }
  return std::filesystem::path(lexically_clean(options.temporary_root));
}

/// The file name of the session's directory beneath the temporary root: "session-" and a
/// digest of `session_id`, else "log-" and a digest of the session log's canonical path, else
/// "call-" and 16 random hexadecimal digits (a directory for this fence alone). Throws
/// LandlockError when the kernel gives no random bytes.
[[nodiscard]] inline std::string private_temporary_name(const FenceOptions& options,
                                                        const std::filesystem::path* canonical_log = nullptr) {
  if (!options.session_id.empty()) {
    return "session-" + name_digest(options.session_id);
  }
  if (!options.session_log.empty()) {
    return "log-" + name_digest(canonical_log != nullptr ? canonical_log->native()
                                                         : canonical_path(options.session_log).native());
  }
  std::array<unsigned char, 8> random{};
  std::size_t got = 0;
  while (got < random.size()) {
    const ::ssize_t part = ::getrandom(random.data() + got, random.size() - got, 0);
    if (part < 0 && errno == EINTR) {
      continue;
    }
    if (part <= 0) {
      throw LandlockError(std::string("cannot name a private temporary directory: getrandom failed: ") +
                          std::strerror(errno));
    }
    got += static_cast<std::size_t>(part);
  }
  const std::string_view bytes(reinterpret_cast<const char*>(random.data()), random.size());
  return "call-" + name_digest(bytes);
}

/// The session's private temporary directory as `make_private_temporary` made (or found) it.
struct PrivateTemporary {
  std::filesystem::path path; ///< its canonical path, as the kernel records it
  /// The directory itself, open (close-on-exec): the one that was checked, so that a grant
  /// anchored on it cannot land on another directory swapped in at `path` meanwhile.
  UniqueFd directory;
};

/// Makes (or finds) `root` and the directory `name` beneath it so that only the effective user
/// can change either, and returns the session's directory: its canonical path, as the kernel
/// records it, and the directory open. The root is created with mode 0700 when missing (its
/// parent must exist) and must then be the user's, without group or other write bits (mode 0700
/// exactly for the default root); the session's directory is created with mode 0700 and must be
/// the user's with no bit for group or other. Neither may be a symbolic link. Throws
/// LandlockError naming the directory and what was found otherwise.
[[nodiscard]] inline PrivateTemporary make_private_temporary(const std::filesystem::path& root, const std::string& name,
                                                             bool default_root) {
  const std::string subject = "cannot make the session's private temporary directory ";
  const auto fail = [&](const std::filesystem::path& where, const std::string& why) {
    return LandlockError(subject + json_string_literal((root / name).native()) + ": " +
                         json_string_literal(where.native()) + ": " + why);
  };
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) {
    throw fail(root, std::strerror(errno));
  }
  const UniqueFd root_fd{::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  struct stat info {};
  if (!root_fd) {
    const int error = errno;
    if (::lstat(root.c_str(), &info) == 0) {
      if (const std::string why = private_directory_problem(info, default_root ? 077 : 022); !why.empty()) {
        throw fail(root, why);
      }
    }
    throw fail(root, std::strerror(error));
  }
  if (::fstat(root_fd.get(), &info) != 0) {
    throw fail(root, std::strerror(errno));
  }
  if (const std::string why = private_directory_problem(info, default_root ? 077 : 022); !why.empty()) {
    throw fail(root, why);
  }
  const struct stat root_judged = info; // what a later call must read again: the status judged here
  bool made = true;
  if (::mkdirat(root_fd.get(), name.c_str(), 0700) != 0) {
    if (errno != EEXIST) {
      throw fail(root / name, std::strerror(errno));
    }
    made = false;
  }
  UniqueFd own{::openat(root_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (!own || ::fstat(own.get(), &info) != 0) {
    const int error = errno;
    if (::fstatat(root_fd.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) {
      if (const std::string why = private_directory_problem(info, 077); !why.empty()) {
        throw fail(root / name, why);
      }
    }
    throw fail(root / name, std::strerror(error));
  }
  if (made && (info.st_mode & 07777) != 0700 && ::fchmod(own.get(), 0700) == 0) {
    info.st_mode = (info.st_mode & ~static_cast<::mode_t>(07777)) | 0700; // a umask that took the owner's bits
  }
  if (const std::string why = private_directory_problem(info, 077); !why.empty()) {
    throw fail(root / name, why);
  }
  std::optional<std::string> recorded = recorded_path(own.get());
  if (!recorded) {
    throw fail(root / name, "the kernel does not say where it is (/proc/self/fd is unavailable)");
  }
  if (observing != nullptr) {
    // What a later call finds, made or not: both directories by name, following no link (as
    // opened here), with the statuses judged above; the second on the mount its grant holds,
    // and the name the kernel records for it.
    note_status(Observation::Kind::lstat, root.native(), 0, &root_judged);
    Observation own_status = status_observation(Observation::Kind::lstat, (root / name).native(), 0, &info);
    own_status.mount = unique_mount_id(own.get(), "", AT_EMPTY_PATH);
    if (own_status.mount == 0) {
      note_unrepeatable(); // a directory mounted again could read the same without its mount's id
    }
    note(std::move(own_status));
    note_text(Observation::Kind::canonical, (root / name).native(), 0, *recorded);
  }
  return {std::move(*recorded), std::move(own)};
}

/// Removes the directory tree at `path` without following a symbolic link; returns false (and
/// leaves what it could not remove) on failure. noexcept: used by destructors.
inline bool remove_tree(const std::filesystem::path& path) noexcept {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  return !error;
}

/// A directory removed with everything beneath it when its owner is destroyed; move-only.
class OwnedDirectory {
public:
  OwnedDirectory() = default;
  explicit OwnedDirectory(std::filesystem::path path) noexcept : path_(std::move(path)) {}
  OwnedDirectory(const OwnedDirectory&) = delete;
  OwnedDirectory& operator=(const OwnedDirectory&) = delete;
  OwnedDirectory(OwnedDirectory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  OwnedDirectory& operator=(OwnedDirectory&& other) noexcept {
    if (this != &other) {
      release();
      path_ = std::exchange(other.path_, {});
    }
    return *this;
  }
  ~OwnedDirectory() { release(); }

  /// True while it owns a directory (one it removes when destroyed).
  [[nodiscard]] bool owns() const noexcept { return !path_.empty(); }

private:
  void release() noexcept {
    if (!path_.empty()) {
      (void)remove_tree(path_);
      path_.clear();
    }
  }
  std::filesystem::path path_;
};

} // namespace dsh::detail
