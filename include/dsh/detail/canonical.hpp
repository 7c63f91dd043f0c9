/// @file
/// The canonicalizer behind `canonical_path` (docs/contract.md#canonicalization), on native
/// strings: the physical identity of the longest existing prefix, the rest lexically; and
/// whether one canonical path lies within another.
#pragma once

#include <dsh/detail/observations.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/errors.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh::detail {

/// Returns the process working directory, an absolute path; throws dsh::SystemError when it
/// cannot be read (for example after it was removed) or is not an absolute path, because
/// guessing a base would widen a relative root.
[[nodiscard]] inline std::string current_directory() {
  std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  if (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    throw SystemError(errno, "dsh: cannot read the process working directory");
  }
  if (buffer[0] != '/') { // a C library that reports an unreachable directory by name
    throw SystemError(ENOENT, "dsh: the process working directory is not an absolute path");
  }
  std::string directory(buffer.data());
  if (observing != nullptr) {
    note_text(Observation::Kind::cwd, "", 0, directory);
  }
  return directory;
}

/// Returns `path` made absolute against the process working directory (POSIX: absolute
/// means starting with '/'). Throws what `current_directory` throws, for a relative path only.
[[nodiscard]] inline std::string absolute_native(std::string_view path) {
  if (path.starts_with('/')) {
    return std::string(path);
  }
  std::string absolute = current_directory();
  if (!absolute.ends_with('/')) {
    absolute += '/';
  }
  absolute.append(path);
  return absolute;
}

#ifdef O_PATH
/// Returns the path the kernel records for the open file `fd`, read back through
/// /proc/self/fd, or nullopt when that is unavailable or not a plain absolute path (a deleted
/// file reads back with " (deleted)" appended, one outside the process root as "(unreachable)...").
[[nodiscard]] inline std::optional<std::string> recorded_path(int fd) {
  const NumberedPath link = numbered_path("/proc/self/fd/", static_cast<unsigned>(fd), "");
  std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  const ssize_t length = ::readlink(link.c_str(), buffer.data(), buffer.size());
  if (length <= 0 || static_cast<std::size_t>(length) >= buffer.size() || buffer[0] != '/') {
    return std::nullopt;
  }
  const std::string_view recorded(buffer.data(), static_cast<std::size_t>(length));
  if (recorded.ends_with(" (deleted)")) {
    return std::nullopt;
  }
  return std::string(recorded);
}
#endif

/// Returns the physical identity of the absolute path `path` as realpath(3) gives it, or
/// nullopt when it does not exist as a whole. Opens it once (O_PATH) and asks the kernel for
/// the name it recorded: one path walk instead of realpath(3)'s walk per component. Falls
/// back to realpath(3) whenever that cannot answer for a reason other than a missing component.
[[nodiscard]] inline std::optional<std::string> physical_identity(const std::string& path) {
  // O_PATH is Linux's; elsewhere realpath(3) answers alone.
#ifdef O_PATH
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC); // NOLINT(cppcoreguidelines-pro-type-vararg)
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
    return std::nullopt;
  }
  if (fd >= 0) {
    std::optional<std::string> recorded = recorded_path(fd);
    ::close(fd);
    if (recorded) {
      return recorded;
    }
  }
#endif
  std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  if (::realpath(path.c_str(), buffer.data()) == nullptr) {
    return std::nullopt;
  }
  return std::string(buffer.data());
}

/// Normalizes lexically and drops a trailing separator (except for "/").
[[nodiscard]] inline std::string lexically_clean(const std::filesystem::path& path) {
  std::string text = path.lexically_normal().native();
  while (text.size() > 1 && text.back() == '/') {
    text.pop_back();
  }
  return text;
}

