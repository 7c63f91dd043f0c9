/// @file
/// The fence's system-call filter: a classic BPF seccomp program that refuses, with an errno and
/// never by killing the command, the calls Landlock does not mediate and a fenced command could
/// turn against its neighbours (another process's limits, priorities and CPUs; the user's keys;
/// set-user-ID and set-group-ID bits; the host's System V IPC; for the terminal family, leaving
/// the command's own terminal to take another); the table that documents each rule; the
/// installer a child calls between fork and exec; the kernel probe.
#pragma once

#include <dsh/errors.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/// 1 when this build can install the filter: Linux on x86_64 (LP64; its i386 entry point is
/// decoded, x32 refused) or on aarch64 (its arm entry point decoded), little-endian; 0 otherwise,
/// where the probe reports why and installing always fails with ENOSYS.
#if defined(__linux__) && defined(__LP64__) && (defined(__x86_64__) || defined(__aarch64__)) &&                        \
    defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER 1
#else
#define DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER 0
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
  own_priority,         ///< unless argument 0 is PRIO_PROCESS or PRIO_PGRP and argument 1 is 0
  own_pid,              ///< unless argument 0 (pid) is 0
  own_io_priority,      ///< unless argument 0 is IOPRIO_WHO_PROCESS or IOPRIO_WHO_PGRP and argument 1 is 0
  setid_mode,           ///< when the call sets or creates a mode with S_ISUID or S_ISGID (`mode_arguments`)
  drops_terminal,       ///< when argument 1 (an ioctl request, its low 32 bits) is TIOCNOTTY
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
    SyscallRuleRow{{"setpriority", "which is not PRIO_PROCESS or PRIO_PGRP, or who is not 0", "EPERM",
                    "renices another process, or with PRIO_USER every process of the user; the caller's own "
                    "process group lies in the command's own session, so nice of the caller stays allowed"},
                   RuleCheck::own_priority},
    SyscallRuleRow{{"sched_setscheduler, sched_setparam, sched_setattr, sched_setaffinity", "pid is not 0", "EPERM",
                    "changes another process's policy (SCHED_IDLE starves it), priority or CPUs, which the same "
                    "user may do and Landlock does not mediate; the caller's own (chrt and taskset starting a "
                    "command) stay allowed"},
                   RuleCheck::own_pid},
    SyscallRuleRow{{"ioprio_set", "which is not IOPRIO_WHO_PROCESS or IOPRIO_WHO_PGRP, or who is not 0", "EPERM",
                    "sets another process's I/O class (idle starves its disk access), or with IOPRIO_WHO_USER "
                    "every process of the user; ionice of the caller itself stays allowed"},
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
                    "TIOCNOTTY",
                    "EPERM",
                    "the command leads its session, so TIOCNOTTY on its own terminal leaves the session without "
                    "one, ready to acquire another as above; every other request is left to Landlock (ioctl_dev) "
                    "and the kernel"},
                   RuleCheck::drops_terminal,
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
inline constexpr std::uint32_t prio_pgrp = 1;                     // PRIO_PGRP
inline constexpr std::uint32_t ioprio_who_process = 1;            // IOPRIO_WHO_PROCESS
inline constexpr std::uint32_t ioprio_who_pgrp = 2;               // IOPRIO_WHO_PGRP
inline constexpr std::uint32_t open_creates = 0100U | 020000000U; // O_CREAT | __O_TMPFILE
inline constexpr std::uint32_t setid_bits = 04000U | 02000U;      // S_ISUID | S_ISGID
inline constexpr std::uint32_t x32_syscall_bit = 0x40000000U;     // __X32_SYSCALL_BIT
inline constexpr std::uint32_t tiocnotty = 0x5422U;               // TIOCNOTTY
#if defined(__linux__)                                            // the native headers agree
static_assert(PRIO_PROCESS == prio_process && PRIO_PGRP == prio_pgrp);
static_assert(O_CREAT == 0100 && (S_ISUID | S_ISGID) == setid_bits);
static_assert(TIOCNOTTY == tiocnotty);
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

/// The instruction type of a filter program: struct sock_filter on Linux, the same layout
/// elsewhere (where no program is ever installed).
#if defined(__linux__)
using SyscallFilterInstruction = ::sock_filter;
#else
struct SyscallFilterInstruction {
  std::uint16_t code;
  std::uint8_t jt;
  std::uint8_t jf;
  std::uint32_t k;
};
#endif

