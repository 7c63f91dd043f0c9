// What a captured fenced call takes and gives back: `FencedCommand::capture`'s options and result.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace dsh {

/// How `FencedCommand::capture` runs a command.
struct CaptureOptions {
  /// The most bytes kept of each of stdout and stderr; what comes after is still read (the
  /// command never blocks on a full pipe) and dropped, and `CommandOutput::truncated` is set.
  std::size_t max_bytes = std::size_t{1} << 20;
  /// The command's stdin, written to it while it runs and then closed; empty: stdin reads
  /// /dev/null, as with `run`.
  std::string stdin_bytes{};
};

/// A captured fenced call: how it ended, what it wrote, and whether the fence refused it a write.
struct CommandOutput {
  int status = -1;        ///< as `FencedCommand::run` returns it (124 when the time limit ended it)
  std::string out;        ///< stdout, at most `CaptureOptions::max_bytes` of it
  std::string err;        ///< stderr, at most `CaptureOptions::max_bytes` of it
  bool truncated = false; ///< stdout or stderr was longer than `CaptureOptions::max_bytes`
  /// True when the fence refused the command a write: a line of its stderr reports a refusal
  /// (EACCES, EPERM, EROFS, EXDEV) of a path the fence's policy does not let it write and the
  /// host's own permissions do (docs/enforcement.md#denials). An ordinary failure is never one.
  bool denied = false;
  /// The paths of those refusals, canonical, in the order the command reported them, without
  /// repeats; at most `DenialScanner::max_paths`. Not empty when `denied`.
  std::vector<std::filesystem::path> denied_paths{};
};

} // namespace dsh
