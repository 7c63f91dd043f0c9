// Every kind of bad input is refused with a LogError that names the file, the line and what
// is wrong, and the file is left byte-for-byte as it was.
#include "support/session_log.hpp"

#include <sys/stat.h>

using dsh::SessionLog;
using namespace dsh::test;

namespace {

const std::string HEADER = header_line("bad", 1764480000000, R"("/srv/bad")");

std::string mode_event(int seq, std::string_view mode_json) {
  return R"({"type":"sandbox/mode","seq":)" + std::to_string(seq) + R"(,"time":1764480000001,"data":{"mode":)" +
         std::string(mode_json) + "}}\n";
}

std::string turn_end(int seq) {
  return R"({"type":"turn/end","seq":)" + std::to_string(seq) + R"(,"time":1764480000002,"data":{"turn":0}})" + "\n";
}

/// Writes `content` to a fresh log, opens it, and checks the error and the unchanged bytes.
void check_refused(std::string_view content, std::size_t line, std::string_view what) {
  const TempDir dir;
  const auto path = dir / "session.jsonl";
  write_file(path, content);
  const dsh::LogError error = open_error(path);
  CHECK(error.line() == line);
  CHECK(error.path() == path);
  CHECK(std::string(error.what()) == log_message(path, line, what));
  CHECK(read_file(path) == content);
}

} // namespace

TEST_CASE("a missing file is a LogError and is not created") {
  const TempDir dir;
  const auto path = dir / "missing.jsonl";
  const dsh::LogError error = open_error(path);
  CHECK(error.line() == 0);
  CHECK(std::string(error.what()) == "session log \"" + path.string() + "\": cannot open: No such file or directory");
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a directory is a LogError and stays an empty directory") {
  const TempDir dir;
  const auto path = dir / "logdir";
  std::filesystem::create_directory(path);
  CHECK(std::string(open_error(path).what()) == log_message(path, 0, "cannot open: Is a directory"));
  CHECK(std::filesystem::is_directory(path));
  CHECK(std::filesystem::is_empty(path));
}

TEST_CASE("a FIFO is refused as not a regular file") {
  const TempDir dir;
  const auto path = dir / "fifo";
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  CHECK(std::string(open_error(path).what()) == log_message(path, 0, "not a regular file"));
  CHECK(std::filesystem::is_fifo(path));
}

TEST_CASE("an empty file is refused") { check_refused("", 0, "the file is empty; line 1 must be a session header"); }

TEST_CASE("a header of another version is refused") {
  check_refused(R"({"type":"session","version":1,"id":"v1","createdAt":1764480000000})"
                "\n" +
                    turn_end(0),
                1, R"(session header "version": expected 0 (the only version this library reads); found 1)");
  check_refused(R"({"type":"session","version":"0","id":"v1","createdAt":1764480000000})"
                "\n",
                1, R"(session header "version": expected 0 (the only version this library reads); found "0")");
  check_refused(R"({"type":"session","version":0.0,"id":"v1","createdAt":1764480000000})"
                "\n",
                // The value is shown as DSH's JavaScript reads and writes it: 0.0 is the number 0,
                // but a version written with a fraction is not the integer this library reads.
                1, R"(session header "version": expected 0 (the only version this library reads); found 0)");
  check_refused(R"({"type":"session","id":"v1","createdAt":1764480000000})"
                "\n",
                1, R"(session header "version": expected 0 (the only version this library reads); found nothing)");
}

TEST_CASE("a first line that is not a session header is refused") {
  check_refused("# not a header\n" + turn_end(0), 1, "not valid JSON at column 1: expected a value");
  check_refused("nothing\n" + turn_end(0), 1, "not valid JSON at column 1: invalid literal");
  check_refused(turn_end(0), 1, R"(session header "type": expected "session"; found "turn/end")");
  check_refused(R"(["session",0])"
                "\n",
                1, "expected a JSON object, found an array");
  check_refused(R"({"type":"session","version":0,"createdAt":1})"
                "\n",
                1, R"(session header "id": expected a string; found nothing)");
  check_refused(R"({"type":"session","version":0,"id":"x","createdAt":"yesterday"})"
                "\n",
                1, R"(session header "createdAt": expected an integer (epoch milliseconds); found "yesterday")");
  check_refused(R"({"type":"session","version":0,"id":"x","createdAt":1,"cwd":null})"
                "\n",
                1, R"(session header "cwd": expected a string, or no "cwd" at all; found null)");
}

TEST_CASE("a torn header (no final newline) is refused, not cut") {
  check_refused(R"({"type":"session","version":0,"id":"to)", 1,
                "the session header has no final newline (a torn header is not repaired)");
}

TEST_CASE("a log that is not UTF-8 is refused") {
  // "café" in Latin-1: 0xE9 followed by '"' is not a UTF-8 sequence.
  const std::string row = R"({"type":"user/message","seq":0,"data":{"text":"caf)"
                          "\xE9"
                          R"("}})"
                          "\n";
  check_refused(HEADER + row + turn_end(1), 2, "not valid UTF-8 at column 51");
  // An overlong encoding of '/' and a UTF-16 surrogate encoded in UTF-8 are not UTF-8 either.
  check_refused(HEADER + R"({"type":"x/y","seq":0,"data":")"
                         "\xC0\xAF"
                         R"("})"
                         "\n",
                2, "not valid UTF-8 at column 31");
  check_refused(HEADER + R"({"type":"x/y","seq":0,"data":")"
                         "\xED\xA0\x80"
                         R"("})"
                         "\n",
                2, "not valid UTF-8 at column 31");
}

