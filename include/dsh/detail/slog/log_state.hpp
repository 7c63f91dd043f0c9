/// @file
/// The shared state behind a `SessionLog` handle: the open file, its row index, the validated
/// tally, and the append and refresh protocol under the file lock.
#pragma once

#include <dsh/detail/posix.hpp>
#include <dsh/detail/slog/chunk_rows.hpp>
#include <dsh/detail/slog/log_format.hpp>
#include <dsh/detail/slog/log_io.hpp>
#include <dsh/detail/slog/row_index.hpp>
#include <dsh/detail/slog/zstd_frames.hpp>
#include <dsh/session_log_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh::detail::slog {

/// Encodes an optional mode in one byte (0: none) so it can be read without a lock.
[[nodiscard]] constexpr std::uint8_t encode_mode(std::optional<SandboxMode> mode) noexcept {
  return mode ? static_cast<std::uint8_t>(static_cast<std::uint8_t>(*mode) + 1) : std::uint8_t{0};
}
[[nodiscard]] constexpr std::optional<SandboxMode> decode_mode(std::uint8_t code) noexcept {
  return code == 0 ? std::nullopt : std::optional<SandboxMode>(static_cast<SandboxMode>(code - 1));
}

/// A test seam: when set, `SessionLog::create` calls it with the log's path right after
/// linking the new file at that name, before checking that the name still leads to the file
/// (so a test can play the process that swaps the name in between). Null in production.
inline void (*after_link_hook)(const std::filesystem::path&) = nullptr;

/// A test seam: when set, `SessionLog::create` calls it with the log's path once the new file is
/// written and synced, right before giving it its name (so a test can play the user who renames
/// another file over whatever name the new file has then). Null in production.
inline void (*before_link_hook)(const std::filesystem::path&) = nullptr;

/// Where one batch frame of a Zstandard log lies: in the file, and in the text of all batches
/// one after the other (where each of its rows begins; a row is followed by its newline).
struct FrameSpan {
  std::uint64_t offset = 0;     ///< File offset of the frame's magic.
  std::uint64_t end = 0;        ///< File offset just past the frame.
  std::uint64_t text_begin = 0; ///< Offset of the frame's first row in the text of all batches.
};

/// Returns true if the file starts with a Zstandard frame's magic (28 b5 2f fd).
[[nodiscard]] inline bool starts_with_zstd_magic(int fd, const std::filesystem::path& path, std::uint64_t size) {
  if (size < 4) {
    return false;
  }
  std::array<char, 4> magic{};
  read_exactly(fd, path, magic.data(), magic.size(), 0);
  std::uint32_t value = 0;
  for (std::size_t i = magic.size(); i > 0; --i) { // little-endian
    value = (value << 8U) | static_cast<unsigned char>(magic[i - 1]);
  }
  return value == zstd_frames::frame_magic;
}

/// The shared state of one open log. Writers (append, refresh) are serialized by
/// `write_mutex` and by the file lock; the row index is also read by `events()` under
/// `index_mutex`, which writers hold only to publish what they validated.
class LogState {
public:
  LogState(std::filesystem::path log_path, const SessionLogOptions& log_options)
      : path(std::move(log_path)), options(log_options) {}
  LogState(const LogState&) = delete;
  LogState& operator=(const LogState&) = delete;
  ~LogState() { dispose(header_json); }

  const std::filesystem::path path;
  const SessionLogOptions options;
  UniqueFd fd;
  SessionHeader header;
  nlohmann::json header_json;
  /// How the file is stored; set by `load` or `created` before the state is shared.
  DshLogEncoding encoding = DshLogEncoding::plain;

