// The dsh-policy inspector and the agent-host demo as real processes: exact standard output,
// standard error and exit status for every fixture in tests/fixtures/sessions, the usage
// errors, `set`, and the inspector reading the log the demo leaves behind.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"
#include "support/zstd_cli.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// What one run of a program left.
struct Run {
  int status = -1; ///< The exit status; -1 when it did not exit normally.
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Runs `program` with `args` in the directory `cwd`, capturing its output through files in `cwd`'s
/// sibling scratch directory `scratch`.
/// Checks that `show` succeeded and its first three lines name `log`, `session` and `mode`.
void check_shown(const Run& shown, const std::string& log, const std::string& session, const std::string& mode) {
  CHECK(shown.status == 0);
  CHECK(shown.out.starts_with("log:       " + log + "\nsession:   " + session + "\nmode:      " + mode));
}

Run run(const fs::path& scratch, const fs::path& cwd, const std::string& program,
        const std::vector<std::string>& args) {
  const fs::path out = scratch / "stdout";
  const fs::path err = scratch / "stderr";
  std::vector<std::string> words{program};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(words.size() + 1);
  for (std::string& word : words) {
    argv.push_back(word.data());
  }
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out_fd < 0 || err_fd < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0 || ::chdir(cwd.c_str()) != 0) {
      ::_exit(127);
    }
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return Run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

/// A scratch directory for captured output and a work directory holding writable fixture copies.
struct Workspace {
  dsh::test::TempDir tmp;
  fs::path scratch = make(tmp / "scratch");
  fs::path work = make(tmp / "work");

  static fs::path make(const fs::path& path) {
    fs::create_directory(path);
    return path;
  }
  /// Copies a fixture into the work directory, writable, under its own name.
  void fixture(const std::string& name) const {
    fs::copy_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / name, work / name);
    fs::permissions(work / name, fs::perms::owner_read | fs::perms::owner_write);
  }
  [[nodiscard]] Run policy(const std::vector<std::string>& args) const {
    return run(scratch, work, DSH_POLICY_EXE, args);
  }
};

/// The expected results of `show` (defaults: all families, none escalatable, root = the working
/// directory) and `history` for one fixture.
struct Expected {
  int status;
  std::string show_out;
  std::string history_out;
  std::string err;
};

