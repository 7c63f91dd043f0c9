// bench_policy's Resume group: SessionLog::open of a large log against Node.js, nlohmann::json
// and simdjson loading the same file, each in a child process of its own (this program started
// again as `--child METHOD PATH`), and the peak resident set of the process that opens it.
#include "bench_policy.hpp"
#include "realistic_log.hpp"

#if DSH_BENCH_HAVE_SIMDJSON
#include <simdjson.h>
#else
#define DSH_BENCH_SIMDJSON_VERSION ""
#endif

namespace bench_policy {

namespace {

/// Returns the peak resident set of this process (VmHWM), in bytes.
std::uint64_t peak_resident_bytes() { return self_status("VmHWM:").value_or(0) * 1024; }

/// What a resume child reports.
struct ResumeResult {
  double seconds = 0;
  std::size_t rows = 0;
  std::uint64_t peak_bytes = 0;
  double wall_s = 0;
};

} // namespace

/// The child side (`--child METHOD PATH`): loads the log with METHOD, prints "seconds rows peak".
/// A fresh process image (not a fork) so that the peak resident set is the loader's own.
int child_main(const std::string& method, const std::string& path) {
  std::size_t rows = 0;
  const auto start = Clock::now();
  if (method == "open") {
    const dsh::SessionLog log = dsh::SessionLog::open(path);
    rows = log.events().size();
  } else if (method == "nlohmann") {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    std::getline(in, line); // the header
    for (; std::getline(in, line);) {
      const nlohmann::json row = nlohmann::json::parse(line);
      rows += row.is_object() ? 1 : 0;
    }
  } else if (method == "simdjson") {
#if DSH_BENCH_HAVE_SIMDJSON
    // The file read into a padded buffer, then every document of it parsed and validated.
    simdjson::padded_string text;
    if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS) {
      return 3;
    }
    simdjson::dom::parser parser;
    simdjson::dom::document_stream stream;
    if (parser.parse_many(text).get(stream) != simdjson::SUCCESS) {
      return 3;
    }
    for (auto document : stream) {
      simdjson::dom::element element;
      if (document.get(element) != simdjson::SUCCESS) {
        return 3;
      }
      rows += element.is_object() ? 1 : 0;
    }
    if (stream.truncated_bytes() != 0 || rows == 0) {
      return 3;
    }
    --rows; // the header
#else
    return 2;
#endif
  } else {
    return 2;
  }
  const double seconds = seconds_since(start);
  std::printf("%.6f %zu %" PRIu64 "\n", seconds, rows, peak_resident_bytes());
  return 0;
}

namespace {

using bench_policy::median;

ResumeResult parse_resume(const ProcessResult& process, const std::string& what) {
  require(process.exit_code == 0, what + " failed (exit " + std::to_string(process.exit_code) + ")");
  ResumeResult result;
  std::istringstream in(process.out);
  in >> result.seconds >> result.rows;
  std::uint64_t peak = 0;
  if (in >> peak) {
    result.peak_bytes = peak;
  }
  require(!in.bad() && result.seconds > 0, what + " printed no measurement: " + process.out);
  result.wall_s = process.wall_s;
  return result;
}

/// DSH's loader loop: read the file, JSON.parse each line. Times itself (startup excluded).
constexpr std::string_view NODE_LOADER = R"(const fs = require('fs');
const start = process.hrtime.bigint();
const lines = fs.readFileSync(process.argv[2], 'utf8').split('\n');
let rows = 0;
for (let i = 1; i < lines.length; i++) {
  if (lines[i].length === 0) continue;
  const event = JSON.parse(lines[i]);
  if (typeof event === 'object') rows++;
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(seconds.toFixed(6) + ' ' + rows);
)";

ResumeResult median(const std::vector<ResumeResult>& results) {
  std::vector<double> seconds;
  std::vector<double> walls;
  std::vector<double> peaks;
  for (const ResumeResult& result : results) {
    seconds.push_back(result.seconds);
    walls.push_back(result.wall_s);
    peaks.push_back(static_cast<double>(result.peak_bytes));
  }
  return {median(seconds), results.front().rows, static_cast<std::uint64_t>(median(peaks)), median(walls)};
}

std::string megabytes(double bytes) { return format("%.1f MB", bytes / (1 << 20)); }

std::string throughput(double bytes, double seconds) { return format("%.0f MB/s", bytes / (1 << 20) / seconds); }

double best(const std::vector<ResumeResult>& results) {
  double fastest = results.front().seconds;
  for (const ResumeResult& result : results) {
    fastest = std::min(fastest, result.seconds);
  }
  return fastest;
}

/// Returns the log at `path`, generated with `shape` first unless it exists.
std::string resume_log(const std::string& path, bool realistic, const Settings& settings) {
  if (!std::filesystem::exists(path)) {
    dsh::bench::write_log(
        path, {.min_bytes = settings.megabytes << 20, .rows = 0, .realistic = realistic, .cwd = "/srv/bench"});
  }
  return path;
}

/// SessionLog::open against simdjson's DOM parse_many on `path`, best of the runs, both with
/// the file read (from the page cache) included. Returns the open children's results.
std::vector<ResumeResult> open_against_simdjson(const Settings& settings, Table& table, const std::string& path,
                                                const std::string& shape) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const double size = static_cast<double>(std::filesystem::file_size(path));
  static_cast<void>(run_process({self, "--child", "open", path}, false)); // warm the page cache
  std::vector<ResumeResult> opens;
  std::vector<ResumeResult> simdjsons;
  for (int run = 0; run < settings.resume_runs; ++run) {
    opens.push_back(parse_resume(run_process({self, "--child", "open", path}, false), "SessionLog::open child"));
#if DSH_BENCH_HAVE_SIMDJSON
    simdjsons.push_back(
        parse_resume(run_process({self, "--child", "simdjson", path}, false), "simdjson parse_many child"));
#endif
  }
  const std::string figure = "SessionLog::open, " + megabytes(size) + " " + shape + " (" + count(opens.front().rows) +
                             " rows), file read included, best of " + std::to_string(settings.resume_runs);
  const std::string baseline = "simdjson " DSH_BENCH_SIMDJSON_VERSION " DOM parse_many (padded_string::load, "
                               "every document), file read included";
  if (simdjsons.empty()) {
    table.add({"Resume", figure, throughput(size, best(opens)), baseline, "skipped (simdjson not found)", "—", "≥ 1.00",
               "SKIP"});
    return opens;
  }
  require(simdjsons.front().rows == opens.front().rows, "open and simdjson count different rows in " + path);
  const double ratio = best(simdjsons) / best(opens);
  table.add({"Resume", figure, throughput(size, best(opens)), baseline, throughput(size, best(simdjsons)),
             format("%.2f", ratio), "≥ 1.00", verdict(ratio >= 1.0)});
  return opens;
}

} // namespace

