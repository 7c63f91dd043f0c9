/// @file
/// The clock of new events: their `time` member, in epoch milliseconds.
#pragma once

#include <cstdint>
#include <ctime>

namespace dsh::detail {

/// Returns the current wall-clock time in epoch milliseconds, the `time` of new events.
[[nodiscard]] inline std::int64_t now_epoch_ms() noexcept {
  // <ctime> rather than <chrono>: C++20's <chrono> (calendars, time zones) is a sizeable parse
  // for every includer, for this one call.
  std::timespec now{};
  std::timespec_get(&now, TIME_UTC);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

} // namespace dsh::detail
