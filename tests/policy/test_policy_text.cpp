// The sandbox:policy text of docs/contract.md#the-model-text, byte for byte: 3 modes x 7 non-empty enforced sets x
// 8 escalatable sets (168 cases) and the empty registry, rendered directly and through
// PolicyOwner::context on a real dsh::Session.
//
// The expected strings are written out literally below: one per enforced set and mode (21),
// and one per escalatable set in read-only with all three families enforced (8). Every other
// case is checked against those literals by the rule docs/contract.md#the-model-text states:
//   * workspace-write and danger-full-access ignore escalation: the text is the literal of the
//     enforced set;
//   * read-only names as escalatable only E = escalatable & enforced: the text is the literal of
//     the enforced set, and, when E is not empty, one space and the escalation sentence of E
//     (cut from the 8 escalation literals after their common read-only prefix).
// The rule only concatenates literal pieces; nothing here calls the renderer to build an
// expectation.
#include "support/catch.hpp"
#include "support/temp_dir.hpp"

#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace dsh;

// A family set as a bit mask: 1 = filesystem, 2 = bash, 4 = terminal.
enum FamilyBits : int { kFilesystem = 1, kBash = 2, kTerminal = 4, kAll = 7 };

// The root of every literal below; the owner-based cases put the real root in its place.
constexpr std::string_view kLiteralRoot = "\"/home/me/project\"";

struct EnforcedRow {
  int mask;
  std::string_view read_only;
  std::string_view workspace_write;
  std::string_view danger_full_access;
};

// Indexed by mask - 1.
constexpr std::array<EnforcedRow, 7> kEnforced{{
    {kFilesystem,
     "Current DSH file policy: read-only. The write and edit tools cannot modify files in the standing mode.",
     "Current DSH file policy: workspace-write. The write and edit tools may modify files under the session "
     "workspace: \"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit tools."},
    {kBash, "Current DSH file policy: read-only. One-shot bash commands cannot modify files in the standing mode.",
     "Current DSH file policy: workspace-write. One-shot bash commands may modify files under the session "
     "workspace: \"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict one-shot bash commands."},
    {kFilesystem | kBash,
     "Current DSH file policy: read-only. The write and edit tools and one-shot bash commands cannot modify files "
     "in the standing mode.",
     "Current DSH file policy: workspace-write. The write and edit tools and one-shot bash commands may modify "
     "files under the session workspace: \"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit tools "
     "or one-shot bash commands."},
    {kTerminal, "Current DSH file policy: read-only. Terminal sessions cannot modify files in the standing mode.",
     "Current DSH file policy: workspace-write. Terminal sessions may modify files under the session workspace: "
     "\"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict terminal sessions."},
    {kFilesystem | kTerminal,
     "Current DSH file policy: read-only. The write and edit tools and terminal sessions cannot modify files in "
     "the standing mode.",
     "Current DSH file policy: workspace-write. The write and edit tools and terminal sessions may modify files "
     "under the session workspace: \"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit tools "
     "or terminal sessions."},
    {kBash | kTerminal,
     "Current DSH file policy: read-only. One-shot bash commands and terminal sessions cannot modify files in the "
     "standing mode.",
     "Current DSH file policy: workspace-write. One-shot bash commands and terminal sessions may modify files "
     "under the session workspace: \"/home/me/project\". Some platform temporary areas may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict one-shot bash commands "
     "or terminal sessions."},
    {kAll,
     "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
     "cannot modify files in the standing mode.",
     "Current DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, and terminal "
     "sessions may modify files under the session workspace: \"/home/me/project\". Some platform temporary areas "
     "may also be writable.",
     "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit tools, "
     "one-shot bash commands, or terminal sessions."},
}};

// Read-only with all three enforced, indexed by the escalatable mask (0..7).
constexpr std::array<std::string_view, 8> kEscalation{{
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools, do not refuse a required "
    "modification from this standing mode alone: attempt it normally and follow the tool's denial and escalation "
    "guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For one-shot bash commands, do not refuse a required modification "
    "from this standing mode alone: attempt it normally and follow the tool's denial and escalation guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools and one-shot bash commands, do not "
    "refuse a required modification from this standing mode alone: attempt it normally and follow the tool's "
    "denial and escalation guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For terminal sessions, do not refuse a required modification from "
    "this standing mode alone: attempt it normally and follow the tool's denial and escalation guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools and terminal sessions, do not refuse "
    "a required modification from this standing mode alone: attempt it normally and follow the tool's denial and "
    "escalation guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For one-shot bash commands and terminal sessions, do not refuse a "
    "required modification from this standing mode alone: attempt it normally and follow the tool's denial and "
    "escalation guidance.",
    "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
    "cannot modify files in the standing mode. For the write and edit tools, one-shot bash commands, and terminal "
    "sessions, do not refuse a required modification from this standing mode alone: attempt it normally and "
    "follow the tool's denial and escalation guidance.",
}};

