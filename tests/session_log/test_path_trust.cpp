// dsh::detail::untrusted_directory, the StrictModes-like check of the directories that resolve a
// path, on real directories (made as root with the owners and modes each case needs): which
// directories it reads, how it follows symbolic links, and how it fails closed.
#include <dsh/detail/path_trust.hpp>

#include "support/session_log.hpp"

#include <fstream>
#include <string>

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

using dsh::detail::untrusted_directory;
using namespace dsh::test;

namespace {

/// The phrase `untrusted_directory` gives a directory another user may change.
std::string writable(const std::filesystem::path& dir, std::string_view mode, unsigned uid = 0, unsigned gid = 0) {
  return "the directory " + dsh::json_string_literal(dir.native()) + " (mode " + std::string(mode) + ", owner uid " +
         std::to_string(uid) + ", group gid " + std::to_string(gid) +
         ") is writable by another user and has no sticky bit";
}

/// A scratch directory under /tmp (sticky, root's) that every user may traverse, with `trusted`
/// (0755) and `open` (0777) beneath it.
struct Tree {
  TempDir base{"/tmp"};
  std::filesystem::path trusted = base / "trusted";
  std::filesystem::path open = base / "open";
  Tree() {
    REQUIRE(::geteuid() == 0); // the cases need directories owned by others: the suite runs as root
    REQUIRE(::chmod(base.path().c_str(), 0755) == 0);
    make_directory(trusted, 0755);
    make_directory(open, 0777);
  }
};

} // namespace

// The answers are compared with "" rather than tested with empty(): when one is not empty,
// Catch2 then prints the reason it gives.
// NOLINTBEGIN(readability-container-size-empty)

TEST_CASE("a path whose directories only root and the effective user can change is trusted") {
  const Tree tree;
  CHECK(untrusted_directory("/") == "");
  CHECK(untrusted_directory("/etc/hostname") == "");
  CHECK(untrusted_directory(tree.trusted / "s.jsonl") == ""); // a last component still missing
  CHECK(untrusted_directory(tree.open) == "");                // the last component's own mode is not read
  CHECK(untrusted_directory(tree.base / "." / "trusted" / "s.jsonl") == "");
  // ".." is resolved without reading the directory it leaves: only base and trusted are read.
  CHECK(untrusted_directory(tree.open / ".." / "trusted" / "s.jsonl") == "");
}

TEST_CASE("a world-writable directory without the sticky bit is named with its mode and owner") {
  const Tree tree;
  CHECK(untrusted_directory(tree.open / "s.jsonl") == writable(tree.open, "0777"));
  make_directory(tree.open / "deeper", 0755);
  CHECK(untrusted_directory(tree.open / "deeper" / "s.jsonl") == writable(tree.open, "0777")); // the first one
  REQUIRE(::chmod(tree.open.c_str(), 01777) == 0);
  CHECK(untrusted_directory(tree.open / "s.jsonl") == "");
  CHECK(untrusted_directory(tree.open / "deeper" / "s.jsonl") == "");
  REQUIRE(::chmod(tree.open.c_str(), 0757) == 0);
  CHECK(untrusted_directory(tree.open / "s.jsonl") == writable(tree.open, "0757"));
}

TEST_CASE("a directory owned by another user is untrusted, sticky or not") {
  const Tree tree;
  const auto theirs = tree.base / "theirs";
  make_directory(theirs, 0755, 65534, 65534);
  const std::string owned = "the directory " + dsh::json_string_literal(theirs.native()) +
                            " (mode 0755, owner uid 65534, group gid 65534) is owned by another user than root and "
                            "the effective uid 0";
  CHECK(untrusted_directory(theirs / "s.jsonl") == owned);
  REQUIRE(::chmod(theirs.c_str(), 01755) == 0);
  CHECK(
      untrusted_directory(theirs / "s.jsonl") ==
      "the directory " + dsh::json_string_literal(theirs.native()) +
          " (mode 1755, owner uid 65534, group gid 65534) is owned by another user than root and the effective uid 0");
  // The directory's owner, playing the effective user, trusts it.
  Child child([&](int report) {
    if (!dsh::test::become_nobody()) {
      return 2;
    }
    write_all(report, untrusted_directory(theirs / "s.jsonl"));
    return 0;
  });
  const std::string answer = child.read_all();
  CHECK(child.exit_code() == 0);
  CHECK(answer == "");
}

TEST_CASE("a group-writable directory is trusted only for the effective gid when no other user can hold it") {
  const Tree tree;
  REQUIRE(::getgrgid(4242) == nullptr); // an unknown group can hold anyone
  REQUIRE(::getegid() == 0);
  const auto unknown = tree.base / "unknown-group";
  make_directory(unknown, 0775, 0, 4242);
  CHECK(untrusted_directory(unknown / "s.jsonl") == writable(unknown, "0775", 0, 4242));
  REQUIRE(::chmod(unknown.c_str(), 01775) == 0);
  CHECK(untrusted_directory(unknown / "s.jsonl") == "");

  const auto nogroup = tree.base / "nogroup";
  make_directory(nogroup, 0775, 0, 65534); // a known group, but not the effective gid
  CHECK(untrusted_directory(nogroup / "s.jsonl") == writable(nogroup, "0775", 0, 65534));

  // Group 0 lists no member and is no other user's primary group here (`getent group 0` is
  // "root:x:0:"; only root's password entry has gid 0).
  const struct group* root_group = ::getgrgid(0);
  REQUIRE(root_group != nullptr);
  REQUIRE(root_group->gr_mem[0] == nullptr);
  const auto own = tree.base / "own-group";
  make_directory(own, 0775, 0, 0);
  CHECK(untrusted_directory(own / "s.jsonl") == "");
}

