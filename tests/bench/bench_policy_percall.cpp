// bench_policy's Per call group: resolve against one realpath(3), context against resolve,
// and the heap allocations of context.
#include "bench_policy.hpp"

namespace bench_policy {

void per_call(const Settings& settings, Table& table, const std::string& cwd) {
  const EnforcingOwner fixture;
  const dsh::PolicyOwner& owner = fixture.owner;
  const dsh::Session session{dsh::SessionHeader{"per-call", cwd, 0}, events(settings.small)};
  std::array<char, PATH_MAX> buffer{};
  require(::realpath(cwd.c_str(), buffer.data()) != nullptr && owner.resolve(session).workspace_root == buffer.data(),
          "resolve's root is not realpath(3) of the cwd");
  const auto resolve = repeated([&] {
    const dsh::ResolvedPolicy policy = owner.resolve(session);
    keep(&policy);
  });
  const auto realpath = repeated([&] {
    const char* resolved = ::realpath(cwd.c_str(), buffer.data());
    keep(resolved);
  });
  const auto context = repeated([&] {
    const std::string text = owner.context(session);
    keep(&text);
  });
  const Comparison r = compare(settings, resolve, realpath);
  table.ratio("Per call", "resolve(session), cwd 5 directories deep", r.figure.ns, "one realpath(3) of the cwd",
              r.baseline.ns, 1.1);
  const Comparison c = compare(settings, context, resolve);
  table.ratio("Per call", "context(session), 3 families, workspace-write", c.figure.ns, "resolve(session)",
              c.baseline.ns, 1.1);
  const double extra = c.figure.allocations - c.baseline.allocations;
  table.add({"Per call", "heap allocations per context(session)", format("%.1f", c.figure.allocations),
             "per resolve(session)", format("%.1f", c.baseline.allocations), format("+%.1f", extra), "≤ +2",
             verdict(extra <= 2)});
}

} // namespace bench_policy
