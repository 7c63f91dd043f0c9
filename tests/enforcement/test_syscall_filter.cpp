// The fence's system-call filter (dsh/detail/fence/syscall_filter.hpp), without Landlock:
//   * the program against its table: a classic BPF interpreter runs it for every call of every
//     row on x86_64, i386, aarch64 and arm, with arguments on both sides of each condition;
//   * the numbers against the kernel headers of the build machine;
//   * real attacks: a forked child sets no_new_privs, installs the filter and attacks a real
//     target outside it (another process, a key, a file's mode, the host's IPC objects, a
//     terminal the command would leave for another); the
//     parent asserts the target unchanged. Each runs as root and again with attacker and target
//     both uid 65534 (same-user attacks), and each refused attack also runs without the filter
//     first, to show it would succeed;
//   * a shell running ordinary commands under the filter.
#include "support/landlock.hpp"
#include "support/users.hpp"
#include "syscall_numbers.hpp"

#include <dsh/detail/fence/syscall_filter.hpp>
#include <dsh/detail/posix.hpp>
#include <dsh/detail/resolve_beneath.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <mqueue.h>
#include <pthread.h>
#include <pty.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

using dsh::detail::SyscallAbi;
using dsh::detail::SyscallRuleRow;
using namespace dsh::test;

namespace {

// The priority attempts compare nice values with 0, the value a test process normally starts with;
// one started under nice(1) (a developer's `nice ctest`) is brought back to 0, which root may do.
[[maybe_unused]] const bool nice_is_zero = [] {
  errno = 0;
  if (::getpriority(PRIO_PROCESS, 0) != 0 || errno != 0) {
    (void)::setpriority(PRIO_PROCESS, 0, 0);
  }
  return ::getpriority(PRIO_PROCESS, 0) == 0;
}();

// ------------------------------------------------------------------------------------------
// The program against its table, run by a classic BPF interpreter.
// ------------------------------------------------------------------------------------------

using Program = std::vector<sock_filter>;

constexpr std::uint32_t allow = SECCOMP_RET_ALLOW;
constexpr std::uint32_t refused(int error) { return SECCOMP_RET_ERRNO | static_cast<std::uint32_t>(error); }
constexpr std::uint64_t high_word = 1ULL << 32; // a bit only the 64-bit comparisons see

/// Checks what the kernel's verifier checks of a seccomp program that only uses what the
/// builder emits: every instruction known, every load an aligned word inside struct
/// seccomp_data, every jump inside the program, the last instruction a return.
void check_shape(const Program& program) {
  REQUIRE(!program.empty());
  REQUIRE(program.size() <= static_cast<std::size_t>(BPF_MAXINSNS));
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& insn = program[pc];
    INFO("instruction " << pc << ": code " << insn.code);
    switch (insn.code) {
    case BPF_LD | BPF_W | BPF_ABS:
      REQUIRE(insn.k % 4 == 0);
      REQUIRE(insn.k + 4 <= sizeof(seccomp_data));
      break;
    case BPF_JMP | BPF_JEQ | BPF_K:
    case BPF_JMP | BPF_JGE | BPF_K:
    case BPF_JMP | BPF_JSET | BPF_K:
      REQUIRE(pc + 1 + std::max(insn.jt, insn.jf) < program.size());
      break;
    case BPF_JMP | BPF_JA:
      REQUIRE(pc + 1 + insn.k < program.size());
      break;
    case BPF_RET | BPF_K:
      break;
    default:
      FAIL("an instruction the builder never emits");
    }
  }
  REQUIRE(program.back().code == (BPF_RET | BPF_K));
}

/// What a run of the filter did besides answering: whether it loaded anything but the
/// architecture and the number, and how many comparisons it made.
struct Trace {
  bool read_more = false;
  int comparisons = 0;
};

/// What `program` (shaped as `check_shape` requires) answers for `data`, as the kernel runs it;
/// `trace`, when given, records what the run read and compared.
std::uint32_t run_filter(const Program& program, const seccomp_data& data, Trace* trace = nullptr) {
  std::uint32_t a = 0;
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& insn = program[pc];
    if (trace != nullptr && BPF_CLASS(insn.code) == BPF_JMP && BPF_OP(insn.code) != BPF_JA) {
      ++trace->comparisons;
    }
    switch (insn.code) {
    case BPF_LD | BPF_W | BPF_ABS:
      if (trace != nullptr && insn.k != offsetof(seccomp_data, nr) && insn.k != offsetof(seccomp_data, arch)) {
        trace->read_more = true;
      }
      std::memcpy(&a, reinterpret_cast<const unsigned char*>(&data) + insn.k, sizeof a);
      break;
    case BPF_JMP | BPF_JEQ | BPF_K:
      pc += a == insn.k ? insn.jt : insn.jf;
      break;
    case BPF_JMP | BPF_JGE | BPF_K: // unsigned, as the kernel compares
      pc += a >= insn.k ? insn.jt : insn.jf;
      break;
    case BPF_JMP | BPF_JSET | BPF_K:
      pc += (a & insn.k) != 0 ? insn.jt : insn.jf;
      break;
    case BPF_JMP | BPF_JA:
      pc += insn.k;
      break;
    case BPF_RET | BPF_K:
      return insn.k;
    default:
      throw std::logic_error("unknown instruction");
    }
  }
  throw std::logic_error("the program ran off its end");
}

/// What the filter answers to call `nr` of `arch` with `args`.
std::uint32_t verdict(const Program& program, std::uint32_t arch, int nr, std::array<std::uint64_t, 6> args = {}) {
  seccomp_data data{};
  data.nr = nr;
  data.arch = arch;
  data.instruction_pointer = 0x7f0000001000ULL;
  std::copy(args.begin(), args.end(), std::begin(data.args));
  return run_filter(program, data);
}

/// One ABI of a program: its AUDIT_ARCH value, its numbers, whether it compares 64 bits.
struct Entry {
  std::uint32_t arch;
  SyscallAbi abi;
  bool wide;
  const char* name;
};

