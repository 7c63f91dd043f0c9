// The fence's namespace layer (docs/enforcement.md#the-namespace-layer), as root and as an
// unprivileged host (uid 65534, in a forked host process): the report in each mode, and from
// inside a fenced bash: its own processes only, /tmp as the private directory, a read-only view
// outside the grants, the session log out of view, protected entries that stay byte for byte
// while git still commits, and, with user namespaces refused by a seccomp filter as container
// runtimes refuse them, best-effort falling back to the base fence and required running nothing.
#include "support/catch.hpp"
#include "support/hosts.hpp"
#include "support/landlock.hpp"
#include "support/seccomp.hpp"
#include "support/session_log.hpp"

#include <dsh/detail/text/concat.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace dsh;
using dsh::detail::ProtectedKind;
using dsh::detail::ProtectedScan;
using namespace dsh::test;

namespace {

/// How a test's host process runs.
struct Host {
  bool unprivileged = false;       ///< as uid and gid 65534
  bool refused_namespaces = false; ///< with user namespaces refused (`refuse_user_namespaces`)
};

/// Runs `body` in a forked host process as `host` says (dsh::test::as_host), with user
/// namespaces refused first when `host` asks (dsh::test::refuse_user_namespaces).
std::string as_host(Host host, const std::function<std::string()>& body) {
  return dsh::test::as_host(host.unprivileged, [&]() -> std::string {
    if (host.refused_namespaces) {
      if (const int error = dsh::test::refuse_user_namespaces(); error != 0) {
        return "refuse_user_namespaces failed: errno " + std::to_string(error);
      }
    }
    return body();
  });
}

/// The laboratory of one test, open to uid 65534 when the host is unprivileged: the workspace,
/// `outside` (with a target file), the session's state directory with its log, and the
/// temporary root, all owned by the host's uid.
struct Setup {
  explicit Setup(bool unprivileged) {
    const ::uid_t uid = unprivileged ? nobody : ::geteuid();
    REQUIRE(::chmod(lab.base().c_str(), 0755) == 0);
    state = lab.base() / "state";
    std::filesystem::create_directory(state);
    log = state / "session.jsonl";
    write_file(log, dsh::test::header_line("ns-layer", 1, json_string_literal(lab.workspace().native())));
    REQUIRE(::chmod(log.c_str(), 0600) == 0);
    REQUIRE(::chmod(state.c_str(), 0700) == 0);
    target = lab.outside() / "target.txt";
    write_file(target, "outside\n");
    temporary_root = lab.base() / "temporary";
    std::filesystem::create_directory(temporary_root);
    REQUIRE(::chmod(temporary_root.c_str(), 0700) == 0);
    for (const std::filesystem::path& path : {lab.workspace(), lab.outside(), state, log, target, temporary_root}) {
      REQUIRE(::chown(path.c_str(), uid, uid) == 0);
    }
  }

  [[nodiscard]] FenceOptions options(Isolation isolation) const {
    FenceOptions options;
    options.session_log = log;
    options.session_cwd = lab.workspace();
    options.temporary_root = temporary_root;
    options.isolation = isolation;
    return options;
  }

  Lab lab;
  std::filesystem::path state;
  std::filesystem::path log;
  std::filesystem::path target;
  std::filesystem::path temporary_root;
};

/// The rows a best-effort or required fence reports with every row applied.
std::string applied_rows(bool unprivileged) {
  return std::string(unprivileged ? "user namespace, " : "") +
         "mount namespace, read-only root, protected paths, /dev, PID namespace and /proc, IPC namespace, "
         "UTS namespace, /tmp, /var/tmp, /dev/shm, host state out of view";
}

/// Each row as "name: applied" or "name: not applied: reason", one a line.
std::string rows_of(const dsh::FenceReport& report) {
  std::string text;
  for (const dsh::FenceLayer& layer : report.layers) {
    text += layer.name + (layer.applied ? ": applied" : ": not applied: " + layer.reason) + "\n";
  }
  return text;
}

/// The effective set a root command keeps: this process's, without `FENCE_DROPPED_CAPABILITIES`,
/// as /proc/self/status spells it.
std::string kept_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("CapEff:\t")) {
      const std::uint64_t kept = std::stoull(line.substr(8), nullptr, 16) & ~dsh::fence_dropped_capabilities();
      std::array<char, 17> text{};
      std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(kept));
      return text.data();
    }
  }
  return "<no CapEff>";
}

/// The mode (permission bits) and bytes of `path`.
std::string mode_and_bytes(const std::filesystem::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return "<missing>";
  }
  return std::to_string(info.st_mode & 07777) + " " + read_file(path);
}

} // namespace

