// Whole-file access for every suite, with one contract: reading a file that cannot be opened
// gives the marker "<missing>" (a value an assertion compares, so a test never has to catch);
// every other failure, to write or to make, throws std::runtime_error.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsh::test {

/// What `read_file` returns for a file it cannot open.
inline constexpr std::string_view missing_file = "<missing>";

/// The whole content of `path`, byte for byte, or "<missing>" when it cannot be opened.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::string(missing_file);
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Creates or truncates `path` and writes exactly `content`; throws on failure.
inline void write_file(const std::filesystem::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out.flush()) {
    throw std::runtime_error("cannot write " + path.string());
  }
}

/// True when `path` exists as any kind of file (symlinks not followed).
inline bool exists_nofollow(const std::filesystem::path& path) {
  std::error_code ignored;
  return std::filesystem::exists(std::filesystem::symlink_status(path, ignored));
}

/// Makes the directory `path` with exactly `mode` (umask aside) and the owner `uid`:`gid`;
/// throws if it cannot.
inline void make_directory(const std::filesystem::path& path, ::mode_t mode, ::uid_t uid = 0, ::gid_t gid = 0) {
  if (::mkdir(path.c_str(), 0700) != 0 || ::chown(path.c_str(), uid, gid) != 0 || ::chmod(path.c_str(), mode) != 0) {
    throw std::runtime_error("cannot make the directory " + path.string());
  }
}

} // namespace dsh::test
