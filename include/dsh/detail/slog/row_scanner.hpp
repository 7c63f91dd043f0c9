/// @file
/// The validating scanner of one session-log row: RFC 8259 grammar and UTF-8 checked in one
/// pass, and only the members validation needs extracted (docs/session-log.md#validation).
#pragma once

#include <dsh/detail/text/json_text.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <optional>
#include <utility>
#endif

namespace dsh::detail::slog {

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

} // namespace dsh::detail::slog
