/// @file
/// The fence's namespace layer: a user namespace for an unprivileged host, a private mount
/// namespace with a read-only view of the host's filesystem, writable binds of the grants,
/// protected paths bound read-only over them, a fresh /dev, a private /tmp, the host's state out
/// of view, and new PID, IPC and UTS namespaces. Prepared before fork (every path and map is a
/// string built then); the children only issue system calls.
#pragma once

#include <dsh/detail/fence/host_environment.hpp>
#include <dsh/detail/fence/mount_table.hpp>
#include <dsh/detail/policy/protected_paths.hpp>
#include <dsh/detail/process/child_steps.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/policy_types.hpp>

#include <fstream>
#include <memory>
#include <mutex>
#include <optional>

#if defined(__linux__)
#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sched.h>
#include <string>
#include <string_view>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>
#endif

namespace dsh::detail {

// The new mount API of <linux/mount.h> (Linux 5.2; mount_setattr 5.12), declared here because
// glibc's <sys/mount.h> and <linux/mount.h> do not mix. The numbers are those of every
// architecture: system calls added after 5.0 share one table.
inline constexpr long sys_open_tree = 428;
inline constexpr long sys_move_mount = 429;
inline constexpr long sys_fsopen = 430;
inline constexpr long sys_fsconfig = 431;
inline constexpr long sys_fsmount = 432;
inline constexpr long sys_mount_setattr = 442;
inline constexpr unsigned fsopen_cloexec = 0x1U;
inline constexpr unsigned fsconfig_set_string = 1U;
inline constexpr unsigned fsconfig_cmd_create = 6U;
inline constexpr unsigned fsmount_cloexec = 0x1U;
inline constexpr unsigned open_tree_clone = 1U;
inline constexpr unsigned at_recursive = 0x8000U;
inline constexpr unsigned move_mount_f_empty_path = 0x4U;
inline constexpr unsigned move_mount_t_empty_path = 0x40U;
inline constexpr std::uint64_t mount_attr_rdonly = 0x1U;
inline constexpr std::uint64_t mount_attr_nosuid = 0x2U;
inline constexpr std::uint64_t mount_attr_nodev = 0x4U;
inline constexpr std::uint64_t mount_attr_noexec = 0x8U;

/// struct mount_attr (MOUNT_ATTR_SIZE_VER0).
struct MountAttr {
  std::uint64_t attr_set = 0;
  std::uint64_t attr_clr = 0;
  std::uint64_t propagation = 0;
  std::uint64_t userns_fd = 0;
};

/// The names of the layer's rows in `FenceReport::layers`, in the order the child applies them.
inline constexpr std::string_view layer_user = "user namespace";
inline constexpr std::string_view layer_mount = "mount namespace";
inline constexpr std::string_view layer_readonly_root = "read-only root";
inline constexpr std::string_view layer_protected = "protected paths";
inline constexpr std::string_view layer_dev = "/dev";
inline constexpr std::string_view layer_pid = "PID namespace and /proc";
inline constexpr std::string_view layer_ipc = "IPC namespace";
inline constexpr std::string_view layer_uts = "UTS namespace";
inline constexpr std::string_view layer_temporary = "/tmp, /var/tmp, /dev/shm";
inline constexpr std::string_view layer_hidden = "host state out of view";

/// Which file a path named when the fence was prepared: its device and inode, as `statx`
/// reports them without following a final link (`hidden_identity`).
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};

/// What the namespace layer does in a child, every path built when the fence was prepared.
struct NamespacePlan {
  bool active = false;                        ///< the layer applies (every row but possibly `temporary_areas`)
  bool user_namespace = false;                ///< an unprivileged host: a user namespace first
  std::string uid_map;                        ///< "<euid> <euid> 1\n"
  std::string gid_map;                        ///< "<egid> <egid> 1\n"
  std::vector<std::string> writable;          ///< the fence's directory grants, bound writable onto themselves
  std::vector<std::string> protected_files;   ///< bound read-only onto themselves (files, placeholders)
  std::vector<std::string> protected_dirs;    ///< bound read-only onto themselves (directories, placeholders)
  std::vector<std::string> pinned;            ///< directories bound writable onto themselves
  bool temporary_areas = false;               ///< /tmp, /var/tmp and /dev/shm are replaced
  std::string temporary;                      ///< the private directory mounted there; "" for an empty read-only view
  std::vector<std::string> temporary_targets; ///< "/tmp" first, then the other existing areas (canonical)
  std::vector<std::string> hidden_dirs;       ///< replaced by an empty read-only tmpfs
  /// Grants beneath a hidden directory (the private temporary directory beneath the runtime
  /// directory, say), bound back into its empty view at the same path; at most
  /// `max_revealed`.
  std::vector<std::string> revealed;
  std::vector<std::string> revealed_steps; ///< the directories made in the empty views for them, parents first
  std::vector<std::string> hidden_files;   ///< replaced by a read-only, nodev bind of /dev/null
  /// What each of `hidden_dirs`, then each of `hidden_files`, was when the fence was prepared:
  /// the child covers a path only while it still names that file. A concurrent command may
  /// rename a directory above one that lies beneath its grants (a device tree in a chroot of
  /// the workspace) and put another in its place.
  std::vector<FileIdentity> hidden_identities;
};

#if defined(__linux__)
/// How many grants beneath hidden directories a plan may bind back (each is held open by the
/// child while the views are made, in an array of this size).
inline constexpr std::size_t max_revealed = 16;

/// How many directories a plan may hide (each empty view is held open by the child until it is
/// made read-only, in an array of this size).
inline constexpr std::size_t max_hidden_dirs = 64;

/// The host devices bound into the command's fresh /dev, by the same name.
inline constexpr std::array<const char*, 6> layer_devices{"/dev/null",   "/dev/zero",    "/dev/full",
                                                          "/dev/random", "/dev/urandom", "/dev/tty"};

/// Writes `text` to the /proc file `path`; returns errno or 0. Async-signal-safe.
[[nodiscard]] inline int write_proc_file(const char* path, const char* text) noexcept {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  const std::size_t size = std::strlen(text);
  const ::ssize_t wrote = retry_on_eintr([&]() noexcept { return ::write(fd, text, size); });
  const int error = wrote == static_cast<::ssize_t>(size) ? 0 : (wrote < 0 ? errno : EIO);
  ::close(fd);
  return error;
}

