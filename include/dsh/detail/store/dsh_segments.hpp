/// @file
/// DSH's path segments: the UTF-16 code units of a session id or cwd (JavaScript's view of the
/// string), which of them DSH keeps as they are, and its `~XXXX` escape for the others.
#pragma once

#include <dsh/policy_types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsh::detail::store {

/// Returns true if DSH keeps the UTF-16 code unit `unit` as it is in a path segment.
[[nodiscard]] constexpr bool safe_unit(std::uint32_t unit) noexcept {
  return (unit >= 'A' && unit <= 'Z') || (unit >= 'a' && unit <= 'z') || (unit >= '0' && unit <= '9') || unit == '.' ||
         unit == '_' || unit == '-';
}

/// Appends `~XXXX`, the code unit in four upper-case hex digits: DSH's escape.
inline void append_unit_escape(std::string& out, std::uint32_t unit) {
  static constexpr std::string_view hex = "0123456789ABCDEF";
  out += '~';
  for (unsigned shift = 16; shift > 0; shift -= 4) {
    out += hex[(unit >> (shift - 4)) & 0xFU];
  }
}

/// Calls `on_unit(unit)` for each UTF-16 code unit of the UTF-8 text `text` (JavaScript's view
/// of the same string); throws ConfigError naming `what` unless `text` is non-empty UTF-8.
template <class OnUnit> void for_each_utf16_unit(std::string_view text, std::string_view what, OnUnit&& on_unit) {
  if (text.empty() || !is_utf8(text)) {
    throw ConfigError(expectation_message(what, "a non-empty UTF-8 string", std::string(text)));
  }
  for (std::size_t i = 0; i < text.size();) {
    std::size_t length = 1;
    static_cast<void>(utf8_sequence(text.substr(i), &length));
    const auto byte = [&](std::size_t k) {
      return static_cast<std::uint32_t>(static_cast<unsigned char>(text[i + k]));
    };
    std::uint32_t code = length == 1   ? byte(0)
                         : length == 2 ? ((byte(0) & 0x1FU) << 6U) | (byte(1) & 0x3FU)
                         : length == 3 ? ((byte(0) & 0x0FU) << 12U) | ((byte(1) & 0x3FU) << 6U) | (byte(2) & 0x3FU)
                                       : ((byte(0) & 0x07U) << 18U) | ((byte(1) & 0x3FU) << 12U) |
                                             ((byte(2) & 0x3FU) << 6U) | (byte(3) & 0x3FU);
    if (code >= 0x10000) {
      code -= 0x10000;
      on_unit(0xD800U + (code >> 10U));
      on_unit(0xDC00U + (code & 0x3FFU));
    } else {
      on_unit(code);
    }
    i += length;
  }
}

} // namespace dsh::detail::store
