// The parts of PreparedFence::prepare made cheaper for issue 19: the filters built once per
// process, the mount re-rooting and the guards' resolution walk on strings, and the session cwd
// spelled as the workspace root judged and guarded once. Each must give exactly what the general
// code gives.
#include "support/landlock.hpp"
#include "support/users.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

using dsh::canonical_path;
using dsh::FenceOptions;
using dsh::PreparedFence;
using dsh::ResolvedPolicy;
using dsh::SandboxMode;
using dsh::detail::Guard;
using dsh::detail::SyscallFilterInstruction;
using namespace dsh::test;

namespace {

using Program = std::vector<SyscallFilterInstruction>;

/// The rule `rebase` keeps, on std::filesystem::path alone: the part of `inner` below `base`
/// joined to `root`, normalized lexically without a trailing separator.
std::string lexical_rebase(const std::filesystem::path& inner, const std::filesystem::path& base,
                           const std::filesystem::path& root) {
  std::filesystem::path result = root;
  const std::filesystem::path relative = inner.lexically_relative(base);
  if (!relative.empty() && relative != ".") {
    result /= relative;
  }
  return dsh::detail::lexically_clean(result);
}

/// True when two programs hold the same instructions, field by field.
bool same_program(const Program& left, const Program& right) {
  if (left.size() != right.size()) {
    return false;
  }
  for (std::size_t i = 0; i < left.size(); ++i) {
    if (left[i].code != right[i].code || left[i].jt != right[i].jt || left[i].jf != right[i].jf ||
        left[i].k != right[i].k) {
      return false;
    }
  }
  return true;
}

/// The entries of every directory `canonical` (absolute, canonical, not "/") resolves through:
/// "/a", "/a/b", ... up to `canonical` itself.
std::vector<std::string> prefixes_of(const std::string& canonical) {
  std::vector<std::string> prefixes;
  for (std::size_t slash = canonical.find('/', 1); slash != std::string::npos; slash = canonical.find('/', slash + 1)) {
    prefixes.push_back(canonical.substr(0, slash));
  }
  prefixes.push_back(canonical);
  return prefixes;
}

std::vector<std::string> natives(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const std::filesystem::path& path : paths) {
    out.push_back(path.native());
  }
  return out;
}

} // namespace

TEST_CASE("rebase re-roots a clean path on strings exactly as the lexical rule does") {
  struct Case {
    const char* inner;
    const char* base;
    const char* root;
    const char* expected;
  };
  const std::array cases{
      Case{"/", "/", "/", "/"},
      Case{"/a/b", "/", "/", "/a/b"},
      Case{"/a/b", "/", "/srv", "/srv/a/b"},
      Case{"/mnt/x", "/mnt/x", "/", "/"},
      Case{"/mnt/x", "/mnt/x", "/data/logs", "/data/logs"},
      Case{"/mnt/x/y/z", "/mnt/x", "/data", "/data/y/z"},
      Case{"/mnt/xy", "/mnt/x", "/data", "/xy"},                     // not beneath: the general code answers
      Case{"/mnt/x/y", "/mnt/x", "/src//deleted", "/src/deleted/y"}, // mountinfo's mark of a removed source
      Case{"/mnt/x/./y", "/mnt/x", "/data", "/data/y"},
  };
  for (const Case& each : cases) {
    CAPTURE(each.inner, each.base, each.root);
    const std::filesystem::path rebased = dsh::detail::rebase(each.inner, each.base, each.root);
    CHECK(rebased.native() == each.expected);
    CHECK(rebased.native() == lexical_rebase(each.inner, each.base, each.root));
  }
}

TEST_CASE("a lexically clean path is absolute with no empty, dot or dot-dot component and no trailing separator") {
  for (const char* clean : {"/", "/a", "/a/b", "/a/.b", "/a/..b", "/a b/c"}) {
    CAPTURE(clean);
    CHECK(dsh::detail::is_lexically_clean(clean));
    CHECK(dsh::detail::lexically_clean(clean) == clean);
  }
  for (const char* unclean : {"", "a", "a/b", "//", "/a/", "/a//b", "/./a", "/a/.", "/a/../b", "/.."}) {
    CAPTURE(unclean);
    CHECK_FALSE(dsh::detail::is_lexically_clean(unclean));
  }
}

