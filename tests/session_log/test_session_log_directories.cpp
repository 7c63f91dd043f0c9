// SessionLog::open and ::create refuse a log whose directories another user can change (the
// StrictModes check of docs/session-log.md#trust) unless SessionLogOptions::allow_shared_directories
// is set, and the attack it stops: another user renaming the host's own danger-full-access log of
// another session over this session's read-only one.
#include <dsh/session_store.hpp>

#include "support/session_log.hpp"

#include <string>

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

using dsh::SandboxMode;
using dsh::SessionLog;
using dsh::SessionLogOptions;
using namespace dsh::test;

namespace {

/// The refusal of a log at `log` whose directory `dir` (mode, owner, group) others may change in
/// the way `what` says.
std::string refusal(const std::filesystem::path& log, const std::filesystem::path& dir, std::string_view mode,
                    unsigned uid, unsigned gid, std::string_view what) {
  return log_message(log, 0,
                     "the directory " + dsh::json_string_literal(dir.native()) + " (mode " + std::string(mode) +
                         ", owner uid " + std::to_string(uid) + ", group gid " + std::to_string(gid) + ") " +
                         std::string(what) + "; refused unless SessionLogOptions::allow_shared_directories is set");
}

constexpr std::string_view no_sticky = "is writable by another user and has no sticky bit";

/// A scratch directory under /tmp that every user may traverse.
struct Base {
  TempDir dir{"/tmp"};
  Base() {
    REQUIRE(::geteuid() == 0); // the cases need directories owned by others: the suite runs as root
    REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  }
};

/// Creates a log at `path` (where the directories are trusted) with one event; returns its bytes.
std::string make_log(const std::filesystem::path& path) {
  auto log = SessionLog::create(path, {"dirs", {}, 1});
  log.append("tool/call", {{"n", 0}});
  return read_file(path);
}

/// Checks that the directory `dir` (made trusted, then given `mode`, `uid` and `gid`) makes open
/// and create refuse with `what`, leave everything as it was, and accept with the option.
void check_refused(const std::filesystem::path& dir, ::mode_t mode, std::string_view mode_text, ::uid_t uid,
                   ::gid_t gid, std::string_view what) {
  make_directory(dir, 0755);
  const auto path = dir / "s.jsonl";
  const std::string before = make_log(path);
  REQUIRE(::chown(dir.c_str(), uid, gid) == 0);
  REQUIRE(::chmod(dir.c_str(), mode) == 0);
  const std::string expected = refusal(path, dir, mode_text, uid, gid, what);

  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(path)); }).what()) == expected);
  CHECK(read_file(path) == before);
  const auto fresh = dir / "t.jsonl";
  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(SessionLog::create(fresh, {"t", {}, 2}));
                    }).what()) == refusal(fresh, dir, mode_text, uid, gid, what));
  CHECK_FALSE(std::filesystem::exists(fresh));

  auto opened = SessionLog::open(path, shared_directories);
  CHECK(opened.append("tool/call", {{"n", 1}}) == 1);
  auto created = SessionLog::create(fresh, {"t", {}, 2}, shared_directories);
  CHECK(created.append("tool/call", {{"n", 0}}) == 0);
  CHECK(SessionLog::open(fresh, shared_directories).next_seq() == 1);
}

} // namespace

TEST_CASE("a log in a world-writable directory without the sticky bit is refused unless allowed") {
  const Base base;
  check_refused(base.dir / "open", 0777, "0777", 0, 0, no_sticky);
}

TEST_CASE("a log in a world-writable directory with the sticky bit opens and is created") {
  const Base base;
  const auto dir = base.dir / "sticky";
  make_directory(dir, 01777);
  const auto path = dir / "s.jsonl";
  auto created = SessionLog::create(path, {"sticky", {}, 1});
  CHECK(created.append("tool/call", {{"n", 0}}) == 0);
  CHECK(SessionLog::open(path).next_seq() == 1);
}

TEST_CASE("a log in a directory another user owns is refused unless allowed") {
  const Base base;
  check_refused(base.dir / "theirs", 0755, "0755", 65534, 65534,
                "is owned by another user than root and the effective uid 0");
}

TEST_CASE("a log in a directory writable by a group nobody knows is refused unless allowed") {
  const Base base;
  REQUIRE(::getgrgid(4242) == nullptr);
  check_refused(base.dir / "group", 0775, "0775", 0, 4242, no_sticky);
}

TEST_CASE("a log in a directory writable by the process's own group, which holds nobody else, opens") {
  const Base base;
  REQUIRE(::getegid() == 0);
  const struct group* root_group = ::getgrgid(0);
  REQUIRE(root_group != nullptr);
  REQUIRE(root_group->gr_mem[0] == nullptr); // `getent group 0` is "root:x:0:" here
  const auto dir = base.dir / "own-group";
  make_directory(dir, 0775, 0, 0);
  const auto path = dir / "s.jsonl";
  auto created = SessionLog::create(path, {"group", {}, 1});
  CHECK(created.append("tool/call", {{"n", 0}}) == 0);
  CHECK(SessionLog::open(path).next_seq() == 1);
}

