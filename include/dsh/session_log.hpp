/// @file
/// A durable, file-backed session in DSH's raw JSONL layout (docs/contract.md#the-session-log).
///
/// `dsh::SessionLog` satisfies `dsh::AppendableSession` and `dsh::HasSandboxModeOverride`, so
/// `set_sandbox_mode`, `effective_mode`, `PolicyOwner::resolve` and `PolicyOwner::context` work
/// on it unchanged. Opening validates every line without keeping a parsed tree of the events:
/// the log keeps one file offset per row and parses a row only when `events()` reaches it.
#pragma once

#include <dsh/detail/posix.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <ranges>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsh {

/// A session log that cannot be created, opened, read or appended to. The message names the
/// file (as a JSON string literal), the 1-based line when one line is at fault, and what is
/// wrong: `session log "/var/s.jsonl" line 3: seq 2 where 1 was expected`.
class LogError : public Error {
public:
  /// Builds the error for `path`; `line` is 1-based, or 0 when no single line is at fault.
  LogError(std::filesystem::path path, std::size_t line, std::string_view what)
      : Error(message(path, line, what)), path_(std::move(path)), line_(line) {}

  /// Returns the log's path as it was given.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Returns the 1-based line at fault, or 0 when the error is about the file as a whole.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

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
};

/// A torn last line (a crash in the middle of an append left it without its final newline)
/// that `SessionLog` cut off.
struct TailRepair {
  std::size_t line = 0;            ///< 1-based number the torn line had.
  std::uint64_t offset = 0;        ///< Where it began: the file's size after the cut.
  std::uint64_t removed_bytes = 0; ///< How many bytes were cut.
  bool operator==(const TailRepair&) const = default;
};

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
  /// The longest wait for the exclusive file lock (in open, append and refresh); after it the
  /// call throws LogError. Zero tries once; a negative timeout is a ConfigError.
  std::chrono::milliseconds lock_timeout{10000};
};

namespace detail::slog {

/// Containers nested deeper than this make a row invalid. It bounds the recursion of the
/// scanner here and of nlohmann_json's `dump` and copy on rows that pass.
inline constexpr std::size_t MAX_NESTING = 512;

/// Returns true if `c` is an ASCII decimal digit.
[[nodiscard]] constexpr bool is_ascii_digit(char c) noexcept { return c >= '0' && c <= '9'; }

/// Returns the code unit of the four hex digits of a `\u` escape at `at` (just past the `u`),
/// or -1 when [at, end) does not start with four hex digits.
[[nodiscard]] constexpr long code_unit_at(const char* at, const char* end) noexcept {
  if (end - at < 4) {
    return -1;
  }
  long unit = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = at[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) {
      return -1;
    }
    unit = unit * 16 + digit;
  }
  return unit;
}

/// True if the number token [start, end) is finite as a double: nlohmann_json refuses one
/// that overflows (out_of_range 406), so the scanner must too. Decides from the decimal
/// magnitude of the leading digit, and asks from_chars only at the boundary (1e308).
[[nodiscard]] inline bool finite_number(const char* start, const char* end) noexcept {
  const char* p = *start == '-' ? start + 1 : start;
  std::int64_t digit_position = 0; // decimal exponent of the digit at p
  const char* integer_end = std::find_if_not(p, end, is_ascii_digit);
  digit_position = integer_end - p - 1;
  std::optional<std::int64_t> leading; // decimal exponent of the first non-zero digit
  for (; p < end && (is_ascii_digit(*p) || *p == '.'); ++p) {
    if (*p == '.') {
      continue;
    }
    if (*p != '0') {
      leading = digit_position;
      break;
    }
    --digit_position;
  }
  if (!leading) {
    return true; // zero, whatever the exponent
  }
  const char* e = std::find_if(p, end, [](char c) { return c == 'e' || c == 'E'; });
  std::int64_t exponent = 0;
  if (e != end) {
    const bool negative = e[1] == '-';
    for (const char* d = e + 1 + ((e[1] == '+' || e[1] == '-') ? 1 : 0); d < end; ++d) {
      exponent = std::min<std::int64_t>(exponent * 10 + (*d - '0'), 1000000);
    }
    exponent = negative ? -exponent : exponent;
  }
  const std::int64_t magnitude = *leading + exponent;
  if (magnitude != 308) {
    return magnitude < 308;
  }
  double value = 0;
  return std::from_chars(start, end, value).ec == std::errc();
}

/// Walks a JSON string token the scanner accepted (quotes included): passes each run of its
/// decoded text, as UTF-8, to `text(std::string_view)` and each lone UTF-16 surrogate escape,
/// as its code unit, to `lone(unsigned)`.
template <class Text, class Lone> void walk_string_token(std::string_view token, Text&& text, Lone&& lone) {
  const std::string_view body = token.substr(1, token.size() >= 2 ? token.size() - 2 : 0);
  const char* const end = body.data() + body.size();
  std::size_t i = 0;
  while (i < body.size()) {
    const std::size_t backslash = std::min(body.find('\\', i), body.size());
    if (backslash > i) {
      text(body.substr(i, backslash - i));
    }
    i = backslash;
    if (i + 1 >= body.size()) {
      return;
    }
    const char kind = body[i + 1];
    if (kind != 'u') {
      constexpr std::string_view from = "\"\\/bfnrt";
      constexpr std::string_view to = "\"\\/\b\f\n\r\t";
      const std::size_t which = from.find(kind);
      if (which != std::string_view::npos) {
        text(to.substr(which, 1));
      }
      i += 2;
      continue;
    }
    const long unit = code_unit_at(body.data() + i + 2, end);
    if (unit < 0) {
      return;
    }
    i += 6;
    auto code = static_cast<std::uint32_t>(unit);
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const bool escape_follows = i + 1 < body.size() && body[i] == '\\' && body[i + 1] == 'u';
      const long low = escape_follows ? code_unit_at(body.data() + i + 2, end) : -1;
      if (low < 0xDC00 || low > 0xDFFF) {
        lone(static_cast<unsigned>(unit));
        continue;
      }
      code = 0x10000U + ((code - 0xD800U) << 10U) + static_cast<std::uint32_t>(low - 0xDC00);
      i += 6;
    } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
      lone(static_cast<unsigned>(unit));
      continue;
    }
    std::array<char, 4> utf8{};
    std::size_t length = 0;
    const auto byte = [](std::uint32_t value) { return static_cast<char>(static_cast<unsigned char>(value)); };
    if (code < 0x80) {
      utf8[length++] = byte(code);
    } else if (code < 0x800) {
      utf8[length++] = byte(0xC0U | (code >> 6U));
      utf8[length++] = byte(0x80U | (code & 0x3FU));
    } else if (code < 0x10000) {
      utf8[length++] = byte(0xE0U | (code >> 12U));
      utf8[length++] = byte(0x80U | ((code >> 6U) & 0x3FU));
      utf8[length++] = byte(0x80U | (code & 0x3FU));
    } else {
      utf8[length++] = byte(0xF0U | (code >> 18U));
      utf8[length++] = byte(0x80U | ((code >> 12U) & 0x3FU));
      utf8[length++] = byte(0x80U | ((code >> 6U) & 0x3FU));
      utf8[length++] = byte(0x80U | (code & 0x3FU));
    }
    text(std::string_view(utf8.data(), length));
  }
}

/// Returns the text of a JSON string token the scanner accepted (quotes included), with each
/// lone surrogate escape read as U+FFFD: what the parsed tree holds for it.
[[nodiscard]] inline std::string decode_string_token(std::string_view token) {
  std::string out;
  walk_string_token(
      token, [&out](std::string_view run) { out.append(run); }, [&out](unsigned) { out.append("\xEF\xBF\xBD"); });
  return out;
}

