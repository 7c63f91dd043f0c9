// The environment of a fenced command: the host's without the variables whose names look like
// credentials, the host's changes to it, and the fence's TMPDIR; checked on the environment
// class itself and on real commands run under a real fence (docs/enforcement.md, "What a fenced
// command runs in").
#include "support/landlock.hpp"
#include "support/scoped.hpp"

#include <dsh/detail/process/command_environment.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using dsh::FencedCommand;
using dsh::PreparedFence;
using dsh::SandboxMode;
using dsh::detail::CommandEnvironment;
using dsh::test::Lab;
using Entries = std::vector<std::string>;

namespace {

/// The strings of an envp-style array, up to its null pointer.
Entries entries_of(const char* const* envp) {
  Entries entries;
  for (; *envp != nullptr; ++envp) {
    entries.emplace_back(*envp);
  }
  return entries;
}

/// An environ-style array over `entries` (which must outlive it).
std::vector<const char*> array_of(const Entries& entries) {
  std::vector<const char*> array;
  for (const std::string& entry : entries) {
    array.push_back(entry.c_str());
  }
  array.push_back(nullptr);
  return array;
}

/// The host the tests below pretend to be: three ordinary variables and five credentials.
const Entries host_entries{
    "PATH=/usr/local/bin:/usr/bin:/bin", "MY_API_KEY=sk-test", "HOME=/home/dsh-test", "GITHUB_TOKEN=ghp-test",
    "aws_secret_access_key=aws-test",    "LANG=C.UTF-8",       "DB_PASSWORD=hunter2", "SSH_AUTH_SOCK=/run/agent.sock",
};
const Entries ordinary{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8"};
const Entries credential_names{"DB_PASSWORD", "GITHUB_TOKEN", "MY_API_KEY", "SSH_AUTH_SOCK", "aws_secret_access_key"};

/// Makes this process's environment exactly `entries` (in that order) until destroyed, then
/// restores the one it had, so FencedCommand reads a known `environ`.
class HostEnvironment {
public:
  explicit HostEnvironment(const Entries& entries) {
    for (char** at = environ; at != nullptr && *at != nullptr; ++at) {
      saved_.emplace_back(*at);
    }
    set_all(entries);
  }
  HostEnvironment(const HostEnvironment&) = delete;
  HostEnvironment& operator=(const HostEnvironment&) = delete;
  ~HostEnvironment() { set_all(saved_); }

private:
  static void set_all(const Entries& entries) {
    ::clearenv();
    for (const std::string& entry : entries) {
      const std::size_t equals = entry.find('=');
      if (equals != std::string::npos && equals > 0) {
        ::setenv(entry.substr(0, equals).c_str(), entry.substr(equals + 1).c_str(), 1);
      }
    }
  }

  Entries saved_;
};

/// What a command run under `fence` wrote, and its exit code.
struct Output {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs `command` under `fence`, its stdout and stderr relayed into the result.
Output run(FencedCommand& command, const PreparedFence& fence) {
  Output output;
  command.on_output([&output](dsh::CommandStream stream, std::string_view bytes) {
    (stream == dsh::CommandStream::out ? output.out : output.err).append(bytes);
  });
  output.exit_code = command.run(fence);
  return output;
}

/// The environment `env -0` prints under `fence` when run with `prepare` applied.
Entries fenced_env(const PreparedFence& fence, const std::function<void(FencedCommand&)>& prepare = {}) {
  FencedCommand command({"env", "-0"});
  if (prepare) {
    prepare(command);
  }
  const Output output = run(command, fence);
  REQUIRE(output.exit_code == 0);
  REQUIRE(output.err.empty());
  Entries entries;
  for (std::size_t at = 0; at < output.out.size();) {
    const std::size_t end = output.out.find('\0', at);
    REQUIRE(end != std::string::npos);
    entries.push_back(output.out.substr(at, end - at));
    at = end + 1;
  }
  return entries;
}

/// `expected` as a command gets it under `fence`: with the fence's TMPDIR in place of the one
/// in `expected`, or added last (unless `host_set_tmpdir`).
Entries under(const PreparedFence& fence, Entries expected, bool host_set_tmpdir = false) {
  const char* assignment = fence.temporary_directory_assignment();
  if (assignment == nullptr || host_set_tmpdir) {
    return expected;
  }
  for (std::string& entry : expected) {
    if (entry.starts_with("TMPDIR=")) {
      entry = assignment;
      return expected;
    }
  }
  expected.emplace_back(assignment);
  return expected;
}

/// What `bash -c 'printf %s "${NAME-unset}"'` prints under `fence` after `prepare`.
std::string fenced_value(const PreparedFence& fence, const std::string& name,
                         const std::function<void(FencedCommand&)>& prepare = {}) {
  FencedCommand command({"bash", "--norc", "--noprofile", "-c", "printf %s \"${" + name + "-unset}\""});
  if (prepare) {
    prepare(command);
  }
  const Output output = run(command, fence);
  REQUIRE(output.exit_code == 0);
  REQUIRE(output.err.empty());
  return output.out;
}

} // namespace

TEST_CASE("a name looks like a credential when it contains KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or AUTH") {
  using dsh::detail::looks_like_credential;
  for (const std::string_view name :
       {"MY_API_KEY", "GITHUB_TOKEN", "aws_secret_access_key", "DB_PASSWORD", "SSH_AUTH_SOCK", "PASSWD", "key",
        "Google_Application_Credentials", "XAUTHORITY", "npm_config__authToken", "KEYRING", "MONKEY"}) {
    INFO(name);
    CHECK(looks_like_credential(name));
  }
  for (const std::string_view name :
       {"PATH", "HOME", "LANG", "TMPDIR", "", "K_E_Y", "KE", "TOKE", "PASSWOR", "SECRE", "AUT", "CREDENTIA"}) {
    INFO(name);
    CHECK_FALSE(looks_like_credential(name));
  }
  static_assert(dsh::detail::looks_like_credential("OPENAI_API_KEY"));
  static_assert(!dsh::detail::looks_like_credential("SHELL"));
}

TEST_CASE("the default environment is the host's without the credential-looking variables") {
  Entries host = host_entries;
  host.insert(host.end(), {"NOT_A_VARIABLE", "=no-name", "HOME=/second/home", "EMPTY="});
  const std::vector<const char*> array = array_of(host);
  const CommandEnvironment environment(array.data());
  Entries expected = ordinary;
  expected.emplace_back("EMPTY=");
  CHECK(environment.entries() == expected); // no entry without a name; the first HOME counts
  CHECK(environment.removed_names() == credential_names);
  CHECK(entries_of(environment.envp(nullptr)) == expected);

  const CommandEnvironment none(nullptr);
  CHECK(none.entries().empty());
  CHECK(none.removed_names().empty());
  CHECK(entries_of(none.envp(nullptr)).empty());
}

TEST_CASE("set, unset, clear, inherit and keep give exactly the environment they say") {
  const std::vector<const char*> array = array_of(host_entries);
  CommandEnvironment environment(array.data());

  environment.set("HOME", "/elsewhere"); // replaced in place
  environment.set("NEW", "a=b");         // added last; a value may hold '='
  environment.set("MY_API_KEY", "host-chosen");
  CHECK(environment.entries() == Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/elsewhere", "LANG=C.UTF-8",
                                         "NEW=a=b", "MY_API_KEY=host-chosen"});
  CHECK(environment.removed_names() == credential_names); // the host's own MY_API_KEY is still withheld
  environment.unset("LANG");
  environment.unset("NOT_THERE");
  environment.unset("path"); // names are case-sensitive
  CHECK(environment.entries() ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/elsewhere", "NEW=a=b", "MY_API_KEY=host-chosen"});
  CHECK(entries_of(environment.envp(nullptr)) == environment.entries());

  environment.inherit();
  CHECK(environment.entries() == ordinary);

  environment.keep("GITHUB_TOKEN");
  environment.keep("GITHUB_TOKEN");
  environment.keep("NOT_IN_THE_HOST");
  CHECK(environment.entries() ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8", "GITHUB_TOKEN=ghp-test"});
  CHECK(environment.removed_names() == Entries{"DB_PASSWORD", "MY_API_KEY", "SSH_AUTH_SOCK", "aws_secret_access_key"});

  environment.clear();
  CHECK(environment.entries().empty());
  CHECK(environment.removed_names().empty());
  CHECK(entries_of(environment.envp(nullptr)).empty());
  environment.keep("DB_PASSWORD"); // nothing is inherited after clear: kept for a later inherit
  CHECK(environment.entries().empty());
  environment.set("ONLY", "1");
  CHECK(environment.entries() == Entries{"ONLY=1"});

  environment.inherit(); // keep applies to the later inherit, in the host's order
  CHECK(environment.entries() == Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test",
                                         "GITHUB_TOKEN=ghp-test", "LANG=C.UTF-8", "DB_PASSWORD=hunter2"});
  CHECK(environment.removed_names() == Entries{"MY_API_KEY", "SSH_AUTH_SOCK", "aws_secret_access_key"});
  CHECK(entries_of(environment.envp(nullptr)) == environment.entries());

  CommandEnvironment moved = std::move(environment);
  CHECK(entries_of(moved.envp(nullptr)) == moved.entries());
}

TEST_CASE("bad names and values are refused with a message naming the input, the expectation and the value") {
  const HostEnvironment host(host_entries);
  FencedCommand command({"env"});
  const Entries before = command.environment();
  const std::string name_rule = ": expected a variable name: not empty, without '=' or NUL; found ";
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.set_env("", "v"); }) ==
        "FencedCommand::set_env" + name_rule + "\"\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.set_env("A=B", "v"); }) ==
        "FencedCommand::set_env" + name_rule + "\"A=B\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.set_env(std::string("A\0B", 3), "v"); }) ==
        "FencedCommand::set_env" + name_rule + "\"A\\u0000B\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.unset_env("="); }) ==
        "FencedCommand::unset_env" + name_rule + "\"=\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.unset_env(""); }) ==
        "FencedCommand::unset_env" + name_rule + "\"\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.keep_env("MY_API_KEY=x"); }) ==
        "FencedCommand::keep_env" + name_rule + "\"MY_API_KEY=x\"");
  CHECK(dsh::test::thrown_message<dsh::ConfigError>([&] { command.keep_env(std::string(1, '\0')); }) ==
        "FencedCommand::keep_env" + name_rule + "\"\\u0000\"");
  // A value may be a secret: the message says where the NUL is, and never shows the value.
  const std::string message =
      dsh::test::thrown_message<dsh::ConfigError>([&] { command.set_env("MY_API_KEY", std::string("sk-\0test", 8)); });
  CHECK(message == "FencedCommand::set_env value of \"MY_API_KEY\": expected a value without NUL; found a NUL at "
                   "byte 3 of 8 (the value is not shown: it may be a secret)");
  CHECK(command.environment() == before);
  CHECK(command.removed_env_names() == credential_names);
}

