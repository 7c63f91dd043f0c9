// open_for_write opens regular files only: a FIFO, device or socket planted where a write
// tool will write (by an earlier command, or through a symlink) is refused with an error that
// names the path and what it is, without blocking, and left as it was. Every open that could
// block runs in a forked child guarded by an alarm, so a regression fails instead of hanging.
#include "support/landlock.hpp"

#include <dsh/open_beneath.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// What `open_for_write(policy, path, flags)` does, run in a forked child with a 10-second
/// alarm: "opened" or "errno N: what()"; a hang shows as "<child ended with status 142>".
std::string attempt(const dsh::ResolvedPolicy& policy, const std::filesystem::path& path,
                    int flags = O_WRONLY | O_CREAT) {
  return report_from_child("child", 10, [&] {
    try {
      const dsh::UniqueFd file = dsh::open_for_write(policy, path, flags);
      return std::string("opened");
    } catch (const dsh::WriteError& error) {
      return "errno " + std::to_string(error.code().value()) + ": " + error.what();
    }
  });
}

/// The refusal text for `path` being `kind`.
std::string refused(const std::filesystem::path& path, const std::string& kind) {
  return "errno " + std::to_string(EPERM) + ": open_for_write(" + dsh::json_string_literal(path.native()) +
         "): refusing to write to " + kind + ": only regular files are opened for writing: " + std::strerror(EPERM);
}

/// The file type bits of `path` (not following a symlink), or 0 when it is missing.
::mode_t type_of(const std::filesystem::path& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 ? (info.st_mode & S_IFMT) : 0;
}

} // namespace

TEST_CASE("open_for_write refuses a planted FIFO without blocking, with or without a reader") {
  const Lab lab;
  const std::filesystem::path fifo = lab.workspace() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::filesystem::create_symlink("fifo", lab.workspace() / "to-fifo");
  const dsh::ResolvedPolicy workspace = lab.policy(SandboxMode::workspace_write);
  const dsh::ResolvedPolicy full = lab.policy(SandboxMode::danger_full_access);
  for (const int flags : {O_WRONLY | O_CREAT, O_WRONLY | O_CREAT | O_TRUNC, O_RDWR}) {
    CAPTURE(flags);
    CHECK(attempt(workspace, "fifo", flags) == refused("fifo", "a FIFO"));
    CHECK(attempt(workspace, "to-fifo", flags) == refused("to-fifo", "a FIFO"));
    CHECK(attempt(full, "fifo", flags) == refused(fifo, "a FIFO"));
    CHECK(attempt(full, fifo, flags) == refused(fifo, "a FIFO"));
  }
  // A reader waiting on the FIFO receives nothing and no end of file.
  const dsh::UniqueFd waiting{::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  REQUIRE(waiting);
  CHECK(attempt(workspace, "fifo") == refused("fifo", "a FIFO"));
  std::array<char, 8> buffer{};
  CHECK(::read(waiting.get(), buffer.data(), buffer.size()) == 0); // no writer ever opened it
  CHECK(type_of(fifo) == S_IFIFO);
}

TEST_CASE("open_for_write refuses character and block devices, planted or reached by a symlink") {
  const Lab lab;
  const dsh::ResolvedPolicy workspace = lab.policy(SandboxMode::workspace_write);
  const dsh::ResolvedPolicy full = lab.policy(SandboxMode::danger_full_access);
  // A symlink inside the workspace to /dev/null: workspace-write refuses the absolute link as
  // an escape; danger-full-access follows it and refuses the device.
  std::filesystem::create_symlink("/dev/null", lab.workspace() / "null");
  CHECK(attempt(workspace, "null").rfind("errno " + std::to_string(EXDEV) + ": open_beneath(\"null\" beneath ", 0) ==
        0);
  CHECK(attempt(full, "null") == refused(lab.workspace() / "null", "a character device"));
  CHECK(attempt(full, "/dev/null", O_WRONLY | O_TRUNC) == refused("/dev/null", "a character device"));
  CHECK(type_of("/dev/null") == S_IFCHR);
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("planting device nodes needs root");
  }
  const std::filesystem::path character = lab.workspace() / "zero";
  const std::filesystem::path block = lab.workspace() / "disk";
  REQUIRE(::mknod(character.c_str(), S_IFCHR | 0600, ::makedev(1, 5)) == 0); // /dev/zero
  REQUIRE(::mknod(block.c_str(), S_IFBLK | 0600, ::makedev(7, 0)) == 0);     // /dev/loop0
  CHECK(attempt(workspace, "zero") == refused("zero", "a character device"));
  CHECK(attempt(workspace, "disk", O_WRONLY | O_TRUNC) == refused("disk", "a block device"));
  CHECK(attempt(full, block) == refused(block, "a block device"));
  CHECK(type_of(character) == S_IFCHR);
  CHECK(type_of(block) == S_IFBLK);
}

TEST_CASE("open_for_write refuses a socket and a directory") {
  const Lab lab;
  const dsh::ResolvedPolicy workspace = lab.policy(SandboxMode::workspace_write);
  const std::filesystem::path socket_path = lab.workspace() / "sock";
  const dsh::UniqueFd listener{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  REQUIRE(listener);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(socket_path.native().size() < sizeof address.sun_path);
  std::copy(socket_path.native().begin(), socket_path.native().end(), address.sun_path);
  REQUIRE(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  CHECK(attempt(workspace, "sock") == refused("sock", "a socket"));
  std::filesystem::create_directory(lab.workspace() / "dir");
  CHECK(attempt(workspace, "dir") == "errno " + std::to_string(EISDIR) +
                                         ": open_for_write(\"dir\"): refusing to write to a directory: only regular "
                                         "files are opened for writing: " +
                                         std::strerror(EISDIR));
  CHECK(type_of(socket_path) == S_IFSOCK);
}

TEST_CASE("open_for_write still opens regular files: created, kept, truncated, blocking") {
  const Lab lab;
  const dsh::ResolvedPolicy workspace = lab.policy(SandboxMode::workspace_write);
  write_file(lab.workspace() / "kept.txt", "kept\n");
  write_file(lab.workspace() / "cut.txt", "cut\n");
  {
    const dsh::UniqueFd kept = dsh::open_for_write(workspace, "kept.txt", O_WRONLY);
    CHECK((::fcntl(kept.get(), F_GETFL) & O_NONBLOCK) == 0);
    const dsh::UniqueFd cut = dsh::open_for_write(workspace, "cut.txt", O_WRONLY | O_TRUNC);
    const dsh::UniqueFd created = dsh::open_for_write(workspace, "new.txt");
    CHECK(::write(created.get(), "new\n", 4) == 4);
    const dsh::UniqueFd nonblocking = dsh::open_for_write(workspace, "kept.txt", O_WRONLY | O_NONBLOCK);
    CHECK((::fcntl(nonblocking.get(), F_GETFL) & O_NONBLOCK) != 0);
  }
  CHECK(read_file(lab.workspace() / "kept.txt") == "kept\n");
  CHECK(read_file(lab.workspace() / "cut.txt").empty());
  CHECK(read_file(lab.workspace() / "new.txt") == "new\n");
}