std::map<std::string, Expected> expected_results(const std::string& work_root) {
  const std::string all = "families:  enforced filesystem, bash, terminal; escalatable none\n";
  const std::string refused_out;
  return {
      {"basic.jsonl",
       {0,
        "log:       basic.jsonl\n"
        "session:   sample-basic\n"
        "mode:      danger-full-access, set by the switch at seq 6, time 1767225600360 (2026-01-01T00:00:00.360Z), "
        "source delegation\n"
        "root:      /home/dev/sample-project (the session's cwd)\n" +
            all +
            "sandbox:policy:\n"
            "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit "
            "tools, one-shot bash commands, or terminal sessions.\n",
        "seq 2  time 1767225600120 (2026-01-01T00:00:00.120Z)  mode workspace-write  source -\n"
        "seq 5  time 1767225600300 (2026-01-01T00:00:00.300Z)  mode read-only  source -\n"
        "seq 6  time 1767225600360 (2026-01-01T00:00:00.360Z)  mode danger-full-access  source delegation\n",
        ""}},
      {"no-switch.jsonl",
       {0,
        "log:       no-switch.jsonl\n"
        "session:   sample-no-switch\n"
        "mode:      read-only, the deployment default (the log holds no sandbox/mode switch)\n"
        "root:      " +
            work_root + " (the fallback root: --root or the working directory)\n" + all +
            "sandbox:policy:\n"
            "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal "
            "sessions cannot modify files in the standing mode.\n",
        "no sandbox/mode switch in no-switch.jsonl; the deployment default applies\n", ""}},
      {"packed-rows.jsonl",
       {0,
        "log:       packed-rows.jsonl\n"
        "session:   sample-packed\n"
        "mode:      workspace-write, set by the switch at seq 5, time 1767225600030 (2026-01-01T00:00:00.030Z), "
        "source -\n"
        "root:      /home/dev/sample-packed (the session's cwd)\n" +
            all +
            "sandbox:policy:\n"
            "Current DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, and terminal "
            "sessions may modify files under the session workspace: \"/home/dev/sample-packed\". Some platform "
            "temporary areas may also be writable.\n",
        "seq 0  time 1767225600010 (2026-01-01T00:00:00.010Z)  mode read-only  source -\n"
        "seq 5  time 1767225600030 (2026-01-01T00:00:00.030Z)  mode workspace-write  source -\n",
        ""}},
      {"torn-tail.jsonl",
       {0,
        "log:       torn-tail.jsonl\n"
        "session:   sample-torn\n"
        "mode:      workspace-write, set by the switch at seq 0, time 1767225600010 (2026-01-01T00:00:00.010Z), "
        "source -\n"
        "root:      /home/dev/sample-torn (the session's cwd)\n" +
            all +
            "sandbox:policy:\n"
            "Current DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, and terminal "
            "sessions may modify files under the session workspace: \"/home/dev/sample-torn\". Some platform "
            "temporary areas may also be writable.\n",
        "seq 0  time 1767225600010 (2026-01-01T00:00:00.010Z)  mode workspace-write  source -\n",
        "dsh-policy: session log \"torn-tail.jsonl\" line 3: cut off a torn last line (63 bytes without a final "
        "newline)\n"}},
      {"forged-mode.jsonl",
       {1, refused_out, refused_out,
        "dsh-policy: session log \"forged-mode.jsonl\" line 3: sandbox/mode carries unknown mode \"root-shell\"\n"}},
      {"corrupt-middle.jsonl",
       {1, refused_out, refused_out,
        "dsh-policy: session log \"corrupt-middle.jsonl\" line 3: not valid JSON at column 76: unterminated "
        "string\n"}},
      {"seq-gap.jsonl",
       {1, refused_out, refused_out, "dsh-policy: session log \"seq-gap.jsonl\" line 3: seq 2 where 1 was expected\n"}},
  };
}

} // namespace

TEST_CASE("dsh-policy show and history on every session fixture", "[cli]") {
  const Workspace ws;
  const std::map<std::string, Expected> expected = expected_results(fs::canonical(ws.work).string());

  std::set<std::string> fixtures;
  for (const auto& entry : fs::directory_iterator(fs::path(DSH_FIXTURES_DIR) / "sessions")) {
    if (entry.path().extension() == ".jsonl") {
      fixtures.insert(entry.path().filename().string());
    }
  }
  std::set<std::string> covered;
  for (const auto& [name, result] : expected) {
    covered.insert(name);
  }
  REQUIRE(fixtures == covered); // a new fixture needs its expected output here

  for (const auto& [name, result] : expected) {
    CAPTURE(name);
    const std::string original = read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / name);
    ws.fixture(name);

    const Run shown = ws.policy({"show", name});
    CHECK(shown.status == result.status);
    CHECK(shown.out == result.show_out);
    CHECK(shown.err == result.err);

    const Run listed = ws.policy({"history", name});
    CHECK(listed.status == result.status);
    CHECK(listed.out == result.history_out);
    if (result.status == 0) {
      CHECK(listed.err.empty()); // a torn tail is cut and reported once, by the first open
    } else {
      CHECK(listed.err == result.err);
      CHECK(read_file(ws.work / name) == original); // refused: the file is untouched
    }
  }
  const std::string torn = read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / "torn-tail.jsonl");
  CHECK(read_file(ws.work / "torn-tail.jsonl") == torn.substr(0, torn.size() - 63));
}

