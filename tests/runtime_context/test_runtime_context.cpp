// The runtime-context snapshot (docs/contract.md#the-runtime-context-snapshot) on the in-memory dsh::Session: the
// assembler's text byte for byte, and when announce_runtime_context appends (and when it does not).
#include <dsh/runtime_context.hpp>

#include "support/catch.hpp"
#include "support/scoped.hpp"
#include "support/temp_dir.hpp"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* PREAMBLE = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";
constexpr const char* CLEARED = "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";
constexpr const char* READ_ONLY_ALL =
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools and one-shot bash commands, do not "
    "refuse a required modification from this standing mode alone: attempt it normally and follow the tool's "
    "denial and escalation guidance.";

/// A host in a real temporary directory: the session workspace is reached through a symbolic
/// link; all three families are enforced, filesystem and bash escalatable.
struct Host {
  dsh::test::TempDir tmp;
  fs::path real = make_real(tmp);
  fs::path link = make_link(tmp, real);
  dsh::PolicyOwner owner{dsh::PolicyConfig{dsh::SandboxMode::read_only, tmp / "fallback", "DSH"}};
  std::vector<dsh::Disposer> backends = mount(owner);

  static fs::path make_real(const dsh::test::TempDir& dir) {
    fs::create_directories(dir / "real" / "project");
    return dir / "real" / "project";
  }
  static fs::path make_link(const dsh::test::TempDir& dir, const fs::path& target) {
    fs::create_directory_symlink(target, dir / "workspace");
    return dir / "workspace";
  }
  static std::vector<dsh::Disposer> mount(dsh::PolicyOwner& policy) {
    std::vector<dsh::Disposer> held;
    held.push_back(policy.registerEnforcedFamily(dsh::Family::filesystem));
    held.push_back(policy.registerEnforcedFamily(dsh::Family::bash));
    held.push_back(policy.registerEnforcedFamily(dsh::Family::terminal));
    held.push_back(policy.registerEscalatableFamily(dsh::Family::filesystem));
    held.push_back(policy.registerEscalatableFamily(dsh::Family::bash));
    return held;
  }

  [[nodiscard]] dsh::Session session(std::vector<json> seed = {}) const {
    return dsh::Session(dsh::SessionHeader{"s-1", link.string(), 1764480000000}, std::move(seed));
  }
  template <class S> [[nodiscard]] std::string snapshot(const S& s) const {
    return dsh::RuntimeContext{}.add_sandbox_policy(owner, s).render();
  }
  /// The canonical workspace root as the model text quotes it (computed with the standard library).
  [[nodiscard]] std::string quoted_root() const {
    const std::string root = fs::canonical(real).string();
    REQUIRE(root.find_first_of("\"\\") == std::string::npos);
    return '"' + root + '"';
  }
};

/// The data of a snapshot message as docs/contract.md#the-runtime-context-snapshot spells it.
json snapshot_data(const std::string& id, const std::string& text) {
  return json{{"id", id},
              {"role", "user"},
              {"content", json::array({json{{"type", "text"}, {"text", text}}})},
              {"source", json{{"kind", "plugin"}, {"plugin", "@deepseek-ai/dsh-system-prompt"}}}};
}

json event(const std::string& type, std::int64_t seq, json data) {
  return json{{"type", type}, {"seq", seq}, {"time", 1764480000000 + seq}, {"data", std::move(data)}};
}

/// A session whose events() is only an input range, as a host streaming its own store might offer.
class StreamedSession {
public:
  class Iterator {
  public:
    using value_type = json;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(const std::vector<json>* events, std::size_t index) : events_(events), index_(index) {}
    const json& operator*() const { return (*events_)[index_]; }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    void operator++(int) { ++index_; }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.index_ == b.index_; }

  private:
    const std::vector<json>* events_ = nullptr;
    std::size_t index_ = 0;
  };
  struct Range {
    const std::vector<json>* events;
    [[nodiscard]] Iterator begin() const { return Iterator(events, 0); }
    [[nodiscard]] Iterator end() const { return Iterator(events, events->size()); }
  };

  explicit StreamedSession(std::vector<json> seed) : events_(std::move(seed)) {}
  [[nodiscard]] const dsh::SessionHeader& header() const { return header_; }
  [[nodiscard]] Range events() const { return Range{&events_}; }
  void append(std::string_view type, json data) { append(type, std::move(data), json::object()); }
  void append(std::string_view type, json data, const json& envelope) {
    json appended = event(std::string(type), static_cast<std::int64_t>(events_.size()), std::move(data));
    appended.update(envelope);
    events_.push_back(std::move(appended));
  }
  [[nodiscard]] const std::vector<json>& stored() const { return events_; }

