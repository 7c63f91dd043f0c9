// The sandbox/mode invariant (docs/contract.md#the-invariant): the exact failure texts, forged events rejected before
// anything is stored, set_sandbox_mode as the one write path, the kept override; and the cache
// safety of the model text (docs/contract.md#the-model-text: TMPDIR changes no byte).
#include "support/catch.hpp"
#include "support/scoped.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using dsh::SandboxMode;
using json = nlohmann::json;

static_assert(std::is_base_of_v<std::runtime_error, dsh::InvariantViolation>);

json mode_event_with_data(json data) {
  return json{{"type", "sandbox/mode"}, {"seq", 0}, {"time", 1764480000000}, {"data", std::move(data)}};
}

json mode_event(json mode) { return mode_event_with_data(json{{"mode", std::move(mode)}}); }

// An appendable host session that records what it is asked to append.
struct RecordingSession {
  dsh::SessionHeader head;
  std::vector<json> log;
  std::vector<std::pair<std::string, json>> appended;
  [[nodiscard]] const dsh::SessionHeader& header() const { return head; }
  [[nodiscard]] const std::vector<json>& events() const { return log; }
  void append(std::string_view type, json data) { appended.emplace_back(std::string(type), std::move(data)); }
};
static_assert(dsh::AppendableSession<RecordingSession>);

} // namespace

TEST_CASE("validate_event: the exact failure texts", "[invariant]") {
  CHECK(dsh::validate_event(mode_event("host-root")) == "sandbox/mode carries unknown mode \"host-root\"");
  CHECK(dsh::validate_event(mode_event(42)) == "sandbox/mode carries unknown mode 42");
  CHECK(dsh::validate_event(mode_event(nullptr)) == "sandbox/mode carries unknown mode null");
  CHECK(dsh::validate_event(mode_event("Read-Only")) == "sandbox/mode carries unknown mode \"Read-Only\"");
  CHECK(dsh::validate_event(mode_event("")) == "sandbox/mode carries unknown mode \"\"");
  CHECK(dsh::validate_event(mode_event(" read-only")) == "sandbox/mode carries unknown mode \" read-only\"");
  CHECK(dsh::validate_event(mode_event(true)) == "sandbox/mode carries unknown mode true");
  CHECK(dsh::validate_event(mode_event(-1.5)) == "sandbox/mode carries unknown mode -1.5");
  CHECK(dsh::validate_event(mode_event(json::array({"read-only"}))) ==
        "sandbox/mode carries unknown mode [\"read-only\"]");
  CHECK(dsh::validate_event(mode_event(json{{"mode", "read-only"}})) ==
        "sandbox/mode carries unknown mode {\"mode\":\"read-only\"}");
  // The value is shown as compact JSON: quotes and newlines escaped, invalid UTF-8 replaced.
  CHECK(dsh::validate_event(mode_event("a\"b\nc")) == "sandbox/mode carries unknown mode \"a\\\"b\\nc\"");
  CHECK(dsh::validate_event(mode_event("\xFF")) == "sandbox/mode carries unknown mode \"\xEF\xBF\xBD\"");
}