TEST_CASE("an event that is an array, or a scalar, is refused") {
  check_refused(HEADER + R"([{"type":"turn/end","seq":0}])"
                         "\n",
                2, "expected a JSON object, found an array");
  check_refused(HEADER + "42\n", 2, "expected a JSON object, found a scalar");
}

TEST_CASE("a seq gap, a repeated seq and a missing seq are refused") {
  check_refused(HEADER + turn_end(0) + turn_end(2), 3, "seq 2 where 1 was expected");
  check_refused(HEADER + turn_end(0) + turn_end(0), 3, "seq 0 where 1 was expected");
  check_refused(HEADER + turn_end(1), 2, "seq 1 where 0 was expected");
  check_refused(HEADER + R"({"type":"turn/end","time":1,"data":{}})"
                         "\n",
                2, R"(expected a non-negative integer "seq")");
  check_refused(HEADER + R"({"type":"turn/end","seq":-1})"
                         "\n",
                2, R"(expected a non-negative integer "seq")");
  check_refused(HEADER + R"({"type":"turn/end","seq":0.0})"
                         "\n",
                2, R"(expected a non-negative integer "seq")");
  check_refused(HEADER + R"({"type":"turn/end","seq":18446744073709551616})"
                         "\n",
                2, R"(expected a non-negative integer "seq")");
  check_refused(HEADER + R"({"seq":0,"data":{}})"
                         "\n",
                2, R"(expected a string "type")");
}

TEST_CASE("a packed chunk row with a wrong seq0 or without data.dt is refused") {
  check_refused(HEADER + turn_end(0) + R"({"type":"text-chunks","seq0":2,"data":{"dt":[1]}})" + "\n", 3,
                "seq0 2 where 1 was expected");
  check_refused(HEADER + R"({"type":"text-chunks","seq0":0,"data":{"texts":["a"]}})" + "\n", 2,
                R"(a packed chunk row needs an array "data"."dt")");
  check_refused(HEADER + R"({"type":"text-chunks","seq":0,"data":{"dt":[]}})" + "\n", 2,
                R"(a row whose type has no "/" is a packed chunk row and needs a non-negative integer "seq0")");
  // The seqs a packed row covers are taken: the next event must come after them.
  check_refused(HEADER + R"({"type":"text-chunks","seq0":0,"data":{"dt":[1,1]}})" + "\n" + turn_end(2), 3,
                "seq 2 where 3 was expected");
}

TEST_CASE("a forged sandbox/mode event in the middle is refused with the invariant's text") {
  check_refused(HEADER + mode_event(0, R"("workspace-write")") + turn_end(1) + mode_event(2, "42") + turn_end(3), 4,
                "sandbox/mode carries unknown mode 42");
  check_refused(HEADER + turn_end(0) + mode_event(1, "null") + turn_end(2), 3,
                "sandbox/mode carries unknown mode null");
  check_refused(HEADER + mode_event(0, R"("Read-Only")") + turn_end(1), 2,
                R"(sandbox/mode carries unknown mode "Read-Only")");
  check_refused(HEADER + R"({"type":"sandbox/mode","seq":0,"data":{}})" + "\n" + turn_end(1), 2,
                "sandbox/mode carries no mode");
  // An escaped type is still the sandbox/mode type: escapes cannot smuggle a forged mode past.
  check_refused(HEADER + R"({"type":"sandbox\/mode","seq":0,"data":{"mode":"host-root"}})" + "\n", 2,
                R"(sandbox/mode carries unknown mode "host-root")");
  check_refused(HEADER + R"({"type":"sandbox\u002fmode","seq":0,"data":{"mode":"host-root"}})" + "\n", 2,
                R"(sandbox/mode carries unknown mode "host-root")");
}

TEST_CASE("a duplicated key that decides how a row is read is refused") {
  check_refused(HEADER + R"({"type":"turn/end","type":"sandbox/mode","seq":0,"data":{"mode":"x"}})" + "\n", 2,
                "not valid JSON at column 20: duplicate key");
  check_refused(HEADER + R"({"type":"turn/end","seq":0,"seq":1})" + "\n", 2,
                "not valid JSON at column 28: duplicate key");
  check_refused(HEADER + R"({"type":"turn/end","seq":0,"\u0074ype":"sandbox/mode"})" + "\n", 2,
                "not valid JSON at column 28: duplicate key");
}

TEST_CASE("damage that is not a torn last line is refused, wherever it is") {
  check_refused(HEADER + turn_end(0) + "\n" + turn_end(1), 3, "empty line");
  check_refused(HEADER + turn_end(0) + R"({"type":"turn/end","seq":1,)" + "\n", 3,
                "not valid JSON at column 28: expected a string key");
  check_refused(HEADER + turn_end(0) + std::string("\0\0\0\n", 4), 3, "not valid JSON at column 1: expected a value");
  check_refused(HEADER + R"({"type":"turn/end","seq":0} trailing)" + "\n", 2,
                "not valid JSON at column 29: unexpected text after the JSON value");
  // A complete last line that is damaged is damage too: only an unterminated one is torn.
  check_refused(HEADER + turn_end(0) + R"({"type":"turn/end","seq":1,"data":{"turn":)" + "\n", 3,
                "not valid JSON at column 43: expected a value");
}

TEST_CASE("nesting deeper than 512 levels is refused") {
  const std::string deep = std::string(512, '[') + std::string(512, ']');
  {
    const TempDir dir;
    const auto path = dir / "ok.jsonl";
    write_file(path,
               HEADER + R"({"type":"x/y","seq":0,"data":)" + std::string(511, '[') + std::string(511, ']') + "}\n");
    CHECK(SessionLog::open(path).events().size() == 1);
  }
  check_refused(HEADER + R"({"type":"x/y","seq":0,"data":)" + deep + "}\n", 2,
                "not valid JSON at column 541: nesting deeper than 512");
}
