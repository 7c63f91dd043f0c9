// The runtime-context snapshot on the durable dsh::SessionLog: each announcement is one line in
// the file, an unchanged request leaves the file byte for byte as it was, and a restarted host
// reads what the model was last told from the file alone.
#include <dsh/runtime_context.hpp>
#include <dsh/session_log.hpp>

#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* PREAMBLE = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Returns the last line of `text` (which ends with a newline), without the newline.
std::string last_line(const std::string& text) {
  REQUIRE(text.ends_with('\n'));
  const std::size_t begin = text.rfind('\n', text.size() - 2) + 1;
  return text.substr(begin, text.size() - 1 - begin);
}

/// Copies a fixture into `dir` (writable) and returns the copy's path.
fs::path copy_fixture(const dsh::test::TempDir& dir, const char* name) {
  fs::path copy = dir / name;
  fs::copy_file(fs::path(DSH_FIXTURES_DIR) / "sessions" / name, copy);
  fs::permissions(copy, fs::perms::owner_read | fs::perms::owner_write);
  return copy;
}

json snapshot_data(const std::string& id, const std::string& text) {
  return json{{"id", id},
              {"role", "user"},
              {"content", json::array({json{{"type", "text"}, {"text", text}}})},
              {"source", json{{"kind", "plugin"}, {"plugin", "@deepseek-ai/dsh-system-prompt"}}}};
}

/// A policy owner with all three families enforced and none escalatable.
struct Owner {
  dsh::PolicyOwner owner{dsh::PolicyConfig{dsh::SandboxMode::read_only, fs::path("/srv/fallback"), "DSH"}};
  dsh::Disposer filesystem = owner.registerEnforcedFamily(dsh::Family::filesystem);
  dsh::Disposer bash = owner.registerEnforcedFamily(dsh::Family::bash);
  dsh::Disposer terminal = owner.registerEnforcedFamily(dsh::Family::terminal);

  [[nodiscard]] std::string snapshot(const dsh::SessionLog& log) const {
    return dsh::RuntimeContext{}.add_sandbox_policy(owner, log).render();
  }
};

} // namespace

TEST_CASE("each announcement is exactly one line; an unchanged request leaves the file as it was",
          "[runtime_context][session_log]") {
  const dsh::test::TempDir tmp;
  fs::create_directories(tmp / "project");
  const fs::path path = tmp / "session.jsonl";
  const Owner host;
  dsh::SessionLog log = dsh::SessionLog::create(path, {"rc", (tmp / "project").string(), 1764480000000});

  const std::string header = read_file(path);
  const std::string text = host.snapshot(log);
  REQUIRE(dsh::announce_runtime_context(log, text) == dsh::SnapshotOutcome::snapshot);
  const std::string after_first = read_file(path);
  REQUIRE(after_first.starts_with(header));
  const json line = json::parse(last_line(after_first));
  CHECK(after_first.size() == header.size() + last_line(after_first).size() + 1);
  CHECK(line.at("type") == "user/message");
  CHECK(line.at("seq") == 0);
  CHECK(line.at("data") ==
        snapshot_data("runtime-context-0",
                      std::string(PREAMBLE) +
                          "\n\nCurrent DSH file policy: read-only. The write and edit tools, one-shot bash commands, "
                          "and terminal sessions cannot modify files in the standing mode."));

  CHECK(dsh::announce_runtime_context(log, host.snapshot(log)) == dsh::SnapshotOutcome::nothing);
  CHECK(read_file(path) == after_first);
}

