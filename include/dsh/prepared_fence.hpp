/// @file
/// `PreparedFence`: a Landlock ruleset, the syscall filters and the namespace layer's plan built
/// from a resolved policy before fork, applied in the child by the noexcept `apply()`; then its
/// builder (`detail::prepare_fence`). The guards, the kernel interface, the temporary areas and
/// the namespace layer it is built on are in <dsh/detail/fence/>.
#pragma once

#include <dsh/denials.hpp>
#include <dsh/detail/fence/guards.hpp>
#include <dsh/detail/fence/host_environment.hpp>
#include <dsh/detail/fence/landlock_kernel.hpp>
#include <dsh/detail/fence/mount_table.hpp>
#include <dsh/detail/fence/namespace_layer.hpp>
#include <dsh/detail/fence/private_temporary.hpp>
#include <dsh/detail/fence/read_fence.hpp>
#include <dsh/detail/fence/readings.hpp>
#include <dsh/detail/fence/syscall_filter.hpp>
#include <dsh/detail/fence/temporary_areas.hpp>
#include <dsh/detail/observations.hpp>
#include <dsh/detail/path_trust.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/detail/process/child_steps.hpp>
#include <dsh/detail/text/concat.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsh {

class FencedCommand;
class PreparedFence;
namespace detail {
struct LaunchWire;

/// What a fence's preparation depends on besides what it reads on its way (`Observations`):
/// the policy, the options, the host's environment variables it reads, the calling thread's
/// effective ids, CAP_SYS_ADMIN and system-call filter, and the kernel's Landlock ABI. Two
/// preparations with equal inputs and equal readings build the same fence.
struct FenceInputs {
  ResolvedPolicy policy;
  FenceOptions options;
  std::array<std::optional<std::string>, 5> environment{}; ///< as `HostEnvironment`, in its order
  /// Every path of the policy and the options as spelled: `std::filesystem::path`'s equality
  /// compares components, and "/w//ws" is refused where "/w/ws" is granted.
  std::vector<std::string> spellings{};
  ::uid_t euid = 0;
  ::gid_t egid = 0;
  ::uid_t fsuid = 0; ///< the ids the kernel checks file permissions with
  ::gid_t fsgid = 0;
  std::vector<::gid_t> groups{};  ///< the supplementary groups
  std::uint64_t capabilities = 0; ///< the effective set (CAP_DAC_* decide what opens)
  bool sys_admin = false;         ///< `holds_sys_admin()`
  int filter_probe = 0;           ///< `probe_syscall_filter()`
  LandlockProbe probe{};
  bool operator==(const FenceInputs&) const = default;

  /// The inputs of a preparation of `policy` with `options` by the calling thread now; nullopt
  /// when one cannot be read (the capabilities, the groups). Throws only std::bad_alloc.
  [[nodiscard]] static std::optional<FenceInputs> now(const ResolvedPolicy& policy, const FenceOptions& options,
                                                      const HostEnvironment& host, LandlockProbe probe) {
    FenceInputs inputs{policy, options};
    const std::array<const char*, 5> variables{host.tmpdir, host.xdg_runtime_dir, host.ld_library_path, host.ld_preload,
                                               host.ld_audit};
    for (std::size_t i = 0; i < variables.size(); ++i) {
      if (variables[i] != nullptr) {
        inputs.environment[i] = variables[i];
      }
    }
    for (const std::filesystem::path* path : {&policy.workspace_root, &options.session_log, &options.session_cwd,
                                              &options.terminal, &options.temporary_root}) {
      inputs.spellings.push_back(path->native());
    }
    for (const std::vector<std::filesystem::path>* list :
         {&options.protected_paths, &options.extra_writable, &policy.protected_paths.extra}) {
      for (const std::filesystem::path& path : *list) {
        inputs.spellings.push_back(path.native());
      }
    }
    inputs.euid = ::geteuid();
    inputs.egid = ::getegid();
#if defined(__linux__)
    // An invalid id changes nothing and returns the current one.
    inputs.fsuid = static_cast<::uid_t>(::setfsuid(static_cast<::uid_t>(-1)));
    inputs.fsgid = static_cast<::gid_t>(::setfsgid(static_cast<::gid_t>(-1)));
    CapabilityHeader header{capability_version_3, 0};
    std::array<CapabilityData, 2> sets{};
    if (::syscall(SYS_capget, &header, sets.data()) != 0) {
      return std::nullopt;
    }
    inputs.capabilities = std::uint64_t{sets[1].effective} << 32U | sets[0].effective;
#endif
    const int count = ::getgroups(0, nullptr);
    if (count < 0) {
      return std::nullopt;
    }
    inputs.groups.resize(static_cast<std::size_t>(count));
    if (count > 0 && ::getgroups(count, inputs.groups.data()) != count) {
      return std::nullopt;
    }
    inputs.sys_admin = holds_sys_admin();
    inputs.filter_probe = probe_syscall_filter();
    inputs.probe = probe;
    return inputs;
  }
};

/// True when a fence for `policy` with `options` may be checked again rather than built again
/// (docs/enforcement.md#a-fence-checked-again): read-only or workspace-write, without a
/// terminal, the shared temporary areas or extra writable directories, and (workspace-write)
/// with a session that names its private temporary directory. What is checked again is the
/// base fence: the namespace layer, where the options ask for it, is planned anew every time.
[[nodiscard]] inline bool checkable(const ResolvedPolicy& policy, const FenceOptions& options) noexcept {
  return policy.mode != SandboxMode::danger_full_access && options.terminal.empty() &&
         !options.shared_temporary_areas && options.extra_writable.empty() &&
         (policy.mode == SandboxMode::read_only || !options.session_id.empty() || !options.session_log.empty());
}

/// The base fence prepared earlier with `inputs` whose readings all read the same again now, as
/// `prepare_fence` leaves a new one (before the namespace layer and the read fence, which
/// `PreparedFence::prepare` then adds); nullopt when there is none. Throws SystemError when its
/// descriptor cannot be duplicated. Defined after PreparedFence.
[[nodiscard]] std::optional<PreparedFence> checked_again(const FenceInputs& inputs);
/// Keeps `fence`, prepared with `inputs` after `readings`, for `checked_again`. Defined after
/// PreparedFence.
void keep_checked(FenceInputs inputs, std::vector<Observation> readings, const PreparedFence& fence);
} // namespace detail

