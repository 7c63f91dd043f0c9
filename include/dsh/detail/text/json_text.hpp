/// @file
/// UTF-8 and JSON text as the library writes it: string literals, the `sandbox:policy` root,
/// and values as JavaScript's `JSON.stringify` writes them (DSH's own text).
///
/// The library's one policy for invalid UTF-8 in what it writes: text it composes to be read
/// (the `sandbox:policy` text, `json_string_literal`, the JSON of a `ResolvedPolicy`, the values
/// quoted in error messages) replaces each maximal ill-formed subpart by U+FFFD, here and only
/// here, because such text must always be produced (a root is whatever bytes the filesystem
/// holds) and must never be able to close its quotes. What it stores (a session log line) is
/// never repaired: invalid UTF-8 there is refused before anything is written, because an
/// event must read back as it was given.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// Returns the length of the well-formed UTF-8 sequence at the start of `bytes`, or 0 when it
/// is ill-formed; `*consumed` receives the maximal subpart to replace by one U+FFFD (>= 1).
[[nodiscard]] constexpr std::size_t utf8_sequence(std::string_view bytes, std::size_t* consumed) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead < 0x80) {
    *consumed = 1;
    return 1;
  }
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    low = lead == 0xE0 ? 0xA0 : 0x80;
    high = lead == 0xED ? 0x9F : 0xBF;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    low = lead == 0xF0 ? 0x90 : 0x80;
    high = lead == 0xF4 ? 0x8F : 0xBF;
  } else {
    *consumed = 1;
    return 0;
  }
  for (std::size_t i = 1; i < length; ++i) {
    const bool in_range = i < bytes.size() && byte(i) >= (i == 1 ? low : 0x80) && byte(i) <= (i == 1 ? high : 0xBF);
    if (!in_range) {
      *consumed = i;
      return 0;
    }
  }
  *consumed = length;
  return length;
}

/// Returns true if `text` is well-formed UTF-8.
[[nodiscard]] constexpr bool is_utf8(std::string_view text) noexcept {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t consumed = 1;
    if (utf8_sequence(text.substr(i), &consumed) == 0) {
      return false;
    }
    i += consumed;
  }
  return true;
}

/// Appends the UTF-8 sequence `bytes` starts with, or U+FFFD in place of its maximal
/// ill-formed subpart; returns the number of bytes of `bytes` consumed (>= 1, `bytes` non-empty).
inline std::size_t append_utf8_or_replacement(std::string& out, std::string_view bytes) {
  std::size_t consumed = 1;
  const std::size_t valid = utf8_sequence(bytes, &consumed);
  out.append(valid > 0 ? bytes.substr(0, valid) : std::string_view("\xEF\xBF\xBD"));
  return consumed;
}

/// Returns `text` with each maximal ill-formed UTF-8 subpart replaced by U+FFFD.
[[nodiscard]] inline std::string repaired_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      out += text[i];
      ++i;
    } else {
      i += append_utf8_or_replacement(out, text.substr(i));
    }
  }
  return out;
}

/// Appends `text` escaped for the inside of a JSON string literal (without the quotes): `"`,
/// `\` and control characters escaped as JSON and JavaScript's `JSON.stringify` do; valid UTF-8
/// as it is; each maximal ill-formed subpart replaced by U+FFFD (the written-text policy of this
/// file's comment: every string the library writes for reading passes through here).
inline void append_json_string_body(std::string& out, std::string_view text) {
  constexpr std::string_view hex = "0123456789abcdef";
  const auto plain = [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte < 0x80 && c != '"' && c != '\\';
  };
  std::size_t i = 0;
  while (i < text.size()) {
    // Printable ASCII needs no escape: copy it a run at a time, not a character at a time.
    std::size_t run_end = i;
    while (run_end < text.size() && plain(text[run_end])) {
      ++run_end;
    }
    out.append(text.substr(i, run_end - i));
    i = run_end;
    if (i == text.size()) {
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t consumed = 1;
    if (c >= 0x80) {
      consumed = append_utf8_or_replacement(out, text.substr(i));
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else {
      out += "\\u00";
      out += hex[c >> 4U];
      out += hex[c & 0x0FU];
    }
    i += consumed;
  }
}

/// Appends `text` as a JSON string literal: in double quotes, escaped as
/// `append_json_string_body` escapes it. The result can never end the literal early or start a
/// new line.
inline void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  append_json_string_body(out, text);
  out += '"';
}

/// Appends `number` as JavaScript's `Number.prototype.toString` writes it (and so
/// `JSON.stringify`, except that a non-finite number is `null` there and here): the shortest
/// digits that read back as `number`, in plain notation for decimal exponents from -7 to 20
/// and as `d.ddde+N` / `d.ddde-N` beyond them; zero of either sign is `0`.
inline void append_js_number(std::string& out, double number) {
  if (!std::isfinite(number)) {
    out += "null";
    return;
  }
  if (number == 0) {
    out += '0';
    return;
  }
  if (number < 0) {
    out += '-';
    number = -number;
  }
  // std::to_chars without a precision gives the shortest round-trip digits (the closest to
  // the value when several are as short), as JavaScript chooses them: "d.ddde+XX".
  std::array<char, 32> text; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  const char* const end =
      std::to_chars(text.data(), text.data() + text.size(), number, std::chars_format::scientific).ptr;
  std::array<char, 20> digits{};
  std::size_t count = 0;
  const char* p = text.data();
  for (; p < end && *p != 'e'; ++p) {
    if (*p != '.') {
      digits[count++] = *p;
    }
  }
  const bool negative_exponent = p + 1 < end && p[1] == '-';
  int exponent = 0;
  for (p += 2; p < end; ++p) {
    exponent = exponent * 10 + (*p - '0');
  }
  // The value is 0.<digits> * 10^point: JavaScript's n.
  const int point = (negative_exponent ? -exponent : exponent) + 1;
  const auto k = static_cast<int>(count);
  const std::string_view all(digits.data(), count);
  if (k <= point && point <= 21) {
    out.append(all).append(static_cast<std::size_t>(point - k), '0');
  } else if (0 < point && point <= 21) {
    out.append(all.substr(0, static_cast<std::size_t>(point)))
        .append(".")
        .append(all.substr(static_cast<std::size_t>(point)));
  } else if (-6 < point && point <= 0) {
    out.append("0.").append(static_cast<std::size_t>(-point), '0').append(all);
  } else {
    out += all.front();
    if (k > 1) {
      out.append(".").append(all.substr(1));
    }
    out += point - 1 < 0 ? "e-" : "e+";
    out += std::to_string(point - 1 < 0 ? 1 - point : point - 1);
  }
}

/// Returns the value of `key` if it is a canonical array index ("0", or digits without a
/// leading zero, below 2^32 - 1), whose members JavaScript keeps first in ascending order.
[[nodiscard]] constexpr std::optional<std::uint32_t> array_index(std::string_view key) noexcept {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key.front() == '0')) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  for (const char c : key) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (value >= 0xFFFF'FFFFULL) {
    return std::nullopt;
  }
  return static_cast<std::uint32_t>(value);
}

