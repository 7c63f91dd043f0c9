// libFuzzer target: validate_event on arbitrary JSON events. The bytes are tried as a whole
// event and also as the mode of a sandbox/mode event (so invalid UTF-8 reaches the failure
// text). Properties: the result is nullopt or one of the two texts of docs/contract.md#the-invariant; check_event and
// the fold agree with it; the failure text is valid UTF-8; the library's own compact JSON (the
// value in that text) is byte for byte what dump() writes.
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

void check(const nlohmann::json& event) {
  if (dsh::detail::compact_json(event) != event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
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
