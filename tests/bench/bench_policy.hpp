// The shared support of bench_policy, whose groups are the files bench_policy_<group>.cpp: the
// settings, the timing (batches of calls, CPU time, allocations counted by the replacement
// operator new of bench_policy.cpp), the table, the session fixtures, child processes, and the
// fenced call that the Fence and Launch groups both measure.
#pragma once

#include <dsh/landlock.hpp>
#include <dsh/session_log.hpp>

#include "support/temp_dir.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ; // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace bench_policy {

/// The heap allocations of the calling thread so far (counted by bench_policy.cpp's operator new).
inline thread_local std::uint64_t allocation_count = 0;

using Clock = std::chrono::steady_clock;

/// Keeps the compiler from optimizing away the computation of `*value`.
template <class T> void keep(const T* value) noexcept { asm volatile("" : : "g"(value) : "memory"); }

/// A failure of the benchmark machinery (not a missed target).
class MachineryError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

inline void require(bool condition, const std::string& what) {
  if (!condition) {
    throw MachineryError(what);
  }
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

struct Settings {
  bool smoke = false;
  int runs = 15;                 ///< runs of each in-process figure
  int resume_runs = 5;           ///< runs of each resume measurement (child processes)
  int compile_runs = 5;          ///< compilations of each translation unit
  std::size_t large = 1'000'000; ///< events of the large session (Scale, Pure fold)
  std::size_t small = 1'000;     ///< events of the small session
  std::uint64_t megabytes = 100; ///< size of the Resume log
  double batch_ns = 5e6;         ///< how long one timed batch of calls should last
  std::string log;               ///< an existing Resume log to reuse, or where to keep the generated one
  std::vector<std::string> only; ///< groups to run; empty: all
  std::string output;            ///< also write the table here

  [[nodiscard]] bool wants(std::string_view group) const {
    return only.empty() || std::find(only.begin(), only.end(), group) != only.end();
  }
};

/// The settings that `args` (the command line after the program name) give; throws
/// std::invalid_argument for a wrong one.
Settings parse_settings(const std::vector<std::string>& args);

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

/// One timed batch: nanoseconds and heap allocations per operation.
struct Sample {
  double ns = 0;
  double allocations = 0;
};

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

inline Sample median(const std::vector<Sample>& samples) {
  std::vector<double> ns;
  std::vector<double> allocations;
  for (const Sample& sample : samples) {
    ns.push_back(sample.ns);
    allocations.push_back(sample.allocations);
  }
  return {median(ns), median(allocations)};
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Returns the CPU time (user and system) this thread has used, in nanoseconds. Per-call
/// figures are timed with it, so that other processes on a shared machine preempting this
/// one do not count; system calls (realpath's readlink) do. On an idle machine it is the wall time.
inline double thread_cpu_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
}

/// Runs `batch(n)` (n operations) once and returns its cost per operation: what the batch
/// measured itself when it returns a Sample, else its thread CPU time and allocations.
template <class Batch> Sample time_batch(Batch& batch, std::size_t n) {
  const std::uint64_t allocations_before = allocation_count;
  const double start = thread_cpu_ns();
  const std::optional<Sample> own = batch(n);
  const double ns = thread_cpu_ns() - start;
  if (own) {
    return *own;
  }
  const auto allocations = static_cast<double>(allocation_count - allocations_before);
  return {ns / static_cast<double>(n), allocations / static_cast<double>(n)};
}

/// Returns how many operations make one batch last about `target_ns`.
template <class Batch> std::size_t calibrate(Batch& batch, double target_ns) {
  std::size_t n = 1;
  for (;;) {
    const Sample sample = time_batch(batch, n);
    const double total = sample.ns * static_cast<double>(n);
    if (total >= target_ns / 4 || n >= (std::size_t{1} << 30)) {
      return std::max<std::size_t>(1, static_cast<std::size_t>(target_ns / std::max(sample.ns, 0.1)));
    }
    n *= 8;
  }
}

struct Comparison {
  Sample figure;
  Sample baseline;
};

/// Times `figure` and `baseline` (each `std::optional<Sample>(std::size_t n)`, doing n
/// operations) in alternating batches and returns the median cost of each.
template <class Figure, class Baseline> Comparison compare(const Settings& settings, Figure figure, Baseline baseline) {
  const std::size_t figure_n = settings.smoke ? 1 : calibrate(figure, settings.batch_ns);
  const std::size_t baseline_n = settings.smoke ? 1 : calibrate(baseline, settings.batch_ns);
  std::vector<Sample> figures;
  std::vector<Sample> baselines;
  for (int run = 0; run < settings.runs; ++run) {
    if (run % 2 == 0) {
      figures.push_back(time_batch(figure, figure_n));
      baselines.push_back(time_batch(baseline, baseline_n));
    } else {
      baselines.push_back(time_batch(baseline, baseline_n));
      figures.push_back(time_batch(figure, figure_n));
    }
  }
  return {median(figures), median(baselines)};
}

/// Makes a batch function out of a function of one operation.
template <class Operation> auto repeated(Operation operation) {
  return [operation](std::size_t n) mutable -> std::optional<Sample> {
    for (std::size_t i = 0; i < n; ++i) {
      operation();
    }
    return std::nullopt;
  };
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

struct Row {
  std::string group;
  std::string figure;
  std::string value;
  std::string baseline;
  std::string baseline_value;
  std::string ratio;
  std::string target;
  std::string verdict;
};

inline std::string format(const char* pattern, double value) {
  std::array<char, 64> buffer{};
  std::snprintf(buffer.data(), buffer.size(), pattern, value);
  return buffer.data();
}

inline std::string duration(double ns) {
  if (ns < 1e3) {
    return format("%.0f ns", ns);
  }
  if (ns < 1e6) {
    return format("%.2f µs", ns / 1e3);
  }
  if (ns < 1e9) {
    return format("%.1f ms", ns / 1e6);
  }
  return format("%.2f s", ns / 1e9);
}

/// Returns `n` with thousands separators: 1,000,000.
inline std::string count(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string text;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      text += ',';
    }
    text += digits[i];
  }
  return text;
}

