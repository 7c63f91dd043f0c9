// Red-team attempts on what lies BESIDE a fenced call: other sessions' logs and workspaces kept
// in the shared temporary areas, other sessions' private temporary directories, the user's
// terminal, the directories the host's dynamic loader reads, and the session log reached by
// identity rather than by name (a bind mount, a hard link). The command is the attacker, the
// host is trusted, and so is the kernel; other local users are not (a squatted /tmp entry).
//
// Each attempt runs as a hostile command would run it (bash under FencedCommand, or a forked
// child after fence.apply()), in read-only and workspace-write, as root and, where file
// permissions would otherwise stop it, with an unprivileged host (uid 65534 prepares the fence
// and runs the command itself). Each refused attempt is first shown possible without the fence
// (a control run), and each checks afterwards that the outside target is unchanged. What the
// fence cannot close today is pinned at the end as a documented limit.
//
// Fences are prepared with an empty host environment unless a test says otherwise, so that the
// test process's own $TMPDIR, $XDG_RUNTIME_DIR or loader variables cannot change a guard.
#include "support/hosts.hpp"
#include "support/landlock.hpp"
#include "support/scoped.hpp"
#include "support/session_log.hpp"
#include "support/terminal.hpp"

#include <dsh/detail/text/concat.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <termios.h>
#include <unistd.h>

using namespace dsh;
using dsh::detail::HostEnvironment;
using namespace dsh::test;

namespace {

const std::array<SandboxMode, 2> fenced_modes{SandboxMode::read_only, SandboxMode::workspace_write};

/// `prepare` on the running kernel with `environment` as the host's (by default: nothing set).
PreparedFence prepare(const dsh::ResolvedPolicy& policy, const FenceOptions& options = {},
                      const HostEnvironment& environment = {}) {
  return dsh::detail::prepare_fence(policy, options, dsh::detail::probe_landlock(), environment);
}

/// The message of the LandlockError `action` throws, or "no error".
std::string landlock_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const LandlockError& error) {
    return error.what();
  }
  return "no error";
}

/// Appends `text` to `path` (O_APPEND, never creating it); 0 or the errno.
int append(const std::filesystem::path& path, const std::string& text) {
  const dsh::UniqueFd fd{::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC)};
  if (!fd) {
    return errno;
  }
  return ::write(fd.get(), text.data(), text.size()) == static_cast<::ssize_t>(text.size()) ? 0 : EIO;
}

/// Creates `path` exclusively; 0 or the errno.
int create(const std::filesystem::path& path) {
  const dsh::UniqueFd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  return fd ? 0 : errno;
}

/// The names in `directory`, sorted ("<missing>" when it cannot be listed).
std::vector<std::string> listing(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    names.push_back(entry.path().filename().native());
  }
  if (error) {
    return {"<missing>"};
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// The permission bits of `path` in octal ("0700"), or "<missing>".
std::string mode_of(const std::filesystem::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return "<missing>";
  }
  std::array<char, 8> text{};
  std::snprintf(text.data(), text.size(), "%04o", static_cast<unsigned>(info.st_mode & 07777));
  return text.data();
}

/// The owner of `path`, or -1.
long owner_of(const std::filesystem::path& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 ? static_cast<long>(info.st_uid) : -1L;
}

/// The inode of `path` (symlinks not followed), or 0.
::ino_t inode_of(const std::filesystem::path& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 ? info.st_ino : 0;
}

/// The rest of the last line of `text` that starts with `key`, or "".
std::string value_of(const std::string& text, const std::string& key) {
  const std::string lines = "\n" + text;
  const std::size_t at = lines.rfind("\n" + key);
  if (at == std::string::npos) {
    return {};
  }
  const std::size_t from = at + 1 + key.size();
  return lines.substr(from, lines.find('\n', from) - from);
}

/// The default temporary root a host of `uid` gets without $XDG_RUNTIME_DIR.
std::filesystem::path default_root(::uid_t uid) { return "/tmp/dsh-sandbox-policy-" + std::to_string(uid); }

/// Removes, on destruction, the default temporary roots that did not exist when it was made
/// (and only when they are empty again: another test process may be using one).
class DefaultRootsCleanup {
public:
  DefaultRootsCleanup() {
    for (const ::uid_t uid : {::geteuid(), nobody}) {
      if (!exists_nofollow(default_root(uid))) {
        made_.push_back(default_root(uid));
      }
    }
  }
  DefaultRootsCleanup(const DefaultRootsCleanup&) = delete;
  DefaultRootsCleanup& operator=(const DefaultRootsCleanup&) = delete;
  ~DefaultRootsCleanup() {
    for (const std::filesystem::path& root : made_) {
      ::rmdir(root.c_str());
    }
  }

private:
  std::vector<std::filesystem::path> made_;
};

/// A session's log and its forged switch (`ForgeableLog`), for the sessions beside the call.
struct SessionFile : ForgeableLog {
  using ForgeableLog::ForgeableLog;

  /// The mode a host resolves after `forged` is appended to a copy of the log: the forgery is
  /// a real attack when this is danger-full-access.
  [[nodiscard]] SandboxMode mode_after_forgery() const { return mode_of_copy(bytes + forged); }
};

/// The grants of `report`, one line each ("<path> <rights>"), then its temporary directory.
std::string grants_of(const dsh::FenceReport& report) {
  std::string text;
  for (const dsh::FenceGrant& grant : report.grants) {
    text += "grant " + grant.path.native() + " " + dsh::landlock_rights_to_string(grant.rights) + "\n";
  }
  return text + "temporary " + report.temporary_directory.native() + "\n";
}

/// What `grants_of` shows for a fence of `mode` over `workspace` whose temporary directory is
/// `temporary` (workspace-write): the null devices, then the workspace and the directory.
std::string expected_grants(SandboxMode mode, const std::filesystem::path& workspace,
                            const std::filesystem::path& temporary) {
  const int abi = dsh::landlock_abi();
  const std::string device = dsh::landlock_rights_to_string(dsh::landlock_write_rights(abi) &
                                                            dsh::landlock_file_rights() & ~dsh::landlock_resolve_unix);
  const std::string directory =
      dsh::landlock_rights_to_string(dsh::landlock_write_rights(abi) & ~dsh::landlock_device_rights());
  std::string text;
  for (const char* null_device : {"/dev/null", "/dev/zero", "/dev/full"}) {
    text += std::string("grant ") + null_device + " " + device + "\n";
  }
  if (mode == SandboxMode::workspace_write) {
    text += "grant " + workspace.native() + " " + directory + "\n";
    text += "grant " + temporary.native() + " " + directory + "\n";
    return text + "temporary " + temporary.native() + "\n";
  }
  return text + "temporary \n";
}

/// Each line of `lines` (each ends in a newline) with `prefix` before it.
std::string prefixed(const std::string& prefix, const std::string& lines) {
  std::string text;
  for (std::size_t at = 0; at < lines.size();) {
    const std::size_t end = std::min(lines.find('\n', at), lines.size() - 1);
    text += prefix + lines.substr(at, end + 1 - at);
    at = end + 1;
  }
  return text;
}

/// True when `name` is "<prefix>" followed by 16 lower-case hexadecimal digits.
bool named_with_digest(const std::string& name, const std::string& prefix) {
  return name.size() == prefix.size() + 16 && name.rfind(prefix, 0) == 0 &&
         name.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos;
}

} // namespace

// =============================================================================================
// Class 1: other sessions' files in the shared temporary areas
// =============================================================================================

namespace {

/// Sessions B and C of the same user, kept in a fresh directory of a shared temporary area:
/// B's log (switched to workspace-write, with the line that would forge it) and C's workspace.
struct Neighbourhood {
  TempDir dir;
  std::filesystem::path home;
  std::filesystem::path c_workspace;
  SessionFile b_log;
  ::ino_t c_inode = 0;

  explicit Neighbourhood(const std::filesystem::path& area)
      : dir(area), home(dsh::canonical_path(dir.path())), c_workspace(home / "c-ws"),
        b_log(home / "b.jsonl", "s-b", home / "b-ws") {
    std::filesystem::create_directory(c_workspace);
    c_inode = inode_of(c_workspace);
  }

  void give_to_nobody() const {
    hand_to_nobody(home);
    hand_to_nobody(c_workspace);
    hand_to_nobody(b_log.path);
  }

  /// The variables the hostile scripts read.
  [[nodiscard]] std::vector<std::string> variables(const std::filesystem::path& outside) const {
    return {"B_LOG=" + b_log.path.string(), "C_WS=" + c_workspace.string(), "FORGED=" + b_log.forged,
            "OUTSIDE=" + outside.string()};
  }
};

const std::string forge_script = R"(printf '%s' "$FORGED" >> "$B_LOG")";
const std::string swap_script = R"(mv "$C_WS" "$C_WS.old" && ln -s "$OUTSIDE" "$C_WS")";
const std::string shm_script = R"(: > "$SHM_FILE")";

} // namespace

