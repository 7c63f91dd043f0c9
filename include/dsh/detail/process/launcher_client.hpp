/// @file
/// The host's side of the fence launcher: starting it once, knowing when it no longer matches
/// the host, and handing it the supervisor's end of a call.
#pragma once

#include <dsh/detail/path_trust.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/errors.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/unique_fd.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__linux__)
#include <cstddef>
#include <spawn.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#endif

namespace dsh::detail {

/// The first word of every message between the host, the launcher and a launched supervisor
/// ("DSHL" read as a little-endian word).
inline constexpr std::uint32_t launch_magic = 0x4c485344U;
/// The version of the launch messages; a launcher that answers with another one is not used.
/// Bumped with any change of the wire format (detail/launch_wire.hpp).
inline constexpr std::uint32_t launch_protocol = 6U;
/// The argument before the protocol number on the launcher's command line.
inline constexpr const char* launch_protocol_flag = "--dsh-launch-protocol";

/// What the launcher answers once started: its magic and protocol.
struct LaunchHello {
  std::uint32_t magic = 0;
  std::uint32_t protocol = 0;
};

/// Where the launcher forks a call's supervisor, the byte the host sends with the call's socket:
/// from the launcher itself, or from one of its zygotes that installed a system-call filter once
/// (docs/performance.md#the-launcher), so that the supervisor and its command inherit the
/// program instead of compiling it again.
enum class LaunchVariant : char {
  plain = 'R',             ///< from the launcher: no filter inherited (the child installs its own, if any)
  refusing_sysv_ipc = 'S', ///< from the zygote holding `shared_syscall_filter(true, false)`
  own_ipc_namespace = 'I', ///< from the zygote holding `shared_syscall_filter(false, false)`
};

#if defined(__linux__)
/// Sends the byte `variant` with the descriptors `fds` attached (SCM_RIGHTS) on the socket
/// `socket`, without SIGPIPE. Returns 0, or the errno of sendmsg(2).
[[nodiscard]] inline int send_descriptors(int socket, std::array<int, 2> fds, LaunchVariant variant,
                                          std::size_t count = 2) noexcept {
  char byte = static_cast<char>(variant);
  iovec part{&byte, 1};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 2)> control{};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * count);
  const ::ssize_t sent = retry_on_eintr([&]() noexcept { return ::sendmsg(socket, &message, MSG_NOSIGNAL); });
  return sent == 1 ? 0 : errno;
}

/// `send_descriptors` of the one descriptor `fd`.
[[nodiscard]] inline int send_descriptor(int socket, int fd, LaunchVariant variant = LaunchVariant::plain) noexcept {
  return send_descriptors(socket, {fd, -1}, variant, 1);
}

/// What `receive_handed` read: the byte a host (or the launcher) sent and the descriptors that
/// came with it (-1 beyond `count`), or `got` 0 at end of file and -1 on an error.
struct HandedCall {
  ::ssize_t got = 0;
  char byte = 0;
  std::array<int, 4> fds{-1, -1, -1, -1};
  std::size_t count = 0;
};

/// Reads one byte and the descriptors sent with it (SCM_RIGHTS, close-on-exec) from `socket`,
/// retrying on EINTR, with recvmsg(2)'s `flags` too (MSG_DONTWAIT: `got` is then -1 with EAGAIN
/// when nothing waits). Async-signal-safe.
[[nodiscard]] inline HandedCall receive_handed(int socket, int flags = 0) noexcept {
  HandedCall handed;
  iovec part{&handed.byte, 1};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 4)> space{};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  message.msg_control = space.data();
  message.msg_controllen = space.size();
  handed.got = retry_on_eintr([&]() noexcept { return ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC | flags); });
  if (handed.got <= 0) {
    return handed;
  }
  for (cmsghdr* attached = CMSG_FIRSTHDR(&message); attached != nullptr; attached = CMSG_NXTHDR(&message, attached)) {
    if (attached->cmsg_level == SOL_SOCKET && attached->cmsg_type == SCM_RIGHTS) {
      const std::size_t bytes = attached->cmsg_len - CMSG_LEN(0);
      for (std::size_t i = 0; i < bytes / sizeof(int) && handed.count < handed.fds.size(); ++i) {
        std::memcpy(&handed.fds[handed.count++], CMSG_DATA(attached) + i * sizeof(int), sizeof(int));
      }
    }
  }
  return handed;
}

