/// @file
/// The one family of JSON member lookups the library reads events, headers and rows with:
/// each returns nothing (rather than throwing) for a value that is not an object, a member
/// that is absent, or a member of another type, so a caller decides what a missing member means.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// Returns the member `key` of `object`, or nullptr when `object` is not a JSON object or has
/// no such member.
[[nodiscard]] inline const nlohmann::json* member(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) {
    return nullptr;
  }
  const auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

/// Returns the string member `key` of `object`, or nullptr when `member` finds none or it is
/// not a string.
[[nodiscard]] inline const std::string* string_member(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* found = member(object, key);
  return found != nullptr && found->is_string() ? &found->get_ref<const std::string&>() : nullptr;
}

/// Returns the integer member `key` of `object`, or nullopt when `member` finds none or it is
/// not an integer.
[[nodiscard]] inline std::optional<std::int64_t> integer_member(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* found = member(object, key);
  if (found == nullptr || !found->is_number_integer()) {
    return std::nullopt;
  }
  return found->get<std::int64_t>();
}

} // namespace dsh::detail
