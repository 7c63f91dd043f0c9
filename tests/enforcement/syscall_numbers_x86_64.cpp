// x86_64's numbers as <asm/unistd_64.h> defines them (see syscall_numbers.hpp).
#include "syscall_numbers.hpp"

#if __has_include(<asm/unistd_64.h>)
#include <asm/unistd_64.h>
#define DSH_KERNEL_HEADER_INSTALLED
#endif
#define DSH_KERNEL_NUMBERS_FUNCTION kernel_numbers_x86_64
#include "syscall_numbers_list.inc"
