// Red-team attempts on the fence from the command's side: every way a fenced call could widen
// its own policy or a later call's (forge a mode switch in the session log, swap the workspace
// for a link to an outside directory, smuggle a directory in through $TMPDIR, make a device
// node, signal or talk to processes outside its own tree). Each attempt runs as root (and,
// where it means something, as the unprivileged user 65534), in read-only and in
// workspace-write, and checks that the outside target is byte-for-byte unchanged. The
// attempts Landlock cannot refuse on its own are pinned as documented limits at the end.
//
// Nothing here assumes /tmp is granted: the tests ask the report (the build tree itself may
// live under /tmp, and then /tmp holds the host executable and is never granted).
#include "support/landlock.hpp"
#include "support/session_log.hpp"
#include "support/users.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <array>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace dsh;
using namespace dsh::test;

namespace {

const std::vector<SandboxMode> fenced_modes{SandboxMode::read_only, SandboxMode::workspace_write};

/// Runs `body` in a forked child that has dropped to uid and gid 65534 first; returns what
/// `body` returned, 240 when the drop failed.
int as_nobody(const std::function<int()>& body) {
  return in_child(nullptr, [&body] { return dsh::test::become_nobody() ? body() : 240; });
}

/// Appends `line` to `path` (O_APPEND, never creating it); 0 or the errno.
int append(const std::filesystem::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<::ssize_t>(line.size());
  ::close(fd);
  return written ? 0 : EIO;
}

/// `PreparedFence::prepare` without $TMPDIR, so that the environment's value cannot change
/// which guard a note names, and with the shared temporary areas a host may opt into
/// (`FenceOptions::shared_temporary_areas`): what decides a later call must stay out of reach
/// even then. (By default they are not granted at all: tests/enforcement/test_landlock_redteam_neighbours.cpp.)
PreparedFence prepare(const dsh::ResolvedPolicy& policy, FenceOptions options = {}) {
  options.shared_temporary_areas = true;
  // Some attempts need a workspace other users can write (OpenWorkspace): trusted here, refused
  // by default (tests/enforcement/test_landlock_redteam_neighbours.cpp).
  options.allow_shared_directories = true;
  return dsh::detail::prepare_fence(policy, options, dsh::detail::probe_landlock(), nullptr);
}

/// In a fenced child: listens on the abstract unix socket `name` and connects to it; 0 or
/// the errno.
int own_abstract_socket(const std::string& name) {
  const dsh::UniqueFd server{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  const dsh::UniqueFd client{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<::socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(server.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(server.get(), 1) != 0) {
    return errno;
  }
  return errno_of(::connect(client.get(), reinterpret_cast<const sockaddr*>(&address), length));
}

/// The note the fence writes when it does not grant `area` because of `why`.
std::string skipped(const std::filesystem::path& area, const std::string& why) {
  return "skipped " + json_string_literal(area.native()) + ": " + why;
}

bool has_note(const dsh::FenceReport& report, const std::string& note) {
  return std::find(report.notes.begin(), report.notes.end(), note) != report.notes.end();
}

/// Why the fence skips /tmp when `guarded` (a phrase naming what decides later calls) is
/// what /tmp exposes: the host executable wins when it lives under /tmp (a build tree there).
std::string tmp_skip_reason(const std::string& guarded) {
  const std::filesystem::path host = dsh::canonical_path("/proc/self/exe");
  if (dsh::detail::is_within(host, dsh::canonical_path("/tmp"))) {
    return "the command could change the host executable " + json_string_literal(host.native()) +
           ", which decides later calls";
  }
  return guarded;
}

/// The call's own session log and its forged switch (`ForgeableLog`).
struct CallLog : ForgeableLog {
  CallLog(std::filesystem::path log, const std::filesystem::path& cwd)
      : ForgeableLog(std::move(log), "s-redteam", cwd) {}

  /// Shows the forged line is a real attack: appended unfenced to a copy, it switches the
  /// session to danger-full-access.
  [[nodiscard]] SandboxMode mode_after_unfenced_forgery() const {
    const std::filesystem::path copy = path.string() + ".control";
    write_file(copy, bytes);
    REQUIRE(unfenced([&] { return append(copy, forged); }) == 0);
    const dsh::PolicyOwner owner;
    const SandboxMode mode = owner.resolve(dsh::SessionLog::open(copy)).mode;
    std::filesystem::remove(copy);
    return mode;
  }
};

/// A listening socket owned by the test process (outside every fence).
struct Listener {
  dsh::UniqueFd fd;
  sockaddr_storage address{};
  ::socklen_t length = 0;

  /// Connects a new socket of the same family to the listener; 0 or the errno.
  [[nodiscard]] int connect_to() const {
    const int client = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (client < 0) {
      return errno;
    }
    const int error = errno_of(::connect(client, reinterpret_cast<const sockaddr*>(&address), length));
    ::close(client);
    return error;
  }
};

Listener abstract_listener(const std::string& name) {
  Listener listener{dsh::UniqueFd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)}};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size()); // sun_path[0] == '\0': abstract
  listener.length = static_cast<::socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  std::memcpy(&listener.address, &address, sizeof address);
  REQUIRE(::bind(listener.fd.get(), reinterpret_cast<const sockaddr*>(&address), listener.length) == 0);
  REQUIRE(::listen(listener.fd.get(), 16) == 0);
  return listener;
}

