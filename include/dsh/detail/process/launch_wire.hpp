/// @file
/// The launch request: what a host sends a supervisor forked from the launcher, how the
/// supervisor reads it back into the command and fence it runs, and the launcher's loop.
#pragma once

#include <dsh/detail/fence/syscall_filter.hpp>
#include <dsh/detail/process/command_environment.hpp>
#include <dsh/detail/process/launcher_client.hpp>
#include <dsh/detail/process/supervisor.hpp>
#include <dsh/fence_types.hpp>
#include <dsh/prepared_fence.hpp>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

namespace dsh::detail {

/// The fixed part of a launch request, sent with its descriptors (SCM_RIGHTS); `size` bytes of
/// fields follow on the same stream.
struct LaunchHeader {
  std::uint32_t magic = launch_magic;
  std::uint32_t protocol = launch_protocol;
  std::uint64_t size = 0;
  std::uint32_t descriptors = 0;
  std::uint32_t reserved = 0;
};

/// At most this many descriptors travel with a request: the working directory, the ruleset,
/// the read fence's ruleset, stdin, stdout, stderr and the terminal.
inline constexpr std::size_t launch_descriptors = 7;

/// Appends the fields of a request, each in the host's byte order (the launcher runs on the
/// same machine): words, then texts and lists as a length and their bytes.
class LaunchWriter {
public:
  void word(std::uint64_t value) { bytes_.append(reinterpret_cast<const char*>(&value), sizeof value); }
  void text(std::string_view value) {
    word(value.size());
    bytes_.append(value);
  }
  void texts(const std::vector<std::string>& values) {
    word(values.size());
    for (const std::string& value : values) {
      text(value);
    }
  }
  void filter(const std::vector<SyscallFilterInstruction>& program) {
    word(program.size());
    if (!program.empty()) {
      bytes_.append(reinterpret_cast<const char*>(program.data()), program.size() * sizeof(SyscallFilterInstruction));
    }
  }
  [[nodiscard]] const std::string& bytes() const noexcept { return bytes_; }

private:
  std::string bytes_;
};

/// Reads what LaunchWriter wrote; a field past the end, or a count larger than what is left,
/// makes `ok()` false and every later field empty.
class LaunchReader {
public:
  explicit LaunchReader(std::string_view bytes) noexcept : rest_(bytes) {}
  [[nodiscard]] std::uint64_t word() noexcept {
    std::uint64_t value = 0;
    if (!take(sizeof value)) {
      return 0;
    }
    std::memcpy(&value, rest_.data() - sizeof value, sizeof value);
    return value;
  }
  [[nodiscard]] std::string text() {
    const std::uint64_t size = word();
    if (!take(size)) {
      return {};
    }
    return std::string(rest_.data() - size, size);
  }
  [[nodiscard]] std::vector<std::string> texts() {
    const std::uint64_t count = word();
    std::vector<std::string> values;
    if (count > rest_.size() / sizeof(std::uint64_t)) {
      ok_ = false;
      return values;
    }
    values.reserve(count);
    for (std::uint64_t i = 0; i < count && ok_; ++i) {
      values.push_back(text());
    }
    return values;
  }
  [[nodiscard]] std::vector<SyscallFilterInstruction> filter() {
    const std::uint64_t count = word();
    std::vector<SyscallFilterInstruction> program;
    if (count > rest_.size() / sizeof(SyscallFilterInstruction)) {
      ok_ = false;
      return program;
    }
    program.resize(count);
    if (count > 0) { // an empty vector's data() may be null, which memcpy must never get
      std::memcpy(program.data(), rest_.data(), count * sizeof(SyscallFilterInstruction));
    }
    rest_.remove_prefix(count * sizeof(SyscallFilterInstruction));
    return program;
  }
  /// True when every field was there and nothing is left over.
  [[nodiscard]] bool complete() const noexcept { return ok_ && rest_.empty(); }

private:
  bool take(std::uint64_t size) noexcept {
    if (!ok_ || size > rest_.size()) {
      ok_ = false;
      return false;
    }
    rest_.remove_prefix(size);
    return true;
  }
  std::string_view rest_;
  bool ok_ = true;
};

/// The request's codec, a friend of FencedCommand and PreparedFence: the host writes their
/// parts a supervisor needs, the supervisor builds its own copies from them. Its functions are
/// templates over the command's class (FencedCommand) so that this header sits below
/// <dsh/fenced_command.hpp>, which sends with it.
struct LaunchWire {
  /// Sends the request for `command` under `fence` with `plan`'s descriptors to the supervisor's
  /// socket `control`: the working directory `cwd`, the ruleset, the stdio and terminal
  /// descriptors travel as SCM_RIGHTS, the rest as fields. Throws dsh::SystemError when the
  /// socket refuses it (the supervisor is gone). With `go_ahead` the command's child waits for
  /// the host's go-ahead on `control` before exec (StartPlan::go_ahead).
  template <class Command> static void send(int control, const Command& command, const PreparedFence& fence,
                                            const StartPlan& plan, int cwd, ::mode_t mask, bool go_ahead) {
    std::array<int, launch_descriptors> descriptors{};
    std::uint32_t count = 0;
    const auto attach = [&](int fd) -> std::uint64_t {
      if (fd < 0) {
        return ~0ULL;
      }
      descriptors[count] = fd;
      return count++;
    };
    LaunchWriter out;
    out.word(attach(cwd));
    out.word(attach(fence.ruleset_.get()));
    out.word(attach(fence.read_ruleset_ ? fence.read_ruleset_->get() : -1));
    for (const int fd : plan.stdio) {
      out.word(attach(fd));
    }
    out.word(attach(plan.terminal));
    out.word(plan.null_stdin ? 1 : 0);
    out.word(mask);
    out.word(go_ahead ? 1 : 0);
    out.word(static_cast<std::uint64_t>(command.limit_ms_));
    out.text(command.program_);
    out.texts(command.args_);
    out.texts(command.environment_.resolved(fence.temporary_directory_assignment()));
    out.text(command.directory_.native());
    const FenceReport& report = fence.report_;
    out.word(static_cast<std::uint64_t>(report.status));
    out.word(report.syscall_filter ? 1 : 0);
    out.word(report.ipc_namespace ? 1 : 0);
    out.filter(fence.filter_);
    out.filter(fence.refusing_filter_);
    const NamespacePlan& layer = fence.namespaces_;
    out.word(layer.active ? 1 : 0);
    out.word(layer.user_namespace ? 1 : 0);
    out.text(layer.uid_map);
    out.text(layer.gid_map);
    out.texts(layer.writable);
    out.texts(layer.protected_files);
    out.texts(layer.protected_dirs);
    out.texts(layer.pinned);
    out.word(layer.temporary_areas ? 1 : 0);
    out.text(layer.temporary);
    out.texts(layer.temporary_targets);
    out.texts(layer.hidden_dirs);
    out.texts(layer.revealed);
    out.texts(layer.revealed_steps);
    out.texts(layer.hidden_files);
    out.word(layer.hidden_identities.size());
    for (const FileIdentity& identity : layer.hidden_identities) {
      out.word(identity.device);
      out.word(identity.inode);
    }
    out.word(launch_magic);

    LaunchHeader header;
    header.size = out.bytes().size();
    header.descriptors = count;
    iovec part{&header, sizeof header};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * launch_descriptors)> space{};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = space.data();
    message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* attached = CMSG_FIRSTHDR(&message);
    attached->cmsg_level = SOL_SOCKET;
    attached->cmsg_type = SCM_RIGHTS;
    attached->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(attached), descriptors.data(), sizeof(int) * count);
    if (retry_on_eintr([&] { return ::sendmsg(control, &message, MSG_NOSIGNAL); }) !=
        static_cast<::ssize_t>(sizeof header)) {
      throw SystemError(errno, "FencedCommand::spawn: sending the launch request");
    }
    std::size_t done = 0;
    while (done < out.bytes().size()) {
      const ::ssize_t wrote = retry_on_eintr(
          [&] { return ::send(control, out.bytes().data() + done, out.bytes().size() - done, MSG_NOSIGNAL); });
      if (wrote <= 0) {
        throw SystemError(errno, "FencedCommand::spawn: sending the launch request");
      }
      done += static_cast<std::size_t>(wrote);
    }
  }

  /// Where the launcher forks this call's supervisor: from its zygote already running under the
  /// filter the command's child would install (its own IPC namespace's program, or the one
  /// refusing System V IPC), so that the child inherits it instead of compiling it again; from
  /// the launcher itself for a fence without a filter (danger-full-access among them, whose
  /// command must inherit none) or with the terminal's program (its child leaves the host's
  /// session before the filter forbids setsid). A child whose program turns out to differ
  /// (its IPC namespace refused) installs its own on top, as strict as the two together.
  /// Throws what `shared_syscall_filter` throws (std::bad_alloc).
  [[nodiscard]] static LaunchVariant variant(const PreparedFence& fence) {
    if (!fence.report_.syscall_filter || fence.report_.status == FenceStatus::unrestricted) {
      return LaunchVariant::plain;
    }
    const std::vector<SyscallFilterInstruction>& expected =
        fence.namespaces_.active || fence.report_.ipc_namespace ? fence.filter_ : fence.refusing_filter_;
    if (same_syscall_filter(expected, shared_syscall_filter(false, false))) {
      return LaunchVariant::own_ipc_namespace;
    }
    if (same_syscall_filter(expected, shared_syscall_filter(true, false))) {
      return LaunchVariant::refusing_sysv_ipc;
    }
    return LaunchVariant::plain;
  }

  /// In a supervisor the launcher forked for the call on `control`: reads the request, takes
  /// the host's umask and working directory, and supervises the command as a supervisor forked
  /// from the host would (FencedCommand::supervise). A request it cannot read is reported as a
  /// supervision failure. Never returns.
  /// `begun` is the supervision a spare supervisor began before its call came
  /// (`run_spare_supervisor`), or nullptr: `supervise` begins it.
  template <class Command> [[noreturn]] static void serve(int control, const Supervision* begun = nullptr) noexcept {
    const auto fail = [control](int error, const char* step) noexcept {
      SupervisorReport report{};
      report.kind = SupervisorReport::failed;
      report.stage = static_cast<int>(ChildStage::supervision);
      report.error = error;
      report.detail = -1;
      for (std::size_t i = 0; i + 1 < report.step.size() && step[i] != '\0'; ++i) {
        report.step[i] = step[i];
      }
      static_cast<void>(write_all(control, reinterpret_cast<const char*>(&report), sizeof report));
      ::_exit(Command::cannot_run_exit_code);
    };
    LaunchHeader header;
    std::array<int, launch_descriptors> received{};
    received.fill(-1);
    iovec part{&header, sizeof header};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * launch_descriptors)> space{};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = space.data();
    message.msg_controllen = space.size();
    ::ssize_t got = retry_on_eintr([&]() noexcept { return ::recvmsg(control, &message, MSG_CMSG_CLOEXEC); });
    std::uint32_t count = 0;
    for (cmsghdr* attached = got > 0 ? CMSG_FIRSTHDR(&message) : nullptr; attached != nullptr;
         attached = CMSG_NXTHDR(&message, attached)) {
      if (attached->cmsg_level == SOL_SOCKET && attached->cmsg_type == SCM_RIGHTS) {
        const std::size_t bytes = attached->cmsg_len - CMSG_LEN(0);
        for (std::size_t i = 0; i < bytes / sizeof(int) && count < launch_descriptors; ++i) {
          std::memcpy(&received[count++], CMSG_DATA(attached) + i * sizeof(int), sizeof(int));
        }
      }
    }
    if (got <= 0 || (message.msg_flags & MSG_CTRUNC) != 0) {
      fail(got < 0 ? errno : EPROTO, "reading the launch request");
    }
    auto done = static_cast<std::size_t>(got);
    while (done < sizeof header) {
      got = retry_on_eintr(
          [&]() noexcept { return ::recv(control, reinterpret_cast<char*>(&header) + done, sizeof header - done, 0); });
      if (got <= 0) {
        fail(got < 0 ? errno : EPROTO, "reading the launch request");
      }
      done += static_cast<std::size_t>(got);
    }
    if (header.magic != launch_magic || header.protocol != launch_protocol || header.descriptors != count ||
        header.size > (1ULL << 30)) {
      fail(EPROTO, "reading the launch request");
    }
    try {
      std::string bytes(header.size, '\0');
      for (done = 0; done < bytes.size();) {
        got = retry_on_eintr([&] { return ::recv(control, bytes.data() + done, bytes.size() - done, 0); });
        if (got <= 0) {
          fail(got < 0 ? errno : EPROTO, "reading the launch request");
        }
        done += static_cast<std::size_t>(got);
      }
      LaunchReader in(bytes);
      const auto descriptor = [&](std::uint64_t index) noexcept { return index < count ? received[index] : -1; };
      const int cwd = descriptor(in.word());
      UniqueFd ruleset(descriptor(in.word()));
      UniqueFd read_ruleset(descriptor(in.word()));
      StartPlan plan;
      for (int& fd : plan.stdio) {
        fd = descriptor(in.word());
      }
      plan.terminal = descriptor(in.word());
      plan.zygote_session = inherited_syscall_filter != nullptr; // forked from a zygote
      plan.null_stdin = in.word() != 0;
      const auto mask = static_cast<::mode_t>(in.word() & 0777U);
      plan.go_ahead = in.word() != 0 ? control : -1;
      const auto limit = static_cast<long long>(in.word());
      std::string program = in.text();
      std::vector<std::string> args = in.texts();
      std::vector<std::string> environment = in.texts();
      std::string directory = in.text();
      FenceReport report;
      report.status = static_cast<FenceStatus>(in.word());
      report.syscall_filter = in.word() != 0;
      report.ipc_namespace = in.word() != 0;
      std::vector<SyscallFilterInstruction> filter = in.filter();
      std::vector<SyscallFilterInstruction> refusing = in.filter();
      NamespacePlan layer;
      layer.active = in.word() != 0;
      layer.user_namespace = in.word() != 0;
      layer.uid_map = in.text();
      layer.gid_map = in.text();
      layer.writable = in.texts();
      layer.protected_files = in.texts();
      layer.protected_dirs = in.texts();
      layer.pinned = in.texts();
      layer.temporary_areas = in.word() != 0;
      layer.temporary = in.text();
      layer.temporary_targets = in.texts();
      layer.hidden_dirs = in.texts();
      layer.revealed = in.texts();
      layer.revealed_steps = in.texts();
      layer.hidden_files = in.texts();
      const std::uint64_t identities = in.word();
      if (identities == layer.hidden_dirs.size() + layer.hidden_files.size()) {
        layer.hidden_identities.reserve(identities);
        for (std::uint64_t i = 0; i < identities; ++i) {
          FileIdentity identity;
          identity.device = in.word();
          identity.inode = in.word();
          layer.hidden_identities.push_back(identity);
        }
      }
      const bool ended = in.word() == launch_magic;
      if (!in.complete() || !ended || cwd < 0 || args.empty() || report.status > FenceStatus::unfenced) {
        fail(EPROTO, "reading the launch request");
      }
      ::umask(mask);
      if (::fchdir(cwd) != 0) {
        fail(errno, "fchdir to the host's working directory");
      }
      ::close(cwd);
      PreparedFence fence(std::move(report), std::move(ruleset), {}, std::move(filter), std::move(refusing));
      fence.namespaces_ = std::move(layer);
      if (read_ruleset) {
        fence.read_ruleset_ = std::make_shared<const UniqueFd>(std::move(read_ruleset));
      }
      Command command(std::move(args), std::move(program), CommandEnvironment::exactly(std::move(environment)),
                      std::move(directory), limit);
      if (begun != nullptr) {
        command.supervise(fence, plan, control, *begun);
      }
      command.supervise(fence, plan, control);
    } catch (...) { // std::bad_alloc: this fork of the launcher has nothing else to throw
      fail(ENOMEM, "reading the launch request");
    }
    ::_exit(Command::cannot_run_exit_code); // not reached: supervise and fail never return
  }
};