/// Checks the verdicts on every call the rows name for `entry`, with arguments on both sides
/// of each row's condition, in a program built with `refuse_sysv_ipc` and `terminal`. Returns
/// how many calls it checked.
int check_rows(const Program& program, const Entry& entry, bool refuse_sysv_ipc, bool terminal) {
  using dsh::detail::RuleCheck;
  constexpr std::uint64_t pid = 4321;
  constexpr std::uint64_t pointer = 0x7ffd1000;
  int checked = 0;
  for (const SyscallRuleRow& row : dsh::detail::syscall_rule_rows) {
    if (!dsh::detail::names_calls(row.check)) {
      continue;
    }
    const std::uint32_t refuse = refused(dsh::detail::errno_value(row.rule.errno_name));
    const bool applies = (!row.only_shared_ipc || refuse_sysv_ipc) && (!row.only_terminal || terminal);
    for (std::size_t at = 0; at < row.rule.calls.size();) {
      const std::string_view name = dsh::detail::next_call(row.rule.calls, at);
      const int nr = dsh::detail::find_syscall(name)->on(entry.abi);
      if (nr == dsh::detail::no_syscall) {
        continue;
      }
      ++checked;
      INFO(entry.name << " " << name << " (" << nr << "), refuse_sysv_ipc " << refuse_sysv_ipc << ", terminal "
                      << terminal);
      const auto is = [&](std::array<std::uint64_t, 6> args) { return verdict(program, entry.arch, nr, args); };
      // what a 64-bit ABI refuses and a 32-bit entry point, which reads only the low word, allows
      const std::uint32_t refuse_if_wide = entry.wide ? refuse : allow;
      switch (row.check) {
      case RuleCheck::always:
        if (!applies) {
          CHECK(is({}) == allow);
          CHECK(is({pid, pid, pid, pid, pid, pid}) == allow);
        } else {
          CHECK(is({}) == refuse);
          CHECK(is({pid, pid, pid, pid, pid, pid}) == refuse);
        }
        break;
      case RuleCheck::allowed:
        CHECK(is({}) == allow);
        CHECK(is({pid, pid, pid, pid, pid, pid}) == allow);
        break;
      case RuleCheck::own_limits: // prlimit64(pid, resource, new_limit, old_limit)
        CHECK(is({0, RLIMIT_CPU, pointer, 0}) == allow);
        CHECK(is({pid, RLIMIT_CPU, 0, pointer}) == allow);
        CHECK(is({pid, RLIMIT_CPU, pointer, 0}) == refuse);
        CHECK(is({high_word, RLIMIT_CPU, pointer, 0}) == refuse_if_wide);
        CHECK(is({high_word | pid, RLIMIT_CPU, pointer, 0}) == refuse);
        CHECK(is({pid, RLIMIT_CPU, high_word, 0}) == refuse_if_wide);
        break;
      case RuleCheck::own_priority: // setpriority(which, who, prio)
        CHECK(is({PRIO_PROCESS, 0, 10}) == allow);
        CHECK(is({PRIO_PGRP, 0, 10}) == refuse); // even its own: it may have joined the zygote's
        CHECK(is({PRIO_USER, 0, 10}) == refuse);
        CHECK(is({PRIO_PROCESS, pid, 10}) == refuse);
        CHECK(is({PRIO_PGRP, pid, 10}) == refuse);
        CHECK(is({high_word | PRIO_PROCESS, 0, 10}) == refuse_if_wide);
        CHECK(is({PRIO_PROCESS, high_word, 10}) == refuse_if_wide);
        CHECK(is({high_word | PRIO_USER, 0, 10}) == refuse);
        break;
      case RuleCheck::own_pid: // sched_*(pid, ...)
        CHECK(is({0, 5, pointer}) == allow);
        CHECK(is({pid, 5, pointer}) == refuse);
        CHECK(is({high_word, 5, pointer}) == refuse_if_wide);
        CHECK(is({high_word | pid, 5, pointer}) == refuse);
        break;
      case RuleCheck::own_io_priority: // ioprio_set(which, who, ioprio): 1 process, 2 group, 3 user
        CHECK(is({1, 0, 0x6000}) == allow);
        CHECK(is({2, 0, 0x6000}) == refuse); // even its own group, as for setpriority
        CHECK(is({3, 0, 0x6000}) == refuse);
        CHECK(is({0, 0, 0x6000}) == refuse);
        CHECK(is({1, pid, 0x6000}) == refuse);
        CHECK(is({high_word | 1, 0, 0x6000}) == refuse_if_wide);
        break;
      case RuleCheck::setid_mode: {
        const dsh::detail::ModeArguments* where = dsh::detail::find_mode_arguments(name);
        const auto with = [&](std::uint64_t flags, std::uint64_t mode) {
          std::array<std::uint64_t, 6> args{pointer, pointer, pointer, pointer, 0, 0};
          if (where->flags >= 0) {
            args[static_cast<std::size_t>(where->flags)] = flags;
          }
          args[static_cast<std::size_t>(where->mode)] = mode;
          return is(args);
        };
        const std::uint64_t creates = where->flags >= 0 ? O_CREAT | O_WRONLY : 0;
        CHECK(with(creates, 04755) == refuse);
        CHECK(with(creates, 02755) == refuse);
        CHECK(with(creates, S_IFREG | 06000) == refuse);
        CHECK(with(creates, high_word | 04755) == refuse);
        CHECK(with(creates, 0755) == allow);
        CHECK(with(creates, 01777) == allow);
        CHECK(with(creates, high_word | 0755) == allow);
        if (where->flags >= 0) {
          CHECK(with(O_RDONLY, 04755) == allow);
          CHECK(with(O_WRONLY | O_TRUNC, 06755) == allow);
          CHECK(with(O_TMPFILE | O_RDWR, 02755) == refuse);
          CHECK(with(high_word | O_CREAT, 04755) == refuse);
          CHECK(with(high_word, 04755) == allow); // the kernel reads the flags as an int
        }
        break;
      }
      case RuleCheck::terminal_requests: // ioctl(fd, request, argument)
        CHECK(is({0, TIOCNOTTY}) == (applies ? refuse : allow));
        CHECK(is({0, TIOCSTI, pointer}) == (applies ? refuse : allow));
        // the kernel takes the request as an unsigned int: an upper half changes nothing
        CHECK(is({5, high_word | TIOCNOTTY, pointer}) == (applies ? refuse : allow));
        CHECK(is({5, high_word | TIOCSTI, pointer}) == (applies ? refuse : allow));
        CHECK(is({5, TIOCSTI + 1, pointer}) == allow); // TIOCGWINSZ
        CHECK(is({TIOCSTI, 0, TIOCSTI}) == allow);
        CHECK(is({5, TIOCGWINSZ, pointer}) == allow);
        CHECK(is({5, TIOCSWINSZ, pointer}) == allow);
        CHECK(is({5, TCGETS, pointer}) == allow);
        CHECK(is({5, TCSETS, pointer}) == allow);
        CHECK(is({5, TIOCSCTTY, 0}) == allow);
        CHECK(is({5, TIOCNOTTY + 1, TIOCNOTTY}) == allow); // TIOCSETD, whatever its argument
        CHECK(is({TIOCNOTTY, 0, TIOCNOTTY}) == allow);     // the descriptor and argument are not the request
        break;
      default:
        FAIL("a row that names calls with an unexpected check");
      }
    }
  }
  return checked;
}

TEST_CASE("syscall filter: the program decides every call of the table as its row says, on every ABI") {
  struct Config {
    const dsh::detail::FilterArchitecture* architecture;
    Entry native;
    Entry compat;
    int getpid_native;
    int getpid_compat;
  };
  const std::array configs{
      Config{&dsh::detail::x86_64_filter_architecture,
             {AUDIT_ARCH_X86_64, SyscallAbi::x86_64, true, "x86_64"},
             {AUDIT_ARCH_I386, SyscallAbi::i386, false, "i386"},
             39,
             20},
      Config{&dsh::detail::aarch64_filter_architecture,
             {AUDIT_ARCH_AARCH64, SyscallAbi::aarch64, true, "aarch64"},
             {AUDIT_ARCH_ARM, SyscallAbi::arm, false, "arm"},
             172,
             20},
  };
  for (const Config& config : configs) {
    for (const auto& [sysv, terminal] :
         {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}, std::pair{false, true}}) {
      INFO(config.native.name << ", refuse_sysv_ipc " << sysv << ", terminal " << terminal);
      const Program program = dsh::detail::build_syscall_filter_for(*config.architecture, sysv, terminal);
      check_shape(program);
      CHECK(check_rows(program, config.native, sysv, terminal) > 40);
      CHECK(check_rows(program, config.compat, sysv, terminal) > 40);
      // calls no row names are allowed, on both entry points
      CHECK(verdict(program, config.native.arch, config.getpid_native) == allow);
      CHECK(verdict(program, config.compat.arch, config.getpid_compat) == allow);
      // an architecture the filter does not decode: every call refused
      for (const std::uint32_t foreign : {std::uint32_t{AUDIT_ARCH_PPC64LE}, std::uint32_t{AUDIT_ARCH_RISCV64},
                                          config.native.arch == AUDIT_ARCH_X86_64 ? std::uint32_t{AUDIT_ARCH_AARCH64}
                                                                                  : std::uint32_t{AUDIT_ARCH_X86_64},
                                          std::uint32_t{0}}) {
        CHECK(verdict(program, foreign, config.getpid_native) == refused(EPERM));
        CHECK(verdict(program, foreign, 0) == refused(EPERM));
      }
    }
  }
  const Program x86 = dsh::detail::build_syscall_filter_for(dsh::detail::x86_64_filter_architecture, true);
  // x32: every number with bit 30 set, whatever it would name
  CHECK(verdict(x86, AUDIT_ARCH_X86_64, 0x40000000 | 39) == refused(EPERM));
  CHECK(verdict(x86, AUDIT_ARCH_X86_64, 0x40000000 | 0) == refused(EPERM));
  // the numbers are decoded per ABI: i386's 29 is pause (x86_64's shmget), x86_64's 97 is
  // getrlimit (i386's setpriority)
  CHECK(verdict(x86, AUDIT_ARCH_I386, 29) == allow);
  CHECK(verdict(x86, AUDIT_ARCH_X86_64, 97, {PRIO_USER, 4321}) == allow);
  CHECK(verdict(x86, AUDIT_ARCH_I386, 97, {PRIO_USER, 4321}) == refused(EPERM));
  // aarch64 has no x32: the bit is just an unknown number there, which the kernel answers
  const Program arm64 = dsh::detail::build_syscall_filter_for(dsh::detail::aarch64_filter_architecture, true);
  CHECK(verdict(arm64, AUDIT_ARCH_AARCH64, 0x40000000 | 172) == allow);
  // the terminal rows by number: setsid and ioctl(TIOCNOTTY) on each ABI, only with terminal
  const Program x86_terminal =
      dsh::detail::build_syscall_filter_for(dsh::detail::x86_64_filter_architecture, true, true);
  const Program arm64_terminal =
      dsh::detail::build_syscall_filter_for(dsh::detail::aarch64_filter_architecture, true, true);
  CHECK(verdict(x86_terminal, AUDIT_ARCH_X86_64, 112) == refused(EPERM));
  CHECK(verdict(x86_terminal, AUDIT_ARCH_I386, 66) == refused(EPERM));
  CHECK(verdict(x86_terminal, AUDIT_ARCH_X86_64, 16, {0, 0x5422}) == refused(EPERM));
  CHECK(verdict(x86_terminal, AUDIT_ARCH_X86_64, 16, {0, 0x5412}) == refused(EPERM));
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_AARCH64, 29, {0, 0x5412}) == refused(EPERM));
  CHECK(verdict(x86_terminal, AUDIT_ARCH_I386, 54, {0, 0x5422}) == refused(EPERM));
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_AARCH64, 157) == refused(EPERM));
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_ARM, 66) == refused(EPERM));
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_AARCH64, 29, {0, 0x5422}) == refused(EPERM));
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_ARM, 54, {0, 0x5422}) == refused(EPERM));
  CHECK(verdict(x86, AUDIT_ARCH_X86_64, 112) == allow);
  CHECK(verdict(x86, AUDIT_ARCH_X86_64, 16, {0, 0x5422}) == allow);
  CHECK(verdict(arm64, AUDIT_ARCH_AARCH64, 157) == allow);
  CHECK(verdict(arm64, AUDIT_ARCH_ARM, 54, {0, 0x5422}) == allow);
  // i386's 112 is idle and aarch64's 16 fremovexattr: the other ABI's numbers decide nothing
  CHECK(verdict(x86_terminal, AUDIT_ARCH_I386, 112) == allow);
  CHECK(verdict(arm64_terminal, AUDIT_ARCH_AARCH64, 16, {0, 0x5422}) == allow);
}

