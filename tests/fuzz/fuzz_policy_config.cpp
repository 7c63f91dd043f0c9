// libFuzzer target: PolicyConfig::from_json on arbitrary bytes (parsed as JSON first), then an
// owner built from every configuration that is accepted, and its model text rendered.
// Properties: from_json either returns a configuration that PolicyOwner accepts or throws
// ConfigError; the text is one line that never ends the quoted root early.
#include <dsh/sandbox_policy.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const nlohmann::json json = nlohmann::json::parse(bytes, nullptr, false);
  if (json.is_discarded()) {
    return 0;
  }
  dsh::PolicyConfig config;
  try {
    config = dsh::PolicyConfig::from_json(json);
  } catch (const dsh::ConfigError&) {
    return 0;
  }
  dsh::PolicyOwner owner(config); // must not throw for an accepted configuration
  const auto enforced = owner.registerEnforcedFamily(dsh::Family::filesystem);
  for (const dsh::SandboxMode mode : dsh::SANDBOX_MODES) {
    const dsh::ResolvedPolicy policy = owner.resolve(mode);
    const std::string text =
        dsh::render_policy_context(policy, owner.enforcedFamilies(), owner.escalatableFamilies(), owner.hostLabel());
    if (text.find('\n') != std::string::npos || !text.starts_with("Current " + owner.hostLabel() + " file policy: ")) {
      std::abort();
    }
  }
  return 0;
}
