/// @file
/// Writes a JSON value as JavaScript's `JSON.stringify` writes what `JSON.parse` reads from it:
/// how DSH itself shows an offending value in a failure text.
#pragma once

#include <dsh/detail/slog/row_scanner.hpp>
#include <dsh/detail/text/json_text.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsh::detail::slog {

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

} // namespace dsh::detail::slog
