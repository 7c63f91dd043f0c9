// A Linux Landlock fence that makes a child process (the bash and terminal backends) obey
// the same resolved policy the model is told about.
//
// Use: prepare once, before fork, everything that allocates or may fail slowly
// (`PreparedFence::prepare`: the ruleset is created and filled in the parent); then in the
// child, between fork and exec, `PreparedFence::apply()` only issues system calls (the namespace
// layer's, then no_new_privs, landlock_restrict_self, the capability drop and the filter).
// `FencedCommand` wraps the whole fork/apply/exec sequence.
//
// What is restricted: every write-class filesystem right the running kernel's Landlock ABI
// knows (the `LANDLOCK_WRITE_RIGHTS` table). Reading, listing, executing and device ioctls
// are never restricted. See README "Enforcement" for what Landlock does not cover.
//
// The header reads: the error, the rights and the fence's report and options, the capabilities
// a fence drops, `PreparedFence`, then `FencedChild` and `FencedCommand`. The kernel interface,
// the guards, the child's steps, the supervisor and the builder are in <dsh/detail/>.
#pragma once

#include <dsh/command_output.hpp>
#include <dsh/denials.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/fence_launcher.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
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
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/// 1 when this build can use Landlock (Linux, and DSH_SANDBOX_POLICY_NO_LANDLOCK not
/// defined); 0 when every fence is reported as unsupported.
#if defined(__linux__) && !defined(DSH_SANDBOX_POLICY_NO_LANDLOCK)
#define DSH_SANDBOX_POLICY_HAS_LANDLOCK 1
#else
#define DSH_SANDBOX_POLICY_HAS_LANDLOCK 0
#endif

#if defined(__linux__)
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#endif

namespace dsh {

/// Thrown when a fence cannot be prepared (no Landlock and running unfenced was not allowed,
/// the workspace root cannot be opened, a Landlock call failed) or could not be applied in
/// the child. The message names the mode, the path or the failing call, and the reason.
class LandlockError : public Error {
public:
  using Error::Error;
};

/// One write-class Landlock filesystem access right.
struct LandlockRight {
  std::uint64_t bit;     ///< LANDLOCK_ACCESS_FS_* value
  std::string_view name; ///< the name reports use: the kernel name without the prefix, lower case
  int since_abi;         ///< first Landlock ABI that knows the right
  bool file_right;       ///< may be granted on a non-directory (landlock_add_rule refuses others)
};

/// Every right the fence handles, in kernel bit order: the write-class rights; IOCTL_DEV
/// (ABI 5), which gates the driver ioctls of a device opened after the fence (a terminal's
/// TCSETS among them); and RESOLVE_UNIX (ABI 9, Linux 7.1), which gates connect(2) and
/// sendmsg(2) to a pathname unix socket, so that a daemon listening outside the grants (docker,
/// the session bus, an agent) cannot act for the command. Deliberately absent: EXECUTE,
/// READ_FILE and READ_DIR (reads and execution are never restricted).
inline constexpr std::array<LandlockRight, 14> LANDLOCK_WRITE_RIGHTS{{
    {1ULL << 1, "write_file", 1, true},
    {1ULL << 4, "remove_dir", 1, false},
    {1ULL << 5, "remove_file", 1, false},
    {1ULL << 6, "make_char", 1, false},
    {1ULL << 7, "make_dir", 1, false},
    {1ULL << 8, "make_reg", 1, false},
    {1ULL << 9, "make_sock", 1, false},
    {1ULL << 10, "make_fifo", 1, false},
    {1ULL << 11, "make_block", 1, false},
    {1ULL << 12, "make_sym", 1, false},
    {1ULL << 13, "refer", 2, false},
    {1ULL << 14, "truncate", 3, true},
    {1ULL << 15, "ioctl_dev", 5, true},
    {1ULL << 16, "resolve_unix", 9, true},
}};

/// LANDLOCK_ACCESS_FS_RESOLVE_UNIX (Landlock ABI 9): granted only beneath the writable
/// directories, so the command reaches the sockets of its own servers there and no other.
inline constexpr std::uint64_t landlock_resolve_unix = 1ULL << 16;

/// The rights of `LANDLOCK_WRITE_RIGHTS` that Landlock ABI `abi` knows; 0 for `abi` <= 0.
[[nodiscard]] constexpr std::uint64_t landlock_write_rights(int abi) noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.since_abi <= abi) {
      rights |= right.bit;
    }
  }
  return rights;
}

/// The rights of `LANDLOCK_WRITE_RIGHTS` that may be granted on a non-directory.
[[nodiscard]] constexpr std::uint64_t landlock_file_rights() noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.file_right) {
      rights |= right.bit;
    }
  }
  return rights;
}

/// make_char, make_block and ioctl_dev: never granted beneath a directory, so that a fenced
/// command can neither make a node for a disk (or any device) and write through it, nor drive
/// a device found beneath a grant. ioctl_dev is granted only on the devices a command
/// legitimately drives (`PreparedFence::prepare` lists them).
[[nodiscard]] constexpr std::uint64_t landlock_device_rights() noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.name == "make_char" || right.name == "make_block" || right.name == "ioctl_dev") {
      rights |= right.bit;
    }
  }
  return rights;
}

/// LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (Landlock ABI 6): no connecting to an abstract unix
/// socket that a process outside the fenced command's own domain listens on.
inline constexpr std::uint64_t landlock_scope_abstract_unix_socket = 1ULL << 0;
/// LANDLOCK_SCOPE_SIGNAL (Landlock ABI 6): no signals to processes outside the fenced
/// command's own domain (its own children stay reachable).
inline constexpr std::uint64_t landlock_scope_signal = 1ULL << 1;
/// LANDLOCK_ACCESS_NET_BIND_TCP (Landlock ABI 4).
inline constexpr std::uint64_t landlock_net_bind_tcp = 1ULL << 0;
/// LANDLOCK_ACCESS_NET_CONNECT_TCP (Landlock ABI 4).
inline constexpr std::uint64_t landlock_net_connect_tcp = 1ULL << 1;

/// Names of the rights in `rights`, in table order, joined by ","; bits outside the table
/// are written as `bit<N>`. Returns "" for 0.
[[nodiscard]] inline std::string landlock_rights_to_string(std::uint64_t rights) {
  std::string text;
  const auto add = [&text](std::string_view name) {
    if (!text.empty()) {
      text += ',';
    }
    text += name;
  };
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if ((rights & right.bit) != 0) {
      add(right.name);
      rights &= ~right.bit;
    }
  }
  for (unsigned bit = 0; bit < 64U; ++bit) {
    if ((rights & (1ULL << bit)) != 0) {
      add("bit" + std::to_string(bit));
    }
  }
  return text;
}

/// How a prepared fence treats the child.
enum class FenceStatus : std::uint8_t {
  enforced,     ///< a Landlock domain is applied
  unrestricted, ///< danger-full-access: nothing to restrict, nothing applied
  unfenced,     ///< the policy asks for a fence but Landlock is unavailable and the caller allowed running without it
};

/// "enforced", "unrestricted" or "unfenced".
[[nodiscard]] constexpr std::string_view to_string(FenceStatus status) noexcept {
  switch (status) {
  case FenceStatus::enforced:
    return "enforced";
  case FenceStatus::unrestricted:
    return "unrestricted";
  case FenceStatus::unfenced:
    break;
  }
  return "unfenced";
}

/// Whether a fence adds the namespace layer (docs/enforcement.md#the-namespace-layer).
enum class Isolation : std::uint8_t {
  off,         ///< the base fence only, as before the layer existed
  best_effort, ///< the layer where the kernel grants it; the report names each row not applied and why
  required,    ///< the layer or nothing: prepare throws LandlockError when a row cannot be had
};

/// "off", "best-effort" or "required" (as dsh-sandboxed-bash --isolation spells them).
[[nodiscard]] constexpr std::string_view to_string(Isolation isolation) noexcept {
  switch (isolation) {
  case Isolation::off:
    return "off";
  case Isolation::best_effort:
    return "best-effort";
  case Isolation::required:
    break;
  }
  return "required";
}

/// One row of the namespace layer, in the order a child applies them.
struct FenceLayer {
  std::string name;     ///< "user namespace", "mount namespace", "read-only root", ...
  bool applied = false; ///< the children apply it (or the call fails: never skipped silently)
  std::string reason;   ///< why not, when not applied: the refused call and the kernel's reason
  /// Member-wise equality.
  bool operator==(const FenceLayer&) const = default;
};

/// One path the fence grants rights beneath (or on, for a device).
struct FenceGrant {
  std::filesystem::path path; ///< canonical path as opened
  std::uint64_t rights = 0;   ///< granted LANDLOCK_ACCESS_FS_* bits
  /// Member-wise equality.
  bool operator==(const FenceGrant&) const = default;
};