void resume(const Settings& settings, Table& table, const std::filesystem::path& directory) {
  const std::string path =
      resume_log(settings.log.empty() ? (directory / "resume.jsonl").string() : settings.log, true, settings);
  // Kept beside a --log the caller keeps, so that both logs are generated once.
  const std::string short_path =
      resume_log(settings.log.empty() ? (directory / "resume-short.jsonl").string()
                                      : std::filesystem::path(settings.log).replace_extension(".short.jsonl").string(),
                 false, settings);
  const double size = static_cast<double>(std::filesystem::file_size(path));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::optional<std::string> node = find_in_path("node");
  const std::string script = (directory / "loader.js").string();
  std::ofstream(script) << NODE_LOADER;

  static_cast<void>(run_process({self, "--child", "nlohmann", path}, false)); // warm the page cache
  std::vector<ResumeResult> opens;
  std::vector<ResumeResult> nlohmanns;
  std::vector<ResumeResult> nodes;
  for (int run = 0; run < settings.resume_runs; ++run) {
    opens.push_back(parse_resume(run_process({self, "--child", "open", path}, false), "SessionLog::open child"));
    nlohmanns.push_back(
        parse_resume(run_process({self, "--child", "nlohmann", path}, false), "nlohmann::json::parse child"));
    if (node) {
      nodes.push_back(parse_resume(run_process({*node, script, path}, false), "node " + script));
    }
  }
  const ResumeResult open = median(opens);
  const ResumeResult parse = median(nlohmanns);
  require(open.rows == parse.rows, "open and nlohmann::json::parse count different rows");
  const std::string figure = "SessionLog::open, " + megabytes(size) + " realistic log (" + count(open.rows) + " rows)";
  const auto speedup = [&](const std::string& baseline, double baseline_s, std::optional<double> minimum) {
    const double ratio = baseline_s / open.seconds;
    table.add({"Resume", figure, duration(open.seconds * 1e9), baseline, duration(baseline_s * 1e9),
               format("%.2f× faster", ratio), minimum ? format("≥ %.0f× faster", *minimum) : "—",
               minimum ? verdict(ratio >= *minimum) : "info"});
  };
  if (node) {
    const ResumeResult loader = median(nodes);
    require(loader.rows == open.rows, "node and SessionLog::open count different rows");
    speedup("Node.js readFileSync + JSON.parse per line (time inside the script)", loader.seconds, 3);
    speedup("Node.js, the same, wall time of the process (startup included)", loader.wall_s, std::nullopt);
  } else {
    table.add({"Resume", figure, duration(open.seconds * 1e9), "Node.js JSON.parse per line", "node not found in PATH",
               "—", "≥ 3× faster", "SKIP"});
  }
  speedup("nlohmann::json::parse per line (std::getline)", parse.seconds, std::nullopt);

  const std::vector<ResumeResult> realistic = open_against_simdjson(settings, table, path, "realistic log");
  const std::vector<ResumeResult> short_rows =
      open_against_simdjson(settings, table, short_path, "log of short assistant/chunk rows");
  const auto peak = [&](const std::vector<ResumeResult>& results, const std::string& shape, double bytes) {
    const auto peak_bytes = static_cast<double>(median(results).peak_bytes);
    const double ratio = peak_bytes / bytes;
    table.add({"Resume", "peak resident set of the process running SessionLog::open (VmHWM), " + shape,
               megabytes(peak_bytes), "file size", megabytes(bytes), format("%.3f", ratio), "≤ 0.10",
               verdict(ratio <= 0.1)});
  };
  peak(realistic, "realistic log", size);
  peak(short_rows, "short rows", static_cast<double>(std::filesystem::file_size(short_path)));
}

} // namespace bench_policy