Listener pathname_listener(const std::filesystem::path& path) {
  Listener listener{dsh::UniqueFd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)}};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.native().size() < sizeof address.sun_path);
  std::memcpy(address.sun_path, path.c_str(), path.native().size());
  listener.length = static_cast<::socklen_t>(sizeof address);
  std::memcpy(&listener.address, &address, sizeof address);
  REQUIRE(::bind(listener.fd.get(), reinterpret_cast<const sockaddr*>(&address), listener.length) == 0);
  REQUIRE(::listen(listener.fd.get(), 16) == 0);
  return listener;
}

Listener tcp_listener() {
  Listener listener{dsh::UniqueFd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)}};
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener.fd.get(), 16) == 0);
  ::socklen_t length = sizeof address;
  REQUIRE(::getsockname(listener.fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
  listener.length = length;
  std::memcpy(&listener.address, &address, sizeof address);
  return listener;
}

/// Binds a fresh TCP socket to 127.0.0.1 on any port; 0 or the errno.
int tcp_bind() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int error = errno_of(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address));
  ::close(fd);
  return error;
}

/// A process outside every fence that waits to be killed; killed and reaped on destruction.
class Sleeper {
public:
  explicit Sleeper(bool as_nobody_user) {
    std::array<int, 2> ready{-1, -1};
    REQUIRE(::pipe2(ready.data(), O_CLOEXEC) == 0);
    const dsh::UniqueFd reader{ready[0]};
    dsh::UniqueFd writer{ready[1]};
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      if (as_nobody_user && (::setgid(nobody) != 0 || ::setuid(nobody) != 0)) {
        ::_exit(240);
      }
      (void)::write(writer.get(), "r", 1); // running as its final user: the test may start
      for (;;) {
        ::pause();
      }
    }
    writer.reset();
    char byte = 0;
    REQUIRE(::read(reader.get(), &byte, 1) == 1);
  }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;
  ~Sleeper() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  [[nodiscard]] ::pid_t pid() const noexcept { return pid_; }
  /// True while the process has not terminated.
  [[nodiscard]] bool alive() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

private:
  ::pid_t pid_ = -1;
};

/// A workspace directory a user other than root can reach: a fresh directory under /tmp
/// (mode 0755), holding `ws/`.
struct OpenWorkspace {
  TempDir dir{"/tmp"};
  std::filesystem::path workspace;
  OpenWorkspace() {
    ::chmod(dir.path().c_str(), 0755);
    workspace = dsh::canonical_path(dir.path()) / "ws";
    std::filesystem::create_directory(workspace);
    ::chmod(workspace.c_str(), 0777);
  }
  [[nodiscard]] dsh::ResolvedPolicy policy(SandboxMode mode) const {
    dsh::ResolvedPolicy policy;
    policy.mode = mode;
    policy.workspace_root = workspace;
    policy.mode_source = dsh::ModeSource::approved;
    policy.root_source = dsh::RootSource::session;
    return policy;
  }
};

} // namespace

