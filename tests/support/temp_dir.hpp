// The one temporary-directory helper of the test suite.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
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

} // namespace dsh::test