#if defined(__linux__)
/// The architecture a program is built for: its native ABI and 32-bit entry point, each with the
/// AUDIT_ARCH value seccomp reports for it, and whether the native ABI has x32 numbers to refuse.
struct FilterArchitecture {
  std::uint32_t audit_arch;
  SyscallAbi abi;
  std::uint32_t compat_audit_arch;
  SyscallAbi compat_abi;
  bool x32;
};

inline constexpr FilterArchitecture x86_64_filter_architecture{AUDIT_ARCH_X86_64, SyscallAbi::x86_64, AUDIT_ARCH_I386,
                                                               SyscallAbi::i386, true};
inline constexpr FilterArchitecture aarch64_filter_architecture{AUDIT_ARCH_AARCH64, SyscallAbi::aarch64, AUDIT_ARCH_ARM,
                                                                SyscallAbi::arm, false};

/// A classic BPF program under construction, with forward labels: the one way the filter's
/// jumps are written, so no offset is counted by hand.
class FilterAssembler {
public:
  using Label = std::size_t;

  /// A new label, placed later with `place`.
  [[nodiscard]] Label label() {
    targets_.push_back(unplaced);
    return targets_.size() - 1;
  }
  /// Places `label` at the next instruction.
  void place(Label label) noexcept { targets_[label] = code_.size(); }
  /// A = the 32-bit word at `offset` of struct seccomp_data.
  void load(std::size_t offset) { emit(BPF_LD | BPF_W | BPF_ABS, static_cast<std::uint32_t>(offset)); }
  /// Jumps to `yes` when A == `value` (BPF_JEQ), A >= `value` unsigned (BPF_JGE) or
  /// A & `value` != 0 (BPF_JSET), else to `no`.
  void branch(std::uint16_t test, std::uint32_t value, Label yes, Label no) {
    jumps_.push_back({code_.size(), yes, no, false});
    emit(BPF_JMP | test | BPF_K, value);
  }
  /// Jumps to `to` whatever A is (32-bit offset: any distance).
  void jump(Label to) {
    jumps_.push_back({code_.size(), to, to, true});
    emit(BPF_JMP | BPF_JA, 0);
  }
  /// Ends the filter with seccomp action `action`.
  void give(std::uint32_t action) { emit(BPF_RET | BPF_K, action); }

  /// The program with every jump resolved. Throws dsh::Error when a label was never placed,
  /// a jump goes backwards, or a conditional jump is longer than its 8-bit offset allows.
  [[nodiscard]] std::vector<SyscallFilterInstruction> finish() && {
    for (const Jump& jump : jumps_) {
      if (jump.always) {
        code_[jump.at].k = static_cast<std::uint32_t>(distance(jump.at, jump.yes));
        continue;
      }
      const std::size_t yes = distance(jump.at, jump.yes);
      const std::size_t no = distance(jump.at, jump.no);
      if (yes > 255 || no > 255) {
        throw Error("the system-call filter: a conditional jump of " + std::to_string(std::max(yes, no)) +
                    " instructions at " + std::to_string(jump.at) + " exceeds 255");
      }
      code_[jump.at].jt = static_cast<std::uint8_t>(yes);
      code_[jump.at].jf = static_cast<std::uint8_t>(no);
    }
    return std::move(code_);
  }

private:
  static constexpr std::size_t unplaced = ~std::size_t{0};

  struct Jump {
    std::size_t at;
    Label yes;
    Label no;
    bool always;
  };

  void emit(int code, std::uint32_t k) {
    code_.push_back(SyscallFilterInstruction{static_cast<std::uint16_t>(code), 0, 0, k});
  }

  /// Instructions skipped by a jump at `at` to `label`.
  [[nodiscard]] std::size_t distance(std::size_t at, Label label) const {
    const std::size_t target = targets_[label];
    if (target == unplaced || target <= at) {
      throw Error("the system-call filter: a jump at " + std::to_string(at) +
                  " to a label that is unplaced or not after it");
    }
    return target - at - 1;
  }

  std::vector<SyscallFilterInstruction> code_;
  std::vector<std::size_t> targets_;
  std::vector<Jump> jumps_;
};

