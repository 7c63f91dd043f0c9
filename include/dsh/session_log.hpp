/// @file
/// A durable, file-backed session in DSH's layouts, plain JSONL or Zstandard frames of JSONL
/// (docs/contract.md#the-session-log).
///
/// `dsh::SessionLog` satisfies `dsh::AppendableSession` and `dsh::HasSandboxModeOverride`, so
/// `set_sandbox_mode`, `effective_mode`, `PolicyOwner::resolve` and `PolicyOwner::context` work
/// on it unchanged. Opening validates every line without keeping a parsed tree of the events:
/// the log keeps where each row begins and parses a row only when `events()` reaches it.
#pragma once

#include <dsh/detail/path_trust.hpp>
#include <dsh/detail/slog/log_state.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/session_log_types.hpp>
#include <dsh/unique_fd.hpp>

#include <cerrno>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh {

/// A session stored in a DSH log file: line 1 the header, then one JSON row per line.
///
/// Thread-safe: any number of threads may call any member at once. Several processes may
/// append to one log when each opens its own `SessionLog`: every append takes an exclusive
/// `flock` on the file, first validates and indexes whatever others appended, then writes, so
/// `seq` stays contiguous and lines never interleave. Do not share one `SessionLog` across
/// `fork()`. Movable, not copyable; a moved-from log may only be destroyed or assigned to.
class SessionLog {
public:
  /// Random-access iterator over the event rows; each dereference reads and parses one row.
  class EventIterator {
  public:
    using iterator_concept = std::random_access_iterator_tag;
    using iterator_category = std::input_iterator_tag; ///< Dereferencing yields a value.
    using value_type = nlohmann::json;
    using reference = nlohmann::json;
    using difference_type = std::ptrdiff_t;

    EventIterator() noexcept = default;

    /// Returns the row parsed from the file; throws LogError if it can no longer be read.
    [[nodiscard]] nlohmann::json operator*() const { return state_->read_event(index_); }
    /// Returns `*(*this + offset)`.
    [[nodiscard]] nlohmann::json operator[](difference_type offset) const { return *(*this + offset); }

    /// Moves to the next row.
    EventIterator& operator++() noexcept {
      ++index_;
      return *this;
    }
    /// Moves to the next row; returns the previous position.
    EventIterator operator++(int) noexcept {
      EventIterator before = *this;
      ++index_;
      return before;
    }
    /// Moves to the previous row.
    EventIterator& operator--() noexcept {
      --index_;
      return *this;
    }
    /// Moves to the previous row; returns the previous position.
    EventIterator operator--(int) noexcept {
      EventIterator before = *this;
      --index_;
      return before;
    }
    /// Moves `offset` rows.
    EventIterator& operator+=(difference_type offset) noexcept {
      index_ = static_cast<std::size_t>(static_cast<difference_type>(index_) + offset);
      return *this;
    }
    /// Moves `-offset` rows.
    EventIterator& operator-=(difference_type offset) noexcept { return *this += -offset; }
    /// Returns `it` moved `offset` rows.
    [[nodiscard]] friend EventIterator operator+(EventIterator it, difference_type offset) noexcept {
      return it += offset;
    }
    /// Returns `it` moved `offset` rows.
    [[nodiscard]] friend EventIterator operator+(difference_type offset, EventIterator it) noexcept {
      return it += offset;
    }
    /// Returns `it` moved `-offset` rows.
    [[nodiscard]] friend EventIterator operator-(EventIterator it, difference_type offset) noexcept {
      return it -= offset;
    }
    /// Returns the number of rows from `b` to `a`.
    [[nodiscard]] friend difference_type operator-(const EventIterator& a, const EventIterator& b) noexcept {
      return static_cast<difference_type>(a.index_) - static_cast<difference_type>(b.index_);
    }
    /// Iterators of one view compare by position.
    [[nodiscard]] friend bool operator==(const EventIterator& a, const EventIterator& b) noexcept {
      return a.index_ == b.index_;
    }
    /// Iterators of one view order by position.
    [[nodiscard]] friend std::strong_ordering operator<=>(const EventIterator& a, const EventIterator& b) noexcept {
      return a.index_ <=> b.index_;
    }

  private:
    friend class SessionLog;
    EventIterator(const detail::slog::LogState* state, std::size_t index) noexcept : state_(state), index_(index) {}
    const detail::slog::LogState* state_ = nullptr;
    std::size_t index_ = 0;
  };