/// Closes each descriptor of `fds` that is not -1: in a process just forked from the launcher
/// or a zygote, the sockets of its parent it must not keep. Async-signal-safe.
inline void close_parent_sockets(const std::array<int, 3>& fds) noexcept {
  for (const int fd : fds) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
}

/// Forks the supervisor of the call on `control` from the calling process (the launcher or one
/// of its zygotes). The supervisor first closes `inherited` (the caller's own sockets; -1
/// entries are skipped), then serves the call (`LaunchWire::serve`); when the fork fails, the
/// host gets a supervision failure naming it. The caller still owns `control` and closes it.
template <class Command> void fork_supervisor(int control, std::array<int, 3> inherited) noexcept {
  const auto report_failure = [control](int error, const char* step) noexcept {
    SupervisorReport report{};
    report.kind = SupervisorReport::failed;
    report.stage = static_cast<int>(ChildStage::supervision);
    report.error = error;
    report.detail = -1;
    for (std::size_t i = 0; i + 1 < report.step.size() && step[i] != '\0'; ++i) {
      report.step[i] = step[i];
    }
    static_cast<void>(write_all(control, reinterpret_cast<const char*>(&report), sizeof report));
  };
  const ::pid_t supervisor = ::fork();
  if (supervisor == 0) {
    close_parent_sockets(inherited);
    // A group of its own, so that no command can leave a group holding it orphaned with a
    // stopped member (the kernel's SIGHUP): a zygote's session is shared by its calls
    // (run_filtered_zygote). Fails closed.
    if (::setpgid(0, 0) != 0) {
      report_failure(errno, "setpgid");
      ::_exit(Command::cannot_run_exit_code);
    }
    LaunchWire::serve<Command>(control);
  }
  if (supervisor < 0) {
    report_failure(errno, "fork");
  }
}

