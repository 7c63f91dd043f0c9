// A fence checked again rather than built again (docs/enforcement.md#a-fence-checked-again):
// a preparation with the inputs of an earlier one reads again everything the earlier one read,
// and reuses its ruleset only when every reading gives what it gave. Each case below changes
// one thing the earlier fence was judged on, between two calls, as the host, another session
// or the command itself could, and requires of the second call exactly what a fresh
// preparation gives: the same refusal, or a fence that grants what is there now.
#include "support/landlock.hpp"
#include "support/sanitizers.hpp"
#include "support/scoped.hpp"
#include "support/users.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using dsh::FenceOptions;
using dsh::PreparedFence;
using dsh::ResolvedPolicy;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// How many fences this process has reused after checking them again.
std::uint64_t reused() { return dsh::detail::CheckedFences::instance().reused.load(); }

/// What `PreparedFence::prepare` gives: the report's description, or "refused: " and the message.
std::string prepared(const ResolvedPolicy& policy, const FenceOptions& options) {
  try {
    return PreparedFence::prepare(policy, options).report().describe();
  } catch (const dsh::LandlockError& error) {
    return std::string("refused: ") + error.what();
  }
}

/// What a fresh preparation gives, never checked again, in the same form as `prepared`.
std::string fresh(const ResolvedPolicy& policy, const FenceOptions& options) {
  try {
    return dsh::detail::prepare_fence(policy, options, dsh::detail::probe_landlock(),
                                      dsh::detail::HostEnvironment::current())
        .report()
        .describe();
  } catch (const dsh::LandlockError& error) {
    return std::string("refused: ") + error.what();
  }
}

/// The errno of creating the new file `path` (0 when it was created).
int create_error(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno;
  }
  ::close(fd);
  return 0;
}

/// One session of a workspace-write host in a scratch directory of its own: the workspace,
/// the log beside it, the private temporary directories beneath `temporary`.
struct Session {
  explicit Session(const std::filesystem::path& scratch)
      : base(scratch), workspace(scratch / "ws"), log(scratch / "s.jsonl"), temporary(scratch / "tmp") {
    std::filesystem::create_directory(workspace);
    std::ofstream(log) << "";
    policy.mode = SandboxMode::workspace_write;
    policy.workspace_root = dsh::canonical_path(workspace);
    options.session_log = log;
    options.session_cwd = workspace;
    options.temporary_root = temporary;
    options.isolation = dsh::Isolation::off;
  }
  std::filesystem::path base;
  std::filesystem::path workspace;
  std::filesystem::path log;
  std::filesystem::path temporary;
  ResolvedPolicy policy;
  FenceOptions options;
};

/// Appends `what` and a newline to `failures` unless `holds`.
void expect(std::string& failures, bool holds, const std::string& what) {
  if (!holds) {
    failures += what + "\n";
  }
}

/// Prepares `session` (kept to be checked again), applies `change`, then prepares it again
/// and compares with a fresh preparation: returns "" or what differed. `reusable`: whether the
/// second call may reuse the first fence (nothing it was judged on changed).
std::string after_change(Session& session, const std::function<void()>& change, bool reusable,
                         const std::string& expected_refusal = "") {
  std::string failures;
  // The first call makes the private directory, which its own readings then see change: only
  // the second is kept.
  for (int call = 0; call < 2; ++call) {
    const std::string first = prepared(session.policy, session.options);
    expect(failures, !first.starts_with("refused"), "an unchanged call was refused: " + first);
  }
  change();
  const std::uint64_t before = reused();
  const std::string again = prepared(session.policy, session.options);
  const bool was_reused = reused() != before;
  const std::string control = fresh(session.policy, session.options);
  expect(failures, was_reused == reusable,
         std::string("expected the second call ") + (reusable ? "to reuse" : "not to reuse") + " the first fence");
  expect(failures, again == control, "the second call gave\n  " + again + "\nwhere a fresh one gives\n  " + control);
  if (!expected_refusal.empty()) {
    expect(failures, again.find(expected_refusal) != std::string::npos,
           "expected a refusal naming \"" + expected_refusal + "\", got " + again);
  }
  return failures;
}