  /// Validates the whole file (its lock held), cuts a torn last line, and indexes the rows.
  void load() {
    const std::uint64_t size = regular_file_size(fd.get(), path);
    if (size == 0) {
      throw LogError(path, 0, "the file is empty; line 1 must be a session header");
    }
    if (starts_with_zstd_magic(fd.get(), path, size)) {
      encoding = DshLogEncoding::zstd;
      load_zstd(size);
      return;
    }
    Tally tally;
    RowIndex starts;
    const std::uint64_t end = for_each_row(fd.get(), path, 0, size, [&](std::string_view row, std::uint64_t offset) {
      if (++tally.lines == 1) {
        header = check_header(row, path, header_json);
      } else {
        check_row(row, tally.lines, tally, path);
        starts.push_back(offset);
      }
    });
    if (tally.lines == 0) {
      throw LogError(path, 1, "the session header has no final newline (a torn header is not repaired)");
    }
    publish(tally, std::move(starts), end, cut_torn_tail(end, size, tally.lines + 1));
  }

  /// Records the state of a log `create` just wrote: the header (a line, or a frame) of `size`
  /// bytes, no rows.
  void created(std::uint64_t size) {
    Tally tally;
    tally.lines = 1;
    publish(tally, {}, size, std::nullopt);
  }

  /// Returns the bytes that store `line` (newline included) in this log's encoding: the line
  /// itself, or one checksummed Zstandard frame holding it. Throws LogError, before anything
  /// is written, if the line cannot be stored.
  [[nodiscard]] std::string encode(std::string line) const {
    if (encoding == DshLogEncoding::plain) {
      return line;
    }
    if (line.size() > ZstdFrameReader::default_max_frame_bytes) {
      throw LogError(path, 0,
                     "cannot append an event line of " + std::to_string(line.size()) +
                         " bytes to a Zstandard log: a frame holds at most " +
                         std::to_string(ZstdFrameReader::default_max_frame_bytes) +
                         " bytes of text; nothing was written");
    }
    const std::string_view record(line.data(), line.size() - 1);
    ZstdEncodedFrame frame = encode_zstd_frame(std::span<const std::string_view>(&record, 1));
    if (frame.status != ZstdFrameStatus::complete) {
      throw LogError(path, 0, "cannot compress the line: " + frame.message + "; nothing was written");
    }
    return std::move(frame.bytes);
  }

  /// Validates and indexes rows other processes appended since this state last looked, and
  /// cuts a torn line a crashed writer left. Call with `write_mutex` and the file lock held.
  void catch_up() {
    const std::uint64_t size = regular_file_size(fd.get(), path);
    if (size < end_) {
      throw LogError(path, 0,
                     "the file shrank from " + std::to_string(end_) + " to " + std::to_string(size) +
                         " bytes since it was validated");
    }
    if (size == end_) {
      return;
    }
    if (encoding == DshLogEncoding::zstd) {
      ZstdFrameReader reader(fd.get(), ZstdBatchesFrom{end_});
      ZstdScan scan{tally_, {}, {}, text_end_, end_, {}, {}};
      scan_frames(reader, scan);
      std::optional<TailRepair> repair = repair_torn_frame(scan, size);
      publish(scan.tally, std::move(scan.starts), scan.end, repair, std::move(scan.frames), scan.text_end);
      return;
    }
    Tally tally = tally_;
    RowIndex starts;
    const std::uint64_t end = for_each_row(fd.get(), path, end_, size, [&](std::string_view row, std::uint64_t offset) {
      check_row(row, ++tally.lines, tally, path);
      starts.push_back(offset);
    });
    publish(tally, std::move(starts), end, cut_torn_tail(end, size, tally.lines + 1));
  }