/// The byte a filtered zygote writes once its filter is installed.
inline constexpr char zygote_ready = 'Z';
/// The byte a spare supervisor writes its zygote when it took a call (the zygote then forks
/// the next spare), and when it read end of file instead (the launcher is gone: the zygote ends).
inline constexpr char spare_took_call = 'T';
inline constexpr char spare_saw_end = 'E';

/// A zygote's spare supervisor, forked before its call so that neither the fork nor the
/// supervisor's own setup (`begin_supervision`) waits in the call's path: makes a process
/// group of its own (`fork_supervisor` says why), begins its supervision, takes the next call
/// from the zygote's `socket` itself, tells the zygote on `told` (`spare_took_call`, or
/// `spare_saw_end` at end of file, then exits), closes both and serves the call. A step of its
/// supervision that failed before the call came is tried again then, and reported on the call
/// if it fails again. Until it has a call it dies with `zygote`, its
/// parent, so that a zygote that died leaves no spare holding its socket (the launcher then
/// starts a new zygote, as it did before spares); with a call it outlives it, as a supervisor
/// forked by the zygote does. Never returns.
template <class Command>
[[noreturn]] void run_spare_supervisor(int socket, int told, ::pid_t zygote, bool own_ipc_namespace) noexcept {
  if (::prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(SIGKILL), 0UL, 0UL, 0UL) != 0 || ::getppid() != zygote) {
    ::_exit(0); // the zygote is gone already (or cannot be followed): it takes no call
  }
  const int group_error = ::setpgid(0, 0) == 0 ? 0 : errno;
  Supervision begun = begin_supervision();
  // Its call's command gets an IPC namespace of its own (a root host's base fence): made now,
  // for this spare's one call alone, rather than by the command's child in the call's path.
  // Where it fails, the child makes it as before.
  begun.ipc_namespace_made = own_ipc_namespace && ::unshare(CLONE_NEWIPC) == 0;
  const HandedCall handed = receive_handed(socket);
  if (handed.got > 0) {
    static_cast<void>(::prctl(PR_SET_PDEATHSIG, 0UL, 0UL, 0UL, 0UL)); // cannot fail: 0 is a valid signal
  }
  const char word = handed.got <= 0 ? spare_saw_end : spare_took_call;
  static_cast<void>(write_all(told, &word, 1));
  ::close(told);
  ::close(socket);
  if (handed.got <= 0 || handed.count != 1) {
    for (std::size_t i = 0; i < handed.count; ++i) {
      ::close(handed.fds[i]);
    }
    ::_exit(0);
  }
  if (begun.failed.error != 0) {
    // It failed while the spare waited (a file table filled for a moment by another call's
    // command, say): tried again for the call, which fails only if it fails now.
    for (const int fd : {begun.children, begun.child_events}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
    const bool made = begun.ipc_namespace_made;
    begun = begin_supervision();
    begun.ipc_namespace_made = made;
  }
  if (group_error != 0) {
    SupervisorReport report{};
    report.kind = SupervisorReport::failed;
    report.stage = static_cast<int>(ChildStage::supervision);
    report.error = group_error;
    report.detail = -1;
    std::memcpy(report.step.data(), "setpgid", sizeof "setpgid");
    static_cast<void>(write_all(handed.fds[0], reinterpret_cast<const char*>(&report), sizeof report));
    ::_exit(Command::cannot_run_exit_code);
  }
  LaunchWire::serve<Command>(handed.fds[0], &begun);
}