TEST_CASE("syscall filter: a call no row refuses reads only the architecture and the number, in few comparisons") {
  // what lets the kernel cache such a call as allowed, and what it emulates for every number of
  // each ABI when the filter is attached: a binary search, not a chain of every named call
  struct Abi {
    const dsh::detail::FilterArchitecture* architecture;
    std::uint32_t arch;
    SyscallAbi abi;
  };
  const std::array abis{
      Abi{&dsh::detail::x86_64_filter_architecture, AUDIT_ARCH_X86_64, SyscallAbi::x86_64},
      Abi{&dsh::detail::x86_64_filter_architecture, AUDIT_ARCH_I386, SyscallAbi::i386},
      Abi{&dsh::detail::aarch64_filter_architecture, AUDIT_ARCH_AARCH64, SyscallAbi::aarch64},
      Abi{&dsh::detail::aarch64_filter_architecture, AUDIT_ARCH_ARM, SyscallAbi::arm},
  };
  for (const Abi& entry : abis) {
    for (const auto& [sysv, terminal] :
         {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}, std::pair{false, true}}) {
      const Program program = dsh::detail::build_syscall_filter_for(*entry.architecture, sysv, terminal);
      std::vector<bool> refused_by_a_row(1024, false);
      for (const SyscallRuleRow& row : dsh::detail::syscall_rule_rows) {
        const bool applies = (!row.only_shared_ipc || sysv) && (!row.only_terminal || terminal);
        if (!dsh::detail::names_calls(row.check) || row.check == dsh::detail::RuleCheck::allowed || !applies) {
          continue;
        }
        for (std::size_t at = 0; at < row.rule.calls.size();) {
          const int nr = dsh::detail::find_syscall(dsh::detail::next_call(row.rule.calls, at))->on(entry.abi);
          if (nr != dsh::detail::no_syscall) {
            refused_by_a_row[static_cast<std::size_t>(nr)] = true;
          }
        }
      }
      int most = 0;
      int unrefused = 0;
      for (int nr = 0; nr < 1024; ++nr) {
        if (refused_by_a_row[static_cast<std::size_t>(nr)]) {
          continue;
        }
        INFO("arch " << entry.arch << " nr " << nr << ", refuse_sysv_ipc " << sysv << ", terminal " << terminal);
        seccomp_data data{};
        data.nr = nr;
        data.arch = entry.arch;
        std::fill(std::begin(data.args), std::end(data.args), 4321);
        Trace trace;
        CHECK(run_filter(program, data, &trace) == allow);
        CHECK_FALSE(trace.read_more);
        most = std::max(most, trace.comparisons);
        ++unrefused;
      }
      CHECK(unrefused > 900);
      // two for the architecture, one for x32, five splits, three in a run (a chain: over 40)
      CHECK(most <= 11);
    }
  }
}

TEST_CASE("syscall filter: docs/enforcement.md shows the table of syscall_rules row for row") {
  const auto& rules = dsh::detail::syscall_rules;
  const std::string doc = read_file(DSH_ENFORCEMENT_DOC);
  const std::size_t section = doc.find("\n## The system-call filter\n");
  REQUIRE(section != std::string::npos);
  const std::string header = "| calls | refused when | errno | why |\n| --- | --- | --- | --- |\n";
  std::string table = header;
  for (const dsh::detail::SyscallRule& rule : rules) {
    table += "| " + std::string(rule.calls) + " | " + std::string(rule.refused_when) + " | " +
             std::string(rule.errno_name) + " | " + std::string(rule.reason) + " |\n";
  }
  const std::size_t at = doc.find(header, section);
  REQUIRE(at != std::string::npos);
  CHECK(doc.substr(at, doc.find("\n\n", at) + 1 - at) == table);
}

/// Compares `kernel` (one header's numbers) with column `abi` of the table.
void check_numbers(const std::vector<dsh::test::KernelSyscallNumber>& kernel, SyscallAbi abi, const char* header) {
  if (kernel.empty()) {
    WARN(header << " is not installed here: its numbers are not compared");
    return;
  }
  INFO(header);
  for (const dsh::test::KernelSyscallNumber& call : kernel) {
    INFO(call.name);
    const dsh::detail::SyscallNumbers* numbers = dsh::detail::find_syscall(call.name);
    REQUIRE(numbers != nullptr);
    if (call.number == dsh::test::header_lacks_it) {
      WARN(header << " predates " << call.name << ": its number " << numbers->on(abi) << " is not compared");
      continue;
    }
    CHECK(numbers->on(abi) == call.number);
  }
  for (const dsh::detail::SyscallNumbers& numbers : dsh::detail::syscall_numbers) {
    INFO(numbers.name);
    const bool listed =
        std::any_of(kernel.begin(), kernel.end(), [&](const auto& call) { return call.name == numbers.name; });
    CHECK(listed == (numbers.on(abi) != dsh::detail::no_syscall));
  }
}

TEST_CASE("syscall filter: the numbers of x86_64, i386 and aarch64 are the kernel headers'") {
  check_numbers(dsh::test::kernel_numbers_x86_64(), SyscallAbi::x86_64, "<asm/unistd_64.h>");
  check_numbers(dsh::test::kernel_numbers_i386(), SyscallAbi::i386, "<asm/unistd_32.h>");
  check_numbers(dsh::test::kernel_numbers_generic(), SyscallAbi::aarch64, "<asm-generic/unistd.h>");
#if defined(__x86_64__)
  CHECK(dsh::detail::find_syscall("fchmodat2")->x86_64 == 452); // run by the chmod attacks below
#endif
}

// ------------------------------------------------------------------------------------------
// Real attacks.
// ------------------------------------------------------------------------------------------

/// Skips the current test, with the kernel's reason, when it cannot install the filter.
#define DSH_REQUIRE_SYSCALL_FILTER()                                                                                   \
  do {                                                                                                                 \
    if (const int dsh_error = dsh::detail::probe_syscall_filter(); dsh_error != 0) {                                   \
      DSH_TEST_SKIP("this kernel cannot install the system-call filter: " +                                            \
                    dsh::detail::syscall_filter_unavailable_reason(dsh_error));                                        \
    }                                                                                                                  \
  } while (false)

// Exit codes of an attacking child that did not get to its attack; errno values stay below.
constexpr int cannot_become = 240;
constexpr int no_new_privs_failed = 241;
constexpr int install_failed = 242;
constexpr int wrong_result = 243;
constexpr int setup_failed = 244;

/// The uids attacks run as: root and nobody when the test runs as root, only its own otherwise.
/// The target of each attack belongs to the same uid as the attacker.
std::vector<::uid_t> attacker_uids() {
  if (::geteuid() == 0) {
    return {0, nobody};
  }
  return {::geteuid()};
}

/// Becomes `uid` (group `uid`, no supplementary groups) unless the process already is it.
[[nodiscard]] bool become(::uid_t uid) noexcept {
  if (::geteuid() == uid) {
    return true;
  }
  return ::setgroups(0, nullptr) == 0 && ::setgid(uid) == 0 && ::setuid(uid) == 0;
}

/// The filter as the fence installs it: with the IPC rows (the command shares the host's IPC
/// namespace), or without them (it has one of its own); with the terminal rows for a command on
/// its own terminal (FenceOptions::terminal).
const Program& filter(bool refuse_sysv_ipc = true, bool terminal = false) {
  static const Program shared = dsh::detail::build_syscall_filter(true);
  static const Program own = dsh::detail::build_syscall_filter(false);
  static const Program shared_terminal = dsh::detail::build_syscall_filter(true, true);
  if (terminal) {
    return shared_terminal;
  }
  return refuse_sysv_ipc ? shared : own;
}

/// What an attacking child runs under.
enum class Under { nothing, filter, filter_own_ipc, filter_terminal };

/// Runs `body` in a forked child as `uid` with no_new_privs and, unless `under` is nothing, the
/// filter installed (the program is built before the fork, as the fence builds it); `before`,
/// when given, runs first, as the fence's own steps do before the filter (0, else the child
/// exits with `setup_failed`). Returns what `body` returned (0 or an errno), one of the codes
/// above, or 128 + the signal that killed it.
int attack(::uid_t uid, Under under, const std::function<int()>& body, const std::function<int()>& before = {}) {
  const Program* program =
      under == Under::nothing ? nullptr : &filter(under != Under::filter_own_ipc, under == Under::filter_terminal);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (!become(uid)) {
      ::_exit(cannot_become);
    }
    if (before && before() != 0) {
      ::_exit(setup_failed);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
      ::_exit(no_new_privs_failed);
    }
    if (program != nullptr && dsh::detail::install_syscall_filter(*program) != 0) {
      ::_exit(install_failed);
    }
    ::_exit(body());
  }
  return dsh::FencedCommand::wait_for(pid);
}

/// `attack` under the filter that refuses the host's IPC.
int filtered(::uid_t uid, const std::function<int()>& body) { return attack(uid, Under::filter, body); }
/// `attack` without any filter: the control that shows the attack works.
int unfiltered(::uid_t uid, const std::function<int()>& body) { return attack(uid, Under::nothing, body); }