/// Appends `name`, the whole text of the /proc file `path` (or "-" and the errno when it cannot
/// be read), and a newline to `print`.
inline void append_proc_text(std::string& print, const char* name, const char* path) {
  print.append(name).push_back('=');
  const UniqueFd file(retry_on_eintr([&] { return ::open(path, O_RDONLY | O_CLOEXEC); }));
  if (!file) {
    print.append("-").append(std::to_string(errno)).push_back('\n');
    return;
  }
  std::array<char, 4096> buffer; // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
  for (;;) {
    const ::ssize_t got = retry_on_eintr([&] { return ::read(file.get(), buffer.data(), buffer.size()); });
    if (got <= 0) {
      break;
    }
    print.append(buffer.data(), static_cast<std::size_t>(got));
  }
  print.push_back('\n');
}

/// The lines of /proc/<...>/status `text` that a child inherits and the launcher could lack
/// (not NSpid: it is the thread's id, which differs in every thread), each with its newline.
[[nodiscard]] inline std::string inherited_status_lines(const std::string& text) {
  std::string lines;
  for (const std::string_view key : {"Uid:", "Gid:", "Groups:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:",
                                     "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"}) {
    const std::size_t at = text.find(std::string("\n").append(key));
    if (at != std::string::npos) {
      const std::size_t end = text.find('\n', at + 1);
      lines.append(text, at + 1, end == std::string::npos ? std::string::npos : end - at);
    }
  }
  return lines;
}

/// What the calling thread passes to a process it forks that the launcher, started earlier,
/// may not have: its credentials, capabilities, no_new_privs and system-call filters (from one
/// read of /proc/thread-self/status), securebits and personality, its namespaces, root
/// directory, control groups and resource limits, and the process's pid. Two equal prints mean
/// a command started from the launcher gets what it would get from a fork of this thread,
/// except what every call sends itself (working directory, umask, environment, descriptors)
/// and the scheduling attributes (nice value, policy, CPU affinity: the launcher's, as the
/// thread that started it had them). A Landlock domain cannot be read back, so it is not in
/// the print (docs/enforcement.md#the-launcher). Stores the process's umask, from the same
/// read, in `mask`. Read in two parts (`launch_fingerprint_status`, then
/// `launch_fingerprint_rest`), so that a call can send its request between them. Throws only
/// std::bad_alloc.
[[nodiscard]] inline std::string launch_fingerprint_status(::mode_t& mask) {
  std::string print;
  print.reserve(2048);
  print.append("pid=").append(std::to_string(::getpid())).push_back('\n');
  {
    std::string status;
    append_proc_text(status, "status", "/proc/thread-self/status");
    print.append(inherited_status_lines(status));
    // umask(2) cannot read it without changing it for the host's other threads meanwhile.
    mask = 022;
    if (const std::size_t at = status.find("\nUmask:\t"); at != std::string::npos) {
      mask = 0;
      for (std::size_t i = at + 8; i < status.size() && status[i] >= '0' && status[i] <= '7'; ++i) {
        mask = static_cast<::mode_t>(mask * 8U + static_cast<unsigned>(status[i] - '0'));
      }
      mask &= 0777U;
    }
  }
  return print;
}

