// The dsh-sandboxed-bash example program, run for real on real session logs: it resolves the
// session's policy, fences bash with it, and turns a denied write into an escalation hint.
#include "support/landlock.hpp"

#include <dsh/detail/text/concat.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#ifndef DSH_SANDBOXED_BASH
#error "DSH_SANDBOXED_BASH must name the dsh-sandboxed-bash executable"
#endif

using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// The options naming the private temporary directory the tool keeps for the session `id`
/// logged at `log_path`: its id and the log's canonical path (tools/dsh_sandboxed_bash.cpp).
dsh::FenceOptions tool_session(const std::string& id, const std::filesystem::path& log_path) {
  dsh::FenceOptions options;
  options.session_id = id + "\n" + dsh::canonical_path(log_path).native();
  return options;
}

/// A lab plus a session log whose cwd is the lab's workspace.
struct Session {
  Lab lab;
  std::filesystem::path log_path = lab.base() / "session.jsonl";

  Session() {
    const dsh::SessionHeader header{"s-sandboxed-bash", lab.workspace().string(), 1764480000000};
    (void)dsh::SessionLog::create(log_path, header);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  /// Removes the session's private temporary directory, which the tool's calls keep for the
  /// session (named by its id and log) under the default root.
  ~Session() {
    try {
      (void)dsh::PreparedFence::remove_temporary_directory(tool_session("s-sandboxed-bash", log_path));
    } catch (...) { // NOLINT(bugprone-empty-catch): nothing to clean when it cannot be named
    }
  }

  /// Appends a `sandbox/mode` switch to the session, as the host's /mode command would.
  void switch_to(SandboxMode mode) const {
    dsh::SessionLog log = dsh::SessionLog::open(log_path);
    dsh::set_sandbox_mode(log, mode);
  }

  /// Runs the example (itself unfenced; it fences its bash) in the C locale, with the base fence
  /// alone (`--isolation off`: these tests check Landlock's refusals; the namespace layer's are
  /// in tests/enforcement/test_namespace_layer.cpp).
  [[nodiscard]] Captured run(std::vector<std::string> arguments) const {
    static const dsh::PreparedFence none = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
    std::vector<std::string> argv{"env", "LC_ALL=C", DSH_SANDBOXED_BASH, "--isolation", "off"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    return dsh::test::capture(none, std::move(argv), lab.base(), lab.base());
  }

  /// Runs the example with exactly `variables` and `PATH`, `LC_ALL=C` as its environment.
  [[nodiscard]] Captured run_with_environment(const std::vector<std::string>& variables,
                                              const std::vector<std::string>& arguments) const {
    std::vector<std::string> argv{"-i", "PATH=" + std::string(search_path), "LC_ALL=C"};
    argv.insert(argv.end(), variables.begin(), variables.end());
    argv.insert(argv.end(), {DSH_SANDBOXED_BASH, "--isolation", "off"});
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    return run_program("env", argv);
  }

  /// Runs `program` with `arguments` (unfenced) in the lab, captured.
  [[nodiscard]] Captured run_program(const std::string& program, std::vector<std::string> arguments) const {
    static const dsh::PreparedFence none = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
    arguments.insert(arguments.begin(), program);
    return dsh::test::capture(none, std::move(arguments), lab.base(), lab.base());
  }

  static constexpr std::string_view search_path = "/usr/local/bin:/usr/bin:/bin";

  [[nodiscard]] std::string quoted_log() const { return "'" + log_path.string() + "'"; }
};

const std::string prefix = "dsh-sandboxed-bash: ";

/// The usage text, as --help prints it and every usage error repeats it.
const std::string usage_text =
    "usage: dsh-sandboxed-bash --log SESSION.jsonl [--approved MODE] [--default MODE] "
    "[--keep-env NAME]... [--isolation off|best-effort|required] [--timeout SECONDS] [--verbose] -- "
    "COMMAND...\nMODE is read-only, workspace-write or "
    "danger-full-access\nthe command gets this environment without the variables whose names "
    "contain KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or AUTH (any case); --keep-env "
    "NAME passes one on\n--timeout SECONDS (a whole number, at least 1) ends the call and everything it started; "
    "exit status 124\n";

} // namespace

TEST_CASE("dsh-sandboxed-bash: read-only session refuses the write and hints workspace-write") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const Captured run = session.run({"--log", session.log_path.string(), "--", "echo hi > inside.txt"});
  CHECK(run.exit_code == 1);
  CHECK(run.out.empty());
  CHECK(run.err == "bash: line 1: inside.txt: Permission denied\n" + prefix +
                       "denied by the read-only file policy (Landlock fence): bash: line 1: inside.txt: Permission "
                       "denied\n" +
                       prefix +
                       "if this change is required, ask for approval and re-run with a wider mode: "
                       "dsh-sandboxed-bash --log " +
                       session.quoted_log() +
                       " --approved workspace-write --isolation off -- 'echo hi > inside.txt'\n");
  CHECK(read_file(session.lab.workspace() / "inside.txt") == "<missing>");
}

