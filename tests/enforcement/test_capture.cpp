// FencedCommand::capture on real processes and directories: the status and both streams exactly,
// the cut at max_bytes, stdin, a fence refusal reported as denied with its exact path, ordinary
// failures (a missing file, a file the permissions refuse) never reported as one; the stderr
// dialects a denial is read from, and the retry advice built from the owner's escalation choices.
#include "support/catch.hpp"
#include "support/hosts.hpp"
#include "support/landlock.hpp"

#include <dsh/command_output.hpp>
#include <dsh/denials.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using dsh::CaptureOptions;
using dsh::CommandOutput;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// `bash -c script` (C locale, `variables` in its environment) captured under `fence` in `cwd`.
CommandOutput captured(const dsh::PreparedFence& fence, const std::string& script, const std::filesystem::path& cwd,
                       const std::vector<std::string>& variables = {}, CaptureOptions options = {}) {
  dsh::FencedCommand command(shell_argv(script, variables));
  command.in_directory(cwd);
  return command.capture(fence, std::move(options));
}

/// The paths as strings, for exact comparison.
std::vector<std::string> strings(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> texts;
  for (const std::filesystem::path& path : paths) {
    texts.push_back(path.native());
  }
  return texts;
}

/// "<status> <denied> <paths...> | <err>": one captured call, for a host run in a forked process.
std::string summary(const CommandOutput& output) {
  std::string text = std::to_string(output.status) + (output.denied ? " denied" : " not denied");
  for (const std::filesystem::path& path : output.denied_paths) {
    text += " " + path.native();
  }
  return text + " | " + output.err;
}

/// Runs `check` with the base fence of each fenced mode over `lab`.
void over_fenced_modes(const Lab& lab, const std::function<void(const dsh::PreparedFence&)>& check) {
  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    CAPTURE(dsh::to_string(mode));
    check(dsh::test::prepare_base(lab.policy(mode)));
  }
}

} // namespace

TEST_CASE("capture returns the status, stdout and stderr exactly") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_fenced_modes(lab, [&](const dsh::PreparedFence& fence) {
    const CommandOutput output = captured(fence, "printf 'one\\ntwo'; printf 'warn\\n' >&2; exit 3", lab.workspace());
    CHECK(output.status == 3);
    CHECK(output.out == "one\ntwo");
    CHECK(output.err == "warn\n");
    CHECK_FALSE(output.truncated);
    CHECK_FALSE(output.denied);
    CHECK(output.denied_paths.empty());
  });
}

TEST_CASE("capture cuts each stream at max_bytes and sets truncated; output of exactly max_bytes is whole") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  CaptureOptions options;
  options.max_bytes = 5;
  const CommandOutput cut = captured(fence, "printf 'abcdefgh'; printf 'xyz' >&2", lab.workspace(), {}, options);
  CHECK(cut.status == 0);
  CHECK(cut.out == "abcde");
  CHECK(cut.err == "xyz");
  CHECK(cut.truncated);
  const CommandOutput cut_err = captured(fence, "printf 'ab'; printf 'uvwxyz' >&2", lab.workspace(), {}, options);
  CHECK(cut_err.out == "ab");
  CHECK(cut_err.err == "uvwxy");
  CHECK(cut_err.truncated);
  const CommandOutput whole = captured(fence, "printf 'abcde'; printf '12345' >&2", lab.workspace(), {}, options);
  CHECK(whole.out == "abcde");
  CHECK(whole.err == "12345");
  CHECK_FALSE(whole.truncated);
}

TEST_CASE("capture: a command writing far more than max_bytes on both streams still finishes") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  CaptureOptions options;
  options.max_bytes = 16;
  // 8 MiB on each stream, far beyond a pipe's buffer: the rest is read and dropped.
  const CommandOutput output =
      captured(fence, "head -c 8388608 /dev/zero | tr '\\0' o; head -c 8388608 /dev/zero | tr '\\0' e >&2; exit 7",
               lab.workspace(), {}, options);
  CHECK(output.status == 7);
  CHECK(output.out == std::string(16, 'o'));
  CHECK(output.err == std::string(16, 'e'));
  CHECK(output.truncated);
  CHECK_FALSE(output.denied);
}

