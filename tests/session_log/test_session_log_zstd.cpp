// Zstandard session logs through SessionLog (docs/session-log.md#zstandard-session-logs): logs the
// library writes and logs the zstd command-line tool writes open, validate, resume and take
// appends; the encoding comes from the file's first bytes; a torn last frame cut at every byte is
// repaired durably; corruption at every frame boundary is refused naming the frame's offset, with
// the file unchanged; two writers share one compressed log.
#include "support/catch.hpp"
#include "support/session_log.hpp"
#include "support/temp_dir.hpp"
#include "support/zstd_cli.hpp"

#include <dsh/detail/slog/zstd_frames.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using dsh::DshLogEncoding;
using dsh::LogError;
using dsh::SandboxMode;
using dsh::SessionHeader;
using dsh::SessionLog;
using dsh::SessionLogOptions;
using dsh::TailRepair;
using namespace dsh::test;

#if DSH_SANDBOX_POLICY_HAS_ZSTD

namespace {

const std::string HEADER = R"({"type":"session","version":0,"id":"z1","createdAt":1700000000000,"cwd":"/w"})";

/// One checksummed frame holding `lines`, as the library encodes a batch.
std::string frame(const std::vector<std::string_view>& lines) {
  auto encoded = dsh::detail::encode_zstd_frame(lines);
  REQUIRE(encoded.status == dsh::detail::ZstdFrameStatus::complete);
  return encoded.bytes;
}

/// Compresses `text` with the zstd command-line tool (one frame, content checksum).
std::string zstd_cli_frame(std::string_view text) { return dsh::test::zstd_cli_compress(text); }

/// Decompresses the whole file with the zstd command-line tool (which checks every checksum);
/// returns its text, or "<zstd failed>".
std::string zstd_cli_text(const std::filesystem::path& path) {
  return dsh::test::zstd_cli_decompress(path).value_or("<zstd failed>");
}

/// The rows of the log as compact JSON text, oldest first.
std::vector<std::string> rows_of(const SessionLog& log) {
  std::vector<std::string> rows;
  for (const auto& event : log.events()) {
    rows.push_back(event.dump());
  }
  return rows;
}

std::string row(std::uint64_t seq, std::string_view text = "x") {
  return R"({"type":"assistant/text","seq":)" + std::to_string(seq) + R"(,"data":{"text":")" + std::string(text) +
         R"("}})";
}

std::string mode_row(std::uint64_t seq, std::string_view mode) {
  return R"({"type":"sandbox/mode","seq":)" + std::to_string(seq) + R"(,"data":{"mode":")" + std::string(mode) +
         R"("}})";
}

/// A compressed log of a header frame and three batch frames (1, 3 and 2 rows); returns the
/// frame offsets (the header frame's first) and the file size.
struct Built {
  std::vector<std::uint64_t> offsets;
  std::uint64_t size = 0;
  std::vector<std::string> rows;
};

Built build_log(const std::filesystem::path& path) {
  Built built;
  built.rows = {row(0, "a"), mode_row(1, "workspace-write"), row(2, "b"), row(3, "c"), row(4, "d"), row(5, "e")};
  const std::vector<std::vector<std::string_view>> frames{
      {HEADER}, {built.rows[0]}, {built.rows[1], built.rows[2], built.rows[3]}, {built.rows[4], built.rows[5]}};
  std::string bytes;
  for (const auto& lines : frames) {
    built.offsets.push_back(bytes.size());
    bytes += frame(lines);
  }
  built.size = bytes.size();
  write_file(path, bytes);
  return built;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) {
    text += line + "\n";
  }
  return text;
}

/// Creates the compressed log `path` with the header every test here uses.
SessionLog create_zstd(const std::filesystem::path& path) {
  SessionLogOptions options;
  options.encoding = DshLogEncoding::zstd;
  return SessionLog::create(path, SessionHeader{"z1", "/w", 1700000000000}, options);
}

} // namespace