/// The rest of the calling thread's fingerprint, after `launch_fingerprint_status`: its
/// namespaces, root directory, control groups, resource limits, securebits and personality.
/// Throws only std::bad_alloc.
[[nodiscard]] inline std::string launch_fingerprint_rest() {
  std::string print;
  print.reserve(1536);
  // Opened on every call: a descriptor kept across calls could be closed by the host and its
  // number reused for another file.
  const UniqueFd namespaces_directory(
      retry_on_eintr([] { return ::open("/proc/thread-self/ns", O_PATH | O_DIRECTORY | O_CLOEXEC); }));
  const int namespaces = namespaces_directory.get();
  // The link's text names the namespace ("mnt:[4026531841]"); reading it costs a third of a
  // stat(2) of the namespace itself.
  for (const char* name : {"user", "mnt", "pid_for_children", "net", "ipc", "uts", "cgroup", "time_for_children"}) {
    std::array<char, 64> link{};
    const ::ssize_t size = namespaces >= 0 ? ::readlinkat(namespaces, name, link.data(), link.size()) : -1;
    print.append(name).push_back('=');
    print.append(link.data(), size > 0 ? static_cast<std::size_t>(size) : 0).push_back('\n');
  }
  struct stat root {};
  if (::stat("/", &root) == 0) { // after chroot(2), "/" is the new root
    print.append("root=").append(std::to_string(root.st_dev)).append(":").append(std::to_string(root.st_ino));
  }
  print.push_back('\n');
  append_proc_text(print, "cgroup", "/proc/thread-self/cgroup");
  for (int resource = 0; resource < RLIM_NLIMITS; ++resource) {
    rlimit limit{};
    if (::getrlimit(static_cast<__rlimit_resource_t>(resource), &limit) == 0) {
      print.append(std::to_string(limit.rlim_cur)).append("/").append(std::to_string(limit.rlim_max));
    }
    print.push_back(' ');
  }
  print.append("\nsecurebits=").append(std::to_string(::prctl(PR_GET_SECUREBITS, 0UL, 0UL, 0UL, 0UL)));
  print.append(" personality=").append(std::to_string(::personality(0xffffffffUL))).push_back('\n');
  return print;
}

/// The calling thread's whole fingerprint: `launch_fingerprint_status` (storing the umask in
/// `mask`), then `launch_fingerprint_rest`. Throws only std::bad_alloc.
[[nodiscard]] inline std::string launch_fingerprint(::mode_t& mask) {
  return launch_fingerprint_status(mask).append(launch_fingerprint_rest());
}
#endif

/// How long `LauncherClient::stop` waits for a launcher whose socket it shut down to serve the
/// calls still queued there and exit, before it ends it with SIGKILL (milliseconds). Each call
/// costs it a send to a zygote or a fork; a launcher that takes longer is stuck.
inline constexpr int launcher_drain_ms = 2000;

/// A call handed to a running launcher before the calling thread's whole fingerprint was
/// compared with the launcher's (`LauncherClient::hand_over`, then `confirm`).
struct UnconfirmedCall {
  std::string launcher_print; ///< the fingerprint of the launcher that took it; "" when none is pending
  std::string status_part;    ///< `launch_fingerprint_status` of the calling thread
};

/// The process's launcher as the host sees it (see `dsh::FenceLauncher`).
struct LauncherState {
  std::filesystem::path program; ///< "" when none is configured
  ::pid_t pid = -1;              ///< the running launcher, or -1
  std::string problem;           ///< why the last start or hand-over failed; "" when none did
  unsigned starts = 0;           ///< launchers this process started
};

/// The host's side of the process's one launcher. Thread-safe; every member takes the lock.
class LauncherClient {
public:
  /// The process's client.
  static LauncherClient& instance() {
    static LauncherClient client;
    return client;
  }

  /// Uses `program` from the next call on ("" for none); a running launcher of another
  /// program is stopped. Throws ConfigError when `program` is not empty and not absolute.
  void configure(std::filesystem::path program) {
    if (!program.empty() && !program.is_absolute()) {
      throw ConfigError(
          expectation_message("dsh::FenceLauncher::use", "an absolute path to dsh-fence-launcher", program.native()));
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (program != program_) {
      stop();
      program_ = std::move(program);
      problem_.clear();
      pinned_ = {};
      pin_program(); // its identity now, before any fence of this process could grant a command its path
    }
  }

  /// A copy of the state.
  [[nodiscard]] LauncherState state() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return {program_, socket_ ? pid_ : -1, problem_, starts_};
  }

  /// Stops the running launcher (calls it started go on); the next call starts a new one.
  void restart() {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop();
  }

