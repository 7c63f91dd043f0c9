// libFuzzer target: validate_event on arbitrary JSON events. The bytes are tried as a whole
// event and also as the mode of a sandbox/mode event (so invalid UTF-8 reaches the failure
// text). Properties: the result is nullopt or one of the two texts of docs/contract.md#the-invariant; check_event and
// the fold agree with it; the failure text is valid UTF-8; the library's own compact JSON (the
// value in that text, written as JavaScript's JSON.stringify writes it) reads back as the same
// value with every number a double and invalid UTF-8 replaced.
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

/// Returns `value` as JavaScript holds it: every number a double (a non-finite one null, as
/// JSON.stringify writes it), every string with invalid UTF-8 replaced by U+FFFD.
nlohmann::json as_javascript(const nlohmann::json& value) {
  if (value.is_number()) {
    const double number = value.get<double>();
    return std::isfinite(number) ? nlohmann::json(number) : nlohmann::json();
  }
  if (value.is_string()) {
    return dsh::detail::repaired_utf8(value.get_ref<const std::string&>());
  }
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const nlohmann::json& element : value) {
      out.push_back(as_javascript(element));
    }
    return out;
  }
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, member] : value.get_ref<const nlohmann::json::object_t&>()) {
      out[dsh::detail::repaired_utf8(key)] = as_javascript(member);
    }
    return out;
  }
  return value;
}

void check(const nlohmann::json& event) {
  if (nlohmann::json::parse(dsh::detail::compact_json(event)) != as_javascript(event)) {
    std::abort();
  }
  const std::optional<std::string> failure = dsh::validate_event(event);
  bool threw = false;
  try {
    dsh::check_event(event);
  } catch (const dsh::InvariantViolation& violation) {
    threw = true;
    if (!failure || *failure != violation.what()) {
      std::abort();
    }
  }
  if (threw != failure.has_value()) {
    std::abort();
  }
  if (failure) {
    const bool known =
        *failure == "sandbox/mode carries no mode" || failure->starts_with("sandbox/mode carries unknown mode ");
    // The text must itself be valid UTF-8: dumping it as JSON throws otherwise.
    if (!known || nlohmann::json(*failure).dump().empty()) {
      std::abort();
    }
    return;
  }
  // A valid event folds to its mode (sandbox/mode) or to nothing (any other event).
  const std::array<nlohmann::json, 1> events{event};
  const std::optional<dsh::SandboxMode> mode = dsh::effective_mode(events);
  if (mode.has_value() != dsh::detail::has_type(event, dsh::SANDBOX_MODE_EVENT)) {
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const nlohmann::json event = nlohmann::json::parse(bytes, nullptr, false);
  if (!event.is_discarded()) {
    check(event);
    check(nlohmann::json{{"type", "sandbox/mode"}, {"seq", 0}, {"data", {{"mode", event}}}});
  }
  check(nlohmann::json{{"type", "sandbox/mode"}, {"data", {{"mode", std::string(bytes)}}}});
  return 0;
}
