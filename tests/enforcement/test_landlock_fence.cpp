// The Landlock fence: what it reports, and that real processes on real directories can
// write exactly where the model text of each mode says they can.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <climits>
#include <cstdlib>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if __has_include(<linux/landlock.h>)
#include <linux/landlock.h>
#endif

using dsh::FenceOptions;
using dsh::FenceStatus;
using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

constexpr std::uint64_t abi1_rights = 0x1FF2; // write_file (bit 1) and bits 4..12
constexpr std::uint64_t refer = 1ULL << 13;
constexpr std::uint64_t truncate_right = 1ULL << 14;

// The bits match the kernel's own header wherever it defines them.
#if defined(LANDLOCK_ACCESS_FS_WRITE_FILE)
static_assert(dsh::LANDLOCK_WRITE_RIGHTS[0].bit == LANDLOCK_ACCESS_FS_WRITE_FILE);
static_assert(dsh::LANDLOCK_WRITE_RIGHTS[1].bit == LANDLOCK_ACCESS_FS_REMOVE_DIR);
static_assert(dsh::LANDLOCK_WRITE_RIGHTS[9].bit == LANDLOCK_ACCESS_FS_MAKE_SYM);
static_assert(abi1_rights ==
              (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
               LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
               LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
               LANDLOCK_ACCESS_FS_MAKE_SYM));
#endif
#if defined(LANDLOCK_ACCESS_FS_REFER)
static_assert(refer == LANDLOCK_ACCESS_FS_REFER);
#endif
#if defined(LANDLOCK_ACCESS_FS_TRUNCATE)
static_assert(truncate_right == LANDLOCK_ACCESS_FS_TRUNCATE);
#endif

// Reads and execution are never handled, whatever the ABI; device ioctls are, from ABI 5.
constexpr std::uint64_t execute = 1ULL << 0;
constexpr std::uint64_t read_file_right = 1ULL << 2;
constexpr std::uint64_t read_dir = 1ULL << 3;
constexpr std::uint64_t ioctl_dev = 1ULL << 15;
constexpr std::uint64_t resolve_unix = 1ULL << 16;
static_assert((dsh::landlock_write_rights(INT_MAX) & (execute | read_file_right | read_dir)) == 0);
#if defined(LANDLOCK_ACCESS_FS_IOCTL_DEV)
static_assert(ioctl_dev == LANDLOCK_ACCESS_FS_IOCTL_DEV);
#endif
#if defined(LANDLOCK_ACCESS_FS_RESOLVE_UNIX)
static_assert(resolve_unix == LANDLOCK_ACCESS_FS_RESOLVE_UNIX);
#endif
static_assert(resolve_unix == dsh::landlock_resolve_unix);

const std::string all_rights_text = "write_file,remove_dir,remove_file,make_char,make_dir,make_reg,"
                                    "make_sock,make_fifo,make_block,make_sym,refer,truncate,ioctl_dev";

/// Creates `path` with "new" through bash under `fence`; returns bash's exit code.
int bash_creates(const PreparedFence& fence, const Lab& lab, const std::filesystem::path& path) {
  return bash(fence, "printf new > " + path.string(), lab.workspace(), lab.base()).exit_code;
}

} // namespace