TEST_CASE("zstd log: create writes a header frame, each append one checksummed frame the zstd tool reads") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  SessionLog log = create_zstd(path);
  CHECK(log.encoding() == DshLogEncoding::zstd);
  const std::string header_text = dsh::test::header_line("z1", 1700000000000, R"("/w")");
  CHECK(zstd_cli_text(path) == header_text);
  const std::uint64_t header_size = std::filesystem::file_size(path);

  CHECK(log.append("assistant/text", {{"text", "one"}}) == 0);
  dsh::set_sandbox_mode(log, SandboxMode::workspace_write);
  CHECK(log.append("assistant/text", {{"text", "three"}}) == 2);
  CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);

  // Four frames: the header and one per append, each starting where the one before ended.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  dsh::detail::ZstdFrameReader reader(fd);
  std::vector<std::size_t> records;
  std::vector<std::uint64_t> offsets;
  while (reader.next()) {
    records.push_back(reader.frame().records.size());
    offsets.push_back(reader.frame().offset);
  }
  ::close(fd);
  CHECK(reader.outcome().status == dsh::detail::ZstdFrameStatus::complete);
  CHECK(records == std::vector<std::size_t>{1, 1, 1, 1});
  CHECK(offsets.front() == 0);
  CHECK(offsets[1] == header_size);

  const std::string text = zstd_cli_text(path);
  REQUIRE(text.starts_with(header_text));
  std::vector<std::string> lines;
  for (std::size_t at = header_text.size(); at < text.size();) {
    const std::size_t newline = text.find('\n', at);
    lines.push_back(text.substr(at, newline - at));
    at = newline + 1;
  }
  REQUIRE(lines.size() == 3);
  CHECK(nlohmann::json::parse(lines[0])["data"] == nlohmann::json{{"text", "one"}});
  CHECK(nlohmann::json::parse(lines[1])["data"] == nlohmann::json{{"mode", "workspace-write"}});
  CHECK(nlohmann::json::parse(lines[2])["seq"] == 2);

  const SessionLog reopened = SessionLog::open(path);
  CHECK(reopened.encoding() == DshLogEncoding::zstd);
  CHECK(reopened.header() == SessionHeader{"z1", "/w", 1700000000000});
  CHECK(rows_of(reopened) == rows_of(log));
  CHECK(reopened.sandbox_mode_override() == SandboxMode::workspace_write);
  CHECK(reopened.next_seq() == 3);
  CHECK_FALSE(reopened.tail_repair().has_value());
}

TEST_CASE("zstd log: frames written by the zstd tool open, and C++ appends after them") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  const std::vector<std::string> batch1{row(0, "a"), row(1, "b")};
  const std::vector<std::string> batch2{mode_row(2, "danger-full-access"), row(3, "c"), row(4, "d")};
  write_file(path, zstd_cli_frame(HEADER + "\n") + zstd_cli_frame(joined(batch1)) + zstd_cli_frame(joined(batch2)));
  {
    SessionLog log = SessionLog::open(path);
    CHECK(log.encoding() == DshLogEncoding::zstd);
    CHECK(log.events().size() == 5);
    CHECK(log.events()[3]["data"]["text"] == "c");
    CHECK(log.sandbox_mode_override() == SandboxMode::danger_full_access);
    dsh::set_sandbox_mode(log, SandboxMode::read_only);
    CHECK(log.append("assistant/text", {{"text", "e"}}) == 6);
  }
  const std::string text = zstd_cli_text(path);
  CHECK(text.starts_with(HEADER + "\n" + joined(batch1) + joined(batch2)));
  const SessionLog log = SessionLog::open(path);
  CHECK(log.events().size() == 7);
  CHECK(log.sandbox_mode_override() == SandboxMode::read_only);
  CHECK(log.events()[6]["data"]["text"] == "e");
  CHECK(dsh::effective_mode(log.events()) == SandboxMode::read_only);
}

