/// @file
/// Zstandard frames as DSH stores a session log in `session.jsonl.zstd` (docs/session-log.md).
///
/// The file is a concatenation of independent, checksummed Zstandard frames: the first holds
/// exactly the header line, every later one holds one durable batch of complete JSONL records.
/// `ZstdFrameReader` walks such a file frame by frame (memory bounded by the largest frame's
/// plaintext) and classifies what it finds; `encode_zstd_frame` writes one frame.
///
/// libzstd is optional. `DSH_SANDBOX_POLICY_HAS_ZSTD` (1 or 0; the CMake package and the
/// pkg-config file define it) decides; left undefined, `<zstd.h>` being available decides. Without
/// it every entry point reports `zstd_unavailable_message`.
#pragma once

#include <dsh/detail/posix.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#if !defined(DSH_SANDBOX_POLICY_HAS_ZSTD)
#if defined(__has_include)
#if __has_include(<zstd.h>)
#define DSH_SANDBOX_POLICY_HAS_ZSTD 1
#endif
#endif
#endif
#if !defined(DSH_SANDBOX_POLICY_HAS_ZSTD)
#define DSH_SANDBOX_POLICY_HAS_ZSTD 0
#endif

#if DSH_SANDBOX_POLICY_HAS_ZSTD
#include <zstd.h>
#include <zstd_errors.h>
#endif

