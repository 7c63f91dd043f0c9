/// @file
/// The parts of the public session concepts (`SessionLike`, `EnvelopeAppendableSession`),
/// named so that clang-format 14 lays those out legibly: it reads `&& std::convertible_to<...,
/// const T&>` as comparisons, and indents a requires-expression that follows `&&` on its own
/// line less than that line.
#pragma once

#include <concepts>
#include <ranges>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// A constant reference to one JSON event.
using JsonEventRef = const nlohmann::json&;

/// A range of events whose elements bind to `const nlohmann::json&`.
template <class R>
concept JsonEventRange =
    std::ranges::input_range<R> && std::convertible_to<std::ranges::range_reference_t<R>, JsonEventRef>;

/// A session with `append(type, data, envelope)`.
template <class S>
concept EnvelopeAppendable = requires(S& session, std::string_view type, nlohmann::json data,
                                      const nlohmann::json& envelope) {
  session.append(type, std::move(data), envelope);
};

} // namespace dsh::detail
