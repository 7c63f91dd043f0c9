// Every fixture of tests/fixtures/sessions gives exactly the result its README lists.
// Each test opens a copy in a temporary directory: opening may repair a torn tail.
#include "support/session_log.hpp"

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

TEST_CASE("basic.jsonl opens with 8 events, a delegated danger-full-access switch and its cwd") {
  const TempDir dir;
  const auto path = copy_fixture(dir, "basic.jsonl");
  const auto log = SessionLog::open(path);

  CHECK(log.events().size() == 8);
  CHECK(log.sandbox_mode_override() == SandboxMode::danger_full_access);
  CHECK(dsh::effective_mode(log.events()) == SandboxMode::danger_full_access);
  const nlohmann::json switched = log.events()[6];
  CHECK(switched["type"] == "sandbox/mode");
  CHECK(switched["seq"] == 6);
  CHECK(switched["data"] == nlohmann::json{{"mode", "danger-full-access"}, {"source", "delegation"}});
  CHECK(log.header().id == "sample-basic");
  CHECK(log.header().cwd == std::optional<std::string>("/home/dev/sample-project"));
  CHECK(log.header().created_at == 1767225600000);
  CHECK(log.header_json()["delegationDepth"] == 0);
  CHECK(log.events()[7]["data"]["content"][0]["text"] == "Rename \"util.hpp\" \u2014 carefully.");
  CHECK(log.next_seq() == 8);
  CHECK_FALSE(log.tail_repair());
  CHECK(read_file(path) == read_file(fixture("basic.jsonl")));
}

TEST_CASE("no-switch.jsonl opens with 2 events, no override, and resolves to the deployment default and root") {
  const TempDir dir;
  const auto path = copy_fixture(dir, "no-switch.jsonl");
  const auto log = SessionLog::open(path);

  CHECK(log.events().size() == 2);
  CHECK(log.events()[1]["type"] == "approval/mode");
  CHECK(log.sandbox_mode_override() == std::nullopt);
  CHECK(dsh::effective_mode(log.events()) == std::nullopt);
  CHECK(log.header().cwd == std::nullopt);

  dsh::PolicyConfig config;
  config.mode = SandboxMode::read_only;
  config.workspace_root = dir.path();
  const dsh::PolicyOwner owner(config);
  const dsh::ResolvedPolicy policy = owner.resolve(log);
  CHECK(policy.mode == SandboxMode::read_only);
  CHECK(policy.mode_source == dsh::ModeSource::deployment);
  CHECK(policy.root_source == dsh::RootSource::deployment);
  CHECK(policy.workspace_root == dsh::canonical_path(dir.path()));
  CHECK(read_file(path) == read_file(fixture("no-switch.jsonl")));
}

TEST_CASE("packed-rows.jsonl counts the packed rows' seqs and the next append gets seq 10") {
  const TempDir dir;
  const auto path = copy_fixture(dir, "packed-rows.jsonl");
  auto log = SessionLog::open(path);

  REQUIRE(log.events().size() == 5);
  const nlohmann::json text_chunks = log.events()[1];
  CHECK(text_chunks["type"] == "text-chunks");
  CHECK(text_chunks["seq0"] == 1); // covers 1..4
  CHECK(text_chunks["data"]["dt"].size() + 1 == 4);
  const nlohmann::json call_chunks = log.events()[3];
  CHECK(call_chunks["type"] == "tool-call-chunks");
  CHECK(call_chunks["seq0"] == 6); // covers 6..8
  CHECK(call_chunks["data"]["dt"].size() + 1 == 3);
  CHECK(log.events()[2]["seq"] == 5);
  CHECK(log.events()[4]["seq"] == 9);
  CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);
  CHECK(log.next_seq() == 10);

  CHECK(log.append("turn/start", {{"turn", 1}}) == 10);
  const auto reopened = SessionLog::open(path);
  CHECK(reopened.events().size() == 6);
  CHECK(reopened.events()[5]["seq"] == 10);
  CHECK(reopened.next_seq() == 11);
}

TEST_CASE("forged-mode.jsonl is refused at line 3 and left unchanged") {
  const TempDir dir;
  const auto path = copy_fixture(dir, "forged-mode.jsonl");
  const dsh::LogError error = open_error(path);
  CHECK(error.line() == 3);
  CHECK(error.path() == path);
  CHECK(std::string(error.what()) == log_message(path, 3, R"(sandbox/mode carries unknown mode "root-shell")"));
  CHECK(std::string(error.what()) ==
        "session log \"" + path.string() + R"(" line 3: sandbox/mode carries unknown mode "root-shell")");
  CHECK(read_file(path) == read_file(fixture("forged-mode.jsonl")));
}

TEST_CASE("torn-tail.jsonl opens after cutting its torn last line, and reports the repair") {
  const TempDir dir;
  const auto path = copy_fixture(dir, "torn-tail.jsonl");
  const std::string original = read_file(fixture("torn-tail.jsonl"));
  const std::size_t kept = original.find('\n', original.find('\n') + 1) + 1; // header and one event
  {
    const auto log = SessionLog::open(path);
    CHECK(log.events().size() == 1);
    CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);
    REQUIRE(log.tail_repair());
    CHECK(*log.tail_repair() == dsh::TailRepair{3, kept, original.size() - kept});
  }
  CHECK(read_file(path) == original.substr(0, kept));
  const auto reopened = SessionLog::open(path);
  CHECK_FALSE(reopened.tail_repair());
  CHECK(reopened.events().size() == 1);
}

TEST_CASE("a fixture broken at line 3 is refused there, with the reason, and left unchanged") {
  const std::array<std::pair<const char*, const char*>, 2> broken{{
      {"corrupt-middle.jsonl", "not valid JSON at column 76: unterminated string"}, // not the last line
      {"seq-gap.jsonl", "seq 2 where 1 was expected"},
  }};
  for (const auto& [name, reason] : broken) {
    CAPTURE(name);
    const TempDir dir;
    const auto path = copy_fixture(dir, name);
    const dsh::LogError error = open_error(path);
    CHECK(error.line() == 3);
    CHECK(std::string(error.what()) == log_message(path, 3, reason));
    CHECK(read_file(path) == read_file(fixture(name)));
  }
}