/// A zygote of the launcher: sets no_new_privs, installs `program` once, says so on `socket`
/// (`zygote_ready`), then keeps one spare supervisor forked ahead (`run_spare_supervisor`),
/// which takes the next call the launcher hands it on `socket`, until the launcher closes it.
/// Each supervisor inherits the filter (`inherited_syscall_filter`),
/// so its command's child does not install the same program again. Every call it serves is
/// fenced, and each fenced child drops `FENCE_DROPPED_CAPABILITIES` from its bounding set, so the
/// zygote drops them from its own once (where it may: CAP_SETPCAP); a child reads its bounding set
/// before it drops (`read_thread_status`) and asks only for what is left. Exits with 1, having
/// said nothing, when the kernel refuses no_new_privs or the filter; the launcher then forks those
/// calls itself, and each child installs its filter (or fails closed) as before. Never returns.
template <class Command> [[noreturn]] void
run_filtered_zygote(int socket, const std::vector<SyscallFilterInstruction>& program, bool own_ipc_namespace) noexcept {
  // A session of its own, once: the commands of its calls stay in it (StartPlan::zygote_session),
  // so that a call makes no session, and so no scheduling group, of its own
  // (docs/performance.md). It ignores SIGHUP, which the kernel sends to an orphaned process
  // group that a command's stopped process joined, Landlock's signal scope notwithstanding.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigemptyset(&ignore.sa_mask);
  if (::setsid() < 0 || ::sigaction(SIGHUP, &ignore, nullptr) != 0 ||
      ::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0 || install_syscall_filter(program) != 0) {
    ::_exit(1);
  }
  // Only the bounding set: the supervisor and the child still need their effective
  // capabilities (CAP_SYS_ADMIN for the IPC namespace and the mounts). A capability this kernel
  // does not know (EINVAL), or a drop refused without CAP_SETPCAP, stays for the child to drop.
  for (const FenceCapability& capability : FENCE_DROPPED_CAPABILITIES) {
    static_cast<void>(::prctl(PR_CAPBSET_DROP, static_cast<unsigned long>(capability.number), 0UL, 0UL, 0UL));
  }
  inherited_syscall_filter = &program;
  if (!write_all(socket, &zygote_ready, 1)) {
    ::_exit(1);
  }
  for (;;) {
    // A spare supervisor takes the next call; this process waits until it has, then forks the
    // next. When the spare could not be had (pipe or fork failed) or ended without a word
    // (killed), the zygote takes that call itself, so a spare that cannot live never spins.
    std::array<int, 2> told{-1, -1};
    if (::pipe2(told.data(), O_CLOEXEC) == 0) {
      const ::pid_t zygote = ::getpid();
      const ::pid_t spare = ::fork();
      if (spare == 0) {
        ::close(told[0]);
        run_spare_supervisor<Command>(socket, told[1], zygote, own_ipc_namespace);
      }
      ::close(told[1]);
      char word = 0;
      const ::ssize_t got =
          spare > 0 ? retry_on_eintr([&]() noexcept { return ::read(told[0], &word, 1); }) : ::ssize_t{0};
      ::close(told[0]);
      if (got == 1 && word == spare_saw_end) {
        ::_exit(0); // the launcher closed its end (or died)
      }
      if (got == 1) {
        continue;
      }
    }
    const HandedCall handed = receive_handed(socket);
    if (handed.got <= 0) {
      ::_exit(0); // the launcher closed its end (or died)
    }
    if (handed.count == 1) {
      fork_supervisor<Command>(handed.fds[0], {socket, -1, -1});
    }
    for (std::size_t i = 0; i < handed.count; ++i) {
      ::close(handed.fds[i]);
    }
  }
}

