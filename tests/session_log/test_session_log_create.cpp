// SessionLog::create writes through a descriptor it owns to the end: the file is made unnamed
// (O_TMPFILE), written and synced, then linked to its name from that descriptor, so another user
// who may rename entries in the directory has no name to rename a forged log over before the
// link. Also the paths a kernel or filesystem without those features takes, provoked for real
// with a seccomp filter (the kernel answers the call with the error such a kernel gives) and a
// private mount namespace without /proc: the linkat through /proc/self/fd, and the staging-name
// fallback, which is used only where no other user can rename the staging name.
#include "support/seccomp.hpp"
#include "support/session_log.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

using dsh::SandboxMode;
using dsh::SessionLog;
using dsh::SessionLogOptions;
using namespace dsh::test;

namespace {

/// The names in `directory`, sorted.
std::set<std::string> entries(const std::filesystem::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.insert(entry.path().filename().native());
  }
  return names;
}

/// In a child: makes the kernel fail every system call `number` whose argument `argument` has a
/// bit of `mask` set with `error` (as a kernel or filesystem without that feature fails it), for
/// the rest of the process's life. Returns false if the filter cannot be installed.
bool fail_calls(std::uint32_t number, std::uint32_t argument, std::uint32_t mask, int error) {
  constexpr std::uint32_t arch = dsh::test::native_audit_arch;
  if (arch == 0) {
    return false;
  }
  // The argument's low 32 bits: the flags of openat and linkat fit in them.
  constexpr std::uint32_t high_first = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 4 : 0;
  const auto low_word =
      static_cast<std::uint32_t>(offsetof(seccomp_data, args) + argument * sizeof(std::uint64_t)) + high_first;
  std::array<sock_filter, 9> filter{{
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, number, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, low_word),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  }};
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

/// In a child: the filesystem cannot make unnamed files (openat with O_TMPFILE fails with `error`).
bool without_tmpfile(int error) {
  return fail_calls(SYS_openat, 2, static_cast<std::uint32_t>(O_TMPFILE & ~O_DIRECTORY), error);
}

/// In a child: the kernel refuses linkat with AT_EMPTY_PATH, as it does to a process without
/// CAP_DAC_READ_SEARCH on kernels before 6.10.
bool without_empty_path_link() { return fail_calls(SYS_linkat, 4, AT_EMPTY_PATH, ENOENT); }

/// Runs `body` in a child and returns what it reports, checking that it exited with 0.
std::string in_child(const std::function<int(int)>& body) {
  Child child(body);
  std::string report = child.read_all();
  CHECK(child.exit_code() == 0);
  return report;
}

/// In a child: creates the log at `path` and reports "created" with its bytes at the name, or
/// the LogError's message.
int create_and_report(int report, const std::filesystem::path& path, const SessionLogOptions& options) {
  try {
    auto log = SessionLog::create(path, {"mine", {}, 2}, options);
    write_all(report, "created " + read_file(path));
  } catch (const dsh::LogError& error) {
    write_all(report, error.what());
  }
  return 0;
}

// The attacker the hook before the link plays: another user (nobody) who renames the file
// `attack_forged` over every other entry of `attack_dir`, or, when `attack_plant` is set, to the
// log's name. What they did goes to `attack_report`.
std::filesystem::path attack_dir;    // NOLINT(cert-err58-cpp): test-only state of the hook
std::filesystem::path attack_forged; // NOLINT(cert-err58-cpp)
bool attack_plant = false;
std::string attack_report; // NOLINT(cert-err58-cpp)

void attack_before_link(const std::filesystem::path& path) {
  Child attacker([&](int report) {
    if (!dsh::test::become_nobody()) {
      return 2;
    }
    if (attack_plant) {
      write_all(report, ::rename(attack_forged.c_str(), path.c_str()) == 0 ? "planted at the name\n"
                                                                           : "cannot plant at the name\n");
      return 0;
    }
    bool any = false;
    for (const std::string& name : entries(attack_dir)) {
      if (name != attack_forged.filename().native()) {
        any = true;
        const int result = ::rename(attack_forged.c_str(), (attack_dir / name).c_str());
        write_all(report, "renamed over " + name + ": " +
                              (result == 0 ? std::string("done") : std::generic_category().message(errno)) + "\n");
      }
    }
    if (!any) {
      write_all(report, "no other entry\n");
    }
    return 0;
  });
  attack_report += attacker.read_all();
  if (attacker.exit_code() != 0) {
    attack_report += "the attacker could not become nobody\n";
  }
}

