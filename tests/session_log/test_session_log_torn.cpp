// A torn last line (an append cut short by a crash: no final newline) is cut off and reported,
// and the next append starts a clean line; by open, or by an append that finds what a crashed
// writer left behind.
#include "support/session_log.hpp"

#include <unistd.h>

using namespace dsh;
using namespace dsh::test;

namespace {

/// Creates a log with three events; returns its bytes.
std::string three_events(const std::filesystem::path& path) {
  auto log = SessionLog::create(path, {"torn", {}, 1});
  dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  log.append("turn/end", {{"turn", 0}});
  dsh::set_sandbox_mode(log, SandboxMode::danger_full_access);
  return read_file(path);
}

} // namespace

TEST_CASE("a log truncated in the middle of its last line is repaired on open, then appends cleanly") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string whole = three_events(path);
  const std::size_t last_line = whole.rfind('\n', whole.size() - 2) + 1;
  const std::size_t cut = whole.size() - 7;
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);

  {
    auto log = SessionLog::open(path);
    REQUIRE(log.tail_repair());
    CHECK(*log.tail_repair() == dsh::TailRepair{4, last_line, cut - last_line});
    CHECK(log.events().size() == 2);
    CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);
    CHECK(read_file(path) == whole.substr(0, last_line));
    CHECK(log.append("turn/start", {{"turn", 1}}) == 2);
  }
  const std::string after = read_file(path);
  CHECK(after.substr(0, last_line) == whole.substr(0, last_line));
  CHECK(after.substr(last_line).starts_with(R"({"type":"turn/start","seq":2,)"));
  CHECK(after.back() == '\n');
  const auto reopened = SessionLog::open(path);
  CHECK_FALSE(reopened.tail_repair());
  CHECK(reopened.events().size() == 3);
  CHECK(reopened.sandbox_mode_override() == SandboxMode::workspace_write);
}

TEST_CASE("an unterminated last line is cut even when it happens to be complete JSON") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string whole = three_events(path);
  write_file(path, whole.substr(0, whole.size() - 1)); // only the newline is missing
  const std::size_t last_line = whole.rfind('\n', whole.size() - 2) + 1;
  const auto log = SessionLog::open(path);
  CHECK(*log.tail_repair() == dsh::TailRepair{4, last_line, whole.size() - 1 - last_line});
  CHECK(log.events().size() == 2);
}

TEST_CASE("a tail of NUL bytes without a newline (a power cut's leftover) is cut") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string whole = three_events(path);
  write_file(path, whole + std::string(100, '\0'));
  const auto log = SessionLog::open(path);
  CHECK(*log.tail_repair() == dsh::TailRepair{5, whole.size(), 100});
  CHECK(log.events().size() == 3);
  CHECK(read_file(path) == whole);
}

TEST_CASE("an append finds and cuts a torn line that a crashed writer left while the log was open") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string whole = three_events(path);
  auto log = SessionLog::open(path);
  CHECK_FALSE(log.tail_repair());

  // Another process appended one whole line and died in the middle of the next one.
  const std::string other = R"({"type":"turn/end","seq":3,"time":5,"data":{"turn":1}})"
                            "\n";
  const std::string torn = R"({"type":"sandbox/mode","seq":4,"time":6,"data":{"mo)";
  write_file(path, whole + other + torn);

  CHECK(log.append("turn/start", {{"turn", 2}}) == 4);
  CHECK(*log.tail_repair() == dsh::TailRepair{6, whole.size() + other.size(), torn.size()});
  CHECK(log.events().size() == 5);
  CHECK(log.events()[3] == nlohmann::json::parse(other));
  CHECK(log.sandbox_mode_override() == SandboxMode::danger_full_access);
  const std::string after = read_file(path);
  CHECK(after.substr(0, whole.size() + other.size()) == whole + other);
  CHECK(after.substr(whole.size() + other.size()).starts_with(R"({"type":"turn/start","seq":4,)"));
}

TEST_CASE("damage appended by someone else is refused by append, which then writes nothing") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string whole = three_events(path);
  auto log = SessionLog::open(path);
  const std::string damaged = whole + R"({"type":"turn/end","seq":7})" + "\n";
  write_file(path, damaged);
  const dsh::LogError error = dsh::test::log_error_from([&] { log.append("turn/start", {}); });
  CHECK(std::string(error.what()) == dsh::test::log_message(path, 5, "seq 7 where 3 was expected"));
  CHECK(read_file(path) == damaged);
  CHECK(log.events().size() == 3);
  CHECK(log.next_seq() == 3);
}