namespace dsh::detail {

/// True when this build reads and writes Zstandard frames.
inline constexpr bool zstd_available = DSH_SANDBOX_POLICY_HAS_ZSTD != 0;

/// What every Zstandard entry point reports in a build without libzstd.
inline constexpr std::string_view zstd_unavailable_message =
    "dsh-sandbox-policy was built without Zstandard support (libzstd was not found)";

/// How a walk over a Zstandard session log ended, or why a frame could not be written.
enum class ZstdFrameStatus {
  complete,          ///< Every frame was complete, checksummed and made of complete records.
  torn_tail,         ///< The last frame is incomplete (a crash mid-append): its complete records were kept.
  unavailable,       ///< This build has no Zstandard support.
  io_error,          ///< The file could not be read (or is not a regular file).
  no_header,         ///< The file is empty, or ends inside its first (header) frame.
  bad_magic,         ///< A frame does not start with the Zstandard magic (skippable frames included).
  malformed_frame,   ///< A reserved bit or block type, or data libzstd refuses to decode.
  checksum_mismatch, ///< A complete frame's content checksum does not match its plaintext.
  bad_header_frame,  ///< The first frame is not exactly one newline-terminated line.
  torn_record,       ///< A complete frame's plaintext ends inside a record.
  frame_too_large,   ///< A frame decompresses to more than the reader's limit.
  bad_batch,         ///< The writer was given something other than complete lines.
  compression_failed ///< libzstd could not compress the batch.
};

/// The end of a walk: its status, the byte offset of the frame at fault (or of the torn frame),
/// how many complete records a torn frame gave, and a message `LogError` can carry.
struct ZstdFrameOutcome {
  ZstdFrameStatus status = ZstdFrameStatus::complete;
  std::uint64_t offset = 0;
  std::size_t recovered_records = 0;
  std::string message;
};

/// One frame as the reader yields it. The record views point into the reader and stay valid
/// until the next call to `next()`.
struct ZstdFrame {
  std::uint64_t offset = 0;              ///< Byte offset of the frame's magic in the file.
  std::uint64_t end = 0;                 ///< Offset just past the frame (the file size when torn).
  bool torn = false;                     ///< The incomplete last frame: only its complete records.
  std::vector<std::string_view> records; ///< The frame's records, without their newlines.
  std::string_view text;                 ///< The same records as one text, each with its newline.
};

/// Where a walk over the batches appended after the header frame starts: the file offset of a
/// frame boundary.
struct ZstdBatchesFrom {
  std::uint64_t offset = 0;
};

/// The bytes of one encoded frame, or why there are none.
struct ZstdEncodedFrame {
  ZstdFrameStatus status = ZstdFrameStatus::complete;
  std::string bytes;
  std::string message;
};

namespace zstd_frames {

inline constexpr std::uint32_t frame_magic = 0xFD2FB528U;
inline constexpr std::size_t read_chunk = std::size_t{1} << 17;

[[nodiscard]] inline std::string at_byte(std::uint64_t offset) { return " at byte " + std::to_string(offset); }

[[nodiscard]] inline std::string corrupt(std::string_view what) {
  return "corrupt Zstandard session log: " + std::string(what);
}

/// The bytes of the file being walked: a caller's buffer or a regular file read with pread.
class Source {
public:
  explicit Source(std::string_view bytes) noexcept : bytes_(bytes), size_(bytes.size()) {}
  Source(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// Reads up to `length` bytes at `offset` into `out`. Returns the count read (short only at
  /// the end of the file), or -1 with errno set when the read fails.
  [[nodiscard]] long long read_at(std::uint64_t offset, char* out, std::size_t length) const noexcept {
    if (offset >= size_) {
      return 0;
    }
    const auto wanted = static_cast<std::size_t>(std::min<std::uint64_t>(length, size_ - offset));
    if (fd_ < 0) {
      std::memcpy(out, bytes_.data() + offset, wanted);
      return static_cast<long long>(wanted);
    }
    std::size_t done = 0;
    while (done < wanted) {
      const ::ssize_t got = retry_on_eintr(
          [&]() noexcept { return ::pread(fd_, out + done, wanted - done, static_cast<::off_t>(offset + done)); });
      if (got < 0) {
        return -1;
      }
      if (got == 0) {
        break;
      }
      done += static_cast<std::size_t>(got);
    }
    return static_cast<long long>(done);
  }

private:
  std::string_view bytes_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// Where a frame's structure ends, read from its headers alone (no decoding).
struct Extent {
  enum class Kind { complete, torn, bad_magic, reserved, io_error } kind = Kind::complete;
  std::uint64_t end = 0;   ///< Just past the frame (complete) or the byte at fault.
  std::string detail = {}; ///< What is wrong, for bad_magic, reserved and io_error.
};

} // namespace zstd_frames

/// Walks a Zstandard session log frame by frame: `while (reader.next()) use(reader.frame());`,
/// then `reader.outcome()` tells whether the walk ended cleanly, at a torn last frame, or at
/// corruption (naming the frame's byte offset). Rules, as DSH reads the format:
/// * the first frame must be complete and hold exactly one newline-terminated line;
/// * every frame starts with the Zstandard magic; a skippable frame is corruption;
/// * a complete frame must pass its checksum and end with a newline (after the last record);
/// * a file ending inside a frame (after the first) is a torn tail: the complete records its
///   available bytes decode to are yielded with `torn` set; bytes that do not decode are damage.
/// The reader keeps one frame's plaintext (at most `max_frame_bytes`) and a 128 KiB input chunk.
class ZstdFrameReader {
public:
  /// The default plaintext limit of one frame: larger frames are refused, not buffered.
  static constexpr std::size_t default_max_frame_bytes = std::size_t{256} << 20;

  /// Reads the frames of `bytes`, which must outlive the reader.
  explicit ZstdFrameReader(std::string_view bytes, std::size_t max_frame_bytes = default_max_frame_bytes)
      : source_(bytes), max_frame_bytes_(max_frame_bytes) {
    start();
  }

  /// Reads the frames of the regular file open as `fd` (not owned; positioned reads only, up to
  /// its size when the reader is made). An fd that is not a regular file ends the walk with io_error.
  explicit ZstdFrameReader(int fd, std::size_t max_frame_bytes = default_max_frame_bytes)
      : source_(std::string_view{}), max_frame_bytes_(max_frame_bytes) {
    open_file(fd, 0);
  }

