// Zstandard session-log frames (docs/session-log.md#zstandard-frames): files made by the zstd CLI
// and by encode_zstd_frame read back record for record; a file cut at every byte, flipped bytes,
// foreign magic, skippable frames, a frame ending inside a record and a two-line header frame are
// each classified, with the byte offset of the frame at fault.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"
#include "support/zstd_cli.hpp"

#include <dsh/detail/slog/zstd_frames.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using dsh::detail::encode_zstd_frame;
using dsh::detail::ZstdFrameReader;
using dsh::detail::ZstdFrameStatus;
using dsh::test::TempDir;

namespace {

struct Walk {
  std::vector<std::uint64_t> offsets;
  std::vector<std::vector<std::string>> records; // per frame
  bool torn = false;
  dsh::detail::ZstdFrameOutcome outcome;
};

Walk walk(ZstdFrameReader& reader) {
  Walk result;
  while (reader.next()) {
    result.offsets.push_back(reader.frame().offset);
    result.records.emplace_back(reader.frame().records.begin(), reader.frame().records.end());
    result.torn = reader.frame().torn;
  }
  result.outcome = reader.outcome();
  return result;
}

Walk walk_bytes(std::string_view bytes, std::size_t limit = ZstdFrameReader::default_max_frame_bytes) {
  ZstdFrameReader reader(bytes, limit);
  return walk(reader);
}

Walk walk_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ZstdFrameReader reader(fd);
  Walk result = walk(reader);
  ::close(fd);
  return result;
}

std::string frame(std::initializer_list<std::string_view> lines) {
  const std::vector<std::string_view> batch(lines);
  auto encoded = encode_zstd_frame(batch);
  REQUIRE(encoded.status == ZstdFrameStatus::complete);
  return encoded.bytes;
}

using dsh::test::read_file;
using dsh::test::write_file;

/// Compresses the file `in` into `out` with the zstd CLI: one frame, with a checksum unless not asked.
void zstd_cli(const std::filesystem::path& in, const std::filesystem::path& out, bool checksum = true) {
  write_file(out, dsh::test::zstd_cli_compress(read_file(in), checksum));
}

/// In a build without libzstd: checks that both entry points say so exactly, and returns true.
bool without_zstd() {
  if constexpr (dsh::detail::zstd_available) {
    return false;
  } else {
    WARN("built without libzstd: checking the \"no Zstandard support\" reports only");
    const std::string expected = "dsh-sandbox-policy was built without Zstandard support (libzstd was not found)";
    ZstdFrameReader reader(std::string_view("\x28\xB5\x2F\xFD"));
    CHECK_FALSE(reader.next());
    CHECK(reader.outcome().status == ZstdFrameStatus::unavailable);
    CHECK(reader.outcome().message == expected);
    const std::vector<std::string_view> lines{"{}"};
    const auto encoded = encode_zstd_frame(lines);
    CHECK(encoded.status == ZstdFrameStatus::unavailable);
    CHECK(encoded.message == expected);
    CHECK(encoded.bytes.empty());
    return true;
  }
}

const std::string header_line = R"({"type":"session","id":"z1","version":1})";
const std::vector<std::string> batch1{R"({"seq":0,"type":"a"})", R"({"seq":1,"type":"b"})"};
const std::vector<std::string> batch2{R"({"seq":2,"type":"c"})", R"({"seq":3,"type":"d"})"};

} // namespace