// ---------------------------------------------------------------------------------------------
// Class 1: forge a danger-full-access switch in the session log
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: a forged mode switch appended to a log under /tmp is refused in every fenced mode") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const TempDir logs("/tmp");
  const CallLog log(dsh::canonical_path(logs.path()) / "session.jsonl", lab.workspace());
  REQUIRE(log.mode() == SandboxMode::workspace_write);
  REQUIRE(log.mode_after_unfenced_forgery() == SandboxMode::danger_full_access);
  FenceOptions options;
  options.session_log = log.path;
  options.temporary_root = lab.base() / "private"; // the session's directory goes with the laboratory
  options.session_cwd = lab.workspace();
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(lab.policy(mode), options);
    CHECK_FALSE(grants_directory_of(fence.report(), log.path));
    if (mode == SandboxMode::workspace_write) {
      CHECK(has_note(fence.report(),
                     skipped(dsh::canonical_path("/tmp"),
                             tmp_skip_reason("the command could change the session log " +
                                             json_string_literal(log.path.native()) + ", which decides later calls"))));
    }
    CHECK(fenced(fence, [&] { return append(log.path, log.forged); }) == EACCES);
    const dsh::test::Captured shell =
        dsh::test::bash(fence, "printf '%s' '" + log.forged + "' >> " + log.path.string(), lab.workspace(), lab.base());
    CHECK(shell.exit_code == 1);
    CHECK(read_file(log.path) == log.bytes);
    CHECK(log.mode() == SandboxMode::workspace_write);
  }
}

TEST_CASE("redteam: the forged switch is refused to the unprivileged user too") {
  DSH_REQUIRE_LANDLOCK();
  const OpenWorkspace open;
  const std::filesystem::path log_path = dsh::canonical_path(open.dir.path()) / "session.jsonl";
  const CallLog log(log_path, open.workspace);
  ::chmod(log_path.c_str(), 0666); // file permissions allow the append: any refusal is the fence's
  FenceOptions options;
  options.session_log = log.path;
  options.session_cwd = open.workspace;
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const int result = as_nobody([&] {
      try {
        const int appended = fenced(prepare(open.policy(mode), options), [&] { return append(log.path, log.forged); });
        (void)PreparedFence::remove_temporary_directory(options); // the session's, under nobody's default root
        return appended;
      } catch (...) {
        return 241;
      }
    });
    CHECK(result == EACCES);
    CHECK(read_file(log.path) == log.bytes);
  }
  // The control: the same user, unfenced, can append (so the fence is what refused it).
  const std::filesystem::path copy = log_path.string() + ".copy";
  write_file(copy, log.bytes);
  ::chmod(copy.c_str(), 0666);
  CHECK(as_nobody([&] { return append(copy, log.forged); }) == 0);
  CHECK(read_file(copy) == log.bytes + log.forged);
}

TEST_CASE("redteam: a log inside the workspace is refused in workspace-write and untouchable in read-only") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  std::filesystem::create_directory(lab.workspace() / ".dsh");
  const CallLog log(lab.workspace() / ".dsh" / "session.jsonl", lab.workspace());
  FenceOptions options;
  options.session_log = log.path;
  options.temporary_root = lab.base() / "private"; // the session's directory goes with the laboratory
  options.session_cwd = lab.workspace();
  try {
    (void)prepare(lab.policy(SandboxMode::workspace_write), options);
    FAIL("prepare did not throw");
  } catch (const LandlockError& error) {
    CHECK(std::string(error.what()) == "Landlock fence for workspace-write: refusing the workspace root " +
                                           json_string_literal(lab.workspace().native()) +
                                           ": the command could change the session log " +
                                           json_string_literal(log.path.native()) + ", which decides later calls");
  }
  const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only), options);
  CHECK(fenced(read_only, [&] { return append(log.path, log.forged); }) == EACCES);
  CHECK(read_file(log.path) == log.bytes);
  CHECK(log.mode() == SandboxMode::workspace_write);
}

