// A SessionLog whose file is no longer the file at its name (unlinked, replaced by rename, moved
// away, or its directory removed) refuses to append: the event would go to a file nobody
// opening the name will read. In each case a second SessionLog then uses the name, and the seqs
// at the name stay contiguous while the orphaned file gets nothing.
#include "support/session_log.hpp"

#include <fcntl.h>

using dsh::SessionLog;
using namespace dsh::test;

namespace {

/// The message of an append to a log whose file was lost in the way `what` says.
std::string lost_message(const std::filesystem::path& path, std::string_view what) {
  return log_message(path, 0,
                     "the file this log opened is no longer the file at its name: " + std::string(what) +
                         "; nothing was written or read, and this SessionLog refuses to append until the log is "
                         "opened again");
}

/// Reads the whole file behind descriptor `fd` (which may have no name any more).
std::string read_descriptor(int fd) {
  std::string bytes;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t got = ::pread(fd, buffer, sizeof buffer, offset);
    REQUIRE(got >= 0);
    if (got == 0) {
      return bytes;
    }
    bytes.append(buffer, static_cast<std::size_t>(got));
    offset += got;
  }
}

/// An open, read-only descriptor on a file, for looking at it after its name is gone.
class Watch {
public:
  explicit Watch(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    REQUIRE(fd_ >= 0);
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  ~Watch() { ::close(fd_); }
  [[nodiscard]] std::string bytes() const { return read_descriptor(fd_); }

private:
  int fd_;
};

/// The seq of every row of the log at `path`, and the "n" of each row's data.
std::vector<std::pair<std::uint64_t, std::int64_t>> rows(const std::filesystem::path& path) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> out;
  const SessionLog log = SessionLog::open(path);
  for (const nlohmann::json& row : log.events()) {
    out.emplace_back(row.at("seq").get<std::uint64_t>(), row.at("data").at("n").get<std::int64_t>());
  }
  return out;
}

using Rows = std::vector<std::pair<std::uint64_t, std::int64_t>>;

/// Creates the log "s" at `path` with two tool calls, n 0 and n 1.
SessionLog log_with_two_calls(const std::filesystem::path& path) {
  auto log = SessionLog::create(path, {"s", {}, 1});
  log.append("tool/call", {{"n", 0}});
  log.append("tool/call", {{"n", 1}});
  return log;
}

/// The log of `log_with_two_calls` in a fresh directory, and a descriptor kept on its file to
/// read it after the file has lost its name.
struct WatchedLog {
  TempDir dir;
  std::filesystem::path path = dir / "s.jsonl";
  SessionLog first = log_with_two_calls(path);
  Watch orphan{path};
  std::string before = orphan.bytes();
};

/// The message of the LogError that appending the call n 99 to `log` throws.
std::string append_error(SessionLog& log) {
  return log_error_from([&] { log.append("tool/call", {{"n", 99}}); }).what();
}

} // namespace

TEST_CASE("an unlinked log refuses to append; a new log at the name starts its own seqs") {
  WatchedLog watched;
  REQUIRE(::unlink(watched.path.c_str()) == 0);

  CHECK(append_error(watched.first) == lost_message(watched.path, "it was unlinked"));
  CHECK(watched.orphan.bytes() == watched.before);
  CHECK(watched.first.next_seq() == 2);

  auto second = SessionLog::create(watched.path, {"s2", {}, 2});
  CHECK(second.append("tool/call", {{"n", 10}}) == 0);
  // Once lost, always refused (the message says what happened, now with a new file there).
  CHECK(append_error(watched.first) == lost_message(watched.path, "it was unlinked"));
  CHECK(std::string(log_error_from([&] { watched.first.refresh(); }).what()) ==
        lost_message(watched.path, "it was unlinked"));
  CHECK(watched.orphan.bytes() == watched.before);
  CHECK(rows(watched.path) == Rows{{0, 10}});
}