/// What a fence enforces, for logs and for the host's own checks.
struct FenceReport {
  FenceStatus status = FenceStatus::unfenced; ///< see FenceStatus
  SandboxMode mode = SandboxMode::read_only;  ///< the policy mode the fence was prepared for
  int abi = 0;                                ///< the running kernel's Landlock ABI, 0 when unavailable
  std::uint64_t handled = 0;                  ///< rights denied everywhere except beneath `grants`
  std::uint64_t unenforced = 0;   ///< write rights this library knows but the kernel's ABI does not: NOT restricted
  std::uint64_t scoped = 0;       ///< landlock_scope_* bits in force (ABI 6+): signals, abstract unix sockets
  std::uint64_t handled_net = 0;  ///< landlock_net_* bits refused everywhere (FenceOptions::deny_tcp)
  std::vector<FenceGrant> grants; ///< in the order the rules were added
  std::vector<std::string> notes; ///< areas or devices not granted and why; missing scopes; the reason when unfenced
  /// The session's private temporary directory (workspace-write), granted to this session
  /// alone; the command's TMPDIR points at it. Empty when none.
  std::filesystem::path temporary_directory{};
  /// True when the system-call filter (docs/enforcement.md#the-system-call-filter) is installed
  /// before exec: read-only and workspace-write, whether or not Landlock is available.
  bool syscall_filter = false;
  /// How the host's System V IPC and POSIX message queues are kept out of reach when
  /// `syscall_filter` is on: true when the command gets a new IPC namespace (the preparing host
  /// holds CAP_SYS_ADMIN, or the namespace layer applies; a child that gave CAP_SYS_ADMIN up
  /// before entering a fence without the layer gets the calls refused instead), false when the
  /// filter refuses the calls.
  bool ipc_namespace = false;
  /// The `FenceOptions::isolation` the fence was prepared with; `off` for danger-full-access.
  Isolation isolation = Isolation::off;
  /// The rows of the namespace layer, each applied or not with the reason; empty with
  /// `Isolation::off` and for danger-full-access.
  std::vector<FenceLayer> layers{};

  /// One line: status, mode, ABI, handled and unenforced rights, scopes, refused TCP access,
  /// grants, the namespace layer's rows and notes; paths as JSON string literals.
  [[nodiscard]] std::string describe() const {
    std::string text = std::string(to_string(status)) + " " + std::string(to_string(mode));
    if (abi > 0) {
      text += " (Landlock ABI " + std::to_string(abi) + ")";
    }
    if (status == FenceStatus::enforced) {
      text += "; handled: " + landlock_rights_to_string(handled);
      if (unenforced != 0) {
        text += "; not enforceable on this kernel: " + landlock_rights_to_string(unenforced);
      }
      if (scoped != 0) {
        text +=
            "; scoped: " + std::string((scoped & landlock_scope_signal) != 0 ? "signal" : "") +
            ((scoped & landlock_scope_signal) != 0 && (scoped & landlock_scope_abstract_unix_socket) != 0 ? "," : "") +
            ((scoped & landlock_scope_abstract_unix_socket) != 0 ? "abstract_unix_socket" : "");
      }
      if (handled_net != 0) {
        text +=
            "; refused: " + std::string((handled_net & landlock_net_bind_tcp) != 0 ? "bind_tcp" : "") +
            ((handled_net & landlock_net_bind_tcp) != 0 && (handled_net & landlock_net_connect_tcp) != 0 ? "," : "") +
            ((handled_net & landlock_net_connect_tcp) != 0 ? "connect_tcp" : "");
      }
      text += "; granted:";
      for (std::size_t i = 0; i < grants.size(); ++i) {
        text += (i == 0 ? " " : "; ") + json_string_literal(grants[i].path.native()) + " (" +
                rights_of_grant(grants[i].rights) + ")";
      }
      if (grants.empty()) {
        text += " nothing";
      }
    }
    if (!temporary_directory.empty()) {
      text += "; temporary directory: " + json_string_literal(temporary_directory.native());
    }
    if (syscall_filter) {
      text += ipc_namespace ? "; syscall filter: on, own IPC namespace" : "; syscall filter: on, System V IPC refused";
    }
    if (!layers.empty()) {
      text += "; namespace layer (" + std::string(to_string(isolation)) + "):";
      for (std::size_t i = 0; i < layers.size(); ++i) {
        text += (i == 0 ? " " : ", ") + layers[i].name;
        if (!layers[i].applied) {
          text += " NOT APPLIED (" + layers[i].reason + ")";
        }
      }
    }
    for (const std::string& note : notes) {
      text += "; " + note;
    }
    return text;
  }

private:
  /// "all handled", "all handled but X,Y" when only a few handled rights are missing, else the list.
  [[nodiscard]] std::string rights_of_grant(std::uint64_t rights) const {
    if (rights == handled) {
      return "all handled";
    }
    const std::uint64_t missing = handled & ~rights;
    if ((rights & ~handled) == 0 && std::popcount(missing) < std::popcount(rights)) {
      return "all handled but " + landlock_rights_to_string(missing);
    }
    return landlock_rights_to_string(rights);
  }
};

/// Options for `PreparedFence::prepare`.
///
/// The paths below decide later calls: a fenced command must never be able to change them,
/// or it could widen the policy of the next call (forge a mode switch in the session log,
/// swap the workspace for a symbolic link to "/", replace the host). In workspace-write the
/// fence therefore grants no temporary area or extra directory that would make one of them
/// (its content or any directory entry on the way to it) changeable, and refuses a
/// workspace root that would.
struct FenceOptions {
  /// When Landlock is unavailable (old or misconfigured kernel, non-Linux system), prepare
  /// an `unfenced` fence instead of throwing. Off by default: the fence fails closed.
  bool allow_unfenced = false;
  /// The session log the policy was resolved from, as the host opens it (empty: none). Its
  /// bytes and every directory entry on the way to it are protected.
  std::filesystem::path session_log{};
  /// The session cwd as the log's header spells it (empty: none). Every directory entry on
  /// the way to it, through symbolic links as spelled, is protected.
  std::filesystem::path session_cwd{};
  /// The host's own configuration and state, files or directories: their content and every
  /// directory entry on the way to them are protected. (The running executable always is.)
  std::vector<std::filesystem::path> protected_paths{};
  /// Directories to grant in workspace-write beyond the workspace and the temporary areas,
  /// absolute; each is granted only under the same rule as a temporary area (skipped, with a
  /// note, when it is missing or would expose a protected path). The model text does not
  /// mention them: grant only what the host tells the model about itself.
  std::vector<std::filesystem::path> extra_writable{};
  /// The pseudo-terminal the command runs on, for the terminal family: the path of the child
  /// side the host opened (ptsname(3) of its master). It and /dev/tty get write_file and
  /// ioctl_dev, so that programs which reopen their terminal (less, vim, a password prompt)
  /// work; /dev/tty names it because the system-call filter then refuses setsid and TIOCNOTTY,
  /// so the command can never take another controlling terminal. Every other device opened
  /// after the fence keeps its driver ioctls refused (ABI 5), the host's own terminal
  /// included. Empty: none.
  std::filesystem::path terminal{};
  /// Where the private temporary directory of each session is made in workspace-write: an
  /// absolute directory the host's effective user owns, with no group or other write bit
  /// (created with mode 0700 when missing; its parent must exist). Empty: the default,
  /// `$XDG_RUNTIME_DIR/dsh-sandbox-policy` when XDG_RUNTIME_DIR is an absolute directory of
  /// mode 0700 the user owns, else `/tmp/dsh-sandbox-policy-<euid>`.
  std::filesystem::path temporary_root{};
  /// Names the session's private temporary directory beneath `temporary_root`, so that every
  /// call of the session finds the files earlier calls left there. Empty: the session log's
  /// canonical path names it; without a log either, the fence gets a directory of its own,
  /// removed when the fence is destroyed. See `PreparedFence::remove_temporary_directory`.
  std::string session_id{};
  /// Also grant the shared temporary areas in workspace-write, as before the private
  /// directory existed: /tmp, /var/tmp, /dev/shm and an eligible $TMPDIR. Off by default:
  /// what one session's command leaves or changes there, another session's reads, runs or
  /// follows (another session's log or workspace kept there can be forged or swapped for a
  /// link; guards protect only this call's own session). Turn it on only for a host with one
  /// session at a time, or whose sessions keep nothing there.
  bool shared_temporary_areas = false;
  /// Trust a workspace root, session cwd or temporary root in workspace-write even when a
  /// directory on its path can be changed by another local user (writable by others, or by a
  /// group another user is in, without the sticky bit; or owned by another user than root): that
  /// user could then swap the workspace for a link, and the next call would grant the link's
  /// target. Off by default: such a path is refused, the way OpenSSH's StrictModes refuses it.
  bool allow_shared_directories = false;
  /// Refuse every TCP bind and connect in read-only and workspace-write (Landlock ABI 4,
  /// Linux 6.7; prepare throws LandlockError on an older kernel). Off by default: the model
  /// text says nothing about the network.
  bool deny_tcp = false;
  /// The namespace layer (docs/enforcement.md#the-namespace-layer) in read-only and
  /// workspace-write: `best_effort` by default (applied where the kernel grants it, and
  /// `FenceReport::layers` says exactly what is), `required` (prepare throws LandlockError when
  /// a row cannot be had) or `off` (the base fence only).
  Isolation isolation = Isolation::best_effort;
};

/// The outcome of `PreparedFence::apply`: `error` is 0 on success, otherwise the errno of
/// the system call named by `step` (a string literal).
struct [[nodiscard]] ApplyResult {
  int error = 0;             ///< errno of the failed call, 0 on success
  const char* step = "";     ///< the failed call, "" on success
  bool capabilities = false; ///< the failed call was part of dropping `FENCE_DROPPED_CAPABILITIES`
  int capability = -1;       ///< the capability whose drop failed, -1 when none
  /// True when the fence is in force (or nothing had to be applied).
  [[nodiscard]] constexpr bool ok() const noexcept { return error == 0; }
};

