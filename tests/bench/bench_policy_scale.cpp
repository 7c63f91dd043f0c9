// bench_policy's Scale group: resolve and context cost the same on a large session as on a
// small one, in memory (Session) and opened from a log (SessionLog).
#include "bench_policy.hpp"
#include "realistic_log.hpp"

namespace bench_policy {

namespace {

// ---------------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------------

/// resolve and context on a large and a small session of the same type.
template <class S> void scale_rows(const Settings& settings, Table& table, const EnforcingOwner& fixture,
                                   const S& large, const S& small, const std::string& type) {
  const dsh::PolicyOwner& owner = fixture.owner;
  require(owner.resolve(large) == owner.resolve(small), type + ": the two sessions resolve differently");
  require(!owner.context(large).empty() && owner.context(large) == owner.context(small),
          type + ": the two sessions render different texts");
  const std::string large_name = count(settings.large);
  const std::string small_name = count(settings.small);
  const auto resolve = [&owner](const S& session) {
    return repeated([&owner, &session] {
      const dsh::ResolvedPolicy policy = owner.resolve(session);
      keep(&policy);
    });
  };
  const auto context = [&owner](const S& session) {
    return repeated([&owner, &session] {
      const std::string text = owner.context(session);
      keep(&text);
    });
  };
  const Comparison r = compare(settings, resolve(large), resolve(small));
  table.ratio("Scale", "resolve(" + type + "), " + large_name + " events", r.figure.ns,
              "same, " + small_name + " events", r.baseline.ns, 1.2);
  const Comparison c = compare(settings, context(large), context(small));
  table.ratio("Scale", "context(" + type + "), " + large_name + " events", c.figure.ns,
              "same, " + small_name + " events", c.baseline.ns, 1.2);
}

} // namespace

void scale_session(const Settings& settings, Table& table, const std::string& cwd) {
  const EnforcingOwner fixture;
  const dsh::Session large{dsh::SessionHeader{"large", cwd, 0}, events(settings.large)};
  const dsh::Session small{dsh::SessionHeader{"small", cwd, 0}, events(settings.small)};
  scale_rows(settings, table, fixture, large, small, "Session");
}

void scale_log(const Settings& settings, Table& table, const std::filesystem::path& directory, const std::string& cwd) {
  const EnforcingOwner fixture;
  const auto make = [&](std::size_t rows, const char* name) {
    const std::string path = (directory / name).string();
    dsh::bench::write_log(path, {.min_bytes = 0, .rows = rows, .realistic = false, .cwd = cwd});
    return dsh::SessionLog::open(path);
  };
  const dsh::SessionLog large = make(settings.large, "scale-large.jsonl");
  const dsh::SessionLog small = make(settings.small, "scale-small.jsonl");
  require(large.events().size() == settings.large && small.events().size() == settings.small,
          "SessionLog: the scale logs hold the wrong number of events");
  scale_rows(settings, table, fixture, large, small, "SessionLog");
}

} // namespace bench_policy