TEST_CASE("zstd log: the encoding comes from the file's first bytes, not from its name") {
  const TempDir dir;
  const auto compressed_named_plain = dir / "session.jsonl";
  write_file(compressed_named_plain, frame({HEADER}) + frame({row(0)}));
  const SessionLog a = SessionLog::open(compressed_named_plain);
  CHECK(a.encoding() == DshLogEncoding::zstd);
  CHECK(a.events().size() == 1);

  const auto plain_named_compressed = dir / "session.jsonl.zstd";
  write_file(plain_named_compressed, HEADER + "\n" + row(0) + "\n");
  SessionLog b = SessionLog::open(plain_named_compressed);
  CHECK(b.encoding() == DshLogEncoding::plain);
  b.append("assistant/text", {{"text", "plain"}});
  CHECK(read_file(plain_named_compressed).starts_with(HEADER + "\n" + row(0) + "\n{\"type\":\"assistant/text\""));
}

TEST_CASE("zstd log: a last frame cut at every byte is repaired, complete rows kept, durably and readable by zstd") {
  const TempDir dir;
  const auto source = dir / "source.jsonl.zstd";
  const Built built = build_log(source);
  const std::string original = read_file(source);
  const std::uint64_t last = built.offsets.back();
  std::size_t cases = 0;
  std::size_t previous_recovered = 0;
  for (std::uint64_t cut = last + 1; cut < built.size; ++cut) {
    CAPTURE(cut);
    const auto path = dir / "torn.jsonl.zstd";
    write_file(path, std::string_view(original).substr(0, cut));
    const SessionLog log = SessionLog::open(path);
    const auto repair = log.tail_repair();
    REQUIRE(repair.has_value());
    const std::size_t kept = repair->recovered_rows;
    CHECK(kept <= 2);
    CHECK(kept >= previous_recovered); // more bytes never give fewer rows
    previous_recovered = kept;
    CHECK(*repair == TailRepair{1 + 4 + kept + 1, last, cut - last, kept});
    // Rows 0-3 from the complete frames, then the complete rows of the torn one.
    const std::vector<std::string> expected(built.rows.begin(),
                                            built.rows.begin() + static_cast<std::ptrdiff_t>(4 + kept));
    std::vector<std::string> compact;
    compact.reserve(expected.size());
    for (const auto& text : expected) {
      compact.push_back(nlohmann::json::parse(text).dump());
    }
    CHECK(rows_of(log) == compact);
    CHECK(log.next_seq() == 4 + kept);
    // Durable: the complete frames are untouched, the zstd tool reads the repaired file, and
    // opening it again finds nothing to repair.
    const std::string repaired = read_file(path);
    CHECK(repaired.substr(0, last) == original.substr(0, last));
    CHECK(zstd_cli_text(path) == HEADER + "\n" + joined(expected));
    const SessionLog again = SessionLog::open(path);
    CHECK_FALSE(again.tail_repair().has_value());
    CHECK(rows_of(again) == compact);
    ++cases;
  }
  CHECK(previous_recovered == 2); // up to the checksum, the whole batch decodes
  CHECK(cases == built.size - last - 1);
}

TEST_CASE("zstd log: corruption at every frame boundary is refused naming the frame, the file unchanged") {
  const TempDir dir;
  const auto source = dir / "source.jsonl.zstd";
  const Built built = build_log(source);
  const std::string original = read_file(source);
  const auto path = dir / "bad.jsonl.zstd";
  const auto refused = [&](const std::string& bytes, const std::string& what) {
    write_file(path, bytes);
    CHECK(std::string(open_error(path).what()) == log_message(path, 0, what));
    CHECK(read_file(path) == bytes);
  };
  std::size_t cases = 0;
  for (std::size_t i = 1; i < built.offsets.size(); ++i) {
    const std::uint64_t at = built.offsets[i];
    CAPTURE(at);
    const std::string where = std::to_string(at);
    // A damaged magic.
    std::string bytes = original;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
    refused(bytes, "corrupt Zstandard session log: invalid frame magic at byte " + where);
    ++cases;
    // A damaged checksum: the frame's last byte.
    const std::uint64_t end = i + 1 < built.offsets.size() ? built.offsets[i + 1] : built.size;
    bytes = original;
    bytes[end - 1] = static_cast<char>(bytes[end - 1] ^ 0x40);
    write_file(path, bytes);
    const std::string message = open_error(path).what();
    CHECK(message.starts_with(log_message(path, 0,
                                          "corrupt Zstandard session log: checksum mismatch in the frame "
                                          "starting at byte " +
                                              where)));
    CHECK(read_file(path) == bytes);
    ++cases;
    // A skippable frame inserted at the boundary.
    bytes = original.substr(0, at) + std::string("\x50\x2a\x4d\x18\x00\x00\x00\x00", 8) + original.substr(at);
    refused(bytes,
            "corrupt Zstandard session log: a skippable frame at byte " + where + " (DSH writes and accepts none)");
    ++cases;
  }
  // Garbage after the last complete frame.
  refused(original + "{\"type\":\"sandbox/mode\"}\n",
          "corrupt Zstandard session log: invalid frame magic at byte " + std::to_string(built.size));
  ++cases;
  // A complete frame whose text ends inside a record (no final newline).
  refused(original + zstd_cli_frame(row(6)), "corrupt Zstandard session log: the complete frame starting at byte " +
                                                 std::to_string(built.size) + " ends inside a record");
  ++cases;
  INFO("corruption cases: " << cases);
  CHECK(cases == 3 * 3 + 2);
}