  /// Hands the supervisor's end of a call, `control`, to the launcher (or straight to the zygote
  /// it announced for `variant`: `send_call`), starting it first when
  /// none runs, when it runs for another process (this one was forked), or when the calling
  /// thread's `launch_fingerprint` differs from the one it was started with (it is then
  /// stopped and started again from this thread). A launcher that cannot be reached is started
  /// again once. Stores the calling process's umask in `mask` (read with the fingerprint) when
  /// a launcher is configured. `variant` says where the launcher forks the supervisor (its
  /// filtered zygotes, or itself). Returns "" when the launcher took the call, otherwise why not
  /// (also kept as the state's problem); nothing was started then. Throws only std::bad_alloc.
  ///
  /// With `unconfirmed` not null, a launcher of this process that already runs (and that the
  /// calling thread may compare itself with) takes the call once the first part of the
  /// fingerprint is read (`launch_fingerprint_status`, which gives `mask`): `*unconfirmed` then
  /// holds that part and the fingerprint the launcher was started with, and the caller sends
  /// the request with a go-ahead to wait for, then `confirm`s (the launcher's hop to the
  /// supervisor and the supervisor's work then overlap the rest of the reading). Otherwise its
  /// `launcher_print` is left empty.
  [[nodiscard]] std::string hand_over(int control, ::mode_t& mask, LaunchVariant variant = LaunchVariant::plain,
                                      UnconfirmedCall* unconfirmed = nullptr) {
#if defined(__linux__)
    const auto unconfigured = [this] {
      return problem_ = "no launcher is configured (dsh::FenceLauncher::use, or the build's "
                        "DSH_SANDBOX_POLICY_LAUNCHER)";
    };
    {
      // The fingerprint costs a read of /proc and ~25 system calls: not for a call that forks.
      const std::lock_guard<std::mutex> lock(mutex_);
      if (program_.empty()) {
        return unconfigured();
      }
    }
    std::string print;
    if (unconfirmed != nullptr) {
      unconfirmed->launcher_print.clear();
      unconfirmed->status_part = launch_fingerprint_status(mask);
      const std::lock_guard<std::mutex> lock(mutex_);
      if (socket_ && owner_ == ::getpid() && !(kcmp_tells_ && !may_compare_with_launcher()) &&
          send_call(control, variant) == 0) {
        unconfirmed->launcher_print = fingerprint_;
        problem_.clear();
        return {};
      }
      print = unconfirmed->status_part + launch_fingerprint_rest();
    } else {
      print = launch_fingerprint(mask);
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (program_.empty()) { // configured away meanwhile
      return unconfigured();
    }
    if (owner_ != ::getpid()) {
      // A forked copy of the host: the launcher is its parent's, never its child.
      socket_.reset();
      pidfd_.reset();
      zygotes_ = {};
      zygote_alive_ = {};
      pid_ = -1;
    } else if (socket_ && (print != fingerprint_ || (kcmp_tells_ && !may_compare_with_launcher()))) {
      stop(); // the thread changed, or entered a Landlock domain the launcher is not in
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!socket_) {
        if (std::string why = start(print); !why.empty()) {
          return problem_ = std::move(why);
        }
      }
      const int error = send_call(control, variant);
      if (error == 0) {
        problem_.clear();
        return {};
      }
      problem_ = "the launcher " + json_string_literal(program_.native()) +
                 " could not be reached: sendmsg: " + std::strerror(error);
      stop();
    }
    return problem_;
#else
    (void)control;
    mask = 022;
    return "a launcher needs Linux";
#endif
  }