TEST_CASE("the handled rights grow with the Landlock ABI and hold only write-class rights") {
  STATIC_REQUIRE(dsh::landlock_write_rights(0) == 0);
  STATIC_REQUIRE(dsh::landlock_write_rights(-1) == 0);
  STATIC_REQUIRE(dsh::landlock_write_rights(1) == abi1_rights);
  STATIC_REQUIRE(dsh::landlock_write_rights(2) == (abi1_rights | refer));
  STATIC_REQUIRE(dsh::landlock_write_rights(3) == (abi1_rights | refer | truncate_right));
  STATIC_REQUIRE(dsh::landlock_write_rights(4) == dsh::landlock_write_rights(3));
  STATIC_REQUIRE(dsh::landlock_write_rights(5) == (dsh::landlock_write_rights(3) | ioctl_dev));
  STATIC_REQUIRE(dsh::landlock_write_rights(8) == dsh::landlock_write_rights(5));
  STATIC_REQUIRE(dsh::landlock_write_rights(9) == (dsh::landlock_write_rights(5) | resolve_unix));
  STATIC_REQUIRE(dsh::landlock_write_rights(INT_MAX) == dsh::landlock_write_rights(9));
  STATIC_REQUIRE(dsh::landlock_file_rights() == ((1ULL << 1) | truncate_right | ioctl_dev | resolve_unix));
  STATIC_REQUIRE(dsh::landlock_device_rights() == ((1ULL << 6) | (1ULL << 11) | ioctl_dev));
  CHECK(dsh::landlock_rights_to_string(dsh::landlock_write_rights(5)) == all_rights_text);
  CHECK(dsh::landlock_rights_to_string(dsh::landlock_write_rights(9)) == all_rights_text + ",resolve_unix");
  CHECK(dsh::landlock_rights_to_string(0).empty());
  CHECK(dsh::landlock_rights_to_string(truncate_right | (1ULL << 40)) == "truncate,bit40");
}

