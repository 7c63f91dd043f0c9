// Out of memory at every single allocation of open and of append, in turn: this executable
// replaces the global operator new with one that throws std::bad_alloc at the Nth allocation
// after it is armed, and, when the failure is sticky, at every allocation after it too (memory
// that stays exhausted, the way a process at its RLIMIT_AS or in a full cgroup sees it). Each N runs in a forked child,
// so that an abort (std::terminate from an allocation inside noexcept code) is seen and counted rather than ending the
// test. Every outcome must be a success, or std::bad_alloc with the file byte-for-byte unchanged; an append that
// succeeds has its event on disk under the seq it returned.
#include "support/session_log.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <new>

namespace {

std::atomic<long> allocations_left{0}; // 0: disarmed; else the allocation that reaches 0 fails
std::atomic<bool> failed{false};       // the armed failure happened
std::atomic<bool> sticky{false};       // once failed, every allocation fails until disarmed
std::atomic<bool> exhausted{false};    // sticky and failed: the state that stays

void* allocate(std::size_t size) {
  if (exhausted.load(std::memory_order_relaxed)) {
    throw std::bad_alloc();
  }
  if (allocations_left.load(std::memory_order_relaxed) > 0 &&
      allocations_left.fetch_sub(1, std::memory_order_relaxed) == 1) {
    failed.store(true, std::memory_order_relaxed);
    exhausted.store(sticky.load(std::memory_order_relaxed), std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (void* block = std::malloc(size == 0 ? 1 : size)) {
    return block;
  }
  throw std::bad_alloc();
}

} // namespace

// The replacement allocation functions of this test executable only.
void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t& /*tag*/) noexcept {
  try {
    return allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* block) noexcept { std::free(block); }
void operator delete[](void* block) noexcept { std::free(block); }
void operator delete(void* block, std::size_t /*size*/) noexcept { std::free(block); }
void operator delete[](void* block, std::size_t /*size*/) noexcept { std::free(block); }

using dsh::SessionLog;
using namespace dsh::test;

namespace {

/// How the runs at each failing position ended.
struct Outcomes {
  long positions = 0; ///< Failing positions tried (the last run reached none: it is the success run).
  long successes = 0; ///< Runs that succeeded although their allocation failed (it was handled).
  long bad_allocs = 0;
  long aborts = 0; ///< Children ended by a signal (std::terminate): must stay 0.
  long other = 0;  ///< Children that threw something else, or saw a changed file.
};

/// What a child reports: 'S' success (then the seq), 'B' std::bad_alloc, 'E' anything else;
/// then '1' if the armed failure happened, '0' if the scenario completed before reaching it.
struct Report {
  char outcome = 'E';
  bool reached = false;
  std::uint64_t seq = 0;
};

/// Runs `scenario` in a child with the Nth allocation failing, for N = 1, 2, ... until a run
/// completes without reaching its failing allocation; `check(report)` judges the file after
/// each run and returns false if it is wrong.
template <class Setup, class Scenario, class Check>
Outcomes every_position(Setup setup, Scenario scenario, Check check) {
  Outcomes outcomes;
  for (long n = 1;; ++n) {
    Child child([&](int out) {
      auto prepared = setup();
      Report report;
      failed.store(false);
      allocations_left.store(n);
      try {
        report.seq = scenario(prepared);
        report.outcome = 'S';
      } catch (const std::bad_alloc&) {
        report.outcome = 'B';
      } catch (...) {
        report.outcome = 'E';
      }
      allocations_left.store(0);
      report.reached = failed.load();
      const std::string text =
          std::string(1, report.outcome) + (report.reached ? "1" : "0") + std::to_string(report.seq);
      write_all(out, text);
      return 0;
    });
    const std::string text = child.read_all();
    const int code = child.exit_code();
    ++outcomes.positions;
    if (code != 0 || text.size() < 3) {
      ++outcomes.aborts;
      if (outcomes.aborts > 1000) {
        break; // every run aborts: the scenario itself is broken
      }
      continue;
    }
    Report report{text[0], text[1] == '1', std::stoull(text.substr(2))};
    if (report.outcome == 'S') {
      ++outcomes.successes;
    } else if (report.outcome == 'B') {
      ++outcomes.bad_allocs;
    } else {
      ++outcomes.other;
    }
    if (!check(report)) {
      ++outcomes.other;
    }
    if (!report.reached) {
      break;
    }
  }
  return outcomes;
}

/// A log with every kind of row opening parses or scans: a header with extra members, events
/// with nested data, escaped keys, a packed chunk row, and two sandbox/mode events.
std::string sample_log() {
  return R"({"type":"session","version":0,"id":"oom","createdAt":1,"cwd":"/w","delegationDepth":1,)"
         R"("parentSession":{"id":"p","path":["a",{"b":[1,2,3]}]}})"
         "\n"
         R"({"type":"chat/message","seq":0,"time":2,"data":{"role":"user","content":[{"text":"hi"},[1,[2,[3]]]]}})"
         "\n"
         R"({"type":"sandbox/mode","seq":1,"time":3,"data":{"mode":"workspace-write","why":["a",{"b":null}]}})"
         "\n"
         R"({"type":"text-chunks","seq0":2,"time":4,"data":{"dt":[1,2,3],"t":"abc"}})"
         "\n"
         R"({"\u0074ype":"tool\/call","seq":6,"time":5,"data":{"k\u00e9y":"v\u00e9"}})"
         "\n"
         R"({"type":"sandbox/mode","seq":7,"time":6,"data":{"mode":"read-only"},"surfaceOp":"append"})"
         "\n";
}

} // namespace

TEST_CASE("out of memory at any allocation of open: success or std::bad_alloc, the file unchanged") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string bytes = sample_log();
  write_file(path, bytes);
  const Outcomes outcomes = every_position(
      [] { return 0; },
      [&](int /*unused*/) -> std::uint64_t {
        const SessionLog log = SessionLog::open(path);
        return log.next_seq();
      },
      [&](const Report& report) { return read_file(path) == bytes && (report.outcome != 'S' || report.seq == 8); });
  std::cout << "open: " << outcomes.positions << " positions, " << outcomes.bad_allocs << " std::bad_alloc, "
            << outcomes.successes << " successes, " << outcomes.aborts << " aborts, " << outcomes.other << " other\n";
  CHECK(outcomes.positions > 50);
  CHECK(outcomes.aborts == 0);
  CHECK(outcomes.other == 0);
  CHECK(outcomes.bad_allocs == outcomes.positions - 1);
}

TEST_CASE("out of memory at any allocation of append: the event on disk under its seq, or bad_alloc and unchanged") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string bytes = sample_log();
  for (const bool mode_event : {false, true}) {
    write_file(path, bytes);
    struct Prepared {
      SessionLog log;
      nlohmann::json data;
      nlohmann::json envelope;
    };
    const Outcomes outcomes = every_position(
        [&] {
          nlohmann::json data = mode_event ? nlohmann::json{{"mode", "danger-full-access"}}
                                           : nlohmann::json::parse(R"({"cmd":"ls","args":["-l",{"x":[1,[2]]}]})");
          return Prepared{SessionLog::open(path), std::move(data), nlohmann::json{{"surfaceOp", "append"}}};
        },
        [&](Prepared& prepared) -> std::uint64_t {
          return prepared.log.append(mode_event ? "sandbox/mode" : "tool/run", std::move(prepared.data),
                                     prepared.envelope);
        },
        [&](const Report& report) {
          const std::string now = read_file(path);
          if (report.outcome != 'S') {
            return now == bytes;
          }
          const std::string prefix =
              mode_event ? R"({"type":"sandbox/mode","seq":8,"time":)" : R"({"type":"tool/run","seq":8,"time":)";
          const bool written =
              report.seq == 8 && now.starts_with(bytes) && now.substr(bytes.size()).starts_with(prefix);
          const SessionLog reopened = SessionLog::open(path);
          const bool durable = reopened.next_seq() == 9 &&
                               reopened.sandbox_mode_override() ==
                                   (mode_event ? dsh::SandboxMode::danger_full_access : dsh::SandboxMode::read_only);
          write_file(path, bytes);
          return written && durable;
        });
    std::cout << (mode_event ? "append sandbox/mode: " : "append tool/run: ") << outcomes.positions << " positions, "
              << outcomes.bad_allocs << " std::bad_alloc, " << outcomes.successes << " successes, " << outcomes.aborts
              << " aborts, " << outcomes.other << " other\n";
    CHECK(outcomes.positions > 10);
    CHECK(outcomes.aborts == 0);
    CHECK(outcomes.other == 0);
  }
}

