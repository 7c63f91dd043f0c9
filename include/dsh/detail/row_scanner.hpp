/// @file
/// The validating scanner of one session-log row: RFC 8259 grammar and UTF-8 checked in one
/// pass, and only the members validation needs extracted (docs/session-log.md#validation).
#pragma once

#include <dsh/detail/json_text.hpp>

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

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

/// A validating single-pass scanner for one row: checks that the row is exactly one JSON
/// value (RFC 8259 grammar, strings of well-formed UTF-8, any `\u` escape including a lone
/// UTF-16 surrogate, nesting at most MAX_NESTING) and extracts the fields of `RowFacts`
/// without building a tree. A duplicated key among the extracted ones is an error, because
/// JSON leaves its meaning open. Everything it accepts, nlohmann_json parses once
/// `replace_lone_surrogates` has rewritten the lone surrogate escapes nlohmann_json refuses.
class RowScanner {
public:
  explicit RowScanner(std::string_view row) noexcept
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
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) {
      ++p_;
    }
  }

  bool value(Slot slot, std::size_t depth) {
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

  /// True if none of the 8 bytes is '"', '\\', a control character or non-ASCII. It may say
  /// false for plain bytes that follow a special one: the exact byte loop decides then.
  static bool plain_bytes(std::uint64_t word) noexcept {
    constexpr std::uint64_t ones = 0x0101010101010101ULL;
    constexpr std::uint64_t highs = 0x8080808080808080ULL;
    const std::uint64_t quote = word ^ (ones * '"');
    const std::uint64_t backslash = word ^ (ones * '\\');
    const std::uint64_t special =
        ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | (word - ones * 0x20) | word;
    return (special & highs) == 0;
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

  bool utf8() noexcept {
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
      std::uint64_t word = 0;
      while (end_ - p_ >= 8 && (std::memcpy(&word, p_, 8), plain_bytes(word))) {
        p_ += 8;
      }
      if (p_ == end_) {
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
      } else if (c < 0x80) {
        ++p_;
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
    std::string decoded;
    std::string_view name = token.substr(1, token.size() - 2);
    if (escaped_) {
      decoded = decode_string_token(token);
      name = decoded;
    }
    if (slot == Slot::data) {
      return name == "dt" ? &facts_->dt : nullptr;
    }
    if (name == "type") {
      return &facts_->type;
    }
    if (name == "seq") {
      return &facts_->seq;
    }
    if (name == "seq0") {
      return &facts_->seq0;
    }
    return name == "data" ? &data_ : nullptr;
  }

  /// Scans the value of a member; extracts it when `field` is one of the extracted members.
  bool member_value(Field* field, std::size_t depth) {
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
      if (p_ == end_ || *p_ != '"') {
        return fail("expected a string key");
      }
      const char* key = p_;
      if (!string()) {
        return false;
      }
      Field* field = member(slot, std::string_view(key, static_cast<std::size_t>(p_ - key)));
      if (field != nullptr && std::exchange(field->present, true)) {
        p_ = key;
        return fail("duplicate key");
      }
      skip_space();
      if (p_ == end_ || *p_ != ':') {
        return fail("expected ':'");
      }
      ++p_;
      skip_space();
      if (!member_value(field, depth)) {
        return false;
      }
      skip_space();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_space();
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        return true;
      }
      return fail("expected ',' or '}'");
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
      skip_space();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_space();
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        return true;
      }
      return fail("expected ',' or ']'");
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

} // namespace dsh::detail::slog