TEST_CASE("capture delivers stdin_bytes, while the command writes, and /dev/null without them") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  CaptureOptions options;
  options.max_bytes = std::size_t{1} << 22;
  for (std::size_t i = 0; options.stdin_bytes.size() < 1000000; ++i) {
    options.stdin_bytes += "line " + std::to_string(i) + "\n";
  }
  // cat echoes as it reads: the pipes fill both ways unless the host writes and reads at once.
  const CommandOutput echoed = captured(fence, "cat; printf done >&2", lab.workspace(), {}, options);
  CHECK(echoed.status == 0);
  CHECK(echoed.out == options.stdin_bytes);
  CHECK(echoed.err == "done");
  CHECK_FALSE(echoed.truncated);
  // A command that never reads its stdin ends the call all the same.
  const CommandOutput ignored = captured(fence, "exec 0<&-; printf ok", lab.workspace(), {}, options);
  CHECK(ignored.status == 0);
  CHECK(ignored.out == "ok");
  const CommandOutput none = captured(fence, "wc -c", lab.workspace());
  CHECK(none.out == "0\n");
}

TEST_CASE("capture reports a write the fence refused as denied, with the exact path") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::vector<std::string> variables{"OUT=" + lab.outside().native()};
  SECTION("workspace-write: writes outside the workspace") {
    const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
    const CommandOutput touched = captured(fence, "touch inside; touch \"$OUT/x\"", lab.workspace(), variables);
    CHECK(touched.status == 1);
    CHECK(touched.err == "touch: cannot touch '" + lab.outside().native() + "/x': Permission denied\n");
    CHECK(touched.denied);
    CHECK(strings(touched.denied_paths) == std::vector<std::string>{lab.outside().native() + "/x"});
    CHECK(read_file(lab.workspace() / "inside").empty());
    CHECK_FALSE(dsh::test::exists_nofollow(lab.outside() / "x"));
    // bash's own redirection, and two refusals: both paths, in order, once each.
    const CommandOutput redirected =
        captured(fence, "echo a > \"$OUT/y\"; mkdir \"$OUT/d\"; echo b > \"$OUT/y\"", lab.workspace(), variables);
    CHECK(redirected.status == 1);
    CHECK(redirected.denied);
    CHECK(strings(redirected.denied_paths) ==
          std::vector<std::string>{lab.outside().native() + "/y", lab.outside().native() + "/d"});
  }
  SECTION("read-only: any write, relative paths taken from the command's directory") {
    write_file(lab.workspace() / "kept.txt", "kept\n");
    const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
    const CommandOutput output = captured(fence, "echo hi > new.txt; rm kept.txt", lab.workspace());
    CHECK(output.status == 1);
    CHECK(output.err == "bash: line 1: new.txt: Permission denied\nrm: cannot remove 'kept.txt': Permission denied\n");
    CHECK(output.denied);
    CHECK(strings(output.denied_paths) ==
          std::vector<std::string>{lab.workspace().native() + "/new.txt", lab.workspace().native() + "/kept.txt"});
    CHECK(read_file(lab.workspace() / "kept.txt") == "kept\n");
  }
  SECTION("read-only with the namespace layer: its read-only view (EROFS) or Landlock (EACCES)") {
    const dsh::PreparedFence fence = dsh::PreparedFence::prepare(lab.policy(SandboxMode::read_only));
    const CommandOutput output = captured(fence, "touch made", lab.workspace());
    CHECK(output.status == 1);
    CHECK(output.denied);
    CHECK(strings(output.denied_paths) == std::vector<std::string>{lab.workspace().native() + "/made"});
  }
}

TEST_CASE("capture never reports an ordinary failure as denied") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  over_fenced_modes(lab, [&](const dsh::PreparedFence& fence) {
    const CommandOutput listed = captured(fence, "ls missing-dir", lab.workspace());
    CHECK(listed.status == 2);
    CHECK(listed.err == "ls: cannot access 'missing-dir': No such file or directory\n");
    CHECK_FALSE(listed.denied);
    const CommandOutput read = captured(fence, "cat missing.txt", lab.workspace());
    CHECK(read.status == 1);
    CHECK(read.err == "cat: missing.txt: No such file or directory\n");
    CHECK_FALSE(read.denied);
    // A refusal that is not about a file's write (the kernel refuses a signal to pid 1).
    const CommandOutput killed = captured(fence, "kill -0 1", lab.workspace());
    CHECK(killed.status == 1);
    CHECK_FALSE(killed.denied);
  });
}

