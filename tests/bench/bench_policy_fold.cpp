// bench_policy's Pure fold group: effective_mode on a large event list against a small one.
#include "bench_policy.hpp"

namespace bench_policy {

void pure_fold(const Settings& settings, Table& table) {
  const std::vector<nlohmann::json> large = events(settings.large, 10);
  const std::vector<nlohmann::json> small = events(settings.small, 10);
  require(dsh::effective_mode(large) == dsh::SandboxMode::workspace_write &&
              dsh::effective_mode(small) == dsh::SandboxMode::workspace_write,
          "effective_mode missed the switch");
  const auto fold = [](const std::vector<nlohmann::json>& log) {
    return repeated([&log] {
      const std::optional<dsh::SandboxMode> mode = dsh::effective_mode(log);
      keep(&mode);
    });
  };
  const Comparison f = compare(settings, fold(large), fold(small));
  table.ratio("Pure fold", "effective_mode, " + count(settings.large) + " events, last switch 10 from the end",
              f.figure.ns, "same, " + count(settings.small) + " events", f.baseline.ns, 1.5);
}

} // namespace bench_policy