TEST_CASE("dsh-policy show options and --json", "[cli]") {
  const Workspace ws;
  ws.fixture("basic.jsonl");
  ws.fixture("no-switch.jsonl");

  const Run json = ws.policy({"show", "basic.jsonl", "--json", "--escalatable", "bash"});
  CHECK(json.status == 0);
  CHECK(json.err.empty());
  CHECK(
      json.out ==
      R"({"context":"Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit tools, one-shot bash commands, or terminal sessions.","enforced":["filesystem","bash","terminal"],"escalatable":["bash"],"log":"basic.jsonl","mode":"danger-full-access","modeSource":"session","rootSource":"session","session":"sample-basic","switch":{"seq":6,"source":"delegation","time":1767225600360},"workspaceRoot":"/home/dev/sample-project"})"
      "\n");

  const Run escalatable = ws.policy({"show", "no-switch.jsonl", "--families=bash,filesystem", "--escalatable",
                                     "terminal,bash", "--root", "/srv/../srv/fallback/"});
  CHECK(escalatable.status == 0);
  CHECK(escalatable.out ==
        "log:       no-switch.jsonl\n"
        "session:   sample-no-switch\n"
        "mode:      read-only, the deployment default (the log holds no sandbox/mode switch)\n"
        "root:      /srv/fallback (the fallback root: --root or the working directory)\n"
        "families:  enforced filesystem, bash; escalatable bash\n"
        "sandbox:policy:\n"
        "Current DSH file policy: read-only. The write and edit tools and one-shot bash commands cannot modify files "
        "in the standing mode. For one-shot bash commands, do not refuse a required modification from this standing "
        "mode alone: attempt it normally and follow the tool's denial and escalation guidance.\n");

  const Run nothing = ws.policy({"show", "no-switch.jsonl", "--families", "", "--default-mode", "danger-full-access",
                                 "--root=/srv/fallback", "--json"});
  CHECK(nothing.status == 0);
  CHECK(
      nothing.out ==
      R"({"context":"","enforced":[],"escalatable":[],"log":"no-switch.jsonl","mode":"danger-full-access","modeSource":"deployment","rootSource":"deployment","session":"sample-no-switch","switch":null,"workspaceRoot":"/srv/fallback"})"
      "\n");
}

TEST_CASE("dsh-policy set appends one switch through set_sandbox_mode", "[cli]") {
  const Workspace ws;
  ws.fixture("packed-rows.jsonl");
  const std::string before = read_file(ws.work / "packed-rows.jsonl");

  const Run set = ws.policy({"set", "packed-rows.jsonl", "danger-full-access"});
  CHECK(set.status == 0);
  CHECK(set.err.empty());
  CHECK(set.out == "appended sandbox/mode danger-full-access at seq 10 to packed-rows.jsonl\n");
  const std::string after = read_file(ws.work / "packed-rows.jsonl");
  REQUIRE(after.starts_with(before));
  const std::string line = after.substr(before.size());
  CHECK(line.starts_with(R"({"type":"sandbox/mode","seq":10,"time":)"));
  CHECK(line.ends_with(R"(,"data":{"mode":"danger-full-access"}})"
                       "\n"));

  const Run history = ws.policy({"history", "packed-rows.jsonl"});
  CHECK(history.status == 0);
  CHECK(history.out.starts_with("seq 0  time 1767225600010 (2026-01-01T00:00:00.010Z)  mode read-only  source -\n"
                                "seq 5  time 1767225600030 (2026-01-01T00:00:00.030Z)  mode workspace-write  "
                                "source -\nseq 10  time "));
  CHECK(history.out.ends_with("  mode danger-full-access  source -\n"));

  ws.fixture("forged-mode.jsonl");
  const Run refused = ws.policy({"set", "forged-mode.jsonl", "read-only"});
  CHECK(refused.status == 1);
  CHECK(refused.out.empty());
  CHECK(refused.err ==
        "dsh-policy: session log \"forged-mode.jsonl\" line 3: sandbox/mode carries unknown mode \"root-shell\"\n");
  CHECK(read_file(ws.work / "forged-mode.jsonl") ==
        read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / "forged-mode.jsonl"));
}