TEST_CASE("each syscall filter is built once per process, equal to a fresh build, and shared between threads") {
  for (const bool refuse_sysv_ipc : {false, true}) {
    for (const bool terminal : {false, true}) {
      CAPTURE(refuse_sysv_ipc, terminal);
      const Program& shared = dsh::detail::shared_syscall_filter(refuse_sysv_ipc, terminal);
      CHECK(same_program(shared, dsh::detail::build_syscall_filter(refuse_sysv_ipc, terminal)));
      CHECK(&dsh::detail::shared_syscall_filter(refuse_sysv_ipc, terminal) == &shared);
    }
  }
  // The four programs differ from one another (no two arguments share one).
  CHECK_FALSE(
      same_program(dsh::detail::shared_syscall_filter(false, false), dsh::detail::shared_syscall_filter(true, false)));
  CHECK_FALSE(
      same_program(dsh::detail::shared_syscall_filter(false, false), dsh::detail::shared_syscall_filter(false, true)));
  CHECK_FALSE(
      same_program(dsh::detail::shared_syscall_filter(true, true), dsh::detail::shared_syscall_filter(true, false)));

  // Threads asking at once get the one program each (the ThreadSanitizer build checks the rest).
  std::array<const Program*, 4> seen{};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &dsh::detail::shared_syscall_filter(i % 2 == 0, true); });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i] == &dsh::detail::shared_syscall_filter(i % 2 == 0, true));
  }
}

/// The entries `append_resolution_entries` reads for `path` with `links` links allowed, as
/// native strings, and the links left.
std::pair<std::vector<std::string>, int> resolution(const std::string& path, int links) {
  std::vector<std::filesystem::path> entries;
  dsh::detail::append_resolution_entries(path, entries, links);
  return {natives(entries), links};
}

/// The prefixes of `base`, then `base` joined with each of `entries`.
std::vector<std::string> beneath(const std::string& base, std::initializer_list<const char*> entries) {
  std::vector<std::string> expected = prefixes_of(base);
  for (const char* entry : entries) {
    expected.push_back(base + entry);
  }
  return expected;
}

TEST_CASE("the guards' resolution walk lists every entry read, through links and dot-dot, once each") {
  const TempDir scratch;
  const std::string base = canonical_path(scratch.path()).native();
  std::filesystem::create_directories(base + "/real/dir");
  std::filesystem::create_directory_symlink("real", base + "/link");

  SECTION("a relative link on the way, then a missing last component") {
    const auto [entries, links] = resolution(base + "/link/dir/file", 40);
    CHECK(entries == beneath(base, {"/link", "/real", "/real/dir", "/real/dir/file"}));
    CHECK(links == 39);
  }
  SECTION("dot-dot reads no entry, and the directory after it is the canonical parent") {
    const auto [entries, links] = resolution(base + "/real/dir/../x", 40);
    CHECK(entries == beneath(base, {"/real", "/real/dir", "/real/x"}));
    CHECK(links == 40);
  }
  SECTION("an absolute link, and empty and dot components") {
    std::filesystem::create_directory_symlink(base + "/real", base + "/absolute");
    const auto [entries, links] = resolution(base + "//absolute/./dir/", 40);
    CHECK(entries == beneath(base, {"/absolute", "/real", "/real/dir"}));
    CHECK(links == 39);
  }
  SECTION("no links left: the link is listed, not followed") {
    const auto [entries, links] = resolution(base + "/link/dir", 0);
    CHECK(entries == beneath(base, {"/link", "/real/dir"}));
    CHECK(links == 0);
  }
}