TEST_CASE("zstd frames: files made by the zstd CLI, one frame per batch, read back") {
  if (without_zstd()) {
    return;
  }
  const TempDir dir;
  write_file(dir / "h", header_line + "\n");
  write_file(dir / "b1", batch1[0] + "\n" + batch1[1] + "\n");
  write_file(dir / "b2", batch2[0] + "\n" + batch2[1] + "\n");
  zstd_cli(dir / "h", dir / "h.zst");
  zstd_cli(dir / "b1", dir / "b1.zst");
  zstd_cli(dir / "b2", dir / "b2.zst");
  const std::string h = read_file(dir / "h.zst");
  const std::string b1 = read_file(dir / "b1.zst");
  const std::string b2 = read_file(dir / "b2.zst");
  const std::string joined = h + b1 + b2;
  write_file(dir / "session.jsonl.zstd", joined);

  for (const Walk& w : {walk_file(dir / "session.jsonl.zstd"), walk_bytes(joined)}) {
    CHECK(w.outcome.status == ZstdFrameStatus::complete);
    CHECK(w.outcome.message.empty());
    CHECK(w.offsets == std::vector<std::uint64_t>{0, h.size(), h.size() + b1.size()});
    REQUIRE(w.records.size() == 3);
    CHECK(w.records[0] == std::vector<std::string>{header_line});
    CHECK(w.records[1] == batch1);
    CHECK(w.records[2] == batch2);
    CHECK_FALSE(w.torn);
  }

  SECTION("a frame the CLI wrote without a checksum is read, as DSH reads it") {
    zstd_cli(dir / "b1", dir / "b1.nock", false);
    const Walk w = walk_bytes(h + read_file(dir / "b1.nock"));
    CHECK(w.outcome.status == ZstdFrameStatus::complete);
    REQUIRE(w.records.size() == 2);
    CHECK(w.records[1] == batch1);
  }
}

TEST_CASE("zstd frames: the writer's frames are checksummed and the CLI accepts them") {
  if (without_zstd()) {
    return;
  }
  const TempDir dir;
  const std::string h = frame({header_line});
  const std::string b1 = frame({batch1[0], batch1[1]});
  REQUIRE(h.size() > 5);
  CHECK((static_cast<unsigned char>(h[4]) & 0x04U) != 0); // Content_Checksum_flag
  CHECK((static_cast<unsigned char>(b1[4]) & 0x04U) != 0);
  write_file(dir / "s.zst", h + b1);
  CHECK(dsh::test::zstd_cli_decompress(dir / "s.zst") == header_line + "\n" + batch1[0] + "\n" + batch1[1] + "\n");

  SECTION("a batch is complete lines: no newline inside a record, not empty") {
    const std::vector<std::string_view> bad{"{}", "{\"a\":\n1}"};
    auto encoded = encode_zstd_frame(bad);
    CHECK(encoded.status == ZstdFrameStatus::bad_batch);
    CHECK(encoded.message == "record 2 of the batch holds a newline; a record is one line");
    CHECK(encoded.bytes.empty());
    encoded = encode_zstd_frame(std::span<const std::string_view>{});
    CHECK(encoded.status == ZstdFrameStatus::bad_batch);
    CHECK(encoded.message == "a Zstandard frame holds at least one record; the batch is empty");
  }
}

TEST_CASE("zstd frames: a 3-frame file cut at every byte is classified, never misread") {
  if (without_zstd()) {
    return;
  }
  const std::string h = frame({header_line});
  const std::string b1 = frame({batch1[0], batch1[1]});
  const std::string b2 = frame({batch2[0], batch2[1]});
  const std::string whole = h + b1 + b2;
  const std::size_t end1 = h.size() + b1.size();
  const TempDir dir;
  std::size_t torn_cuts = 0;
  std::size_t recovered_total = 0;
  for (std::size_t cut = 0; cut <= whole.size(); ++cut) {
    INFO("cut at " << cut << " of " << whole.size());
    const std::string_view prefix(whole.data(), cut);
    write_file(dir / "cut.zst", prefix);
    for (const Walk& w : {walk_bytes(prefix), walk_file(dir / "cut.zst")}) {
      if (cut < h.size()) {
        CHECK(w.outcome.status == ZstdFrameStatus::no_header);
        CHECK(w.records.empty());
        CHECK(w.outcome.message ==
              (cut == 0 ? std::string("corrupt Zstandard session log: the file is empty (no header frame)")
                        : "corrupt Zstandard session log: the file ends inside its header frame (" +
                              std::to_string(cut) + " bytes)"));
      } else if (cut == h.size() || cut == end1 || cut == whole.size()) {
        CHECK(w.outcome.status == ZstdFrameStatus::complete);
        CHECK_FALSE(w.torn);
        CHECK(w.records.size() == (cut == h.size() ? 1U : cut == end1 ? 2U : 3U));
      } else {
        const std::uint64_t start = cut < end1 ? h.size() : end1;
        const auto& batch = cut < end1 ? batch1 : batch2;
        CHECK(w.outcome.status == ZstdFrameStatus::torn_tail);
        CHECK(w.outcome.offset == start);
        CHECK(w.torn);
        REQUIRE(w.records.size() == (cut < end1 ? 2U : 3U));
        REQUIRE(w.offsets.back() == start);
        const auto& recovered = w.records.back();
        CHECK(w.outcome.recovered_records == recovered.size());
        REQUIRE(recovered.size() <= batch.size());
        CHECK(std::equal(recovered.begin(), recovered.end(), batch.begin()));
        CHECK(w.outcome.message == "the last Zstandard frame (starting at byte " + std::to_string(start) +
                                       ") is incomplete; " + std::to_string(recovered.size()) +
                                       " complete records recovered from it");
        ++torn_cuts;
        recovered_total += recovered.size();
      }
    }
  }
  CHECK(torn_cuts == 2 * (b1.size() + b2.size() - 2));
  // Cut inside the checksum only, the whole batch decodes: its records are kept.
  const Walk last = walk_bytes(std::string_view(whole.data(), whole.size() - 1));
  CHECK(last.outcome.recovered_records == 2);
  CHECK(recovered_total > 0);
}

