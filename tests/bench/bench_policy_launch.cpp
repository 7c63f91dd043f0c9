// bench_policy's Launch group: the fenced call against posix_spawn from host processes of
// growing memory with busy threads, and dsh-sandboxed-bash against bash.
#include "bench_policy.hpp"

namespace bench_policy {

namespace {

// ---------------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------------

/// The busy threads of a Launch host.
constexpr std::size_t BUSY_THREADS = 4;

/// How many host processes of each size the Launch group runs (one with `--smoke`). With 5,
/// the 2048-against-8 MB row read 0.83-1.54 in six runs of one build; with 25 and the rest
/// below, 0.85-1.13 in six (docs/performance.md).
constexpr int LAUNCH_PASSES = 25;

/// How long a Launch host rests after touching its memory, before its busy threads start.
constexpr std::chrono::milliseconds LAUNCH_SETTLE{200};

/// Threads that spin on a relaxed atomic flag from construction until destruction, which stops
/// and joins them.
class BusyThreads {
public:
  explicit BusyThreads(std::size_t count) {
    try {
      for (std::size_t i = 0; i < count; ++i) {
        threads_.emplace_back([this] {
          while (!stop_.load(std::memory_order_relaxed)) {
          }
        });
      }
    } catch (...) {
      stop();
      throw;
    }
  }
  BusyThreads(const BusyThreads&) = delete;
  BusyThreads& operator=(const BusyThreads&) = delete;
  ~BusyThreads() { stop(); }

private:
  void stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    for (std::thread& thread : threads_) {
      thread.join();
    }
    threads_.clear();
  }

  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// What the Launch hosts of one size measured: each round's fenced call and posix_spawn, in
/// seconds, pooled over every host process of that size.
struct LaunchRounds {
  std::size_t megabytes = 0;
  std::vector<double> fenced_s;
  std::vector<double> spawn_s;
};

/// The tag that starts each line of a Launch host's output: one line per measured round.
constexpr std::string_view LAUNCH_TAG = "launch-round";

/// Returns `text` as a whole number, or throws std::invalid_argument naming `what`.
std::size_t whole_number(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument(what + " must be a whole number, not \"" + text + "\"");
  }
  return std::stoul(text);
}

/// The host side (`--launch-host MB --runs N --warmup W`): allocates and touches MB megabytes
/// of heap, starts BUSY_THREADS spinning threads, makes W warm-up rounds and then N measured
/// rounds, each timing the base fenced call and then posix_spawn + waitpid of the same bash
/// -c true; stops the threads, frees the memory, and prints one line per measured round: the
/// tag, MB and the round's two times in seconds. A fresh process image, so that its size is
/// exactly what it allocated (a forked child would also hold the benchmark's heap).
int launch_host(const std::vector<std::string>& args) {
  if (args.size() != 6 || args[0] != "--launch-host" || args[2] != "--runs" || args[4] != "--warmup") {
    throw std::invalid_argument("usage: bench_policy --launch-host MB --runs N --warmup W");
  }
  const std::size_t megabytes = whole_number(args[1], "--launch-host");
  const auto rounds = static_cast<int>(whole_number(args[3], "--runs"));
  const auto warmups = static_cast<int>(whole_number(args[5], "--warmup"));
  require(megabytes >= 1 && rounds >= 1, "MB and --runs must be at least 1");
  // The result goes to the parent through a descriptor no child inherits; whatever the host's
  // children write to standard output (the relayed command, bash) goes to standard error, and a
  // process the library leaves behind cannot hold the parent's pipe open.
  const int result_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (result_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    throw std::system_error(errno, std::generic_category(), "cannot set its result descriptor apart");
  }
  std::vector<std::vector<double>> times;
  {
    const std::size_t bytes = megabytes << 20;
    const std::unique_ptr<char[]> memory(new (std::nothrow) char[bytes]);
    require(memory != nullptr, "cannot allocate " + std::to_string(megabytes) + " MB");
    std::memset(memory.get(), 0xa5, bytes);
    keep(memory.get());
    // A rest before the busy threads start: the scheduler still counts the load of the CPU that
    // touched the memory (about half a second for 2048 MB), which steers where the threads go,
    // and 2048 MB hosts drew the slow placement of their main thread twice as often as 8 MB
    // ones (6 of 16 against 3 of 16; 4 and 3 of 16 after 200 ms).
    std::this_thread::sleep_for(LAUNCH_SETTLE);
    const dsh::test::TempDir scratch;
    const BaseFence base(std::filesystem::canonical(scratch.path()));
    const BashTrue plain("the posix_spawn baseline");
    {
      const BusyThreads busy(BUSY_THREADS);
      require(self_status("Threads:").value_or(0) >= 1 + BUSY_THREADS, "the busy threads did not start");
      require(self_status("VmRSS:").value_or(0) * 1024 >= bytes,
              "fewer than " + std::to_string(megabytes) + " MB are resident");
      const std::vector<Step> steps{{"the fenced call", [&] { return base.call(); }},
                                    {"posix_spawn + waitpid", [&] { return spawn_and_wait(plain.argv()) == 0; }}};
      static_cast<void>(timed_rounds(warmups, steps));
      times = timed_rounds(rounds, steps);
    }
  }
  std::string lines;
  for (std::size_t round = 0; round < times[0].size(); ++round) {
    std::array<char, 128> line{};
    const int length = std::snprintf(line.data(), line.size(), "%s %zu %.9f %.9f\n", LAUNCH_TAG.data(), megabytes,
                                     times[0][round], times[1][round]);
    require(length > 0 && static_cast<std::size_t>(length) < line.size(), "cannot format its result");
    lines.append(line.data(), static_cast<std::size_t>(length));
  }
  for (std::size_t written = 0; written < lines.size();) {
    const ssize_t wrote = ::write(result_fd, lines.data() + written, lines.size() - written);
    if (wrote < 0 && errno == EINTR) {
      continue;
    }
    if (wrote <= 0) {
      throw std::system_error(errno, std::generic_category(), "cannot write its result");
    }
    written += static_cast<std::size_t>(wrote);
  }
  ::close(result_fd);
  return 0;
}

} // namespace

