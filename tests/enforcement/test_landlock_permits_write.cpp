// `ResolvedPolicy::permits_write` (the in-process check of the filesystem family) and the
// Landlock fence (bash and terminals) give the same answer on a table of paths: one policy,
// two enforcement backends, no drift.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// What "writing to `path`" means operationally: an existing directory gets a new entry
/// created (and removed again); anything else is opened for writing, created if missing.
/// Relative paths are taken against `cwd`, as the fenced command's working directory.
/// Returns 0 on success or the errno.
int try_write(const std::filesystem::path& cwd, const std::filesystem::path& path) {
  if (::chdir(cwd.c_str()) != 0) {
    return errno;
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    const std::filesystem::path entry = path / "dsh-probe-entry";
    if (::mkdir(entry.c_str(), 0700) != 0) {
      return errno;
    }
    return ::rmdir(entry.c_str()) == 0 ? 0 : errno;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) {
    return errno;
  }
  ::close(fd);
  return 0;
}

struct Row {
  std::string label;
  std::filesystem::path path;
  bool writable; // in workspace-write, for both backends
};

} // namespace

TEST_CASE("permits_write agrees with the Landlock fence on a table of paths") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path& ws = lab.workspace();
  const std::filesystem::path& out = lab.outside();
  std::filesystem::create_directory(ws / "sub");
  dsh::test::write_file(ws / "existing.txt", "x");
  std::filesystem::create_directory_symlink(out, ws / "link-out");
  std::filesystem::create_directory_symlink(ws / "sub", ws / "link-in");
  std::filesystem::create_symlink(out / "dangling-target.txt", ws / "dangling");
  std::filesystem::create_symlink("sub/inner-target.txt", ws / "dangling-in");
  std::filesystem::create_directory_symlink(ws, out / "link-to-ws");

  const std::vector<Row> rows{
      {"the root itself", ws, true},
      {"the root with a trailing separator", ws.string() + "/", true},
      {"a new file in the root", ws / "new.txt", true},
      {"an existing file", ws / "existing.txt", true},
      {"a new file in a subdirectory", ws / "sub/new.txt", true},
      {"a subdirectory", ws / "sub", true},
      {"`.` and `..` that stay inside", ws / "./sub/../dot.txt", true},
      {"a symlink inside pointing inside", ws / "link-in/through-in.txt", true},
      {"a dangling symlink pointing inside", ws / "dangling-in", true},
      {"a symlink outside pointing into the root", out / "link-to-ws/via-outside.txt", true},
      {"a relative path (against the root)", "relative.txt", true},
      {"a relative path into a subdirectory", "sub/relative.txt", true},
      {"a symlink inside pointing outside", ws / "link-out/escaped.txt", false},
      {"the outside directory through a symlink", ws / "link-out", false},
      {"`..` after a symlink is physical", ws / "link-out/../ws-parent.txt", false},
      {"a dangling symlink pointing outside", ws / "dangling", false},
      {"`..` out of the root", ws / "../outside/dotdot.txt", false},
      {"a relative `..` out of the root", "../ws2/relative.txt", false},
      {"a sibling sharing the root's prefix", lab.sibling() / "prefix.txt", false},
      {"the sibling itself", lab.sibling(), false},
      {"the root's parent", lab.base(), false},
      {"a scratch directory outside", out / "outside.txt", false},
      {"the filesystem root", "/", false},
  };

  for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
    const dsh::ResolvedPolicy policy = lab.policy(mode);
    const PreparedFence fence = dsh::test::prepare_base(policy);
    for (const Row& row : rows) {
      CAPTURE(dsh::to_string(mode), row.label, row.path.string());
      const bool expected = mode == SandboxMode::workspace_write && row.writable;
      CHECK(policy.permits_write(row.path) == expected);
      const int landlock = fenced(fence, [&] { return try_write(ws, row.path); });
      CHECK(landlock == (expected ? 0 : EACCES));
    }
  }
  CHECK(dsh::test::read_file(ws / "existing.txt") == "x");
  CHECK_FALSE(dsh::test::exists_nofollow(out / "dangling-target.txt"));
  CHECK_FALSE(dsh::test::exists_nofollow(out / "escaped.txt"));
}

TEST_CASE("permits_write is stricter than the fence on the platform temporary areas") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const PreparedFence fence = dsh::test::prepare_base(policy);
  const dsh::test::TempDir scratch = dsh::test::scratch_in_granted_area(fence.report(), lab.workspace());
  const std::filesystem::path in_tmp = scratch / "scratch.txt";
  // The model text says "Some platform temporary areas may also be writable": the bash and
  // terminal fence grants them, the in-process write and edit tools stay inside the root.
  CHECK_FALSE(policy.permits_write(in_tmp));
  CHECK(fenced(fence, [&] { return try_write(lab.workspace(), in_tmp); }) == 0);
}

TEST_CASE("danger-full-access: both backends allow everything") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::danger_full_access);
  const PreparedFence fence = dsh::test::prepare_base(policy);
  for (const std::filesystem::path& path :
       {lab.workspace() / "a.txt", lab.outside() / "b.txt", lab.sibling() / "c.txt", lab.base()}) {
    CAPTURE(path.string());
    CHECK(policy.permits_write(path));
    CHECK(fenced(fence, [&] { return try_write(lab.workspace(), path); }) == 0);
  }
}