/// A fence ready to be applied; defined after the internals it is built on.
class PreparedFence;

/// A capability the fence removes from a command that holds it (root, or a host running with
/// file or ambient capabilities), and why.
struct FenceCapability {
  int number;              ///< the CAP_* value of <linux/capability.h>
  std::string_view name;   ///< as capabilities(7) spells it, in lower case
  std::string_view reason; ///< what a command could do with it that the Landlock fence does not stop
};

/// The capabilities a command run in read-only or workspace-write gives up before exec, from
/// its bounding, effective, permitted, inheritable and ambient sets (danger-full-access keeps
/// them all). Each reaches past the file fence: devices, the kernel, other processes, the
/// host's terminal, or machine-wide state that outlives the call. Kept on purpose, because
/// ordinary commands run as root use them within the fenced file tree: cap_chown,
/// cap_dac_override, cap_fowner, cap_fsetid, cap_setuid, cap_setgid, cap_net_bind_service,
/// cap_net_broadcast, cap_net_raw, cap_ipc_lock, cap_sys_chroot, cap_sys_resource,
/// cap_lease, cap_audit_write, cap_audit_read, cap_wake_alarm, cap_block_suspend.
inline constexpr std::array<FenceCapability, 24> FENCE_DROPPED_CAPABILITIES{{
    {2, "cap_dac_read_search", "open_by_handle_at(2) opens a file by handle, without a path"},
    {5, "cap_kill", "signals processes of every user, outside the command's own tree"},
    {8, "cap_setpcap", "changes capability sets and the bounding set"},
    {9, "cap_linux_immutable", "sets the immutable or append-only attribute of any file (the session log)"},
    {12, "cap_net_admin", "reconfigures the machine's network: interfaces, routes, firewall"},
    {15, "cap_ipc_owner", "bypasses the permissions of other processes' System V IPC objects"},
    {16, "cap_sys_module", "loads kernel modules"},
    {17, "cap_sys_rawio", "raw I/O on ports, memory and block devices"},
    {19, "cap_sys_ptrace", "traces and reads the memory of any process, the host's included"},
    {20, "cap_sys_pacct", "makes the kernel write process accounting records to a file"},
    {21, "cap_sys_admin", "mounts, namespaces, TIOCSTI on any terminal, and much more"},
    {22, "cap_sys_boot", "reboots the machine or loads a new kernel"},
    {23, "cap_sys_nice", "real-time priorities that starve the host and the time limit's supervisor"},
    {25, "cap_sys_time", "sets the clock the session log's timestamps come from"},
    {26, "cap_sys_tty_config", "hangs up and reconfigures terminals"},
    {27, "cap_mknod", "creates device nodes, e.g. a second name for the disk"},
    {30, "cap_audit_control", "changes the kernel's audit rules"},
    {31, "cap_setfcap", "gives file capabilities to programs it writes"},
    {32, "cap_mac_override", "overrides mandatory access control"},
    {33, "cap_mac_admin", "reconfigures mandatory access control"},
    {34, "cap_syslog", "reads and clears the kernel log"},
    {38, "cap_perfmon", "monitors the performance of the kernel and other processes"},
    {39, "cap_bpf", "loads BPF programs into the kernel"},
    {40, "cap_checkpoint_restore", "checkpoint and restore operations on other processes"},
}};

/// The capabilities of `FENCE_DROPPED_CAPABILITIES` as a bit mask (bit N is CAP number N).
[[nodiscard]] constexpr std::uint64_t fence_dropped_capabilities() noexcept {
  std::uint64_t mask = 0;
  for (const FenceCapability& capability : FENCE_DROPPED_CAPABILITIES) {
    mask |= 1ULL << static_cast<unsigned>(capability.number);
  }
  return mask;
}

/// The name of capability `number` in `FENCE_DROPPED_CAPABILITIES`, or "" when it is not there.
[[nodiscard]] constexpr std::string_view fence_capability_name(int number) noexcept {
  for (const FenceCapability& capability : FENCE_DROPPED_CAPABILITIES) {
    if (capability.number == number) {
      return capability.name;
    }
  }
  return {};
}

/// Which output stream of a fenced command a relayed chunk comes from.
enum class CommandStream : std::uint8_t {
  out = 1, ///< the command's stdout
  err = 2, ///< the command's stderr
};

/// Receives a fenced command's output as it arrives, in the host thread that waits for it:
/// the stream and the bytes (valid only during the call; chunks are not split on lines).
using OutputSink = std::function<void(CommandStream, std::string_view)>;

} // namespace dsh

// The fence's internals: PreparedFence, FencedChild and FencedCommand below are built on them,
// and they use the types above.
#include <dsh/detail/command_environment.hpp>
#include <dsh/detail/fence_child.hpp>
#include <dsh/detail/fence_guards.hpp>
#include <dsh/detail/fence_supervisor.hpp>
#include <dsh/detail/landlock_kernel.hpp>
#include <dsh/detail/namespace_layer.hpp>
#include <dsh/detail/private_temporary.hpp>
#include <dsh/detail/syscall_filter.hpp>
#include <dsh/detail/temporary_areas.hpp>

namespace dsh {
class FencedCommand;
} // namespace dsh

namespace dsh::detail {
struct LaunchWire; // the launch request's codec (<dsh/detail/launch_wire.hpp>)
/// Sends a supervisor from the launcher what it runs (LaunchWire::send).
void send_launch_request(int control, const FencedCommand& command, const PreparedFence& fence, const StartPlan& plan,
                         int cwd, ::mode_t mask);
} // namespace dsh::detail

namespace dsh {

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
  /// or, with the layer, when the protected paths cannot be known or a placeholder cannot be made.
  [[nodiscard]] static PreparedFence prepare(const ResolvedPolicy& policy, const FenceOptions& options = {}) {
    const detail::HostEnvironment environment = detail::HostEnvironment::current();
    PreparedFence fence = detail::prepare_fence(policy, options, detail::probe_landlock(), environment);
    fence.add_namespace_layer(policy, options, environment,
                              detail::protected_entries(policy.workspace_root, policy.protected_paths));
    fence.policy_ = policy;
    return fence;
  }

