// Escalation: the modes strictly wider than a mode, the escalation choices the owner offers a
// call of each family in each mode for every enforced/escalatable registration, and the check
// of an approval before it is used (exact refusal texts; nothing narrower or equal slips through).
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using dsh::Family;
using dsh::ModeSource;
using dsh::RootSource;
using dsh::SandboxMode;
using json = nlohmann::json;
using Modes = std::vector<SandboxMode>;

constexpr SandboxMode kOutside = static_cast<SandboxMode>(7);
constexpr Family kOutsideFamily = static_cast<Family>(9);

[[nodiscard]] Modes to_vector(std::span<const SandboxMode> modes) { return {modes.begin(), modes.end()}; }

/// The expected choices of an escalatable, enforced family in `mode`, spelled out.
[[nodiscard]] Modes expected_wider(SandboxMode mode) {
  switch (mode) {
  case SandboxMode::read_only:
    return {SandboxMode::workspace_write, SandboxMode::danger_full_access};
  case SandboxMode::workspace_write:
    return {SandboxMode::danger_full_access};
  case SandboxMode::danger_full_access:
    break;
  }
  return {};
}

/// A session in a real workspace directory, switched to `mode` (or left on the default).
struct Fixture {
  dsh::test::TempDir dir;
  std::filesystem::path root = std::filesystem::canonical(dir.path());
  dsh::Session session{dsh::SessionHeader{"s-escalation", root.string(), 1764480000000}};

  explicit Fixture(std::optional<SandboxMode> mode = std::nullopt) {
    if (mode) {
      dsh::set_sandbox_mode(session, *mode);
    }
  }
};

// A host's own session type without the O(1) override: the owner folds its events.
struct PlainSession {
  dsh::SessionHeader head;
  std::vector<json> log;
  [[nodiscard]] const dsh::SessionHeader& header() const { return head; }
  [[nodiscard]] const std::vector<json>& events() const { return log; }
};

[[nodiscard]] std::string refused(std::string_view approved, std::string_view current, std::string_view rest) {
  return "sandbox escalation to " + std::string(approved) + " is not strictly wider than this call's current " +
         std::string(current) + " mode; " + std::string(rest);
}

} // namespace

TEST_CASE("wider_modes: exactly the modes strictly wider, narrowest first", "[escalation]") {
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::read_only).size() == 2);
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::read_only)[0] == SandboxMode::workspace_write);
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::read_only)[1] == SandboxMode::danger_full_access);
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::workspace_write).size() == 1);
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::workspace_write)[0] == SandboxMode::danger_full_access);
  STATIC_REQUIRE(dsh::wider_modes(SandboxMode::danger_full_access).empty());
  STATIC_REQUIRE(dsh::wider_modes(kOutside).empty()); // fails closed: nothing is offered
  STATIC_REQUIRE(noexcept(dsh::wider_modes(SandboxMode::read_only)));
  // A view of the static table, valid for the whole program.
  CHECK(dsh::wider_modes(SandboxMode::workspace_write).data() == dsh::SANDBOX_MODES.data() + 2);
}

TEST_CASE("is_strictly_wider: the order read-only < workspace-write < danger-full-access", "[escalation]") {
  STATIC_REQUIRE(dsh::is_strictly_wider(SandboxMode::workspace_write, SandboxMode::read_only));
  STATIC_REQUIRE(dsh::is_strictly_wider(SandboxMode::danger_full_access, SandboxMode::read_only));
  STATIC_REQUIRE(dsh::is_strictly_wider(SandboxMode::danger_full_access, SandboxMode::workspace_write));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::read_only, SandboxMode::read_only));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::workspace_write, SandboxMode::workspace_write));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::danger_full_access, SandboxMode::danger_full_access));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::read_only, SandboxMode::workspace_write));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::read_only, SandboxMode::danger_full_access));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::workspace_write, SandboxMode::danger_full_access));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(kOutside, SandboxMode::read_only));
  STATIC_REQUIRE_FALSE(dsh::is_strictly_wider(SandboxMode::danger_full_access, kOutside));
}

TEST_CASE("escalationChoices: every mode x family x enforced/escalatable registration", "[escalation]") {
  for (const SandboxMode mode : dsh::SANDBOX_MODES) {
    for (const Family family : dsh::FAMILIES) {
      for (const bool enforced : {false, true}) {
        for (const bool escalatable : {false, true}) {
          CAPTURE(dsh::to_string(mode), dsh::to_string(family), enforced, escalatable);
          const Fixture fixture(mode);
          dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
          const dsh::Disposer enforcing = enforced ? owner.registerEnforcedFamily(family) : dsh::Disposer{};
          const dsh::Disposer escalating = escalatable ? owner.registerEscalatableFamily(family) : dsh::Disposer{};
          const Modes expected = enforced && escalatable ? expected_wider(mode) : Modes{};
          CHECK(to_vector(owner.escalationChoices(fixture.session, family)) == expected);
          // The other families offer nothing: choices belong to the family that asks.
          for (const Family other : dsh::FAMILIES) {
            if (other != family) {
              CHECK(owner.escalationChoices(fixture.session, other).empty());
            }
          }
        }
      }
    }
  }
}