TEST_CASE("dsh-policy usage errors exit 2 and touch nothing", "[cli]") {
  const Workspace ws;
  ws.fixture("basic.jsonl");
  const std::string before = read_file(ws.work / "basic.jsonl");
  const std::string hint = " (see dsh-policy --help)\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{}, "missing command"},
      {{"inspect", "basic.jsonl"}, "unknown command \"inspect\""},
      {{"show"}, "show needs a session log"},
      {{"show", "--json"}, "show needs a session log"},
      {{"show", "basic.jsonl", "--colour"}, "unknown option --colour for show"},
      {{"show", "basic.jsonl", "--root"}, "option --root needs a value"},
      {{"show", "basic.jsonl", "--root="}, "option --root needs a non-empty directory"},
      {{"show", "basic.jsonl", "--families", "filesystem,network"},
       "unknown family \"network\"; expected filesystem, bash or terminal"},
      {{"show", "basic.jsonl", "--families", "bash,"}, "a family list must not end with ','"},
      {{"show", "basic.jsonl", "--default-mode", "Read-Only"},
       "unknown mode \"Read-Only\"; expected read-only, workspace-write or danger-full-access"},
      {{"history", "basic.jsonl", "extra"}, "history takes only a session log"},
      {{"set", "basic.jsonl"}, "set takes a session log and a mode"},
      {{"set", "basic.jsonl", "host-root"},
       "unknown mode \"host-root\"; expected read-only, workspace-write or danger-full-access"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    const Run result = ws.policy(args);
    CHECK(result.status == 2);
    CHECK(result.out.empty());
    CHECK(result.err == std::string("dsh-policy: ").append(message).append(hint));
  }
  CHECK(read_file(ws.work / "basic.jsonl") == before);

  const Run help = ws.policy({"--help"});
  CHECK(help.status == 0);
  CHECK(help.err.empty());
  CHECK(help.out.starts_with("usage: dsh-policy show LOG [--families LIST] [--escalatable LIST] [--default-mode "
                             "MODE] [--root DIR] [--json]\n"));

  const Run missing = ws.policy({"show", "missing.jsonl"});
  CHECK(missing.status == 1);
  CHECK(missing.err == "dsh-policy: session log \"missing.jsonl\": cannot open: No such file or directory\n");
}

TEST_CASE("the agent-host demo passes its own expectations and leaves a log dsh-policy reads", "[cli][demo]") {
  const Workspace ws;
  const Run demo = run(ws.scratch, ws.work, DSH_AGENT_HOST_EXE, {"run"});
  CHECK(demo.status == 0);
  CHECK(demo.err.empty());
  CHECK(demo.out.ends_with("every expectation held\n"));
  // The escalation choices a tool schema advertises: both wider modes in read-only, only
  // danger-full-access in workspace-write, none in danger-full-access.
  CHECK(
      demo.out.find("\"my file policy is read-only\"\n  sandbox_permissions: filesystem "
                    "[\"workspace-write\",\"danger-full-access\"], bash [\"workspace-write\",\"danger-full-access\"], "
                    "terminal omitted\n") != std::string::npos);
  CHECK(demo.out.find("\"my file policy is workspace-write\"\n  sandbox_permissions: filesystem "
                      "[\"danger-full-access\"], bash [\"danger-full-access\"], terminal omitted\n") !=
        std::string::npos);
  CHECK(demo.out.find("\"my file policy is danger-full-access\"\n  sandbox_permissions: filesystem omitted, bash "
                      "omitted, terminal omitted\n") != std::string::npos);
  CHECK(demo.out.find("\n-- a stale bash call asks for sandbox_permissions workspace-write: refused before anything "
                      "runs --\n  sandbox escalation to workspace-write is not strictly wider than this call's current "
                      "workspace-write mode; approve one of: danger-full-access\n") != std::string::npos);

  const Run history = ws.policy({"history", "run/session.jsonl"});
  CHECK(history.status == 0);
  CHECK(history.out.starts_with("seq 1  time "));
  CHECK(history.out.find("  mode workspace-write  source -\nseq 4  time ") != std::string::npos);
  CHECK(history.out.ends_with("  mode danger-full-access  source -\n"));

  const Run shown = ws.policy({"show", "run/session.jsonl", "--families", "filesystem"});
  CHECK(shown.status == 0);
  CHECK(shown.out.find("\nroot:      " + fs::canonical(ws.work / "run" / "repos" / "project").string() +
                       " (the session's cwd)\n") != std::string::npos);
  CHECK(shown.out.ends_with("sandbox:policy:\nCurrent DSH file policy: danger-full-access. The DSH file sandbox "
                            "does not restrict the write and edit tools.\n"));

  const Run again = run(ws.scratch, ws.work, DSH_AGENT_HOST_EXE, {"run"});
  CHECK(again.status == 1); // the directory holds a session already: nothing is overwritten
  CHECK(again.err.starts_with("agent_host: "));
  const Run usage = run(ws.scratch, ws.work, DSH_AGENT_HOST_EXE, {"--verbose"});
  CHECK(usage.status == 2);
  CHECK(usage.err == "usage: agent_host [DIR]\n");
}