/// Installs the attacker for one scope.
class Attack {
public:
  Attack(std::filesystem::path dir, std::filesystem::path forged, bool plant) {
    attack_dir = std::move(dir);
    attack_forged = std::move(forged);
    attack_plant = plant;
    attack_report.clear();
    dsh::detail::slog::before_link_hook = &attack_before_link;
  }
  Attack(const Attack&) = delete;
  Attack& operator=(const Attack&) = delete;
  ~Attack() { dsh::detail::slog::before_link_hook = nullptr; }
};

/// A directory every user may rename entries in (0777 unless `mode` says otherwise), beneath a
/// scratch directory every user may traverse, holding `other.jsonl`: the host's own log of
/// another session, switched to danger-full-access (owned by `forger`, root by default).
struct SharedDirectory {
  TempDir base{"/tmp"};
  std::filesystem::path dir = base / "logs";
  std::filesystem::path forged = dir / "other.jsonl";
  std::string forged_bytes;
  explicit SharedDirectory(::mode_t mode = 0777, ::uid_t forger = 0) {
    REQUIRE(::geteuid() == 0);
    REQUIRE(::chmod(base.path().c_str(), 0755) == 0);
    make_directory(dir, mode);
    {
      auto other = SessionLog::create(forged, {"other", {}, 1}, shared_directories);
      dsh::set_sandbox_mode(other, SandboxMode::danger_full_access);
    }
    REQUIRE(::chown(forged.c_str(), forger, forger) == 0);
    forged_bytes = read_file(forged);
  }
};

} // namespace

TEST_CASE("a forged log renamed over whatever the new file is called before the link never becomes the log") {
  const SharedDirectory shared_dir;
  const auto path = shared_dir.dir / "s.jsonl";
  {
    const Attack attack(shared_dir.dir, shared_dir.forged, false);
    auto log = SessionLog::create(path, {"mine", {}, 2}, shared_directories);
    CHECK(attack_report == "no other entry\n"); // the new file had no name to rename over
    CHECK(log.append("tool/call", {{"n", 0}}) == 0);
  }
  const auto reopened = SessionLog::open(path, shared_directories);
  CHECK(reopened.header().id == "mine");
  CHECK_FALSE(reopened.sandbox_mode_override());
  CHECK(reopened.next_seq() == 1);
  CHECK(read_file(path).starts_with(header_line("mine", 2)));
  CHECK(read_file(shared_dir.forged) == shared_dir.forged_bytes);
  CHECK(entries(shared_dir.dir) == std::set<std::string>{"other.jsonl", "s.jsonl"});
  struct stat status {};
  REQUIRE(::stat(path.c_str(), &status) == 0);
  const ::mode_t mask = ::umask(022);
  ::umask(mask);
  CHECK((status.st_mode & 07777) == (0644 & ~mask)); // O_TMPFILE takes the mode as O_CREAT does
  CHECK(status.st_nlink == 1);
}

TEST_CASE("a forged log planted at the name before the link makes create fail, having created nothing") {
  const SharedDirectory shared_dir;
  const auto path = shared_dir.dir / "s.jsonl";
  {
    const Attack attack(shared_dir.dir, shared_dir.forged, true);
    const dsh::LogError error = log_error_from([&] {
      static_cast<void>(SessionLog::create(path, {"mine", {}, 2}, shared_directories));
    });
    CHECK(attack_report == "planted at the name\n");
    CHECK(std::string(error.what()) == log_message(path, 0, "cannot create: the file exists"));
    CHECK(error.code() == std::error_code(EEXIST, std::generic_category()));
  }
  CHECK(entries(shared_dir.dir) == std::set<std::string>{"s.jsonl"}); // the attacker's own rename, nothing of ours
  CHECK(read_file(path) == shared_dir.forged_bytes);
}