/// Returns the target of the symbolic link `path`, or nullopt when `path` is not one.
/// Recorded (`observed_lstat`, then the link's target) when the calling thread has a recorder.
[[nodiscard]] inline std::optional<std::filesystem::path> dangling_link_target(const std::filesystem::path& path) {
  struct stat status {};
  if (observed_lstat(path.c_str(), status) != 0 || !S_ISLNK(status.st_mode)) {
    return std::nullopt;
  }
  std::array<char, PATH_MAX> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  const ssize_t length = ::readlink(path.c_str(), buffer.data(), buffer.size());
  if (length <= 0 || static_cast<std::size_t>(length) >= buffer.size()) {
    if (observing != nullptr) {
      note_text(Observation::Kind::readlink, path.native(), length < 0 ? errno : ENAMETOOLONG, "");
    }
    return std::nullopt;
  }
  std::string target(buffer.data(), static_cast<std::size_t>(length));
  if (observing != nullptr) {
    note_text(Observation::Kind::readlink, path.native(), 0, target);
  }
  return std::filesystem::path(std::move(target));
}

/// The slow path of `canonical_path` for an absolute path that does not exist as a whole:
/// the identity of the longest existing prefix, then the rest lexically. A dangling symbolic
/// link at the boundary is followed, as `open(O_CREAT)` would follow it.
[[nodiscard]] inline std::string canonical_partial(std::filesystem::path absolute) {
  constexpr int max_links = 40; // the kernel's own limit (ELOOP)
  for (int links = 0;; ++links) {
    std::vector<std::filesystem::path> parts(absolute.begin(), absolute.end());
    std::filesystem::path base = absolute.root_path();
    std::size_t existing = 1; // parts[0] is the root
    for (std::size_t count = parts.size() - 1; count >= 1; --count) {
      std::filesystem::path prefix = absolute.root_path();
      for (std::size_t i = 1; i <= count; ++i) {
        prefix /= parts[i];
      }
      if (auto identity = physical_identity(prefix.native())) {
        base = std::move(*identity);
        existing = count + 1;
        break;
      }
    }
    std::filesystem::path rest;
    for (std::size_t i = existing; i < parts.size(); ++i) {
      rest /= parts[i];
    }
    if (existing < parts.size() && links < max_links) {
      if (auto target = dangling_link_target(base / parts[existing])) {
        std::filesystem::path followed = target->is_absolute() ? *target : base / *target;
        for (std::size_t i = existing + 1; i < parts.size(); ++i) {
          followed /= parts[i];
        }
        absolute = std::move(followed);
        continue;
      }
    }
    return lexically_clean(base / rest);
  }
}

/// The one canonicalizer (see `canonical_path`), on native strings. Recorded as one reading
/// (`path` and its result) when the calling thread has a recorder: what it reads on the way is
/// read again whenever it runs again.
[[nodiscard]] inline std::string canonical_native(const std::string& path) {
  if (observing != nullptr) {
    std::string canonical;
    {
      const ObservationScope paused(nullptr);
      canonical = canonical_native(path);
    }
    note_text(Observation::Kind::canonical, path, 0, canonical);
    return canonical;
  }
  if (!path.starts_with('/')) {
    return canonical_native(absolute_native(path));
  }
  if (path.find('\0') != std::string::npos) {
    return lexically_clean(path);
  }
  if (path == "/") {
    return path; // the process root reads back as "/" whatever it is: no walk needed
  }
  if (auto identity = physical_identity(path)) {
    return std::move(*identity);
  }
  return canonical_partial(path);
}

/// Returns true if canonical `path` is `root` or lies beneath it by whole components.
[[nodiscard]] inline bool is_within(const std::filesystem::path& path, const std::filesystem::path& root) noexcept {
  const std::string& p = path.native();
  const std::string& r = root.native();
  if (r.empty() || r.front() != '/') {
    return false; // a root that is not absolute contains nothing: fail closed
  }
  if (r == "/") {
    return !p.empty() && p.front() == '/';
  }
  return p.starts_with(r) && (p.size() == r.size() || p[r.size()] == '/');
}

} // namespace dsh::detail
