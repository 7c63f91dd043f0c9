// Crash safety with real processes: a child appends sandbox/mode switches and reports each
// acknowledged seq through a pipe; the parent kills it with SIGKILL at a random moment, many
// times. After every kill the log opens, holds every acknowledged event, and its effective
// mode is the last acknowledged one or one appended after it.
#include "support/session_log.hpp"

#include <chrono>
#include <random>
#include <thread>

using dsh::SandboxMode;
using dsh::SessionLog;
using namespace dsh::test;

namespace {

/// The mode the child appends as event `seq`, so the parent knows what each seq must hold.
SandboxMode mode_for(std::uint64_t seq) { return dsh::SANDBOX_MODES[seq % dsh::SANDBOX_MODES.size()]; }

/// The child: appends switches forever, reporting each seq once append has returned.
[[noreturn]] void append_forever(const std::filesystem::path& path, int report) {
  auto log = SessionLog::open(path);
  for (;;) {
    const std::uint64_t seq = log.next_seq();
    dsh::set_sandbox_mode(log, mode_for(seq));
    write_all(report, std::string_view(reinterpret_cast<const char*>(&seq), sizeof seq));
  }
}

} // namespace

TEST_CASE("SIGKILL at random moments never loses an acknowledged append") {
  constexpr int rounds = 30;
  const TempDir dir;
  const auto path = dir / "crash.jsonl";
  static_cast<void>(SessionLog::create(path, {"crash", {}, 1}));

  const auto seed = std::random_device{}();
  INFO("random seed " << seed);
  std::mt19937 random(seed);
  std::uint64_t acknowledged_total = 0;
  int repairs = 0;
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    Child child([&](int report) -> int { append_forever(path, report); });
    std::vector<std::uint64_t> acknowledged;
    const std::size_t wait_for = random() % 8;
    std::uint64_t seq = 0;
    while (acknowledged.size() < wait_for && child.read_exactly(&seq, sizeof seq)) {
      acknowledged.push_back(seq);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
    REQUIRE(::kill(child.pid(), SIGKILL) == 0);
    const int status = child.wait();
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    while (child.read_exactly(&seq, sizeof seq)) {
      acknowledged.push_back(seq);
    }

    const auto log = SessionLog::open(path);
    repairs += log.tail_repair() ? 1 : 0;
    for (const std::uint64_t acked : acknowledged) {
      REQUIRE(acked < log.next_seq());
      const nlohmann::json event = log.events()[acked];
      CHECK(event["seq"] == acked);
      CHECK(event["type"] == "sandbox/mode");
      CHECK(event["data"]["mode"] == dsh::to_string(mode_for(acked)));
    }
    if (log.next_seq() > 0) {
      CHECK(log.sandbox_mode_override() == mode_for(log.next_seq() - 1));
    }
    if (!acknowledged.empty()) {
      CHECK(log.next_seq() - 1 >= acknowledged.back());
    }
    acknowledged_total += acknowledged.size();
  }
  INFO("acknowledged " << acknowledged_total << " appends; " << repairs << " torn tails repaired");
  CHECK(acknowledged_total > 0);
  CHECK(SessionLog::open(path).events().size() >= acknowledged_total);
}