constexpr std::array<SandboxMode, 3> kModes{SandboxMode::read_only, SandboxMode::workspace_write,
                                            SandboxMode::danger_full_access};

FamilySet set_of(int mask) {
  FamilySet set;
  if ((mask & kFilesystem) != 0) {
    set.insert(Family::filesystem);
  }
  if ((mask & kBash) != 0) {
    set.insert(Family::bash);
  }
  if ((mask & kTerminal) != 0) {
    set.insert(Family::terminal);
  }
  return set;
}

// The escalation sentence of `mask` (non-zero): its literal after "<read-only, all enforced> ".
std::string escalation_sentence(int mask) {
  const std::string prefix = std::string(kEscalation[0]) + " ";
  const std::string_view full = kEscalation[static_cast<std::size_t>(mask)];
  REQUIRE(full.substr(0, prefix.size()) == prefix);
  return std::string(full.substr(prefix.size()));
}

// docs/contract.md#the-model-text as the rule stated at the top of this file, over the literals.
std::string expected_text(SandboxMode mode, int enforced, int escalatable) {
  if (enforced == 0) {
    return {};
  }
  const EnforcedRow& row = kEnforced[static_cast<std::size_t>(enforced - 1)];
  REQUIRE(row.mask == enforced);
  switch (mode) {
  case SandboxMode::workspace_write:
    return std::string(row.workspace_write);
  case SandboxMode::danger_full_access:
    return std::string(row.danger_full_access);
  case SandboxMode::read_only:
    break;
  }
  const int named = escalatable & enforced;
  if (named == 0) {
    return std::string(row.read_only);
  }
  return std::string(row.read_only) + " " + escalation_sentence(named);
}

// Replaces the one occurrence of `from` in `text` by `to`.
std::string replace_once(std::string text, std::string_view from, std::string_view to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.replace(at, from.size(), to);
}

// Replaces every occurrence of `from` in `text` by `to`; returns how many there were in `count`.
std::string replace_all(std::string text, std::string_view from, std::string_view to, int* count) {
  *count = 0;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
    ++*count;
  }
  return text;
}

dsh::ResolvedPolicy literal_policy(SandboxMode mode) {
  return dsh::ResolvedPolicy{mode, "/home/me/project", dsh::ModeSource::deployment, dsh::RootSource::deployment};
}

} // namespace

TEST_CASE("the literal tables are what the text rule composes", "[text]") {
  // A guard on the test's own data: every literal is one line, and each row is in mask order.
  for (std::size_t i = 0; i < kEnforced.size(); ++i) {
    CHECK(kEnforced[i].mask == static_cast<int>(i) + 1);
    for (std::string_view text :
         {kEnforced[i].read_only, kEnforced[i].workspace_write, kEnforced[i].danger_full_access}) {
      CHECK(text.find('\n') == std::string_view::npos);
      CHECK(text.substr(0, 23) == "Current DSH file policy");
    }
  }
  CHECK(kEscalation[0] == kEnforced[kAll - 1].read_only);
  CHECK(dsh::SANDBOX_POLICY_CONTEXT == "sandbox:policy");
}

TEST_CASE("the contract's examples render byte for byte", "[text]") {
  const FamilySet all = FamilySet::all();
  const FamilySet escalatable{Family::filesystem, Family::bash};
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::read_only), all, escalatable) ==
        "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal "
        "sessions cannot modify files in the standing mode. For the write and edit tools and one-shot bash "
        "commands, do not refuse a required modification from this standing mode alone: attempt it normally and "
        "follow the tool's denial and escalation guidance.");
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::workspace_write), all, escalatable) ==
        "Current DSH file policy: workspace-write. The write and edit tools, one-shot bash commands, and terminal "
        "sessions may modify files under the session workspace: \"/home/me/project\". Some platform temporary "
        "areas may also be writable.");
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::danger_full_access), all, escalatable) ==
        "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict the write and edit "
        "tools, one-shot bash commands, or terminal sessions.");
}