/// `launch_host`, its failures named after the host (a MachineryError: the parent reports its exit).
int launch_host_main(const std::vector<std::string>& args) try {
  return launch_host(args);
} catch (const std::exception& error) {
  throw MachineryError("launch host" + (args.size() > 1 ? " of " + args[1] + " MB" : std::string()) + ": " +
                       error.what());
}

namespace {

/// Runs a Launch host of `megabytes` in a fresh process for `rounds` rounds and adds what it
/// reports to `pooled`; a host that fails, or prints anything but its `rounds` lines, fails the
/// benchmark.
void run_launch_host(const std::string& self, LaunchRounds& pooled, int rounds, int warmups) {
  const std::size_t megabytes = pooled.megabytes;
  const std::string what = "launch: the host process of " + std::to_string(megabytes) + " MB";
  const ProcessResult process = run_process({self, "--launch-host", std::to_string(megabytes), "--runs",
                                             std::to_string(rounds), "--warmup", std::to_string(warmups)},
                                            false);
  require(process.exit_code == 0,
          what +
              (process.exit_code < 0 ? " was killed (it did not exit)"
                                     : " failed (exit " + std::to_string(process.exit_code) + ")") +
              "; its own message, if any, is above");
  const auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  std::istringstream in(process.out);
  std::string line;
  int got = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string tag;
    std::size_t reported = 0;
    double fenced = 0;
    double spawn = 0;
    fields >> tag >> reported >> fenced >> spawn;
    require(!fields.fail() && (fields >> std::ws).eof() && tag == LAUNCH_TAG && reported == megabytes &&
                positive(fenced) && positive(spawn),
            what + " printed a line that is not a measurement: \"" += line + "\"");
    pooled.fenced_s.push_back(fenced);
    pooled.spawn_s.push_back(spawn);
    ++got;
  }
  require(got == rounds && !process.out.empty() && process.out.back() == '\n',
          what + " printed " + std::to_string(got) + " measurements, not " + std::to_string(rounds) + ": \"" +
              process.out + "\"");
}

} // namespace