/// A `sleep infinity` process owned by `uid`, leading its own process group: the neighbour a
/// fenced command attacks. Killed and reaped on destruction.
class Victim {
public:
  explicit Victim(::uid_t uid) {
    std::array<int, 2> ready{};
    if (::pipe2(ready.data(), O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe2");
    }
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) {
      const int error = errno;
      ::close(ready[0]);
      ::close(ready[1]);
      throw std::system_error(error, std::generic_category(), "fork");
    }
    if (pid_ == 0) {
      ::close(ready[0]);
      if (::setpgid(0, 0) == 0 && become(uid)) {
        ::execlp("sleep", "sleep", "infinity", static_cast<char*>(nullptr));
      }
      const int error = errno;
      static_cast<void>(::write(ready[1], &error, sizeof error));
      ::_exit(127);
    }
    ::close(ready[1]);
    int error = 0;
    // end of file: the write end closed on exec, so the process is sleep from here on
    const ::ssize_t got = dsh::detail::retry_on_eintr([&] { return ::read(ready[0], &error, sizeof error); });
    ::close(ready[0]);
    if (got != 0) {
      static_cast<void>(dsh::FencedCommand::wait_for(pid_));
      throw std::runtime_error(std::string("the victim did not start: ") + std::strerror(error));
    }
  }
  Victim(const Victim&) = delete;
  Victim& operator=(const Victim&) = delete;
  ~Victim() {
    ::kill(pid_, SIGKILL);
    static_cast<void>(dsh::FencedCommand::wait_for(pid_));
  }

  [[nodiscard]] ::pid_t pid() const noexcept { return pid_; }
  /// True while it has not ended (it is not reaped by asking).
  [[nodiscard]] bool running() const {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<::id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
  }
  /// Its /proc/PID/limits.
  [[nodiscard]] std::string limits() const { return read_file("/proc/" + std::to_string(pid_) + "/limits"); }
  /// Its nice value.
  [[nodiscard]] int nice() const {
    errno = 0;
    const int value = ::getpriority(PRIO_PROCESS, static_cast<::id_t>(pid_));
    REQUIRE(errno == 0);
    return value;
  }
  /// Its scheduling policy.
  [[nodiscard]] int policy() const { return ::sched_getscheduler(pid_); }
  /// The CPUs it may run on.
  [[nodiscard]] std::vector<int> cpus() const;
  /// Its I/O priority (ioprio_get).
  [[nodiscard]] long io_priority() const { return ::syscall(SYS_ioprio_get, 1, pid_); }

private:
  ::pid_t pid_ = -1;
};

/// The CPUs of `set`.
std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) {
      cpus.push_back(cpu);
    }
  }
  return cpus;
}

std::vector<int> Victim::cpus() const {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(pid_, sizeof set, &set) == 0);
  return cpus_of(set);
}

/// The set of one CPU: the first this process may run on.
cpu_set_t first_cpu_only() {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus_of(mine).front(), &one);
  return one;
}

constexpr long ioprio_idle = 3L << 13; // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)

/// prlimit64 as the kernel takes it: a pid of 64 bits, of which it reads the low 32.
long raw_prlimit(std::uint64_t pid, int resource, const ::rlimit* new_limit, ::rlimit* old_limit) {
  return ::syscall(SYS_prlimit64, pid, resource, new_limit, old_limit);
}

TEST_CASE("syscall filter: prlimit64 on another process is refused; reading it and the caller's own are allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and victim uid " << uid);
    const ::rlimit cpu_one{1, 1};
    const ::rlimit fsize_zero{0, 0};
    {
      Victim control(uid);
      const std::string before = control.limits();
      CHECK(unfiltered(uid, [&] { return errno_of(::prlimit(control.pid(), RLIMIT_FSIZE, &fsize_zero, nullptr)); }) ==
            0);
      CHECK(control.limits() != before);
      CHECK(control.limits().find("Max file size             0                    0                    bytes") !=
            std::string::npos);
    }
    {
      Victim control(uid); // the kernel reads only 32 bits of the pid: why the filter compares 64
      const std::string before = control.limits();
      CHECK(unfiltered(uid, [&] {
              return errno_of(raw_prlimit(high_word | static_cast<std::uint64_t>(control.pid()), RLIMIT_FSIZE,
                                          &fsize_zero, nullptr));
            }) == 0);
      CHECK(control.limits() != before);
    }
    Victim victim(uid);
    const std::string before = victim.limits();
    CHECK(filtered(uid, [&] { return errno_of(::prlimit(victim.pid(), RLIMIT_CPU, &cpu_one, nullptr)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::prlimit(victim.pid(), RLIMIT_FSIZE, &fsize_zero, nullptr)); }) ==
          EPERM);
    CHECK(filtered(uid, [&] {
            return errno_of(
                raw_prlimit(high_word | static_cast<std::uint64_t>(victim.pid()), RLIMIT_CPU, &cpu_one, nullptr));
          }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(raw_prlimit(high_word, RLIMIT_CPU, &cpu_one, nullptr)); }) == EPERM);
    CHECK(victim.running());
    CHECK(victim.limits() == before);

    ::rlimit expected{}; // the victim's, inherited from this process (which may lack CAP_SYS_RESOURCE to ask it)
    REQUIRE(::getrlimit(RLIMIT_CPU, &expected) == 0);
    CHECK(filtered(uid, [&] {
            ::rlimit read{};
            if (::prlimit(victim.pid(), RLIMIT_CPU, nullptr, &read) != 0) {
              return errno;
            }
            return read.rlim_cur == expected.rlim_cur && read.rlim_max == expected.rlim_max ? 0 : wrong_result;
          }) == 0);
    CHECK(filtered(uid, [&] {
            ::rlimit files{};
            if (::getrlimit(RLIMIT_NOFILE, &files) != 0) {
              return errno;
            }
            files.rlim_cur = 64;
            if (::prlimit(0, RLIMIT_NOFILE, &files, nullptr) != 0 || ::setrlimit(RLIMIT_CPU, &cpu_one) != 0) {
              return errno;
            }
            ::rlimit now{};
            return ::getrlimit(RLIMIT_NOFILE, &now) == 0 && now.rlim_cur == 64 ? 0 : wrong_result;
          }) == 0);
    CHECK(victim.limits() == before);
  }
}

TEST_CASE("syscall filter: setpriority on another process is refused; the caller's own is allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and victim uid " << uid);
    {
      Victim control(uid);
      CHECK(unfiltered(uid, [&] {
              return errno_of(::setpriority(PRIO_PROCESS, static_cast<::id_t>(control.pid()), 10));
            }) == 0);
      CHECK(control.nice() == 10);
    }
    Victim victim(uid);
    const int before = victim.nice();
    REQUIRE(before == 0);
    const auto pid = static_cast<::id_t>(victim.pid());
    CHECK(filtered(uid, [&] { return errno_of(::setpriority(PRIO_PROCESS, pid, 10)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::setpriority(PRIO_PGRP, pid, 10)); }) == EPERM); // its own group
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_setpriority, PRIO_PROCESS, high_word | pid, 10)); }) ==
          EPERM);
    // PRIO_USER of a user without processes: the kernel alone would answer ESRCH
    CHECK(filtered(uid, [&] { return errno_of(::setpriority(PRIO_USER, 65533, 10)); }) == EPERM);
    CHECK(victim.running());
    CHECK(victim.nice() == before);

    CHECK(filtered(uid, [&] {
            if (::setpriority(PRIO_PROCESS, 0, 5) != 0) {
              return errno;
            }
            errno = 0;
            return ::getpriority(PRIO_PROCESS, 0) == 5 && errno == 0 ? 0 : wrong_result;
          }) == 0);
    // Not even a group of its own: a command may have joined the zygote's group.
    CHECK(filtered(uid, [&] {
            return ::setpgid(0, 0) != 0 ? wrong_result : errno_of(::setpriority(PRIO_PGRP, 0, 7));
          }) == EPERM);
    CHECK(filtered(uid, [&] { return ::nice(3) == 3 ? 0 : wrong_result; }) == 0);
  }
}

/// struct sched_attr, version 1 (48 bytes).
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};

TEST_CASE("syscall filter: another process's scheduling is refused; the caller's own is allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  const cpu_set_t one = first_cpu_only();
  const ::sched_param zero{};
  const SchedAttr idle{sizeof(SchedAttr), SCHED_IDLE, 0, 0, 0, 0, 0, 0};
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and victim uid " << uid);
    {
      Victim control(uid);
      CHECK(unfiltered(uid, [&] { return errno_of(::sched_setscheduler(control.pid(), SCHED_IDLE, &zero)); }) == 0);
      CHECK(control.policy() == SCHED_IDLE);
      CHECK(unfiltered(uid, [&] { return errno_of(::sched_setaffinity(control.pid(), sizeof one, &one)); }) == 0);
      CHECK(control.cpus() == cpus_of(one));
    }
    Victim victim(uid);
    const int policy = victim.policy();
    const std::vector<int> cpus = victim.cpus();
    REQUIRE(policy == SCHED_OTHER);
    const ::pid_t pid = victim.pid();
    CHECK(filtered(uid, [&] { return errno_of(::sched_setscheduler(pid, SCHED_IDLE, &zero)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::sched_setparam(pid, &zero)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_sched_setattr, pid, &idle, 0U)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::sched_setaffinity(pid, sizeof one, &one)); }) == EPERM);
    CHECK(filtered(uid, [&] {
            return errno_of(
                ::syscall(SYS_sched_setaffinity, high_word | static_cast<std::uint64_t>(pid), sizeof one, &one));
          }) == EPERM);
    CHECK(victim.running());
    CHECK(victim.policy() == policy);
    CHECK(victim.cpus() == cpus);

    CHECK(filtered(uid, [&] {
            if (::sched_setaffinity(0, sizeof one, &one) != 0 || ::sched_setparam(0, &zero) != 0 ||
                ::syscall(SYS_sched_setattr, 0, &idle, 0U) != 0 || ::sched_setscheduler(0, SCHED_IDLE, &zero) != 0) {
              return errno;
            }
            cpu_set_t now;
            CPU_ZERO(&now);
            return ::sched_getscheduler(0) == SCHED_IDLE && ::sched_getaffinity(0, sizeof now, &now) == 0 &&
                           cpus_of(now) == cpus_of(one)
                       ? 0
                       : wrong_result;
          }) == 0);
  }
}

