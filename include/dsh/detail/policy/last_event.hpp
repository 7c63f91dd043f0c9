/// @file
/// The one walk that finds the last event of a log that matches.
#pragma once

#include <ranges>

namespace dsh::detail {

/// Walks `events` to find the last event that matches, calling `visit(event, newest_first)`.
/// On a bidirectional range it walks from the end (`newest_first` true) and stops at the
/// first event for which `visit` returns true, so its cost is the length of the log after
/// that event; otherwise it visits every event from the start (`newest_first` false, the
/// result ignored), where a later match replaces an earlier one. Throws what `visit` throws.
template <std::ranges::input_range R, class Visit> void walk_to_last(R&& events, Visit&& visit) {
  if constexpr (std::ranges::bidirectional_range<R>) {
    const auto first = std::ranges::begin(events);
    auto position = std::ranges::next(first, std::ranges::end(events));
    while (position != first) {
      --position;
      if (visit(*position, true)) {
        return;
      }
    }
  } else {
    for (auto&& event : events) {
      static_cast<void>(visit(event, false));
    }
  }
}

} // namespace dsh::detail