TEST_CASE("a log replaced by rename refuses to append; the log at the name keeps contiguous seqs") {
  WatchedLog watched;
  // The replacement is a byte-for-byte copy (an editor's save, say): appending to the old
  // file would give two different events seq 2.
  write_file(watched.dir / "copy", watched.before);
  std::filesystem::rename(watched.dir / "copy", watched.path);

  CHECK(append_error(watched.first) ==
        lost_message(watched.path, "it was unlinked, and another file was put at its name"));
  auto second = SessionLog::open(watched.path);
  CHECK(second.append("tool/call", {{"n", 2}}) == 2);
  CHECK(append_error(watched.first) ==
        lost_message(watched.path, "it was unlinked, and another file was put at its name"));
  CHECK(watched.orphan.bytes() == watched.before);
  CHECK(rows(watched.path) == Rows{{0, 0}, {1, 1}, {2, 2}});
}

TEST_CASE("a log still linked elsewhere but replaced at its name refuses to append") {
  FreshLog fresh("s.jsonl", "s");
  fresh.log.append("tool/call", {{"n", 0}});
  const std::string before = read_file(fresh.path);
  std::filesystem::rename(fresh.path, fresh.dir / "kept");
  CHECK(std::string(log_error_from([&] { fresh.log.refresh(); }).what()) ==
        lost_message(fresh.path, "it was moved away from its name"));

  // A different log now at the name: the fresh.log log's file still has a name, but not this one.
  auto second = SessionLog::create(fresh.path, {"s2", {}, 2});
  CHECK(second.append("tool/call", {{"n", 5}}) == 0);
  CHECK(append_error(fresh.log) == lost_message(fresh.path, "it was moved away from its name"));
  CHECK(read_file(fresh.dir / "kept") == before);
  CHECK(rows(fresh.path) == Rows{{0, 5}});
}

TEST_CASE("a log whose file another file replaced while it stays linked elsewhere says so") {
  FreshLog fresh("s.jsonl", "s");
  fresh.log.append("tool/call", {{"n", 0}});
  REQUIRE(::link(fresh.path.c_str(), (fresh.dir / "kept").c_str()) == 0);
  const std::string before = read_file(fresh.path);
  write_file(fresh.dir / "copy", before);
  std::filesystem::rename(fresh.dir / "copy", fresh.path);
  CHECK(append_error(fresh.log) == lost_message(fresh.path, "another file was put at its name"));
  CHECK(read_file(fresh.dir / "kept") == before);
  CHECK(read_file(fresh.path) == before);
}

TEST_CASE("a log whose directory was removed refuses to append; a new log there starts its own seqs") {
  const TempDir dir;
  const auto sub = dir / "sub";
  std::filesystem::create_directory(sub);
  const auto path = sub / "s.jsonl";
  auto first = SessionLog::create(path, {"s", {}, 1});
  first.append("tool/call", {{"n", 0}});
  const Watch orphan(path);
  const std::string before = orphan.bytes();
  std::filesystem::remove_all(sub);

  CHECK(append_error(first) == lost_message(path, "its directory was removed"));
  CHECK(orphan.bytes() == before);

  std::filesystem::create_directory(sub);
  auto second = SessionLog::create(path, {"s2", {}, 2});
  CHECK(second.append("tool/call", {{"n", 7}}) == 0);
  CHECK(append_error(first) == lost_message(path, "its directory was removed"));
  CHECK(orphan.bytes() == before);
  CHECK(rows(path) == Rows{{0, 7}});
}

TEST_CASE("a log that follows a symbolic link checks the file the link leads to") {
  const TempDir dir;
  const auto real = dir / "real.jsonl";
  const auto link = dir / "link.jsonl";
  static_cast<void>(SessionLog::create(real, {"s", {}, 1}));
  std::filesystem::create_symlink(real, link);
  auto log = SessionLog::open(link, dsh::SessionLogOptions{.follow_symlink = true});
  CHECK(log.append("tool/call", {{"n", 0}}) == 0);

  // Pointing the link at another log is a replacement of the file at the name.
  static_cast<void>(SessionLog::create(dir / "other.jsonl", {"o", {}, 1}));
  std::filesystem::remove(link);
  std::filesystem::create_symlink(dir / "other.jsonl", link);
  CHECK(std::string(log_error_from([&] {
                      log.append("tool/call", {{"n", 99}});
                    }).what()) == lost_message(link, "another file was put at its name"));
  CHECK(rows(real) == Rows{{0, 0}});
  CHECK(SessionLog::open(dir / "other.jsonl").next_seq() == 0);
}