/// Every case of this file's table, in `directory` (a fresh scratch directory of the calling
/// user): returns "" or the failures, each on a line. Runs as root and as uid 65534 alike.
std::string changes_between_calls(const std::filesystem::path& directory) {
  std::string failures;
  int number = 0;
  const auto next = [&] {
    const std::filesystem::path base = directory / ("case" + std::to_string(++number));
    std::filesystem::create_directory(base);
    return Session(base);
  };

  { // Nothing changed (the command wrote into the workspace and its private directory meanwhile).
    Session session = next();
    failures += after_change(
        session,
        [&] {
          std::ofstream(session.workspace / "made-by-the-command") << "x";
          std::filesystem::create_directory(session.workspace / "a-directory");
        },
        true);
    const PreparedFence fence = PreparedFence::prepare(session.policy, session.options);
    expect(failures, fenced(fence, [&] { return create_error(session.workspace / "new"); }) == 0,
           "a reused fence refused a write into the workspace");
    expect(failures, fenced(fence, [&] { return create_error(fence.report().temporary_directory / "new"); }) == 0,
           "a reused fence refused a write into the private temporary directory");
    expect(failures, fenced(fence, [&] { return create_error(session.base / "outside"); }) == EACCES,
           "a reused fence let a write outside its grants through");
  }
  { // The workspace root renamed away and another directory made in its place: the new one is
    // granted, the old one (the inode the first ruleset holds) is not.
    Session session = next();
    failures += after_change(
        session,
        [&] {
          std::filesystem::rename(session.workspace, session.base / "ws-old");
          std::filesystem::create_directory(session.workspace);
        },
        false);
    const PreparedFence fence = PreparedFence::prepare(session.policy, session.options);
    expect(failures, fenced(fence, [&] { return create_error(session.workspace / "new"); }) == 0,
           "the replacing workspace is not writable");
    expect(failures, fenced(fence, [&] { return create_error(session.base / "ws-old" / "new"); }) == EACCES,
           "the replaced workspace (the first fence's grant) is still writable");
  }
  { // A directory on the way to the workspace made writable by every user.
    Session session = next();
    failures += after_change(
        session, [&] { ::chmod(session.base.c_str(), 0777); }, false, "is writable by another user");
    ::chmod(session.base.c_str(), 0700);
  }
  { // A second name for the session log, on the workspace's filesystem.
    Session session = next();
    failures += after_change(
        session, [&] { std::filesystem::create_hard_link(session.log, session.base / "another-name"); }, false,
        "names (hard links)");
  }
  { // The session log replaced by a link into the workspace.
    Session session = next();
    failures += after_change(
        session,
        [&] {
          std::ofstream(session.workspace / "log.jsonl") << "";
          std::filesystem::remove(session.log);
          std::filesystem::create_symlink(session.workspace / "log.jsonl", session.log);
        },
        false, "the session log");
  }
  { // The private temporary directory removed: made again, and granted.
    Session session = next();
    failures += after_change(
        session, [&] { std::filesystem::remove_all(session.temporary); }, false);
    const PreparedFence fence = PreparedFence::prepare(session.policy, session.options);
    expect(failures, fenced(fence, [&] { return create_error(fence.report().temporary_directory / "new"); }) == 0,
           "the private temporary directory made again is not writable");
  }
  { // The private temporary directory opened to every user.
    Session session = next();
    std::string made;
    failures += after_change(
        session,
        [&] {
          made = PreparedFence::prepare(session.policy, session.options).report().temporary_directory;
          ::chmod(made.c_str(), 0777);
        },
        false, "expected a directory owned by uid");
    ::chmod(made.c_str(), 0700);
  }
  { // The same workspace spelled with a doubled separator: equal as std::filesystem::path, and
    // refused by a fresh preparation (the name the kernel records differs from the spelling).
    Session session = next();
    ResolvedPolicy doubled = session.policy;
    for (int call = 0; call < 2; ++call) {
      (void)prepared(session.policy, session.options);
    }
    doubled.workspace_root = session.policy.workspace_root.parent_path().native() + "//ws";
    const std::string again = prepared(doubled, session.options);
    expect(failures, again == fresh(doubled, session.options),
           "a workspace root spelled \"" + doubled.workspace_root.native() + "\" gave " + again);
  }
  { // A loader variable of the host naming the workspace (an input, not a reading).
    Session session = next();
    const std::string workspace = session.workspace.native();
    failures += after_change(
        session, [&] { ::setenv("LD_LIBRARY_PATH", workspace.c_str(), 1); }, false, "$LD_LIBRARY_PATH");
    ::unsetenv("LD_LIBRARY_PATH");
  }
  return failures;
}

