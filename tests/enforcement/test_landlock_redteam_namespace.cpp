// Red-team attempts that only the namespace layer closes: planting git's executables and
// configuration in the workspace (through the write tool, bash and the terminal family), reaching
// a daemon through its socket (tmux, a listening unix socket in the user's runtime directory or
// the host's /tmp), seeing and signalling the host's processes through /proc, and changing the
// mode of, or locking, the session log. The command is the attacker; the host and the kernel are
// trusted.
//
// Every attempt runs with three hosts: root, uid 65534, and uid 65534 in a process whose user
// namespaces are refused the way a container runtime's seccomp profile refuses them. The first
// two get the layer (root needs no user namespace); the third falls back to the base fence in
// best-effort, and each attempt then shows what the base fence alone cannot stop: the documented
// limits, pinned here so that a change of either layer shows. Each refused attempt also has its
// control run under the base fence (isolation off), which shows the attack works there.
#include "support/hosts.hpp"
#include "support/landlock.hpp"
#include "support/seccomp.hpp"
#include "support/terminal.hpp"

#include <dsh/detail/text/concat.hpp>
#include <dsh/landlock.hpp>
#include <dsh/open_beneath.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace dsh;
using namespace dsh::test;

namespace {

/// Who prepares and runs the fence.
enum class Host { root, unprivileged, without_user_namespaces };

const std::array<Host, 3> hosts{Host::root, Host::unprivileged, Host::without_user_namespaces};

const char* name_of(Host host) {
  switch (host) {
  case Host::root:
    return "root";
  case Host::unprivileged:
    return "uid 65534";
  case Host::without_user_namespaces:
    break;
  }
  return "uid 65534 without user namespaces";
}

/// Runs `attempt` once for each host, each in a fresh lab.
void over_hosts(const std::function<void(Host, const Lab&)>& attempt) {
  for (const Host host : hosts) {
    CAPTURE(name_of(host));
    const Lab lab;
    attempt(host, lab);
  }
}

/// True when `host` gets the namespace layer in best-effort on this machine.
bool layered(Host host) { return host != Host::without_user_namespaces; }

/// Runs `body` as `host` (a forked process; see dsh::test::as_host); a host without user
/// namespaces installs the refusing filter first. Returns what `body` returned.
std::string run_as(Host host, const std::function<std::string()>& body) {
  return as_host(host != Host::root, [&]() -> std::string {
    if (host == Host::without_user_namespaces) {
      if (const int error = dsh::test::refuse_user_namespaces(); error != 0) {
        return "refuse_user_namespaces failed: errno " + std::to_string(error);
      }
    }
    return body();
  });
}

/// `PreparedFence::prepare` with `isolation`, as a host calls it (the host's environment as the
/// process has it: a test that needs another $XDG_RUNTIME_DIR sets it in its forked host).
PreparedFence prepare(const dsh::ResolvedPolicy& policy, FenceOptions options, Isolation isolation) {
  options.isolation = isolation;
  return PreparedFence::prepare(policy, options);
}

/// The options of a session whose private temporary directory the host keeps beside the lab.
FenceOptions session_options(const Lab& lab) {
  FenceOptions options;
  options.session_id = "redteam-namespace";
  options.temporary_root = lab.outside() / ("private-" + std::to_string(::geteuid()));
  return options;
}

/// The variables every git call here gets: no system or global configuration, an identity, and
/// discovery stopped at the lab (which lies inside this project's own repository).
std::vector<std::string> git_variables(const Lab& lab, const std::filesystem::path& marker) {
  return {"HOME=" + lab.outside().string(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
          "GIT_CEILING_DIRECTORIES=" + lab.base().string(), "GIT_AUTHOR_NAME=redteam",
          "GIT_AUTHOR_EMAIL=redteam@example.invalid", "GIT_COMMITTER_NAME=redteam",
          "GIT_COMMITTER_EMAIL=redteam@example.invalid",
          // The user runs git on a repository a host of another uid made (root after uid 65534).
          "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*", "OUT=" + marker.string()};
}

/// The bytes of `.git/config` and of every hook, and the inode of `.git`: what a plant changes.
std::string git_snapshot(const std::filesystem::path& workspace) {
  std::string text = "config:" + read_file(workspace / ".git" / "config") + "\nhooks:";
  std::vector<std::string> hooks;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(workspace / ".git" / "hooks", error)) {
    hooks.push_back(entry.path().filename().native() + "=" + read_file(entry.path()));
  }
  std::sort(hooks.begin(), hooks.end());
  for (const std::string& hook : hooks) {
    text += " " + hook;
  }
  struct stat info {};
  text += "\ngit inode:" + std::to_string(::lstat((workspace / ".git").c_str(), &info) == 0 ? info.st_ino : 0);
  return text;
}

/// Each way a hostile command plants something git runs later, one line each: the attempt and
/// "planted" or "refused". The last attempt moves `.git` away and builds a new one.
const std::string git_plant_script = R"(
attempt() { if "${@:2}" >/dev/null 2>&1; then echo "$1 planted"; else echo "$1 refused"; fi; }
attempt fsmonitor git config core.fsmonitor "touch $OUT"
attempt hooksPath git config core.hooksPath /tmp
attempt alias git config alias.st "!touch $OUT"
attempt hook sh -c 'printf "#!/bin/sh\ntouch %s\n" "$OUT" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
attempt hooks-rename mv .git/hooks .git/hooks-old
attempt config-replace sh -c 'cp .git/config .git/c && printf "[core]\n\tpager = touch $OUT\n" >> .git/c && mv .git/c .git/config'
attempt config-unlink rm .git/config
attempt git-rename sh -c 'mv .git .git-old && mkdir .git'
)";