TEST_CASE("escalationChoices: the exact lists, from the session, the default and a folded log", "[escalation]") {
  const dsh::test::TempDir dir;
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::workspace_write, dir.path(), "DSH"});
  const dsh::Disposer bash = owner.registerEnforcedFamily(Family::bash);
  const dsh::Disposer bash_retry = owner.registerEscalatableFamily(Family::bash);

  const dsh::Session fresh{dsh::SessionHeader{"s", std::nullopt, 0}}; // the deployment default decides
  CHECK(to_vector(owner.escalationChoices(fresh, Family::bash)) == Modes{SandboxMode::danger_full_access});

  dsh::Session narrowed{dsh::SessionHeader{"s", std::nullopt, 0}}; // the session's switch outranks it
  dsh::set_sandbox_mode(narrowed, SandboxMode::read_only);
  CHECK(to_vector(owner.escalationChoices(narrowed, Family::bash)) ==
        Modes{SandboxMode::workspace_write, SandboxMode::danger_full_access});

  const PlainSession folded{dsh::SessionHeader{"s", std::nullopt, 0},
                            {json{{"type", "sandbox/mode"}, {"seq", 0}, {"data", {{"mode", "read-only"}}}},
                             json{{"type", "sandbox/mode"}, {"seq", 1}, {"data", {{"mode", "danger-full-access"}}}}}};
  CHECK(owner.escalationChoices(folded, Family::bash).empty());

  // A real session log on disk, switched like a host's /mode command does.
  const std::filesystem::path log_path = dir / "session.jsonl";
  dsh::SessionLog log = dsh::SessionLog::create(log_path, dsh::SessionHeader{"s-log", dir.path().string(), 0});
  CHECK(to_vector(owner.escalationChoices(log, Family::bash)) == Modes{SandboxMode::danger_full_access});
  dsh::set_sandbox_mode(log, SandboxMode::read_only);
  CHECK(to_vector(owner.escalationChoices(log, Family::bash)) ==
        Modes{SandboxMode::workspace_write, SandboxMode::danger_full_access});
}

TEST_CASE("escalationChoices: follows registration and disposal; a family outside the enum gets none", "[escalation]") {
  const Fixture fixture;
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
  dsh::Disposer escalating = owner.registerEscalatableFamily(Family::filesystem);
  CHECK(owner.escalationChoices(fixture.session, Family::filesystem).empty()); // escalatable, not enforced
  dsh::Disposer enforcing = owner.registerEnforcedFamily(Family::filesystem);
  const Modes both{SandboxMode::workspace_write, SandboxMode::danger_full_access};
  CHECK(to_vector(owner.escalationChoices(fixture.session, Family::filesystem)) == both);
  escalating.dispose();
  CHECK(owner.escalationChoices(fixture.session, Family::filesystem).empty());
  escalating = owner.registerEscalatableFamily(Family::filesystem);
  CHECK(to_vector(owner.escalationChoices(fixture.session, Family::filesystem)) == both);
  enforcing.dispose();
  CHECK(owner.escalationChoices(fixture.session, Family::filesystem).empty());
  CHECK(owner.escalationChoices(fixture.session, kOutsideFamily).empty());
}

TEST_CASE("escalationChoices and the approval check refuse a forged log, escalatable or not", "[escalation]") {
  const Fixture fixture;
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
  const dsh::Disposer bash = owner.registerEnforcedFamily(Family::bash);
  const dsh::Disposer bash_retry = owner.registerEscalatableFamily(Family::bash);
  const PlainSession forged{dsh::SessionHeader{"s", std::nullopt, 0},
                            {json{{"type", "sandbox/mode"}, {"seq", 0}, {"data", {{"mode", "host-root"}}}}}};
  for (const Family family : dsh::FAMILIES) {
    CAPTURE(dsh::to_string(family));
    CHECK_THROWS_MATCHES(owner.escalationChoices(forged, family), dsh::InvariantViolation,
                         Catch::Matchers::Message("sandbox/mode carries unknown mode \"host-root\""));
    CHECK_THROWS_MATCHES(owner.validateApproval(forged, family, SandboxMode::danger_full_access),
                         dsh::InvariantViolation,
                         Catch::Matchers::Message("sandbox/mode carries unknown mode \"host-root\""));
    CHECK_THROWS_MATCHES(owner.resolveApproved(forged, family, SandboxMode::danger_full_access),
                         dsh::InvariantViolation,
                         Catch::Matchers::Message("sandbox/mode carries unknown mode \"host-root\""));
  }
}

