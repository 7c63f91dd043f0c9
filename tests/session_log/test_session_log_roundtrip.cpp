// create -> append -> close -> open: the header, every event and the resolved policy survive a
// restart, in the exact bytes of DSH's layout.
#include "support/session_log.hpp"

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

namespace {

std::vector<nlohmann::json> all_events(const SessionLog& log) {
  std::vector<nlohmann::json> events;
  for (const nlohmann::json& event : log.events()) {
    events.push_back(event);
  }
  return events;
}

} // namespace

TEST_CASE("a created log holds exactly its header line, durably named") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const dsh::SessionHeader header{"rt-1", "/srv/project \"x\"", 1764480000000};
  const auto log = SessionLog::create(path, header);
  CHECK(read_file(path) == header_line("rt-1", 1764480000000, R"("/srv/project \"x\"")"));
  CHECK(log.header() == header);
  CHECK(log.path() == path);
  CHECK(log.events().empty());
  CHECK(log.next_seq() == 0);
  CHECK(log.sandbox_mode_override() == std::nullopt);
  // Nothing but the log is left in the directory (the staging name is gone).
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("a header without cwd is written without the key and read back as absent") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  static_cast<void>(SessionLog::create(path, {"no-cwd", std::nullopt, 7}));
  CHECK(read_file(path) == header_line("no-cwd", 7));
  const auto log = SessionLog::open(path);
  CHECK(log.header() == dsh::SessionHeader{"no-cwd", std::nullopt, 7});
}

TEST_CASE("appended lines use DSH's key order and the next seq and current time") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  auto log = SessionLog::create(path, {"order", std::nullopt, 1});
  const std::int64_t before = dsh::detail::now_epoch_ms();
  dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  CHECK(log.append("turn/end", {{"turn", 0}}) == 1);
  const std::int64_t after = dsh::detail::now_epoch_ms();

  const std::string bytes = read_file(path);
  const std::string first = bytes.substr(header_line("order", 1).size());
  const auto time_of = [](const nlohmann::json& event) { return event["time"].get<std::int64_t>(); };
  const auto events = all_events(log);
  REQUIRE(events.size() == 2);
  CHECK(first == R"({"type":"sandbox/mode","seq":0,"time":)" + std::to_string(time_of(events[0])) +
                     R"(,"data":{"mode":"workspace-write"}})" + "\n" + R"({"type":"turn/end","seq":1,"time":)" +
                     std::to_string(time_of(events[1])) + R"(,"data":{"turn":0}})" + "\n");
  CHECK(time_of(events[0]) >= before);
  CHECK(time_of(events[1]) <= after);
  CHECK(time_of(events[0]) <= time_of(events[1]));
}

TEST_CASE("resolve and context give the same answer before and after a restart") {
  const TempDir dir;
  const auto workspace = dir / "workspace";
  std::filesystem::create_directory(workspace);
  const auto path = dir / "s.jsonl";
  const dsh::SessionHeader header{"restart", workspace.string(), 1764480000000};

  dsh::PolicyConfig config;
  config.workspace_root = dir.path();
  dsh::PolicyOwner owner(config);
  const auto enforced = owner.registerEnforcedFamily(dsh::Family::bash);

  dsh::ResolvedPolicy before;
  std::string context_before;
  std::vector<nlohmann::json> events_before;
  {
    auto log = SessionLog::create(path, header);
    log.append("user/message", {{"id", "m0"}, {"role", "user"}, {"content", "résumé — ✓"}});
    dsh::set_sandbox_mode(log, SandboxMode::danger_full_access);
    dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
    log.append("turn/end", {{"turn", 0}, {"reason", {{"kind", "completed"}}}});
    before = owner.resolve(log);
    context_before = owner.context(log);
    events_before = all_events(log);
  }
  CHECK(before.mode == SandboxMode::workspace_write);
  CHECK(before.mode_source == dsh::ModeSource::session);
  CHECK(before.root_source == dsh::RootSource::session);
  CHECK(before.workspace_root == dsh::canonical_path(workspace));
  CHECK(context_before.find("workspace-write") != std::string::npos);

  const auto reopened = SessionLog::open(path);
  CHECK(reopened.header() == header);
  CHECK(owner.resolve(reopened) == before);
  CHECK(owner.context(reopened) == context_before);
  CHECK(all_events(reopened) == events_before);
  CHECK(reopened.events()[0]["data"]["content"] == "résumé — ✓");
  CHECK(reopened.sandbox_mode_override() == SandboxMode::workspace_write);
  CHECK(dsh::effective_mode(reopened.events()) == SandboxMode::workspace_write);
  CHECK(owner.resolve(reopened, SandboxMode::read_only).mode_source == dsh::ModeSource::approved);
  CHECK(reopened.next_seq() == 4);
  CHECK_FALSE(reopened.tail_repair());
}