TEST_CASE("syscall filter: ioprio_set on another process is refused; the caller's own is allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  constexpr int who_process = 1;
  constexpr int who_pgrp = 2;
  constexpr int who_user = 3;
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and victim uid " << uid);
    {
      Victim control(uid);
      CHECK(unfiltered(uid, [&] {
              return errno_of(::syscall(SYS_ioprio_set, who_process, control.pid(), ioprio_idle));
            }) == 0);
      CHECK(control.io_priority() == ioprio_idle);
    }
    Victim victim(uid);
    const long before = victim.io_priority();
    REQUIRE(before != ioprio_idle);
    const ::pid_t pid = victim.pid();
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_ioprio_set, who_process, pid, ioprio_idle)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_ioprio_set, who_pgrp, pid, ioprio_idle)); }) == EPERM);
    CHECK(filtered(uid, [&] {
            return ::setpgid(0, 0) != 0 ? wrong_result : errno_of(::syscall(SYS_ioprio_set, who_pgrp, 0, ioprio_idle));
          }) == EPERM); // even its own group
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_ioprio_set, who_user, 65533, ioprio_idle)); }) == EPERM);
    CHECK(victim.running());
    CHECK(victim.io_priority() == before);

    CHECK(filtered(uid, [&] {
            if (::syscall(SYS_ioprio_set, who_process, 0, ioprio_idle) != 0) {
              return errno;
            }
            return ::syscall(SYS_ioprio_get, who_process, 0) == ioprio_idle ? 0 : wrong_result;
          }) == 0);
  }
}

#if defined(__x86_64__)
/// A system call through the i386 entry point (int $0x80) from this 64-bit process: i386
/// numbers, three arguments, -errno on failure. The entry clobbers r8 to r11.
long int80(long nr, long a, long b, long c) {
  long result = nr;
  asm volatile("int $0x80" : "+a"(result) : "b"(a), "c"(b), "d"(c) : "memory", "cc", "r8", "r9", "r10", "r11");
  return result;
}

TEST_CASE("syscall filter: calls through the i386 entry point are decoded with i386 numbers") {
  DSH_REQUIRE_SYSCALL_FILTER();
  constexpr long i386_getpid = 20;
  constexpr long i386_setpriority = 97;
  const int probe = unfiltered(::geteuid(), [] { return int80(i386_getpid, 0, 0, 0) == ::getpid() ? 0 : 1; });
  if (probe != 0) {
    DSH_TEST_SKIP("this kernel runs no i386 calls from 64-bit processes (ia32 emulation off), status " +
                  std::to_string(probe));
  }
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and victim uid " << uid);
    {
      Victim control(uid);
      CHECK(unfiltered(
                uid, [&] { return static_cast<int>(-int80(i386_setpriority, PRIO_PROCESS, control.pid(), 10)); }) == 0);
      CHECK(control.nice() == 10);
    }
    Victim victim(uid);
    CHECK(filtered(uid, [&] { return static_cast<int>(-int80(i386_setpriority, PRIO_PROCESS, victim.pid(), 10)); }) ==
          EPERM);
    CHECK(filtered(uid, [&] { return static_cast<int>(-int80(i386_setpriority, PRIO_USER, 65533, 10)); }) == EPERM);
    CHECK(victim.nice() == 0);
    CHECK(filtered(uid, [&] {
            if (int80(i386_setpriority, PRIO_PROCESS, 0, 4) != 0) {
              return wrong_result;
            }
            return ::getpriority(PRIO_PROCESS, 0) == 4 && int80(i386_getpid, 0, 0, 0) == ::getpid() ? 0 : wrong_result;
          }) == 0);
  }
}

TEST_CASE("syscall filter: x32 calls are refused") {
  DSH_REQUIRE_SYSCALL_FILTER();
  constexpr long x32_getpid = 0x40000000L | SYS_getpid;
  // without the filter the kernel runs it or, built without x32, answers ENOSYS
  const int unfiltered_result = unfiltered(::geteuid(), [] {
    const long result = ::syscall(x32_getpid);
    return result == ::getpid() ? 0 : errno_of(result);
  });
  CHECK((unfiltered_result == 0 || unfiltered_result == ENOSYS));
  CHECK(filtered(::geteuid(), [] { return errno_of(::syscall(x32_getpid)); }) == EPERM);
}
#endif

/// Runs `body` in a forked child as `uid` and returns the text it returned: for a test whose
/// target must belong to the attacking user and be made by it (a key).
std::string as_user(::uid_t uid, const std::function<std::string()>& body) {
  std::array<int, 2> out{};
  REQUIRE(::pipe2(out.data(), O_CLOEXEC) == 0);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(out[0]);
    const std::string text = become(uid) ? body() : "cannot become the user";
    static_cast<void>(dsh::detail::write_all(out[1], text.data(), text.size()));
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  std::array<char, 512> chunk{};
  for (;;) {
    const ::ssize_t got = dsh::detail::retry_on_eintr([&] { return ::read(out[0], chunk.data(), chunk.size()); });
    if (got <= 0) {
      break;
    }
    text.append(chunk.data(), static_cast<std::size_t>(got));
  }
  ::close(out[0]);
  CHECK(dsh::FencedCommand::wait_for(pid) == 0);
  return text;
}

TEST_CASE("syscall filter: keys are refused") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and key owner uid " << uid);
    const std::string result = as_user(uid, [uid] {
      // a session keyring of this test's own, shared with the attacker as a user's keyrings are
      // shared with every process of the user
      if (::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) < 0) {
        return std::string("no keyrings: ") + std::strerror(errno);
      }
      const long key = ::syscall(SYS_add_key, "user", "dsh-filter-victim", "original", 8, KEY_SPEC_SESSION_KEYRING);
      const long control =
          ::syscall(SYS_add_key, "user", "dsh-filter-control", "original", 8, KEY_SPEC_SESSION_KEYRING);
      if (key < 0 || control < 0) {
        return std::string("add_key: ") + std::strerror(errno);
      }
      const auto payload = [](long serial) {
        std::array<char, 64> bytes{};
        const long size = ::syscall(SYS_keyctl, KEYCTL_READ, serial, bytes.data(), bytes.size());
        return size < 0 ? std::string("<unreadable>") : std::string(bytes.data(), static_cast<std::size_t>(size));
      };
      const int update =
          filtered(uid, [&] { return errno_of(::syscall(SYS_keyctl, KEYCTL_UPDATE, key, "forged", 6)); });
      const int replace = filtered(uid, [&] {
        return errno_of(::syscall(SYS_add_key, "user", "dsh-filter-victim", "forged", 6, KEY_SPEC_SESSION_KEYRING));
      });
      const int revoke = filtered(uid, [&] { return errno_of(::syscall(SYS_keyctl, KEYCTL_REVOKE, key)); });
      const int request =
          filtered(uid, [&] { return errno_of(::syscall(SYS_request_key, "user", "dsh-filter-victim", nullptr, 0)); });
      const int control_update =
          unfiltered(uid, [&] { return errno_of(::syscall(SYS_keyctl, KEYCTL_UPDATE, control, "forged", 6)); });
      return "update=" + std::to_string(update) + " add=" + std::to_string(replace) +
             " revoke=" + std::to_string(revoke) + " request=" + std::to_string(request) + " payload=" + payload(key) +
             " control=" + std::to_string(control_update) + " control_payload=" + payload(control);
    });
    if (result.starts_with("no keyrings")) {
      DSH_TEST_SKIP("this kernel has no keyrings: " + result);
    }
    CHECK(result == "update=1 add=1 revoke=1 request=1 payload=original control=0 control_payload=forged");
  }
}

