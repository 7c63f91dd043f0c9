// The generic table's numbers as <asm-generic/unistd.h> defines them for a 64-bit build: the
// numbers of aarch64 (see syscall_numbers.hpp).
#include "syscall_numbers.hpp"

#if __has_include(<asm-generic/unistd.h>)
// As arm64's <asm/unistd.h> defines it before it includes the table.
#define __ARCH_WANT_SYS_CLONE3 // NOLINT(bugprone-reserved-identifier): the kernel header's name
#include <asm-generic/unistd.h>
#define DSH_NR(name)                                                                                                   \
  KernelSyscallNumber { #name, __NR_##name }
#endif

namespace dsh::test {

std::vector<KernelSyscallNumber> kernel_numbers_generic() {
#if __has_include(<asm-generic/unistd.h>) && __BITS_PER_LONG == 64
  return {
    DSH_NR(prlimit64), DSH_NR(setpriority), DSH_NR(sched_setscheduler), DSH_NR(sched_setparam), DSH_NR(sched_setattr),
        DSH_NR(sched_setaffinity), DSH_NR(ioprio_set), DSH_NR(ptrace), DSH_NR(process_vm_readv),
        DSH_NR(process_vm_writev), DSH_NR(kcmp), DSH_NR(pidfd_getfd), DSH_NR(process_madvise), DSH_NR(migrate_pages),
        DSH_NR(move_pages), DSH_NR(add_key), DSH_NR(request_key), DSH_NR(keyctl), DSH_NR(fchmod), DSH_NR(fchmodat),
#if defined(__NR_fchmodat2)
        DSH_NR(fchmodat2),
#else
        KernelSyscallNumber{"fchmodat2", header_lacks_it},
#endif
        DSH_NR(openat), DSH_NR(mknodat), DSH_NR(openat2), DSH_NR(io_uring_setup), DSH_NR(io_uring_enter),
        DSH_NR(io_uring_register), DSH_NR(shmget), DSH_NR(shmat), DSH_NR(shmdt), DSH_NR(shmctl), DSH_NR(msgget),
        DSH_NR(msgsnd), DSH_NR(msgrcv), DSH_NR(msgctl), DSH_NR(semget), DSH_NR(semop), DSH_NR(semtimedop),
        DSH_NR(semctl), DSH_NR(mq_open), DSH_NR(mq_unlink), DSH_NR(mq_timedsend), DSH_NR(mq_timedreceive),
        DSH_NR(mq_notify), DSH_NR(mq_getsetattr), DSH_NR(setsid), DSH_NR(ioctl), DSH_NR(clone), DSH_NR(clone3),
    // The calls the table says aarch64 lacks (it has only their *at forms).
#if defined(__NR_chmod)
        DSH_NR(chmod),
#endif
#if defined(__NR_open)
        DSH_NR(open),
#endif
#if defined(__NR_creat)
        DSH_NR(creat),
#endif
#if defined(__NR_mknod)
        DSH_NR(mknod),
#endif
#if defined(__NR_ipc)
        DSH_NR(ipc),
#endif
#if defined(__NR_semtimedop_time64)
        DSH_NR(semtimedop_time64),
#endif
#if defined(__NR_mq_timedsend_time64)
        DSH_NR(mq_timedsend_time64),
#endif
#if defined(__NR_mq_timedreceive_time64)
        DSH_NR(mq_timedreceive_time64),
#endif
  };
#else
  return {};
#endif
}

} // namespace dsh::test