namespace {

/// A compressed DSH session "z" (cwd /srv/z) as the zstd tool writes it: a header frame, then one
/// batch frame of two rows, the second switching to workspace-write.
std::string compressed_session() {
  using dsh::test::zstd_cli_compress;
  return zstd_cli_compress(R"({"type":"session","version":0,"id":"z","createdAt":1,"cwd":"/srv/z","delegationDepth":0})"
                           "\n") +
         zstd_cli_compress(R"({"type":"user/message","seq":0,"time":2,"data":{"text":"hi"}})"
                           "\n"
                           R"({"type":"sandbox/mode","seq":1,"time":3,"data":{"mode":"workspace-write"}})"
                           "\n");
}

/// Writes `content` to `path`, creating its directories.
void plant(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

} // namespace

TEST_CASE("dsh-policy reads sessions from a DSH session store by id", "[cli][store]") {
  const Workspace ws;
  const fs::path root = ws.work / "store";
  plant(root / "--home-dev-sample-project--" / "sample-basic" / "session.jsonl",
        read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / "basic.jsonl"));
  plant(root / "_no-cwd" / "sample-no-switch" / "session.jsonl",
        read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / "no-switch.jsonl"));
  plant(root / "--srv-z--" / "z" / "session.jsonl.zstd", compressed_session());
  const std::string basic = (root / "--home-dev-sample-project--" / "sample-basic" / "session.jsonl").string();

  const Run history = ws.policy({"history", "--dsh-root", "store", "--session", "sample-basic"});
  CHECK(history.status == 0);
  CHECK(history.err.empty());
  CHECK(history.out ==
        "seq 2  time 1767225600120 (2026-01-01T00:00:00.120Z)  mode workspace-write  source -\n"
        "seq 5  time 1767225600300 (2026-01-01T00:00:00.300Z)  mode read-only  source -\n"
        "seq 6  time 1767225600360 (2026-01-01T00:00:00.360Z)  mode danger-full-access  source delegation\n");

  const Run shown = ws.policy({"show", "--session=sample-basic", "--families", "filesystem", "--dsh-root=store",
                               "--cwd", "/home/dev/sample-project"});
  check_shown(shown, "store/--home-dev-sample-project--/sample-basic/session.jsonl", "sample-basic",
              "danger-full-access, set by the switch at seq 6");

  const Run set = ws.policy({"set", "--dsh-root", "store", "--session", "sample-no-switch", "workspace-write"});
  CHECK(set.status == 0);
  CHECK(set.out == "appended sandbox/mode workspace-write at seq 2 to store/_no-cwd/sample-no-switch/session.jsonl\n");

  const Run listed = ws.policy({"list", "--dsh-root", "store"});