TEST_CASE("a session cwd spelled as the workspace root gets the root's guard under its own name") {
  const Lab lab;
  const ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const std::vector<dsh::detail::MountEntry> mounts = dsh::detail::read_mount_table();
  const dsh::detail::HostEnvironment environment{};
  FenceOptions same;
  same.session_cwd = policy.workspace_root;
  FenceOptions other;
  other.session_cwd = policy.workspace_root / "sub";
  std::filesystem::create_directory(other.session_cwd);

  const std::vector<Guard> shared = dsh::detail::workspace_guards(policy, same, environment, mounts);
  const std::vector<Guard> apart = dsh::detail::workspace_guards(policy, other, environment, mounts);
  REQUIRE(shared.size() == 4); // the host executable, the fence launcher, the root, the cwd
  REQUIRE(apart.size() == 4);
  CHECK(shared[1].what == "the fence launcher " + dsh::json_string_literal(DSH_SANDBOX_POLICY_LAUNCHER));
  const Guard& root = shared[2];
  const Guard& cwd = shared[3];
  CHECK(root.what == "the workspace root " + dsh::json_string_literal(policy.workspace_root.native()));
  CHECK(cwd.what == "the session cwd " + dsh::json_string_literal(policy.workspace_root.native()));
  CHECK(cwd.canonical == root.canonical);
  CHECK(cwd.entries == root.entries);
  CHECK(cwd.content == root.content);
  // ... and equal to the guard made for it on its own
  const Guard made = dsh::detail::make_guard("x", policy.workspace_root, false, mounts);
  CHECK(cwd.entries == made.entries);
  CHECK(cwd.location.has_value() == made.location.has_value());
  CHECK(cwd.entry_directories.size() == made.entry_directories.size());
  // A different spelling is walked for itself.
  CHECK(apart[3].canonical == canonical_path(other.session_cwd));
  CHECK(apart[3].entries.back() == canonical_path(other.session_cwd));
}

TEST_CASE("a session cwd spelled as the workspace root, beneath a shared directory, is refused as the root") {
  const Lab lab;
  const ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  // Its parent group- and other-writable without the sticky bit: another user could swap it.
  const std::filesystem::path parent = lab.base();
  const auto restore = std::filesystem::status(parent).permissions();
  std::filesystem::permissions(parent, std::filesystem::perms::all);
  struct stat info {};
  REQUIRE(::stat(parent.c_str(), &info) == 0);
  FenceOptions options;
  options.session_cwd = policy.workspace_root;
  options.temporary_root = lab.outside() / "private";
  const std::string expected = "Landlock fence for workspace-write: refusing the workspace root " +
                               dsh::json_string_literal(policy.workspace_root.native()) + ": the directory " +
                               dsh::json_string_literal(parent.native()) + " (mode 0777, owner uid " +
                               std::to_string(info.st_uid) + ", group gid " + std::to_string(info.st_gid) +
                               ") is writable by another user and has no sticky bit (set "
                               "FenceOptions::allow_shared_directories to trust it)";
  CHECK_THROWS_WITH(dsh::PreparedFence::prepare(policy, options), expected);
  std::filesystem::permissions(parent, restore);
}

TEST_CASE("the mount table is read on every call; an unchanged text reuses its parse, a changed one is parsed") {
  const std::shared_ptr<const std::vector<dsh::detail::MountEntry>> first = dsh::detail::current_mount_table();
  const std::shared_ptr<const std::vector<dsh::detail::MountEntry>> again = dsh::detail::current_mount_table();
  const std::vector<dsh::detail::MountEntry> fresh = dsh::detail::read_mount_table();
  REQUIRE(first != nullptr);
  CHECK(again == first);
  REQUIRE(first->size() == fresh.size());
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    CHECK((*first)[i].device == fresh[i].device);
    CHECK((*first)[i].root == fresh[i].root);
    CHECK((*first)[i].point == fresh[i].point);
  }
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the mount changes are made in a private mount namespace of a root child");
  }
  // In a child with a mount namespace of its own: a bind mount shows at once, and so does a
  // rename of the directory above it (of which the kernel's poll notice says nothing).
  const TempDir scratch;
  const std::string base = canonical_path(scratch.path()).native();
  std::filesystem::create_directories(base + "/source");
  std::filesystem::create_directories(base + "/above/point");
  const auto points = [](const std::vector<dsh::detail::MountEntry>& table) {
    std::string listed;
    for (const dsh::detail::MountEntry& mount : table) {
      listed += mount.point.native() + "\n";
    }
    return listed;
  };
  const int status = dsh::test::unfenced([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return 10;
    }
    const auto before = dsh::detail::current_mount_table();
    if (points(*before).find(base) != std::string::npos) {
      return 11;
    }
    if (::mount((base + "/source").c_str(), (base + "/above/point").c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return 12;
    }
    const auto mounted = dsh::detail::current_mount_table();
    if (mounted == before || points(*mounted).find(base + "/above/point\n") == std::string::npos) {
      return 13;
    }
    if (::rename((base + "/above").c_str(), (base + "/moved").c_str()) != 0) {
      return 14;
    }
    const auto renamed = dsh::detail::current_mount_table();
    if (renamed == mounted || points(*renamed).find(base + "/moved/point\n") == std::string::npos ||
        points(*renamed).find(base + "/above/point\n") != std::string::npos) {
      return 15;
    }
    return dsh::detail::current_mount_table() == renamed ? 0 : 16;
  });
  CHECK(status == 0);
}