TEST_CASE("redteam: a workspace that is an ancestor of the log or of the host executable is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  policy.workspace_root = lab.base();
  FenceOptions options;
  options.session_log = lab.base() / "logs" / "session.jsonl"; // not created yet: still protected
  options.temporary_root = lab.base() / "private";             // the session's directory goes with the laboratory
  CHECK_THROWS_WITH(prepare(policy, options),
                    "Landlock fence for workspace-write: refusing the workspace root " +
                        json_string_literal(lab.base().native()) + ": the command could change the session log " +
                        json_string_literal(options.session_log.native()) + ", which decides later calls");
  const std::filesystem::path host = dsh::canonical_path("/proc/self/exe");
  policy.workspace_root = host.parent_path();
  CHECK_THROWS_WITH(prepare(policy), "Landlock fence for workspace-write: refusing the workspace root " +
                                         json_string_literal(host.parent_path().native()) +
                                         ": the command could change the host executable " +
                                         json_string_literal(host.native()) + ", which decides later calls");
  policy.workspace_root = "/";
  CHECK_THROWS_WITH(prepare(policy),
                    "Landlock fence for workspace-write: refusing the workspace root \"/\": it would grant the whole "
                    "filesystem, including the session log, the workspace entry and the host, which decide later "
                    "calls");
  policy.mode = SandboxMode::read_only; // grants nothing: "/" as a read-only root is harmless
  CHECK(prepare(policy).report().grants.size() == 3);
}

TEST_CASE("redteam: a host-declared protected path is never granted, and the workspace cannot hold one") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const TempDir state("/tmp");
  const std::filesystem::path config = dsh::canonical_path(state.path()) / "host.json";
  write_file(config, "{\"mode\":\"read-only\"}");
  FenceOptions options;
  options.protected_paths = {config};
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
  CHECK(has_note(fence.report(),
                 skipped(dsh::canonical_path("/tmp"),
                         tmp_skip_reason("the command could change the protected path " +
                                         json_string_literal(config.native()) + ", which decides later calls"))));
  CHECK(fenced(fence, [&] { return errno_of(::truncate(config.c_str(), 0)); }) == EACCES);
  CHECK(fenced(fence, [&] { return errno_of(::unlink(config.c_str())); }) == EACCES);
  CHECK(read_file(config) == "{\"mode\":\"read-only\"}");

  options.protected_paths = {lab.workspace() / ".agent" / "state.json"};
  CHECK_THROWS_AS(prepare(lab.policy(SandboxMode::workspace_write), options), LandlockError);
}

// ---------------------------------------------------------------------------------------------
// Class 2: swap the workspace for a link to an outside directory
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: a workspace under /tmp cannot be renamed away and replaced by a link to /") {
  DSH_REQUIRE_LANDLOCK();
  const OpenWorkspace open;
  const std::filesystem::path ws = open.workspace;
  const std::filesystem::path moved = ws.string() + ".old";
  const dsh::PolicyOwner owner;
  const dsh::Session session(dsh::SessionHeader{"s-swap", ws.string(), 0});
  ::chmod(open.dir.path().c_str(), 0777); // the unprivileged user may rename entries there, unfenced
  struct stat before {};
  REQUIRE(::lstat(ws.c_str(), &before) == 0);
  const auto swap = [&] {
    if (::rename(ws.c_str(), moved.c_str()) != 0) {
      return errno;
    }
    return errno_of(::symlink("/", ws.c_str()));
  };
  // The control: unfenced, the swap works and the next resolution would root the session at "/".
  REQUIRE(unfenced(swap) == 0);
  CHECK(owner.resolve(session, SandboxMode::workspace_write).workspace_root == "/");
  std::filesystem::remove(ws);
  std::filesystem::rename(moved, ws);
  REQUIRE(as_nobody(swap) == 0);
  std::filesystem::remove(ws);
  std::filesystem::rename(moved, ws);
  REQUIRE(::lstat(ws.c_str(), &before) == 0);

  FenceOptions options;
  options.session_cwd = ws;
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(owner.resolve(session, mode), options);
    if (mode == SandboxMode::workspace_write) {
      CHECK(has_note(
          fence.report(),
          skipped(dsh::canonical_path("/tmp"),
                  tmp_skip_reason("the command could replace " + json_string_literal(ws.parent_path().native()) +
                                  " on the way to the workspace root " + json_string_literal(ws.native()) +
                                  ", which decides later calls"))));
    }
    CHECK(fenced(fence, swap) == EACCES);
    CHECK(as_nobody([&] { return fenced(fence, swap); }) == EACCES);
    struct stat after {};
    REQUIRE(::lstat(ws.c_str(), &after) == 0);
    CHECK(S_ISDIR(after.st_mode));
    CHECK(after.st_ino == before.st_ino);
    CHECK_FALSE(exists_nofollow(moved));
    CHECK(owner.resolve(session, SandboxMode::workspace_write).workspace_root == ws);
  }
}