  /// `prepare(policy, options)` with the protected list `scan` instead of the policy's, for
  /// tests of the layer's binds on hand-built entries.
  [[nodiscard]] static PreparedFence prepare_with_protected(const ResolvedPolicy& policy, const FenceOptions& options,
                                                            const detail::ProtectedScan& scan) {
    const detail::HostEnvironment environment = detail::HostEnvironment::current();
    PreparedFence fence = detail::prepare_fence(policy, options, detail::probe_landlock(), environment);
    fence.add_namespace_layer(policy, options, environment, scan);
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
  /// filter, last (`report().syscall_filter`), so that nothing after it but exec is filtered.
  /// Async-signal-safe (raw system calls only), so it may run between fork and exec. Landlock
  /// and seccomp restrict the calling thread only: call it in a single-threaded child. Does
  /// nothing for an `unrestricted` fence. Returns the errno and the failing call when the
  /// kernel refused a step; the child must then not run the command (`FencedCommand` exits
  /// instead).
  ApplyResult apply() const noexcept { return enter(~0ULL, ~0ULL, false); }

  /// `TMPDIR=` followed by `report().temporary_directory`, the variable a fenced command gets
  /// (see FencedCommand); nullptr when the fence has no temporary directory. Async-signal-safe:
  /// built when the fence was prepared, valid as long as this fence.
  [[nodiscard]] const char* temporary_directory_assignment() const noexcept {
    return tmpdir_assignment_.empty() ? nullptr : tmpdir_assignment_.c_str();
  }

private:
  friend PreparedFence detail::prepare_fence(const ResolvedPolicy&, const FenceOptions&, detail::LandlockProbe,
                                             const detail::HostEnvironment&);
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

  /// Adds the namespace layer to the prepared base fence (`detail::plan_namespace_layer`):
  /// its rows in the report, the plan the children apply, the filter for a command in its own
  /// IPC namespace, and TMPDIR=/tmp when /tmp is the private directory.
  void add_namespace_layer(const ResolvedPolicy& policy, const FenceOptions& options,
                           const detail::HostEnvironment& environment, const detail::ProtectedScan& scan) {
    namespaces_ = detail::plan_namespace_layer(policy, options, environment, scan, report_);
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
  ApplyResult enter(std::uint64_t bounding, std::uint64_t ambient, bool supervised) const noexcept {
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
      if (const ApplyResult mounted = detail::apply_mount_layer(namespaces_, true); !mounted.ok()) {
        return mounted;
      }
      if (namespaces_.user_namespace) {
        bounding = ~0ULL; // a new user namespace starts with a full bounding set
      }
      filter = &filter_;
    } else if (report_.ipc_namespace) {
      if (::unshare(CLONE_NEWIPC) == 0) {
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
#else
      return {ENOSYS, "landlock_restrict_self"};
#endif
    }
    if (const detail::ChildStep failed = detail::drop_fence_capabilities(bounding, ambient); failed.error != 0) {
      return {failed.error, failed.step, true, failed.capability};
    }
    if (report_.syscall_filter) {
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
};

class FencedCommand;

/// A running fenced command, as `FencedCommand::spawn` returns it: a supervisor process that
/// owns the command and every process it starts. `wait()` relays the output and returns
/// when the call has ended and nothing of it is left. Move-only; destroying a child that was
/// not waited for ends the call (kills all its processes) and reaps the supervisor.
class FencedChild {
public:
  FencedChild(const FencedChild&) = delete;
  FencedChild& operator=(const FencedChild&) = delete;
  /// Transfers the call; `other` owns nothing afterwards.
  FencedChild(FencedChild&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), control_(std::move(other.control_)), out_(std::move(other.out_)),
        err_(std::move(other.err_)), sink_(std::move(other.sink_)), program_(std::move(other.program_)),
        report_(other.report_), report_bytes_(other.report_bytes_), status_(other.status_),
        timed_out_(other.timed_out_), in_(std::move(other.in_)), input_(std::move(other.input_)),
        input_done_(other.input_done_), launched_(other.launched_), supervisor_(std::move(other.supervisor_)),
        launch_note_(std::move(other.launch_note_)) {}
  /// Ends this call (as the destructor does), then takes `other`'s.
  FencedChild& operator=(FencedChild&& other) noexcept {
    if (this != &other) {
      abandon();
      pid_ = std::exchange(other.pid_, -1);
      control_ = std::move(other.control_);
      out_ = std::move(other.out_);
      err_ = std::move(other.err_);
      sink_ = std::move(other.sink_);
      program_ = std::move(other.program_);
      report_ = other.report_;
      report_bytes_ = other.report_bytes_;
      status_ = other.status_;
      timed_out_ = other.timed_out_;
      in_ = std::move(other.in_);
      input_ = std::move(other.input_);
      input_done_ = other.input_done_;
      launched_ = other.launched_;
      supervisor_ = std::move(other.supervisor_);
      launch_note_ = std::move(other.launch_note_);
    }
    return *this;
  }
  /// Ends the call if it was not waited for: every process of it is killed, the supervisor reaped.
  ~FencedChild() { abandon(); }

  /// The supervisor's pid (-1 once the call has ended). It is not the command's: signal the
  /// call through `terminate()`, which ends all of it. A supervisor from the launcher is the
  /// launcher's child, not the host's.
  [[nodiscard]] ::pid_t pid() const noexcept { return pid_; }

  /// How the supervisor was started: `Launch::launcher` (forked from the launcher) or
  /// `Launch::fork` (forked from the host).
  [[nodiscard]] Launch launched_by() const noexcept { return launched_ ? Launch::launcher : Launch::fork; }

  /// Why a call that could have used the launcher (`Launch::automatic`) forked the host
  /// instead; "" when it used the launcher or was asked to fork.
  [[nodiscard]] const std::string& launch_note() const noexcept { return launch_note_; }

  /// Relays the command's output (to the sink, else to the host's own stdout and stderr)
  /// until the call has ended: the command exited, was killed, reached the time limit, or
  /// `terminate()` was called; by then every process it started has been killed and reaped.
  /// Returns the exit code, 128 + the signal number when the command was killed,
  /// `FencedCommand::timed_out_exit_code` (124) when the time limit ended it; the same value
  /// on later calls. Throws LandlockError when the supervisor itself died before reporting
  /// (then processes the command detached may have survived), dsh::SystemError when poll
  /// fails, and whatever the sink throws (the call is then still running: destroy or wait).
  int wait();

  /// True when `wait()` returned because the time limit ended the call.
  [[nodiscard]] bool timed_out() const noexcept { return timed_out_; }

  /// Ends the call now: the supervisor kills the command and everything it started; `wait()`
  /// then returns 137 (SIGKILL) unless the command had already ended.
  void terminate() noexcept {
    if (control_) {
      ::shutdown(control_.get(), SHUT_WR); // the supervisor reads end of file
    }
  }

private:
  friend class FencedCommand;
  FencedChild(::pid_t pid, UniqueFd control, UniqueFd out, UniqueFd err, OutputSink sink, std::string program) noexcept
      : pid_(pid), control_(std::move(control)), out_(std::move(out)), err_(std::move(err)), sink_(std::move(sink)),
        program_(std::move(program)) {}

  /// Reads one whole report from the supervisor, and the pidfd that names it when the report
  /// carries one ("started"); false on end of file or error.
  [[nodiscard]] bool read_report(detail::SupervisorReport& report) noexcept {
    auto* bytes = reinterpret_cast<char*>(&report);
    std::size_t got = 0;
    while (got < sizeof report) {
      iovec part{bytes + got, sizeof report - got};
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> space{};
      msghdr message{};
      message.msg_iov = &part;
      message.msg_iovlen = 1;
      message.msg_control = space.data();
      message.msg_controllen = space.size();
      const ::ssize_t n =
          detail::retry_on_eintr([&]() noexcept { return ::recvmsg(control_.get(), &message, MSG_CMSG_CLOEXEC); });
      if (n <= 0) {
        return false;
      }
      for (cmsghdr* attached = CMSG_FIRSTHDR(&message); attached != nullptr;
           attached = CMSG_NXTHDR(&message, attached)) {
        if (attached->cmsg_level == SOL_SOCKET && attached->cmsg_type == SCM_RIGHTS &&
            attached->cmsg_len == CMSG_LEN(sizeof(int))) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(attached), sizeof fd);
          supervisor_.reset(fd);
        }
      }
      got += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Reads what `pipe` has and hands it on; closes `pipe` at end of file. Returns false when
  /// nothing was read.
  bool relay(UniqueFd& pipe, CommandStream stream, std::array<char, 16384>& buffer) {
    const ::ssize_t got = ::read(pipe.get(), buffer.data(), buffer.size());
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
      return false;
    }
    if (got <= 0) {
      pipe.reset();
      return false;
    }
    const std::string_view bytes(buffer.data(), static_cast<std::size_t>(got));
    if (sink_) {
      sink_(stream, bytes);
    } else {
      // When the host's own stream is gone the bytes are dropped; the pipe is still drained.
      (void)detail::write_without_sigpipe(stream == CommandStream::out ? STDOUT_FILENO : STDERR_FILENO, bytes.data(),
                                          bytes.size());
    }
    return true;
  }

  /// Writes the next part of the command's stdin (`in_` is non-blocking); closes `in_` when
  /// all of it is written, or the command closed its end (EPIPE, without SIGPIPE).
  void feed_input() noexcept {
    const std::size_t size = std::min<std::size_t>(input_.size() - input_done_, 65536);
    const ::ssize_t wrote = detail::write_some_without_sigpipe(in_.get(), input_.data() + input_done_, size);
    if (wrote < 0 && (errno == EINTR || errno == EAGAIN)) {
      return;
    }
    input_done_ += wrote > 0 ? static_cast<std::size_t>(wrote) : 0;
    if (wrote < 0 || input_done_ == input_.size()) {
      in_.reset();
    }
  }

  /// Ends the call without relaying and reaps the supervisor; noexcept.
  void abandon() noexcept {
    if (pid_ > 0) {
      terminate();
      end_supervisor();
    }
  }

  /// Waits until the supervisor has ended, with `pid_` -1 afterwards; its raw wait status when
  /// it is the host's child, else -1. A supervisor from the launcher is not the host's child:
  /// its end is the end of file on the socket (its last descriptor of the call closes as it
  /// exits), and waitpid is never called for its pid, which could name another child of the
  /// host by then.
  int end_supervisor() noexcept {
    const ::pid_t pid = std::exchange(pid_, -1);
    if (!launched_) {
      return pid > 0 ? reap(pid) : -1;
    }
    if (control_) {
      std::array<char, 256> rest{};
      while (detail::retry_on_eintr([&]() noexcept { return ::read(control_.get(), rest.data(), rest.size()); }) > 0) {
      }
      control_.reset();
    }
#if defined(__linux__)
    // Its descriptors close before it has exited: wait on its pidfd until the launcher has
    // reaped it (at once: the launcher ignores SIGCHLD), so nothing of the call is left.
    if (supervisor_) {
      pollfd exited{supervisor_.get(), POLLIN, 0};
      static_cast<void>(detail::retry_on_eintr([&]() noexcept { return ::poll(&exited, 1, -1); }));
      // A host that is a child subreaper inherits the supervisors of a launcher it stopped:
      // then it reaps this one itself (P_PIDFD names no other child).
      siginfo_t reaped{};
      constexpr idtype_t by_pidfd = static_cast<idtype_t>(3); // P_PIDFD (Linux 5.4)
      const bool ours = ::waitid(by_pidfd, static_cast<id_t>(supervisor_.get()), &reaped, WEXITED | WNOHANG) == 0 &&
                        reaped.si_pid != 0;
      for (int round = 0;
           !ours && round < 100000 && ::syscall(SYS_pidfd_send_signal, supervisor_.get(), 0, nullptr, 0U) == 0;
           ++round) {
        const timespec pause{0, 10000};
        ::nanosleep(&pause, nullptr);
      }
      supervisor_.reset();
    }
#endif
    return -1;
  }

  /// waitpid for the supervisor (retrying on EINTR); its raw status, or -1.
  [[nodiscard]] static int reap(::pid_t pid) noexcept {
    int status = 0;
    const ::pid_t done = detail::retry_on_eintr([&]() noexcept { return ::waitpid(pid, &status, 0); });
    return done < 0 ? -1 : status;
  }

  ::pid_t pid_ = -1;
  UniqueFd control_;
  UniqueFd out_;
  UniqueFd err_;
  OutputSink sink_;
  std::string program_;
  detail::SupervisorReport report_{}; // kept across calls: a sink that throws interrupts wait()
  std::size_t report_bytes_ = 0;
  int status_ = -1;
  bool timed_out_ = false;
  UniqueFd in_;                // the host's end of the command's stdin while `input_` is written; else closed
  std::string input_;          // the bytes for the command's stdin
  std::size_t input_done_ = 0; // how many of them are written
  bool launched_ = false;      // the supervisor is the launcher's child (Launch::launcher)
  UniqueFd supervisor_;        // a pidfd of the supervisor, sent with its "started" report
  std::string launch_note_;    // why Launch::automatic forked instead
};

/// A command to run under a fence: its argv is built and its program found through $PATH
/// at construction, so the child between fork and exec allocates nothing.
///
/// What `spawn` and `run` give the command, in every mode:
/// * stdio: stdin reads /dev/null; stdout and stderr are pipes the host owns and relays (to
///   the host's own stdout and stderr, or to `on_output`'s sink). No descriptor of the host
///   reaches it (everything above 2 is closed on exec: Landlock does not check files opened
///   before the fence), so it can neither truncate, seek nor reopen the host's stdio.
///   `redirect` and `controlling_terminal` hand it a descriptor anyway: the host's choice.
/// * a new session with no controlling terminal (TIOCSTI cannot type into the user's shell),
///   default signal dispositions and an empty signal mask.
/// * in read-only and workspace-write: no_new_privs and none of `FENCE_DROPPED_CAPABILITIES`.
/// * a lifetime: a supervisor process, the command's parent and a child subreaper
///   (PR_SET_CHILD_SUBREAPER), inherits every process the command orphans (double forks and
///   setsid included). When the command exits, is killed, reaches `time_limit`, or the host
///   calls `FencedChild::terminate` (or dies), the supervisor kills every descendant and
///   reaps it, walking /proc/thread-self/children until none is left; only then does `wait`
///   return. Why a subreaper: it works unprivileged and as root alike, adds one small
///   vfork to the call, and keeps pids and /proc as the command expects; a PID namespace needs
///   privilege (or a user namespace), a process group or session is left by setsid(2), and a
///   cgroup needs a delegated hierarchy. With the namespace layer (`report().layers`) the
///   supervisor also enters a new PID namespace (in the user namespace it makes for an
///   unprivileged host) before it starts the command, which is then PID 1 of it: when it ends
///   the kernel ends everything left in the namespace, and the walk finds nothing. Neither the
///   host's signal dispositions nor its subreaper flag are touched: the supervisor is a process
///   of its own.
/// * an environment: by default the host's as it was when this object was constructed, without
///   every variable whose name contains KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or
///   AUTH in any case (`removed_env_names` lists them; agent hosts keep model credentials
///   there); `keep_env`, `set_env`, `unset_env`, `clear_env` and `inherit_env` change it. When
///   the fence has a private temporary directory (`PreparedFence::temporary_directory_assignment`),
///   TMPDIR names it, replacing the host's, unless the host gave TMPDIR a value with `set_env`.
///   The program is still found through the host's $PATH (at construction).
/// The working directory is the host's unless `in_directory` is set. Move-only.
class FencedCommand {
public:
  /// Exit status of a child that could not apply the fence, drop its capabilities, or exec
  /// the program for a reason other than "not found".
  static constexpr int cannot_run_exit_code = 126;
  /// Exit status of a child whose program was not found.
  static constexpr int not_found_exit_code = 127;
  /// Exit status of a call ended by its time limit, as timeout(1) reports it.
  static constexpr int timed_out_exit_code = 124;

  /// Keeps `argv` and resolves `argv[0]` now: as given when it contains '/', else the first
  /// executable regular file `<dir>/argv[0]` for the directories of $PATH (default
  /// "/usr/local/bin:/usr/bin:/bin"); unresolved names stay as given and fail at exec.
  /// Throws ConfigError when `argv` is empty.
  /// The environment starts as the class comment's default, read from `environ` now.
  explicit FencedCommand(std::vector<std::string> argv) : args_(std::move(argv)), environment_(environ) {
    if (args_.empty()) {
      throw ConfigError("FencedCommand: argv must name a program, got an empty argv");
    }
    program_ = resolve_program(args_.front());
    for (std::string& arg : args_) {
      argv_.push_back(arg.data());
    }
    argv_.push_back(nullptr);
  }
  FencedCommand(const FencedCommand&) = delete;
  FencedCommand& operator=(const FencedCommand&) = delete;
  /// Transfers the command (the argv and envp pointers stay valid: the strings do not move).
  FencedCommand(FencedCommand&&) noexcept = default;
  /// Transfers the command.
  FencedCommand& operator=(FencedCommand&&) noexcept = default;
  /// Releases the argv and the environment.
  ~FencedCommand() = default;

  /// The host's choice: makes the child's descriptor `child_fd` (0, 1 or 2) a copy of the
  /// parent's `parent_fd` (which must stay open until the child has started) instead of
  /// /dev/null or a relayed pipe; the command can then do with that open file description
  /// whatever its access mode allows (truncate, seek). Returns `*this`. Throws
  /// ConfigError for a `child_fd` other than 0, 1 or 2, or a negative `parent_fd`.
  FencedCommand& redirect(int child_fd, int parent_fd) {
    if (child_fd < 0 || child_fd > 2 || parent_fd < 0) {
      throw ConfigError("FencedCommand::redirect: expected a child descriptor 0, 1 or 2 and an "
                        "open parent descriptor, got " +
                        std::to_string(child_fd) + " <- " + std::to_string(parent_fd));
    }
    stdio_[static_cast<std::size_t>(child_fd)] = parent_fd;
    return *this;
  }

  /// The host's choice, for the terminal family: runs the command on the terminal
  /// `terminal_fd` (the child side of a pseudo-terminal the host opened, e.g. with openpty):
  /// it becomes the controlling terminal of the command's new session and its descriptors 0,
  /// 1 and 2 (a later `redirect` overrides one of them). The descriptor must stay open until
  /// the child has started. Returns `*this`. Throws ConfigError for a negative one.
  FencedCommand& controlling_terminal(int terminal_fd) {
    if (terminal_fd < 0) {
      throw ConfigError("FencedCommand::controlling_terminal: expected an open terminal descriptor, got " +
                        std::to_string(terminal_fd));
    }
    terminal_ = terminal_fd;
    stdio_ = {terminal_fd, terminal_fd, terminal_fd};
    return *this;
  }

  /// Sends the command's output to `sink` instead of the host's stdout and stderr. Returns `*this`.
  FencedCommand& on_output(OutputSink sink) {
    sink_ = std::move(sink);
    return *this;
  }

  /// Ends the call after `limit` of wall-clock time from its start: the command and every
  /// process it started are killed and `wait`/`run` return `timed_out_exit_code`. Returns
  /// `*this`. Throws ConfigError when `limit` is not positive.
  FencedCommand& time_limit(std::chrono::milliseconds limit) {
    if (limit.count() <= 0) {
      throw ConfigError("FencedCommand::time_limit: expected a positive duration, got " +
                        std::to_string(limit.count()) + " ms");
    }
    limit_ms_ = limit.count();
    return *this;
  }

  /// How `spawn` starts the supervisor (default `Launch::automatic`: from the process's
  /// launcher, `FenceLauncher`, when it is configured and usable, else by forking the host).
  /// Returns `*this`.
  FencedCommand& launch(Launch how) noexcept {
    launch_ = how;
    return *this;
  }

  /// Makes the child change to `directory` before it applies the fence. Returns `*this`.
  FencedCommand& in_directory(std::filesystem::path directory) {
    directory_ = std::move(directory);
    return *this;
  }

  /// Gives the command the variable `name` with `value` (replacing the value it would have).
  /// A credential-looking name is the host's choice here, and so is TMPDIR: the fence's
  /// temporary directory then does not replace it. Returns `*this`. Throws ConfigError when
  /// `name` is empty or contains '=' or NUL, or `value` contains NUL (the message names the
  /// variable and where the NUL is, not the value, which may be a secret).
  FencedCommand& set_env(std::string name, std::string value) {
    environment_.set(std::move(name), std::move(value));
    return *this;
  }

  /// Removes the variable `name` from the command's environment. Returns `*this`. Throws
  /// ConfigError when `name` is empty or contains '=' or NUL.
  FencedCommand& unset_env(std::string_view name) {
    environment_.unset(name);
    return *this;
  }

  /// Starts the command's environment empty: only what `set_env` adds (and the fence's TMPDIR).
  /// Returns `*this`.
  FencedCommand& clear_env() {
    environment_.clear();
    return *this;
  }

  /// Back to the default environment (the class comment's), undoing `set_env`, `unset_env`
  /// and `clear_env`; what `keep_env` kept stays kept. Returns `*this`.
  FencedCommand& inherit_env() {
    environment_.inherit();
    return *this;
  }

  /// Passes the host's variable `name` on although its name looks like a credential: now, when
  /// the environment is inherited and the command has no `name` yet, and after every later
  /// `inherit_env`. Returns `*this`. Throws ConfigError when `name` is empty or contains '='
  /// or NUL.
  FencedCommand& keep_env(std::string name) {
    environment_.keep(std::move(name));
    return *this;
  }

  /// The names of the host's variables the credential rule withholds from the command, sorted;
  /// never their values. `keep_env` names are not listed; a name `set_env` gave a value still
  /// is (the host's own value is withheld); empty after `clear_env`.
  [[nodiscard]] std::vector<std::string> removed_env_names() const { return environment_.removed_names(); }

  /// The command's environment as `NAME=VALUE` entries, in the order it gets them, without the
  /// fence's TMPDIR (which is added when the fence has one).
  [[nodiscard]] const std::vector<std::string>& environment() const noexcept { return environment_.entries(); }

  /// The program that will be executed (resolved path, or argv[0] when not found).
  [[nodiscard]] const std::string& program() const noexcept { return program_; }
  /// The arguments, argv[0] first.
  [[nodiscard]] const std::vector<std::string>& args() const noexcept { return args_; }

  /// In a freshly forked child (e.g. forkpty's; not a vfork child: it writes the fence's TMPDIR
  /// into this object's environment array, which must be the child's own copy): enters its own
  /// session (a forkpty child already leads one and keeps its terminal), makes
  /// `controlling_terminal` its terminal, changes directory, copies the descriptors `redirect` named (descriptors not
  /// redirected stay as the caller left them), applies `fence`, drops the capabilities (read-only and workspace-write),
  /// resets signal dispositions and mask, then execs the program with the command's environment (the fence's TMPDIR
  /// included, see the class comment); never returns. No supervisor, relay or time limit: the caller owns the child's
  /// lifetime.
  ///
  /// Async-signal-safe. When a step fails the program is not run: with `error_pipe` >= 0 a
  /// `detail::ChildFailure` record is written to it (fence 1 for the fence and the
  /// capabilities), otherwise one line naming the failed call and errno goes to stderr; the
  /// child exits with `cannot_run_exit_code` (or `not_found_exit_code` when exec reported ENOENT).
  [[noreturn]] void exec_in_child(const PreparedFence& fence, int error_pipe = -1) const noexcept {
    detail::StartPlan plan;
    plan.stdio = stdio_;
    plan.terminal = terminal_;
    detail::reset_signal_dispositions();
#if defined(__linux__)
    if (fence.namespaces_.active) {
      // The session and its terminal are this process's; the command, forked into the new PID
      // namespace as its PID 1, stays in them while this process waits and passes on its end.
      if (const detail::ChildStep failed = detail::enter_own_session(plan.terminal); failed.error != 0) {
        fail_in_child(error_pipe, failed);
      }
      if (fence.namespaces_.user_namespace) {
        if (const ApplyResult entered = detail::enter_user_namespace(fence.namespaces_); !entered.ok()) {
          fail_in_child(error_pipe, {entered.error, entered.step, detail::ChildStage::fence, -1});
        }
      }
      if (const ApplyResult entered = detail::enter_pid_namespace_by_fork(); !entered.ok()) {
        fail_in_child(error_pipe, {entered.error, entered.step, detail::ChildStage::fence, -1});
      }
      plan.supervised = true;
      plan.keep_session = true;
    }
#endif
    fail_in_child(error_pipe, start_in_child(fence, plan));
  }

  /// Starts the command under `fence` with the stdio, session, capabilities, environment and
  /// supervisor described for the class; returns once the program is executing. Call `wait()`
  /// on the result to relay its output and collect its status.
  /// Throws LandlockError when the child could not apply the fence or drop its capabilities,
  /// or the supervisor cannot watch the command's processes (/proc/thread-self/children is
  /// missing: Linux 3.17 with CONFIG_PROC_CHILDREN is required; on other systems always);
  /// dsh::SystemError when socketpair/pipe/fork fail or the program could not be executed.
  /// Nothing is left running when it throws.
  [[nodiscard]] FencedChild spawn(const PreparedFence& fence) const { return start(fence, sink_, {}); }

  /// `spawn(fence)`, then `wait()`: relays the output and returns the exit status as the
  /// shell reports it (`timed_out_exit_code` when the time limit ended the call).
  [[nodiscard]] int run(const PreparedFence& fence) const { return spawn(fence).wait(); }

  /// Runs the command under `fence` as `run` does, with its stdout and stderr captured instead
  /// of relayed (each cut at `options.max_bytes`, the rest read and dropped) and
  /// `options.stdin_bytes` as its stdin, and finds the writes the fence refused it in its stderr
  /// (`PreparedFence::denial_scanner` from the command's directory: `in_directory`, else the
  /// host's working directory). Returns the status, both streams, `truncated`, `denied` and the
  /// denied paths (docs/enforcement.md#denials). Throws ConfigError when stdout or stderr is
  /// redirected or the command runs on a terminal (there is nothing to capture then), and what
  /// `spawn` and `FencedChild::wait` throw. Defined in <dsh/detail/capture_call.hpp>.
  [[nodiscard]] CommandOutput capture(const PreparedFence& fence, CaptureOptions options = {}) const;

  /// Waits for `pid` (retrying on EINTR); returns its exit code, or 128 + the signal number
  /// when it was killed, or -1 when waitpid failed. For children started with
  /// `exec_in_child`; a `FencedChild` has its own `wait()`.
  [[nodiscard]] static int wait_for(::pid_t pid) noexcept {
    const int status = FencedChild::reap(pid);
    return status < 0 ? -1 : exit_status(status);
  }

private:
  friend struct detail::LaunchWire;

  /// The command a supervisor forked from the launcher runs: everything as the host's
  /// FencedCommand resolved it (`program` already found, `environment` final).
  FencedCommand(std::vector<std::string> args, std::string program, detail::CommandEnvironment environment,
                std::filesystem::path directory, long long limit_ms)
      : args_(std::move(args)), program_(std::move(program)), environment_(std::move(environment)),
        directory_(std::move(directory)), limit_ms_(limit_ms) {
    for (std::string& arg : args_) {
      argv_.push_back(arg.data());
    }
    argv_.push_back(nullptr);
  }

  /// `spawn`, with `sink` receiving the output and, when `input` is not empty, a pipe as the
  /// command's stdin that the child's `wait()` writes `input` to (instead of /dev/null or a
  /// `redirect` of descriptor 0).
  [[nodiscard]] FencedChild start(const PreparedFence& fence, OutputSink sink, std::string input) const {
#if defined(__linux__)
    std::array<int, 2> control{-1, -1};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control.data()) != 0) {
      throw SystemError(errno, "FencedCommand::spawn: socketpair");
    }
    UniqueFd host_end{control[0]};
    UniqueFd supervisor_end{control[1]};
    UniqueFd out_read;
    UniqueFd out_write;
    UniqueFd err_read;
    UniqueFd err_write;
    UniqueFd in_read;
    UniqueFd in_write;
    detail::StartPlan plan;
    plan.stdio = stdio_;
    plan.terminal = terminal_;
    plan.null_stdin = true;
    if (!input.empty()) {
      make_pipe(in_read, in_write);
      // Non-blocking for the host alone: the command's end is another open file description.
      if (::fcntl(in_write.get(), F_SETFL, O_NONBLOCK) != 0) {
        throw SystemError(errno, "FencedCommand::spawn: fcntl(O_NONBLOCK)");
      }
      plan.stdio[0] = in_read.get();
    }
    if (plan.stdio[1] < 0) {
      make_pipe(out_read, out_write);
      plan.stdio[1] = out_write.get();
    }
    if (plan.stdio[2] < 0) {
      make_pipe(err_read, err_write);
      plan.stdio[2] = err_write.get();
    }
    std::string note;
    bool launched = false;
    if (launch_ != Launch::fork) {
      // The launcher forks the supervisor from its own small image: nothing of the host is
      // copied, whatever its size (docs/performance.md#the-launcher).
      // The host's working directory as the call's (a fork would inherit it).
      const UniqueFd cwd(detail::retry_on_eintr([] { return ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC); }));
      if (!cwd) {
        throw SystemError(errno, "FencedCommand::spawn: open(\".\")");
      }
      ::mode_t mask = 022;
      note = detail::LauncherClient::instance().hand_over(supervisor_end.get(), mask);
      if (note.empty()) {
        // Should this throw, the supervisor reads end of file and exits without running anything.
        detail::send_launch_request(host_end.get(), *this, fence, plan, cwd.get(), mask);
        launched = true;
      } else if (launch_ == Launch::launcher) {
        throw SystemError(ENOEXEC, "FencedCommand::spawn: cannot run " + json_string_literal(program_) +
                                       " from the fence launcher (Launch::launcher): " + note);
      }
    }
    ::pid_t pid = -1;
    if (!launched) {
      pid = ::fork();
      if (pid < 0) {
        throw SystemError(errno, "FencedCommand::spawn: fork");
      }
      if (pid == 0) {
        supervise(fence, plan, supervisor_end.get());
      }
    }
    supervisor_end.reset();
    out_write.reset();
    err_write.reset();
    in_read.reset();
    FencedChild child(pid, std::move(host_end), std::move(out_read), std::move(err_read), std::move(sink), program_);
    child.launched_ = launched;
    child.launch_note_ = launch_ == Launch::automatic ? std::move(note) : std::string();
    child.in_ = std::move(in_write);
    child.input_ = std::move(input);
    detail::SupervisorReport report{};
    if (!child.read_report(report) || report.kind != detail::SupervisorReport::started) {
      const int status = child.end_supervisor();
      throw_start_failure(fence, report, status);
    }
    if (launched) {
      child.pid_ = report.stage; // the supervisor's pid, which it reports with "started"
    }
    return child;
#else
    (void)fence;
    (void)sink;
    (void)input;
    throw LandlockError("cannot run " + json_string_literal(program_) +
                        ": supervising a command's processes needs Linux (a child subreaper and "
                        "/proc/thread-self/children)");
#endif
  }

