// The benchmarks' one generator of DSH session logs (used by bench_policy and
// bench_session_log_open). Deterministic: the same shape gives the same bytes on every machine
// (std::mt19937_64 is fully specified, nlohmann_json's dump is canonical).
#pragma once

#include <dsh/sandbox_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsh::bench {

/// What `write_log` writes.
struct LogShape {
  std::uint64_t min_bytes = 0; ///< Stop once the file holds at least this many bytes (0: no limit).
  std::uint64_t rows = 0;      ///< Stop once the file holds this many rows after the header (0: no limit).
  /// true: the realistic mix (mostly assistant/chunk and tool/result, long and non-ASCII texts,
  /// packed chunk rows, about 2 sandbox/mode switches per 1000 rows); false: only short
  /// assistant/chunk text deltas, never a switch.
  bool realistic = true;
  std::string cwd = "/srv/bench"; ///< The header's cwd.
};

/// Returns text that looks like what tools return: code with quotes, backslashes, tabs, non-ASCII.
inline std::string tool_output(std::mt19937_64& random, std::size_t length) {
  static const std::vector<std::string> lines = {
      "#include <dsh/sandbox_policy.hpp>",
      "int main(int argc, char** argv) {",
      "\tstd::printf(\"%s\\n\", argv[0]);  // print the name",
      "  if (path.find(\"C:\\\\Users\") != npos) { return 1; }",
      "drwxr-xr-x  2 me me 4096 Nov 30 05:42 include",
      "-rw-r--r--  1 me me 50894 Nov 30 05:43 sandbox_policy.hpp",
      "error: expected ';' before '}' token",
      "  résumé — naïve café: 中文注释 ✓ 🚀",
      "{\"key\": [1, 2, 3], \"nested\": {\"ok\": true}}",
      "    at Object.<anonymous> (/srv/app/index.js:12:5)",
  };
  std::string text;
  while (text.size() < length) {
    text += lines[random() % lines.size()];
    text += '\n';
  }
  return text;
}

/// Writes a DSH JSONL log of `shape` to `path` (replacing it): the header, then event rows
/// numbered from seq 0. Throws std::runtime_error if the file cannot be written.
inline void write_log(const std::string& path, const LogShape& shape) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << R"({"type":"session","version":0,"id":"bench","createdAt":1764480000000,"cwd":)"
      << nlohmann::json(shape.cwd).dump() << R"(,"delegationDepth":0})" << '\n';
  std::mt19937_64 random(42);
  std::uint64_t written = 0;
  std::uint64_t rows = 0;
  std::uint64_t seq = 0;
  std::int64_t time = 1764480000000;
  static const std::vector<std::string> words = {"The ", "file ",   "policy ",    "is ",    "read-only",
                                                 ". ",   "Let ",    "me ",        "check ", "`main.cpp`",
                                                 "\n",   "résumé ", "\"quoted\" "};
  const auto emit = [&](const nlohmann::json& row) {
    const std::string line = row.dump() + '\n';
    out << line;
    written += line.size();
    ++rows;
  };
  const auto event = [&](const char* type, nlohmann::json data) {
    emit(nlohmann::json{{"type", type}, {"seq", seq++}, {"time", time++}, {"data", std::move(data)}});
  };
  const auto text_delta = [&] {
    std::string text;
    for (auto n = 1 + random() % 6; n > 0; --n) {
      text += words[random() % words.size()];
    }
    event("assistant/chunk",
          {{"turn", seq / 500}, {"step", 0}, {"chunk", {{"type", "text-delta"}, {"index", 0}, {"text", text}}}});
  };
  const auto more = [&] {
    return (shape.min_bytes == 0 || written < shape.min_bytes) && (shape.rows == 0 || rows < shape.rows);
  };
  while (more()) {
    const auto roll = shape.realistic ? random() % 1000 : 500;
    if (roll < 2) {
      event("sandbox/mode", {{"mode", dsh::to_string(dsh::SANDBOX_MODES[random() % 3])}});
    } else if (roll < 700) {
      text_delta();
    } else if (roll < 800) {
      event("tool/result", {{"turn", seq / 500},
                            {"callId", "call-" + std::to_string(seq)},
                            {"name", "bash"},
                            {"output", tool_output(random, 200 + random() % 6000)},
                            {"isError", random() % 10 == 0}});
    } else if (roll < 820) {
      const auto count = 2 + random() % 30;
      std::vector<std::string> texts;
      for (std::size_t i = 0; i < count; ++i) {
        texts.push_back(words[random() % words.size()]);
      }
      nlohmann::json dt = nlohmann::json::array();
      for (std::size_t i = 1; i < count; ++i) {
        dt.push_back(random() % 40);
      }
      emit({{"type", "text-chunks"},
            {"seq0", seq},
            {"time0", time},
            {"data", {{"turn", seq / 500}, {"step", 0}, {"index", 0}, {"dt", dt}, {"texts", texts}}}});
      seq += count;
      time += static_cast<std::int64_t>(count);
    } else if (roll < 900) {
      event("assistant/chunk",
            {{"turn", seq / 500},
             {"step", 1},
             {"chunk", {{"type", "tool-call-delta"}, {"index", 1}, {"argsDelta", "{\"cmd\":\"ls -la\"}"}}}});
    } else if (roll < 950) {
      event("user/message", {{"id", "m" + std::to_string(seq)},
                             {"role", "user"},
                             {"content", {{{"type", "text"}, {"text", tool_output(random, 300)}}}},
                             {"source", {{"kind", "user"}}}});
    } else {
      event(roll < 975 ? "turn/start" : "turn/end", {{"turn", seq / 500}, {"reason", {{"kind", "completed"}}}});
    }
  }
  out.flush();
  if (!out) {
    throw std::runtime_error("cannot write the benchmark log " + path);
  }
}

} // namespace dsh::bench