TEST_CASE("redteam: a session cwd spelled through a link under /tmp keeps that link out of reach") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const TempDir links("/tmp");
  const std::filesystem::path link = dsh::canonical_path(links.path()) / "project";
  std::filesystem::create_directory_symlink(lab.workspace(), link);
  FenceOptions options;
  options.session_cwd = link;
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
  CHECK(has_note(fence.report(),
                 skipped(dsh::canonical_path("/tmp"),
                         tmp_skip_reason("the command could replace " +
                                         json_string_literal(dsh::canonical_path(links.path()).native()) +
                                         " on the way to the session cwd " + json_string_literal(link.native()) +
                                         ", which decides later calls"))));
  const auto retarget = [&] {
    if (::unlink(link.c_str()) != 0) {
      return errno;
    }
    return errno_of(::symlink("/etc", link.c_str()));
  };
  CHECK(fenced(fence, retarget) == EACCES);
  CHECK(std::filesystem::read_symlink(link) == lab.workspace());
}

TEST_CASE("redteam: a session cwd that runs through an entry inside the workspace is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  std::filesystem::create_directory(lab.workspace() / "sub");
  FenceOptions options;
  options.session_cwd = lab.workspace() / "sub" / "..";
  CHECK_THROWS_WITH(prepare(lab.policy(SandboxMode::workspace_write), options),
                    "Landlock fence for workspace-write: refusing the workspace root " +
                        json_string_literal(lab.workspace().native()) + ": the command could replace " +
                        json_string_literal((lab.workspace() / "sub").native()) + " on the way to the session cwd " +
                        json_string_literal(options.session_cwd.native()) + ", which decides later calls");
}

// ---------------------------------------------------------------------------------------------
// Class 3: hostile $TMPDIR
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: a hostile $TMPDIR is reported and never granted") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::detail::LandlockProbe probe = dsh::detail::probe_landlock();
  const std::filesystem::path etc = lab.outside() / "etc"; // an /etc-like outside directory
  std::filesystem::create_directory(etc);
  write_file(etc / "passwd", "root:x:0:0::/root:/bin/sh\n");
  const TempDir in_tmp("/tmp");
  const std::filesystem::path link = dsh::canonical_path(in_tmp.path()) / "tmp-link";
  std::filesystem::create_directory_symlink(etc, link);
  struct Row {
    std::string tmpdir;
    std::string why;
  };
  const std::vector<Row> rows{
      {etc.string(), "not beneath /tmp, /var/tmp or /dev/shm"},
      {"/etc", "not beneath /tmp, /var/tmp or /dev/shm"},
      {"/usr", "not beneath /tmp, /var/tmp or /dev/shm"},
      {"/proc", "not beneath /tmp, /var/tmp or /dev/shm"},
      {".", "not an absolute path"},
      {link.string(),
       "its canonical path " + json_string_literal(etc.native()) + " is not beneath /tmp, /var/tmp or /dev/shm"},
      {(lab.base() / "missing").string(), "not beneath /tmp, /var/tmp or /dev/shm"},
  };
  for (const SandboxMode mode : fenced_modes) {
    for (const Row& row : rows) {
      CAPTURE(dsh::to_string(mode), row.tmpdir);
      const PreparedFence fence =
          dsh::detail::prepare_fence(lab.policy(mode), {.shared_temporary_areas = true}, probe, row.tmpdir.c_str());
      for (const dsh::FenceGrant& grant : fence.report().grants) {
        CHECK_FALSE(dsh::detail::is_within(grant.path, etc));
        CHECK(grant.path != "/etc");
        CHECK(grant.path != "/usr");
        CHECK(grant.path != "/proc");
      }
      if (mode == SandboxMode::workspace_write) {
        CHECK(has_note(fence.report(), "skipped $TMPDIR " + json_string_literal(row.tmpdir) + ": " + row.why));
      }
      CHECK(fenced(fence, [&] { return append(etc / "passwd", "evil::0:0::/:/bin/sh\n"); }) == EACCES);
      CHECK(read_file(etc / "passwd") == "root:x:0:0::/root:/bin/sh\n");
    }
  }
}