  /// The event rows (every line after the header, packed chunk rows as they are) present
  /// when `events()` was called, oldest first. A sized random-access view that parses a row
  /// each time it is dereferenced; valid while its `SessionLog` lives.
  class EventView : public std::ranges::view_base {
  public:
    EventView() noexcept = default;
    /// Returns an iterator to the first row.
    [[nodiscard]] EventIterator begin() const noexcept { return {state_, 0}; }
    /// Returns the past-the-end iterator.
    [[nodiscard]] EventIterator end() const noexcept { return {state_, count_}; }
    /// Returns the number of rows.
    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    /// Returns true if there is no row.
    [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
    /// Returns row `index` parsed (`index < size()`); throws LogError if it cannot be read.
    [[nodiscard]] nlohmann::json operator[](std::size_t index) const { return state_->read_event(index); }

  private:
    friend class SessionLog;
    EventView(const detail::slog::LogState* state, std::size_t count) noexcept : state_(state), count_(count) {}
    const detail::slog::LogState* state_ = nullptr;
    std::size_t count_ = 0;
  };

  /// Creates a new log at `path` holding only the header line
  /// `{"type":"session","version":0,"id":…,"createdAt":…,"cwd":…,"delegationDepth":0}`
  /// (`cwd` only when the header has one), stored as `options.encoding` says (plain, or one
  /// checksummed Zstandard frame); `options.lock_timeout` bounds the lock waits of the returned
  /// log, and `options.allow_shared_directories` applies as in `open` (the other options are
  /// about opening an existing file and do not apply).
  ///
  /// The file appears whole or not at all, and is the file this call wrote: it is made unnamed
  /// in the directory (O_TMPFILE), written, given `SESSION_LOG_RESERVE_BYTES` of preallocated
  /// room past its end (as far as the filesystem allows), synced, then linked to `path` from its
  /// descriptor (linkat with AT_EMPTY_PATH, or through /proc/self/fd), checked to be the file at
  /// that name (same device and inode), and the directory is synced. Where the filesystem cannot
  /// make unnamed files, it is written under a staging name beside `path` and hard-linked, which
  /// is safe only because no other user may change the directory: in a directory that check
  /// refused, create then throws even with `allow_shared_directories`.
  ///
  /// Throws LogError if a directory that resolves `path` can be changed by another user (see
  /// `SessionLogOptions::allow_shared_directories`), if `path` exists (nothing is overwritten), if
  /// the directory cannot be opened or written, or if `header` holds invalid UTF-8; nothing was
  /// created then. When it throws after the link (another process replaced the name in between,
  /// or the directory sync failed), it first removes its own link: its message ends with "nothing
  /// was created", or, if even that failed, says that the log exists and is valid. Throws
  /// ConfigError for a negative lock timeout.
  [[nodiscard]] static SessionLog create(const std::filesystem::path& path, const SessionHeader& header,
                                         const SessionLogOptions& options = {}) {
    using namespace detail::slog;
    check_options(options);
    std::string line = R"({"type":"session","version":0,"id":)" + dump_or_throw(header.id, path, "the session id");
    line += R"(,"createdAt":)" + std::to_string(header.created_at);
    if (header.cwd) {
      line += R"(,"cwd":)" + dump_or_throw(*header.cwd, path, "the session cwd");
    }
    line += ",\"delegationDepth\":0}\n";

    auto state = std::make_unique<LogState>(path, options);
    state->header = header;
    state->header_json = parse_row(std::string_view(line).substr(0, line.size() - 1), 1, path);
    const std::string name = path.filename().native();
    if (name.empty() || name == "." || name == "..") {
      throw LogError(path, 0, "cannot create: the path does not end in a file name");
    }
    state->encoding = options.encoding;
    const std::string stored = state->encode(std::move(line));
    const std::filesystem::path parent = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
    // Everything from here on goes through this descriptor, so it concerns the directory the
    // file is made in even if that directory is renamed meanwhile.
    const UniqueFd directory = open_file(parent, O_RDONLY | O_DIRECTORY, 0, path);
    // After the open, so that a missing directory is reported as such.
    const std::string untrusted = detail::untrusted_directory(path);
    if (!untrusted.empty() && !options.allow_shared_directories) {
      throw LogError(path, 0, untrusted + "; refused unless SessionLogOptions::allow_shared_directories is set");
    }
    NewFile file = make_new_file(directory.get(), name, untrusted, path);
    state->fd = UniqueFd(file.fd.release());
    try {
      state->write_line(stored);
      state->created(stored.size());
      state->renew_reserve();
      if (::fsync(state->fd.get()) != 0) {
        const int error = errno;
        throw LogError(path, 0, with_errno("cannot sync the session header", error),
                       std::error_code(error, std::generic_category()));
      }
      if (before_link_hook != nullptr) {
        before_link_hook(path);
      }
      link_new_file(directory.get(), state->fd.get(), file.staging, name, path);
    } catch (...) {
      if (!file.staging.empty()) {
        ::unlinkat(directory.get(), file.staging.c_str(), 0);
      }
      throw; // an unnamed file vanishes with its descriptor
    }
    // From here on nothing allocates until a failure has been dealt with.
    if (!file.staging.empty()) {
      ::unlinkat(directory.get(), file.staging.c_str(), 0);
    }
    if (after_link_hook != nullptr) {
      after_link_hook(path);
    }
    struct stat opened {};
    struct stat named {};
    const char* failure = nullptr;
    int error = 0;
    if (::fstat(state->fd.get(), &opened) != 0) {
      error = errno;
      failure = "cannot stat the new file";
    } else if (!entry_is(directory.get(), name.c_str(), opened) || ::lstat(path.c_str(), &named) != 0 ||
               !S_ISREG(named.st_mode) || named.st_dev != opened.st_dev || named.st_ino != opened.st_ino) {
      failure = "cannot create: once linked, the name did not lead to the new file (another process replaced or "
                "moved it)";
    } else if (::fsync(directory.get()) != 0) {
      error = errno;
      failure = "cannot sync the directory";
    }
    if (failure != nullptr) {
      // Removes only this call's own link, and before building the message, which allocates.
      const bool removed =
          !entry_is(directory.get(), name.c_str(), opened) || ::unlinkat(directory.get(), name.c_str(), 0) == 0;
      std::string what = error != 0 ? with_errno(failure, error) : std::string(failure);
      what += removed ? "; nothing was created" : "; the log exists at this name and is valid";
      throw LogError(path, 0, what, error != 0 ? std::error_code(error, std::generic_category()) : std::error_code());
    }
    return SessionLog(std::move(state));
  }