  /// The shell's number for a waitpid status.
  [[nodiscard]] static int exit_status(int status) noexcept {
    if (WIFEXITED(status)) {
      return WEXITSTATUS(status);
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }

  [[nodiscard]] static std::string resolve_program(const std::string& name) {
    if (name.find('/') != std::string::npos) {
      return name;
    }
    const char* path_env = std::getenv("PATH");
    const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= search.size()) {
      const std::size_t end = std::min(search.find(':', start), search.size());
      std::string candidate = end == start ? std::string(".") : search.substr(start, end - start);
      candidate.append("/").append(name);
      struct stat info {};
      if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
      start = end + 1;
    }
    return name;
  }

  /// A close-on-exec pipe for one relayed stream.
  static void make_pipe(UniqueFd& reader, UniqueFd& writer) {
    std::array<int, 2> ends{-1, -1};
#if defined(__linux__)
    if (::pipe2(ends.data(), O_CLOEXEC) != 0) {
#else
    if (::pipe(ends.data()) != 0) {
#endif
      throw SystemError(errno, "FencedCommand::spawn: pipe");
    }
    reader.reset(ends[0]);
    writer.reset(ends[1]);
  }

  /// The child's way from fork to exec; returns only when a step failed (that step).
  /// Signal dispositions must already be the defaults (the child shares no handler with the
  /// host then, even after vfork). Async-signal-safe. The fence's TMPDIR goes into the
  /// environment's spare slot here: in the supervisor's memory (a forked copy of the host's,
  /// which vfork shares with the command until exec) or in `exec_in_child`'s forked child,
  /// never in the host's.
  [[nodiscard]] detail::ChildStep start_in_child(const PreparedFence& fence,
                                                 const detail::StartPlan& plan) const noexcept {
    if (const detail::ChildStep failed =
            plan.keep_session ? detail::ChildStep{} : detail::enter_own_session(plan.terminal);
        failed.error != 0) {
      return failed;
    }
    if (!directory_.empty() && ::chdir(directory_.c_str()) != 0) {
      return {errno, "chdir", detail::ChildStage::setup, -1};
    }
    if (const detail::ChildStep failed = detail::install_stdio(plan.stdio, plan.null_stdin); failed.error != 0) {
      return failed;
    }
    if (const ApplyResult applied = fence.enter(plan.bounding, plan.ambient, plan.supervised); !applied.ok()) {
      return {applied.error, applied.step,
              applied.capabilities ? detail::ChildStage::capabilities : detail::ChildStage::fence, applied.capability};
    }
    sigset_t none;
    ::sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) {
      return {errno, "sigprocmask", detail::ChildStage::setup, -1};
    }
    detail::close_inherited_descriptors_on_exec();
    ::execve(program_.c_str(), argv_.data(), environment_.envp(fence.temporary_directory_assignment()));
    return {errno, "execve", detail::ChildStage::exec, -1};
  }

