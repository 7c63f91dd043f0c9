// The header as it compiles where there is no Landlock (other systems, or a build that
// defines DSH_SANDBOX_POLICY_NO_LANDLOCK): a clear "unsupported" result that fails closed.
// This executable is its own program, so the other definition never meets this one.
#define DSH_SANDBOX_POLICY_NO_LANDLOCK 1
#include <dsh/landlock.hpp>

#include "support/landlock.hpp"

#include <dsh/sandbox_policy.hpp>

#include <string>

using dsh::PreparedFence;
using dsh::SandboxMode;

static_assert(DSH_SANDBOX_POLICY_HAS_LANDLOCK == 0);

namespace {

const std::string reason =
#if defined(__linux__)
    "this build has Landlock disabled (DSH_SANDBOX_POLICY_NO_LANDLOCK)";
#else
    "Landlock exists only on Linux; this system has no equivalent fence";
#endif

} // namespace

TEST_CASE("unsupported: the ABI is 0 and a fence fails closed") {
  const dsh::test::Lab lab;
  CHECK(dsh::landlock_abi() == 0);
  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    try {
      (void)dsh::test::prepare_base(lab.policy(mode));
      FAIL("prepare did not throw");
    } catch (const dsh::LandlockError& error) {
      CHECK(std::string(error.what()) == "Landlock fence for " + std::string(dsh::to_string(mode)) + ": " + reason +
                                             "; refusing to run unfenced (set FenceOptions::allow_unfenced to "
                                             "run without the fence)");
    }
  }
}

TEST_CASE("unsupported: running unfenced must be asked for, and then says so") {
  const dsh::test::Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only), {.allow_unfenced = true});
  CHECK(fence.report().status == dsh::FenceStatus::unfenced);
  // The system-call filter does not need Landlock: it holds in an unfenced call too.
  const std::string filter = dsh::detail::holds_sys_admin() ? "; syscall filter: on, own IPC namespace"
                                                            : "; syscall filter: on, System V IPC refused";
  CHECK(fence.report().describe() == "unfenced read-only" + filter + "; NOT FENCED: " + reason);
  CHECK(dsh::test::fenced(fence, [] { return 0; }) == 0);
  const dsh::test::Captured run =
      dsh::test::bash(fence, "echo unfenced > written.txt && cat written.txt", lab.workspace(), lab.base());
  CHECK(run.exit_code == 0);
  CHECK(run.out == "unfenced\n");
}

TEST_CASE("unsupported: danger-full-access needs no fence at all") {
  const dsh::test::Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
  CHECK(fence.report().status == dsh::FenceStatus::unrestricted);
  CHECK(fence.report().describe() == "unrestricted danger-full-access");
}
