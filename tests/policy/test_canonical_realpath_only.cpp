// The canonicalizer as it compiles where open(O_PATH) does not exist (POSIX systems other than
// Linux): realpath(3) alone gives the identity. Every case of test_canonical.cpp runs again
// against it, in this separate program, so the two definitions of the header's inline
// functions never meet.
#include <fcntl.h>
#undef O_PATH

#include "test_canonical.cpp" // NOLINT(bugprone-suspicious-include): the same cases, rebuilt

#ifdef O_PATH
#error "O_PATH came back: this program would test the Linux path twice"
#endif