/// The output of `git_plant_script` when every attempt is refused, or when every one succeeds.
std::string plant_outcome(bool refused) {
  std::string text;
  for (const char* attempt :
       {"fsmonitor", "hooksPath", "alias", "hook", "hooks-rename", "config-replace", "config-unlink", "git-rename"}) {
    text += std::string(attempt) + (refused ? " refused\n" : " planted\n");
  }
  return text;
}

/// A repository the host made in the workspace, with one commit.
void make_repository(const Lab& lab, const std::filesystem::path& marker) {
  REQUIRE(control_shell("git init -q && echo a > a && git add a && git commit -qm init", lab.workspace(),
                        git_variables(lab, marker)) == 0);
}

/// Hands the whole workspace (with its repository) to uid 65534.
void hand_workspace_to_nobody(const Lab& lab) {
  REQUIRE(control_shell("chown -R 65534:65534 .", lab.workspace()) == 0);
}

/// Runs `git status` and an empty commit as the host, unfenced, the way the user does after
/// the call: a plant would run there.
int host_uses_git(const Lab& lab, const std::filesystem::path& marker) {
  return control_shell("git status >/dev/null && git commit -q --allow-empty -m after", lab.workspace(),
                       git_variables(lab, marker));
}

/// A unix socket listening at `path` (no accept: a connect completes in the backlog), made by
/// the calling process; closed on destruction.
class Listener {
public:
  explicit Listener(const std::filesystem::path& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof address.sun_path) {
      return; // not ok(): the caller reports it (this may run in a forked host, without Catch2)
    }
    std::copy(path.native().begin(), path.native().end(), address.sun_path);
    fd_ = dsh::UniqueFd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
    ok_ = fd_ && ::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
          ::listen(fd_.get(), 8) == 0;
  }
  /// False when the socket could not be made.
  [[nodiscard]] bool ok() const noexcept { return ok_; }
  /// How many clients reached it so far (each accepted and closed).
  int reached() {
    int count = 0;
    while (dsh::UniqueFd client{::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC)}) {
      ++count;
    }
    return count;
  }

private:
  dsh::UniqueFd fd_;
  bool ok_ = false;
};

/// A directory with a short path (a unix socket's address holds at most 107 bytes) outside
/// every temporary area and outside the runtime directory, owned by `owner`; removed with
/// everything in it on destruction.
class ShortDirectory : public TempDir {
public:
  explicit ShortDirectory(::uid_t owner) : TempDir(short_parent()) {
    REQUIRE(::chown(path().c_str(), owner, owner) == 0);
  }

private:
  /// The first of the short system directories this host may create a directory in.
  static std::filesystem::path short_parent() {
    for (const char* base : {"/var/lib", "/opt", "/srv"}) {
      if (::access(base, W_OK | X_OK) == 0) {
        return base;
      }
    }
    FAIL("none of /var/lib, /opt and /srv is writable");
    return {};
  }
};

/// A copy of the socket client in `lab`'s base, where every host can run it and the namespace
/// layer shows it (the build tree may lie under /tmp, which the layer replaces); returns its path.
std::filesystem::path install_client(const Lab& lab) {
  std::filesystem::path copy = lab.base() / "dsh_test_unix_connect";
  std::filesystem::copy_file(DSH_TEST_UNIX_CONNECT, copy, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(copy, std::filesystem::perms(0755));
  return copy;
}

/// The argv that runs `client` to connect to `socket`, as a daemon's client would.
std::vector<std::string> connect_argv(const std::filesystem::path& client, const std::filesystem::path& socket) {
  return {client.string(), socket.string(), "hello from the command"};
}

/// Runs `argv` under `fence` in `cwd`; returns its status and stdout as "<status> <out>".
std::string run_fenced(const PreparedFence& fence, std::vector<std::string> argv, const std::filesystem::path& cwd) {
  FencedCommand command(std::move(argv));
  std::string out;
  command.in_directory(cwd).on_output([&out](dsh::CommandStream stream, std::string_view bytes) {
    if (stream == dsh::CommandStream::out) {
      out.append(bytes);
    }
  });
  const int status = command.run(fence);
  return std::to_string(status) + " " + out;
}

/// The terminal family's path: `FencedCommand::exec_in_child` in a forked child, its output in
/// a file of `scratch`; returns "<status> <out>".
std::string run_exec_in_child(const PreparedFence& fence, const std::vector<std::string>& argv,
                              const std::filesystem::path& cwd, const std::filesystem::path& scratch) {
  const std::filesystem::path out = scratch / "exec-in-child.out";
  const dsh::UniqueFd file{::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (!file) {
    return "cannot open the output file";
  }
  FencedCommand command(argv);
  command.in_directory(cwd).redirect(STDOUT_FILENO, file.get()).redirect(STDERR_FILENO, file.get());
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    return "fork failed";
  }
  if (pid == 0) {
    command.exec_in_child(fence);
  }
  const int status = FencedCommand::wait_for(pid);
  return std::to_string(status) + " " + read_file(out);
}

/// Runs `body(client, runtime)` as `host` (see run_as) with a user's runtime directory of its
/// own: the socket client installed in `lab` (and the lab opened to nobody for an unprivileged
/// host), then, in the forked host, `runtime` made (mode 0700, the host's) in a short directory
/// outside every temporary area and named by XDG_RUNTIME_DIR; removed with what is in it after
/// `body`. Returns what `body` returned.
std::string with_runtime_directory(
    Host host, const Lab& lab,
    const std::function<std::string(const std::filesystem::path&, const std::filesystem::path&)>& body) {
  const std::filesystem::path client = install_client(lab);
  if (host != Host::root) {
    open_lab_to_nobody(lab);
  }
  const ShortDirectory short_directory(host == Host::root ? 0 : dsh::test::nobody);
  return run_as(host, [&]() -> std::string {
    const std::filesystem::path runtime = short_directory.path() / "runtime";
    if (::mkdir(runtime.c_str(), 0700) != 0) {
      return "mkdir failed";
    }
    ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1); // this forked host's own environment
    std::string text = body(client, runtime);
    std::filesystem::remove_all(runtime);
    return text;
  });
}

} // namespace