TEST_CASE("the namespace layer's report in each isolation mode, as root and as an unprivileged host") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    const std::string seen = as_host({unprivileged, false}, [&]() {
      std::string text;
      for (const Isolation isolation : {Isolation::off, Isolation::best_effort, Isolation::required}) {
        for (const SandboxMode mode :
             {SandboxMode::read_only, SandboxMode::workspace_write, SandboxMode::danger_full_access}) {
          const PreparedFence fence = PreparedFence::prepare(setup.lab.policy(mode), setup.options(isolation));
          const dsh::FenceReport& report = fence.report();
          text += std::string(dsh::to_string(isolation)) + " " + std::string(dsh::to_string(mode)) + ": " +
                  std::to_string(report.layers.size()) + " rows, isolation " +
                  std::string(dsh::to_string(report.isolation)) + ", ipc namespace " +
                  (report.ipc_namespace ? "yes" : "no") + "\n";
          const std::size_t at = report.describe().find("; namespace layer");
          text += at == std::string::npos ? "no layer\n" : report.describe().substr(at) + "\n";
        }
      }
      return text;
    });
    // The whole line of one fence, byte for byte: the base fence's, its IPC answer now the
    // layer's, then the rows.
    const std::string whole = as_host({unprivileged, false}, [&]() {
      const std::string base =
          PreparedFence::prepare(setup.lab.policy(SandboxMode::read_only), setup.options(Isolation::off))
              .report()
              .describe();
      const std::string layered =
          PreparedFence::prepare(setup.lab.policy(SandboxMode::read_only), setup.options(Isolation::best_effort))
              .report()
              .describe();
      return dsh::detail::concat(base, "\n", layered);
    });
    const std::string base = whole.substr(0, whole.find('\n'));
    const std::string base_ipc =
        unprivileged ? "; syscall filter: on, System V IPC refused" : "; syscall filter: on, own IPC namespace";
    REQUIRE(base.size() >= base_ipc.size());
    CHECK(base.substr(base.size() - base_ipc.size()) == base_ipc);
    // The base fence refuses reads beneath the device trees; the layer's fresh /dev holds only
    // the readable devices, so its fence does not.
    const std::string reads = dsh::test::reads_refused_text();
    REQUIRE(base.size() >= base_ipc.size() + reads.size());
    CHECK(base.substr(base.size() - base_ipc.size() - reads.size(), reads.size()) == reads);
    CHECK(whole.substr(whole.find('\n') + 1) ==
          dsh::detail::concat(
              std::string_view(base).substr(0, base.size() - base_ipc.size() - reads.size()),
              "; syscall filter: on, own IPC namespace; namespace layer (best-effort): ", applied_rows(unprivileged)));
    const std::string rows = applied_rows(unprivileged);
    const std::string count = unprivileged ? "10" : "9";
    const std::string ipc_off = unprivileged ? "no" : "yes"; // the base fence's own answer
    CHECK(seen == dsh::detail::concat(
                      "off read-only: 0 rows, isolation off, ipc namespace ", ipc_off, "\nno layer\n",
                      "off workspace-write: 0 rows, isolation off, ipc namespace ", ipc_off, "\nno layer\n",
                      "off danger-full-access: 0 rows, isolation off, ipc namespace no\nno layer\n",
                      "best-effort read-only: ", count, " rows, isolation best-effort, ipc namespace yes\n",
                      "; namespace layer (best-effort): ", rows, "\n", "best-effort workspace-write: ", count,
                      " rows, isolation best-effort, ipc namespace yes\n", "; namespace layer (best-effort): ", rows,
                      "\n", "best-effort danger-full-access: 0 rows, isolation off, ipc namespace no\nno layer\n",
                      "required read-only: ", count, " rows, isolation required, ipc namespace yes\n",
                      "; namespace layer (required): ", rows, "\n", "required workspace-write: ", count,
                      " rows, isolation required, ipc namespace yes\n", "; namespace layer (required): ", rows, "\n",
                      "required danger-full-access: 0 rows, isolation off, ipc namespace no\nno layer\n"));
  }
}

