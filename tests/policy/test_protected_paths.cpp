// Protected paths beneath a writable root (docs/enforcement.md#protected-paths): the exact
// list for repositories made by real git (init, a linked worktree, a separate git directory,
// a submodule), what permits_write and open_for_write refuse and still allow, failing closed
// on a pointer file git would follow but the scan cannot, the host's extra paths and disabled
// defaults, the configuration keys, and the placeholders the namespace layer makes.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/detail/posix.hpp>
#include <dsh/open_beneath.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using dsh::SandboxMode;
using dsh::detail::ProtectedEntry;
using dsh::detail::ProtectedKind;

namespace {

/// Runs git with `args` in `dir` with no system or global configuration; returns its exit
/// status (its output goes to /dev/null).
int run_git(const fs::path& dir, std::initializer_list<std::string> args) {
  std::vector<std::string> words{"git",
                                 "-c",
                                 "user.name=dsh",
                                 "-c",
                                 "user.email=dsh@example.invalid",
                                 "-c",
                                 "init.defaultBranch=main",
                                 "-c",
                                 "protocol.file.allow=always",
                                 "-C",
                                 dir.native()};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(words.size() + 1);
  for (std::string& word : words) {
    argv.push_back(word.data());
  }
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
    ::setenv("GIT_CONFIG_GLOBAL", "/dev/null", 1);
    ::unsetenv("GIT_DIR");
    ::unsetenv("GIT_WORK_TREE");
    ::execvp("git", argv.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs git and requires it to succeed.
void git(const fs::path& dir, std::initializer_list<std::string> args) {
  INFO("git -C " << dir << " ...");
  REQUIRE(run_git(dir, args) == 0);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// A canonical scratch directory (the roots the tests use are canonical, as resolve makes them).
struct Scratch {
  dsh::test::TempDir dir;
  fs::path base = dsh::canonical_path(dir.path());
};

dsh::ResolvedPolicy policy_for(const fs::path& root, SandboxMode mode = SandboxMode::workspace_write,
                               dsh::ProtectedPathRules rules = {}) {
  dsh::ResolvedPolicy policy{mode, root, dsh::ModeSource::deployment, dsh::RootSource::deployment, std::move(rules)};
  return policy;
}

ProtectedEntry entry(const fs::path& path, ProtectedKind kind, const std::string& rule,
                     const std::string& placeholder = {}) {
  return ProtectedEntry{path, kind, rule, placeholder};
}

/// The entries of a git directory `dir` that has hooks and config, and no config.worktree or commondir.
std::vector<ProtectedEntry> fresh_git_directory(const fs::path& dir) {
  return {entry(dir, ProtectedKind::pinned_directory, ".git"),
          entry(dir / "hooks", ProtectedKind::directory, ".git/hooks"),
          entry(dir / "config", ProtectedKind::file, ".git/config"),
          entry(dir / "config.worktree", ProtectedKind::missing_file, ".git/config.worktree"),
          entry(dir / "commondir", ProtectedKind::missing_file, ".git/commondir", ".\n")};
}

/// Creates the directory `dir` and makes it a git repository with one empty commit, `message`.
void init_with_empty_commit(const fs::path& dir, const std::string& message) {
  fs::create_directory(dir);
  git(dir, {"init", "-q"});
  git(dir, {"commit", "-q", "--allow-empty", "-m", message});
}

/// Makes `root` a git repository with one commit of the file a.txt.
void init_with_one_commit(const fs::path& root) {
  git(root, {"init", "-q"});
  write_text(root / "a.txt", "a\n");
  git(root, {"add", "a.txt"});
  git(root, {"commit", "-q", "-m", "one"});
}

/// Appends `fresh_git_directory(dir)` to `expected`.
void append_fresh_git_directory(std::vector<ProtectedEntry>& expected, const fs::path& dir) {
  for (ProtectedEntry& e : fresh_git_directory(dir)) {
    expected.push_back(std::move(e));
  }
}

/// The placeholder that keeps the root `root` from being taken for a git directory: its `HEAD`,
/// missing until the namespace layer makes it empty.
ProtectedEntry root_head(const fs::path& root) { return entry(root / "HEAD", ProtectedKind::missing_file, ".git"); }

std::string describe(const std::vector<ProtectedEntry>& entries) {
  std::ostringstream out;
  for (const ProtectedEntry& e : entries) {
    out << e.path.native() << " " << static_cast<int>(e.kind) << " " << e.rule << " [" << e.placeholder << "]\n";
  }
  return out.str();
}

/// Checks that a workspace-write policy over `root` refuses each of `refused` and permits each
/// of `permitted` (paths relative to the root).
void check_writes(const fs::path& root, std::initializer_list<const char*> refused,
                  std::initializer_list<const char*> permitted) {
  const dsh::ResolvedPolicy policy = policy_for(root);
  for (const char* path : refused) {
    CAPTURE(path);
    CHECK_FALSE(policy.permits_write(path));
  }
  for (const char* path : permitted) {
    CAPTURE(path);
    CHECK(policy.permits_write(path));
  }
}

/// Checks that the scan of a workspace-write policy over `root` finds exactly `expected`.
void check_scan(const fs::path& root, const std::vector<ProtectedEntry>& expected) {
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy_for(root));
  INFO(describe(entries));
  CHECK(entries == expected);
}

/// What open_for_write does: "opened" (the file is then closed) or "errno N: what()".
std::string open_result(const dsh::ResolvedPolicy& policy, const fs::path& path, int flags = O_WRONLY | O_CREAT) {
  try {
    const dsh::UniqueFd file = dsh::open_for_write(policy, path, flags);
    return "opened";
  } catch (const dsh::WriteError& error) {
    return "errno " + std::to_string(error.code().value()) + ": " + error.what();
  }
}

/// The refusal open_for_write gives for `path` (as given) being or lying beneath `entry_path`.
std::string refused(const fs::path& path, const fs::path& target, const fs::path& entry_path, const std::string& rule) {
  return "errno " + std::to_string(EACCES) + ": open_for_write(" + dsh::json_string_literal(path.native()) +
         "): refusing to write " + dsh::json_string_literal(target.native()) +
         (target == entry_path ? ": it is the protected path " : ": it lies beneath the protected path ") +
         dsh::json_string_literal(entry_path.native()) + " (rule " + dsh::json_string_literal(rule) +
         "): " + std::strerror(EACCES);
}

} // namespace

TEST_CASE("a fresh git init: the pinned .git, its hooks and config, the missing entries and .gitmodules") {
  const Scratch scratch;
  const fs::path root = scratch.base / "repo";
  fs::create_directory(root);
  git(root, {"init", "-q"});
  std::vector<ProtectedEntry> expected = fresh_git_directory(root / ".git");
  expected.push_back(root_head(root));
  expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
  check_scan(root, expected);
  // The detail scan the namespace layer reads is the same list, resolved.
  const dsh::detail::ProtectedScan scan = dsh::detail::protected_entries(root, {});
  CHECK(scan.problem.empty());
  CHECK(scan.entries == expected);
  // The list does not depend on the mode.
  CHECK(dsh::protected_paths(policy_for(root, SandboxMode::read_only)) == expected);
}

TEST_CASE("a directory without .git: .git itself is listed as missing, once") {
  const Scratch scratch;
  CHECK(dsh::protected_paths(policy_for(scratch.base)) ==
        std::vector<ProtectedEntry>{entry(scratch.base / ".git", ProtectedKind::missing_directory, ".git/hooks"),
                                    root_head(scratch.base),
                                    entry(scratch.base / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")});
  const dsh::ResolvedPolicy policy = policy_for(scratch.base);
  CHECK_FALSE(policy.permits_write(".git"));
  CHECK_FALSE(policy.permits_write(".git/hooks/pre-commit"));
  CHECK_FALSE(policy.permits_write(".gitmodules"));
  CHECK(policy.permits_write("src/main.c"));
  CHECK(open_result(policy, ".git/hooks/pre-commit") ==
        refused(".git/hooks/pre-commit", scratch.base / ".git/hooks/pre-commit", scratch.base / ".git", ".git/hooks"));
  CHECK_FALSE(fs::exists(scratch.base / ".git"));
  CHECK(open_result(policy, "notes.txt") == "opened");
}

TEST_CASE("the root's HEAD: missing, a placeholder git does not accept; holding a ref, the root is a git directory") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  SECTION("missing: with the placeholders made, git never takes the root for a git directory") {
    fs::create_directories(root / "objects");
    fs::create_directories(root / "refs/heads");
    write_text(root / "config", "[dsh]\n\tmarker = 1\n");
    const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy_for(root));
    CHECK(entries == std::vector<ProtectedEntry>{
                         entry(root / ".git", ProtectedKind::missing_directory, ".git/hooks"), root_head(root),
                         entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")});
    CHECK_FALSE(policy_for(root).permits_write("HEAD"));
    // A HEAD holding a ref would make the root git's: it reads the planted config.
    write_text(root / "HEAD", "ref: refs/heads/main\n");
    CHECK(run_git(root, {"config", "--get", "dsh.marker"}) == 0);
    for (const ProtectedEntry& e : entries) { // the placeholders, as the namespace layer makes them
      if (e.kind == ProtectedKind::missing_file) {
        write_text(e.path, e.placeholder);
      } else if (e.kind == ProtectedKind::missing_directory) {
        fs::create_directory(e.path);
      }
    }
    CHECK(read_text(root / "HEAD").empty());
    CHECK(run_git(root, {"config", "--get", "dsh.marker"}) != 0);
    const std::vector<ProtectedEntry> after = dsh::protected_paths(policy_for(root));
    CHECK(std::ranges::count(after, entry(root / "HEAD", ProtectedKind::file, ".git")) == 1);
  }
  SECTION("holding no ref: read-only as it is") {
    write_text(root / "HEAD", "notes\n");
    CHECK(dsh::protected_paths(policy_for(root)) ==
          std::vector<ProtectedEntry>{entry(root / ".git", ProtectedKind::missing_directory, ".git/hooks"),
                                      entry(root / "HEAD", ProtectedKind::file, ".git"),
                                      entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")});
  }
  SECTION("holding a ref: a bare repository as the root is pinned with its entries") {
    git(root, {"init", "-q", "--bare", "."});
    std::vector<ProtectedEntry> expected{entry(root / ".git", ProtectedKind::missing_directory, ".git/hooks")};
    append_fresh_git_directory(expected, root);
    expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
    check_scan(root, expected);
    check_writes(root, {"config", "hooks/pre-receive"}, {"HEAD", "objects/ab/cdef"});
  }
}

TEST_CASE(
    "permits_write and open_for_write refuse what git executes or reads, and allow objects, refs, the index, HEAD") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  init_with_one_commit(root);
  const std::string config_before = read_text(root / ".git/config");
  const dsh::ResolvedPolicy policy = policy_for(root);
  for (const char* path : {".git/hooks/pre-commit", ".git/hooks", ".git/config", ".git/config.worktree",
                           ".git/commondir", ".gitmodules", ".git"}) {
    INFO(path);
    CHECK_FALSE(policy.permits_write(path));
    CHECK_FALSE(policy.permits_write(root / path));
  }
  for (const char* path : {".git/objects/ab/cdef", ".git/refs/heads/x", ".git/index", ".git/HEAD", ".git/info/exclude",
                           "a.txt", "src/new.c", ""}) {
    INFO(path);
    CHECK(policy.permits_write(path) == (*path != '\0'));
  }
  // A symbolic link inside the workspace to a protected file is that file.
  fs::create_symlink(".git/config", root / "innocent");
  CHECK_FALSE(policy.permits_write("innocent"));

  CHECK(open_result(policy, ".git/hooks/pre-commit") ==
        refused(".git/hooks/pre-commit", root / ".git/hooks/pre-commit", root / ".git/hooks", ".git/hooks"));
  CHECK(open_result(policy, ".git/config", O_WRONLY | O_TRUNC) ==
        refused(".git/config", root / ".git/config", root / ".git/config", ".git/config"));
  CHECK(open_result(policy, root / ".gitmodules") ==
        refused(root / ".gitmodules", root / ".gitmodules", root / ".gitmodules", ".gitmodules"));
  CHECK(open_result(policy, "innocent") ==
        refused("innocent", root / ".git/config", root / ".git/config", ".git/config"));
  CHECK_FALSE(fs::exists(root / ".git/hooks/pre-commit"));
  CHECK_FALSE(fs::exists(root / ".gitmodules"));
  CHECK(read_text(root / ".git/config") == config_before);

  fs::create_directories(root / ".git/objects/ab");
  for (const char* path : {".git/objects/ab/cdef", ".git/refs/heads/x", ".git/index", ".git/HEAD", "a.txt"}) {
    INFO(path);
    CHECK(open_result(policy, path) == "opened");
  }
  // The danger-full-access and read-only answers are unchanged.
  CHECK(policy_for(root, SandboxMode::danger_full_access).permits_write(".git/config"));
  CHECK_FALSE(policy_for(root, SandboxMode::read_only).permits_write("a.txt"));
}

TEST_CASE("open_for_write refuses a hard link to a protected file beneath the root, leaving it unchanged") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  const std::string before = read_text(root / ".git/config");
  fs::create_hard_link(root / ".git/config", root / "linked");
  const dsh::ResolvedPolicy policy = policy_for(root);
  CHECK(open_result(policy, "linked", O_WRONLY | O_TRUNC) ==
        "errno " + std::to_string(EACCES) +
            ": open_for_write(\"linked\"): refusing to write a hard link to the "
            "protected path " +
            dsh::json_string_literal((root / ".git/config").native()) +
            " (rule \".git/config\"): " + std::strerror(EACCES));
  CHECK(read_text(root / ".git/config") == before);
}

TEST_CASE("open_for_write refuses a hard link to a file in a protected directory, and a hook's symbolic link names "
          "a protected file") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  fs::create_directory(root / "scripts");
  write_text(root / "scripts/pre-commit", "#!/bin/sh\nexit 0\n");
  fs::create_hard_link(root / "scripts/pre-commit", root / ".git/hooks/pre-commit");
  write_text(root / "scripts/commit-msg", "#!/bin/sh\nexit 0\n");
  fs::create_symlink("../../scripts/commit-msg", root / ".git/hooks/commit-msg");
  fs::create_symlink("../../scripts/post-merge", root / ".git/hooks/post-merge"); // dangling: not made yet
  fs::create_symlink("../../notes.txt", root / ".git/hooks/notes");               // outside any directory
  fs::create_symlink("../..", root / ".git/hooks/up");                            // names no hook: not listed
  const dsh::ResolvedPolicy policy = policy_for(root);
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy);
  INFO(describe(entries));
  const std::vector<ProtectedEntry> expected{
      entry(root / ".git", ProtectedKind::pinned_directory, ".git"),
      entry(root / ".git/hooks", ProtectedKind::directory, ".git/hooks"),
      entry(root / "scripts", ProtectedKind::pinned_directory, ".git/hooks"),
      entry(root / "scripts/commit-msg", ProtectedKind::file, ".git/hooks"),
      entry(root / "notes.txt", ProtectedKind::missing_file, ".git/hooks"),
      entry(root / "scripts/post-merge", ProtectedKind::missing_file, ".git/hooks"),
      entry(root / ".git/config", ProtectedKind::file, ".git/config"),
      entry(root / ".git/config.worktree", ProtectedKind::missing_file, ".git/config.worktree"),
      entry(root / ".git/commondir", ProtectedKind::missing_file, ".git/commondir", ".\n"),
      root_head(root),
      entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")};
  CHECK(entries == expected);
  for (const char* path : {"scripts/commit-msg", "scripts/post-merge", "notes.txt", "scripts"}) {
    INFO(path);
    CHECK_FALSE(policy.permits_write(path));
  }
  CHECK(policy.permits_write("scripts/other.sh"));
  // The hard link: its name in scripts/ is no protected path, but the file is the hook.
  CHECK(policy.permits_write("scripts/pre-commit"));
  const std::string before = read_text(root / "scripts/pre-commit");
  CHECK(open_result(policy, "scripts/pre-commit", O_WRONLY | O_TRUNC) ==
        "errno " + std::to_string(EACCES) +
            ": open_for_write(\"scripts/pre-commit\"): refusing to write a hard link to a file in the protected "
            "directory " +
            dsh::json_string_literal((root / ".git/hooks").native()) +
            " (rule \".git/hooks\"): " + std::strerror(EACCES));
  CHECK(read_text(root / "scripts/pre-commit") == before);
  CHECK(open_result(policy, "scripts/other.sh") == "opened");
}

TEST_CASE("a .git directory git would not accept (an earlier call's placeholder) is read-only whole") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  fs::create_directory(root / ".git");
  // Scanned as a git directory (its entries get placeholders), then read-only whole.
  std::vector<ProtectedEntry> expected = fresh_git_directory(root / ".git");
  expected[0] = entry(root / ".git", ProtectedKind::directory, ".git/hooks");
  expected[1] = entry(root / ".git/hooks", ProtectedKind::missing_directory, ".git/hooks");
  expected[2] = entry(root / ".git/config", ProtectedKind::missing_file, ".git/config");
  expected.push_back(root_head(root));
  expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
  const dsh::ResolvedPolicy policy = policy_for(root);
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy);
  INFO(describe(entries));
  CHECK(entries == expected);
  for (const char* path : {".git/HEAD", ".git/objects/x", ".git/refs/heads/main", ".git/index"}) {
    INFO(path);
    CHECK_FALSE(policy.permits_write(path));
  }
  // Once git made it a repository (outside the fence), it is a git directory again.
  git(root, {"init", "-q"});
  CHECK(dsh::protected_paths(policy).front() == entry(root / ".git", ProtectedKind::pinned_directory, ".git"));
  CHECK(policy.permits_write(".git/index"));
}

TEST_CASE("a .git made invalid still protects what lies outside it: the worktree pointer, a hook's linked file") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  init_with_empty_commit(root, "one");
  git(root, {"worktree", "add", "-q", root / "wt"});
  write_text(root / "tools.sh", "#!/bin/sh\nexit 0\n");
  fs::create_symlink("../../tools.sh", root / ".git/hooks/pre-push");
  const dsh::ResolvedPolicy policy = policy_for(root);
  for (const char* how : {"HEAD removed", "HEAD a symbolic link git accepts", "HEAD an upper-case object id"}) {
    CAPTURE(how);
    const std::string head = read_text(root / ".git/HEAD");
    fs::remove(root / ".git/HEAD");
    if (std::string_view(how) == "HEAD a symbolic link git accepts") {
      fs::create_symlink("refs/heads/nowhere", root / ".git/HEAD"); // core.preferSymlinkRefs, unborn
    } else if (std::string_view(how) == "HEAD an upper-case object id") {
      write_text(root / ".git/HEAD", std::string(40, 'A') + "\n");
    }
    const bool accepted = std::string_view(how) != "HEAD removed";
    if (accepted) {
      CHECK(dsh::protected_paths(policy).front() == entry(root / ".git", ProtectedKind::pinned_directory, ".git"));
    } else {
      // The worktree's commondir names it, and it is no git directory: nothing is written.
      CHECK_THROWS_AS(dsh::protected_paths(policy), dsh::ProtectedPathError);
    }
    for (const char* path : {"wt/.git", "wt", ".git/worktrees/wt/gitdir", "tools.sh"}) {
      INFO(path);
      CHECK_FALSE(policy.permits_write(path));
    }
    CHECK(policy.permits_write(".git/index") == accepted);
    fs::remove(root / ".git/HEAD");
    write_text(root / ".git/HEAD", head);
  }
}

TEST_CASE("a hook's link through another link, or with \"..\" after a name, fails closed; one into the git "
          "directory is not followed") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  fs::create_directories(root / "tools");
  write_text(root / "tools/x", "#!/bin/sh\nexit 0\n");
  const dsh::ResolvedPolicy policy = policy_for(root);
  const auto problem = [&] {
    try {
      (void)dsh::protected_paths(policy);
      return std::string("listed");
    } catch (const dsh::ProtectedPathError& error) {
      return std::string(error.what());
    }
  };
  const fs::path hook = root / ".git/hooks/pre-commit";
  const std::string quoted = dsh::json_string_literal(hook.native());
  SECTION("a link to a link (node_modules/.bin's shape): the command could swap the second") {
    fs::create_directory(root / "bin");
    fs::create_symlink("../tools/x", root / "bin/x");
    fs::create_symlink("../../bin/x", hook);
    CHECK(problem().find("protected path " + dsh::json_string_literal((root / "bin/x").native()) +
                         ": expected no symbolic link on the way to a protected path; found \"a symbolic link\"") !=
          std::string::npos);
    CHECK_FALSE(policy.permits_write("tools/x"));
    CHECK_FALSE(policy.permits_write("notes.txt")); // nothing beneath the root is written
  }
  SECTION("a link through a linked directory") {
    fs::create_symlink("tools", root / "scripts");
    fs::create_symlink("../../scripts/x", hook);
    CHECK(problem().find("a symbolic link") != std::string::npos);
  }
  SECTION("\"..\" after a name") {
    fs::create_symlink("../../tools/../tools/x", hook);
    CHECK(problem().find("protected path " + quoted + ": expected a hook link whose \"..\" come first; found " +
                         "\"../../tools/../tools/x\"") != std::string::npos);
  }
  SECTION("into the git directory: its files stay writable (not covered)") {
    fs::create_symlink("../index", hook);
    CHECK(problem() == "listed");
    CHECK(policy.permits_write(".git/index"));
  }
  SECTION("a directory named is pinned") {
    fs::create_symlink("../../tools", hook);
    CHECK(problem() == "listed");
    CHECK_FALSE(policy.permits_write("tools"));
    CHECK(policy.permits_write("tools/y"));
  }
}

