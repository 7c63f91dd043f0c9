// Canonicalization (docs/contract.md#canonicalization) on real directories and symbolic links, and the in-process write
// check built on it. The oracle for an existing directory is std::filesystem::canonical
// (realpath); everything below it is spelled out by hand.
#include "support/catch.hpp"
#include "support/scoped.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

using dsh::canonical_path;
using dsh::SandboxMode;

/// Checks `canonical_path` of each path against the string expected for it.
void check_canonical(std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [path, expected] : cases) {
    CAPTURE(path);
    CHECK(canonical_path(path).string() == expected);
  }
}

/// Checks that `policy.permits_write` answers `expected` for each of `paths`.
void check_permits(const dsh::ResolvedPolicy& policy, bool expected, std::initializer_list<fs::path> paths) {
  for (const fs::path& path : paths) {
    CAPTURE(path);
    CHECK(policy.permits_write(path) == expected);
  }
}

// The tree every test works in:
//   physical/child/            lexical/link -> <base>/physical/child   lexical/rlink -> ../physical/child
//   a/b/c/file.txt             d/dangling -> target-file (missing)     d/abs-dangling -> <base>/other/new
//   other/                     d/chain1 -> chain2 -> <base>/other/final (missing)
//   d/via -> ../lexical/link/newname (missing)                          d/loop1 <-> d/loop2
struct Tree {
  dsh::test::TempDir tmp;
  fs::path base = fs::canonical(tmp.path());

  Tree() {
    fs::create_directories(tmp / "physical" / "child");
    fs::create_directories(tmp / "lexical");
    fs::create_directories(tmp / "a" / "b" / "c");
    fs::create_directories(tmp / "d");
    fs::create_directories(tmp / "other");
    touch(tmp / "a" / "b" / "c" / "file.txt");
    fs::create_directory_symlink(base / "physical" / "child", tmp / "lexical" / "link");
    fs::create_directory_symlink("../physical/child", tmp / "lexical" / "rlink");
    fs::create_symlink("target-file", tmp / "d" / "dangling");
    fs::create_symlink(base / "other" / "new", tmp / "d" / "abs-dangling");
    fs::create_symlink("chain2", tmp / "d" / "chain1");
    fs::create_symlink(base / "other" / "final", tmp / "d" / "chain2");
    fs::create_symlink("../lexical/link/newname", tmp / "d" / "via");
    fs::create_symlink("loop2", tmp / "d" / "loop1");
    fs::create_symlink("loop1", tmp / "d" / "loop2");
  }

  static void touch(const fs::path& file) {
    std::ofstream out(file);
    REQUIRE(out.good());
  }
};

} // namespace

TEST_CASE("canonical: link/.. is the physical parent, not the lexical one", "[canonical]") {
  const Tree tree;
  const fs::path& base = tree.base;
  CHECK(canonical_path(tree.tmp / "lexical" / "link") == base / "physical" / "child");
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / "..") == base / "physical");
  CHECK(canonical_path(tree.tmp / "lexical" / "rlink" / "..") == base / "physical");
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / ".." / "..") == base);
  // The same with a missing tail: identity of the existing prefix first, then the rest lexically.
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / ".." / "newfile") == base / "physical" / "newfile");
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / "missing" / ".." / "..") == base / "physical");
  // The oracle agrees where the whole path exists.
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / "..") == fs::canonical(tree.tmp / "lexical" / "link" / ".."));
}

TEST_CASE("canonical: dots, doubled separators and trailing separators", "[canonical]") {
  const Tree tree;
  const fs::path& base = tree.base;
  const std::string tmp = tree.tmp.path().string();
  CHECK(canonical_path(tmp + "/a/./b//c/") == base / "a" / "b" / "c");
  CHECK(canonical_path(tmp + "/a/./b//c/").string().back() == 'c');
  CHECK(canonical_path(tmp + "/a/./b//missing/") == base / "a" / "b" / "missing");
  CHECK(canonical_path(tmp + "/a/./b//c/file.txt") == base / "a" / "b" / "c" / "file.txt");
  CHECK(canonical_path(tmp + "/a/") == base / "a");
  CHECK(canonical_path(tmp + "/a//") == base / "a");
  CHECK(canonical_path(tmp + "/missing/") == base / "missing");
  CHECK(canonical_path(tmp + "/missing/./") == base / "missing");
  CHECK(canonical_path(tmp + "/missing//deeper//") == base / "missing" / "deeper");
  CHECK(canonical_path(tmp + "/a/b/../b/./c") == base / "a" / "b" / "c");
}