/// Rewrites in place each lone UTF-16 surrogate escape of a JSON text the scanner accepted
/// (`\ud83d` without a low surrogate escape after it, or a low one without a high one before
/// it) as `\ufffd`, which is as long; returns true if there was one. nlohmann_json refuses
/// lone surrogates: after this it parses the text, and reads each of them as U+FFFD.
inline bool replace_lone_surrogates(std::string& text) noexcept {
  bool replaced = false;
  const char* const end = text.data() + text.size();
  for (std::size_t i = text.find('\\'); i != std::string::npos; i = text.find('\\', i)) {
    // Outside strings valid JSON has no backslash, so every one here starts an escape.
    if (i + 1 >= text.size() || text[i + 1] != 'u') {
      i += 2;
      continue;
    }
    const long unit = code_unit_at(text.data() + i + 2, end);
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const bool escape_follows = i + 7 < text.size() && text[i + 6] == '\\' && text[i + 7] == 'u';
      const long low = escape_follows ? code_unit_at(text.data() + i + 8, end) : -1;
      if (low >= 0xDC00 && low <= 0xDFFF) {
        i += 12;
        continue;
      }
    }
    if (unit >= 0xD800 && unit <= 0xDFFF) {
      text.replace(i + 2, 4, "fffd");
      replaced = true;
    }
    i += 6;
  }
  return replaced;
}

/// One member of an object as JavaScript keeps it: its key and value as `JSON.stringify`
/// writes them, and the value's JSON text in the row.
struct JsMember {
  std::string key;
  std::string value;
  std::string_view raw;
};

/// Writes a JSON text the scanner accepted as JavaScript's `JSON.stringify` writes the value
/// `JSON.parse` reads from it (DSH's own text): no whitespace; strings escaped as
/// `append_json_string_body` escapes them, a lone surrogate as `\udxxx`; numbers as
/// `append_js_number` writes them (one that underflows is `0`, one that overflows `null`);
/// objects with a duplicated key keep the last value at the first key's place, array-index
/// keys first in numeric order, then the others in the order of the text.
class JsText {
public:
  explicit JsText(std::string_view text) noexcept : p_(text.data()), end_(text.data() + text.size()) {}

  /// Appends the value at the current position and moves past it.
  void value(std::string& out) {
    skip_space();
    if (p_ == end_) {
      return;
    }
    switch (*p_) {
    case '{': {
      const char* separator = "";
      out += '{';
      for (const JsMember& member : object()) {
        out.append(std::exchange(separator, ",")).append(member.key).append(":").append(member.value);
      }
      out += '}';
      return;
    }
    case '[': {
      ++p_;
      skip_space();
      out += '[';
      const char* separator = "";
      while (p_ < end_ && *p_ != ']') {
        out += std::exchange(separator, ",");
        value(out);
        skip_space();
        if (p_ < end_ && *p_ == ',') {
          ++p_;
        }
        skip_space();
      }
      ++p_;
      out += ']';
      return;
    }
    case '"':
      string(out);
      return;
    case 't':
    case 'f':
    case 'n': {
      const std::size_t length = *p_ == 'f' ? 5 : 4;
      out.append(p_, std::min<std::size_t>(length, static_cast<std::size_t>(end_ - p_)));
      p_ += std::min<std::size_t>(length, static_cast<std::size_t>(end_ - p_));
      return;
    }
    default:
      number(out);
    }
  }

  /// Reads the object at the current position (it must start there): returns its members in
  /// JavaScript's order, and moves past it.
  [[nodiscard]] std::vector<JsMember> object() {
    std::vector<JsMember> members;
    skip_space();
    ++p_;
    skip_space();
    while (p_ < end_ && *p_ == '"') {
      JsMember member;
      string(member.key);
      skip_space();
      ++p_; // ':'
      skip_space();
      const char* start = p_;
      value(member.value);
      member.raw = std::string_view(start, static_cast<std::size_t>(p_ - start));
      const auto same = std::ranges::find(members, member.key, &JsMember::key);
      if (same != members.end()) {
        same->value = std::move(member.value);
        same->raw = member.raw;
      } else {
        members.push_back(std::move(member));
      }
      skip_space();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_space();
      }
    }
    ++p_; // '}'
    const auto index_of = [](const JsMember& member) {
      return array_index(std::string_view(member.key).substr(1, member.key.size() - 2));
    };
    // std::stable_partition rather than the ranges one, whose subrange clang 14 cannot use.
    const auto others = std::stable_partition(members.begin(), members.end(),
                                              [&](const JsMember& m) { return index_of(m).has_value(); });
    std::sort(members.begin(), others,
              [&](const JsMember& a, const JsMember& b) { return *index_of(a) < *index_of(b); });
    return members;
  }

private:
  void skip_space() noexcept {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) {
      ++p_;
    }
  }

  void string(std::string& out) {
    const char* start = p_++;
    while (p_ < end_ && *p_ != '"') {
      p_ += *p_ == '\\' ? 2 : 1;
    }
    p_ = std::min(p_ + 1, end_);
    static constexpr std::string_view hex = "0123456789abcdef";
    out += '"';
    walk_string_token(
        std::string_view(start, static_cast<std::size_t>(p_ - start)),
        [&out](std::string_view run) { append_json_string_body(out, run); },
        [&out](unsigned unit) {
          out.append("\\u");
          for (unsigned shift = 16; shift > 0; shift -= 4) {
            out += hex[(unit >> (shift - 4)) & 0xFU];
          }
        });
    out += '"';
  }

  void number(std::string& out) {
    const char* start = p_;
    while (p_ < end_ && (is_ascii_digit(*p_) || *p_ == '-' || *p_ == '+' || *p_ == '.' || *p_ == 'e' || *p_ == 'E')) {
      ++p_;
    }
    double number = 0;
    const std::from_chars_result parsed = std::from_chars(start, p_, number);
    if (parsed.ec == std::errc::result_out_of_range) {
      // JavaScript reads a number beyond the doubles as +-Infinity, and one too small as +-0.
      number = finite_number(start, p_) ? 0.0 : std::numeric_limits<double>::infinity();
    }
    append_js_number(out, number);
  }

  const char* p_;
  const char* end_;
};

/// Returns the `data.mode` of a row the scanner accepted as `JSON.stringify` writes the value
/// DSH reads from it (the last of duplicated keys), or nullopt when the row has none.
[[nodiscard]] inline std::optional<std::string> js_mode_text(std::string_view row) {
  JsText top(row);
  for (const JsMember& member : top.object()) {
    if (member.key == R"("data")" && member.raw.starts_with('{')) {
      JsText data(member.raw);
      for (const JsMember& inner : data.object()) {
        if (inner.key == R"("mode")") {
          return inner.value;
        }
      }
    }
  }
  return std::nullopt;
}

/// One member of a row that the scanner extracts.
struct Field {
  bool present = false;     ///< The key occurs.
  bool valid = false;       ///< Its value has the required JSON type.
  bool escaped = false;     ///< (strings) the token holds a backslash escape.
  std::uint64_t number = 0; ///< (integers) the value; (the dt array) its element count.
  std::string_view token;   ///< (strings) the token, quotes included.
};

/// What kind of JSON value a row is.
enum class RowKind : std::uint8_t { object, array, other };

/// What the scanner learned about one row: only what validation needs.
struct RowFacts {
  RowKind kind = RowKind::other;
  Field type;                  ///< top-level "type": a string
  Field seq;                   ///< top-level "seq": a non-negative integer
  Field seq0;                  ///< top-level "seq0": a non-negative integer
  Field dt;                    ///< "data"."dt": an array (number = its element count)
  bool lone_surrogate = false; ///< some string holds a lone UTF-16 surrogate escape
};

/// How the scanner finds the next byte of a string that needs a look of its own (a quote, a
/// backslash, a control character or a non-ASCII byte): 16 bytes at a time with SSE2, 8 at a
/// time in one 64-bit word (little-endian machines), or one byte at a time. All three accept
/// exactly the same rows with the same errors; the tests run each that the machine has.
enum class ScanWidth : std::uint8_t { bytes, words, sse2 };

/// The widest way this build can scan strings.
inline constexpr ScanWidth NATIVE_SCAN_WIDTH =
#if defined(__SSE2__)
    ScanWidth::sse2;
#else
    std::endian::native == std::endian::little ? ScanWidth::words : ScanWidth::bytes;
#endif