TEST_CASE("neighbours: another session's log and workspace under /tmp and /var/tmp, and /dev/shm, are out of reach") {
  DSH_REQUIRE_LANDLOCK();
  const DefaultRootsCleanup roots;
  const Lab lab;
  std::vector<std::unique_ptr<Neighbourhood>> hoods;
  for (const char* area : {"/tmp", "/var/tmp"}) {
    hoods.push_back(std::make_unique<Neighbourhood>(area));
    const Neighbourhood& hood = *hoods.back();
    CHECK(hood.b_log.forged.rfind(R"({"type":"sandbox/mode",)", 0) == 0);
    CHECK(hood.b_log.forged.find(R"("danger-full-access")") != std::string::npos);
    CHECK(hood.b_log.mode_after_forgery() == SandboxMode::danger_full_access);
  }
  const std::filesystem::path shm_file = "/dev/shm/dsh-neighbours-" + std::to_string(::getpid());

  // Runs in the host: the control runs (each undone at once), then every attempt under the fence
  // of each mode, with the report's grants.
  const auto attempts = [&]() {
    std::string text;
    for (const auto& hood : hoods) {
      const std::vector<std::string> variables = hood->variables(lab.outside());
      const int forge = control_shell(forge_script, lab.workspace(), variables);
      const bool forged = read_file(hood->b_log.path) == hood->b_log.bytes + hood->b_log.forged;
      write_file(hood->b_log.path, hood->b_log.bytes);
      const int swap = control_shell(swap_script, lab.workspace(), variables);
      const bool swapped = std::filesystem::is_symlink(hood->c_workspace);
      if (swapped) { // undone: the link out, the directory back under its name
        std::filesystem::remove(hood->c_workspace);
        std::filesystem::rename(hood->c_workspace.string() + ".old", hood->c_workspace);
      }
      text += "control " + hood->home.native() + ": forge=" + std::to_string(forge) + std::to_string(forged) +
              " swap=" + std::to_string(swap) + std::to_string(swapped) + "\n";
    }
    const int shm = control_shell(shm_script, lab.workspace(), {"SHM_FILE=" + shm_file.string()});
    text += "control /dev/shm: " + std::to_string(shm) + std::to_string(exists_nofollow(shm_file)) + "\n";
    std::filesystem::remove(shm_file);

    for (const SandboxMode mode : fenced_modes) {
      const PreparedFence fence = prepare(lab.policy(mode));
      const std::string name(dsh::to_string(mode));
      text += prefixed(name + " ", grants_of(fence.report()));
      text += name + " notes " + std::to_string(fence.report().notes.size()) + "\n";
      for (const auto& hood : hoods) {
        const std::vector<std::string> variables = hood->variables(lab.outside());
        const Shell forge = shell(fence, forge_script, lab.workspace(), variables);
        const Shell swap = shell(fence, swap_script, lab.workspace(), variables);
        const int appended = fenced(fence, [&] { return append(hood->b_log.path, hood->b_log.forged); });
        const int renamed = fenced(fence, [&] {
          return errno_of(::rename(hood->c_workspace.c_str(), (hood->c_workspace.string() + ".old").c_str()));
        });
        const int linked = fenced(
            fence, [&] { return errno_of(::symlink(lab.outside().c_str(), (hood->home / "c-ws.link").c_str())); });
        text += name + " " + hood->home.native() + ": forge=" + std::to_string(forge.status) +
                " swap=" + std::to_string(swap.status) + " append=" + std::to_string(appended) +
                " rename=" + std::to_string(renamed) + " symlink=" + std::to_string(linked) + "\n";
      }
      const Shell shm_shell = shell(fence, shm_script, lab.workspace(), {"SHM_FILE=" + shm_file.string()});
      const int made = fenced(fence, [&] { return create(shm_file); });
      text += name + " /dev/shm: shell=" + std::to_string(shm_shell.status) + " create=" + std::to_string(made) + "\n";
    }
    return text;
  };

  for (const bool unprivileged : host_table) {
    CAPTURE(unprivileged);
    if (unprivileged) {
      open_lab_to_nobody(lab);
      for (const auto& hood : hoods) {
        hood->give_to_nobody();
      }
    }
    const std::string seen = as_host(unprivileged, attempts);
    CAPTURE(seen);
    // The private directory of this fence, which names no session: a call- directory beneath
    // the host's own default root, removed with the fence.
    const std::filesystem::path temporary = value_of(seen, "workspace-write temporary ");
    CHECK(temporary.parent_path() == default_root(uid_of_host(unprivileged)));
    CHECK(named_with_digest(temporary.filename().native(), "call-"));
    CHECK_FALSE(exists_nofollow(temporary));

    std::string expected;
    for (const auto& hood : hoods) {
      expected += "control " + hood->home.native() + ": forge=01 swap=01\n";
    }
    expected += "control /dev/shm: 01\n";
    for (const SandboxMode mode : fenced_modes) {
      const std::string name(dsh::to_string(mode));
      // Neither /tmp, /var/tmp nor /dev/shm: only the null devices, the workspace and the
      // session's private directory; no area is even considered, so no note skips one.
      expected += prefixed(name + " ", expected_grants(mode, lab.workspace(), temporary));
      // Only what the kernel cannot do is noted (scopes below ABI 6, device ioctls below 5).
      expected += name + " notes " +
                  std::to_string((dsh::landlock_abi() < 6 ? 1 : 0) + (dsh::landlock_abi() < 5 ? 1 : 0)) + "\n";
      for (const auto& hood : hoods) {
        expected += name + " " + hood->home.native() + ": forge=1 swap=1 append=13 rename=13 symlink=13\n";
      }
      expected += name + " /dev/shm: shell=1 create=13\n";
    }
    CHECK(seen == expected);
    for (const auto& hood : hoods) {
      CHECK(read_file(hood->b_log.path) == hood->b_log.bytes);
      CHECK(std::filesystem::is_directory(std::filesystem::symlink_status(hood->c_workspace)));
      CHECK(inode_of(hood->c_workspace) == hood->c_inode);
      CHECK_FALSE(exists_nofollow(hood->c_workspace.string() + ".old"));
      CHECK_FALSE(exists_nofollow(hood->home / "c-ws.link"));
    }
    CHECK_FALSE(exists_nofollow(shm_file));
    std::error_code ignored;
    std::filesystem::remove(shm_file, ignored); // should the fence ever let it through
  }
}

// =============================================================================================
// Class 2: the session's private temporary directory
// =============================================================================================

TEST_CASE("neighbours: mktemp works in the private directory beside a session log and a protected path under /tmp") {
  DSH_REQUIRE_LANDLOCK();
  const DefaultRootsCleanup roots;
  const Lab lab;
  const TempDir host_state("/tmp");
  const std::filesystem::path state = dsh::canonical_path(host_state.path());
  REQUIRE(::chmod(state.c_str(), 0755) == 0);
  const SessionFile log(state / "session.jsonl", "s-mktemp", lab.workspace());
  const std::filesystem::path config = state / "host.json";
  write_file(config, "{\"mode\":\"read-only\"}");
  const std::string mktemp = R"(f=$(mktemp -p "$DIR") && echo ok > "$f" && cat "$f")";

  const auto run = [&]() {
    ::unsetenv("XDG_RUNTIME_DIR"); // the public prepare reads the environment: the /tmp default root
    FenceOptions options;
    options.session_log = log.path;
    options.session_cwd = lab.workspace();
    options.protected_paths = {config};
    std::string text;
    {
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write), options);
      const std::filesystem::path directory = fence.report().temporary_directory;
      text += "temporary " + directory.native() + "\n";
      text += "mode " + mode_of(directory) + " owner " + std::to_string(owner_of(directory)) + "\n";
      const Shell made = shell(fence, mktemp, lab.workspace(), {"DIR=" + directory.string()});
      text += "mktemp " + std::to_string(made.status) + " " + made.out;
      const std::vector<std::string> files = listing(directory);
      text += "files " + std::to_string(files.size()) +
              (files.size() == 1 && files[0].rfind("tmp.", 0) == 0 ? " tmp.*" : " other") + "\n";
      // The shared area and the host's state directory stay closed.
      text += "in /tmp " + std::to_string(shell(fence, mktemp, lab.workspace(), {"DIR=/tmp"}).status) + "\n";
      text += "beside the log " +
              std::to_string(shell(fence, mktemp, lab.workspace(), {"DIR=" + state.string()}).status) + "\n";
      text += "control in /tmp " +
              std::to_string(control_shell(mktemp + R"( && rm "$f")", lab.workspace(), {"DIR=/tmp"})) + "\n";
    }
    const std::filesystem::path directory = value_of(text, "temporary ");
    text += "kept " + std::to_string(exists_nofollow(directory)) + "\n";
    const bool removed = PreparedFence::remove_temporary_directory(options);
    text += "removed " + std::to_string(removed) + " " + std::to_string(exists_nofollow(directory)) + "\n";
    return text;
  };

  over_host_table(lab, [&](bool unprivileged) {
    const std::string seen = as_host(unprivileged, run);
    CAPTURE(seen);
    const ::uid_t uid = uid_of_host(unprivileged);
    const std::filesystem::path expected_directory =
        default_root(uid) / ("log-" + dsh::detail::name_digest(log.path.native()));
    CHECK(seen == "temporary " + expected_directory.native() + "\nmode 0700 owner " + std::to_string(uid) +
                      "\nmktemp 0 ok\nfiles 1 tmp.*\nin /tmp 1\nbeside the log 1\ncontrol in /tmp 0\nkept 1\n"
                      "removed 1 0\n");
  });
  CHECK(read_file(log.path) == log.bytes);
  CHECK(read_file(config) == "{\"mode\":\"read-only\"}");
  CHECK(listing(state) == std::vector<std::string>{"host.json", "session.jsonl"});
}

