// Precedence (docs/contract.md#precedence, #canonicalization): mode = approved ?? the session's last switch ?? the
// deployment default; root = the canonical session cwd when non-empty, else the fallback root. Also the fold itself:
// host session types without dsh::Session, projections, input-only ranges and forged events.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cstddef>
#include <filesystem>
#include <iterator>
#include <list>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using dsh::ModeSource;
using dsh::RootSource;
using dsh::SandboxMode;
using json = nlohmann::json;

constexpr std::array<SandboxMode, 3> kModes{SandboxMode::read_only, SandboxMode::workspace_write,
                                            SandboxMode::danger_full_access};
constexpr std::array<std::optional<SandboxMode>, 4> kMaybeModes{
    std::nullopt, SandboxMode::read_only, SandboxMode::workspace_write, SandboxMode::danger_full_access};

json mode_event(int seq, const char* mode) {
  return json{{"type", "sandbox/mode"}, {"seq", seq}, {"time", 1764480000000}, {"data", {{"mode", mode}}}};
}

json other_event(int seq) {
  return json{{"type", "user/message"}, {"seq", seq}, {"time", 1764480000000}, {"data", {{"mode", "read-only"}}}};
}

json forged_event(int seq) {
  return json{{"type", "sandbox/mode"}, {"seq", seq}, {"time", 1764480000000}, {"data", {{"mode", "host-root"}}}};
}

// A host's own session type: only header() and events(); no append, no override.
struct PlainSession {
  dsh::SessionHeader head;
  std::vector<json> log;
  [[nodiscard]] const dsh::SessionHeader& header() const { return head; }
  [[nodiscard]] const std::vector<json>& events() const { return log; }
};

// A host session that keeps its own override; its events() must not be read by resolve.
struct OverrideSession {
  dsh::SessionHeader head;
  std::vector<json> log;
  std::optional<SandboxMode> current;
  mutable int events_calls = 0;
  [[nodiscard]] const dsh::SessionHeader& header() const { return head; }
  [[nodiscard]] const std::vector<json>& events() const {
    ++events_calls;
    return log;
  }
  [[nodiscard]] std::optional<SandboxMode> sandbox_mode_override() const { return current; }
};

// A single-pass range over a vector of events: input, not forward. Each element can be read
// once; reading a position twice or going back is not possible.
class InputOnlyEvents {
public:
  class iterator {
  public:
    using iterator_concept = std::input_iterator_tag;
    using value_type = json;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(InputOnlyEvents* owner) : owner_(owner) {}
    iterator(iterator&&) noexcept = default;
    iterator& operator=(iterator&&) noexcept = default;
    iterator(const iterator&) = delete;
    iterator& operator=(const iterator&) = delete;
    ~iterator() = default;
    [[nodiscard]] const json& operator*() const { return owner_->events_[owner_->position_]; }
    iterator& operator++() {
      ++owner_->position_;
      return *this;
    }
    void operator++(int) { ++*this; }
    [[nodiscard]] friend bool operator==(const iterator& it, std::default_sentinel_t) {
      return it.owner_->consumed() == it.owner_->events_size();
    }

  private:
    InputOnlyEvents* owner_ = nullptr;
  };

  explicit InputOnlyEvents(std::vector<json> events) : events_(std::move(events)) {}
  [[nodiscard]] iterator begin() { return iterator(this); }
  [[nodiscard]] std::default_sentinel_t end() const { return {}; }
  [[nodiscard]] std::size_t consumed() const { return position_; }
  [[nodiscard]] std::size_t events_size() const { return events_.size(); }

private:
  std::vector<json> events_;
  std::size_t position_ = 0;
};

static_assert(std::ranges::input_range<InputOnlyEvents>);
static_assert(!std::ranges::forward_range<InputOnlyEvents>);

// A bidirectional range whose elements are JSON prvalues (copies), as a host's adapter might
// produce them.
class ByValueEvents {
public:
  class iterator {
  public:
    using iterator_concept = std::bidirectional_iterator_tag;
    using value_type = json;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const std::vector<json>* events, std::size_t index) : events_(events), index_(index) {}
    [[nodiscard]] json operator*() const { return (*events_)[index_]; }
    iterator& operator++() {
      ++index_;
      return *this;
    }
    iterator operator++(int) {
      iterator before = *this;
      ++index_;
      return before;
    }
    iterator& operator--() {
      --index_;
      return *this;
    }
    iterator operator--(int) {
      iterator before = *this;
      --index_;
      return before;
    }
    [[nodiscard]] friend bool operator==(const iterator& a, const iterator& b) { return a.index_ == b.index_; }

