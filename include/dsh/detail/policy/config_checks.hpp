/// @file
/// The checks of a `PolicyConfig`: each value a deployment may set, refused with a message naming
/// the key, the expectation and the value.
#pragma once

#include <dsh/detail/policy/protected_paths.hpp>
#include <dsh/detail/text/expectation.hpp>
#include <dsh/errors.hpp>
#include <dsh/vocabulary.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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
  const bool bad_character = std::any_of(label.begin(), label.end(), [](char c) {
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
template <class Unused = void>
[[nodiscard]] const std::string& config_string(const nlohmann::json& value, std::string_view key) {
  if (!value.is_string()) {
    throw ConfigError(expectation_message("PolicyConfig key \"" + std::string(key) + "\"", "a string", value));
  }
  return value.get_ref<const std::string&>();
}

/// Throws ConfigError unless every name `rules` disables is one of the default list and every
/// extra path is non-empty, holds no NUL and no ".." component, and, when relative, names
/// something beneath the root rather than the root itself.
inline void require_valid_protected_rules(const ProtectedPathRules& rules) {
  for (const std::string& name : rules.disabled_defaults) {
    if (std::find(PROTECTED_DEFAULTS.begin(), PROTECTED_DEFAULTS.end(), name) == PROTECTED_DEFAULTS.end()) {
      throw ConfigError(
          expectation_message("PolicyConfig key \"protectedPaths.disable\"", protected_defaults_vocabulary(), name));
    }
  }
  for (const std::filesystem::path& path : rules.extra) {
    const std::string& text = path.native();
    const bool climbs =
        std::any_of(path.begin(), path.end(), [](const std::filesystem::path& part) { return part == ".."; });
    const std::string clean = lexically_clean(path);
    if (text.empty() || text.find('\0') != std::string::npos || climbs || clean == ".") {
      throw ConfigError(expectation_message("PolicyConfig key \"protectedPaths.extra\"",
                                            "a non-empty path without NUL characters or \"..\" components, naming "
                                            "something beneath the workspace root",
                                            text));
    }
  }
}

/// Reads the value of the configuration key "protectedPaths": an object with the optional keys
/// "defaults" (a boolean), "disable" (an array of default names) and "extra" (an array of
/// paths). Throws ConfigError naming the key, the expectation and the value otherwise.
template <class Unused = void> [[nodiscard]] ProtectedPathRules protected_rules_from_json(const nlohmann::json& json) {
  constexpr std::string_view expected_object =
      "an object with the optional keys \"defaults\", \"disable\" and \"extra\"";
  if (!json.is_object()) {
    throw ConfigError(expectation_message("PolicyConfig key \"protectedPaths\"", expected_object, json));
  }
  const auto strings = [](const nlohmann::json& value, std::string_view key) {
    const std::string context = "PolicyConfig key \"protectedPaths." + std::string(key) + "\"";
    if (!value.is_array() ||
        !std::all_of(value.begin(), value.end(), [](const nlohmann::json& e) { return e.is_string(); })) {
      throw ConfigError(expectation_message(context, "an array of strings", value));
    }
    std::vector<std::string> out;
    out.reserve(value.size());
    for (const nlohmann::json& element : value) {
      out.push_back(element.get_ref<const std::string&>());
    }
    return out;
  };
  ProtectedPathRules rules;
  for (const auto& [key, value] : json.get_ref<const nlohmann::json::object_t&>()) {
    if (key == "defaults") {
      if (!value.is_boolean()) {
        throw ConfigError(expectation_message("PolicyConfig key \"protectedPaths.defaults\"", "a boolean", value));
      }
      rules.defaults = value.template get<bool>();
    } else if (key == "disable") {
      rules.disabled_defaults = strings(value, key);
    } else if (key == "extra") {
      for (std::string& path : strings(value, key)) {
        rules.extra.emplace_back(std::move(path));
      }
    } else {
      throw ConfigError(expectation_message("PolicyConfig key \"protectedPaths\"", expected_object, key));
    }
  }
  require_valid_protected_rules(rules);
  return rules;
}

} // namespace dsh::detail
