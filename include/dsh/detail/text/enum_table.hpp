/// @file
/// The string tables of the library's enums: each string is spelled once, in its table, and
/// every conversion in either direction reads the table.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
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

/// Returns the position of `value` in the table (0 for its first row), or the table's size for
/// a value outside the enum.
template <TabledEnum E> [[nodiscard]] constexpr std::size_t enum_index(E value) noexcept {
  std::size_t index = 0;
  while (index < EnumTable<E>::entries.size() && EnumTable<E>::entries[index].value != value) {
    ++index;
  }
  return index;
}

/// Returns the vocabulary of an enum for error messages: `a sandbox mode ("read-only", ...)`.
template <TabledEnum E> [[nodiscard]] std::string enum_vocabulary() {
  std::string text{EnumTable<E>::what};
  text += " (";
  bool first = true;
  for (const auto& entry : EnumTable<E>::entries) {
    text.append(first ? "\"" : ", \"").append(entry.name).append("\"");
    first = false;
  }
  text += ")";
  return text;
}

/// Appends the name of `value`, or `a family outside the vocabulary (7)` (with the enum's own
/// `what`) for a value outside the enum.
template <TabledEnum E> void append_enum_label(std::string& out, E value) {
  const std::string_view name = enum_name(value);
  if (name.empty()) {
    out.append(EnumTable<E>::what).append(" outside the vocabulary (");
    out.append(std::to_string(static_cast<int>(value))).append(")");
  } else {
    out.append(name);
  }
}

} // namespace dsh::detail
