// open_beneath / open_for_write: the race-free open for in-process write tools. The kernel
// (openat2 with RESOLVE_BENEATH) refuses every resolution that leaves the root at the moment
// of the open, so a symlink swapped in after `permits_write` said yes cannot redirect it.
#include "support/landlock.hpp"

#include <dsh/open_beneath.hpp>
#include <dsh/sandbox_policy.hpp>

#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

using dsh::open_beneath;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// The errno `open_beneath(root, path, O_WRONLY | O_CREAT)` fails with, or 0 when it opens.
int beneath_errno(const std::filesystem::path& root, const std::filesystem::path& path) {
  try {
    (void)open_beneath(root, path, O_WRONLY | O_CREAT);
    return 0;
  } catch (const dsh::WriteError& error) {
    return error.code().value();
  }
}

void write_through(const dsh::UniqueFd& fd, const std::string& text) {
  REQUIRE(fd);
  REQUIRE(::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

} // namespace

TEST_CASE("open_beneath opens paths that stay beneath the root") {
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  std::filesystem::create_directory(ws / "sub");
  std::filesystem::create_directory_symlink("sub", ws / "rel-link");
  write_through(open_beneath(ws, "a.txt", O_WRONLY | O_CREAT), "relative");
  write_through(open_beneath(ws, ws / "sub/b.txt", O_WRONLY | O_CREAT), "absolute");
  write_through(open_beneath(ws, "sub/../c.txt", O_WRONLY | O_CREAT), "dotdot inside");
  write_through(open_beneath(ws, "rel-link/d.txt", O_WRONLY | O_CREAT), "relative symlink inside");
  CHECK(read_file(ws / "a.txt") == "relative");
  CHECK(read_file(ws / "sub/b.txt") == "absolute");
  CHECK(read_file(ws / "c.txt") == "dotdot inside");
  CHECK(read_file(ws / "sub/d.txt") == "relative symlink inside");
  write_through(open_beneath(ws, "a.txt", O_WRONLY | O_TRUNC), "again");
  CHECK(read_file(ws / "a.txt") == "again");
}

TEST_CASE("open_beneath refuses every way out with EXDEV and creates nothing") {
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  const std::filesystem::path& out = lab.outside();
  std::filesystem::create_directory(ws / "sub");
  std::filesystem::create_directory_symlink(out, ws / "link-out");
  std::filesystem::create_symlink(out / "dangling-target.txt", ws / "dangling");
  std::filesystem::create_symlink(ws / "sub", ws / "absolute-link-in");
  std::filesystem::create_symlink("/proc/self/root" + out.string(), ws / "proc-link");
  std::filesystem::create_symlink("../outside", ws / "sub-rel-out");

  CHECK(beneath_errno(ws, "link-out/x.txt") == EXDEV);
  CHECK(beneath_errno(ws, "dangling") == EXDEV);
  CHECK(beneath_errno(ws, "../outside/x.txt") == EXDEV);
  CHECK(beneath_errno(ws, out / "x.txt") == EXDEV);
  CHECK(beneath_errno(ws, lab.sibling() / "x.txt") == EXDEV);
  CHECK(beneath_errno(ws, "proc-link/x.txt") == EXDEV);
  CHECK(beneath_errno(ws, "sub-rel-out/x.txt") == EXDEV);
  CHECK(beneath_errno(ws, "/proc/self/root" + out.string() + "/x.txt") == EXDEV);
  // Absolute symlinks are refused even when they point inside: the kernel cannot tell, so
  // the open fails closed.
  CHECK(beneath_errno(ws, "absolute-link-in/x.txt") == EXDEV);
  // An absolute path must be spelled under the root; `..` is not normalized away.
  CHECK(beneath_errno(ws, ws / "../ws/x.txt") == EXDEV);
  CHECK(std::filesystem::is_empty(out));
  CHECK_FALSE(exists_nofollow(ws / "x.txt"));
}

TEST_CASE("open_beneath names the path and the root in its errors") {
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  std::filesystem::create_directory_symlink(lab.outside(), ws / "link-out");
  try {
    (void)open_beneath(ws, "link-out/x.txt", O_WRONLY | O_CREAT);
    FAIL("open_beneath did not throw");
  } catch (const dsh::WriteError& error) {
    CHECK(error.code() == std::errc::cross_device_link);
    CHECK(std::string(error.what()) == "open_beneath(\"link-out/x.txt\" beneath " +
                                           dsh::json_string_literal(ws.native()) +
                                           "): the path resolves outside the root: Invalid cross-device link");
  }
  const std::filesystem::path link_root = lab.outside() / "link-to-ws";
  std::filesystem::create_directory_symlink(ws, link_root);
  try {
    (void)open_beneath(link_root, "x.txt", O_WRONLY | O_CREAT);
    FAIL("open_beneath did not throw");
  } catch (const dsh::WriteError& error) {
    CHECK(error.code().value() == ELOOP);
    CHECK(std::string(error.what()) == "open_beneath(\"x.txt\" beneath " +
                                           dsh::json_string_literal(link_root.native()) +
                                           "): cannot open the root (it must be canonical: no symbolic links): "
                                           "Too many levels of symbolic links");
  }
  CHECK(beneath_errno(ws, "") == EINVAL);
  CHECK(beneath_errno("relative/root", "x.txt") == EINVAL);
  CHECK(beneath_errno(ws, "missing-dir/x.txt") == ENOENT);
}

TEST_CASE("open_beneath closes the window a path check leaves open") {
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  std::filesystem::create_directory(ws / "dir");
  const std::filesystem::path target = ws / "dir/report.txt";
  REQUIRE(policy.permits_write(target)); // checked while dir is a real directory ...

  std::filesystem::remove(ws / "dir"); // ... then swapped for a symlink to the outside
  std::filesystem::create_directory_symlink(lab.outside(), ws / "dir");

  CHECK(beneath_errno(ws, target) == EXDEV);
  CHECK_FALSE(exists_nofollow(lab.outside() / "report.txt"));
  // What a plain open after the check would have done:
  const dsh::UniqueFd plain{::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)};
  CHECK(plain);
  CHECK(exists_nofollow(lab.outside() / "report.txt"));
}

