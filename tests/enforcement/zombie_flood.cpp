// dsh_test_zombie_flood CHAINS SECONDS: starts CHAINS processes that each fork and exit in a
// loop, so that every step leaves a zombie for whoever adopts it (the call's supervisor, a
// child subreaper), then waits. Each chain stops by itself after SECONDS, and none forks while
// the machine runs more than 4,000 tasks, so that the flood never exhausts the pids of others.
// Prints "flooding" once the chains run; exits 2 on bad usage. The process red-team suite runs
// it as the hostile command under a fence with a time limit.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace {

double seconds_now() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

/// The machine's task count, the denominator of /proc/loadavg's fourth field; 0 when unknown.
int machine_tasks() {
  char text[128] = {};
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return 0;
  }
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (got <= 0) {
    return 0;
  }
  for (ssize_t i = 0; i < got; ++i) {
    if (text[i] == '/') {
      return std::atoi(text + i + 1);
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::atoi(argv[1]) <= 0 || std::atof(argv[2]) <= 0) {
    std::fputs("usage: dsh_test_zombie_flood CHAINS SECONDS\n", stderr);
    return 2;
  }
  const int chains = std::atoi(argv[1]);
  const double end = seconds_now() + std::atof(argv[2]);
  ::signal(SIGCHLD, SIG_IGN); // the chains' first steps are not this process's zombies
  for (int chain = 0; chain < chains; ++chain) {
    if (::fork() == 0) {
      ::signal(SIGCHLD, SIG_DFL);
      while (seconds_now() < end) {
        if (machine_tasks() > 4000) {
          ::sched_yield();
          continue;
        }
        const pid_t next = ::fork();
        if (next > 0) {
          ::_exit(0); // this step ends; its child goes on, adopted by the subreaper above
        }
        if (next < 0) {
          ::sched_yield();
        }
      }
      ::_exit(0);
    }
  }
  std::puts("flooding");
  std::fflush(stdout);
  ::pause();
  return 0;
}
