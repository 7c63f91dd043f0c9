/// @file
/// The fence's base types: `LandlockError`, the write-class rights, the fence's status, options
/// and report, the capabilities a fence drops, and the output stream types of a fenced command.
/// A base header: the fence's internals (<dsh/detail/fence/>, <dsh/detail/process/>) include it
/// rather than <dsh/landlock.hpp>.
#pragma once

#include <dsh/errors.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/vocabulary.hpp>

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
/// the session bus, an agent) cannot act for the command. Deliberately absent: EXECUTE and
/// READ_DIR (listing and execution are never restricted), and READ_FILE, which only the read
/// fence handles (`landlock_read_file`).
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

/// LANDLOCK_ACCESS_FS_READ_FILE (Landlock ABI 1). Not a write-class right and not in
/// `LANDLOCK_WRITE_RIGHTS`: the fence handles it only to keep the host's devices (another
/// terminal, input devices, disks) out of a command's reads, and grants it everywhere else
/// (`FenceReport::unreadable`, docs/enforcement.md#reading-devices).
inline constexpr std::uint64_t landlock_read_file = 1ULL << 2;

/// LANDLOCK_ACCESS_FS_REFER (Landlock ABI 2), in `LANDLOCK_WRITE_RIGHTS` as "refer".
inline constexpr std::uint64_t landlock_refer = 1ULL << 13;

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
  /// Where reading a file is refused (the read fence: Landlock's read_file handled and granted
  /// on everything else, docs/enforcement.md#reading-devices): "/dev", but `readable_devices`.
  /// Empty when reads are not fenced: the namespace layer's fresh /dev applies (any other
  /// device mount is then out of view), or Landlock is unavailable.
  std::vector<std::filesystem::path> unreadable{};
  /// The devices a command may still read beneath `unreadable`: /dev/null, /dev/zero,
  /// /dev/full, /dev/random, /dev/urandom (those that exist), and with
  /// FenceOptions::terminal its terminal and /dev/tty.
  std::vector<std::filesystem::path> readable_devices{};
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
  /// before entering a fence without the layer, or whose `unshare(CLONE_NEWIPC)` the system
  /// refuses with EPERM (a container's seccomp profile, a security module), gets the calls
  /// refused instead), false when the filter refuses the calls.
  bool ipc_namespace = false;
  /// The `FenceOptions::isolation` the fence was prepared with; `off` for danger-full-access.
  Isolation isolation = Isolation::off;
  /// The rows of the namespace layer, each applied or not with the reason; empty with
  /// `Isolation::off` and for danger-full-access.
  std::vector<FenceLayer> layers{};

  /// One line: status, mode, ABI, handled and unenforced rights, scopes, refused TCP access,
  /// grants, where reads are refused, the namespace layer's rows and notes; paths as JSON string literals.
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
      if (!unreadable.empty()) {
        text += "; reads refused beneath";
        for (std::size_t i = 0; i < unreadable.size(); ++i) {
          text += (i == 0 ? " " : ", ") + json_string_literal(unreadable[i].native());
        }
        text += " but";
        for (std::size_t i = 0; i < readable_devices.size(); ++i) {
          text += (i == 0 ? " " : ", ") + json_string_literal(readable_devices[i].native());
        }
        if (readable_devices.empty()) {
          text += " nothing";
        }
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

  /// Every option equal (a prepared fence is reused only for equal options).
  bool operator==(const FenceOptions&) const = default;
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