  /// Opens an existing log for reading and appending, validating every line: line 1 a
  /// header with "type" "session", "version" 0, a string "id", an integer "createdAt" and an
  /// optional string "cwd"; every further line a JSON object of well-formed UTF-8 with a
  /// string "type"; rows numbered without gaps from 0 ("seq" of an event, or "seq0" of a
  /// packed chunk row, whose "type" has no "/", covering `data.dt.size() + 1` seqs); every
  /// `sandbox/mode` event passing `validate_event`. The file's first bytes decide its encoding:
  /// a Zstandard frame's magic makes it a compressed log (docs/session-log.md#zstandard-session-logs),
  /// whose decompressed lines follow the same rules and whose frame damage throws LogError
  /// naming the frame's byte offset. A last line without its final newline (a torn append), or
  /// an incomplete last frame, is cut off (the frame's complete rows written back as one new
  /// frame), the file synced, and the repair reported by `tail_repair()`; that is the only change
  /// open ever makes to the file's bytes. Any other damage throws LogError naming the
  /// line and what is wrong, and leaves the file byte-for-byte unchanged. Memory use is one
  /// offset per row plus a read buffer that grows only to hold the longest line.
  ///
  /// Before reading, and unless `options` opts in, throws LogError if the name is a symbolic
  /// link, if a directory that resolves `path` can be changed by another user (see
  /// `SessionLogOptions::allow_shared_directories`), if the file's owner is not the effective
  /// user, or if its group or other users may write it: whoever can rewrite or replace a log can
  /// rewrite the mode it resumes with. Once validated, the log preallocates
  /// `SESSION_LOG_RESERVE_BYTES` past its end (see `reserved_bytes`). Throws
  /// LogError if the file lock is not acquired within `options.lock_timeout`, and
  /// ConfigError for a negative timeout. Out of memory throws std::bad_alloc, with the file
  /// unchanged.
  [[nodiscard]] static SessionLog open(const std::filesystem::path& path, const SessionLogOptions& options = {}) {
    using namespace detail::slog;
    check_options(options);
    auto state = std::make_unique<LogState>(path, options);
    state->fd = open_file(path, O_RDWR | O_APPEND | (options.follow_symlink ? 0 : O_NOFOLLOW), 0, path);
    // After the open, so that a link at the name is refused as a link unless it is followed.
    check_directories(path, options);
    struct stat status {};
    if (::fstat(state->fd.get(), &status) != 0) {
      throw LogError(path, 0, with_errno("cannot stat", errno));
    }
    if (S_ISREG(status.st_mode)) { // anything else, load refuses as not a regular file
      check_trust(status, options, path);
    }
    const ExclusiveFileLock file_lock(state->fd.get(), path, options.lock_timeout);
    state->load();
    state->renew_reserve();
    return SessionLog(std::move(state));
  }

  /// Returns the header's id, cwd and createdAt.
  [[nodiscard]] const SessionHeader& header() const noexcept { return state_->header; }
  /// Returns the whole header line as JSON, with the fields this library does not interpret
  /// (`delegationDepth`, `parentSession`, `seedLength`, ...) as they are in the file.
  [[nodiscard]] const nlohmann::json& header_json() const noexcept { return state_->header_json; }
  /// Returns the log's path as it was given to `create` or `open`.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return state_->path; }
  /// Returns how the file is stored: plain JSON lines, or Zstandard frames.
  [[nodiscard]] DshLogEncoding encoding() const noexcept { return state_->encoding; }