/// A validating single-pass scanner for one row: checks that the row is exactly one JSON
/// value (RFC 8259 grammar, strings of well-formed UTF-8, any `\u` escape including a lone
/// UTF-16 surrogate, nesting at most MAX_NESTING) and extracts the fields of `RowFacts`
/// without building a tree. A duplicated key among the extracted ones is an error, because
/// JSON leaves its meaning open. Everything it accepts, nlohmann_json parses once
/// `replace_lone_surrogates` has rewritten the lone surrogate escapes nlohmann_json refuses.
/// `Width` chooses how strings are searched (see ScanWidth); it changes nothing else.
template <ScanWidth Width = NATIVE_SCAN_WIDTH> class BasicRowScanner {
#if !defined(__SSE2__)
  static_assert(Width != ScanWidth::sse2, "this build has no SSE2");
#endif
  static_assert(Width == ScanWidth::bytes || std::endian::native == std::endian::little,
                "the word scan reads the first special byte from the low end of a word");

public:
  explicit BasicRowScanner(std::string_view row) noexcept
      : begin_(row.data()), p_(row.data()), end_(row.data() + row.size()) {}

  /// Scans the row into `facts`; returns false, with `error()` set, if it is not valid.
  [[nodiscard]] bool scan(RowFacts& facts) {
    facts_ = &facts;
    skip_space();
    if (p_ < end_) {
      facts.kind = *p_ == '{' ? RowKind::object : *p_ == '[' ? RowKind::array : RowKind::other;
    }
    if (!value(Slot::top, 0)) {
      return false;
    }
    skip_space();
    facts.lone_surrogate = lone_surrogate_;
    return p_ == end_ || fail("unexpected text after the JSON value");
  }

  /// Returns what is wrong and where (1-based byte column), after `scan` returned false.
  [[nodiscard]] std::string error() const {
    const auto column = std::to_string(static_cast<std::size_t>(where_ - begin_) + 1);
    if (utf8_error_) {
      return "not valid UTF-8 at column " + column;
    }
    return "not valid JSON at column " + column + ": " + reason_;
  }

private:
  /// Which extracted member, if any, the value being scanned is.
  enum class Slot : std::uint8_t { none, top, data, dt };

  bool fail(const char* reason) noexcept {
    reason_ = reason;
    where_ = p_;
    return false;
  }

  void skip_space() noexcept {
    // Rows as DSH writes them have no whitespace between tokens: one look decides, and the
    // loop stays out of line so that this look is inlined everywhere.
    if (p_ < end_ && static_cast<unsigned char>(*p_) <= ' ') {
      skip_space_run();
    }
  }

  void skip_space_run() noexcept {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) {
      ++p_;
    }
  }

  /// Scans the value at the current position, after any whitespace.
  bool value(Slot slot, std::size_t depth) {
    if (p_ < end_ && static_cast<unsigned char>(*p_) <= ' ') {
      skip_space_run();
    }
    if (p_ == end_) {
      return fail("expected a value");
    }
    switch (*p_) {
    case '{':
      return object(slot, depth + 1);
    case '[':
      return array(slot, depth + 1);
    case '"':
      return string();
    case 't':
      return literal("true");
    case 'f':
      return literal("false");
    case 'n':
      return literal("null");
    default:
      return number();
    }
  }

  bool literal(std::string_view word) noexcept {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) {
      return fail("invalid literal");
    }
    p_ += word.size();
    return true;
  }

  bool digits() noexcept {
    if (p_ == end_ || !is_ascii_digit(*p_)) {
      return fail("invalid number");
    }
    while (p_ < end_ && is_ascii_digit(*p_)) {
      ++p_;
    }
    return true;
  }

  bool number() noexcept {
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') {
      ++p_;
    }
    if (p_ < end_ && *p_ == '0') {
      ++p_;
    } else if (!digits()) {
      return fail(p_ == start ? "expected a value" : "invalid number");
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!digits()) {
        return false;
      }
    }
    bool exponent = false;
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      exponent = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) {
        ++p_;
      }
      if (!digits()) {
        return false;
      }
    }
    // Only an exponent or some 300 digits can reach the limit of a double.
    if ((exponent || p_ - start > 300) && !finite_number(start, p_)) {
      p_ = start;
      return fail("number out of range");
    }
    return true;
  }

  /// Scans a number into `field` as a non-negative integer when it is one.
  bool integer_member(Field& field, std::size_t depth) {
    const char* start = p_;
    // The usual value: a plain integer without sign, fraction or exponent, read in one pass.
    if (p_ < end_ && *p_ >= '1' && *p_ <= '9') {
      std::uint64_t number = 0;
      bool fits = true;
      for (; p_ < end_ && is_ascii_digit(*p_); ++p_) {
        const auto digit = static_cast<std::uint64_t>(*p_ - '0');
        fits = fits && number <= (UINT64_MAX - digit) / 10;
        number = number * 10 + digit;
      }
      const bool plain = p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E');
      if (plain && p_ - start <= 300) {
        field.valid = fits;
        field.number = number;
        return true;
      }
      p_ = start;
    }
    if (!value(Slot::none, depth)) {
      return false;
    }
    field.valid = p_ > start && std::all_of(start, p_, is_ascii_digit);
    for (const char* c = start; field.valid && c < p_; ++c) {
      const auto digit = static_cast<std::uint64_t>(*c - '0');
      field.valid = field.number <= (UINT64_MAX - digit) / 10;
      field.number = field.number * 10 + digit;
    }
    return true;
  }

  /// True if byte `c` of a string needs a look of its own: '"', '\\', a control character
  /// or a non-ASCII byte.
  static constexpr bool special(unsigned char c) noexcept { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80; }

  /// A mask with the high bit of each byte of `word` set where `special` holds, exact at its
  /// lowest set byte (a subtraction's borrow can mark bytes above a special one, never below:
  /// the scan only ever uses the lowest).
  static constexpr std::uint64_t special_bits(std::uint64_t word) noexcept {
    constexpr std::uint64_t ones = 0x0101010101010101ULL;
    constexpr std::uint64_t highs = 0x8080808080808080ULL;
    const std::uint64_t quote = word ^ (ones * '"');
    const std::uint64_t backslash = word ^ (ones * '\\');
    const std::uint64_t below_space = (word - ones * 0x20) & ~word;
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | below_space | word) & highs;
  }

  /// Returns a mask of the special bytes among the `window` bytes at `at` after the first
  /// `skip` of them, 0 when there is none: its lowest set bit marks the first special byte
  /// (bit i for byte i with SSE2, bit 8i+7 in words mode). On a little-endian machine only.
  static std::uint64_t special_mask(const char* at, unsigned skip) noexcept {
#if defined(__SSE2__)
    if constexpr (Width == ScanWidth::sse2) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
      // Signed: every byte from 0x80 up is negative, so one comparison finds both the control
      // characters and the non-ASCII bytes.
      const __m128i low = _mm_cmplt_epi8(bytes, _mm_set1_epi8(0x20));
      const __m128i quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8('"'));
      const __m128i backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8('\\'));
      const auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(low, _mm_or_si128(quote, backslash))));
      return mask >> skip;
    }