TEST_CASE("validateApproval and resolveApproved: every current mode x approved mode", "[escalation]") {
  struct Case {
    SandboxMode current;
    SandboxMode approved;
    std::optional<std::string> refusal;
  };
  const std::string both = "approve one of: workspace-write, danger-full-access";
  const std::string danger = "approve one of: danger-full-access";
  const std::string none = "no mode is wider, so the call needs no approval";
  const std::array<Case, 9> cases{{
      {SandboxMode::read_only, SandboxMode::read_only, refused("read-only", "read-only", both)},
      {SandboxMode::read_only, SandboxMode::workspace_write, std::nullopt},
      {SandboxMode::read_only, SandboxMode::danger_full_access, std::nullopt},
      {SandboxMode::workspace_write, SandboxMode::read_only, refused("read-only", "workspace-write", danger)},
      {SandboxMode::workspace_write, SandboxMode::workspace_write,
       refused("workspace-write", "workspace-write", danger)},
      {SandboxMode::workspace_write, SandboxMode::danger_full_access, std::nullopt},
      {SandboxMode::danger_full_access, SandboxMode::read_only, refused("read-only", "danger-full-access", none)},
      {SandboxMode::danger_full_access, SandboxMode::workspace_write,
       refused("workspace-write", "danger-full-access", none)},
      {SandboxMode::danger_full_access, SandboxMode::danger_full_access,
       refused("danger-full-access", "danger-full-access", none)},
  }};
  for (const Case& c : cases) {
    CAPTURE(dsh::to_string(c.current), dsh::to_string(c.approved));
    const Fixture fixture(c.current);
    dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
    const dsh::Disposer fs = owner.registerEnforcedFamily(Family::filesystem);
    const dsh::Disposer fs_retry = owner.registerEscalatableFamily(Family::filesystem);

    CHECK(owner.validateApproval(fixture.session, Family::filesystem, c.approved) == c.refusal);
    if (c.refusal) {
      CHECK_THROWS_MATCHES(owner.resolveApproved(fixture.session, Family::filesystem, c.approved), dsh::ConfigError,
                           Catch::Matchers::Message(*c.refusal));
    } else {
      CHECK(owner.resolveApproved(fixture.session, Family::filesystem, c.approved) ==
            dsh::ResolvedPolicy{c.approved, fixture.root, ModeSource::approved, RootSource::session});
    }
    // The unchecked precedence is unchanged: the approval wins, even when it narrows.
    CHECK(owner.resolve(fixture.session, c.approved) ==
          dsh::ResolvedPolicy{c.approved, fixture.root, ModeSource::approved, RootSource::session});
    // Accepted exactly when it is one of the choices a tool schema advertises.
    const Modes choices = to_vector(owner.escalationChoices(fixture.session, Family::filesystem));
    CHECK((std::find(choices.begin(), choices.end(), c.approved) != choices.end()) == !c.refusal.has_value());
  }
}

TEST_CASE("an approval for a family that does not escalate is refused, naming the family", "[escalation]") {
  const Fixture fixture; // read-only: every wider mode would pass the mode check
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
  const dsh::Disposer terminal = owner.registerEnforcedFamily(Family::terminal);  // enforced only
  const dsh::Disposer bash_retry = owner.registerEscalatableFamily(Family::bash); // escalatable, not enforced
  const std::array<std::pair<Family, std::string>, 4> cases{{
      {Family::terminal, "sandbox escalation to danger-full-access is not offered for terminal: that family is not "
                         "both enforced and escalatable"},
      {Family::bash, "sandbox escalation to danger-full-access is not offered for bash: that family is not both "
                     "enforced and escalatable"},
      {Family::filesystem, "sandbox escalation to danger-full-access is not offered for filesystem: that family is "
                           "not both enforced and escalatable"},
      {kOutsideFamily, "sandbox escalation to danger-full-access is not offered for a family outside the vocabulary "
                       "(9): that family is not both enforced and escalatable"},
  }};
  for (const auto& [family, text] : cases) {
    CAPTURE(text);
    CHECK(owner.validateApproval(fixture.session, family, SandboxMode::danger_full_access) == text);
    CHECK_THROWS_MATCHES(owner.resolveApproved(fixture.session, family, SandboxMode::danger_full_access),
                         dsh::ConfigError, Catch::Matchers::Message(text));
  }
}

TEST_CASE("an approved mode outside the enum is refused, never widened", "[escalation]") {
  const Fixture fixture;
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fixture.root, "DSH"});
  const dsh::Disposer bash = owner.registerEnforcedFamily(Family::bash);
  const dsh::Disposer bash_retry = owner.registerEscalatableFamily(Family::bash);
  const std::string text = "sandbox escalation to a sandbox mode outside the vocabulary (7) is not strictly wider "
                           "than this call's current read-only mode; approve one of: workspace-write, "
                           "danger-full-access";
  CHECK(owner.validateApproval(fixture.session, Family::bash, kOutside) == text);
  CHECK_THROWS_MATCHES(owner.resolveApproved(fixture.session, Family::bash, kOutside), dsh::ConfigError,
                       Catch::Matchers::Message(text));
}