TEST_CASE("zstd frames: corruption is named with the frame's byte offset") {
  if (without_zstd()) {
    return;
  }
  const std::string h = frame({header_line});
  const std::string b1 = frame({batch1[0], batch1[1]});
  const std::string b2 = frame({batch2[0], batch2[1]});
  const std::string off1 = std::to_string(h.size());

  SECTION("a flipped checksum byte") {
    std::string bytes = h + b1 + b2;
    bytes[h.size() + b1.size() - 1] = static_cast<char>(bytes[h.size() + b1.size() - 1] ^ 0x01);
    const Walk w = walk_bytes(bytes);
    CHECK(w.outcome.status == ZstdFrameStatus::checksum_mismatch);
    CHECK(w.outcome.offset == h.size());
    CHECK(w.outcome.message == "corrupt Zstandard session log: checksum mismatch in the frame starting at byte " +
                                   off1 + " (Restored data doesn't match checksum)");
    CHECK(w.records.size() == 1); // the header frame only: nothing of the corrupt frame
  }

  SECTION("every single flipped byte after the header frame is refused or cut, never misread") {
    const std::string whole = h + b1 + b2;
    std::size_t harmless = 0;
    for (std::size_t at = h.size(); at < whole.size(); ++at) {
      for (const unsigned mask : {0x01U, 0x80U, 0xFFU}) {
        std::string bytes = whole;
        bytes[at] = static_cast<char>(static_cast<unsigned>(static_cast<unsigned char>(bytes[at])) ^ mask);
        const Walk w = walk_bytes(bytes);
        INFO("byte " << at << " ^ " << mask << ": " << w.outcome.message);
        // A flip the decoder ignores (a padding bit) still yields the checksummed plaintext.
        if (w.outcome.status == ZstdFrameStatus::complete) {
          ++harmless;
          CHECK(w.records.size() == 3);
        }
        // What was yielded before the error is exactly the original's frames, in order.
        for (std::size_t i = 0; i < w.records.size(); ++i) {
          const auto& original = i == 0 ? std::vector<std::string>{header_line} : i == 1 ? batch1 : batch2;
          if (w.torn && i + 1 == w.records.size()) {
            CHECK(std::equal(w.records[i].begin(), w.records[i].end(), original.begin()));
          } else {
            CHECK(w.records[i] == original);
          }
        }
      }
    }
    CHECK(harmless < 4); // out of 3 * (b1.size() + b2.size()) flips
  }

  SECTION("bad magic where the second frame should start") {
    std::string bytes = h + b1;
    bytes[h.size()] = 'X';
    const Walk w = walk_bytes(bytes);
    CHECK(w.outcome.status == ZstdFrameStatus::bad_magic);
    CHECK(w.outcome.offset == h.size());
    CHECK(w.outcome.message == "corrupt Zstandard session log: invalid frame magic at byte " + off1);
  }

  SECTION("a tail shorter than a magic that is no prefix of one is corruption, not a tear") {
    Walk w = walk_bytes(h + "ab");
    CHECK(w.outcome.status == ZstdFrameStatus::bad_magic);
    CHECK(w.outcome.message == "corrupt Zstandard session log: invalid frame magic at byte " + off1);
    w = walk_bytes(h + std::string("\x28\xB5", 2));
    CHECK(w.outcome.status == ZstdFrameStatus::torn_tail);
    CHECK(w.outcome.recovered_records == 0);
  }

  SECTION("a skippable frame is refused, as DSH refuses it") {
    const std::string skippable("\x50\x2A\x4D\x18\x04\x00\x00\x00"
                                "abcd",
                                12);
    const Walk w = walk_bytes(h + skippable + b1);
    CHECK(w.outcome.status == ZstdFrameStatus::bad_magic);
    CHECK(w.outcome.message ==
          "corrupt Zstandard session log: a skippable frame at byte " + off1 + " (DSH writes and accepts none)");
  }

  SECTION("a reserved frame-header bit") {
    std::string bytes = h + b1;
    bytes[h.size() + 4] = static_cast<char>(static_cast<unsigned char>(bytes[h.size() + 4]) | 0x08U);
    const Walk w = walk_bytes(bytes);
    CHECK(w.outcome.status == ZstdFrameStatus::malformed_frame);
    CHECK(w.outcome.message == "corrupt Zstandard session log: reserved frame-header bit set at byte " +
                                   std::to_string(h.size() + 4) + " (the frame starting at byte " + off1 + ")");
  }

  SECTION("a complete frame that ends inside a record") {
    // Encode "record\npartial" by hand: the writer only makes complete lines.
    const TempDir dir;
    write_file(dir / "p", batch1[0] + "\n{\"seq\":1");
    zstd_cli(dir / "p", dir / "p.zst");
    const Walk w = walk_bytes(h + read_file(dir / "p.zst") + b2);
    CHECK(w.outcome.status == ZstdFrameStatus::torn_record);
    CHECK(w.outcome.offset == h.size());
    CHECK(w.outcome.message ==
          "corrupt Zstandard session log: the complete frame starting at byte " + off1 + " ends inside a record");
    CHECK(w.records.size() == 1);
  }

  SECTION("a first frame that is not exactly one header line") {
    for (const std::string& plain : {header_line + "\n" + batch1[0] + "\n", header_line, std::string()}) {
      const TempDir dir;
      write_file(dir / "h", plain);
      zstd_cli(dir / "h", dir / "h.zst");
      const Walk w = walk_bytes(read_file(dir / "h.zst") + b1);
      CHECK(w.outcome.status == ZstdFrameStatus::bad_header_frame);
      CHECK(w.outcome.offset == 0);
      CHECK(w.outcome.message ==
            "corrupt Zstandard session log: the first frame (at byte 0) is not exactly one header line");
      CHECK(w.records.empty());
    }
  }

  SECTION("a frame larger than the reader's limit is refused, not buffered") {
    const Walk w = walk_bytes(h + frame({batch1[0], batch1[1], batch2[0]}), 50);
    CHECK(w.outcome.status == ZstdFrameStatus::frame_too_large);
    CHECK(w.outcome.message ==
          "corrupt Zstandard session log: the frame starting at byte " + off1 + " decompresses to more than 50 bytes");
    CHECK(w.records.size() == 1);
  }
}

TEST_CASE("zstd frames: the reader takes regular files only") {
  if (without_zstd()) {
    return;
  }
  std::array<int, 2> fds{};
  REQUIRE(::pipe(fds.data()) == 0);
  ZstdFrameReader reader(fds[0]);
  CHECK_FALSE(reader.next());
  CHECK(reader.outcome().status == ZstdFrameStatus::io_error);
  CHECK(reader.outcome().message == "a Zstandard session log must be a regular file");
  ::close(fds[0]);
  ::close(fds[1]);
}
