/// @file
/// The mount table as /proc/thread-self/mountinfo shows it, and where a path lies in the filesystem
/// that holds it: what lets the guards compare identities instead of spellings, so that a
/// bind mount showing a guarded file beneath a grant counts as exposing it.
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/errors.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace dsh::detail {

/// One line of a mountinfo file: which filesystem, which of its directories, and where.
struct MountEntry {
  std::string device;          ///< the filesystem's "major:minor" (the same for every mount of it)
  std::filesystem::path root;  ///< the directory of that filesystem the mount shows
  std::filesystem::path point; ///< where it is mounted, in this process's view
  std::string type{};          ///< the filesystem type ("devpts", "ext4", ...); "" when the line has none
};

/// Where a path lies: a filesystem and the path inside it, and the mount it was seen through.
struct FilesystemLocation {
  std::string device;          ///< as `MountEntry::device`
  std::filesystem::path path;  ///< the path inside the filesystem, absolute from its own root
  std::filesystem::path point; ///< the mount point it was seen through
};

/// Undoes the octal escapes (\040 for a space, \011, \012, \134) mountinfo writes in paths.
[[nodiscard]] inline std::string unescape_mount_path(std::string_view text) {
  std::string path;
  path.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '3' && text[i + 2] >= '0' &&
        text[i + 2] <= '7' && text[i + 3] >= '0' && text[i + 3] <= '7') {
      path += static_cast<char>((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0'));
      i += 3;
    } else {
      path += text[i];
    }
  }
  return path;
}

/// Parses the text of a mountinfo file; lines that do not have the five leading fields are
/// skipped (the kernel writes none). Returns the mounts in the file's order (later ones on top).
[[nodiscard]] inline std::vector<MountEntry> parse_mount_table(std::string_view text) {
  std::vector<MountEntry> mounts;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    // mount id, parent id, major:minor, root, mount point, ...
    std::array<std::string_view, 5> fields{};
    std::size_t from = 0;
    std::size_t count = 0;
    while (count < fields.size() && from <= line.size()) {
      const std::size_t space = std::min(line.find(' ', from), line.size());
      fields[count++] = line.substr(from, space - from);
      from = space + 1;
    }
    if (count < fields.size() || fields[2].find(':') == std::string_view::npos || !fields[3].starts_with('/') ||
        !fields[4].starts_with('/')) {
      continue;
    }
    // ... optional fields, then " - " and the filesystem type
    std::string type;
    if (const std::size_t separator = line.find(" - ", from > line.size() ? line.size() : from);
        separator != std::string_view::npos) {
      const std::string_view rest = line.substr(separator + 3);
      type = std::string(rest.substr(0, std::min(rest.find(' '), rest.size())));
    }
    mounts.push_back(
        {std::string(fields[2]), unescape_mount_path(fields[3]), unescape_mount_path(fields[4]), std::move(type)});
  }
  return mounts;
}

/// The device trees: "/dev", then every devpts or devtmpfs mount of `mounts` outside it (a bind
/// of the host's /dev or /dev/pts elsewhere reaches the same terminals), each once and none
/// beneath another. The read fence keeps a command out of the first; the others make it refuse
/// to run, and the namespace layer hides them.
[[nodiscard]] inline std::vector<std::filesystem::path> device_trees(const std::vector<MountEntry>& mounts) {
  std::vector<std::filesystem::path> trees{"/dev"};
  for (const MountEntry& mount : mounts) {
    if (mount.type != "devpts" && mount.type != "devtmpfs") {
      continue;
    }
    if (std::any_of(trees.begin(), trees.end(),
                    [&mount](const std::filesystem::path& tree) { return is_within(mount.point, tree); })) {
      continue;
    }
    // A tree listed earlier beneath this one is covered by it.
    trees.erase(std::remove_if(trees.begin() + 1, trees.end(),
                               [&mount](const std::filesystem::path& tree) { return is_within(tree, mount.point); }),
                trees.end());
    trees.push_back(mount.point);
  }
  return trees;
}