TEST_CASE("inside the namespace layer: own processes, a private /tmp, a read-only view, the log out of view") {
  DSH_REQUIRE_LANDLOCK();
  const dsh::test::TempDir host_tmp("/tmp");
  const std::filesystem::path host_file = host_tmp / "host-file";
  write_file(host_file, "host\n");
  REQUIRE(::chmod(host_tmp.path().c_str(), 0755) == 0);
  // A daemon's listening socket in the host's /tmp, as tmux's /tmp/tmux-UID/default is.
  const std::filesystem::path socket_path = host_tmp / "daemon.sock";
  const dsh::UniqueFd daemon{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(socket_path.native().size() < sizeof address.sun_path);
  std::copy(socket_path.native().begin(), socket_path.native().end(), address.sun_path);
  REQUIRE(::bind(daemon.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(daemon.get(), 1) == 0);
  REQUIRE(::chmod(socket_path.c_str(), 0777) == 0);
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    // The user's runtime directory, with its agent sockets.
    const std::filesystem::path runtime = setup.lab.base() / "runtime";
    std::filesystem::create_directory(runtime);
    write_file(runtime / "bus", "");
    REQUIRE(::chown(runtime.c_str(), unprivileged ? nobody : 0, unprivileged ? nobody : 0) == 0);
    REQUIRE(::chmod(runtime.c_str(), 0700) == 0);
    const std::string log_before = mode_and_bytes(setup.log);
    // Files keep their owners; an unprivileged host's command keeps no capability after exec
    // (root's keeps those FENCE_DROPPED_CAPABILITIES leaves).
    const std::string uid = std::to_string(unprivileged ? nobody : ::geteuid());
    const std::string capabilities = unprivileged ? "0000000000000000" : kept_capabilities();
    const std::string script = "cd /proc && echo [0-9]*\n"
                               "test -S " +
                               socket_path.native() +
                               "; echo socket:$?\n"
                               "echo runtime:$(ls -A " +
                               runtime.native() +
                               " | wc -l)\n"
                               "echo private > /tmp/x && echo tmp:$?\n"
                               "test -e " +
                               host_file.native() +
                               "; echo host-tmp:$?\n"
                               "t=$(mktemp) && case $t in /tmp/tmp.*) echo mktemp:ok;; esac\n"
                               "echo TMPDIR=$TMPDIR\n"
                               "echo forged > " +
                               setup.target.native() +
                               "; echo outside:$?\n"
                               "echo state:$(ls -A " +
                               setup.state.native() +
                               " | wc -l)\n"
                               "flock -n " +
                               setup.log.native() +
                               " true 2>/dev/null; echo flock:$?\n"
                               "chmod 666 " +
                               setup.log.native() +
                               " 2>/dev/null; echo chmod:$?\n"
                               "echo in-workspace > " +
                               (setup.lab.workspace() / "made").native() + " && echo workspace:$?\n" +
                               "echo uid:$(id -u):$(stat -c %u " + (setup.lab.workspace() / "made").native() + ")\n" +
                               "grep CapEff /proc/self/status\n";
    const std::string seen = as_host({unprivileged, false}, [&]() {
      ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
      const PreparedFence fence =
          PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), setup.options(Isolation::required));
      const dsh::test::Captured run = dsh::test::bash(fence, script, setup.lab.workspace(), setup.lab.outside());
      return std::to_string(run.exit_code) + "\n" + run.out + run.err +
             "found: " + read_file(fence.report().temporary_directory / "x");
    });
    CHECK(seen == dsh::detail::concat("0\n1\nsocket:1\nruntime:0\ntmp:0\nhost-tmp:1\nmktemp:ok\nTMPDIR=/tmp\n"
                                      "outside:1\nstate:0\nflock:73\nchmod:1\nworkspace:0\nuid:",
                                      uid, ":", uid, "\nCapEff:\t", capabilities, "\nbash: line 8: ",
                                      setup.target.native(), ": Read-only file system\nfound: private\n"));
    CHECK(read_file(setup.target) == "outside\n");
    CHECK(mode_and_bytes(setup.log) == log_before);
    CHECK(read_file(setup.lab.workspace() / "made") == "in-workspace\n");
    CHECK(read_file(host_file) == "host\n");
  }
}

TEST_CASE("the layer's mount namespace is held by the call's supervisor, so its teardown follows the host's report") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    for (const Isolation isolation : {Isolation::required, Isolation::off}) {
      CAPTURE(unprivileged, isolation == Isolation::off);
      const Setup setup(unprivileged);
      const std::string result = as_host({unprivileged, false}, [&]() -> std::string {
        const PreparedFence fence =
            PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), setup.options(isolation));
        FencedCommand command({"bash", "-c", "readlink /proc/self/ns/mnt > ns.tmp && mv ns.tmp ns; exec sleep 30"});
        command.in_directory(setup.lab.workspace());
        dsh::FencedChild child = command.spawn(fence);
        const std::filesystem::path written = setup.lab.workspace() / "ns";
        for (int i = 0; i < 500 && !std::filesystem::exists(written); ++i) {
          ::usleep(10000);
        }
        std::string own = read_file(written);
        own = own.substr(0, own.find('\n'));
        std::string held = "none";
        const std::filesystem::path descriptors = "/proc/" + std::to_string(child.pid()) + "/fd";
        for (const auto& entry : std::filesystem::directory_iterator(descriptors)) {
          std::error_code ignored;
          if (std::filesystem::read_symlink(entry.path(), ignored).native() == own) {
            held = "the command's";
          }
        }
        child.terminate();
        const int status = child.wait();
        std::filesystem::remove(written);
        return own.starts_with("mnt:[") ? "held: " + held + ", " + std::to_string(status) : "no namespace: " + own;
      });
      CHECK(result ==
            (isolation == Isolation::off ? "held: none, " : "held: the command's, ") + std::to_string(128 + SIGKILL));
    }
  }
}

