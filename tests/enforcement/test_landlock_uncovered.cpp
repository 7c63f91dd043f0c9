// What the Landlock fence does NOT cover, pinned as the actual behaviour on this kernel so
// that docs/enforcement.md stays true: metadata changes of an outside file,
// descriptors opened before the fence, hard links that already existed, and device ioctls.
// Each case also runs unfenced, to show the fence changes nothing there.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <functional>
#include <string>

#include <fcntl.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// The fenced child gets the same result as the unfenced one: Landlock does not decide it.
void not_covered(const PreparedFence& fence, int expected, const std::function<int()>& operation) {
  CHECK(unfenced(operation) == expected);
  CHECK(fenced(fence, operation) == expected);
}

} // namespace

TEST_CASE("not covered: metadata of an outside file (chmod, chown, utimes, xattr)") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path secret = lab.outside() / "secret.txt";
  write_file(secret, "outside");
  ::chmod(secret.c_str(), 0644);
  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    CAPTURE(dsh::to_string(mode));
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(mode));
    not_covered(fence, 0, [&] { return errno_of(::chmod(secret.c_str(), 0600)); });
    not_covered(fence, 0, [&] { return errno_of(::chown(secret.c_str(), ::getuid(), ::getgid())); });
    not_covered(fence, 0, [&] {
      const timespec times[2] = {{0, 0}, {0, 0}}; // the epoch
      return errno_of(::utimensat(AT_FDCWD, secret.c_str(), times, 0));
    });
    // user.* attributes need filesystem support; whatever the filesystem answers, the fence
    // does not change the answer.
    const int xattr = unfenced([&] { return errno_of(::setxattr(secret.c_str(), "user.dsh", "1", 1, 0)); });
    not_covered(fence, xattr, [&] { return errno_of(::setxattr(secret.c_str(), "user.dsh", "2", 1, 0)); });
  }
  struct stat info {};
  REQUIRE(::stat(secret.c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0600);
  CHECK(info.st_mtim.tv_sec == 0);
  CHECK(read_file(secret) == "outside"); // the content itself stayed protected
}

TEST_CASE("not covered: a descriptor opened before the fence keeps its access") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path secret = lab.outside() / "secret.txt";
  write_file(secret, "outside");
  const dsh::UniqueFd writer{::open(secret.c_str(), O_WRONLY | O_APPEND)};
  REQUIRE(writer);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  not_covered(fence, 0, [&] { return ::write(writer.get(), "!", 1) == 1 ? 0 : errno; });
  CHECK(read_file(secret) == "outside!!");
  // FencedCommand passes only 0, 1 and 2 on to the command for exactly this reason (see
  // test_landlock_fence "only descriptors 0, 1 and 2 reach the fenced command").
}

TEST_CASE("not covered: a hard link that already existed inside the workspace") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path secret = lab.outside() / "secret.txt";
  write_file(secret, "outside");
  const std::filesystem::path link = lab.workspace() / "old-link";
  REQUIRE(::link(secret.c_str(), link.c_str()) == 0); // made before the fence, by someone else
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const PreparedFence fence = dsh::test::prepare_base(policy);
  CHECK(fenced(fence, [&] {
          const int fd = ::open(link.c_str(), O_WRONLY | O_APPEND);
          const bool written = fd >= 0 && ::write(fd, "+", 1) == 1;
          if (fd >= 0) {
            ::close(fd);
          }
          return written ? 0 : EACCES;
        }) == 0);
  CHECK(read_file(secret) == "outside+");
  CHECK(policy.permits_write(link)); // the in-process check is path based too
}

TEST_CASE("not covered: a device node outside /dev that already existed is read like a file") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: making a device node needs CAP_MKNOD");
  }
  const Lab lab;
  // A copy of /dev/zero's node where a chroot's /dev made with mknod would keep it: the read
  // fence keeps out what lies beneath /dev by name, not every device node of the machine.
  const std::filesystem::path node = lab.outside() / "zero";
  REQUIRE(::mknod(node.c_str(), S_IFCHR | 0600, ::makedev(1, 5)) == 0);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const auto reads = [&node] {
    const dsh::UniqueFd fd{::open(node.c_str(), O_RDONLY | O_CLOEXEC)};
    char byte = 'x';
    return fd && ::read(fd.get(), &byte, 1) == 1 && byte == '\0' ? 0 : EACCES;
  };
  not_covered(fence, 0, reads);
  // By its own name beneath /dev the same device is readable too (it is one of the readable
  // devices); another device there is not.
  CHECK(fenced(fence, [] { return ::open("/dev/zero", O_RDONLY | O_CLOEXEC) >= 0 ? 0 : errno; }) == 0);
  CHECK(fenced(fence, [] { return ::open("/dev/tty", O_RDONLY | O_CLOEXEC) >= 0 ? 0 : errno; }) == EACCES);
}