TEST_CASE("open_for_write follows the policy's mode") {
  const Lab lab;
  SECTION("read-only refuses without touching the filesystem") {
    try {
      (void)dsh::open_for_write(lab.policy(SandboxMode::read_only), "new.txt");
      FAIL("open_for_write did not throw");
    } catch (const dsh::WriteError& error) {
      CHECK(error.code() == std::errc::permission_denied);
      CHECK(std::string(error.what()) ==
            "open_for_write(\"new.txt\"): the read-only policy refuses every write: Permission denied");
    }
    CHECK_FALSE(exists_nofollow(lab.workspace() / "new.txt"));
  }
  SECTION("workspace-write opens beneath the root, relative paths against it") {
    const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
    write_through(dsh::open_for_write(policy, "new.txt"), "inside");
    CHECK(read_file(lab.workspace() / "new.txt") == "inside");
    std::filesystem::create_directory_symlink(lab.outside(), lab.workspace() / "out");
    CHECK_THROWS_AS(dsh::open_for_write(policy, "out/x.txt"), dsh::WriteError);
    CHECK_FALSE(exists_nofollow(lab.outside() / "x.txt"));
  }
  SECTION("danger-full-access opens anywhere") {
    const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::danger_full_access);
    write_through(dsh::open_for_write(policy, lab.outside() / "anywhere.txt"), "outside");
    write_through(dsh::open_for_write(policy, "rel.txt"), "root-relative");
    CHECK(read_file(lab.outside() / "anywhere.txt") == "outside");
    CHECK(read_file(lab.workspace() / "rel.txt") == "root-relative");
  }
}