/// The fenced call against posix_spawn from hosts of growing memory, each with busy threads,
/// the largest host's fenced call against the smallest's; and dsh-sandboxed-bash against bash.
void launch(const Settings& settings, Table& table, const std::filesystem::path& directory) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::size_t> sizes =
      settings.smoke ? std::vector<std::size_t>{8, 16} : std::vector<std::size_t>{8, 512, 2048};
  const int runs = settings.smoke ? 3 : std::max(21, settings.runs);
  const int warmups = settings.smoke ? 1 : 3;
  // Several host processes of each size, the sizes in turn: where the scheduler places a
  // host's main thread among its busy threads holds for that process's life and moves every
  // round of it alike (2.3 against 4.1 ms here), so one process per size compares placements.
  const int passes = settings.smoke ? 1 : LAUNCH_PASSES;
  std::vector<LaunchRounds> hosts;
  hosts.reserve(sizes.size());
  for (const std::size_t megabytes : sizes) {
    hosts.push_back({megabytes, {}, {}});
  }
  for (int pass = 0; pass < passes; ++pass) {
    for (LaunchRounds& pooled : hosts) {
      run_launch_host(self, pooled, runs, warmups);
    }
  }
  const auto host = [](std::size_t megabytes) {
    return "host of " + std::to_string(megabytes) + " MB + " + std::to_string(BUSY_THREADS) + " busy threads";
  };
  const std::string fenced = "fenced call of bash -c true (resolve + prepare + run, isolation off), ";
  std::string rounds_of = " (" + std::to_string(passes);
  rounds_of += passes == 1 ? " host process × " : " host processes × ";
  rounds_of += std::to_string(runs) + " rounds)";
  for (const LaunchRounds& result : hosts) {
    std::vector<double> ratios;
    ratios.reserve(result.fenced_s.size());
    for (std::size_t round = 0; round < result.fenced_s.size(); ++round) {
      ratios.push_back(result.fenced_s[round] / result.spawn_s[round]);
    }
    std::string figure = fenced + host(result.megabytes);
    figure += rounds_of;
    table.paired("Launch", figure, median(result.fenced_s) * 1e9,
                 "posix_spawn + waitpid of bash -c true, same host (ratio: median of the rounds' ratios)",
                 median(result.spawn_s) * 1e9, median(ratios), 1.3);
  }
  table.ratio("Launch", fenced + host(hosts.back().megabytes) + rounds_of, median(hosts.back().fenced_s) * 1e9,
              "the same call, " + host(hosts.front().megabytes), median(hosts.front().fenced_s) * 1e9, 1.3);

#ifdef DSH_BENCH_SANDBOXED_BASH
  const BashTrue plain("dsh-sandboxed-bash");
  const BaseFence base(directory / "launch");
  const std::string tool = DSH_BENCH_SANDBOXED_BASH;
  const std::vector<double> tool_medians = alternate(
      runs, {{"dsh-sandboxed-bash: bash -c true",
              [&] {
                return run_process({plain.path(), "-c", "true"}, false).exit_code == 0;
              }},
             {"dsh-sandboxed-bash", [&] {
                return run_process({tool, "--log", base.log_path.string(), "--", "true"}, false).exit_code == 0;
              }}});
  const double bash_s = tool_medians[0];
  const double tool_s = tool_medians[1];
  table.ratio("Launch", "dsh-sandboxed-bash --log L -- true (a process, wall time)", tool_s * 1e9, "bash -c true",
              bash_s * 1e9, 1.6);
#else
  static_cast<void>(directory);
  table.add({"Launch", "dsh-sandboxed-bash --log L -- true", "skipped (not built)", "bash -c true", "—", "—", "≤ 1.60",
             "SKIP"});
#endif
}

} // namespace bench_policy