TEST_CASE("dsh-sandboxed-bash: an approved mode widens that one call") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const Captured approved = session.run({"--log", session.log_path.string(), "--approved", "workspace-write", "--",
                                         "echo hi > inside.txt && cat inside.txt && pwd"});
  CHECK(approved.exit_code == 0);
  CHECK(approved.out == "hi\n" + session.lab.workspace().string() + "\n"); // runs in the session workspace
  CHECK(approved.err.empty());
  const Captured next = session.run({"--log", session.log_path.string(), "--", "echo again > inside.txt"});
  CHECK(next.exit_code == 1);
  CHECK(read_file(session.lab.workspace() / "inside.txt") == "hi\n");
}

TEST_CASE("dsh-sandboxed-bash: the session's own switch decides, outside writes hint danger-full-access") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  session.switch_to(SandboxMode::workspace_write);
  const std::string outside = (session.lab.outside() / "out.txt").string();
  const Captured run = session.run({"--log", session.log_path.string(), "--", "touch", "inside.txt", outside});
  CHECK(run.exit_code == 1);
  CHECK(run.err == "touch: cannot touch '" + outside + "': Permission denied\n" + prefix +
                       "denied by the workspace-write file policy (Landlock fence): touch: cannot touch '" + outside +
                       "': Permission denied\n" + prefix +
                       "if this change is required, ask for approval and re-run with a wider mode: "
                       "dsh-sandboxed-bash --log " +
                       session.quoted_log() +
                       " --approved danger-full-access --isolation off -- 'touch' 'inside.txt' '" + outside + "'\n");
  CHECK(read_file(session.lab.workspace() / "inside.txt").empty());
  CHECK(read_file(outside) == "<missing>");

  const Captured danger =
      session.run({"--log", session.log_path.string(), "--approved", "danger-full-access", "--", "touch", outside});
  CHECK(danger.exit_code == 0);
  CHECK(danger.err.empty());
  CHECK(read_file(outside).empty());
}

TEST_CASE("dsh-sandboxed-bash: --verbose shows the model text, the fence and the names of the withheld variables") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const dsh::PreparedFence fence = dsh::test::prepare_base(session.lab.policy(SandboxMode::read_only));
  const std::string shown = prefix +
                            "model text: Current DSH file policy: read-only. One-shot bash commands cannot modify "
                            "files in the standing mode. For one-shot bash commands, do not refuse a required "
                            "modification from this standing mode alone: attempt it normally and follow the tool's "
                            "denial and escalation guidance.\n" +
                            prefix + "fence: " + fence.report().describe() + "\n" + prefix + "environment: withheld";
  const std::vector<std::string> secrets{"MY_API_KEY=sk-test", "DB_PASSWORD=hunter2", "PLAIN=visible"};
  const Captured run =
      session.run_with_environment(secrets, {"--log", session.log_path.string(), "--verbose", "--", "true"});
  CHECK(run.exit_code == 0);
  CHECK(run.err == shown + " (names that look like credentials; --keep-env NAME passes one on): DB_PASSWORD, "
                           "MY_API_KEY\n");
  CHECK(run.err.find("sk-test") == std::string::npos);
  CHECK(run.err.find("hunter2") == std::string::npos);

  const Captured kept = session.run_with_environment(
      secrets, {"--log", session.log_path.string(), "--keep-env", "MY_API_KEY", "--verbose", "--", "true"});
  CHECK(kept.exit_code == 0);
  CHECK(kept.err == shown + " (names that look like credentials; --keep-env NAME passes one on): DB_PASSWORD\n");

  const Captured none =
      session.run_with_environment({"PLAIN=visible"}, {"--log", session.log_path.string(), "--verbose", "--", "true"});
  CHECK(none.exit_code == 0);
  CHECK(none.err == shown + ": none\n");
}