  /// After a `hand_over` that left `unconfirmed` pending, and the call's request sent: reads
  /// the rest of the calling thread's fingerprint and returns true when the whole is the one
  /// the launcher that took the call was started with (the caller then sends the go-ahead).
  /// Otherwise stops that launcher if it still runs and returns false: the caller closes the
  /// call's socket, so that its command's child reads end of file instead of the go-ahead and
  /// runs nothing, and hands the call over again without `unconfirmed`, which starts a
  /// launcher from this thread. Throws only std::bad_alloc.
  [[nodiscard]] bool confirm(const UnconfirmedCall& unconfirmed) {
#if defined(__linux__)
    if (unconfirmed.status_part + launch_fingerprint_rest() == unconfirmed.launcher_print) {
      return true;
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (socket_ && owner_ == ::getpid() && fingerprint_ == unconfirmed.launcher_print) {
      stop(); // the thread changed since that launcher started
    }
#else
    (void)unconfirmed;
#endif
    return false;
  }

  LauncherClient(const LauncherClient&) = delete;
  LauncherClient& operator=(const LauncherClient&) = delete;
  LauncherClient(LauncherClient&&) = delete;
  LauncherClient& operator=(LauncherClient&&) = delete;
  /// Closes the socket: the launcher reads end of file and exits.
  ~LauncherClient() = default;

private:
  LauncherClient() {
#if defined(DSH_SANDBOX_POLICY_LAUNCHER)
    program_ = DSH_SANDBOX_POLICY_LAUNCHER;
    pin_program();
#endif
  }

  /// Records the configured program's identity now, when none is recorded: the file is then
  /// judged as it was first seen, whatever its mode later (a fenced command without the
  /// namespace layer can chmod a file its user owns, and restore the mode once another user
  /// wrote it; the restored mode changes its change time).
  void pin_program() noexcept {
#if defined(__linux__)
    struct stat info {};
    if (!pinned_.known && !program_.empty() && ::stat(program_.c_str(), &info) == 0) {
      pinned_ = identity_of(info);
    }
#endif
  }

#if defined(__linux__)
  /// Why `program_` may not be run as the supervisor of fenced calls, or "": it must be a
  /// regular file owned by root or the effective user, writable by nobody else, on a path no
  /// other user can change (detail::untrusted_directory).
  [[nodiscard]] std::string untrusted_program() const {
    const std::string named = "the launcher " + json_string_literal(program_.native());
    struct stat info {};
    if (::stat(program_.c_str(), &info) != 0) {
      return named + " cannot be examined: " + std::strerror(errno);
    }
    if (!S_ISREG(info.st_mode)) {
      return named + " is not a regular file";
    }
    if ((info.st_uid != 0 && info.st_uid != ::geteuid()) || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return named + " (mode " + octal_mode(info.st_mode) + ", owner uid " + std::to_string(info.st_uid) +
             ") could be replaced by another user";
    }
    if (std::string why = untrusted_directory(program_); !why.empty()) {
      return named + " lies where another user can change it: " + why;
    }
    return {};
  }

  /// Starts `program_` with posix_spawn (which copies nothing of the host) on a new socket,
  /// waits for its hello and records it with `print`. Returns "" or why it failed; nothing is
  /// left running then.
  [[nodiscard]] std::string start(const std::string& print) {
    pin_program(); // also when refused below: a refused file made acceptable later stays refused
    if (std::string why = untrusted_program(); !why.empty()) {
      return why;
    }
    // The file examined is the file executed (through its descriptor), and it must be the one
    // this process first used: a fenced command that could reach its path (a grant made before
    // the launcher was configured) must not have the next launcher run its own program unfenced.
    const UniqueFd program(retry_on_eintr([&] { return ::open(program_.c_str(), O_PATH | O_CLOEXEC); }));
    struct stat opened {};
    if (!program || ::fstat(program.get(), &opened) != 0 || !S_ISREG(opened.st_mode)) {
      return "the launcher " + json_string_literal(program_.native()) + " cannot be opened: " + std::strerror(errno);
    }
    if (pinned_.known && pinned_ != identity_of(opened)) {
      return "the launcher " + json_string_literal(program_.native()) +
             " is not the file this process first used (replaced or changed since: device, inode, size or "
             "times differ); restart the host to use the new one";
    }
    const std::string by_descriptor = "/proc/self/fd/" + std::to_string(program.get());
    std::array<int, 2> ends{-1, -1};
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends.data()) != 0) {
      return std::string("socketpair for the launcher: ") + std::strerror(errno);
    }
    UniqueFd host_end(ends[0]);
    UniqueFd launcher_end(ends[1]);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    if (::posix_spawn_file_actions_init(&actions) != 0) {
      return "posix_spawn_file_actions_init failed";
    }
    if (::posix_spawnattr_init(&attributes) != 0) {
      ::posix_spawn_file_actions_destroy(&actions);
      return "posix_spawnattr_init failed";
    }
    sigset_t none;
    sigset_t all;
    ::sigemptyset(&none);
    ::sigfillset(&all);
    // Its own session (no terminal's signals reach it), default dispositions, no mask, and no
    // descriptor of the host but its socket (as descriptor 3) and /dev/null.
    int failed = ::posix_spawnattr_setflags(
        &attributes, static_cast<short>(POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
    failed = failed != 0 ? failed : ::posix_spawnattr_setsigmask(&attributes, &none);
    failed = failed != 0 ? failed : ::posix_spawnattr_setsigdefault(&attributes, &all);
    failed = failed != 0 ? failed : ::posix_spawn_file_actions_adddup2(&actions, launcher_end.get(), 3);
    failed = failed != 0 ? failed : ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    failed = failed != 0 ? failed : ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    failed = failed != 0 ? failed : ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    const std::string protocol = std::to_string(launch_protocol);
    std::array<char*, 4> argv{const_cast<char*>(program_.c_str()), const_cast<char*>(launch_protocol_flag),
                              const_cast<char*>(protocol.c_str()), nullptr};
    std::array<char*, 1> envp{nullptr};
    ::pid_t pid = -1;
    if (failed == 0) {
      failed = ::posix_spawn(&pid, by_descriptor.c_str(), &actions, &attributes, argv.data(), envp.data());
    }
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attributes);
    launcher_end.reset(); // the launcher's copy alone: its exit is then the end of file here
    if (failed != 0) {
      return "the launcher " + json_string_literal(program_.native()) +
             " could not be started: " + std::strerror(failed);
    }
    // A pidfd names this process for good: a pid the host's own reaping freed could name
    // another process by the time the launcher is stopped.
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)));
    const int pidfd_error = errno;
    LaunchHello hello{};
    std::string why;
    pollfd ready{host_end.get(), POLLIN, 0};
    std::array<char, sizeof(LaunchHello) + 4096> answer{};
    ::ssize_t got = -1;
    if (!pidfd) {
      why = std::string("pidfd_open: ") + std::strerror(pidfd_error);
    } else if (retry_on_eintr([&] { return ::poll(&ready, 1, 10000); }) <= 0) {
      why = "it did not answer within 10 s";
    } else if (got = retry_on_eintr([&] { return ::recv(host_end.get(), answer.data(), answer.size(), 0); });
               got < static_cast<::ssize_t>(sizeof hello) ||
               (std::memcpy(&hello, answer.data(), sizeof hello), hello.magic != launch_magic)) {
      why = "it did not answer as dsh-fence-launcher (is it one?)";
    } else if (hello.protocol != launch_protocol) {
      why = "it speaks launch protocol " + std::to_string(hello.protocol) + ", this library " +
            std::to_string(launch_protocol) + " (install the launcher of the same version)";
    } else {
      // execve(2) computes credentials anew (a root host that gave up capabilities gets them
      // back in the new program): the launcher's own must be this thread's, or its commands
      // would get more than a fork of this thread gives them.
      std::string own;
      append_proc_text(own, "status", "/proc/thread-self/status");
      const std::string theirs(answer.data() + sizeof hello, static_cast<std::size_t>(got) - sizeof hello);
      if (const std::string mine = inherited_status_lines(own); theirs != mine) {
        why = "it runs with other credentials than this thread (after execve): " + json_string_literal(theirs) +
              " against " + json_string_literal(mine);
      }
    }
    pid_ = pid;
    pidfd_ = std::move(pidfd);
    socket_ = std::move(host_end);
    if (!why.empty()) {
      stop();
      return "the launcher " + json_string_literal(program_.native()) + " cannot be used: " + why;
    }
    fingerprint_ = print;
    owner_ = ::getpid();
    if (!pinned_.known) {
      pinned_ = identity_of(opened);
    }
    // kcmp(2) is refused, by Landlock's ptrace rule, to a thread in a domain the launcher is
    // not in; it must work now, or it cannot tell later (Yama's ptrace_scope 3, no kcmp).
    kcmp_tells_ = may_compare_with_launcher();
    ++starts_;
    return {};
  }