TEST_CASE("canonical: the root itself", "[canonical]") {
  check_canonical({
      {"/", "/"},
      {"//", "/"},
      {"///", "/"},
      {"/.", "/"},
      {"/./", "/"},
      {"/..", "/"},
      {"/../..", "/"},
  });
}

TEST_CASE("canonical: a path that does not exist at all is normalized lexically", "[canonical]") {
  REQUIRE_FALSE(fs::exists("/nonexistent-xyz"));
  check_canonical({
      {"/nonexistent-xyz/../nonexistent-xyz/current", "/nonexistent-xyz/current"},
      {"/nonexistent-xyz/./a//b/", "/nonexistent-xyz/a/b"},
      {"/nonexistent-xyz/a/../../nonexistent-xyz", "/nonexistent-xyz"},
      {"/nonexistent-xyz/../..", "/"},
      {"/nonexistent-xyz/", "/nonexistent-xyz"},
  });
}

TEST_CASE("canonical: a relative path is taken against the process working directory", "[canonical]") {
  const Tree tree;
  const fs::path& base = tree.base;
  const fs::path before = fs::current_path();
  {
    const dsh::test::WorkingDirectory guard(tree.tmp.path());
    CHECK(canonical_path("a/b") == base / "a" / "b");
    CHECK(canonical_path("./a/../a/b/c/") == base / "a" / "b" / "c");
    CHECK(canonical_path("lexical/link/..") == base / "physical");
    CHECK(canonical_path("missing/x") == base / "missing" / "x");
    CHECK(canonical_path(".") == base);
    CHECK(canonical_path("..") == base.parent_path());

    // A session cwd and a configured root may be relative too.
    const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, fs::path("a"), "DSH"});
    CHECK(owner.workspaceRoot() == base / "a");
    const dsh::Session session(dsh::SessionHeader{"s", "a/b/../b", 0});
    const dsh::ResolvedPolicy policy = owner.resolve(session);
    CHECK(policy.workspace_root == base / "a" / "b");
    CHECK(policy.root_source == dsh::RootSource::session);

    // No configured root: the process working directory, canonical.
    const dsh::PolicyOwner defaulted;
    CHECK(defaulted.workspaceRoot() == base);
    CHECK(defaulted.resolve().workspace_root == base);
  }
  CHECK(fs::current_path() == before);
}

TEST_CASE("canonical: a relative path needs a working directory that can be read", "[canonical]") {
  const dsh::test::TempDir tmp;
  fs::create_directories(tmp / "gone");
  const fs::path base = fs::canonical(tmp.path());
  const dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, base, "DSH"});
  const dsh::test::WorkingDirectory guard(base / "gone");
  fs::remove(base / "gone");
  // No base is guessed for a relative path: guessing could widen the root.
  CHECK_THROWS_AS(canonical_path("x"), dsh::SystemError);
  CHECK_THROWS_AS(owner.resolve(dsh::Session(dsh::SessionHeader{"s", "relative", 0})), dsh::SystemError);
  // Absolute paths need no working directory.
  CHECK(canonical_path(base / "a" / ".." / "b") == base / "b");
  CHECK(owner.resolve(dsh::Session(dsh::SessionHeader{"s", base.string(), 0})).workspace_root == base);
  CHECK(owner.resolve().workspace_root == base);
}

TEST_CASE("canonical: a dangling symbolic link at the end is followed", "[canonical]") {
  const Tree tree;
  const fs::path& base = tree.base;
  CHECK(canonical_path(tree.tmp / "d" / "dangling") == base / "d" / "target-file");
  CHECK(canonical_path(tree.tmp / "d" / "dangling" / "x" / "y") == base / "d" / "target-file" / "x" / "y");
  CHECK(canonical_path(tree.tmp / "d" / "abs-dangling") == base / "other" / "new");
  CHECK(canonical_path(tree.tmp / "d" / "chain1") == base / "other" / "final");
  CHECK(canonical_path(tree.tmp / "d" / "via") == base / "physical" / "child" / "newname");
  CHECK(canonical_path(tree.tmp / "lexical" / "link" / ".." / ".." / "d" / "dangling") == base / "d" / "target-file");

  // A loop cannot be resolved; the call still returns an absolute path inside the tree.
  fs::path looped;
  REQUIRE_NOTHROW(looped = canonical_path(tree.tmp / "d" / "loop1"));
  CHECK(looped.is_absolute());
  CHECK(looped.parent_path() == base / "d");
}