  /// The exit status of a child that stopped at `failed`.
  [[nodiscard]] static int failure_exit_code(const detail::ChildStep& failed) noexcept {
    return failed.stage == detail::ChildStage::exec && failed.error == ENOENT ? not_found_exit_code
                                                                              : cannot_run_exit_code;
  }

  [[noreturn]] static void fail_in_child(int error_pipe, const detail::ChildStep& failed) noexcept {
    const bool fence = failed.stage == detail::ChildStage::fence || failed.stage == detail::ChildStage::capabilities;
    if (error_pipe >= 0) {
      const detail::ChildFailure failure{fence ? 1 : 0, failed.error};
      detail::write_all(error_pipe, reinterpret_cast<const char*>(&failure), sizeof failure);
    } else {
      detail::write_text(STDERR_FILENO, fence ? "dsh: refusing to run the command: the fence could not be "
                                                "applied ("
                                              : "dsh: cannot run the command (");
      detail::write_text(STDERR_FILENO, failed.step);
      detail::write_text(STDERR_FILENO, " failed, errno ");
      detail::write_number(STDERR_FILENO, failed.error);
      detail::write_text(STDERR_FILENO, ")\n");
    }
    ::_exit(failure_exit_code(failed));
  }

#if defined(__linux__)
  /// The supervisor: the forked process between the host and the command. It never returns.
  ///
  /// Blocks every signal (it is stopped only by SIGKILL, and it reads SIGCHLD through a
  /// signalfd), resets the dispositions that are not the default (as its status in /proc
  /// lists them, with its capability sets), becomes a child subreaper, starts the command with
  /// vfork (the command shares this copy of the host only until exec), reports "started",
  /// closes everything of the host it inherited, then reaps until the command ends, the time
  /// limit passes or the host hangs up; kills and reaps every remaining descendant; reports
  /// how the call ended and exits with that status. Async-signal-safe throughout: the host
  /// may have other threads, whose locks this copy of it must never wait for.
  [[noreturn]] void supervise(const PreparedFence& fence, const detail::StartPlan& host_plan,
                              int report_fd) const noexcept {
    sigset_t all;
    ::sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    const detail::ThreadStatus own = detail::read_thread_status();
    // SIGCHLD always: SA_NOCLDWAIT makes even its default disposition reap every child
    // unseen, and /proc lists it neither as ignored nor as caught.
    detail::reset_signal_dispositions(own.not_default | 1ULL << (SIGCHLD - 1));
    detail::StartPlan plan = host_plan;
    plan.bounding = own.bounding;
    plan.ambient = own.ambient;
    detail::SupervisorReport report{};
    const auto fail = [&report, report_fd](const detail::ChildStep& failed) noexcept {
      report.kind = detail::SupervisorReport::failed;
      report.stage = static_cast<int>(failed.stage);
      report.error = failed.error;
      report.detail = failed.capability;
      for (std::size_t i = 0; i + 1 < report.step.size() && failed.step[i] != '\0'; ++i) {
        report.step[i] = failed.step[i];
      }
      detail::write_all(report_fd, reinterpret_cast<const char*>(&report), sizeof report);
      ::_exit(failure_exit_code(failed));
    };
    constexpr detail::ChildStage supervision = detail::ChildStage::supervision;
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0) {
      fail({errno, "prctl(PR_SET_CHILD_SUBREAPER)", supervision, -1});
    }
    const int children = ::open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
    if (children < 0) {
      fail({errno, "open(\"/proc/thread-self/children\")", supervision, -1});
    }
    sigset_t child_signal;
    ::sigemptyset(&child_signal);
    ::sigaddset(&child_signal, SIGCHLD);
    const int child_events = ::signalfd(-1, &child_signal, SFD_CLOEXEC | SFD_NONBLOCK);
    if (child_events < 0) {
      fail({errno, "signalfd", supervision, -1});
    }
    // The user and PID namespaces are the supervisor's, so that the command it starts is PID 1
    // of the new one and the kernel ends everything in it with the command.
    if (const ApplyResult entered = fence.enter_supervisor_namespaces(); !entered.ok()) {
      fail({entered.error, entered.step, detail::ChildStage::fence, -1});
    }
    if (fence.enters_user_namespace()) {
      plan.bounding = ~0ULL;
      plan.ambient = 0;
    }
    plan.supervised = true;
    const long long deadline = limit_ms_ > 0 ? detail::monotonic_ms() + limit_ms_ : 0;
    ::pid_t command = -1;
    if (const detail::ChildStep failed = start_command(fence, plan, command); failed.error != 0) {
      fail(failed);
    }
    report.kind = detail::SupervisorReport::started;
    report.stage = ::getpid(); // the supervisor's own pid: the host does not know it when the launcher forked it
    report.detail = command;
    {
      // With a pidfd of itself, by which a host that is not its parent can see it gone.
      const UniqueFd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0U)));
      detail::send_report(report_fd, report, self.get());
    }
    detail::close_all_except({report_fd, children, child_events});

    int status = 0;
    bool command_ended = false;
    bool none_left = false; // waitpid answered ECHILD: no child, so no descendant either
    int ending = detail::command_exited;
    const auto reap_ready = [&]() noexcept {
      for (;;) {
        int raw = 0;
        const ::pid_t done = ::waitpid(-1, &raw, WNOHANG | __WALL);
        if (done <= 0) {
          none_left = done < 0 && errno == ECHILD;
          return;
        }
        if (done == command) {
          status = raw;
          command_ended = true;
        }
      }
    };
    for (;;) {
      reap_ready();
      if (command_ended) {
        break;
      }
      int timeout = -1;
      if (deadline != 0) {
        const long long remaining = deadline - detail::monotonic_ms();
        if (remaining <= 0) {
          ending = detail::time_limit_reached;
          break;
        }
        timeout = static_cast<int>(std::min<long long>(remaining, std::numeric_limits<int>::max()));
      }
      std::array<pollfd, 2> events{{{child_events, POLLIN, 0}, {report_fd, POLLIN, 0}}};
      if (::poll(events.data(), events.size(), timeout) < 0 && errno != EINTR) {
        ending = detail::host_cancelled;
        break;
      }
      if (events[0].revents != 0) {
        signalfd_siginfo drained{};
        while (::read(child_events, &drained, sizeof drained) > 0) {
        }
      }
      if (events[1].revents != 0) { // the host hung up: terminate() or its own death
        ending = detail::host_cancelled;
        break;
      }
    }
    if (!command_ended) {
      ::kill(command, SIGKILL);
    }
    // Kill what is left, then reap one, then look again: whoever a killed process orphans
    // is reparented here before its parent can be reaped, so the next look finds it. For
    // the same reason, ECHILD after the command was reaped means nothing of the call is left.
    while (!none_left) {
      detail::kill_listed_children(children);
      int raw = 0;
      const ::pid_t done = ::waitpid(-1, &raw, __WALL);
      if (done < 0) {
        if (errno == EINTR) {
          continue;
        }
        break; // ECHILD: nothing of the call is left
      }
      if (done == command && !command_ended) {
        status = raw;
        command_ended = true;
      }
    }
    int exit_code = exit_status(status);
    if (ending == detail::time_limit_reached) {
      exit_code = timed_out_exit_code;
    } else if (ending == detail::host_cancelled && exit_code < 0) {
      exit_code = 128 + SIGKILL;
    }
    report.kind = detail::SupervisorReport::ended;
    report.error = exit_code;
    report.detail = ending;
    detail::write_all(report_fd, reinterpret_cast<const char*>(&report), sizeof report);
    ::_exit(exit_code & 0xff);
  }

  /// Starts the command with vfork and stores its pid in `command`; returns the failed step,
  /// or error 0. The child reports a failure through a close-on-exec pipe (its end closes
  /// when exec succeeds), which works whether vfork shares this memory or, as under some
  /// sanitizers, behaves like fork.
  [[nodiscard]] detail::ChildStep start_command(const PreparedFence& fence, const detail::StartPlan& plan,
                                                ::pid_t& command) const noexcept {
    int ends[2] = {-1, -1};
    if (::pipe2(ends, O_CLOEXEC) != 0) {
      return {errno, "pipe2", detail::ChildStage::supervision, -1};
    }
    command = ::vfork();
    if (command == 0) {
      ::close(ends[0]);
      // If the supervisor dies the command dies with it; what it started is then on its own
      // (LandlockError from wait()).
      ::prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(SIGKILL), 0UL, 0UL, 0UL);
      const detail::ChildStep failed = start_in_child(fence, plan);
      (void)detail::write_all(ends[1], reinterpret_cast<const char*>(&failed), sizeof failed);
      ::_exit(failure_exit_code(failed));
    }
    const int vfork_error = errno;
    ::close(ends[1]);
    if (command < 0) {
      ::close(ends[0]);
      return {vfork_error, "vfork", detail::ChildStage::supervision, -1};
    }
    detail::ChildStep failed{};
    std::size_t got = 0;
    while (got < sizeof failed) {
      const ::ssize_t part = ::read(ends[0], reinterpret_cast<char*>(&failed) + got, sizeof failed - got);
      if (part < 0 && errno == EINTR) {
        continue;
      }
      if (part <= 0) {
        break;
      }
      got += static_cast<std::size_t>(part);
    }
    ::close(ends[0]);
    if (got == 0) {
      return {}; // the pipe closed on exec: the command is running
    }
    int ignored = 0;
    while (::waitpid(command, &ignored, 0) < 0 && errno == EINTR) {
    }
    if (got < sizeof failed || failed.error == 0) {
      return {EIO, "reading the child's start report", detail::ChildStage::supervision, -1};
    }
    return failed;
  }