#endif

  /// Shuts the socket down, so that the launcher serves the calls already handed to it and then
  /// reads end of file and exits; waits for that through its pidfd (so no other child of the
  /// host is reaped), and ends it with SIGKILL if it has not exited within
  /// `launcher_drain_ms`; then takes the zygotes it announced meanwhile, closes the socket and
  /// shuts every zygote's socket down (`drop_zygote`). Calls it already started are separate
  /// processes and go on.
  ///
  /// Not killed at once: a call another thread handed over a moment ago may still wait in the
  /// socket, and its host would get "the call ended before its command started". Serving it is
  /// safe: a call handed over by `hand_over`'s slow path matched this launcher when it was sent,
  /// and one handed over before its thread's fingerprint was compared runs only with the
  /// go-ahead its thread sends after `confirm`.
  void stop() noexcept {
#if defined(__linux__)
    // Shut down, not only closed: a child the host forked without exec holds a copy of this
    // descriptor, and the launcher would read end of file only once every copy is closed.
    if (socket_) {
      static_cast<void>(::shutdown(socket_.get(), SHUT_RDWR));
    }
    // Kept open until the launcher has exited: a zygote it announced meanwhile, still queued
    // here, is then taken and shut down below like the others (a forked copy of the host shares
    // this queue, and would keep that zygote waiting).
#else
    socket_.reset();
#endif
#if defined(__linux__)
    if (pidfd_) {
      // One deadline however many signals interrupt the wait.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(launcher_drain_ms);
      pollfd exited{pidfd_.get(), POLLIN, 0};
      int ready = -1;
      for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        ready = ::poll(&exited, 1, static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0)));
        if (ready >= 0 || errno != EINTR) {
          break;
        }
      }
      if (ready != 1) {
        ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0U);
      }
      siginfo_t info{};
      static_cast<void>(retry_on_eintr(
          [&]() noexcept { return ::waitid(wait_by_pidfd, static_cast<id_t>(pidfd_.get()), &info, WEXITED); }));
    }
    // Only now, the launcher gone: it may have sent a queued call to a zygote since. Shut down
    // for the same reason as the launcher's socket; the calls already queued in a zygote's
    // socket are still served, and its spare then reads end of file and the zygote exits.
    if (socket_) {
      take_announced_zygotes();
    }
    socket_.reset();
    for (std::size_t index = 0; index < zygotes_.size(); ++index) {
      drop_zygote(index);
    }