/// The permission bits and set-ID bits of `path`.
::mode_t mode_of(const std::filesystem::path& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

/// Gives the scratch directory `dir` to `uid`, so that uid may create in it.
void give(const TempDir& dir, ::uid_t uid) { REQUIRE(::chown(dir.path().c_str(), uid, uid) == 0); }

/// Creates `path` with `mode` (exactly: no umask) owned by `uid`.
void make_file(const std::filesystem::path& path, ::mode_t mode, ::uid_t uid) {
  write_file(path, "content\n");
  REQUIRE(::chown(path.c_str(), uid, uid) == 0);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

#if defined(SYS_chmod)
constexpr long sys_chmod = SYS_chmod; // glibc's chmod may use fchmodat; the test calls each number
#endif
constexpr long sys_fchmodat2 = 452; // on every architecture
static_assert(dsh::detail::syscall_numbers[dsh::detail::syscall_index("fchmodat2")].x86_64 == sys_fchmodat2 &&
              dsh::detail::syscall_numbers[dsh::detail::syscall_index("fchmodat2")].aarch64 == sys_fchmodat2);

TEST_CASE("syscall filter: setting set-user-ID and set-group-ID bits is refused; other modes are allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and file owner uid " << uid);
    const TempDir dir;
    give(dir, uid);
    const std::filesystem::path control = dir / "control";
    const std::filesystem::path shell = dir / "bash-copy";
    make_file(control, 0644, uid);
    make_file(shell, 0755, uid);
    CHECK(unfiltered(uid, [&] { return errno_of(::chmod(control.c_str(), 04755)); }) == 0);
    CHECK(mode_of(control) == 04755);

#if defined(SYS_chmod)
    CHECK(filtered(uid, [&] { return errno_of(::syscall(sys_chmod, shell.c_str(), 04755)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::syscall(sys_chmod, shell.c_str(), high_word | 02755)); }) == EPERM);
#endif
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_fchmodat, AT_FDCWD, shell.c_str(), 02755)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::syscall(sys_fchmodat2, AT_FDCWD, shell.c_str(), 04755, 0)); }) ==
          EPERM);
    CHECK(filtered(uid, [&] {
            const int fd = ::open(shell.c_str(), O_RDONLY | O_CLOEXEC);
            return fd < 0 ? errno : errno_of(::fchmod(fd, 06755));
          }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::chmod(shell.c_str(), 04755)); }) == EPERM); // as libc calls it
    CHECK(mode_of(shell) == 0755);

    CHECK(filtered(uid, [&] { return errno_of(::chmod(shell.c_str(), 0700)); }) == 0);
    CHECK(mode_of(shell) == 0700);
    CHECK(filtered(uid, [&] { return errno_of(::syscall(sys_fchmodat2, AT_FDCWD, shell.c_str(), 0750, 0)); }) == 0);
    CHECK(mode_of(shell) == 0750);
    CHECK(filtered(uid, [&] { return errno_of(::chmod(dir.path().c_str(), 01777)); }) == 0); // the sticky bit
    CHECK(mode_of(dir.path()) == 01777);
  }
}

TEST_CASE("syscall filter: creating a file with set-user-ID or set-group-ID bits is refused") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and directory owner uid " << uid);
    const TempDir dir;
    give(dir, uid);
    const std::filesystem::path existing = dir / "existing";
    make_file(existing, 0644, uid);
    CHECK(unfiltered(uid, [&] {
            ::umask(0);
            const int fd = ::open((dir / "control").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 04755);
            return fd < 0 ? errno : 0;
          }) == 0);
    CHECK(mode_of(dir / "control") == 04755);

    const auto refused_creation = [&](const char* name, const std::function<long(const std::filesystem::path&)>& make) {
      INFO(name);
      const std::filesystem::path path = dir / name;
      CHECK(filtered(uid, [&] {
              ::umask(0);
              return errno_of(make(path));
            }) == EPERM);
      CHECK(!dsh::test::exists_nofollow(path));
    };
#if defined(SYS_open)
    refused_creation("open", [](const auto& path) {
      return ::syscall(SYS_open, path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 04755);
    });
    refused_creation("creat", [](const auto& path) { return ::syscall(SYS_creat, path.c_str(), 02755); });
    refused_creation("mknod", [](const auto& path) { return ::syscall(SYS_mknod, path.c_str(), S_IFREG | 04755, 0); });
#endif
    refused_creation("openat", [](const auto& path) {
      return ::syscall(SYS_openat, AT_FDCWD, path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 02755);
    });
    refused_creation("libc-open", [](const auto& path) { return ::open(path.c_str(), O_CREAT | O_WRONLY, 04700); });
    refused_creation("mknodat", [](const auto& path) {
      return ::syscall(SYS_mknodat, AT_FDCWD, path.c_str(), S_IFREG | S_ISGID | 0755, 0);
    });
    CHECK(filtered(uid, [&] { return errno_of(::open(dir.path().c_str(), O_TMPFILE | O_RDWR, 04755)); }) == EPERM);
    CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 2);

    // an open that creates nothing ignores its mode; creations without the bits are allowed
    CHECK(filtered(uid, [&] {
            const int fd = ::open(existing.c_str(), O_RDONLY | O_CLOEXEC, 04755);
            return fd < 0 ? errno : 0;
          }) == 0);
    CHECK(filtered(uid, [&] {
            ::umask(0);
            const int fd = ::open((dir / "plain").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
            return fd < 0 ? errno : errno_of(::mknod((dir / "fifo").c_str(), S_IFIFO | 0600, 0));
          }) == 0);
    CHECK(mode_of(dir / "plain") == 0644);
    CHECK(mode_of(dir / "fifo") == 0600);
    CHECK(mode_of(existing) == 0644);
  }
}

/// True when shmat(2) returned its failure value, (void*)-1.
bool attach_failed(const void* address) { return reinterpret_cast<std::intptr_t>(address) == -1; }

/// union semun, which the caller of semctl defines.
union SemArgument {
  int val;
  ::semid_ds* buf;
  unsigned short* array;
};

/// A System V segment, queue and semaphore set and a POSIX message queue of the host, owned by
/// `uid` with mode 0600; the segment holds "host bytes", the semaphore 3, both queues nothing.
/// Removed on destruction.
class HostIpc {
public:
  explicit HostIpc(::uid_t uid) {
    try {
      make(uid);
    } catch (...) {
      remove();
      throw;
    }
  }
  HostIpc(const HostIpc&) = delete;
  HostIpc& operator=(const HostIpc&) = delete;
  ~HostIpc() { remove(); }

  [[nodiscard]] key_t key() const noexcept { return key_; }
  [[nodiscard]] int shm() const noexcept { return shm_; }
  [[nodiscard]] int msq() const noexcept { return msq_; }
  [[nodiscard]] int sem() const noexcept { return sem_; }
  [[nodiscard]] mqd_t mq() const noexcept { return mq_; }
  [[nodiscard]] const std::string& mq_name() const noexcept { return mq_name_; }

  /// What each object holds now: "<segment text> queue=<messages> sem=<value> mq=<messages>",
  /// or "gone" for a removed segment.
  [[nodiscard]] std::string state() const {
    void* bytes = ::shmat(shm_, nullptr, SHM_RDONLY);
    if (attach_failed(bytes)) {
      return "gone";
    }
    const std::string text(static_cast<const char*>(bytes));
    ::shmdt(bytes);
    ::msqid_ds msq{};
    ::msgctl(msq_, IPC_STAT, &msq);
    ::mq_attr attr{};
    ::mq_getattr(mq_, &attr);
    return text + " queue=" + std::to_string(msq.msg_qnum) + " sem=" + std::to_string(::semctl(sem_, 0, GETVAL)) +
           " mq=" + std::to_string(attr.mq_curmsgs);
  }

private:
  void make(::uid_t uid) {
    key_ = static_cast<key_t>(0x44530000 | (::getpid() & 0xffff));
    while ((shm_ = ::shmget(key_, 4096, IPC_CREAT | IPC_EXCL | 0600)) < 0) {
      REQUIRE(errno == EEXIST);
      ++key_;
    }
    msq_ = ::msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    sem_ = ::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
    REQUIRE(msq_ >= 0);
    REQUIRE(sem_ >= 0);
    void* bytes = ::shmat(shm_, nullptr, 0);
    REQUIRE(!attach_failed(bytes));
    std::memcpy(bytes, "host bytes", 11);
    REQUIRE(::shmdt(bytes) == 0);
    SemArgument three{};
    three.val = 3;
    REQUIRE(::semctl(sem_, 0, SETVAL, three) == 0);
    ::shmid_ds shm{};
    REQUIRE(::shmctl(shm_, IPC_STAT, &shm) == 0);
    shm.shm_perm.uid = uid;
    shm.shm_perm.gid = uid;
    REQUIRE(::shmctl(shm_, IPC_SET, &shm) == 0);
    ::msqid_ds msq{};
    REQUIRE(::msgctl(msq_, IPC_STAT, &msq) == 0);
    msq.msg_perm.uid = uid;
    msq.msg_perm.gid = uid;
    REQUIRE(::msgctl(msq_, IPC_SET, &msq) == 0);
    ::semid_ds sem{};
    SemArgument stat{};
    stat.buf = &sem;
    REQUIRE(::semctl(sem_, 0, IPC_STAT, stat) == 0);
    sem.sem_perm.uid = uid;
    sem.sem_perm.gid = uid;
    REQUIRE(::semctl(sem_, 0, IPC_SET, stat) == 0);
    mq_name_ = "/dsh-filter-" + std::to_string(::getpid());
    ::mq_attr attr{};
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = 16;
    mq_ = ::mq_open(mq_name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600, &attr);
    REQUIRE(mq_ >= 0);
    REQUIRE(::fchown(mq_, uid, uid) == 0);
  }

  void remove() noexcept {
    if (shm_ >= 0) {
      ::shmctl(shm_, IPC_RMID, nullptr);
    }
    if (msq_ >= 0) {
      ::msgctl(msq_, IPC_RMID, nullptr);
    }
    if (sem_ >= 0) {
      ::semctl(sem_, 0, IPC_RMID);
    }
    if (mq_ >= 0) {
      ::mq_close(mq_);
      ::mq_unlink(mq_name_.c_str());
    }
  }

  key_t key_ = 0;
  int shm_ = -1;
  int msq_ = -1;
  int sem_ = -1;
  mqd_t mq_ = -1;
  std::string mq_name_;
};

/// The System V message the attacks send.
struct Message {
  long type;
  std::array<char, 8> text;
};