TEST_CASE("the report says what the fence enforces in each mode") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const int abi = dsh::landlock_abi();
  const std::uint64_t handled = dsh::landlock_write_rights(abi);
  const std::uint64_t device_rights = handled & dsh::landlock_file_rights() & ~resolve_unix;
  const std::string head = " (Landlock ABI " + std::to_string(abi) +
                           "); handled: " + dsh::landlock_rights_to_string(handled) +
                           (abi < 9 ? "; not enforceable on this kernel: " +
                                          dsh::landlock_rights_to_string(dsh::landlock_write_rights(INT_MAX) & ~handled)
                                    : std::string()) +
                           (abi >= 6 ? "; scoped: signal,abstract_unix_socket" : "") + "; granted: ";
  const std::string filter = dsh::detail::holds_sys_admin() ? "; syscall filter: on, own IPC namespace"
                                                            : "; syscall filter: on, System V IPC refused";
  const std::string scope_note = abi >= 6 ? std::string()
                                          : "; signals and abstract unix sockets are not scoped: Landlock ABI " +
                                                std::to_string(abi) + " cannot (ABI 6, Linux 6.12, can)";
  const std::string devices = "\"/dev/null\" (" + dsh::landlock_rights_to_string(device_rights) + "); \"/dev/zero\" (" +
                              dsh::landlock_rights_to_string(device_rights) + "); \"/dev/full\" (" +
                              dsh::landlock_rights_to_string(device_rights) + ")";

  SECTION("read-only grants only the null devices") {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
    const dsh::FenceReport& report = fence.report();
    CHECK(report.status == FenceStatus::enforced);
    CHECK(report.mode == SandboxMode::read_only);
    CHECK(report.abi == abi);
    CHECK(report.handled == handled);
    CHECK(report.unenforced == (dsh::landlock_write_rights(INT_MAX) & ~handled));
    REQUIRE(report.grants.size() == 3);
    CHECK(report.grants[0] == dsh::FenceGrant{"/dev/null", device_rights});
    CHECK(report.grants[1] == dsh::FenceGrant{"/dev/zero", device_rights});
    CHECK(report.grants[2] == dsh::FenceGrant{"/dev/full", device_rights});
    CHECK(report.scoped == (abi >= 6 ? dsh::landlock_scope_signal | dsh::landlock_scope_abstract_unix_socket : 0));
    CHECK(report.handled_net == 0);
    CHECK(report.notes.size() == (abi >= 6 ? 0U : 1U));
    CHECK(report.unreadable.front() == "/dev");
    CHECK(report.describe() ==
          "enforced read-only" + head + devices + dsh::test::reads_refused_text() + filter + scope_note);
  }
  // The workspace-write fence of the session "session-1", its private directory made beneath
  // base/private, with $TMPDIR at a directory outside every platform area.
  const std::filesystem::path own_tmp = lab.base() / "own-tmp";
  const std::filesystem::path own = lab.base() / "private" / ("session-" + dsh::detail::name_digest("session-1"));
  const std::uint64_t directory_rights = handled & ~dsh::landlock_device_rights();
  const std::string all_but_devices = " (all handled but make_char,make_block,ioctl_dev)";
  const auto session_fence = [&](bool shared_temporary_areas) {
    std::filesystem::create_directory(own_tmp);
    FenceOptions options;
    options.shared_temporary_areas = shared_temporary_areas;
    options.temporary_root = lab.base() / "private";
    options.session_id = "session-1";
    return dsh::detail::prepare_fence(lab.policy(SandboxMode::workspace_write), options, dsh::detail::probe_landlock(),
                                      own_tmp.c_str());
  };
  SECTION("workspace-write adds the root and the session's private temporary directory, with every handled "
          "right but device nodes and device ioctls") {
    const PreparedFence fence = session_fence(false);
    const dsh::FenceReport& report = fence.report();
    CHECK(report.status == FenceStatus::enforced);
    CHECK(report.handled == handled);
    CHECK(report.temporary_directory == own);
    const std::vector<dsh::FenceGrant> expected{{"/dev/null", device_rights},
                                                {"/dev/zero", device_rights},
                                                {"/dev/full", device_rights},
                                                {lab.workspace(), directory_rights},
                                                {own, directory_rights}};
    CHECK(report.grants == expected);
    CHECK(report.describe() ==
          "enforced workspace-write" + head + devices + "; " + dsh::json_string_literal(lab.workspace().native()) +
              all_but_devices + "; " + dsh::json_string_literal(own.native()) + all_but_devices +
              dsh::test::reads_refused_text() + "; temporary directory: " + dsh::json_string_literal(own.native()) +
              filter + scope_note);
    struct stat info {};
    REQUIRE(::lstat(own.c_str(), &info) == 0);
    CHECK(S_ISDIR(info.st_mode));
    CHECK((info.st_mode & 07777) == 0700);
    CHECK(info.st_uid == ::geteuid());
  }
  SECTION("with shared_temporary_areas, the temporary areas too") {
    const PreparedFence fence = session_fence(true);
    const dsh::FenceReport& report = fence.report();
    CHECK(report.status == FenceStatus::enforced);
    CHECK(report.handled == handled);
    std::vector<dsh::FenceGrant> expected{{"/dev/null", device_rights},
                                          {"/dev/zero", device_rights},
                                          {"/dev/full", device_rights},
                                          {lab.workspace(), directory_rights},
                                          {own, directory_rights}};
    std::string expected_text = "enforced workspace-write" + head + devices + "; " +
                                dsh::json_string_literal(lab.workspace().native()) + all_but_devices + "; " +
                                dsh::json_string_literal(own.native()) + all_but_devices;
    std::string expected_notes = scope_note;
    // An area is granted unless it holds this test's own executable (a build tree under /tmp):
    // the running host executable decides later calls.
    const std::filesystem::path host = dsh::canonical_path("/proc/self/exe");
    for (const char* area : {"/tmp", "/var/tmp", "/dev/shm"}) {
      const std::filesystem::path canonical = dsh::canonical_path(area);
      if (!std::filesystem::is_directory(area)) {
        expected_notes += "; skipped " + dsh::json_string_literal(canonical.native()) + ": No such file or directory";
      } else if (dsh::detail::is_within(host, canonical)) {
        expected_notes += "; skipped " + dsh::json_string_literal(canonical.native()) +
                          ": the command could change the host executable " + dsh::json_string_literal(host.native()) +
                          ", which decides later calls";
      } else {
        expected.push_back({canonical, directory_rights});
        expected_text += "; " + dsh::json_string_literal(canonical.native()) + all_but_devices;
      }
    }
    expected_notes +=
        "; skipped $TMPDIR " + dsh::json_string_literal(own_tmp.native()) + ": not beneath /tmp, /var/tmp or /dev/shm";
    CHECK(report.grants == expected);
    CHECK(report.describe() == expected_text + dsh::test::reads_refused_text() + "; temporary directory: " +
                                   dsh::json_string_literal(own.native()) + filter + expected_notes);
  }
  SECTION("danger-full-access applies nothing") {
    const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::danger_full_access));
    CHECK(fence.report().status == FenceStatus::unrestricted);
    CHECK(fence.report().handled == 0);
    CHECK(fence.report().grants.empty());
    CHECK(fence.report().describe() == "unrestricted danger-full-access (Landlock ABI " + std::to_string(abi) + ")");
    CHECK(fence.apply().ok());
  }
}

