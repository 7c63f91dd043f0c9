/// @file
/// The read fence: a second Landlock ruleset that handles read_file alone and grants it on
/// everything but /dev, so that a fenced command cannot open another terminal, an input device
/// or a disk by name and read from it (docs/enforcement.md#reading-devices; a device mount
/// elsewhere makes `PreparedFence::fence_reads` refuse to run). Reads are otherwise never
/// restricted.
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/fence/landlock_kernel.hpp>
#include <dsh/detail/fence/mount_table.hpp>
#include <dsh/detail/text/concat.hpp>
#include <dsh/detail/text/json_text.hpp>
#include <dsh/errors.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::detail {

/// The devices a command may read beneath /dev (those that exist), by name.
inline constexpr std::array<const char*, 5> readable_device_names{"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                                                  "/dev/urandom"};

/// The read fence's own Landlock ruleset, built once and shared by every fence prepared while the
/// filesystem it was built from is unchanged (`shared_read_fence`). It handles read_file alone
/// and is entered as a second Landlock layer after the fence's, so that a fence's write grants
/// stay its own and a call pays no rule for it.
struct ReadFence {
  /// A path it depends on ("/", "/dev", an extra) as it was when the ruleset was built.
  struct Stamp {
    std::filesystem::path path;
    ::dev_t device = 0;
    ::ino_t inode = 0;
    std::int64_t changed_seconds = 0;
    long changed_nanoseconds = 0;
    std::int64_t modified_seconds = 0;
    long modified_nanoseconds = 0;
    bool operator==(const Stamp&) const = default;
  };
  std::shared_ptr<const std::vector<MountEntry>> table; ///< the mount table it was built from
  std::vector<std::filesystem::path> extras;            ///< granted beside: terminals, grants beneath a tree
  std::vector<Stamp> stamps;                            ///< "/", "/dev" and each extra
  int abi = 0;                                          ///< the Landlock ABI it was built for
  std::vector<std::filesystem::path> devices;           ///< the readable devices found, then the extras' devices
  /// read_file, and with Landlock ABI 2 refer: a ruleset that does not grant refer refuses
  /// every link and rename into another directory, so it is granted wherever reads are
  /// (the fence's own ruleset still decides where a command may move files).
  std::uint64_t directory_rights = landlock_read_file;
  UniqueFd ruleset; ///< handles `directory_rights`; close-on-exec
};

/// The stamp of the directory or device `path` now (not following a link); nullopt when it
/// cannot be had.
[[nodiscard]] inline std::optional<ReadFence::Stamp> read_stamp(const std::filesystem::path& path) noexcept {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return std::nullopt;
  }
  return ReadFence::Stamp{path,
                          info.st_dev,
                          info.st_ino,
                          static_cast<std::int64_t>(info.st_ctim.tv_sec),
                          info.st_ctim.tv_nsec,
                          static_cast<std::int64_t>(info.st_mtim.tv_sec),
                          info.st_mtim.tv_nsec};
}

#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
/// Adds a read_file rule beneath the object `anchor` to `ruleset`. Throws LandlockError naming
/// `path` when the kernel refuses it.
inline void add_read_rule(int ruleset, int anchor, std::uint64_t rights, const std::filesystem::path& path,
                          const std::string& subject) {
  const PathBeneathAttr rule{rights, anchor};
  if (::syscall(sys_landlock_add_rule, ruleset, landlock_rule_path_beneath, &rule, 0U) != 0) {
    const int error = errno;
    throw LandlockError(concat(subject, ": landlock_add_rule (read_file) for ", json_string_literal(path.native()),
                               " failed: ", std::strerror(error)));
  }
}

/// Grants read_file (and `fence.directory_rights` on a directory) beneath every entry of "/"
/// but "/dev", stamping "/". Entries are opened relative to "/" without following a link, so a
/// link swapped in meanwhile anchors nothing (reading through a link is decided where it
/// points); a device node, FIFO or socket there is not granted, and an entry that vanishes is
/// left ungranted (fail closed). Throws LandlockError when a rule cannot be added, SystemError
/// when "/" cannot be listed.
inline void grant_reads_beneath_root(ReadFence& fence, const std::string& subject) {
  const int root = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    throw SystemError(errno, subject + ": cannot open \"/\" to grant reads beneath its entries");
  }
  const std::unique_ptr<DIR, int (*)(DIR*)> stream{::fdopendir(root), ::closedir};
  if (!stream) {
    const int error = errno;
    ::close(root);
    throw SystemError(error, subject + ": cannot list \"/\" to grant reads beneath its entries");
  }
  struct stat info {};
  if (::fstat(root, &info) != 0) {
    throw SystemError(errno, subject + ": cannot stat \"/\"");
  }
  fence.stamps.push_back({"/", info.st_dev, info.st_ino, static_cast<std::int64_t>(info.st_ctim.tv_sec),
                          info.st_ctim.tv_nsec, static_cast<std::int64_t>(info.st_mtim.tv_sec), info.st_mtim.tv_nsec});
  while (const ::dirent* entry = ::readdir(stream.get())) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || name == "dev" || entry->d_type == DT_LNK) {
      continue;
    }
    const UniqueFd anchor{::openat(root, entry->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC)};
    struct stat kind {};
    if (!anchor || ::fstat(anchor.get(), &kind) != 0 || !(S_ISDIR(kind.st_mode) || S_ISREG(kind.st_mode))) {
      continue;
    }
    add_read_rule(fence.ruleset.get(), anchor.get(),
                  S_ISDIR(kind.st_mode) ? fence.directory_rights : landlock_read_file,
                  std::filesystem::path("/") / entry->d_name, subject);
  }
}