#endif
    std::uint64_t word = 0;
    std::memcpy(&word, at, 8);
    // Shifting the word (not the mask) drops the skipped bytes before their borrows can mark
    // a byte of interest; the zero bytes shifted in at the top are not of interest.
    return special_bits(word >> (8 * skip)) & (~std::uint64_t{0} >> (8 * skip));
  }

  /// The bytes `special_mask` looks at.
  static constexpr std::ptrdiff_t window = Width == ScanWidth::sse2 ? 16 : 8;

  /// Moves to the next special byte of the string at or after the current position, or to the
  /// end of the row; returns false at the end.
  bool next_special() noexcept {
    if constexpr (Width != ScanWidth::bytes) {
      while (end_ - p_ >= window) {
        const std::uint64_t mask = special_mask(p_, 0);
        if (mask != 0) {
          p_ += std::countr_zero(mask) / (Width == ScanWidth::sse2 ? 1 : 8);
          return true;
        }
        p_ += window;
      }
      // The last few bytes: the window that ends with the row, when the row is that long.
      if (p_ < end_ && end_ - begin_ >= window) {
        const auto skip = static_cast<unsigned>(window - (end_ - p_));
        const std::uint64_t mask = special_mask(end_ - window, skip);
        p_ = mask != 0 ? p_ + std::countr_zero(mask) / (Width == ScanWidth::sse2 ? 1 : 8) : end_;
        return mask != 0;
      }
    }
    while (p_ < end_ && !special(static_cast<unsigned char>(*p_))) {
      ++p_;
    }
    return p_ < end_;
  }

  bool escape() noexcept {
    if (end_ - p_ < 2) {
      return fail("unterminated string");
    }
    switch (p_[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
      p_ += 2;
      return true;
    case 'u':
      break;
    default:
      return fail("invalid escape");
    }
    const long unit = code_unit_at(p_ + 2, end_);
    if (unit < 0) {
      return fail("invalid \\u escape");
    }
    p_ += 6;
    // A lone surrogate escape is valid JSON (RFC 8259's grammar allows it, and JavaScript's
    // JSON.parse reads it as one UTF-16 code unit); DSH writes one when a streamed chunk
    // splits a pair. A high surrogate followed by a low one is a pair and takes both escapes.
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const long low = end_ - p_ >= 2 && p_[0] == '\\' && p_[1] == 'u' ? code_unit_at(p_ + 2, end_) : -1;
      if (low >= 0xDC00 && low <= 0xDFFF) {
        p_ += 6;
      } else {
        lone_surrogate_ = true;
      }
    } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
      lone_surrogate_ = true;
    }
    return true;
  }

  /// Moves past the UTF-8 sequence at the current (non-ASCII) byte; fails unless it is well
  /// formed. The well-formed sequences are decided here with the ranges of `utf8_sequence`;
  /// anything else goes to it, so that it alone says what is wrong.
  bool utf8() noexcept {
    const auto byte = [this](std::ptrdiff_t i) { return static_cast<unsigned char>(p_[i]); };
    const std::ptrdiff_t left = end_ - p_;
    const unsigned char lead = byte(0);
    const auto continuation = [&byte](std::ptrdiff_t i) { return (byte(i) & 0xC0U) == 0x80U; };
    if (lead >= 0xC2 && lead <= 0xDF) {
      if (left >= 2 && continuation(1)) {
        p_ += 2;
        return true;
      }
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      const unsigned char low = lead == 0xE0 ? 0xA0 : 0x80;
      const unsigned char high = lead == 0xED ? 0x9F : 0xBF;
      if (left >= 3 && byte(1) >= low && byte(1) <= high && continuation(2)) {
        p_ += 3;
        return true;
      }
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      const unsigned char low = lead == 0xF0 ? 0x90 : 0x80;
      const unsigned char high = lead == 0xF4 ? 0x8F : 0xBF;
      if (left >= 4 && byte(1) >= low && byte(1) <= high && continuation(2) && continuation(3)) {
        p_ += 4;
        return true;
      }
    }
    std::size_t consumed = 0;
    const std::size_t length =
        detail::utf8_sequence(std::string_view(p_, static_cast<std::size_t>(end_ - p_)), &consumed);
    if (length == 0) {
      utf8_error_ = true;
      return fail("invalid UTF-8");
    }
    p_ += length;
    return true;
  }

  /// Scans a string token (at its opening quote); notes whether it held an escape.
  bool string() {
    ++p_;
    escaped_ = false;
    for (;;) {
      if (!next_special()) {
        return fail("unterminated string");
      }
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        escaped_ = true;
        if (!escape()) {
          return false;
        }
      } else if (c < 0x20) {
        return fail("control character in a string");
      } else if (!utf8()) {
        return false;
      }
    }
  }

  /// Returns the extracted member that key `token` (quotes included) names in `slot`.
  [[nodiscard]] Field* member(Slot slot, std::string_view token) {
    if (slot != Slot::top && slot != Slot::data) {
      return nullptr;
    }
    if (escaped_) {
      const std::string decoded = decode_string_token(token);
      return member_named(slot, decoded);
    }
    return member_named(slot, token.substr(1, token.size() - 2));
  }

  /// Returns the extracted member that key `name` (decoded) names in `slot` (top or data).
  [[nodiscard]] Field* member_named(Slot slot, std::string_view name) noexcept {
    if (slot == Slot::data) {
      return name == "dt" ? &facts_->dt : nullptr;
    }
    switch (name.size()) {
    case 3:
      return name == "seq" ? &facts_->seq : nullptr;
    case 4:
      return name == "type" ? &facts_->type : name == "seq0" ? &facts_->seq0 : name == "data" ? &data_ : nullptr;
    default:
      return nullptr;
    }
  }

  /// Scans the value of a member; extracts it when `field` is one of the extracted members.
  bool member_value(Field* field, std::size_t depth) {
    skip_space();
    if (field == nullptr) {
      return value(Slot::none, depth);
    }
    if (field == &data_) {
      return value(Slot::data, depth);
    }
    if (field == &facts_->type) {
      const char* start = p_;
      if (!value(Slot::none, depth)) {
        return false;
      }
      field->valid = *start == '"';
      field->token = std::string_view(start, static_cast<std::size_t>(p_ - start));
      field->escaped = escaped_;
      return true;
    }
    if (field == &facts_->dt) {
      field->valid = p_ < end_ && *p_ == '[';
      return value(field->valid ? Slot::dt : Slot::none, depth);
    }
    return integer_member(*field, depth);
  }

  /// True if `c` is JSON whitespace.
  static constexpr bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

  /// After a member or element: moves past the ',' (returns 1) or the `close` (returns 0)
  /// that follows, after any whitespace; fails (returns -1) on anything else. Compact text,
  /// as DSH writes it, takes one comparison.
  int after_item(char close, const char* expected) noexcept {
    for (;;) {
      if (p_ < end_) {
        if (*p_ == ',') {
          ++p_;
          return 1;
        }
        if (*p_ == close) {
          ++p_;
          return 0;
        }
        if (is_space(*p_)) {
          skip_space_run();
          continue;
        }
      }
      fail(expected);
      return -1;
    }
  }

  bool object(Slot slot, std::size_t depth) {
    if (depth > MAX_NESTING) {
      return fail("nesting deeper than 512");
    }
    ++p_;
    skip_space();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      if (p_ < end_ && *p_ != '"') {
        skip_space();
      }
      if (p_ == end_ || *p_ != '"') {
        return fail("expected a string key");
      }
      const char* key = p_;
      if (!string()) {
        return false;
      }
      Field* field =
          slot == Slot::none ? nullptr : member(slot, std::string_view(key, static_cast<std::size_t>(p_ - key)));
      if (field != nullptr && std::exchange(field->present, true)) {
        p_ = key;
        return fail("duplicate key");
      }
      if (p_ == end_ || *p_ != ':') {
        skip_space();
        if (p_ == end_ || *p_ != ':') {
          return fail("expected ':'");
        }
      }
      ++p_;
      if (!member_value(field, depth)) {
        return false;
      }
      const int next = after_item('}', "expected ',' or '}'");
      if (next <= 0) {
        return next == 0;
      }
    }
  }

  bool array(Slot slot, std::size_t depth) {
    if (depth > MAX_NESTING) {
      return fail("nesting deeper than 512");
    }
    ++p_;
    skip_space();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      if (!value(Slot::none, depth)) {
        return false;
      }
      if (slot == Slot::dt) {
        ++facts_->dt.number;
      }
      const int next = after_item(']', "expected ',' or ']'");
      if (next <= 0) {
        return next == 0;
      }
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const char* where_ = nullptr;
  const char* reason_ = "";
  bool utf8_error_ = false;
  bool escaped_ = false;
  bool lone_surrogate_ = false; ///< the row holds a lone surrogate escape
  RowFacts* facts_ = nullptr;
  Field data_; ///< only its presence matters: "data" must not be duplicated
};

/// The scanner of this build (the widest string search it has).
using RowScanner = BasicRowScanner<>;

/// Returns `"<what>: <strerror(error)>"`.
[[nodiscard]] inline std::string with_errno(std::string_view what, int error) {
  return std::string(what) + ": " + std::generic_category().message(error);
}

