// The family registry (docs/contract.md#families): independent, reference-counted contributions behind
// move-only Disposers; canonical order whatever the registration order; escalatable only
// while enforced; onChange listeners.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using dsh::Disposer;
using dsh::Family;
using dsh::FamilySet;
using dsh::SandboxMode;

static_assert(!std::is_copy_constructible_v<Disposer>);
static_assert(!std::is_copy_assignable_v<Disposer>);
static_assert(std::is_nothrow_move_constructible_v<Disposer>);
static_assert(std::is_nothrow_move_assignable_v<Disposer>);
static_assert(std::is_nothrow_destructible_v<Disposer>);
static_assert(noexcept(std::declval<Disposer&>().dispose()));
static_assert(std::is_nothrow_default_constructible_v<Disposer>);

constexpr const char* kReadOnlyAll =
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode.";
constexpr const char* kReadOnlyAllEscalatingAll =
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools, one-shot bash commands, and terminal "
    "sessions, do not refuse a required modification from this standing mode alone: attempt it normally and "
    "follow the tool's denial and escalation guidance.";
constexpr const char* kReadOnlyBash =
    "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode.";
constexpr const char* kReadOnlyBashEscalating =
    "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode. For "
    "one-shot bash commands, do not refuse a required modification from this standing mode alone: attempt it "
    "normally and follow the tool's denial and escalation guidance.";

// An owner in read-only over a temporary root, and a session without cwd.
struct Fixture {
  dsh::test::TempDir tmp;
  dsh::PolicyOwner owner{dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"}};
  dsh::Session session{dsh::SessionHeader{"s", std::nullopt, 0}};
};

std::vector<Family> members(FamilySet set) {
  std::vector<Family> list;
  for (Family family : set) {
    list.push_back(family);
  }
  return list;
}

} // namespace

TEST_CASE("two contributions of one family: it leaves with the last", "[registry]") {
  Fixture f;
  Disposer first = f.owner.registerEnforcedFamily(Family::bash);
  Disposer second = f.owner.registerEnforcedFamily(Family::bash);
  CHECK(first.active());
  CHECK(second.active());
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::bash});

  first.dispose();
  CHECK_FALSE(first.active());
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::bash});
  CHECK(f.owner.context(f.session) == kReadOnlyBash);

  // Disposing twice takes nothing more back.
  first.dispose();
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::bash});

  second.dispose();
  CHECK(f.owner.enforcedFamilies().empty());
  CHECK(f.owner.context(f.session).empty());
  second.dispose();
  CHECK(f.owner.enforcedFamilies().empty());

  // The count starts from zero again.
  Disposer third = f.owner.registerEnforcedFamily(Family::bash);
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::bash});
}

TEST_CASE("many contributions: the family stays until every one is disposed", "[registry]") {
  Fixture f;
  std::vector<Disposer> contributions;
  contributions.reserve(100);
  for (int i = 0; i < 100; ++i) {
    contributions.push_back(f.owner.registerEnforcedFamily(Family::terminal));
  }
  for (std::size_t i = 0; i + 1 < contributions.size(); ++i) {
    contributions[i].dispose();
    contributions[i].dispose();
  }
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::terminal});
  contributions.back().dispose();
  CHECK(f.owner.enforcedFamilies().empty());
}

TEST_CASE("destruction disposes", "[registry]") {
  Fixture f;
  {
    const Disposer scoped = f.owner.registerEnforcedFamily(Family::filesystem);
    CHECK(f.owner.enforcedFamilies() == FamilySet{Family::filesystem});
  }
  CHECK(f.owner.enforcedFamilies().empty());
}

TEST_CASE("moving a Disposer transfers the contribution", "[registry]") {
  Fixture f;
  Disposer original = f.owner.registerEnforcedFamily(Family::filesystem);
  Disposer moved(std::move(original));
  CHECK_FALSE(original.active()); // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  CHECK(moved.active());
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::filesystem});

  original.dispose(); // NOLINT(bugprone-use-after-move)
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::filesystem});

  std::vector<Disposer> holder;
  holder.push_back(std::move(moved));
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::filesystem});
  holder.clear();
  CHECK(f.owner.enforcedFamilies().empty());
}