TEST_CASE("a workspace beneath /tmp keeps the host's /tmp in view in every mode, so the call still works there") {
  DSH_REQUIRE_LANDLOCK();
  const dsh::test::TempDir host_tmp("/tmp");
  REQUIRE(::chmod(host_tmp.path().c_str(), 0755) == 0);
  const std::filesystem::path workspace = dsh::canonical_path(host_tmp.path()) / "ws";
  std::filesystem::create_directory(workspace);
  write_file(workspace / "readme", "hello\n");
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    REQUIRE(::chown(workspace.c_str(), dsh::test::uid_of_host(unprivileged), dsh::test::uid_of_host(unprivileged)) ==
            0);
    const std::string seen = as_host({unprivileged, false}, [&]() -> std::string {
      std::string text;
      for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
        dsh::ResolvedPolicy policy;
        policy.mode = mode;
        policy.workspace_root = workspace;
        FenceOptions options; // no session, as dsh-fence-run prepares: only the root says where the work is
        options.isolation = Isolation::best_effort;
        const PreparedFence fence = PreparedFence::prepare(policy, options);
        for (const dsh::FenceLayer& layer : fence.report().layers) {
          if (!layer.applied) {
            text += layer.name + ": not applied: " + layer.reason + "\n";
          }
        }
        const dsh::test::Shell call =
            dsh::test::shell(fence, "cat readme && echo new > new; echo \"status $?\"", workspace);
        text += std::string(dsh::to_string(mode)) + ": " + call.out + call.err;
        std::error_code ignored;
        std::filesystem::remove(workspace / "new", ignored); // the fence removes its own temporary directory
        options.isolation = Isolation::required;
        try {
          (void)PreparedFence::prepare(policy, options);
          text += "required: prepared\n";
        } catch (const LandlockError& error) {
          const std::string what = error.what();
          text += "required: " + what.substr(what.find("but ")) + "\n";
        }
      }
      return text;
    });
    const std::string quoted_root = json_string_literal(workspace.native());
    // In read-only the root is no grant: before, /tmp became an empty view and the call could not
    // even enter its working directory.
    const auto problem = [&](std::string_view what) {
      return std::string(what) + " " + quoted_root + " lies beneath \"/tmp\"";
    };
    const std::string row = "/tmp, /var/tmp, /dev/shm: not applied: ";
    const std::string required = "required: but /tmp, /var/tmp, /dev/shm cannot be replaced: ";
    CHECK(seen == dsh::detail::concat(row, problem("the workspace root"),
                                      "\nread-only: hello\nstatus 1\nbash: line 1: new: Read-only file system\n",
                                      required, problem("the workspace root"), "; nothing runs\n", row,
                                      problem("the granted directory"), "\nworkspace-write: hello\nstatus 0\n",
                                      required, problem("the granted directory"), "; nothing runs\n"));
  }
}

TEST_CASE("a session log beside the workspace is hidden alone: it cannot be opened, locked or re-moded") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    // The log's directory holds the workspace: hiding it would hide the workspace.
    const std::filesystem::path log = setup.lab.base() / "beside.jsonl";
    write_file(log, "log bytes\n");
    REQUIRE(::chmod(log.c_str(), 0600) == 0);
    REQUIRE(::chown(log.c_str(), unprivileged ? nobody : 0, unprivileged ? nobody : 0) == 0);
    const std::string before = mode_and_bytes(log);
    const std::string seen = as_host({unprivileged, false}, [&]() {
      FenceOptions options = setup.options(Isolation::required);
      options.session_log = log;
      const PreparedFence fence = PreparedFence::prepare(setup.lab.policy(SandboxMode::read_only), options);
      const dsh::test::Captured run = dsh::test::bash(
          fence,
          "cat " + log.native() + " >/dev/null 2>&1; echo read:$?\n" + "flock -n " + log.native() +
              " true 2>/dev/null; echo flock:$?\n" + "chmod 666 " + log.native() + " 2>/dev/null; echo chmod:$?\n" +
              "ls " + setup.lab.workspace().native() + " >/dev/null && echo workspace:visible\n",
          setup.lab.workspace(), setup.lab.outside());
      return run.out + run.err;
    });
    CHECK(seen == "read:1\nflock:66\nchmod:1\nworkspace:visible\n");
    CHECK(mode_and_bytes(log) == before);
  }
}

TEST_CASE("a host path to hide that is a dangling link hides nothing until what it names exists, then that") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    // A socket's link left by a daemon that is gone (say /run/docker.sock): no bind can cover
    // a link, and what it names is not there to reach.
    const std::filesystem::path named = setup.lab.outside() / "daemon.sock";
    const std::filesystem::path link = setup.lab.outside() / "daemon-link";
    std::filesystem::create_symlink(named, link);
    const auto run = [&] {
      return as_host({unprivileged, false}, [&]() {
        FenceOptions options = setup.options(Isolation::required);
        options.protected_paths = {link};
        const PreparedFence fence = PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), options);
        const dsh::test::Captured ran = dsh::test::bash(fence, "cat " + link.native() + " 2>&1; echo read:$?\n",
                                                        setup.lab.workspace(), setup.lab.outside());
        return ran.out + ran.err + "exit:" + std::to_string(ran.exit_code);
      });
    };
    CHECK(run() == "cat: " + link.native() + ": No such file or directory\nread:1\nexit:0");
    write_file(named, "the daemon's\n");
    REQUIRE(::chown(named.c_str(), unprivileged ? nobody : 0, unprivileged ? nobody : 0) == 0);
    // What it names now is hidden: a bind of /dev/null on a nodev mount, which opens for nobody.
    CHECK(run() == "cat: " + link.native() + ": Permission denied\nread:1\nexit:0");
  }
}

