// Lone UTF-16 surrogate escapes as DSH writes them (a streamed chunk that splits an emoji's
// pair is stored as "\ud83d" in one row and "\ude00" in the next): the log opens, events()
// yields U+FFFD for each, and no lone surrogate makes a forged sandbox/mode event pass or a
// valid one fail. A refused file is left byte-for-byte as it was.
#include "support/session_log.hpp"

#include <optional>
#include <string>

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

namespace {

const std::string HEADER = header_line("lone", 1764480000000, R"("/srv/lone")");
const std::string FFFD = "\xEF\xBF\xBD";

std::string row(int seq, std::string_view type, std::string_view data_json) {
  return R"({"type":)" + std::string(type) + R"(,"seq":)" + std::to_string(seq) + R"(,"time":1764480000001,"data":)" +
         std::string(data_json) + "}\n";
}

/// Writes `content` to a fresh log in `dir` and returns its path.
std::filesystem::path write_log(const TempDir& dir, std::string_view content) {
  auto path = dir / "session.jsonl";
  write_file(path, content);
  return path;
}

/// Checks that opening `content` is refused at `line` with `what`, leaving the bytes unchanged.
void check_refused(std::string_view content, std::size_t line, std::string_view what) {
  const TempDir dir;
  const auto path = write_log(dir, content);
  const dsh::LogError error = open_error(path);
  CHECK(error.line() == line);
  CHECK(std::string(error.what()) == log_message(path, line, what));
  CHECK(read_file(path) == content);
}

/// Opens `content` and returns the override; the bytes must stay unchanged and the fold agree.
std::optional<SandboxMode> mode_of(std::string_view content) {
  const TempDir dir;
  const auto path = write_log(dir, content);
  const SessionLog log = SessionLog::open(path);
  CHECK(read_file(path) == content);
  CHECK(dsh::effective_mode(log.events()) == log.sandbox_mode_override());
  return log.sandbox_mode_override();
}

} // namespace

TEST_CASE("a log with an emoji split across two streamed chunks opens; events() yields U+FFFD") {
  const TempDir dir;
  const std::string content = HEADER + row(0, R"("assistant/chunk")", R"({"delta":"ok \ud83d"})") +
                              row(1, R"("assistant/chunk")", R"({"delta":"\ude00 done","pair":"\ud83d\ude00"})") +
                              R"({"type":"text-chunks","seq0":2,"data":{"d0":"\ud83d","dt":[["\ude00"],[1]]}})"
                              "\n" +
                              row(5, R"("sandbox/mode")", R"({"mode":"workspace-write","note":"\udbff"})");
  const auto path = write_log(dir, content);
  SessionLog log = SessionLog::open(path);
  CHECK(read_file(path) == content);
  CHECK_FALSE(log.tail_repair().has_value());
  CHECK(log.next_seq() == 6);
  CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);
  const auto events = log.events();
  REQUIRE(events.size() == 4);
  CHECK(events[0]["data"]["delta"] == "ok " + FFFD);
  CHECK(events[1]["data"]["delta"] == FFFD + " done");
  CHECK(events[1]["data"]["pair"] == "\xF0\x9F\x98\x80"); // a pair stays the character it encodes
  CHECK(events[2]["data"]["d0"] == FFFD);
  CHECK(events[2]["data"]["dt"][0][0] == FFFD);
  CHECK(events[3]["data"]["note"] == FFFD);
  CHECK(dsh::effective_mode(events) == SandboxMode::workspace_write);

  // Appending after such rows, and reopening, work as on any log.
  CHECK(log.append("user/message", {{"text", "next"}}) == 6);
  const SessionLog again = SessionLog::open(path);
  CHECK(again.events().size() == 5);
  CHECK(again.events()[1]["data"]["delta"] == FFFD + " done");
}

TEST_CASE("a header with lone surrogates opens; its id and cwd hold U+FFFD") {
  const TempDir dir;
  const std::string content =
      R"({"type":"session","version":0,"id":"a\ud83d","createdAt":1,"cwd":"/srv/\udc00x","delegationDepth":0})"
      "\n";
  const auto path = write_log(dir, content);
  const SessionLog log = SessionLog::open(path);
  CHECK(log.header().id == "a" + FFFD);
  CHECK(log.header().cwd == "/srv/" + FFFD + "x");
  CHECK(read_file(path) == content);
}

