// Quick start: one owner for the whole host, backends registering the families they fence, and a
// session that switches its own mode. Prints what a tool call resolves to and what the model is told.
#include <dsh/sandbox_policy.hpp>

#include <exception>
#include <iostream>

int main() try {
  // The deployment's choice, made once: read-only unless a session or an approval says otherwise.
  dsh::PolicyConfig config;
  config.mode = dsh::SandboxMode::read_only;
  config.workspace_root = "/srv/agent";
  dsh::PolicyOwner owner{config};

  // Each enforcement backend registers the family it fences for as long as it runs. The bash
  // backend can also retry a denied command with wider, user-approved permissions.
  const dsh::Disposer write_tools = owner.registerEnforcedFamily(dsh::Family::filesystem);
  const dsh::Disposer bash = owner.registerEnforcedFamily(dsh::Family::bash);
  const dsh::Disposer bash_retry = owner.registerEscalatableFamily(dsh::Family::bash);

  // A session works in its own directory; its header never changes.
  dsh::Session session{dsh::SessionHeader{"quickstart", "/home/me/project", 1764480000000}};
  std::cout << owner.context(session) << "\n\n";

  // The user switches this session to workspace-write: one sandbox/mode event in its log.
  dsh::set_sandbox_mode(session, dsh::SandboxMode::workspace_write);
  const dsh::ResolvedPolicy policy = owner.resolve(session);
  std::cout << "mode: " << dsh::to_string(policy.mode) << " (from " << dsh::to_string(policy.mode_source) << ")\n"
            << "root: " << policy.workspace_root.string() << " (from " << dsh::to_string(policy.root_source) << ")\n"
            << owner.context(session) << '\n';
  return 0;
} catch (const std::exception& error) { // dsh::ConfigError, dsh::InvariantViolation, std::bad_alloc...
  std::cerr << "quickstart: " << error.what() << '\n';
  return 1;
}