TEST_CASE("a symbolic link on the way whose target lies in a world-writable directory is refused unless allowed") {
  const Base base;
  const auto trusted = base.dir / "trusted";
  const auto open = base.dir / "open";
  make_directory(trusted, 0755);
  make_directory(open, 0755);
  make_directory(open / "logs", 0755);
  const std::string before = make_log(open / "logs" / "s.jsonl");
  make_log(open / "real.jsonl");
  REQUIRE(::chmod(open.c_str(), 0777) == 0);

  // A directory link on the way: resolving it reads `open`.
  std::filesystem::create_directory_symlink(open / "logs", trusted / "logs");
  const auto through = trusted / "logs" / "s.jsonl";
  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(through)); }).what()) ==
        refusal(through, open, "0777", 0, 0, no_sticky));
  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(SessionLog::create(trusted / "logs" / "t.jsonl", {"t", {}, 2}));
                    }).what()) == refusal(trusted / "logs" / "t.jsonl", open, "0777", 0, 0, no_sticky));
  CHECK_FALSE(std::filesystem::exists(open / "logs" / "t.jsonl"));
  CHECK(read_file(through) == before);
  CHECK(SessionLog::open(through, shared_directories).next_seq() == 1);

  // A link at the log's name, followed: its target's directory is read.
  std::filesystem::create_symlink(open / "real.jsonl", trusted / "s.jsonl");
  const auto named = trusted / "s.jsonl";
  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(SessionLog::open(named, SessionLogOptions{.follow_symlink = true}));
                    }).what()) == refusal(named, open, "0777", 0, 0, no_sticky));
  // Not followed, the link itself is what is refused.
  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(named)); }).what()) ==
        log_message(named, 0,
                    "cannot open: the name is a symbolic link, which is refused unless "
                    "SessionLogOptions::follow_symlink is set"));
  CHECK(
      SessionLog::open(named, SessionLogOptions{.follow_symlink = true, .allow_shared_directories = true}).next_seq() ==
      1);
}

TEST_CASE("a DSH session store in a world-writable directory is refused before the log is read") {
  const Base base;
  const auto root = base.dir / "store";
  make_directory(root, 0755);
  make_directory(root / "_no-cwd", 0755);
  make_directory(root / "_no-cwd" / "s1", 0755);
  const auto path = root / "_no-cwd" / "s1" / "session.jsonl";
  {
    auto log = SessionLog::create(path, {"s1", {}, 1});
    log.append("tool/call", {{"n", 0}});
  }
  const std::string before = read_file(path);
  REQUIRE(::chmod((root / "_no-cwd").c_str(), 0777) == 0);
  const dsh::DshStoredSession stored = dsh::locate_dsh_session(root, "s1");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::open_dsh_session(stored)); }).what()) ==
        refusal(path, root / "_no-cwd", "0777", 0, 0, no_sticky));
  CHECK(read_file(path) == before);
}

TEST_CASE("another user renaming the host's danger-full-access log over a read-only one is refused at the next open") {
  const Base base;
  const auto logs = base.dir / "logs";
  make_directory(logs, 0777); // a shared logs directory: every user may rename entries in it
  const auto mine = logs / "mine.jsonl";
  const auto other = logs / "other.jsonl";
  {
    auto log = SessionLog::create(mine, {"mine", {}, 1}, shared_directories);
    dsh::set_sandbox_mode(log, SandboxMode::read_only);
    auto log2 = SessionLog::create(other, {"other", {}, 2}, shared_directories);
    dsh::set_sandbox_mode(log2, SandboxMode::danger_full_access);
  }
  const std::string forged = read_file(other);
  REQUIRE(SessionLog::open(mine, shared_directories).sandbox_mode_override() == SandboxMode::read_only);

  // The other user: nothing about either file is theirs, but the directory lets them rename.
  Child attacker([&](int) {
    if (!dsh::test::become_nobody()) {
      return 2;
    }
    return ::rename(other.c_str(), mine.c_str()) == 0 ? 0 : 3;
  });
  REQUIRE(attacker.exit_code() == 0);
  REQUIRE(read_file(mine) == forged);
  struct stat status {};
  REQUIRE(::stat(mine.c_str(), &status) == 0);
  CHECK(status.st_uid == 0); // the file's own owner and mode checks would pass
  CHECK((status.st_mode & 07777) == 0644);

  CHECK(std::string(log_error_from([&] { static_cast<void>(SessionLog::open(mine)); }).what()) ==
        refusal(mine, logs, "0777", 0, 0, no_sticky));
  // The control: a host that opted in would resume this session in danger-full-access.
  CHECK(SessionLog::open(mine, shared_directories).sandbox_mode_override() == SandboxMode::danger_full_access);
}