// =============================================================================================
// Git's executables and configuration inside the workspace
// =============================================================================================

TEST_CASE("namespace: git plants in an existing repository are refused alike by the write tool, bash and terminal") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::filesystem::path marker = lab.outside() / "planted";
    make_repository(lab, marker);
    if (host != Host::root) {
      open_lab_to_nobody(lab);
      hand_workspace_to_nobody(lab);
    }
    const std::string before = git_snapshot(lab.workspace());
    const std::vector<std::string> variables = git_variables(lab, marker);
    const std::string seen = run_as(host, [&]() -> std::string {
      const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
      std::string text;
      // The write tool: the policy's own check and its opener refuse the same entries.
      for (const char* entry : {".git/config", ".git/hooks/pre-commit", ".git/hooks/post-checkout"}) {
        text += std::string("permits_write ") + entry + " " +
                (policy.permits_write(lab.workspace() / entry) ? "yes" : "no") + "\n";
        try {
          (void)dsh::open_for_write(policy, lab.workspace() / entry);
          text += std::string("open_for_write ") + entry + " opened\n";
        } catch (const std::exception&) {
          text += std::string("open_for_write ") + entry + " refused\n";
        }
      }
      const PreparedFence fence = prepare(policy, session_options(lab), Isolation::best_effort);
      text += "bash:\n" + run_fenced(fence, shell_argv(git_plant_script, variables), lab.workspace());
      text += "terminal:\n" +
              run_exec_in_child(fence, shell_argv(git_plant_script, variables), lab.workspace(), lab.outside());
      // What git itself must still do in the workspace.
      text +=
          "work " + run_fenced(fence,
                               shell_argv("echo b > b && git add b && git commit -qm b && git checkout -qb topic && "
                                          "git branch --list topic && git checkout -q - && echo done",
                                          variables),
                               lab.workspace());
      (void)PreparedFence::remove_temporary_directory(session_options(lab));
      return text;
    });
    std::string expected;
    for (const char* entry : {".git/config", ".git/hooks/pre-commit", ".git/hooks/post-checkout"}) {
      expected += std::string("permits_write ") + entry + " no\nopen_for_write " + entry + " refused\n";
    }
    if (layered(host)) {
      expected += "bash:\n0 " + plant_outcome(true) + "terminal:\n0 " + plant_outcome(true);
      expected += "work 0 * topic\ndone\n";
      CHECK(seen == expected);
      CHECK(git_snapshot(lab.workspace()) == before);
      CHECK(host_uses_git(lab, marker) == 0);
      CHECK_FALSE(exists_nofollow(marker));
    } else {
      // The documented limit: without the layer, bash writes beneath the workspace as Landlock
      // grants it (the report says the bash family cannot hold protected paths).
      CHECK(seen.find("bash:\n0 fsmonitor planted\n") != std::string::npos);
      CHECK(git_snapshot(lab.workspace()) != before);
    }
  });
}

TEST_CASE("namespace: the same plants under the base fence alone succeed (the control)") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path marker = lab.outside() / "planted";
  make_repository(lab, marker);
  const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::off);
  CHECK(run_fenced(fence, shell_argv(git_plant_script, git_variables(lab, marker)), lab.workspace()) ==
        "0 " + plant_outcome(false));
  (void)PreparedFence::remove_temporary_directory(session_options(lab));
}

TEST_CASE("namespace: a fresh git init in the workspace cannot be filled with a hook or a configuration") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::filesystem::path marker = lab.outside() / "planted";
    if (host != Host::root) {
      open_lab_to_nobody(lab);
    }
    const std::vector<std::string> variables = git_variables(lab, marker);
    const std::string script = R"(git init -q >/dev/null 2>&1
printf '#!/bin/sh\ntouch "%s"\n' "$OUT" > .git/hooks/pre-commit 2>/dev/null && chmod +x .git/hooks/pre-commit
git config core.fsmonitor "touch $OUT" 2>/dev/null
echo ran)";
    // The second call finds the first call's empty placeholder .git, and tries to make a
    // repository in it by hand (git init would refuse the read-only .git).
    const std::string second =
        R"(mkdir .git/objects .git/refs 2>/dev/null; echo 'ref: refs/heads/main' > .git/HEAD 2>/dev/null
printf '[core]\n\tfsmonitor = touch %s\n' "$OUT" > .git/config 2>/dev/null
echo ran again)";
    const std::string seen = run_as(host, [&]() -> std::string {
      std::string text;
      for (const std::string& call : {script, second}) {
        const PreparedFence fence =
            prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::best_effort);
        text += run_fenced(fence, shell_argv(call, variables), lab.workspace());
      }
      (void)PreparedFence::remove_temporary_directory(session_options(lab));
      return text;
    });
    CHECK(seen == "0 ran\n0 ran again\n");
    const bool hook = exists_nofollow(lab.workspace() / ".git" / "hooks" / "pre-commit");
    const bool configured = read_file(lab.workspace() / ".git" / "config").find("fsmonitor") != std::string::npos;
    if (layered(host)) {
      CHECK_FALSE(hook);
      CHECK_FALSE(configured);
      // The placeholder holds, after the second call, only the placeholders of its own entries
      // (which its scan as a git directory made): no HEAD, objects or refs, no repository.
      std::vector<std::string> made;
      for (const auto& entry : std::filesystem::directory_iterator(lab.workspace() / ".git")) {
        made.push_back(entry.path().filename().native());
      }
      std::sort(made.begin(), made.end());
      CHECK(made == std::vector<std::string>{"commondir", "config", "config.worktree", "hooks"});
      CHECK(read_file(lab.workspace() / ".git" / "config").empty());
      CHECK(std::filesystem::is_empty(lab.workspace() / ".git" / "hooks"));
      (void)host_uses_git(lab, marker); // whatever the user's git finds there, it runs nothing planted
      CHECK_FALSE(exists_nofollow(marker));
    } else {
      CHECK(hook); // the documented limit of the base fence
      CHECK(configured);
    }
  });
}

