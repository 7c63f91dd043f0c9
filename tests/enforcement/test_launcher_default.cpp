// The launcher a build compiles in (DSH_SANDBOX_POLICY_LAUNCHER) is judged as the host first saw
// it, as one named by FenceLauncher::use is (docs/enforcement.md#the-launcher). Without the
// namespace layer a fenced command can chmod a file its user owns: it opens the launcher to
// another local user, who writes it, and restores the mode at a later call, so that the next
// start would find the owner and mode it expects. This file compiles in a copy of the launcher
// that the test owns, in place of the build's own.
#undef DSH_SANDBOX_POLICY_LAUNCHER
#define DSH_SANDBOX_POLICY_LAUNCHER DSH_TEST_LAUNCHER_COPY

#include "support/hosts.hpp"
#include "support/landlock.hpp"

#include <dsh/fence_launcher.hpp>

#include <filesystem>
#include <string>

#include <sys/stat.h>

using dsh::FencedCommand;
using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// Spawns `echo` under `fence` and returns "refused: <why>" when the call could not use the
/// launcher (it forked instead), "used" when it did; the call is waited for.
std::string try_launcher(const PreparedFence& fence, const Lab& lab) {
  FencedCommand command(shell_argv("echo", {}));
  command.in_directory(lab.workspace());
  dsh::FencedChild child = command.spawn(fence);
  std::string text = child.launch_note().empty() ? "used" : "refused: " + child.launch_note();
  (void)child.wait();
  return text;
}

} // namespace

TEST_CASE("a compiled-in launcher refused at its first start stays refused once its mode is restored") {
  const std::filesystem::path copy = DSH_TEST_LAUNCHER_COPY;
  std::filesystem::create_directories(copy.parent_path());
  std::filesystem::copy_file(DSH_TEST_BUILT_LAUNCHER, copy, std::filesystem::copy_options::overwrite_existing);
  REQUIRE(::chmod(copy.c_str(), 0666) == 0); // as a command under the base fence can make it
  const Lab lab;
  const std::string named = "the launcher " + dsh::json_string_literal(copy.native());
  // A fresh host process: its launcher client is made at its first call.
  const std::string seen = as_host(false, [&] {
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only));
    std::string text = try_launcher(fence, lab) + "\n";
    // Another user wrote it meanwhile (not modelled: the content is the same); a later command
    // restores the mode, so owner and mode pass the check again.
    if (::chmod(copy.c_str(), 0755) != 0) {
      return std::string("chmod failed");
    }
    return text + try_launcher(fence, lab) + "\n";
  });
  CHECK(seen == "refused: " + named + " (mode 0666, owner uid " + std::to_string(::geteuid()) +
                    ") could be replaced by another user\nrefused: " + named +
                    " is not the file this process first used (replaced or changed since: device, inode, size or "
                    "times differ); restart the host to use the new one\n");
  // A host started afresh judges the file as it is now: the layer, not this pin, keeps a command
  // from re-moding it (docs/enforcement.md, "What it does not cover").
  const std::string fresh =
      as_host(false, [&] { return try_launcher(PreparedFence::prepare(lab.policy(SandboxMode::read_only)), lab); });
  CHECK(fresh == "used");
  std::filesystem::remove_all(copy.parent_path());
}