TEST_CASE("every directory on the way to a protected path beneath the root is pinned") {
  const Scratch scratch;
  const fs::path root = scratch.base / "ws";
  fs::create_directories(root / "meta");
  git(scratch.base, {"init", "-q", "--separate-git-dir", (root / "meta/repo").native(), root.native()});
  fs::create_directories(root / "config/githooks");
  write_text(root / "config/githooks/pre-commit", "#!/bin/sh\nexit 0\n");
  fs::create_directories(root / "deep/er");
  dsh::ProtectedPathRules rules;
  rules.extra = {"config/githooks/", "deep/er/still/missing.sh"};
  const dsh::ResolvedPolicy policy = policy_for(root, SandboxMode::workspace_write, rules);
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy);
  INFO(describe(entries));
  const fs::path repo = root / "meta/repo";
  std::vector<ProtectedEntry> expected{entry(root / ".git", ProtectedKind::file, ".git"),
                                       entry(root / "meta", ProtectedKind::pinned_directory, ".git")};
  append_fresh_git_directory(expected, repo);
  expected.push_back(root_head(root));
  expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
  expected.push_back(entry(root / "config", ProtectedKind::pinned_directory, "config/githooks/"));
  expected.push_back(entry(root / "config/githooks", ProtectedKind::directory, "config/githooks/"));
  expected.push_back(entry(root / "deep", ProtectedKind::pinned_directory, "deep/er/still/missing.sh"));
  expected.push_back(entry(root / "deep/er", ProtectedKind::pinned_directory, "deep/er/still/missing.sh"));
  expected.push_back(entry(root / "deep/er/still", ProtectedKind::missing_directory, "deep/er/still/missing.sh"));
  CHECK(entries == expected);
  // A pin refuses only the directory's own name, never what it holds.
  CHECK_FALSE(policy.permits_write("meta"));
  CHECK_FALSE(policy.permits_write("config"));
  CHECK(policy.permits_write("config/other.txt"));
  CHECK(policy.permits_write("deep/er/file.txt"));
}