TEST_CASE("dsh-sandboxed-bash: the command does not see the host's credentials unless --keep-env passes one") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const std::vector<std::string> host{"MY_API_KEY=sk-test", "GITHUB_TOKEN=ghp-test", "PLAIN=visible"};
  const std::string log = session.log_path.string();
  const std::string show = "echo ${MY_API_KEY-unset} ${GITHUB_TOKEN-unset} ${PLAIN-unset}";
  const Captured plain =
      session.run_with_environment({"MY_API_KEY=sk-test"}, {"--log", log, "--", "echo ${MY_API_KEY-unset}"});
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == "unset\n");
  CHECK(plain.err.empty());
  const Captured kept = session.run_with_environment(
      {"MY_API_KEY=sk-test"}, {"--log", log, "--keep-env", "MY_API_KEY", "--", "echo ${MY_API_KEY-unset}"});
  CHECK(kept.exit_code == 0);
  CHECK(kept.out == "sk-test\n");
  CHECK(kept.err.empty());

  CHECK(session.run_with_environment(host, {"--log", log, "--", show}).out == "unset unset visible\n");
  CHECK(session.run_with_environment(host, {"--log", log, "--keep-env", "GITHUB_TOKEN", "--", show}).out ==
        "unset ghp-test visible\n");
  CHECK(session
            .run_with_environment(host, {"--log", log, "--keep-env", "GITHUB_TOKEN", "--keep-env", "MY_API_KEY",
                                         "--keep-env", "NOT_SET", "--", show})
            .out == "sk-test ghp-test visible\n");
}