/// Offset of the low 32 bits of argument `index` in struct seccomp_data, whose 64-bit arguments
/// are in the byte order of the machine that runs the filter (the one building it).
[[nodiscard]] constexpr std::size_t argument_low(int index) noexcept {
  constexpr std::size_t high_first = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 4 : 0;
  return offsetof(seccomp_data, args) + 8 * static_cast<std::size_t>(index) + high_first;
}
/// Offset of the high 32 bits of argument `index`: the other half of its 8 bytes.
[[nodiscard]] constexpr std::size_t argument_high(int index) noexcept { return argument_low(index) ^ 4U; }

/// SECCOMP_RET_ERRNO with `error`.
[[nodiscard]] constexpr std::uint32_t refusal(int error) noexcept {
  return SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA);
}

/// Jumps to `yes` when argument `index` equals one of `values` and to `no` otherwise. On a 64-bit
/// ABI (`wide`) all 64 bits are compared, so a value the kernel would truncate to an allowed one
/// (pid 0x1_0000_1234 is pid 0x1234) is refused; on a 32-bit entry point the kernel reads the
/// low word only, and so does the check.
inline void when_argument_is(FilterAssembler& code, int index, std::initializer_list<std::uint32_t> values,
                             FilterAssembler::Label yes, FilterAssembler::Label no, bool wide) {
  const FilterAssembler::Label low_matches = wide ? code.label() : yes;
  code.load(argument_low(index));
  std::size_t left = values.size();
  for (const std::uint32_t value : values) {
    const FilterAssembler::Label next = --left == 0 ? no : code.label();
    code.branch(BPF_JEQ, value, low_matches, next);
    if (left != 0) {
      code.place(next);
    }
  }
  if (wide) {
    code.place(low_matches);
    code.load(argument_high(index));
    code.branch(BPF_JEQ, 0, yes, no);
  }
}

/// Jumps to `yes` when the low word of argument `index` has any bit of `mask`, else to `no`. For
/// modes and open flags, which the kernel reads as 16 and 32 bits.
inline void when_argument_has(FilterAssembler& code, int index, std::uint32_t mask, FilterAssembler::Label yes,
                              FilterAssembler::Label no) {
  code.load(argument_low(index));
  code.branch(BPF_JSET, mask, yes, no);
}

/// The argument check of call `name` under `row` (any row but an `always` or allowing one), the
/// accumulator free: every path of it jumps to `allow` or `refuse`.
inline void emit_check(FilterAssembler& code, const SyscallRuleRow& row, std::string_view name, bool wide,
                       FilterAssembler::Label allow, FilterAssembler::Label refuse) {
  const FilterAssembler::Label second = code.label();
  switch (row.check) {
  case RuleCheck::own_limits: // prlimit64(pid, resource, new_limit, old_limit)
    when_argument_is(code, 0, {0}, allow, second, wide);
    code.place(second);
    when_argument_is(code, 2, {0}, allow, refuse, wide);
    break;
  case RuleCheck::own_priority: // setpriority(which, who, prio)
    when_argument_is(code, 0, {prio_process, prio_pgrp}, second, refuse, wide);
    code.place(second);
    when_argument_is(code, 1, {0}, allow, refuse, wide);
    break;
  case RuleCheck::own_pid: // sched_*(pid, ...)
    when_argument_is(code, 0, {0}, allow, refuse, wide);
    break;
  case RuleCheck::own_io_priority: // ioprio_set(which, who, ioprio)
    when_argument_is(code, 0, {ioprio_who_process, ioprio_who_pgrp}, second, refuse, wide);
    code.place(second);
    when_argument_is(code, 1, {0}, allow, refuse, wide);
    break;
  case RuleCheck::setid_mode: {
    const ModeArguments* arguments = find_mode_arguments(name);
    if (arguments->flags >= 0) { // only an open that creates a file uses its mode
      when_argument_has(code, arguments->flags, open_creates, second, allow);
    }
    code.place(second);
    when_argument_has(code, arguments->mode, setid_bits, refuse, allow);
    break;
  }
  case RuleCheck::drops_terminal: // ioctl(fd, request, argument)
    // the low word on every ABI: the kernel takes the request as an unsigned int, so a request
    // with its upper half set is TIOCNOTTY all the same
    when_argument_is(code, 1, {tiocnotty}, refuse, allow, false);
    break;
  default:
    throw Error("the system-call filter: no check emits code for row \"" + std::string(row.rule.calls) + "\"");
  }
}

/// A call the filter dispatches on: its number on one ABI and where its check (or its refusal)
/// starts.
struct FilterCase {
  std::uint32_t number;
  FilterAssembler::Label check;
};