TEST_CASE("zstd log: a byte flipped anywhere, or a file cut inside its header frame, never yields other rows") {
  const TempDir dir;
  const auto source = dir / "source.jsonl.zstd";
  const Built built = build_log(source);
  const std::string original = read_file(source);
  std::vector<std::string> compact;
  for (const auto& text : built.rows) {
    compact.push_back(nlohmann::json::parse(text).dump());
  }
  const auto path = dir / "flipped.jsonl.zstd";
  std::size_t refused = 0;
  std::size_t accepted = 0;
  std::vector<std::size_t> torn_at;
  for (std::size_t at = 0; at < original.size(); ++at) {
    for (const unsigned mask : {0x01U, 0x80U}) {
      CAPTURE(at, mask);
      std::string bytes = original;
      bytes[at] = static_cast<char>(static_cast<unsigned char>(bytes[at]) ^ mask);
      write_file(path, bytes);
      try {
        const SessionLog log = SessionLog::open(path);
        // Accepted: a flip the decoder ignores (the checksummed text is the same), or one
        // that makes a frame look torn: then its rows are a prefix of the original rows.
        const std::vector<std::string> rows = rows_of(log);
        REQUIRE(rows.size() <= compact.size());
        CHECK(std::equal(rows.begin(), rows.end(), compact.begin()));
        if (!log.tail_repair()) {
          CHECK(rows == compact);
        } else {
          CHECK(at >= built.offsets.back()); // only the last frame can pass for a torn one
          torn_at.push_back(at);
        }
        ++accepted;
      } catch (const LogError&) {
        CHECK(read_file(path) == bytes);
        ++refused;
      }
    }
  }
  for (std::uint64_t cut = 1; cut < built.offsets[1]; ++cut) {
    write_file(path, std::string_view(original).substr(0, cut));
    CHECK_THROWS_AS(SessionLog::open(path), LogError);
    CHECK(read_file(path) == original.substr(0, cut));
    ++refused;
  }
  std::string torn_list;
  for (const std::size_t at : torn_at) {
    torn_list += " " + std::to_string(at);
  }
  INFO("refused " << refused << ", accepted " << accepted << ", as torn at" << torn_list << "; frames at "
                  << built.offsets[1] << " " << built.offsets[2] << " " << built.offsets[3] << ", size " << built.size);
  CHECK(refused + accepted == 2 * original.size() + built.offsets[1] - 1);
  CHECK(refused > accepted);
}