  /// Reads the frames of `fd` that start at byte `from` and after: the batches appended after a
  /// part already read, so the first frame read is a batch, not the header frame. `from` must
  /// be where a frame starts (the end of the last complete frame read before).
  ZstdFrameReader(int fd, ZstdBatchesFrom from, std::size_t max_frame_bytes = default_max_frame_bytes)
      : source_(std::string_view{}), max_frame_bytes_(max_frame_bytes) {
    open_file(fd, from.offset);
  }

  ZstdFrameReader(const ZstdFrameReader&) = delete;
  ZstdFrameReader& operator=(const ZstdFrameReader&) = delete;
  ZstdFrameReader(ZstdFrameReader&&) = delete;
  ZstdFrameReader& operator=(ZstdFrameReader&&) = delete;

#if DSH_SANDBOX_POLICY_HAS_ZSTD
  ~ZstdFrameReader() { ZSTD_freeDCtx(dctx_); }
#else
  ~ZstdFrameReader() = default;
#endif

  /// Advances to the next frame. Returns true when `frame()` holds one (the header frame first);
  /// false once the walk is over, and then `outcome()` says how it ended.
  [[nodiscard]] bool next() {
    if (done_) {
      return false;
    }
    return advance();
  }

  /// Returns the current frame (valid after `next()` returned true).
  [[nodiscard]] const ZstdFrame& frame() const noexcept { return frame_; }

  /// Returns how the walk ended (meaningful once `next()` returned false).
  [[nodiscard]] const ZstdFrameOutcome& outcome() const noexcept { return outcome_; }

private:
  void open_file(int fd, std::uint64_t from) {
    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      fail(ZstdFrameStatus::io_error, 0,
           "cannot inspect the Zstandard session log: " + std::string(std::strerror(error)));
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      fail(ZstdFrameStatus::io_error, 0, "a Zstandard session log must be a regular file");
      return;
    }
    source_ = zstd_frames::Source(fd, static_cast<std::uint64_t>(st.st_size));
    start();
#if DSH_SANDBOX_POLICY_HAS_ZSTD
    if (from > 0) {
      position_ = from;
      index_ = 1; // past the header frame
    }
#else
    static_cast<void>(from);
#endif
  }

  void start() {
#if DSH_SANDBOX_POLICY_HAS_ZSTD
    dctx_ = ZSTD_createDCtx();
    if (dctx_ == nullptr) {
      fail(ZstdFrameStatus::io_error, 0, "libzstd could not allocate a decompression context");
    }
#else
    fail(ZstdFrameStatus::unavailable, 0, std::string(zstd_unavailable_message));
#endif
  }

  void fail(ZstdFrameStatus status, std::uint64_t offset, std::string message) {
    done_ = true;
    outcome_.status = status;
    outcome_.offset = offset;
    outcome_.message = std::move(message);
  }

  [[nodiscard]] bool read_exact(std::uint64_t offset, char* out, std::size_t length) {
    const long long got = source_.read_at(offset, out, length);
    if (got < 0) {
      const int error = errno;
      io_failure_ =
          "cannot read the Zstandard session log" + zstd_frames::at_byte(offset) + ": " + std::strerror(error);
      return false;
    }
    return static_cast<std::size_t>(got) == length;
  }