TEST_CASE("move-assigning a Disposer disposes the contribution it held", "[registry]") {
  Fixture f;
  Disposer target = f.owner.registerEnforcedFamily(Family::filesystem);
  Disposer source = f.owner.registerEnforcedFamily(Family::terminal);
  target = std::move(source);
  CHECK(target.active());
  CHECK_FALSE(source.active()); // NOLINT(bugprone-use-after-move)
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::terminal});

  // Assigning to itself keeps the contribution.
  Disposer& alias = target;
  target = std::move(alias);
  CHECK(target.active());
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::terminal});

  // Assigning an inactive Disposer releases what the target held.
  target = Disposer();
  CHECK_FALSE(target.active());
  CHECK(f.owner.enforcedFamilies().empty());
}

TEST_CASE("a default-constructed Disposer is inactive and harmless", "[registry]") {
  Disposer nothing;
  CHECK_FALSE(nothing.active());
  nothing.dispose();
  CHECK_FALSE(nothing.active());
}

TEST_CASE("disposing after the owner is destroyed is harmless", "[registry]") {
  const dsh::test::TempDir tmp;
  auto owner = std::make_unique<dsh::PolicyOwner>(dsh::PolicyConfig{SandboxMode::read_only, tmp.path(), "DSH"});
  int calls = 0;
  Disposer listener = owner->onChange([&calls] { ++calls; });
  Disposer enforced = owner->registerEnforcedFamily(Family::bash);
  Disposer escalatable = owner->registerEscalatableFamily(Family::bash);
  Disposer destroyed_later = owner->registerEnforcedFamily(Family::terminal);
  CHECK(calls == 3);
  owner.reset();

  CHECK(enforced.active());
  enforced.dispose();
  CHECK_FALSE(enforced.active());
  enforced.dispose();
  escalatable.dispose();
  listener.dispose();
  CHECK(calls == 3); // nothing is notified once the owner is gone
  // destroyed_later goes out of scope after the owner: its destructor must be harmless too.
}

