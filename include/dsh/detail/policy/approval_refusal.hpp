/// @file
/// The text of a refused sandbox escalation (`PolicyOwner::validateApproval`).
#pragma once

#include <dsh/vocabulary.hpp>

#include <span>
#include <string>
#include <utility>

namespace dsh::detail {

/// enforced and escalatable` (when `offered` is false), or `sandbox escalation to <approved> is
/// not strictly wider than this call's current <current> mode; ` followed by `approve one of:
/// <the wider modes, comma-separated>` or, in the widest mode, `no mode is wider, so the call
/// needs no approval`.
[[nodiscard]] inline std::string escalation_refusal(SandboxMode approved, SandboxMode current, Family family,
                                                    bool offered) {
  std::string text = "sandbox escalation to ";
  append_enum_label(text, approved);
  if (!offered) {
    text += " is not offered for ";
    append_enum_label(text, family);
    text += ": that family is not both enforced and escalatable";
    return text;
  }
  text += " is not strictly wider than this call's current ";
  append_enum_label(text, current);
  text += " mode; ";
  const std::span<const SandboxMode> wider = wider_modes(current);
  if (wider.empty()) {
    text += "no mode is wider, so the call needs no approval";
    return text;
  }
  text += "approve one of: ";
  const char* separator = "";
  for (const SandboxMode mode : wider) {
    text.append(std::exchange(separator, ", ")).append(to_string(mode));
  }
  return text;
}

} // namespace dsh::detail
