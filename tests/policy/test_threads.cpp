// The registry under concurrency (docs/contract.md#families): registration, disposal, resolve and context from
// many threads at once. Every text a reader sees must be one of the valid texts for some
// registry state, and the listener count must come out exact. Meant to run under
// ThreadSanitizer as well. Catch2 assertions are made on the main thread only.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace dsh;

constexpr int kWriters = 8;
constexpr int kReaders = 4;
constexpr int kIterations = 2000;
constexpr long kMinimumReads = 50;

// Writers register filesystem and bash as enforced and bash as escalatable; these are every
// read-only text such a registry can produce, written out.
constexpr const char* kReadOnlyFilesystem =
    "Current DSH file policy: read-only. The write and edit tools cannot modify files in the standing mode.";
constexpr const char* kReadOnlyBash =
    "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode.";
constexpr const char* kReadOnlyBoth = "Current DSH file policy: read-only. The write and edit tools and one-shot bash "
                                      "commands cannot modify files in the standing mode.";
constexpr const char* kReadOnlyBashEscalating =
    "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode. For "
    "one-shot bash commands, do not refuse a required modification from this standing mode alone: attempt it "
    "normally and follow the tool's denial and escalation guidance.";
constexpr const char* kReadOnlyBothBashEscalating =
    "Current DSH file policy: read-only. The write and edit tools and one-shot bash commands cannot modify files "
    "in the standing mode. For one-shot bash commands, do not refuse a required modification from this standing "
    "mode alone: attempt it normally and follow the tool's denial and escalation guidance.";
const std::vector<std::string> kValidReadOnly{
    "", kReadOnlyFilesystem, kReadOnlyBash, kReadOnlyBoth, kReadOnlyBashEscalating, kReadOnlyBothBashEscalating};

// The workspace-write texts, around the root literal.
std::vector<std::string> valid_workspace_write(const std::string& root_literal) {
  const std::string tail = " may modify files under the session workspace: " + root_literal +
                           ". Some platform temporary areas may also be writable.";
  return {"", "Current DSH file policy: workspace-write. The write and edit tools" + tail,
          "Current DSH file policy: workspace-write. One-shot bash commands" + tail,
          "Current DSH file policy: workspace-write. The write and edit tools and one-shot bash commands" + tail};
}

bool one_of(const std::vector<std::string>& valid, const std::string& text) {
  return std::find(valid.begin(), valid.end(), text) != valid.end();
}

// Collects what went wrong on other threads, for the main thread to assert on.
class Failures {
public:
  void add(std::string what) {
    const std::lock_guard lock(mutex_);
    if (list_.size() < 10) {
      list_.push_back(std::move(what));
    }
    ++count_;
  }
  [[nodiscard]] std::size_t count() const {
    const std::lock_guard lock(mutex_);
    return count_;
  }
  [[nodiscard]] std::vector<std::string> first() const {
    const std::lock_guard lock(mutex_);
    return list_;
  }

private:
  mutable std::mutex mutex_;
  std::vector<std::string> list_;
  std::size_t count_ = 0;
};

} // namespace