/// Opens `path` with `flags` (and O_CLOEXEC); throws LogError for `named` (the file the
/// caller is about) naming the failure. With O_NOFOLLOW, a symbolic link at `path` gets a
/// message that says so and names the option that accepts it.
[[nodiscard]] inline UniqueFd open_file(const std::filesystem::path& path, int flags, mode_t mode,
                                        const std::filesystem::path& named) {
  const int fd = retry_on_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC, mode); });
  if (fd < 0) {
    const int error = errno;
    struct stat status {};
    if (error == ELOOP && (flags & O_NOFOLLOW) != 0 && ::lstat(path.c_str(), &status) == 0 && S_ISLNK(status.st_mode)) {
      throw LogError(named, 0,
                     "cannot open: the name is a symbolic link, which is refused unless "
                     "SessionLogOptions::follow_symlink is set");
    }
    throw LogError(named, 0, with_errno("cannot open", error));
  }
  return UniqueFd(fd);
}

/// Throws ConfigError for options no log can use (a negative lock timeout).
inline void check_options(const SessionLogOptions& options) {
  if (options.lock_timeout.count() < 0) {
    throw ConfigError("session log options: lock_timeout: expected a duration of 0 ms or more; found " +
                      std::to_string(options.lock_timeout.count()) + " ms");
  }
}

/// Throws LogError unless the open log `status` is trusted under `options`: owned by the
/// effective user and writable by nobody else, or explicitly accepted otherwise.
inline void check_trust(const struct stat& status, const SessionLogOptions& options,
                        const std::filesystem::path& path) {
  if (!options.allow_foreign_owner && status.st_uid != ::geteuid()) {
    throw LogError(path, 0,
                   "owned by uid " + std::to_string(status.st_uid) + ", not by the effective uid " +
                       std::to_string(::geteuid()) +
                       " of this process; refused unless SessionLogOptions::allow_foreign_owner is set");
  }
  if (!options.allow_shared_write && (status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    constexpr const char* octal = "01234567";
    const auto bits = static_cast<unsigned>(status.st_mode & 07777U);
    const std::string mode{octal[(bits >> 9U) & 7U], octal[(bits >> 6U) & 7U], octal[(bits >> 3U) & 7U],
                           octal[bits & 7U]};
    throw LogError(path, 0,
                   "writable by its group or by other users (mode " + mode +
                       "); refused unless SessionLogOptions::allow_shared_write is set");
  }
}

/// Holds `flock(LOCK_EX)` on a descriptor for its lifetime: the lock every cooperating
/// process takes around reading the tail and appending, so appends never interleave and
/// `seq` stays contiguous across processes. The wait is bounded: it polls with LOCK_NB and
/// short sleeps (no signal or timer is involved) and throws LogError once `timeout` has passed.
class ExclusiveFileLock {
public:
  ExclusiveFileLock(int fd, const std::filesystem::path& path, std::chrono::milliseconds timeout) : fd_(fd) {
    using clock = std::chrono::steady_clock;
    const clock::time_point deadline = clock::now() + timeout;
    std::chrono::microseconds pause{50};
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (error == EINTR) {
        continue;
      }
      if (error != EWOULDBLOCK) {
        throw LogError(path, 0, with_errno("cannot lock", error));
      }
      const clock::time_point now = clock::now();
      if (now >= deadline) {
        throw LogError(path, 0,
                       "cannot lock: another open file description held the lock for the whole lock timeout (" +
                           std::to_string(timeout.count()) + " ms)");
      }
      const auto wait = std::min<clock::duration>(pause, deadline - now);
      const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      const std::timespec request{static_cast<std::time_t>(nanoseconds / 1'000'000'000),
                                  static_cast<long>(nanoseconds % 1'000'000'000)};
      ::nanosleep(&request, nullptr); // an interrupted sleep only polls sooner
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;
  ~ExclusiveFileLock() { ::flock(fd_, LOCK_UN); }

private:
  int fd_;
};

/// Returns the size of the open file; throws LogError unless it is a regular file.
[[nodiscard]] inline std::uint64_t regular_file_size(int fd, const std::filesystem::path& path) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    throw LogError(path, 0, with_errno("cannot stat", errno));
  }
  if (!S_ISREG(status.st_mode)) {
    throw LogError(path, 0, "not a regular file");
  }
  return static_cast<std::uint64_t>(status.st_size);
}

/// Reads exactly `size` bytes at `offset` into `out`; throws LogError if the file ends first.
inline void read_exactly(int fd, const std::filesystem::path& path, char* out, std::size_t size, std::uint64_t offset) {
  while (size > 0) {
    const ssize_t got = retry_on_eintr([&] { return ::pread(fd, out, size, static_cast<off_t>(offset)); });
    if (got < 0) {
      throw LogError(path, 0, with_errno("cannot read", errno));
    }
    if (got == 0) {
      throw LogError(path, 0, "the file shrank while it was being read");
    }
    const auto count = static_cast<std::size_t>(got);
    out += count;
    size -= count;
    offset += count;
  }
}

/// Streams the complete lines of bytes [from, to) of `fd` to `on_row(row, offset)` (the row
/// without its newline, and the file offset where it starts) through a bounded buffer that
/// grows only to hold one long line. Returns the offset just past the last complete line:
/// the bytes from there to `to` are an unterminated (torn) last line.
template <class OnRow> std::uint64_t for_each_row(int fd, const std::filesystem::path& path, std::uint64_t from,
                                                  std::uint64_t to, OnRow&& on_row) {
  constexpr std::uint64_t block = std::uint64_t{1} << 20;
  std::vector<char> buffer(static_cast<std::size_t>(std::clamp<std::uint64_t>(to - from, 1, block)));
  std::uint64_t base = from; // file offset of buffer[0]
  std::size_t held = 0;      // bytes in the buffer
  std::size_t searched = 0;  // bytes known to hold no newline after the last row
  ::posix_fadvise(fd, static_cast<off_t>(from), 0, POSIX_FADV_SEQUENTIAL);
  while (base + held < to) {
    if (held == buffer.size()) {
      buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(to - base, 2 * buffer.size())));
    }
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size() - held, to - base - held));
    read_exactly(fd, path, buffer.data() + held, chunk, base + held);
    held += chunk;
    std::size_t row_start = 0;
    while (const void* newline = std::memchr(buffer.data() + searched, '\n', held - searched)) {
      const auto end = static_cast<std::size_t>(static_cast<const char*>(newline) - buffer.data());
      on_row(std::string_view(buffer.data() + row_start, end - row_start), base + row_start);
      row_start = end + 1;
      searched = row_start;
    }
    std::memmove(buffer.data(), buffer.data() + row_start, held - row_start);
    base += row_start;
    held -= row_start;
    searched = held;
  }
  return base;
}

/// What validation has established so far about a log: the rows seen and what comes next.
struct Tally {
  std::size_t lines = 0;           ///< Complete lines validated, the header included.
  std::uint64_t next_seq = 0;      ///< The seq the next row must carry.
  std::optional<SandboxMode> mode; ///< The mode of the last `sandbox/mode` event.
};

/// Returns the last member (of an object) or element (of an array) of `value`, or nullptr.
[[nodiscard]] inline nlohmann::json* last_child(nlohmann::json& value) noexcept {
  if (auto* object = value.get_ptr<nlohmann::json::object_t*>()) {
    return object->empty() ? nullptr : &std::prev(object->end())->second;
  }
  if (auto* array = value.get_ptr<nlohmann::json::array_t*>()) {
    return array->empty() ? nullptr : &array->back();
  }
  return nullptr;
}

/// Removes the last member or element of the object or array `value` (which has one).
inline void remove_last_child(nlohmann::json& value) noexcept {
  if (auto* object = value.get_ptr<nlohmann::json::object_t*>()) {
    object->erase(std::prev(object->end()));
  } else if (auto* array = value.get_ptr<nlohmann::json::array_t*>()) {
    array->pop_back();
  }
}