TEST_CASE("dsh-sandboxed-bash --isolation: an unknown value is a usage error, --verbose lists each row") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const Captured unknown = session.run({"--isolation", "strict", "--log", session.log_path.string(), "--", "true"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find(prefix + "unknown isolation \"strict\" for --isolation\nusage: ") == 0);
  const Captured missing = session.run({"--log", session.log_path.string(), "--isolation"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find(prefix + "--isolation needs off, best-effort or required\nusage: ") == 0);
  const Captured verbose = session.run_program(
      DSH_SANDBOXED_BASH, {"--isolation", "required", "--log", session.log_path.string(), "--verbose", "--", "true"});
  CHECK(verbose.exit_code == 0);
  std::string rows;
  for (const char* name : {"mount namespace", "read-only root", "protected paths", "/dev", "PID namespace and /proc",
                           "IPC namespace", "UTS namespace", "/tmp, /var/tmp, /dev/shm", "host state out of view"}) {
    rows += prefix + "namespace layer: " + name + ": applied\n";
  }
  if (::geteuid() != 0) {
    rows = prefix + "namespace layer: user namespace: applied\n" + rows;
  }
  CHECK(verbose.err.find(rows + prefix + "environment: withheld") != std::string::npos);
}

TEST_CASE("dsh-sandboxed-bash: usage errors and unusable logs run nothing") {
  const Session session;
  const std::string usage = usage_text;
  const Captured no_log = session.run({"--", "touch", "x"});
  CHECK(no_log.exit_code == 2);
  CHECK(no_log.err == prefix + "--log SESSION.jsonl is required\n" + usage);
  const Captured bad_mode = session.run({"--log", session.log_path.string(), "--approved", "Read-Only", "--", "true"});
  CHECK(bad_mode.exit_code == 2);
  CHECK(bad_mode.err == prefix + "unknown mode \"Read-Only\" for --approved\n" + usage);
  const Captured no_command = session.run({"--log", session.log_path.string(), "--"});
  CHECK(no_command.exit_code == 2);
  CHECK(no_command.err == prefix + "no COMMAND after --\n" + usage);
  const Captured no_name = session.run({"--log", session.log_path.string(), "--keep-env"});
  CHECK(no_name.exit_code == 2);
  CHECK(no_name.err == prefix + "--keep-env needs a NAME\n" + usage);
  const Captured bad_name =
      session.run({"--log", session.log_path.string(), "--keep-env", "MY_API_KEY=x", "--", "touch", "x"});
  CHECK(bad_name.exit_code == 2);
  CHECK(bad_name.err == prefix +
                            "--keep-env: FencedCommand::keep_env: expected a variable name: not empty, without '=' or "
                            "NUL; found \"MY_API_KEY=x\"\n" +
                            usage);
  const Captured missing = session.run({"--log", (session.lab.base() / "missing.jsonl").string(), "--", "touch", "x"});
  CHECK(missing.exit_code == 126);
  CHECK(missing.err.rfind(prefix + "not run: ", 0) == 0);
  CHECK(read_file(session.lab.base() / "x") == "<missing>");
}

TEST_CASE("dsh-sandboxed-bash: an --approved mode not strictly wider than the session's is refused, nothing runs") {
  struct Case {
    std::optional<SandboxMode> session_mode; // nullopt: the --default decides
    std::vector<std::string> flags;
    std::string message;
  };
  const std::string both = "approve one of: workspace-write, danger-full-access\n";
  const std::string danger = "approve one of: danger-full-access\n";
  const std::string none = "no mode is wider, so the call needs no approval\n";
  const std::string refused = "--approved refused: sandbox escalation to ";
  const std::vector<Case> cases{
      {std::nullopt,
       {"--approved", "read-only"},
       refused + "read-only is not strictly wider than this call's current read-only mode; " + both},
      {SandboxMode::read_only,
       {"--approved", "read-only"},
       refused + "read-only is not strictly wider than this call's current read-only mode; " + both},
      {SandboxMode::workspace_write,
       {"--approved", "workspace-write"},
       refused + "workspace-write is not strictly wider than this call's current workspace-write mode; " + danger},
      {SandboxMode::workspace_write,
       {"--approved", "read-only"},
       refused + "read-only is not strictly wider than this call's current workspace-write mode; " + danger},
      {std::nullopt,
       {"--default", "workspace-write", "--approved", "workspace-write"},
       refused + "workspace-write is not strictly wider than this call's current workspace-write mode; " + danger},
      {SandboxMode::read_only, // the session's switch outranks the default
       {"--default", "danger-full-access", "--approved", "read-only"},
       refused + "read-only is not strictly wider than this call's current read-only mode; " + both},
      {SandboxMode::danger_full_access,
       {"--approved", "danger-full-access"},
       refused + "danger-full-access is not strictly wider than this call's current danger-full-access mode; " + none},
      {SandboxMode::danger_full_access,
       {"--approved", "workspace-write"},
       refused + "workspace-write is not strictly wider than this call's current danger-full-access mode; " + none},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const Session session;
    if (c.session_mode) {
      session.switch_to(*c.session_mode);
    }
    const std::string log_before = read_file(session.log_path);
    const std::string inside = (session.lab.workspace() / "marker").string();
    const std::string outside = (session.lab.outside() / "marker").string();
    std::vector<std::string> arguments{"--log", session.log_path.string()};
    arguments.insert(arguments.end(), c.flags.begin(), c.flags.end());
    arguments.insert(arguments.end(), {"--", "echo ran; touch", inside, outside});
    const Captured run = session.run(arguments);
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err == prefix + c.message);
    CHECK(read_file(inside) == "<missing>");
    CHECK(read_file(outside) == "<missing>");
    CHECK(read_file(session.log_path) == log_before);
  }
}