TEST_CASE("the mount table gives each mount's type; the device trees are /dev and each device mount outside it") {
  const std::string text = "24 1 0:6 / /dev rw - devtmpfs devtmpfs rw\n"
                           "26 24 0:24 / /dev/pts rw - devpts devpts rw\n"
                           "40 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
                           "41 40 0:24 / /srv/chroot/dev/pts rw master:3 - devpts devpts rw\n"
                           "42 40 0:6 / /srv/chroot/dev rw - devtmpfs devtmpfs rw\n"
                           "43 40 0:6 / /mnt/dev\\040x rw - devtmpfs devtmpfs rw\n"
                           "44 40 0:30 / /mnt/proc rw - proc proc rw\n"
                           "45 40 0:24 /3 /devices rw - devpts devpts rw\n"
                           "46 40 0:31 / /no-type rw\n"
                           "not a mount line\n";
  const std::vector<dsh::detail::MountEntry> mounts = dsh::detail::parse_mount_table(text);
  std::vector<std::string> types;
  types.reserve(mounts.size());
  for (const dsh::detail::MountEntry& mount : mounts) {
    types.push_back(mount.point.native() + " " + mount.type);
  }
  CHECK(types == std::vector<std::string>{"/dev devtmpfs", "/dev/pts devpts", "/ ext4", "/srv/chroot/dev/pts devpts",
                                          "/srv/chroot/dev devtmpfs", "/mnt/dev x devtmpfs", "/mnt/proc proc",
                                          "/devices devpts", "/no-type "});
  // /srv/chroot/dev covers the pts mount listed before it; /devices is not beneath /dev.
  CHECK(natives(dsh::detail::device_trees(mounts)) ==
        std::vector<std::string>{"/dev", "/srv/chroot/dev", "/mnt/dev x", "/devices"});
  CHECK(natives(dsh::detail::device_trees({})) == std::vector<std::string>{"/dev"});
}