TEST_CASE("render_policy_context: 3 modes x 7 enforced x 8 escalatable", "[text]") {
  int cases = 0;
  for (SandboxMode mode : kModes) {
    for (int enforced = 1; enforced <= kAll; ++enforced) {
      for (int escalatable = 0; escalatable <= kAll; ++escalatable) {
        INFO("mode " << dsh::to_string(mode) << ", enforced mask " << enforced << ", escalatable mask " << escalatable);
        const std::string text =
            dsh::render_policy_context(literal_policy(mode), set_of(enforced), set_of(escalatable));
        CHECK(text == expected_text(mode, enforced, escalatable));
        // The default host label is "DSH": passing it explicitly changes nothing.
        CHECK(dsh::render_policy_context(literal_policy(mode), set_of(enforced), set_of(escalatable), "DSH") == text);
        ++cases;
      }
    }
  }
  CHECK(cases == 168);
}

TEST_CASE("render_policy_context: nothing enforced renders nothing, in every mode", "[text]") {
  for (SandboxMode mode : kModes) {
    for (int escalatable = 0; escalatable <= kAll; ++escalatable) {
      INFO("mode " << dsh::to_string(mode) << ", escalatable mask " << escalatable);
      CHECK(dsh::render_policy_context(literal_policy(mode), FamilySet{}, set_of(escalatable)).empty());
      CHECK(dsh::render_policy_context(literal_policy(mode), FamilySet{}, set_of(escalatable), "Acme").empty());
    }
  }
}

TEST_CASE("render_policy_context: the host label is configurable", "[text]") {
  const FamilySet all = FamilySet::all();
  // Written out in full for the two places the label appears twice or once.
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::danger_full_access), all, {}, "Acme") ==
        "Current Acme file policy: danger-full-access. The Acme file sandbox does not restrict the write and edit "
        "tools, one-shot bash commands, or terminal sessions.");
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::read_only), {Family::terminal}, {Family::terminal},
                                   "Acme") ==
        "Current Acme file policy: read-only. Terminal sessions cannot modify files in the standing mode. For "
        "terminal sessions, do not refuse a required modification from this standing mode alone: attempt it "
        "normally and follow the tool's denial and escalation guidance.");
  CHECK(dsh::render_policy_context(literal_policy(SandboxMode::workspace_write), {Family::bash}, {}, "Acme") ==
        "Current Acme file policy: workspace-write. One-shot bash commands may modify files under the session "
        "workspace: \"/home/me/project\". Some platform temporary areas may also be writable.");

  // Every other case: the DSH literal with each "DSH" (once, twice in danger-full-access) made "Acme".
  for (SandboxMode mode : kModes) {
    for (int enforced = 1; enforced <= kAll; ++enforced) {
      for (int escalatable = 0; escalatable <= kAll; ++escalatable) {
        INFO("mode " << dsh::to_string(mode) << ", enforced mask " << enforced << ", escalatable mask " << escalatable);
        int labels = 0;
        const std::string expected = replace_all(expected_text(mode, enforced, escalatable), "DSH", "Acme", &labels);
        CHECK(labels == (mode == SandboxMode::danger_full_access ? 2 : 1));
        CHECK(dsh::render_policy_context(literal_policy(mode), set_of(enforced), set_of(escalatable), "Acme") ==
              expected);
      }
    }
  }
}