TEST_CASE("the failure text writes strings, literals and integers byte for byte as dump() does", "[invariant]") {
  // The library writes the compact JSON itself rather than calling dump() (whose serializer is
  // costly to compile). Where JSON.stringify and dump() agree (strings, literals, integers a
  // double holds exactly, keys that are not array indices), it must agree with dump(); invalid
  // UTF-8 is replaced as error_handler_t::replace replaces it.
  const auto dumped = [](const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::vector<std::string> disagreements;
  const auto compare = [&](const json& value) {
    if (dsh::detail::compact_json(value) != dumped(value)) {
      disagreements.push_back(dumped(value));
    }
  };
  compare(nullptr);
  compare(false);
  compare(true);
  compare(-7);
  compare(std::int64_t{1} << 53);
  compare(-(std::int64_t{1} << 53));
  compare(json::array());
  compare(json::object());
  compare(json{{"\xFF\"k", 1}});
  compare(json::parse(R"({"b":[1,{"a":null},[]],"a":"\u00e9","":{}})"));
  compare(json::binary({}));
  compare(json::binary({0, 1, 255}));
  compare(json::binary({7}, 42));
  compare(json(json::value_t::discarded));
  // Every string of one or two bytes; longer ones over the bytes where escaping or UTF-8
  // validity changes.
  for (int first = 0; first < 256; ++first) {
    compare(json(std::string(1, static_cast<char>(first))));
    for (int second = 0; second < 256; ++second) {
      compare(json(std::string{static_cast<char>(first), static_cast<char>(second)}));
    }
  }
  constexpr std::array<unsigned char, 20> turning{0x00, 0x0A, 0x1F, 0x22, 0x41, 0x5C, 0x7F, 0x80, 0x8F, 0x90,
                                                  0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xFF};
  for (unsigned char a : turning) {
    for (unsigned char b : turning) {
      for (unsigned char c : turning) {
        std::string text{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)};
        compare(json(text));
        for (unsigned char d : turning) {
          compare(json(text + static_cast<char>(d)));
        }
      }
    }
  }
  // Compared with an empty vector rather than empty(), so that a failure lists the values.
  CHECK(disagreements == std::vector<std::string>{}); // NOLINT(readability-container-size-empty)
  CHECK(dsh::validate_event(mode_event(json::binary({1, 2}, 3))) ==
        R"(sandbox/mode carries unknown mode {"bytes":[1,2],"subtype":3})");
}

TEST_CASE("the failure text writes every double in its shortest round-trip form", "[invariant]") {
  // Random bit patterns reach every class of double: normal, subnormal, NaN, infinite. Each
  // finite one reads back as itself, and with no more significant digits than std::to_chars
  // needs (the shortest); a non-finite one is null, as JSON.stringify writes it.
  std::mt19937_64 random(20240601);
  std::vector<std::string> wrong;
  for (int i = 0; i < 20000; ++i) {
    const auto number = std::bit_cast<double>(random());
    const std::string text = dsh::detail::compact_json(json(number));
    if (!std::isfinite(number)) {
      if (text != "null") {
        wrong.push_back(text);
      }
      continue;
    }
    double back = 0;
    const auto parsed = std::from_chars(text.data(), text.data() + text.size(), back);
    std::array<char, 64> shortest{};
    const char* shortest_end =
        std::to_chars(shortest.data(), shortest.data() + shortest.size(), number, std::chars_format::scientific).ptr;
    const auto significant = [](std::string_view digits) {
      digits = digits.substr(0, digits.find_first_of("eE"));
      std::string kept;
      for (const char c : digits) {
        if (c >= '0' && c <= '9' && !(kept.empty() && c == '0')) {
          kept += c;
        }
      }
      while (!kept.empty() && kept.back() == '0') {
        kept.pop_back();
      }
      return kept;
    };
    const bool exact = parsed.ec == std::errc() && parsed.ptr == text.data() + text.size() &&
                       std::bit_cast<std::uint64_t>(back) == std::bit_cast<std::uint64_t>(number == 0 ? 0.0 : number);
    if (!exact ||
        significant(text) !=
            significant(std::string_view(shortest.data(), static_cast<std::size_t>(shortest_end - shortest.data())))) {
      wrong.push_back(text);
    }
  }
  CHECK(wrong == std::vector<std::string>{}); // NOLINT(readability-container-size-empty)
}

TEST_CASE("validate_event: a missing data or data.mode carries no mode", "[invariant]") {
  CHECK(dsh::validate_event(json{{"type", "sandbox/mode"}, {"seq", 0}, {"time", 0}}) == "sandbox/mode carries no mode");
  CHECK(dsh::validate_event(mode_event_with_data(json::object())) == "sandbox/mode carries no mode");
  CHECK(dsh::validate_event(mode_event_with_data(json{{"source", "delegation"}})) == "sandbox/mode carries no mode");
  CHECK(dsh::validate_event(mode_event_with_data(json{{"Mode", "read-only"}})) == "sandbox/mode carries no mode");
  CHECK(dsh::validate_event(mode_event_with_data(nullptr)) == "sandbox/mode carries no mode");
  CHECK(dsh::validate_event(mode_event_with_data("read-only")) == "sandbox/mode carries no mode");
}