private:
  dsh::SessionHeader header_{"streamed", std::nullopt, 0};
  std::vector<json> events_;
};
static_assert(std::ranges::input_range<StreamedSession::Range>);
static_assert(!std::ranges::forward_range<StreamedSession::Range>);
static_assert(dsh::EnvelopeAppendableSession<StreamedSession>);

} // namespace

TEST_CASE("a runtime context without text renders the empty string", "[runtime_context]") {
  CHECK(dsh::RuntimeContext{}.render().empty());
  dsh::RuntimeContext only_empty;
  only_empty.add("sandbox:policy", 110, "").add("approval:policy", 120, "");
  CHECK(only_empty.render().empty());
  CHECK(only_empty.contributions().size() == 2);
}

TEST_CASE("one contribution renders as the preamble, a blank line and its text", "[runtime_context]") {
  dsh::RuntimeContext context;
  context.add("sandbox:policy", dsh::SANDBOX_POLICY_CONTEXT_ORDER, READ_ONLY_ALL);
  CHECK(context.render() == std::string(PREAMBLE) + "\n\n" + READ_ONLY_ALL);
  CHECK(dsh::SANDBOX_POLICY_CONTEXT_ORDER == 110);
}

TEST_CASE("several contributions render in order, ties by name, empty texts dropped", "[runtime_context]") {
  const std::string expected = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots."
                               "\n\nPolicy paragraph.\n\nApproval paragraph.\n\nTie paragraph.\n\nPlan paragraph.";
  struct Row {
    const char* name;
    int order;
    const char* text;
  };
  const std::array<Row, 5> rows{{{"empty:early", 50, ""},
                                 {"sandbox:policy", 110, "Policy paragraph."},
                                 {"approval:policy", 120, "Approval paragraph."},
                                 {"b:tie", 120, "Tie paragraph."},
                                 {"plan:guidance", 200, "Plan paragraph."}}};
  // The same contributions added in table order and in a scrambled one.
  dsh::RuntimeContext forward;
  for (const Row& row : rows) {
    forward.add(row.name, row.order, row.text);
  }
  dsh::RuntimeContext scrambled;
  for (const std::size_t i : std::initializer_list<std::size_t>{4, 3, 1, 0, 2}) {
    scrambled.add(rows[i].name, rows[i].order, rows[i].text);
  }

  CHECK(forward.render() == expected);
  CHECK(scrambled.render() == expected);
  CHECK(forward.contributions() == scrambled.contributions());
  std::vector<std::string> names;
  for (const auto& contribution : scrambled.contributions()) {
    names.push_back(contribution.name);
  }
  CHECK(names ==
        std::vector<std::string>{"empty:early", "sandbox:policy", "approval:policy", "b:tie", "plan:guidance"});
}

TEST_CASE("contribution names are non-empty and unique", "[runtime_context]") {
  dsh::RuntimeContext context;
  context.add("sandbox:policy", 110, "First.");
  try {
    context.add("sandbox:policy", 5, "Second.");
    FAIL("a duplicate name was accepted");
  } catch (const dsh::ConfigError& error) {
    CHECK(std::string(error.what()) ==
          "RuntimeContext contribution name: expected a non-empty name not added before; found \"sandbox:policy\"");
  }
  CHECK_THROWS_AS(context.add("", 1, "Nameless."), dsh::ConfigError);
  CHECK(context.render() == std::string(PREAMBLE) + "\n\nFirst.");
}

TEST_CASE("add_sandbox_policy contributes the owner's text for the session at order 110", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  dsh::RuntimeContext context;
  context.add("approval:policy", 120, "Approval paragraph.").add_sandbox_policy(host.owner, session);
  CHECK(context.render() == std::string(PREAMBLE) + "\n\n" + READ_ONLY_ALL + "\n\nApproval paragraph.");

  dsh::set_sandbox_mode(session, dsh::SandboxMode::workspace_write);
  CHECK(host.snapshot(session) ==
        std::string(PREAMBLE) +
            "\n\nCurrent DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, and "
            "terminal sessions may modify files under the session workspace: " +
            host.quoted_root() + ". Some platform temporary areas may also be writable.");

  host.backends.clear();
  CHECK(host.snapshot(session).empty());
}