#if DSH_SANDBOX_POLICY_HAS_ZSTD
  CHECK(listed.status == 0);
  CHECK(listed.err.empty());
  CHECK(listed.out == "\"sample-basic\"  danger-full-access  session  "
                      "--home-dev-sample-project--/sample-basic/session.jsonl\n"
                      "\"z\"  workspace-write  session  --srv-z--/z/session.jsonl.zstd\n"
                      "\"sample-no-switch\"  workspace-write  session  _no-cwd/sample-no-switch/session.jsonl\n");

  // The compressed session, by id: its effective mode, and an appended switch DSH can read.
  const Run compressed = ws.policy({"show", "--dsh-root", "store", "--session", "z"});
  check_shown(compressed, "store/--srv-z--/z/session.jsonl.zstd", "z", "workspace-write, set by the switch at seq 1");
  CHECK(compressed.err.empty());
  const Run switched = ws.policy({"set", "--dsh-root", "store", "--session", "z", "read-only"});
  CHECK(switched.status == 0);
  CHECK(switched.out == "appended sandbox/mode read-only at seq 2 to store/--srv-z--/z/session.jsonl.zstd\n");
  CHECK(ws.policy({"show", "--dsh-root", "store", "--session", "z"})
            .out.find("mode:      read-only, set by the switch at seq 2") != std::string::npos);

  // A crash in the middle of a DSH flush: the last frame lost its checksum. show repairs it,
  // keeps its complete row, and says so.
  const fs::path z_log = root / "--srv-z--" / "z" / "session.jsonl.zstd";
  const std::uint64_t before = fs::file_size(z_log);
  {
    const std::string batch =
        dsh::test::zstd_cli_compress(R"({"type":"sandbox/mode","seq":3,"time":4,"data":{"mode":"danger-full-access"}})"
                                     "\n");
    std::ofstream(z_log, std::ios::binary | std::ios::app) << batch.substr(0, batch.size() - 2);
    const Run torn = ws.policy({"show", "--dsh-root", "store", "--session", "z"});
    CHECK(torn.status == 0);
    CHECK(torn.err == "dsh-policy: session log \"store/--srv-z--/z/session.jsonl.zstd\": repaired a torn last frame "
                      "at byte " +
                          std::to_string(before) + " (cut " + std::to_string(batch.size() - 2) +
                          " bytes; complete rows kept in a new frame: 1)\n");
    CHECK(torn.out.find("mode:      danger-full-access, set by the switch at seq 3") != std::string::npos);
  }
#else
  CHECK(listed.status == 1); // this build cannot read the Zstandard session
  CHECK(listed.out == "\"sample-basic\"  danger-full-access  session  "
                      "--home-dev-sample-project--/sample-basic/session.jsonl\n"
                      "\"sample-no-switch\"  workspace-write  session  _no-cwd/sample-no-switch/session.jsonl\n");
  CHECK(listed.err ==
        "dsh-policy: --srv-z--/z/session.jsonl.zstd: session log \"store/--srv-z--/z/session.jsonl.zstd\": "
        "cannot read a Zstandard-compressed session log: dsh-sandbox-policy was built without Zstandard "
        "support (libzstd was not found)\n");