TEST_CASE("canonical: an existing path gets exactly realpath(3)'s answer", "[canonical]") {
  // The fast path asks the kernel (open O_PATH, then /proc/self/fd); realpath(3) walks the
  // path itself. They must agree on files, directories, links to both, and `..` after links.
  const Tree tree;
  fs::create_directories(tree.tmp / "gone (deleted)" / "inner");
  fs::create_directory_symlink("../gone (deleted)", tree.tmp / "d" / "to-deleted-name");
  fs::create_symlink("../a/b/c/file.txt", tree.tmp / "d" / "file-link");
  const std::vector<fs::path> existing{
      tree.tmp.path(),
      tree.tmp / "a" / "b" / "c" / "file.txt",
      tree.tmp / "d" / "file-link",
      tree.tmp / "lexical" / "link",
      tree.tmp / "lexical" / "rlink" / "..",
      tree.tmp / "lexical" / "link" / ".." / ".." / "a" / "." / "b",
      tree.tmp / "gone (deleted)",
      tree.tmp / "d" / "to-deleted-name" / "inner",
      "/proc/self/cwd",
  };
  for (const fs::path& path : existing) {
    INFO(path);
    std::array<char, PATH_MAX> expected{};
    REQUIRE(::realpath(path.c_str(), expected.data()) != nullptr);
    CHECK(canonical_path(path).native() == expected.data());
  }
  // A directory really named like the kernel's mark of a deleted one is not mistaken for it.
  CHECK(canonical_path(tree.tmp / "d" / "to-deleted-name") == tree.base / "gone (deleted)");
}

TEST_CASE("canonical: without a free file descriptor the identity is still physical", "[canonical]") {
  // The kernel's answer needs a descriptor; when none is left, realpath(3) answers instead.
  // Measured in a child, whose descriptor table can be filled without harming the test runner.
  const Tree tree;
  const fs::path link_parent = tree.tmp / "lexical" / "link" / "..";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit limit{64, 64};
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      ::_exit(2);
    }
    while (::dup(0) >= 0) {
    }
    const bool exhausted = errno == EMFILE;
    const bool physical = canonical_path(link_parent) == tree.base / "physical";
    const bool missing_ok =
        canonical_path(tree.tmp / "lexical" / "link" / "new") == tree.base / "physical" / "child" / "new";
    ::_exit(exhausted ? (physical && missing_ok ? 0 : 1) : 3);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("canonical: a path holding NUL is normalized lexically only", "[canonical]") {
  const std::string with_nul("/nonexistent-xyz/./a\0b//", 24);
  CHECK(canonical_path(with_nul).string() == std::string("/nonexistent-xyz/a\0b", 20));
}

TEST_CASE("permits_write: read-only never, danger-full-access always", "[permits_write]") {
  const Tree tree;
  const dsh::ResolvedPolicy read_only{SandboxMode::read_only, tree.base, dsh::ModeSource::deployment,
                                      dsh::RootSource::deployment};
  check_permits(read_only, false, {tree.base / "a" / "new.txt", tree.base, "relative.txt"});

  const dsh::ResolvedPolicy danger{SandboxMode::danger_full_access, tree.base / "a", dsh::ModeSource::approved,
                                   dsh::RootSource::deployment};
  check_permits(danger, true, {tree.base / "a" / "new.txt", tree.base / "other" / "x", "/etc/passwd", "relative.txt"});
}