TEST_CASE("syscall filter: the host's System V IPC and POSIX message queues are refused with refuse_sysv_ipc") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker and IPC owner uid " << uid);
    const HostIpc host(uid);
    const std::string before = host.state();
    REQUIRE(before == "host bytes queue=0 sem=3 mq=0");
    const Message message{1, {'f', 'o', 'r', 'g', 'e', 'd', 0, 0}};
    ::sembuf take{0, -1, IPC_NOWAIT};
    SemArgument nine{};
    nine.val = 9;
    CHECK(filtered(uid, [&] { return errno_of(::shmget(host.key(), 0, 0)); }) == EPERM);
    CHECK(filtered(uid, [&] { return attach_failed(::shmat(host.shm(), nullptr, 0)) ? errno : 0; }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::shmctl(host.shm(), IPC_RMID, nullptr)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::msgsnd(host.msq(), &message, 6, IPC_NOWAIT)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::msgctl(host.msq(), IPC_RMID, nullptr)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::semctl(host.sem(), 0, SETVAL, nine)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::semop(host.sem(), &take, 1)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::mq_open(host.mq_name().c_str(), O_WRONLY)); }) == EPERM);
    CHECK(filtered(uid, [&] { return errno_of(::mq_send(host.mq(), "forged", 6, 0)); }) == EPERM); // inherited
    // the call itself: glibc's mq_unlink reports EPERM as EACCES
    CHECK(filtered(uid, [&] { return errno_of(::syscall(SYS_mq_unlink, host.mq_name().c_str() + 1)); }) == EPERM);
    CHECK(host.state() == before);

    // the fence passes refuse_sysv_ipc = false when the command has an IPC namespace of its own:
    // then the same calls reach the kernel, whose permissions allow them to the owner
    CHECK(attack(uid, Under::filter_own_ipc, [&] {
            void* bytes = ::shmat(host.shm(), nullptr, 0);
            if (attach_failed(bytes)) {
              return errno;
            }
            std::memcpy(bytes, "child", 6);
            if (::msgsnd(host.msq(), &message, 6, IPC_NOWAIT) != 0 || ::semctl(host.sem(), 0, SETVAL, nine) != 0 ||
                ::mq_send(host.mq(), "sent", 4, 0) != 0) {
              return errno;
            }
            return 0;
          }) == 0);
    CHECK(host.state() == "child queue=1 sem=9 mq=1");
  }
}

TEST_CASE("syscall filter: io_uring is refused and openat2 answers ENOSYS") {
  DSH_REQUIRE_SYSCALL_FILTER();
  const auto ring = [] {
    ::io_uring_params params{};
    const long fd = ::syscall(SYS_io_uring_setup, 4, &params);
    return errno_of(fd);
  };
  const int control = unfiltered(::geteuid(), ring);
  if (control != 0) {
    WARN("io_uring_setup fails here even unfiltered (" << std::strerror(control) << ")");
  }
  CHECK(filtered(::geteuid(), ring) == EPERM);
  CHECK(unfiltered(::geteuid(), [] { return errno_of(::syscall(SYS_io_uring_enter, -1, 1, 0, 0, nullptr, 0)); }) ==
        EBADF);
  CHECK(filtered(::geteuid(), [] { return errno_of(::syscall(SYS_io_uring_enter, -1, 1, 0, 0, nullptr, 0)); }) ==
        EPERM);
  CHECK(filtered(::geteuid(), [] { return errno_of(::syscall(SYS_io_uring_register, -1, 0, nullptr, 0)); }) == EPERM);

  const auto open_directory = [] {
    struct {
      std::uint64_t flags;
      std::uint64_t mode;
      std::uint64_t resolve;
    } how{O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, 0};
    return errno_of(::syscall(dsh::detail::sys_openat2, AT_FDCWD, ".", &how, sizeof how));
  };
  CHECK(unfiltered(::geteuid(), open_directory) == 0);
  CHECK(filtered(::geteuid(), open_directory) == ENOSYS);
}

/// A pseudo-terminal of 24x80 made by this process (both sides open, controlled by no session):
/// the terminal a command of the terminal family runs on. Closed on destruction.
class OwnTerminal {
public:
  OwnTerminal() {
    winsize size{};
    size.ws_row = 24;
    size.ws_col = 80;
    int master = -1;
    int slave = -1;
    REQUIRE(::openpty(&master, &slave, nullptr, nullptr, &size) == 0);
    master_ = master;
    slave_ = slave;
  }
  OwnTerminal(const OwnTerminal&) = delete;
  OwnTerminal& operator=(const OwnTerminal&) = delete;
  ~OwnTerminal() {
    ::close(slave_);
    ::close(master_);
  }
  [[nodiscard]] int slave() const noexcept { return slave_; }

  /// In a child: leads a new session whose controlling terminal is this one, as the fence's
  /// child does before the filter, ignoring the SIGHUP a session leader's TIOCNOTTY sends to
  /// its own foreground group. 0, or the errno.
  [[nodiscard]] int lead_session_on_it() const noexcept {
    if (::setsid() < 0 || ::ioctl(slave_, TIOCSCTTY, 0) != 0 || ::signal(SIGHUP, SIG_IGN) == SIG_ERR) {
      return errno;
    }
    return 0;
  }

private:
  int master_ = -1;
  int slave_ = -1;
};

/// In a child: the rows of the controlling terminal reached through /dev/tty (24 for an
/// `OwnTerminal`), or -errno when /dev/tty opens none (ENXIO: no controlling terminal).
int rows_through_dev_tty() {
  const int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  winsize size{};
  const int rows = ::ioctl(fd, TIOCGWINSZ, &size) == 0 ? size.ws_row : -errno;
  ::close(fd);
  return rows;
}

TEST_CASE("syscall filter: with the terminal rows, setsid and TIOCNOTTY are refused; other terminal ioctls "
          "are allowed") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("attacker uid " << uid);
    const ::pid_t session = ::getsid(0);
    // a new session: the child is no group leader, so only the filter refuses it
    const auto leave_session = [&] {
      const int error = errno_of(::setsid());
      return error == 0 ? (::getsid(0) == ::getpid() ? 0 : wrong_result)
                        : (::getsid(0) == session ? error : wrong_result);
    };
    CHECK(unfiltered(uid, leave_session) == 0);
    CHECK(filtered(uid, leave_session) == 0);
    CHECK(attack(uid, Under::filter_terminal, leave_session) == EPERM);
    CHECK(attack(uid, Under::filter_terminal, [] { return errno_of(::syscall(SYS_setsid, 1, 2, 3)); }) == EPERM);

    // the session leader gives up its terminal: afterwards /dev/tty opens none
    const OwnTerminal own;
    const auto lead = [&] { return own.lead_session_on_it(); };
    const auto give_up = [&](unsigned long request) {
      return [&own, request] {
        if (rows_through_dev_tty() != 24) {
          return wrong_result;
        }
        const int error = errno_of(::syscall(SYS_ioctl, own.slave(), request, 0));
        const int rows = rows_through_dev_tty();
        return error == 0 ? (rows == -ENXIO ? 0 : wrong_result) : (rows == 24 ? error : wrong_result);
      };
    };
    CHECK(attack(uid, Under::nothing, give_up(TIOCNOTTY), lead) == 0);
    CHECK(attack(uid, Under::filter, give_up(TIOCNOTTY), lead) == 0);
    CHECK(attack(uid, Under::filter_terminal, give_up(TIOCNOTTY), lead) == EPERM);
    // the kernel reads the request as an unsigned int: with its upper half set it is TIOCNOTTY still
    CHECK(attack(uid, Under::nothing, give_up((1UL << 32) | TIOCNOTTY), lead) == 0);
    CHECK(attack(uid, Under::filter_terminal, give_up((1UL << 32) | TIOCNOTTY), lead) == EPERM);

    // what programs on their terminal do stays allowed: size, modes, the foreground group
    CHECK(attack(
              uid, Under::filter_terminal,
              [&] {
                winsize size{};
                termios modes{};
                if (::ioctl(own.slave(), TIOCGWINSZ, &size) != 0 || size.ws_row != 24 || size.ws_col != 80) {
                  return wrong_result;
                }
                size.ws_row = 30;
                if (::ioctl(own.slave(), TIOCSWINSZ, &size) != 0 || ::tcgetattr(own.slave(), &modes) != 0) {
                  return errno;
                }
                modes.c_lflag &= ~static_cast<tcflag_t>(ECHO);
                if (::tcsetattr(own.slave(), TCSANOW, &modes) != 0 || ::tcsetpgrp(own.slave(), ::getpgrp()) != 0) {
                  return errno;
                }
                termios now{};
                return rows_through_dev_tty() == 30 && ::tcgetattr(own.slave(), &now) == 0 &&
                               (now.c_lflag & ECHO) == 0 && ::tcgetpgrp(own.slave()) == ::getpgrp()
                           ? 0
                           : wrong_result;
              },
              lead) == 0);
  }
}

TEST_CASE("syscall filter: clone3 and the calls Landlock mediates are left to the kernel") {
  DSH_REQUIRE_SYSCALL_FILTER();
  CHECK(filtered(::geteuid(), [] {
          std::array<std::uint64_t, 8> args{}; // struct clone_args, version 0: only exit_signal set
          args[4] = SIGCHLD;
          const long child = ::syscall(SYS_clone3, args.data(), sizeof args);
          if (child == 0) {
            ::_exit(7);
          }
          return child < 0 ? errno : dsh::FencedCommand::wait_for(static_cast<::pid_t>(child)) == 7 ? 0 : wrong_result;
        }) == 0);
  // what strace and gdb do to the command's own children
  CHECK(filtered(::geteuid(), [] {
          static const char secret[] = "own child";
          const ::pid_t child = ::fork();
          if (child == 0) {
            ::pause();
            ::_exit(0);
          }
          std::array<char, sizeof secret> copy{};
          const ::iovec local{copy.data(), copy.size()};
          const ::iovec remote{const_cast<char*>(secret), sizeof secret};
          int result = 0;
          if (::ptrace(PTRACE_SEIZE, child, nullptr, nullptr) != 0 ||
              ::process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<::ssize_t>(sizeof secret) ||
              ::syscall(SYS_kcmp, ::getpid(), child, 0 /* KCMP_FILE */, 0, 0) < 0) {
            result = errno;
          } else if (std::string_view(copy.data()) != "own child") {
            result = wrong_result;
          }
          ::kill(child, SIGKILL);
          static_cast<void>(dsh::FencedCommand::wait_for(child));
          return result;
        }) == 0);
}