TEST_CASE("neighbours: a session finds its private directory again, and another session's stays out of reach") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const auto run = [&]() {
    FenceOptions a;
    a.temporary_root = lab.outside() / "private";
    a.session_id = "session-a";
    FenceOptions b = a;
    b.session_id = "session-b";
    std::string text;
    std::filesystem::path first;
    {
      const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), a);
      first = fence.report().temporary_directory;
      text += "first " + first.native() + " " +
              std::to_string(
                  shell(fence, R"(echo left > "$DIR/left.txt")", lab.workspace(), {"DIR=" + first.string()}).status) +
              "\n";
    }
    const PreparedFence again = prepare(lab.policy(SandboxMode::workspace_write), a);
    const std::filesystem::path second = again.report().temporary_directory;
    const Shell found = shell(again, R"(cat "$DIR/left.txt")", lab.workspace(), {"DIR=" + second.string()});
    text += "second " + second.native() + " " + std::to_string(found.status) + " " + found.out;

    const PreparedFence other = prepare(lab.policy(SandboxMode::workspace_write), b);
    const std::filesystem::path theirs = other.report().temporary_directory;
    text += "other " + theirs.native() + " " +
            std::to_string(
                shell(other, R"(echo b-data > "$DIR/b.txt")", lab.workspace(), {"DIR=" + theirs.string()}).status) +
            "\n";
    text += "mode " + mode_of(theirs) + " owner " + std::to_string(owner_of(theirs)) + "\n";

    // Session A's command against B's directory, then the same without a fence.
    const std::vector<std::string> variables{"B_DIR=" + theirs.string()};
    const std::vector<std::string> scripts{R"(echo forged > "$B_DIR/forged.txt")", R"(echo forged >> "$B_DIR/b.txt")",
                                           R"(rm -f "$B_DIR/b.txt")", R"(mv "$B_DIR" "$B_DIR.x")",
                                           R"(ln -s / "$B_DIR/root")"};
    for (const std::string& script : scripts) {
      text += "attack " + std::to_string(shell(again, script, lab.workspace(), variables).status) + "\n";
    }
    text += "create " + std::to_string(fenced(again, [&] { return create(theirs / "planted"); })) + "\n";
    text += "listing " + std::to_string(listing(theirs).size()) + " " + read_file(theirs / "b.txt");
    const int control = control_shell(scripts[0], lab.workspace(), variables);
    text += "control " + std::to_string(control) + " " + std::to_string(exists_nofollow(theirs / "forged.txt")) + "\n";
    std::filesystem::remove(theirs / "forged.txt");
    // Pinned limit: reading is never fenced, and B's directory is the same user's, so A's command
    // reads what B left there. The namespace layer, which shows a command only its own
    // session's directory, will close it; keep secrets out of temporary files until then.
    const Shell read = shell(again, R"(cat "$B_DIR/b.txt")", lab.workspace(), variables);
    text += "read " + std::to_string(read.status) + " " + read.out;

    // A read-only call of session A gets no private directory, and writes in none.
    const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only), a);
    text += "read-only temporary \"" + read_only.report().temporary_directory.native() + "\" " +
            std::to_string(
                shell(read_only, R"(echo x > "$DIR/ro.txt")", lab.workspace(), {"DIR=" + second.string()}).status) +
            "\n";
    const bool removed_a = PreparedFence::remove_temporary_directory(a);
    const bool removed_b = PreparedFence::remove_temporary_directory(b);
    text += "cleanup " + std::to_string(removed_a) + std::to_string(removed_b) + " " +
            std::to_string(listing(lab.outside() / "private").size()) + "\n";
    return text;
  };
  over_host_table(lab, [&](bool unprivileged) {
    const std::string seen = as_host(unprivileged, run);
    const std::filesystem::path root = lab.outside() / "private";
    const std::string mine = (root / ("session-" + dsh::detail::name_digest("session-a"))).native();
    const std::string theirs = (root / ("session-" + dsh::detail::name_digest("session-b"))).native();
    CHECK(seen == "first " + mine + " 0\nsecond " + mine + " 0 left\nother " + theirs + " 0\nmode 0700 owner " +
                      std::to_string(uid_of_host(unprivileged)) +
                      "\nattack 1\nattack 1\nattack 1\nattack 1\nattack 1\ncreate 13\nlisting 1 b-data\n"
                      "control 0 1\nread 0 b-data\nread-only temporary \"\" 1\ncleanup 11 0\n");
    std::filesystem::remove_all(root);
  });
}

TEST_CASE("neighbours: a fence without a session removes its call- directory; remove_temporary_directory a session's") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  FenceOptions options;
  options.temporary_root = lab.base() / "private";
  std::filesystem::path first;
  std::filesystem::path second;
  {
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
    const PreparedFence other = prepare(lab.policy(SandboxMode::workspace_write), options);
    first = fence.report().temporary_directory;
    second = other.report().temporary_directory;
    CHECK(first.parent_path() == lab.base() / "private");
    CHECK(named_with_digest(first.filename().native(), "call-"));
    CHECK(named_with_digest(second.filename().native(), "call-"));
    CHECK(first != second);
    CHECK(mode_of(lab.base() / "private") == "0700");
    CHECK(shell(fence, R"(mkdir "$DIR/sub" && echo x > "$DIR/sub/f")", lab.workspace(), {"DIR=" + first.string()})
              .status == 0);
    CHECK(read_file(first / "sub" / "f") == "x\n");
    CHECK(fenced(other, [&] { return create(first / "from-other"); }) == EACCES);
  }
  CHECK_FALSE(exists_nofollow(first));
  CHECK_FALSE(exists_nofollow(second));
  CHECK(listing(lab.base() / "private").empty());

  // A session's directory outlives its fences until the host removes it.
  options.session_id = "kept";
  const std::filesystem::path kept = lab.base() / "private" / ("session-" + dsh::detail::name_digest("kept"));
  {
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
    CHECK(fence.report().temporary_directory == kept);
    CHECK(shell(fence, R"(echo x > "$DIR/f")", lab.workspace(), {"DIR=" + kept.string()}).status == 0);
  }
  CHECK(read_file(kept / "f") == "x\n");
  CHECK(PreparedFence::remove_temporary_directory(options));
  CHECK_FALSE(exists_nofollow(kept));
  CHECK(PreparedFence::remove_temporary_directory(options)); // nothing left to remove

  // Named by the session log's canonical path when there is no session id.
  options.session_id.clear();
  options.session_log = lab.outside() / "." / "session.jsonl";
  const std::filesystem::path by_log =
      lab.base() / "private" / ("log-" + dsh::detail::name_digest((lab.outside() / "session.jsonl").native()));
  {
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options);
    CHECK(fence.report().temporary_directory == by_log);
  }
  CHECK(exists_nofollow(by_log));
  CHECK(PreparedFence::remove_temporary_directory(options));
  CHECK_FALSE(exists_nofollow(by_log));
  CHECK(listing(lab.base() / "private").empty());

  CHECK_THROWS_WITH(PreparedFence::remove_temporary_directory({}),
                    "PreparedFence::remove_temporary_directory: expected FenceOptions naming a session (session_id "
                    "or session_log), got neither");
  FenceOptions relative;
  relative.session_id = "kept";
  relative.temporary_root = "private";
  CHECK_THROWS_WITH(PreparedFence::remove_temporary_directory(relative),
                    "FenceOptions::temporary_root: expected an absolute directory, got \"private\"");
  CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), relative); }) ==
        "FenceOptions::temporary_root: expected an absolute directory, got \"private\"");
}

TEST_CASE("neighbours: a temporary root of another user, or writable by group or others, is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::string digest = dsh::detail::name_digest("squat");
  const auto refusal = [](const std::filesystem::path& root, const std::filesystem::path& where,
                          const std::string& why) {
    return "cannot make the session's private temporary directory " +
           json_string_literal((root / ("session-" + dsh::detail::name_digest("squat"))).native()) + ": " +
           json_string_literal(where.native()) + ": " + why;
  };
  struct Row {
    std::string name;
    ::mode_t mode;
    ::uid_t owner;
  };
  // A root another local user made first (the /tmp squatting attack), or one others may write.
  const std::vector<Row> rows{{"foreign", 0700, nobody}, {"group", 0770, 0}, {"world", 0777, 0}, {"sticky", 01777, 0}};
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const std::filesystem::path root = lab.tmp_area() / ("dsh-sandbox-policy-" + row.name);
    std::filesystem::create_directory(root);
    REQUIRE(::chmod(root.c_str(), row.mode) == 0);
    REQUIRE(::chown(root.c_str(), row.owner, row.owner) == 0);
    FenceOptions options;
    options.temporary_root = root;
    options.session_id = "squat";
    const std::string found = "found mode " + mode_of(root) + ", owner uid " + std::to_string(row.owner);
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
          refusal(root, root,
                  "expected a directory owned by uid " + std::to_string(::geteuid()) +
                      " with no group or other write bit, " + found));
    CHECK(listing(root).empty()); // nothing made in it
    // Read-only makes no private directory, so nothing refuses it.
    CHECK(prepare(lab.policy(SandboxMode::read_only), options).report().temporary_directory.empty());
  }
  // An unprivileged host whose chosen root another user (here root) made first.
  open_lab_to_nobody(lab);
  const std::filesystem::path taken = lab.outside() / "taken";
  std::filesystem::create_directory(taken);
  REQUIRE(::chmod(taken.c_str(), 0755) == 0);
  const std::string seen = as_host(true, [&] {
    FenceOptions options;
    options.temporary_root = taken;
    options.session_id = "squat";
    return landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); });
  });
  CHECK(seen == refusal(taken, taken,
                        "expected a directory owned by uid 65534 with no group or other write bit, found mode 0755, "
                        "owner uid 0"));
  CHECK(listing(taken).empty());
}

TEST_CASE("neighbours: a squatted session directory (a link, another user's directory, a file) is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path root = lab.base() / "private";
  std::filesystem::create_directory(root);
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
  const std::filesystem::path session = root / ("session-" + dsh::detail::name_digest("squat"));
  const std::filesystem::path target = lab.outside() / "target";
  std::filesystem::create_directory(target);
  write_file(target / "keep.txt", "keep\n");
  FenceOptions options;
  options.temporary_root = root;
  options.session_id = "squat";
  const auto refused = [&](const std::string& why) {
    return "cannot make the session's private temporary directory " + json_string_literal(session.native()) + ": " +
           json_string_literal(session.native()) + ": " + why;
  };

  SECTION("a symbolic link to an outside directory") {
    std::filesystem::create_directory_symlink(target, session);
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
          refused("it is a symbolic link"));
    CHECK(std::filesystem::read_symlink(session) == target);
    // The control: a fence granting the link's target would let the command write there.
    CHECK(unfenced([&] { return create(session / "through-link"); }) == 0);
    std::filesystem::remove(target / "through-link");
  }
  SECTION("a directory of another user") {
    std::filesystem::create_directory(session);
    REQUIRE(::chmod(session.c_str(), 0700) == 0);
    REQUIRE(::chown(session.c_str(), nobody, nobody) == 0);
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
          refused("expected a directory owned by uid " + std::to_string(::geteuid()) +
                  " with mode 0700, found mode 0700, owner uid 65534"));
    CHECK(owner_of(session) == nobody);
  }
  SECTION("a directory others may enter") {
    std::filesystem::create_directory(session);
    REQUIRE(::chmod(session.c_str(), 0755) == 0);
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
          refused("expected a directory owned by uid " + std::to_string(::geteuid()) +
                  " with mode 0700, found mode 0755, owner uid " + std::to_string(::geteuid())));
    CHECK(mode_of(session) == "0755");
  }
  SECTION("a regular file") {
    write_file(session, "squatted\n");
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
          refused("it is not a directory"));
    CHECK(read_file(session) == "squatted\n");
  }
  CHECK(listing(target) == std::vector<std::string>{"keep.txt"});
  CHECK(read_file(target / "keep.txt") == "keep\n");
}