TEST_CASE("PolicyOwner::context: 3 modes x 7 enforced x 8 escalatable on a real session", "[text][owner]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "work" / "project");
  // The oracle: the kernel's own identity of the directory (realpath), independent of the library.
  const std::string canonical = std::filesystem::canonical(tmp / "work" / "project").string();
  REQUIRE(dsh::test::plain_ascii(canonical));
  const std::string root_literal = "\"" + canonical + "\"";

  // A non-canonical spelling of the same directory as the session cwd.
  const std::string cwd = (tmp.path() / "work" / "." / "project" / ".." / "project" / "").string();
  for (const std::string_view label : {std::string_view("DSH"), std::string_view("Acme")}) {
    int cases = 0;
    for (SandboxMode mode : kModes) {
      for (int enforced = 1; enforced <= kAll; ++enforced) {
        for (int escalatable = 0; escalatable <= kAll; ++escalatable) {
          INFO("label " << label << ", mode " << dsh::to_string(mode) << ", enforced mask " << enforced
                        << ", escalatable mask " << escalatable);
          // The mode comes from the session's own switch; the deployment default is the other end.
          dsh::PolicyConfig config;
          config.mode = mode == SandboxMode::read_only ? SandboxMode::danger_full_access : SandboxMode::read_only;
          config.workspace_root = tmp.path();
          config.host_label = std::string(label);
          dsh::PolicyOwner owner(config);
          dsh::Session session(dsh::SessionHeader{"s-1", cwd, 0});
          dsh::set_sandbox_mode(session, mode);

          std::vector<dsh::Disposer> contributions;
          // Escalatable first for families that are not enforced: they must stay unnamed.
          for (Family family : dsh::FAMILIES) {
            if ((escalatable & (1 << static_cast<int>(family))) != 0) {
              contributions.push_back(owner.registerEscalatableFamily(family));
            }
          }
          for (Family family : dsh::FAMILIES) {
            if ((enforced & (1 << static_cast<int>(family))) != 0) {
              contributions.push_back(owner.registerEnforcedFamily(family));
            }
          }
          CHECK(owner.enforcedFamilies() == set_of(enforced));
          CHECK(owner.escalatableFamilies() == set_of(enforced & escalatable));

          std::string expected = expected_text(mode, enforced, escalatable);
          if (mode == SandboxMode::workspace_write) {
            expected = replace_once(expected, kLiteralRoot, root_literal);
          }
          int labels = 0;
          expected = replace_all(expected, "DSH", label, &labels);
          CHECK(owner.context(session) == expected);
          // context renders what resolve decides, without building a ResolvedPolicy.
          CHECK(dsh::render_policy_context(owner.resolve(session), owner.enforcedFamilies(),
                                           owner.escalatableFamilies(), label) == expected);
          ++cases;
        }
      }
    }
    CHECK(cases == 168);
  }
}

TEST_CASE("PolicyOwner::context: the empty registry renders nothing, in every mode", "[text][owner]") {
  const dsh::test::TempDir tmp;
  for (SandboxMode mode : kModes) {
    INFO("mode " << dsh::to_string(mode));
    dsh::PolicyOwner owner(dsh::PolicyConfig{mode, tmp.path(), "DSH"});
    const dsh::Session by_default(dsh::SessionHeader{"s-default", std::nullopt, 0});
    dsh::Session switched(dsh::SessionHeader{"s-switched", tmp.path().string(), 0});
    dsh::set_sandbox_mode(switched, mode);
    CHECK(owner.context(by_default).empty());
    CHECK(owner.context(switched).empty());

    // Escalation offered for every family, none enforced: still nothing.
    std::vector<dsh::Disposer> offers;
    offers.reserve(dsh::FAMILIES.size());
    for (Family family : dsh::FAMILIES) {
      offers.push_back(owner.registerEscalatableFamily(family));
    }
    CHECK(owner.enforcedFamilies().empty());
    CHECK(owner.escalatableFamilies().empty());
    CHECK(owner.context(by_default).empty());

    // Enforced then withdrawn: back to nothing.
    {
      const dsh::Disposer enforced = owner.registerEnforcedFamily(Family::bash);
      CHECK_FALSE(owner.context(by_default).empty());
    }
    CHECK(owner.context(by_default).empty());
    CHECK(owner.context(switched).empty());
  }
}

TEST_CASE("PolicyOwner::context: a session without cwd shows the deployment root", "[text][owner]") {
  const dsh::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "deploy");
  const std::string canonical = std::filesystem::canonical(tmp / "deploy").string();
  REQUIRE(dsh::test::plain_ascii(canonical));

  dsh::PolicyOwner owner(dsh::PolicyConfig{SandboxMode::workspace_write, tmp / "deploy" / "", "DSH"});
  const dsh::Disposer bash = owner.registerEnforcedFamily(Family::bash);
  const dsh::Session no_cwd(dsh::SessionHeader{"s", std::nullopt, 0});
  const dsh::Session empty_cwd(dsh::SessionHeader{"s", std::string(), 0});
  const std::string expected = "Current DSH file policy: workspace-write. One-shot bash commands may modify files "
                               "under the session workspace: \"" +
                               canonical + "\". Some platform temporary areas may also be writable.";
  CHECK(owner.context(no_cwd) == expected);
  CHECK(owner.context(empty_cwd) == expected);
}
