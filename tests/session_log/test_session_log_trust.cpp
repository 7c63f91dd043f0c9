// What SessionLog refuses to trust unless the caller opts in (a symbolic link at the log's name,
// a log another user owns, a log others may write), bounded waits for a lock another process
// holds forever, and create when another process swaps the name right after the link.
#include "support/session_log.hpp"

#include <chrono>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

using namespace dsh;
using namespace dsh::test;

namespace {

/// Creates a log at `path` with two events; returns its bytes.
std::string make_log(const std::filesystem::path& path) {
  auto log = SessionLog::create(path, {"trust", {}, 1});
  log.append("tool/call", {{"n", 0}});
  log.append("tool/call", {{"n", 1}});
  return read_file(path);
}

/// A child that takes the file lock of the log at `path` through a description of its own,
/// writes "L" once it holds it, and holds it until the test kills it (exit code 2 when it cannot).
Child hold_lock_forever(const std::filesystem::path& path) {
  return Child([path](int report) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
      return 2;
    }
    write_all(report, "L");
    for (;;) {
      ::pause(); // until the test kills it
    }
  });
}

/// The number of entries in `directory`.
std::ptrdiff_t entries(const std::filesystem::path& directory) {
  return std::distance(std::filesystem::directory_iterator(directory), std::filesystem::directory_iterator());
}

} // namespace

TEST_CASE("a symbolic link at the log's name is refused unless follow_symlink is set") {
  const TempDir dir;
  const auto real = dir / "real.jsonl";
  const auto link = dir / "link.jsonl";
  const std::string before = make_log(real);
  std::filesystem::create_symlink(real, link);

  const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::open(link)); });
  CHECK(std::string(error.what()) == log_message(link, 0,
                                                 "cannot open: the name is a symbolic link, which is refused unless "
                                                 "SessionLogOptions::follow_symlink is set"));
  CHECK(read_file(real) == before);

  auto log = SessionLog::open(link, SessionLogOptions{.follow_symlink = true});
  CHECK(log.next_seq() == 2);
  CHECK(log.append("tool/call", {{"n", 2}}) == 2);
  CHECK(SessionLog::open(real).next_seq() == 3);
}

TEST_CASE("a log owned by another user is refused unless allow_foreign_owner is set") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string before = make_log(path);
  REQUIRE(::geteuid() == 0); // chown to another uid needs root; the suite runs as root
  REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);

  const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::open(path)); });
  CHECK(std::string(error.what()) ==
        log_message(path, 0,
                    "owned by uid 65534, not by the effective uid 0 of this process; refused unless "
                    "SessionLogOptions::allow_foreign_owner is set"));
  CHECK(read_file(path) == before);

  auto log = SessionLog::open(path, SessionLogOptions{.allow_foreign_owner = true});
  CHECK(log.append("tool/call", {{"n", 2}}) == 2);
}

TEST_CASE("a log its group or other users may write is refused unless allow_shared_write is set") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string before = make_log(path);
  for (const auto& [mode, text] : {std::pair<mode_t, const char*>{0664, "0664"}, {0646, "0646"}, {0622, "0622"}}) {
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::open(path)); });
    CHECK(std::string(error.what()) ==
          log_message(path, 0,
                      std::string("writable by its group or by other users (mode ") + text +
                          "); refused unless SessionLogOptions::allow_shared_write is set"));
    CHECK(read_file(path) == before);
  }
  auto log = SessionLog::open(path, SessionLogOptions{.allow_shared_write = true});
  CHECK(log.next_seq() == 2);
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  CHECK(SessionLog::open(path).next_seq() == 2);
}

TEST_CASE("a negative lock timeout is a ConfigError") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  make_log(path);
  const SessionLogOptions options{.lock_timeout = std::chrono::milliseconds(-1)};
  try {
    static_cast<void>(SessionLog::open(path, options));
    FAIL("expected dsh::ConfigError");
  } catch (const dsh::ConfigError& error) {
    CHECK(std::string(error.what()) ==
          "session log options: lock_timeout: expected a duration of 0 ms or more; found -1 ms");
  }
  CHECK_THROWS_AS(SessionLog::create(dir / "t.jsonl", {"t", {}, 1}, options), dsh::ConfigError);
  CHECK_FALSE(std::filesystem::exists(dir / "t.jsonl"));
}

