// dsh-fence-run, run for real as DSH's local sandbox provider runs its runnerCommand: the
// recorded profile of each mode (tests/fixtures/dsh-runner/), `--`, then `bash -c COMMAND`, on
// real directories. Each outcome is also classified as DSH's bash consumer classifies it (see
// `classify`): a write the fence refuses is a denial, a refused profile a runner failure, and
// nothing the runner prints is mistaken for either.
#include "support/landlock.hpp"
#include "support/seccomp.hpp"
#include "support/terminal.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <linux/capability.h>
#include <pty.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#ifndef DSH_FENCE_RUN
#error "DSH_FENCE_RUN must name the dsh-fence-run executable"
#endif

using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// How the program's host is set up.
enum class Host {
  as_is,            ///< this test's process as it is: the namespace layer where the system grants it
  without_the_layer ///< CAP_SYS_ADMIN out of the bounding set and user namespaces refused: the base fence only
};

/// What the program printed and how it ended.
struct Outcome {
  int status = -1;
  std::string out;
  std::string err;
};

/// The argv recorded in `tests/fixtures/dsh-runner/<name>`, one argument a line, with
/// `@WORKSPACE@` replaced by `workspace`.
std::vector<std::string> fixture_profile(const std::string& name, const std::filesystem::path& workspace) {
  std::ifstream in(std::filesystem::path(DSH_FIXTURES_DIR) / "dsh-runner" / name);
  REQUIRE(in);
  std::vector<std::string> profile;
  for (std::string line; std::getline(in, line);) {
    profile.push_back(line == "@WORKSPACE@" ? workspace.string() : line);
  }
  return profile;
}

/// `profile`, `--`, then `bash -c script`, as the provider assembles them.
std::vector<std::string> with_command(std::vector<std::string> profile, const std::string& script) {
  profile.insert(profile.end(), {"--", "bash", "-c", script});
  return profile;
}

/// Runs dsh-fence-run with `arguments` in `cwd`, its stdin reading `input` (or the descriptor
/// `terminal` when one is given), in the C locale; its stdout and stderr captured in files of `scratch`.
Outcome run_fence(const std::vector<std::string>& arguments, const std::filesystem::path& cwd,
                  const std::filesystem::path& scratch, const std::string& input = {}, Host host = Host::as_is,
                  int terminal = -1) {
  const std::filesystem::path in_path = scratch / "fence-run.in";
  const std::filesystem::path out_path = scratch / "fence-run.out";
  const std::filesystem::path err_path = scratch / "fence-run.err";
  dsh::test::write_file(in_path, input);
  const dsh::UniqueFd in{::open(in_path.c_str(), O_RDONLY | O_CLOEXEC)};
  const dsh::UniqueFd out{::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  const dsh::UniqueFd err{::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  REQUIRE((in && out && err));
  std::vector<std::string> argv{DSH_FENCE_RUN};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (std::string& arg : argv) {
    args.push_back(arg.data());
  }
  args.push_back(nullptr);
  std::string path = "PATH=/usr/local/bin:/usr/bin:/bin";
  std::string locale = "LC_ALL=C";
  std::array<char*, 3> environment{path.data(), locale.data(), nullptr};
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0 || ::dup2(terminal >= 0 ? terminal : in.get(), 0) < 0 || ::dup2(out.get(), 1) < 0 ||
        ::dup2(err.get(), 2) < 0) {
      ::_exit(250);
    }
    if (host == Host::without_the_layer) {
      // Root keeps no CAP_SYS_ADMIN after exec; an unprivileged host has none to drop.
      if (::prctl(PR_CAPBSET_DROP, static_cast<unsigned long>(CAP_SYS_ADMIN), 0UL, 0UL, 0UL) != 0 && ::geteuid() == 0) {
        ::_exit(251);
      }
      if (dsh::test::refuse_user_namespaces() != 0) {
        ::_exit(252);
      }
    }
    ::execve(args[0], args.data(), environment.data());
    ::_exit(253);
  }
  Outcome outcome;
  outcome.status = dsh::FencedCommand::wait_for(pid);
  outcome.out = read_file(out_path);
  outcome.err = read_file(err_path);
  for (const std::filesystem::path& file : {in_path, out_path, err_path}) {
    std::filesystem::remove(file);
  }
  return outcome;
}