// Another local user who plants a link where the temporary root goes (the default one is under
// /tmp) must not choose where the host makes, and the command writes, its private directory.
TEST_CASE("neighbours: a temporary root that is a symbolic link is refused, a dangling one is not followed") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::string name = "session-" + dsh::detail::name_digest("squat");
  const std::filesystem::path real = lab.outside() / "real";
  std::filesystem::create_directory(real);
  REQUIRE(::chmod(real.c_str(), 0700) == 0);
  const std::filesystem::path made_by_the_host = lab.outside() / "made-by-the-host";
  const std::filesystem::path link = lab.tmp_area() / "dsh-sandbox-policy-link";
  std::filesystem::create_directory_symlink(real, link);
  const std::filesystem::path dangling = lab.tmp_area() / "dsh-sandbox-policy-dangling";
  std::filesystem::create_directory_symlink(made_by_the_host, dangling);
  for (const std::filesystem::path& root : {link, dangling}) {
    CAPTURE(root);
    FenceOptions options;
    options.temporary_root = root;
    options.session_id = "squat";
    const std::string expected = "cannot make the session's private temporary directory " +
                                 json_string_literal((root / name).native()) + ": " +
                                 json_string_literal(root.native()) + ": it is a symbolic link";
    CHECK_THROWS_WITH(prepare(lab.policy(SandboxMode::workspace_write), options), expected);
    CHECK_THROWS_WITH(PreparedFence::remove_temporary_directory(options),
                      "PreparedFence::remove_temporary_directory: refusing the temporary root " +
                          json_string_literal(root.native()) + ": it is a symbolic link");
  }
  CHECK(listing(real).empty());
  CHECK_FALSE(exists_nofollow(made_by_the_host));
}

TEST_CASE("neighbours: each host's default root is its own: /tmp/dsh-sandbox-policy-<uid>, or under XDG_RUNTIME_DIR") {
  DSH_REQUIRE_LANDLOCK();
  const DefaultRootsCleanup roots;
  const Lab lab;
  open_lab_to_nobody(lab);
  const std::filesystem::path runtime = lab.outside() / "runtime";     // 0700, the host's: used
  const std::filesystem::path open_runtime = lab.outside() / "shared"; // 0755: not private, not used
  const auto run = [&]() {
    std::filesystem::create_directory(runtime);
    std::filesystem::create_directory(open_runtime);
    ::chmod(runtime.c_str(), 0700);
    ::chmod(open_runtime.c_str(), 0755);
    std::string text;
    FenceOptions options;
    options.session_id = "neighbours-default-root";
    options.allow_shared_directories = true; // the laboratory's outside/ belongs to uid 65534 here
    for (const char* xdg : {static_cast<const char*>(nullptr), runtime.c_str(), open_runtime.c_str(), "relative"}) {
      if (xdg == nullptr) {
        ::unsetenv("XDG_RUNTIME_DIR");
      } else {
        ::setenv("XDG_RUNTIME_DIR", xdg, 1);
      }
      const std::filesystem::path made =
          dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write), options).report().temporary_directory;
      text += made.native() + " " + mode_of(made.parent_path()) + " " + mode_of(made) + " " +
              std::to_string(owner_of(made.parent_path())) + " " + std::to_string(owner_of(made));
      const bool removed = PreparedFence::remove_temporary_directory(options);
      text += " removed " + std::to_string(removed) + " " + std::to_string(exists_nofollow(made)) + "\n";
    }
    ::unsetenv("XDG_RUNTIME_DIR");
    std::filesystem::path call;
    {
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
      call = fence.report().temporary_directory;
      text += call.parent_path().native() + " " + std::to_string(exists_nofollow(call)) + "\n";
    }
    text += "call gone " + std::to_string(!exists_nofollow(call)) + "\n";
    return text;
  };
  for (const bool unprivileged : host_table) {
    CAPTURE(unprivileged);
    const ::uid_t uid = uid_of_host(unprivileged);
    const std::string seen = as_host(unprivileged, run);
    const std::string session = "session-" + dsh::detail::name_digest("neighbours-default-root");
    const std::string host = std::to_string(uid);
    const std::string in_tmp =
        dsh::detail::concat((default_root(uid) / session).native(), " 0700 0700 ", host, " ", host, " removed 1 0\n");
    CHECK(seen == dsh::detail::concat(in_tmp, (runtime / "dsh-sandbox-policy" / session).native(), " 0700 0700 ", host,
                                      " ", host, " removed 1 0\n", in_tmp, in_tmp, default_root(uid).native(),
                                      " 1\ncall gone 1\n"));
    std::filesystem::remove_all(runtime);
    std::filesystem::remove_all(open_runtime);
  }
}

// =============================================================================================
// Class 3: the user's terminal, and the command's own
// =============================================================================================

namespace {

/// The settings of a terminal that a hostile command would change, as text for comparisons.
std::string terminal_state(int fd) {
  termios modes{};
  winsize size{};
  if (::tcgetattr(fd, &modes) != 0 || ::ioctl(fd, TIOCGWINSZ, &size) != 0) {
    return "<unreadable>";
  }
  return "iflag=" + std::to_string(modes.c_iflag) + " oflag=" + std::to_string(modes.c_oflag) +
         " cflag=" + std::to_string(modes.c_cflag) + " lflag=" + std::to_string(modes.c_lflag) +
         " size=" + std::to_string(size.ws_row) + "x" + std::to_string(size.ws_col);
}

/// In a child: opens the terminal `name` for reading only, as any file may be, and turns ECHO
/// and ICANON off (tcsetattr with TCSANOW issues TCSETS). 0 or the errno; 100 + the errno when
/// even the open fails.
int turn_echo_off(const std::string& name, const termios& current) {
  const dsh::UniqueFd fd{::open(name.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC)};
  if (!fd) {
    return 100 + errno;
  }
  termios changed = current;
  changed.c_lflag &= ~static_cast<tcflag_t>(ECHO | ICANON);
  return errno_of(::tcsetattr(fd.get(), TCSANOW, &changed));
}

/// In a child: opens the terminal `name` for reading only and sets its window size to 1x1 with
/// TIOCSWINSZ. 0 or the errno; 100 + the errno when the open fails.
int shrink_window(const std::string& name) {
  const dsh::UniqueFd fd{::open(name.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC)};
  if (!fd) {
    return 100 + errno;
  }
  winsize tiny{};
  tiny.ws_row = 1;
  tiny.ws_col = 1;
  return errno_of(::ioctl(fd.get(), TIOCSWINSZ, &tiny));
}

/// What a terminal shows, read from its master side as a user's terminal emulator would.
class Screen {
public:
  explicit Screen(int master) : master_(master) {}
  /// Types `keys`.
  void type(const std::string& keys) const { REQUIRE(dsh::detail::write_all(master_, keys.data(), keys.size())); }
  /// Reads until the screen shows `text`; false when the terminal closed first (or nothing came
  /// for a minute: a guard against a hung program, not a timing assertion).
  bool shows(const std::string& text) {
    while (text_.find(text) == std::string::npos) {
      if (!read_more()) {
        return false;
      }
    }
    return true;
  }
  /// Types `keys`, then reads until the screen shows `text` (as `shows`).
  bool answers(const std::string& keys, const std::string& text) {
    type(keys);
    return shows(text);
  }
  /// Reads until the terminal closes.
  void read_to_end() {
    while (read_more()) {
    }
  }
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

private:
  bool read_more() {
    pollfd ready{master_, POLLIN, 0};
    int polled = 0;
    while ((polled = ::poll(&ready, 1, 60000)) < 0 && errno == EINTR) {
    }
    if (polled <= 0) {
      return false;
    }
    std::array<char, 4096> buffer{};
    const ::ssize_t got = ::read(master_, buffer.data(), buffer.size());
    if (got <= 0) { // EIO once the last child side is closed
      return false;
    }
    text_.append(buffer.data(), static_cast<std::size_t>(got));
    return true;
  }
  int master_;
  std::string text_;
};

/// True when `program` is found on $PATH.
bool installed(const std::string& program) { return FencedCommand({program}).program().find('/') != std::string::npos; }

/// An interactive `bash -i` on `pty` (as its controlling terminal) under `fence`, in `cwd`;
/// USER_TTY names the user's terminal for the attempts on it.
FencedChild interactive_shell(const PreparedFence& fence, Pty& pty, const std::filesystem::path& cwd,
                              const std::string& user_tty) {
  FencedCommand command({"env", "LC_ALL=C", "TERM=xterm", "PS1=dsh$ ", "HISTFILE=/dev/null", "LESSHISTFILE=-",
                         "USER_TTY=" + user_tty, "bash", "--norc", "--noprofile", "-i"});
  command.controlling_terminal(pty.slave()).in_directory(cwd);
  FencedChild child = command.spawn(fence);
  pty.close_slave(); // the terminal closes when the command's side is gone
  return child;
}

} // namespace

namespace {

/// The fence of the terminal attempts in `mode`: the private temporary directory beneath the
/// host's own root, and FenceOptions::terminal when `own` names the command's terminal.
PreparedFence terminal_test_fence(const Lab& lab, SandboxMode mode, const std::string& own) {
  FenceOptions options;
  options.temporary_root = lab.outside() / ("private-" + std::to_string(::geteuid())); // the host's own
  options.terminal = own;
  return prepare(lab.policy(mode), options);
}

} // namespace