TEST_CASE("a host restarted from the log gets the policy and the last snapshot back and appends nothing",
          "[runtime_context][session_log]") {
  const dsh::test::TempDir tmp;
  fs::create_directories(tmp / "real");
  fs::create_directory_symlink(tmp / "real", tmp / "link");
  const fs::path path = tmp / "session.jsonl";
  std::string told;
  {
    const Owner host;
    dsh::SessionLog log = dsh::SessionLog::create(path, {"rc", (tmp / "link").string(), 1764480000000});
    REQUIRE(dsh::announce_runtime_context(log, host.snapshot(log)) == dsh::SnapshotOutcome::snapshot);
    dsh::set_sandbox_mode(log, dsh::SandboxMode::workspace_write);
    told = host.snapshot(log);
    REQUIRE(dsh::announce_runtime_context(log, told) == dsh::SnapshotOutcome::snapshot);
  }
  const std::string before = read_file(path);

  const Owner restarted;
  dsh::SessionLog log = dsh::SessionLog::open(path);
  const dsh::ResolvedPolicy policy = restarted.owner.resolve(log);
  CHECK(policy.mode == dsh::SandboxMode::workspace_write);
  CHECK(policy.mode_source == dsh::ModeSource::session);
  CHECK(policy.workspace_root == fs::canonical(tmp / "real"));
  CHECK(dsh::latest_runtime_context(log) == dsh::SnapshotRecord{told, 2});
  CHECK(restarted.snapshot(log) == told);
  CHECK(dsh::announce_runtime_context(log, restarted.snapshot(log)) == dsh::SnapshotOutcome::nothing);
  CHECK(read_file(path) == before);
}

TEST_CASE("the snapshot id is the seq the log gives the event, packed chunk rows included",
          "[runtime_context][session_log]") {
  const dsh::test::TempDir tmp;
  const Owner host;

  SECTION("packed-rows.jsonl: the next seq is 10") {
    dsh::SessionLog log = dsh::SessionLog::open(copy_fixture(tmp, "packed-rows.jsonl"));
    REQUIRE(log.next_seq() == 10);
    REQUIRE(dsh::announce_runtime_context(log, host.snapshot(log)) == dsh::SnapshotOutcome::snapshot);
    const json appended = json::parse(last_line(read_file(tmp / "packed-rows.jsonl")));
    CHECK(appended.at("seq") == 10);
    CHECK(appended.at("data").at("id") == "runtime-context-10");
  }
  SECTION("basic.jsonl: the user's own messages are not snapshots") {
    dsh::SessionLog log = dsh::SessionLog::open(copy_fixture(tmp, "basic.jsonl"));
    CHECK_FALSE(dsh::latest_runtime_context(log).has_value());
    CHECK(dsh::announce_runtime_context(log, "") == dsh::SnapshotOutcome::nothing);
    REQUIRE(dsh::announce_runtime_context(log, host.snapshot(log)) == dsh::SnapshotOutcome::snapshot);
    const json appended = json::parse(last_line(read_file(tmp / "basic.jsonl")));
    CHECK(appended.at("seq") == 8);
    CHECK(appended.at("data") ==
          snapshot_data("runtime-context-8",
                        std::string(PREAMBLE) +
                            "\n\nCurrent DSH file policy: danger-full-access. The DSH file sandbox does not restrict "
                            "the write and edit tools, one-shot bash commands, or terminal sessions."));
  }
}

TEST_CASE("a malformed snapshot line written by someone else counts as different", "[runtime_context][session_log]") {
  const dsh::test::TempDir tmp;
  const Owner host;
  const fs::path path = tmp / "session.jsonl";
  std::string text;
  {
    dsh::SessionLog log = dsh::SessionLog::create(path, {"rc", std::nullopt, 1764480000000});
    text = host.snapshot(log);
    json data = snapshot_data("forged", text);
    data["content"].push_back(json{{"type", "text"}, {"text", "and one more part"}});
    log.append("user/message", data);
  }
  dsh::SessionLog log = dsh::SessionLog::open(path);
  CHECK(dsh::latest_runtime_context(log) == dsh::SnapshotRecord{std::nullopt, 0});
  CHECK(dsh::announce_runtime_context(log, text) == dsh::SnapshotOutcome::snapshot);
  CHECK(dsh::latest_runtime_context(log) == dsh::SnapshotRecord{text, 1});
}
