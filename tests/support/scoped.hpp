// What a test changes in its own process for one scope (the working directory, an environment
// variable) and gives back on the way out, and the message of the error a call throws.
#pragma once

#include "support/catch.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace dsh::test {

/// Changes the process working directory for its lifetime; restores the previous one (which
/// may be gone by then: a test that removes it has nothing to go back to).
class WorkingDirectory {
public:
  explicit WorkingDirectory(const std::filesystem::path& directory) : previous_(std::filesystem::current_path()) {
    std::filesystem::current_path(directory);
  }
  WorkingDirectory(const WorkingDirectory&) = delete;
  WorkingDirectory& operator=(const WorkingDirectory&) = delete;
  ~WorkingDirectory() {
    std::error_code ignored;
    std::filesystem::current_path(previous_, ignored);
  }

private:
  std::filesystem::path previous_;
};

/// Keeps an environment variable's value (or its absence) and restores it on destruction;
/// `set` changes it in between.
class EnvironmentVariable {
public:
  explicit EnvironmentVariable(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) {
      saved_ = value;
    }
  }
  /// Keeps the variable, then sets it to `value`.
  EnvironmentVariable(const char* name, const std::string& value) : EnvironmentVariable(name) { set(value); }
  EnvironmentVariable(const EnvironmentVariable&) = delete;
  EnvironmentVariable& operator=(const EnvironmentVariable&) = delete;
  ~EnvironmentVariable() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  /// Sets the variable to `value` (until the destructor restores it).
  void set(const std::string& value) const { REQUIRE(::setenv(name_, value.c_str(), 1) == 0); }

private:
  const char* name_;
  std::optional<std::string> saved_;
};

/// What `thrown_message` returns when the call threw nothing: no message of the library has it.
inline constexpr const char* nothing_thrown = "<nothing thrown>";

/// Runs `action`; returns the `what()` of the `E` it threw, or `nothing_thrown`. Any other
/// exception goes on to the test, which then fails.
template <class E, class Action> std::string thrown_message(Action&& action) {
  try {
    action();
  } catch (const E& error) {
    return error.what();
  }
  return nothing_thrown;
}

} // namespace dsh::test