TEST_CASE("a link loop to hide is not covered, and a session log not yet there has its directory hidden") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    const ::uid_t owner = unprivileged ? nobody : 0;
    // A link to itself names nothing: the call runs (planned as a file to cover, it failed).
    const std::filesystem::path loop = setup.lab.outside() / "loop";
    std::filesystem::create_symlink(loop, loop);
    // The session log as a link whose target is not made yet, beside another session's file.
    const std::filesystem::path other = setup.state / "other-session.jsonl";
    write_file(other, "the other session's\n");
    REQUIRE(::chown(other.c_str(), owner, owner) == 0);
    const std::filesystem::path log = setup.state / "current.jsonl";
    std::filesystem::create_symlink(setup.lab.outside() / "not-yet" / "s.jsonl", log);
    REQUIRE(::lchown(log.c_str(), owner, owner) == 0);
    const std::string seen = as_host({unprivileged, false}, [&]() {
      FenceOptions options = setup.options(Isolation::required);
      options.protected_paths = {loop};
      options.session_log = log;
      const PreparedFence fence = PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), options);
      const dsh::test::Captured ran =
          dsh::test::bash(fence, "echo ran; cat " + other.native() + " >/dev/null 2>&1; echo other:$?\n",
                          setup.lab.workspace(), setup.lab.outside());
      return ran.out + ran.err + "exit:" + std::to_string(ran.exit_code);
    });
    CHECK(seen == "ran\nother:1\nexit:0");
  }
}

TEST_CASE("protected entries stay byte for byte against write, rename, unlink and replace; git still commits") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    const std::filesystem::path repo = setup.lab.workspace();
    REQUIRE(::chown(repo.c_str(), 0, 0) == 0); // git refuses a repository root does not own
    REQUIRE(std::system(("git init -q " + repo.native() + " && cd " + repo.native() +
                         " && echo one > f && git add f && git -c user.name=t -c user.email=t@t commit -qm one")
                            .c_str()) == 0);
    if (unprivileged) {
      REQUIRE(std::system(("chown -R 65534:65534 " + repo.native()).c_str()) == 0);
    }
    const std::filesystem::path config = repo / ".git/config";
    const std::filesystem::path hooks = repo / ".git/hooks";
    const std::string config_before = mode_and_bytes(config);
    const std::string hooks_before = mode_and_bytes(hooks / "pre-commit.sample");
    const auto listing = [&hooks]() {
      std::string names;
      std::vector<std::string> sorted;
      for (const auto& entry : std::filesystem::directory_iterator(hooks)) {
        sorted.push_back(entry.path().filename().native());
      }
      std::sort(sorted.begin(), sorted.end());
      for (const std::string& name : sorted) {
        names += name + " ";
      }
      return names;
    };
    const std::string listing_before = listing();
    const ProtectedScan scan{{{config, ProtectedKind::file, ".git/config"},
                              {hooks, ProtectedKind::directory, ".git/hooks"},
                              {repo / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"},
                              {repo / ".git/modules", ProtectedKind::missing_directory, ".git/modules"},
                              {repo / ".git", ProtectedKind::pinned_directory, ".git"}},
                             ""};
    const std::string script = "cd " + repo.native() + " && export HOME=" + setup.lab.outside().native() +
                               "\n"
                               "echo '[core] fsmonitor = evil' >> .git/config 2>/dev/null; echo write:$?\n"
                               "mv .git/config .git/config.old 2>/dev/null; echo rename:$?\n"
                               "rm -f .git/config 2>/dev/null; echo unlink:$?\n"
                               "printf 'x' > .git/new && mv -f .git/new .git/config 2>/dev/null; echo replace:$?\n"
                               "ln -sf /etc/passwd .git/config 2>/dev/null; echo link:$?\n"
                               "echo evil > .git/hooks/pre-commit 2>/dev/null; echo hook:$?\n"
                               "mv .git/hooks .git/hooks.old 2>/dev/null; echo hooks-rename:$?\n"
                               "rm -rf .git/hooks 2>/dev/null; echo hooks-unlink:$?\n"
                               "echo x > .gitmodules 2>/dev/null; echo gitmodules:$?\n"
                               "mkdir .git/modules/x 2>/dev/null; echo modules:$?\n"
                               "mv .git .git-old 2>/dev/null; echo git-rename:$?\n"
                               "echo two > f && git add f && git -c user.name=t -c user.email=t@t commit -qm two && "
                               "echo commit:$?\n"
                               "git log --oneline | wc -l\n";
    const std::string seen = as_host({unprivileged, false}, [&]() {
      const PreparedFence fence = PreparedFence::prepare_with_protected(setup.lab.policy(SandboxMode::workspace_write),
                                                                        setup.options(Isolation::required), scan);
      const dsh::test::Captured run = dsh::test::bash(fence, script, repo, setup.lab.outside());
      return run.out + run.err;
    });
    CHECK(seen == "write:1\nrename:1\nunlink:1\nreplace:1\nlink:1\nhook:1\nhooks-rename:1\nhooks-unlink:1\n"
                  "gitmodules:1\nmodules:1\ngit-rename:1\ncommit:0\n2\n"
                  "bash: line 2: .git/config: Read-only file system\n"
                  "bash: line 7: .git/hooks/pre-commit: Read-only file system\n"
                  "bash: line 10: .gitmodules: Read-only file system\n");
    CHECK(mode_and_bytes(config) == config_before);
    CHECK(mode_and_bytes(hooks / "pre-commit.sample") == hooks_before);
    CHECK(listing() == listing_before);
    CHECK(mode_and_bytes(repo / ".gitmodules") == "420 "); // the placeholder: empty, 0644
    CHECK(std::filesystem::is_empty(repo / ".git/modules"));
    CHECK_FALSE(dsh::test::exists_nofollow(repo / ".git/config.old"));
    CHECK_FALSE(dsh::test::exists_nofollow(repo / ".git-old"));
  }
}