TEST_CASE("without O_TMPFILE, create writes under a staging name where no other user can rename it") {
  const TempDir dir;
  for (const int error : {EOPNOTSUPP, EISDIR, EINVAL}) {
    CAPTURE(error);
    const auto path = dir / ("s" + std::to_string(error) + ".jsonl");
    const std::string report = in_child([&](int out) {
      if (!without_tmpfile(error)) {
        return 2;
      }
      return create_and_report(out, path, {});
    });
    CHECK(report == "created " + header_line("mine", 2));
    CHECK(SessionLog::open(path).header().id == "mine");
  }
  CHECK(entries(dir.path()) == std::set<std::string>{"s" + std::to_string(EOPNOTSUPP) + ".jsonl",
                                                     "s" + std::to_string(EISDIR) + ".jsonl",
                                                     "s" + std::to_string(EINVAL) + ".jsonl"}); // no staging name left
}

TEST_CASE("without O_TMPFILE, create refuses a directory others may rename in, even when allowed") {
  const SharedDirectory shared_dir;
  const auto path = shared_dir.dir / "s.jsonl";
  const std::string report = in_child([&](int out) {
    if (!without_tmpfile(EOPNOTSUPP)) {
      return 2;
    }
    return create_and_report(out, path, shared_directories);
  });
  CHECK(report == log_message(path, 0,
                              "cannot create: the filesystem cannot make an unnamed file (O_TMPFILE): Operation not "
                              "supported, and a staging name could be replaced before it is linked: the directory " +
                                  dsh::json_string_literal(shared_dir.dir.native()) +
                                  " (mode 0777, owner uid 0, group gid 0) is writable by another user and has no "
                                  "sticky bit; nothing was created"));
  CHECK(entries(shared_dir.dir) == std::set<std::string>{"other.jsonl"});
}

TEST_CASE("without O_TMPFILE, the sticky bit keeps another user from renaming a forged log over the staging name") {
  const SharedDirectory shared_dir(01777, dsh::test::nobody); // the forgery is the attacker's own file
  const auto path = shared_dir.dir / "s.jsonl";
  const std::string report = in_child([&](int out) {
    if (!without_tmpfile(EOPNOTSUPP)) {
      return 2;
    }
    const Attack attack(shared_dir.dir, shared_dir.forged, false);
    create_and_report(out, path, {});
    write_all(out, "\n" + attack_report);
    return 0;
  });
  const std::string staging_prefix = "renamed over s.jsonl.creating.";
  const std::size_t attack_line = report.find('\n' + staging_prefix);
  REQUIRE(attack_line != std::string::npos);
  CHECK(report.substr(0, attack_line) == "created " + header_line("mine", 2));
  CHECK(report.ends_with(": Operation not permitted\n"));
  CHECK(std::count(report.begin(), report.end(), '\n') == 3); // the header's, the separator, one attempt
  CHECK(entries(shared_dir.dir) == std::set<std::string>{"other.jsonl", "s.jsonl"});
  CHECK(read_file(shared_dir.forged) == shared_dir.forged_bytes);
}

TEST_CASE("where linkat with AT_EMPTY_PATH is refused, the new file is linked through /proc/self/fd") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string report = in_child([&](int out) {
    if (!without_empty_path_link()) {
      return 2;
    }
    return create_and_report(out, path, {});
  });
  CHECK(report == "created " + header_line("mine", 2));
  CHECK(entries(dir.path()) == std::set<std::string>{"s.jsonl"});
}

TEST_CASE("with neither AT_EMPTY_PATH nor /proc, create fails having created nothing") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string report = in_child([&](int out) {
    if (!dsh::test::enter_private_mount_namespace() || ::umount2("/proc", MNT_DETACH) != 0 ||
        !without_empty_path_link()) {
      return 2;
    }
    return create_and_report(out, path, {});
  });
  CHECK(report == log_message(path, 0,
                              "cannot create: the new file could not be linked to its name, with AT_EMPTY_PATH nor "
                              "through /proc/self/fd: No such file or directory; nothing was created"));
  CHECK(entries(dir.path()).empty());
}
