// Every error the library throws on purpose derives from dsh::Error, so a host can catch them
// in one place; each is raised here by real input, not constructed by hand.
#include "support/catch.hpp"
#include "support/scoped.hpp"
#include "support/temp_dir.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>
#include <dsh/write_file.hpp>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

static_assert(std::is_base_of_v<std::runtime_error, dsh::Error>);
static_assert(std::is_base_of_v<dsh::Error, dsh::ConfigError>);
static_assert(std::is_base_of_v<dsh::Error, dsh::InvariantViolation>);
static_assert(std::is_base_of_v<dsh::Error, dsh::ProtectedPathError>);
static_assert(std::is_base_of_v<dsh::Error, dsh::LogError>);
static_assert(std::is_base_of_v<dsh::Error, dsh::LandlockError>);
static_assert(std::is_base_of_v<dsh::Error, dsh::SystemError>);
static_assert(std::is_base_of_v<dsh::Error, dsh::ProcessError>);
static_assert(std::is_base_of_v<dsh::SystemError, dsh::WriteError>);

TEST_CASE("each error type is caught as dsh::Error with its own message", "[errors]") {
  CHECK(dsh::test::thrown_message<dsh::Error>([] {
          (void)dsh::PolicyConfig::from_json(nlohmann::json{{"mode", "Read-Only"}});
        }).find("Read-Only") != std::string::npos);

  CHECK(dsh::test::thrown_message<dsh::Error>([] {
          dsh::check_event(nlohmann::json{{"type", "sandbox/mode"}, {"data", {{"mode", "host-root"}}}});
        }) == R"(sandbox/mode carries unknown mode "host-root")");

  const dsh::test::TempDir dir;
  const auto missing = dir / "missing.jsonl";
  CHECK(dsh::test::thrown_message<dsh::Error>([&] { (void)dsh::SessionLog::open(missing); }) ==
        "session log \"" + missing.string() + "\": cannot open: No such file or directory");

  dsh::ResolvedPolicy policy{dsh::SandboxMode::read_only, dir.path(), dsh::ModeSource::deployment,
                             dsh::RootSource::deployment};
  CHECK(dsh::test::thrown_message<dsh::Error>([&] {
          (void)dsh::detail::prepare_fence(policy, dsh::FenceOptions{}, dsh::detail::LandlockProbe{0, ENOSYS}, nullptr);
        }).starts_with("Landlock fence for read-only: "));

  CHECK(dsh::test::thrown_message<dsh::Error>([] { (void)dsh::FencedCommand(std::vector<std::string>{}); }) ==
        "FencedCommand: argv must name a program, got an empty argv");
}

TEST_CASE("system failures are dsh::SystemError with their code, and a write refusal is one too", "[errors]") {
  // The process working directory removed: a relative path has no base.
  const dsh::test::TempDir dir;
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::create_directory(dir / "gone");
  std::filesystem::current_path(dir / "gone");
  std::filesystem::remove(dir / "gone");
  std::error_code code;
  std::string message;
  try {
    (void)dsh::canonical_path("relative");
  } catch (const dsh::Error& error) {
    message = error.what();
    code = dynamic_cast<const dsh::SystemError&>(error).code();
  }
  std::filesystem::current_path(before);
  CHECK(code == std::errc::no_such_file_or_directory);
  CHECK(message == "dsh: cannot read the process working directory: No such file or directory");

  // A program that cannot be started: the start failure's code.
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(dsh::ResolvedPolicy{
      dsh::SandboxMode::danger_full_access, dir.path(), dsh::ModeSource::approved, dsh::RootSource::deployment});
  try {
    (void)dsh::FencedCommand({"/nonexistent/dsh-no-such-program"}).spawn(fence);
    FAIL("spawn did not throw");
  } catch (const dsh::SystemError& error) {
    CHECK(error.code() == std::errc::no_such_file_or_directory);
  }

  // A supervisor killed from outside: a process failure, not the fence's (ProcessError).
  dsh::FencedChild child = dsh::FencedCommand({"sleep", "30"}).launch(dsh::Launch::fork).spawn(fence);
  REQUIRE(::kill(child.pid(), SIGKILL) == 0);
  std::string supervisor_died;
  try {
    (void)child.wait();
  } catch (const dsh::LandlockError& error) {
    supervisor_died = std::string("LandlockError: ") + error.what();
  } catch (const dsh::ProcessError& error) {
    supervisor_died = error.what();
    CHECK_FALSE(error.code());
  }
  CHECK(supervisor_died == "the supervisor of " + dsh::json_string_literal(dsh::FencedCommand({"sleep"}).program()) +
                               " ended without reporting (status 137): the command was killed with it, but "
                               "processes it detached may have survived the call");

  // The read-only policy's own refusal, caught as dsh::Error.
  const dsh::ResolvedPolicy read_only{dsh::SandboxMode::read_only, dir.path(), dsh::ModeSource::deployment,
                                      dsh::RootSource::deployment};
  CHECK(dsh::test::thrown_message<dsh::Error>([&] {
          dsh::write_file(read_only, dir / "a.txt", "x");
        }).find("read-only") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "a.txt"));
}
