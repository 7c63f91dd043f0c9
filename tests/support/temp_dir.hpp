// The one temporary-directory helper of the test suite, and the check that a directory's path
// can be written into an expected JSON text as it is.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace dsh::test {

/// A fresh, uniquely named directory under the system temporary area, removed
/// with everything beneath it on destruction.
class TempDir {
public:
  TempDir() : TempDir(std::filesystem::temp_directory_path()) {}
  /// A fresh directory in `parent` instead (for a test that needs a specific area, such as /tmp).
  explicit TempDir(const std::filesystem::path& parent) {
    std::string pattern = (parent / "dsh-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed for " + pattern);
    }
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  /// The directory itself, as created (not canonicalized).
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// `path() / relative`.
  [[nodiscard]] std::filesystem::path operator/(const std::filesystem::path& relative) const {
    return path_ / relative;
  }

private:
  std::filesystem::path path_;
};

/// True if `text` needs no JSON escaping: printable ASCII without `"` and `\`. A test that
/// writes a temporary path into an expected JSON literal requires this of the path first.
inline bool plain_ascii(std::string_view text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte > 0x7E || c == '"' || c == '\\') {
      return false;
    }
  }
  return true;
}

} // namespace dsh::test