/// Runs `body` in a forked child (as uid 65534 when `as_nobody`) and returns what it returned,
/// or why it could not run.
std::string in_child_text(bool as_nobody, const std::function<std::string()>& body) {
  std::array<int, 2> report{-1, -1};
  if (::pipe(report.data()) != 0) {
    return "pipe failed";
  }
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    return "fork failed";
  }
  if (pid == 0) {
    ::close(report[0]);
    std::string text;
    if (as_nobody && !become_nobody()) {
      text = "could not become uid 65534";
    } else {
      try {
        text = body();
      } catch (const std::exception& error) {
        text = std::string("threw: ") + error.what();
      }
    }
    (void)!::write(report[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(report[1]);
  std::string text;
  std::array<char, 4096> buffer{};
  for (::ssize_t got = 0; (got = ::read(report[0], buffer.data(), buffer.size())) > 0;) {
    text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(report[0]);
  if (wait_exit_code(pid) != 0) {
    text += "\nthe child did not exit with 0";
  }
  return text;
}

} // namespace

TEST_CASE("a fence checked again equals a fresh one after each change it was judged on, as root") {
  DSH_REQUIRE_LANDLOCK();
  const TempDir directory;
  const std::string failures = changes_between_calls(directory.path());
  INFO(failures);
  CHECK(failures.empty());
}

TEST_CASE("a fence checked again equals a fresh one after each change it was judged on, as uid 65534") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root to become uid 65534");
  }
  const TempDir directory;
  hand_to_nobody(directory.path());
  const std::string failures = in_child_text(true, [&] { return changes_between_calls(directory.path()); });
  INFO(failures);
  CHECK(failures.empty());
}

TEST_CASE("a bind mount that shows the session log beneath the workspace, made between two calls, is refused") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root to mount");
  }
  const TempDir directory;
  const std::string failures = in_child_text(false, [&]() -> std::string {
    if (!enter_private_mount_namespace()) {
      return "no mount namespace";
    }
    Session session(directory.path());
    std::filesystem::create_directory(session.base / "logs");
    std::filesystem::rename(session.log, session.base / "logs" / "s.jsonl");
    session.log = session.base / "logs" / "s.jsonl";
    session.options.session_log = session.log;
    std::string found;
    found += after_change(
        session,
        [&] {
          std::filesystem::create_directory(session.workspace / "view");
          if (::mount((session.base / "logs").c_str(), (session.workspace / "view").c_str(), nullptr, MS_BIND,
                      nullptr) != 0) {
            found += "the bind mount failed\n";
          }
        },
        false, "shows it beneath the grant");
    return found;
  });
  INFO(failures);
  CHECK(failures.empty());
}