  private:
    const std::vector<json>* events_ = nullptr;
    std::size_t index_ = 0;
  };

  explicit ByValueEvents(const std::vector<json>* events) : events_(events) {}
  [[nodiscard]] iterator begin() const { return {events_, 0}; }
  [[nodiscard]] iterator end() const { return {events_, events_->size()}; }

private:
  const std::vector<json>* events_;
};

static_assert(std::ranges::bidirectional_range<ByValueEvents>);
static_assert(std::is_same_v<std::ranges::range_reference_t<ByValueEvents>, json>);

static_assert(dsh::SessionLike<PlainSession>);
static_assert(!dsh::AppendableSession<PlainSession>);
static_assert(!dsh::HasSandboxModeOverride<PlainSession>);
static_assert(dsh::SessionLike<OverrideSession>);
static_assert(dsh::HasSandboxModeOverride<OverrideSession>);
static_assert(dsh::SessionLike<dsh::Session>);
static_assert(dsh::AppendableSession<dsh::Session>);
static_assert(dsh::HasSandboxModeOverride<dsh::Session>);

// A typed event of a host that keeps no JSON.
struct TypedEvent {
  bool is_switch;
  SandboxMode mode;
};

} // namespace

TEST_CASE("precedence: approved, session and deployment, with and without cwd", "[precedence]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "deploy");
  std::filesystem::create_directories(tmp / "session-ws");
  const std::filesystem::path deploy_root = std::filesystem::canonical(tmp / "deploy");
  const std::filesystem::path session_root = std::filesystem::canonical(tmp / "session-ws");

  // The three cwd cases: absent, empty (treated as absent) and a real directory given with a
  // non-canonical spelling.
  const std::array<std::optional<std::string>, 3> cwds{std::nullopt, std::string(),
                                                       (tmp.path() / "." / "session-ws" / "").string()};
  int cases = 0;
  for (SandboxMode deployment : kModes) {
    const dsh::PolicyOwner owner(dsh::PolicyConfig{deployment, tmp / "deploy", "DSH"});
    REQUIRE(owner.workspaceRoot() == deploy_root);
    REQUIRE(owner.defaultMode() == deployment);
    for (const std::optional<SandboxMode>& switched : kMaybeModes) {
      for (const std::optional<SandboxMode>& approved : kMaybeModes) {
        for (const std::optional<std::string>& cwd : cwds) {
          INFO("deployment " << dsh::to_string(deployment) << ", switched "
                             << (switched ? dsh::to_string(*switched) : "none") << ", approved "
                             << (approved ? dsh::to_string(*approved) : "none") << ", cwd "
                             << (cwd ? *cwd : "<absent>"));
          dsh::Session session(dsh::SessionHeader{"s", cwd, 0});
          if (switched) {
            // An earlier, different switch first: only the last one counts.
            dsh::set_sandbox_mode(session, *switched == SandboxMode::danger_full_access
                                               ? SandboxMode::read_only
                                               : SandboxMode::danger_full_access);
            session.append("user/message", json{{"text", "hello"}});
            dsh::set_sandbox_mode(session, *switched);
          }
          const PlainSession plain{session.header(), session.events()};

          dsh::ResolvedPolicy expected;
          if (approved) {
            expected.mode = *approved;
            expected.mode_source = ModeSource::approved;
          } else if (switched) {
            expected.mode = *switched;
            expected.mode_source = ModeSource::session;
          } else {
            expected.mode = deployment;
            expected.mode_source = ModeSource::deployment;
          }
          const bool has_cwd = cwd && !cwd->empty();
          expected.workspace_root = has_cwd ? session_root : deploy_root;
          expected.root_source = has_cwd ? RootSource::session : RootSource::deployment;

          const dsh::ResolvedPolicy by_override = owner.resolve(session, approved);
          CHECK(by_override.mode == expected.mode);
          CHECK(by_override.mode_source == expected.mode_source);
          CHECK(by_override.workspace_root == expected.workspace_root);
          CHECK(by_override.root_source == expected.root_source);
          CHECK(by_override == expected);
          // The plain fold over the same events agrees with the kept override.
          CHECK(owner.resolve(plain, approved) == expected);
          ++cases;
        }
      }
    }
  }
  CHECK(cases == 3 * 4 * 4 * 3);
}