  /// Follows the frame header and block headers from `start`; decodes nothing.
  [[nodiscard]] zstd_frames::Extent measure(std::uint64_t start) {
    using Kind = zstd_frames::Extent::Kind;
    const std::uint64_t size = source_.size();
    std::array<unsigned char, 4> magic{};
    const auto magic_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(4, size - start));
    if (!read_exact(start, reinterpret_cast<char*>(magic.data()), magic_bytes)) {
      return {Kind::io_error, start, io_failure_};
    }
    const std::array<unsigned char, 4> expected{0x28, 0xB5, 0x2F, 0xFD};
    if (!std::equal(magic.begin(), magic.begin() + static_cast<std::ptrdiff_t>(magic_bytes), expected.begin())) {
      const std::uint32_t value = std::uint32_t{magic[0]} | (std::uint32_t{magic[1]} << 8U) |
                                  (std::uint32_t{magic[2]} << 16U) | (std::uint32_t{magic[3]} << 24U);
      const bool skippable = magic_bytes == 4 && (value & 0xFFFFFFF0U) == 0x184D2A50U;
      return {Kind::bad_magic, start,
              skippable ? "a skippable frame" + zstd_frames::at_byte(start) + " (DSH writes and accepts none)"
                        : "invalid frame magic" + zstd_frames::at_byte(start)};
    }
    if (magic_bytes < 4 || size - start == 4) {
      return {Kind::torn, size};
    }
    std::uint64_t at = start + 4;
    unsigned char descriptor = 0;
    if (!read_exact(at, reinterpret_cast<char*>(&descriptor), 1)) {
      return {Kind::io_error, at, io_failure_};
    }
    if ((descriptor & 0x18U) != 0) {
      return {Kind::reserved, at, "reserved frame-header bit set" + zstd_frames::at_byte(at)};
    }
    at += 1;
    const unsigned size_flag = descriptor >> 6U;
    const bool single_segment = (descriptor & 0x20U) != 0;
    const bool checksum = (descriptor & 0x04U) != 0;
    const unsigned dictionary_flag = descriptor & 0x03U;
    const std::uint64_t header_rest = (single_segment ? 0U : 1U) + (dictionary_flag == 3 ? 4U : dictionary_flag) +
                                      (size_flag == 0 ? (single_segment ? 1U : 0U) : (1U << size_flag));
    if (size - at < header_rest) {
      return {Kind::torn, size};
    }
    at += header_rest;
    for (;;) {
      if (size - at < 3) {
        return {Kind::torn, size};
      }
      std::array<unsigned char, 3> block{};
      if (!read_exact(at, reinterpret_cast<char*>(block.data()), 3)) {
        return {Kind::io_error, at, io_failure_};
      }
      const std::uint32_t header =
          std::uint32_t{block[0]} | (std::uint32_t{block[1]} << 8U) | (std::uint32_t{block[2]} << 16U);
      const bool last = (header & 1U) != 0;
      const std::uint32_t type = (header >> 1U) & 3U;
      if (type == 3) {
        return {Kind::reserved, at, "reserved block type" + zstd_frames::at_byte(at)};
      }
      at += 3;
      const std::uint64_t payload = type == 1 ? 1 : (header >> 3U);
      if (size - at < payload) {
        return {Kind::torn, size};
      }
      at += payload;
      if (last) {
        break;
      }
    }
    if (checksum) {
      if (size - at < 4) {
        return {Kind::torn, size};
      }
      at += 4;
    }
    return {Kind::complete, at};
  }

#if !DSH_SANDBOX_POLICY_HAS_ZSTD
  /// Without libzstd the walk ended when the reader was made.
  [[nodiscard]] bool advance() {
    done_ = true;
    return false;
  }
#else
  /// Decodes [begin, end) into `plain_`. Returns 0 when a whole frame was decoded (for a torn
  /// frame: when the available bytes decoded without error), else a libzstd error code; sets
  /// `too_large_` when the plaintext would exceed the limit.
  [[nodiscard]] std::size_t decode(std::uint64_t begin, std::uint64_t end, bool torn) {
    plain_.clear();
    too_large_ = false;
    io_failure_.clear();
    ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
    input_.resize(zstd_frames::read_chunk);
    std::uint64_t at = begin;
    ZSTD_inBuffer in{input_.data(), 0, 0};
    bool output_full = false;
    bool finished = false;
    for (;;) {
      if (in.pos == in.size && at < end) {
        const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(input_.size(), end - at));
        if (!read_exact(at, input_.data(), length)) {
          return static_cast<std::size_t>(-1);
        }
        in = ZSTD_inBuffer{input_.data(), length, 0};
        at += length;
      }
      if (in.pos == in.size && at == end && !output_full) {
        break;
      }
      const std::size_t used = plain_.size();
      if (used > max_frame_bytes_) {
        too_large_ = true;
        return static_cast<std::size_t>(-1);
      }
      const std::size_t room = std::min(ZSTD_DStreamOutSize(), max_frame_bytes_ - used + 1);
      plain_.resize(used + room);
      ZSTD_outBuffer out{plain_.data() + used, room, 0};
      const std::size_t result = ZSTD_decompressStream(dctx_, &out, &in);
      plain_.resize(used + out.pos);
      if (ZSTD_isError(result) != 0U) {
        return result;
      }
      output_full = out.pos == out.size;
      if (result == 0 && !output_full) {
        finished = true;
        break;
      }
    }
    if (plain_.size() > max_frame_bytes_) {
      too_large_ = true;
      return static_cast<std::size_t>(-1);
    }
    if (torn) {
      return 0;
    }
    // The headers said the frame ends at `end`: libzstd must agree exactly.
    if (!finished || in.pos != in.size || at != end) {
      return static_cast<std::size_t>(-ZSTD_error_corruption_detected);
    }
    return 0;
  }