TEST_CASE("a linked worktree: its pointer file; beneath the main repository's root, its git directory") {
  const Scratch scratch;
  const fs::path main = scratch.base / "main";
  init_with_empty_commit(main, "one");
  git(main, {"worktree", "add", "-q", scratch.base / "wt"});
  git(main, {"worktree", "add", "-q", main / "inner"});
  const fs::path wt = scratch.base / "wt";

  SECTION("the worktree as the root: its git directory lies outside, so only the pointer is listed") {
    CHECK(dsh::protected_paths(policy_for(wt)) ==
          std::vector<ProtectedEntry>{entry(wt / ".git", ProtectedKind::file, ".git"), root_head(wt),
                                      entry(wt / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")});
    const dsh::ResolvedPolicy policy = policy_for(wt);
    CHECK_FALSE(policy.permits_write(".git"));
    CHECK(policy.permits_write("file.txt"));
    CHECK(open_result(policy, ".git", O_WRONLY | O_TRUNC) == refused(".git", wt / ".git", wt / ".git", ".git"));
  }
  SECTION("the main repository as the root: each linked worktree's git directory and the worktree inside") {
    const fs::path dot_git = main / ".git";
    std::vector<ProtectedEntry> expected = fresh_git_directory(dot_git);
    expected.push_back(entry(dot_git / "worktrees", ProtectedKind::pinned_directory, ".git"));
    for (const char* name : {"inner", "wt"}) {
      const fs::path dir = dot_git / "worktrees" / name;
      expected.push_back(entry(dir, ProtectedKind::pinned_directory, ".git"));
      expected.push_back(entry(dir / "hooks", ProtectedKind::missing_directory, ".git/hooks"));
      expected.push_back(entry(dir / "config", ProtectedKind::missing_file, ".git/config"));
      expected.push_back(entry(dir / "config.worktree", ProtectedKind::missing_file, ".git/config.worktree"));
      expected.push_back(entry(dir / "commondir", ProtectedKind::file, ".git/commondir"));
      // The scan finds the worktree's pointer through this file, so it is protected too.
      expected.push_back(entry(dir / "gitdir", ProtectedKind::file, ".git"));
      if (std::string_view(name) == "inner") {
        // The worktree's directory is pinned: renamed, it would carry the pointer's bind away.
        expected.push_back(entry(main / "inner", ProtectedKind::pinned_directory, ".git"));
        expected.push_back(entry(main / "inner/.git", ProtectedKind::file, ".git"));
      }
    }
    expected.push_back(root_head(main));
    expected.push_back(entry(main / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
    check_scan(main, expected);
    const dsh::ResolvedPolicy policy = policy_for(main);
    for (const char* path :
         {".git/worktrees/wt/config", ".git/worktrees/wt/hooks/post-checkout", ".git/worktrees/wt/config.worktree",
          ".git/worktrees/wt/commondir", ".git/worktrees", "inner/.git", ".git/worktrees/inner/gitdir", "inner"}) {
      INFO(path);
      CHECK_FALSE(policy.permits_write(path));
    }
    for (const char* path : {".git/worktrees/wt/index", ".git/worktrees/wt/HEAD", "inner/file.txt"}) {
      INFO(path);
      CHECK(policy.permits_write(path));
    }
    CHECK(open_result(policy, ".git/worktrees/wt/config") == refused(".git/worktrees/wt/config",
                                                                     dot_git / "worktrees/wt/config",
                                                                     dot_git / "worktrees/wt/config", ".git/config"));
    CHECK(open_result(policy, ".git/worktrees/wt/hooks/pre-commit") ==
          refused(".git/worktrees/wt/hooks/pre-commit", dot_git / "worktrees/wt/hooks/pre-commit",
                  dot_git / "worktrees/wt/hooks", ".git/hooks"));
    CHECK(open_result(policy, ".git/worktrees/wt/index") == "opened");
  }
}

TEST_CASE("a separate git directory beneath the root: the pointer file and the git directory's entries") {
  const Scratch scratch;
  const fs::path root = scratch.base / "ws";
  git(scratch.base, {"init", "-q", "--separate-git-dir", (root / ".meta").native(), root.native()});
  REQUIRE(fs::is_regular_file(root / ".git"));
  std::vector<ProtectedEntry> expected{entry(root / ".git", ProtectedKind::file, ".git")};
  append_fresh_git_directory(expected, root / ".meta");
  expected.push_back(root_head(root));
  expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
  check_scan(root, expected);
  check_writes(root, {".meta/config", ".meta/hooks/pre-commit"}, {".meta/index", ".meta/refs/heads/x"});
}

TEST_CASE("a submodule: the superproject lists the submodule's git directory; the checkout lists its pointer") {
  const Scratch scratch;
  const fs::path origin = scratch.base / "sub-origin";
  init_with_empty_commit(origin, "sub");
  const fs::path super = scratch.base / "super";
  fs::create_directory(super);
  git(super, {"init", "-q"});
  git(super, {"submodule", "add", "-q", origin.native(), "sub"});
  git(super, {"commit", "-q", "-m", "with sub"});
  REQUIRE(fs::is_regular_file(super / "sub/.git"));

  SECTION("the superproject as the root") {
    const fs::path dot_git = super / ".git";
    std::vector<ProtectedEntry> expected = fresh_git_directory(dot_git);
    expected.push_back(entry(dot_git / "modules", ProtectedKind::pinned_directory, ".git"));
    append_fresh_git_directory(expected, dot_git / "modules/sub");
    expected.push_back(root_head(super));
    expected.push_back(entry(super / ".gitmodules", ProtectedKind::file, ".gitmodules"));
    check_scan(super, expected);
    const dsh::ResolvedPolicy policy = policy_for(super);
    for (const char* path : {".git/modules/sub/config", ".git/modules/sub/hooks/pre-commit", ".gitmodules",
                             ".git/modules/sub", ".git/modules"}) {
      INFO(path);
      CHECK_FALSE(policy.permits_write(path));
    }
    for (const char* path : {".git/modules/sub/index", ".git/modules/sub/objects/ab/cd", "sub/file.txt"}) {
      INFO(path);
      CHECK(policy.permits_write(path));
    }
    const std::string before = read_text(dot_git / "modules/sub/config");
    CHECK(open_result(policy, ".git/modules/sub/config", O_WRONLY | O_TRUNC) ==
          refused(".git/modules/sub/config", dot_git / "modules/sub/config", dot_git / "modules/sub/config",
                  ".git/config"));
    CHECK(read_text(dot_git / "modules/sub/config") == before);
  }
  SECTION("the submodule's checkout as the root: its git directory lies outside") {
    const fs::path sub = super / "sub";
    CHECK(dsh::protected_paths(policy_for(sub)) ==
          std::vector<ProtectedEntry>{entry(sub / ".git", ProtectedKind::file, ".git"), root_head(sub),
                                      entry(sub / ".gitmodules", ProtectedKind::missing_file, ".gitmodules")});
  }
}

TEST_CASE("modules/: a git directory git would not accept still gets its entries; too deep or too many fail closed") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  const fs::path modules = root / ".git/modules";
  SECTION("a broken submodule git directory (no HEAD) beside a name with a slash") {
    fs::create_directories(modules / "broken/objects");
    write_text(modules / "broken/config", "[core]\n");
    fs::create_directories(modules / "libs");
    git(modules / "libs", {"init", "-q", "--bare", "inner"});
    std::vector<ProtectedEntry> expected = fresh_git_directory(root / ".git");
    expected.push_back(entry(modules, ProtectedKind::pinned_directory, ".git"));
    expected.push_back(entry(modules / "broken", ProtectedKind::pinned_directory, ".git"));
    expected.push_back(entry(modules / "broken/hooks", ProtectedKind::missing_directory, ".git/hooks"));
    expected.push_back(entry(modules / "broken/config", ProtectedKind::file, ".git/config"));
    expected.push_back(entry(modules / "broken/config.worktree", ProtectedKind::missing_file, ".git/config.worktree"));
    expected.push_back(entry(modules / "broken/commondir", ProtectedKind::missing_file, ".git/commondir", ".\n"));
    expected.push_back(entry(modules / "libs", ProtectedKind::pinned_directory, ".git"));
    append_fresh_git_directory(expected, modules / "libs/inner");
    expected.push_back(root_head(root));
    expected.push_back(entry(root / ".gitmodules", ProtectedKind::missing_file, ".gitmodules"));
    check_scan(root, expected);
  }
  SECTION("directories nested deeper than 16 levels") {
    fs::path deep = modules;
    for (int i = 0; i < 18; ++i) {
      deep /= "d";
    }
    fs::create_directories(deep);
    CHECK_THROWS_WITH(dsh::protected_paths(policy_for(root)),
                      "protected path " +
                          dsh::json_string_literal((modules / "d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d").native()) +
                          ": expected submodule git directories nested at most 16 deep; found \"deeper nesting\"");
    CHECK_FALSE(policy_for(root).permits_write("a.txt"));
  }
  SECTION("more than 4096 entries") {
    for (int i = 0; i < 1000; ++i) {
      const std::string digits = std::to_string(i);
      std::string name = "m";
      name.append(4 - digits.size(), '0').append(digits);
      fs::create_directories(modules / name);
      write_text(modules / name / "config", "");
    }
    // .git and its 4 entries, modules/, then 5 entries a directory: the 4097th is m0818's pin.
    CHECK_THROWS_WITH(dsh::protected_paths(policy_for(root)),
                      "protected path " + dsh::json_string_literal((modules / "m0818").native()) +
                          ": expected at most 4096 protected entries beneath a root; found \"more\"");
    CHECK_FALSE(policy_for(root).permits_write("a.txt"));
  }
}

TEST_CASE("a pointer file the scan cannot resolve fails closed: nothing beneath the root is written") {
  const Scratch scratch;
  const fs::path root = scratch.base / "ws";
  fs::create_directories(root / "src");
  fs::create_directory(scratch.base / "not-a-repo");
  const fs::path dot_git = root / ".git";
  const std::string start = "protected path " + dsh::json_string_literal(dot_git.native()) +
                            ": expected a \"gitdir: <path>\" pointer file naming a git directory; found ";
  struct Case {
    std::string what;
    std::string text;
    std::string problem;
  };
  const std::vector<Case> cases{
      {"no gitdir prefix", "gitdir:../not-a-repo\n", start + "\"gitdir:../not-a-repo\""},
      {"no path", "gitdir: \r\n", start + "\"gitdir: \""},
      {"trailing spaces, which git keeps", "gitdir: ../not-a-repo  \n",
       start + "\"gitdir: ../not-a-repo   (no directory at " + (scratch.base / "not-a-repo  ").native() + ")\""},
      {"a directory that is not a git directory", "gitdir: ../not-a-repo\n",
       start + "\"gitdir: ../not-a-repo (" + (scratch.base / "not-a-repo").native() +
           " has no HEAD holding a ref or an object id)\""},
      {"a NUL character", std::string("gitdir: ../not-a-repo\0x\n", 24), start + "\"gitdir: ../not-a-repo\\u0000x\""},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    write_text(dot_git, c.text);
    const dsh::ResolvedPolicy policy = policy_for(root);
    try {
      (void)dsh::protected_paths(policy);
      FAIL_CHECK("protected_paths did not throw");
    } catch (const dsh::ProtectedPathError& error) {
      CHECK(std::string(error.what()) == c.problem);
      CHECK(error.code() == std::error_code());
    }
    for (const char* path : {"src/main.c", "README", ".git", "src"}) {
      INFO(path);
      CHECK_FALSE(policy.permits_write(path));
    }
    CHECK(open_result(policy, "src/main.c") ==
          "errno " + std::to_string(EACCES) + ": open_for_write(\"src/main.c\"): the protected paths of " +
              dsh::json_string_literal(root.native()) +
              " cannot be resolved, so nothing beneath it is written: " + c.problem + ": " + std::strerror(EACCES));
    CHECK_FALSE(fs::exists(root / "src/main.c"));
    // git itself refuses each of these pointer files.
    CHECK(run_git(root, {"status"}) == 128);
    // Without the defaults the pointer is not read.
    dsh::ProtectedPathRules off;
    off.defaults = false;
    CHECK(policy_for(root, SandboxMode::workspace_write, off).permits_write("src/main.c"));
  }
}

TEST_CASE("a .git that is no regular file or too long to be a pointer, and a path lstat cannot examine, fail closed") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  const fs::path dot_git = root / ".git";
  const std::string start = "protected path " + dsh::json_string_literal(dot_git.native()) +
                            ": expected a \"gitdir: <path>\" pointer file naming a git directory; found ";
  REQUIRE(::mkfifo(dot_git.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(dsh::protected_paths(policy_for(root)), start + "\"not a regular file\"");
  CHECK_FALSE(policy_for(root).permits_write("a.txt"));
  fs::remove(dot_git);
  write_text(dot_git, "gitdir: " + std::string(5000, 'x') + "\n");
  CHECK_THROWS_WITH(dsh::protected_paths(policy_for(root)), start + "\"a file longer than 4096 bytes\"");
  fs::remove(dot_git);

  dsh::ProtectedPathRules rules;
  rules.defaults = false;
  rules.extra = {std::string(300, 'n')};
  try {
    (void)dsh::protected_paths(policy_for(root, SandboxMode::workspace_write, rules));
    FAIL("protected_paths did not throw");
  } catch (const dsh::ProtectedPathError& error) {
    CHECK(std::string(error.what()) ==
          "protected path " + dsh::json_string_literal((root / std::string(300, 'n')).native()) +
              ": expected a path lstat(2) can examine; found \"" + std::strerror(ENAMETOOLONG) + "\"");
    CHECK(error.code() == std::error_code(ENAMETOOLONG, std::generic_category()));
  }
  CHECK_FALSE(policy_for(root, SandboxMode::workspace_write, rules).permits_write("a.txt"));
}

TEST_CASE("a root that is not absolute has no list") {
  CHECK_THROWS_WITH(dsh::protected_paths(dsh::ResolvedPolicy{}),
                    "protected paths: expected an absolute workspace root; found \"\"");
  CHECK_THROWS_AS(dsh::protected_paths(policy_for("relative")), dsh::ProtectedPathError);
  CHECK_FALSE(policy_for("relative").permits_write("relative/a"));
}

TEST_CASE("a symbolic link on the way to a protected path fails closed") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  fs::create_directory(root / "elsewhere");
  fs::remove_all(root / ".git/hooks");
  fs::create_directory_symlink("../elsewhere", root / ".git/hooks");
  const dsh::ResolvedPolicy policy = policy_for(root);
  try {
    (void)dsh::protected_paths(policy);
    FAIL("protected_paths did not throw");
  } catch (const dsh::ProtectedPathError& error) {
    CHECK(std::string(error.what()) == "protected path " + dsh::json_string_literal((root / ".git/hooks").native()) +
                                           ": expected no symbolic link on the way to a protected path; found "
                                           "\"a symbolic link\"");
  }
  CHECK_FALSE(policy.permits_write("elsewhere/pre-commit"));
  CHECK_FALSE(policy.permits_write("a.txt"));
}

TEST_CASE("the host's extra paths and disabled defaults") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  fs::create_directory(root / ".husky");
  write_text(root / "Makefile", "all:\n");
  dsh::ProtectedPathRules rules;
  rules.disabled_defaults = {".gitmodules", ".git/config.worktree", ".git/commondir"};
  rules.extra = {".husky/", "Makefile", root / "tools/run.sh", "build/out/", "/elsewhere/x"};
  const std::vector<ProtectedEntry> expected{
      entry(root / ".git", ProtectedKind::pinned_directory, ".git"),
      entry(root / ".git/hooks", ProtectedKind::directory, ".git/hooks"),
      entry(root / ".git/config", ProtectedKind::file, ".git/config"),
      root_head(root),
      entry(root / ".husky", ProtectedKind::directory, ".husky/"),
      entry(root / "Makefile", ProtectedKind::file, "Makefile"),
      entry(root / "tools", ProtectedKind::missing_directory, (root / "tools/run.sh").native()),
      entry(root / "build", ProtectedKind::missing_directory, "build/out/")};
  const dsh::ResolvedPolicy policy = policy_for(root, SandboxMode::workspace_write, rules);
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy);
  INFO(describe(entries));
  CHECK(entries == expected);
  for (const char* path : {".husky/pre-commit", "Makefile", "tools/run.sh", "tools", "build/out/a.o", ".git/config"}) {
    INFO(path);
    CHECK_FALSE(policy.permits_write(path));
  }
  for (const char* path : {".gitmodules", ".git/config.worktree", ".git/commondir", "src/a.c", "buildx"}) {
    INFO(path);
    CHECK(policy.permits_write(path));
  }
  CHECK(open_result(policy, "Makefile") == refused("Makefile", root / "Makefile", root / "Makefile", "Makefile"));
  CHECK(open_result(policy, ".gitmodules") == "opened");

  SECTION("an extra path whose parent is a file protects that file") {
    dsh::ProtectedPathRules beneath_file;
    beneath_file.defaults = false;
    beneath_file.extra = {"Makefile/inner"};
    CHECK(dsh::protected_paths(policy_for(root, SandboxMode::workspace_write, beneath_file)) ==
          std::vector<ProtectedEntry>{entry(root / "Makefile", ProtectedKind::file, "Makefile/inner")});
  }
  SECTION("every .git default off: no pin, no pointer read") {
    dsh::ProtectedPathRules no_git;
    no_git.disabled_defaults = {".git/hooks", ".git/config", ".git/config.worktree", ".git/commondir"};
    // .gitmodules exists now: the open above made it.
    CHECK(dsh::protected_paths(policy_for(root, SandboxMode::workspace_write, no_git)) ==
          std::vector<ProtectedEntry>{entry(root / ".gitmodules", ProtectedKind::file, ".gitmodules")});
  }
  SECTION("the defaults off") {
    dsh::ProtectedPathRules none;
    none.defaults = false;
    CHECK(dsh::protected_paths(policy_for(root, SandboxMode::workspace_write, none)).empty());
    CHECK(policy_for(root, SandboxMode::workspace_write, none).permits_write(".git/hooks/pre-commit"));
  }
}

TEST_CASE("protectedPaths in PolicyConfig::from_json, and the owner copying it into every resolved policy") {
  const nlohmann::json json = nlohmann::json::parse(
      R"({"mode":"workspace-write","protectedPaths":{"defaults":true,"disable":[".gitmodules"],"extra":[".husky/","bin/tool"]}})");
  const dsh::PolicyConfig config = dsh::PolicyConfig::from_json(json);
  CHECK(config.protected_paths.defaults);
  CHECK(config.protected_paths.disabled_defaults == std::vector<std::string>{".gitmodules"});
  CHECK(config.protected_paths.extra == std::vector<fs::path>{".husky/", "bin/tool"});
  CHECK(dsh::PolicyConfig::from_json(nlohmann::json::parse(R"({"protectedPaths":{}})")).protected_paths ==
        dsh::ProtectedPathRules{});
  CHECK_FALSE(dsh::PolicyConfig::from_json(nlohmann::json::parse(R"({"protectedPaths":{"defaults":false}})"))
                  .protected_paths.defaults);

  const Scratch scratch;
  dsh::PolicyConfig with_root = config;
  with_root.workspace_root = scratch.base;
  dsh::PolicyOwner owner(with_root);
  CHECK(owner.protectedPaths() == config.protected_paths);
  CHECK(owner.resolve().protected_paths == config.protected_paths);
  CHECK_FALSE(owner.resolve().permits_write("bin/tool")); // workspace-write, an extra path of the config
  CHECK(owner.resolve().permits_write(".gitmodules"));    // disabled by the config
  dsh::Session session(dsh::SessionHeader{"s", scratch.base.native(), 0});
  const dsh::ResolvedPolicy resolved = owner.resolve(session);
  CHECK(resolved.protected_paths == config.protected_paths);
  // The JSON form of a resolved policy and the model text are as they were.
  CHECK(nlohmann::json(resolved) == nlohmann::json{{"mode", "workspace-write"},
                                                   {"workspaceRoot", scratch.base.native()},
                                                   {"modeSource", "deployment"},
                                                   {"rootSource", "session"}});
  const dsh::Disposer enforced = owner.registerEnforcedFamily(dsh::Family::filesystem);
  dsh::PolicyOwner plain(dsh::PolicyConfig{SandboxMode::workspace_write, scratch.base, "DSH", {}});
  const dsh::Disposer plain_enforced = plain.registerEnforcedFamily(dsh::Family::filesystem);
  REQUIRE_FALSE(owner.context(session).empty());
  CHECK(owner.context(session) == plain.context(session));
  CHECK(owner.context(session) == dsh::render_policy_context(resolved, dsh::FamilySet{dsh::Family::filesystem}, {}));

  const auto error_of = [](const char* text) {
    try {
      (void)dsh::PolicyConfig::from_json(nlohmann::json::parse(text));
    } catch (const dsh::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string object = "PolicyConfig key \"protectedPaths\": expected an object with the optional keys "
                             "\"defaults\", \"disable\" and \"extra\"; found ";
  CHECK(error_of(R"({"protectedPaths":[]})") == object + "[]");
  CHECK(error_of(R"({"protectedPaths":{"default":true}})") == object + "\"default\"");
  CHECK(error_of(R"({"protectedPaths":{"defaults":1}})") ==
        "PolicyConfig key \"protectedPaths.defaults\": expected a boolean; found 1");
  CHECK(error_of(R"({"protectedPaths":{"disable":".gitmodules"}})") ==
        "PolicyConfig key \"protectedPaths.disable\": expected an array of strings; found \".gitmodules\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["a",2]}})") ==
        "PolicyConfig key \"protectedPaths.extra\": expected an array of strings; found [\"a\",2]");
  CHECK(error_of(R"({"protectedPaths":{"disable":[".git/objects"]}})") ==
        "PolicyConfig key \"protectedPaths.disable\": expected one of \".git/hooks\", \".git/config\", "
        "\".git/config.worktree\", \".git/commondir\", \".gitmodules\"; found \".git/objects\"");
  const std::string extra = "PolicyConfig key \"protectedPaths.extra\": expected a non-empty path without NUL "
                            "characters or \"..\" components, naming something beneath the workspace root; found ";
  CHECK(error_of(R"({"protectedPaths":{"extra":[""]}})") == extra + "\"\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["a\u0000b"]}})") == extra + "\"a\\u0000b\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["../outside"]}})") == extra + "\"../outside\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["/ws/a/../../etc"]}})") == extra + "\"/ws/a/../../etc\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["./"]}})") == extra + "\"./\"");
  CHECK(error_of(R"({"protectedPaths":{"extra":["ok"]},"other":1})") ==
        "PolicyConfig: expected only the keys \"mode\", \"workspaceRoot\", \"hostLabel\" and \"protectedPaths\"; found "
        "\"other\"");
  // The owner checks rules given as a struct the same way.
  dsh::PolicyConfig bad;
  bad.workspace_root = scratch.base;
  bad.protected_paths.disabled_defaults = {"hooks"};
  CHECK_THROWS_WITH(dsh::PolicyOwner(bad), "PolicyConfig key \"protectedPaths.disable\": expected one of "
                                           "\".git/hooks\", \".git/config\", \".git/config.worktree\", "
                                           "\".git/commondir\", \".gitmodules\"; found \"hooks\"");
}

