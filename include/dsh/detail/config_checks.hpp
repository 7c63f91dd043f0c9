/// @file
/// The checks of a `PolicyConfig`: each value a deployment may set, refused with a message naming
/// the key, the expectation and the value.
// Included by <dsh/sandbox_policy.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/sandbox_policy.hpp>

#ifndef DSH_DETAIL_CONFIG_CHECKS_HPP
#define DSH_DETAIL_CONFIG_CHECKS_HPP

namespace dsh::detail {

/// Throws ConfigError unless `root` is a usable workspace root: non-empty, no NUL character.
inline void require_valid_root(const std::filesystem::path& root) {
  const std::string& text = root.native();
  if (text.empty() || text.find('\0') != std::string::npos) {
    throw ConfigError(
        expectation_message("PolicyConfig key \"workspaceRoot\"", "a non-empty path without NUL characters", text));
  }
}

/// Throws ConfigError unless `label` is non-empty UTF-8 and holds no control character and no `"`.
inline void require_valid_label(std::string_view label) {
  const bool bad_character = std::ranges::any_of(label, [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7F || c == '"';
  });
  if (label.empty() || bad_character || !is_utf8(label)) {
    throw ConfigError(expectation_message("PolicyConfig key \"hostLabel\"",
                                          "a non-empty UTF-8 string without control characters or '\"'",
                                          std::string(label)));
  }
}

/// Throws ConfigError unless `mode` is one of the three modes.
inline void require_valid_mode(SandboxMode mode) {
  if (to_string(mode).empty()) {
    throw ConfigError(
        expectation_message("PolicyConfig key \"mode\"", enum_vocabulary<SandboxMode>(), static_cast<int>(mode)));
  }
}

/// Returns the string value of a configuration key; throws ConfigError if it is not a string.
[[nodiscard]] inline const std::string& config_string(const nlohmann::json& value, std::string_view key) {
  if (!value.is_string()) {
    throw ConfigError(expectation_message("PolicyConfig key \"" + std::string(key) + "\"", "a string", value));
  }
  return value.get_ref<const std::string&>();
}

} // namespace dsh::detail

#endif // DSH_DETAIL_CONFIG_CHECKS_HPP