/// What DSH's bash consumer makes of a settled run of the runner, by its documented rules: a
/// runner failure (the command did not run) when the status is not 0 and a stderr line holds the
/// configured failure signature, case-insensitively; else a denial when the status is not 0 and
/// stderr holds one of the runnerCommand denial signatures; else an ordinary result.
enum class Verdict { result, denied, runner_failed };

Verdict classify(const Outcome& outcome) {
  if (outcome.status == 0) {
    return Verdict::result;
  }
  std::string lowered = outcome.err;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::istringstream lines(lowered);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("dsh-fence-run:") != std::string::npos) {
      return Verdict::runner_failed;
    }
  }
  for (const std::string_view denial : {"read-only file system", "permission denied"}) {
    if (lowered.find(denial) != std::string::npos) {
      return Verdict::denied;
    }
  }
  return Verdict::result;
}

/// True when the namespace layer's row `name` applies to a best-effort fence of `policy` here.
bool layer_applies(const dsh::ResolvedPolicy& policy, std::string_view name) {
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy);
  return std::any_of(fence.report().layers.begin(), fence.report().layers.end(),
                     [&](const dsh::FenceLayer& layer) { return layer.name == name && layer.applied; });
}

/// The reason bash gives for a write the fence refuses on this host: the layer's read-only
/// view answers first where it applies, Landlock otherwise.
std::string refusal_reason(const Lab& lab, Host host) {
  return host == Host::as_is && layer_applies(lab.policy(SandboxMode::workspace_write), "read-only root")
             ? "Read-only file system"
             : "Permission denied";
}

} // namespace

TEST_CASE("dsh-fence-run: the recorded profiles are DSH's, argument for argument") {
  const std::vector<std::string> read_only{
      "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--proc", "/proc", "--die-with-parent"};
  CHECK(fixture_profile("read-only.argv", "/ws") == read_only);
  std::vector<std::string> workspace_write = read_only;
  workspace_write.insert(workspace_write.end(), {"--tmpfs", "/tmp", "--bind", "/ws", "/ws"});
  CHECK(fixture_profile("workspace-write.argv", "/ws") == workspace_write);
}

TEST_CASE("dsh-fence-run: workspace-write writes inside the workspace and is refused outside, as a denial") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  for (const Host host : {Host::as_is, Host::without_the_layer}) {
    INFO("host " << (host == Host::as_is ? "as is" : "without the namespace layer"));
    const std::vector<std::string> profile = fixture_profile("workspace-write.argv", lab.workspace());
    const std::filesystem::path inside = lab.workspace() / "inside.txt";
    const Outcome written = run_fence(with_command(profile, "printf relative > inside.txt && printf absolute > " +
                                                                (lab.workspace() / "abs.txt").string()),
                                      lab.workspace(), lab.base(), {}, host);
    CHECK(written.status == 0);
    CHECK(written.out.empty());
    CHECK(written.err.empty());
    CHECK(read_file(inside) == "relative");
    CHECK(read_file(lab.workspace() / "abs.txt") == "absolute");
    CHECK(classify(written) == Verdict::result);

    const std::filesystem::path outside = lab.outside() / "out.txt";
    const Outcome refused =
        run_fence(with_command(profile, "printf no > " + outside.string()), lab.workspace(), lab.base(), {}, host);
    CHECK(refused.status == 1);
    CHECK(refused.out.empty());
    CHECK(refused.err == "bash: line 1: " + outside.string() + ": " + refusal_reason(lab, host) + "\n");
    CHECK(read_file(outside) == "<missing>");
    CHECK(classify(refused) == Verdict::denied);
    std::filesystem::remove(inside);
    std::filesystem::remove(lab.workspace() / "abs.txt");
  }
}