  void split_records(std::size_t length) {
    frame_.records.clear();
    frame_.text = std::string_view(plain_.data(), length);
    std::size_t begin = 0;
    while (begin < length) {
      const std::size_t newline = plain_.find('\n', begin);
      frame_.records.emplace_back(plain_.data() + begin, newline - begin);
      begin = newline + 1;
    }
  }

  [[nodiscard]] bool advance() {
    const std::uint64_t start = position_;
    const std::uint64_t size = source_.size();
    if (start == size) {
      if (index_ == 0) {
        fail(ZstdFrameStatus::no_header, 0, zstd_frames::corrupt("the file is empty (no header frame)"));
      } else {
        done_ = true;
        outcome_.status = ZstdFrameStatus::complete;
        outcome_.offset = size;
      }
      return false;
    }
    using Kind = zstd_frames::Extent::Kind;
    const zstd_frames::Extent extent = measure(start);
    switch (extent.kind) {
    case Kind::io_error:
      fail(ZstdFrameStatus::io_error, start, extent.detail);
      return false;
    case Kind::bad_magic:
      fail(ZstdFrameStatus::bad_magic, start, zstd_frames::corrupt(extent.detail));
      return false;
    case Kind::reserved:
      fail(ZstdFrameStatus::malformed_frame, start,
           zstd_frames::corrupt(extent.detail + " (the frame starting" + zstd_frames::at_byte(start) + ")"));
      return false;
    case Kind::torn:
    case Kind::complete:
      break;
    }
    const bool torn = extent.kind == Kind::torn;
    if (torn && index_ == 0) {
      fail(ZstdFrameStatus::no_header, 0,
           zstd_frames::corrupt("the file ends inside its header frame (" + std::to_string(size) + " bytes)"));
      return false;
    }
    const std::size_t result = decode(start, extent.end, torn);
    if (!io_failure_.empty()) {
      fail(ZstdFrameStatus::io_error, start, io_failure_);
      return false;
    }
    if (too_large_) {
      fail(ZstdFrameStatus::frame_too_large, start,
           zstd_frames::corrupt("the frame starting" + zstd_frames::at_byte(start) + " decompresses to more than " +
                                std::to_string(max_frame_bytes_) + " bytes"));
      return false;
    }
    frame_.offset = start;
    frame_.end = extent.end;
    frame_.torn = torn;
    if (torn) {
      // What a crash left of the last batch is a prefix of a valid frame, and a prefix always
      // decodes. Bytes that do not are damage (a corrupted header can make a frame in the middle
      // look as if it ran past the end of the file), and repairing them as a tear would drop
      // every later frame: refused, where DSH would keep nothing of the frame and cut.
      if (ZSTD_isError(result) != 0U) {
        fail(ZstdFrameStatus::malformed_frame, start,
             zstd_frames::corrupt("the frame starting" + zstd_frames::at_byte(start) +
                                  " runs past the end of the file, and its bytes do not decode (" +
                                  ZSTD_getErrorName(result) + "): damaged, not torn"));
        return false;
      }
      const std::size_t complete = plain_.rfind('\n') + 1;
      split_records(complete);
      done_ = true;
      outcome_.status = ZstdFrameStatus::torn_tail;
      outcome_.offset = start;
      outcome_.recovered_records = frame_.records.size();
      outcome_.message = "the last Zstandard frame (starting" + zstd_frames::at_byte(start) + ") is incomplete; " +
                         std::to_string(frame_.records.size()) + " complete records recovered from it";
      ++index_;
      return true;
    }
    if (ZSTD_isError(result) != 0U) {
      const bool checksum = ZSTD_getErrorCode(result) == ZSTD_error_checksum_wrong;
      fail(checksum ? ZstdFrameStatus::checksum_mismatch : ZstdFrameStatus::malformed_frame, start,
           zstd_frames::corrupt(
               std::string(checksum ? "checksum mismatch in the frame starting" : "undecodable frame starting") +
               zstd_frames::at_byte(start) + " (" + ZSTD_getErrorName(result) + ")"));
      return false;
    }
    if (index_ == 0) {
      if (plain_.empty() || plain_.find('\n') != plain_.size() - 1) {
        fail(ZstdFrameStatus::bad_header_frame, start,
             zstd_frames::corrupt("the first frame (at byte 0) is not exactly one header line"));
        return false;
      }
    } else if (!plain_.empty() && plain_.back() != '\n') {
      fail(ZstdFrameStatus::torn_record, start,
           zstd_frames::corrupt("the complete frame starting" + zstd_frames::at_byte(start) + " ends inside a record"));
      return false;
    }
    split_records(plain_.size());
    position_ = extent.end;
    ++index_;
    return true;
  }