/// A Landlock ruleset built from a resolved policy, ready to be entered by a child process.
///
/// Prepare it in the parent, before fork (it allocates, opens the granted paths and fills
/// the ruleset); the child then calls the noexcept `apply()`, which issues only system calls
/// (the namespace layer's, prctl(PR_SET_NO_NEW_PRIVS), landlock_restrict_self(2), the capability
/// drop and the filter). One fence can be applied by
/// any number of children. Move-only; owns the ruleset descriptor (close-on-exec).
class PreparedFence {
public:
  /// Builds the fence for `policy` on the running kernel.
  ///
  /// read-only: handles every right of `LANDLOCK_WRITE_RIGHTS` the kernel knows and grants
  /// only write_file, truncate and ioctl_dev on /dev/null, /dev/zero and /dev/full (and on the
  /// command's own terminal and /dev/tty with `options.terminal`).
  /// workspace-write: the same, plus every handled right except make_char, make_block and
  /// ioctl_dev beneath `policy.workspace_root` and beneath the session's private temporary
  /// directory (made now, see FenceOptions::temporary_root), and `options.extra_writable`; with
  /// `options.shared_temporary_areas` also each existing shared area (/tmp, /var/tmp, /dev/shm;
  /// $TMPDIR as read now when it is absolute and its canonical path lies beneath one of them).
  /// An optional area that would let the command change what decides a later call (see
  /// FenceOptions) is skipped with a note. Both modes also scope signals and abstract unix
  /// sockets to the command's own processes where the kernel can (ABI 6), refuse TCP with
  /// `options.deny_tcp`, and prepare the system-call filter (with or without Landlock).
  /// Without the namespace layer both also enter the read fence, a second ruleset that refuses
  /// reading beneath /dev but the null and random devices and the command's terminal
  /// (`report().unreadable`, docs/enforcement.md#reading-devices).
  /// danger-full-access: `unrestricted`, nothing is applied (and no Landlock needed).
  /// Read-only and workspace-write then get the namespace layer (`options.isolation`,
  /// docs/enforcement.md#the-namespace-layer): probed now, its rows in `report().layers`, the
  /// placeholders of missing protected paths made now.
  /// Returns the prepared fence; `report()` tells what it enforces.
  /// Throws LandlockError when Landlock or the system-call filter is unavailable and
  /// `options.allow_unfenced` is false (fail closed), when `options.deny_tcp` is set and the
  /// kernel's ABI is below 4, when the workspace root is "/" or its grant would let the
  /// command change what decides a later call, when the workspace root, session cwd or
  /// temporary root runs through a directory another user can change (unless
  /// `options.allow_shared_directories`), when the private temporary directory cannot be made
  /// safely, when `options.terminal` is not a pseudo-terminal (each message names the path),
  /// when the workspace root cannot be opened, when a Landlock call fails,
  /// when `options.isolation` is `required` and a row of the layer cannot be had (nothing runs),
  /// when the layer does not apply and a devpts or devtmpfs mount lies outside /dev (the read
  /// fence could not keep its devices out of reach),
  /// or, with the layer, when the protected paths cannot be known or a placeholder cannot be made.
  ///
  /// A fence whose inputs equal an earlier one's (`detail::checkable` configurations) is checked
  /// again rather than built again: every reading the earlier preparation made is made again,
  /// and when each gives what it gave, that fence's ruleset is reused, with the namespace layer
  /// and the read fence made as for a new one (docs/enforcement.md#a-fence-checked-again);
  /// SystemError when its descriptor cannot be duplicated (the process is out of descriptors).
  [[nodiscard]] static PreparedFence prepare(const ResolvedPolicy& policy, const FenceOptions& options = {}) {
    const detail::HostEnvironment environment = detail::HostEnvironment::current();
    const detail::LandlockProbe probe = detail::probe_landlock();
    std::optional<detail::FenceInputs> inputs;
    std::optional<PreparedFence> base;
    if (detail::checkable(policy, options)) {
      inputs = detail::FenceInputs::now(policy, options, environment, probe);
      if (inputs) {
        base = detail::checked_again(*inputs);
      }
    }
    if (!base) {
      detail::Observations readings;
      base.emplace([&] {
        const detail::ObservationScope recording(inputs ? &readings : nullptr);
        return detail::prepare_fence(policy, options, probe, environment, true);
      }());
      base->policy_ = policy; // a reused fence has its kept copy's, equal as an input
      // What is kept is the base fence alone: the namespace layer below is planned anew by
      // every call, from what is there then (the protected entries a `git init` made since).
      if (inputs && base->report_.status == FenceStatus::enforced && !base->temporary_.owns() && base->mount_table_) {
        if (std::optional<std::vector<detail::Observation>> distinct = detail::distinct_readings(readings)) {
          try {
            detail::keep_checked(std::move(*inputs), std::move(*distinct), *base);
          } catch (const SystemError&) {
            // No descriptor to keep it with: this call has its fence, the next builds one anew.
          }
        }
      }
    }
    PreparedFence fence = std::move(*base);
    // The layer alone binds the protected entries (a fence without it refuses nothing more for
    // them, docs/enforcement.md#what-each-family-does), so a call that cannot have it scans nothing.
    const bool layered = options.isolation != Isolation::off && policy.mode != SandboxMode::danger_full_access;
    fence.add_namespace_layer(policy, options, environment,
                              layered ? detail::protected_entries(policy.workspace_root, policy.protected_paths)
                                      : detail::ProtectedScan{});
    fence.fence_reads();
    return fence;
  }