TEST_CASE("validate_event: valid switches and other events pass", "[invariant]") {
  for (const char* mode : {"read-only", "workspace-write", "danger-full-access"}) {
    CHECK_FALSE(dsh::validate_event(mode_event(mode)).has_value());
    CHECK_FALSE(dsh::validate_event(mode_event_with_data(json{{"mode", mode}, {"source", "delegation"}})).has_value());
  }
  // Other types always pass, whatever their data.
  CHECK_FALSE(dsh::validate_event(json{{"type", "user/message"}, {"data", {{"mode", "host-root"}}}}).has_value());
  CHECK_FALSE(dsh::validate_event(json{{"type", "Sandbox/Mode"}, {"data", {{"mode", "host-root"}}}}).has_value());
  CHECK_FALSE(dsh::validate_event(json{{"type", "sandbox/mode2"}}).has_value());
  CHECK_FALSE(dsh::validate_event(json{{"type", "text-chunks"}, {"seq0", 3}, {"data", {{"dt", {1, 2}}}}}).has_value());
  CHECK_FALSE(dsh::validate_event(json{{"type", 7}, {"data", {{"mode", 42}}}}).has_value());
  CHECK_FALSE(dsh::validate_event(json::object()).has_value());
  CHECK_FALSE(dsh::validate_event(json::array({"sandbox/mode"})).has_value());
  CHECK_FALSE(dsh::validate_event(json("sandbox/mode")).has_value());
  CHECK_FALSE(dsh::validate_event(json(nullptr)).has_value());
}

TEST_CASE("check_event throws InvariantViolation with the same text", "[invariant]") {
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([] { dsh::check_event(mode_event("host-root")); }) ==
        "sandbox/mode carries unknown mode \"host-root\"");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([] { dsh::check_event(mode_event(42)); }) ==
        "sandbox/mode carries unknown mode 42");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([] { dsh::check_event(mode_event(nullptr)); }) ==
        "sandbox/mode carries unknown mode null");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>(
            [] { dsh::check_event(mode_event_with_data(json::object())); }) == "sandbox/mode carries no mode");
  CHECK_NOTHROW(dsh::check_event(mode_event("workspace-write")));
  CHECK_NOTHROW(dsh::check_event(json{{"type", "user/message"}}));
}

TEST_CASE("the Session constructor rejects a forged seed", "[invariant][session]") {
  const dsh::SessionHeader header{"s", std::nullopt, 0};
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          dsh::Session session(header, {mode_event("workspace-write"), mode_event("host-root")});
        }) == "sandbox/mode carries unknown mode \"host-root\"");
  // A forged switch anywhere in the seed, not only the last one.
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          dsh::Session session(header, {mode_event(42), mode_event("workspace-write")});
        }) == "sandbox/mode carries unknown mode 42");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          dsh::Session session(header, {json{{"type", "user/message"}}, mode_event_with_data(json::object())});
        }) == "sandbox/mode carries no mode");

  const std::vector<json> seed{json{{"type", "user/message"}, {"seq", 0}}, mode_event("danger-full-access"),
                               mode_event_with_data(json{{"mode", "workspace-write"}, {"source", "delegation"}}),
                               json{{"type", "user/message"}, {"seq", 3}}};
  const dsh::Session session(header, seed);
  CHECK(session.events() == seed);
  CHECK(session.header() == header);
  CHECK(session.sandbox_mode_override() == SandboxMode::workspace_write);
}

TEST_CASE("Session::append rejects a forged event and leaves the session unchanged", "[invariant][session]") {
  dsh::Session session(dsh::SessionHeader{"s", std::nullopt, 0});
  dsh::set_sandbox_mode(session, SandboxMode::workspace_write);
  session.append("user/message", json{{"text", "hi"}});
  const std::vector<json> before = session.events();

  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          session.append("sandbox/mode", json{{"mode", "host-root"}});
        }) == "sandbox/mode carries unknown mode \"host-root\"");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          session.append("sandbox/mode", json{{"mode", 42}});
        }) == "sandbox/mode carries unknown mode 42");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] {
          session.append("sandbox/mode", json{{"mode", nullptr}});
        }) == "sandbox/mode carries unknown mode null");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] { session.append("sandbox/mode", json::object()); }) ==
        "sandbox/mode carries no mode");
  CHECK(dsh::test::thrown_message<dsh::InvariantViolation>([&] { session.append("sandbox/mode", json(nullptr)); }) ==
        "sandbox/mode carries no mode");

  CHECK(session.events() == before);
  CHECK(session.sandbox_mode_override() == SandboxMode::workspace_write);
  // The next event still gets the next seq: nothing was counted for the rejected ones.
  session.append("user/message", json::object());
  CHECK(session.events().back()["seq"] == 2);
}