TEST_CASE("redteam: a $TMPDIR under /tmp cannot be swapped for a link to an outside directory") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::detail::LandlockProbe probe = dsh::detail::probe_landlock();
  const TempDir in_tmp("/tmp");
  const std::filesystem::path tmpdir = dsh::canonical_path(in_tmp.path()) / "t";
  std::filesystem::create_directory(tmpdir);
  const auto swap = [&] {
    if (::rename(tmpdir.c_str(), (tmpdir.string() + ".old").c_str()) != 0) {
      return errno;
    }
    return errno_of(::symlink(lab.outside().c_str(), tmpdir.c_str()));
  };
  FenceOptions shared;
  shared.temporary_root = lab.base() / "private"; // one session: the same private directory for both calls
  shared.session_id = "swap";
  shared.shared_temporary_areas = true;
  const PreparedFence fence =
      dsh::detail::prepare_fence(lab.policy(SandboxMode::workspace_write), shared, probe, tmpdir.c_str());
  CHECK(grants_directory_of(fence.report(), tmpdir));
  CHECK_FALSE(grants_directory_of(fence.report(), in_tmp.path()));
  CHECK(has_note(fence.report(),
                 skipped(dsh::canonical_path("/tmp"),
                         tmp_skip_reason("the command could replace " +
                                         json_string_literal(dsh::canonical_path(in_tmp.path()).native()) +
                                         " on the way to $TMPDIR " + json_string_literal(tmpdir.native()) +
                                         ", which decides later calls"))));
  CHECK(fenced(fence, swap) == EACCES);
  CHECK(std::filesystem::is_directory(std::filesystem::symlink_status(tmpdir)));
  // The next call grants the same directory, not the outside one.
  const PreparedFence next =
      dsh::detail::prepare_fence(lab.policy(SandboxMode::workspace_write), shared, probe, tmpdir.c_str());
  CHECK(next.report().grants == fence.report().grants);
  CHECK_FALSE(grants_directory_of(next.report(), lab.outside()));
}

// ---------------------------------------------------------------------------------------------
// Class 4: device nodes
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: no block or character device node can be made, not even in the workspace") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path block = lab.workspace() / "disk";
  const std::filesystem::path character = lab.workspace() / "mem";
  const auto make_block = [&] { return errno_of(::mknod(block.c_str(), S_IFBLK | 0600, ::makedev(7, 0))); };
  const auto make_char = [&] { return errno_of(::mknod(character.c_str(), S_IFCHR | 0600, ::makedev(1, 1))); };
  // The control: root can make both here (so the refusal below is the fence's).
  REQUIRE(unfenced(make_block) == 0);
  REQUIRE(unfenced(make_char) == 0);
  std::filesystem::remove(block);
  std::filesystem::remove(character);
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(lab.policy(mode));
    constexpr std::uint64_t make_nodes = (1ULL << 6) | (1ULL << 11); // make_char, make_block
    for (const dsh::FenceGrant& grant : fence.report().grants) {
      CHECK((grant.rights & make_nodes) == 0);
      if (std::filesystem::is_directory(grant.path)) {
        CHECK((grant.rights & dsh::landlock_device_rights()) == 0); // nor ioctls of a device beneath
      }
    }
    CHECK(fenced(fence, make_block) == EACCES);
    CHECK(fenced(fence, make_char) == EACCES);
    CHECK_FALSE(exists_nofollow(block));
    CHECK_FALSE(exists_nofollow(character));
  }
}