/// Appends `value` as `compact_json` returns it.
// Written out rather than calling dump(): every translation unit that can throw
// InvariantViolation or ConfigError reaches this, and nlohmann's serializer costs such a unit
// over a tenth of its compile time at -O2; and dump() writes numbers and orders keys as C++
// does, where DSH's text is JavaScript's.
inline void append_compact_json(std::string& out, const nlohmann::json& value) {
  using Type = nlohmann::json::value_t;
  const char* separator = "";
  switch (value.type()) {
  case Type::null:
    out += "null";
    break;
  case Type::boolean:
    out += value.get_ref<const nlohmann::json::boolean_t&>() ? "true" : "false";
    break;
  case Type::number_integer: // JavaScript reads every number as a double
    append_js_number(out, static_cast<double>(value.get_ref<const nlohmann::json::number_integer_t&>()));
    break;
  case Type::number_unsigned:
    append_js_number(out, static_cast<double>(value.get_ref<const nlohmann::json::number_unsigned_t&>()));
    break;
  case Type::number_float:
    append_js_number(out, value.get_ref<const nlohmann::json::number_float_t&>());
    break;
  case Type::string:
    append_json_string(out, value.get_ref<const std::string&>());
    break;
  case Type::array:
    out += '[';
    for (const nlohmann::json& element : value.get_ref<const nlohmann::json::array_t&>()) {
      out += std::exchange(separator, ",");
      append_compact_json(out, element);
    }
    out += ']';
    break;
  case Type::object: {
    const auto& object = value.get_ref<const nlohmann::json::object_t&>();
    // The tree keeps its keys sorted as strings ("10" before "9"); JavaScript puts array
    // indices first, in numeric order. Canonical indices of one length sort as numbers do, so
    // they are written one length at a time (at most 10 passes, none without an index).
    std::size_t longest_index = 0;
    for (const auto& member : object) {
      if (array_index(member.first)) {
        longest_index = std::max(longest_index, member.first.size());
      }
    }
    const auto append_member = [&](const nlohmann::json::object_t::value_type& member) {
      out += std::exchange(separator, ",");
      append_json_string(out, member.first);
      out += ':';
      append_compact_json(out, member.second);
    };
    out += '{';
    for (std::size_t length = 1; length <= longest_index; ++length) {
      for (const auto& member : object) {
        if (member.first.size() == length && array_index(member.first)) {
          append_member(member);
        }
      }
    }
    for (const auto& member : object) {
      if (!array_index(member.first)) {
        append_member(member);
      }
    }
    out += '}';
    break;
  }
  case Type::binary:
    out += R"({"bytes":[)";
    for (const std::uint8_t byte : value.get_binary()) {
      out += std::exchange(separator, ",");
      out += std::to_string(byte);
    }
    out += R"(],"subtype":)";
    out += value.get_binary().has_subtype() ? std::to_string(value.get_binary().subtype()) : "null";
    out += '}';
    break;
  case Type::discarded:
    out += "<discarded>";
    break;
  }
}

/// Returns `value` as JavaScript's `JSON.stringify` writes the same value (DSH's own text):
/// strings escaped as `dump()` escapes them, invalid UTF-8 replaced by U+FFFD; every number as
/// a JavaScript number (a double) in its shortest round-trip form (`1.0` as `1`, `-0.0` as `0`,
/// `1e21` as `1e+21`, an integer beyond 2^53 rounded to a double, a non-finite one as `null`);
/// object members with array-index keys (`"0"`, `"42"`, below 2^32 - 1) first in ascending
/// numeric order, then the others in the tree's (sorted) order.
[[nodiscard]] inline std::string compact_json(const nlohmann::json& value) {
  std::string out;
  append_compact_json(out, value);
  return out;
}

} // namespace dsh::detail
