// A build without libzstd (DSH_SANDBOX_POLICY_HAS_ZSTD=0, as -DDSH_SANDBOX_POLICY_WITH_ZSTD=OFF
// makes it) compiles the Zstandard entry points, and each says exactly why it cannot work.
#undef DSH_SANDBOX_POLICY_HAS_ZSTD
#define DSH_SANDBOX_POLICY_HAS_ZSTD 0
#include <dsh/detail/slog/zstd_frames.hpp>
#include <dsh/session_log.hpp>

#include "support/catch.hpp"
#include "support/session_log.hpp"
#include "support/temp_dir.hpp"

#include <filesystem>
#include <string>

#include <string_view>
#include <vector>

TEST_CASE("zstd frames without libzstd: every entry point reports it") {
  static_assert(!dsh::detail::zstd_available);
  const std::string expected = "dsh-sandbox-policy was built without Zstandard support (libzstd was not found)";
  dsh::detail::ZstdFrameReader reader(std::string_view("\x28\xB5\x2F\xFD\x00", 5));
  CHECK_FALSE(reader.next());
  CHECK(reader.outcome().status == dsh::detail::ZstdFrameStatus::unavailable);
  CHECK(reader.outcome().message == expected);
  const std::vector<std::string_view> lines{"{}"};
  const auto encoded = dsh::detail::encode_zstd_frame(lines);
  CHECK(encoded.status == dsh::detail::ZstdFrameStatus::unavailable);
  CHECK(encoded.message == expected);
  CHECK(encoded.bytes.empty());
}

TEST_CASE("zstd frames without libzstd: a compressed session log is refused with the reason, unchanged") {
  const dsh::test::TempDir dir;
  const auto path = dir / "session.jsonl.zstd";
  const std::string bytes("\x28\xb5\x2f\xfd\x24\x00\x00\x00", 8);
  dsh::test::write_file(path, bytes);
  CHECK(std::string(dsh::test::open_error(path).what()) ==
        dsh::test::log_message(path, 0,
                               "cannot read a Zstandard-compressed session log: dsh-sandbox-policy was built without "
                               "Zstandard support (libzstd was not found)"));
  CHECK(dsh::test::read_file(path) == bytes);
  dsh::SessionLogOptions options;
  options.encoding = dsh::DshLogEncoding::zstd;
  const auto created = dir / "new.jsonl.zstd";
  CHECK(std::string(
            dsh::test::log_error_from([&] {
              static_cast<void>(dsh::SessionLog::create(created, dsh::SessionHeader{"z1", std::nullopt, 1}, options));
            }).what()) ==
        dsh::test::log_message(created, 0,
                               "cannot compress the line: dsh-sandbox-policy was built without Zstandard support "
                               "(libzstd was not found); nothing was written"));
  CHECK_FALSE(std::filesystem::exists(created));
}