TEST_CASE("a bind of the host's terminals outside /dev: the base fence refuses to run, the layer hides it") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the bind is made in a private mount namespace of a root child");
  }
  const Lab lab;
  // Beside the workspace, outside the temporary areas the layer replaces.
  const std::string base = canonical_path(lab.outside()).native();
  std::filesystem::create_directories(base + "/beside/pts");
  write_file(base + "/kept.txt", "kept\n");
  std::array<char, 64> name{};
  const dsh::UniqueFd master{::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)};
  REQUIRE(master);
  REQUIRE(::grantpt(master.get()) == 0);
  REQUIRE(::unlockpt(master.get()) == 0);
  REQUIRE(::ptsname_r(master.get(), name.data(), name.size()) == 0);
  const std::string number = std::filesystem::path(name.data()).filename().native();
  const std::string through_bind = base + "/beside/pts/" + number;
  // In a child with a mount namespace of its own: /dev/pts bound beside the workspace, then
  // each fence prepared there (it reads that mount table) and entered by a grandchild.
  const int status = dsh::test::unfenced([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("/dev/pts", (base + "/beside/pts").c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return 10;
    }
    const auto opens = [](const std::string& path) { return dsh::test::open_error(path); };
    if (opens(through_bind) != 0) {
      return 11; // the control: without the fence the bind reaches the terminal
    }
    // Without the layer nothing runs: a command could rename a directory above the mount into a
    // place where reading is granted.
    for (const SandboxMode mode : {SandboxMode::read_only, SandboxMode::workspace_write}) {
      try {
        (void)dsh::test::prepare_base(lab.policy(mode));
        return 12;
      } catch (const dsh::LandlockError& error) {
        if (std::string(error.what()) !=
            "Landlock fence for " + std::string(dsh::to_string(mode)) + ": the device filesystem mounted at " +
                dsh::json_string_literal(base + "/beside/pts") +
                " reaches the host's terminals and devices outside /dev; without the namespace layer (whose "
                "empty views hide it) a command could read them, so nothing runs (unmount it, or let the layer "
                "apply: FenceOptions::isolation)") {
          std::fprintf(stderr, "%s\n", error.what());
          return 13;
        }
      }
    }
    // With the layer the bind is an empty view, and nothing else is read-fenced. (A command's
    // working directory must be in its view: not the test's, which may lie beneath /tmp.)
    if (::chdir(lab.workspace().c_str()) != 0) {
      return 14;
    }
    FenceOptions options;
    options.isolation = dsh::Isolation::required;
    const PreparedFence layered = PreparedFence::prepare(lab.policy(SandboxMode::read_only), options);
    if (!layered.report().unreadable.empty()) {
      return 15;
    }
    const int hidden = dsh::test::fenced(layered, [&] { return opens(through_bind); });
    const int by_name = dsh::test::fenced(layered, [&] { return opens(name.data()); });
    const int layered_kept = dsh::test::fenced(layered, [&] { return opens(base + "/kept.txt"); });
    const int layered_proc = dsh::test::fenced(layered, [&] { return opens("/proc/self/status"); });
    return hidden == ENOENT && by_name == ENOENT && layered_kept == 0 && layered_proc == 0
               ? 0
               : 100 + (hidden == ENOENT ? 0 : 1) + (layered_kept == 0 ? 0 : 2) + (layered_proc == 0 ? 0 : 4) +
                     (by_name == ENOENT ? 0 : 8);
  });
  CHECK(status == 0);
}

TEST_CASE("a hidden path's identity is taken only while it names what the plan says: a device tree's mount root") {
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the bind is made in a private mount namespace of a root child");
  }
  const Lab lab;
  const std::string base = canonical_path(lab.outside()).native();
  std::filesystem::create_directories(base + "/chroot/pts");
  std::filesystem::create_directories(base + "/decoy/pts");
  write_file(base + "/file", "file\n");
  struct stat terminals {};
  REQUIRE(::stat("/dev/pts", &terminals) == 0);
  const std::string device = std::to_string(major(terminals.st_dev)) + ":" + std::to_string(minor(terminals.st_dev));
  const int status = dsh::test::unfenced([&] {
    if (!enter_private_mount_namespace() ||
        ::mount("/dev/pts", (base + "/chroot/pts").c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return 10;
    }
    using dsh::detail::hidden_identity;
    const std::optional<dsh::detail::FileIdentity> tree = hidden_identity(base + "/chroot/pts", true, device);
    struct stat plain {};
    const bool plain_seen = ::stat((base + "/decoy/pts").c_str(), &plain) == 0;
    const std::optional<dsh::detail::FileIdentity> unmounted = hidden_identity(base + "/decoy/pts", true, "");
    int wrong = 0;
    // The mount's root, on the filesystem the table names: its own device and inode.
    wrong |= tree && tree->device == static_cast<std::uint64_t>(terminals.st_dev) &&
                     tree->inode == static_cast<std::uint64_t>(terminals.st_ino)
                 ? 0
                 : 1;
    // Another directory at the tree's name (a rename put it there), or the tree's name on another
    // filesystem, or a directory that is no mount's root: nothing.
    wrong |= hidden_identity(base + "/decoy/pts", true, device) ? 2 : 0;
    wrong |= hidden_identity(base + "/chroot/pts", true, "0:1") ? 4 : 0;
    wrong |= hidden_identity(base + "/chroot", true,
                             std::to_string(major(plain.st_dev)) + ":" + std::to_string(minor(plain.st_dev)))
                 ? 8
                 : 0;
    // Without a mount to be: the directory itself; the wrong kind, or nothing there: nothing.
    wrong |= plain_seen && unmounted && unmounted->inode == static_cast<std::uint64_t>(plain.st_ino) ? 0 : 16;
    wrong |= hidden_identity(base + "/file", true, "") ? 32 : 0;
    wrong |= hidden_identity(base + "/chroot/pts", false, device) ? 64 : 0;
    wrong |= hidden_identity(base + "/missing", true, "") ? 128 : 0;
    return wrong;
  });
  CHECK(status == 0);
}

