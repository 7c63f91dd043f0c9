// bench_policy's Registry group: a registration and its disposal against a mutex-guarded
// counter, on one thread and on two contending.
#include "bench_policy.hpp"

namespace bench_policy {

namespace {

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

/// Runs `body(n)` on `threads` threads released together; returns the wall time per operation
/// as each thread sees it (the slowest thread's time over n: waiting for the other thread is
/// the cost of contention) and the allocations per operation of all threads. Starting and
/// joining the threads is not part of it.
template <class Body> Sample on_threads(int threads, std::size_t n, Body& body) {
  std::atomic<int> ready{0};
  std::vector<double> seconds(static_cast<std::size_t>(threads));
  std::vector<std::uint64_t> allocations(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < seconds.size(); ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const std::uint64_t before = allocation_count;
      const auto start = Clock::now();
      body(n);
      seconds[t] = seconds_since(start);
      allocations[t] = allocation_count - before;
    });
  }
  for (std::thread& worker : workers) {
    worker.join();
  }
  std::uint64_t total = 0;
  for (std::uint64_t a : allocations) {
    total += a;
  }
  const auto operations = static_cast<double>(n) * threads;
  return {*std::max_element(seconds.begin(), seconds.end()) * 1e9 / static_cast<double>(n),
          static_cast<double>(total) / operations};
}

} // namespace

void registry(const Settings& settings, Table& table) {
  dsh::PolicyOwner owner;
  std::mutex mutex;
  std::size_t counter = 0;
  for (int threads : {1, 2}) {
    auto pairs = repeated([&owner] {
      dsh::Disposer registration = owner.registerEnforcedFamily(dsh::Family::bash);
      registration.dispose();
    });
    auto guarded = repeated([&] {
      {
        const std::lock_guard lock(mutex);
        ++counter;
      }
      const std::lock_guard lock(mutex);
      --counter;
    });
    auto figure = [&](std::size_t n) -> std::optional<Sample> { return on_threads(threads, n, pairs); };
    auto baseline = [&](std::size_t n) -> std::optional<Sample> { return on_threads(threads, n, guarded); };
    const Comparison result = compare(settings, figure, baseline);
    const std::string who = threads == 1 ? "1 thread" : "2 threads contending";
    table.ratio("Registry", "registerEnforcedFamily + dispose, " + who + " (per pair)", result.figure.ns,
                "mutex-guarded counter ++ then --, " + who, result.baseline.ns, std::nullopt);
    table.add({"Registry", "heap allocations per pair, " + who, format("%.2f", result.figure.allocations), "—", "—",
               "—", "≤ 1", verdict(result.figure.allocations <= 1)});
  }
  require(owner.enforcedFamilies().empty() && counter == 0, "registry: a registration survived its disposal");
}

} // namespace bench_policy