// ---------------------------------------------------------------------------------------------
// Class 5: processes and sockets outside the command's own tree
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: the command cannot signal the host or another process of the same user") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  REQUIRE(dsh::landlock_abi() >= 6); // this suite's kernel scopes signals; older ones say so in the report
  const ::pid_t host = ::getpid();
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(lab.policy(mode));
    CHECK((fence.report().scoped & dsh::landlock_scope_signal) != 0);
    CHECK(fence.report().describe().find("; scoped: signal,abstract_unix_socket;") != std::string::npos);
    CHECK(unfenced([&] { return errno_of(::kill(host, 0)); }) == 0);
    CHECK(fenced(fence, [&] { return errno_of(::kill(host, SIGTERM)); }) == EPERM);
    CHECK(fenced(fence, [&] { return errno_of(::kill(host, 0)); }) == EPERM);

    const Sleeper other(false);
    CHECK(unfenced([&] { return errno_of(::kill(other.pid(), 0)); }) == 0);
    CHECK(fenced(fence, [&] { return errno_of(::kill(other.pid(), SIGKILL)); }) == EPERM);
    CHECK(other.alive());

    const Sleeper other_nobody(true);
    CHECK(as_nobody([&] { return errno_of(::kill(other_nobody.pid(), 0)); }) == 0);
    CHECK(as_nobody([&] {
            try {
              const PreparedFence own = prepare(lab.policy(SandboxMode::read_only));
              return fenced(own, [&] { return errno_of(::kill(other_nobody.pid(), SIGKILL)); });
            } catch (...) {
              return 241;
            }
          }) == EPERM);
    CHECK(other_nobody.alive());

    // Its own children stay reachable.
    CHECK(fenced(fence, [] {
            const ::pid_t child = ::fork();
            if (child == 0) {
              ::pause();
              ::_exit(0);
            }
            const int error = errno_of(::kill(child, SIGKILL));
            int status = 0;
            ::waitpid(child, &status, 0);
            return error != 0 ? error : (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : 99);
          }) == 0);
  }
}

TEST_CASE("redteam: the command cannot reach an abstract unix socket outside its own tree") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  REQUIRE(dsh::landlock_abi() >= 6);
  const Listener service = abstract_listener("dsh-redteam-" + std::to_string(::getpid()));
  CHECK(unfenced([&] { return service.connect_to(); }) == 0);
  CHECK(as_nobody([&] { return service.connect_to(); }) == 0);
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(lab.policy(mode));
    CHECK((fence.report().scoped & dsh::landlock_scope_abstract_unix_socket) != 0);
    CHECK(fenced(fence, [&] { return service.connect_to(); }) == EPERM);
    CHECK(as_nobody([&] { return fenced(fence, [&] { return service.connect_to(); }); }) == EPERM);
    // A socket of its own still works.
    CHECK(fenced(fence, [] { return own_abstract_socket("dsh-redteam-own-" + std::to_string(::getpid())); }) == 0);
  }
}

TEST_CASE("redteam: TCP is refused with FenceOptions::deny_tcp and allowed without it") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  REQUIRE(dsh::landlock_abi() >= 4);
  const Listener service = tcp_listener();
  FenceOptions deny;
  deny.deny_tcp = true;
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence refusing = prepare(lab.policy(mode), deny);
    CHECK(refusing.report().handled_net == (dsh::landlock_net_bind_tcp | dsh::landlock_net_connect_tcp));
    CHECK(refusing.report().describe().find("; refused: bind_tcp,connect_tcp;") != std::string::npos);
    CHECK(fenced(refusing, [&] { return service.connect_to(); }) == EACCES);
    CHECK(fenced(refusing, tcp_bind) == EACCES);
    // Documented behaviour: the model text promises nothing about the network, so by default
    // a fenced command reaches loopback services.
    const PreparedFence default_fence = prepare(lab.policy(mode));
    CHECK(default_fence.report().handled_net == 0);
    CHECK(fenced(default_fence, [&] { return service.connect_to(); }) == 0);
    CHECK(fenced(default_fence, tcp_bind) == 0);
  }
}