  /// `prepare(policy, options)` with the protected list `scan` instead of the policy's, for
  /// tests of the layer's binds on hand-built entries.
  [[nodiscard]] static PreparedFence prepare_with_protected(const ResolvedPolicy& policy, const FenceOptions& options,
                                                            const detail::ProtectedScan& scan) {
    const detail::HostEnvironment environment = detail::HostEnvironment::current();
    PreparedFence fence = detail::prepare_fence(policy, options, detail::probe_landlock(), environment, true);
    fence.add_namespace_layer(policy, options, environment, scan);
    fence.fence_reads();
    fence.policy_ = policy;
    return fence;
  }

  /// Removes the private temporary directory `prepare(policy, options)` makes for the session
  /// `options` names (`session_id`, else `session_log`), with everything in it: call it when
  /// the session ends and none of its calls runs. Returns true when it was removed or did not
  /// exist. Throws LandlockError when `options` names no session (a fence without one removes
  /// its own directory), names a temporary root that is not absolute, or the root is a symbolic
  /// link or a directory another user could change (nothing is removed then).
  static bool remove_temporary_directory(const FenceOptions& options) {
    if (options.session_id.empty() && options.session_log.empty()) {
      throw LandlockError("PreparedFence::remove_temporary_directory: expected FenceOptions naming a session "
                          "(session_id or session_log), got neither");
    }
    const std::filesystem::path root = detail::temporary_root_of(options, detail::HostEnvironment::current());
    struct stat info {};
    if (::lstat(root.c_str(), &info) != 0) {
      return errno == ENOENT;
    }
    // Never through a link or another user's directory: only what prepare could have made.
    if (const std::string why = detail::private_directory_problem(info, 022); !why.empty()) {
      throw LandlockError("PreparedFence::remove_temporary_directory: refusing the temporary root " +
                          json_string_literal(root.native()) + ": " + why);
    }
    return detail::remove_tree(root / detail::private_temporary_name(options));
  }

  PreparedFence(const PreparedFence&) = delete;
  PreparedFence& operator=(const PreparedFence&) = delete;
  /// Transfers the ruleset; applying the moved-from fence fails with EBADF.
  PreparedFence(PreparedFence&& other) noexcept = default;
  /// Transfers the ruleset, closing this one's.
  PreparedFence& operator=(PreparedFence&& other) noexcept = default;
  /// Closes the ruleset descriptor (children that already applied it stay fenced) and, for a
  /// fence that names no session, removes its private temporary directory.
  ~PreparedFence() = default;

  /// What the fence enforces (status, mode, ABI, handled rights, grants).
  [[nodiscard]] const FenceReport& report() const noexcept { return report_; }

  /// The policy the fence was prepared for.
  [[nodiscard]] const ResolvedPolicy& policy() const noexcept { return policy_; }

  /// Returns a scanner of the stderr of a command run under this fence from `directory`, which
  /// finds the writes the fence refused (docs/enforcement.md#denials): the policy's predicate, the
  /// directories granted beyond the workspace root, and whether the fence restricts writes at
  /// all (Landlock enforced, or a row of the namespace layer applied). Throws only
  /// std::bad_alloc.
  [[nodiscard]] DenialScanner denial_scanner(std::filesystem::path directory) const {
    std::vector<std::filesystem::path> granted;
    for (const FenceGrant& grant : report_.grants) {
      if (grant.path != policy_.workspace_root) {
        granted.push_back(grant.path);
      }
    }
    bool restricts = report_.status == FenceStatus::enforced;
    for (const FenceLayer& layer : report_.layers) {
      restricts = restricts || layer.applied;
    }
    return {policy_, std::move(granted), std::move(directory),
            restricts && report_.mode != SandboxMode::danger_full_access};
  }

  /// Enters the fence in the calling thread and, after exec, everything it starts.
  ///
  /// In this order, as the trusted launchers order them: the namespace layer when
  /// `report().layers` applies it (docs/enforcement.md#the-namespace-layer: the user namespace,
  /// then a new PID namespace, entered by forking once: the calling process then waits for its
  /// child, which returns from here as PID 1 of the namespace, and exits as that child ends;
  /// then the mount, IPC and UTS namespaces and the mounts), else a new IPC namespace when
  /// `report().ipc_namespace`; no_new_privs; the Landlock domain (`enforced`); the capability
  /// drop of `FENCE_DROPPED_CAPABILITIES` (read-only and workspace-write); the system-call
  /// filter, last (`report().syscall_filter`), so that nothing after it but exec is filtered,
  /// unless the calling process already runs under that very program (`holds_syscall_filter`:
  /// forked from the launcher's zygote, which refuses none of these steps).
  /// Async-signal-safe (raw system calls only), so it may run between fork and exec. Landlock
  /// and seccomp restrict the calling thread only: call it in a single-threaded child. Does
  /// nothing for an `unrestricted` fence. Returns the errno and the failing call when the
  /// kernel refused a step; the child must then not run the command (`FencedCommand` exits
  /// instead). Exec the command next: until then the child holds the host's descriptors, the
  /// Landlock rulesets of the fences `prepare` keeps and of the shared read fence among them
  /// (close-on-exec), and code run there could add rules to one that later calls use
  /// (docs/enforcement.md#a-fence-checked-again).
  ApplyResult apply() const noexcept { return enter(~0ULL, ~0ULL, false); }

  /// `TMPDIR=` followed by `report().temporary_directory`, the variable a fenced command gets
  /// (see FencedCommand); nullptr when the fence has no temporary directory. Async-signal-safe:
  /// built when the fence was prepared, valid as long as this fence.
  [[nodiscard]] const char* temporary_directory_assignment() const noexcept {
    return tmpdir_assignment_.empty() ? nullptr : tmpdir_assignment_.c_str();
  }

private:
  friend PreparedFence detail::prepare_fence(const ResolvedPolicy&, const FenceOptions&, detail::LandlockProbe,
                                             const detail::HostEnvironment&, bool);
  PreparedFence(FenceReport report, UniqueFd ruleset, detail::OwnedDirectory temporary = {},
                std::vector<detail::SyscallFilterInstruction> filter = {},
                std::vector<detail::SyscallFilterInstruction> refusing_filter = {})
      : report_(std::move(report)), ruleset_(std::move(ruleset)), temporary_(std::move(temporary)),
        filter_(std::move(filter)), refusing_filter_(std::move(refusing_filter)) {
    if (!report_.temporary_directory.empty()) {
      tmpdir_assignment_ = "TMPDIR=" + report_.temporary_directory.native();
    }
  }

