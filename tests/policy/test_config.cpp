// Configuration and vocabulary (docs/contract.md#vocabulary, #the-owner): strict PolicyConfig::from_json with exact
// ConfigError messages (key, expectation, value found), PolicyOwner's own validation, the
// enum string tables and their JSON forms, and FamilySet.
#include "support/catch.hpp"
#include "support/scoped.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <filesystem>
#include <optional>
#include <ranges>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

using dsh::Family;
using dsh::FamilySet;
using dsh::ModeSource;
using dsh::RootSource;
using dsh::SandboxMode;
using json = nlohmann::json;

static_assert(std::is_base_of_v<std::runtime_error, dsh::ConfigError>);

struct BadConfig {
  const char* input; // JSON text
  std::string message;
};

const std::string kModeExpected =
    "PolicyConfig key \"mode\": expected a sandbox mode (\"read-only\", \"workspace-write\", \"danger-full-access\"); "
    "found ";
const std::string kRootType = "PolicyConfig key \"workspaceRoot\": expected a string; found ";
const std::string kRootValue =
    "PolicyConfig key \"workspaceRoot\": expected a non-empty path without NUL characters; found ";
const std::string kLabelType = "PolicyConfig key \"hostLabel\": expected a string; found ";
const std::string kLabelValue =
    "PolicyConfig key \"hostLabel\": expected a non-empty UTF-8 string without control characters or '\"'; found ";
const std::string kUnknownKey =
    "PolicyConfig: expected only the keys \"mode\", \"workspaceRoot\", \"hostLabel\" and \"protectedPaths\"; found ";
const std::string kNotObject = "PolicyConfig: expected a JSON object; found ";

std::vector<BadConfig> bad_configs() {
  return {
      // unknown keys
      {R"({"Mode":"read-only"})", kUnknownKey + R"("Mode")"},
      {R"({"workspace_root":"/srv"})", kUnknownKey + R"("workspace_root")"},
      {R"({"mode":"read-only","network":"off"})", kUnknownKey + R"("network")"},
      {R"({"":1})", kUnknownKey + R"("")"},
      // mode: wrong types
      {R"({"mode":1})", kModeExpected + "1"},
      {R"({"mode":1.5})", kModeExpected + "1.5"},
      {R"({"mode":null})", kModeExpected + "null"},
      {R"({"mode":true})", kModeExpected + "true"},
      {R"({"mode":["read-only"]})", kModeExpected + R"(["read-only"])"},
      {R"({"mode":{"name":"read-only"}})", kModeExpected + R"({"name":"read-only"})"},
      // mode: strings outside the vocabulary (exact, case-sensitive, untrimmed)
      {R"({"mode":"Read-Only"})", kModeExpected + R"("Read-Only")"},
      {R"({"mode":""})", kModeExpected + R"("")"},
      {R"({"mode":" read-only"})", kModeExpected + R"(" read-only")"},
      {R"({"mode":"read-only "})", kModeExpected + R"("read-only ")"},
      {R"({"mode":"readonly"})", kModeExpected + R"("readonly")"},
      {R"({"mode":"read_only"})", kModeExpected + R"("read_only")"},
      {R"({"mode":"READ-ONLY"})", kModeExpected + R"("READ-ONLY")"},
      {R"({"mode":"full-access"})", kModeExpected + R"("full-access")"},
      // workspaceRoot
      {R"({"workspaceRoot":5})", kRootType + "5"},
      {R"({"workspaceRoot":null})", kRootType + "null"},
      {R"({"workspaceRoot":false})", kRootType + "false"},
      {R"({"workspaceRoot":["/srv"]})", kRootType + R"(["/srv"])"},
      {R"({"workspaceRoot":""})", kRootValue + R"("")"},
      {R"({"workspaceRoot":"/srv\u0000x"})", kRootValue + R"("/srv\u0000x")"},
      // hostLabel
      {R"({"hostLabel":3})", kLabelType + "3"},
      {R"({"hostLabel":null})", kLabelType + "null"},
      {R"({"hostLabel":{}})", kLabelType + "{}"},
      {R"({"hostLabel":""})", kLabelValue + R"("")"},
      {R"({"hostLabel":"Ac\nme"})", kLabelValue + R"("Ac\nme")"},
      {R"({"hostLabel":"Ac\"me"})", kLabelValue + R"("Ac\"me")"},
      {R"({"hostLabel":"A\tB"})", kLabelValue + R"("A\tB")"},
      {R"({"hostLabel":"A\rB"})", kLabelValue + R"("A\rB")"},
      {R"({"hostLabel":"\u0000"})", kLabelValue + R"("\u0000")"},
      {R"({"hostLabel":"esc\u001b[0m"})", kLabelValue + R"("esc\u001b[0m")"},
      {R"({"hostLabel":"del\u007f"})", kLabelValue + "\"del\x7f\""},
      // not an object
      {"[]", kNotObject + "[]"},
      {R"([{"mode":"read-only"}])", kNotObject + R"([{"mode":"read-only"}])"},
      {R"("read-only")", kNotObject + R"("read-only")"},
      {"null", kNotObject + "null"},
      {"42", kNotObject + "42"},
  };
}

} // namespace

