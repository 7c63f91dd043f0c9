/// @file
/// The one shape of the library's refusal messages: what was read, what was expected, what was
/// found, so a user can act on the message alone.
#pragma once

#include <dsh/detail/text/json_text.hpp>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// Returns `"<context>: expected <expected>; found "`, the part every refusal shares; the
/// caller appends what was found.
[[nodiscard]] inline std::string expectation_prefix(std::string_view context, std::string_view expected) {
  std::string message;
  message.append(context).append(": expected ").append(expected).append("; found ");
  return message;
}

/// Returns `"<context>: expected <expected>; found <found as compact JSON>"`.
[[nodiscard]] inline std::string expectation_message(std::string_view context, std::string_view expected,
                                                     const nlohmann::json& found) {
  return expectation_prefix(context, expected).append(compact_json(found));
}

/// Returns `expectation_message(context, expected, nlohmann::json(found))` without building the
/// JSON value: the string written as compact JSON writes it.
// Most refusals quote a string; converting it to a JSON value costs every includer nlohmann's
// converting constructor at -O2.
[[nodiscard]] inline std::string expectation_message(std::string_view context, std::string_view expected,
                                                     const std::string& found) {
  std::string message = expectation_prefix(context, expected);
  append_json_string(message, found);
  return message;
}

} // namespace dsh::detail