/// Destroys the tree of `value`, leaving null, without allocating. nlohmann_json's destructor
/// moves the children of a non-empty object or array onto a heap-allocated stack, so it ends
/// the process (std::terminate) when that allocation fails. Here the tree is taken apart from
/// its last leaf back; destroying a leaf or an empty container allocates nothing. The path
/// from the root is kept in a fixed array; below its depth the walk restarts from its deepest
/// entry, slower but still without allocating.
inline void dispose(nlohmann::json& value) noexcept {
  std::array<nlohmann::json*, MAX_NESTING + 2> path{};
  std::size_t depth = 0;
  path[depth++] = &value;
  while (depth > 0) {
    nlohmann::json* parent = nullptr;
    nlohmann::json* node = path[depth - 1];
    bool recorded = true;
    while (nlohmann::json* child = last_child(*node)) {
      if (recorded && depth < path.size()) {
        path[depth++] = child;
      } else {
        recorded = false;
      }
      parent = node;
      node = child;
    }
    // `node` has no children now: remove it from its parent.
    if (recorded) {
      --depth;
      if (depth > 0) {
        remove_last_child(*path[depth - 1]);
      }
    } else {
      remove_last_child(*parent);
    }
  }
  value = nullptr;
}

/// A JSON tree that `dispose` takes apart when it goes out of scope (see there why).
class DisposedJson {
public:
  explicit DisposedJson(nlohmann::json&& tree) noexcept : value(std::move(tree)) {}
  DisposedJson(const DisposedJson&) = delete;
  DisposedJson& operator=(const DisposedJson&) = delete;
  ~DisposedJson() { dispose(value); }

  nlohmann::json value; ///< The tree.
};

/// Returns true if `value` nests no deeper than `limit` levels (a scalar is 0 levels, `[]` 1).
/// Recurses at most `limit` frames deep, whatever the depth of `value`.
[[nodiscard]] inline bool nests_within(const nlohmann::json& value, std::size_t limit) noexcept {
  if (!value.is_structured()) {
    return true;
  }
  if (limit == 0) {
    return false;
  }
  if (const auto* object = value.get_ptr<const nlohmann::json::object_t*>()) {
    return std::all_of(object->begin(), object->end(),
                       [limit](const auto& member) { return nests_within(member.second, limit - 1); });
  }
  const auto* array = value.get_ptr<const nlohmann::json::array_t*>();
  return std::all_of(array->begin(), array->end(),
                     [limit](const nlohmann::json& element) { return nests_within(element, limit - 1); });
}

/// Returns the decoded string of a string field (a view of the row unless it was escaped).
[[nodiscard]] inline std::string_view field_text(const Field& field, std::string& storage) {
  if (!field.escaped) {
    return field.token.substr(1, field.token.size() - 2);
  }
  storage = decode_string_token(field.token);
  return storage;
}

/// Scans one row; throws LogError for `line` unless it is a well-formed JSON object.
[[nodiscard]] inline RowFacts scan_object(std::string_view row, std::size_t line, const std::filesystem::path& path) {
  RowFacts facts;
  RowScanner scanner(row);
  if (!scanner.scan(facts)) {
    throw LogError(path, line, row.empty() ? std::string("empty line") : scanner.error());
  }
  if (facts.kind != RowKind::object) {
    throw LogError(path, line,
                   facts.kind == RowKind::array ? "expected a JSON object, found an array"
                                                : "expected a JSON object, found a scalar");
  }
  return facts;
}

/// Parses a row the scanner accepted into a tree (for the few rows that need one), each lone
/// surrogate escape read as U+FFFD (see `replace_lone_surrogates`).
[[nodiscard]] inline nlohmann::json parse_row(std::string_view row, std::size_t line,
                                              const std::filesystem::path& path) {
  try {
    if (row.find("\\u") != std::string_view::npos) {
      std::string text(row);
      if (replace_lone_surrogates(text)) {
        return nlohmann::json::parse(text);
      }
    }
    return nlohmann::json::parse(row);
  } catch (const nlohmann::json::exception& error) {
    throw LogError(path, line, std::string("not valid JSON: ") + error.what());
  }
}

/// Throws LogError for `line` unless `row` is the next valid row of the log; advances `tally`.
/// A row whose "type" has no "/" is a packed chunk row covering `data.dt.size() + 1` seqs
/// from "seq0"; any other row is one event with "seq"; a `sandbox/mode` event is parsed and
/// checked by `validate_event`.
inline void check_row(std::string_view row, std::size_t line, Tally& tally, const std::filesystem::path& path) {
  const RowFacts facts = scan_object(row, line, path);
  if (!facts.type.valid) {
    throw LogError(path, line, "expected a string \"type\"");
  }
  std::string storage;
  const std::string_view type = field_text(facts.type, storage);
  const bool packed = type.find('/') == std::string_view::npos;
  const Field& seq = packed ? facts.seq0 : facts.seq;
  const std::string_view seq_name = packed ? "seq0" : "seq";
  if (!seq.valid) {
    throw LogError(path, line,
                   packed ? "a row whose type has no \"/\" is a packed chunk row and needs a non-negative integer "
                            "\"seq0\""
                          : "expected a non-negative integer \"seq\"");
  }
  if (seq.number != tally.next_seq) {
    throw LogError(path, line,
                   std::string(seq_name) + " " + std::to_string(seq.number) + " where " +
                       std::to_string(tally.next_seq) + " was expected");
  }
  if (packed) {
    if (!facts.dt.valid) {
      throw LogError(path, line, "a packed chunk row needs an array \"data\".\"dt\"");
    }
    tally.next_seq += facts.dt.number + 1;
    return;
  }
  ++tally.next_seq;
  if (type == SANDBOX_MODE_EVENT) {
    const DisposedJson event(parse_row(row, line, path));
    if (auto failure = validate_event(event.value)) {
      // The tree has sorted the keys and replaced lone surrogates: show the value as DSH
      // itself would write it, from the row's own text.
      const std::optional<std::string> mode = js_mode_text(row);
      throw LogError(path, line, mode ? "sandbox/mode carries unknown mode " + *mode : *failure);
    }
    tally.mode = detail::switched_mode(event.value);
  }
}

/// Returns `header[key]`, or nullptr when absent.
[[nodiscard]] inline const nlohmann::json* header_member(const nlohmann::json& header, const char* key) {
  const auto found = header.find(key);
  return found == header.end() ? nullptr : &*found;
}

/// Throws LogError for line 1 saying what the header's `key` should have been.
[[noreturn]] inline void bad_header(const std::filesystem::path& path, const char* key, std::string_view expected,
                                    const nlohmann::json* found) {
  std::string what = "session header \"";
  what.append(key).append("\": expected ").append(expected).append("; found ");
  what += found == nullptr ? std::string("nothing") : detail::compact_json(*found);
  throw LogError(path, 1, what);
}

/// Validates the header row (line 1) and returns its fields; `json` receives the whole header.
/// Compares through `get_ref` and `get`: nlohmann_json's `==` with a string or number builds
/// a temporary value inside a noexcept operator, which would end the process if that
/// allocation failed.
[[nodiscard]] inline SessionHeader check_header(std::string_view row, const std::filesystem::path& path,
                                                nlohmann::json& json) {
  static_cast<void>(scan_object(row, 1, path));
  json = parse_row(row, 1, path);
  const nlohmann::json* type = header_member(json, "type");
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "session") {
    bad_header(path, "type", "\"session\"", type);
  }
  const nlohmann::json* version = header_member(json, "version");
  if (version == nullptr || !version->is_number_integer() || version->get<std::int64_t>() != 0) {
    bad_header(path, "version", "0 (the only version this library reads)", version);
  }
  SessionHeader header;
  const nlohmann::json* id = header_member(json, "id");
  if (id == nullptr || !id->is_string()) {
    bad_header(path, "id", "a string", id);
  }
  header.id = id->get<std::string>();
  const nlohmann::json* created = header_member(json, "createdAt");
  if (created == nullptr || !created->is_number_integer() ||
      (created->is_number_unsigned() && created->get<std::uint64_t>() > INT64_MAX)) {
    bad_header(path, "createdAt", "an integer (epoch milliseconds)", created);
  }
  header.created_at = created->get<std::int64_t>();
  if (const nlohmann::json* cwd = header_member(json, "cwd")) {
    if (!cwd->is_string()) {
      bad_header(path, "cwd", "a string, or no \"cwd\" at all", cwd);
    }
    header.cwd = cwd->get<std::string>();
  }
  return header;
}

/// Returns `value` as compact JSON; throws LogError naming `what` when it holds invalid UTF-8.
[[nodiscard]] inline std::string dump_or_throw(const nlohmann::json& value, const std::filesystem::path& path,
                                               std::string_view what) {
  try {
    return value.dump();
  } catch (const nlohmann::json::type_error& error) {
    throw LogError(path, 0, "cannot write " + std::string(what) + ": " + error.what());
  }
}