TEST_CASE("the placeholders the namespace layer makes keep git working; an empty commondir would not") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  git(root, {"init", "-q"});
  write_text(root / "a.txt", "a\n");
  // What the list says a placeholder holds, made as the namespace layer makes them.
  for (const ProtectedEntry& e : dsh::protected_paths(policy_for(root))) {
    if (e.kind == ProtectedKind::missing_file) {
      write_text(e.path, e.placeholder);
    } else if (e.kind == ProtectedKind::missing_directory) {
      fs::create_directory(e.path);
    }
  }
  CHECK(read_text(root / ".git/commondir") == ".\n");
  CHECK(read_text(root / ".gitmodules").empty());
  CHECK(read_text(root / ".git/config.worktree").empty());
  git(root, {"add", "a.txt"});
  git(root, {"commit", "-q", "-m", "one"});
  git(root, {"branch", "b"});
  git(root, {"checkout", "-q", "b"});
  git(root, {"worktree", "add", "-q", scratch.base / "wt"});
  git(root, {"-c", "extensions.worktreeConfig=true", "status", "--porcelain"});
  // With the placeholders in place, the list names them as the entries they now are.
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy_for(root));
  CHECK(entries[4] == entry(root / ".git/commondir", ProtectedKind::file, ".git/commondir"));
  // An empty commondir stops git, which is why that placeholder holds ".".
  write_text(root / ".git/commondir", "");
  CHECK(run_git(root, {"status"}) == 128);
  CHECK_THROWS_WITH(dsh::protected_paths(policy_for(root)),
                    "protected path " + dsh::json_string_literal((root / ".git/commondir").native()) +
                        ": expected a commondir file naming a directory (git refuses an empty one); found \"\"");
  write_text(root / ".git/commondir", ".\n");
  // An empty .git directory is no repository to git: it looks further up, as without one, and
  // finds the repository above (a directory with none finds nothing).
  const fs::path fresh = root / "fresh";
  fs::create_directories(fresh / ".git");
  CHECK(run_git(fresh, {"rev-parse", "--show-toplevel"}) == 0);
  CHECK(run_git(fresh, {"commit", "-q", "--allow-empty", "-m", "two"}) == 0);
  CHECK(fs::is_empty(fresh / ".git"));
}