TEST_CASE("the first request appends one snapshot message in the contract's shape", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  const std::string text = host.snapshot(session);

  CHECK(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
  REQUIRE(session.events().size() == 1);
  const json& appended = session.events().back();
  CHECK(appended.at("type") == "user/message");
  CHECK(appended.at("seq") == 0);
  CHECK(appended.at("time").is_number_integer());
  CHECK(appended.at("data") == snapshot_data("runtime-context-0", std::string(PREAMBLE) + "\n\n" + READ_ONLY_ALL));
  CHECK(appended.at("surfaceOp") == "append");
  CHECK(appended.size() == 5);
  CHECK(dsh::to_string(dsh::SnapshotOutcome::snapshot) == "snapshot");
}

TEST_CASE("an unchanged request appends nothing", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  REQUIRE(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::snapshot);
  const std::vector<json> before = session.events();
  for (int request = 0; request < 3; ++request) {
    CHECK(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::nothing);
  }
  CHECK(session.events() == before);
  CHECK(dsh::to_string(dsh::SnapshotOutcome::nothing) == "nothing");
}

TEST_CASE("a change of the policy appends exactly one new snapshot", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  REQUIRE(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::snapshot);

  SECTION("a mode switch") {
    dsh::set_sandbox_mode(session, dsh::SandboxMode::workspace_write);
    const std::size_t before = session.events().size();
    const std::string text = host.snapshot(session);
    CHECK(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
    REQUIRE(session.events().size() == before + 1);
    CHECK(session.events().back().at("seq") == 2);
    CHECK(session.events().back().at("data") == snapshot_data("runtime-context-2", text));
  }
  SECTION("a backend unmounted") {
    host.backends.erase(host.backends.begin() + 2); // the terminal backend
    const std::string text = host.snapshot(session);
    CHECK(text == std::string(PREAMBLE) +
                      "\n\nCurrent DSH file policy: read-only. The write and edit tools and one-shot bash commands "
                      "cannot modify files in the standing mode. For the write and edit tools and one-shot bash "
                      "commands, do not refuse a required modification from this standing mode alone: attempt it "
                      "normally and follow the tool's denial and escalation guidance.");
    CHECK(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
    REQUIRE(session.events().size() == 2);
    CHECK(session.events().back().at("data") == snapshot_data("runtime-context-1", text));
  }
  CHECK(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::nothing);
}

TEST_CASE("when every contribution is gone the clearing text is appended once", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  REQUIRE(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::snapshot);
  host.backends.clear();

  CHECK(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::cleared);
  REQUIRE(session.events().size() == 2);
  CHECK(session.events().back().at("data") == snapshot_data("runtime-context-1", CLEARED));
  CHECK(dsh::announce_runtime_context(session, "") == dsh::SnapshotOutcome::nothing);
  CHECK(session.events().size() == 2);
  CHECK(dsh::to_string(dsh::SnapshotOutcome::cleared) == "cleared");

  host.backends = Host::mount(host.owner);
  CHECK(dsh::announce_runtime_context(session, host.snapshot(session)) == dsh::SnapshotOutcome::snapshot);
  CHECK(session.events().size() == 3);
}

TEST_CASE("with no earlier snapshot and nothing to say nothing is appended", "[runtime_context]") {
  dsh::Session session(dsh::SessionHeader{"quiet", std::nullopt, 0},
                       {event("user/message", 0,
                              json{{"id", "m0"},
                                   {"role", "user"},
                                   {"content", json::array({{{"type", "text"}, {"text", "hi"}}})},
                                   {"source", {{"kind", "user"}}}})});
  CHECK(dsh::announce_runtime_context(session, "") == dsh::SnapshotOutcome::nothing);
  CHECK(dsh::reannounce_runtime_context(session, "") == dsh::SnapshotOutcome::nothing);
  CHECK(session.events().size() == 1);
  CHECK_FALSE(dsh::latest_runtime_context(session).has_value());
}

TEST_CASE("only the latest snapshot message counts, and only the plugin's", "[runtime_context]") {
  const std::string a = std::string(PREAMBLE) + "\n\nA.";
  const std::string b = std::string(PREAMBLE) + "\n\nB.";

  SECTION("an older snapshot with the same text is not the latest") {
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, snapshot_data("runtime-context-0", a)),
                                                  event("user/message", 1, snapshot_data("runtime-context-1", b))});
    CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::snapshot);
    CHECK(session.events().size() == 3);
  }
  SECTION("a user's message with the snapshot's text is not a snapshot") {
    json data = snapshot_data("m0", a);
    data["source"] = json{{"kind", "user"}};
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, data)});
    CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::snapshot);
  }
  SECTION("another plugin's message is not a snapshot") {
    json data = snapshot_data("m0", a);
    data["source"]["plugin"] = "@deepseek-ai/dsh-plan-mode";
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, data)});
    CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::snapshot);
  }
  SECTION("a source naming the plugin but of another kind is not a snapshot") {
    json data = snapshot_data("m0", a);
    data["source"]["kind"] = "tool";
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, data)});
    CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::snapshot);
  }
  SECTION("later events of other types do not hide the latest snapshot") {
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, snapshot_data("runtime-context-0", a)),
                                                  event("turn/end", 1, json{{"turn", 0}}),
                                                  event("sandbox/mode", 2, json{{"mode", "read-only"}})});
    CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::nothing);
    CHECK(dsh::latest_runtime_context(session) == dsh::SnapshotRecord{a, 0});
  }
}

