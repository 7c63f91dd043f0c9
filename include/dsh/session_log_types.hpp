/// @file
/// The value types of the session log's API: its error, the report of a repaired tail, and
/// the options of `SessionLog::open` (docs/session-log.md).
#pragma once

#include <dsh/policy_types.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace dsh {

/// A session log that cannot be created, opened, read or appended to. The message names the
/// file (as a JSON string literal), the 1-based line when one line is at fault, and what is
/// wrong: `session log "/var/s.jsonl" line 3: seq 2 where 1 was expected`.
class LogError : public Error {
public:
  /// Builds the error for `path`; `line` is 1-based, or 0 when no single line is at fault;
  /// `code` is the system error behind it, if one is.
  LogError(std::filesystem::path path, std::size_t line, std::string_view what, std::error_code code = {})
      : Error(message(path, line, what)), path_(std::move(path)), line_(line), code_(code) {}

  /// Returns the log's path as it was given.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Returns the 1-based line at fault, or 0 when the error is about the file as a whole.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  /// Returns the system error behind the failure (`std::errc::no_space_on_device` for an append
  /// refused for lack of room), or an empty code when it was not a system call's failure or the
  /// call site does not record one.
  [[nodiscard]] const std::error_code& code() const noexcept { return code_; }

private:
  [[nodiscard]] static std::string message(const std::filesystem::path& path, std::size_t line, std::string_view what) {
    std::string text = "session log " + json_string_literal(path.native());
    if (line > 0) {
      text += " line " + std::to_string(line);
    }
    text.append(": ").append(what);
    return text;
  }

  std::filesystem::path path_;
  std::size_t line_;
  std::error_code code_;
};

/// How a session log is stored on disk. `SessionLog::open` tells them apart by the file's
/// first bytes (a Zstandard frame's magic), never by its name.
enum class DshLogEncoding : std::uint8_t {
  plain, ///< `session.jsonl`: JSON lines.
  zstd,  ///< `session.jsonl.zstd`: independent checksummed Zstandard frames of JSON lines.
};

/// A torn tail that `SessionLog` repaired: in a plain log, a last line without its final
/// newline (a crash in the middle of an append), cut off; in a Zstandard log, an incomplete
/// last frame, cut off with its complete rows written back as one new frame.
struct TailRepair {
  std::size_t line = 0;            ///< 1-based number the torn line (the first row lost) had.
  std::uint64_t offset = 0;        ///< Where the torn line or frame began: where the file was cut.
  std::uint64_t removed_bytes = 0; ///< How many bytes were cut.
  std::size_t recovered_rows = 0;  ///< (Zstandard) complete rows of the torn frame kept in a new frame.
  bool operator==(const TailRepair&) const = default;
};

/// How many bytes a `SessionLog` keeps preallocated past the end of its file (fallocate with
/// FALLOC_FL_KEEP_SIZE), so that a `sandbox/mode` switch can still be written after other writes
/// filled the filesystem: ordinary appends never write into it. 64 KiB: at least one whole
/// allocation unit on every filesystem Linux hosts use (4 KiB blocks; 64 KiB pages of tmpfs on
/// some arm64 and ppc64 kernels), room for a few hundred switch lines of about 150 bytes (plain or
/// as a Zstandard frame), and a negligible cost per log.
inline constexpr std::uint64_t SESSION_LOG_RESERVE_BYTES = std::uint64_t{64} * 1024;

/// How `SessionLog::open` treats the file it opens, and how long a `SessionLog` waits for the
/// file lock. The defaults suit a log in a directory other users may write to: each relaxation
/// is an explicit opt-in, because whoever can rewrite the log can rewrite its `sandbox/mode`
/// events, and so the mode the next run resumes with.
struct SessionLogOptions {
  /// Open the file a symbolic link at the log's name points to. By default a link there is
  /// refused (`O_NOFOLLOW`): whoever could plant it would choose the file the log reads.
  bool follow_symlink = false;
  /// Open a log that another user owns. By default only the effective user's own logs open.
  bool allow_foreign_owner = false;
  /// Open a log its group or other users may write (mode bits 020 or 002). Refused by default.
  bool allow_shared_write = false;
  /// Open or create a log although a directory that resolves its path (an ancestor, or one a
  /// symbolic link on the way leads through) can be changed by another user: owned by someone
  /// other than root and the effective user, or writable by others or by a group another user
  /// may hold, without the sticky bit (the test OpenSSH's StrictModes makes). Refused by default,
  /// because such a user can rename any file over the log's name, even one of the host's own
  /// logs of another session that switched to danger-full-access, and the file's owner and mode
  /// checks would still pass. Setting it trusts every user who can write those directories with
  /// the mode of every later call.
  bool allow_shared_directories = false;
  /// The longest wait for the exclusive file lock (in open, append and refresh); after it the
  /// call throws LogError. Zero tries once; a negative timeout is a ConfigError.
  std::chrono::milliseconds lock_timeout{10000};
  /// The encoding `SessionLog::create` writes. `open` reads the encoding from the file and
  /// ignores this.
  DshLogEncoding encoding = DshLogEncoding::plain;
};

} // namespace dsh