  friend class FencedCommand;
  friend struct detail::LaunchWire;
  friend std::optional<PreparedFence> detail::checked_again(const detail::FenceInputs&);
  friend void detail::keep_checked(detail::FenceInputs, std::vector<detail::Observation>, const PreparedFence&);

  /// A copy of this fence as `prepare_fence` leaves it, before the namespace layer and the read
  /// fence (`add_namespace_layer`, `fence_reads`), on a duplicate of its ruleset descriptor;
  /// only for a fence that has neither yet and no directory of its own. Throws SystemError
  /// when the descriptor cannot be duplicated.
  [[nodiscard]] PreparedFence copy_unread() const {
    UniqueFd ruleset;
    if (ruleset_) {
      ruleset.reset(::fcntl(ruleset_.get(), F_DUPFD_CLOEXEC, 0));
      if (!ruleset) {
        throw SystemError(errno, "PreparedFence: cannot duplicate the Landlock ruleset of a fence checked again");
      }
    }
    PreparedFence copy{report_, std::move(ruleset), detail::OwnedDirectory{}, filter_, refusing_filter_};
    copy.policy_ = policy_;
    copy.tmpdir_assignment_ = tmpdir_assignment_;
    copy.terminal_devices_ = terminal_devices_;
    copy.mount_table_ = mount_table_;
    return copy;
  }

  /// Adds the namespace layer to the prepared base fence (`detail::plan_namespace_layer`):
  /// its rows in the report, the plan the children apply, the filter for a command in its own
  /// IPC namespace, and TMPDIR=/tmp when /tmp is the private directory.
  void add_namespace_layer(const ResolvedPolicy& policy, const FenceOptions& options,
                           const detail::HostEnvironment& environment, const detail::ProtectedScan& scan) {
    namespaces_ = detail::plan_namespace_layer(policy, options, environment, scan, report_, mount_table_);
    if (!namespaces_.active) {
      return;
    }
    if (report_.syscall_filter && filter_.empty()) {
      filter_ = detail::build_syscall_filter(false, !options.terminal.empty());
    }
    if (namespaces_.temporary_areas && !namespaces_.temporary.empty()) {
      tmpdir_assignment_ = "TMPDIR=" + namespaces_.temporary_targets.front();
    }
  }

