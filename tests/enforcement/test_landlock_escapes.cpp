// Escape attempts out of the workspace-write fence. Each one is run twice in a forked child:
// unfenced (the control: the operation is possible here, so file permissions or the
// filesystem cannot be what refuses it; the tests run as root, who bypasses permissions
// anyway) and fenced, where Landlock must refuse it with the errno pinned below and leave
// every file exactly as it was.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// A lab with one outside file ("secret", content "outside") and one workspace file ("mine").
struct EscapeLab {
  Lab lab;
  std::filesystem::path secret = lab.outside() / "secret.txt";
  std::filesystem::path mine = lab.workspace() / "mine.txt";
  PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));

  EscapeLab() { reset(); }

  /// Restores the files the control run may have changed.
  void reset() const {
    std::error_code ignored;
    for (const auto& dir : {lab.outside(), lab.workspace(), lab.sibling()}) {
      for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
    write_file(secret, "outside");
    write_file(mine, "inside");
  }
};

/// Runs `attempt` unfenced (must succeed), restores the lab, then fenced (must fail with
/// `expected`), and checks that the outside file is untouched.
void refused(const EscapeLab& escape, int expected, const std::function<int()>& attempt) {
  CHECK(unfenced(attempt) == 0);
  escape.reset();
  CHECK(fenced(escape.fence, attempt) == expected);
  CHECK(read_file(escape.secret) == "outside");
}

int create_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd < 0) {
    return errno;
  }
  const bool written = ::write(fd, "escaped", 7) == 7;
  ::close(fd);
  return written ? 0 : EIO;
}

} // namespace

TEST_CASE("escape: a symbolic link inside the workspace pointing outside") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  SECTION("to an outside file") {
    refused(escape, EACCES, [&] {
      const std::filesystem::path link = escape.lab.workspace() / "to-secret";
      ::symlink(escape.secret.c_str(), link.c_str());
      return errno_of(::open(link.c_str(), O_WRONLY | O_APPEND));
    });
  }
  SECTION("to an outside directory") {
    refused(escape, EACCES, [&] {
      const std::filesystem::path link = escape.lab.workspace() / "to-outside";
      ::symlink(escape.lab.outside().c_str(), link.c_str());
      return create_file(link / "planted.txt");
    });
    CHECK_FALSE(exists_nofollow(escape.lab.outside() / "planted.txt"));
  }
  SECTION("dangling, to a file that does not exist yet") {
    refused(escape, EACCES, [&] {
      const std::filesystem::path link = escape.lab.workspace() / "dangling";
      ::symlink((escape.lab.outside() / "created-through-link.txt").c_str(), link.c_str());
      return create_file(link);
    });
    CHECK_FALSE(exists_nofollow(escape.lab.outside() / "created-through-link.txt"));
  }
}

TEST_CASE("escape: ../ out of the workspace") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  SECTION("absolute spelling through the root") {
    refused(escape, EACCES, [&] { return create_file(escape.lab.workspace() / "../outside/dotdot.txt"); });
  }
  SECTION("relative to a working directory inside the workspace") {
    refused(escape, EACCES, [&] {
      if (::chdir(escape.lab.workspace().c_str()) != 0) {
        return errno;
      }
      return create_file("../ws2/relative.txt");
    });
    CHECK_FALSE(exists_nofollow(escape.lab.sibling() / "relative.txt"));
  }
}

TEST_CASE("escape: an absolute path outside, including a sibling sharing the root's prefix") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  refused(escape, EACCES, [&] { return create_file(escape.lab.outside() / "absolute.txt"); });
  refused(escape, EACCES, [&] { return create_file(escape.lab.sibling() / "prefix.txt"); });
  refused(escape, EACCES, [&] { return errno_of(::open(escape.secret.c_str(), O_WRONLY | O_APPEND)); });
}

