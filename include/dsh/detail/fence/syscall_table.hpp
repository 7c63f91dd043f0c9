/// @file
/// The rows of the fence's system-call filter, as data: each rule as people read it paired with
/// what the program checks, each call's number on every ABI the filter decodes, where set-ID calls
/// keep their mode, and the compile-time checks that the rows and numbers agree. The program is
/// built from these rows (syscall_filter.hpp), and the docs and reports show them.
#pragma once

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#endif

namespace dsh::detail {

/// One rule of the filter as people read it (docs/enforcement.md, reports). `calls` lists the
/// calls the rule is about, separated by ", " (or, for the first two and the last rows, says
/// which calls in words); `refused_when` the condition; `errno_name` what a refused call returns
/// ("none" for a rule that allows); `reason` why.
struct SyscallRule {
  std::string_view calls;
  std::string_view refused_when;
  std::string_view errno_name;
  std::string_view reason;
};

/// What the program checks for one rule; the rows below pair each `SyscallRule` with its check,
/// so the table and the program are made from the same rows.
enum class RuleCheck : unsigned char {
  foreign_architecture, ///< every call of an architecture the filter does not decode
  x32_abi,              ///< every x32 call (x86_64 numbers with bit 30 set)
  always,               ///< every call named, whatever its arguments
  own_limits,           ///< unless argument 0 (pid) or argument 2 (the new limit) is 0
  own_priority,         ///< unless argument 0 is PRIO_PROCESS and argument 1 is 0
  own_pid,              ///< unless argument 0 (pid) is 0
  own_io_priority,      ///< unless argument 0 is IOPRIO_WHO_PROCESS and argument 1 is 0
  setid_mode,           ///< when the call sets or creates a mode with S_ISUID or S_ISGID (`mode_arguments`)
  terminal_requests,    ///< when argument 1 (an ioctl request, its low 32 bits) is TIOCNOTTY or TIOCSTI
  allowed,              ///< never: the calls named are left to the kernel's own checks
  everything_else,      ///< never: every call no other row names
};

/// A row of the filter: what people read, what the program checks, and whether the row applies
/// only when the command shares the host's IPC namespace (`refuse_sysv_ipc`) or only when it
/// runs on its own terminal, the terminal family (`terminal`).
struct SyscallRuleRow {
  SyscallRule rule;
  RuleCheck check;
  bool only_shared_ipc = false;
  bool only_terminal = false;
};

inline constexpr std::array syscall_rule_rows{
    SyscallRuleRow{
        {"every call from an architecture other than the build's own (x86_64, aarch64) and its 32-bit entry "
         "point (i386, arm)",
         "always", "EPERM",
         "system-call numbers differ between architectures: a call the filter cannot decode could be any call, "
         "so none is let through"},
        RuleCheck::foreign_architecture},
    SyscallRuleRow{{"x32 calls (x86_64 numbers with bit 0x40000000)", "always", "EPERM",
                    "the x32 ABI numbers the same calls differently, so the rules below would not see them; no "
                    "ordinary program uses it"},
                   RuleCheck::x32_abi},
    SyscallRuleRow{{"prlimit64", "pid is not 0 and new_limit is not NULL", "EPERM",
                    "sets another process's limits, which the kernel allows for every process of the same user "
                    "(RLIMIT_CPU 1 kills it, RLIMIT_FSIZE 0 fails its writes) and Landlock does not mediate; "
                    "reading any process's limits, and setting the caller's own (setrlimit, ulimit), stay allowed"},
                   RuleCheck::own_limits},
    SyscallRuleRow{{"setpriority", "which is not PRIO_PROCESS, or who is not 0", "EPERM",
                    "renices another process, a process group, or with PRIO_USER every process of the user; a "
                    "group is refused even as the caller's own (who 0), because a command started from the "
                    "launcher's zygote shares the session the zygote leads (a new session is a new scheduling "
                    "group, docs/performance.md) and may join the zygote's group, which every later call is "
                    "forked from; nice of the caller itself stays allowed"},
                   RuleCheck::own_priority},
    SyscallRuleRow{{"sched_setscheduler, sched_setparam, sched_setattr, sched_setaffinity", "pid is not 0", "EPERM",
                    "changes another process's policy (SCHED_IDLE starves it), priority or CPUs, which the same "
                    "user may do and Landlock does not mediate; the caller's own (chrt and taskset starting a "
                    "command) stay allowed"},
                   RuleCheck::own_pid},
    SyscallRuleRow{{"ioprio_set", "which is not IOPRIO_WHO_PROCESS, or who is not 0", "EPERM",
                    "sets another process's I/O class (idle starves its disk access), a process group's (refused "
                    "even as the caller's own, as for setpriority), or with IOPRIO_WHO_USER every process of the "
                    "user; ionice of the caller itself stays allowed"},
                   RuleCheck::own_io_priority},
    SyscallRuleRow{{"ptrace, process_vm_readv, process_vm_writev, kcmp, pidfd_getfd, process_madvise, "
                    "migrate_pages, move_pages",
                    "never", "none",
                    "the kernel checks each against its target with ptrace_may_access, which Landlock limits "
                    "to processes inside the command's own domain; left to Landlock, so strace and gdb keep "
                    "working on the command's own children"},
                   RuleCheck::allowed},
    SyscallRuleRow{{"add_key, request_key, keyctl", "always", "EPERM",
                    "keys are not files: the user keyring and the session keyring the command inherits are "
                    "shared with the user's other processes, and Landlock does not mediate them "
                    "(KEYCTL_UPDATE rewrites what those processes read)"},
                   RuleCheck::always},
    SyscallRuleRow{{"chmod, fchmod, fchmodat, fchmodat2",
                    "the mode has S_ISUID or S_ISGID (in its low 16 bits, the ones the kernel reads)", "EPERM",
                    "a set-user-ID copy of a shell the user owns runs as the user for whoever executes it later, "
                    "outside the fence (made by root: a root shell for every local user); no_new_privs protects "
                    "only the fenced tree"},
                   RuleCheck::setid_mode},
    SyscallRuleRow{{"open, openat, creat, mknod, mknodat",
                    "the call creates a file (open and openat with O_CREAT or __O_TMPFILE; creat, mknod and "
                    "mknodat always) and the mode has S_ISUID or S_ISGID",
                    "EPERM",
                    "the same bits given at creation; an open that creates nothing ignores its mode, so a stray "
                    "mode argument is allowed"},
                   RuleCheck::setid_mode},
    SyscallRuleRow{{"openat2", "always", "ENOSYS",
                    "its flags and mode are in a struct the filter cannot read; ENOSYS is what a kernel without "
                    "openat2 answers, so programs fall back to openat, which is checked (EPERM would fail the open)"},
                   RuleCheck::always},
    SyscallRuleRow{{"io_uring_setup, io_uring_enter, io_uring_register", "always", "EPERM",
                    "the operations of a ring (IORING_OP_OPENAT with a set-user-ID mode among them) run without "
                    "passing this filter, which would bypass every argument check above"},
                   RuleCheck::always},
    SyscallRuleRow{{"shmget, shmat, shmdt, shmctl, msgget, msgsnd, msgrcv, msgctl, semget, semop, semtimedop, "
                    "semtimedop_time64, semctl, ipc",
                    "refuse_sysv_ipc: the command shares the host's IPC namespace", "EPERM",
                    "System V objects are named by key or id in the IPC namespace, not by path, so Landlock does "
                    "not see them: the same user (and root) may read, overwrite or remove the host's segments, "
                    "queues and semaphores; ipc is i386's multiplexer of them all"},
                   RuleCheck::always,
                   true},
    SyscallRuleRow{{"mq_open, mq_unlink, mq_timedsend, mq_timedsend_time64, mq_timedreceive, "
                    "mq_timedreceive_time64, mq_notify, mq_getsetattr",
                    "refuse_sysv_ipc: the command shares the host's IPC namespace", "EPERM",
                    "POSIX message queues live in the same namespace; reading a queue's file where an mqueue "
                    "file system is mounted, which Landlock allows, gives a descriptor mq_timedreceive accepts, "
                    "so the calls taking one are refused too"},
                   RuleCheck::always,
                   true},
    SyscallRuleRow{{"setsid", "terminal: the command runs on its own terminal (FenceOptions::terminal)", "EPERM",
                    "/dev/tty, granted so that programs reopen the command's own terminal, opens whatever terminal "
                    "controls the caller; a new session has none, and its leader acquires one by opening, for "
                    "reading as any file may be, a terminal no session controls (one the host keeps for a later "
                    "call, one whose session ended) without O_NOCTTY; /dev/tty would then drive that terminal. "
                    "Without FenceOptions::terminal /dev/tty is not granted and setsid stays allowed"},
                   RuleCheck::always,
                   false,
                   true},
    SyscallRuleRow{{"ioctl",
                    "terminal, and the request (in its low 32 bits, the unsigned int the kernel reads) is "
                    "TIOCNOTTY or TIOCSTI",
                    "EPERM",
                    "the command leads its session, so TIOCNOTTY on its own terminal leaves the session without "
                    "one, ready to acquire another as above; TIOCSTI, which the kernel allows on the caller's "
                    "controlling terminal where dev.tty.legacy_tiocsti is 1, would queue input that the "
                    "terminal's next reader (the host's next call on it) runs under its own policy; every other "
                    "request is left to Landlock (ioctl_dev) and the kernel"},
                   RuleCheck::terminal_requests,
                   false,
                   true},
    SyscallRuleRow{{"clone, clone3", "never", "none",
                    "the filter reads no clone flags (namespaces are bounded by no_new_privs, the dropped "
                    "capabilities and Landlock), so clone3, whose flags are in a struct, needs no ENOSYS answer "
                    "to send libc back to clone"},
                   RuleCheck::allowed},
    SyscallRuleRow{{"every other call", "never", "none",
                    "the filter refuses only what the rows above name, with an errno, and never kills the command"},
                   RuleCheck::everything_else},
};

/// The `SyscallRule` of each row of `rows`, in order.
template <std::size_t N>
[[nodiscard]] constexpr std::array<SyscallRule, N> rules_of(const std::array<SyscallRuleRow, N>& rows) noexcept {
  std::array<SyscallRule, N> rules{};
  for (std::size_t i = 0; i < N; ++i) {
    rules[i] = rows[i].rule;
  }
  return rules;
}

/// The filter's rules, one row each, as docs and reports show them; the program is built from
/// the same rows (`syscall_rule_rows`).
inline constexpr std::array<SyscallRule, syscall_rule_rows.size()> syscall_rules = rules_of(syscall_rule_rows);

/// The system-call ABIs the filter decodes: each build's native one and its 32-bit entry point.
enum class SyscallAbi : unsigned char { x86_64, i386, aarch64, arm };

/// No such call on that ABI.
inline constexpr int no_syscall = -1;

/// The numbers of one call on each ABI, from the kernel's tables: x86_64 and i386 as the kernel
/// headers' unistd_64.h and unistd_32.h define them, aarch64 as the generic unistd.h does, arm as
/// the kernel's arm EABI table does (Linux 6.18); `no_syscall` where the ABI lacks the call. The
/// tests compare the first three columns with the headers of the machine they build on.
struct SyscallNumbers {
  std::string_view name;
  int x86_64;
  int i386;
  int aarch64;
  int arm;