inline std::string verdict(bool pass) { return pass ? "PASS" : "MISS"; }

class Table {
public:
  void add(Row row) { rows_.push_back(std::move(row)); }

  /// Adds a timed figure against its baseline; `limit` is the largest passing ratio (figure ÷ baseline).
  void ratio(const std::string& group, const std::string& figure, double figure_ns, const std::string& baseline,
             double baseline_ns, std::optional<double> limit) {
    paired(group, figure, figure_ns, baseline, baseline_ns, figure_ns / baseline_ns, limit);
  }

  /// Adds a timed figure against its baseline whose ratio was taken round by round: `value` is
  /// the median of the per-round ratios (figure ÷ baseline), not the ratio of the two medians.
  void paired(const std::string& group, const std::string& figure, double figure_ns, const std::string& baseline,
              double baseline_ns, double value, std::optional<double> limit) {
    add({group, figure, duration(figure_ns), baseline, duration(baseline_ns), format("%.3f", value),
         limit ? format("≤ %.2f", *limit) : "—", limit ? verdict(value <= *limit) : "info"});
  }

  [[nodiscard]] std::string render() const {
    std::string text = "| group | figure | value | baseline | baseline value | ratio | target | result |\n"
                       "|---|---|---:|---|---:|---:|---|---|\n";
    for (const Row& row : rows_) {
      for (const std::string* cell : {&row.group, &row.figure, &row.value, &row.baseline, &row.baseline_value,
                                      &row.ratio, &row.target, &row.verdict}) {
        text += "| " + *cell + " ";
      }
      text += "|\n";
    }
    return text;
  }

  [[nodiscard]] std::size_t misses() const {
    return static_cast<std::size_t>(
        std::count_if(rows_.begin(), rows_.end(), [](const Row& row) { return row.verdict == "MISS"; }));
  }

private:
  std::vector<Row> rows_;
};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// An assistant/chunk event as DSH stores one streamed text delta.
inline nlohmann::json chunk_event(std::size_t seq) {
  return {
      {"type", "assistant/chunk"},
      {"seq", seq},
      {"time", 1764480000000 + static_cast<std::int64_t>(seq)},
      {"data", {{"turn", seq / 500}, {"step", 0}, {"chunk", {{"type", "text-delta"}, {"index", 0}, {"text", "ok "}}}}}};
}

/// `count` never-switched events; when `switch_from_end` is set, the event that many places
/// from the end is a sandbox/mode switch to workspace-write instead.
inline std::vector<nlohmann::json> events(std::size_t count, std::optional<std::size_t> switch_from_end = {}) {
  std::vector<nlohmann::json> result;
  result.reserve(count);
  for (std::size_t seq = 0; seq < count; ++seq) {
    result.push_back(chunk_event(seq));
  }
  if (switch_from_end) {
    nlohmann::json& event = result[count - *switch_from_end];
    event["type"] = "sandbox/mode";
    event["data"] = {{"mode", "workspace-write"}};
  }
  return result;
}

