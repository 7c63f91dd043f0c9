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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace dsh::detail {

/// A Landlock rule anchor opened at a path, and what it is.
struct AnchorReading {
  UniqueFd anchor;                     ///< open (O_PATH, close-on-exec), or not when `error`
  int error = 0;                       ///< the errno of the open or the fstat, 0 when both worked
  struct stat info {};                 ///< its status when `error` is 0
  std::optional<std::string> recorded; ///< a directory's name as the kernel records it
};

/// Opens the rule anchor at `path` (`open_rule_anchor`), reads its status and, for a directory,
/// the name the kernel records for it; records it all as one observation when the calling
/// thread has a recorder. Throws only std::bad_alloc.
[[nodiscard]] inline AnchorReading read_rule_anchor(const std::filesystem::path& path, bool directory) {
  AnchorReading reading;
  reading.anchor.reset(open_rule_anchor(path, directory));
  if (!reading.anchor || ::fstat(reading.anchor.get(), &reading.info) != 0) {
    reading.error = errno;
  } else if (directory) {
    reading.recorded = recorded_path(reading.anchor.get());
  }
  if (observing != nullptr) {
    Observation observation =
        status_observation(directory ? Observation::Kind::directory_anchor : Observation::Kind::file_anchor,
                           path.native(), reading.error, &reading.info);
    observation.text = reading.recorded.value_or(std::string());
    note(std::move(observation));
  }
  return reading;
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
  struct stat info {};
  switch (seen.kind) {
  case Observation::Kind::lstat: {
    const int result = ::lstat(seen.path.c_str(), &info);
    return status_observation(seen.kind, seen.path, result == 0 ? 0 : errno, &info) == seen;
  }
  case Observation::Kind::stat: {
    const int result = ::stat(seen.path.c_str(), &info);
    return status_observation(seen.kind, seen.path, result == 0 ? 0 : errno, &info) == seen;
  }
  case Observation::Kind::readlink:
    return read_link_again(seen.path) == seen;
  case Observation::Kind::canonical:
    return seen.error == 0 && canonical_native(seen.path) == seen.text;
  case Observation::Kind::file_anchor: {
    // open(2) with O_PATH and fstat(2) read what stat(2) reads: the file the path leads to.
    const int result = ::stat(seen.path.c_str(), &info);
    return status_observation(seen.kind, seen.path, result == 0 ? 0 : errno, &info) == seen;
  }
  case Observation::Kind::directory_anchor: {
    const AnchorReading reading = read_rule_anchor(seen.path, true);
    Observation again = status_observation(seen.kind, seen.path, reading.error, &reading.info);
    again.text = reading.recorded.value_or(std::string());
    return again == seen;
  }
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
    for (const Observation& kept : distinct) {
      if (kept.kind == observation.kind && kept.path == observation.path) {
        if (!(kept == observation)) {
          return std::nullopt;
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
