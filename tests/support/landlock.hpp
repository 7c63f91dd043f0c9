// Shared by the enforcement and tool tests: a scratch laboratory of real directories
// outside every temporary area, forked children that run under a fence, and the visible
// skip used only where the kernel has no Landlock.
#pragma once

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include "support/catch.hpp"
#include "support/files.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

// Catch2 v3 reports a skipped test as skipped; v2 has no skip, so the reason is printed as a
// warning and one passing assertion keeps `--warn NoAssertions` satisfied.
#if defined(CATCH_VERSION_MAJOR) && CATCH_VERSION_MAJOR >= 3
#define DSH_TEST_SKIP(reason) SKIP(reason)
#else
#define DSH_TEST_SKIP(reason)                                                                                          \
  do {                                                                                                                 \
    WARN("SKIPPED: " << (reason));                                                                                     \
    SUCCEED("skipped");                                                                                                \
    return;                                                                                                            \
  } while (false)
#endif

/// Skips the current test, with the kernel's reason, when Landlock is unavailable.
#define DSH_REQUIRE_LANDLOCK()                                                                                         \
  do {                                                                                                                 \
    if (const std::string dsh_why = dsh::test::landlock_unavailable(); !dsh_why.empty()) {                             \
      DSH_TEST_SKIP("this kernel cannot enforce a Landlock fence: " + dsh_why);                                        \
    }                                                                                                                  \
  } while (false)

namespace dsh::test {

/// "" when the running kernel has Landlock, otherwise why not.
inline std::string landlock_unavailable() {
  const detail::LandlockProbe probe = detail::probe_landlock();
  return probe.abi > 0 ? std::string() : detail::landlock_unavailable_reason(probe.error);
}

/// `PreparedFence::prepare(policy, options)` with the namespace layer off: the base fence alone,
/// which the Landlock, filter and supervisor suites check (each refusal as Landlock or the filter
/// gives it); tests/enforcement/test_namespace_layer.cpp checks the layer.
[[nodiscard]] inline PreparedFence prepare_base(const ResolvedPolicy& policy, FenceOptions options = {}) {
  options.isolation = Isolation::off;
  return PreparedFence::prepare(policy, options);
}

/// The device trees of this process's mount table, read here apart from the library: "/dev",
/// then each devpts or devtmpfs mount point outside it and outside those listed before (the
/// test machines' mount points need none of mountinfo's escapes).
[[nodiscard]] inline std::vector<std::string> device_trees_seen() {
  std::vector<std::string> trees{"/dev"};
  std::ifstream table("/proc/self/mountinfo");
  for (std::string line; std::getline(table, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, word;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> word && word != "-") {
    }
    std::string type;
    fields >> type;
    const auto beneath = [&point](const std::string& tree) { return point == tree || point.starts_with(tree + "/"); };
    if ((type == "devpts" || type == "devtmpfs") && std::none_of(trees.begin(), trees.end(), beneath)) {
      trees.push_back(point);
    }
  }
  return trees;
}

/// What `FenceReport::describe()` says of the read fence of a base fence on this machine:
/// "; reads refused beneath" the device trees, "but" the null devices and random devices that
/// exist, then `terminal_devices`.
[[nodiscard]] inline std::string reads_refused_text(const std::vector<std::string>& terminal_devices = {}) {
  std::string text = "; reads refused beneath";
  const std::vector<std::string> trees = device_trees_seen();
  for (std::size_t i = 0; i < trees.size(); ++i) {
    text += (i == 0 ? " \"" : ", \"") + trees[i] + "\"";
  }
  text += " but";
  bool first = true;
  std::vector<std::string> devices;
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}) {
    struct stat info {};
    if (::stat(device, &info) == 0 && S_ISCHR(info.st_mode)) {
      devices.emplace_back(device);
    }
  }
  devices.insert(devices.end(), terminal_devices.begin(), terminal_devices.end());
  for (const std::string& device : devices) {
    text += (first ? " \"" : ", \"") + device + "\"";
    first = false;
  }
  return first ? text + " nothing" : text;
}