TEST_CASE("each mode writes exactly where its model text says") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  struct Row {
    SandboxMode mode;
    std::string text; // the model text for a host that fences one-shot bash commands
    bool workspace;   // expected: a write inside the workspace succeeds
    bool tmp;         // ... inside a platform temporary area
    bool outside;     // ... in a scratch directory that is neither
  };
  const std::vector<Row> rows{
      {SandboxMode::read_only,
       "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode.", false,
       false, false},
      {SandboxMode::workspace_write,
       "Current DSH file policy: workspace-write. One-shot bash commands may modify files under the session "
       "workspace: " +
           dsh::json_string_literal(lab.workspace().native()) + ". Some platform temporary areas may also be writable.",
       true, true, false},
      {SandboxMode::danger_full_access,
       "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict one-shot bash "
       "commands.",
       true, true, true},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(dsh::to_string(row.mode)) {
      const dsh::ResolvedPolicy policy = lab.policy(row.mode);
      REQUIRE(dsh::render_policy_context(policy, dsh::FamilySet{dsh::Family::bash}, dsh::FamilySet{}) == row.text);
      const PreparedFence fence = dsh::test::prepare_base(policy);
      // The temporary area is writable where the report grants it (see test_landlock_redteam_policy
      // for when it does not); read-only never grants it, danger-full-access always allows it.
      if (row.mode == SandboxMode::read_only) {
        CHECK_FALSE(dsh::test::grants_directory_of(fence.report(), lab.tmp_area()));
      }
      const bool tmp_allowed = row.mode == SandboxMode::danger_full_access ||
                               (row.tmp && dsh::test::grants_directory_of(fence.report(), lab.tmp_area()));
      const std::vector<std::pair<std::filesystem::path, bool>> targets{
          {lab.workspace() / "written.txt", row.workspace},
          {lab.tmp_area() / "written.txt", tmp_allowed},
          {lab.outside() / "written.txt", row.outside},
      };
      for (const auto& [target, allowed] : targets) {
        CAPTURE(target.string());
        CHECK(bash_creates(fence, lab, target) == (allowed ? 0 : 1));
        CHECK(read_file(target) == (allowed ? "new" : "<missing>"));
      }
    }
  }
}

TEST_CASE("a denied write is EACCES from Landlock and leaves the file exactly as it was") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path target = lab.outside() / "kept.txt";
  dsh::test::write_file(target, "original");
  ::chmod(target.c_str(), 0666); // file permissions allow the write: any refusal is the fence's
  const auto overwrite = [&target] { return errno_of(::open(target.c_str(), O_WRONLY | O_TRUNC)); };
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  CHECK(fenced(fence, overwrite) == EACCES);
  CHECK(read_file(target) == "original");
  CHECK(dsh::test::unfenced(overwrite) == 0); // the same call unfenced
  CHECK(read_file(target).empty());
}

TEST_CASE("read-only refuses writes inside the workspace, and 2>/dev/null still works") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::test::write_file(lab.workspace() / "notes.txt", "keep");
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const dsh::test::Captured run = bash(fence,
                                       "ls /nonexistent-dsh-path 2>/dev/null; echo \"ls=$?\"\n"
                                       "echo quiet > /dev/null; echo \"null=$?\"\n"
                                       "head -c 3 /dev/zero | wc -c\n"
                                       "echo full > /dev/full 2>/dev/null; echo \"full=$?\"\n"
                                       "cat notes.txt; echo\n"
                                       "echo changed > notes.txt; echo \"overwrite=$?\"\n"
                                       "rm -f notes.txt; echo \"rm=$?\"\n"
                                       "mkdir sub; echo \"mkdir=$?\"\n"
                                       "touch new.txt; echo \"touch=$?\"\n",
                                       lab.workspace(), lab.base());
  CHECK(run.exit_code == 0);
  CHECK(run.out == "ls=2\nnull=0\n3\nfull=1\nkeep\noverwrite=1\nrm=1\nmkdir=1\ntouch=1\n");
  CHECK(run.err == "bash: line 6: notes.txt: Permission denied\n"
                   "rm: cannot remove 'notes.txt': Permission denied\n"
                   "mkdir: cannot create directory 'sub': Permission denied\n"
                   "touch: cannot touch 'new.txt': Permission denied\n");
  CHECK(read_file(lab.workspace() / "notes.txt") == "keep");
  CHECK_FALSE(dsh::test::exists_nofollow(lab.workspace() / "sub"));
  CHECK_FALSE(dsh::test::exists_nofollow(lab.workspace() / "new.txt"));
}

