/// @file
/// The rules every event meets: the invariant on `sandbox/mode` events (docs/contract.md#the-invariant),
/// the mode an event switches to, and the envelope of a new event.
#pragma once

#include <dsh/detail/text/epoch_time.hpp>
#include <dsh/detail/text/expectation.hpp>
#include <dsh/detail/text/json_members.hpp>
#include <dsh/errors.hpp>
#include <dsh/vocabulary.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace dsh::detail {

/// Returns true if `event` is a JSON object whose `type` is the string `type`.
[[nodiscard]] inline bool has_type(const nlohmann::json& event, std::string_view type) {
  const std::string* found = string_member(event, "type");
  return found != nullptr && *found == type;
}

/// Returns `data.mode` of an event, or nullptr when the event has no such member.
[[nodiscard]] inline const nlohmann::json* mode_member(const nlohmann::json& event) {
  const nlohmann::json* data = member(event, "data");
  return data == nullptr ? nullptr : member(*data, "mode");
}

/// Returns nullopt if `event` keeps the invariant (every event that is not a `sandbox/mode`
/// object does); otherwise the exact failure text `validate_event` documents.
[[nodiscard]] inline std::optional<std::string> mode_event_failure(const nlohmann::json& event) {
  if (!has_type(event, SANDBOX_MODE_EVENT)) {
    return std::nullopt;
  }
  const nlohmann::json* mode = mode_member(event);
  if (mode == nullptr) {
    return std::string("sandbox/mode carries no mode");
  }
  if (mode->is_string() && parse_sandbox_mode(mode->get_ref<const std::string&>())) {
    return std::nullopt;
  }
  return "sandbox/mode carries unknown mode " + compact_json(*mode);
}

/// Throws InvariantViolation with `mode_event_failure`'s text when `event` is forged.
inline void require_valid_event(const nlohmann::json& event) {
  if (std::optional<std::string> failure = mode_event_failure(event)) {
    throw InvariantViolation(*failure);
  }
}

/// Returns the mode a valid `sandbox/mode` event switches to, nullopt for any other event;
/// throws InvariantViolation for a forged `sandbox/mode` event.
[[nodiscard]] inline std::optional<SandboxMode> switched_mode(const nlohmann::json& event) {
  if (!has_type(event, SANDBOX_MODE_EVENT)) {
    return std::nullopt;
  }
  require_valid_event(event);
  return parse_sandbox_mode(mode_member(event)->get_ref<const std::string&>());
}

/// Throws ConfigError unless `envelope` (extra top-level members of an event, such as
/// `"surfaceOp":"append"`) is an object naming none of type, seq, time and data.
// A template (the parameter is unused) so that a file which never appends instantiates none of
// it: nlohmann's object access costs every includer at -O2.
template <class Unused = void> void check_envelope(const nlohmann::json& envelope) {
  if (!envelope.is_object()) {
    throw ConfigError(expectation_message("event envelope", "a JSON object", envelope));
  }
  // The object's own map rather than items(): items() costs every includer an instantiation of
  // nlohmann's iteration proxy.
  for (const auto& [key, value] : envelope.get_ref<const nlohmann::json::object_t&>()) {
    if (key == "type" || key == "seq" || key == "time" || key == "data") {
      throw ConfigError(expectation_message("event envelope", "no member named type, seq, time or data", key));
    }
  }
}

/// Returns the DSH envelope `{"type","seq","time":<now>,"data"}` plus the members of
/// `envelope`; throws ConfigError when `check_envelope` refuses `envelope`.
template <class Unused = void> [[nodiscard]] nlohmann::json
make_event(std::string_view type, std::uint64_t seq, nlohmann::json data, const nlohmann::json& envelope) {
  check_envelope<Unused>(envelope);
  // Member by member rather than an initializer list and update(): the same object (the keys
  // are distinct), for fewer nlohmann instantiations in every includer.
  // The keys as std::string and the type as a string: the one key and value types the rest of
  // the library instantiates.
  nlohmann::json event = envelope;
  event[std::string("type")] = std::string(type);
  event[std::string("seq")] = seq;
  event[std::string("time")] = now_epoch_ms();
  event[std::string("data")] = std::move(data);
  return event;
}

} // namespace dsh::detail