TEST_CASE("canonical order regardless of registration order", "[registry]") {
  std::array<Family, 3> order{Family::filesystem, Family::bash, Family::terminal};
  int permutations = 0;
  do {
    Fixture f;
    std::vector<Disposer> contributions;
    contributions.reserve(2 * order.size());
    for (Family family : order) {
      contributions.push_back(f.owner.registerEnforcedFamily(family));
    }
    CHECK(members(f.owner.enforcedFamilies()) ==
          std::vector<Family>{Family::filesystem, Family::bash, Family::terminal});
    CHECK(f.owner.context(f.session) == kReadOnlyAll);
    // Escalation registered in the reverse order is named in canonical order too.
    for (Family family : std::array<Family, 3>{order[2], order[1], order[0]}) {
      contributions.push_back(f.owner.registerEscalatableFamily(family));
    }
    CHECK(members(f.owner.escalatableFamilies()) ==
          std::vector<Family>{Family::filesystem, Family::bash, Family::terminal});
    CHECK(f.owner.context(f.session) == kReadOnlyAllEscalatingAll);
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(permutations == 6);
}

TEST_CASE("a family is escalatable only while it is enforced and offered", "[registry]") {
  Fixture f;
  Disposer offer = f.owner.registerEscalatableFamily(Family::bash);
  CHECK(f.owner.enforcedFamilies().empty());
  CHECK(f.owner.escalatableFamilies().empty());
  CHECK(f.owner.context(f.session).empty());

  Disposer enforced = f.owner.registerEnforcedFamily(Family::bash);
  CHECK(f.owner.escalatableFamilies() == FamilySet{Family::bash});
  CHECK(f.owner.context(f.session) == kReadOnlyBashEscalating);

  // Enforcement withdrawn: the offer stays registered but is not in effect.
  enforced.dispose();
  CHECK(f.owner.escalatableFamilies().empty());
  CHECK(f.owner.context(f.session).empty());
  enforced = f.owner.registerEnforcedFamily(Family::bash);
  CHECK(f.owner.escalatableFamilies() == FamilySet{Family::bash});

  // The offer withdrawn: enforced, not escalatable.
  offer.dispose();
  CHECK(f.owner.enforcedFamilies() == FamilySet{Family::bash});
  CHECK(f.owner.escalatableFamilies().empty());
  CHECK(f.owner.context(f.session) == kReadOnlyBash);

  // Offers are counted like enforcement.
  Disposer offer1 = f.owner.registerEscalatableFamily(Family::bash);
  Disposer offer2 = f.owner.registerEscalatableFamily(Family::bash);
  offer1.dispose();
  CHECK(f.owner.escalatableFamilies() == FamilySet{Family::bash});
  offer2.dispose();
  CHECK(f.owner.escalatableFamilies().empty());

  // An offer for another family does not spill over.
  Disposer terminal_offer = f.owner.registerEscalatableFamily(Family::terminal);
  CHECK(f.owner.escalatableFamilies().empty());
  CHECK(f.owner.context(f.session) == kReadOnlyBash);
}

TEST_CASE("onChange is called once per registration and per disposal", "[registry][onChange]") {
  Fixture f;
  int calls = 0;
  Disposer listener = f.owner.onChange([&calls] { ++calls; });
  CHECK(listener.active());
  CHECK(calls == 0); // adding a listener is not a registry change

  Disposer a = f.owner.registerEnforcedFamily(Family::filesystem);
  CHECK(calls == 1);
  Disposer b = f.owner.registerEnforcedFamily(Family::filesystem); // no visible change, still a change
  CHECK(calls == 2);
  Disposer c = f.owner.registerEscalatableFamily(Family::terminal);
  CHECK(calls == 3);
  b.dispose();
  CHECK(calls == 4);
  b.dispose();
  CHECK(calls == 4); // a second dispose changes nothing
  Disposer moved = std::move(a);
  CHECK(calls == 4);    // a move changes nothing
  moved = std::move(c); // disposes the filesystem contribution: one change
  CHECK(calls == 5);
  moved.dispose();
  CHECK(calls == 6);

  SECTION("two listeners are both called") {
    int other_calls = 0;
    Disposer second = f.owner.onChange([&other_calls] { ++other_calls; });
    Disposer d = f.owner.registerEnforcedFamily(Family::bash);
    CHECK(calls == 7);
    CHECK(other_calls == 1);
    second.dispose();
    d.dispose();
    CHECK(calls == 8);
    CHECK(other_calls == 1);
  }
  SECTION("no call after the listener's Disposer is disposed") {
    listener.dispose();
    CHECK_FALSE(listener.active());
    Disposer d = f.owner.registerEnforcedFamily(Family::bash);
    d.dispose();
    CHECK(calls == 6);
  }
  SECTION("no call after the listener's Disposer is destroyed") {
    { Disposer gone = std::move(listener); }
    Disposer d = f.owner.registerEnforcedFamily(Family::bash);
    CHECK(calls == 6);
  }
}

TEST_CASE("a listener may call back into the owner and sees the change", "[registry][onChange]") {
  Fixture f;
  std::vector<std::string> seen;
  std::vector<FamilySet> enforced_seen;
  Disposer listener = f.owner.onChange([&] {
    seen.push_back(f.owner.context(f.session));
    enforced_seen.push_back(f.owner.enforcedFamilies());
    (void)f.owner.resolve(f.session);
  });
  Disposer bash = f.owner.registerEnforcedFamily(Family::bash);
  Disposer offer = f.owner.registerEscalatableFamily(Family::bash);
  offer.dispose();
  bash.dispose();
  CHECK(seen == std::vector<std::string>{kReadOnlyBash, kReadOnlyBashEscalating, kReadOnlyBash, ""});
  CHECK(enforced_seen ==
        std::vector<FamilySet>{FamilySet{Family::bash}, FamilySet{Family::bash}, FamilySet{Family::bash}, FamilySet{}});
}

TEST_CASE("a listener may dispose itself while it runs", "[registry][onChange]") {
  Fixture f;
  int calls = 0;
  Disposer listener;
  listener = f.owner.onChange([&] {
    ++calls;
    listener.dispose();
  });
  Disposer a = f.owner.registerEnforcedFamily(Family::bash);
  Disposer b = f.owner.registerEnforcedFamily(Family::terminal);
  CHECK(calls == 1);
  CHECK_FALSE(listener.active());
}

TEST_CASE("onChange refuses an empty listener", "[registry][onChange]") {
  const dsh::test::TempDir tmp;
  dsh::PolicyOwner owner(dsh::PolicyConfig{dsh::SandboxMode::read_only, tmp.path(), "DSH"});
  std::string message;
  try {
    const dsh::Disposer listener = owner.onChange(std::function<void()>());
  } catch (const dsh::ConfigError& error) {
    message = error.what();
  }
  CHECK(message == "PolicyOwner::onChange: expected a callable listener; found an empty std::function");
  const dsh::Disposer bash = owner.registerEnforcedFamily(dsh::Family::bash); // today: std::terminate here
  CHECK(owner.enforcedFamilies() == dsh::FamilySet{dsh::Family::bash});
}