/// An owner in workspace-write with all three families enforced (and escalatable).
struct EnforcingOwner {
  dsh::PolicyOwner owner{[] {
    dsh::PolicyConfig config;
    config.mode = dsh::SandboxMode::workspace_write;
    config.workspace_root = "/";
    return config;
  }()};
  std::vector<dsh::Disposer> registrations = [this] {
    std::vector<dsh::Disposer> all;
    for (dsh::Family family : dsh::FAMILIES) {
      all.push_back(owner.registerEnforcedFamily(family));
      all.push_back(owner.registerEscalatableFamily(family));
    }
    return all;
  }();
};

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

struct ProcessResult {
  int exit_code = -1; ///< -1: did not exit normally
  std::string out;
  double wall_s = 0; ///< from spawn to exit
  double cpu_s = 0;  ///< user and system CPU time of the process
};

/// Runs `argv` (argv[0] looked up in PATH when `search`), captures its standard output, and
/// measures its wall time from spawn to exit and its CPU time.
inline ProcessResult run_process(const std::vector<std::string>& argv, bool search) {
  std::array<int, 2> pipe_fds{};
  if (::pipe(pipe_fds.data()) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::vector<std::string> copies = argv;
  std::vector<char*> pointers;
  pointers.reserve(copies.size() + 1);
  for (std::string& arg : copies) {
    pointers.push_back(arg.data());
  }
  pointers.push_back(nullptr);
  pid_t pid = 0;
  const auto start = Clock::now();
  const int spawned = search ? ::posix_spawnp(&pid, pointers[0], &actions, nullptr, pointers.data(), environ)
                             : ::posix_spawn(&pid, pointers[0], &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw std::system_error(spawned, std::generic_category(), "cannot start " + argv[0]);
  }
  ProcessResult result;
  std::array<char, 4096> buffer{};
  for (ssize_t got = 0; (got = ::read(pipe_fds[0], buffer.data(), buffer.size())) != 0;) {
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      break;
    }
    result.out.append(buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  result.wall_s = seconds_since(start);
  const auto seconds = [](const timeval& time) {
    return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_usec) / 1e6;
  };
  result.cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Returns the number of the line of /proc/self/status that starts with `key` (such as
/// "VmHWM:", in kB, or "Threads:"), or nullopt when there is none.
inline std::optional<std::uint64_t> self_status(std::string_view key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(key)) {
      return std::stoull(line.substr(key.size()));
    }
  }
  return std::nullopt;
}

/// Returns the path of `name` in PATH, or nullopt.
inline std::optional<std::string> find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream directories(path == nullptr ? "" : path);
  for (std::string directory; std::getline(directories, directory, ':');) {
    const std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The fenced call (the Fence and Launch groups)
// ---------------------------------------------------------------------------------------------

/// Starts `argv` (argv[0] a path) with posix_spawn, its stdio inherited, and waits for it;
/// returns its exit status (-1 when it did not exit).
inline int spawn_and_wait(const std::vector<char*>& argv) {
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (spawned != 0) {
    throw std::system_error(spawned, std::generic_category(), std::string("cannot start ") + argv[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// One measured step of `alternate`: its name for errors, and the call (returning whether
/// it did what it should).
struct Step {
  std::string name;
  std::function<bool()> call;
};

/// `runs` rounds of wall-time measurements, each round measuring every step once in the order
/// given: for each step (in that order), its time in every round, in seconds.
inline std::vector<std::vector<double>> timed_rounds(int runs, const std::vector<Step>& steps) {
  std::vector<std::vector<double>> times(steps.size());
  for (int run = 0; run < runs; ++run) {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto start = Clock::now();
      require(steps[i].call(), steps[i].name + " failed");
      times[i].push_back(seconds_since(start));
    }
  }
  return times;
}

/// Medians of `runs` rounds of wall-time measurements, each round measuring every step once
/// in the order given, in seconds (one per step, in that order).
inline std::vector<double> alternate(int runs, const std::vector<Step>& steps) {
  std::vector<double> medians;
  for (std::vector<double>& each : timed_rounds(runs, steps)) {
    medians.push_back(median(std::move(each)));
  }
  return medians;
}

/// Creates `workspace` (and its parents) and a session log at `path` whose cwd it is; opens the log.
inline dsh::SessionLog workspace_log(const std::filesystem::path& path, const std::filesystem::path& workspace,
                                     const std::string& id) {
  std::filesystem::create_directories(workspace);
  static_cast<void>(dsh::SessionLog::create(path, dsh::SessionHeader{id, workspace.string(), 0}));
  return dsh::SessionLog::open(path);
}

/// The fenced call of the Fence group's base row, which the Launch hosts make too: an owner in
/// workspace-write enforcing bash, a session log whose cwd is a workspace in `directory`, and
/// the fence options that protect that log and cwd, the namespace layer off.
struct BaseFence {
  explicit BaseFence(const std::filesystem::path& directory)
      : workspace(directory / "fence-workspace"), log_path(directory / "fence-session.jsonl"),
        log(workspace_log(log_path, workspace, "fence")) {
    options.session_log = log_path;
    options.session_cwd = workspace;
    options.isolation = dsh::Isolation::off; // the base fence's row
  }

  /// One fenced `bash -c true` in the workspace: `resolve` of `session`, `PreparedFence::prepare`
  /// with `fence_options`, `FencedCommand::run`. Returns whether it was resolved in
  /// workspace-write and exited with 0.
  [[nodiscard]] bool call(const dsh::SessionLog& session, const dsh::FenceOptions& fence_options) const {
    const dsh::ResolvedPolicy policy = owner.resolve(session);
    const dsh::PreparedFence prepared = dsh::PreparedFence::prepare(policy, fence_options);
    dsh::FencedCommand fenced_command({"bash", "-c", "true"});
    fenced_command.in_directory(policy.workspace_root);
    return policy.mode == dsh::SandboxMode::workspace_write && fenced_command.run(prepared) == 0;
  }
  /// The base row's call: this fixture's log and options.
  [[nodiscard]] bool call() const { return call(log, options); }

  std::filesystem::path workspace;
  std::filesystem::path log_path;
  dsh::SessionLog log;
  dsh::PolicyOwner owner{[] {
    dsh::PolicyConfig config;
    config.mode = dsh::SandboxMode::workspace_write;
    return config;
  }()};
  dsh::Disposer enforced = owner.registerEnforcedFamily(dsh::Family::bash);
  dsh::FenceOptions options;
};

/// The argv of `bash -c true`, bash found in PATH (its strings owned here).
class BashTrue {
public:
  /// `who` names the measurement in the error when bash is not found.
  explicit BashTrue(const std::string& who) {
    const std::optional<std::string> found = find_in_path("bash");
    require(found.has_value(), who + ": bash not found in PATH");
    path_ = *found;
    argv_ = {path_.data(), dash_c_.data(), command_.data(), nullptr};
  }
  BashTrue(const BashTrue&) = delete;
  BashTrue& operator=(const BashTrue&) = delete;
  ~BashTrue() = default;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const std::vector<char*>& argv() const noexcept { return argv_; }

private:
  std::string path_;
  std::string dash_c_ = "-c";
  std::string command_ = "true";
  std::vector<char*> argv_;
};

// ---------------------------------------------------------------------------------------------
// The groups, in bench_policy_<group>.cpp
// ---------------------------------------------------------------------------------------------

/// fence: a fenced `bash -c true` against a plain one, in this process.
void fence(const Settings& settings, Table& table, const std::filesystem::path& directory);
/// launch: the fenced call from hosts of growing memory, and dsh-sandboxed-bash against bash.
void launch(const Settings& settings, Table& table, const std::filesystem::path& directory);
/// The Launch group's host process (`--launch-host MB --runs N --warmup W`).
int launch_host_main(const std::vector<std::string>& args);
/// scale: resolve and context on a large and a small Session.
void scale_session(const Settings& settings, Table& table, const std::string& cwd);
/// scale: the same on a large and a small SessionLog, written in `directory`.
void scale_log(const Settings& settings, Table& table, const std::filesystem::path& directory, const std::string& cwd);
/// percall: resolve against realpath(3), context against resolve.
void per_call(const Settings& settings, Table& table, const std::string& cwd);
/// fold: effective_mode on a large and a small event list.
void pure_fold(const Settings& settings, Table& table);
/// registry: a registration and its disposal against a mutex-guarded counter.
void registry(const Settings& settings, Table& table);
/// resume: SessionLog::open against the other loaders, each in a child process.
void resume(const Settings& settings, Table& table, const std::filesystem::path& directory);
/// The Resume group's child process (`--child METHOD PATH`).
int child_main(const std::string& method, const std::string& path);
/// compile: the compile time of a file using the library against one using its dependencies.
void compile_time(const Settings& settings, Table& table, const std::filesystem::path& directory);

} // namespace bench_policy
