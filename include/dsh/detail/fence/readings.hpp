/// @file
/// Reading again what a fence's preparation read (docs/enforcement.md#a-fence-checked-again):
/// a rule anchor read the one way both do, and whether an observation still holds.
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/fence/landlock_kernel.hpp>
#include <dsh/detail/observations.hpp>
#include <dsh/detail/process/launcher_client.hpp>
#include <dsh/unique_fd.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace dsh::detail {

/// A Landlock rule anchor opened at a path, and what it is.
struct AnchorReading {
  UniqueFd anchor;                     ///< open (O_PATH, close-on-exec), or not when `error`
  int error = 0;                       ///< the errno of the open or the fstat, 0 when both worked
  struct stat info {};                 ///< its status when `error` is 0
  std::optional<std::string> recorded; ///< a directory's name as the kernel records it
  std::uint64_t mount = 0;             ///< `unique_mount_id` of the anchor (0: unknown)
};

[[nodiscard]] inline Observation anchor_observation(std::string path, bool directory, const AnchorReading& reading);

/// Opens the rule anchor at `path` (`open_rule_anchor`), reads its status and, for a directory,
/// the name the kernel records for it; records it all as one observation when the calling
/// thread has a recorder. Throws only std::bad_alloc.
[[nodiscard]] inline AnchorReading read_rule_anchor(const std::filesystem::path& path, bool directory) {
  AnchorReading reading;
  reading.anchor.reset(open_rule_anchor(path, directory));
  if (!reading.anchor || ::fstat(reading.anchor.get(), &reading.info) != 0) {
    reading.error = errno;
  } else {
    reading.mount = unique_mount_id(reading.anchor.get(), "", AT_EMPTY_PATH);
    if (directory) {
      reading.recorded = recorded_path(reading.anchor.get());
    }
  }
  if (observing != nullptr) {
    if (reading.error == 0 && reading.mount == 0) {
      note_unrepeatable(); // a filesystem mounted again could read the same without its mount's id
    }
    note(anchor_observation(path.native(), directory, reading));
  }
  return reading;
}

/// The observation `read_rule_anchor` records for `reading` of `path`.
[[nodiscard]] inline Observation anchor_observation(std::string path, bool directory, const AnchorReading& reading) {
  Observation observation =
      status_observation(directory ? Observation::Kind::directory_anchor : Observation::Kind::file_anchor,
                         std::move(path), reading.error, &reading.info);
  observation.mount = reading.error == 0 ? reading.mount : 0;
  observation.text = reading.recorded.value_or(std::string());
  return observation;
}

/// The observation of `kind` that statx(2) of `path` with `flags` gives now, with the mount's
/// unique id when `with_mount` (as `status_observation` and `unique_mount_id` give them).
[[nodiscard]] inline Observation status_again(Observation::Kind kind, const std::string& path, int flags,
                                              bool with_mount) {
  Observation again{kind, path};
#if defined(__linux__) && defined(STATX_MNT_ID)
  struct statx info {};
  if (::statx(AT_FDCWD, path.c_str(), flags | AT_STATX_SYNC_AS_STAT,
              STATX_BASIC_STATS | (with_mount ? statx_unique_mount_id : 0U), &info) != 0) {
    again.error = errno;
    return again;
  }
  again.device = makedev(info.stx_dev_major, info.stx_dev_minor);
  again.inode = info.stx_ino;
  again.mode = info.stx_mode;
  again.owner = info.stx_uid;
  again.group = info.stx_gid;
  again.links = S_ISDIR(info.stx_mode) ? 0 : info.stx_nlink;
  again.special = makedev(info.stx_rdev_major, info.stx_rdev_minor);
  if (with_mount) {
    again.mount = (info.stx_mask & statx_unique_mount_id) != 0 ? info.stx_mnt_id : 0;
  }
#else
  struct stat info {};
  const int result = (flags & AT_SYMLINK_NOFOLLOW) != 0 ? ::lstat(path.c_str(), &info) : ::stat(path.c_str(), &info);
  again = status_observation(kind, path, result == 0 ? 0 : errno, &info);
  (void)with_mount;
#endif
  return again;
}

/// The target `readlink(2)` gives for `path`, as `dangling_link_target` records it: the error
/// is ENAMETOOLONG for an empty or truncated answer.
[[nodiscard]] inline Observation read_link_again(const std::string& path) {
  std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  const ::ssize_t length = ::readlink(path.c_str(), buffer.data(), buffer.size());
  Observation again{Observation::Kind::readlink, path};
  if (length <= 0 || static_cast<std::size_t>(length) >= buffer.size()) {
    again.error = length < 0 ? errno : ENAMETOOLONG;
  } else {
    again.text.assign(buffer.data(), static_cast<std::size_t>(length));
  }
  return again;
}

/// True when reading `seen` again, now and the same way, gives what it gave. Records nothing.
/// Throws only std::bad_alloc (and what `canonical_native` throws for a relative path whose
/// working directory is gone, which a caller treats as a difference).
[[nodiscard]] inline bool reads_the_same(const Observation& seen) {
  const ObservationScope quiet(nullptr);
  switch (seen.kind) {
  case Observation::Kind::lstat:
    return status_again(seen.kind, seen.path, AT_SYMLINK_NOFOLLOW, seen.mount != 0) == seen;
  case Observation::Kind::stat:
    return status_again(seen.kind, seen.path, 0, seen.mount != 0) == seen;
  case Observation::Kind::readlink:
    return read_link_again(seen.path) == seen;
  case Observation::Kind::canonical:
    return seen.error == 0 && canonical_native(seen.path) == seen.text;
  case Observation::Kind::file_anchor:
    // open(2) with O_PATH and fstat(2) read what statx(2) following links reads: the file the
    // path leads to, and the mount it is on.
    return status_again(seen.kind, seen.path, 0, seen.error == 0) == seen;
  case Observation::Kind::directory_anchor:
    return anchor_observation(seen.path, true, read_rule_anchor(seen.path, true)) == seen;
  case Observation::Kind::cwd: {
    std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
    return ::getcwd(buffer.data(), buffer.size()) != nullptr && seen.text == buffer.data();
  }
  case Observation::Kind::launcher:
    return LauncherClient::instance().state().program.native() == seen.text;
  }
  return false;
}

/// The readings of `observations` each kept once, in their first order; nullopt when the
/// preparation read something twice and got two answers (what it depends on changed while it
/// ran), or read something that cannot be read again. Throws only std::bad_alloc.
[[nodiscard]] inline std::optional<std::vector<Observation>> distinct_readings(const Observations& observations) {
  if (!observations.repeatable) {
    return std::nullopt;
  }
  std::vector<Observation> distinct;
  distinct.reserve(observations.list.size());
  for (const Observation& observation : observations.list) {
    bool known = false;
    for (Observation& kept : distinct) {
      if (kept.kind == observation.kind && kept.path == observation.path) {
        // Only some readings take the mount's id (0 when not taken): two agree when all else
        // does and no two ids differ; the one kept is read again with the id.
        Observation left = kept;
        Observation right = observation;
        left.mount = 0;
        right.mount = 0;
        if (!(left == right) || (kept.mount != 0 && observation.mount != 0 && kept.mount != observation.mount)) {
          return std::nullopt;
        }
        if (kept.mount == 0) {
          kept.mount = observation.mount;
        }
        known = true;
        break;
      }
    }
    if (!known) {
      distinct.push_back(observation);
    }
  }
  return distinct;
}

} // namespace dsh::detail