TEST_CASE("neighbours: the user's terminal reopened by name keeps its settings and window size") {
  DSH_REQUIRE_LANDLOCK();
  if (dsh::landlock_abi() < 5) {
    DSH_TEST_SKIP("device ioctls need Landlock ABI 5 (Linux 6.10); this kernel has ABI " +
                  std::to_string(dsh::landlock_abi()) + ": TCSETS on a terminal opened by name is not refused");
  }
  const Lab lab;
  const auto run = [&]() {
    const Pty user(30, 90); // the user's terminal, where the host itself runs
    const Pty own(24, 80);  // the command's own
    termios current{};
    if (::tcgetattr(user.slave(), &current) != 0) {
      return std::string("tcgetattr failed");
    }
    const std::string before = terminal_state(user.slave());
    std::string text = "state " + std::string(before.find("size=30x90") != std::string::npos ? "30x90" : before) + "\n";
    // The control: without the fence, the same child changes both, then the host undoes it.
    const int control_tcsets = unfenced([&] { return turn_echo_off(user.name(), current); });
    const int control_winsize = unfenced([&] { return shrink_window(user.name()); });
    text += "control tcsets=" + std::to_string(control_tcsets) + " winsize=" + std::to_string(control_winsize) +
            " changed=" + (terminal_state(user.slave()) != before ? "1" : "0") + "\n";
    const winsize size{30, 90, 0, 0};
    if (::tcsetattr(user.slave(), TCSANOW, &current) != 0 || ::ioctl(user.slave(), TIOCSWINSZ, &size) != 0 ||
        terminal_state(user.slave()) != before) {
      return text + "cannot restore the terminal";
    }
    for (const SandboxMode mode : fenced_modes) {
      for (const bool with_own : {false, true}) {
        const PreparedFence fence = terminal_test_fence(lab, mode, with_own ? own.name() : std::string());
        const int tcsets = fenced(fence, [&] { return turn_echo_off(user.name(), current); });
        const int window = fenced(fence, [&] { return shrink_window(user.name()); });
        const int own_tcsets = fenced(fence, [&] { return turn_echo_off(own.name(), current); });
        text += std::string(dsh::to_string(mode)) + (with_own ? " own terminal" : " no terminal") +
                ": tcsets=" + std::to_string(tcsets) + " winsize=" + std::to_string(window) +
                " own tcsets=" + std::to_string(own_tcsets) +
                " unchanged=" + (terminal_state(user.slave()) == before ? "1" : "0") + "\n";
      }
    }
    return text;
  };
  over_host_table(lab, [&](bool unprivileged) {
    // The unprivileged host's terminal is its own (file permissions allow the open and the
    // ioctls): only the fence refuses.
    const std::string seen = as_host(unprivileged, run);
    std::string expected = "state 30x90\ncontrol tcsets=0 winsize=0 changed=1\n";
    for (const SandboxMode mode : fenced_modes) {
      for (const bool with_own : {false, true}) {
        // The read fence refuses the open by name (100 + EACCES) before the ioctl could be
        // tried; the command's own terminal, granted with FenceOptions::terminal, opens and
        // takes TCSETS.
        const std::string refused_open = std::to_string(100 + EACCES);
        expected += dsh::detail::concat(dsh::to_string(mode), with_own ? " own terminal" : " no terminal",
                                        ": tcsets=", refused_open, " winsize=", refused_open,
                                        " own tcsets=", with_own ? "0" : refused_open, " unchanged=1\n");
      }
    }
    CHECK(seen == expected);
  });
}

namespace {

/// How a command leaves the terminal the host gave it, to take another one.
enum class Leave {
  new_session, ///< a child it forks calls setsid(2)
  give_up,     ///< the command, which leads its session, issues TIOCNOTTY on its own terminal
};

/// In a child that leads a session on the terminal `own` (as a fenced command does): leaves it
/// as `leave` says, opens the terminal `name` for reading only and without O_NOCTTY, which makes
/// a terminal no session controls the controlling one of a session leader that has none, then
/// reopens /dev/tty and either turns ECHO and ICANON off (`drive`) or writes "INJECTED" on its
/// screen. When leaving is refused it goes on all the same: its /dev/tty is then still `own`.
/// Returns 0 when every step succeeded; the errno of the /dev/tty step when only that failed;
/// 100 + the errno of leaving when leaving was refused and the rest succeeded; 210 + the errno
/// of leaving (0 when it succeeded) when the open of `name` failed (the /dev/tty step is tried
/// all the same); 200 when another step failed.
int take_over_terminal(int own, const std::string& name, const termios& current, bool drive, Leave leave) {
  const auto rest = [&](int left) {
    // A refused open goes on all the same: /dev/tty then shows which terminal is still the
    // controlling one.
    const dsh::UniqueFd taken{::open(name.c_str(), O_RDONLY | O_CLOEXEC)};
    const dsh::UniqueFd tty{::open("/dev/tty", (drive ? O_RDONLY : O_WRONLY) | O_CLOEXEC)};
    int error = 0;
    if (!tty) {
      error = errno;
    } else if (drive) {
      termios changed = current;
      changed.c_lflag &= ~static_cast<tcflag_t>(ECHO | ICANON);
      error = errno_of(::tcsetattr(tty.get(), TCSANOW, &changed));
    } else {
      error = ::write(tty.get(), "INJECTED\n", 9) == 9 ? 0 : errno;
    }
    if (!taken) {
      return 210 + left;
    }
    if (left != 0) {
      return error == 0 ? 100 + left : 200;
    }
    return error;
  };
  if (leave == Leave::give_up) {
    return rest(errno_of(::ioctl(own, TIOCNOTTY)));
  }
  std::fflush(nullptr);
  const ::pid_t child = ::fork(); // a group leader cannot call setsid: the attacker's child does
  if (child < 0) {
    return 200;
  }
  if (child == 0) {
    ::_exit(rest(errno_of(::setsid())));
  }
  return FencedCommand::wait_for(child);
}

/// Runs `body` in a forked child that leads a new session whose controlling terminal is `own`
/// (as FencedCommand::controlling_terminal makes it), ignoring SIGHUP (which a leader's
/// TIOCNOTTY sends to its own foreground group), then enters `fence` when one is given.
/// Returns what `body` returned; 250 when the fence could not be applied, 251 when the session
/// could not be set up.
int on_own_terminal(const PreparedFence* fence, int own, const std::function<int()>& body) {
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (::setsid() < 0 || ::ioctl(own, TIOCSCTTY, 0) != 0 || ::signal(SIGHUP, SIG_IGN) == SIG_ERR) {
      ::_exit(251);
    }
    if (fence != nullptr && !fence->apply().ok()) {
      ::_exit(250);
    }
    ::_exit(body());
  }
  return FencedCommand::wait_for(pid);
}

/// What the terminal whose master side is `master` shows now (without waiting).
std::string pending_output(int master) {
  std::string text;
  pollfd ready{master, POLLIN, 0};
  std::array<char, 256> buffer{};
  while (::poll(&ready, 1, 0) > 0) {
    const ::ssize_t got = ::read(master, buffer.data(), buffer.size());
    if (got <= 0) {
      break;
    }
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  return text;
}

} // namespace

// FenceOptions::terminal grants write_file and ioctl_dev on /dev/tty, and /dev/tty opens
// whatever terminal controls the caller at that moment, not the one the host chose. A command
// (read-only too) that could leave its terminal (a child's setsid(2), or TIOCNOTTY from the
// command, which leads its session) could open by name, for reading, a terminal no session
// controls: a pty the host holds for a later call or one whose session has ended. It would
// become the command's controlling terminal, and /dev/tty would reconfigure it and write on its
// screen (the control run shows it). The read fence refuses that open (210 + the errno of
// leaving); with FenceOptions::terminal the system-call filter also refuses both ways out, so
// /dev/tty stays the command's own terminal; without it, leaving is allowed. Each line holds
// alone: the open by name is refused whether or not leaving was.
TEST_CASE("neighbours: with FenceOptions::terminal, a command cannot leave its terminal to take over another") {
  DSH_REQUIRE_LANDLOCK();
  if (dsh::landlock_abi() < 5) {
    DSH_TEST_SKIP("device ioctls need Landlock ABI 5 (Linux 6.10); this kernel has ABI " +
                  std::to_string(dsh::landlock_abi()));
  }
  if (const int error = dsh::detail::probe_syscall_filter(); error != 0) {
    DSH_TEST_SKIP("the system-call filter cannot be installed: " +
                  dsh::detail::syscall_filter_unavailable_reason(error));
  }
  const Lab lab;
  const Pty user(30, 90); // held by the host, controlled by no session
  const Pty own(24, 80);  // the command's own
  termios current{};
  REQUIRE(::tcgetattr(user.slave(), &current) == 0);
  const std::string before = terminal_state(user.slave());
  const std::string own_before = terminal_state(own.slave());
  const auto restore = [&](const Pty& pty, unsigned short rows, unsigned short columns, const std::string& state) {
    const winsize size{rows, columns, 0, 0};
    REQUIRE(::tcsetattr(pty.slave(), TCSANOW, &current) == 0);
    REQUIRE(::ioctl(pty.slave(), TIOCSWINSZ, &size) == 0);
    REQUIRE(terminal_state(pty.slave()) == state);
  };
  const auto attempt = [&](const PreparedFence* fence, bool drive, Leave leave) {
    return on_own_terminal(fence, own.slave(),
                           [&] { return take_over_terminal(own.slave(), user.name(), current, drive, leave); });
  };
  for (const Leave leave : {Leave::new_session, Leave::give_up}) {
    CAPTURE(leave == Leave::new_session ? "setsid" : "TIOCNOTTY");
    // The control: without a fence, the command takes the other terminal over either way.
    CHECK(attempt(nullptr, true, leave) == 0);
    CHECK(terminal_state(user.slave()) != before);
    restore(user, 30, 90, before);
    CHECK(attempt(nullptr, false, leave) == 0);
    CHECK(pending_output(user.master()) == "INJECTED\r\n");
    CHECK(terminal_state(own.slave()) == own_before);
    CHECK(pending_output(own.master()).empty());

    for (const SandboxMode mode : fenced_modes) {
      CAPTURE(dsh::to_string(mode));
      FenceOptions options;
      options.temporary_root = lab.base() / "private";
      // Without FenceOptions::terminal, leaving is allowed and /dev/tty refused.
      const PreparedFence refusing = prepare(lab.policy(mode), options);
      CHECK(attempt(&refusing, true, leave) == 210);
      CHECK(attempt(&refusing, false, leave) == 210);
      CHECK(terminal_state(user.slave()) == before);
      CHECK(pending_output(user.master()).empty());

      // With it, leaving is refused (EPERM), the open by name too, and /dev/tty, still the
      // command's own terminal, changes and shows only that one.
      options.terminal = own.name();
      const PreparedFence fence = prepare(lab.policy(mode), options);
      CHECK(attempt(&fence, true, leave) == 210 + EPERM);
      CHECK(terminal_state(user.slave()) == before);
      CHECK(terminal_state(own.slave()) != own_before);
      restore(own, 24, 80, own_before);
      CHECK(attempt(&fence, false, leave) == 210 + EPERM);
      CHECK(pending_output(user.master()).empty());
      CHECK(pending_output(own.master()) == "INJECTED\r\n");
      CHECK(terminal_state(user.slave()) == before);
    }
  }
}

