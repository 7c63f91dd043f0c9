// Benchmark (not a test): how fast SessionLog::open validates a large realistic DSH log, and
// its peak memory, against parsing the same file line by line with nlohmann::json::parse.
//
//   bench_session_log_open [--megabytes N] [--runs R] [--log PATH] [--zstd ROWS]
//
// Builds a log of at least N MB (default 128) of DSH events, mostly assistant/chunk and
// tool/result with a few hundred sandbox/mode switches and some packed chunk rows, unless
// --log names an existing one (a --log that does not exist yet is built there and kept).
// With --zstd, a copy in DSH's compressed layout (a header frame, then frames of ROWS rows, as
// DSH flushes batches) is opened too, beside the plain file.
// Each measurement runs in a fresh child process (this program re-executed), so that its peak
// resident set (getrusage's ru_maxrss, from wait4) is its own; the file is read once first so
// that every method starts from a warm page cache.
#include <dsh/detail/slog/zstd_frames.hpp>
#include <dsh/session_log.hpp>

#include "realistic_log.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

/// A SAX handler that accepts everything: nlohmann's parser cost without building a tree.
struct NullSax : nlohmann::json::json_sax_t {
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

/// Writes a realistic DSH log of at least `megabytes` MB to `path` (the generator bench_policy uses too).
void build_log(const std::string& path, std::size_t megabytes) {
  dsh::bench::write_log(path, {.min_bytes = std::uint64_t{megabytes} << 20, .rows = 0, .realistic = true});
}

std::uint64_t file_size(const std::string& path) { return std::filesystem::file_size(path); }

/// Writes the plain log `plain` to `path` as DSH's compressed layout: the header line in a frame
/// of its own, then one frame per `batch` rows.
void compress_log(const std::string& plain, const std::string& path, std::size_t batch) {
  std::ifstream in(plain, std::ios::binary);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::vector<std::string> lines;
  const auto flush = [&] {
    if (lines.empty()) {
      return;
    }
    const std::vector<std::string_view> views(lines.begin(), lines.end());
    const auto frame = dsh::detail::encode_zstd_frame(views);
    if (frame.status != dsh::detail::ZstdFrameStatus::complete) {
      throw std::runtime_error("cannot compress: " + frame.message);
    }
    out.write(frame.bytes.data(), static_cast<std::streamsize>(frame.bytes.size()));
    lines.clear();
  };
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (header || lines.size() == batch) {
      flush();
      header = false;
    }
  }
  flush();
}

/// The measurements, run in a child process: prints the seconds the operation took.
int measure(const std::string& method, const std::string& path) {
  std::size_t rows = 0;
  const auto start = Clock::now();
  if (method == "open") {
    const auto log = dsh::SessionLog::open(path);
    rows = log.events().size();
  } else if (method == "nlohmann-parse") {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      const auto row = nlohmann::json::parse(line);
      rows += row.is_object() ? 1 : 0;
    }
    --rows; // the header
  } else if (method == "nlohmann-sax") {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    NullSax sax;
    while (std::getline(in, line)) {
      rows += nlohmann::json::sax_parse(line, &sax) ? 1 : 0;
    }
    --rows;
  } else if (method == "read-lines") {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      ++rows;
    }
    --rows;
  } else if (method == "open+iterate") {
    const auto log = dsh::SessionLog::open(path);
    for (const nlohmann::json& row : log.events()) {
      rows += row.is_object() ? 1 : 0;
    }
  } else {
    return 2;
  }
  const std::chrono::duration<double> seconds = Clock::now() - start;
  std::printf("%.6f %zu\n", seconds.count(), rows);
  return 0;
}

struct Result {
  double seconds = 0;
  long max_rss_kb = 0;
  std::size_t rows = 0;
};

/// Runs `self --measure method path` and returns its time and peak resident set.
Result run_child(const std::string& self, const std::string& method, const std::string& path) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) {
    throw std::runtime_error("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> args = {self, "--measure", method, path};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("posix_spawn failed");
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string output;
  char buffer[256];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    output.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("measurement " + method + " failed");
  }
  Result result;
  result.max_rss_kb = usage.ru_maxrss;
  std::sscanf(output.c_str(), "%lf %zu", &result.seconds, &result.rows);
  return result;
}

int run(const std::vector<std::string>& args) {
  if (args.size() == 3 && args[0] == "--measure") {
    return measure(args[1], args[2]);
  }
  std::size_t megabytes = 128;
  int runs = 3;
  std::size_t zstd_batch = 0;
  std::string path;
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--megabytes") {
      megabytes = std::stoul(args[i + 1]);
    } else if (args[i] == "--runs") {
      runs = std::stoi(args[i + 1]);
    } else if (args[i] == "--log") {
      path = args[i + 1];
    } else if (args[i] == "--zstd") {
      zstd_batch = std::stoul(args[i + 1]);
    }
  }
  std::string directory;
  if (!path.empty() && !std::filesystem::exists(path)) {
    build_log(path, megabytes); // kept for later runs
  } else if (path.empty()) {
    directory = (std::filesystem::temp_directory_path() / "dsh-bench-XXXXXX").string();
    if (::mkdtemp(directory.data()) == nullptr) {
      return 1;
    }
    path = directory + "/bench.jsonl";
    build_log(path, megabytes);
  }
  const double mb = static_cast<double>(file_size(path)) / (1 << 20);
  std::printf("log: %s, %.1f MB\n", path.c_str(), mb);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  static_cast<void>(run_child(self, "read-lines", path)); // warm the page cache
  std::string compressed;
  if (zstd_batch > 0) {
    compressed = path + ".zstd";
    compress_log(path, compressed, zstd_batch);
    std::printf("compressed copy: %s, %.1f MB, frames of %zu rows; MB/s below count the uncompressed size\n",
                compressed.c_str(), static_cast<double>(file_size(compressed)) / (1 << 20), zstd_batch);
    static_cast<void>(run_child(self, "open", compressed)); // warm the page cache
  }
  std::printf("%-18s %10s %10s %12s %10s %8s\n", "method", "best s", "MB/s", "peak RSS MB", "RSS/file", "rows");
  std::vector<std::string> methods = {"read-lines", "nlohmann-parse", "nlohmann-sax", "open", "open+iterate"};
  if (!compressed.empty()) {
    methods.insert(methods.end(), {"zstd open", "zstd open+iterate"});
  }
  for (const std::string& label : methods) {
    const bool on_compressed = label.starts_with("zstd ");
    const std::string method = on_compressed ? label.substr(5) : label;
    Result best;
    for (int run = 0; run < runs; ++run) {
      const Result result = run_child(self, method, on_compressed ? compressed : path);
      if (run == 0 || result.seconds < best.seconds) {
        best.seconds = result.seconds;
        best.rows = result.rows;
      }
      best.max_rss_kb = std::max(best.max_rss_kb, result.max_rss_kb);
    }
    const double rss_mb = static_cast<double>(best.max_rss_kb) / 1024;
    std::printf("%-18s %10.3f %10.1f %12.1f %10.3f %8zu\n", label.c_str(), best.seconds, mb / best.seconds, rss_mb,
                rss_mb / mb, best.rows);
  }
  if (!directory.empty()) {
    std::filesystem::remove_all(directory);
  } else if (!compressed.empty()) {
    std::filesystem::remove(compressed);
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_session_log_open: %s\n", error.what());
    return 1;
  }
}