  /// Appends one event line durably and returns its seq. See `SessionLog::append`. Every
  /// allocation happens before the write, so once the line is on disk nothing can fail.
  /// `envelope` is null for none.
  std::uint64_t append(std::string_view type, nlohmann::json data, const nlohmann::json* envelope) {
    // Taken first, before anything allocates, so that however append ends (memory exhausted
    // included) the caller's tree is destroyed without allocating.
    DisposedJson taken(std::move(data));
    DisposedJson event{nlohmann::json(nlohmann::json::value_t::object)};
    // The member first, as its own statement: in `a["data"] = std::move(tree)` the right side is
    // evaluated first (C++17), into operator='s by-value parameter, which a failed insertion
    // would then destroy with the allocating destructor.
    nlohmann::json& slot = event.value["data"];
    slot = std::move(taken.value);
    static const nlohmann::json::object_t no_members; // an empty map allocates nothing
    if (envelope != nullptr) {
      detail::check_envelope(*envelope);
    }
    if (detail::is_packed_chunk_type(type)) {
      throw LogError(path, 0,
                     "cannot append an event of type " + json_string_literal(type) +
                         ": an event type needs a \"/\" (a type without one marks a packed chunk row)");
    }
    event.value["type"] = type;
    const std::optional<SandboxMode> switched = detail::switched_mode(event.value); // throws if forged
    // A row nests data and envelope values one level below itself, and open refuses rows
    // nested deeper than MAX_NESTING: such an event could be written but never read back.
    const auto& members = envelope != nullptr ? envelope->get_ref<const nlohmann::json::object_t&>() : no_members;
    if (!nests_within(event.value["data"], MAX_NESTING - 1) ||
        !std::all_of(members.begin(), members.end(),
                     [](const auto& member) { return nests_within(member.second, MAX_NESTING - 1); })) {
      throw LogError(path, 0, "cannot append an event nested deeper than 512 levels (no log may hold one)");
    }
    const std::string type_json = dump_or_throw(event.value["type"], path, "the event type");
    const std::string data_json = dump_or_throw(event.value["data"], path, "the event data");
    std::string envelope_json;
    for (const auto& [key, value] : members) {
      // Refused, like every stored string, when it is not UTF-8 (json_string_literal would repair it).
      envelope_json.append(",").append(dump_or_throw(nlohmann::json(key), path, "the event envelope")).append(":");
      envelope_json.append(dump_or_throw(value, path, "the event envelope"));
    }
    const std::string time = std::to_string(detail::now_epoch_ms());

    const std::lock_guard write_lock(write_mutex_);
    refuse_if_unusable();
    const ExclusiveFileLock file_lock(fd.get(), path, options.lock_timeout);
    check_still_named();
    catch_up();
    const std::uint64_t seq = tally_.next_seq;
    const std::string seq_text = std::to_string(seq);
    constexpr std::string_view parts[] = {R"({"type":)", R"(,"seq":)", R"(,"time":)", R"(,"data":)", "}\n"};
    std::uint64_t size = type_json.size() + seq_text.size() + time.size() + data_json.size() + envelope_json.size();
    for (const std::string_view part : parts) {
      size += part.size();
    }
    check_line_size(size, path);
    std::string line;
    line.reserve(static_cast<std::size_t>(size));
    line.append(parts[0]).append(type_json).append(parts[1]).append(seq_text).append(parts[2]).append(time);
    line.append(parts[3]).append(data_json).append(envelope_json).append(parts[4]);
    const std::size_t line_size = line.size();
    const std::string stored = encode(std::move(line));
    check_line_size(stored.size(), path);
    if (!switched) {
      // An ordinary event must leave the reserve whole: it gets its room before it is written.
      if (const int error = preallocate(stored.size() + SESSION_LOG_RESERVE_BYTES); error != 0 && error != EOPNOTSUPP) {
        throw LogError(path, 0,
                       with_errno("cannot append: no room could be preallocated for the event and the " +
                                      std::to_string(SESSION_LOG_RESERVE_BYTES) +
                                      " bytes kept past it for a sandbox/mode switch",
                                  error) +
                           "; nothing was written",
                       std::error_code(error, std::generic_category()));
      }
    }
    reserve_row();
    write_line(stored);
    publish_appended(stored.size(), line_size, switched);
    if (switched) {
      renew_reserve(); // it may have written into the reserve
    } else {
      note_reserve();
    }
    return seq;
  }

  /// Catches up with other processes' appends. See `SessionLog::refresh`.
  void refresh() {
    const std::lock_guard write_lock(write_mutex_);
    refuse_if_unusable();
    const ExclusiveFileLock file_lock(fd.get(), path, options.lock_timeout);
    check_still_named();
    catch_up();
    renew_reserve();
  }

  /// Preallocates `SESSION_LOG_RESERVE_BYTES` past the end of the file, without changing its
  /// size, as far as the filesystem allows; `reserved()` says what this log holds then. Never
  /// throws: the reserve is a promise about later writes, not a condition of this one.
  void renew_reserve() noexcept { static_cast<void>(preallocate(SESSION_LOG_RESERVE_BYTES)); }

