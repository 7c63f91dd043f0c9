// dsh-sandboxed-bash's memory while it relays and scans a command's stderr: bounded whatever
// the output's shape. It once kept every unterminated line whole to look for a denial in it, so
// 128 MiB without a newline grew it to 250 MB.
//
// The figure is ru_maxrss as wait4(2) reports it for the tool: the peak resident set of the
// tool and of each descendant it reaped (the supervisor, bash, head, tr), and also of the tool's
// process before its exec, a copy of this test's memory. That copy is why this is a test
// executable of its own: started fresh, the test is small (its figure is the floor of every
// measurement below), so the figure is an upper bound of the tool's own peak, never less.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DSH_SANDBOXED_BASH
#error "DSH_SANDBOXED_BASH must name the dsh-sandboxed-bash executable"
#endif

namespace {

/// What `measure` saw of a process.
struct Measured {
  int exit_code = -1;        ///< as the shell reports it
  std::size_t err_bytes = 0; ///< bytes it wrote to stderr
  std::size_t not_x = 0;     ///< of them, bytes other than 'x'
  std::string err_sample;    ///< the first 512 bytes other than 'x', for the failure message
  long max_rss_kib = -1;     ///< ru_maxrss from wait4 (see the file's comment)
};

/// Runs `argv` (argv[0] a path) in `cwd` with exactly `environment`, stdin and stdout on
/// /dev/null and stderr on a pipe this process drains, counting without keeping it; returns
/// what wait4 reports. Everything the child uses is built before fork.
Measured measure(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                 const std::filesystem::path& cwd) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(environment.size() + 1);
  for (const std::string& entry : environment) {
    envp.push_back(const_cast<char*>(entry.c_str()));
  }
  envp.push_back(nullptr);
  std::array<int, 2> ends{-1, -1};
  REQUIRE(::pipe2(ends.data(), O_CLOEXEC) == 0);
  dsh::UniqueFd reader{ends[0]};
  dsh::UniqueFd writer{ends[1]};
  const dsh::UniqueFd null{::open("/dev/null", O_RDWR | O_CLOEXEC)};
  REQUIRE(null);
  std::fflush(nullptr);
  const ::pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0 || ::dup2(null.get(), STDIN_FILENO) < 0 || ::dup2(null.get(), STDOUT_FILENO) < 0 ||
        ::dup2(writer.get(), STDERR_FILENO) < 0) {
      ::_exit(125);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  writer.reset();
  Measured measured;
  dsh::test::drain(reader.get(), [&measured](std::string_view bytes) {
    measured.err_bytes += bytes.size();
    for (const char c : bytes) {
      if (c != 'x') {
        ++measured.not_x;
        if (measured.err_sample.size() < 512) {
          measured.err_sample += c;
        }
      }
    }
  });
  int status = 0;
  rusage usage{};
  ::pid_t done = -1;
  do {
    done = ::wait4(pid, &status, 0, &usage);
  } while (done < 0 && errno == EINTR);
  REQUIRE(done == pid);
  measured.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  measured.max_rss_kib = usage.ru_maxrss;
  return measured;
}

} // namespace

// 128 MiB of stderr in one line: the tool keeps at most 16 KiB of a line, so its peak is its
// fixed working set whatever it relays. Measured on the development machine: 4.1 MB in the dev
// build and 16.7 MB under AddressSanitizer (its shadow and allocator), for this output and for
// `true` alike; 250 MB before. 32 MiB is twice the larger figure, and a quarter of the 128 MiB
// that keeping the line alone costs, which the control shows this measurement sees.
constexpr long rss_bound_kib = 32L * 1024L;

TEST_CASE("dsh-sandboxed-bash: 128 MiB of stderr without a newline leaves the tool's memory bounded") {
  DSH_REQUIRE_LANDLOCK();
  const dsh::test::Lab lab;
  const std::filesystem::path log_path = lab.base() / "session.jsonl";
  (void)dsh::SessionLog::create(log_path, {"s-memory", lab.workspace().string(), 1764480000000});
  const std::vector<std::string> environment{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"};
  const std::string generate = "head -c 134217728 /dev/zero | tr '\\0' x";

  const Measured idle =
      measure({DSH_SANDBOXED_BASH, "--log", log_path.string(), "--", "true"}, environment, lab.base());
  CHECK(idle.exit_code == 0);
  CHECK(idle.err_bytes == 0U);
  const Measured tool =
      measure({DSH_SANDBOXED_BASH, "--log", log_path.string(), "--", generate + " >&2"}, environment, lab.base());
  INFO("stderr other than x: " << tool.err_sample);
  INFO("peak RSS: " << tool.max_rss_kib << " KiB relaying 128 MiB, " << idle.max_rss_kib << " KiB running true");
  CHECK(tool.exit_code == 0);
  CHECK(tool.err_bytes == 134217728U); // every byte relayed, nothing added (no denial)
  CHECK(tool.not_x == 0U);
  CHECK(idle.max_rss_kib > 0);
  CHECK(tool.max_rss_kib < rss_bound_kib);

  // The control: a process that keeps the same unterminated line (bash reading it into a
  // variable), measured the same way, exceeds the bound as the tool did before.
  const std::string bash = dsh::FencedCommand({"bash"}).program();
  const Measured keeper =
      measure({bash, "--norc", "--noprofile", "-c", "line=$(" + generate + "); [ ${#line} = 134217728 ]"}, environment,
              lab.base());
  INFO("peak RSS of the control: " << keeper.max_rss_kib << " KiB");
  CHECK(keeper.exit_code == 0);
  CHECK(keeper.err_bytes == 0U);
  CHECK(keeper.max_rss_kib > 131072L); // at least the 128 MiB it kept
  CHECK(keeper.max_rss_kib > rss_bound_kib);
}