TEST_CASE("Session::append builds the DSH envelope", "[session]") {
  dsh::Session session(dsh::SessionHeader{"s", std::nullopt, 0},
                       {json{{"type", "user/message"}, {"seq", 0}}, json{{"type", "user/message"}, {"seq", 1}}});
  const std::int64_t earliest = dsh::detail::now_epoch_ms();
  session.append("tool/result", json{{"ok", true}});
  const std::int64_t latest = dsh::detail::now_epoch_ms();

  REQUIRE(session.events().size() == 3);
  const json& event = session.events().back();
  CHECK(event.size() == 4);
  CHECK(event["type"] == "tool/result");
  CHECK(event["seq"] == 2);
  CHECK(event["data"] == json{{"ok", true}});
  REQUIRE(event["time"].is_number_integer());
  CHECK(event["time"].get<std::int64_t>() >= earliest);
  CHECK(event["time"].get<std::int64_t>() <= latest);
}

TEST_CASE("set_sandbox_mode appends exactly one event, even when the mode is unchanged", "[session]") {
  dsh::Session session(dsh::SessionHeader{"s", std::nullopt, 0});
  session.append("user/message", json{{"text", "hi"}});
  const json first = session.events().front();

  dsh::set_sandbox_mode(session, SandboxMode::workspace_write);
  REQUIRE(session.events().size() == 2);
  CHECK(session.events().front() == first);
  const json& switched = session.events().back();
  CHECK(switched["type"] == "sandbox/mode");
  CHECK(switched["seq"] == 1);
  CHECK(switched["data"] == json{{"mode", "workspace-write"}});
  CHECK(switched["data"].dump() == R"({"mode":"workspace-write"})");

  dsh::set_sandbox_mode(session, SandboxMode::workspace_write);
  REQUIRE(session.events().size() == 3);
  CHECK(session.events().back()["data"].dump() == R"({"mode":"workspace-write"})");
  CHECK(session.events().back()["seq"] == 2);

  // On a host's own session type: exactly one append call, with exactly that type and data.
  RecordingSession host{dsh::SessionHeader{"h", std::nullopt, 0}, {}, {}};
  dsh::set_sandbox_mode(host, SandboxMode::danger_full_access);
  REQUIRE(host.appended.size() == 1);
  CHECK(host.appended[0].first == "sandbox/mode");
  CHECK(host.appended[0].second.dump() == R"({"mode":"danger-full-access"})");
  dsh::set_sandbox_mode(host, SandboxMode::read_only);
  REQUIRE(host.appended.size() == 2);
  CHECK(host.appended[1].second.dump() == R"({"mode":"read-only"})");
}

TEST_CASE("sandbox_mode_override tracks appends and agrees with the fold", "[session]") {
  dsh::Session session(dsh::SessionHeader{"s", std::nullopt, 0});
  const auto agrees = [&session] { return session.sandbox_mode_override() == dsh::effective_mode(session.events()); };
  CHECK_FALSE(session.sandbox_mode_override().has_value());
  CHECK(agrees());

  session.append("user/message", json{{"text", "hi"}});
  CHECK_FALSE(session.sandbox_mode_override().has_value());

  dsh::set_sandbox_mode(session, SandboxMode::danger_full_access);
  CHECK(session.sandbox_mode_override() == SandboxMode::danger_full_access);
  CHECK(agrees());

  session.append("user/message", json{{"text", "again"}});
  CHECK(session.sandbox_mode_override() == SandboxMode::danger_full_access);

  session.append("sandbox/mode", json{{"mode", "read-only"}, {"source", "delegation"}});
  CHECK(session.sandbox_mode_override() == SandboxMode::read_only);
  CHECK(agrees());

  CHECK_THROWS_AS(session.append("sandbox/mode", json{{"mode", "host-root"}}), dsh::InvariantViolation);
  CHECK(session.sandbox_mode_override() == SandboxMode::read_only);
  CHECK(agrees());
}