TEST_CASE("permits_write: workspace-write inside, outside and around the root", "[permits_write]") {
  const dsh::test::TempDir tmp;
  fs::create_directories(tmp / "ws" / "sub");
  fs::create_directories(tmp / "ws2");
  fs::create_directories(tmp / "other");
  const fs::path base = fs::canonical(tmp.path());
  fs::create_directory_symlink(base / "other", tmp / "ws" / "escape");
  fs::create_directory_symlink(base / "ws" / "sub", tmp / "ws" / "inner");
  fs::create_directory_symlink("..", tmp / "ws" / "up");
  fs::create_symlink(base / "other" / "newfile", tmp / "ws" / "dang");

  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp / "ws", "DSH"});
  const dsh::ResolvedPolicy policy = owner.resolve(SandboxMode::workspace_write);
  REQUIRE(policy.mode == SandboxMode::workspace_write);
  REQUIRE(policy.workspace_root == base / "ws");

  SECTION("inside") {
    check_permits(policy, true,
                  {base / "ws" / "new.txt", base / "ws", base.string() + "/ws/",
                   base / "ws" / "sub" / "deeper" / "new.txt", base / "ws" / "sub" / ".." / "new.txt",
                   tmp / "ws" / "new.txt", base / "ws" / "inner" / "new.txt"});
  }
  SECTION("outside") {
    check_permits(policy, false,
                  {base / "other" / "new.txt", base, "/", "/etc/passwd", base / "ws" / ".." / "other" / "x",
                   base / "ws" / ".." / "ws2" / "x", fs::path()});
  }
  SECTION("a sibling sharing the root's name as a prefix") {
    check_permits(policy, false,
                  {base / "ws2", base / "ws2" / "x", base / "wsx" / "missing", base.string() + "/ws.txt"});
  }
  SECTION("a symbolic link inside that points outside is outside") {
    check_permits(policy, false,
                  {base / "ws" / "escape", base / "ws" / "escape" / "x", base / "ws" / "up" / "other" / "x",
                   base / "ws" / "up" / "ws2"});
    // A dangling link is followed to where a write would create the file.
    CHECK_FALSE(policy.permits_write(base / "ws" / "dang"));
  }
  SECTION("a relative path is taken against the root, not the process working directory") {
    const dsh::test::WorkingDirectory guard(base / "other");
    check_permits(policy, true, {"new.txt", "sub/new.txt", ".", "inner/x"});
    check_permits(policy, false, {"..", "../ws2/x", "sub/../../other/x", "escape/x", "dang"});
  }
}

TEST_CASE("permits_write: whole components, on paths that do not exist", "[permits_write]") {
  REQUIRE_FALSE(fs::exists("/nonexistent-xyz"));
  const dsh::ResolvedPolicy ws{SandboxMode::workspace_write, "/nonexistent-xyz/ws", dsh::ModeSource::session,
                               dsh::RootSource::session};
  check_permits(ws, true, {"/nonexistent-xyz/ws", "/nonexistent-xyz/ws/a", "/nonexistent-xyz/ws/a/../b"});
  check_permits(ws, false,
                {"/nonexistent-xyz/ws2", "/nonexistent-xyz/ws2/a", "/nonexistent-xyz/wsa", "/nonexistent-xyz/ws/../ws2",
                 "/nonexistent-xyz"});

  const dsh::ResolvedPolicy everything{SandboxMode::workspace_write, "/", dsh::ModeSource::session,
                                       dsh::RootSource::session};
  check_permits(everything, true, {"/", "/nonexistent-xyz/a", "relative"});
}

TEST_CASE("permits_write: a path holding NUL is refused", "[permits_write]") {
  const dsh::test::TempDir tmp;
  fs::create_directories(tmp / "ws");
  fs::create_directories(tmp / "other");
  const fs::path base = fs::canonical(tmp.path());
  const dsh::ResolvedPolicy policy{dsh::SandboxMode::workspace_write, base / "ws", dsh::ModeSource::session,
                                   dsh::RootSource::session};
  // open(2) sees only the part before the NUL: base/other/secret, outside the workspace.
  const fs::path target((base / "other" / "secret").string() + std::string(1, '\0') + "/../../ws/x");
  CHECK_FALSE(policy.permits_write(target));
  CHECK_FALSE(policy.permits_write(fs::path(std::string("x\0y", 3))));
}

TEST_CASE("permits_write: a root that is not absolute contains nothing", "[permits_write]") {
  const dsh::ResolvedPolicy no_root{dsh::SandboxMode::workspace_write, fs::path(), dsh::ModeSource::session,
                                    dsh::RootSource::session};
  CHECK_FALSE(no_root.permits_write("/etc/passwd"));
  CHECK_FALSE(no_root.permits_write("relative"));
}