TEST_CASE("a group the database says another user holds makes a group-writable directory untrusted") {
  const Tree tree;
  const auto own = tree.base / "own-group";
  make_directory(own, 0775, 0, 0);
  // Each child sees its own copy of the databases, bind-mounted in a private mount namespace.
  const auto with_databases = [&](const std::string& group, const std::string& passwd) {
    const TempDir scratch;
    write_file(scratch / "group", group);
    write_file(scratch / "passwd", passwd);
    Child child([&](int report) {
      if (!dsh::test::enter_private_mount_namespace() ||
          ::mount((scratch / "group").c_str(), "/etc/group", nullptr, MS_BIND, nullptr) != 0 ||
          ::mount((scratch / "passwd").c_str(), "/etc/passwd", nullptr, MS_BIND, nullptr) != 0) {
        return 2;
      }
      write_all(report, untrusted_directory(own / "s.jsonl"));
      return 0;
    });
    std::string answer = child.read_all();
    CHECK(child.exit_code() == 0);
    return answer;
  };
  const std::string passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
  CHECK(with_databases("root:x:0:\n", passwd) == "");
  CHECK(with_databases("root:x:0:root\n", passwd) == "");
  CHECK(with_databases("root:x:0:root,nobody\n", passwd) == writable(own, "0775"));
  CHECK(with_databases("root:x:0:nobody\n", passwd) == writable(own, "0775"));
  CHECK(with_databases("root:x:0:\n", passwd + "operator:x:11:0:operator:/root:/bin/false\n") ==
        writable(own, "0775")); // another user's primary group
}

TEST_CASE("symbolic links on the way are followed, and the directories of their targets count") {
  const Tree tree;
  make_directory(tree.open / "sub", 0755);
  std::filesystem::create_directory_symlink(tree.open / "sub", tree.trusted / "absolute");
  std::filesystem::create_directory_symlink("../open/sub", tree.trusted / "relative");
  std::filesystem::create_symlink(tree.open / "s.jsonl", tree.trusted / "s.jsonl"); // the last component
  std::filesystem::create_directory_symlink(tree.trusted, tree.base / "to-trusted");
  CHECK(untrusted_directory(tree.trusted / "absolute" / "s.jsonl") == writable(tree.open, "0777"));
  CHECK(untrusted_directory(tree.trusted / "relative" / "s.jsonl") == writable(tree.open, "0777"));
  CHECK(untrusted_directory(tree.trusted / "s.jsonl") == writable(tree.open, "0777")); // dangling: its directory
  CHECK(untrusted_directory(tree.base / "to-trusted" / "x.jsonl") == "");
  // ".." after a link is the parent of the link's target, as the kernel resolves it.
  CHECK(untrusted_directory(tree.trusted / "absolute" / ".." / "x.jsonl") == writable(tree.open, "0777"));
  REQUIRE(::chmod(tree.open.c_str(), 01777) == 0);
  CHECK(untrusted_directory(tree.trusted / "absolute" / "s.jsonl") == "");
}

TEST_CASE("a relative path is resolved from the working directory's absolute name") {
  const Tree tree;
  const auto answer_in = [](const std::filesystem::path& cwd, const std::filesystem::path& path) {
    Child child([&](int report) {
      if (::chdir(cwd.c_str()) != 0) {
        return 2;
      }
      write_all(report, untrusted_directory(path));
      return 0;
    });
    std::string answer = child.read_all();
    CHECK(child.exit_code() == 0);
    return answer;
  };
  CHECK(answer_in(tree.trusted, "s.jsonl") == "");
  CHECK(answer_in(tree.open, "s.jsonl") == writable(tree.open, "0777"));
  make_directory(tree.open / "sub", 0755);
  CHECK(answer_in(tree.open / "sub", "s.jsonl") == writable(tree.open, "0777")); // an ancestor of the cwd
  CHECK(answer_in(tree.open / "sub", "../../trusted/s.jsonl") == writable(tree.open, "0777"));
}

TEST_CASE("what cannot be examined is a reason: a missing or non-directory component, a link loop, an empty path") {
  const Tree tree;
  const auto cannot = [](const std::filesystem::path& what, std::string_view why) {
    return "cannot examine " + dsh::json_string_literal(what.native()) + ": " + std::string(why);
  };
  CHECK(untrusted_directory(tree.trusted / "missing" / "s.jsonl") ==
        cannot(tree.trusted / "missing", "No such file or directory"));
  write_file(tree.trusted / "file", "x");
  CHECK(untrusted_directory(tree.trusted / "file" / "s.jsonl") == cannot(tree.trusted / "file", "Not a directory"));
  std::filesystem::create_symlink("loop", tree.trusted / "loop");
  CHECK(untrusted_directory(tree.trusted / "loop" / "s.jsonl") ==
        cannot(tree.trusted / "loop", "Too many levels of symbolic links"));
  CHECK(untrusted_directory(tree.trusted / "loop") ==
        cannot(tree.trusted / "loop", "Too many levels of symbolic links"));
  CHECK(untrusted_directory("") == cannot("", "No such file or directory"));
  // A directory the effective user cannot search cannot be examined either.
  make_directory(tree.trusted / "closed", 0700);
  Child child([&](int report) {
    if (!dsh::test::become_nobody()) {
      return 2;
    }
    write_all(report, untrusted_directory(tree.trusted / "closed" / "inner" / "s.jsonl"));
    return 0;
  });
  const std::string answer = child.read_all();
  CHECK(child.exit_code() == 0);
  CHECK(answer == cannot(tree.trusted / "closed" / "inner", "Permission denied"));
}

// NOLINTEND(readability-container-size-empty)