/// The launcher's side of one filtered zygote: its socket, once started, and whether it cannot
/// be had (the kernel refused its filter, or the program could not be built).
struct ZygoteEnd {
  int socket = -1;
  ::pid_t pid = -1; ///< the zygote, while `socket` is not -1
  bool unavailable = false;
};

/// Starts the zygote of `zygote` (`run_filtered_zygote` with `shared_syscall_filter(
/// refuse_sysv_ipc, false)`), which first closes `inherited` (the host's socket, the other
/// zygote's, and the socket of the call being handed over: a zygote that kept a call's socket
/// would keep its host from ever reading end of file on it), and
/// waits for it to say its filter is installed. On failure `zygote.socket` stays -1: marked
/// `unavailable` when the zygote could not install its filter (so no other is tried), left to
/// be tried again at the next call when a socket or fork failed.
template <class Command>
void start_filtered_zygote(ZygoteEnd& zygote, bool refuse_sysv_ipc, std::array<int, 3> inherited) noexcept {
  const std::vector<SyscallFilterInstruction>* program = nullptr;
  try {
    program = &shared_syscall_filter(refuse_sysv_ipc, false);
  } catch (...) { // std::bad_alloc, or a program that cannot be built: the launcher's own forks serve
    zygote.unavailable = true;
    return;
  }
  std::array<int, 2> ends{-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends.data()) != 0) {
    return;
  }
  const ::pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ends[0]);
    close_parent_sockets(inherited);
    run_filtered_zygote<Command>(ends[1], *program, !refuse_sysv_ipc);
  }
  ::close(ends[1]);
  char ready = 0;
  if (pid < 0 || retry_on_eintr([&]() noexcept { return ::read(ends[0], &ready, 1); }) != 1 || ready != zygote_ready) {
    ::close(ends[0]);
    zygote.unavailable = pid > 0;
    return;
  }
  zygote.socket = ends[0];
  zygote.pid = pid;
}