TEST_CASE("threads: writers register and dispose while readers render", "[threads]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "ws");
  const std::string root = std::filesystem::canonical(tmp / "ws").string();

  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::read_only, tmp / "ws", "DSH"});
  const dsh::Session read_only(dsh::SessionHeader{"ro", std::nullopt, 0});
  dsh::Session workspace(dsh::SessionHeader{"ww", root, 0});
  dsh::set_sandbox_mode(workspace, SandboxMode::workspace_write);
  const std::vector<std::string> valid_ww = valid_workspace_write("\"" + root + "\"");
  const dsh::ResolvedPolicy expected_ww{SandboxMode::workspace_write, root, dsh::ModeSource::session,
                                        dsh::RootSource::session};

  Failures failures;
  std::atomic<long> notifications{0};
  std::atomic<long> registrations{0};
  Disposer listener = owner.onChange([&] {
    notifications.fetch_add(1, std::memory_order_relaxed);
    const FamilySet enforced = owner.enforcedFamilies(); // calling back in from any thread
    if (enforced.contains(Family::terminal)) {
      failures.add("listener saw terminal enforced");
    }
  });

  std::atomic<int> writers_left{kWriters};
  std::vector<std::thread> threads;
  threads.reserve(std::size_t{kWriters} + std::size_t{kReaders});
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      long registered = 0;
      std::vector<Disposer> kept;
      kept.reserve(std::size_t{kIterations} / 7 + 1);
      for (int i = 0; i < kIterations; ++i) {
        const Family family = (i + w) % 2 == 0 ? Family::filesystem : Family::bash;
        Disposer enforced = owner.registerEnforcedFamily(family);
        Disposer offer = owner.registerEscalatableFamily(Family::bash);
        registered += 2;
        Disposer moved = std::move(enforced);
        offer.dispose();
        offer.dispose();
        if (i % 7 == 0) {
          kept.push_back(std::move(moved)); // held across iterations
        }
        if (i % 31 == 0) {
          kept.clear();
        }
      }
      kept.clear();
      registrations.fetch_add(registered, std::memory_order_relaxed);
      writers_left.fetch_sub(1, std::memory_order_release);
    });
  }
  std::atomic<long> reads{0};
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      for (int n = 0; n < kMinimumReads || writers_left.load(std::memory_order_acquire) > 0; ++n) {
        const std::string ro_text = owner.context(read_only);
        if (!one_of(kValidReadOnly, ro_text)) {
          failures.add("read-only text: " + ro_text);
        }
        const std::string ww_text = owner.context(workspace);
        if (!one_of(valid_ww, ww_text)) {
          failures.add("workspace-write text: " + ww_text);
        }
        if (!(owner.resolve(workspace) == expected_ww)) {
          failures.add("resolve(workspace) changed");
        }
        const FamilySet enforced = owner.enforcedFamilies();
        const FamilySet escalatable = owner.escalatableFamilies();
        if (enforced.contains(Family::terminal) || escalatable.contains(Family::filesystem) ||
            escalatable.contains(Family::terminal)) {
          failures.add("a family nobody registered");
        }
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }

  std::string first_failures;
  for (const std::string& failure : failures.first()) {
    first_failures += "\n  " + failure;
  }
  INFO("first failures:" << first_failures);
  CHECK(failures.count() == 0);
  CHECK(reads.load() >= kReaders * kMinimumReads);
  CHECK(registrations.load() == 2L * kWriters * kIterations);
  // Every registration was disposed exactly once: two changes each, none lost, none doubled.
  CHECK(notifications.load() == 2 * registrations.load());
  CHECK(owner.enforcedFamilies().empty());
  CHECK(owner.escalatableFamilies().empty());
  CHECK(owner.context(read_only).empty());
  CHECK(owner.context(workspace).empty());
}

TEST_CASE("threads: disposers race the destruction of their owner", "[threads]") {
  const dsh::test::TempDir tmp;
  for (int round = 0; round < 20; ++round) {
    auto owner = std::make_unique<dsh::PolicyOwner>(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
    std::vector<Disposer> contributions;
    contributions.reserve(51);
    for (int i = 0; i < 50; ++i) {
      contributions.push_back(owner->registerEnforcedFamily(dsh::FAMILIES[static_cast<std::size_t>(i % 3)]));
    }
    contributions.push_back(owner->onChange([] {}));
    std::thread disposer([&contributions] {
      for (Disposer& contribution : contributions) {
        contribution.dispose();
      }
    });
    owner.reset();
    disposer.join();
    CHECK(std::none_of(contributions.begin(), contributions.end(), [](const Disposer& d) { return d.active(); }));
  }
}

TEST_CASE("threads: many readers of one session and one owner agree", "[threads]") {
  const dsh::test::TempDir tmp;
  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::danger_full_access, tmp.path(), "Acme"});
  const Disposer terminal = owner.registerEnforcedFamily(Family::terminal);
  const dsh::Session session(dsh::SessionHeader{"s", std::nullopt, 0});
  const std::string expected =
      "Current Acme file policy: danger-full-access. The Acme file sandbox does not restrict terminal sessions.";
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(std::size_t{kWriters});
  for (int r = 0; r < kWriters; ++r) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (owner.context(session) != expected) {
          wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  CHECK(wrong.load() == 0);
}