  /// Returns how many bytes past the end of the file this log last preallocated and still counts
  /// on (0 when the filesystem cannot preallocate, or the last renewal found no room).
  [[nodiscard]] std::uint64_t reserved() const noexcept { return reserved_.load(std::memory_order_acquire); }

  /// Parses event row `index` from the file.
  [[nodiscard]] nlohmann::json read_event(std::size_t index) const {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    FrameSpan frame;
    {
      const std::lock_guard lock(index_mutex_);
      begin = starts_.at(index);
      end = index + 1 < starts_.size() ? starts_[index + 1] : (encoding == DshLogEncoding::zstd ? text_end_ : end_);
      if (encoding == DshLogEncoding::zstd) {
        const auto after =
            std::upper_bound(frames_.begin(), frames_.end(), begin,
                             [](std::uint64_t at, const FrameSpan& span) { return at < span.text_begin; });
        frame = *std::prev(after);
      }
    }
    const std::size_t line = index + 2;
    std::string row;
    if (encoding == DshLogEncoding::zstd) {
      row = row_of_frame(frame, begin - frame.text_begin, static_cast<std::size_t>(end - begin - 1), line);
    } else {
      row.assign(static_cast<std::size_t>(end - begin - 1), '\0');
      read_exactly(fd.get(), path, row.data(), row.size(), begin);
    }
    try {
      replace_lone_surrogates(row); // read as U+FFFD: nlohmann_json refuses them
      return parse_tree(row);
    } catch (const nlohmann::json::exception& error) {
      throw LogError(path, line, std::string("changed on disk after it was validated: ") + error.what());
    }
  }

  [[nodiscard]] std::size_t row_count() const {
    const std::lock_guard lock(index_mutex_);
    return starts_.size();
  }
  [[nodiscard]] std::uint64_t next_seq() const {
    const std::lock_guard lock(index_mutex_);
    return tally_.next_seq;
  }
  [[nodiscard]] std::optional<TailRepair> tail_repair() const {
    const std::lock_guard lock(index_mutex_);
    return repair_;
  }
  [[nodiscard]] std::optional<SandboxMode> mode() const noexcept {
    return decode_mode(mode_.load(std::memory_order_acquire));
  }

  /// Writes `line` with one write(2) at the end of the file and syncs it; on any failure
  /// cuts the file back to where it was and throws.
  void write_line(const std::string& line) {
    const ssize_t written = retry_on_eintr([&] { return ::write(fd.get(), line.data(), line.size()); });
    if (written < 0 || static_cast<std::size_t>(written) != line.size()) {
      const int error = written < 0 ? errno : 0;
      roll_back(written < 0 ? with_errno("cannot write", error)
                            : "cannot write: only " + std::to_string(written) + " of " + std::to_string(line.size()) +
                                  " bytes were written",
                error);
    }
    if (::fdatasync(fd.get()) != 0) {
      const int error = errno;
      roll_back(with_errno("cannot sync", error), error);
    }
  }

private:
  /// Throws LogError if an earlier failure left this log unable to append.
  void refuse_if_unusable() const {
    if (broken_) {
      throw LogError(path, 0, "a failed append could not be rolled back; reopen the log");
    }
    if (lost_ != nullptr) {
      throw lost_error();
    }
  }

  [[nodiscard]] LogError lost_error() const {
    return {path, 0,
            std::string("the file this log opened is no longer the file at its name: ") + lost_ +
                "; nothing was written or read, and this SessionLog refuses to append until the log is "
                "opened again"};
  }

  /// Throws LogError, and refuses every later append, if the open file is no longer the one
  /// at the log's name (unlinked, replaced, or its directory removed): an event written to it
  /// would be lost to every reader of the name. Call with the file lock held.
  void check_still_named() {
    struct stat opened {};
    if (::fstat(fd.get(), &opened) != 0) {
      throw LogError(path, 0, with_errno("cannot stat", errno));
    }
    if (const char* lost = lost_file(opened, path, options.follow_symlink)) {
      lost_ = lost;
      throw lost_error();
    }
  }