  /// The read fence of an enforced fence, once the namespace layer is planned
  /// (docs/enforcement.md#reading-devices): none with the layer, whose fresh /dev holds only the
  /// readable devices and whose empty views hide the other device trees; without it, the shared
  /// ruleset of `detail::shared_read_fence`, with the command's terminal and every grant beneath
  /// /dev readable too, entered after the fence's own. Throws LandlockError when a
  /// devpts or devtmpfs mount lies outside /dev (nothing runs), and what
  /// `detail::shared_read_fence` throws.
  void fence_reads() {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
    if (report_.status != FenceStatus::enforced || namespaces_.active) {
      mount_table_.reset();
      return;
    }
    if (!mount_table_) {
      mount_table_ = detail::current_mount_table();
    }
    const std::string subject = "Landlock fence for " + std::string(to_string(report_.mode));
    const std::vector<std::filesystem::path> trees = detail::device_trees(*mount_table_);
    if (trees.size() > 1) {
      // Its ancestors would be granted entry by entry, and a command that can rename one of
      // them (this call, or a concurrent one, beneath its grants) could move the mount beneath
      // a granted entry: only /dev, which no fenced command can rename, is kept out by name.
      throw LandlockError(
          detail::concat(subject, ": the device filesystem mounted at ", json_string_literal(trees[1].native()),
                         " reaches the host's terminals and devices outside /dev; without the namespace "
                         "layer (whose empty views hide it) a command could read them, so nothing runs "
                         "(unmount it, or let the layer apply: FenceOptions::isolation)"));
    }
    std::vector<std::filesystem::path> extras = terminal_devices_;
    for (const FenceGrant& grant : report_.grants) {
      if (std::find(detail::readable_device_names.begin(), detail::readable_device_names.end(), grant.path.native()) ==
              detail::readable_device_names.end() &&
          std::any_of(trees.begin(), trees.end(),
                      [&grant](const std::filesystem::path& tree) { return detail::is_within(grant.path, tree); }) &&
          std::find(extras.begin(), extras.end(), grant.path) == extras.end()) {
        extras.push_back(grant.path);
      }
    }
    // A directory granted beneath /dev (/dev/shm) is read beneath: no device filesystem may lie
    // there, nor may it be one.
    for (const std::filesystem::path& extra : extras) {
      struct stat info {};
      if (::lstat(extra.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
        continue;
      }
      const detail::MountEntry* holder = nullptr;
      for (const detail::MountEntry& mount : *mount_table_) {
        const bool device = mount.type == "devpts" || mount.type == "devtmpfs";
        if (detail::is_within(extra, mount.point) &&
            (holder == nullptr || mount.point.native().size() >= holder->point.native().size())) {
          holder = &mount;
        }
        if (device && mount.point != extra && detail::is_within(mount.point, extra)) {
          throw LandlockError(
              detail::concat(subject, ": the device filesystem mounted at ", json_string_literal(mount.point.native()),
                             " lies beneath the granted directory ", json_string_literal(extra.native()),
                             ", where the command may read; nothing runs (unmount it)"));
        }
      }
      if (holder != nullptr && (holder->type == "devpts" || holder->type == "devtmpfs")) {
        throw LandlockError(detail::concat(subject, ": the granted directory ", json_string_literal(extra.native()),
                                           " lies on the device filesystem mounted at ",
                                           json_string_literal(holder->point.native()),
                                           ", where the command may read; nothing runs"));
      }
    }
    const std::shared_ptr<const detail::ReadFence> reads =
        detail::shared_read_fence(mount_table_, extras, report_.abi, subject);
    report_.unreadable = trees;
    report_.readable_devices = reads->devices;
    read_ruleset_ = std::shared_ptr<const UniqueFd>(reads, &reads->ruleset);
    mount_table_.reset();
#endif
  }

  /// The part of the layer a supervisor enters itself, before it starts the command with
  /// vfork: the user namespace and a new PID namespace (the command is then its PID 1).
  /// Returns the failed step, or error 0 (also when the layer does not apply).
  ApplyResult enter_supervisor_namespaces() const noexcept {
#if defined(__linux__)
    if (!namespaces_.active) {
      return {};
    }
    if (namespaces_.user_namespace) {
      if (const ApplyResult entered = detail::enter_user_namespace(namespaces_); !entered.ok()) {
        return entered;
      }
    }
    if (::unshare(CLONE_NEWPID) != 0) {
      return {errno, "unshare(CLONE_NEWPID)"};
    }
#endif
    return {};
  }

  /// True when the layer applies and the caller holds a user namespace of its own afterwards,
  /// with a full bounding set that the capability drop must lower.
  [[nodiscard]] bool enters_user_namespace() const noexcept { return namespaces_.active && namespaces_.user_namespace; }

  /// `apply()`, asking to drop from the bounding and ambient sets only the capabilities of
  /// `bounding` and `ambient` (supersets of the process's own sets, as its /proc status lists
  /// them; all ones when unknown). `supervised`: the caller's supervisor already entered the
  /// user and PID namespaces (`enter_supervisor_namespaces`); otherwise this call enters them,
  /// forking once so that the calling process's child goes on as PID 1 of the new namespace
  /// while the caller waits and passes on how it ended.
  /// `ipc_namespace_made`: the caller is in a new IPC namespace made for this call already (a
  /// launcher's spare supervisor made it), which the fence then keeps (the layer too, where it
  /// makes no user namespace).
  ApplyResult enter(std::uint64_t bounding, std::uint64_t ambient, bool supervised,
                    bool ipc_namespace_made = false) const noexcept {
    if (report_.status == FenceStatus::unrestricted) {
      return {};
    }
    // Without a new IPC namespace the filter refuses System V IPC: a child that gave up the
    // CAP_SYS_ADMIN its preparing host held gets that instead, never the host's objects.
    const std::vector<detail::SyscallFilterInstruction>* filter = &refusing_filter_;
#if defined(__linux__)
    if (namespaces_.active) {
      if (!supervised) {
        if (namespaces_.user_namespace) {
          if (const ApplyResult entered = detail::enter_user_namespace(namespaces_); !entered.ok()) {
            return entered;
          }
        }
        if (const ApplyResult entered = detail::enter_pid_namespace_by_fork(); !entered.ok()) {
          return entered;
        }
      }
      // The spare's IPC namespace is kept only where no user namespace is made: one made in the
      // call's own user namespace must belong to it.
      if (const ApplyResult mounted =
              detail::apply_mount_layer(namespaces_, true, ipc_namespace_made && !namespaces_.user_namespace);
          !mounted.ok()) {
        return mounted;
      }
      if (namespaces_.user_namespace) {
        bounding = ~0ULL; // a new user namespace starts with a full bounding set
      }
      filter = &filter_;
    } else if (report_.ipc_namespace) {
      if (ipc_namespace_made || ::unshare(CLONE_NEWIPC) == 0) {
        filter = &filter_;
      } else if (errno != EPERM) {
        return {errno, "unshare(CLONE_NEWIPC)"};
      }
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
      return {errno, "prctl(PR_SET_NO_NEW_PRIVS)"};
    }
#endif
    if (report_.status == FenceStatus::enforced) {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
      if (!ruleset_) {
        return {EBADF, "landlock_restrict_self (moved-from fence)"};
      }
      if (::syscall(detail::sys_landlock_restrict_self, ruleset_.get(), 0U) != 0) {
        return {errno, "landlock_restrict_self"};
      }
      if (read_ruleset_ && ::syscall(detail::sys_landlock_restrict_self, read_ruleset_->get(), 0U) != 0) {
        return {errno, "landlock_restrict_self (the read fence)"};
      }
#else
      return {ENOSYS, "landlock_restrict_self"};
#endif
    }
    if (const detail::ChildStep failed = detail::drop_fence_capabilities(bounding, ambient); failed.error != 0) {
      return {failed.error, failed.step, true, failed.capability};
    }
    // A supervisor forked from the launcher's filtered zygote already runs under the program
    // it would install (the same bytes): the command inherits it as it is.
    if (report_.syscall_filter && !detail::holds_syscall_filter(*filter)) {
      if (const int error = detail::install_syscall_filter(*filter); error != 0) {
        return {error, "seccomp(SECCOMP_SET_MODE_FILTER)"};
      }
    }
    return {};
  }

  FenceReport report_;
  ResolvedPolicy policy_{};
  UniqueFd ruleset_;
  detail::OwnedDirectory temporary_;                     // a fence without a session owns its temporary directory
  std::vector<detail::SyscallFilterInstruction> filter_; // for a command in its own IPC namespace
  std::vector<detail::SyscallFilterInstruction> refusing_filter_; // refusing System V IPC too
  std::string tmpdir_assignment_;    // "TMPDIR=<temporary_directory>", prebuilt for the child; empty when none
  detail::NamespacePlan namespaces_; // the namespace layer's steps; inactive when it does not apply
  std::vector<std::filesystem::path> terminal_devices_; // FenceOptions::terminal and /dev/tty, when granted
  // the mount table prepare read, until the read fence is made
  std::shared_ptr<const std::vector<detail::MountEntry>> mount_table_;
  std::shared_ptr<const UniqueFd> read_ruleset_; // the read fence's ruleset, shared; null when none
};

} // namespace dsh