TEST_CASE("reading and executing are never restricted") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::test::write_file(lab.outside() / "data.txt", "outside data");
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const dsh::test::Captured run = bash(fence,
                                       "cat " + (lab.outside() / "data.txt").string() + "; echo; ls " +
                                           lab.outside().string() + "; /bin/true && echo exec-ok",
                                       lab.workspace(), lab.base());
  CHECK(run.exit_code == 0);
  CHECK(run.out == "outside data\ndata.txt\nexec-ok\n");
  CHECK(run.err.empty());
}

TEST_CASE("an approved wider mode widens exactly the call it was approved for") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::PolicyConfig config;
  config.mode = SandboxMode::read_only;
  config.workspace_root = lab.outside(); // the fallback root; the session's cwd wins
  const dsh::PolicyOwner owner(config);
  const dsh::Session session(dsh::SessionHeader{"s-approved", lab.workspace().string(), 0});
  const std::filesystem::path inside = lab.workspace() / "approved.txt";
  const std::filesystem::path outside = lab.outside() / "approved.txt";

  const dsh::ResolvedPolicy approved = owner.resolve(session, SandboxMode::workspace_write);
  REQUIRE(approved.mode == SandboxMode::workspace_write);
  REQUIRE(approved.mode_source == dsh::ModeSource::approved);
  REQUIRE(approved.workspace_root == lab.workspace());
  CHECK(bash_creates(dsh::test::prepare_base(approved), lab, inside) == 0);
  CHECK(bash_creates(dsh::test::prepare_base(approved), lab, outside) == 1);

  const dsh::ResolvedPolicy next = owner.resolve(session);
  REQUIRE(next.mode == SandboxMode::read_only);
  CHECK(bash_creates(dsh::test::prepare_base(next), lab, lab.workspace() / "next.txt") == 1);
  CHECK_FALSE(dsh::test::exists_nofollow(lab.workspace() / "next.txt"));

  const dsh::ResolvedPolicy wide = owner.resolve(session, SandboxMode::danger_full_access);
  CHECK(bash_creates(dsh::test::prepare_base(wide), lab, outside) == 0);
  CHECK(bash_creates(dsh::test::prepare_base(owner.resolve(session)), lab, lab.outside() / "after.txt") == 1);
  CHECK(session.events().empty()); // approving never switches the session
}