  /// What a walk over Zstandard frames has validated: the tally, the rows and frames found, the
  /// text and file offsets they reach, and a torn last frame's offset and complete records.
  struct ZstdScan {
    Tally tally;
    RowIndex starts;
    std::vector<FrameSpan> frames;
    std::uint64_t text_end = 0;
    std::uint64_t end = 0;
    std::optional<std::uint64_t> torn_offset;
    std::vector<std::string> recovered;
  };

  /// Validates the whole Zstandard log of `size` bytes, repairs a torn last frame, and
  /// indexes the rows (see `load`).
  void load_zstd(std::uint64_t size) {
    if constexpr (!zstd_available) {
      throw LogError(path, 0,
                     "cannot read a Zstandard-compressed session log: " + std::string(zstd_unavailable_message));
    }
    ZstdFrameReader reader(fd.get());
    ZstdScan scan;
    scan_frames(reader, scan);
    std::optional<TailRepair> repair = repair_torn_frame(scan, size);
    publish(scan.tally, std::move(scan.starts), scan.end, repair, std::move(scan.frames), scan.text_end);
  }

  /// Walks the frames `reader` yields, validating each row (the header frame first when the
  /// walk starts at the beginning). Throws LogError for a bad row, and for corruption naming the
  /// frame's byte offset; the file is not changed.
  void scan_frames(ZstdFrameReader& reader, ZstdScan& scan) {
    while (reader.next()) {
      const ZstdFrame& frame = reader.frame();
      if (scan.tally.lines == 0) {
        header = check_header(frame.records.front(), path, header_json);
        scan.tally.lines = 1;
        scan.end = frame.end;
        continue;
      }
      if (frame.torn) {
        scan.torn_offset = frame.offset;
        for (const std::string_view record : frame.records) {
          check_row(record, ++scan.tally.lines, scan.tally, path);
          scan.recovered.emplace_back(record);
        }
        continue;
      }
      scan.frames.push_back(FrameSpan{frame.offset, frame.end, scan.text_end});
      for (const std::string_view record : frame.records) {
        check_row(record, ++scan.tally.lines, scan.tally, path);
        scan.starts.push_back(scan.text_end);
        scan.text_end += record.size() + 1;
      }
      scan.end = frame.end;
    }
    const ZstdFrameOutcome& outcome = reader.outcome();
    if (outcome.status != ZstdFrameStatus::complete && outcome.status != ZstdFrameStatus::torn_tail) {
      throw LogError(path, 0, outcome.message);
    }
  }

  /// Repairs the torn last frame a scan found, as DSH does: cuts the file where the frame
  /// begins and syncs, then writes its complete rows back as one new checksummed frame and
  /// syncs again. Returns the repair, or nullopt when the last frame was complete.
  std::optional<TailRepair> repair_torn_frame(ZstdScan& scan, std::uint64_t size) {
    if (!scan.torn_offset) {
      return std::nullopt;
    }
    const std::uint64_t cut = *scan.torn_offset;
    std::string frame;
    if (!scan.recovered.empty()) {
      std::vector<std::string_view> records(scan.recovered.begin(), scan.recovered.end());
      ZstdEncodedFrame encoded = encode_zstd_frame(records);
      if (encoded.status != ZstdFrameStatus::complete) {
        throw LogError(path, 0, "cannot repair the torn last frame: " + encoded.message + "; the file is unchanged");
      }
      frame = std::move(encoded.bytes);
      scan.frames.reserve(scan.frames.size() + 1);
    }
    const std::size_t first_lost = scan.tally.lines + 1;
    if (::ftruncate(fd.get(), static_cast<off_t>(cut)) != 0 || ::fdatasync(fd.get()) != 0) {
      throw LogError(path, 0, with_errno("cannot cut the torn last frame", errno));
    }
    released_past(cut);
    if (!frame.empty()) {
      const ssize_t written = retry_on_eintr([&] { return ::write(fd.get(), frame.data(), frame.size()); });
      if (written < 0 || static_cast<std::size_t>(written) != frame.size() || ::fdatasync(fd.get()) != 0) {
        const int error = errno;
        static_cast<void>(::ftruncate(fd.get(), static_cast<off_t>(cut)));
        throw LogError(path, 0,
                       with_errno("the torn last frame was cut, but its " + std::to_string(scan.recovered.size()) +
                                      " complete rows could not be written back",
                                  error));
      }
      scan.frames.push_back(FrameSpan{cut, cut + frame.size(), scan.text_end});
      for (const std::string& record : scan.recovered) {
        scan.starts.push_back(scan.text_end);
        scan.text_end += record.size() + 1;
      }
    }
    scan.end = cut + frame.size();
    return TailRepair{first_lost, cut, size - cut, scan.recovered.size()};
  }