TEST_CASE("PolicyConfig::from_json accepts the three keys, each optional", "[config]") {
  const dsh::PolicyConfig defaults = dsh::PolicyConfig::from_json(json::object());
  CHECK(defaults.mode == SandboxMode::read_only);
  CHECK_FALSE(defaults.workspace_root.has_value());
  CHECK(defaults.host_label == "DSH");

  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"mode":"read-only"})")).mode == SandboxMode::read_only);
  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"mode":"workspace-write"})")).mode ==
        SandboxMode::workspace_write);
  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"mode":"danger-full-access"})")).mode ==
        SandboxMode::danger_full_access);

  const dsh::PolicyConfig full = dsh::PolicyConfig::from_json(
      json::parse(R"({"hostLabel":"Acme","workspaceRoot":"/srv/../srv/project/","mode":"workspace-write"})"));
  CHECK(full.mode == SandboxMode::workspace_write);
  REQUIRE(full.workspace_root.has_value());
  CHECK(full.workspace_root->string() == "/srv/../srv/project/"); // canonicalized by the owner, not here
  CHECK(full.host_label == "Acme");

  // Labels may hold spaces, backslashes and non-ASCII text.
  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"hostLabel":"My Host"})")).host_label == "My Host");
  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"hostLabel":"A\\B"})")).host_label == "A\\B");
  CHECK(dsh::PolicyConfig::from_json(json::parse(R"({"hostLabel":"H\u00f6st"})")).host_label == "H\xC3\xB6st");
}

TEST_CASE("PolicyConfig::from_json rejects every bad input with an exact message", "[config]") {
  for (const BadConfig& bad : bad_configs()) {
    INFO("input " << bad.input);
    const json input = json::parse(bad.input);
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { (void)dsh::PolicyConfig::from_json(input); }) ==
          bad.message);
  }
}

TEST_CASE("PolicyOwner validates a configuration built in code", "[config]") {
  const dsh::test::TempDir tmp;
  SECTION("an empty root") {
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([] {
            dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, std::filesystem::path(), "DSH"});
          }) == kRootValue + R"("")");
  }
  SECTION("a bad host label") {
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] {
            dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), ""});
          }) == kLabelValue + R"("")");
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] {
            dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "a\nb"});
          }) == kLabelValue + R"("a\nb")");
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] {
            dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "a\"b"});
          }) == kLabelValue + R"("a\"b")");
  }
  SECTION("a mode outside the enum") {
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] {
            dsh::PolicyOwner owner(dsh::PolicyConfig{static_cast<SandboxMode>(3), tmp.path(), "DSH"});
          }) == kModeExpected + "3");
  }
  SECTION("a valid configuration read from JSON") {
    std::filesystem::create_directories(tmp / "project");
    json input = json::object();
    input["mode"] = "danger-full-access";
    input["workspaceRoot"] = (tmp / "." / "project" / "").string();
    input["hostLabel"] = "Acme";
    const dsh::PolicyOwner owner(dsh::PolicyConfig::from_json(input));
    CHECK(owner.defaultMode() == SandboxMode::danger_full_access);
    CHECK(owner.workspaceRoot() == std::filesystem::canonical(tmp / "project"));
    CHECK(owner.hostLabel() == "Acme");
  }
  SECTION("an unregistered family value") {
    dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
    CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] {
            (void)owner.registerEnforcedFamily(static_cast<Family>(5));
          }) == R"(PolicyOwner family: expected a family ("filesystem", "bash", "terminal"); found 5)");
    CHECK(owner.enforcedFamilies().empty());
  }
}