TEST_CASE("syscall filter: what it also refuses (pinned): the caller's own threads and children, setgid "
          "directories") {
  DSH_REQUIRE_SYSCALL_FILTER();
  const cpu_set_t one = first_cpu_only();
  // a thread other than the calling one is named by its tid, which is not 0
  const auto on_other_thread = [&](const std::function<int(::pthread_t)>& call) {
    return filtered(::geteuid(), [&] {
      std::array<int, 2> hold{};
      if (::pipe(hold.data()) != 0) {
        return errno;
      }
      ::pthread_t thread{};
      const int created = ::pthread_create(
          &thread, nullptr,
          [](void* fd) -> void* {
            char byte = 0;
            static_cast<void>(::read(*static_cast<int*>(fd), &byte, 1));
            return nullptr;
          },
          &hold[0]);
      if (created != 0) {
        return created;
      }
      const int result = call(thread);
      ::close(hold[1]);
      ::pthread_join(thread, nullptr);
      return result;
    });
  };
  CHECK(on_other_thread([&](::pthread_t thread) { return ::pthread_setaffinity_np(thread, sizeof one, &one); }) ==
        EPERM);
  CHECK(on_other_thread([](::pthread_t thread) {
          const ::sched_param zero{};
          return ::pthread_setschedparam(thread, SCHED_IDLE, &zero);
        }) == EPERM);
  // renicing itself by its pid, or renicing or limiting a child it started
  CHECK(filtered(::geteuid(),
                 [] { return errno_of(::setpriority(PRIO_PROCESS, static_cast<::id_t>(::getpid()), 1)); }) == EPERM);
  CHECK(filtered(::geteuid(), [] {
          const ::pid_t child = ::fork();
          if (child == 0) {
            ::pause();
            ::_exit(0);
          }
          const ::rlimit none{0, 0};
          const int renice = errno_of(::setpriority(PRIO_PROCESS, static_cast<::id_t>(child), 5));
          const int limit = errno_of(::prlimit(child, RLIMIT_FSIZE, &none, nullptr));
          ::kill(child, SIGKILL);
          static_cast<void>(dsh::FencedCommand::wait_for(child));
          return renice == EPERM && limit == EPERM ? 0 : wrong_result;
        }) == 0);
  // the set-group-ID bit of a directory (new files inherit its group)
  const TempDir dir;
  CHECK(filtered(::geteuid(), [&] { return errno_of(::chmod(dir.path().c_str(), 02775)); }) == EPERM);
  CHECK(mode_of(dir.path()) == 0700);
}

TEST_CASE("syscall filter: a shell runs its ordinary commands under it") {
  DSH_REQUIRE_SYSCALL_FILTER();
  for (const ::uid_t uid : attacker_uids()) {
    INFO("shell uid " << uid);
    const TempDir dir;
    give(dir, uid);
    make_file(dir / "f", 0644, uid);
    const auto shell = [&](const char* script) {
      return filtered(uid, [&] {
        if (::chdir(dir.path().c_str()) != 0) {
          return errno;
        }
        ::setenv("LC_ALL", "C", 1);
        ::execlp("bash", "bash", "--norc", "--noprofile", "-c", script, static_cast<char*>(nullptr));
        return errno;
      });
    };
    CHECK(shell("nice -n 5 nice > out && ulimit -S -n 256 && ulimit -S -n >> out && chmod 755 f && mkdir d && "
                "ionice -c3 ionice >> out && taskset -c 0 grep Cpus_allowed_list: /proc/self/status >> out && "
                "mktemp -p . > made && touch made-by-touch && ln -s f link && mv link moved") == 0);
    CHECK(read_file(dir / "out") == "5\n256\nidle\nCpus_allowed_list:\t0\n");
    CHECK(mode_of(dir / "f") == 0755);
    REQUIRE(std::filesystem::is_directory(dir / "d"));
    const ::mode_t directory_mode = mode_of(dir / "d");
    CHECK((directory_mode & 02000) == 0);
    std::string made = read_file(dir / "made");
    REQUIRE(made.ends_with("\n"));
    made.pop_back();
    CHECK(made.starts_with("./tmp."));
    CHECK(std::filesystem::is_regular_file(dir / made));
    CHECK(mode_of(dir / made) == 0600);

    CHECK(shell("chmod 4755 f 2> err; echo \"chmod=$?\" > out; chmod g+s d 2>> err; echo \"setgid=$?\" >> out; "
                "sleep infinity & renice -n 3 -p $! >/dev/null 2>> err; echo \"renice=$?\" >> out; kill $!") == 0);
    CHECK(read_file(dir / "out") == "chmod=1\nsetgid=1\nrenice=1\n");
    CHECK(read_file(dir / "err").find("Operation not permitted") != std::string::npos);
    CHECK(mode_of(dir / "f") == 0755);
    CHECK(mode_of(dir / "d") == directory_mode);
  }
}

TEST_CASE("syscall filter: install_syscall_filter's contract") {
  DSH_REQUIRE_SYSCALL_FILTER();
  CHECK(dsh::detail::syscall_filter_supported());
  CHECK(dsh::detail::install_syscall_filter({}) == EINVAL);
  const Program too_long(static_cast<std::size_t>(BPF_MAXINSNS) + 1, filter().back());
  CHECK(dsh::detail::install_syscall_filter(too_long) == EINVAL);
  CHECK(dsh::detail::syscall_filter_unavailable_reason(EINVAL) ==
        "this kernel cannot install seccomp filters (CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER are required)");
  const std::string status = read_file("/proc/self/status");
  if (::geteuid() == 0 && status.find("NoNewPrivs:\t0\n") != std::string::npos) {
    // without no_new_privs or CAP_SYS_ADMIN the kernel refuses
    std::fflush(nullptr);
    const ::pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::_exit(become(nobody) ? dsh::detail::install_syscall_filter(filter()) : cannot_become);
    }
    CHECK(dsh::FencedCommand::wait_for(pid) == EACCES);
    // the probe needs neither: it installs nothing
    std::fflush(nullptr);
    const ::pid_t prober = ::fork();
    REQUIRE(prober >= 0);
    if (prober == 0) {
      ::_exit(become(nobody) ? dsh::detail::probe_syscall_filter() : cannot_become);
    }
    CHECK(dsh::FencedCommand::wait_for(prober) == 0);
  }
  // a second filter stacks on the first: the child's status counts both, above this process's
  const std::size_t at = status.find("Seccomp_filters:\t");
  REQUIRE(at != std::string::npos);
  const int filters = std::stoi(status.substr(at + 17));
  CHECK(filtered(::geteuid(), [filters] {
          if (dsh::detail::install_syscall_filter(filter()) != 0) {
            return install_failed;
          }
          const std::string now = read_file("/proc/self/status");
          return now.find("Seccomp:\t2\n") != std::string::npos &&
                         now.find("Seccomp_filters:\t" + std::to_string(filters + 2) + "\n") != std::string::npos
                     ? 0
                     : wrong_result;
        }) == 0);
}

} // namespace

namespace {

TEST_CASE("syscall filter: holds_syscall_filter is true only for the very program installed and recorded") {
  DSH_REQUIRE_SYSCALL_FILTER();
  const Program& refusing = filter(true);
  const Program& own_ipc = filter(false);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Each wrong answer exits with its own code: 10 + the step.
    using dsh::detail::holds_syscall_filter;
    if (holds_syscall_filter(refusing)) {
      ::_exit(10);
    }
    // Recorded, but nothing installed: the kernel's answer refuses it, unless this process
    // already runs under a filter of its own (a container's), which PR_GET_SECCOMP cannot tell
    // apart; the record alone decides, and only a zygote's successful install writes it.
    dsh::detail::inherited_syscall_filter = &refusing;
    if (::prctl(PR_GET_SECCOMP, 0UL, 0UL, 0UL, 0UL) == 0 && holds_syscall_filter(refusing)) {
      ::_exit(11);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0 || dsh::detail::install_syscall_filter(refusing) != 0) {
      ::_exit(install_failed);
    }
    if (!holds_syscall_filter(refusing)) {
      ::_exit(12);
    }
    if (holds_syscall_filter(own_ipc) || holds_syscall_filter(Program{}) ||
        holds_syscall_filter(Program(refusing.begin(), refusing.end() - 1))) {
      ::_exit(13);
    }
    Program changed = refusing;
    changed[changed.size() / 2].k ^= 1U;
    if (holds_syscall_filter(changed)) {
      ::_exit(14);
    }
    dsh::detail::inherited_syscall_filter = nullptr; // installed, but not recorded
    ::_exit(holds_syscall_filter(refusing) ? 15 : 0);
  }
  CHECK(dsh::FencedCommand::wait_for(pid) == 0);
}

} // namespace