#endif

  /// Throws the error a failed start reported (`report`), or that the supervisor died
  /// (`status` is its raw wait status).
  [[noreturn]] void throw_start_failure(const PreparedFence& fence, const detail::SupervisorReport& report,
                                        int status) const {
    const std::string what = "cannot run " + json_string_literal(program_);
    if (report.kind != detail::SupervisorReport::failed) {
      throw SystemError(ECHILD, what + ": its supervisor ended before starting it (wait status " +
                                    std::to_string(status) + ")");
    }
    const std::string step(report.step.data());
    const std::string under = what + " under the " + std::string(to_string(fence.report().mode)) + " fence: ";
    switch (static_cast<detail::ChildStage>(report.stage)) {
    case detail::ChildStage::fence:
      throw LandlockError(under + "the child could not enter it: " + step + " failed: " + std::strerror(report.error));
    case detail::ChildStage::capabilities: {
      const std::string_view capability = fence_capability_name(report.detail);
      throw LandlockError(under + "the child could not drop its capabilities: " + step +
                          (capability.empty() ? std::string() : " for " + std::string(capability)) +
                          " failed: " + std::strerror(report.error));
    }
    case detail::ChildStage::supervision:
      throw LandlockError(what + ": its processes cannot be supervised, so nothing would end them with the call: " +
                          step + " failed: " + std::strerror(report.error));
    case detail::ChildStage::setup:
      throw SystemError(report.error, what + ": " + step + " failed");
    case detail::ChildStage::exec:
      break;
    }
    throw SystemError(report.error, what);
  }

  std::vector<std::string> args_;
  std::vector<char*> argv_;
  std::string program_;
  detail::CommandEnvironment environment_;
  std::filesystem::path directory_;
  std::array<int, 3> stdio_{-1, -1, -1};
  int terminal_ = -1;
  long long limit_ms_ = 0;
  OutputSink sink_;
  Launch launch_ = Launch::automatic;
};