TEST_CASE("dsh-sandboxed-bash: the retry hint offers only a mode strictly wider than the call's") {
  DSH_REQUIRE_LANDLOCK();
  const std::string hint = "if this change is required, ask for approval and re-run with a wider mode: "
                           "dsh-sandboxed-bash --log ";
  // What the tool prints when a touch of `outside` is refused in workspace-write: the denial,
  // then the hint that only danger-full-access is left to ask for.
  const auto refused_outside = [&](const Session& session, const std::string& outside) {
    const std::string denial = "touch: cannot touch '" + outside + "': Permission denied";
    return denial + "\n" + prefix + "denied by the workspace-write file policy (Landlock fence): " + denial + "\n" +
           prefix + hint + session.quoted_log() + " --approved danger-full-access --isolation off -- 'touch' '" +
           outside + "'\n";
  };
  // A real denial in workspace-write (a write outside): the current mode is never offered again,
  // only danger-full-access.
  {
    const Session session;
    session.switch_to(SandboxMode::workspace_write);
    const std::string outside = (session.lab.outside() / "out.txt").string();
    const Captured run = session.run({"--log", session.log_path.string(), "--", "touch", outside});
    CHECK(run.exit_code == 1);
    CHECK(run.err == refused_outside(session, outside));
    CHECK(read_file(outside) == "<missing>");
  }
  // A line that only looks like a denial, naming a path the call's policy allows (workspace-write
  // from the session, or from an approval in a read-only session): no denial, no retry.
  for (const bool approved : {false, true}) {
    const Session session;
    if (!approved) {
      session.switch_to(SandboxMode::workspace_write);
    }
    const std::string denial = "bash: line 1: inside.txt: Permission denied";
    const std::string command = "echo \"" + denial + "\" >&2; false";
    std::vector<std::string> arguments{"--log", session.log_path.string()};
    if (approved) {
      arguments.insert(arguments.end(), {"--approved", "workspace-write"});
    }
    arguments.insert(arguments.end(), {"--", command});
    const Captured run = session.run(arguments);
    CHECK(run.exit_code == 1);
    CHECK(run.err == denial + "\n");
  }
  // A read-only session whose call was approved workspace-write, refused a write outside: the
  // hint asks for more than the approval already gave.
  {
    const Session session;
    const std::string outside = (session.lab.outside() / "out.txt").string();
    const Captured run =
        session.run({"--log", session.log_path.string(), "--approved", "workspace-write", "--", "touch", outside});
    CHECK(run.exit_code == 1);
    CHECK(run.err == refused_outside(session, outside));
    CHECK(read_file(outside) == "<missing>");
  }
}

TEST_CASE("dsh-sandboxed-bash: danger-full-access offers no retry, from the session or an approval") {
  DSH_REQUIRE_LANDLOCK();
  const std::string denial = "touch: cannot touch 'x': Permission denied";
  const std::string command = "echo \"" + denial + "\" >&2; false";
  {
    const Session session;
    session.switch_to(SandboxMode::danger_full_access);
    const Captured run = session.run({"--log", session.log_path.string(), "--", command});
    CHECK(run.exit_code == 1);
    CHECK(run.err == denial + "\n");
  }
  {
    const Session session;
    const Captured run =
        session.run({"--log", session.log_path.string(), "--approved", "danger-full-access", "--", command});
    CHECK(run.exit_code == 1);
    CHECK(run.err == denial + "\n");
  }
}

TEST_CASE("dsh-sandboxed-bash: a log inside the workspace makes workspace-write refuse to run anything") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const std::filesystem::path inner = session.lab.workspace() / "session.jsonl";
  {
    dsh::SessionLog log = dsh::SessionLog::create(inner, {"s-inner", session.lab.workspace().string(), 1764480000000});
    dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  }
  const std::string before = read_file(inner);
  const Captured run = session.run({"--log", inner.string(), "--", "echo forged >> session.jsonl; touch ran.txt"});
  CHECK(run.exit_code == 126);
  CHECK(run.out.empty());
  CHECK(run.err == prefix + "not run: Landlock fence for workspace-write: refusing the workspace root " +
                       dsh::json_string_literal(session.lab.workspace().native()) +
                       ": the command could change the session log " + dsh::json_string_literal(inner.native()) +
                       ", which decides later calls\n");
  CHECK(read_file(inner) == before);
  CHECK(read_file(session.lab.workspace() / "ran.txt") == "<missing>");
}

