// The system-call numbers of the kernel headers installed on the build machine, one list per
// ABI, for test_syscall_filter to compare with dsh::detail::syscall_numbers. Each list is made in
// its own translation unit, because the headers define the same __NR_ names with different
// numbers.
#pragma once

#include <string_view>
#include <vector>

namespace dsh::test {

/// One call as a kernel header numbers it; `number` is `header_lacks_it` when the header
/// predates the call (its number cannot be checked against it).
struct KernelSyscallNumber {
  std::string_view name;
  long number;
};

inline constexpr long header_lacks_it = -2;

/// The calls of dsh::detail::syscall_numbers that <asm/unistd_64.h> numbers (x86_64), with
/// those it lacks and the table says x86_64 lacks. Empty where the header is not installed.
std::vector<KernelSyscallNumber> kernel_numbers_x86_64();
/// The same from <asm/unistd_32.h> (i386).
std::vector<KernelSyscallNumber> kernel_numbers_i386();
/// The same from <asm-generic/unistd.h> on a 64-bit build: the numbers of aarch64.
std::vector<KernelSyscallNumber> kernel_numbers_generic();

} // namespace dsh::test
