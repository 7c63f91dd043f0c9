/// @file
/// The one shape of the library's refusal messages: what was read, what was expected, what was
/// found, so a user can act on the message alone.
#pragma once

#include <dsh/detail/text/json_text.hpp>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// Returns `"<context>: expected <expected>; found <found as compact JSON>"`.
[[nodiscard]] inline std::string expectation_message(std::string_view context, std::string_view expected,
                                                     const nlohmann::json& found) {
  std::string message;
  message.append(context).append(": expected ").append(expected).append("; found ").append(compact_json(found));
  return message;
}

} // namespace dsh::detail