// Reading is not otherwise restricted, but a terminal read by name hands the reader what the
// user types: its reads compete with the shell's, so keystrokes (a password among them) go to
// the command instead. The read fence refuses read_file beneath /dev and every other devpts or
// devtmpfs mount, but the null and random devices (and the command's own terminal with
// FenceOptions::terminal); reading elsewhere is unchanged.
TEST_CASE("neighbours: a command cannot read what is typed on another terminal") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  write_file(lab.outside() / "outside.txt", "outside-text\n");
  const auto run = [&]() {
    const Pty user(30, 90); // the user's terminal, where the host itself runs
    const Pty own(24, 80);  // the command's own
    const auto type = [&user](std::string_view line) {
      return ::write(user.master(), line.data(), line.size()) == static_cast<::ssize_t>(line.size());
    };
    if (!type("hello\n")) {
      return std::string("cannot type on the terminal");
    }
    // The control: without the fence a child reads the line by name, and the terminal's own
    // reader then finds nothing.
    const int control = unfenced([&] {
      const dsh::UniqueFd fd{::open(user.name().c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)};
      std::array<char, 16> line{};
      return fd && ::read(fd.get(), line.data(), line.size()) == 6 && std::string_view(line.data(), 6) == "hello\n" ? 0
                                                                                                                    : 1;
    });
    std::string text = "user " + user.name() + "\ncontrol read=" + std::to_string(control) +
                       " left=" + std::to_string(pending_output(user.slave()).size()) + "\n";
    if (!type("hello\n")) {
      return text + "cannot type on the terminal";
    }
    const std::string script = "head -c 5 \"$USER_TTY\"; echo \"tty=$?\"; head -c 1 /dev/urandom | wc -c; "
                               "head -c 3 /dev/zero | wc -c; cat /dev/null; echo \"null=$?\"; "
                               "grep -c '^Name:' /proc/self/status; cat \"$OUTSIDE\"";
    for (const SandboxMode mode : fenced_modes) {
      for (const bool with_own : {false, true}) {
        const PreparedFence fence = terminal_test_fence(lab, mode, with_own ? own.name() : std::string());
        const int opened = fenced(fence, [&] { return open_error(user.name()); });
        const int own_opened = fenced(fence, [&] { return open_error(own.name()); });
        const Shell call = shell(fence, script, lab.workspace(),
                                 {"USER_TTY=" + user.name(), "OUTSIDE=" + (lab.outside() / "outside.txt").native()});
        text += dsh::detail::concat(dsh::to_string(mode), with_own ? " own terminal" : " no terminal",
                                    ": open=", std::to_string(opened), " own=", std::to_string(own_opened),
                                    " status=", std::to_string(call.status), "\n", call.out, call.err);
      }
    }
    // What the user typed is still there for the terminal's own reader.
    return text + "left=" + pending_output(user.slave());
  };
  over_host_table(lab, [&](bool unprivileged) {
    const std::string seen = as_host(unprivileged, run);
    const std::string name = value_of(seen, "user ");
    CHECK(name.starts_with("/dev/pts/"));
    std::string expected = "user " + name + "\ncontrol read=0 left=0\n";
    const std::string refused = std::to_string(EACCES);
    for (const SandboxMode mode : fenced_modes) {
      for (const bool with_own : {false, true}) {
        expected +=
            dsh::detail::concat(dsh::to_string(mode), with_own ? " own terminal" : " no terminal", ": open=", refused,
                                " own=", with_own ? "0" : refused, " status=0\ntty=1\n1\n3\nnull=0\n1\noutside-text\n");
        expected += "head: cannot open '" + name + "' for reading: Permission denied\n";
      }
    }
    CHECK(seen == expected + "left=hello\n");
  });
}

TEST_CASE("neighbours: interactive programs work on the command's own terminal, and the user's stays refused") {
  DSH_REQUIRE_LANDLOCK();
  if (dsh::landlock_abi() < 5) {
    DSH_TEST_SKIP("device ioctls need Landlock ABI 5 (Linux 6.10); this kernel has ABI " +
                  std::to_string(dsh::landlock_abi()) + ": FenceOptions::terminal grants nothing to test");
  }
  const Lab lab;
  write_file(lab.workspace() / "notes.txt", "notes-line-1\nnotes-line-2\n");
  const Pty user(30, 90);
  const std::string before = terminal_state(user.slave());
  const std::uint64_t device_rights =
      dsh::landlock_write_rights(dsh::landlock_abi()) & dsh::landlock_file_rights() & ~dsh::landlock_resolve_unix;
  for (const SandboxMode mode : fenced_modes) {
    CAPTURE(dsh::to_string(mode));
    Pty own(24, 200);
    FenceOptions options;
    options.terminal = own.name();
    options.temporary_root = lab.base() / "private";
    const PreparedFence fence = prepare(lab.policy(mode), options);
    // Granted: the command's own terminal and /dev/tty (which names it in the command), each
    // with the device rights; nothing else of /dev/pts.
    const std::vector<dsh::FenceGrant>& grants = fence.report().grants;
    REQUIRE(grants.size() >= 5);
    CHECK(grants[3] == dsh::FenceGrant{own.name(), device_rights});
    CHECK(grants[4] == dsh::FenceGrant{"/dev/tty", device_rights});
    for (const dsh::FenceGrant& grant : grants) {
      CHECK(grant.path != user.name());
    }

    FencedChild child = interactive_shell(fence, own, lab.workspace(), user.name());
    Screen screen(own.master());
    // Each marker is split by "" in the typed line, so only the command's output can show it.
    CHECK(screen.answers("echo \"size=$(stty size)\"\n", "size=24 200"));
    screen.type("echo \"devsize=$(stty size </dev/tty)\"\n"); // the terminal reopened by name
    CHECK(screen.shows("devsize=24 200"));
    CHECK(screen.answers("stty -echo; stty -a | grep -o -- -echo | head -n 1 | sed 's/^/state/'; stty echo\n",
                         "state-echo"));
    CHECK(screen.answers("echo \"restored=$(stty -a | grep -c -- ' echo ')\"\n", "restored=1"));
    CHECK(screen.answers("echo \"devtty-h\"\"i\" > /dev/tty; echo \"devtty=$?\"\n", "devtty-hi"));
    CHECK(screen.shows("devtty=0"));
    if (installed("less")) {
      CHECK(screen.answers("less notes.txt; echo \"less=$?\"\n", "notes-line-2"));
      CHECK(screen.answers("q", "less=0"));
    } else {
      WARN("less is not installed: the pager step is left out");
    }
    if (installed("vim")) {
      CHECK(screen.answers("vim -u NONE -i NONE -n -N notes.txt; echo \"vim=$?\"\n", "notes-line-2"));
      CHECK(screen.answers(":q!\r", "vim=0"));
    } else {
      WARN("vim is not installed: the editor step is left out");
    }
    // Job control: the shell leads the terminal's foreground group and signals its jobs.
    CHECK(screen.answers("echo \"monitor=$(set -o | grep -c 'monitor.*on')\"\n", "monitor=1"));
    CHECK(screen.answers("sleep 5 & jobs; kill %1; wait %1; echo \"killed=$?\"\n", "Running"));
    CHECK(screen.shows("killed=143"));
    CHECK(screen.text().find("no job control") == std::string::npos);
    // The user's terminal, by name: neither its settings, its size nor its screen.
    CHECK(screen.answers("stty -F \"$USER_TTY\" -echo -icanon; echo \"other-stty=$?\"\n", "other-stty=1"));
    CHECK(screen.answers("stty -F \"$USER_TTY\" rows 1 cols 1; echo \"other-size=$?\"\n", "other-size=1"));
    CHECK(screen.answers("echo typed > \"$USER_TTY\"; echo \"other-write=$?\"\n", "other-write=1"));
    screen.type("exit 3\n");
    screen.read_to_end();
    CAPTURE(screen.text());
    CHECK(child.wait() == 3);
    CHECK(terminal_state(user.slave()) == before);
    pollfd typed{user.master(), POLLIN, 0};
    CHECK(::poll(&typed, 1, 0) == 0); // nothing reached the user's screen
  }

  // Without FenceOptions::terminal, the shell keeps the terminal it was started on, but no
  // program can reopen it by name and drive it.
  Pty own(24, 200);
  FenceOptions none;
  none.temporary_root = lab.base() / "private";
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), none);
  FencedChild child = interactive_shell(fence, own, lab.workspace(), user.name());
  Screen screen(own.master());
  CHECK(screen.answers("echo \"size=$(stty size)\"\n", "size=24 200"));
  CHECK(screen.answers("stty size </dev/tty 2>/dev/null; echo \"devsize=$?\"\n", "devsize=1"));
  CHECK(screen.answers("echo x > /dev/tty; echo \"devtty=$?\"\n", "devtty=1"));
  screen.type("exit\n");
  screen.read_to_end();
  CAPTURE(screen.text());
  CHECK(child.wait() == 0);
}

TEST_CASE("neighbours: FenceOptions::terminal that is not a pseudo-terminal's child side is refused") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path file = lab.outside() / "not-a-tty";
  write_file(file, "");
  const std::string expected = "expected the child side of a pseudo-terminal (a character device of major 136-143), ";
  const std::vector<std::pair<std::filesystem::path, std::string>> rows{
      {file, expected + "found no character device"},
      {lab.outside(), expected + "found no character device"},
      {"/dev/null", expected + "found the character device 1:3"},
      {"/dev/tty", expected + "found the character device 5:0"},
      {"/dev/ptmx", expected + "found the character device 5:2"},
      {lab.outside() / "missing", "No such file or directory"},
  };
  for (const SandboxMode mode : fenced_modes) {
    for (const auto& [terminal, why] : rows) {
      CAPTURE(dsh::to_string(mode), terminal);
      FenceOptions options;
      options.terminal = terminal;
      options.temporary_root = lab.base() / "private";
      options.session_id = "terminal";
      CHECK(landlock_error_of([&] { (void)prepare(lab.policy(mode), options); }) ==
            "Landlock fence for " + std::string(dsh::to_string(mode)) + ": FenceOptions::terminal " +
                json_string_literal(terminal.native()) + ": " + why);
      CHECK_FALSE(exists_nofollow(lab.base() / "private")); // refused before anything was made
    }
  }
  CHECK(read_file(file).empty());
}

