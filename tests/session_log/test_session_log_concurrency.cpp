// Concurrent appends: N threads x M appends on one log, threads on two logs of one file, and
// K processes x M appends. Every line parses, seq stays contiguous, nothing is lost, nothing
// interleaves, and each writer's events keep their order.
#include "support/session_log.hpp"

#include <atomic>
#include <map>
#include <set>
#include <thread>

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

namespace {

/// Checks that the log at `path` holds exactly `writers` x `per_writer` "test/append" events
/// (after `before` other events), each writer's `i` from 0 in seq order, lines intact.
void check_all_there(const std::filesystem::path& path, std::size_t writers, std::size_t per_writer,
                     std::size_t before = 0) {
  const auto log = SessionLog::open(path); // validates every line and the contiguous seq
  CHECK_FALSE(log.tail_repair());
  REQUIRE(log.events().size() == before + writers * per_writer);
  std::map<std::size_t, std::size_t> next_index;
  std::uint64_t expected_seq = 0;
  for (const nlohmann::json& event : log.events()) {
    CHECK(event["seq"] == expected_seq++);
    if (event["type"] != "test/append") {
      continue;
    }
    const auto writer = event["data"]["writer"].get<std::size_t>();
    CHECK(event["data"]["i"] == next_index[writer]++);
  }
  CHECK(next_index.size() == writers);
  for (const auto& [writer, count] : next_index) {
    CHECK(count == per_writer);
  }
  const std::string bytes = read_file(path);
  CHECK(static_cast<std::size_t>(std::count(bytes.begin(), bytes.end(), '\n')) == 1 + log.events().size());
}

} // namespace

TEST_CASE("N threads x M appends on one log, while readers iterate") {
  constexpr std::size_t threads = 6;
  constexpr std::size_t appends = 20;
  FreshLog fresh("threads.jsonl", "threads");

  std::atomic<bool> done{false};
  std::atomic<std::size_t> rows_read{0};
  std::thread reader([&] {
    while (!done.load()) {
      for (const nlohmann::json& event : fresh.log.events()) {
        rows_read += event.is_object() ? 1U : 0U;
      }
      static_cast<void>(fresh.log.sandbox_mode_override());
      static_cast<void>(fresh.log.next_seq());
    }
  });
  std::vector<std::thread> writers;
  writers.reserve(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    writers.emplace_back([&fresh, t] {
      for (std::size_t i = 0; i < appends; ++i) {
        fresh.log.append("test/append", {{"writer", t}, {"i", i}});
        if (i % 5 == 0) {
          dsh::set_sandbox_mode(fresh.log, dsh::SANDBOX_MODES[t % 3]);
        }
      }
    });
  }
  for (auto& writer : writers) {
    writer.join();
  }
  done = true;
  reader.join();

  const std::size_t switches = threads * (appends / 5);
  CHECK(fresh.log.next_seq() == threads * appends + switches);
  CHECK(fresh.log.sandbox_mode_override() == dsh::effective_mode(fresh.log.events()));
  check_all_there(fresh.path, threads, appends, switches);
}

TEST_CASE("threads appending through two logs of the same file never collide") {
  constexpr std::size_t appends = 25;
  const TempDir dir;
  const auto path = dir / "two.jsonl";
  static_cast<void>(SessionLog::create(path, {"two", {}, 1}));
  auto first = SessionLog::open(path);
  auto second = SessionLog::open(path);
  std::thread a([&] {
    for (std::size_t i = 0; i < appends; ++i) {
      first.append("test/append", {{"writer", 0}, {"i", i}});
    }
  });
  std::thread b([&] {
    for (std::size_t i = 0; i < appends; ++i) {
      second.append("test/append", {{"writer", 1}, {"i", i}});
    }
  });
  a.join();
  b.join();
  check_all_there(path, 2, appends);
  first.refresh();
  second.refresh();
  CHECK(first.next_seq() == 2 * appends);
  CHECK(second.events().size() == 2 * appends);
}

TEST_CASE("K processes x M appends to one log lose nothing and never interleave") {
  constexpr std::size_t processes = 4;
  constexpr std::size_t appends = 25;
  FreshLog fresh("processes.jsonl", "processes");

  std::vector<std::unique_ptr<Child>> children;
  children.reserve(processes);
  for (std::size_t k = 0; k < processes; ++k) {
    children.push_back(std::make_unique<Child>([&fresh, k](int) {
      auto log = SessionLog::open(fresh.path);
      for (std::size_t i = 0; i < appends; ++i) {
        log.append("test/append", {{"writer", k}, {"i", i}, {"padding", std::string(i * 97, 'x')}});
      }
      return 0;
    }));
  }
  for (auto& child : children) {
    CHECK(child->exit_code() == 0);
  }
  check_all_there(fresh.path, processes, appends);

  // The fresh.log's log learns of the others' rows at its next append (or refresh), and its own
  // append takes the next seq after them.
  CHECK(fresh.log.events().empty());
  CHECK(fresh.log.append("test/parent", {}) == processes * appends);
  CHECK(fresh.log.events().size() == processes * appends + 1);

  Child switcher([&fresh](int) {
    auto log = SessionLog::open(fresh.path);
    dsh::set_sandbox_mode(log, SandboxMode::danger_full_access);
    return 0;
  });
  REQUIRE(switcher.exit_code() == 0);
  CHECK(fresh.log.sandbox_mode_override() == std::nullopt);
  fresh.log.refresh();
  CHECK(fresh.log.sandbox_mode_override() == SandboxMode::danger_full_access);
  CHECK(fresh.log.next_seq() == processes * appends + 2);
}
