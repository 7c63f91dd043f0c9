// Compiled twice, as odr_probe_a and odr_probe_b: two translation units that include every public
// header and instantiate the same templates, linked into one program.
#include "odr_probe.hpp"

#include "all_public_headers.hpp"

namespace dsh::test {

OdrProbe DSH_ODR_PROBE() {
  PolicyConfig config;
  config.mode = SandboxMode::workspace_write;
  config.workspace_root = "/odr/probe/../root";
  PolicyOwner owner{config};
  const Disposer filesystem = owner.registerEnforcedFamily(Family::filesystem);
  const Session session{SessionHeader{"odr", std::nullopt, 0}};

  OdrProbe probe;
  probe.policy_context_name = &SANDBOX_POLICY_CONTEXT;
  probe.sandbox_modes = &SANDBOX_MODES;
  probe.families = &FAMILIES;
  probe.canonicalizer = &canonical_path;
  probe.json_quoter = &json_string_literal;
  probe.context = owner.context(session);
  return probe;
}

} // namespace dsh::test