TEST_CASE("the fence's TMPDIR takes the inherited TMPDIR's slot or the spare one, never the host's own choice") {
  const std::string assignment = "TMPDIR=/tmp/dsh-session-private";
  Entries host = host_entries;
  host.insert(host.begin() + 1, "TMPDIR=/host/tmp");
  const std::vector<const char*> array = array_of(host);
  CommandEnvironment environment(array.data());
  const Entries inherited{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/host/tmp", "HOME=/home/dsh-test",
                          "LANG=C.UTF-8"};
  CHECK(entries_of(environment.envp(nullptr)) == inherited);
  CHECK(entries_of(environment.envp(assignment.c_str())) ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", assignment, "HOME=/home/dsh-test", "LANG=C.UTF-8"});
  CHECK(entries_of(environment.envp(nullptr)) == inherited); // the slot is written on every call

  environment.set("TMPDIR", "/chosen"); // the host's choice stays
  CHECK(entries_of(environment.envp(assignment.c_str())) ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/chosen", "HOME=/home/dsh-test", "LANG=C.UTF-8"});
  environment.set("OTHER", "1"); // a later change keeps it the host's
  CHECK(entries_of(environment.envp(assignment.c_str())).at(1) == "TMPDIR=/chosen");

  environment.unset("TMPDIR"); // no TMPDIR of the host's: the fence's goes in the spare slot
  CHECK(entries_of(environment.envp(assignment.c_str())) ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8", "OTHER=1", assignment});
  CHECK(entries_of(environment.envp(nullptr)) ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8", "OTHER=1"});

  environment.clear();
  CHECK(entries_of(environment.envp(assignment.c_str())) == Entries{assignment});
  environment.set("TMPDIR", "/chosen");
  CHECK(entries_of(environment.envp(assignment.c_str())) == Entries{"TMPDIR=/chosen"});

  environment.inherit(); // back to the default: the inherited TMPDIR is replaced again
  CHECK(entries_of(environment.envp(assignment.c_str())) ==
        Entries{"PATH=/usr/local/bin:/usr/bin:/bin", assignment, "HOME=/home/dsh-test", "LANG=C.UTF-8"});
}

TEST_CASE("a fence's TMPDIR assignment is its report's temporary directory, or none") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  for (const SandboxMode mode :
       {SandboxMode::read_only, SandboxMode::workspace_write, SandboxMode::danger_full_access}) {
    INFO(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    if (fence.report().temporary_directory.empty()) {
      CHECK(fence.temporary_directory_assignment() == nullptr); // today: no fence makes one
    } else {
      REQUIRE(fence.temporary_directory_assignment() != nullptr);
      CHECK(std::string(fence.temporary_directory_assignment()) ==
            "TMPDIR=" + fence.report().temporary_directory.native());
    }
  }
}

TEST_CASE("a fenced command gets the host's environment without the credentials") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const HostEnvironment host(host_entries);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  CHECK(fenced_env(fence) == under(fence, ordinary));
  for (const std::string& name : credential_names) {
    INFO(name);
    CHECK(fenced_value(fence, name) == "unset");
  }
  CHECK(fenced_value(fence, "HOME") == "/home/dsh-test");
  CHECK(fenced_value(fence, "LANG") == "C.UTF-8");
  CHECK(FencedCommand({"env"}).removed_env_names() == credential_names);

  // danger-full-access applies no fence, and still withholds them.
  const PreparedFence none = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
  CHECK(fenced_env(none) == under(none, ordinary));
  CHECK(fenced_value(none, "MY_API_KEY") == "unset");
}

TEST_CASE("a fenced command gets exactly what keep_env, set_env, unset_env, clear_env and inherit_env say") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const HostEnvironment host(host_entries);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));

  CHECK(fenced_value(fence, "MY_API_KEY", [](FencedCommand& c) { c.keep_env("MY_API_KEY"); }) == "sk-test");
  CHECK(fenced_value(fence, "GITHUB_TOKEN", [](FencedCommand& c) { c.keep_env("MY_API_KEY"); }) == "unset");
  CHECK(
      fenced_env(fence, [](FencedCommand& c) { c.keep_env("MY_API_KEY"); }) ==
      under(fence, {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8", "MY_API_KEY=sk-test"}));
  CHECK(fenced_env(fence, [](FencedCommand& c) { c.set_env("LANG", "C").set_env("EXTRA", "x y").unset_env("HOME"); }) ==
        under(fence, {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "EXTRA=x y"}));
  CHECK(fenced_env(fence, [](FencedCommand& c) { c.clear_env().set_env("ONLY", "1"); }) == under(fence, {"ONLY=1"}));
  CHECK(fenced_env(fence, [](FencedCommand& c) { c.clear_env(); }) == under(fence, {}));
  CHECK(fenced_env(fence,
                   [](FencedCommand& c) {
                     c.keep_env("DB_PASSWORD").clear_env().set_env("ONLY", "1").inherit_env();
                   }) == under(fence, {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test", "LANG=C.UTF-8",
                                       "DB_PASSWORD=hunter2"}));

  FencedCommand kept({"env"});
  kept.keep_env("SSH_AUTH_SOCK").keep_env("aws_secret_access_key");
  CHECK(kept.removed_env_names() == Entries{"DB_PASSWORD", "GITHUB_TOKEN", "MY_API_KEY"});
  kept.clear_env();
  CHECK(kept.removed_env_names().empty());
  kept.inherit_env();
  CHECK(kept.removed_env_names() == Entries{"DB_PASSWORD", "GITHUB_TOKEN", "MY_API_KEY"});
}

TEST_CASE("the environment is read when the command is made, and travels with a moved command") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  std::optional<HostEnvironment> host(std::in_place, host_entries);
  FencedCommand made({"env", "-0"});
  made.set_env("A_LONGER_VALUE", std::string(200, 'v')).set_env("S", "short");
  host.reset(); // the host's environment changes afterwards
  FencedCommand moved = std::move(made);
  const Output output = run(moved, fence);
  REQUIRE(output.exit_code == 0);
  Entries expected = ordinary;
  expected.push_back("A_LONGER_VALUE=" + std::string(200, 'v'));
  expected.emplace_back("S=short");
  std::string joined;
  for (const std::string& entry : under(fence, expected)) {
    joined.append(entry).push_back('\0');
  }
  CHECK(output.out == joined);
}

TEST_CASE("exec_in_child passes the same environment") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const HostEnvironment host(host_entries);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  std::array<int, 2> ends{-1, -1};
  REQUIRE(::pipe2(ends.data(), O_CLOEXEC) == 0);
  dsh::UniqueFd reader{ends[0]};
  dsh::UniqueFd writer{ends[1]};
  FencedCommand command({"env", "-0"});
  command.keep_env("GITHUB_TOKEN").set_env("FROM_HOST", "1").redirect(STDOUT_FILENO, writer.get());
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    command.exec_in_child(fence);
  }
  writer.reset();
  std::string out;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ::ssize_t got = ::read(reader.get(), buffer.data(), buffer.size());
    if (got <= 0) {
      break;
    }
    out.append(buffer.data(), static_cast<std::size_t>(got));
  }
  CHECK(FencedCommand::wait_for(pid) == 0);
  std::string expected;
  for (const std::string& entry : under(fence, {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/dsh-test",
                                                "LANG=C.UTF-8", "GITHUB_TOKEN=ghp-test", "FROM_HOST=1"})) {
    expected.append(entry).push_back('\0');
  }
  CHECK(out == expected);
}

TEST_CASE("TMPDIR is the fence's temporary directory when it has one, unless the host set TMPDIR itself") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  Entries host_with_tmpdir = host_entries;
  host_with_tmpdir.push_back("TMPDIR=" + lab.tmp_area().string());
  const HostEnvironment host(host_with_tmpdir);
  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    INFO(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    const std::string value = fenced_value(fence, "TMPDIR");
    if (fence.report().temporary_directory.empty()) {
      CHECK(value == lab.tmp_area().string()); // today: the host's TMPDIR
    } else {
      CHECK(value == fence.report().temporary_directory.string());
    }
    CHECK(fenced_value(fence, "TMPDIR", [](FencedCommand& c) { c.set_env("TMPDIR", "/host/choice"); }) ==
          "/host/choice");
    const std::string cleared = fenced_value(fence, "TMPDIR", [](FencedCommand& c) { c.clear_env(); });
    CHECK(cleared == (fence.report().temporary_directory.empty() ? std::string("unset")
                                                                 : fence.report().temporary_directory.string()));
  }
}