/// The largest number of bytes Linux transfers in one write(2) (0x7ffff000); an event line
/// must be shorter, since a line is written with exactly one write(2).
inline constexpr std::uint64_t MAX_WRITE_BYTES = 2'147'479'552;

/// Throws LogError, before anything is written, if an event line of `size` bytes cannot be
/// written with one write(2).
inline void check_line_size(std::uint64_t size, const std::filesystem::path& path) {
  if (size >= MAX_WRITE_BYTES) {
    throw LogError(path, 0,
                   "cannot append an event line of " + std::to_string(size) +
                       " bytes: one write(2) transfers at most 2147479552 bytes; nothing was written");
  }
}

/// Encodes an optional mode in one byte (0: none) so it can be read without a lock.
[[nodiscard]] constexpr std::uint8_t encode_mode(std::optional<SandboxMode> mode) noexcept {
  return mode ? static_cast<std::uint8_t>(static_cast<std::uint8_t>(*mode) + 1) : std::uint8_t{0};
}
[[nodiscard]] constexpr std::optional<SandboxMode> decode_mode(std::uint8_t code) noexcept {
  return code == 0 ? std::nullopt : std::optional<SandboxMode>(static_cast<SandboxMode>(code - 1));
}

/// Returns what became of the log's file if the name `path` no longer leads to the open file
/// `opened` (its `fstat`), or nullptr if it still does. `follow` says whether the name was
/// opened through a symbolic link. Throws LogError if the name cannot be examined.
[[nodiscard]] inline const char* lost_file(const struct stat& opened, const std::filesystem::path& path, bool follow) {
  struct stat named {};
  const int result = follow ? ::stat(path.c_str(), &named) : ::lstat(path.c_str(), &named);
  const int error = errno;
  if (result != 0 && error != ENOENT && error != ENOTDIR) {
    throw LogError(path, 0, with_errno("cannot stat", error));
  }
  if (result == 0 && opened.st_nlink > 0) {
    return named.st_dev == opened.st_dev && named.st_ino == opened.st_ino ? nullptr
                                                                          : "another file was put at its name";
  }
  const std::filesystem::path parent = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  struct stat directory {};
  if (::stat(parent.c_str(), &directory) != 0) {
    return "its directory was removed";
  }
  if (opened.st_nlink == 0) {
    return result == 0 ? "it was unlinked, and another file was put at its name" : "it was unlinked";
  }
  return "it was moved away from its name";
}