// =============================================================================================
// Class 4: the host's dynamic loader
// =============================================================================================

TEST_CASE("neighbours: loader directories inside the workspace refuse workspace-write, and skip an extra directory") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  const std::filesystem::path& out = lab.outside();
  for (const std::filesystem::path& base : {ws, out}) {
    for (const char* directory : {"lib", "pre", "audit"}) {
      std::filesystem::create_directory(base / directory);
    }
  }
  struct Row {
    std::string variable;
    std::string value_in;  // naming directories inside the workspace
    std::string value_out; // the same beneath the extra directory
    std::string directory; // the guarded one
  };
  const std::vector<Row> rows{
      {"LD_LIBRARY_PATH", "/usr/lib:" + (ws / "lib").string(), (out / "lib").string() + ":/usr/lib", "lib"},
      {"LD_PRELOAD", "libc.so.6 " + (ws / "pre" / "libevil.so").string(), (out / "pre" / "libevil.so").string(), "pre"},
      {"LD_AUDIT", (ws / "audit" / "libaudit.so").string(), (out / "audit" / "libaudit.so").string(), "audit"},
  };
  const auto environment = [](const Row& row, const std::string& value) {
    HostEnvironment env;
    (row.variable == "LD_LIBRARY_PATH" ? env.ld_library_path
     : row.variable == "LD_PRELOAD"    ? env.ld_preload
                                       : env.ld_audit) = value.c_str();
    return env;
  };
  FenceOptions options;
  options.temporary_root = lab.base() / "private";
  options.extra_writable = {out};
  for (const Row& row : rows) {
    CAPTURE(row.variable);
    // Inside the workspace: the next host process would load what the command drops there.
    const HostEnvironment inside = environment(row, row.value_in);
    CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options, inside); }) ==
          "Landlock fence for workspace-write: refusing the workspace root " + json_string_literal(ws.native()) +
              ": the command could change the loader directory " + json_string_literal((ws / row.directory).native()) +
              " of $" + row.variable + ", which decides later calls");
    // read-only grants nothing a loader reads: unaffected.
    const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only), options, inside);
    CHECK(read_only.report().grants.size() == 3);
    CHECK(read_only.report().notes.size() == (dsh::landlock_abi() >= 6 ? 0U : 1U));
    CHECK(fenced(read_only, [&] { return create(ws / row.directory / "libzstd.so.1"); }) == EACCES);

    // Beneath a directory the host asked for: that grant alone is skipped, with a note.
    const HostEnvironment beneath = environment(row, row.value_out);
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options, beneath);
    const std::vector<std::string>& notes = fence.report().notes;
    CHECK(std::find(notes.begin(), notes.end(),
                    "skipped " + json_string_literal(out.native()) +
                        ": the command could change the loader directory " +
                        json_string_literal((out / row.directory).native()) + " of $" + row.variable +
                        ", which decides later calls") != notes.end());
    CHECK_FALSE(dsh::test::grants_directory_of(fence.report(), out));
    CHECK(fenced(fence, [&] { return create(out / row.directory / "libzstd.so.1"); }) == EACCES);
    CHECK(listing(out / row.directory).empty());
  }
  // The control: without the variables the extra directory is granted, and the same write works.
  const PreparedFence granted = prepare(lab.policy(SandboxMode::workspace_write), options);
  CHECK(dsh::test::grants_directory_of(granted.report(), out));
  CHECK(fenced(granted, [&] { return create(out / "lib" / "libzstd.so.1"); }) == 0);
  CHECK(fenced(granted, [&] { return create(ws / "lib" / "libzstd.so.1"); }) == 0);
}

TEST_CASE("neighbours: an empty LD_LIBRARY_PATH entry guards the working directory, $ORIGIN/../lib the host's lib") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  FenceOptions options;
  options.temporary_root = lab.base() / "private";
  {
    // The host runs in the workspace, as a host started in the project directory does.
    const WorkingDirectory in_workspace(lab.workspace());
    for (const char* value : {"", ":/usr/lib", "/usr/lib:", "/usr/lib::/lib"}) {
      CAPTURE(value);
      HostEnvironment env;
      env.ld_library_path = value;
      CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options, env); }) ==
            "Landlock fence for workspace-write: refusing the workspace root " +
                json_string_literal(lab.workspace().native()) + ": the command could change the loader directory " +
                json_string_literal(lab.workspace().native()) + " of $LD_LIBRARY_PATH, which decides later calls");
    }
    HostEnvironment control;
    control.ld_library_path = "/usr/lib:/lib";
    CHECK(prepare(lab.policy(SandboxMode::workspace_write), options, control).report().status ==
          dsh::FenceStatus::enforced);
  }
  // $ORIGIN is the host executable's directory: its sibling lib directory is guarded, so an
  // extra directory there is skipped for that reason (it is not even looked for).
  const std::filesystem::path host = dsh::canonical_path("/proc/self/exe");
  const std::filesystem::path sibling = host.parent_path().parent_path() / "lib";
  options.extra_writable = {sibling};
  for (const char* value : {"$ORIGIN/../lib", "${ORIGIN}/../lib"}) {
    CAPTURE(value);
    HostEnvironment env;
    env.ld_library_path = value;
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options, env);
    const std::vector<std::string>& notes = fence.report().notes;
    CHECK(std::find(notes.begin(), notes.end(),
                    "skipped " + json_string_literal(sibling.native()) +
                        ": the command could change the loader directory " + json_string_literal(sibling.native()) +
                        " of $LD_LIBRARY_PATH, which decides later calls") != notes.end());
  }
  const PreparedFence control = prepare(lab.policy(SandboxMode::workspace_write), options);
  for (const std::string& note : control.report().notes) {
    CHECK(note.find("loader directory") == std::string::npos);
  }
}

TEST_CASE("neighbours: a command cannot drop a library into a directory on the host's LD_LIBRARY_PATH") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path libraries = lab.outside() / "lib";
  std::filesystem::create_directory(libraries);
  write_file(libraries / "libkeep.so.1", "\177ELF-keep");
  const std::vector<std::string> before = listing(libraries);
  const std::vector<std::string> variables{"DIR=" + libraries.string()};
  const std::vector<std::string> scripts{R"(printf '\177ELF' > "$DIR/libzstd.so.1")",
                                         R"(ln -s /usr/lib/x86_64-linux-gnu/libzstd.so.1 "$DIR/libzstd.so.1")",
                                         R"(mv "$DIR/libkeep.so.1" "$DIR/libzstd.so.1")"};
  const auto run = [&]() {
    std::string text;
    for (const std::string& script : scripts) {
      text += "control " +
              std::to_string(control_shell(script + R"( && rm "$DIR/libzstd.so.1")", lab.workspace(), variables)) +
              "\n";
      if (!exists_nofollow(libraries / "libkeep.so.1")) { // undo the rename
        write_file(libraries / "libkeep.so.1", "\177ELF-keep");
      }
    }
    HostEnvironment env;
    const std::string value = libraries.string();
    env.ld_library_path = value.c_str();
    FenceOptions options;
    options.temporary_root = lab.outside() / "private";
    for (const SandboxMode mode : fenced_modes) {
      const PreparedFence fence = prepare(lab.policy(mode), options, env);
      text += std::string(dsh::to_string(mode));
      for (const std::string& script : scripts) {
        text += " " + std::to_string(shell(fence, script, lab.workspace(), variables).status);
      }
      text += " create=" + std::to_string(fenced(fence, [&] { return create(libraries / "libzstd.so.1"); })) + "\n";
    }
    return text;
  };
  const std::array<std::filesystem::path, 2> also_to_nobody{libraries, libraries / "libkeep.so.1"};
  over_host_table(lab, also_to_nobody, [&](bool unprivileged) {
    CHECK(as_host(unprivileged, run) == "control 0\ncontrol 0\ncontrol 0\nread-only 1 1 1 create=13\n"
                                        "workspace-write 1 1 1 create=13\n");
    CHECK(listing(libraries) == before);
    CHECK(read_file(libraries / "libkeep.so.1") == "\177ELF-keep");
    std::filesystem::remove_all(lab.outside() / "private");
  });
}

// =============================================================================================
// Class 5: the session log by identity: a bind mount, a hard link
// =============================================================================================

TEST_CASE("neighbours: a bind mount that shows the session log inside the workspace is seen through") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the bind mount is made in a private mount namespace of a root child");
  }
  const Lab lab;
  const std::filesystem::path logs = lab.outside() / "logs";
  std::filesystem::create_directory(logs);
  const SessionFile log(logs / "session.jsonl", "s-bind", lab.workspace());
  write_file(logs / "copy.jsonl", log.bytes);
  const std::filesystem::path mount_point = lab.workspace() / "mnt";
  std::filesystem::create_directory(mount_point);
  const std::string seen = as_host(false, [&] {
    // The mount exists only in this child's namespace: prepare and attack here.
    if (::unshare(CLONE_NEWNS) != 0) {
      return "unshare failed: " + std::to_string(errno);
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(logs.c_str(), mount_point.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return "mount failed: " + std::to_string(errno);
    }
    FenceOptions options;
    options.session_log = log.path;
    options.session_cwd = lab.workspace();
    options.temporary_root = lab.base() / "private";
    std::string text = landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); });
    FenceOptions no_log = options; // the control: the mount alone refuses nothing
    no_log.session_log.clear();
    text += "\nwithout the log: " +
            std::string(dsh::to_string(prepare(lab.policy(SandboxMode::workspace_write), no_log).report().status));
    const int control = unfenced([&] { return append(mount_point / "copy.jsonl", "x\n"); });
    text += "\ncontrol " + std::to_string(control) + " " +
            std::to_string(read_file(logs / "copy.jsonl") == log.bytes + "x\n");
    const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only), options);
    const int appended = fenced(read_only, [&] { return append(mount_point / "session.jsonl", log.forged); });
    const Shell forged =
        shell(read_only, R"(printf '%s' "$FORGED" >> mnt/session.jsonl)", lab.workspace(), {"FORGED=" + log.forged});
    text += "\nread-only append=" + std::to_string(appended) + " shell=" + std::to_string(forged.status);
    return text;
  });
  CHECK(seen == "Landlock fence for workspace-write: refusing the workspace root " +
                    json_string_literal(lab.workspace().native()) + ": the command could change the session log " +
                    json_string_literal(log.path.native()) + ", which decides later calls (the mount at " +
                    json_string_literal(mount_point.native()) +
                    " shows it beneath the grant)\nwithout the log: enforced\ncontrol 0 1\nread-only append=13 "
                    "shell=1");
  CHECK(read_file(log.path) == log.bytes);
  CHECK(listing(mount_point).empty()); // the mount went with the child's namespace
}