TEST_CASE("threads preparing the same session share the fences checked again, each equal to a fresh one") {
  DSH_REQUIRE_LANDLOCK();
  const TempDir directory;
  Session session(directory.path());
  const std::string expected = fresh(session.policy, session.options);
  REQUIRE(!expected.starts_with("refused"));
  const std::uint64_t before = reused();
  std::array<std::string, 4> seen;
  std::vector<std::thread> threads;
  threads.reserve(seen.size());
  for (std::string& mine : seen) {
    threads.emplace_back([&session, &mine, &expected] {
      for (int i = 0; i < 25; ++i) {
        const std::string got = prepared(session.policy, session.options);
        if (got != expected) {
          mine = got;
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const std::string& mine : seen) {
    INFO(mine);
    CHECK(mine.empty());
  }
  CHECK(reused() - before >= 90); // all but the first call of each thread, at most, prepared afresh
}

TEST_CASE("a tmpfs mounted again between two calls, giving the workspace the same numbers, is granted anew") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root to mount");
  }
  const TempDir directory;
  const std::string failures = in_child_text(false, [&]() -> std::string {
    if (!enter_private_mount_namespace()) {
      return "no mount namespace";
    }
    const std::filesystem::path point = directory.path() / "mnt";
    std::filesystem::create_directory(point);
    const auto mount_tmpfs = [&] {
      if (::mount("tmpfs", point.c_str(), "tmpfs", 0, "mode=0755") != 0) {
        return false;
      }
      std::filesystem::create_directory(point / "ws");
      return true;
    };
    if (!mount_tmpfs()) {
      return "mount failed";
    }
    Session session(directory.path());
    session.policy.workspace_root = dsh::canonical_path(point / "ws");
    session.options.session_cwd = point / "ws";
    std::string found;
    struct stat before {};
    struct stat after {};
    found += after_change(
        session,
        [&] {
          ::stat((point / "ws").c_str(), &before);
          // The kernel gives the new tmpfs the lowest free anonymous device number; mounted again
          // until it is the old one. Under ThreadSanitizer in a clean clone's .ci/run it never
          // was, in 100 tries (why is not known), and the case is skipped below.
          for (int attempt = 0; attempt < 100; ++attempt) {
            if (::umount(point.c_str()) != 0 || !mount_tmpfs()) {
              found += "could not mount again\n";
              break;
            }
            ::stat((point / "ws").c_str(), &after);
            if (before.st_dev == after.st_dev && before.st_ino == after.st_ino) {
              break;
            }
          }
        },
        false);
    if (before.st_dev != after.st_dev || before.st_ino != after.st_ino) {
      // Other numbers are a change like any other (checked above); the case this test is for,
      // the same numbers on another filesystem, could not be made.
      return found.empty() ? "other numbers" : found;
    }
    const PreparedFence fence = PreparedFence::prepare(session.policy, session.options);
    expect(found, fenced(fence, [&] { return create_error(point / "ws" / "new"); }) == 0,
           "the workspace on the tmpfs mounted again is not writable");
    return found;
  });
  if (failures == "other numbers") {
    DSH_TEST_SKIP("the kernel gave the tmpfs mounted again other numbers in 100 tries (seen under ThreadSanitizer): "
                  "the same numbers on another filesystem could not be made");
  }
  INFO(failures);
  CHECK(failures.empty());
}

TEST_CASE("a thread that dropped its DAC capabilities is judged as a fresh preparation judges it") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root's capabilities to drop");
  }
  const TempDir directory;
  Session session(directory.path());
  // A temporary root root may enter and write but not list: opening it needs CAP_DAC_READ_SEARCH.
  std::filesystem::create_directory(session.temporary);
  ::chmod(session.temporary.c_str(), 0300);
  for (int call = 0; call < 2; ++call) {
    CHECK(!prepared(session.policy, session.options).starts_with("refused"));
  }
  std::string again;
  std::string control;
  std::thread([&] {
    dsh::detail::CapabilityHeader header{dsh::detail::capability_version_3, 0};
    std::array<dsh::detail::CapabilityData, 2> sets{};
    constexpr unsigned dac_override = 1;
    constexpr unsigned dac_read_search = 2;
    if (::syscall(SYS_capget, &header, sets.data()) != 0) {
      return;
    }
    sets[0].effective &= ~((1U << dac_override) | (1U << dac_read_search));
    if (::syscall(SYS_capset, &header, sets.data()) != 0) {
      return;
    }
    again = prepared(session.policy, session.options);
    control = fresh(session.policy, session.options);
  }).join();
  ::chmod(session.temporary.c_str(), 0700);
  CHECK(control.starts_with("refused"));
  CHECK(again == control);
}

TEST_CASE("another session's command flipping the temporary root's mode never leaves a wider fence kept") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root to become uid 65534");
  }
  const TempDir directory;
  hand_to_nobody(directory.path());
  const std::string failures = in_child_text(true, [&]() -> std::string {
    const std::filesystem::path mine = directory.path() / "mine";
    const std::filesystem::path theirs = directory.path() / "theirs";
    std::filesystem::create_directory(mine);
    std::filesystem::create_directory(theirs);
    Session session(mine);
    Session other(theirs);
    for (int call = 0; call < 2; ++call) {
      (void)prepared(session.policy, session.options);
    }
    // The other session's command: fenced, and free to chmod what it can name (Landlock does
    // not mediate it), it flips this session's temporary root between shared and private.
    const PreparedFence their_fence = PreparedFence::prepare(other.policy, other.options);
    std::fflush(nullptr);
    const ::pid_t flipper = ::fork();
    if (flipper == 0) {
      if (!their_fence.apply().ok()) {
        ::_exit(250);
      }
      // A short, varying wait, so that the flips land anywhere in a preparation.
      const auto pause = [](unsigned turns) {
        for (std::atomic<unsigned> turn{0}; turn.load(std::memory_order_relaxed) < turns;
             turn.fetch_add(1, std::memory_order_relaxed)) {
        }
      };
      for (unsigned round = 0;; ++round) {
        ::chmod(session.temporary.c_str(), 0777);
        pause(round * 7919U % 1500U);
        ::chmod(session.temporary.c_str(), 0700);
        pause(round * 104729U % 700U);
      }
    }
    for (int call = 0; call < 4000; ++call) {
      (void)prepared(session.policy, session.options);
    }
    ::kill(flipper, SIGKILL);
    ::waitpid(flipper, nullptr, 0);
    ::chmod(session.temporary.c_str(), 0777);
    const std::string again = prepared(session.policy, session.options);
    const std::string control = fresh(session.policy, session.options);
    ::chmod(session.temporary.c_str(), 0700);
    std::string found;
    expect(found, control.starts_with("refused"), "a fresh preparation took a shared temporary root: " + control);
    expect(found, again == control, "after the flips, with the root shared, the call gave " + again);
    return found;
  });
  INFO(failures);
  CHECK(failures.empty());
}

