// The write tool's primitives on real directories: write_file replaces the whole content (in
// place and atomically, keeping the mode), makes parents beneath the root only through real
// directories, and refuses (with a dsh::WriteError naming the path, the mode and the root, and
// creating nothing) a read-only policy, a path outside the root, a symbolic link that leads out,
// and a protected path; create_directories behaves the same way.
#include "support/catch.hpp"
#include "support/landlock.hpp"

#include <dsh/sandbox_policy.hpp>
#include <dsh/write_file.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>

using dsh::SandboxMode;
using dsh::WriteError;
using dsh::WriteOptions;
using namespace dsh::test;

namespace {

/// What `action` threw: "<errno name value> <message>", or "no error".
std::string refusal_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const WriteError& error) {
    return std::to_string(error.code().value()) + " " + error.what();
  } catch (const std::exception& error) {
    return std::string("not a WriteError: ") + error.what();
  }
  return "no error";
}

/// The names beneath `directory`, recursively, relative and sorted.
std::vector<std::string> tree(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    names.push_back(entry.path().lexically_relative(directory).native());
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// The permission bits of `path`.
unsigned mode_of(const std::filesystem::path& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return static_cast<unsigned>(info.st_mode & 07777);
}

} // namespace

TEST_CASE("write_file over a longer file leaves exactly the new bytes, atomically or in place, keeping the mode") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  for (const bool atomic : {true, false}) {
    CAPTURE(atomic);
    const std::filesystem::path file = lab.workspace() / "notes.txt";
    write_file(file, "a first line that is long\n original line\n");
    REQUIRE(::chmod(file.c_str(), 0640) == 0);
    WriteOptions options;
    options.atomic = atomic;
    options.durable = true;
    dsh::write_file(policy, "notes.txt", "short\n", options);
    CHECK(read_file(file) == "short\n");
    CHECK(mode_of(file) == 0640);
    CHECK(tree(lab.workspace()) == std::vector<std::string>{"notes.txt"}); // no temporary left
  }
  // The default: atomic for an existing file (a new inode), in place for a new one.
  const std::filesystem::path file = lab.workspace() / "notes.txt";
  struct stat before {};
  REQUIRE(::stat(file.c_str(), &before) == 0);
  dsh::write_file(policy, file, "replaced\n");
  struct stat after {};
  REQUIRE(::stat(file.c_str(), &after) == 0);
  CHECK(after.st_ino != before.st_ino);
  CHECK(read_file(file) == "replaced\n");
  dsh::write_file(policy, "new.txt", "");
  CHECK(read_file(lab.workspace() / "new.txt").empty());
}

TEST_CASE("write_file makes missing parents beneath the root only when asked") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const std::filesystem::path target = lab.workspace() / "src" / "deep" / "a.c";
  CHECK(refusal_of([&] { dsh::write_file(policy, "src/deep/a.c", "int a;\n"); }) ==
        "2 write_file(\"" + target.native() + "\"): its directory \"" + (lab.workspace() / "src/deep").native() +
            "\" does not exist (WriteOptions::create_parents makes it): No such file or directory");
  CHECK_FALSE(exists_nofollow(lab.workspace() / "src"));
  WriteOptions options;
  options.create_parents = true;
  dsh::write_file(policy, "src/deep/a.c", "int a;\n", options);
  CHECK(read_file(target) == "int a;\n");
  CHECK(tree(lab.workspace()) == std::vector<std::string>{"src", "src/deep", "src/deep/a.c"});
}