/// Reads the text of the calling thread's /proc/thread-self/mountinfo: a thread may have a
/// mount namespace of its own (unshare(CLONE_NEWNS)), and the commands it forks live in that
/// one, while /proc/self shows the main thread's. Throws dsh::SystemError naming the
/// file when it cannot be read: without it a bind mount could show a guarded file beneath a
/// grant unseen.
[[nodiscard]] inline std::string read_mount_text() {
  const UniqueFd file{::open("/proc/thread-self/mountinfo", O_RDONLY | O_CLOEXEC)};
  if (!file) {
    throw SystemError(errno, "dsh: cannot read /proc/thread-self/mountinfo");
  }
  std::string text;
  std::array<char, 16384> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  for (;;) {
    const ::ssize_t got = retry_on_eintr([&]() noexcept { return ::read(file.get(), buffer.data(), buffer.size()); });
    if (got < 0) {
      throw SystemError(errno, "dsh: cannot read /proc/thread-self/mountinfo");
    }
    if (got == 0) {
      break;
    }
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  return text;
}

/// Reads the calling thread's mount table. Throws what `read_mount_text` throws.
[[nodiscard]] inline std::vector<MountEntry> read_mount_table() { return parse_mount_table(read_mount_text()); }

/// The calling thread's mount table as `read_mount_table` gives it, read now, shared and immutable. The
/// file is read on every call (the kernel's change notice on it misses a rename of a directory
/// above a mount point, which moves the mount in the table, so no read is ever skipped); only
/// the parse of a text equal, byte for byte, to the last one parsed is reused. Thread-safe; the
/// last table is never destroyed (a fence prepared while the process exits still finds it).
/// Throws what `read_mount_text` throws, or std::bad_alloc.
[[nodiscard]] inline std::shared_ptr<const std::vector<MountEntry>> current_mount_table() {
  struct Last {
    std::mutex lock;
    std::string text;
    std::shared_ptr<const std::vector<MountEntry>> table;
  };
  static Last* const last = new Last;
  std::string text = read_mount_text();
  {
    const std::lock_guard held(last->lock);
    if (last->table && last->text == text) {
      return last->table;
    }
  }
  auto table = std::make_shared<const std::vector<MountEntry>>(parse_mount_table(text));
  const std::lock_guard held(last->lock);
  last->text = std::move(text);
  last->table = table;
  return table;
}

/// True when `path` is absolute and already lexically clean: no empty, "." or ".." component
/// and no trailing separator (except for "/" itself), so that `lexically_clean` returns it as is.
[[nodiscard]] inline bool is_lexically_clean(std::string_view path) noexcept {
  if (!path.starts_with('/')) {
    return false;
  }
  if (path.size() == 1) {
    return true;
  }
  std::size_t from = 1;
  while (from <= path.size()) {
    const std::size_t end = std::min(path.find('/', from), path.size());
    const std::string_view part = path.substr(from, end - from);
    if (part.empty() || part == "." || part == "..") {
      return false;
    }
    from = end + 1;
  }
  return true;
}

/// `inner` (a path beneath-or-at `base`, both canonical) re-rooted at `root`: the same relative
/// part below `root`.
[[nodiscard]] inline std::filesystem::path rebase(const std::filesystem::path& inner, const std::filesystem::path& base,
                                                  const std::filesystem::path& root) {
  // Every guard entry is located, so the common case is done on strings: a clean inner path
  // beneath-or-at `base` by whole components and a clean root join to a clean path.
  const std::string& in = inner.native();
  const std::string& from = base.native();
  const std::string& to = root.native();
  if (is_within(inner, base) && is_lexically_clean(in) && is_lexically_clean(from) && is_lexically_clean(to)) {
    const std::string_view relative =
        std::string_view(in).substr(from == "/" ? 1 : std::min(in.size(), from.size() + 1));
    if (relative.empty()) {
      return root;
    }
    std::string joined = to;
    if (joined != "/") {
      joined += '/';
    }
    joined.append(relative);
    return std::filesystem::path(std::move(joined));
  }
  std::filesystem::path result = root;
  const std::filesystem::path relative = inner.lexically_relative(base);
  if (!relative.empty() && relative != ".") {
    result /= relative;
  }
  return std::filesystem::path(lexically_clean(result));
}

/// Where the canonical path `path` lies: the mount with the longest mount point beneath-or-at
/// which it lies (the last one listed among equals: it is on top), or nullopt when none does.
[[nodiscard]] inline std::optional<FilesystemLocation> locate(const std::vector<MountEntry>& mounts,
                                                              const std::filesystem::path& path) {
  const MountEntry* best = nullptr;
  std::size_t best_length = 0;
  for (const MountEntry& mount : mounts) {
    const std::size_t length = mount.point.native().size();
    if (is_within(path, mount.point) && (best == nullptr || length >= best_length)) {
      best = &mount;
      best_length = length;
    }
  }
  if (best == nullptr) {
    return std::nullopt;
  }
  return FilesystemLocation{best->device, rebase(path, best->point, best->root), best->point};
}

/// Everything a grant of the canonical directory `grant` makes reachable, as filesystem
/// locations: the grant's own, and the root of every mount whose mount point lies strictly
/// beneath it (a bind mount there shows its source's directory beneath the grant).
[[nodiscard]] inline std::vector<FilesystemLocation> reachable_beneath(const std::vector<MountEntry>& mounts,
                                                                       const std::filesystem::path& grant) {
  std::vector<FilesystemLocation> regions;
  if (std::optional<FilesystemLocation> own = locate(mounts, grant)) {
    regions.push_back(std::move(*own));
  }
  for (const MountEntry& mount : mounts) {
    if (mount.point != grant && is_within(mount.point, grant)) {
      regions.push_back({mount.device, mount.root, mount.point});
    }
  }
  return regions;
}

} // namespace dsh::detail
