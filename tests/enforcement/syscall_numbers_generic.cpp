// The generic table's numbers as <asm-generic/unistd.h> defines them for a 64-bit build: the
// numbers of aarch64 (see syscall_numbers.hpp).
#include "syscall_numbers.hpp"

#if __has_include(<asm-generic/unistd.h>)
// As arm64's <asm/unistd.h> defines it before it includes the table.
#define __ARCH_WANT_SYS_CLONE3 // NOLINT(bugprone-reserved-identifier): the kernel header's name
#include <asm-generic/unistd.h>
#endif
#if __has_include(<asm-generic/unistd.h>) && __BITS_PER_LONG == 64
#define DSH_KERNEL_HEADER_INSTALLED
#endif
#define DSH_KERNEL_NUMBERS_FUNCTION kernel_numbers_generic
#include "syscall_numbers_list.inc"
