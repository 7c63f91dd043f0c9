// dsh-fence-launcher: the small process a host using dsh-sandbox-policy starts once (at its
// first fenced call), from which the supervisor of each call is forked instead of from the host,
// so that a call costs the same whatever the host's size. Not for people to run: the library
// starts it with its socket as descriptor 3 (docs/enforcement.md#the-launcher).
#include <dsh/landlock.hpp>

int main(int argc, char** argv) { return dsh::detail::run_launcher<dsh::FencedCommand>(argc, argv); }