TEST_CASE("escape: /proc/self/root and /proc/self/fd magic links") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  SECTION("/proc/self/root/...") {
    refused(escape, EACCES, [&] {
      return errno_of(::open(("/proc/self/root" + escape.secret.string()).c_str(), O_WRONLY | O_APPEND));
    });
  }
  SECTION("/proc/self/fd/N of a read-only descriptor opened before the fence") {
    const dsh::UniqueFd reader{::open(escape.secret.c_str(), O_RDONLY)};
    REQUIRE(reader);
    const std::string reopen = "/proc/self/fd/" + std::to_string(reader.get());
    refused(escape, EACCES, [&] { return errno_of(::open(reopen.c_str(), O_WRONLY | O_APPEND)); });
  }
  SECTION("/proc/self/fd/N/... of an outside directory opened before the fence") {
    const dsh::UniqueFd dir{::open(escape.lab.outside().c_str(), O_PATH | O_DIRECTORY)};
    REQUIRE(dir);
    const std::string through = "/proc/self/fd/" + std::to_string(dir.get()) + "/magic.txt";
    refused(escape, EACCES, [&] { return create_file(through); });
    CHECK_FALSE(exists_nofollow(escape.lab.outside() / "magic.txt"));
  }
}

TEST_CASE("escape: a hard link made inside the workspace to an outside file") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  // Landlock's REFER rule: the link would give the outside file a less restricted path.
  refused(escape, EXDEV,
          [&] { return errno_of(::link(escape.secret.c_str(), (escape.lab.workspace() / "hard").c_str())); });
  CHECK_FALSE(exists_nofollow(escape.lab.workspace() / "hard"));
}

TEST_CASE("escape: renaming an outside file into the workspace, or a workspace file out") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  SECTION("in") {
    refused(escape, EACCES,
            [&] { return errno_of(::rename(escape.secret.c_str(), (escape.lab.workspace() / "stolen.txt").c_str())); });
    CHECK_FALSE(exists_nofollow(escape.lab.workspace() / "stolen.txt"));
  }
  SECTION("out, over an outside file") {
    refused(escape, EACCES, [&] { return errno_of(::rename(escape.mine.c_str(), escape.secret.c_str())); });
    CHECK(read_file(escape.mine) == "inside");
  }
  SECTION("exchange with an outside file") {
    refused(escape, EACCES, [&] {
      return errno_of(::renameat2(AT_FDCWD, escape.mine.c_str(), AT_FDCWD, escape.secret.c_str(), RENAME_EXCHANGE));
    });
  }
  SECTION("the workspace itself, away from its place") {
    const std::filesystem::path moved = escape.lab.outside() / "moved-ws";
    refused(escape, EACCES, [&] {
      const int error = errno_of(::rename(escape.lab.workspace().c_str(), moved.c_str()));
      return error != 0 ? error : errno_of(::rename(moved.c_str(), escape.lab.workspace().c_str()));
    });
    CHECK(read_file(escape.mine) == "inside");
    CHECK_FALSE(exists_nofollow(moved));
  }
}

TEST_CASE("escape: truncating an outside file") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  SECTION("truncate(2)") {
    refused(escape, EACCES, [&] { return errno_of(::truncate(escape.secret.c_str(), 0)); });
  }
  SECTION("open with O_TRUNC for writing") {
    refused(escape, EACCES, [&] { return errno_of(::open(escape.secret.c_str(), O_WRONLY | O_TRUNC)); });
  }
  SECTION("open with O_TRUNC for reading only") {
    refused(escape, EACCES, [&] { return errno_of(::open(escape.secret.c_str(), O_RDONLY | O_TRUNC)); });
  }
}