/// Builds the read fence for the mount table `table`, whose only device tree is "/dev" (the
/// caller refuses any other), with `extras` (canonical paths of terminals and granted
/// directories beneath "/dev") readable too: read_file beneath every entry of "/" but "/dev", on
/// the readable devices and on each extra. Throws LandlockError when the ruleset or a rule
/// cannot be made, SystemError when "/" cannot be listed.
[[nodiscard]] inline std::shared_ptr<const ReadFence>
build_read_fence(std::shared_ptr<const std::vector<MountEntry>> table, std::vector<std::filesystem::path> extras,
                 int abi, const std::string& subject) {
  auto fence = std::make_shared<ReadFence>();
  fence->table = std::move(table);
  fence->extras = std::move(extras);
  fence->directory_rights = landlock_read_file | (abi >= 2 ? landlock_refer : 0);
  const RulesetAttr attr{fence->directory_rights, 0, 0};
  fence->ruleset.reset(
      static_cast<int>(::syscall(sys_landlock_create_ruleset, &attr, offsetof(RulesetAttr, handled_access_net), 0U)));
  if (!fence->ruleset) {
    const int error = errno;
    throw LandlockError(subject + ": landlock_create_ruleset (the read fence) failed: " + std::strerror(error));
  }
  fence->abi = abi;
  grant_reads_beneath_root(*fence, subject);
  for (const std::filesystem::path& stamped : std::vector<std::filesystem::path>{"/dev"}) {
    if (const std::optional<ReadFence::Stamp> stamp = read_stamp(stamped)) {
      fence->stamps.push_back(*stamp);
    }
  }
  for (const std::filesystem::path& extra : fence->extras) {
    if (const std::optional<ReadFence::Stamp> stamp = read_stamp(extra)) {
      fence->stamps.push_back(*stamp);
    }
  }
  const auto grant = [&fence, &subject](const std::filesystem::path& path, bool device_only) {
    const UniqueFd anchor{open_rule_anchor(path, false)};
    struct stat info {};
    if (!anchor || ::fstat(anchor.get(), &info) != 0 || (device_only && !S_ISCHR(info.st_mode))) {
      return;
    }
    add_read_rule(fence->ruleset.get(), anchor.get(),
                  S_ISDIR(info.st_mode) ? fence->directory_rights : landlock_read_file, path, subject);
    if (S_ISCHR(info.st_mode)) {
      fence->devices.push_back(path);
    }
  };
  for (const char* device : readable_device_names) {
    grant(device, true);
  }
  for (const std::filesystem::path& extra : fence->extras) {
    grant(extra, false);
  }
  return fence;
}

/// The read fence for this mount table, these extras and this ABI: the one built last while
/// nothing it depends on changed (the same table, extras and ABI, every stamp as it was; a
/// change within the filesystem's time granularity can hide a new entry of "/", which then
/// stays unreadable: fail closed), else a new one, kept for the next call. One with a terminal
/// among its extras is never reused: a pseudo-terminal's node is remade with the same name and
/// inode number when its number is reused, and a rule on the old one would refuse the command
/// its own terminal. Thread-safe. Throws what `build_read_fence` throws.
[[nodiscard]] inline std::shared_ptr<const ReadFence>
shared_read_fence(const std::shared_ptr<const std::vector<MountEntry>>& table,
                  const std::vector<std::filesystem::path>& extras, int abi, const std::string& subject) {
  struct Last {
    std::mutex lock;
    std::shared_ptr<const ReadFence> fence;
  };
  static Last* const last = new Last; // never destroyed: a fence prepared while the process exits
  std::shared_ptr<const ReadFence> kept;
  {
    const std::lock_guard held(last->lock);
    kept = last->fence;
  }
  const bool reusable = std::none_of(extras.begin(), extras.end(), [](const std::filesystem::path& extra) {
    struct stat info {};
    return ::lstat(extra.c_str(), &info) != 0 || S_ISCHR(info.st_mode);
  });
  if (!reusable) {
    return build_read_fence(table, extras, abi, subject);
  }
  if (kept && kept->table == table && kept->extras == extras && kept->abi == abi &&
      std::all_of(kept->stamps.begin(), kept->stamps.end(), [](const ReadFence::Stamp& stamp) {
        const std::optional<ReadFence::Stamp> now = read_stamp(stamp.path);
        return now && *now == stamp;
      })) {
    return kept;
  }
  std::shared_ptr<const ReadFence> made = build_read_fence(table, extras, abi, subject);
  const std::lock_guard held(last->lock);
  last->fence = made;
  return made;
}
#endif

} // namespace dsh::detail