TEST_CASE("precedence: named cases", "[precedence]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "ws");
  const std::filesystem::path root = std::filesystem::canonical(tmp.path());
  const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});

  dsh::Session session(dsh::SessionHeader{"s", (tmp / "ws").string(), 0});
  SECTION("a new session takes the deployment default and its own root") {
    CHECK(owner.resolve(session) ==
          dsh::ResolvedPolicy{SandboxMode::read_only, root / "ws", ModeSource::deployment, RootSource::session});
  }
  SECTION("the session's switch outranks the default") {
    dsh::set_sandbox_mode(session, SandboxMode::workspace_write);
    CHECK(owner.resolve(session) ==
          dsh::ResolvedPolicy{SandboxMode::workspace_write, root / "ws", ModeSource::session, RootSource::session});
  }
  SECTION("an approved mode outranks the switch, even a narrower approval") {
    dsh::set_sandbox_mode(session, SandboxMode::danger_full_access);
    CHECK(owner.resolve(session, SandboxMode::read_only) ==
          dsh::ResolvedPolicy{SandboxMode::read_only, root / "ws", ModeSource::approved, RootSource::session});
  }
  SECTION("switching back to the default is still the session's choice") {
    dsh::set_sandbox_mode(session, SandboxMode::read_only);
    CHECK(owner.resolve(session).mode_source == ModeSource::session);
  }
  SECTION("the root does not depend on the mode") {
    for (SandboxMode mode : kModes) {
      CHECK(owner.resolve(session, mode).workspace_root == root / "ws");
    }
  }
}

TEST_CASE("agentless resolve: approved or deployment, always the fallback root", "[precedence]") {
  const dsh::test::TempDir tmp;
  const std::filesystem::path root = std::filesystem::canonical(tmp.path());
  for (SandboxMode deployment : kModes) {
    const dsh::PolicyOwner owner(dsh::PolicyConfig{deployment, tmp.path(), "DSH"});
    CHECK(owner.resolve() == dsh::ResolvedPolicy{deployment, root, ModeSource::deployment, RootSource::deployment});
    CHECK(owner.resolve(std::nullopt) ==
          dsh::ResolvedPolicy{deployment, root, ModeSource::deployment, RootSource::deployment});
    for (SandboxMode approved : kModes) {
      CHECK(owner.resolve(approved) ==
            dsh::ResolvedPolicy{approved, root, ModeSource::approved, RootSource::deployment});
    }
  }
}