  /// Returns the event rows this log has validated so far, parsed lazily (see EventView).
  [[nodiscard]] EventView events() const { return {state_.get(), state_->row_count()}; }

  /// Returns the mode of the last `sandbox/mode` event this log has seen, or nullopt; O(1).
  [[nodiscard]] std::optional<SandboxMode> sandbox_mode_override() const noexcept { return state_->mode(); }

  /// Returns the seq the next event will get.
  [[nodiscard]] std::uint64_t next_seq() const { return state_->next_seq(); }

  /// Returns how many bytes past the end of the file this log keeps preallocated for a
  /// `sandbox/mode` switch (`SESSION_LOG_RESERVE_BYTES` normally). Ordinary appends never write
  /// into that room: each first extends the preallocation to cover itself and the reserve, and
  /// fails cleanly when it cannot. A switch may write into it, then renews it. Less than the full
  /// reserve after a switch on a full filesystem; 0 when the filesystem cannot preallocate
  /// (EOPNOTSUPP: tmpfs and ext4 can, ramfs and some network or FUSE filesystems cannot): then a
  /// switch to a stricter mode may fail for lack of space like any append, and the host must
  /// itself keep the stricter mode for its next call when it does. Another process that cuts the
  /// file back (a torn tail, a failed append) releases the room until this log's next append or
  /// refresh.
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return state_->reserved(); }

  /// Returns the last torn line this log cut off (at open, or one a crashed writer left
  /// behind that an append or refresh found), or nullopt if there was none.
  [[nodiscard]] std::optional<TailRepair> tail_repair() const { return state_->tail_repair(); }

  /// Appends `{"type":type,"seq":<next>,"time":<now, epoch ms>,"data":data}` as one line and
  /// returns its seq. Before anything is written: throws InvariantViolation for a forged
  /// `sandbox/mode` event, and LogError for a type without "/", invalid UTF-8, data nested
  /// deeper than 511 levels (its row would exceed the 512 that opening accepts), or a line of
  /// 2,147,479,552 bytes or more (the most one write(2) transfers on Linux). Then, under the
  /// exclusive file lock (waiting at most the lock timeout, else LogError), it checks that
  /// the open file is still the file at the log's name: if it was unlinked, replaced, or its
  /// directory removed, it throws LogError saying which, writes nothing, and this log refuses
  /// every later append and refresh until the log is opened again. It validates rows other
  /// processes appended, writes the line (in a compressed log: one checksummed frame holding it)
  /// with one write(2) on the O_APPEND descriptor and fdatasyncs it: when append returns, the event is on disk. A
  /// failed or short write (also EFBIG past a file-size limit: ignore SIGXFSZ, or that signal kills the process first)
  /// or a failed sync cuts the file back to its previous length and throws LogError. Everything append allocates is
  /// allocated before the write: std::bad_alloc reaches the caller with the file unchanged, and once the line is
  /// written append cannot fail.
  ///
  /// The reserve: an event that is not a `sandbox/mode` switch is first given preallocated room
  /// for itself and `SESSION_LOG_RESERVE_BYTES` past it; when the filesystem has no room, append
  /// throws LogError (its `code()` `std::errc::no_space_on_device`, or the quota's) with the file
  /// unchanged. A switch may use the reserve (so a switch to a stricter mode can be written after a
  /// call filled the disk) and renews it afterwards as far as there is room (`reserved_bytes`).
  std::uint64_t append(std::string_view type, nlohmann::json data) {
    return state_->append(type, std::move(data), nullptr); // no envelope: nothing to allocate beside `data`
  }

  /// Appends like `append(type, data)` with the members of `envelope` (such as
  /// `"surfaceOp":"append"`) written after `data`. Throws ConfigError, writing nothing, when
  /// `envelope` is not an object or names type, seq, time or data.
  std::uint64_t append(std::string_view type, nlohmann::json data, const nlohmann::json& envelope) {
    return state_->append(type, std::move(data), &envelope);
  }

  /// Validates and indexes the rows other processes appended since this log last looked, so
  /// that `events()` and `sandbox_mode_override()` include them. Throws LogError if they are
  /// damaged (this log then stays as it was), if the file lock is not acquired within the
  /// lock timeout, or if the open file is no longer the file at the log's name (as `append`).
  void refresh() { state_->refresh(); }

private:
  explicit SessionLog(std::unique_ptr<detail::slog::LogState> state) noexcept : state_(std::move(state)) {}
  std::unique_ptr<detail::slog::LogState> state_;
};

} // namespace dsh
