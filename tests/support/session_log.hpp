// Shared by the session-log tests: fixture copies, capturing a LogError and the expected texts;
// with the files, child processes and the unprivileged user of the support layer.
#pragma once

#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include "support/catch.hpp"
#include "support/files.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/users.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dsh {

/// Prints a repair in test failure messages.
inline std::ostream& operator<<(std::ostream& out, const TailRepair& repair) {
  return out << "TailRepair{line " << repair.line << ", offset " << repair.offset << ", removed "
             << repair.removed_bytes << ", recovered " << repair.recovered_rows << "}";
}

} // namespace dsh

namespace dsh::test {

/// The options of a log whose directories other users may change (the tests' shared directories).
inline const SessionLogOptions shared_directories{.allow_shared_directories = true};

/// Returns the path of a session-log fixture in tests/fixtures/sessions (read-only: copy it first).
inline std::filesystem::path fixture(std::string_view name) {
  return std::filesystem::path(DSH_FIXTURES_DIR) / "sessions" / name;
}

/// Copies a fixture into `dir` (writable: opening may repair a torn tail); returns the copy.
inline std::filesystem::path copy_fixture(const TempDir& dir, std::string_view name) {
  const std::filesystem::path original = fixture(name);
  if (!std::filesystem::is_regular_file(original)) {
    throw std::runtime_error("no session-log fixture " + original.string());
  }
  std::filesystem::path copy = dir / name;
  write_file(copy, read_file(original));
  return copy;
}

/// Runs `action` and returns the LogError it throws; fails the test if it throws none.
inline LogError log_error_from(const std::function<void()>& action) {
  try {
    action();
  } catch (const LogError& error) {
    return error;
  }
  FAIL("expected a dsh::LogError");
  throw std::logic_error("unreachable");
}

/// Returns the LogError that opening `path` throws.
inline LogError open_error(const std::filesystem::path& path) {
  return log_error_from([&] { static_cast<void>(SessionLog::open(path)); });
}

/// The expected message of a LogError about `path`, as `LogError` formats it.
inline std::string log_message(const std::filesystem::path& path, std::size_t line, std::string_view what) {
  return LogError(path, line, what).what();
}

/// The line a header written by `SessionLog::create` has.
inline std::string header_line(std::string_view id, std::int64_t created_at, std::string_view cwd_json = {}) {
  std::string line =
      R"({"type":"session","version":0,"id":")" + std::string(id) + R"(","createdAt":)" + std::to_string(created_at);
  if (!cwd_json.empty()) {
    line += R"(,"cwd":)" + std::string(cwd_json);
  }
  return line + ",\"delegationDepth\":0}\n";
}

/// A new session log `file` (session `id`, no cwd, created at 1) in a fresh directory, removed
/// with everything in it. Tests name its members (`fresh.path`, `fresh.log`) rather than bind
/// them: clang 14 cannot capture a structured binding in a lambda.
struct FreshLog {
  TempDir dir;
  std::filesystem::path path;
  SessionLog log;

  FreshLog(const std::string& file, const std::string& id)
      : path(dir / file), log(SessionLog::create(path, {id, {}, 1})) {}
};

/// A session log at `path` (session `id`, cwd `cwd`) switched to workspace-write, and `forged`:
/// the `sandbox/mode` line that, appended, switches it to danger-full-access (made on a copy,
/// whose resolution proves it). The red-team suites try to append it from under the fence.
struct ForgeableLog {
  std::filesystem::path path;
  std::string bytes;  ///< The log as created.
  std::string forged; ///< The forged switch, one line.

  ForgeableLog(std::filesystem::path log, const std::string& id, const std::filesystem::path& cwd)
      : path(std::move(log)) {
    {
      SessionLog created = SessionLog::create(path, {id, cwd.string(), 1764480000000});
      set_sandbox_mode(created, SandboxMode::workspace_write);
    }
    bytes = read_file(path);
    const std::filesystem::path copy = path.string() + ".forgery";
    write_file(copy, bytes);
    {
      SessionLog control = SessionLog::open(copy);
      set_sandbox_mode(control, SandboxMode::danger_full_access);
    }
    forged = read_file(copy).substr(bytes.size());
    std::filesystem::remove(copy);
  }

  /// The mode a host resolves from the log now.
  [[nodiscard]] SandboxMode mode() const { return PolicyOwner().resolve(SessionLog::open(path)).mode; }

  /// The mode a host resolves from a copy of the log holding `content` instead.
  [[nodiscard]] SandboxMode mode_of_copy(const std::string& content) const {
    const std::filesystem::path copy = path.string() + ".forgery";
    write_file(copy, content);
    const SandboxMode mode = PolicyOwner().resolve(SessionLog::open(copy)).mode;
    std::filesystem::remove(copy);
    return mode;
  }
};

} // namespace dsh::test