TEST_CASE("redteam: what the kernel cannot scope or refuse is said, or refused before anything runs") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::detail::LandlockProbe abi5{5, 0};
  const PreparedFence old = dsh::detail::prepare_fence(lab.policy(SandboxMode::read_only), {}, abi5, nullptr);
  CHECK(old.report().scoped == 0);
  CHECK(old.report().notes ==
        std::vector<std::string>{
            "signals and abstract unix sockets are not scoped: Landlock ABI 5 cannot (ABI 6, Linux 6.12, can)"});
  FenceOptions deny;
  deny.deny_tcp = true;
  CHECK_THROWS_WITH(dsh::detail::prepare_fence(lab.policy(SandboxMode::workspace_write), deny, {3, 0}, nullptr),
                    "Landlock fence for workspace-write: FenceOptions::deny_tcp asks to refuse TCP bind and connect, "
                    "which needs Landlock ABI 4 (Linux 6.7); this kernel has ABI 3");
}

// ---------------------------------------------------------------------------------------------
// Extra writable directories: the host's choice, under the same rule as a temporary area
// ---------------------------------------------------------------------------------------------

TEST_CASE("redteam: FenceOptions::extra_writable grants a directory only where it exposes nothing") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  FenceOptions options;
  options.extra_writable = {lab.outside(), lab.sibling(), "relative/dir"};
  options.session_log = lab.sibling() / "session.jsonl";
  options.temporary_root = lab.base() / "private"; // the session's directory goes with the laboratory
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
  CHECK(grants_directory_of(fence.report(), lab.outside()));
  CHECK_FALSE(grants_directory_of(fence.report(), lab.sibling()));
  CHECK(has_note(fence.report(), skipped(lab.sibling(), "the command could change the session log " +
                                                            json_string_literal(options.session_log.native()) +
                                                            ", which decides later calls")));
  CHECK(has_note(fence.report(), "skipped \"relative/dir\": not an absolute path"));
  CHECK(fenced(fence, [&] { return errno_of(::mkdir((lab.outside() / "d").c_str(), 0700)); }) == 0);
  CHECK(fenced(fence, [&] { return errno_of(::mkdir((lab.sibling() / "d").c_str(), 0700)); }) == EACCES);
  CHECK_FALSE(exists_nofollow(lab.sibling() / "d"));
}

// ---------------------------------------------------------------------------------------------
// Documented limits: what Landlock does not close on its own (README "Threat model")
// ---------------------------------------------------------------------------------------------

TEST_CASE("limit: a pathname unix socket of a listening service is reachable from every fenced mode") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const TempDir run_dir("/tmp"); // a short path: sun_path holds 108 bytes
  const Listener service = pathname_listener(run_dir / "service.sock");
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = prepare(lab.policy(mode));
    // Connecting is not a filesystem write Landlock checks (only making the socket is).
    CHECK(fenced(fence, [&] { return service.connect_to(); }) == 0);
  }
}

TEST_CASE("limit: workspace-write lets the command plant files that other programs run later") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  std::filesystem::create_directories(lab.workspace() / ".git" / "hooks");
  write_file(lab.workspace() / ".git" / "config", "[core]\n");
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write));
  const dsh::test::Captured run = dsh::test::bash(fence,
                                                  "printf '#!/bin/sh\\ntouch /planted\\n' > .git/hooks/pre-commit && "
                                                  "printf '[core]\\n\\thooksPath = .git/hooks\\n' >> .git/config",
                                                  lab.workspace(), lab.base());
  CHECK(run.exit_code == 0);
  CHECK(read_file(lab.workspace() / ".git" / "hooks" / "pre-commit") == "#!/bin/sh\ntouch /planted\n");
  CHECK(read_file(lab.workspace() / ".git" / "config") == "[core]\n[core]\n\thooksPath = .git/hooks\n");
  // read-only refuses the same.
  const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only));
  CHECK(dsh::test::bash(read_only, "echo x >> .git/config", lab.workspace(), lab.base()).exit_code == 1);
}
