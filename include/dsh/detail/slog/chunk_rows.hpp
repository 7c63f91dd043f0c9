/// @file
/// The packed chunk row of a session log (docs/contract.md#the-session-log): a row whose
/// `type` has no '/' (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`) carries `seq0`
/// and `data.dt` and stands for `data.dt.size() + 1` events; every other row is one event with
/// `seq`. The writer, the validator and the snapshot's seq count all decide by this one rule.
#pragma once

#include <string_view>

namespace dsh::detail {

/// Returns true if a row of type `type` is a packed chunk row: `type` holds no '/'.
[[nodiscard]] constexpr bool is_packed_chunk_type(std::string_view type) noexcept {
  return type.find('/') == std::string_view::npos;
}

} // namespace dsh::detail
