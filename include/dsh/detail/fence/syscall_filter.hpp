/// @file
/// The fence's system-call filter: a classic BPF seccomp program that refuses, with an errno and
/// never by killing the command, the calls Landlock does not mediate and a fenced command could
/// turn against its neighbours (another process's limits, priorities and CPUs; the user's keys;
/// set-user-ID and set-group-ID bits; the host's System V IPC; for the terminal family, leaving
/// the command's own terminal to take another), assembled from the rows of syscall_table.hpp; the
/// installer a child calls between fork and exec; the kernel probe.
#pragma once

#include <dsh/detail/fence/syscall_table.hpp>
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
    when_argument_is(code, 0, {prio_process}, second, refuse, wide);
    code.place(second);
    when_argument_is(code, 1, {0}, allow, refuse, wide);
    break;
  case RuleCheck::own_pid: // sched_*(pid, ...)
    when_argument_is(code, 0, {0}, allow, refuse, wide);
    break;
  case RuleCheck::own_io_priority: // ioprio_set(which, who, ioprio)
    when_argument_is(code, 0, {ioprio_who_process}, second, refuse, wide);
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
  case RuleCheck::terminal_requests: // ioctl(fd, request, argument)
    // the low word on every ABI: the kernel takes the request as an unsigned int, so a request
    // with its upper half set is TIOCNOTTY (or TIOCSTI) all the same
    when_argument_is(code, 1, {tiocnotty, tiocsti}, refuse, allow, false);
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

/// True when `a` and `b` are the same non-empty program, instruction for instruction (the bytes
/// the kernel would compile). Async-signal-safe.
[[nodiscard]] inline bool same_syscall_filter(const std::vector<SyscallFilterInstruction>& a,
                                              const std::vector<SyscallFilterInstruction>& b) noexcept {
  return !a.empty() && a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(SyscallFilterInstruction)) == 0;
}

/// The filter the calling process inherited from the launcher's filtered zygote it was forked
/// from (`run_filtered_zygote` in launch_wire.hpp), or nullptr: set only in such a zygote, right
/// after it installed the program, and inherited by every supervisor it forks. A host process
/// never sets it.
inline const std::vector<SyscallFilterInstruction>* inherited_syscall_filter = nullptr;

/// True when the calling process already runs under exactly `program`: the launcher's zygote
/// installed it once and recorded it (`inherited_syscall_filter`, set only after its install
/// succeeded), so that installing it again would only stack a copy and compile it again (about
/// 100 µs a call, docs/performance.md). The kernel's answer that some filter is in force
/// (`PR_GET_SECCOMP`) is a sanity check only: it cannot tell which one, and a host in a
/// container may hold one of its own. False whenever the record says otherwise, so the caller
/// installs it. Async-signal-safe.
[[nodiscard]] inline bool holds_syscall_filter(const std::vector<SyscallFilterInstruction>& program) noexcept {
#if DSH_SANDBOX_POLICY_HAS_SYSCALL_FILTER
  return inherited_syscall_filter != nullptr && same_syscall_filter(*inherited_syscall_filter, program) &&
         ::prctl(PR_GET_SECCOMP, 0UL, 0UL, 0UL, 0UL) == SECCOMP_MODE_FILTER;
#else
  (void)program;
  return false;
#endif
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
