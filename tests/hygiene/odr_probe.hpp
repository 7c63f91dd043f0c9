// What each translation unit of the ODR probe reports about the entities it sees.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace dsh::test {

/// Addresses of inline entities (equal in every translation unit when the headers define them
/// once, as `inline`), and a text rendered through the templates of the headers.
struct OdrProbe {
  const void* policy_context_name = nullptr;
  const void* sandbox_modes = nullptr;
  const void* families = nullptr;
  std::filesystem::path (*canonicalizer)(const std::filesystem::path&) = nullptr;
  std::string (*json_quoter)(std::string_view) = nullptr;
  std::string context;
};

[[nodiscard]] OdrProbe odr_probe_a();
[[nodiscard]] OdrProbe odr_probe_b();

} // namespace dsh::test