/// Plants that go around a protected entry rather than at it: the directory holding a linked
/// worktree's `.git` pointer renamed and made again with a pointer to a planted git directory;
/// the worktree's `gitdir` back-pointer (through which the scan finds that pointer) rewritten or
/// removed; the file a hook's symbolic link names written, or its directory renamed and made
/// again. One line each: the attempt and "planted" or "refused".
const std::string around_plant_script = R"(
attempt() { if "${@:2}" >/dev/null 2>&1; then echo "$1 planted"; else echo "$1 refused"; fi; }
git init -q evil >/dev/null 2>&1 && git -C evil config core.fsmonitor "touch $OUT"
attempt worktree-rename sh -c 'mv wt wt.moved && mkdir wt && printf "gitdir: ../evil/.git\n" > wt/.git'
attempt worktree-gitdir sh -c 'echo /nowhere/.git > .git/worktrees/wt/gitdir'
attempt worktree-gitdir-rm rm .git/worktrees/wt/gitdir
attempt hook-link-target sh -c 'printf "touch $OUT\n" >> scripts/commit-msg'
attempt hook-link-dir sh -c 'mv scripts scripts.moved && mkdir scripts && printf "#!/bin/sh\ntouch $OUT\n" > scripts/commit-msg && chmod +x scripts/commit-msg'
)";

TEST_CASE("namespace: a worktree's directory, its gitdir file and a hook's linked file cannot be replaced either") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::filesystem::path marker = lab.outside() / "planted";
    make_repository(lab, marker);
    REQUIRE(control_shell("git worktree add -q wt && mkdir scripts && printf '#!/bin/sh\\nexit 0\\n' > "
                          "scripts/commit-msg && chmod +x scripts/commit-msg && "
                          "ln -s ../../scripts/commit-msg .git/hooks/commit-msg",
                          lab.workspace(), git_variables(lab, marker)) == 0);
    if (host != Host::root) {
      open_lab_to_nobody(lab);
      hand_workspace_to_nobody(lab);
    }
    const std::string pointer = read_file(lab.workspace() / "wt/.git");
    const std::string gitdir = read_file(lab.workspace() / ".git/worktrees/wt/gitdir");
    const std::string hook = read_file(lab.workspace() / "scripts/commit-msg");
    const std::vector<std::string> variables = git_variables(lab, marker);
    const std::string seen = run_as(host, [&]() -> std::string {
      const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
      std::string text;
      for (const char* entry : {".git/worktrees/wt/gitdir", "scripts/commit-msg", "wt"}) {
        text += std::string("permits_write ") + entry + " " +
                (policy.permits_write(lab.workspace() / entry) ? "yes" : "no") + "\n";
      }
      const PreparedFence fence = prepare(policy, session_options(lab), Isolation::best_effort);
      text += run_fenced(fence, shell_argv(around_plant_script, variables), lab.workspace());
      (void)PreparedFence::remove_temporary_directory(session_options(lab));
      return text;
    });
    const std::string permits = "permits_write .git/worktrees/wt/gitdir no\npermits_write scripts/commit-msg no\n"
                                "permits_write wt no\n";
    if (layered(host)) {
      CHECK(seen == permits + "0 worktree-rename refused\nworktree-gitdir refused\nworktree-gitdir-rm refused\n"
                              "hook-link-target refused\nhook-link-dir refused\n");
      CHECK(read_file(lab.workspace() / "wt/.git") == pointer);
      CHECK(read_file(lab.workspace() / ".git/worktrees/wt/gitdir") == gitdir);
      CHECK(read_file(lab.workspace() / "scripts/commit-msg") == hook);
      // The user's git in the worktree and a commit in the repository run nothing planted.
      (void)control_shell("git -C wt status; git commit -q --allow-empty -m after", lab.workspace(), variables);
      CHECK_FALSE(exists_nofollow(marker));
    } else {
      // The documented limit: without the layer bash renames and writes as Landlock grants it.
      CHECK(seen.find("0 worktree-rename planted\n") != std::string::npos);
    }
  });
}

/// Makes the workspace root a git directory of its own, as git finds a bare repository where
/// `.git` is missing or is no git directory: `.git/HEAD` removed (when there is one), then a
/// `HEAD`, `objects`, `refs`, a `config` whose fsmonitor touches `$OUT` and a pre-commit hook
/// that does, at the root. Prints whether `HEAD` could be written, then "ran".
const std::string bare_root_plant_script = R"(rm -f .git/HEAD 2>/dev/null
mkdir -p objects refs/heads hooks 2>/dev/null
if echo 'ref: refs/heads/main' > HEAD 2>/dev/null; then echo "HEAD written"; else echo "HEAD refused"; fi
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = %s\n\tfsmonitor = touch %s\n' "$PWD" "$OUT" > config 2>/dev/null
printf '#!/bin/sh\ntouch "%s"\n' "$OUT" > hooks/pre-commit 2>/dev/null && chmod +x hooks/pre-commit
echo ran)";

/// What the user runs after the call, unfenced, each whatever the other did: `git status` and an
/// empty commit, where a planted fsmonitor or hook would run.
void host_runs_git(const Lab& lab, const std::filesystem::path& marker) {
  (void)control_shell("git status; git commit -q --allow-empty -m after", lab.workspace(), git_variables(lab, marker));
}