namespace {

/// A session with the namespace layer (best-effort: its workspace lies in a temporary area, so
/// /tmp is not replaced, and every other row applies) whose workspace becomes a git repository
/// between the kept call and the next: the next reuses the base fence and plans the layer from
/// what is there now, as a fresh preparation does. Returns "" or the failures, each on a line.
std::string layer_planned_anew(const std::filesystem::path& directory) {
  std::string failures;
  Session session(directory);
  session.options.isolation = dsh::Isolation::best_effort;
  for (int call = 0; call < 2; ++call) {
    const std::string first = prepared(session.policy, session.options);
    expect(failures, !first.starts_with("refused"), "an unchanged call was refused: " + first);
  }
  // The first calls left an empty placeholder `.git`, read-only whole. Now a repository: its
  // objects are writable, its hooks and config are not.
  const std::filesystem::path git = session.workspace / ".git";
  for (const char* name : {"objects", "refs", "refs/heads", "hooks"}) {
    std::filesystem::create_directories(git / name);
  }
  std::ofstream(git / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(git / "config") << "[core]\n\trepositoryformatversion = 0\n";
  const std::uint64_t before = reused();
  const PreparedFence fence = PreparedFence::prepare(session.policy, session.options);
  expect(failures, reused() - before == 1, "the call did not reuse the base fence");
  const std::string control =
      PreparedFence::prepare_with_protected(
          session.policy, session.options,
          dsh::detail::protected_entries(session.policy.workspace_root, session.policy.protected_paths))
          .report()
          .describe();
  expect(failures, fence.report().describe() == control,
         "the call gave\n  " + fence.report().describe() + "\nwhere a fresh one gives\n  " + control);
  // The fenced children start where the test runs: the layer finds that directory again in the
  // command's view, and a build directory may be closed to uid 65534.
  const WorkingDirectory here(session.workspace);
  bool layered = false;
  for (const dsh::FenceLayer& layer : fence.report().layers) {
    layered = layered || (layer.name == "protected paths" && layer.applied);
  }
  expect(failures, layered, "the protected paths' row is not applied: " + fence.report().describe());
  expect(failures, fenced(fence, [&] { return create_error(git / "objects" / "new"); }) == 0,
         "the repository's objects are not writable (the placeholder's plan, made before the repository?)");
  expect(failures, fenced(fence, [&] { return create_error(git / "hooks" / "pre-commit"); }) == EROFS,
         "a hook could be planted in the repository made after the kept call");
  expect(failures, fenced(fence, [&] { return create_error(session.workspace / "new"); }) == 0,
         "the workspace is not writable");
  expect(failures, !std::filesystem::exists(git / "hooks" / "pre-commit"), "the hook is there");
  return failures;
}

} // namespace

TEST_CASE("a fence with the namespace layer reuses its base fence and plans the layer anew, as root") {
  DSH_REQUIRE_LANDLOCK();
  const TempDir directory;
  const std::string failures = layer_planned_anew(directory.path());
  INFO(failures);
  CHECK(failures.empty());
}

TEST_CASE("a fence with the namespace layer reuses its base fence and plans the layer anew, as uid 65534") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root to become uid 65534");
  }
  if (DSH_TEST_UNDER_TSAN) {
    // The kernel refuses a user namespace to a multithreaded process (EINVAL).
    DSH_TEST_SKIP("ThreadSanitizer's own thread keeps an unprivileged host from making a user namespace");
  }
  const TempDir directory;
  hand_to_nobody(directory.path());
  const std::string failures = in_child_text(true, [&] { return layer_planned_anew(directory.path()); });
  INFO(failures);
  CHECK(failures.empty());
}