inline int FencedChild::wait() {
  if (pid_ < 0) {
    return status_;
  }
  // Not zeroed: only what read() writes is used, and every page written while the supervisor
  // (a forked copy of this process) lives is copied first.
  std::array<char, 16384> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  detail::SupervisorReport& report = report_;
  std::size_t& report_bytes = report_bytes_;
  bool listening = true; // until the end report or the end of file
  while (listening && control_) {
    std::array<pollfd, 4> ready{{{control_.get(), POLLIN, 0},
                                 {out_.get(), POLLIN, 0},
                                 {err_.get(), POLLIN, 0},
                                 {in_ ? in_.get() : -1, POLLOUT, 0}}};
    if (::poll(ready.data(), ready.size(), -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw SystemError(errno, "FencedChild::wait: poll");
    }
    if (ready[1].revents != 0) {
      relay(out_, CommandStream::out, buffer);
    }
    if (ready[2].revents != 0) {
      relay(err_, CommandStream::err, buffer);
    }
    if (ready[3].revents != 0) {
      feed_input();
    }
    if (ready[0].revents != 0) {
      const ::ssize_t got =
          ::read(control_.get(), reinterpret_cast<char*>(&report) + report_bytes, sizeof report - report_bytes);
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got > 0) {
        report_bytes += static_cast<std::size_t>(got);
      }
      if (got <= 0) {
        control_.reset();
      } else if (report_bytes == sizeof report && report.kind == detail::SupervisorReport::ended) {
        listening = false; // the socket's end of file is the supervisor's exit (end_supervisor)
      } else if (report_bytes == sizeof report) {
        report_bytes = 0; // not an end report: keep listening
      }
    }
  }
  in_.reset();
  // The call has ended and its processes are gone: take what they left in the pipes, but
  // never wait for more (a descriptor passed outside the call could keep a pipe open).
  for (UniqueFd* pipe : {&out_, &err_}) {
    const CommandStream stream = pipe == &out_ ? CommandStream::out : CommandStream::err;
    for (int round = 0; *pipe && round < 1024; ++round) {
      pollfd ready{pipe->get(), POLLIN, 0};
      if (::poll(&ready, 1, 0) <= 0 || !relay(*pipe, stream, buffer)) {
        break;
      }
    }
    pipe->reset();
  }
  const bool ended = report_bytes == sizeof report && report.kind == detail::SupervisorReport::ended;
  int raw = -1;
  if (launched_ && ended) {
    // Everything of the call is reaped; what is left is the launcher's child exiting, which
    // the host need not wait for (it is not the host's child, and holds nothing of the call).
    pid_ = -1;
    supervisor_.reset();
  } else {
    raw = end_supervisor();
  }
  control_.reset();
  if (ended) {
    status_ = report.error;
    timed_out_ = report.detail == detail::time_limit_reached;
    return status_;
  }
  status_ = raw < 0 ? -1 : (WIFEXITED(raw) ? WEXITSTATUS(raw) : WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : -1);
  // A supervisor from the launcher has no wait status here: -1 then.
  throw LandlockError("the supervisor of " + json_string_literal(program_) + " ended without reporting (status " +
                      std::to_string(status_) +
                      "): the command was killed with it, but processes it detached may have survived the call");
}

/// The kernel's Landlock ABI version, or 0 when Landlock is unavailable (or this is not a
/// Landlock build). Asks the kernel on every call.
[[nodiscard]] inline int landlock_abi() noexcept { return detail::probe_landlock().abi; }

} // namespace dsh

// The builder of PreparedFence (declared in <dsh/detail/landlock_kernel.hpp>) and
// FencedCommand::capture: they need the classes complete.
#include <dsh/detail/capture_call.hpp>
#include <dsh/detail/fence_builder.hpp>
#include <dsh/detail/launch_wire.hpp>
