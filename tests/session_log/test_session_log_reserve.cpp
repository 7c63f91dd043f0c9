// The reserve a SessionLog keeps preallocated past the end of its file (SESSION_LOG_RESERVE_BYTES,
// fallocate with FALLOC_FL_KEEP_SIZE): a switch to a stricter mode can still be written after a
// call filled the filesystem, while ordinary appends fail cleanly instead of eating the reserve.
// Filled for real: a 512 KiB tmpfs mounted in a child's private mount namespace, in both
// encodings; and a filesystem that cannot preallocate (ramfs), where the log says it holds none.
#include <dsh/session_log.hpp>

#include "support/session_log.hpp"
#include "support/zstd_cli.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using dsh::DshLogEncoding;
using dsh::SandboxMode;
using dsh::SESSION_LOG_RESERVE_BYTES;
using dsh::SessionLog;
using dsh::SessionLogOptions;
using namespace dsh::test;

namespace {

/// Returns `stat` of `path`; fails the test if it cannot be read.
struct stat status_of(const std::filesystem::path& path) {
  struct stat status {};
  REQUIRE(::stat(path.c_str(), &status) == 0);
  return status;
}

/// Returns `value` rounded up to a multiple of `unit`.
std::uint64_t round_up(std::uint64_t value, std::uint64_t unit) { return (value + unit - 1) / unit * unit; }

/// Text that compresses badly (so that a Zstandard frame of it is about as long as it): `size`
/// characters drawn by a fixed linear congruential generator from 64 letters.
std::string incompressible(std::size_t size) {
  constexpr std::string_view letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string text(size, '\0');
  std::uint64_t state = 88172645463325252ULL;
  for (char& c : text) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    c = letters[static_cast<std::size_t>(state >> 58U)];
  }
  return text;
}

/// Switches `log` to `mode` through `set_sandbox_mode`; returns the seq of the switch.
std::uint64_t switch_to(SessionLog& log, SandboxMode mode) {
  dsh::set_sandbox_mode(log, mode);
  return log.next_seq() - 1;
}

/// How many switches the full-filesystem test writes once the filesystem is full: more than the
/// slack of the reserve's last page could hold, so they must go into the reserve itself.
constexpr int switches_on_full = 100;

/// What the child of the full-filesystem test observed (see `fill_and_switch`).
struct FullFilesystem {
  std::vector<std::uint64_t> sizes; ///< The file's size after the first ordinary append, then after each switch.
  std::string facts;                ///< The rest, one fact per line, compared whole.
};