TEST_CASE("namespace: the workspace root cannot be made a bare git directory, with or without a repository") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool repository : {true, false}) {
    for (const Host host : hosts) {
      CAPTURE(repository, name_of(host));
      const Lab lab;
      const std::filesystem::path marker = lab.outside() / "planted";
      if (repository) {
        make_repository(lab, marker);
      }
      if (host != Host::root) {
        open_lab_to_nobody(lab);
        hand_workspace_to_nobody(lab);
      }
      const std::vector<std::string> variables = git_variables(lab, marker);
      const std::string seen = run_as(host, [&]() -> std::string {
        const PreparedFence fence =
            prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::best_effort);
        std::string text = run_fenced(fence, shell_argv(bare_root_plant_script, variables), lab.workspace());
        (void)PreparedFence::remove_temporary_directory(session_options(lab));
        return text;
      });
      host_runs_git(lab, marker);
      if (layered(host)) {
        // The root's HEAD is the placeholder the layer made, empty and unchanged: git takes the
        // root for no git directory, and the planted config and hook never run.
        CHECK(seen == "0 HEAD refused\nran\n");
        CHECK(read_file(lab.workspace() / "HEAD").empty());
        CHECK_FALSE(exists_nofollow(marker));
      } else {
        CHECK(seen == "0 HEAD written\nran\n"); // the documented limit of the base fence
      }
    }
  }
}

TEST_CASE("namespace: the bare git directory planted at the root under the base fence alone runs (the control)") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool repository : {true, false}) {
    CAPTURE(repository);
    const Lab lab;
    const std::filesystem::path marker = lab.outside() / "planted";
    if (repository) {
      make_repository(lab, marker);
    }
    const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::off);
    CHECK(run_fenced(fence, shell_argv(bare_root_plant_script, git_variables(lab, marker)), lab.workspace()) ==
          "0 HEAD written\nran\n");
    (void)PreparedFence::remove_temporary_directory(session_options(lab));
    host_runs_git(lab, marker);
    CHECK(exists_nofollow(marker));
  }
}

// =============================================================================================
// Daemons that act for the command
// =============================================================================================

TEST_CASE("namespace: a tmux server of the host's, under the host's /tmp, cannot run a command for the call") {
  DSH_REQUIRE_LANDLOCK();
  if (control_shell("command -v tmux", ".") != 0) {
    DSH_TEST_SKIP("tmux is not installed");
  }
  over_hosts([&](const Host host, const Lab& lab) {
    const std::filesystem::path marker = lab.outside() / "tmux-ran";
    if (host != Host::root) {
      open_lab_to_nobody(lab);
    }
    const std::string seen = run_as(host, [&]() -> std::string {
      const std::filesystem::path sockets = "/tmp/dsh-redteam-tmux-" + std::to_string(::getpid());
      const std::filesystem::path socket = sockets / "default";
      // tmux runs a pane's command with $SHELL, else the user's login shell: uid 65534's is
      // nologin, whose pane would end at once and take the server with it.
      const std::vector<std::string> variables{"SOCK=" + socket.string(), "OUT=" + marker.string(), "SHELL=/bin/sh"};
      if (::mkdir(sockets.c_str(), 0700) != 0 ||
          control_shell(R"(tmux -S "$SOCK" new-session -d -s host "sleep 300")", "/", variables) != 0) {
        return "the host's tmux server did not start";
      }
      std::string text;
      for (const Isolation isolation : {Isolation::off, Isolation::best_effort}) {
        const PreparedFence fence = prepare(lab.policy(SandboxMode::read_only), session_options(lab), isolation);
        const Shell call = shell(fence, R"(tmux -S "$SOCK" run-shell "touch $OUT" 2>/dev/null; echo "tmux $?")",
                                 lab.workspace(), variables);
        ::usleep(200 * 1000); // run-shell runs in the background of the server
        text += (isolation == Isolation::off ? "off: " : "best-effort: ") + call.out +
                (exists_nofollow(marker) ? "ran\n" : "did not run\n");
        std::filesystem::remove(marker);
      }
      (void)control_shell(R"(tmux -S "$SOCK" kill-server)", "/", variables);
      std::filesystem::remove_all(sockets);
      return text;
    });
    CHECK(seen ==
          std::string("off: tmux 0\nran\nbest-effort: ") + (layered(host) ? "tmux 1\ndid not run\n" : "tmux 0\nran\n"));
  });
}

TEST_CASE("namespace: listening sockets in the user's runtime directory and the host's /tmp are out of reach") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::string seen = with_runtime_directory(host, lab, [&](const auto& client, const auto& runtime) {
      const std::filesystem::path host_tmp = "/tmp/dsh-redteam-socket-" + std::to_string(::getpid());
      if (::mkdir(host_tmp.c_str(), 0700) != 0) {
        return std::string("mkdir failed");
      }
      std::string text;
      for (const std::filesystem::path& socket : {runtime / "bus", host_tmp / "agent.sock"}) {
        Listener listener(socket);
        if (!listener.ok()) {
          return std::string("listen failed");
        }
        for (const Isolation isolation : {Isolation::off, Isolation::best_effort}) {
          const PreparedFence fence = prepare(lab.policy(SandboxMode::read_only), session_options(lab), isolation);
          text += std::string(isolation == Isolation::off ? "off " : "best-effort ");
          text += run_fenced(fence, connect_argv(client, socket), lab.workspace());
          text += "reached " + std::to_string(listener.reached()) + "\n"; // after the call
        }
      }
      std::filesystem::remove_all(host_tmp);
      return text;
    });
    const std::string refused = layered(host) ? "best-effort 1 connect: No such file or directory\nreached 0\n"
                                              : "best-effort 0 sent\nreached 1\n";
    CHECK(seen == "off 0 sent\nreached 1\n" + refused + "off 0 sent\nreached 1\n" + refused);
  });
}