TEST_CASE("header fields the library does not interpret are kept as they are") {
  const TempDir dir;
  const auto path = dir / "child.jsonl";
  const std::string header =
      R"({"type":"session","version":0,"id":"child","createdAt":5,"parentSession":"parent-1","seedLength":3,)"
      R"("delegationDepth":2,"cwd":"/srv/child"})"
      "\n";
  write_file(path, header);
  {
    auto log = SessionLog::open(path);
    CHECK(log.header() == dsh::SessionHeader{"child", "/srv/child", 5});
    CHECK(log.header_json()["parentSession"] == "parent-1");
    CHECK(log.header_json()["seedLength"] == 3);
    CHECK(log.header_json()["delegationDepth"] == 2);
    dsh::set_sandbox_mode(log, SandboxMode::read_only);
  }
  const std::string bytes = read_file(path);
  CHECK(bytes.substr(0, header.size()) == header);
  CHECK(SessionLog::open(path).sandbox_mode_override() == SandboxMode::read_only);
}

TEST_CASE("the override is kept current by appends, without a scan") {
  const TempDir dir;
  auto log = SessionLog::create(dir / "s.jsonl", {"o1", std::nullopt, 1});
  CHECK(log.sandbox_mode_override() == std::nullopt);
  dsh::set_sandbox_mode(log, SandboxMode::danger_full_access);
  CHECK(log.sandbox_mode_override() == SandboxMode::danger_full_access);
  for (int i = 0; i < 20; ++i) {
    log.append("assistant/chunk", {{"text", std::to_string(i)}});
  }
  CHECK(log.sandbox_mode_override() == SandboxMode::danger_full_access);
  dsh::set_sandbox_mode(log, SandboxMode::danger_full_access); // unchanged mode: still an event
  CHECK(log.events().size() == 22);
  dsh::set_sandbox_mode(log, SandboxMode::read_only);
  CHECK(log.sandbox_mode_override() == SandboxMode::read_only);
  CHECK(dsh::effective_mode(log.events()) == SandboxMode::read_only);
}

TEST_CASE("the events view is a sized random-access range that reads rows lazily") {
  static_assert(std::ranges::random_access_range<SessionLog::EventView>);
  static_assert(std::ranges::sized_range<SessionLog::EventView>);
  static_assert(std::ranges::view<SessionLog::EventView>);
  static_assert(dsh::AppendableSession<SessionLog>);
  static_assert(dsh::HasSandboxModeOverride<SessionLog>);

  const TempDir dir;
  auto log = SessionLog::create(dir / "s.jsonl", {"view", std::nullopt, 1});
  for (int i = 0; i < 5; ++i) {
    log.append("turn/end", {{"turn", i}});
  }
  const auto view = log.events();
  log.append("turn/end", {{"turn", 5}}); // a view keeps the rows present when it was taken
  CHECK(view.size() == 5);
  CHECK(log.events().size() == 6);
  auto it = view.end();
  --it;
  CHECK((*it)["seq"] == 4);
  CHECK((*(view.begin() + 2))["seq"] == 2);
  CHECK(view[3]["seq"] == 3);
  CHECK(view.end() - view.begin() == 5);
  std::vector<int> reversed;
  for (auto back = std::make_reverse_iterator(view.end()); back != std::make_reverse_iterator(view.begin()); ++back) {
    reversed.push_back((*back)["seq"].get<int>());
  }
  CHECK(reversed == std::vector<int>{4, 3, 2, 1, 0});
}
