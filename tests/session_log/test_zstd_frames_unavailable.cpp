// A build without libzstd (DSH_SANDBOX_POLICY_HAS_ZSTD=0, as -DDSH_SANDBOX_POLICY_WITH_ZSTD=OFF
// makes it) compiles the Zstandard entry points, and each says exactly why it cannot work.
#undef DSH_SANDBOX_POLICY_HAS_ZSTD
#define DSH_SANDBOX_POLICY_HAS_ZSTD 0
#include <dsh/detail/zstd_frames.hpp>

#include "support/catch.hpp"

#include <string_view>
#include <vector>

TEST_CASE("zstd frames without libzstd: every entry point reports it") {
  static_assert(!dsh::detail::zstd_available);
  const std::string expected = "this build of dsh-sandbox-policy has no Zstandard support (libzstd was not found)";
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