TEST_CASE("write_file and create_directories refuse a symbolic link that leads out, creating nothing") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  std::filesystem::create_directory_symlink(lab.outside(), lab.workspace() / "out");
  WriteOptions options;
  options.create_parents = true;
  const std::string outside = "13 write_file(\"" + (lab.workspace() / "out/new/x.txt").native() +
                              "\"): the workspace-write policy permits writes only beneath the workspace root \"" +
                              lab.workspace().native() + "\", outside its protected paths: Permission denied";
  CHECK(refusal_of([&] { dsh::write_file(policy, "out/new/x.txt", "x", options); }) == outside);
  CHECK(refusal_of([&] { dsh::write_file(policy, "out/x.txt", "x"); }).rfind("13 write_file(", 0) == 0);
  CHECK(refusal_of([&] { (void)dsh::create_directories(policy, "out/new/deeper"); }) ==
        "13 create_directories(\"" + (lab.workspace() / "out/new/deeper").native() +
            "\"): the workspace-write policy permits writes only beneath the workspace root \"" +
            lab.workspace().native() + "\", outside its protected paths: Permission denied");
  CHECK(tree(lab.outside()).empty());
  CHECK(tree(lab.workspace()) == std::vector<std::string>{"out"});
  // A link that stays inside the root is still never made through.
  std::filesystem::create_directory(lab.workspace() / "real");
  std::filesystem::create_directory_symlink(lab.workspace() / "real", lab.workspace() / "inner");
  CHECK(refusal_of([&] { dsh::write_file(policy, "inner/made/x.txt", "x", options); }) ==
        "40 write_file(\"" + (lab.workspace() / "inner/made/x.txt").native() +
            "\"): \"inner\" is a symbolic link: directories are made only through real directories: Too many levels "
            "of symbolic links");
  CHECK(tree(lab.workspace() / "real").empty());
  // An absolute path outside the root.
  CHECK(refusal_of([&] { dsh::write_file(policy, lab.outside() / "x.txt", "x"); }).rfind("13 write_file(", 0) == 0);
  CHECK(tree(lab.outside()).empty());
}

TEST_CASE("create_directories makes the missing directories beneath the root, and says whether it made one") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  CHECK(dsh::create_directories(policy, "a/b/c"));
  CHECK_FALSE(dsh::create_directories(policy, lab.workspace() / "a" / "b"));
  CHECK(tree(lab.workspace()) == std::vector<std::string>{"a", "a/b", "a/b/c"});
  write_file(lab.workspace() / "a" / "file", "");
  CHECK(refusal_of([&] { (void)dsh::create_directories(policy, "a/file/d"); }) ==
        "20 create_directories(\"" + (lab.workspace() / "a/file/d").native() +
            "\"): \"file\" is not a directory that can be entered: Not a directory");
  CHECK(refusal_of([&] { (void)dsh::create_directories(policy, "a/../../escape"); }).rfind("13 ", 0) == 0);
  CHECK_FALSE(exists_nofollow(lab.base() / "escape"));
}

TEST_CASE("a read-only policy refuses both, naming the path, and creates nothing") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::read_only);
  WriteOptions options;
  options.create_parents = true;
  CHECK(refusal_of([&] { dsh::write_file(policy, "d/x.txt", "x", options); }) ==
        "13 write_file(\"" + (lab.workspace() / "d/x.txt").native() +
            "\"): the read-only policy refuses every write: Permission denied");
  CHECK(refusal_of([&] { (void)dsh::create_directories(policy, "d"); }) ==
        "13 create_directories(\"" + (lab.workspace() / "d").native() +
            "\"): the read-only policy refuses every write: Permission denied");
  CHECK(tree(lab.workspace()).empty());
}

TEST_CASE("write_file refuses a protected path and what is not a regular file") {
  const Lab lab;
  std::filesystem::create_directories(lab.workspace() / ".git" / "hooks");
  write_file(lab.workspace() / ".git" / "config", "[core]\n");
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const std::string refused = refusal_of([&] { dsh::write_file(policy, ".git/hooks/pre-commit", "#!/bin/sh\n"); });
  CHECK(refused.rfind("13 write_file(\"" + (lab.workspace() / ".git/hooks/pre-commit").native() + "\"): ", 0) == 0);
  CHECK(refused.find(".git/hooks") != std::string::npos);
  CHECK_FALSE(exists_nofollow(lab.workspace() / ".git" / "hooks" / "pre-commit"));
  CHECK(refusal_of([&] { dsh::write_file(policy, ".git/config", "[core]\n\tfsmonitor = x\n"); }).rfind("13 ", 0) == 0);
  CHECK(read_file(lab.workspace() / ".git" / "config") == "[core]\n");
  std::filesystem::create_directory(lab.workspace() / "dir");
  CHECK(refusal_of([&] { dsh::write_file(policy, "dir", "x"); }) ==
        "21 write_file(\"" + (lab.workspace() / "dir").native() +
            "\"): refusing to write to a directory: only regular files are written: Is a directory");
}

TEST_CASE("danger-full-access writes anywhere, parents included") {
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::danger_full_access);
  WriteOptions options;
  options.create_parents = true;
  dsh::write_file(policy, lab.outside() / "made" / "x.txt", "x\n", options);
  CHECK(read_file(lab.outside() / "made" / "x.txt") == "x\n");
  CHECK(dsh::create_directories(policy, lab.outside() / "p" / "q"));
  CHECK(std::filesystem::is_directory(lab.outside() / "p" / "q"));
}