TEST_CASE("with the list bound read-only in a private mount namespace, git keeps working and cannot be planted") {
  const Scratch scratch;
  const fs::path root = scratch.base;
  init_with_one_commit(root);
  const std::vector<ProtectedEntry> entries = dsh::protected_paths(policy_for(root));
  for (const ProtectedEntry& e : entries) { // the placeholders, as the namespace layer makes them
    if (e.kind == ProtectedKind::missing_file) {
      write_text(e.path, e.placeholder);
    } else if (e.kind == ProtectedKind::missing_directory) {
      fs::create_directory(e.path);
    }
  }
  const std::string config_before = read_text(root / ".git/config");
  // Each step must succeed, and each plant must fail, for the script to exit 0.
  const std::string script = "set -u; exec 2>/dev/null; cd \"$1\" || exit 10\n"
                             "echo b > b.txt && git add b.txt && git commit -q -m two || exit 11\n"
                             "git checkout -q -b topic && git branch -q other && git checkout -q main || exit 12\n"
                             "git config core.fsmonitor /bin/true 2>/dev/null && exit 13\n"
                             "echo 'exit 0' > .git/hooks/pre-commit 2>/dev/null && exit 14\n"
                             "echo '[core]' >> .git/config 2>/dev/null && exit 15\n"
                             "echo x > .gitmodules 2>/dev/null && exit 16\n"
                             "echo ../elsewhere > .git/commondir 2>/dev/null && exit 17\n"
                             "mv .git .git-away 2>/dev/null && exit 18\n"
                             "exit 0\n";
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const ::uid_t uid = ::geteuid();
    const ::gid_t gid = ::getegid();
    if (::unshare(uid == 0 ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      ::_exit(2);
    }
    if (uid != 0) { // the same ids inside, so git sees the repository as its owner's
      const auto put = [](const char* file, const std::string& text) {
        const int fd = ::open(file, O_WRONLY);
        if (fd < 0 || !dsh::detail::write_all(fd, text.data(), text.size())) {
          ::_exit(6);
        }
        ::close(fd);
      };
      put("/proc/self/setgroups", "deny");
      put("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1");
      put("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1");
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ::_exit(3);
    }
    for (const ProtectedEntry& e : entries) {
      const char* path = e.path.c_str();
      if (::mount(path, path, nullptr, MS_BIND, nullptr) != 0) {
        ::_exit(4);
      }
      if (e.kind != ProtectedKind::pinned_directory &&
          ::mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
        ::_exit(5);
      }
    }
    ::setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
    ::setenv("GIT_CONFIG_GLOBAL", "/dev/null", 1);
    ::setenv("GIT_AUTHOR_NAME", "dsh", 1);
    ::setenv("GIT_AUTHOR_EMAIL", "dsh@example.invalid", 1);
    ::setenv("GIT_COMMITTER_NAME", "dsh", 1);
    ::setenv("GIT_COMMITTER_EMAIL", "dsh@example.invalid", 1);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), "sh", root.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_text(root / ".git/config") == config_before);
  CHECK_FALSE(fs::exists(root / ".git/hooks/pre-commit"));
  CHECK(read_text(root / ".gitmodules").empty());
  CHECK(read_text(root / ".git/commondir") == ".\n");
  CHECK(fs::is_directory(root / ".git"));
  CHECK(run_git(root, {"rev-parse", "--verify", "-q", "topic"}) == 0);
  CHECK(run_git(root, {"rev-parse", "--verify", "-q", "other"}) == 0);
}