TEST_CASE("a protected list whose scan failed refuses the fence when the layer applies") {
  DSH_REQUIRE_LANDLOCK();
  const Setup setup(false);
  const ProtectedScan scan{{}, "the .git pointer file names a directory that does not exist"};
  CHECK_THROWS_MATCHES(
      PreparedFence::prepare_with_protected(setup.lab.policy(SandboxMode::workspace_write),
                                            setup.options(Isolation::best_effort), scan),
      LandlockError,
      Catch::Matchers::Message("the namespace layer of the workspace-write fence: the protected paths beneath " +
                               json_string_literal(setup.lab.workspace().native()) +
                               " cannot be known: the .git pointer file names a directory that does not exist; "
                               "refusing to run without them"));
  // Without the layer nothing binds them: the scan is not the layer's to refuse.
  CHECK(PreparedFence::prepare_with_protected(setup.lab.policy(SandboxMode::workspace_write),
                                              setup.options(Isolation::off), scan)
            .report()
            .layers.empty());
}

TEST_CASE("with user namespaces refused to an unprivileged host: best-effort fences, required runs nothing") {
  DSH_REQUIRE_LANDLOCK();
  const Setup setup(true);
  const std::filesystem::path marker = setup.lab.workspace() / "marker";
#if defined(DSH_SANDBOXED_BASH)
  // A copy the unprivileged host can run: the build tree may lie in a directory only root may
  // enter (CI's mktemp -d under /tmp).
  const std::filesystem::path tool = setup.lab.base() / "dsh-sandboxed-bash";
  std::filesystem::copy_file(DSH_SANDBOXED_BASH, tool, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(tool, std::filesystem::perms(0755));
#endif
  const std::string seen = as_host({true, true}, [&]() {
    std::string text;
    {
      const PreparedFence fence =
          PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), setup.options(Isolation::best_effort));
      text += rows_of(fence.report());
      const dsh::test::Captured run =
          dsh::test::bash(fence, "echo forged > " + setup.target.native() + "; cd /proc && echo [0-9]* | wc -w",
                          setup.lab.workspace(), setup.lab.outside());
      text +=
          std::to_string(run.exit_code) + " " + (run.out == "1\n" ? "own pid only" : "host pids seen") + "\n" + run.err;
    }
    try {
      const PreparedFence fence =
          PreparedFence::prepare(setup.lab.policy(SandboxMode::workspace_write), setup.options(Isolation::required));
      (void)dsh::test::bash(fence, "touch " + marker.native(), setup.lab.workspace(), setup.lab.outside());
      text += "required ran\n";
    } catch (const LandlockError& error) {
      text += std::string("required: ") + error.what() + "\n";
    }
#if defined(DSH_SANDBOXED_BASH)
    const std::string cli = tool.native() + " --log " + setup.log.native() +
                            " --default workspace-write --isolation required -- touch " + marker.native() + " 2>" +
                            (setup.lab.outside() / "cli.err").native();
    const int status = std::system(cli.c_str());
    text += "cli: " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + " " +
            read_file(setup.lab.outside() / "cli.err");
#endif
    return text;
  });
  const std::string reason = "unshare(CLONE_NEWUSER): Operation not permitted";
  std::string rows;
  for (const char* name :
       {"user namespace", "mount namespace", "read-only root", "protected paths", "/dev", "PID namespace and /proc",
        "IPC namespace", "UTS namespace", "/tmp, /var/tmp, /dev/shm", "host state out of view"}) {
    rows += std::string(name) + ": not applied: " + reason + "\n";
  }
  const std::string required = "required: the namespace layer of the workspace-write fence is required "
                               "(FenceOptions::isolation) but cannot be had: " +
                               reason + "; nothing runs\n";
  std::string expected =
      rows + "0 host pids seen\nbash: line 1: " + setup.target.native() + ": Permission denied\n" + required;