TEST_CASE("dsh-sandboxed-bash: a forged danger-full-access switch in a log under /tmp is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::test::TempDir logs("/tmp");
  const std::filesystem::path log_path = dsh::canonical_path(logs.path()) / "session.jsonl";
  {
    dsh::SessionLog log = dsh::SessionLog::create(log_path, {"s-tmp", lab.workspace().string(), 1764480000000});
    dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  }
  const std::string before = read_file(log_path);
  const std::string forged = R"({"type":"sandbox/mode","seq":1,"data":{"mode":"danger-full-access"}})";
  static const dsh::PreparedFence none = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
  const Captured run =
      dsh::test::capture(none,
                         {"env", "LC_ALL=C", DSH_SANDBOXED_BASH, "--isolation", "off", "--log", log_path.string(), "--",
                          "echo '" + forged + "' >> " + log_path.string() + " && touch inside.txt"},
                         lab.base(), lab.base());
  CHECK(run.exit_code == 1);
  CHECK(run.err.find("bash: line 1: " + log_path.string() + ": Permission denied\n") == 0);
  // With the namespace layer (the default) the host's /tmp, and the log in it, is out of view.
  const Captured layered =
      dsh::test::capture(none,
                         {"env", "LC_ALL=C", DSH_SANDBOXED_BASH, "--log", log_path.string(), "--",
                          "echo '" + forged + "' >> " + log_path.string() + " && touch inside.txt"},
                         lab.base(), lab.base());
  CHECK(layered.exit_code == 1);
  CHECK(layered.err == "bash: line 1: " + log_path.string() + ": No such file or directory\n");
  CHECK(read_file(log_path) == before);
  CHECK(read_file(lab.workspace() / "inside.txt") == "<missing>");
  const dsh::PolicyOwner owner;
  CHECK(owner.resolve(dsh::SessionLog::open(log_path)).mode == SandboxMode::workspace_write);
  // the session's, made by the tool's call
  CHECK(dsh::PreparedFence::remove_temporary_directory(tool_session("s-tmp", log_path)));
}

TEST_CASE("dsh-sandboxed-bash: the session's TMPDIR persists across its calls, and a new session at its log's path "
          "starts empty") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  session.switch_to(SandboxMode::workspace_write);
  const std::string log = session.log_path.string();
  const Captured left = session.run({"--log", log, "--", "echo kept > \"$TMPDIR/left\" && ls -A \"$TMPDIR\""});
  CHECK(left.exit_code == 0);
  CHECK(left.out == "left\n");
  const Captured again = session.run({"--log", log, "--", "cat \"$TMPDIR/left\""});
  CHECK(again.exit_code == 0);
  CHECK(again.out == "kept\n");
  // The log removed and a new session created at its path: the earlier session's files are not its.
  std::filesystem::remove(session.log_path);
  {
    dsh::SessionLog next =
        dsh::SessionLog::create(session.log_path, {"s-next", session.lab.workspace().string(), 1764480000001});
    dsh::set_sandbox_mode(next, SandboxMode::workspace_write);
  }
  const Captured fresh = session.run({"--log", log, "--", "ls -A \"$TMPDIR\"; cat \"$TMPDIR/left\" 2>&1"});
  CHECK(fresh.exit_code == 1);
  CHECK(fresh.out.find("No such file or directory") != std::string::npos);
  CHECK(fresh.out.find("kept") == std::string::npos);
  CHECK(dsh::PreparedFence::remove_temporary_directory(tool_session("s-next", session.log_path)));
}