TEST_CASE("with shared_temporary_areas, $TMPDIR is granted only when absolute, existing and beneath /tmp, /var/tmp or "
          "/dev/shm") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  FenceOptions shared;
  shared.shared_temporary_areas = true;
  shared.temporary_root = lab.base() / "private"; // one session: the same private directory for every fence
  shared.session_id = "tmpdir";
  const dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  const dsh::detail::LandlockProbe probe = dsh::detail::probe_landlock();
  const PreparedFence without = dsh::detail::prepare_fence(policy, shared, probe, nullptr);
  const auto notes_after = [&without](const PreparedFence& fence) {
    const std::vector<std::string>& notes = fence.report().notes;
    return std::vector<std::string>(notes.begin() + static_cast<std::ptrdiff_t>(without.report().notes.size()),
                                    notes.end());
  };

  SECTION("a directory beneath /tmp is granted, and /tmp no longer is: its entry there decides later calls") {
    const dsh::test::TempDir in_tmp("/tmp");
    const std::filesystem::path own_tmp = dsh::canonical_path(in_tmp.path()) / "tmpdir";
    std::filesystem::create_directory(own_tmp);
    const PreparedFence with_tmpdir = dsh::detail::prepare_fence(policy, shared, probe, own_tmp.c_str());
    CHECK(with_tmpdir.report().grants.back() ==
          dsh::FenceGrant{own_tmp, with_tmpdir.report().handled & ~dsh::landlock_device_rights()});
    CHECK_FALSE(dsh::test::grants_directory_of(with_tmpdir.report(), in_tmp.path()));
    CHECK(bash_creates(with_tmpdir, lab, own_tmp / "t.txt") == 0);
    CHECK(bash(with_tmpdir, "mv " + own_tmp.string() + " " + own_tmp.string() + ".old", lab.workspace(), lab.base())
              .exit_code == 1);
    CHECK(std::filesystem::is_directory(own_tmp));
    CHECK(read_file(own_tmp / "t.txt") == "new");
  }
  SECTION("an outside directory, a missing one, a relative one and the filesystem root are never granted") {
    const std::filesystem::path own_tmp = lab.base() / "own-tmp";
    std::filesystem::create_directory(own_tmp);
    const std::filesystem::path missing = lab.base() / "no-such-tmp";
    const std::vector<std::pair<std::string, std::string>> rows{
        {own_tmp.string(), "not beneath /tmp, /var/tmp or /dev/shm"},
        {missing.string(), "not beneath /tmp, /var/tmp or /dev/shm"},
        {"/", "not beneath /tmp, /var/tmp or /dev/shm"},
        {".", "not an absolute path"},
        {"tmp", "not an absolute path"},
    };
    for (const auto& [value, why] : rows) {
      CAPTURE(value);
      const PreparedFence fence = dsh::detail::prepare_fence(policy, shared, probe, value.c_str());
      CHECK(fence.report().grants == without.report().grants);
      CHECK(notes_after(fence) ==
            std::vector<std::string>{"skipped $TMPDIR " + dsh::json_string_literal(value) + ": " + why});
    }
    const PreparedFence outside = dsh::detail::prepare_fence(policy, shared, probe, own_tmp.c_str());
    CHECK(bash_creates(outside, lab, own_tmp / "u.txt") == 1);
    CHECK(read_file(own_tmp / "u.txt") == "<missing>");
  }
  SECTION("a missing directory beneath /tmp is reported as missing") {
    const dsh::test::TempDir in_tmp("/tmp");
    const std::filesystem::path missing = dsh::canonical_path(in_tmp.path()) / "gone";
    const PreparedFence fence = dsh::detail::prepare_fence(policy, shared, probe, missing.c_str());
    const std::vector<std::string> notes = notes_after(fence);
    REQUIRE_FALSE(notes.empty());
    CHECK(notes.back() ==
          "skipped $TMPDIR " + dsh::json_string_literal(missing.native()) + ": No such file or directory");
  }
}

TEST_CASE("without Landlock the fence fails closed unless running unfenced is allowed") {
  const Lab lab;
  const dsh::ResolvedPolicy read_only = lab.policy(SandboxMode::read_only);
  const dsh::detail::LandlockProbe missing{0, ENOSYS};
  const dsh::detail::LandlockProbe disabled{0, EOPNOTSUPP};

  SECTION("fail closed by default, with the reason and the way out") {
    try {
      (void)dsh::detail::prepare_fence(read_only, {}, missing, nullptr);
      FAIL("prepare_fence did not throw");
    } catch (const dsh::LandlockError& error) {
      CHECK(std::string(error.what()) ==
            "Landlock fence for read-only: this kernel has no Landlock (Linux 5.13 or newer with "
            "CONFIG_SECURITY_LANDLOCK=y is required); refusing to run unfenced (set "
            "FenceOptions::allow_unfenced to run without the fence)");
    }
    try {
      (void)dsh::detail::prepare_fence(lab.policy(SandboxMode::workspace_write), {}, disabled, nullptr);
      FAIL("prepare_fence did not throw");
    } catch (const dsh::LandlockError& error) {
      CHECK(std::string(error.what()) ==
            "Landlock fence for workspace-write: Landlock is built into this kernel but disabled (add "
            "landlock to the lsm= boot parameter); refusing to run unfenced (set FenceOptions::allow_unfenced "
            "to run without the fence)");
    }
  }
  SECTION("allowed: an unfenced fence that says so and applies no Landlock (the system-call filter still holds)") {
    const PreparedFence fence = dsh::detail::prepare_fence(read_only, {.allow_unfenced = true}, missing, nullptr);
    CHECK(fence.report().status == FenceStatus::unfenced);
    CHECK(fence.report().handled == 0);
    CHECK(fence.report().syscall_filter);
    const std::string filter = dsh::detail::holds_sys_admin() ? "; syscall filter: on, own IPC namespace"
                                                              : "; syscall filter: on, System V IPC refused";
    CHECK(fence.report().describe() == "unfenced read-only" + filter +
                                           "; NOT FENCED: this kernel has no Landlock (Linux 5.13 or newer with "
                                           "CONFIG_SECURITY_LANDLOCK=y is required)");
    const std::filesystem::path target = lab.workspace() / "unfenced.txt";
    CHECK(fenced(fence, [&target] { return errno_of(::open(target.c_str(), O_WRONLY | O_CREAT, 0600)); }) == 0);
  }
  SECTION("danger-full-access needs no Landlock") {
    const PreparedFence fence =
        dsh::detail::prepare_fence(lab.policy(SandboxMode::danger_full_access), {}, missing, nullptr);
    CHECK(fence.report().status == FenceStatus::unrestricted);
  }
}