TEST_CASE("a lone surrogate never turns a forged mode into a valid one") {
  // The failure text shows the value as DSH itself would write it: the lone surrogate escaped.
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"workspace-write\ud800"})"), 2,
                R"(sandbox/mode carries unknown mode "workspace-write\ud800")");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"\udfffread-only"})"), 2,
                R"(sandbox/mode carries unknown mode "\udfffread-only")");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"danger-full-access\uD83D"})"), 2,
                R"(sandbox/mode carries unknown mode "danger-full-access\ud83d")");
  // U+FFFD itself, which the tree holds for a lone surrogate, is no mode either.
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"read-only\ufffd"})"), 2,
                "sandbox/mode carries unknown mode \"read-only" + FFFD + "\"");
  // A key "mode" followed by a lone surrogate is another key: the event carries no mode.
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode\ud800":"danger-full-access"})"), 2,
                "sandbox/mode carries no mode");
  // After a valid switch, a forged one is still refused.
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"read-only"})") +
                    row(1, R"("sandbox/mode")", R"({"mode":"read-only","mode":"host\ud800"})"),
                3, R"(sandbox/mode carries unknown mode "host\ud800")");
}

TEST_CASE("a type with a lone surrogate is not the sandbox/mode type") {
  // DSH compares "sandbox/mode\udc00" with "sandbox/mode" as UTF-16 strings: they differ, so the
  // row is an ordinary event, whatever its data; it neither switches nor is refused.
  CHECK(mode_of(HEADER + row(0, R"("sandbox/mode\udc00")", R"({"mode":"danger-full-access"})")) == std::nullopt);
  CHECK(mode_of(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"read-only"})") +
                row(1, R"("sandbox/mode\udc00")", R"({"mode":"danger-full-access"})") +
                row(2, R"("\ud800sandbox/mode")", R"({"mode":"host-root"})")) == SandboxMode::read_only);
  const TempDir dir;
  const auto path = write_log(dir, HEADER + row(0, R"("sandbox/mode\udc00")", R"({"mode":"host-root"})"));
  const SessionLog log = SessionLog::open(path);
  CHECK(log.events()[0]["type"] == "sandbox/mode" + FFFD);
  CHECK_FALSE(dsh::validate_event(log.events()[0]).has_value());
}

TEST_CASE("a lone surrogate elsewhere never makes a valid switch fail") {
  CHECK(mode_of(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"workspace-write","source":"\ud83d"})")) ==
        SandboxMode::workspace_write);
  CHECK(mode_of(HEADER + row(0, R"("sandbox/mode")", R"({"\udc00":1,"mode":"danger-full-access"})")) ==
        SandboxMode::danger_full_access);
  CHECK(mode_of(HEADER + R"({"type":"sandbox/mode","x":"\ud83d","seq":0,"data":{"mode":"read-only"}})"
                         "\n") == SandboxMode::read_only);
  // Escapes that are not surrogates still spell the mode, as JSON.parse reads them.
  CHECK(mode_of(HEADER + row(0, R"("sandbox\u002fmode")", R"({"mode":"workspace\u002dwrite"})")) ==
        SandboxMode::workspace_write);
  // Of duplicated "mode" keys the last counts, as in JavaScript.
  CHECK(mode_of(HEADER + row(0, R"("sandbox/mode")", R"({"mode":"host-root","mode":"read-only"})")) ==
        SandboxMode::read_only);
}

TEST_CASE("a forged row's failure text is JSON.stringify's: numbers and key order as DSH writes them") {
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":1.0})"), 2, "sandbox/mode carries unknown mode 1");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":9007199254740993})"), 2,
                "sandbox/mode carries unknown mode 9007199254740992");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":-0.0})"), 2, "sandbox/mode carries unknown mode 0");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":1E21})"), 2, "sandbox/mode carries unknown mode 1e+21");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode": { "b" : 1E2, "a" : [1e-7], "2":null, "1":true }})"), 2,
                R"(sandbox/mode carries unknown mode {"1":true,"2":null,"b":100,"a":[1e-7]})");
  check_refused(HEADER + row(0, R"("sandbox/mode")", R"({"mode":{"x":1,"y":2,"x":"\ud83d"}})"), 2,
                R"(sandbox/mode carries unknown mode {"x":"\ud83d","y":2})");
}
