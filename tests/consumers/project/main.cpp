// A downstream program, as a host would write it: one owner, one enforced family, a session that
// switches its mode, and the resolved policy and model text printed.
#include <dsh/sandbox_policy.hpp>

#include <exception>
#include <iostream>

#include <unistd.h>

int main() try {
  dsh::PolicyConfig config;
  config.workspace_root = "/consumer/fallback";
  dsh::PolicyOwner owner{config};
  const dsh::Disposer filesystem = owner.registerEnforcedFamily(dsh::Family::filesystem);

  dsh::Session session{dsh::SessionHeader{"consumer", "/consumer/workspace/./project/", 0}};
  dsh::set_sandbox_mode(session, dsh::SandboxMode::workspace_write);

  const dsh::ResolvedPolicy policy = owner.resolve(session);
  std::cout << "dsh_sandbox_policy " << DSH_SANDBOX_POLICY_VERSION << '\n'
            << "mode " << dsh::to_string(policy.mode) << " from " << dsh::to_string(policy.mode_source) << '\n'
            << "root " << policy.workspace_root.string() << " from " << dsh::to_string(policy.root_source) << '\n'
            << owner.context(session) << '\n';
  // Every way of consuming the package names the fence launcher it installs or builds.
#if defined(DSH_SANDBOX_POLICY_LAUNCHER)
  std::cout << "launcher " << (::access(DSH_SANDBOX_POLICY_LAUNCHER, X_OK) == 0 ? "installed" : "missing") << '\n';
#else
  std::cout << "launcher not configured\n";
#endif
  return 0;
} catch (const std::exception& error) {
  std::cerr << "consumer: " << error.what() << '\n';
  return 1;
}