// The builder: it constructs the class above.
namespace dsh::detail {

/// The fences `PreparedFence::prepare` may check again: per process, at most
/// `max_checked_fences`, the oldest dropped first, each with the readings it was built after.
/// Thread-safe; never destroyed (a fence prepared while the process exits still finds it).
struct CheckedFences {
  struct Entry {
    FenceInputs inputs;
    std::shared_ptr<const std::vector<Observation>> readings;
    /// The base fence, before the namespace layer and the read fence.
    std::shared_ptr<const PreparedFence> fence;
  };
  std::mutex lock;
  std::vector<Entry> entries;
  std::atomic<std::uint64_t> reused{0}; ///< how many fences were checked again and reused

  /// The process's one.
  [[nodiscard]] static CheckedFences& instance() {
    static auto* const fences = new CheckedFences;
    return *fences;
  }
};

/// How many fences a process keeps to check again: one per session and configuration of a busy host.
inline constexpr std::size_t max_checked_fences = 16;

inline std::optional<PreparedFence> checked_again(const FenceInputs& inputs) {
  CheckedFences& fences = CheckedFences::instance();
  std::shared_ptr<const std::vector<Observation>> readings;
  std::shared_ptr<const PreparedFence> fence;
  {
    const std::lock_guard held(fences.lock);
    for (const CheckedFences::Entry& entry : fences.entries) {
      if (entry.inputs == inputs) {
        readings = entry.readings;
        fence = entry.fence;
        break;
      }
    }
  }
  if (!fence) {
    return std::nullopt;
  }
  try {
    // The mount table as the fence judged it (read anew, its parse shared while the text is equal).
    if (current_mount_table() != fence->mount_table_) {
      return std::nullopt;
    }
    for (const Observation& reading : *readings) {
      if (!reads_the_same(reading)) {
        return std::nullopt;
      }
    }
  } catch (const Error&) {
    return std::nullopt; // what cannot be read again is built again, and fails there if it must
  }
  PreparedFence again = fence->copy_unread();
  fences.reused.fetch_add(1, std::memory_order_relaxed);
  return again;
}

inline void keep_checked(FenceInputs inputs, std::vector<Observation> readings, const PreparedFence& fence) {
  CheckedFences::Entry entry{std::move(inputs), std::make_shared<const std::vector<Observation>>(std::move(readings)),
                             std::make_shared<const PreparedFence>(fence.copy_unread())};
  CheckedFences& fences = CheckedFences::instance();
  const std::lock_guard held(fences.lock);
  for (CheckedFences::Entry& kept : fences.entries) {
    if (kept.inputs == entry.inputs) {
      kept = std::move(entry);
      return;
    }
  }
  if (fences.entries.size() >= max_checked_fences) {
    fences.entries.erase(fences.entries.begin());
  }
  fences.entries.push_back(std::move(entry));
}

/// Why `terminal` is not the child side of a pseudo-terminal (a character device of the
/// UNIX 98 pty slave majors 136-143), or "".
[[nodiscard]] inline std::string not_a_pseudo_terminal(const std::filesystem::path& terminal) {
  struct stat info {};
  if (::stat(terminal.c_str(), &info) != 0) {
    return std::strerror(errno);
  }
  if (!S_ISCHR(info.st_mode) || major(info.st_rdev) < 136 || major(info.st_rdev) > 143) {
    return "expected the child side of a pseudo-terminal (a character device of major 136-143), found " +
           std::string(S_ISCHR(info.st_mode) ? "the character device " + std::to_string(major(info.st_rdev)) + ":" +
                                                   std::to_string(minor(info.st_rdev))
                                             : "no character device");
  }
  return {};
}

/// The fence body, with the kernel probe and the host's environment passed in so that every
/// branch (including "no Landlock" and older ABIs) runs in tests on any kernel.
[[nodiscard]] inline PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                                 LandlockProbe probe, const HostEnvironment& environment,
                                                 bool reads_later) {
  FenceReport report;
  report.mode = policy.mode;
  report.abi = probe.abi;
  if (policy.mode == SandboxMode::danger_full_access) {
    report.status = FenceStatus::unrestricted;
    return PreparedFence{std::move(report), UniqueFd{}};
  }
  const std::string subject = "Landlock fence for " + std::string(to_string(policy.mode));
  // The system-call filter holds with or without Landlock: it is built first.
  std::vector<SyscallFilterInstruction> filter;
  std::vector<SyscallFilterInstruction> refusing_filter;
  if (const int filter_error = probe_syscall_filter(); filter_error != 0) {
    const std::string reason = syscall_filter_unavailable_reason(filter_error);
    if (!options.allow_unfenced) {
      throw LandlockError(subject + ": the system-call filter cannot be installed: " + reason +
                          "; refusing to run without it (set FenceOptions::allow_unfenced to run without the fence)");
    }
    report.notes.push_back("NOT FILTERED: " + reason);
  } else {
    report.syscall_filter = true;
    report.ipc_namespace = holds_sys_admin();
    // with /dev/tty granted, the command must keep the terminal the host gave it
    const bool terminal = !options.terminal.empty();
    refusing_filter = shared_syscall_filter(true, terminal);
    if (report.ipc_namespace) {
      filter = shared_syscall_filter(false, terminal);
    }
  }
  if (probe.abi <= 0) {
    const std::string reason = landlock_unavailable_reason(probe.error);
    if (!options.allow_unfenced) {
      throw LandlockError(subject + ": " + reason +
                          "; refusing to run unfenced (set FenceOptions::allow_unfenced to "
                          "run without the fence)");
    }
    report.status = FenceStatus::unfenced;
    report.notes.push_back("NOT FENCED: " + reason);
    return PreparedFence{std::move(report), UniqueFd{}, OwnedDirectory{}, std::move(filter),
                         std::move(refusing_filter)};
  }
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  report.status = FenceStatus::enforced;
  OwnedDirectory owned_temporary; // a fence without a session removes its directory when destroyed
  report.handled = landlock_write_rights(probe.abi);
  report.unenforced = landlock_write_rights(std::numeric_limits<int>::max()) & ~report.handled;
  if (options.deny_tcp) {
    if (probe.abi < 4) {
      throw LandlockError(subject +
                          ": FenceOptions::deny_tcp asks to refuse TCP bind and connect, which needs "
                          "Landlock ABI 4 (Linux 6.7); this kernel has ABI " +
                          std::to_string(probe.abi));
    }
    report.handled_net = landlock_net_bind_tcp | landlock_net_connect_tcp;
  }
  if (probe.abi >= 6) {
    report.scoped = landlock_scope_signal | landlock_scope_abstract_unix_socket;
  } else {
    report.notes.push_back("signals and abstract unix sockets are not scoped: Landlock ABI " +
                           std::to_string(probe.abi) + " cannot (ABI 6, Linux 6.12, can)");
  }

  const RulesetAttr attr{report.handled, report.handled_net, report.scoped};
  UniqueFd ruleset{static_cast<int>(::syscall(sys_landlock_create_ruleset, &attr, ruleset_attr_size(probe.abi), 0U))};
  if (!ruleset) {
    const int error = errno;
    throw LandlockError(subject + ": landlock_create_ruleset failed: " + std::strerror(error));
  }
  // Adds one rule on `anchor`, the open `path`, and records it.
  const auto grant_anchor = [&](const std::filesystem::path& path, int anchor, std::uint64_t rights) {
    const PathBeneathAttr rule{rights, anchor};
    if (::syscall(sys_landlock_add_rule, ruleset.get(), landlock_rule_path_beneath, &rule, 0U) != 0) {
      const int error = errno;
      throw LandlockError(subject + ": landlock_add_rule for " + json_string_literal(path.native()) +
                          " failed: " + std::strerror(error));
    }
    report.grants.push_back({path, rights});
  };
  // Opens `path` and adds its rule; returns "" or, when the anchor cannot be opened, is not of
  // the expected kind, or (a directory) is no longer the canonical path that was checked,
  // why (optional grants are then skipped, never widened).
  const auto grant = [&](const std::filesystem::path& path, bool directory, std::uint64_t rights) -> std::string {
    const AnchorReading anchor = read_rule_anchor(path, directory);
    if (anchor.error != 0) {
      return std::strerror(anchor.error);
    }
    if (!directory && !S_ISCHR(anchor.info.st_mode)) {
      return "not a character device";
    }
    if (directory && anchor.recorded != path.native()) {
      return "it was replaced while the fence was prepared";
    }
    grant_anchor(path, anchor.anchor.get(), rights);
    return {};
  };

  if (probe.abi < 5) {
    report.notes.push_back("device ioctls are not restricted: Landlock ABI " + std::to_string(probe.abi) +
                           " cannot (ABI 5, Linux 6.10, can)");
  }
  // The devices every command drives: write_file, truncate and (ABI 5) ioctl_dev; never
  // resolve_unix, which belongs to the writable directories alone.
  const std::uint64_t device_rights = report.handled & landlock_file_rights() & ~landlock_resolve_unix;
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/full"}) {
    if (const std::string why = grant(device, false, device_rights); !why.empty()) {
      report.notes.push_back("skipped " + json_string_literal(device) + ": " + why);
    }
  }
  std::vector<std::filesystem::path> terminal_devices;
  if (!options.terminal.empty()) {
    const std::filesystem::path terminal = canonical_path(options.terminal);
    if (const std::string why = not_a_pseudo_terminal(terminal); !why.empty()) {
      throw LandlockError(subject + ": FenceOptions::terminal " + json_string_literal(options.terminal.native()) +
                          ": " + why);
    }
    for (const std::filesystem::path& device : {terminal, std::filesystem::path("/dev/tty")}) {
      if (const std::string why = grant(device, false, device_rights); !why.empty()) {
        throw LandlockError(
            concat(subject, ": cannot grant the command's terminal ", json_string_literal(device.native()), ": ", why));
      }
      terminal_devices.push_back(device);
    }
  }
  const std::shared_ptr<const std::vector<MountEntry>> mount_table = current_mount_table();
  const std::vector<MountEntry>& mounts = *mount_table;
  if (policy.mode == SandboxMode::workspace_write) {
    const std::filesystem::path& root = policy.workspace_root;
    const std::uint64_t directory_rights = report.handled & ~landlock_device_rights();
    if (root == root.root_path()) {
      throw LandlockError(subject + ": refusing the workspace root " + json_string_literal(root.native()) +
                          ": it would grant the whole filesystem, including the session log, the workspace entry "
                          "and the host, which decide later calls");
    }
    // Paths another local user could swap are refused before anything is granted.
    if (!options.allow_shared_directories) {
      const std::string advice = " (set FenceOptions::allow_shared_directories to trust it)";
      std::vector<const std::filesystem::path*> trusted; // judged already: the same spelling walks the same way
      for (const auto& [what, path] :
           {std::pair{"the workspace root", root}, std::pair{"the session cwd", options.session_cwd},
            std::pair{"the temporary root", temporary_root_of(options, environment)}}) {
        const std::filesystem::path& candidate = path; // a structured binding: clang 14 cannot capture it
        if (candidate.empty() || std::any_of(trusted.begin(), trusted.end(), [&](const std::filesystem::path* done) {
              return done->native() == candidate.native();
            })) {
          continue;
        }
        if (const std::string why = untrusted_directory(path); !why.empty()) {
          throw LandlockError(
              concat(subject, ": refusing ", what, " ", json_string_literal(path.native()), ": ", why, advice));
        }
        trusted.push_back(&path);
      }
    }
    // The log's canonical path names its guard and its private temporary directory: one walk.
    const std::filesystem::path canonical_log =
        options.session_log.empty() ? std::filesystem::path() : canonical_path(options.session_log);
    const std::filesystem::path* const known_log = options.session_log.empty() ? nullptr : &canonical_log;
    std::vector<Guard> guards = workspace_guards(policy, options, environment, mounts, known_log);
    // The session's private temporary directory: named now, made only once the workspace root
    // is known to expose nothing, so that a refused fence leaves nothing behind.
    const bool default_root = options.temporary_root.empty();
    // As spelled, not canonical: the root itself must not be a link (another local user may
    // have planted one under /tmp); where it is found is the canonical path of its parent.
    const std::filesystem::path temporary_root = temporary_root_of(options, environment);
    const std::string temporary_name = private_temporary_name(options, known_log);
    const std::filesystem::path temporary =
        canonical_path(temporary_root.parent_path()) / temporary_root.filename() / temporary_name;
    guards.push_back(make_guard("the session's temporary directory " + json_string_literal(temporary.native()),
                                temporary, false, mounts));
    const std::vector<FilesystemLocation> root_regions = reachable_beneath(mounts, root);
    for (const Guard& guard : guards) {
      if (const std::string why = exposure(guard, root, root_regions); !why.empty()) {
        throw LandlockError(
            concat(subject, ": refusing the workspace root ", json_string_literal(root.native()), ": ", why));
      }
    }
    if (const std::string why = grant(root, true, directory_rights); !why.empty()) {
      throw LandlockError(subject + ": cannot open the workspace root " + json_string_literal(root.native()) + ": " +
                          why);
    }
    std::vector<std::filesystem::path> granted{root};

    // The private directory is granted to this session alone; it must expose nothing either.
    {
      const PrivateTemporary private_temporary = make_private_temporary(temporary_root, temporary_name, default_root);
      const std::filesystem::path& made = private_temporary.path;
      if (temporary_name.starts_with("call-")) {
        owned_temporary = OwnedDirectory(made);
      }
      const std::vector<FilesystemLocation> regions = reachable_beneath(mounts, made);
      for (const Guard& guard : guards) {
        if (const std::string why = guard.canonical == temporary ? std::string() : exposure(guard, made, regions);
            !why.empty()) {
          throw LandlockError(concat(subject, ": refusing the session's temporary directory ",
                                     json_string_literal(made.native()), ": ", why));
        }
      }
      // On the directory make_private_temporary checked, not on its path opened again.
      grant_anchor(made, private_temporary.directory.get(), directory_rights);
      granted.push_back(made);
      report.temporary_directory = made;
    }

    // Optional directories: each is skipped (never widened) when it is missing, when it
    // would expose a guard, or when its own path runs through a directory entry this fence
    // lets the command replace (a later call would then grant wherever the entry points).
    const auto grant_optional = [&](const std::string& label, const std::filesystem::path& spelled) {
      Guard self = make_guard(label, spelled, false, mounts);
      const std::filesystem::path& directory = self.canonical;
      for (const std::filesystem::path& done : granted) {
        if (is_within(directory, done)) {
          return; // already writable through `done`
        }
      }
      std::string why;
      if (directory == directory.root_path()) {
        why = "a grant of the filesystem root would lift the fence";
      }
      const std::vector<FilesystemLocation> regions = reachable_beneath(mounts, directory);
      for (std::size_t i = 0; i < guards.size() && why.empty(); ++i) {
        why = exposure(guards[i], directory, regions);
      }
      for (const std::filesystem::path& entry : self.entries) {
        if (why.empty() && (is_within(entry.parent_path(), directory) ||
                            std::any_of(granted.begin(), granted.end(), [&](const std::filesystem::path& done) {
                              return is_within(entry.parent_path(), done);
                            }))) {
          why = "the command could replace " + json_string_literal(entry.native()) +
                " on the way to it, and a later call would grant what it then names";
        }
      }
      if (why.empty()) {
        why = grant(directory, true, directory_rights);
      }
      if (!why.empty()) {
        report.notes.push_back("skipped " + label + ": " + why);
        return;
      }
      granted.push_back(directory);
      self.what = "the granted directory " + json_string_literal(directory.native());
      guards.push_back(std::move(self));
    };
    if (options.shared_temporary_areas) {
      for (const char* area : {"/tmp", "/var/tmp", "/dev/shm"}) {
        grant_optional(json_string_literal(canonical_path(area).native()), area);
      }
    }
    for (const std::filesystem::path& extra : options.extra_writable) {
      if (!extra.is_absolute()) {
        report.notes.push_back("skipped " + json_string_literal(extra.native()) + ": not an absolute path");
      } else {
        grant_optional(json_string_literal(extra.native()), extra);
      }
    }
    const char* tmpdir = environment.tmpdir;
    if (options.shared_temporary_areas && tmpdir != nullptr && *tmpdir != '\0') {
      const std::string label = "$TMPDIR " + json_string_literal(tmpdir);
      if (const std::string why = tmpdir_ineligible(tmpdir); !why.empty()) {
        report.notes.push_back("skipped " + label + ": " + why);
      } else {
        grant_optional(label, tmpdir);
      }
    }
  }
  PreparedFence fence{std::move(report), std::move(ruleset), std::move(owned_temporary), std::move(filter),
                      std::move(refusing_filter)};
  fence.terminal_devices_ = std::move(terminal_devices);
  fence.mount_table_ = mount_table;
  if (!reads_later) {
    fence.fence_reads();
  }
  return fence;
#else
  (void)environment;
  (void)reads_later;
  throw LandlockError(subject + ": Landlock reported ABI " + std::to_string(probe.abi) +
                      " but this build has no Landlock support");
#endif
}

/// `prepare_fence` with the host's loader variables and runtime directory as they are now and
/// `tmpdir` as $TMPDIR (nullptr: none), for tests that pin $TMPDIR.
[[nodiscard]] inline PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                                 LandlockProbe probe, const char* tmpdir) {
  HostEnvironment environment = HostEnvironment::current();
  environment.tmpdir = tmpdir;
  return prepare_fence(policy, options, probe, environment);
}

} // namespace dsh::detail
