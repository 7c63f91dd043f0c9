// What create and append refuse, and that a refused or failed write leaves the file exactly as
// it was (a failed write is provoked for real, with RLIMIT_FSIZE, in a child process).
#include "support/session_log.hpp"

#include <csignal>

#include <sys/resource.h>

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

TEST_CASE("create refuses to overwrite an existing file") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  write_file(path, "precious\n");
  const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::create(path, {"x", {}, 1})); });
  CHECK(std::string(error.what()) == log_message(path, 0, "cannot create: the file exists"));
  CHECK(read_file(path) == "precious\n");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);

  static_cast<void>(SessionLog::create(dir / "t.jsonl", {"t", {}, 1}));
  CHECK_THROWS_AS(SessionLog::create(dir / "t.jsonl", {"t", {}, 1}), dsh::LogError);
}

TEST_CASE("create in a directory that does not exist names the log") {
  const TempDir dir;
  const auto path = dir / "missing" / "s.jsonl";
  const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::create(path, {"x", {}, 1})); });
  CHECK(std::string(error.what()) == log_message(path, 0, "cannot open: No such file or directory"));
  CHECK_FALSE(std::filesystem::exists(dir / "missing"));
}

TEST_CASE("create refuses a header that is not valid UTF-8, creating nothing") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::create(path, {"bad\xFF", {}, 1})); });
  CHECK(std::string(error.what()).starts_with(log_message(path, 0, "cannot write the session id: ")));
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("a forged sandbox/mode append throws InvariantViolation and writes nothing") {
  FreshLog fresh("s.jsonl", "forge");
  dsh::set_sandbox_mode(fresh.log, SandboxMode::workspace_write);
  const std::string before = read_file(fresh.path);

  const auto refused = [&](const nlohmann::json& data, std::string_view text) {
    try {
      fresh.log.append("sandbox/mode", data);
      FAIL("expected dsh::InvariantViolation");
    } catch (const dsh::InvariantViolation& violation) {
      CHECK(std::string(violation.what()) == text);
    }
    CHECK(read_file(fresh.path) == before);
    CHECK(fresh.log.next_seq() == 1);
    CHECK(fresh.log.sandbox_mode_override() == SandboxMode::workspace_write);
  };
  refused({{"mode", "host-root"}}, R"(sandbox/mode carries unknown mode "host-root")");
  refused({{"mode", 42}}, "sandbox/mode carries unknown mode 42");
  refused(nlohmann::json::object(), "sandbox/mode carries no mode");
  refused(nullptr, "sandbox/mode carries no mode");
  CHECK(fresh.log.append("turn/end", {{"turn", 0}}) == 1);
}

TEST_CASE("append refuses a type without '/' and data that is not UTF-8, writing nothing") {
  FreshLog fresh("s.jsonl", "types");
  const std::string before = read_file(fresh.path);

  const dsh::LogError packed = log_error_from([&] { fresh.log.append("text-chunks", {{"dt", {1}}}); });
  CHECK(std::string(packed.what()) ==
        log_message(fresh.path, 0,
                    R"(cannot append an event of type "text-chunks": an event type needs a "/" (a type without one )"
                    R"(marks a packed chunk row))"));
  CHECK_THROWS_AS(fresh.log.append("", {}), dsh::LogError);
  CHECK_THROWS_AS(fresh.log.append("session", {}), dsh::LogError);

  const dsh::LogError utf8 = log_error_from([&] { fresh.log.append("user/message", {{"text", "caf\xE9"}}); });
  CHECK(std::string(utf8.what()).starts_with(log_message(fresh.path, 0, "cannot write the event data: ")));
  CHECK_THROWS_AS(fresh.log.append("bad\xFF/type", {}), dsh::LogError);

  CHECK(read_file(fresh.path) == before);
  CHECK(fresh.log.next_seq() == 0);
  CHECK(fresh.log.append("turn/start", {}) == 0);
}

TEST_CASE("a short write is rolled back to the previous length, and the next append is clean") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  {
    auto log = SessionLog::create(path, {"rollback", {}, 1});
    dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  }
  const std::string before = read_file(path);

  // The child may grow the file by only 10 bytes: its append writes 10 bytes of the line, and
  // must cut them off again and throw.
  Child child([&](int report) {
    auto log = SessionLog::open(path);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{static_cast<rlim_t>(before.size() + 10), RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
      return 2;
    }
    try {
      dsh::set_sandbox_mode(log, SandboxMode::danger_full_access);
    } catch (const dsh::LogError& error) {
      write_all(report, error.what());
      return log.sandbox_mode_override() == SandboxMode::workspace_write && log.next_seq() == 1 ? 0 : 3;
    }
    return 4;
  });
  const std::string message = child.read_all();
  REQUIRE(child.exit_code() == 0);
  const std::string line_size = std::to_string(
      std::string(R"({"type":"sandbox/mode","seq":1,"time":1764480000000,"data":{"mode":"danger-full-access"}})")
          .size() +
      1);
  CHECK(message == log_message(path, 0,
                               "cannot write: only 10 of " + line_size +
                                   " bytes were written; the file was rolled "
                                   "back to " +
                                   std::to_string(before.size()) + " bytes"));
  CHECK(read_file(path) == before);

  auto log = SessionLog::open(path);
  CHECK_FALSE(log.tail_repair());
  dsh::set_sandbox_mode(log, SandboxMode::read_only);
  const auto reopened = SessionLog::open(path);
  CHECK(reopened.events().size() == 2);
  CHECK(reopened.sandbox_mode_override() == SandboxMode::read_only);
}

TEST_CASE("envelope members are written after data; a bad envelope writes nothing") {
  FreshLog fresh("s.jsonl", "envelope");
  const std::string header = read_file(fresh.path);

  CHECK(fresh.log.append("user/message", {{"role", "user"}}, {{"surfaceOp", "append"}}) == 0);
  const std::string line = read_file(fresh.path).substr(header.size());
  const auto parsed = nlohmann::json::parse(line);
  CHECK(line.starts_with(R"({"type":"user/message","seq":0,"time":)"));
  CHECK(line.ends_with(R"(,"data":{"role":"user"},"surfaceOp":"append"})"
                       "\n"));
  CHECK(parsed.size() == 5);

  const std::string before = read_file(fresh.path);
  CHECK_THROWS_AS(fresh.log.append("user/message", {{"role", "user"}}, {{"seq", 9}}), dsh::ConfigError);
  CHECK_THROWS_AS(fresh.log.append("user/message", {{"role", "user"}}, nlohmann::json::array()), dsh::ConfigError);
  // What is stored is refused when it is not UTF-8: envelope keys as well as values.
  const dsh::LogError key = log_error_from([&] { fresh.log.append("user/message", {}, {{"caf\xE9", 1}}); });
  CHECK(std::string(key.what()).starts_with(log_message(fresh.path, 0, "cannot write the event envelope: ")));
  const dsh::LogError value = log_error_from([&] { fresh.log.append("user/message", {}, {{"note", "caf\xE9"}}); });
  CHECK(std::string(value.what()).starts_with(log_message(fresh.path, 0, "cannot write the event envelope: ")));
  CHECK(read_file(fresh.path) == before);
  CHECK(fresh.log.next_seq() == 1);
}