TEST_CASE("zstd log: two writers share one compressed log; a crashed writer's torn frame is repaired on refresh") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  SessionLog first = create_zstd(path);
  SessionLog second = SessionLog::open(path);
  CHECK(first.append("assistant/text", {{"text", "from first"}}) == 0);
  CHECK(second.append("assistant/text", {{"text", "from second"}}) == 1); // caught up first
  first.refresh();
  REQUIRE(first.events().size() == 2);
  CHECK(first.events()[1]["data"]["text"] == "from second");
  CHECK(second.events()[0]["data"]["text"] == "from first");

  // A writer that crashed in the middle of its frame: two complete rows and part of a third.
  const std::string batch = frame({row(2, "kept"), mode_row(3, "danger-full-access"), row(4, "lost")});
  const std::uint64_t before = std::filesystem::file_size(path);
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    REQUIRE(fd >= 0);
    dsh::test::write_all(fd, std::string_view(batch).substr(0, batch.size() - 4)); // no checksum
    ::close(fd);
  }
  first.refresh();
  CHECK(first.tail_repair() == TailRepair{7, before, batch.size() - 4, 3});
  CHECK(first.events().size() == 5);
  CHECK(first.sandbox_mode_override() == SandboxMode::danger_full_access);
  CHECK(first.append("assistant/text", {{"text", "after repair"}}) == 5);
  second.refresh();
  CHECK(second.events().size() == 6);
  CHECK(second.events()[5]["data"]["text"] == "after repair");
  CHECK(zstd_cli_text(path).find("after repair") != std::string::npos);
}

TEST_CASE("zstd log: a forged or out-of-sequence row inside a frame is refused like in a plain log") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  std::string bytes = frame({HEADER}) + frame({row(0), mode_row(1, "root-access")});
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) ==
        log_message(path, 3, "sandbox/mode carries unknown mode \"root-access\""));
  CHECK(read_file(path) == bytes);

  bytes = frame({HEADER}) + frame({row(0)}) + frame({row(2)});
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) == log_message(path, 3, "seq 2 where 1 was expected"));
  CHECK(read_file(path) == bytes);

  // A torn frame whose complete rows hold a forgery: refused, nothing cut.
  const std::string torn = frame({mode_row(1, "root-access"), row(2)});
  bytes = frame({HEADER}) + frame({row(0)}) + torn.substr(0, torn.size() - 3);
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) ==
        log_message(path, 3, "sandbox/mode carries unknown mode \"root-access\""));
  CHECK(read_file(path) == bytes);

  // The header frame must hold exactly the header line.
  bytes = frame({HEADER, row(0)});
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) ==
        log_message(path, 0,
                    "corrupt Zstandard session log: the first frame (at byte 0) is not exactly one header line"));
  CHECK(read_file(path) == bytes);
}

TEST_CASE("zstd log: a lone surrogate in a compressed text delta opens; in a mode it is a forgery") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  const std::string delta = R"({"type":"assistant/text-delta","seq":0,"data":{"text":"\ud83d"}})";
  write_file(path, frame({HEADER}) + frame({delta, mode_row(1, "workspace-write")}));
  const SessionLog log = SessionLog::open(path);
  CHECK(log.events()[0]["data"]["text"] == "\xEF\xBF\xBD");
  CHECK(log.sandbox_mode_override() == SandboxMode::workspace_write);

  const std::string forged = R"({"type":"sandbox/mode","seq":1,"data":{"mode":"workspace-write\ud800"}})";
  const std::string bytes = frame({HEADER}) + frame({delta}) + frame({forged});
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) ==
        log_message(path, 3, R"(sandbox/mode carries unknown mode "workspace-write\ud800")"));
  CHECK(read_file(path) == bytes);
}

#else

TEST_CASE("zstd log: without Zstandard support, opening or creating one says so") {
  const TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  const std::string bytes("\x28\xb5\x2f\xfd\x24\x00\x00\x00", 8);
  write_file(path, bytes);
  CHECK(std::string(open_error(path).what()) ==
        log_message(path, 0,
                    "cannot read a Zstandard-compressed session log: dsh-sandbox-policy was built without "
                    "Zstandard support (libzstd was not found)"));
  CHECK(read_file(path) == bytes);
  SessionLogOptions options;
  options.encoding = DshLogEncoding::zstd;
  const auto created = dir / "new.jsonl.zstd";
  CHECK(std::string(dsh::test::log_error_from([&] {
                      static_cast<void>(SessionLog::create(created, SessionHeader{"z1", std::nullopt, 1}, options));
                    }).what()) ==
        log_message(created, 0,
                    "cannot compress the line: dsh-sandbox-policy was built without Zstandard support (libzstd was "
                    "not found); nothing was written"));
  CHECK_FALSE(std::filesystem::exists(created));
}

#endif