TEST_CASE("a malformed latest snapshot counts as different", "[runtime_context]") {
  const std::string text = std::string(PREAMBLE) + "\n\nA.";
  const json part{{"type", "text"}, {"text", text}};
  std::vector<json> malformed;
  malformed.push_back(snapshot_data("x", text));
  malformed.back()["content"] = json::array({part, part});
  malformed.push_back(snapshot_data("x", text));
  malformed.back()["content"] = text;
  malformed.push_back(snapshot_data("x", text));
  malformed.back()["content"] = json::array({json{{"type", "image"}, {"text", text}}});
  malformed.push_back(snapshot_data("x", text));
  malformed.back()["content"] = json::array({json{{"type", "text"}, {"text", 42}}});
  malformed.push_back(snapshot_data("x", text));
  malformed.back()["role"] = "assistant";
  malformed.push_back(snapshot_data("x", text));
  malformed.back().erase("role");

  for (const json& data : malformed) {
    CAPTURE(data.dump());
    dsh::Session session({"s", std::nullopt, 0}, {event("user/message", 0, data)});
    REQUIRE(dsh::latest_runtime_context(session) == dsh::SnapshotRecord{std::nullopt, 0});
    CHECK(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
    dsh::Session clearing({"s", std::nullopt, 0}, {event("user/message", 0, data)});
    CHECK(dsh::announce_runtime_context(clearing, "") == dsh::SnapshotOutcome::cleared);
  }
}

TEST_CASE("a restarted host finds what the model was last told in the log alone", "[runtime_context]") {
  Host host;
  std::vector<json> log;
  {
    dsh::Session first = host.session();
    REQUIRE(dsh::announce_runtime_context(first, host.snapshot(first)) == dsh::SnapshotOutcome::snapshot);
    dsh::set_sandbox_mode(first, dsh::SandboxMode::workspace_write);
    REQUIRE(dsh::announce_runtime_context(first, host.snapshot(first)) == dsh::SnapshotOutcome::snapshot);
    log = first.events();
  }
  dsh::Session restarted = host.session(log);
  const std::string text = host.snapshot(restarted);
  CHECK(dsh::latest_runtime_context(restarted) == dsh::SnapshotRecord{text, 2});
  CHECK(dsh::announce_runtime_context(restarted, text) == dsh::SnapshotOutcome::nothing);
  CHECK(restarted.events() == log);
}

TEST_CASE("re-announcing appends the snapshot even when the log holds it", "[runtime_context]") {
  Host host;
  dsh::Session session = host.session();
  const std::string text = host.snapshot(session);
  REQUIRE(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);

  CHECK(dsh::reannounce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
  REQUIRE(session.events().size() == 2);
  CHECK(session.events().back().at("data") == snapshot_data("runtime-context-1", text));
  CHECK(dsh::reannounce_runtime_context(session, "") == dsh::SnapshotOutcome::cleared);
  CHECK(dsh::reannounce_runtime_context(session, "") == dsh::SnapshotOutcome::cleared);
  CHECK(session.events().size() == 4);
}

TEST_CASE("the next seq of a row is read by its type, whichever of seq and seq0 it carries", "[runtime_context]") {
  const std::string text = std::string(PREAMBLE) + "\n\nA.";
  const auto announced_id = [&](std::vector<json> seed) {
    dsh::Session session({"s", std::nullopt, 0}, std::move(seed));
    REQUIRE(dsh::announce_runtime_context(session, text) == dsh::SnapshotOutcome::snapshot);
    return session.events().back().at("data").at("id").get<std::string>();
  };
  const json chunks_with_both{{"type", "text-chunks"}, {"seq", 3}, {"seq0", 5}, {"data", {{"dt", {1, 2, 3}}}}};
  const json event_with_both{{"type", "turn/end"}, {"seq", 7}, {"seq0", 2}, {"data", {{"dt", {1}}}}};
  const json chunks_with_seq_only{{"type", "text-chunks"}, {"seq", 1}, {"data", {{"dt", json::array()}}}};

  SECTION("a packed chunk row (no '/' in its type) counts from seq0 and data.dt") {
    CHECK(announced_id({chunks_with_both}) == "runtime-context-9");
  }
  SECTION("an event (a '/' in its type) counts from seq") {
    CHECK(announced_id({event_with_both}) == "runtime-context-8");
  }
  SECTION("a packed row without seq0 gives no next seq, so the row before it decides") {
    CHECK(announced_id({event("turn/end", 0, json{{"turn", 0}}), chunks_with_seq_only}) == "runtime-context-1");
  }
}

TEST_CASE("a session whose events are only an input range is scanned forward", "[runtime_context]") {
  const std::string a = std::string(PREAMBLE) + "\n\nA.";
  const std::string b = std::string(PREAMBLE) + "\n\nB.";
  StreamedSession session({event("user/message", 0, snapshot_data("runtime-context-0", a)),
                           event("user/message", 1, snapshot_data("runtime-context-1", b)),
                           event("turn/end", 2, json{{"turn", 0}})});
  CHECK(dsh::latest_runtime_context(session) == dsh::SnapshotRecord{b, 1});
  CHECK(dsh::announce_runtime_context(session, b) == dsh::SnapshotOutcome::nothing);
  CHECK(dsh::announce_runtime_context(session, a) == dsh::SnapshotOutcome::snapshot);
  REQUIRE(session.stored().size() == 4);
  CHECK(session.stored().back().at("data") == snapshot_data("runtime-context-3", a));
}

TEST_CASE("TMPDIR and the process working directory change no byte", "[runtime_context]") {
  Host host;
  fs::create_directories(host.tmp / "other-tmp");
  fs::create_directories(host.tmp / "elsewhere");
  const auto record = [&] {
    // Every byte the model receives: the snapshot texts and the data of the events they become.
    dsh::Session with_cwd = host.session();
    dsh::set_sandbox_mode(with_cwd, dsh::SandboxMode::workspace_write);
    dsh::Session without_cwd(dsh::SessionHeader{"no-cwd", std::nullopt, 0});
    dsh::set_sandbox_mode(without_cwd, dsh::SandboxMode::workspace_write);
    std::string bytes;
    for (dsh::Session* session : {&with_cwd, &without_cwd}) {
      REQUIRE(dsh::announce_runtime_context(*session, host.snapshot(*session)) == dsh::SnapshotOutcome::snapshot);
      bytes += session->events().back().at("data").dump() + "\n";
    }
    return bytes;
  };

  const std::string before = record();
  std::string after;
  {
    const dsh::test::EnvironmentVariable tmpdir("TMPDIR", (host.tmp / "other-tmp").string());
    const dsh::test::WorkingDirectory cwd(host.tmp / "elsewhere");
    REQUIRE(fs::temp_directory_path() == host.tmp / "other-tmp");
    after = record();
  }
  CHECK(after == before);
  CHECK(before.find("other-tmp") == std::string::npos);
  CHECK(before.find("elsewhere") == std::string::npos);
  CHECK(before.find(fs::canonical(host.real).string()) != std::string::npos);
  CHECK(before.find((fs::canonical(host.tmp.path()) / "fallback").string()) != std::string::npos);
}