TEST_CASE("resolve folds the events of a session type that has no override", "[precedence][fold]") {
  const dsh::test::TempDir tmp;
  const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
  PlainSession session{dsh::SessionHeader{"plain", std::nullopt, 0}, {}};
  CHECK(owner.resolve(session).mode == SandboxMode::read_only);
  CHECK(owner.resolve(session).mode_source == ModeSource::deployment);

  session.log = {other_event(0), mode_event(1, "danger-full-access"), other_event(2), mode_event(3, "workspace-write"),
                 other_event(4)};
  CHECK(owner.resolve(session).mode == SandboxMode::workspace_write);
  CHECK(owner.resolve(session).mode_source == ModeSource::session);

  // The delegation marker does not change the mode an event carries.
  session.log.push_back(json{{"type", "sandbox/mode"},
                             {"seq", 5},
                             {"time", 0},
                             {"data", {{"mode", "danger-full-access"}, {"source", "delegation"}}}});
  CHECK(owner.resolve(session).mode == SandboxMode::danger_full_access);

  SECTION("a forged last switch is refused, by resolve and by context") {
    session.log.push_back(forged_event(6));
    REQUIRE_THROWS_AS(owner.resolve(session), dsh::InvariantViolation);
    dsh::PolicyOwner enforcing(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
    const dsh::Disposer bash = enforcing.registerEnforcedFamily(dsh::Family::bash);
    REQUIRE_THROWS_AS(enforcing.context(session), dsh::InvariantViolation);
    // An approved mode needs no fold.
    CHECK(owner.resolve(session, SandboxMode::read_only).mode == SandboxMode::read_only);
  }
}

TEST_CASE("resolve trusts a session's own override and does not read its events", "[precedence][fold]") {
  const dsh::test::TempDir tmp;
  const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
  // The log holds a forged switch: reading it would throw.
  OverrideSession session{dsh::SessionHeader{"override", std::nullopt, 0}, {forged_event(0)}, std::nullopt, 0};

  CHECK(owner.resolve(session) == dsh::ResolvedPolicy{SandboxMode::read_only, owner.workspaceRoot(),
                                                      ModeSource::deployment, RootSource::deployment});
  session.current = SandboxMode::danger_full_access;
  CHECK(owner.resolve(session) == dsh::ResolvedPolicy{SandboxMode::danger_full_access, owner.workspaceRoot(),
                                                      ModeSource::session, RootSource::deployment});
  CHECK(owner.resolve(session, SandboxMode::workspace_write).mode_source == ModeSource::approved);
  CHECK(session.events_calls == 0);
}

TEST_CASE("effective_mode: the last sandbox/mode event, or none", "[fold]") {
  CHECK_FALSE(dsh::effective_mode(std::vector<json>{}).has_value());
  CHECK_FALSE(dsh::effective_mode(std::vector<json>{other_event(0), other_event(1)}).has_value());
  // Objects whose type is not exactly "sandbox/mode", and values that are not objects, are skipped.
  const std::vector<json> odd{json::array({"sandbox/mode"}),
                              json(42),
                              json(nullptr),
                              json::object(),
                              json{{"type", 7}, {"data", {{"mode", "read-only"}}}},
                              json{{"type", "Sandbox/Mode"}, {"data", {{"mode", "read-only"}}}}};
  CHECK_FALSE(dsh::effective_mode(odd).has_value());

  const std::vector<json> events{mode_event(0, "workspace-write"), other_event(1), mode_event(2, "read-only"),
                                 other_event(3)};
  CHECK(dsh::effective_mode(events) == SandboxMode::read_only);
  // Elements that are JSON prvalues, on a bidirectional range.
  CHECK(dsh::effective_mode(ByValueEvents{&events}) == SandboxMode::read_only);
  // A bidirectional range that is not random-access, passed as an rvalue.
  CHECK(dsh::effective_mode(std::list<json>(events.begin(), events.begin() + 2)) == SandboxMode::workspace_write);
}

TEST_CASE("effective_mode on an input-only range", "[fold]") {
  InputOnlyEvents events(
      {mode_event(0, "danger-full-access"), other_event(1), mode_event(2, "workspace-write"), other_event(3)});
  CHECK(dsh::effective_mode(events) == SandboxMode::workspace_write);
  CHECK(events.consumed() == 4);

  InputOnlyEvents none(std::vector<json>{other_event(0)});
  CHECK_FALSE(dsh::effective_mode(none).has_value());

  InputOnlyEvents forged_last({mode_event(0, "workspace-write"), forged_event(1)});
  REQUIRE_THROWS_AS(dsh::effective_mode(forged_last), dsh::InvariantViolation);
}

TEST_CASE("effective_mode throws InvariantViolation for a forged last switch", "[fold]") {
  const std::vector<json> forged{mode_event(0, "workspace-write"), other_event(1), forged_event(2), other_event(3)};
  std::string message;
  try {
    (void)dsh::effective_mode(forged);
  } catch (const dsh::InvariantViolation& error) {
    message = error.what();
  }
  CHECK(message == "sandbox/mode carries unknown mode \"host-root\"");

  const std::vector<json> no_mode{mode_event(0, "workspace-write"),
                                  json{{"type", "sandbox/mode"}, {"seq", 1}, {"time", 0}, {"data", json::object()}}};
  message.clear();
  try {
    (void)dsh::effective_mode(no_mode);
  } catch (const dsh::InvariantViolation& error) {
    message = error.what();
  }
  CHECK(message == "sandbox/mode carries no mode");
}

TEST_CASE("effective_mode with a projection over typed events", "[fold]") {
  const std::vector<TypedEvent> events{
      {false, SandboxMode::danger_full_access}, {true, SandboxMode::workspace_write},
      {false, SandboxMode::read_only},          {true, SandboxMode::danger_full_access},
      {false, SandboxMode::workspace_write},    {false, SandboxMode::workspace_write}};
  int calls = 0;
  const auto switched = [&calls](const TypedEvent& event) -> std::optional<SandboxMode> {
    ++calls;
    return event.is_switch ? std::optional<SandboxMode>(event.mode) : std::nullopt;
  };
  CHECK(dsh::effective_mode(events, switched) == SandboxMode::danger_full_access);
  // A bidirectional range is scanned from the end and the scan stops at the first match: the
  // last switch is the third event from the end.
  CHECK(calls == 3);

  calls = 0;
  CHECK_FALSE(dsh::effective_mode(std::vector<TypedEvent>{{false, SandboxMode::read_only}}, switched).has_value());
  CHECK(calls == 1);

  // A JSON fold over a long log stops at the last switch too: the forged event before it is
  // never examined.
  std::vector<json> log{forged_event(0)};
  for (int seq = 1; seq < 1000; ++seq) {
    log.push_back(other_event(seq));
  }
  log.push_back(mode_event(1000, "workspace-write"));
  log.push_back(other_event(1001));
  CHECK(dsh::effective_mode(log) == SandboxMode::workspace_write);
}