// The default temporary root lies in the user's runtime directory: the session's private
// directory is a grant beneath it, and the runtime directory (ssh-agent's, gpg-agent's and the
// bus's sockets) must go out of view all the same, with only that grant bound back. Both ways
// the command finds its TMPDIR: /tmp (the private directory mounted there) and, where the /tmp
// row cannot apply (a grant beneath /tmp), the private directory at its own path.
TEST_CASE("namespace: the runtime directory holding the private temporary directory is out of view all the same") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::string seen = with_runtime_directory(host, lab, [&](const auto& client, const auto& runtime) {
      Listener listener(runtime / "bus");
      if (!listener.ok()) {
        return std::string("listen failed");
      }
      std::string text;
      for (const bool grant_under_tmp : {false, true}) {
        FenceOptions options;
        options.session_id = "runtime-directory";
        if (grant_under_tmp) {
          options.extra_writable = {lab.tmp_area()};
        }
        const PreparedFence fence = prepare(lab.policy(SandboxMode::workspace_write), options, Isolation::best_effort);
        const std::filesystem::path private_directory = fence.report().temporary_directory;
        text += grant_under_tmp ? "grant under /tmp: " : "default: ";
        text += dsh::detail::is_within(private_directory, runtime) ? "private directory in the runtime directory\n"
                                                                   : "private directory elsewhere\n";
        for (const std::string& note : fence.report().notes) {
          if (note.starts_with("not out of view")) {
            text += note + "\n";
          }
        }
        text += run_fenced(fence, connect_argv(client, runtime / "bus"), lab.workspace());
        text += "reached " + std::to_string(listener.reached()) + "\n";
        text += run_fenced(fence,
                           {"/bin/bash", "-c",
                            "f=$(mktemp) && printf kept > \"$f\" && mv \"$f\" \"$TMPDIR/made-by-command\" && "
                            "echo made; ls -A \"$XDG_RUNTIME_DIR\""},
                           lab.workspace());
        text += read_file(private_directory / "made-by-command") + "\n";
        std::filesystem::remove(private_directory / "made-by-command");
      }
      return text;
    });
    // The command's environment keeps XDG_RUNTIME_DIR: in the view it names an empty directory
    // but for the way to the private one; under the base fence alone the socket is reached.
    const std::string view = layered(host) ? "1 connect: No such file or directory\nreached 0\n0 made\n"
                                             "dsh-sandbox-policy\nkept\n"
                                           : "0 sent\nreached 1\n0 made\nbus\ndsh-sandbox-policy\nkept\n";
    CHECK(seen == "default: private directory in the runtime directory\n" + view +
                      "grant under /tmp: private directory in the runtime directory\n" + view);
  });
}

// The open limit below Landlock ABI 9: a socket in a directory the layer keeps in view (neither
// the runtime directory, nor /tmp, nor the host's declared state) is reached. ABI 9's
// LANDLOCK_ACCESS_FS_RESOLVE_UNIX closes it; the fence handles that right where the kernel has it.
TEST_CASE("limit: below Landlock ABI 9 a listening socket left in view is reached") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path client = install_client(lab);
  const ShortDirectory short_directory(::geteuid());
  const std::filesystem::path socket = short_directory.path() / "service.sock";
  Listener listener(socket);
  REQUIRE(listener.ok());
  const PreparedFence fence = prepare(lab.policy(SandboxMode::read_only), session_options(lab), Isolation::best_effort);
  const bool resolve_unix = fence.report().abi >= 9;
  CHECK(run_fenced(fence, connect_argv(client, socket), lab.workspace()) ==
        (resolve_unix ? "1 connect: Permission denied\n" : "0 sent\n"));
  CHECK(listener.reached() == (resolve_unix ? 0 : 1));
}

// =============================================================================================
// The host's terminals beneath a grant
// =============================================================================================