  /// The number on `abi`, or `no_syscall`.
  [[nodiscard]] constexpr int on(SyscallAbi abi) const noexcept {
    switch (abi) {
    case SyscallAbi::x86_64:
      return x86_64;
    case SyscallAbi::i386:
      return i386;
    case SyscallAbi::aarch64:
      return aarch64;
    case SyscallAbi::arm:
      return arm;
    }
    return no_syscall;
  }
};

inline constexpr std::array syscall_numbers{
    SyscallNumbers{"prlimit64", 302, 340, 261, 369},
    SyscallNumbers{"setpriority", 141, 97, 140, 97},
    SyscallNumbers{"sched_setscheduler", 144, 156, 119, 156},
    SyscallNumbers{"sched_setparam", 142, 154, 118, 154},
    SyscallNumbers{"sched_setattr", 314, 351, 274, 380},
    SyscallNumbers{"sched_setaffinity", 203, 241, 122, 241},
    SyscallNumbers{"ioprio_set", 251, 289, 30, 314},
    SyscallNumbers{"ptrace", 101, 26, 117, 26},
    SyscallNumbers{"process_vm_readv", 310, 347, 270, 376},
    SyscallNumbers{"process_vm_writev", 311, 348, 271, 377},
    SyscallNumbers{"kcmp", 312, 349, 272, 378},
    SyscallNumbers{"pidfd_getfd", 438, 438, 438, 438},
    SyscallNumbers{"process_madvise", 440, 440, 440, 440},
    SyscallNumbers{"migrate_pages", 256, 294, 238, 400},
    SyscallNumbers{"move_pages", 279, 317, 239, 344},
    SyscallNumbers{"add_key", 248, 286, 217, 309},
    SyscallNumbers{"request_key", 249, 287, 218, 310},
    SyscallNumbers{"keyctl", 250, 288, 219, 311},
    SyscallNumbers{"chmod", 90, 15, no_syscall, 15},
    SyscallNumbers{"fchmod", 91, 94, 52, 94},
    SyscallNumbers{"fchmodat", 268, 306, 53, 333},
    SyscallNumbers{"fchmodat2", 452, 452, 452, 452},
    SyscallNumbers{"open", 2, 5, no_syscall, 5},
    SyscallNumbers{"openat", 257, 295, 56, 322},
    SyscallNumbers{"creat", 85, 8, no_syscall, 8},
    SyscallNumbers{"mknod", 133, 14, no_syscall, 14},
    SyscallNumbers{"mknodat", 259, 297, 33, 324},
    SyscallNumbers{"openat2", 437, 437, 437, 437},
    SyscallNumbers{"io_uring_setup", 425, 425, 425, 425},
    SyscallNumbers{"io_uring_enter", 426, 426, 426, 426},
    SyscallNumbers{"io_uring_register", 427, 427, 427, 427},
    SyscallNumbers{"shmget", 29, 395, 194, 307},
    SyscallNumbers{"shmat", 30, 397, 196, 305},
    SyscallNumbers{"shmdt", 67, 398, 197, 306},
    SyscallNumbers{"shmctl", 31, 396, 195, 308},
    SyscallNumbers{"msgget", 68, 399, 186, 303},
    SyscallNumbers{"msgsnd", 69, 400, 189, 301},
    SyscallNumbers{"msgrcv", 70, 401, 188, 302},
    SyscallNumbers{"msgctl", 71, 402, 187, 304},
    SyscallNumbers{"semget", 64, 393, 190, 299},
    SyscallNumbers{"semop", 65, no_syscall, 193, 298},
    SyscallNumbers{"semtimedop", 220, no_syscall, 192, 312},
    SyscallNumbers{"semtimedop_time64", no_syscall, 420, no_syscall, 420},
    SyscallNumbers{"semctl", 66, 394, 191, 300},
    SyscallNumbers{"ipc", no_syscall, 117, no_syscall, no_syscall}, // arm's is OABI only
    SyscallNumbers{"mq_open", 240, 277, 180, 274},
    SyscallNumbers{"mq_unlink", 241, 278, 181, 275},
    SyscallNumbers{"mq_timedsend", 242, 279, 182, 276},
    SyscallNumbers{"mq_timedsend_time64", no_syscall, 418, no_syscall, 418},
    SyscallNumbers{"mq_timedreceive", 243, 280, 183, 277},
    SyscallNumbers{"mq_timedreceive_time64", no_syscall, 419, no_syscall, 419},
    SyscallNumbers{"mq_notify", 244, 281, 184, 278},
    SyscallNumbers{"mq_getsetattr", 245, 282, 185, 279},
    SyscallNumbers{"setsid", 112, 66, 157, 66},
    SyscallNumbers{"ioctl", 16, 54, 29, 54},
    SyscallNumbers{"clone", 56, 120, 220, 120},
    SyscallNumbers{"clone3", 435, 435, 435, 435},
};

/// Where a `RuleCheck::setid_mode` call keeps its arguments: `flags` is the open flags'
/// argument, or -1 for a call that always creates a file or sets a mode; `mode` the mode's.
struct ModeArguments {
  std::string_view call;
  int flags;
  int mode;
};

inline constexpr std::array mode_arguments{
    ModeArguments{"chmod", -1, 1},     ModeArguments{"fchmod", -1, 1}, ModeArguments{"fchmodat", -1, 2},
    ModeArguments{"fchmodat2", -1, 2}, ModeArguments{"open", 1, 2},    ModeArguments{"openat", 2, 3},
    ModeArguments{"creat", -1, 1},     ModeArguments{"mknod", -1, 1},  ModeArguments{"mknodat", -1, 2},
};

// Argument values the checks compare with. They are the same on x86_64, i386, aarch64 and arm:
// <sys/resource.h>, <linux/ioprio.h>, and the generic <asm/fcntl.h> and <asm/ioctls.h> values
// none of the four overrides.
inline constexpr std::uint32_t prio_process = 0;                  // PRIO_PROCESS
inline constexpr std::uint32_t ioprio_who_process = 1;            // IOPRIO_WHO_PROCESS
inline constexpr std::uint32_t open_creates = 0100U | 020000000U; // O_CREAT | __O_TMPFILE
inline constexpr std::uint32_t setid_bits = 04000U | 02000U;      // S_ISUID | S_ISGID
inline constexpr std::uint32_t x32_syscall_bit = 0x40000000U;     // __X32_SYSCALL_BIT
inline constexpr std::uint32_t tiocnotty = 0x5422U;               // TIOCNOTTY
inline constexpr std::uint32_t tiocsti = 0x5412U;                 // TIOCSTI
#if defined(__linux__)                                            // the native headers agree
static_assert(PRIO_PROCESS == prio_process);
static_assert(O_CREAT == 0100 && (S_ISUID | S_ISGID) == setid_bits);
static_assert(TIOCNOTTY == tiocnotty && TIOCSTI == tiocsti);
#if defined(O_TMPFILE) // the kernel's O_TMPFILE is its __O_TMPFILE bit with O_DIRECTORY
static_assert((O_TMPFILE & ~O_DIRECTORY) == 020000000);
#endif
#endif

/// The next name of a ", "-separated list at `at` (advanced past it).
[[nodiscard]] constexpr std::string_view next_call(std::string_view list, std::size_t& at) noexcept {
  const std::size_t end = std::min(list.find(", ", at), list.size());
  const std::string_view name = list.substr(at, end - at);
  at = end == list.size() ? end : end + 2;
  return name;
}

/// The position of the call named `name` in `syscall_numbers`, or its size. (An index, not a
/// pointer: GCC's sanitizers make a constant pointer's comparison with null non-constant.)
[[nodiscard]] constexpr std::size_t syscall_index(std::string_view name) noexcept {
  std::size_t index = 0;
  while (index < syscall_numbers.size() && syscall_numbers[index].name != name) {
    ++index;
  }
  return index;
}

/// The numbers of the call named `name`, or nullptr.
[[nodiscard]] constexpr const SyscallNumbers* find_syscall(std::string_view name) noexcept {
  const std::size_t index = syscall_index(name);
  return index < syscall_numbers.size() ? &syscall_numbers[index] : nullptr;
}

/// The position of the `RuleCheck::setid_mode` call `name` in `mode_arguments`, or its size.
[[nodiscard]] constexpr std::size_t mode_arguments_index(std::string_view name) noexcept {
  std::size_t index = 0;
  while (index < mode_arguments.size() && mode_arguments[index].call != name) {
    ++index;
  }
  return index;
}

/// Where the `RuleCheck::setid_mode` call `name` keeps its arguments, or nullptr.
[[nodiscard]] constexpr const ModeArguments* find_mode_arguments(std::string_view name) noexcept {
  const std::size_t index = mode_arguments_index(name);
  return index < mode_arguments.size() ? &mode_arguments[index] : nullptr;
}

/// The errno value of `name` as the table spells it: 0 for "none", -1 for a name it does not use.
[[nodiscard]] constexpr int errno_value(std::string_view name) noexcept {
  if (name == "none") {
    return 0;
  }
  if (name == "EPERM") {
    return EPERM;
  }
  if (name == "ENOSYS") {
    return ENOSYS;
  }
  return -1;
}

/// True when the row's `calls` are names of `syscall_numbers` (every row but the ones that
/// describe calls in words).
[[nodiscard]] constexpr bool names_calls(RuleCheck check) noexcept {
  return check != RuleCheck::foreign_architecture && check != RuleCheck::x32_abi && check != RuleCheck::everything_else;
}

/// True when every name of every row is in `syscall_numbers`, no call is in two rows, every
/// `setid_mode` call has its `mode_arguments`, and every errno name is known and matches the check
/// (an allowing row says "none", a refusing one an errno).
[[nodiscard]] constexpr bool syscall_rule_rows_are_consistent() noexcept {
  for (std::size_t row = 0; row < syscall_rule_rows.size(); ++row) {
    const SyscallRuleRow& entry = syscall_rule_rows[row];
    const int error = errno_value(entry.rule.errno_name);
    const bool allows = entry.check == RuleCheck::allowed || entry.check == RuleCheck::everything_else;
    if (error < 0 || (error == 0) != allows) {
      return false;
    }
    if (!names_calls(entry.check)) {
      continue;
    }
    for (std::size_t at = 0; at < entry.rule.calls.size();) {
      const std::string_view name = next_call(entry.rule.calls, at);
      if (syscall_index(name) == syscall_numbers.size() ||
          (entry.check == RuleCheck::setid_mode && mode_arguments_index(name) == mode_arguments.size())) {
        return false;
      }
      for (std::size_t other = row + 1; other < syscall_rule_rows.size(); ++other) {
        if (!names_calls(syscall_rule_rows[other].check)) {
          continue;
        }
        for (std::size_t at_other = 0; at_other < syscall_rule_rows[other].rule.calls.size();) {
          if (next_call(syscall_rule_rows[other].rule.calls, at_other) == name) {
            return false;
          }
        }
      }
    }
  }
  return true;
}
static_assert(syscall_rule_rows_are_consistent(),
              "every call of syscall_rule_rows needs its numbers, one row, its mode arguments and a known errno");

/// True when no two calls of `syscall_numbers` share a number on one ABI, and every name is
/// used by a row (so the table holds nothing the filter does not decide on).
[[nodiscard]] constexpr bool syscall_numbers_are_consistent() noexcept {
  for (std::size_t i = 0; i < syscall_numbers.size(); ++i) {
    for (std::size_t j = i + 1; j < syscall_numbers.size(); ++j) {
      for (const SyscallAbi abi : {SyscallAbi::x86_64, SyscallAbi::i386, SyscallAbi::aarch64, SyscallAbi::arm}) {
        if (syscall_numbers[i].on(abi) != no_syscall && syscall_numbers[i].on(abi) == syscall_numbers[j].on(abi)) {
          return false;
        }
      }
    }
    bool used = false;
    for (const SyscallRuleRow& entry : syscall_rule_rows) {
      for (std::size_t at = 0; names_calls(entry.check) && at < entry.rule.calls.size();) {
        const bool names_it = next_call(entry.rule.calls, at) == syscall_numbers[i].name;
        used = used || names_it;
      }
    }
    if (!used) {
      return false;
    }
  }
  return true;
}
static_assert(syscall_numbers_are_consistent(), "syscall_numbers: a number used twice on one ABI, or an unused name");

} // namespace dsh::detail