/// A test seam: when set, `SessionLog::create` calls it with the log's path right after
/// linking the new file at that name, before checking that the name still leads to the file
/// (so a test can play the process that swaps the name in between). Null in production.
inline void (*after_link_hook)(const std::filesystem::path&) = nullptr;

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

  /// Validates the whole file (its lock held), cuts a torn last line, and indexes the rows.
  void load() {
    const std::uint64_t size = regular_file_size(fd.get(), path);
    if (size == 0) {
      throw LogError(path, 0, "the file is empty; line 1 must be a session header");
    }
    Tally tally;
    std::vector<std::uint64_t> starts;
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

  /// Records the state of a log `create` just wrote: the header line of `size` bytes, no rows.
  void created(std::uint64_t size) {
    Tally tally;
    tally.lines = 1;
    publish(tally, {}, size, std::nullopt);
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
    Tally tally = tally_;
    std::vector<std::uint64_t> starts;
    const std::uint64_t end = for_each_row(fd.get(), path, end_, size, [&](std::string_view row, std::uint64_t offset) {
      check_row(row, ++tally.lines, tally, path);
      starts.push_back(offset);
    });
    publish(tally, std::move(starts), end, cut_torn_tail(end, size, tally.lines + 1));
  }

  /// Appends one event line durably and returns its seq. See `SessionLog::append`. Every
  /// allocation happens before the write, so once the line is on disk nothing can fail.
  std::uint64_t append(std::string_view type, nlohmann::json data, const nlohmann::json& envelope) {
    // Built first, so that however append ends, the caller's tree is destroyed without allocating.
    DisposedJson event(nlohmann::json::object());
    event.value["data"] = std::move(data);
    detail::check_envelope(envelope);
    if (type.find('/') == std::string_view::npos) {
      throw LogError(path, 0,
                     "cannot append an event of type " + json_string_literal(type) +
                         ": an event type needs a \"/\" (a type without one marks a packed chunk row)");
    }
    event.value["type"] = type;
    const std::optional<SandboxMode> switched = detail::switched_mode(event.value); // throws if forged
    // A row nests data and envelope values one level below itself, and open refuses rows
    // nested deeper than MAX_NESTING: such an event could be written but never read back.
    const auto& members = envelope.get_ref<const nlohmann::json::object_t&>();
    if (!nests_within(event.value["data"], MAX_NESTING - 1) ||
        !std::all_of(members.begin(), members.end(),
                     [](const auto& member) { return nests_within(member.second, MAX_NESTING - 1); })) {
      throw LogError(path, 0, "cannot append an event nested deeper than 512 levels (no log may hold one)");
    }
    const std::string type_json = dump_or_throw(event.value["type"], path, "the event type");
    const std::string data_json = dump_or_throw(event.value["data"], path, "the event data");
    std::string envelope_json;
    for (const auto& [key, value] : members) {
      envelope_json.append(",").append(json_string_literal(key)).append(":");
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
    reserve_row();
    write_line(line);
    publish_appended(line.size(), switched);
    return seq;
  }

  /// Catches up with other processes' appends. See `SessionLog::refresh`.
  void refresh() {
    const std::lock_guard write_lock(write_mutex_);
    refuse_if_unusable();
    const ExclusiveFileLock file_lock(fd.get(), path, options.lock_timeout);
    check_still_named();
    catch_up();
  }

  /// Parses event row `index` from the file.
  [[nodiscard]] nlohmann::json read_event(std::size_t index) const {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    {
      const std::lock_guard lock(index_mutex_);
      begin = starts_.at(index);
      end = index + 1 < starts_.size() ? starts_[index + 1] : end_;
    }
    std::string row(static_cast<std::size_t>(end - begin - 1), '\0');
    read_exactly(fd.get(), path, row.data(), row.size(), begin);
    const std::size_t line = index + 2;
    try {
      replace_lone_surrogates(row); // read as U+FFFD: nlohmann_json refuses them
      return nlohmann::json::parse(row);
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
      roll_back(written < 0 ? with_errno("cannot write", errno)
                            : "cannot write: only " + std::to_string(written) + " of " + std::to_string(line.size()) +
                                  " bytes were written");
    }
    if (::fdatasync(fd.get()) != 0) {
      roll_back(with_errno("cannot sync", errno));
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

  /// Cuts bytes [end, size) (a line without its final newline) and syncs; returns the repair.
  std::optional<TailRepair> cut_torn_tail(std::uint64_t end, std::uint64_t size, std::size_t line) {
    if (end == size) {
      return std::nullopt;
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(end)) != 0 || ::fdatasync(fd.get()) != 0) {
      throw LogError(path, line, with_errno("cannot cut the torn last line", errno));
    }
    return TailRepair{line, end, size - end};
  }

  /// Makes validated rows visible to readers.
  void publish(const Tally& tally, std::vector<std::uint64_t> starts, std::uint64_t end,
               std::optional<TailRepair> repair) {
    const std::lock_guard lock(index_mutex_);
    if (starts_.empty()) {
      starts_ = std::move(starts); // the whole index of a load: no copy
    } else {
      starts_.insert(starts_.end(), starts.begin(), starts.end());
    }
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
    if (starts_.size() == starts_.capacity()) {
      starts_.reserve(std::max<std::size_t>(16, 2 * starts_.capacity()));
    }
  }

  /// Makes the row just written (`size` bytes at the old end) visible; allocates nothing
  /// (`reserve_row` made room), so it cannot fail once the row is on disk.
  void publish_appended(std::size_t size, std::optional<SandboxMode> switched) {
    const std::lock_guard lock(index_mutex_);
    starts_.push_back(end_);
    end_ += size;
    ++tally_.lines;
    ++tally_.next_seq;
    if (switched) {
      tally_.mode = switched;
    }
    mode_.store(encode_mode(tally_.mode), std::memory_order_release);
  }

  [[noreturn]] void roll_back(const std::string& failure) {
    if (::ftruncate(fd.get(), static_cast<off_t>(end_)) != 0) {
      broken_ = true;
      throw LogError(path, 0, failure + "; " + with_errno("rolling back failed too", errno));
    }
    static_cast<void>(::fdatasync(fd.get()));
    throw LogError(path, 0, failure + "; the file was rolled back to " + std::to_string(end_) + " bytes");
  }

  std::mutex write_mutex_;
  bool broken_ = false;        // guarded by write_mutex_
  const char* lost_ = nullptr; // what became of the file, once it was lost; guarded by write_mutex_

  mutable std::mutex index_mutex_;
  std::vector<std::uint64_t> starts_; // offset of each event row; guarded by index_mutex_
  std::uint64_t end_ = 0;             // end of the last validated line; guarded by index_mutex_
  Tally tally_;                       // guarded by index_mutex_ (writers read it under write_mutex_)
  std::optional<TailRepair> repair_;  // guarded by index_mutex_
  std::atomic<std::uint8_t> mode_{0};
};

/// Returns a fresh file name for the file `create` builds beside `name` before linking it.
[[nodiscard]] inline std::string staging_name(const std::filesystem::path& name) {
  std::random_device entropy;
  return name.native() + ".creating." + std::to_string(::getpid()) + "." + std::to_string(entropy());
}

/// Returns true if `name` in the directory `directory` is the file `opened` (its `fstat`).
[[nodiscard]] inline bool entry_is(int directory, const char* name, const struct stat& opened) noexcept {
  struct stat entry {};
  return ::fstatat(directory, name, &entry, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(entry.st_mode) &&
         entry.st_dev == opened.st_dev && entry.st_ino == opened.st_ino;
}

} // namespace detail::slog

/// A session stored in a DSH JSONL file: line 1 the header, then one JSON row per line.
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
  /// (`cwd` only when the header has one); `options.lock_timeout` bounds the lock waits of
  /// the returned log (the other options are about opening an existing file and do not
  /// apply). The file appears whole or not at all: it is written and synced under a
  /// temporary name beside `path`, then hard-linked to `path`, checked to be the file at that
  /// name (same device and inode), and the directory is synced. Throws LogError if `path`
  /// exists (nothing is overwritten), if the directory cannot be opened or written or does
  /// not support hard links, or if `header` holds invalid UTF-8. When it throws after the
  /// link (another process replaced the name in between, or the directory sync failed), it
  /// first removes its own link: its message ends with "nothing was created", or, if even
  /// that failed, says that the log exists and is valid. Throws ConfigError for a negative
  /// lock timeout.
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
    const std::filesystem::path parent = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
    // Everything after the link goes through this descriptor, so it concerns the directory
    // the link was made in even if that directory is renamed meanwhile.
    const UniqueFd directory = open_file(parent, O_RDONLY | O_DIRECTORY, 0, path);
    const std::string staging = staging_name(name);
    const int staged = detail::retry_on_eintr([&] {
      return ::openat(directory.get(), staging.c_str(), O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      0644);
    });
    if (staged < 0) {
      throw LogError(path, 0, with_errno("cannot open", errno));
    }
    state->fd = UniqueFd(staged);
    try {
      state->write_line(line);
      if (::fsync(state->fd.get()) != 0) {
        throw LogError(path, 0, with_errno("cannot sync the session header", errno));
      }
      state->created(line.size());
      if (::linkat(directory.get(), staging.c_str(), directory.get(), name.c_str(), 0) != 0) {
        throw LogError(path, 0,
                       errno == EEXIST ? std::string("cannot create: the file exists")
                                       : with_errno("cannot create", errno));
      }
    } catch (...) {
      ::unlinkat(directory.get(), staging.c_str(), 0);
      throw;
    }
    // From here on nothing allocates until a failure has been dealt with.
    ::unlinkat(directory.get(), staging.c_str(), 0);
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
      throw LogError(path, 0, what);
    }
    return SessionLog(std::move(state));
  }

  /// Opens an existing log for reading and appending, validating every line: line 1 a
  /// header with "type" "session", "version" 0, a string "id", an integer "createdAt" and an
  /// optional string "cwd"; every further line a JSON object of well-formed UTF-8 with a
  /// string "type"; rows numbered without gaps from 0 ("seq" of an event, or "seq0" of a
  /// packed chunk row, whose "type" has no "/", covering `data.dt.size() + 1` seqs); every
  /// `sandbox/mode` event passing `validate_event`. A last line without its final newline (a
  /// torn append) is cut off, the file synced, and the repair reported by `tail_repair()`;
  /// that is the only change open ever makes. Any other damage throws LogError naming the
  /// line and what is wrong, and leaves the file byte-for-byte unchanged. Memory use is one
  /// offset per row plus a read buffer that grows only to hold the longest line.
  ///
  /// Before reading, and unless `options` opts in, throws LogError if the name is a symbolic
  /// link, if the file's owner is not the effective user, or if its group or other users may
  /// write it: whoever can rewrite a log can rewrite the mode it resumes with. Throws
  /// LogError if the file lock is not acquired within `options.lock_timeout`, and
  /// ConfigError for a negative timeout. Out of memory throws std::bad_alloc, with the file
  /// unchanged.
  [[nodiscard]] static SessionLog open(const std::filesystem::path& path, const SessionLogOptions& options = {}) {
    using namespace detail::slog;
    check_options(options);
    auto state = std::make_unique<LogState>(path, options);
    state->fd = open_file(path, O_RDWR | O_APPEND | (options.follow_symlink ? 0 : O_NOFOLLOW), 0, path);
    struct stat status {};
    if (::fstat(state->fd.get(), &status) != 0) {
      throw LogError(path, 0, with_errno("cannot stat", errno));
    }
    if (S_ISREG(status.st_mode)) { // anything else, load refuses as not a regular file
      check_trust(status, options, path);
    }
    const ExclusiveFileLock file_lock(state->fd.get(), path, options.lock_timeout);
    state->load();
    return SessionLog(std::move(state));
  }

  /// Returns the header's id, cwd and createdAt.
  [[nodiscard]] const SessionHeader& header() const noexcept { return state_->header; }
  /// Returns the whole header line as JSON, with the fields this library does not interpret
  /// (`delegationDepth`, `parentSession`, `seedLength`, ...) as they are in the file.
  [[nodiscard]] const nlohmann::json& header_json() const noexcept { return state_->header_json; }
  /// Returns the log's path as it was given to `create` or `open`.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return state_->path; }

  /// Returns the event rows this log has validated so far, parsed lazily (see EventView).
  [[nodiscard]] EventView events() const { return {state_.get(), state_->row_count()}; }

  /// Returns the mode of the last `sandbox/mode` event this log has seen, or nullopt; O(1).
  [[nodiscard]] std::optional<SandboxMode> sandbox_mode_override() const noexcept { return state_->mode(); }

  /// Returns the seq the next event will get.
  [[nodiscard]] std::uint64_t next_seq() const { return state_->next_seq(); }

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
  /// processes appended, writes the line with one write(2) on the O_APPEND descriptor and
  /// fdatasyncs it: when append returns, the event is on disk. A failed or short write (also
  /// EFBIG past a file-size limit: ignore SIGXFSZ, or that signal kills the process first) or
  /// a failed sync cuts the file back to its previous length and throws LogError. Everything
  /// append allocates is allocated before the write: std::bad_alloc reaches the caller with
  /// the file unchanged, and once the line is written append cannot fail.
  std::uint64_t append(std::string_view type, nlohmann::json data) {
    return state_->append(type, std::move(data), nlohmann::json::object());
  }

  /// Appends like `append(type, data)` with the members of `envelope` (such as
  /// `"surfaceOp":"append"`) written after `data`. Throws ConfigError, writing nothing, when
  /// `envelope` is not an object or names type, seq, time or data.
  std::uint64_t append(std::string_view type, nlohmann::json data, const nlohmann::json& envelope) {
    return state_->append(type, std::move(data), envelope);
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