/// The errno of opening `path` for reading without blocking and without making it a controlling
/// terminal, or 0 when it opens (it is closed at once).
[[nodiscard]] inline int open_error(const std::string& path) {
  const UniqueFd fd{::open(path.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)};
  return fd ? 0 : errno;
}

/// The errno of a failed call (`result` < 0), or 0 when it succeeded.
[[nodiscard]] inline int errno_of(long result) noexcept { return result < 0 ? errno : 0; }

/// Runs `body` in a forked child, after entering `fence` when one is given; returns the
/// child's exit code, which is what `body` returned (0 for success or an errno value).
/// 250 means the fence could not be applied; the parent is never fenced.
inline int in_child(const PreparedFence* fence, const std::function<int()>& body) {
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (fence != nullptr && !fence->apply().ok()) {
      ::_exit(250);
    }
    ::_exit(body());
  }
  return wait_exit_code(pid);
}

/// `in_child` under `fence`.
inline int fenced(const PreparedFence& fence, const std::function<int()>& body) { return in_child(&fence, body); }

/// `in_child` without any fence: the control run that shows an operation is possible at all.
inline int unfenced(const std::function<int()>& body) { return in_child(nullptr, body); }

/// True when `report` grants a directory that `path` lies beneath or at: whether a fenced
/// write there is allowed. The tests ask the report instead of assuming a temporary area is
/// granted, because an area holding what decides a later call (the test executable itself,
/// when the build tree is under /tmp; a log; $TMPDIR's entry) is not.
inline bool grants_directory_of(const FenceReport& report, const std::filesystem::path& path) {
  const std::filesystem::path canonical = canonical_path(path);
  for (const FenceGrant& grant : report.grants) {
    if (std::filesystem::is_directory(grant.path) && detail::is_within(canonical, grant.path)) {
      return true;
    }
  }
  return false;
}

/// A fresh scratch directory (removed on destruction) inside the first directory `report`
/// grants other than `workspace`: a temporary area the fence really grants. Throws when it
/// grants none.
inline TempDir scratch_in_granted_area(const FenceReport& report, const std::filesystem::path& workspace) {
  for (const FenceGrant& grant : report.grants) {
    if (std::filesystem::is_directory(grant.path) && grant.path != workspace) {
      return TempDir(grant.path);
    }
  }
  throw std::runtime_error("the fence grants no temporary area: " + report.describe());
}

/// The exit code and the captured output of a fenced command.
struct Captured {
  int exit_code = -1; ///< as `FencedCommand::run` reports it
  std::string out;    ///< everything written to stdout
  std::string err;    ///< everything written to stderr
};