TEST_CASE("capture: a file the permissions refuse is not a fence denial (an unprivileged host)") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::test::open_lab_to_nobody(lab);
  const std::filesystem::path secret = lab.workspace() / "secret";
  write_file(secret, "secret\n");
  dsh::test::hand_to_nobody(secret);
  REQUIRE(::chmod(secret.c_str(), 0) == 0);
  const std::string results = dsh::test::as_host(true, [&]() -> std::string {
    std::string text;
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
      text += std::string(dsh::to_string(mode)) + " read: " + summary(captured(fence, "cat secret", lab.workspace()));
      text +=
          std::string(dsh::to_string(mode)) + " write: " + summary(captured(fence, "echo x > secret", lab.workspace()));
      // The unfenced control: the same write is refused without any fence.
      text += std::string(dsh::to_string(mode)) +
              " control: " + std::to_string(dsh::test::control_shell("echo x > secret", lab.workspace())) + "\n";
    }
    return text;
  });
  CHECK(results == "read-only read: 1 not denied | cat: secret: Permission denied\n"
                   "read-only write: 1 not denied | bash: line 1: secret: Permission denied\n"
                   "read-only control: 1\n"
                   "workspace-write read: 1 not denied | cat: secret: Permission denied\n"
                   "workspace-write write: 1 not denied | bash: line 1: secret: Permission denied\n"
                   "workspace-write control: 1\n");
  CHECK(read_file(secret) == "secret\n"); // root reads it; nothing was written
}

TEST_CASE("capture: danger-full-access refuses nothing, and a redirected stream cannot be captured") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(lab.policy(SandboxMode::danger_full_access));
  CHECK_FALSE(fence.denial_scanner(lab.workspace()).refuses(lab.outside() / "x"));
  const dsh::PreparedFence read_only = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  CHECK(read_only.denial_scanner(lab.workspace()).refuses(lab.outside() / "x"));
  CHECK_FALSE(read_only.denial_scanner(lab.workspace()).refuses("/proc/self/comm"));
  CHECK_FALSE(read_only.denial_scanner(lab.workspace()).refuses(lab.outside() / "missing-dir" / "x"));
  dsh::FencedCommand command({"true"});
  command.redirect(STDOUT_FILENO, STDERR_FILENO);
  CHECK_THROWS_AS(command.capture(read_only), dsh::ConfigError);
}

TEST_CASE("denial scanner: a line quoting thousands of names costs the host the first 16 of them") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  // 16 names the policy allows, then one it refuses: the refused one is past the bound.
  std::string line = "mv: cannot move";
  for (int i = 0; i < 16; ++i) {
    line += " '" + (lab.workspace() / ("in" + std::to_string(i))).native() + "'";
  }
  line += " '" + (lab.outside() / "past-the-bound").native() + "': Permission denied\n";
  dsh::DenialScanner scanner = fence.denial_scanner(lab.workspace());
  scanner.feed(line);
  scanner.finish();
  CHECK_FALSE(scanner.denied());
  // The same refused name among the first 16 is found.
  dsh::DenialScanner within = fence.denial_scanner(lab.workspace());
  within.feed("mv: cannot move 'a' to '" + (lab.outside() / "within").native() + "': Permission denied\n");
  within.finish();
  CHECK(strings(within.paths()) == std::vector<std::string>{(lab.outside() / "within").native()});
}

