/// @file
/// The string tables of the policy vocabulary (SandboxMode, Family, ModeSource, RootSource) and
/// the JSON conversions built on them.
// Included by <dsh/sandbox_policy.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/sandbox_policy.hpp>

#ifndef DSH_DETAIL_VOCABULARY_HPP
#define DSH_DETAIL_VOCABULARY_HPP

namespace dsh::detail {

template <> struct EnumTable<SandboxMode> {
  static constexpr std::string_view what = "a sandbox mode";
  static constexpr std::array<EnumEntry<SandboxMode>, 3> entries{{
      {SandboxMode::read_only, "read-only"},
      {SandboxMode::workspace_write, "workspace-write"},
      {SandboxMode::danger_full_access, "danger-full-access"},
  }};
};

template <> struct EnumTable<Family> {
  static constexpr std::string_view what = "a family";
  static constexpr std::array<EnumEntry<Family>, 3> entries{{
      {Family::filesystem, "filesystem"},
      {Family::bash, "bash"},
      {Family::terminal, "terminal"},
  }};
};

template <> struct EnumTable<ModeSource> {
  static constexpr std::string_view what = "a mode source";
  static constexpr std::array<EnumEntry<ModeSource>, 3> entries{{
      {ModeSource::approved, "approved"},
      {ModeSource::session, "session"},
      {ModeSource::deployment, "deployment"},
  }};
};

template <> struct EnumTable<RootSource> {
  static constexpr std::string_view what = "a root source";
  static constexpr std::array<EnumEntry<RootSource>, 2> entries{{
      {RootSource::session, "session"},
      {RootSource::deployment, "deployment"},
  }};
};

/// Returns the enum value named by the JSON string `value`; throws ConfigError naming
/// `context`, the vocabulary and `value` when it is not a string of the vocabulary.
template <TabledEnum E> [[nodiscard]] E enum_from_json(const nlohmann::json& value, std::string_view context) {
  if (value.is_string()) {
    if (auto parsed = enum_parse<E>(value.get_ref<const std::string&>())) {
      return *parsed;
    }
  }
  throw ConfigError(expectation_message(context, enum_vocabulary<E>(), value));
}

/// Exactly `nlohmann::json`. The `to_json`/`from_json` overloads are templates constrained to
/// it rather than plain functions so that a translation unit that never converts does not
/// instantiate the nlohmann machinery they use; the constraint keeps them to the one type the
/// plain functions took.
template <class J>
concept ExactlyJson = std::same_as<J, nlohmann::json>;

} // namespace dsh::detail

#endif // DSH_DETAIL_VOCABULARY_HPP