TEST_CASE("dsh-fence-run: read-only refuses every write, the workspace's included, as a denial") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  for (const Host host : {Host::as_is, Host::without_the_layer}) {
    INFO("host " << (host == Host::as_is ? "as is" : "without the namespace layer"));
    const std::vector<std::string> profile = fixture_profile("read-only.argv", lab.workspace());
    const Outcome inside =
        run_fence(with_command(profile, "printf no > inside.txt"), lab.workspace(), lab.base(), {}, host);
    CHECK(inside.status == 1);
    CHECK(inside.out.empty());
    CHECK(inside.err == "bash: line 1: inside.txt: " + refusal_reason(lab, host) + "\n");
    CHECK(read_file(lab.workspace() / "inside.txt") == "<missing>");
    CHECK(classify(inside) == Verdict::denied);

    const std::filesystem::path outside = lab.outside() / "out.txt";
    const Outcome elsewhere =
        run_fence(with_command(profile, "printf no > " + outside.string()), lab.workspace(), lab.base(), {}, host);
    CHECK(elsewhere.status == 1);
    CHECK(elsewhere.err == "bash: line 1: " + outside.string() + ": " + refusal_reason(lab, host) + "\n");
    CHECK(read_file(outside) == "<missing>");
    CHECK(classify(elsewhere) == Verdict::denied);

    // Reading, and writing to the null device, stay possible.
    dsh::test::write_file(lab.workspace() / "notes.txt", "kept\n");
    const Outcome reads = run_fence(with_command(profile, "cat notes.txt && echo gone > /dev/null"), lab.workspace(),
                                    lab.base(), {}, host);
    CHECK(reads.status == 0);
    CHECK(reads.out == "kept\n");
    CHECK(reads.err.empty());
    std::filesystem::remove(lab.workspace() / "notes.txt");
  }
}

TEST_CASE("dsh-fence-run: the command's status, stdout, stderr and stdin pass through unchanged") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::vector<std::string> profile = fixture_profile("workspace-write.argv", lab.workspace());
  for (const int status : {0, 1, 7, 2, 126, 127, 255}) {
    const Outcome outcome =
        run_fence(with_command(profile, "printf 'to stdout'; printf 'to stderr' >&2; exit " + std::to_string(status)),
                  lab.workspace(), lab.base());
    CHECK(outcome.status == status);
    CHECK(outcome.out == "to stdout");
    CHECK(outcome.err == "to stderr");
    CHECK(classify(outcome) == Verdict::result);
  }
  const Outcome piped = run_fence(with_command(profile, "cat; pwd"), lab.workspace(), lab.base(), "bytes from DSH\n");
  CHECK(piped.status == 0);
  CHECK(piped.out == "bytes from DSH\n" + lab.workspace().string() + "\n");
  CHECK(piped.err.empty());
}

TEST_CASE("dsh-fence-run: a terminal on its stdin is not handed on, so the command cannot reconfigure it") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::test::Pty pty(24, 80);
  const int terminal = pty.slave();
  termios before{};
  REQUIRE(::tcgetattr(terminal, &before) == 0);
  REQUIRE((before.c_lflag & ECHO) != 0);
  for (const Host host : {Host::as_is, Host::without_the_layer}) {
    INFO("host " << (host == Host::as_is ? "as is" : "without the namespace layer"));
    const Outcome outcome =
        run_fence(with_command(fixture_profile("workspace-write.argv", lab.workspace()),
                               "if [ -t 0 ]; then stty -echo -icanon; echo terminal; else echo not a terminal; fi"),
                  lab.workspace(), lab.base(), {}, host, terminal);
    CHECK(outcome.status == 0);
    CHECK(outcome.out == "not a terminal\n");
    CHECK(outcome.err.empty());
    termios after{};
    REQUIRE(::tcgetattr(terminal, &after) == 0);
    CHECK(after.c_lflag == before.c_lflag);
  }
}