TEST_CASE("escape: creating or removing anything outside") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  const std::filesystem::path outside = escape.lab.outside();
  SECTION("mkfifo") {
    refused(escape, EACCES, [&] { return errno_of(::mkfifo((outside / "fifo").c_str(), 0600)); });
    CHECK_FALSE(exists_nofollow(outside / "fifo"));
  }
  SECTION("mkdir") {
    refused(escape, EACCES, [&] { return errno_of(::mkdir((outside / "dir").c_str(), 0700)); });
    CHECK_FALSE(exists_nofollow(outside / "dir"));
  }
  SECTION("symlink") {
    refused(escape, EACCES, [&] { return errno_of(::symlink("/etc/passwd", (outside / "sym").c_str())); });
    CHECK_FALSE(exists_nofollow(outside / "sym"));
  }
  SECTION("a character device") {
    refused(escape, EACCES,
            [&] { return errno_of(::mknod((outside / "null2").c_str(), S_IFCHR | 0600, ::makedev(1, 3))); });
    CHECK_FALSE(exists_nofollow(outside / "null2"));
  }
  SECTION("a unix socket") {
    refused(escape, EACCES, [&] {
      if (::chdir(outside.c_str()) != 0) { // a short relative name fits sun_path wherever the lab is
        return errno;
      }
      const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::string_view("sock").copy(address.sun_path, 4);
      const int result = errno_of(::bind(sock, reinterpret_cast<const sockaddr*>(&address), sizeof address));
      ::close(sock);
      return result;
    });
    CHECK_FALSE(exists_nofollow(outside / "sock"));
  }
  SECTION("unlink") {
    refused(escape, EACCES, [&] { return errno_of(::unlink(escape.secret.c_str())); });
  }
  SECTION("rmdir") {
    const std::filesystem::path empty = outside / "empty";
    const auto attempt = [&] { return errno_of(::rmdir(empty.c_str())); };
    std::filesystem::create_directory(empty);
    CHECK(unfenced(attempt) == 0);
    std::filesystem::create_directory(empty);
    CHECK(fenced(escape.fence, attempt) == EACCES);
    CHECK(std::filesystem::is_directory(empty));
  }
}

TEST_CASE("escape: bind-mounting an outside directory into the workspace") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  const std::filesystem::path mount_point = escape.lab.workspace() / "mnt";
  std::filesystem::create_directory(mount_point);
  // The child first enters a private mount namespace (so that the control leaves nothing
  // behind), then the fence when one is given, then tries the bind mount.
  const auto attempt = [&](const PreparedFence* fence) {
    return dsh::test::in_child(nullptr, [&] {
      if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return 200; // a precondition, not the attempt
      }
      if (fence != nullptr && !fence->apply().ok()) {
        return 201;
      }
      return errno_of(::mount(escape.lab.outside().c_str(), mount_point.c_str(), nullptr, MS_BIND, nullptr));
    });
  };
  CHECK(attempt(nullptr) == 0);
  CHECK(attempt(&escape.fence) == EPERM); // Landlock forbids any mount change inside a domain
}

TEST_CASE("inside the workspace and the temporary areas everything keeps working") {
  DSH_REQUIRE_LANDLOCK();
  const EscapeLab escape;
  const std::filesystem::path ws = escape.lab.workspace();
  const dsh::test::TempDir scratch = dsh::test::scratch_in_granted_area(escape.fence.report(), ws);
  const std::filesystem::path& tmp = scratch.path();
  const auto works = [&](const std::function<int()>& operation) { CHECK(fenced(escape.fence, operation) == 0); };
  works([&] { return create_file(ws / "a.txt"); });
  works([&] { return errno_of(::mkdir((ws / "d").c_str(), 0700)); });
  works([&] { return errno_of(::mkfifo((ws / "f").c_str(), 0600)); });
  works([&] { return errno_of(::symlink("mine.txt", (ws / "s").c_str())); });
  works([&] { return errno_of(::link(escape.mine.c_str(), (ws / "hard").c_str())); });
  works([&] { return errno_of(::truncate(escape.mine.c_str(), 2)); });
  works([&] { return errno_of(::rename((ws / "a.txt").c_str(), (tmp / "moved.txt").c_str())); });
  works([&] { return errno_of(::rename((tmp / "moved.txt").c_str(), (ws / "back.txt").c_str())); });
  works([&] { return errno_of(::unlink((ws / "back.txt").c_str())); });
  CHECK(read_file(escape.mine) == "in");
  CHECK(read_file(ws / "hard") == "in");
  CHECK_FALSE(exists_nofollow(tmp / "moved.txt"));
}
