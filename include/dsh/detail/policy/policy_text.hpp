/// @file
/// The builder of the `sandbox:policy` text (docs/contract.md#the-model-text).
#pragma once

#include <dsh/vocabulary.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace dsh::detail {

/// How the model text names each family, indexed by the family's value.
inline constexpr std::array<std::string_view, 3> FAMILY_LABELS{"the write and edit tools", "one-shot bash commands",
                                                               "terminal sessions"};
static_assert(FAMILY_LABELS.size() == FAMILIES.size());

/// Appends the labels of `families` joined as `A`, `A and B` or `A, B, and C` (with
/// `conjunction` in place of "and"), the first letter upper-cased when `sentence_start`.
inline void append_family_list(std::string& out, FamilySet families, std::string_view conjunction,
                               bool sentence_start) {
  const std::size_t count = families.size();
  const std::size_t first = out.size();
  std::size_t index = 0;
  for (Family family : families) {
    if (index > 0) {
      out += count > 2 ? ", " : " ";
      if (index + 1 == count) {
        out.append(conjunction).append(" ");
      }
    }
    out += FAMILY_LABELS[static_cast<std::size_t>(family)];
    ++index;
  }
  if (sentence_start && out.size() > first && out[first] >= 'a' && out[first] <= 'z') {
    out[first] = static_cast<char>(out[first] - 'a' + 'A');
  }
}

/// The one builder of the `sandbox:policy` text (see `render_policy_context`), from the only
/// parts of a policy the text depends on: the mode and the root's native bytes.
[[nodiscard]] inline std::string render_policy_text(SandboxMode mode, std::string_view root, FamilySet enforced,
                                                    FamilySet escalatable, std::string_view host_label) {
  if (enforced.empty()) {
    return {};
  }
  escalatable = escalatable & enforced;
  std::string text;
  text.reserve(400 + 2 * host_label.size() + root.size());
  text.append("Current ").append(host_label).append(" file policy: ").append(to_string(mode)).append(". ");
  switch (mode) {
  case SandboxMode::read_only:
    append_family_list(text, enforced, "and", true);
    text += " cannot modify files in the standing mode.";
    if (!escalatable.empty()) {
      text += " For ";
      append_family_list(text, escalatable, "and", false);
      text += ", do not refuse a required modification from this standing mode alone: attempt it normally and "
              "follow the tool's denial and escalation guidance.";
    }
    break;
  case SandboxMode::workspace_write:
    append_family_list(text, enforced, "and", true);
    text += " may modify files under the session workspace: ";
    append_json_string(text, root);
    text += ". Some platform temporary areas may also be writable.";
    break;
  case SandboxMode::danger_full_access:
    text.append("The ").append(host_label).append(" file sandbox does not restrict ");
    append_family_list(text, enforced, "or", false);
    text += ".";
    break;
  }
  return text;
}

} // namespace dsh::detail