TEST_CASE("a device tree the table shows where it no longer is makes the layer's plan refuse, never skip it") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::string base = canonical_path(lab.outside()).native();
  std::filesystem::create_directories(base + "/decoy/pts");
  FenceOptions options;
  options.isolation = dsh::Isolation::required;
  options.session_cwd = lab.workspace();
  const ResolvedPolicy policy = lab.policy(SandboxMode::read_only);
  // The table as read a moment before a command renamed the tree's parent away (nothing is at
  // that path now), or put a plain directory in its place.
  for (const auto& [where, expected] :
       {std::pair{base + "/gone/pts", "is no longer found there (moved while the fence was prepared)"},
        std::pair{base + "/decoy/pts", "changed while the fence was prepared"}}) {
    CAPTURE(where);
    const std::string text = "24 1 0:6 / /dev rw - devtmpfs devtmpfs rw\n"
                             "40 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
                             "41 40 0:24 / " +
                             where + " rw - devpts devpts rw\n";
    const auto mounts =
        std::make_shared<const std::vector<dsh::detail::MountEntry>>(dsh::detail::parse_mount_table(text));
    dsh::FenceReport report;
    report.status = dsh::FenceStatus::enforced;
    try {
      (void)dsh::detail::plan_namespace_layer(policy, options, dsh::detail::HostEnvironment::current(), {}, report,
                                              mounts);
      FAIL("the plan hid another directory, or none, and went on");
    } catch (const dsh::LandlockError& error) {
      CHECK_THAT(error.what(), Catch::Matchers::Contains(expected));
    }
  }
}

TEST_CASE("a thread with a mount namespace of its own: its device mounts are the ones judged") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the bind is made in a mount namespace of a thread");
  }
  const Lab lab;
  const std::string point = canonical_path(lab.outside()).native() + "/thread-pts";
  std::filesystem::create_directories(point);
  // /proc/self shows the main thread's mounts; the thread's commands live in the thread's.
  std::string seen;
  std::thread([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("/dev/pts", point.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      seen = "cannot make the thread's mount";
      return;
    }
    try {
      (void)dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
      seen = "prepared";
    } catch (const dsh::LandlockError& error) {
      seen = error.what();
    }
  }).join();
  CHECK(seen == "Landlock fence for workspace-write: the device filesystem mounted at " +
                    dsh::json_string_literal(point) +
                    " reaches the host's terminals and devices outside /dev; without the namespace layer (whose "
                    "empty views hide it) a command could read them, so nothing runs (unmount it, or let the layer "
                    "apply: FenceOptions::isolation)");
}

TEST_CASE("a device mount beneath a directory granted in /dev: the base fence refuses to run") {
  DSH_REQUIRE_LANDLOCK();
  if (::geteuid() != 0) {
    DSH_TEST_SKIP("needs root: the bind is made in a private mount namespace of a root child");
  }
  if (!std::filesystem::is_directory("/dev/shm")) {
    DSH_TEST_SKIP("this machine has no /dev/shm");
  }
  const Lab lab;
  const TempDir inside("/dev/shm");
  const std::string point = inside.path().native();
  const int status = dsh::test::unfenced([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("/dev/pts", point.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return 10;
    }
    FenceOptions options;
    options.shared_temporary_areas = true;
    options.temporary_root = lab.outside() / "private";
    try {
      const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write), options);
      return fence.report().describe().find("\"/dev/shm\" (all handled") == std::string::npos ? 11 : 12;
    } catch (const dsh::LandlockError& error) {
      return std::string(error.what()) ==
                     "Landlock fence for workspace-write: the device filesystem mounted at " +
                         dsh::json_string_literal(point) +
                         " lies beneath the granted directory \"/dev/shm\", where the command may read; nothing runs "
                         "(unmount it)"
                 ? 0
                 : 13;
    }
  });
  // 11: /dev/shm was not granted here (it holds what decides a later call), so nothing to test.
  if (status == 11) {
    DSH_TEST_SKIP("/dev/shm is not granted on this machine");
  }
  CHECK(status == 0);
}