TEST_CASE("denial lines: the stderr dialects and the paths they name") {
  using dsh::detail::denial_paths_in;
  using Paths = std::vector<std::string>;
  CHECK(denial_paths_in("touch: cannot touch '/o/x': Permission denied", false) == Paths{"/o/x"});
  CHECK(denial_paths_in("mkdir: cannot create directory \xE2\x80\x98/o/d\xE2\x80\x99: Read-only file system", false) ==
        Paths{"/o/d"});
  CHECK(denial_paths_in("mv: cannot move 'a' to '/o/b': Permission denied", false) == Paths{"a", "/o/b"});
  CHECK(denial_paths_in("bash: line 1: my file: Permission denied", false) == Paths{"my file"});
  CHECK(denial_paths_in("bash: /o/y: Permission denied", false) == Paths{"/o/y"});
  CHECK(denial_paths_in("sh: 1: cannot create /o/z: Permission denied", false) == Paths{"/o/z"});
  CHECK(denial_paths_in("error: could not lock config file .git/config: Read-only file system", false) ==
        Paths{".git/config"});
  CHECK(denial_paths_in("PermissionError: [Errno 13] Permission denied: '/o/p'", false) == Paths{"/o/p"});
  CHECK(denial_paths_in("tee: out.txt: Operation not permitted", false) == Paths{"out.txt"});
  CHECK(denial_paths_in("ln: failed to create hard link '/o/l' => 'a': Invalid cross-device link", false) ==
        Paths{"/o/l", "a"});
  // No refusal, a failed read or listing, no recognizable path, an escaped name: nothing.
  CHECK(denial_paths_in("ls: cannot access 'x': No such file or directory", false).empty());
  CHECK(denial_paths_in("ls: cannot open directory '/root': Permission denied", false).empty());
  CHECK(denial_paths_in("cat: /etc/shadow: Permission denied, really", false).empty());
  CHECK(denial_paths_in("bash: kill: (1) - Operation not permitted", false).empty());
  CHECK(denial_paths_in("make: *** [all] Error 1: some target here: Permission denied", false).empty());
  CHECK(denial_paths_in("touch: cannot touch 'it'\\''s': Permission denied", false).empty());
  CHECK(denial_paths_in("Permission denied", false).empty());
  // A cut line: a path at its first byte may have lost its beginning.
  CHECK(denial_paths_in("rc/file: Permission denied", true).empty());
  CHECK(denial_paths_in("xxxbash: line 1: inside.txt: Permission denied", true) == Paths{"inside.txt"});
  CHECK(denial_paths_in("'a' to '/o/b': Permission denied", true) == Paths{"/o/b"});
}

TEST_CASE("retry advice: the narrowest escalation choice that allows every denied path") {
  const Lab lab;
  const std::array<SandboxMode, 2> both{SandboxMode::workspace_write, SandboxMode::danger_full_access};
  const std::array<SandboxMode, 1> danger{SandboxMode::danger_full_access};
  const std::filesystem::path inside = lab.workspace() / "a.txt";
  const std::filesystem::path outside = lab.outside() / "b.txt";
  const dsh::ResolvedPolicy read_only = lab.policy(SandboxMode::read_only);

  const dsh::RetryAdvice narrow = dsh::retry_advice(read_only, both, std::array{inside});
  CHECK(narrow.retry_mode == SandboxMode::workspace_write);
  CHECK(narrow.text() == "the read-only file policy refused a write to \"" + inside.native() +
                             "\"; if this change is required, ask for approval and retry the call with "
                             "sandbox_permissions \"workspace-write\"");
  const dsh::RetryAdvice wide = dsh::retry_advice(read_only, both, std::array{inside, outside});
  CHECK(wide.retry_mode == SandboxMode::danger_full_access);
  CHECK(wide.text() == "the read-only file policy refused a write to \"" + inside.native() +
                           "\" and 1 other path; if this change is required, ask for approval and retry the call "
                           "with sandbox_permissions \"danger-full-access\"");
  const dsh::RetryAdvice from_write =
      dsh::retry_advice(lab.policy(SandboxMode::workspace_write), danger, std::array{outside});
  CHECK(from_write.retry_mode == SandboxMode::danger_full_access);
  // No choice (bash not escalatable), or none wider than the call's mode: no retry.
  const dsh::RetryAdvice none = dsh::retry_advice(read_only, {}, std::array{outside});
  CHECK_FALSE(none.retry_mode.has_value());
  CHECK(none.text() == "the read-only file policy refused a write to \"" + outside.native() +
                           "\"; no approval this call can ask for allows it, so do not retry it");
  const std::array<SandboxMode, 1> same{SandboxMode::read_only};
  CHECK_FALSE(dsh::retry_advice(read_only, same, std::array{inside}).retry_mode.has_value());
  // Nothing denied: no advice.
  CHECK(dsh::retry_advice(read_only, both, {}).text().empty());
}