TEST_CASE("neighbours: a hard link to the session log planted inside the workspace is seen through") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const SessionFile log(lab.outside() / "session.jsonl", "s-link", lab.workspace());
  const std::filesystem::path planted = lab.workspace() / "planted.jsonl";
  // An earlier call, in danger-full-access, left a second name for the log in the workspace.
  const PreparedFence full = prepare(lab.policy(SandboxMode::danger_full_access));
  REQUIRE(shell(full, R"(ln "$LOG" planted.jsonl)", lab.workspace(), {"LOG=" + log.path.string()}).status == 0);
  REQUIRE(inode_of(planted) == inode_of(log.path));
  FenceOptions options;
  options.session_log = log.path;
  options.session_cwd = lab.workspace();
  options.temporary_root = lab.base() / "private";
  CHECK(landlock_error_of([&] { (void)prepare(lab.policy(SandboxMode::workspace_write), options); }) ==
        "Landlock fence for workspace-write: refusing the workspace root " +
            json_string_literal(lab.workspace().native()) + ": the command could change the session log " +
            json_string_literal(log.path.native()) +
            ", which decides later calls: it has 2 names (hard links), and another may lie beneath the grant, on "
            "the same filesystem");
  // The control: through the link, an unfenced append forges the log itself.
  CHECK(unfenced([&] { return append(planted, log.forged); }) == 0);
  CHECK(read_file(log.path) == log.bytes + log.forged);
  write_file(log.path, log.bytes); // undone (same inode: the link stays)
  const PreparedFence read_only = prepare(lab.policy(SandboxMode::read_only), options);
  CHECK(fenced(read_only, [&] { return append(planted, log.forged); }) == EACCES);
  CHECK(
      shell(read_only, R"(printf '%s' "$FORGED" >> planted.jsonl)", lab.workspace(), {"FORGED=" + log.forged}).status ==
      1);
  CHECK(read_file(log.path) == log.bytes);
  // With the second name gone, the same workspace is granted.
  std::filesystem::remove(planted);
  CHECK(prepare(lab.policy(SandboxMode::workspace_write), options).report().status == dsh::FenceStatus::enforced);
}

// =============================================================================================
// Documented limits: metadata and locks of the session log (closed by the namespace layer)
// =============================================================================================

// Landlock has no right for a file's mode, and a lock needs only a descriptor open for reading,
// which every fence allows. Both stay possible on the session log itself until the namespace
// layer runs the command in a mount namespace that does not show the log's directory at all.
TEST_CASE("limit: a fenced command can chmod its own session log and hold a shared flock on it") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path logs = lab.outside() / "logs";
  std::filesystem::create_directory(logs);
  const SessionFile log(logs / "session.jsonl", "s-limit", lab.workspace());
  const std::vector<std::string> variables{"LOG=" + log.path.string()};
  const auto run = [&]() {
    FenceOptions options;
    options.session_log = log.path;
    options.session_cwd = lab.workspace();
    options.temporary_root = lab.outside() / ("private-" + std::to_string(::geteuid())); // the host's own
    std::string text;
    for (const SandboxMode mode : fenced_modes) {
      const PreparedFence fence = prepare(lab.policy(mode), options);
      const Shell chmod =
          shell(fence, R"(chmod 666 "$LOG" && stat -c %a "$LOG" && chmod 600 "$LOG" && stat -c %a "$LOG")",
                lab.workspace(), variables);
      text += std::string(dsh::to_string(mode)) + " chmod " + std::to_string(chmod.status) + " " + chmod.out;

      // The holder reports once it has the lock; the host's next append waits for it (here:
      // not at all) until the call ends.
      std::array<int, 2> ends{-1, -1};
      if (::pipe2(ends.data(), O_CLOEXEC) != 0) {
        return text + "pipe2 failed";
      }
      const dsh::UniqueFd reader{ends[0]};
      dsh::UniqueFd writer{ends[1]};
      FencedCommand holder(shell_argv(R"(exec 9<"$LOG"; flock -s 9 && echo held; exec sleep 1000)", variables));
      holder.redirect(STDOUT_FILENO, writer.get()).in_directory(lab.workspace());
      FencedChild call = holder.spawn(fence);
      writer.reset();
      std::string held;
      char byte = 0;
      while (held.find('\n') == std::string::npos && ::read(reader.get(), &byte, 1) == 1) {
        held += byte;
      }
      text += "holder " + held;
      dsh::SessionLogOptions no_wait;
      no_wait.lock_timeout = std::chrono::milliseconds(0);
      try {
        dsh::SessionLog during = dsh::SessionLog::open(log.path, no_wait);
        text += "opened during the call\n";
      } catch (const dsh::LogError& error) {
        text += std::string(error.what()) + "\n";
      }
      call.terminate();
      text += "ended " + std::to_string(call.wait()) + "\n";
      const dsh::PolicyOwner owner;
      text +=
          "after " + std::string(dsh::to_string(owner.resolve(dsh::SessionLog::open(log.path, no_wait)).mode)) + "\n";
    }
    (void)PreparedFence::remove_temporary_directory(options);
    return text;
  };
  const std::array<std::filesystem::path, 2> also_to_nobody{logs, log.path};
  over_host_table(lab, also_to_nobody, [&](bool unprivileged) {
    std::string expected;
    for (const SandboxMode mode : fenced_modes) {
      expected += std::string(dsh::to_string(mode)) + " chmod 0 666\n600\nholder held\nsession log " +
                  json_string_literal(log.path.native()) +
                  ": cannot lock: another open file description held the lock for the whole lock timeout (0 ms)\n"
                  "ended 137\nafter workspace-write\n";
    }
    CHECK(as_host(unprivileged, run) == expected);
    CHECK(mode_of(log.path) == "0600");
    CHECK(read_file(log.path) == log.bytes);
  });
}

// A workspace (or session cwd) in a directory another local user can change is swapped by that
// user for a link, and the next call would grant the link's target: refused, as OpenSSH's
// StrictModes refuses such paths, unless the host trusts them by name.
TEST_CASE("neighbours: a workspace in a directory another user can change is refused unless trusted") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path shared = lab.base() / "shared";
  std::filesystem::create_directory(shared);
  std::filesystem::create_directory(shared / "ws");
  dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  policy.workspace_root = dsh::canonical_path(shared / "ws");
  FenceOptions options;
  options.temporary_root = lab.base() / "private";
  options.session_id = "strict";
  const auto refusal = [&](const std::string& mode, const std::string& owner) {
    return "Landlock fence for workspace-write: refusing the workspace root " +
           json_string_literal(policy.workspace_root.native()) + ": the directory " +
           json_string_literal(dsh::canonical_path(shared).native()) + " (mode " + mode + ", owner uid " + owner +
           ", group gid 0) is writable by another user and has no sticky bit (set "
           "FenceOptions::allow_shared_directories to trust it)";
  };
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  CHECK_THROWS_WITH(prepare(policy, options), refusal("0777", "0"));
  REQUIRE(::chmod(shared.c_str(), 0770) == 0);
  REQUIRE(::chown(shared.c_str(), 0, 4242) == 0); // a group with no entry: it may hold anyone
  CHECK_THROWS_WITH(prepare(policy, options),
                    "Landlock fence for workspace-write: refusing the workspace root " +
                        json_string_literal(policy.workspace_root.native()) + ": the directory " +
                        json_string_literal(dsh::canonical_path(shared).native()) +
                        " (mode 0770, owner uid 0, group gid 4242) is writable by another user and has no sticky bit "
                        "(set FenceOptions::allow_shared_directories to trust it)");
  REQUIRE(::chown(shared.c_str(), 0, 0) == 0);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0); // sticky: nobody else may rename our entries
  CHECK(prepare(policy, options).report().status == dsh::FenceStatus::enforced);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(lab.base().c_str(), 0711) == 0); // the other user may pass through to shared/
  // The swap itself, by another local user, and why the refusal matters: a trusting host's next
  // call grants wherever the link points.
  const int swapped = dsh::test::in_child(nullptr, [&] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
      return 240;
    }
    if (::rename((shared / "ws").c_str(), (shared / "ws.old").c_str()) != 0) {
      return errno;
    }
    return errno_of(::symlink(lab.outside().c_str(), (shared / "ws").c_str()));
  });
  REQUIRE(swapped == 0);
  dsh::ResolvedPolicy next = policy;
  next.workspace_root = dsh::canonical_path(shared / "ws"); // as the owner would resolve it next time
  CHECK(next.workspace_root == lab.outside());
  FenceOptions trusting = options;
  trusting.allow_shared_directories = true;
  trusting.session_cwd = shared / "ws";
  CHECK(dsh::test::grants_directory_of(prepare(next, trusting).report(), lab.outside()));
  options.session_cwd = shared / "ws";
  CHECK_THROWS_WITH(prepare(next, options), "Landlock fence for workspace-write: refusing the session cwd " +
                                                json_string_literal((shared / "ws").native()) + ": the directory " +
                                                json_string_literal(shared.native()) +
                                                " (mode 0777, owner uid 0, group gid 0) is writable by another user "
                                                "and has no sticky bit (set FenceOptions::allow_shared_directories "
                                                "to trust it)");
  CHECK(read_file(lab.outside() / "keep") == "<missing>"); // nothing granted, nothing written
}

// A pseudo-terminal's number, and its node's inode number, are reused once it closes: the read
// fence's rule for the command's own terminal must be for the node of this call, never one kept
// from an earlier fence.
TEST_CASE("neighbours: a terminal whose number was reused is still the command's own to read") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  std::string names;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const Pty own(24, 80);
    names += own.name() + "\n";
    FenceOptions options;
    options.isolation = dsh::Isolation::off;
    options.temporary_root = lab.outside() / "private";
    options.terminal = own.name();
    const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::read_only), options);
    CHECK(fenced(fence, [&] { return open_error(own.name()); }) == 0);
  }
  CAPTURE(names);
}