/// The most cases `dispatch` tests one after the other rather than splitting: below this a split
/// saves no comparison worth its instruction.
inline constexpr std::size_t dispatch_run = 3;

/// Jumps to the check of the case in [`first`, `last`) (sorted by number, none twice) whose number
/// the accumulator holds, or to `otherwise`. A balanced binary search: unsigned JGE splits down to
/// runs of at most `dispatch_run` JEQ tests, so a call passes ~log2(n) comparisons, and so does
/// the kernel when it attaches the filter and runs it for every number of each ABI to build its
/// cache of the calls it allows without running it (a linear chain would cost n each).
inline void dispatch(FilterAssembler& code, const FilterCase* first, const FilterCase* last,
                     FilterAssembler::Label otherwise) {
  const auto count = static_cast<std::size_t>(last - first);
  if (count == 0) {
    code.jump(otherwise);
    return;
  }
  if (count <= dispatch_run) {
    for (const FilterCase* at = first; at != last; ++at) {
      const bool final_case = at + 1 == last;
      const FilterAssembler::Label next = final_case ? otherwise : code.label();
      code.branch(BPF_JEQ, at->number, at->check, next);
      if (!final_case) {
        code.place(next);
      }
    }
    return;
  }
  const FilterCase* middle = first + count / 2;
  const FilterAssembler::Label below = code.label();
  const FilterAssembler::Label from_middle = code.label();
  code.branch(BPF_JGE, middle->number, from_middle, below);
  code.place(below);
  dispatch(code, first, middle, otherwise);
  code.place(from_middle);
  dispatch(code, middle, last, otherwise);
}

/// The checks of every row that names calls of `abi` and applies (`refuse_sysv_ipc`,
/// `terminal`), "allow" for every other call: the accumulator holds the call's number on entry.
/// Laid out as the dispatch on the number (`dispatch`), then one argument check for each kind
/// the calls need (the sched_* calls share theirs, and so do the mode calls whose arguments sit
/// in the same places), then one return for each action, which every check jumps to; each part
/// is short enough for the 8-bit offsets of conditional jumps (`FilterAssembler::finish` throws
/// otherwise, and every layout is built by the tests).
inline void emit_rules(FilterAssembler& code, SyscallAbi abi, bool wide, bool refuse_sysv_ipc, bool terminal) {
  struct Check {
    const SyscallRuleRow* row;
    std::string_view name;
    int flags;
    int mode;
    FilterAssembler::Label at;
  };
  struct Return {
    std::uint32_t action;
    FilterAssembler::Label at;
  };
  std::vector<FilterCase> cases;
  std::vector<Check> checks;
  std::vector<Return> returns;
  const auto return_of = [&](std::uint32_t action) {
    for (const Return& known : returns) {
      if (known.action == action) {
        return known.at;
      }
    }
    returns.push_back({action, code.label()});
    return returns.back().at;
  };
  const FilterAssembler::Label allow = return_of(SECCOMP_RET_ALLOW);
  for (const SyscallRuleRow& row : syscall_rule_rows) {
    if (!names_calls(row.check) || row.check == RuleCheck::allowed || (row.only_shared_ipc && !refuse_sysv_ipc) ||
        (row.only_terminal && !terminal)) {
      continue;
    }
    for (std::size_t at = 0; at < row.rule.calls.size();) {
      const std::string_view name = next_call(row.rule.calls, at);
      const int number = find_syscall(name)->on(abi);
      if (number == no_syscall) {
        continue;
      }
      if (row.check == RuleCheck::always) {
        cases.push_back({static_cast<std::uint32_t>(number), return_of(refusal(errno_value(row.rule.errno_name)))});
        continue;
      }
      // calls of one row with their arguments in the same places pass the same instructions
      const ModeArguments* arguments = row.check == RuleCheck::setid_mode ? find_mode_arguments(name) : nullptr;
      const int flags = arguments != nullptr ? arguments->flags : -1;
      const int mode = arguments != nullptr ? arguments->mode : -1;
      const auto same = std::find_if(checks.begin(), checks.end(), [&](const Check& check) {
        return check.row == &row && check.flags == flags && check.mode == mode;
      });
      FilterAssembler::Label check_at = same != checks.end() ? same->at : code.label();
      if (same == checks.end()) {
        checks.push_back({&row, name, flags, mode, check_at});
      }
      cases.push_back({static_cast<std::uint32_t>(number), check_at});
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const FilterCase& left, const FilterCase& right) { return left.number < right.number; });
  dispatch(code, cases.data(), cases.data() + cases.size(), allow);
  for (const Check& check : checks) {
    code.place(check.at);
    emit_check(code, *check.row, check.name, wide, allow, return_of(refusal(errno_value(check.row->rule.errno_name))));
  }
  for (const Return& to : returns) {
    code.place(to.at);
    code.give(to.action);
  }
}