TEST_CASE("two sessions never share a mode", "[session]") {
  const dsh::test::TempDir tmp;
  const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
  dsh::Session first(dsh::SessionHeader{"same-id", std::nullopt, 0});
  const dsh::Session second(dsh::SessionHeader{"same-id", std::nullopt, 0});
  dsh::set_sandbox_mode(first, SandboxMode::danger_full_access);
  CHECK(owner.resolve(first).mode == SandboxMode::danger_full_access);
  CHECK(owner.resolve(second).mode == SandboxMode::read_only);
  CHECK_FALSE(second.sandbox_mode_override().has_value());
}

TEST_CASE("TMPDIR changes no byte of the model text", "[cache]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "ws");
  std::filesystem::create_directories(tmp / "tmp-one");
  std::filesystem::create_directories(tmp / "tmp-two");
  const std::string root = std::filesystem::canonical(tmp / "ws").string();
  const std::string one = std::filesystem::canonical(tmp / "tmp-one").string();
  const std::string two = std::filesystem::canonical(tmp / "tmp-two").string();

  const dsh::test::EnvironmentVariable tmpdir("TMPDIR");
  // Renders every mode with the owner built and the text rendered under one TMPDIR.
  const auto render_all = [&](const std::string& value) {
    tmpdir.set(value);
    dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp / "ws", "DSH"});
    const dsh::Disposer filesystem = owner.registerEnforcedFamily(dsh::Family::filesystem);
    const dsh::Disposer bash = owner.registerEnforcedFamily(dsh::Family::bash);
    const dsh::Disposer terminal = owner.registerEnforcedFamily(dsh::Family::terminal);
    const dsh::Disposer offer = owner.registerEscalatableFamily(dsh::Family::bash);
    std::vector<std::string> texts;
    for (SandboxMode mode : dsh::SANDBOX_MODES) {
      dsh::Session with_cwd(dsh::SessionHeader{"s", root, 0});
      dsh::set_sandbox_mode(with_cwd, mode);
      texts.push_back(owner.context(with_cwd));
      dsh::Session without_cwd(dsh::SessionHeader{"s", std::nullopt, 0});
      dsh::set_sandbox_mode(without_cwd, mode);
      texts.push_back(owner.context(without_cwd));
    }
    return texts;
  };
  const std::vector<std::string> under_one = render_all(one);
  const std::vector<std::string> under_two = render_all(two);
  REQUIRE(under_one.size() == 6);
  CHECK(under_one == under_two);
  for (const std::string& text : under_one) {
    CHECK(text.find(one) == std::string::npos);
    CHECK(text.find(two) == std::string::npos);
    CHECK(text.find("tmp-") == std::string::npos);
  }
  CHECK(under_one[2] == "Current DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, "
                        "and terminal sessions may modify files under the session workspace: \"" +
                            root + "\". Some platform temporary areas may also be writable.");
  CHECK(under_one[2] == under_one[3]);
}

namespace {
struct AppendCountingSession {
  dsh::SessionHeader head;
  std::vector<nlohmann::json> log;
  int appends = 0;
  [[nodiscard]] const dsh::SessionHeader& header() const { return head; }
  [[nodiscard]] const std::vector<nlohmann::json>& events() const { return log; }
  void append(std::string_view /*type*/, const nlohmann::json& /*data*/) { ++appends; }
};
} // namespace

TEST_CASE("set_sandbox_mode never writes a forged event, whatever the session type", "[session]") {
  AppendCountingSession host{dsh::SessionHeader{"h", std::nullopt, 0}, {}, 0};
  CHECK_THROWS_AS(dsh::set_sandbox_mode(host, static_cast<dsh::SandboxMode>(7)), dsh::InvariantViolation);
  CHECK(host.appends == 0);
}