// The layer covers a device tree beneath a grant (here the host's /dev/pts bound into a chroot
// in the workspace) with an empty view. A command of another call of the same session may
// rename a directory above it between this call's prepare and its child's mounts and put
// another directory at that name; the host does that exchange here, at that moment, so that
// the attempt never depends on winning a race (a racing call won it in 10 to 17 of 30 calls).
// The view must not land on the other name and leave the host's terminals in view: the call
// runs nothing, and the line typed on the host's terminal is still unread after it.
TEST_CASE("namespace: a device tree beneath the workspace renamed after prepare is not left in view") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : {false, true}) {
    CAPTURE(unprivileged);
    const Lab lab;
    const std::filesystem::path& workspace = lab.workspace();
    for (const char* directory : {"chroot/dev/pts", "decoy/dev/pts"}) {
      std::filesystem::create_directories(workspace / directory);
    }
    if (unprivileged) {
      open_lab_to_nobody(lab);
      for (const char* directory : {"chroot", "chroot/dev", "chroot/dev/pts", "decoy", "decoy/dev", "decoy/dev/pts"}) {
        hand_to_nobody(workspace / directory);
      }
    }
    const std::string seen = as_host(false, [&]() -> std::string {
      if (!enter_private_mount_namespace()) {
        return std::string("cannot enter a private mount namespace: ") + std::strerror(errno);
      }
      if (::mount("/dev/pts", (workspace / "chroot/dev/pts").c_str(), nullptr, MS_BIND, nullptr) != 0) {
        return std::string("cannot bind /dev/pts into the chroot: ") + std::strerror(errno);
      }
      return as_host(unprivileged, [&]() -> std::string {
        const Pty user(24, 80); // the host user's terminal
        if (::write(user.master(), "secret\n", 7) != 7) {
          return "cannot type on the host's terminal";
        }
        const std::vector<std::string> variables{"N=" + user.name().substr(std::string("/dev/pts/").size())};
        const std::string script = R"script(for d in chroot decoy; do
  if [ "$(stat -f -c %T $d/dev/pts)" = devpts ]; then echo "in view at $d"; timeout 2 head -c 6 $d/dev/pts/$N; echo; fi
done; echo ran)script";
        std::string text;
        {
          const PreparedFence fence =
              prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::required);
          const Shell call = shell(fence, script, workspace, variables);
          text += "as prepared: " + std::to_string(call.status) + " " + call.out;
        }
        const PreparedFence fence =
            prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::required);
        if (::syscall(SYS_renameat2, AT_FDCWD, (workspace / "chroot").c_str(), AT_FDCWD, (workspace / "decoy").c_str(),
                      RENAME_EXCHANGE) != 0) {
          return text + "cannot exchange the chroot and the decoy: " + std::strerror(errno);
        }
        try {
          const Shell call = shell(fence, script, workspace, variables);
          text += "moved: ran, " + std::to_string(call.status) + " " + call.out;
        } catch (const dsh::Error& error) {
          const std::string what = error.what();
          text += "moved: refused" +
                  std::string(what.find("no longer the one the fence was prepared with") != std::string::npos
                                  ? " (moved since prepare)\n"
                                  : ": " + what + "\n");
        }
        const int flags = ::fcntl(user.slave(), F_GETFL);
        std::array<char, 64> left{};
        const ::ssize_t got = ::fcntl(user.slave(), F_SETFL, flags | O_NONBLOCK) == 0
                                  ? ::read(user.slave(), left.data(), left.size())
                                  : -1;
        return text + "the host's terminal holds: " +
               (got > 0 ? std::string(left.data(), static_cast<std::size_t>(got)) : "nothing\n");
      });
    });
    CHECK(seen == "as prepared: 0 ran\nmoved: refused (moved since prepare)\nthe host's terminal holds: secret\n");
  }
}

// =============================================================================================
// The host's processes
// =============================================================================================

TEST_CASE("namespace: a host process is neither seen through /proc nor signalled") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    if (host != Host::root) {
      open_lab_to_nobody(lab);
    }
    const std::string seen = run_as(host, [&]() -> std::string {
      std::fflush(nullptr);
      const ::pid_t outsider = ::fork();
      if (outsider == 0) {
        ::execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      const std::vector<std::string> variables{"PEER=" + std::to_string(outsider)};
      const std::string script =
          R"(test -e /proc/$PEER/cmdline && echo seen || echo hidden
kill -0 $PEER 2>/dev/null && echo signalled || echo not signalled
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; test $n -le 4 && echo "own tree only" || echo "more processes")";
      std::string text;
      for (const Isolation isolation : {Isolation::off, Isolation::best_effort}) {
        const PreparedFence fence = prepare(lab.policy(SandboxMode::read_only), session_options(lab), isolation);
        text += (isolation == Isolation::off ? "off: " : "best-effort: ") +
                shell(fence, script, lab.workspace(), variables).out;
      }
      ::kill(outsider, SIGKILL);
      (void)FencedCommand::wait_for(outsider);
      return text;
    });
    // Under the base fence the process is seen, and Landlock's signal scope already stops the kill.
    CHECK(seen ==
          std::string("off: seen\nnot signalled\nmore processes\nbest-effort: ") +
              (layered(host) ? "hidden\nnot signalled\nown tree only\n" : "seen\nnot signalled\nmore processes\n"));
  });
}

// =============================================================================================
// The session log's metadata and locks
// =============================================================================================

TEST_CASE("namespace: a command can neither chmod nor lock its own session log") {
  DSH_REQUIRE_LANDLOCK();
  over_hosts([&](const Host host, const Lab& lab) {
    const std::filesystem::path logs = lab.outside() / "logs";
    std::filesystem::create_directory(logs);
    const std::filesystem::path log = logs / "session.jsonl";
    {
      dsh::SessionLog created = dsh::SessionLog::create(log, {"s-ns", lab.workspace().string(), 1764480000000});
      dsh::set_sandbox_mode(created, SandboxMode::workspace_write);
    }
    const std::string bytes = read_file(log);
    if (host != Host::root) {
      open_lab_to_nobody(lab);
      hand_to_nobody(logs);
      hand_to_nobody(log);
    }
    const std::vector<std::string> variables{"LOG=" + log.string()};
    const std::string seen = run_as(host, [&]() -> std::string {
      FenceOptions options = session_options(lab);
      options.session_log = log;
      options.session_cwd = lab.workspace();
      std::string text;
      for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
        const PreparedFence fence = prepare(lab.policy(mode), options, Isolation::best_effort);
        const Shell chmod =
            shell(fence, R"(chmod 666 "$LOG" 2>/dev/null && echo changed || echo refused)", lab.workspace(), variables);
        // The holder says whether it got the lock; the host then opens the log without waiting.
        std::array<int, 2> ends{-1, -1};
        if (::pipe2(ends.data(), O_CLOEXEC) != 0) {
          return text + "pipe2 failed";
        }
        const dsh::UniqueFd reader{ends[0]};
        dsh::UniqueFd writer{ends[1]};
        FencedCommand holder(
            shell_argv(R"({ exec 9<"$LOG" && flock -s 9 && echo held; } 2>/dev/null || echo refused; exec sleep 1000)",
                       variables));
        holder.redirect(STDOUT_FILENO, writer.get()).in_directory(lab.workspace());
        dsh::FencedChild call = holder.spawn(fence);
        writer.reset();
        std::string held;
        char byte = 0;
        while (held.find('\n') == std::string::npos && ::read(reader.get(), &byte, 1) == 1) {
          held += byte;
        }
        dsh::SessionLogOptions no_wait;
        no_wait.lock_timeout = std::chrono::milliseconds(0);
        std::string during;
        try {
          const dsh::SessionLog opened = dsh::SessionLog::open(log, no_wait);
          during = "opened";
        } catch (const dsh::LogError& error) {
          during = error.what();
        }
        call.terminate();
        (void)call.wait();
        text += dsh::detail::concat(dsh::to_string(mode), ": chmod ", chmod.out, "lock ", held, "host ", during, "\n");
      }
      (void)PreparedFence::remove_temporary_directory(options);
      return text;
    });
    if (layered(host)) {
      CHECK(seen == "read-only: chmod refused\nlock refused\nhost opened\n"
                    "workspace-write: chmod refused\nlock refused\nhost opened\n");
    } else {
      CHECK(seen.find("chmod changed") != std::string::npos); // the base fence's documented limit
    }
    CHECK(read_file(log) == bytes);
  });
}