TEST_CASE("dsh-fence-run: with the namespace layer, --unshare-pid --proc /proc --tmpfs /tmp hold literally") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  if (!layer_applies(policy, "PID namespace and /proc") || !layer_applies(policy, "/tmp, /var/tmp, /dev/shm")) {
    DSH_TEST_SKIP("this host does not grant the namespace layer's PID namespace and private /tmp");
  }
  const Outcome outcome =
      run_fence(with_command(fixture_profile("workspace-write.argv", lab.workspace()),
                             "echo $$; n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo $n; ls -A /tmp | wc -l; "
                             "printf t > /tmp/t && cat /tmp/t"),
                lab.workspace(), lab.base());
  CHECK(outcome.status == 0);
  // bash is PID 1, and /proc lists it alone: bash counts its entries itself, as a pipeline of
  // ls and grep could be counted before grep had started. /tmp starts empty and is writable.
  CHECK(outcome.out == "1\n1\n0\nt");
  CHECK(outcome.err.empty());
}

TEST_CASE("dsh-fence-run: without the namespace layer, /tmp stays read-only and TMPDIR is the call's own") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const Outcome outcome =
      run_fence(with_command(fixture_profile("workspace-write.argv", lab.workspace()),
                             "printf t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; : > /tmp/dsh-fence-run-probe"),
                lab.workspace(), lab.base(), {}, Host::without_the_layer);
  CHECK(outcome.status == 1);
  CHECK(outcome.out == "t");
  CHECK(outcome.err == "bash: line 1: /tmp/dsh-fence-run-probe: Permission denied\n");
  CHECK(read_file("/tmp/dsh-fence-run-probe") == "<missing>");
}