  ZSTD_DCtx* dctx_ = nullptr;
  std::uint64_t position_ = 0;
  std::size_t index_ = 0;
  bool too_large_ = false;
  std::string plain_;
  std::vector<char> input_;
#endif

  zstd_frames::Source source_;
  std::size_t max_frame_bytes_;
  bool done_ = false;
  std::string io_failure_;
  ZstdFrame frame_;
  ZstdFrameOutcome outcome_;
};

/// Encodes one checksummed Zstandard frame holding `lines`, each followed by a newline, as DSH
/// appends one durable batch (or the header alone). Returns the frame's bytes, or status
/// bad_batch when `lines` is empty or a line holds a newline, unavailable without libzstd.
[[nodiscard]] inline ZstdEncodedFrame encode_zstd_frame(std::span<const std::string_view> lines) {
  ZstdEncodedFrame encoded;
  if (lines.empty()) {
    encoded.status = ZstdFrameStatus::bad_batch;
    encoded.message = "a Zstandard frame holds at least one record; the batch is empty";
    return encoded;
  }
  std::string plain;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find('\n') != std::string_view::npos) {
      encoded.status = ZstdFrameStatus::bad_batch;
      encoded.message = "record " + std::to_string(i + 1) + " of the batch holds a newline; a record is one line";
      return encoded;
    }
    plain.append(lines[i]);
    plain.push_back('\n');
  }
#if DSH_SANDBOX_POLICY_HAS_ZSTD
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  if (cctx == nullptr) {
    encoded.status = ZstdFrameStatus::compression_failed;
    encoded.message = "libzstd could not allocate a compression context";
    return encoded;
  }
  encoded.bytes.resize(ZSTD_compressBound(plain.size()));
  std::size_t result = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  if (ZSTD_isError(result) == 0U) {
    result = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
  }
  if (ZSTD_isError(result) == 0U) {
    result = ZSTD_compress2(cctx, encoded.bytes.data(), encoded.bytes.size(), plain.data(), plain.size());
  }
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(result) != 0U) {
    encoded.status = ZstdFrameStatus::compression_failed;
    encoded.message = std::string("libzstd could not compress the batch: ") + ZSTD_getErrorName(result);
    encoded.bytes.clear();
    return encoded;
  }
  encoded.bytes.resize(result);
#else
  encoded.status = ZstdFrameStatus::unavailable;
  encoded.message = std::string(zstd_unavailable_message);
#endif
  return encoded;
}

} // namespace dsh::detail