// =============================================================================================
// User namespaces refused: best-effort falls back and says so, required runs nothing
// =============================================================================================

// A command of the same user can use up the user's namespace count (ENOSPC) during another
// call; best-effort must not then run the next call without the layer, and a host must not
// remember that refusal.
TEST_CASE("namespace: a namespace limit reached makes best-effort run nothing rather than fall back") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : {false, true}) {
    CAPTURE(unprivileged);
    const Lab lab;
    const std::filesystem::path marker = lab.workspace() / "ran";
    if (unprivileged) {
      open_lab_to_nobody(lab);
    }
    const std::string seen = as_host(unprivileged, [&]() -> std::string {
      std::string text;
      for (const Isolation isolation : {Isolation::best_effort, Isolation::required}) {
        // A child host: the refusing filter cannot be taken back, and the next host is clean.
        text += dsh::test::unfenced([&] {
                  if (dsh::test::refuse_namespaces(
                          CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS, ENOSPC) != 0) {
                    return 3;
                  }
                  try {
                    const PreparedFence fence =
                        prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), isolation);
                    (void)shell(fence, "touch ran", lab.workspace());
                    return 1;
                  } catch (const LandlockError& error) {
                    const std::string message = error.what();
                    return message.find("No space left on device") != std::string::npos &&
                                   message.ends_with("does not fall back to the base fence; nothing runs")
                               ? 0
                               : 2;
                  }
                }) == 0
                    ? "refused "
                    : "ran ";
      }
      // In this host, which never saw the limit, the layer applies.
      const PreparedFence fence =
          prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::best_effort);
      text += fence.report().layers.front().applied ? "then layered\n" : "then not layered\n";
      (void)PreparedFence::remove_temporary_directory(session_options(lab));
      return text;
    });
    CHECK(seen == "refused refused then layered\n");
    CHECK_FALSE(exists_nofollow(marker));
  }
}

// The refusal by a limit is not remembered: the same host, once the limit is gone, has the
// layer again at its next call (a remembered refusal would refuse every later call).
TEST_CASE("namespace: a namespace limit is asked again at the next call, and once lifted the layer applies") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : {false, true}) {
    CAPTURE(unprivileged);
    const Lab lab;
    if (unprivileged) {
      open_lab_to_nobody(lab);
    }
    const std::string seen = as_host(unprivileged, [&]() -> std::string {
      std::string text;
      // A child host: the filter cannot be taken back.
      const int code = dsh::test::unfenced([&] {
        dsh::test::NamespaceLimit limit(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS);
        if (limit.error() != 0) {
          return 10;
        }
        const auto attempt = [&]() -> int {
          try {
            const PreparedFence fence =
                prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::best_effort);
            if (!fence.report().layers.front().applied) {
              return 2; // fell back to the base fence
            }
            return shell(fence, "touch layered", lab.workspace()).status == 0 ? 0 : 3;
          } catch (const LandlockError& error) {
            return std::string(error.what()).find("No space left on device") != std::string::npos ? 1 : 4;
          }
        };
        const int reached = attempt();
        const int again = attempt(); // asked again, not remembered: refused again
        limit.reach(false);
        const int lifted = attempt();
        (void)PreparedFence::remove_temporary_directory(session_options(lab));
        return reached * 100 + again * 10 + lifted;
      });
      text += std::to_string(code);
      return text;
    });
    CHECK(seen == "110"); // refused, refused, then layered and run
    CHECK(exists_nofollow(lab.workspace() / "layered"));
  }
}

TEST_CASE("namespace: with user namespaces refused, best-effort keeps the base fence and required runs nothing") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  open_lab_to_nobody(lab);
  const std::filesystem::path target = lab.outside() / "target";
  write_file(target, "outside\n");
  hand_to_nobody(target);
  const std::filesystem::path marker = lab.workspace() / "ran";
  const std::string seen = run_as(Host::without_user_namespaces, [&]() -> std::string {
    std::string text;
    {
      const PreparedFence fence =
          prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::best_effort);
      const Shell call = shell(fence, R"(echo x > "$TARGET" 2>/dev/null && echo wrote || echo refused; touch ran)",
                               lab.workspace(), {"TARGET=" + target.string()});
      text += "best-effort " + std::to_string(call.status) + " " + call.out;
    }
    std::filesystem::remove(marker);
    try {
      const PreparedFence fence =
          prepare(lab.policy(SandboxMode::workspace_write), session_options(lab), Isolation::required);
      text += "required prepared: " + fence.report().describe() + "\n";
      (void)shell(fence, "touch ran", lab.workspace());
    } catch (const LandlockError&) {
      text += "required refused\n";
    }
    (void)PreparedFence::remove_temporary_directory(session_options(lab));
    return text;
  });
  CHECK(seen == "best-effort 0 refused\nrequired refused\n");
  CHECK(read_file(target) == "outside\n");
  CHECK_FALSE(exists_nofollow(marker));
}
