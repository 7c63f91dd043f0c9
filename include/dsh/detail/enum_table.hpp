/// @file
/// The string tables of the library's enums: each string is spelled once, in its table, and
/// every conversion in either direction reads the table.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace dsh::detail {

/// One row of an enum's string table.
template <class E> struct EnumEntry {
  E value;
  std::string_view name;
};

/// The string table of an enum: the only place its strings are spelled.
template <class E> struct EnumTable;

/// An enum with a string table.
template <class E>
concept TabledEnum = requires {
  EnumTable<E>::entries;
};

/// Returns the table's string for `value`, or "" for a value outside the enum.
template <TabledEnum E> [[nodiscard]] constexpr std::string_view enum_name(E value) noexcept {
  for (const auto& entry : EnumTable<E>::entries) {
    if (entry.value == value) {
      return entry.name;
    }
  }
  return {};
}

/// Returns the value whose string is exactly `text`, or nullopt.
template <TabledEnum E> [[nodiscard]] constexpr std::optional<E> enum_parse(std::string_view text) noexcept {
  for (const auto& entry : EnumTable<E>::entries) {
    if (entry.name == text) {
      return entry.value;
    }
  }
  return std::nullopt;
}

/// Returns every value of the enum, in table order.
template <TabledEnum E> [[nodiscard]] consteval auto enum_values() noexcept {
  std::array<E, EnumTable<E>::entries.size()> values{};
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = EnumTable<E>::entries[i].value;
  }
  return values;
}

} // namespace dsh::detail