/// The errno of the first row with `check`.
[[nodiscard]] constexpr int errno_of_check(RuleCheck check) noexcept {
  for (const SyscallRuleRow& row : syscall_rule_rows) {
    if (row.check == check) {
      return errno_value(row.rule.errno_name);
    }
  }
  return EPERM;
}

/// The filter of `syscall_rule_rows` for `architecture`: the architecture first (foreign ones
/// refused), then on the native ABI the x32 bit (where it has one), then each row's calls on the
/// native ABI with 64-bit argument checks and on the 32-bit entry point with 32-bit ones.
/// `refuse_sysv_ipc` adds the IPC rows (pass false when the command has an IPC namespace of its
/// own); `terminal` the terminal rows (pass true when the command runs on its own terminal with
/// /dev/tty granted, FenceOptions::terminal). Allocates; throws std::bad_alloc, or
/// dsh::Error if the program could not be laid out (a defect, never input).
[[nodiscard]] inline std::vector<SyscallFilterInstruction>
build_syscall_filter_for(const FilterArchitecture& architecture, bool refuse_sysv_ipc, bool terminal = false) {
  FilterAssembler code;
  const FilterAssembler::Label native = code.label();
  const FilterAssembler::Label not_native = code.label();
  const FilterAssembler::Label to_compat = code.label();
  const FilterAssembler::Label foreign = code.label();
  const FilterAssembler::Label compat = code.label();
  code.load(offsetof(seccomp_data, arch));
  code.branch(BPF_JEQ, architecture.audit_arch, native, not_native);
  code.place(not_native);
  code.branch(BPF_JEQ, architecture.compat_audit_arch, to_compat, foreign);
  code.place(to_compat);
  code.jump(compat); // past the whole native part: farther than a conditional jump reaches
  code.place(foreign);
  code.give(refusal(errno_of_check(RuleCheck::foreign_architecture)));

  code.place(native);
  code.load(offsetof(seccomp_data, nr));
  if (architecture.x32) {
    const FilterAssembler::Label x32 = code.label();
    const FilterAssembler::Label not_x32 = code.label();
    code.branch(BPF_JSET, x32_syscall_bit, x32, not_x32);
    code.place(x32);
    code.give(refusal(errno_of_check(RuleCheck::x32_abi)));
    code.place(not_x32);
  }
  emit_rules(code, architecture.abi, true, refuse_sysv_ipc, terminal);

  code.place(compat);
  code.load(offsetof(seccomp_data, nr));
  emit_rules(code, architecture.compat_abi, false, refuse_sysv_ipc, terminal);
  return std::move(code).finish();
}
#endif

/// The fence's filter for the architecture this build runs on (`syscall_rules`; see
/// `build_syscall_filter_for`), made before fork because it allocates. Returns an empty program
/// when the build has no filter (`DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER` 0), which
/// `install_syscall_filter` refuses.
[[nodiscard]] inline std::vector<SyscallFilterInstruction> build_syscall_filter(bool refuse_sysv_ipc,
                                                                                bool terminal = false) {
#if DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER && defined(__x86_64__)
  return build_syscall_filter_for(x86_64_filter_architecture, refuse_sysv_ipc, terminal);
#elif DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER && defined(__aarch64__)
  return build_syscall_filter_for(aarch64_filter_architecture, refuse_sysv_ipc, terminal);
#else
  (void)refuse_sysv_ipc;
  (void)terminal;
  return {};
#endif
}