#if defined(DSH_SANDBOXED_BASH)
  expected += "cli: 126 dsh-sandboxed-bash: not run: " + required.substr(std::string("required: ").size());
#endif
  CHECK(seen == expected);
  CHECK(read_file(setup.target) == "outside\n");
  CHECK_FALSE(dsh::test::exists_nofollow(marker));
}

// What the command sees is what report() says: from inside a fenced bash, each candidate
// directory is tried for writing, the session log for visibility and /proc for other processes,
// and the list is compared with the one derived from report() alone (its grants, its private
// directory and its layer rows), in each mode, with the layer and without it, as root and as
// uid 65534.
TEST_CASE("the command's view matches report(): writable, visible and seen, with and without the layer") {
  DSH_REQUIRE_LANDLOCK();
  for (const bool unprivileged : dsh::test::host_table) {
    CAPTURE(unprivileged);
    const Setup setup(unprivileged);
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      for (const Isolation isolation : {Isolation::off, Isolation::best_effort}) {
        CAPTURE(dsh::to_string(mode), dsh::to_string(isolation));
        // "seen" first, then "expected" from the report, both made in the host process.
        const std::string both = as_host({unprivileged, false}, [&]() {
          const PreparedFence fence = PreparedFence::prepare(setup.lab.policy(mode), setup.options(isolation));
          const dsh::FenceReport& report = fence.report();
          std::vector<std::filesystem::path> candidates{
              setup.lab.workspace(), setup.lab.outside(), setup.state, "/tmp", "/var/tmp", "/dev/shm"};
          if (!report.temporary_directory.empty()) {
            candidates.push_back(report.temporary_directory);
          }
          std::string script = "probe() { if (echo x > \"$1/.view-probe\") 2>/dev/null; then rm -f \"$1/.view-probe\"; "
                               "echo \"$1 writable\"; else echo \"$1 read-only\"; fi; }\n";
          for (const std::filesystem::path& candidate : candidates) {
            script += "probe " + candidate.native() + "\n";
          }
          script += "test -e " + setup.log.native() + " && echo 'log visible' || echo 'log out of view'\n";
          script += "test -e /proc/$PPID/status && test $PPID -ne 0 && echo 'parent seen' || echo 'own tree only'\n";
          const dsh::test::Captured run = dsh::test::bash(fence, script, setup.lab.workspace(), setup.lab.outside());

          const auto applied = [&report](std::string_view row) {
            return std::any_of(report.layers.begin(), report.layers.end(),
                               [row](const dsh::FenceLayer& layer) { return layer.name == row && layer.applied; });
          };
          const bool private_areas = applied("/tmp, /var/tmp, /dev/shm") && mode == SandboxMode::workspace_write;
          std::string expected;
          for (const std::filesystem::path& candidate : candidates) {
            const bool area = candidate == "/tmp" || candidate == "/var/tmp" || candidate == "/dev/shm";
            const bool writable = dsh::test::grants_directory_of(report, candidate) || (area && private_areas);
            expected += candidate.native() + (writable ? " writable\n" : " read-only\n");
          }
          expected += applied("host state out of view") ? "log out of view\n" : "log visible\n";
          expected += applied("PID namespace and /proc") ? "own tree only\n" : "parent seen\n";
          return run.out + "--\n" + expected;
        });
        const std::size_t split = both.find("--\n");
        REQUIRE(split != std::string::npos);
        CHECK(both.substr(0, split) == both.substr(split + 3));
        // The layer changes the view exactly where the report says it does.
        if (isolation == Isolation::best_effort) {
          CHECK(both.find("log out of view") != std::string::npos);
          CHECK(both.find("own tree only") != std::string::npos);
        } else {
          CHECK(both.find("log visible\nparent seen") != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("a /proc path naming a number is formatted without the C library, and cut at 63 characters") {
  using dsh::detail::numbered_path;
  CHECK(std::string(numbered_path("/proc/", 0, "/ns/mnt").c_str()) == "/proc/0/ns/mnt");
  CHECK(std::string(numbered_path("/proc/self/fd/", 1234567, "").c_str()) == "/proc/self/fd/1234567");
  CHECK(std::string(numbered_path("/proc/", 18446744073709551615UL, "/ns/mnt").c_str()) ==
        "/proc/18446744073709551615/ns/mnt");
  const std::string prefix(60, 'p');
  CHECK(std::string(numbered_path(prefix, 98765, "/suffix").c_str()) == prefix + "987");
  // What it names is what the kernel opens.
  struct stat named {};
  struct stat self {};
  CHECK(::stat(numbered_path("/proc/", static_cast<unsigned long>(::getpid()), "/ns/mnt").c_str(), &named) == 0);
  CHECK(::stat("/proc/self/ns/mnt", &self) == 0);
  CHECK(named.st_ino == self.st_ino);
}

TEST_CASE("a held walk (BindWalk) opens what a walk from the root opens, whatever came before") {
  const TempDir dir;
  const std::filesystem::path base = dsh::canonical_path(dir.path());
  std::filesystem::create_directories(base / "a/b/c");
  std::filesystem::create_directories(base / "a/bc");
  std::filesystem::create_directories(base / "outside/x");
  std::filesystem::create_directory_symlink(base / "outside", base / "a/link");
  std::filesystem::path deep = base;
  for (int i = 0; i < 30; ++i) {
    deep /= "d" + std::to_string(i); // deeper than the walk holds
  }
  std::filesystem::create_directories(deep);
  // What each opened: the file's device and inode, or the errno.
  const auto identity = [](int fd) {
    struct stat info {};
    std::string found = fd < 0                    ? "errno " + std::to_string(errno)
                        : ::fstat(fd, &info) == 0 ? std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino)
                                                  : "fstat failed";
    if (fd >= 0) {
      ::close(fd);
    }
    return found;
  };
  const std::vector<std::string> paths{(base / "a/b/c").string(),
                                       (base / "a/b").string() + "/",
                                       (base / "a/bc").string(),
                                       (base / "a/b/c").string(),
                                       (base / "a/link/x").string(),
                                       (base / "a/link").string(),
                                       (base / "a/b/../bc").string(),
                                       deep.string(),
                                       (deep / "..").string(),
                                       (base / "a/b/c").string(),
                                       std::string("/"),
                                       std::string("relative/a"),
                                       (base / "a//b").string(),
                                       (base / "a/b/c").string(),
                                       (base / "a/b").string() + "/"};
  dsh::detail::BindWalk walk;
  for (const std::string& path : paths) {
    CAPTURE(path);
    const std::string held = identity(walk.open_target(path.c_str()));
    CHECK(held == identity(dsh::detail::open_without_links(path.c_str(), O_PATH)));
  }
  // Not all failures: the last one opened what a plain open(2) opens.
  CHECK(identity(walk.open_target(paths.back().c_str())) ==
        identity(::open((base / "a/b").c_str(), O_PATH | O_CLOEXEC)));
  // The walk keeps its own copy of the path it holds: the caller's string may go.
  {
    const std::string gone = (base / "a/b/c").string();
    CHECK(identity(walk.open_target(gone.c_str())) == identity(::open(gone.c_str(), O_PATH | O_CLOEXEC)));
  }
  const std::string sibling = (base / "a/bc").string();
  CHECK(identity(walk.open_target(sibling.c_str())) == identity(::open(sibling.c_str(), O_PATH | O_CLOEXEC)));
}

TEST_CASE("a path opened one component at a time follows no link, so a placeholder is never made through one") {
  const TempDir dir;
  const std::filesystem::path base = dsh::canonical_path(dir.path());
  std::filesystem::create_directories(base / "real/sub");
  std::filesystem::create_directories(base / "outside/sub");
  std::filesystem::create_directory_symlink(base / "outside", base / "linked");
  std::filesystem::create_symlink(base / "outside", base / "real/last");
  const auto opened = [](const std::filesystem::path& path, int flags) {
    const dsh::UniqueFd fd{dsh::detail::open_without_links(path.c_str(), flags)};
    struct stat info {};
    if (!fd) {
      return std::string("errno ") + std::to_string(errno);
    }
    return std::string(::fstat(fd.get(), &info) == 0 && S_ISLNK(info.st_mode) ? "the link" : "opened");
  };
  CHECK(opened(base / "real/sub", O_PATH | O_DIRECTORY) == "opened");
  CHECK(opened("/", O_PATH | O_DIRECTORY) == "opened");
  CHECK(opened(base / "linked/x", O_PATH) == "errno " + std::to_string(ENOTDIR)); // a link on the way
  CHECK(opened(base / "real/last", O_PATH) == "the link");                        // the last: the caller refuses it
  CHECK(opened(base / "real/last", O_RDONLY) == "errno " + std::to_string(ELOOP));
  CHECK(opened("relative/path", O_PATH) == "errno " + std::to_string(EINVAL));
  CHECK(opened(base / "real/../real/sub", O_PATH) == "errno " + std::to_string(EINVAL));
  // The placeholder of an entry whose parent became a link after the scan (a concurrent call
  // swapped it): refused, and nothing is made where the link points.
  const dsh::detail::ProtectedEntry entry{base / "linked/sub/config", ProtectedKind::missing_file, ".git/config", ""};
  CHECK_THROWS_AS(dsh::detail::make_placeholder("the fence", entry), LandlockError);
  CHECK_FALSE(exists_nofollow(base / "outside/sub/config"));
  const dsh::detail::ProtectedEntry fine{base / "real" / "sub" / "config", ProtectedKind::missing_file, ".git/config",
                                         ""};
  dsh::detail::make_placeholder("the fence", fine);
  CHECK(std::filesystem::is_regular_file(base / "real/sub/config"));
}