#endif

  fs::remove_all(root / "--srv-z--");
  plant(root / "_no-cwd" / "fresh" / "session.jsonl",
        R"({"type":"session","version":0,"id":"fresh","createdAt":1,"delegationDepth":0})"
        "\n");
  const Run defaults = ws.policy({"list", "--dsh-root=store", "--default-mode", "danger-full-access"});
  CHECK(defaults.status == 0);
  CHECK(defaults.err.empty());
  CHECK(defaults.out.find(
            "\n\"fresh\"  danger-full-access  default  _no-cwd/fresh/session.jsonl\n\"sample-no-switch\"") !=
        std::string::npos);

  const Run missing = ws.policy({"show", "--dsh-root", "store", "--session", "../store"});
  CHECK(missing.status == 1);
  CHECK(missing.err ==
        "dsh-policy: session log \"store\": no DSH session \"../store\" (directory \"..~002Fstore\") in any project "
        "directory\n");

  const Run empty = ws.policy({"list", "--dsh-root", "scratch-free"});
  CHECK(empty.status == 1);
  CHECK(empty.err.starts_with("dsh-policy: session log \"scratch-free\": cannot read the directory: "));

  const std::string hint = " (see dsh-policy --help)\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage{
      {{"show", "--dsh-root", "store"}, "--dsh-root needs --session ID"},
      {{"show", "--session", "x"}, "--session and --cwd name a session of a DSH store: they need --dsh-root DIR"},
      {{"list"}, "list takes --dsh-root DIR and no session"},
      {{"list", "--dsh-root", "store", "--session", "x"}, "list takes --dsh-root DIR and no session"},
      {{"list", "--dsh-root", "store", "extra"}, "list takes only --dsh-root DIR and --default-mode MODE"},
      {{"history", "--dsh-root", "store", "--session", "sample-basic", "extra"}, "history takes only a session log"},
      {{"show", "--dsh-root", "store", "--dsh-root", "store", "--session", "x"}, "option --dsh-root is given twice"},
      {{"show", "--dsh-root"}, "option --dsh-root needs a value"},
  };
  for (const auto& [args, message] : usage) {
    CAPTURE(args);
    const Run result = ws.policy(args);
    CHECK(result.status == 2);
    CHECK(result.err == std::string("dsh-policy: ").append(message).append(hint));
  }
  CHECK(read_file(basic) == read_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / "basic.jsonl"));
}

TEST_CASE("dsh-policy reads lone surrogates as DSH writes them and refuses forged modes that carry one",
          "[cli][surrogates]") {
  const Workspace ws;
  const std::string header =
      R"({"type":"session","version":0,"id":"lone","createdAt":1764480000000,"cwd":"/srv/lone","delegationDepth":0})"
      "\n";
  const std::string split = header +
                            R"({"type":"assistant/chunk","seq":0,"time":1,"data":{"delta":"\ud83d"}})"
                            "\n"
                            R"({"type":"assistant/chunk","seq":1,"time":2,"data":{"delta":"\ude00"}})"
                            "\n"
                            R"({"type":"sandbox/mode","seq":2,"time":1764480000003,"data":{"mode":"workspace-write"}})"
                            "\n"
                            R"({"type":"sandbox/mode\udc00","seq":3,"time":4,"data":{"mode":"danger-full-access"}})"
                            "\n";
  plant(ws.work / "split.jsonl", split);
  const Run history = ws.policy({"history", "split.jsonl"});
  CHECK(history.status == 0);
  CHECK(history.err.empty());
  CHECK(history.out == "seq 2  time 1764480000003 (2025-11-30T05:20:00.003Z)  mode workspace-write  source -\n");

  const std::string forged = header +
                             R"({"type":"sandbox/mode","seq":0,"time":1,"data":{"mode":"workspace-write\ud800"}})"
                             "\n";
  plant(ws.work / "forged.jsonl", forged);
  for (const char* command : {"show", "history"}) {
    const Run refused = ws.policy({command, "forged.jsonl"});
    CHECK(refused.status == 1);
    CHECK(refused.out.empty());
    CHECK(refused.err == "dsh-policy: session log \"forged.jsonl\" line 2: sandbox/mode carries unknown mode "
                         "\"workspace-write\\ud800\"\n");
  }
  CHECK(read_file(ws.work / "forged.jsonl") == forged);
  CHECK(read_file(ws.work / "split.jsonl") == split);
}