#endif
    pidfd_.reset();
    pid_ = -1;
  }

#if defined(__linux__)
  /// Sends the call's socket `control` with `variant` to the zygote that serves `variant`
  /// straight, when the launcher announced it (`take_announced_zygotes`), else to the launcher,
  /// which hands it on. A zygote's socket whose other end is closed is dropped (the zygote died:
  /// the launcher starts it again at the call it then gets, and announces the new one); after
  /// another failure (descriptors in flight over the limit, say) it is kept, and this call goes
  /// to the launcher. Returns 0, or the errno of the send to the launcher. The caller holds the
  /// lock, with a launcher running.
  [[nodiscard]] int send_call(int control, LaunchVariant variant) noexcept {
    if (const int index = zygote_index(variant); index >= 0) {
      UniqueFd& zygote = zygotes_[static_cast<std::size_t>(index)];
      if (!zygote) {
        take_announced_zygotes();
      }
      // A zygote that exited is dropped before the send: its spare, killed with it, may still
      // hold the socket for a moment, and would take the call with it. So is every zygote of a
      // launcher that exited (killed): the call then goes to the launcher's socket, whose
      // refusal starts a new launcher, and the old zygotes end with the old launcher.
      std::array<pollfd, 2> exited{
          {{zygote_alive_[static_cast<std::size_t>(index)].get(), POLLIN, 0}, {pidfd_.get(), POLLIN, 0}}};
      if (zygote && ::poll(exited.data(), exited.size(), 0) != 0) {
        for (std::size_t each = 0; each < zygotes_.size(); ++each) {
          if (exited[1].revents != 0 || each == static_cast<std::size_t>(index)) {
            drop_zygote(each);
          }
        }
      }
      if (zygote) {
        const int error = send_descriptor(zygote.get(), control, variant);
        if (error == 0) {
          return 0;
        }
        if (error == EPIPE || error == ECONNRESET || error == ENOTCONN || error == ECONNREFUSED) {
          drop_zygote(static_cast<std::size_t>(index));
        }
      }
    }
    return send_descriptor(socket_.get(), control, variant);
  }

  /// Shuts down and closes the host's end of zygote `index`, if any, and its pidfd: shut down,
  /// not only closed, because a copy of the host forked without exec holds it too, and the
  /// zygote ends only once its socket reads end of file.
  void drop_zygote(std::size_t index) noexcept {
    if (zygotes_[index]) {
      static_cast<void>(::shutdown(zygotes_[index].get(), SHUT_RDWR));
    }
    zygotes_[index].reset();
    zygote_alive_[index].reset();
  }

  /// Which of `zygotes_` serves `variant`, or -1 (the launcher forks it itself).
  [[nodiscard]] static int zygote_index(LaunchVariant variant) noexcept {
    return variant == LaunchVariant::refusing_sysv_ipc ? 0 : variant == LaunchVariant::own_ipc_namespace ? 1 : -1;
  }

  /// Takes the zygote sockets the launcher announced since (`run_launcher`: the variant's byte
  /// with the launcher's end of the zygote's socket and a pidfd of the zygote, once it started
  /// it), without waiting; a later announcement of a variant replaces the earlier. Anything else
  /// is closed.
  void take_announced_zygotes() noexcept {
    for (;;) {
      const HandedCall announced = receive_handed(socket_.get(), MSG_DONTWAIT);
      if (announced.got <= 0) {
        return;
      }
      struct stat info {};
      const int index = zygote_index(static_cast<LaunchVariant>(announced.byte));
      if (announced.count == 2 && index >= 0 && ::fstat(announced.fds[0], &info) == 0 && S_ISSOCK(info.st_mode)) {
        drop_zygote(static_cast<std::size_t>(index)); // the one this replaces, started before
        zygotes_[static_cast<std::size_t>(index)] = UniqueFd(announced.fds[0]);
        zygote_alive_[static_cast<std::size_t>(index)] = UniqueFd(announced.fds[1]);
        continue;
      }
      for (std::size_t i = 0; i < announced.count; ++i) {
        ::close(announced.fds[i]);
      }
    }
  }