/// Runs `argv` under `fence` (via FencedCommand) with stdout and stderr captured in files
/// opened before the fork, in directory `scratch`, and `cwd` as working directory.
inline Captured capture(const PreparedFence& fence, std::vector<std::string> argv, const std::filesystem::path& cwd,
                        const std::filesystem::path& scratch) {
  static std::atomic<int> counter{0};
  const std::string stem = "capture-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
  const std::filesystem::path out_path = scratch / (stem + ".out");
  const std::filesystem::path err_path = scratch / (stem + ".err");
  const UniqueFd out{::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  const UniqueFd err{::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (!out || !err) {
    throw std::system_error(errno, std::generic_category(), "capture files in " + scratch.string());
  }
  FencedCommand command(std::move(argv));
  command.redirect(STDOUT_FILENO, out.get()).redirect(STDERR_FILENO, err.get()).in_directory(cwd);
  std::fflush(nullptr);
  Captured result;
  result.exit_code = command.run(fence);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return result;
}

/// `bash -c script` under `fence` in the C locale (so messages are byte-stable), captured
/// (see `capture`).
inline Captured bash(const PreparedFence& fence, const std::string& script, const std::filesystem::path& cwd,
                     const std::filesystem::path& scratch) {
  return capture(fence, {"env", "LC_ALL=C", "bash", "--norc", "--noprofile", "-c", script}, cwd, scratch);
}

/// Real directories for fence tests, removed with everything beneath them on destruction:
///
///   base/            outside every platform temporary area (never /tmp, /var/tmp, /dev/shm, $TMPDIR)
///     ws/            the workspace root (canonical)
///     ws2/           a sibling whose name shares the prefix "ws"
///     outside/       a scratch directory that is neither workspace nor temporary area
///   tmp              a TempDir: inside a platform temporary area
///
/// `base` is made in the test's working directory, or $HOME, /var/lib, /opt when that one
/// is inside a temporary area; all of them share one filesystem with `ws`, so EXDEV from a
/// link or rename between them can only come from Landlock.
class Lab {
public:
  Lab() : base_(make_base()) {
    std::filesystem::create_directory(base_ / "ws");
    std::filesystem::create_directory(base_ / "ws2");
    std::filesystem::create_directory(base_ / "outside");
    workspace_ = canonical_path(base_ / "ws");
    sibling_ = canonical_path(base_ / "ws2");
    outside_ = canonical_path(base_ / "outside");
    tmp_area_ = canonical_path(tmp_.path());
  }
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;
  ~Lab() {
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }

  /// The canonical directory holding ws, ws2 and outside.
  [[nodiscard]] std::filesystem::path base() const { return canonical_path(base_); }
  /// The workspace root.
  [[nodiscard]] const std::filesystem::path& workspace() const noexcept { return workspace_; }
  /// The sibling "ws2" of the workspace.
  [[nodiscard]] const std::filesystem::path& sibling() const noexcept { return sibling_; }
  /// The scratch directory outside both the workspace and the temporary areas.
  [[nodiscard]] const std::filesystem::path& outside() const noexcept { return outside_; }
  /// A fresh directory inside a platform temporary area.
  [[nodiscard]] const std::filesystem::path& tmp_area() const noexcept { return tmp_area_; }

  /// A resolved policy with `mode` and the workspace as root, as PolicyOwner would give it.
  [[nodiscard]] ResolvedPolicy policy(SandboxMode mode) const {
    ResolvedPolicy policy;
    policy.mode = mode;
    policy.workspace_root = workspace_;
    policy.mode_source = ModeSource::approved;
    policy.root_source = RootSource::session;
    return policy;
  }

private:
  static bool in_temporary_area(const std::filesystem::path& dir) {
    const std::filesystem::path canonical = canonical_path(dir);
    for (const std::filesystem::path& area : detail::temporary_areas(std::getenv("TMPDIR"))) {
      if (detail::is_within(canonical, area)) {
        return true;
      }
    }
    return false;
  }

  /// True when every directory from `/` down to `dir` lets other users pass (o+x): tests that
  /// drop to an unprivileged user must reach the laboratory (a home directory of mode 0700,
  /// or a build tree beneath one, does not qualify).
  static bool traversable_by_others(const std::filesystem::path& dir) {
    std::filesystem::path walked = "/";
    for (const std::filesystem::path& part : canonical_path(dir).relative_path()) {
      walked /= part;
      struct stat info {};
      if (::stat(walked.c_str(), &info) != 0 || (info.st_mode & S_IXOTH) == 0) {
        return false;
      }
    }
    return true;
  }

  static std::filesystem::path make_base() {
    std::vector<std::filesystem::path> candidates{std::filesystem::current_path(), "/var/lib", "/opt"};
    if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
      candidates.emplace_back(home);
    }
    for (const std::filesystem::path& dir : candidates) {
      if (in_temporary_area(dir) || !traversable_by_others(dir)) {
        continue;
      }
      std::string pattern = (dir / "dsh-landlock-lab-XXXXXX").string();
      if (::mkdtemp(pattern.data()) != nullptr) {
        return pattern;
      }
    }
    throw std::runtime_error("no writable directory outside the temporary areas, open to other users, for "
                             "the fence laboratory (tried the working directory, /var/lib, /opt, $HOME)");
  }

  TempDir tmp_;
  std::filesystem::path base_;
  std::filesystem::path workspace_;
  std::filesystem::path sibling_;
  std::filesystem::path outside_;
  std::filesystem::path tmp_area_;
};

} // namespace dsh::test