/// `build_syscall_filter(refuse_sysv_ipc, terminal)`, built once per process: the program depends
/// only on the build and its two arguments, so every fence copies the same immutable one instead
/// of laying it out again. Thread-safe (each of the four is made on first use, under the C++
/// runtime's guard for function-local statics) and never destroyed, so a fence prepared while
/// the process exits still finds it; throws what `build_syscall_filter` throws, and then tries
/// again on the next call.
[[nodiscard]] inline const std::vector<SyscallFilterInstruction>& shared_syscall_filter(bool refuse_sysv_ipc,
                                                                                        bool terminal) {
  using Program = std::vector<SyscallFilterInstruction>;
  if (refuse_sysv_ipc) {
    if (terminal) {
      static const Program* const program = new Program(build_syscall_filter(true, true));
      return *program;
    }
    static const Program* const program = new Program(build_syscall_filter(true, false));
    return *program;
  }
  if (terminal) {
    static const Program* const program = new Program(build_syscall_filter(false, true));
    return *program;
  }
  static const Program* const program = new Program(build_syscall_filter(false, false));
  return *program;
}

/// Installs `program` as a seccomp filter of the calling thread, which keeps it, with every
/// process it starts, for good. Meant for a child between fork (or vfork) and exec: async-signal-
/// safe, it only reads `program` and makes one seccomp(2) call, or prctl(PR_SET_SECCOMP) where
/// the kernel has no seccomp(2). The caller must have set no_new_privs already
/// (prctl(PR_SET_NO_NEW_PRIVS, 1)); without it the kernel refuses with EACCES unless the caller
/// holds CAP_SYS_ADMIN. Every call the thread makes afterwards is filtered, so it is the last
/// step before exec. Returns 0 when installed, otherwise the errno: EINVAL for an empty program
/// or one longer than BPF_MAXINSNS (4096) instructions, ENOSYS on a build without the filter,
/// or the kernel's answer.
[[nodiscard]] inline int install_syscall_filter(const std::vector<SyscallFilterInstruction>& program) noexcept {
#if DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER
  if (program.empty() || program.size() > static_cast<std::size_t>(BPF_MAXINSNS)) {
    return EINVAL; // and a length the kernel's 16-bit field would wrap is never passed
  }
  ::sock_fprog fprog{static_cast<unsigned short>(program.size()),
                     // the kernel only reads the program; the field is not const in its struct
                     const_cast<::sock_filter*>(program.data())};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, &fprog) == 0) {
    return 0;
  }
  if (errno != ENOSYS) {
    return errno;
  }
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0UL, 0UL) == 0 ? 0 : errno;
#else
  (void)program;
  return ENOSYS;
#endif
}

/// Asks the running kernel whether it can install the filter, without installing anything.
/// Returns 0 when it can; otherwise an errno: EINVAL when the kernel lacks CONFIG_SECCOMP
/// (prctl(PR_GET_SECCOMP) fails) or CONFIG_SECCOMP_FILTER (a filter with no program is refused
/// as invalid rather than as unreadable), ENOSYS when this build has no filter.
[[nodiscard]] inline int probe_syscall_filter() noexcept {
#if DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER
  if (::prctl(PR_GET_SECCOMP, 0UL, 0UL, 0UL, 0UL) < 0) {
    return errno;
  }
  // A null program: a kernel with filters fails copying it (EFAULT) before it checks anything
  // else, one without answers EINVAL; neither installs anything.
  long result = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, nullptr);
  if (result < 0 && errno == ENOSYS) {
    result = ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, 0UL, 0UL, 0UL);
  }
  if (result >= 0) {
    return EINVAL; // a kernel that accepts no program at all is not one the filter knows
  }
  return errno == EFAULT ? 0 : errno;
#else
  return ENOSYS;
#endif
}

/// True when `probe_syscall_filter()` finds the filter installable.
[[nodiscard]] inline bool syscall_filter_supported() noexcept { return probe_syscall_filter() == 0; }

/// Why the filter cannot be installed, for `probe_syscall_filter`'s `error`, in words a kernel
/// owner can act on.
[[nodiscard]] inline std::string syscall_filter_unavailable_reason(int error) {
#if DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER
  if (error == EINVAL) {
    return "this kernel cannot install seccomp filters (CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER are required)";
  }
  if (error == ENOSYS) {
    return "this kernel has no seccomp(2) and no PR_SET_SECCOMP filters";
  }
  return std::string("the seccomp probe failed: ") + std::strerror(error);
#else
  (void)error;
#if defined(__linux__)
  return "the system-call filter is built for little-endian x86_64 and aarch64 Linux only, not this "
         "architecture";
#else
  return "the system-call filter uses seccomp, which exists only on Linux";
#endif
#endif
}

} // namespace dsh::detail