#endif

  /// What names a file's content for this check: device, inode, size, change and modification times.
  struct FileIdentity {
    bool known = false;
    ::dev_t device = 0;
    ::ino_t inode = 0;
    ::off_t size = 0;
    long long changed = 0;
    long long modified = 0;
    bool operator==(const FileIdentity&) const = default;
  };
  [[nodiscard]] static FileIdentity identity_of(const struct stat& info) noexcept {
    return {true,
            info.st_dev,
            info.st_ino,
            info.st_size,
            static_cast<long long>(info.st_ctim.tv_sec) * 1000000000LL + info.st_ctim.tv_nsec,
            static_cast<long long>(info.st_mtim.tv_sec) * 1000000000LL + info.st_mtim.tv_nsec};
  }

#if defined(__linux__)
  /// True when this thread may compare itself with the launcher (kcmp(2), KCMP_VM).
  [[nodiscard]] bool may_compare_with_launcher() const noexcept {
    constexpr int kcmp_vm = 1; // KCMP_VM of <linux/kcmp.h>
    return ::syscall(SYS_kcmp, ::getpid(), pid_, kcmp_vm, 0UL, 0UL) >= 0;
  }
#endif

  std::mutex mutex_;
  std::filesystem::path program_;
  FileIdentity pinned_; // the launcher file this process first used
  bool kcmp_tells_ = false;
  UniqueFd socket_; // the host's end; the launcher exits when it closes
  // The launcher's ends of its zygotes' sockets, as it announced them (zygote_index), so that
  // a call goes to its zygote without waking the launcher; empty until announced.
  std::array<UniqueFd, 2> zygotes_;
  std::array<UniqueFd, 2> zygote_alive_; // a pidfd of each announced zygote: readable once it exited
  UniqueFd pidfd_;
  ::pid_t pid_ = -1;
  ::pid_t owner_ = -1;      // the process that started it
  std::string fingerprint_; // launch_fingerprint() of the thread that started it
  std::string problem_;
  unsigned starts_ = 0;
};

} // namespace dsh::detail