TEST_CASE("a workspace root that cannot be opened is an error, not a narrower fence") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::ResolvedPolicy policy = lab.policy(SandboxMode::workspace_write);
  policy.workspace_root = lab.base() / "gone";
  try {
    (void)dsh::test::prepare_base(policy);
    FAIL("prepare did not throw");
  } catch (const dsh::LandlockError& error) {
    CHECK(std::string(error.what()) == "Landlock fence for workspace-write: cannot open the workspace root " +
                                           dsh::json_string_literal(policy.workspace_root.native()) +
                                           ": No such file or directory");
  }
}

TEST_CASE("FencedCommand refuses to run a command it could not fence") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const PreparedFence taken = std::move(fence);
  const dsh::FencedCommand command({"bash", "-c", "touch " + (lab.outside() / "ran.txt").string() + " 2>/dev/null"});
  try {
    (void)command.spawn(fence); // NOLINT(bugprone-use-after-move): the moved-from fence is the point
    FAIL("spawn did not throw");
  } catch (const dsh::LandlockError& error) {
    CHECK(std::string(error.what()) == "cannot run " + dsh::json_string_literal(command.program()) +
                                           " under the read-only fence: the child could not enter it: "
                                           "landlock_restrict_self (moved-from fence) failed: Bad file descriptor");
  }
  CHECK_FALSE(dsh::test::exists_nofollow(lab.outside() / "ran.txt"));
  CHECK(command.run(taken) == 1); // the real fence runs it, and refuses the write
}

TEST_CASE("FencedCommand resolves the program before fork and reports exec failures") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  CHECK_THROWS_AS(dsh::FencedCommand(std::vector<std::string>{}), dsh::ConfigError);
  const dsh::FencedCommand missing({"dsh-no-such-program-anywhere"});
  CHECK(missing.program() == "dsh-no-such-program-anywhere");
  try {
    (void)missing.spawn(fence);
    FAIL("spawn did not throw");
  } catch (const dsh::SystemError& error) {
    CHECK(error.code() == std::errc::no_such_file_or_directory);
  }
  const dsh::FencedCommand sh({"sh", "-c", "exit 7"});
  CHECK(std::filesystem::path(sh.program()).is_absolute());
  CHECK(sh.run(fence) == 7);
}

TEST_CASE("only descriptors 0, 1 and 2 reach the fenced command") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const std::filesystem::path target = lab.outside() / "leaked.txt";
  const dsh::UniqueFd leaked{::open(target.c_str(), O_WRONLY | O_CREAT, 0600)}; // no O_CLOEXEC
  REQUIRE(leaked);
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const dsh::test::Captured run =
      bash(fence, "echo leak >&" + std::to_string(leaked.get()) + "; echo \"rc=$?\"", lab.workspace(), lab.base());
  CHECK(run.out == "rc=1\n");
  CHECK(run.err == "bash: line 1: " + std::to_string(leaked.get()) + ": Bad file descriptor\n");
  CHECK(read_file(target).empty());
}