TEST_CASE("the vocabulary: one string per value, in canonical order", "[vocabulary]") {
  STATIC_REQUIRE(dsh::SANDBOX_MODES == std::array<SandboxMode, 3>{SandboxMode::read_only, SandboxMode::workspace_write,
                                                                  SandboxMode::danger_full_access});
  STATIC_REQUIRE(dsh::FAMILIES == std::array<Family, 3>{Family::filesystem, Family::bash, Family::terminal});
  STATIC_REQUIRE(dsh::to_string(SandboxMode::read_only) == "read-only");
  STATIC_REQUIRE(dsh::to_string(SandboxMode::workspace_write) == "workspace-write");
  STATIC_REQUIRE(dsh::to_string(SandboxMode::danger_full_access) == "danger-full-access");
  STATIC_REQUIRE(dsh::to_string(Family::filesystem) == "filesystem");
  STATIC_REQUIRE(dsh::to_string(Family::bash) == "bash");
  STATIC_REQUIRE(dsh::to_string(Family::terminal) == "terminal");
  STATIC_REQUIRE(dsh::to_string(ModeSource::approved) == "approved");
  STATIC_REQUIRE(dsh::to_string(ModeSource::session) == "session");
  STATIC_REQUIRE(dsh::to_string(ModeSource::deployment) == "deployment");
  STATIC_REQUIRE(dsh::to_string(RootSource::session) == "session");
  STATIC_REQUIRE(dsh::to_string(RootSource::deployment) == "deployment");
  STATIC_REQUIRE(dsh::parse_sandbox_mode("workspace-write") == SandboxMode::workspace_write);
  STATIC_REQUIRE(dsh::parse_family("terminal") == Family::terminal);
  STATIC_REQUIRE_FALSE(dsh::parse_sandbox_mode("Read-Only").has_value());
  STATIC_REQUIRE(noexcept(dsh::to_string(SandboxMode::read_only)));
  STATIC_REQUIRE(noexcept(dsh::parse_sandbox_mode("")));
  STATIC_REQUIRE(noexcept(dsh::parse_family("")));
  // A value outside the enum has no name.
  CHECK(dsh::to_string(static_cast<SandboxMode>(9)).empty());
  CHECK(dsh::to_string(static_cast<Family>(9)).empty());
  // The names as the tools' usage texts list them.
  CHECK(dsh::names_of(dsh::SANDBOX_MODES, ", ", " or ") == "read-only, workspace-write or danger-full-access");
  CHECK(dsh::names_of(dsh::FAMILIES, ",", ",") == "filesystem,bash,terminal");
  CHECK(dsh::names_of(std::array<Family, 1>{Family::bash}, ", ", " or ") == "bash");
  CHECK(dsh::names_of(std::array<Family, 0>{}, ", ", " or ").empty());
}

TEST_CASE("the vocabulary: parse is exact", "[vocabulary]") {
  for (std::string_view text : {"Read-Only", "", " read-only", "read-only ", "readonly", "read_only", "READ-ONLY",
                                "read-only\n", "workspace", "danger"}) {
    INFO("text '" << text << "'");
    CHECK_FALSE(dsh::parse_sandbox_mode(text).has_value());
  }
  CHECK_FALSE(dsh::parse_sandbox_mode(std::string_view("read-only\0", 10)).has_value());
  for (std::string_view text : {"Bash", "", " bash", "fs", "file-system", "terminals", "shell"}) {
    INFO("text '" << text << "'");
    CHECK_FALSE(dsh::parse_family(text).has_value());
  }
}

TEST_CASE("the vocabulary: to_string, parse and JSON round trip", "[vocabulary]") {
  // Each value's name, its parse, and the JSON string both ways.
  const auto round_trip = [](const auto& values, const std::array<const char*, 3>& names, const auto& parse) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto value = values[i];
      CAPTURE(names[i]);
      CHECK(dsh::to_string(value) == names[i]);
      CHECK(parse(dsh::to_string(value)) == value);
      const json as_json = value;
      CHECK(as_json == json(names[i]));
      CHECK(as_json.get<std::remove_const_t<decltype(value)>>() == value);
    }
  };
  round_trip(dsh::SANDBOX_MODES, {"read-only", "workspace-write", "danger-full-access"},
             [](std::string_view text) { return dsh::parse_sandbox_mode(text); });
  round_trip(dsh::FAMILIES, {"filesystem", "bash", "terminal"},
             [](std::string_view text) { return dsh::parse_family(text); });
  for (ModeSource source : {ModeSource::approved, ModeSource::session, ModeSource::deployment}) {
    CHECK(json(source).get<ModeSource>() == source);
  }
  for (RootSource source : {RootSource::session, RootSource::deployment}) {
    CHECK(json(source).get<RootSource>() == source);
  }
  CHECK(json(ModeSource::approved) == json("approved"));
  CHECK(json(RootSource::deployment) == json("deployment"));
  CHECK(json::parse(R"(["terminal","filesystem"])").get<std::vector<Family>>() ==
        std::vector<Family>{Family::terminal, Family::filesystem});
}

