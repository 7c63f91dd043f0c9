/// @file
/// What a fence's preparation read of the filesystem and of the process, recorded at the moment
/// it read it, so that a later preparation with the same inputs can read the same things again
/// and reuse the fence when none differs (docs/enforcement.md#a-fence-checked-again). The
/// readers below record only while a recorder is installed on the calling thread.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

namespace dsh::detail {

/// One reading a preparation made, and what it gave.
struct Observation {
  /// How it was read, and is read again: lstat(2) or stat(2) of `path`; readlink(2) of `path`;
  /// the canonicalizer on `path`; a Landlock rule anchor opened at `path` (a directory, whose
  /// name the kernel records is kept too, or another file); the working directory; the fence
  /// launcher's program.
  enum class Kind : unsigned char { lstat, stat, readlink, canonical, directory_anchor, file_anchor, cwd, launcher };
  Kind kind = Kind::lstat;
  std::string path;    ///< what was read ("" for the working directory and the launcher)
  int error = 0;       ///< the errno of the reading, 0 when it succeeded
  ::dev_t device = 0;  ///< st_dev
  ::ino_t inode = 0;   ///< st_ino
  ::mode_t mode = 0;   ///< st_mode: the type and the permission bits
  ::uid_t owner = 0;   ///< st_uid
  ::gid_t group = 0;   ///< st_gid
  ::nlink_t links = 0; ///< st_nlink of what is not a directory (a directory's moves with its subdirectories,
                       ///< and no check reads it); 0 for a directory
  ::dev_t special = 0; ///< st_rdev
  /// The unique id of the mount it was read through (`unique_mount_id`), for what a ruleset's
  /// rule holds (a rule anchor, the private directory): a filesystem mounted again may give its
  /// root the same device and inode numbers. 0 where no check depends on the mount.
  std::uint64_t mount = 0;
  std::string text{}; ///< a link's target, a canonical path, the name the kernel records, the directory
  bool operator==(const Observation&) const = default;
};

/// statx(2)'s STATX_MNT_ID_UNIQUE (Linux 6.8): a mount id never given to another mount.
inline constexpr unsigned statx_unique_mount_id = 0x4000U;

/// The unique id of the mount `path` (relative to `directory`, with statx(2) `flags`) is read
/// through, or 0 when the kernel cannot tell one (before Linux 6.8) or the call fails.
[[nodiscard]] inline std::uint64_t unique_mount_id(int directory, const char* path, int flags) noexcept {
#if defined(__linux__) && defined(STATX_MNT_ID)
  struct statx info {};
  if (::statx(directory, path, flags, statx_unique_mount_id, &info) == 0 &&
      (info.stx_mask & statx_unique_mount_id) != 0) {
    return info.stx_mnt_id;
  }
#else
  (void)directory;
  (void)path;
  (void)flags;
#endif
  return 0;
}

/// An observation of `kind` on `path` with the status `info` (when `error` is 0).
[[nodiscard]] inline Observation status_observation(Observation::Kind kind, std::string path, int error,
                                                    const struct stat* info) {
  Observation observation{kind, std::move(path), error};
  if (error == 0 && info != nullptr) {
    observation.device = info->st_dev;
    observation.inode = info->st_ino;
    observation.mode = info->st_mode;
    observation.owner = info->st_uid;
    observation.group = info->st_gid;
    observation.links = S_ISDIR(info->st_mode) ? 0 : info->st_nlink;
    observation.special = info->st_rdev;
  }
  return observation;
}

/// The readings of one preparation, in the order made.
struct Observations {
  std::vector<Observation> list;
  /// False once a check read something that cannot be read again the same way: the group
  /// database, or a ".." walked from a directory reached before.
  bool repeatable = true;
};

/// The recorder of the preparation running on the calling thread, or nullptr.
inline thread_local Observations* observing = nullptr;

/// Makes `recorder` (nullptr: none) the calling thread's recorder for the scope's life.
class ObservationScope {
public:
  explicit ObservationScope(Observations* recorder) noexcept : saved_(std::exchange(observing, recorder)) {}
  ObservationScope(const ObservationScope&) = delete;
  ObservationScope& operator=(const ObservationScope&) = delete;
  ObservationScope(ObservationScope&&) = delete;
  ObservationScope& operator=(ObservationScope&&) = delete;
  ~ObservationScope() { observing = saved_; }

private:
  Observations* saved_;
};

/// Records `observation` when the calling thread has a recorder; keeps errno. Throws only
/// std::bad_alloc.
inline void note(Observation observation) {
  if (observing != nullptr) {
    const int saved = errno;
    observing->list.push_back(std::move(observation));
    errno = saved;
  }
}

/// Records a reading of the status of `path` (`info` when `error` is 0).
inline void note_status(Observation::Kind kind, const std::string& path, int error, const struct stat* info) {
  if (observing != nullptr) {
    note(status_observation(kind, path, error, info));
  }
}

/// Records a reading that gave `text` (a link's target, a canonical path, a directory).
inline void note_text(Observation::Kind kind, std::string path, int error, std::string text) {
  if (observing != nullptr) {
    Observation observation{kind, std::move(path), error};
    observation.text = std::move(text);
    note(std::move(observation));
  }
}

/// Records that the preparation read something that cannot be read again the same way.
inline void note_unrepeatable() noexcept {
  if (observing != nullptr) {
    observing->repeatable = false;
  }
}

/// lstat(2) of `path`, recorded. Returns what lstat returns, with its errno.
inline int observed_lstat(const char* path, struct stat& info) {
  const int result = ::lstat(path, &info);
  if (observing != nullptr) {
    note_status(Observation::Kind::lstat, path, result == 0 ? 0 : errno, &info);
  }
  return result;
}

/// stat(2) of `path`, recorded. Returns what stat returns, with its errno.
inline int observed_stat(const char* path, struct stat& info) {
  const int result = ::stat(path, &info);
  if (observing != nullptr) {
    note_status(Observation::Kind::stat, path, result == 0 ? 0 : errno, &info);
  }
  return result;
}

} // namespace dsh::detail