/// The launcher's program (tools/dsh_fence_launcher.cpp calls it from main): checks that it
/// was started by this library's host side (`launch_protocol_flag` and the protocol, a socket as
/// descriptor 3), answers with its hello, then has one supervisor forked for each descriptor the
/// host hands it (`LaunchWire::serve`) until the host closes the socket: by the filtered zygote
/// the host's byte names (`LaunchVariant`), started at its first call, else by itself. Returns
/// the exit status: 0 when the host closed it, 2 for a wrong start (with a line on stderr).
template <class Command> [[nodiscard]] int run_launcher(int argc, char** argv) {
  const std::string expected = std::to_string(launch_protocol);
  struct stat socket_info {};
  if (argc != 3 || std::string_view(argv[1]) != launch_protocol_flag || ::fstat(3, &socket_info) != 0 ||
      !S_ISSOCK(socket_info.st_mode)) {
    constexpr std::string_view usage =
        "dsh-fence-launcher: not a program to run by hand: the dsh-sandbox-policy library starts it "
        "(docs/enforcement.md#the-launcher)\n";
    static_cast<void>(write_all(STDERR_FILENO, usage.data(), usage.size()));
    return 2;
  }
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  close_descriptor_range(4, std::numeric_limits<int>::max());
  // Not the host's directory at its first call for the host's whole life (it would keep a
  // removed directory alive, a file system busy); each supervisor enters the call's own.
  if (::chdir("/") != 0) {
    return 1;
  }
  // The hello: the protocol, then the credentials this program has after execve(2), which the
  // host compares with its own.
  const LaunchHello hello{launch_magic, launch_protocol};
  std::string answer(reinterpret_cast<const char*>(&hello), sizeof hello);
  try {
    std::string status;
    append_proc_text(status, "status", "/proc/thread-self/status");
    answer += inherited_status_lines(status);
  } catch (...) {
    return 1;
  }
  if (::send(3, answer.data(), answer.size(), MSG_NOSIGNAL) != static_cast<::ssize_t>(answer.size()) ||
      std::string_view(argv[2]) != expected) {
    return 2; // the host reads the protocol from the hello and says what differs
  }
  // Every disposition the default, with the kernel's own call: posix_spawn leaves the C
  // library's internal signals (32 and 33) ignored in its child, and the library's sigaction
  // refuses to touch them, but a command must not inherit them ignored. A zeroed kernel
  // sigaction is SIG_DFL with no flags and an empty mask on every architecture.
  for (int signal = 1; signal <= 64; ++signal) {
    if (signal != SIGKILL && signal != SIGSTOP) {
      const std::array<unsigned long, 4> default_action{};
      ::syscall(SYS_rt_sigaction, signal, default_action.data(), nullptr, sizeof(std::uint64_t));
    }
  }
  // Supervisors are reaped by the kernel; each resets this in its own copy (`supervise`).
  ::signal(SIGCHLD, SIG_IGN);
  // The zygotes of `LaunchVariant::refusing_sysv_ipc` and `LaunchVariant::own_ipc_namespace`.
  std::array<ZygoteEnd, 2> zygotes{};
  for (;;) {
    const HandedCall handed = receive_handed(3);
    if (handed.got <= 0) {
      return handed.got == 0 ? 0 : 1; // the host closed its end (or died)
    }
    if (handed.count == 1) {
      const bool refusing = handed.byte == static_cast<char>(LaunchVariant::refusing_sysv_ipc);
      const bool own_ipc = handed.byte == static_cast<char>(LaunchVariant::own_ipc_namespace);
      bool served = false;
      if (refusing || own_ipc) {
        ZygoteEnd& zygote = zygotes[refusing ? 0 : 1];
        ZygoteEnd& other = zygotes[refusing ? 1 : 0];
        // A zygote that died (its socket refuses the call) is started again once.
        for (int attempt = 0; attempt < 2 && !served && !zygote.unavailable; ++attempt) {
          if (zygote.socket < 0) {
            start_filtered_zygote<Command>(zygote, refusing, {3, other.socket, handed.fds[0]});
            if (zygote.socket >= 0) {
              // The host then sends this variant's calls to the zygote straight
              // (LauncherClient::send_call), with a pidfd by which it sees the zygote gone; a
              // host that is gone hears nothing. (The zygote is alive: it said it was ready, and
              // this process reaps nothing before pidfd_open.)
              const UniqueFd alive(static_cast<int>(::syscall(SYS_pidfd_open, zygote.pid, 0U)));
              if (alive) {
                static_cast<void>(
                    send_descriptors(3, {zygote.socket, alive.get()}, static_cast<LaunchVariant>(handed.byte)));
              }
            }
          }
          if (zygote.socket < 0) {
            break;
          }
          served = send_descriptor(zygote.socket, handed.fds[0]) == 0;
          if (!served) {
            ::close(zygote.socket);
            zygote.socket = -1;
          }
        }
      }
      if (!served) {
        fork_supervisor<Command>(handed.fds[0], {3, zygotes[0].socket, zygotes[1].socket});
      }
    }
    for (std::size_t i = 0; i < handed.count; ++i) {
      ::close(handed.fds[i]);
    }
  }
}

} // namespace dsh::detail