/// In a child with a private mount namespace: mounts a 512 KiB tmpfs at `mount_point`, creates a
/// log there in `encoding`, fills the filesystem, and tries an ordinary append and switches;
/// copies the log to `copy` (outside the tmpfs) at the end. Reports through `out`: the sizes of
/// `FullFilesystem::sizes` on one line, then one line per fact.
int fill_and_switch(int out, const std::filesystem::path& mount_point, DshLogEncoding encoding,
                    const std::filesystem::path& copy) {
  if (!dsh::test::enter_private_mount_namespace() ||
      ::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=512k,mode=0700") != 0) {
    return 2;
  }
  const auto path = mount_point / (encoding == DshLogEncoding::zstd ? "session.jsonl.zstd" : "session.jsonl");
  std::ostringstream facts;
  auto log = SessionLog::create(path, {"full", {}, 1}, SessionLogOptions{.encoding = encoding});
  log.append("tool/call", {{"n", 0}});
  std::string sizes = std::to_string(read_file(path).size());
  facts << "reserved " << log.reserved_bytes() << "\n";

  const int filler = ::open((mount_point / "filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  const std::string block(4096, 'f');
  int error = 0;
  while (error == 0) {
    const ssize_t written = ::write(filler, block.data(), block.size());
    error = written == static_cast<ssize_t>(block.size()) ? 0 : (written < 0 ? errno : ENOSPC);
  }
  ::close(filler);
  facts << "filled: " << std::generic_category().message(error) << "\n";

  const std::string before = read_file(path);
  try {
    log.append("tool/output", {{"text", incompressible(20000)}});
    facts << "the ordinary append was written\n";
  } catch (const dsh::LogError& refused) {
    facts << "refused: " << refused.what() << "\n";
    facts << "code: " << (refused.code() == std::errc::no_space_on_device ? "ENOSPC" : refused.code().message())
          << "\n";
  }
  facts << (read_file(path) == before ? "unchanged" : "changed") << ", size "
        << (static_cast<std::uint64_t>(status_of(path).st_size) == before.size() ? "unchanged" : "changed") << "\n";
  int written = 0;
  try {
    for (; written < switches_on_full; ++written) {
      switch_to(log, written % 2 == 0 ? SandboxMode::workspace_write : SandboxMode::read_only);
      sizes += " " + std::to_string(read_file(path).size());
    }
  } catch (const dsh::LogError& refused) {
    facts << "switch refused: " << refused.what() << "\n";
  }
  facts << "switches written: " << written << ", the last at seq " << log.next_seq() - 1 << "\n";
  facts << "reserved after the switches " << log.reserved_bytes() << "\n";

  auto reopened = SessionLog::open(path);
  facts << "reopened: " << dsh::to_string(reopened.sandbox_mode_override().value()) << ", next seq "
        << reopened.next_seq() << "\n";
  facts << "second switch at seq " << switch_to(reopened, SandboxMode::workspace_write) << "\n";
  facts << "third switch at seq " << switch_to(reopened, SandboxMode::read_only) << "\n";
  facts << "reopened again: " << dsh::to_string(SessionLog::open(path).sandbox_mode_override().value()) << "\n";
  facts << "logical size: "
        << (static_cast<std::uint64_t>(status_of(path).st_size) == read_file(path).size() ? "yes" : "no") << "\n";
  write_file(copy, read_file(path));
  write_all(out, sizes + "\n" + facts.str());
  return 0;
}

/// Runs `fill_and_switch` in a child and returns what it observed.
FullFilesystem fill_and_switch_in_child(DshLogEncoding encoding, const TempDir& dir) {
  const auto mount_point = dir / "fs";
  std::filesystem::create_directory(mount_point);
  Child child([&](int out) { return fill_and_switch(out, mount_point, encoding, dir / "copy"); });
  const std::string report = child.read_all();
  REQUIRE(child.exit_code() == 0);
  FullFilesystem observed;
  std::istringstream sizes(report.substr(0, report.find('\n')));
  for (std::uint64_t size = 0; sizes >> size;) {
    observed.sizes.push_back(size);
  }
  observed.facts = report.substr(report.find('\n') + 1);
  return observed;
}

/// The facts `fill_and_switch` must report for a log at `path` whose sizes are in `observed`.
std::string expected_facts(const std::filesystem::path& path, const FullFilesystem& observed) {
  // The switches wrote into the reserve. Renewing it after one succeeds while the new end plus
  // the reserve still falls within the pages preallocated before the filesystem was full, and
  // fails from then on: what is left is the last renewed range's end minus the end of the file.
  REQUIRE(observed.sizes.size() == switches_on_full + 1);
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t allocated_end = round_up(observed.sizes.front() + SESSION_LOG_RESERVE_BYTES, page);
  std::uint64_t renewed_end = 0;
  for (const std::uint64_t size : observed.sizes) {
    if (size + SESSION_LOG_RESERVE_BYTES <= allocated_end) {
      renewed_end = size + SESSION_LOG_RESERVE_BYTES;
    }
  }
  const std::uint64_t reserved_after_switches = renewed_end - observed.sizes.back();
  return "reserved 65536\n"
         "filled: No space left on device\n"
         "refused: " +
         log_message(path, 0,
                     "cannot append: no room could be preallocated for the event and the 65536 bytes kept past it for "
                     "a sandbox/mode switch: No space left on device; nothing was written") +
         "\n"
         "code: ENOSPC\n"
         "unchanged, size unchanged\n"
         "switches written: 100, the last at seq 100\n"
         "reserved after the switches " +
         std::to_string(reserved_after_switches) +
         "\n"
         "reopened: read-only, next seq 101\n"
         "second switch at seq 101\n"
         "third switch at seq 102\n"
         "reopened again: read-only\n"
         "logical size: yes\n";
}

} // namespace

TEST_CASE("a log keeps 64 KiB preallocated past its end, and the size stat reports stays the logical one") {
  const TempDir dir;
  for (const DshLogEncoding encoding : {DshLogEncoding::plain, DshLogEncoding::zstd}) {
    CAPTURE(static_cast<int>(encoding));
    const auto path = dir / (encoding == DshLogEncoding::zstd ? "s.jsonl.zstd" : "s.jsonl");
    auto log = SessionLog::create(path, {"reserve", {}, 1}, SessionLogOptions{.encoding = encoding});
    const auto check_reserved = [&](const SessionLog& at) {
      CHECK(at.reserved_bytes() == SESSION_LOG_RESERVE_BYTES);
      const struct stat status = status_of(path);
      CHECK(static_cast<std::uint64_t>(status.st_size) == read_file(path).size());
      // Whole blocks hold the bytes, and the reserve lies beyond them.
      const auto block = static_cast<std::uint64_t>(status.st_blksize);
      CHECK(static_cast<std::uint64_t>(status.st_blocks) * 512 >=
            round_up(static_cast<std::uint64_t>(status.st_size), block) + SESSION_LOG_RESERVE_BYTES);
    };
    check_reserved(log);
    log.append("tool/call", {{"n", 0}});
    check_reserved(log);
    dsh::set_sandbox_mode(log, SandboxMode::read_only);
    check_reserved(log);
    const auto reopened = SessionLog::open(path);
    check_reserved(reopened);
    if (encoding == DshLogEncoding::zstd) {
      const std::string header = dsh::test::header_line("reserve", 1);
      const std::optional<std::string> text = dsh::test::zstd_cli_decompress(path);
      REQUIRE(text);
      CHECK(text->starts_with(header));
      CHECK(std::count(text->begin(), text->end(), '\n') == 3);
    }
  }
}

TEST_CASE("a log copied without its reserve gets it back when it is opened, and after a torn tail is cut") {
  const TempDir dir;
  const auto path = dsh::test::copy_fixture(dir, "basic.jsonl");
  const std::string bytes = read_file(path);
  const auto reopened = SessionLog::open(path);
  CHECK(reopened.reserved_bytes() == SESSION_LOG_RESERVE_BYTES);
  CHECK(static_cast<std::uint64_t>(status_of(path).st_blocks) * 512 >= bytes.size() + SESSION_LOG_RESERVE_BYTES);
  CHECK(read_file(path) == bytes); // the reserve is room, not content

  const auto torn = dir / "torn.jsonl";
  write_file(torn, bytes + R"({"type":"tool/call","seq":8,"ti)");
  const auto repaired = SessionLog::open(torn);
  REQUIRE(repaired.tail_repair());
  CHECK(repaired.reserved_bytes() == SESSION_LOG_RESERVE_BYTES);
  CHECK(static_cast<std::uint64_t>(status_of(torn).st_blocks) * 512 >= bytes.size() + SESSION_LOG_RESERVE_BYTES);
  CHECK(read_file(torn) == bytes);
}

TEST_CASE("on a full filesystem a switch is still written into the reserve, and an ordinary append fails cleanly") {
  REQUIRE(::geteuid() == 0); // mounting in a private mount namespace: the suite runs as root
  SECTION("plain JSON lines") {
    const TempDir dir;
    const FullFilesystem observed = fill_and_switch_in_child(DshLogEncoding::plain, dir);
    CHECK(observed.facts == expected_facts(dir / "fs" / "session.jsonl", observed));
    const SessionLog copy = SessionLog::open(dir / "copy");
    CHECK(copy.sandbox_mode_override() == SandboxMode::read_only);
    CHECK(copy.events().size() == 103); // one event, then 100 switches on the full filesystem and two after reopening
  }
  SECTION("Zstandard frames") {
    const TempDir dir;
    const FullFilesystem observed = fill_and_switch_in_child(DshLogEncoding::zstd, dir);
    CHECK(observed.facts == expected_facts(dir / "fs" / "session.jsonl.zstd", observed));
    const std::optional<std::string> text = dsh::test::zstd_cli_decompress(dir / "copy");
    REQUIRE(text);
    CHECK(std::count(text->begin(), text->end(), '\n') == 104); // the header, one event, 102 switches
    CHECK(text->ends_with(R"("data":{"mode":"read-only"}})"
                          "\n"));
  }
}

TEST_CASE("on a filesystem that cannot preallocate the log holds no reserve, says so, and still appends") {
  REQUIRE(::geteuid() == 0);
  const TempDir dir;
  const auto mount_point = dir / "ramfs";
  std::filesystem::create_directory(mount_point);
  Child child([&](int out) {
    if (!dsh::test::enter_private_mount_namespace() ||
        ::mount("ramfs", mount_point.c_str(), "ramfs", 0, "mode=0700") != 0) {
      return 2;
    }
    const auto path = mount_point / "s.jsonl";
    std::ostringstream facts;
    auto log = SessionLog::create(path, {"ramfs", {}, 1});
    facts << "created, reserved " << log.reserved_bytes() << "\n";
    facts << "append at seq " << log.append("tool/call", {{"n", 0}}) << ", reserved " << log.reserved_bytes() << "\n";
    facts << "switch at seq " << switch_to(log, SandboxMode::read_only) << ", reserved " << log.reserved_bytes()
          << "\n";
    const auto reopened = SessionLog::open(path);
    facts << "reopened: " << dsh::to_string(reopened.sandbox_mode_override().value()) << ", reserved "
          << reopened.reserved_bytes() << "\n";
    write_all(out, facts.str());
    return 0;
  });
  const std::string facts = child.read_all();
  CHECK(child.exit_code() == 0);
  CHECK(facts == "created, reserved 0\n"
                 "append at seq 0, reserved 0\n"
                 "switch at seq 1, reserved 0\n"
                 "reopened: read-only, reserved 0\n");
}