// Sticky exhaustion at the Nth allocation of a whole session: open, then three appends (one of
// them a sandbox/mode event, which draws on the log's reserve), each acknowledged append's seq
// noted before the next begins. Every run must end in success, std::bad_alloc or a LogError, never
// an abort, and every append that returned must be on disk with its seq and data afterwards.
TEST_CASE("sticky out of memory from any allocation of open and appends: no abort, nothing acknowledged lost") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  const std::string bytes = sample_log();
  const std::array<std::string, 3> types{"tool/run", "sandbox/mode", "chat/message"};
  long positions = 0;
  long aborts = 0;
  long lost = 0;
  long outcomes[3] = {0, 0, 0}; // success, std::bad_alloc, LogError
  for (long n = 1;; ++n) {
    write_file(path, bytes);
    Child child([&](int out) {
      std::array<std::uint64_t, 3> acknowledged{};
      std::size_t count = 0;
      char outcome = 'E';
      // Made before memory runs out: the host's own trees are its business, not the log's (the
      // log takes each by value and is then responsible for disposing of it).
      std::array<nlohmann::json, 3> events{nlohmann::json{{"n", 0}, {"text", std::string(100, 'x')}},
                                           nlohmann::json{{"mode", "workspace-write"}},
                                           nlohmann::json{{"n", 2}, {"text", std::string(100, 'x')}}};
      failed.store(false);
      sticky.store(true);
      allocations_left.store(n);
      try {
        SessionLog log = SessionLog::open(path);
        for (std::size_t i = 0; i < types.size(); ++i) {
          acknowledged[count] = log.append(types[i], std::move(events[i]));
          ++count;
        }
        outcome = 'S';
      } catch (const std::bad_alloc&) {
        outcome = 'B';
      } catch (const dsh::LogError&) {
        outcome = 'L';
      } catch (...) {
        outcome = 'E';
      }
      // Memory is back before anything is reported: the report allocates.
      allocations_left.store(0);
      exhausted.store(false);
      sticky.store(false);
      std::string text(1, outcome);
      text += failed.load() ? "1" : "0";
      for (std::size_t i = 0; i < count; ++i) {
        text += " " + std::to_string(acknowledged[i]);
      }
      write_all(out, text);
      return 0;
    });
    const std::string text = child.read_all();
    const int code = child.exit_code();
    ++positions;
    if (code != 0 || text.size() < 2) {
      ++aborts;
      if (aborts > 1000) {
        break;
      }
      continue;
    }
    CAPTURE(n, text);
    CHECK(text[0] != 'E');
    outcomes[text[0] == 'S' ? 0 : text[0] == 'B' ? 1 : 2] += 1;
    // What was acknowledged is there, under its seq, in order.
    const SessionLog reopened = SessionLog::open(path);
    std::size_t from = 2;
    std::size_t index = 0;
    while (from < text.size()) {
      const std::size_t next = text.find(' ', from + 1);
      const std::uint64_t seq = std::stoull(text.substr(from + 1, next - from - 1));
      const std::string expected_prefix = "{\"type\":\"" + types[index] + "\",\"seq\":" + std::to_string(seq) + ",";
      if (read_file(path).find(expected_prefix) == std::string::npos || seq != 8 + index) {
        ++lost;
      }
      ++index;
      from = next == std::string::npos ? text.size() : next;
    }
    if (index >= 2 && reopened.sandbox_mode_override() != dsh::SandboxMode::workspace_write) {
      ++lost;
    }
    if (text[1] == '0') {
      break; // the whole session ran before the armed allocation: every position was tried
    }
  }
  std::cout << "sticky open + 3 appends: " << positions << " positions, " << outcomes[0] << " successes, "
            << outcomes[1] << " std::bad_alloc, " << outcomes[2] << " LogError, " << aborts << " aborts, " << lost
            << " lost\n";
  CHECK(positions > 50);
  CHECK(aborts == 0);
  CHECK(lost == 0);
}