TEST_CASE("dsh-fence-run: every argument outside DSH's profile is refused with one line and 2, nothing run") {
  const Lab lab;
  const std::string ws = lab.workspace().string();
  const std::string other = lab.outside().string();
  const std::vector<std::string> ro = fixture_profile("read-only.argv", lab.workspace());
  const std::vector<std::string> rw = fixture_profile("workspace-write.argv", lab.workspace());
  const auto plus = [](std::vector<std::string> base, const std::vector<std::string>& more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const std::vector<std::string> command{"--", "echo", "ran"};
  struct Case {
    std::vector<std::string> arguments;
    std::string line;
  };
  const std::vector<Case> cases{
      {plus(plus(rw, {"--unshare-net"}), command),
       "unknown option \"--unshare-net\" (expected DSH's bubblewrap profile, then --, then the command)"},
      {plus(plus(ro, {"--tmpfs", "/tmp", "--bind", ws, other}), command),
       "--bind \"" + ws + "\" \"" + other + "\": the source and the destination differ (expected --bind ROOT ROOT)"},
      {plus(plus(rw, {"--bind", other, other}), command),
       "a second --bind \"" + other + "\" \"" + other + "\": the profile binds one workspace root"},
      {plus(plus(ro, {"--tmpfs", "/tmp", "--bind", "/", "/"}), command),
       "--bind \"/\" \"/\": refusing the root of the file system as the workspace root"},
      {plus(plus(ro, {"--tmpfs", "/tmp", "--bind", "/..", "/.."}), command),
       "--bind \"/..\" \"/..\": refusing the root of the file system as the workspace root"},
      {plus(rw, {"echo", "ran"}), "missing -- before the command \"echo\""},
      {rw, "missing -- and the command after it"},
      {plus(rw, {"--"}), "no command after --"},
      {plus(plus(ro, {"--tmpfs", "/tmp", "--bind", "ws", "ws"}), command),
       "--bind \"ws\" \"ws\": expected an absolute workspace root"},
      {plus(plus(ro, {"--tmpfs", "/tmp", "--bind", ws}), {"--"}),
       "--bind \"" + ws + "\" \"--\": the source and the destination differ (expected --bind ROOT ROOT)"},
      {{"--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--proc", "/proc", "--", "echo", "ran"},
       "the profile lacks --die-with-parent"},
      {plus(plus(ro, {"--tmpfs", "/tmp"}), command),
       "--tmpfs /tmp without --bind ROOT ROOT (DSH's workspace-write profile has both, its read-only profile neither)"},
      {plus(plus(ro, {"--bind", ws, ws}), command),
       "--bind ROOT ROOT without --tmpfs /tmp (DSH's workspace-write profile has both, its read-only profile neither)"},
      {plus(plus(ro, {"--ro-bind", "/", "/"}), command), "--ro-bind / / given twice"},
      {plus({"--ro-bind", "/usr", "/usr"}, command), "--ro-bind \"/usr\" \"/usr\": expected --ro-bind / /"},
      {plus(plus(ro, {"--tmpfs", "/var"}), command), "--tmpfs \"/var\": expected --tmpfs /tmp"},
      {{"--dev"}, "--dev: too few values (expected --dev /dev)"},
      {{"--help"}, "unknown option \"--help\" (expected DSH's bubblewrap profile, then --, then the command)"},
      {{"--bind", "/a\nb", "/a\nc"},
       "--bind \"/a\\nb\" \"/a\\nc\": the source and the destination differ (expected --bind ROOT ROOT)"},
  };
  for (const Case& refused : cases) {
    INFO("refusal: " << refused.line);
    const Outcome outcome = run_fence(refused.arguments, lab.workspace(), lab.base());
    CHECK(outcome.status == 2);
    CHECK(outcome.out.empty()); // `echo ran` never ran
    CHECK(outcome.err == "dsh-fence-run: " + refused.line + "\n");
    CHECK(classify(outcome) == Verdict::runner_failed);
  }
}

TEST_CASE("dsh-fence-run: a line of the runner that quotes a denial's words still reads as a runner failure") {
  // The runner's own words never name a denial. What it quotes can: an argument, or the
  // kernel's reason why it could not start the command. Each such line starts with the failure
  // signature, which DSH checks before the denial signatures, so the call is reported as not run.
  const Lab lab;
  const std::string named = "/Permission denied/Read-only file system";
  const Outcome quoted = run_fence({"--bind", named, "/elsewhere"}, lab.workspace(), lab.base());
  CHECK(quoted.status == 2);
  CHECK(quoted.err == "dsh-fence-run: --bind \"" + named +
                          "\" \"/elsewhere\": the source and the destination differ (expected --bind ROOT ROOT)\n");
  CHECK(classify(quoted) == Verdict::runner_failed);

  DSH_REQUIRE_LANDLOCK();
  const std::vector<std::string> profile = fixture_profile("workspace-write.argv", lab.workspace());
  const std::filesystem::path script = lab.workspace() / "not-executable.sh";
  dsh::test::write_file(script, "#!/bin/sh\necho ran\n");
  std::vector<std::string> arguments = profile;
  arguments.insert(arguments.end(), {"--", script.string()});
  const Outcome denied = run_fence(arguments, lab.workspace(), lab.base());
  CHECK(denied.status == 126);
  CHECK(denied.out.empty());
  CHECK(denied.err == "dsh-fence-run: not run: cannot run \"" + script.string() + "\": Permission denied\n");
  CHECK(classify(denied) == Verdict::runner_failed);

  arguments = profile;
  arguments.insert(arguments.end(), {"--", "dsh-fence-run-no-such-program"});
  const Outcome missing = run_fence(arguments, lab.workspace(), lab.base());
  CHECK(missing.status == 127);
  CHECK(missing.err ==
        "dsh-fence-run: not run: cannot run \"dsh-fence-run-no-such-program\": No such file or directory\n");
  CHECK(classify(missing) == Verdict::runner_failed);

  // A workspace root the fence cannot open: nothing runs, 126.
  const std::string gone = (lab.base() / "gone").string();
  const Outcome no_root =
      run_fence(with_command(fixture_profile("workspace-write.argv", gone), "echo ran"), lab.workspace(), lab.base());
  CHECK(no_root.status == 126);
  CHECK(no_root.out.empty());
  CHECK(no_root.err == "dsh-fence-run: not run: Landlock fence for workspace-write: cannot open the workspace root \"" +
                           gone + "\": No such file or directory\n");
  CHECK(classify(no_root) == Verdict::runner_failed);
}