TEST_CASE("the vocabulary: from_json of an unknown value is a ConfigError", "[vocabulary]") {
  const std::string modes =
      R"(sandbox mode: expected a sandbox mode ("read-only", "workspace-write", "danger-full-access"); found )";
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json("Read-Only").get<SandboxMode>(); }) ==
        modes + R"("Read-Only")");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json("").get<SandboxMode>(); }) == modes + R"("")");
  // Never the enum's integer form.
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json(1).get<SandboxMode>(); }) == modes + "1");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json(nullptr).get<SandboxMode>(); }) == modes + "null");

  const std::string families = R"(family: expected a family ("filesystem", "bash", "terminal"); found )";
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json("shell").get<Family>(); }) ==
        families + R"("shell")");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json(0).get<Family>(); }) == families + "0");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>(
            [] { (void)json::parse(R"(["bash","Bash"])").get<std::vector<Family>>(); }) == families + R"("Bash")");

  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json("user").get<ModeSource>(); }) ==
        R"(mode source: expected a mode source ("approved", "session", "deployment"); found "user")");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([] { (void)json("approved").get<RootSource>(); }) ==
        R"(root source: expected a root source ("session", "deployment"); found "approved")");
}

namespace {

constexpr FamilySet kFB{Family::filesystem, Family::bash};
constexpr FamilySet kBT{Family::bash, Family::terminal};

constexpr FamilySet edited() {
  FamilySet set{Family::terminal};
  set.insert(Family::filesystem);
  set.insert(Family::filesystem);
  set.erase(Family::terminal);
  set.erase(Family::bash);
  return set;
}

constexpr std::size_t count_members(FamilySet set) {
  std::size_t count = 0;
  for ([[maybe_unused]] Family family : set) {
    ++count;
  }
  return count;
}

static_assert(FamilySet{}.empty());
static_assert(FamilySet{}.size() == 0);
static_assert(FamilySet::all().size() == 3);
static_assert(FamilySet::all() == FamilySet{Family::terminal, Family::bash, Family::filesystem});
static_assert(FamilySet{Family::bash, Family::bash}.size() == 1);
static_assert(kFB.contains(Family::filesystem) && kFB.contains(Family::bash) && !kFB.contains(Family::terminal));
static_assert((kFB & kBT) == FamilySet{Family::bash});
static_assert((kFB | kBT) == FamilySet::all());
static_assert((kFB & FamilySet{}).empty());
static_assert(edited() == FamilySet{Family::filesystem});
static_assert(count_members(FamilySet::all()) == 3);
static_assert(*FamilySet{Family::terminal, Family::bash}.begin() == Family::bash);
static_assert(kFB != kBT);
static_assert(std::ranges::input_range<FamilySet>);

} // namespace

TEST_CASE("FamilySet iterates in canonical order", "[vocabulary][familyset]") {
  std::vector<Family> order;
  for (Family family : FamilySet{Family::terminal, Family::filesystem, Family::bash}) {
    order.push_back(family);
  }
  CHECK(order == std::vector<Family>{Family::filesystem, Family::bash, Family::terminal});

  order.clear();
  for (Family family : FamilySet{Family::terminal, Family::filesystem}) {
    order.push_back(family);
  }
  CHECK(order == std::vector<Family>{Family::filesystem, Family::terminal});
  CHECK(FamilySet{}.begin() == FamilySet{}.end());

  CHECK(json(FamilySet{Family::terminal, Family::filesystem, Family::bash}).dump() ==
        R"(["filesystem","bash","terminal"])");
  CHECK(json(FamilySet{}).dump() == "[]");
}

TEST_CASE("a host label that is not UTF-8 is refused", "[config]") {
  const dsh::test::TempDir tmp;
  std::string message;
  try {
    const dsh::PolicyOwner owner(dsh::PolicyConfig{dsh::SandboxMode::read_only, tmp.path(), "H\xFFst"});
  } catch (const dsh::ConfigError& error) {
    message = error.what();
  }
  CHECK(message == "PolicyConfig key \"hostLabel\": expected a non-empty UTF-8 string without control characters "
                   "or '\"'; found \"H\xEF\xBF\xBDst\"");
}

TEST_CASE("FamilySet ignores values outside the enum", "[familyset]") {
  const dsh::FamilySet forged{static_cast<dsh::Family>(5)};
  CHECK(forged.empty());
  const dsh::ResolvedPolicy policy{dsh::SandboxMode::read_only, "/x", dsh::ModeSource::session,
                                   dsh::RootSource::session};
  CHECK(dsh::render_policy_context(policy, forged, {}).empty()); // today: reads FAMILY_LABELS[5]
}