/// Enters a new user namespace that maps the caller's effective user and group to themselves
/// (setgroups denied first, as an unprivileged gid map requires). Async-signal-safe.
[[nodiscard]] inline ApplyResult enter_user_namespace(const NamespacePlan& plan) noexcept {
  if (::unshare(CLONE_NEWUSER) != 0) {
    return {errno, "unshare(CLONE_NEWUSER)"};
  }
  if (const int error = write_proc_file("/proc/self/setgroups", "deny"); error != 0) {
    return {error, "write(\"/proc/self/setgroups\")"};
  }
  if (const int error = write_proc_file("/proc/self/uid_map", plan.uid_map.c_str()); error != 0) {
    return {error, "write(\"/proc/self/uid_map\")"};
  }
  if (const int error = write_proc_file("/proc/self/gid_map", plan.gid_map.c_str()); error != 0) {
    return {error, "write(\"/proc/self/gid_map\")"};
  }
  return {};
}

/// Waits for `child` and ends the calling process the way it ended: the same exit status, or
/// the same signal (128 + its number when the signal does not end this process). Never returns.
[[noreturn]] inline void pass_on_ending(::pid_t child) noexcept {
  int status = 0;
  if (retry_on_eintr([&]() noexcept { return ::waitpid(child, &status, 0); }) < 0) {
    ::_exit(126);
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    ::sigemptyset(&action.sa_mask);
    (void)::sigaction(signal, &action, nullptr);
    sigset_t only;
    ::sigemptyset(&only);
    ::sigaddset(&only, signal);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::kill(::getpid(), signal);
    ::_exit(128 + signal);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

/// For a caller that is not a supervisor (`exec_in_child`, `apply`): enters a new PID
/// namespace and forks once, so that the caller's child, which returns from here, is PID 1 of
/// it; the caller itself waits and passes on how that child ended (`pass_on_ending`). The
/// child dies with the caller (PR_SET_PDEATHSIG), and the kernel then ends the namespace.
/// Returns the failed step, or error 0 in the child. Async-signal-safe.
[[nodiscard]] inline ApplyResult enter_pid_namespace_by_fork() noexcept {
  if (::unshare(CLONE_NEWPID) != 0) {
    return {errno, "unshare(CLONE_NEWPID)"};
  }
  const ::pid_t child = ::fork();
  if (child < 0) {
    return {errno, "fork (PID 1 of the new PID namespace)"};
  }
  if (child > 0) {
    pass_on_ending(child);
  }
  ::prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(SIGKILL), 0UL, 0UL, 0UL);
  return {};
}

/// Closes each descriptor of `held` that is open (>= 0) and marks it closed. Async-signal-safe.
template <std::size_t N> inline void close_held(std::array<int, N>& held) noexcept {
  for (int& fd : held) {
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
  }
}

/// The directories on the way to the last bind target, held open (O_PATH), so that the next
/// target beneath one of them is looked up from there rather than from "/" again: the grants
/// and protected entries of one workspace share most of their path, and each component is an
/// `openat` and a `close` in the call's path. The same walk as `open_without_links` (every
/// component as spelled, no link followed), started further down.
///
/// Why a held directory is still the one a walk from "/" would reach: a directory is held only
/// while it is an ancestor of every target bound since it was opened, so each mount made since
/// lies strictly beneath it, where a lookup from it crosses into the mount as one from "/"
/// would. So no mount of any other kind (a tmpfs by path) may come while it holds directories:
/// `apply_mount_layer` gives each run of binds a walk of its own, begun after the mounts before
/// them. Async-signal-safe; it keeps its own copy of the held directories' path.
class BindWalk {
public:
  BindWalk() noexcept { held_.fill(-1); }
  BindWalk(const BindWalk&) = delete;
  BindWalk& operator=(const BindWalk&) = delete;
  BindWalk(BindWalk&&) = delete;
  BindWalk& operator=(BindWalk&&) = delete;
  ~BindWalk() { reset(); }

  /// Closes every held directory.
  void reset() noexcept {
    for (std::size_t i = 0; i < depth_; ++i) {
      ::close(held_[i]);
      held_[i] = -1;
    }
    depth_ = 0;
  }

  /// Opens `path` (absolute, no "." or ".." or empty component) with O_PATH, no link followed
  /// in any component, from the deepest held directory that is an ancestor of it, and holds
  /// the directories on its way instead. Returns the descriptor, or -1 with errno set.
  [[nodiscard]] int open_target(const char* path) noexcept {
    if (path == nullptr || path[0] != '/' || path[1] == '\0') {
      reset();
      return open_without_links(path, O_PATH);
    }
    // The held prefix that still leads to `path`: held_[i] is the directory prefix_[0, ends_[i]).
    std::size_t keep = 0;
    for (std::size_t i = depth_; i > 0; --i) {
      const std::size_t end = ends_[i - 1];
      // A strict ancestor only: "/a/b/" names /a/b itself, which must be looked up again.
      if (std::strncmp(prefix_.data(), path, end) == 0 && path[end] == '/' && path[end + 1] != '\0') {
        keep = i;
        break;
      }
    }
    for (std::size_t i = keep; i < depth_; ++i) {
      ::close(held_[i]);
      held_[i] = -1;
    }
    depth_ = keep;
    if (depth_ == 0) {
      held_[0] = retry_on_eintr([]() noexcept { return ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC); });
      if (held_[0] < 0) {
        return -1;
      }
      ends_[0] = 0;
      depth_ = 1;
    }
    std::size_t at = ends_[depth_ - 1] + 1; // the first character of the next component
    std::array<char, NAME_MAX + 1> name{};
    for (;;) {
      std::size_t length = 0;
      while (path[at + length] != '\0' && path[at + length] != '/') {
        ++length;
      }
      const bool last = path[at + length] == '\0' || (path[at + length] == '/' && path[at + length + 1] == '\0');
      if (length == 0 || length > NAME_MAX || (length == 1 && path[at] == '.') ||
          (length == 2 && path[at] == '.' && path[at + 1] == '.')) {
        errno = length > NAME_MAX ? ENAMETOOLONG : EINVAL;
        return -1;
      }
      std::memcpy(name.data(), path + at, length);
      name[length] = '\0';
      const int from = held_[depth_ - 1];
      const int flags = (last ? O_PATH : O_PATH | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC;
      const int next = retry_on_eintr([&]() noexcept { return ::openat(from, name.data(), flags); });
      if (last || next < 0) {
        return next;
      }
      if (depth_ == held_.size() || at + length >= prefix_.size()) { // deeper or longer than it holds
        const int deeper = next;
        reset();
        ::close(deeper);
        return open_without_links(path, O_PATH);
      }
      held_[depth_] = next;
      const std::size_t previous_end = ends_[depth_ - 1];
      std::memcpy(prefix_.data() + previous_end, path + previous_end, at + length - previous_end);
      ends_[depth_] = at + length;
      ++depth_;
      at += length + 1;
    }
  }

private:
  std::array<int, 24> held_{};
  std::array<std::size_t, 24> ends_{};
  std::size_t depth_ = 0;
  std::array<char, 4096> prefix_{}; // the path of the deepest held directory, not terminated
};

/// Opens the mount target `target` (O_PATH) as the plan has it: every component as spelled, no
/// link followed (through `walk` when given), so that a concurrent call that swaps a directory
/// on the way for a link cannot move the mount elsewhere; a directory exactly when `directory`
/// says (else ENOTDIR or EISDIR; a link: ELOOP); with `expected`, that very file (else ESTALE:
/// it was moved since it was planned). Returns the descriptor, or -1 with errno set.
/// Async-signal-safe.
[[nodiscard]] inline int open_planned_target(const char* target, bool directory, BindWalk* walk,
                                             const FileIdentity* expected) noexcept {
  const int fd = walk != nullptr ? walk->open_target(target) : open_without_links(target, O_PATH);
  if (fd < 0) {
    return -1;
  }
  struct stat info {};
  int error = 0;
  if (::fstat(fd, &info) != 0 || S_ISDIR(info.st_mode) != directory || S_ISLNK(info.st_mode)) {
    error = S_ISLNK(info.st_mode) ? ELOOP : directory ? ENOTDIR : EISDIR;
  } else if (expected != nullptr && (static_cast<std::uint64_t>(info.st_dev) != expected->device ||
                                     static_cast<std::uint64_t>(info.st_ino) != expected->inode)) {
    error = ESTALE;
  }
  if (error != 0) {
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

/// Mounts a clone of the tree at `source` (a path, or with `source_fd` >= 0 that O_PATH
/// descriptor) onto `target` without following a link there; the clone's own mount is made
/// read-only with `readonly` (with `attributes`, recursively) or writable otherwise (its
/// submounts keep their flags). `directory`: whether the target must be a directory (else
/// it must not be one). With `walk`, the target is looked up through it (`BindWalk`). With
/// `expected`, the target must be that file (else ESTALE: it was moved since it was planned).
/// Returns errno or 0. Async-signal-safe.
[[nodiscard]] inline int attach_clone(int source_fd, const char* source, const char* target, bool directory,
                                      bool readonly, std::uint64_t attributes = 0, BindWalk* walk = nullptr,
                                      const FileIdentity* expected = nullptr) noexcept {
  const int target_fd = open_planned_target(target, directory, walk, expected);
  if (target_fd < 0) {
    return errno;
  }
  // A bind onto itself clones what the walk above opened; another source is named by the caller.
  const bool itself = source_fd < 0 && std::strcmp(source, target) == 0;
  const int from = itself ? target_fd : source_fd;
  const unsigned source_flags = open_tree_clone | O_CLOEXEC | at_recursive | AT_SYMLINK_NOFOLLOW |
                                (from >= 0 ? static_cast<unsigned>(AT_EMPTY_PATH) : 0U);
  const int tree =
      static_cast<int>(::syscall(sys_open_tree, from >= 0 ? from : AT_FDCWD, from >= 0 ? "" : source, source_flags));
  if (tree < 0) {
    const int error = errno;
    ::close(target_fd);
    return error;
  }
  MountAttr attr{};
  if (readonly) {
    attr.attr_set = mount_attr_rdonly | attributes;
  } else {
    attr.attr_clr = mount_attr_rdonly;
  }
  const unsigned set_flags = AT_EMPTY_PATH | (readonly ? at_recursive : 0U);
  int error = 0;
  if (::syscall(sys_mount_setattr, tree, "", set_flags, &attr, sizeof attr) != 0 ||
      ::syscall(sys_move_mount, tree, "", target_fd, "", move_mount_f_empty_path | move_mount_t_empty_path) != 0) {
    error = errno;
  }
  ::close(tree);
  ::close(target_fd);
  return error;
}

/// Creates the empty file or directory `path` in the fresh /dev (a tmpfs the child made);
/// returns errno or 0. Async-signal-safe.
[[nodiscard]] inline int make_mountpoint(const char* path, bool directory) noexcept {
  if (directory) {
    return ::mkdir(path, 0755) == 0 ? 0 : errno;
  }
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    return errno;
  }
  ::close(fd);
  return 0;
}

/// The mount steps of the layer, in a child that already entered the user namespace (when the
/// plan has one) and, with `pid_namespace`, is PID 1 of a new PID namespace: a new mount, IPC
/// and UTS namespace, `/` recursively private, the read-only view, the writable grants, the
/// protected entries, /dev, the temporary areas, the host's state out of view, /proc, and the
/// working directory found again in the new view. `ipc_namespace_made`: the process is in an
/// IPC namespace made for this call alone already (a root host's spare supervisor made it
/// before its call came, in the same user namespace), which it keeps instead of making
/// another. Returns the failed step, or error 0. Async-signal-safe.
[[nodiscard]] inline ApplyResult apply_mount_layer(const NamespacePlan& plan, bool pid_namespace,
                                                   bool ipc_namespace_made = false) noexcept {
  // The working directory as a path: the descriptor the process holds still points into the
  // view before the mounts, where a grant is read-only.
  std::array<char, 4096> cwd{};
  const bool have_cwd = ::syscall(SYS_getcwd, cwd.data(), cwd.size()) > 0 && cwd[0] == '/';
  if (ipc_namespace_made ? ::unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0
                         : ::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
    return {errno, ipc_namespace_made ? "unshare(CLONE_NEWNS|CLONE_NEWUTS)"
                                      : "unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS)"};
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return {errno, "mount(\"/\", MS_REC|MS_PRIVATE)"};
  }
  // The host's devices, held before the fresh /dev covers them.
  std::array<int, layer_devices.size()> devices{};
  devices.fill(-1);
  const auto close_devices = [&devices]() noexcept { close_held(devices); };
  for (std::size_t i = 0; i < devices.size(); ++i) {
    devices[i] = ::open(layer_devices[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (devices[i] < 0) {
      const int error = errno;
      close_devices();
      return {error, "open(O_PATH) of a host device for /dev"};
    }
  }
  const auto fail = [&close_devices](int error, const char* step) noexcept {
    close_devices();
    return ApplyResult{error, step};
  };
  MountAttr readonly_root{};
  readonly_root.attr_set = mount_attr_rdonly;
  if (::syscall(sys_mount_setattr, AT_FDCWD, "/", at_recursive, &readonly_root, sizeof readonly_root) != 0) {
    return fail(errno, "mount_setattr(\"/\", AT_RECURSIVE, MOUNT_ATTR_RDONLY)");
  }
  {
    // Each entry onto itself, in this order; only these binds until the walk goes (no other
    // mount may come in between).
    struct BindRun {
      const std::vector<std::string>* entries;
      bool directory;
      bool readonly;
      const char* step;
    };
    const std::array<BindRun, 4> runs{{{&plan.writable, true, false, "bind of a writable grant"},
                                       {&plan.pinned, true, false, "bind of a pinned directory"},
                                       {&plan.protected_dirs, true, true, "read-only bind of a protected directory"},
                                       {&plan.protected_files, false, true, "read-only bind of a protected file"}}};
    BindWalk walk;
    for (const BindRun& run : runs) {
      for (const std::string& entry : *run.entries) {
        if (const int error = attach_clone(-1, entry.c_str(), entry.c_str(), run.directory, run.readonly, 0, &walk);
            error != 0) {
          return fail(error, run.step);
        }
      }
    }
  }
  // A fresh /dev: the host's devices bound by name, a new devpts instance, /dev/shm.
  if (::mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0) {
    return fail(errno, "mount(\"tmpfs\", \"/dev\")");
  }
  {
    BindWalk walk; // from here: "/" and the fresh /dev
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (const int error = make_mountpoint(layer_devices[i], false); error != 0) {
        return fail(error, "open(O_CREAT) of a device's name in /dev");
      }
      if (const int error = attach_clone(devices[i], "", layer_devices[i], false, false, 0, &walk); error != 0) {
        return fail(error, "bind of a host device into /dev");
      }
    }
  }
  close_devices();
  for (const char* directory : {"/dev/pts", "/dev/shm"}) {
    if (const int error = make_mountpoint(directory, true); error != 0) {
      return fail(error, "mkdir in /dev");
    }
  }
  if (::mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") != 0) {
    return fail(errno, "mount(\"devpts\", \"/dev/pts\")");
  }
  for (const auto& [target, name] :
       std::array<std::pair<const char*, const char*>, 5>{{{"pts/ptmx", "/dev/ptmx"},
                                                           {"/proc/self/fd", "/dev/fd"},
                                                           {"/proc/self/fd/0", "/dev/stdin"},
                                                           {"/proc/self/fd/1", "/dev/stdout"},
                                                           {"/proc/self/fd/2", "/dev/stderr"}}}) {
    if (::symlink(target, name) != 0) {
      return fail(errno, "symlink in /dev");
    }
  }
  if (::mount(nullptr, "/dev", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr) != 0) {
    return fail(errno, "mount(\"/dev\", MS_REMOUNT|MS_RDONLY)");
  }
  if (plan.temporary_areas) {
    // The private directory at /tmp, then /tmp (now that directory) at the other areas.
    for (std::size_t i = 0; i <= plan.temporary_targets.size(); ++i) {
      const char* target = i < plan.temporary_targets.size() ? plan.temporary_targets[i].c_str() : "/dev/shm";
      int error = 0;
      if (!plan.temporary.empty()) {
        error =
            attach_clone(-1, i == 0 ? plan.temporary.c_str() : plan.temporary_targets[0].c_str(), target, true, false);
      } else if (::mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0) {
        error = errno;
      }
      if (error != 0) {
        return fail(error, "mount of a temporary area");
      }
    }
  }
  // The host's state out of view: each directory becomes an empty tmpfs, writable only until
  // the grants beneath it are bound back at their own paths (held open before the tmpfs hides
  // them), then read-only.
  std::array<int, max_revealed> revealed{};
  revealed.fill(-1);
  const auto close_revealed = [&revealed]() noexcept { close_held(revealed); };
  if (plan.revealed.size() > revealed.size()) {
    return fail(E2BIG, "more grants beneath hidden directories than the layer binds back");
  }
  for (std::size_t i = 0; i < plan.revealed.size(); ++i) {
    revealed[i] = ::open(plan.revealed[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (revealed[i] < 0) {
      const int error = errno;
      close_revealed();
      return fail(error, "open(O_PATH) of a grant beneath a hidden directory");
    }
  }
  const auto fail_revealed = [&close_revealed, &fail](int error, const char* step) noexcept {
    close_revealed();
    return fail(error, step);
  };
  // Each directory is found again without following a link and must still be the one the
  // fence was prepared with; the empty view goes onto that directory itself (a tmpfs made
  // apart, then moved onto the descriptor), where no later rename of a directory above it
  // takes it out from under the view. Held until it is made read-only, as a mount, not a path.
  if (plan.hidden_dirs.size() > max_hidden_dirs ||
      plan.hidden_identities.size() != plan.hidden_dirs.size() + plan.hidden_files.size()) {
    return fail_revealed(E2BIG, "the plan's host directories to hide (too many, or without their identities)");
  }
  std::array<int, max_hidden_dirs> views{};
  views.fill(-1);
  const auto close_views = [&views]() noexcept { close_held(views); };
  const auto fail_views = [&close_views, &fail_revealed](int error, const char* step) noexcept {
    close_views();
    return fail_revealed(error, step);
  };
  for (std::size_t i = 0; i < plan.hidden_dirs.size(); ++i) {
    const int target = open_planned_target(plan.hidden_dirs[i].c_str(), true, nullptr, &plan.hidden_identities[i]);
    if (target < 0) {
      const int error = errno;
      return fail_views(error, error == ESTALE
                                   ? "a host directory to hide is no longer the one the fence was prepared with"
                                   : "open(O_PATH) of a host directory to hide");
    }
    const int context = static_cast<int>(::syscall(sys_fsopen, "tmpfs", fsopen_cloexec));
    int error = context < 0 ? errno : 0;
    if (error == 0 && (::syscall(sys_fsconfig, context, fsconfig_set_string, "mode", "0755", 0) != 0 ||
                       ::syscall(sys_fsconfig, context, fsconfig_cmd_create, nullptr, nullptr, 0) != 0)) {
      error = errno;
    }
    if (error == 0) {
      views[i] = static_cast<int>(
          ::syscall(sys_fsmount, context, fsmount_cloexec, mount_attr_nosuid | mount_attr_nodev | mount_attr_noexec));
      error = views[i] < 0 ? errno : 0;
    }
    if (error == 0 &&
        ::syscall(sys_move_mount, views[i], "", target, "", move_mount_f_empty_path | move_mount_t_empty_path) != 0) {
      error = errno;
    }
    if (context >= 0) {
      ::close(context);
    }
    ::close(target);
    if (error != 0) {
      return fail_views(error, "mount of an empty view over a host directory");
    }
  }
  for (const std::string& step : plan.revealed_steps) {
    if (::mkdir(step.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail_views(errno, "mkdir in an empty view for a grant beneath it");
    }
  }
  for (std::size_t i = 0; i < plan.revealed.size(); ++i) {
    if (const int error = attach_clone(revealed[i], "", plan.revealed[i].c_str(), true, false); error != 0) {
      return fail_views(error, "bind of a grant back into an empty view");
    }
  }
  close_revealed();
  MountAttr readonly_view{};
  readonly_view.attr_set = mount_attr_rdonly | mount_attr_nosuid | mount_attr_nodev | mount_attr_noexec;
  for (std::size_t i = 0; i < plan.hidden_dirs.size(); ++i) {
    if (::syscall(sys_mount_setattr, views[i], "", AT_EMPTY_PATH, &readonly_view, sizeof readonly_view) != 0) {
      const int error = errno;
      close_views();
      return fail(error, "mount_setattr(MOUNT_ATTR_RDONLY) of an empty view");
    }
  }
  close_views();
  {
    BindWalk walk;
    for (std::size_t i = 0; i < plan.hidden_files.size(); ++i) {
      if (const int error = attach_clone(-1, "/dev/null", plan.hidden_files[i].c_str(), false, true,
                                         mount_attr_nodev | mount_attr_nosuid | mount_attr_noexec, &walk,
                                         &plan.hidden_identities[plan.hidden_dirs.size() + i]);
          error != 0) {
        return fail(error, error == ESTALE ? "a host file to hide is no longer the one the fence was prepared with"
                                           : "bind of /dev/null over a host file");
      }
    }
  }
  if (pid_namespace && ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return fail(errno, "mount(\"proc\", \"/proc\")");
  }
  if (have_cwd && ::chdir(cwd.data()) != 0) {
    return {errno, "chdir (the working directory in the command's view)"};
  }
  return {};
}

/// Whether the layer can be had: the first step that failed, or error 0.
struct NamespaceProbe {
  int error = 0;
  const char* step = "";
};

/// Tries, in a short-lived child, what a call's children will do first: the user namespace
/// (`plan.user_namespace`), the mount, PID, IPC and UTS namespaces, `/` made private and
/// read-only, and /proc mounted by PID 1 of the new PID namespace. Everything it made ends with
/// it. Asks the kernel on every call: a seccomp filter, a sysctl or a security module loaded
/// later would make any cached answer stale.
[[nodiscard]] inline NamespaceProbe probe_namespace_layer(const NamespacePlan& plan) noexcept {
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    return {errno, "pipe2"};
  }
  const ::pid_t child = ::fork();
  if (child < 0) {
    const int error = errno;
    ::close(ends[0]);
    ::close(ends[1]);
    return {error, "fork"};
  }
  if (child == 0) {
    ::close(ends[0]);
    ApplyResult step{};
    if (plan.user_namespace) {
      step = enter_user_namespace(plan);
    }
    if (step.ok() && ::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
      step = {errno, "unshare(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC|CLONE_NEWUTS)"};
    }
    if (step.ok() && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      step = {errno, "mount(\"/\", MS_REC|MS_PRIVATE)"};
    }
    MountAttr readonly_root{};
    readonly_root.attr_set = mount_attr_rdonly;
    if (step.ok() &&
        ::syscall(sys_mount_setattr, AT_FDCWD, "/", at_recursive, &readonly_root, sizeof readonly_root) != 0) {
      step = {errno, "mount_setattr(\"/\", AT_RECURSIVE, MOUNT_ATTR_RDONLY)"};
    }
    if (step.ok()) {
      const ::pid_t init = ::fork();
      if (init == 0) {
        ::_exit(::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0 ? 0 : errno);
      }
      int status = 0;
      if (init < 0) {
        step = {errno, "fork (PID 1 of the new PID namespace)"};
      } else if (retry_on_eintr([&]() noexcept { return ::waitpid(init, &status, 0); }) < 0 || !WIFEXITED(status) ||
                 WEXITSTATUS(status) != 0) {
        step = {WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : ECHILD,
                "mount(\"proc\", \"/proc\")"};
      }
    }
    const NamespaceProbe result{step.error, step.step};
    (void)write_all(ends[1], reinterpret_cast<const char*>(&result), sizeof result);
    ::_exit(0);
  }
  ::close(ends[1]);
  NamespaceProbe result{};
  std::size_t got = 0;
  while (got < sizeof result) {
    const ::ssize_t part = retry_on_eintr(
        [&]() noexcept { return ::read(ends[0], reinterpret_cast<char*>(&result) + got, sizeof result - got); });
    if (part <= 0) {
      break;
    }
    got += static_cast<std::size_t>(part);
  }
  ::close(ends[0]);
  int status = 0;
  (void)retry_on_eintr([&]() noexcept { return ::waitpid(child, &status, 0); });
  if (got != sizeof result) {
    return {EIO, "reading the namespace probe's report"};
  }
  return result;
}
#endif

/// What decides the probe's answer that belongs to the calling process: its effective ids, its
/// /proc status lines for capabilities, no_new_privs and seccomp (a filter installed later
/// changes the answer: `Seccomp_filters` counts them) and the namespaces it is in. Empty when
/// something cannot be read (the probe then runs every time).
[[nodiscard]] inline std::string namespace_probe_key() {
  std::string key = std::to_string(::geteuid()) + ":" + std::to_string(::getegid());
  std::ifstream status("/proc/self/status");
  std::string line;
  int found = 0;
  while (std::getline(status, line)) {
    for (const std::string_view name : {"CapEff:", "CapBnd:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"}) {
      if (std::string_view(line).starts_with(name)) {
        key += "|" + line;
        ++found;
      }
    }
  }
  for (const char* ns : {"/proc/self/ns/user", "/proc/self/ns/mnt", "/proc/self/ns/pid"}) {
    struct stat info {};
    if (::stat(ns, &info) != 0) {
      return {};
    }
    key += "|" + std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino);
  }
  return found == 5 ? key : std::string();
}

/// Whether a namespace step was refused by a limit rather than by the system's policy: the
/// user's count of namespaces (ENOSPC; a command of the same user can use it up), nesting
/// (EUSERS), memory or processes (ENOMEM, EAGAIN). Such a refusal passes, and another process
/// may cause it on purpose.
[[nodiscard]] constexpr bool namespace_limit_reached(int error) noexcept {
  return error == ENOSPC || error == EUSERS || error == ENOMEM || error == EAGAIN;
}

/// `probe_namespace_layer(plan)`, remembered for this process as long as
/// `namespace_probe_key()` stays the same, unless a limit refused it (`namespace_limit_reached`). What the key cannot
/// see (a sysctl, a security module's policy changed by the machine's owner later) makes a later call fail closed,
/// naming the step, never run with less.
[[nodiscard]] inline NamespaceProbe cached_namespace_probe(const NamespacePlan& plan) {
#if defined(__linux__)
  static std::mutex guard;
  static std::string cached_key;
  static NamespaceProbe cached{};
  const std::string key = namespace_probe_key();
  const std::lock_guard<std::mutex> lock(guard);
  if (!key.empty() && key == cached_key) {
    return cached;
  }
  const NamespaceProbe probe = probe_namespace_layer(plan);
  if (namespace_limit_reached(probe.error)) {
    return probe; // it passes: never remembered, the next call asks again
  }
  cached = probe;
  cached_key = key;
  return cached;
#else
  (void)plan;
  return {ENOSYS, "unshare"};
#endif
}

/// What `path` names now, for a child to find again before it covers it
/// (`NamespacePlan::hidden_identities`): its device and inode, when it is a directory exactly
/// when `directory` says and, with `mounted_device` ("major:minor", as the mount table shows
/// it), the root of a mount of that filesystem; nothing otherwise. A device tree beneath a
/// grant (a chroot's dev/pts in the workspace) may have been moved, by a command renaming a
/// directory above it, since the mount table was read, and another directory put in its place.
[[nodiscard]] inline std::optional<FileIdentity> hidden_identity(const std::string& path, bool directory,
                                                                 std::string_view mounted_device) {
#if defined(__linux__)
  struct statx info {};
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO, &info) != 0 ||
      S_ISDIR(info.stx_mode) != directory) {
    return std::nullopt;
  }
  if (!mounted_device.empty() &&
      ((info.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) == 0 || (info.stx_attributes & STATX_ATTR_MOUNT_ROOT) == 0 ||
       mounted_device != std::to_string(info.stx_dev_major) + ":" + std::to_string(info.stx_dev_minor))) {
    return std::nullopt;
  }
  return FileIdentity{static_cast<std::uint64_t>(::makedev(info.stx_dev_major, info.stx_dev_minor)), info.stx_ino};
#else
  (void)path;
  (void)directory;
  (void)mounted_device;
  return std::nullopt;
#endif
}

/// The placeholder that keeps the missing protected `entry` from being created: an empty
/// directory (0755) or file (0644) made now by the host, in the entry's canonical parent, never
/// through a link. Throws LandlockError (naming `subject`, the entry and the reason) when it
/// cannot be made or something else took its name.
inline void make_placeholder(const std::string& subject, const ProtectedEntry& entry) {
  const bool directory = entry.kind == ProtectedKind::missing_directory;
  const std::string name = entry.path.filename().native();
  // The parent as the scan spelled it, no link followed on the way: a concurrent call that
  // swaps a directory there for a link must not have the host create the placeholder (with
  // the host's rights) wherever the link points.
  const UniqueFd parent{open_without_links(entry.path.parent_path().c_str(), O_PATH | O_DIRECTORY)};
  int error = parent ? 0 : errno;
  if (error == 0 && directory) {
    error = ::mkdirat(parent.get(), name.c_str(), 0755) == 0 ? 0 : errno;
  } else if (error == 0) {
    const UniqueFd made{
        ::openat(parent.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
    error = made ? 0 : errno;
    // What git must read there as it reads the absence (".\n" for a commondir).
    if (error == 0 && !entry.placeholder.empty() &&
        !write_all(made.get(), entry.placeholder.data(), entry.placeholder.size())) {
      error = errno != 0 ? errno : EIO;
    }
  }
  if (error != 0) {
    throw LandlockError(subject + ": cannot make the placeholder that keeps the protected path " +
                        json_string_literal(entry.path.native()) + " (" + entry.rule +
                        ") from being created: " + std::strerror(error));
  }
}

/// The namespace layer of a fence whose base `report` is built: probes whether it can be had
/// and records each row in `report.layers`; returns the plan the children apply (inactive when
/// it does not apply). `scan` is the protected list of the workspace root.
/// Throws LandlockError when `options.isolation` is `required` and a row cannot be had, when
/// the layer applies and `scan.problem` is not empty, or when a placeholder cannot be made.
[[nodiscard]] inline NamespacePlan plan_namespace_layer(const ResolvedPolicy& policy, const FenceOptions& options,
                                                        const HostEnvironment& environment, const ProtectedScan& scan,
                                                        FenceReport& report,
                                                        std::shared_ptr<const std::vector<MountEntry>> mounts = {}) {
  NamespacePlan plan;
  if (options.isolation == Isolation::off || report.status == FenceStatus::unrestricted) {
    return plan;
  }
  report.isolation = options.isolation;
  const std::string subject = "the namespace layer of the " + std::string(to_string(policy.mode)) + " fence";
  plan.user_namespace = !holds_sys_admin();
  plan.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  plan.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  std::vector<std::string_view> names{layer_mount, layer_readonly_root, layer_protected, layer_dev,   layer_pid,
                                      layer_ipc,   layer_uts,           layer_temporary, layer_hidden};
  if (plan.user_namespace) {
    names.insert(names.begin(), layer_user);
  }
  const auto refuse = [&](const std::string& reason) {
    for (const std::string_view name : names) {
      report.layers.push_back({std::string(name), false, reason});
    }
    if (options.isolation == Isolation::required) {
      throw LandlockError(subject + " is required (FenceOptions::isolation) but cannot be had: " + reason +
                          "; nothing runs");
    }
  };
  const NamespaceProbe probe = cached_namespace_probe(plan);
  if (namespace_limit_reached(probe.error)) {
    // Best-effort falls back only where the system refuses the layer: a command of the same
    // user can exhaust its namespace count on purpose, and the next call would then run
    // without the layer.
    throw LandlockError(subject + ": " + probe.step + ": " + std::strerror(probe.error) +
                        ": a limit (the user's namespace count, memory) refused the layer, and another process of "
                        "the same user can reach it on purpose, so the call does not fall back to the base fence; "
                        "nothing runs");
  }
  if (probe.error != 0) {
    refuse(std::string(probe.step) + ": " + std::strerror(probe.error));
    return plan;
  }
  if (!scan.problem.empty()) {
    throw LandlockError(subject + ": the protected paths beneath " +
                        json_string_literal(policy.workspace_root.native()) + " cannot be known: " + scan.problem +
                        "; refusing to run without them");
  }
  plan.active = true;

  for (const FenceGrant& grant : report.grants) {
    if (std::filesystem::is_directory(grant.path)) {
      plan.writable.push_back(grant.path.native());
    }
  }
  if (policy.mode == SandboxMode::workspace_write) {
    for (const ProtectedEntry& entry : scan.entries) {
      switch (entry.kind) {
      case ProtectedKind::missing_directory:
      case ProtectedKind::missing_file:
        make_placeholder(subject, entry);
        (entry.kind == ProtectedKind::missing_directory ? plan.protected_dirs : plan.protected_files)
            .push_back(entry.path.native());
        break;
      case ProtectedKind::directory:
        plan.protected_dirs.push_back(entry.path.native());
        break;
      case ProtectedKind::file:
        plan.protected_files.push_back(entry.path.native());
        break;
      case ProtectedKind::pinned_directory:
        plan.pinned.push_back(entry.path.native());
        break;
      }
    }
  }

  // The temporary areas: replaced unless the workspace root (in every mode: a read-only
  // command still works and reads there), a grant or the session cwd lies beneath one (it
  // would vanish from the view).
  std::string temporary_problem;
  const std::filesystem::path cwd =
      options.session_cwd.empty() ? std::filesystem::path() : canonical_path(options.session_cwd);
  for (const char* area : {"/tmp", "/var/tmp"}) {
    struct stat info {};
    const std::filesystem::path canonical = canonical_native(area);
    if (::lstat(canonical.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      if (plan.temporary_targets.empty()) {
        temporary_problem = "there is no directory /tmp";
      }
      continue;
    }
    if (std::find(plan.temporary_targets.begin(), plan.temporary_targets.end(), canonical.native()) !=
        plan.temporary_targets.end()) {
      continue;
    }
    if (!policy.workspace_root.empty() && is_within(policy.workspace_root, canonical)) {
      temporary_problem = "the workspace root " + json_string_literal(policy.workspace_root.native()) +
                          " lies beneath " + json_string_literal(canonical.native());
    }
    for (const std::string& grant : plan.writable) {
      if (grant != report.temporary_directory.native() && is_within(grant, canonical)) {
        temporary_problem = "the granted directory " + json_string_literal(grant) + " lies beneath " +
                            json_string_literal(canonical.native());
      }
    }
    if (!cwd.empty() && is_within(cwd, canonical)) {
      temporary_problem = "the session cwd " + json_string_literal(options.session_cwd.native()) + " lies beneath " +
                          json_string_literal(canonical.native());
    }
    plan.temporary_targets.push_back(canonical.native());
  }
  plan.temporary_areas = temporary_problem.empty();
  plan.temporary = report.temporary_directory.native();
  const auto replaced = [&plan](const std::filesystem::path& path) {
    return plan.temporary_areas && std::any_of(plan.temporary_targets.begin(), plan.temporary_targets.end(),
                                               [&path](const std::string& area) { return is_within(path, area); });
  };

  // The host's state: each existing path becomes an empty view, unless it is already out of
  // view or hiding it would hide what the command works in.
  // A directory holding the workspace or the session cwd stays in view (the command works
  // there), and so does one that is itself a grant; one holding only other grants beneath it
  // (the private temporary directory beneath the runtime directory, a host's extra grant) is
  // hidden all the same, and those grants are bound back into the empty view at their own
  // paths: nothing else in it is reached.
  const auto contains_work = [&](const std::filesystem::path& directory) {
    return is_within(policy.workspace_root, directory) || (!cwd.empty() && is_within(cwd, directory)) ||
           std::find(plan.writable.begin(), plan.writable.end(), directory.native()) != plan.writable.end();
  };
  // Each path as the one canonicalizer gives it: a link is followed, a dangling one too (what
  // it names does not exist, and nothing is hidden until a call prepared after it exists). A
  // link still found there is a loop, or a chain longer than the kernel follows: it names
  // nothing to reach, and no bind can cover a link.
  const auto hide = [&](const std::string& what, const std::filesystem::path& spelled) {
    const std::filesystem::path path = canonical_native(spelled.native());
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0 || S_ISLNK(info.st_mode) || replaced(path) || path == path.root_path()) {
      return;
    }
    for (const std::vector<std::string>* done : {&plan.hidden_dirs, &plan.hidden_files}) {
      for (const std::string& hidden : *done) {
        if (is_within(path, hidden)) {
          return; // already out of view
        }
      }
    }
    if (S_ISDIR(info.st_mode)) {
      if (contains_work(path)) {
        report.notes.push_back("not out of view: " + what + " " + json_string_literal(path.native()) +
                               " holds the workspace or the session cwd, or is a grant");
        return;
      }
      // What was hidden beneath it is out of view with it (and would have no mount point left).
      for (std::vector<std::string>* done : {&plan.hidden_dirs, &plan.hidden_files}) {
        done->erase(std::remove_if(done->begin(), done->end(),
                                   [&path](const std::string& hidden) { return is_within(hidden, path); }),
                    done->end());
      }
      plan.hidden_dirs.push_back(path.native());
    } else {
      plan.hidden_files.push_back(path.native());
    }
  };
  if (!options.session_log.empty()) {
    std::filesystem::path log = canonical_path(options.session_log);
    struct stat found {};
    if (::lstat(log.c_str(), &found) != 0) {
      // A log that is not there (a link whose target is not made yet): the directory it is
      // spelled in is the host's state all the same.
      const std::filesystem::path spelled(absolute_native(options.session_log.native()));
      log = std::filesystem::path(canonical_native(spelled.parent_path().native())) / spelled.filename();
    }
    if (contains_work(log.parent_path())) {
      hide("the session log", log);
    } else {
      hide("the session log's directory", log.parent_path());
    }
  }
  for (const std::filesystem::path& path : options.protected_paths) {
    if (path.is_absolute()) {
      hide("the protected path", path);
    }
  }
  if (environment.xdg_runtime_dir != nullptr && environment.xdg_runtime_dir[0] == '/') {
    hide("the runtime directory", environment.xdg_runtime_dir);
  } else {
    hide("the runtime directory", "/run/user/" + std::to_string(::geteuid()));
  }
  for (const char* socket : {"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock"}) {
    hide("the container socket", socket);
  }
  // The fresh /dev replaces the host's; a bind of it or of its terminals elsewhere reaches the
  // same devices, and with the layer there is no read fence (PreparedFence::fence_reads).
  if (!mounts) {
    mounts = current_mount_table();
  }
  // Each device tree hidden, with the filesystem the table shows there ("major:minor").
  std::vector<std::pair<std::string, std::string>> tree_devices;
  for (const std::filesystem::path& tree : device_trees(*mounts)) {
    if (tree != "/dev") {
      hide("the device filesystem", tree);
      // The last mount at that point is the one it shows.
      const auto shown = std::find_if(mounts->rbegin(), mounts->rend(),
                                      [&tree](const MountEntry& mount) { return mount.point == tree; });
      if (shown != mounts->rend()) {
        tree_devices.emplace_back(tree.native(), shown->device);
      }
    }
  }
  // Each is hidden at the very path the table gives (its mount root checked below), or lies in
  // what is out of view already, or holds the work: a tree a command moved since the table was
  // read (renaming a directory above it, beneath its grants) is found at no path, or at another.
  for (const std::pair<std::string, std::string>& found : tree_devices) {
    const std::string& tree = found.first; // a structured binding: clang 14 cannot capture it
    const auto listed = [&tree](const std::vector<std::string>& hidden) {
      return std::find(hidden.begin(), hidden.end(), tree) != hidden.end();
    };
    const bool covered = replaced(tree) || std::any_of(plan.hidden_dirs.begin(), plan.hidden_dirs.end(),
                                                       [&tree](const std::string& hidden) {
                                                         return hidden != tree && is_within(tree, hidden);
                                                       });
    if (!listed(plan.hidden_dirs) && !listed(plan.hidden_files) && !covered && !contains_work(tree)) {
      throw LandlockError(subject + ": the device filesystem mounted at " + json_string_literal(tree) +
                          " is no longer found there (moved while the fence was prepared); refusing to run with "
                          "it in view");
    }
  }
  if (plan.hidden_dirs.size() > max_hidden_dirs) {
    throw LandlockError(subject + ": more than " + std::to_string(max_hidden_dirs) +
                        " directories of the host's state to hide; refusing to run with them in view");
  }
  // What each hidden path names now; the child covers it only while it names the same file.
  for (const std::vector<std::string>* hidden : {&plan.hidden_dirs, &plan.hidden_files}) {
    for (const std::string& path : *hidden) {
      std::string_view mounted;
      for (const auto& [tree, device] : tree_devices) {
        if (tree == path) {
          mounted = device;
        }
      }
      const std::optional<FileIdentity> identity = hidden_identity(path, hidden == &plan.hidden_dirs, mounted);
      if (!identity) {
        throw LandlockError(subject + ": the host's " + json_string_literal(path) +
                            " changed while the fence was prepared; refusing to run with it in view");
      }
      plan.hidden_identities.push_back(*identity);
    }
  }
  // The grants beneath what is hidden, and the directories their mount points need in the
  // empty views (each once, parents first).
  for (const std::string& grant : plan.writable) {
    for (const std::string& directory : plan.hidden_dirs) {
      if (grant == directory || !is_within(grant, directory)) {
        continue;
      }
      if (plan.revealed.size() == max_revealed) {
        throw LandlockError(subject + ": more than " + std::to_string(max_revealed) +
                            " granted directories lie beneath the host's state it hides (" +
                            json_string_literal(directory) + "); refusing to run with them in view");
      }
      plan.revealed.push_back(grant);
      const std::filesystem::path relative = std::filesystem::path(grant).lexically_relative(directory);
      std::filesystem::path step(directory);
      for (const std::filesystem::path& name : relative) {
        step /= name;
        if (std::find(plan.revealed_steps.begin(), plan.revealed_steps.end(), step.native()) ==
            plan.revealed_steps.end()) {
          plan.revealed_steps.push_back(step.native());
        }
      }
    }
  }

  for (const std::string_view name : names) {
    const bool temporary = name == layer_temporary;
    report.layers.push_back({std::string(name), !temporary || plan.temporary_areas,
                             temporary && !plan.temporary_areas ? temporary_problem : std::string()});
  }
  if (!plan.temporary_areas && options.isolation == Isolation::required) {
    throw LandlockError(subject + " is required (FenceOptions::isolation) but " + std::string(layer_temporary) +
                        " cannot be replaced: " + temporary_problem + "; nothing runs");
  }
  report.ipc_namespace = true;
  return plan;
}

} // namespace dsh::detail