  /// Returns `length` bytes at `offset` of the text of the batch frame `frame` (decoded and
  /// checked again; the last frame read is kept). Throws LogError for row `line` when the frame
  /// no longer decodes as it did when it was validated.
  [[nodiscard]] std::string row_of_frame(const FrameSpan& frame, std::uint64_t offset, std::size_t length,
                                         std::size_t line) const {
    const std::lock_guard lock(cache_mutex_);
    if (!cached_frame_ || cached_frame_->offset != frame.offset) {
      cached_frame_.reset();
      ZstdFrameReader reader(fd.get(), ZstdBatchesFrom{frame.offset});
      if (!reader.next() || reader.frame().torn || reader.frame().end != frame.end) {
        throw LogError(path, line,
                       "changed on disk after it was validated: its Zstandard frame (at byte " +
                           std::to_string(frame.offset) + ") no longer decodes as it did");
      }
      cached_text_.assign(reader.frame().text);
      cached_frame_ = frame;
    }
    if (offset + length >= cached_text_.size()) {
      throw LogError(path, line, "changed on disk after it was validated");
    }
    return cached_text_.substr(static_cast<std::size_t>(offset), length);
  }

  /// Cuts bytes [end, size) (a line without its final newline) and syncs; returns the repair.
  std::optional<TailRepair> cut_torn_tail(std::uint64_t end, std::uint64_t size, std::size_t line) {
    if (end == size) {
      return std::nullopt;
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(end)) != 0 || ::fdatasync(fd.get()) != 0) {
      throw LogError(path, line, with_errno("cannot cut the torn last line", errno));
    }
    released_past(end);
    return TailRepair{line, end, size - end};
  }

  /// Makes validated rows visible to readers.
  void publish(const Tally& tally, RowIndex starts, std::uint64_t end, std::optional<TailRepair> repair,
               std::vector<FrameSpan> frames = {}, std::uint64_t text_end = 0) {
    const std::lock_guard lock(index_mutex_);
    if (starts_.empty()) {
      starts_ = std::move(starts); // the whole index of a load: no copy
    } else {
      starts_.append(starts);
    }
    if (frames_.empty()) {
      frames_ = std::move(frames);
    } else {
      frames_.insert(frames_.end(), frames.begin(), frames.end());
    }
    text_end_ = text_end;
    end_ = end;
    tally_ = tally;
    if (repair) {
      repair_ = repair;
    }
    mode_.store(encode_mode(tally.mode), std::memory_order_release);
  }

  /// Makes room in the index for one more row, so that publishing an appended row after its
  /// write allocates nothing.
  void reserve_row() {
    const std::lock_guard lock(index_mutex_);
    starts_.reserve_for(encoding == DshLogEncoding::zstd ? text_end_ : end_);
    if (encoding == DshLogEncoding::zstd && frames_.size() == frames_.capacity()) {
      frames_.reserve(std::max<std::size_t>(16, 2 * frames_.capacity()));
    }
  }

  /// Makes the row just written (`size` bytes at the old end: a line of `line_size` bytes, or
  /// a frame holding it) visible; allocates nothing (`reserve_row` made room), so it cannot
  /// fail once the row is on disk.
  void publish_appended(std::size_t size, std::size_t line_size, std::optional<SandboxMode> switched) {
    const std::lock_guard lock(index_mutex_);
    if (encoding == DshLogEncoding::zstd) {
      starts_.push_back(text_end_);
      frames_.push_back(FrameSpan{end_, end_ + size, text_end_});
      text_end_ += line_size;
    } else {
      starts_.push_back(end_);
    }
    end_ += size;
    ++tally_.lines;
    ++tally_.next_seq;
    if (switched) {
      tally_.mode = switched;
    }
    mode_.store(encode_mode(tally_.mode), std::memory_order_release);
  }

  /// Cuts the file back to the end of the last validated row after a failed write, syncs it, and
  /// throws LogError with `failure` (carrying `error`, the errno behind it, when not 0).
  [[noreturn]] void roll_back(const std::string& failure, int error) {
    const std::error_code code = error != 0 ? std::error_code(error, std::generic_category()) : std::error_code();
    if (::ftruncate(fd.get(), static_cast<off_t>(end_)) != 0) {
      broken_ = true;
      throw LogError(path, 0, failure + "; " + with_errno("rolling back failed too", errno), code);
    }
    released_past(end_);
    static_cast<void>(::fdatasync(fd.get()));
    renew_reserve();
    throw LogError(path, 0, failure + "; the file was rolled back to " + std::to_string(end_) + " bytes", code);
  }

  /// Preallocates `length` bytes from the end of the file (FALLOC_FL_KEEP_SIZE: the size stays);
  /// returns 0, or the errno of the failure (EOPNOTSUPP for a filesystem that cannot, which is
  /// then not asked again).
  int preallocate(std::uint64_t length) noexcept {
    if (!can_preallocate_) {
      return EOPNOTSUPP;
    }
    const std::uint64_t from = end_;
    const int result = retry_on_eintr([&]() noexcept {
      return ::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from), static_cast<off_t>(length));
    });
    // ENOSYS: a filesystem (or FUSE server) that does not implement it.
    const int error = result == 0 ? 0 : (errno == ENOSYS ? EOPNOTSUPP : errno);
    if (result == 0) {
      reserved_end_ = from + length;
    } else if (error == EOPNOTSUPP) {
      can_preallocate_ = false;
      reserved_end_ = 0;
    }
    note_reserve();
    return error;
  }

  /// Forgets the preallocation past `size`, which cutting the file to `size` released.
  void released_past(std::uint64_t size) noexcept { reserved_end_ = std::min(reserved_end_, size); }

  /// Publishes how much of the preallocation lies past the end of the file.
  void note_reserve() noexcept {
    reserved_.store(reserved_end_ > end_ ? reserved_end_ - end_ : 0, std::memory_order_release);
  }

  std::mutex write_mutex_;
  bool broken_ = false;        // guarded by write_mutex_
  const char* lost_ = nullptr; // what became of the file, once it was lost; guarded by write_mutex_
  // The reserve past the end of the file (SESSION_LOG_RESERVE_BYTES): where the range this log last
  // preallocated ends, and whether the filesystem can preallocate at all. Guarded by write_mutex_
  // (load and create run before the state is shared); reserved_ publishes the bytes past end_.
  std::uint64_t reserved_end_ = 0;
  bool can_preallocate_ = true;
  std::atomic<std::uint64_t> reserved_{0};

  mutable std::mutex index_mutex_;
  // Where each event row begins: a file offset in a plain log, an offset in the text of all
  // batches in a Zstandard log. Guarded by index_mutex_, like the members up to mode_.
  RowIndex starts_;
  std::uint64_t end_ = 0;            // end of the last validated line or frame in the file
  std::vector<FrameSpan> frames_;    // (Zstandard) the batch frames, in file order
  std::uint64_t text_end_ = 0;       // (Zstandard) the end of the text of all batches
  Tally tally_;                      // guarded by index_mutex_ (writers read it under write_mutex_)
  std::optional<TailRepair> repair_; // guarded by index_mutex_
  std::atomic<std::uint8_t> mode_{0};

  mutable std::mutex cache_mutex_;
  mutable std::optional<FrameSpan> cached_frame_; // the last batch frame read_event decoded
  mutable std::string cached_text_;               // its text; both guarded by cache_mutex_
};

} // namespace dsh::detail::slog