TEST_CASE("dsh-sandboxed-bash: a denial at the end of a line longer than the watch keeps is still reported") {
  DSH_REQUIRE_LANDLOCK();
  const Session session;
  const std::string command = "head -c 1048576 /dev/zero | tr '\\0' x >&2; echo hi > inside.txt";
  const Captured run = session.run({"--log", session.log_path.string(), "--", command});
  CHECK(run.exit_code == 1);
  CHECK(run.out.empty());
  const std::string denial = "bash: line 1: inside.txt: Permission denied";
  const std::string kept = std::string(16384 - denial.size(), 'x') + denial; // the last 16 KiB of the line
  // The kept tail still names the path after the cut, so the hint is the mode that allows it.
  CHECK(run.err == std::string(1048576, 'x') + denial + "\n" + prefix +
                       "denied by the read-only file policy (Landlock fence): ..." + kept + "\n" + prefix +
                       "if this change is required, ask for approval and re-run with a wider mode: "
                       "dsh-sandboxed-bash --log " +
                       session.quoted_log() + " --approved workspace-write --isolation off -- '" +
                       "head -c 1048576 /dev/zero | tr " + "'\\''\\0'\\'' x >&2; echo hi > inside.txt'\n");
  CHECK(read_file(session.lab.workspace() / "inside.txt") == "<missing>");
}

TEST_CASE("dsh-sandboxed-bash --help prints the usage on stdout and exits 0, running nothing") {
  const Session session;
  for (const std::vector<std::string>& arguments :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"--log", session.log_path.string(), "--help"}}) {
    const Captured help = session.run(arguments);
    CHECK(help.exit_code == 0);
    CHECK(help.out == usage_text);
    CHECK(help.err.empty());
  }
}

TEST_CASE("dsh-sandboxed-bash --timeout: 124 when the time runs out, with everything the command started ended") {
  const Session session;
  session.switch_to(SandboxMode::workspace_write);
  // The background sleep's pid goes to the workspace, where the call may write.
  const Captured timed = session.run({"--log", session.log_path.string(), "--timeout", "1", "--",
                                      "sleep 30 & echo $! > background.pid; sleep 30; echo never"});
  CHECK(timed.exit_code == 124);
  CHECK(timed.out.empty());
  const std::string pid = read_file(session.lab.workspace() / "background.pid");
  REQUIRE(pid != "<missing>");
  CHECK_FALSE(std::filesystem::exists("/proc/" + pid.substr(0, pid.find('\n')) + "/status"));
  for (const char* bad : {"0", "-1", "1.5", "ten", ""}) {
    CAPTURE(bad);
    const Captured refused = session.run({"--log", session.log_path.string(), "--timeout", bad, "--", "touch made"});
    CHECK(refused.exit_code == 2);
    CHECK(refused.err == dsh::detail::concat(prefix,
                                             "--timeout expects a whole number of seconds from 1 to 3153600000, got \"",
                                             bad, "\"\n", usage_text));
  }
  const Captured missing = session.run({"--log", session.log_path.string(), "--timeout"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err == prefix + "--timeout needs SECONDS\n" + usage_text);
  CHECK_FALSE(std::filesystem::exists(session.lab.workspace() / "made"));
}

TEST_CASE("dsh-sandboxed-bash: a stdout closed early stops the relay, and the command's status is still returned") {
  const Session session;
  session.switch_to(SandboxMode::workspace_write);
  // head reads one line and exits; the command goes on writing, then leaves a mark and exits 7.
  const std::string script = "'" + std::string(DSH_SANDBOXED_BASH) + "' --isolation off --log '" +
                             session.log_path.string() +
                             "' -- 'seq 1 200000; echo finished > finished; exit 7' | head -n 1; "
                             "echo \"status ${PIPESTATUS[0]}\"";
  const Captured piped = session.run_program("bash", {"-c", script});
  CHECK(piped.out == "1\nstatus 7\n");
  CHECK(piped.exit_code == 0);
  CHECK(read_file(session.lab.workspace() / "finished") == "finished\n");
}