TEST_CASE("a process holding the file lock forever makes open, append and refresh fail after the timeout") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string before = make_log(path);
  const SessionLogOptions options{.lock_timeout = std::chrono::milliseconds(100)};
  auto opened = SessionLog::open(path, options);

  Child holder = hold_lock_forever(path);
  char locked = 0;
  REQUIRE(holder.read_exactly(&locked, 1));

  const std::string expected = log_message(
      path, 0, "cannot lock: another open file description held the lock for the whole lock timeout (100 ms)");
  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(path, options)); }).what()) == expected);
  CHECK(std::string(log_error_from([&] { opened.append("tool/call", {{"n", 2}}); }).what()) == expected);
  CHECK(std::string(log_error_from([&] { opened.refresh(); }).what()) == expected);
  const SessionLogOptions once{.lock_timeout = std::chrono::milliseconds(0)};
  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(path, once)); }).what()) ==
        log_message(path, 0,
                    "cannot lock: another open file description held the lock for the whole lock timeout (0 ms)"));
  CHECK(read_file(path) == before);

  ::kill(holder.pid(), SIGKILL);
  static_cast<void>(holder.wait());
  CHECK(opened.append("tool/call", {{"n", 2}}) == 2);
}

namespace {

/// What the create hook below does, and with which paths.
std::filesystem::path swap_from; // NOLINT(cert-err58-cpp): test-only state of the hook
std::filesystem::path swap_to;   // NOLINT(cert-err58-cpp)

/// Plays the other process: renames `swap_from` to `swap_to` right after create's link.
void swap_after_link(const std::filesystem::path& /*path*/) { std::filesystem::rename(swap_from, swap_to); }

/// Installs the create hook for one scope.
class HookInstalled {
public:
  HookInstalled(std::filesystem::path from, std::filesystem::path to) {
    swap_from = std::move(from);
    swap_to = std::move(to);
    dsh::detail::slog::after_link_hook = &swap_after_link;
  }
  HookInstalled(const HookInstalled&) = delete;
  HookInstalled& operator=(const HookInstalled&) = delete;
  ~HookInstalled() { dsh::detail::slog::after_link_hook = nullptr; }
};

} // namespace

TEST_CASE("create fails cleanly when another process replaces the name right after the link") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const auto impostor = dir / "impostor";
  const std::string planted = dsh::test::header_line("planted", 7);
  write_file(impostor, planted);
  {
    const HookInstalled hook(impostor, path);
    const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::create(path, {"mine", {}, 1})); });
    CHECK(std::string(error.what()) ==
          log_message(path, 0,
                      "cannot create: once linked, the name did not lead to the new file (another process "
                      "replaced or moved it); nothing was created"));
  }
  CHECK(read_file(path) == planted); // the replacement is left alone
  CHECK(entries(dir.path()) == 1);   // no staging file, no second name
  auto log = SessionLog::open(path);
  CHECK(log.header().id == "planted");
}

TEST_CASE("create removes its log when its directory is renamed right after the link") {
  const TempDir dir;
  const auto sub = dir / "sub";
  std::filesystem::create_directory(sub);
  const auto path = sub / "s.jsonl";
  {
    const HookInstalled hook(sub, dir / "moved");
    const dsh::LogError error = log_error_from([&] { static_cast<void>(SessionLog::create(path, {"mine", {}, 1})); });
    CHECK(std::string(error.what()) ==
          log_message(path, 0,
                      "cannot create: once linked, the name did not lead to the new file (another process "
                      "replaced or moved it); nothing was created"));
  }
  CHECK_FALSE(std::filesystem::exists(sub));
  CHECK(std::filesystem::is_empty(dir / "moved")); // the log it linked there is gone again
}

TEST_CASE("create keeps the lock timeout for the log it returns") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  auto log = SessionLog::create(path, {"c", {}, 1}, SessionLogOptions{.lock_timeout = std::chrono::milliseconds(50)});
  CHECK(log.header_json() == nlohmann::json::parse(R"({"type":"session","version":0,"id":"c","createdAt":1,)"
                                                   R"("delegationDepth":0})"));
  Child holder = hold_lock_forever(path);
  char locked = 0;
  REQUIRE(holder.read_exactly(&locked, 1));
  CHECK(std::string(log_error_from([&] { log.append("tool/call", {}); }).what()) ==
        log_message(path, 0,
                    "cannot lock: another open file description held the lock for the whole lock timeout (50 ms)"));
  CHECK(read_file(path) == dsh::test::header_line("c", 1));
}
