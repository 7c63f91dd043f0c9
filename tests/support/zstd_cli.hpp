// The zstd command-line tool as an independent Zstandard writer and reader for the tests of
// compressed session logs (the library's own codec must not be the only judge of its output).
#pragma once

#include "support/session_log.hpp"
#include "support/temp_dir.hpp"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dsh::test {

/// Returns `text` compressed by `zstd` as one frame, with a content checksum unless `checksum`
/// is false; throws std::runtime_error if the tool fails.
inline std::string zstd_cli_compress(std::string_view text, bool checksum = true) {
  const TempDir scratch;
  write_file(scratch / "in", text);
  const std::string command = std::string("zstd -q -f ") + (checksum ? "--check" : "--no-check") + " -o '" +
                              (scratch / "out").string() + "' '" + (scratch / "in").string() + "'";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("zstd failed: " + command);
  }
  return read_file(scratch / "out");
}

/// Returns the text `zstd -d` decodes from the file `path` (every frame, every checksum
/// checked), or nullopt when the tool refuses it.
inline std::optional<std::string> zstd_cli_decompress(const std::filesystem::path& path) {
  const TempDir scratch;
  const std::string command = "zstd -q -d -f -o '" + (scratch / "out").string() + "' '" + path.string() + "'";
  if (std::system(command.c_str()) != 0) {
    return std::nullopt;
  }
  return read_file(scratch / "out");
}

} // namespace dsh::test
