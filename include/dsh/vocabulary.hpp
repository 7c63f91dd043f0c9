/// @file
/// The policy's vocabulary: the sandbox modes, the families, the sources of a resolved mode and
/// root, their spellings and JSON conversions, and `FamilySet`. A base header: the internals of
/// the policy, the session log and the fence include it rather than <dsh/sandbox_policy.hpp>.
#pragma once

#include <dsh/detail/text/enum_table.hpp>
#include <dsh/detail/text/expectation.hpp>
#include <dsh/errors.hpp>

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsh {

// Errors: <dsh/errors.hpp> (Error, ConfigError, InvariantViolation, ProtectedPathError,
// SystemError), included above so that the base headers below this one can throw them too.

// ---------------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------------

/// How far the model's tools may modify files.
enum class SandboxMode : std::uint8_t { read_only, workspace_write, danger_full_access };

/// A family of operations that can modify files, in canonical order.
enum class Family : std::uint8_t { filesystem, bash, terminal };

/// Which input decided a resolved mode.
enum class ModeSource : std::uint8_t { approved, session, deployment };

/// Which input decided a resolved workspace root.
enum class RootSource : std::uint8_t { session, deployment };

/// The `type` of the event that switches a session's sandbox mode.
inline constexpr std::string_view SANDBOX_MODE_EVENT = "sandbox/mode";

} // namespace dsh

// The string tables of the enums above: the constants and conversions below read them.
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

namespace dsh {

/// Every sandbox mode, from narrowest to widest.
inline constexpr std::array<SandboxMode, 3> SANDBOX_MODES = detail::enum_values<SandboxMode>();
/// Every family, in canonical order.
inline constexpr std::array<Family, 3> FAMILIES = detail::enum_values<Family>();

/// Returns "read-only", "workspace-write" or "danger-full-access"; "" for a value outside the enum.
[[nodiscard]] constexpr std::string_view to_string(SandboxMode mode) noexcept { return detail::enum_name(mode); }
/// Returns "filesystem", "bash" or "terminal"; "" for a value outside the enum.
[[nodiscard]] constexpr std::string_view to_string(Family family) noexcept { return detail::enum_name(family); }
/// Returns "approved", "session" or "deployment"; "" for a value outside the enum.
[[nodiscard]] constexpr std::string_view to_string(ModeSource source) noexcept { return detail::enum_name(source); }
/// Returns "session" or "deployment"; "" for a value outside the enum.
[[nodiscard]] constexpr std::string_view to_string(RootSource source) noexcept { return detail::enum_name(source); }

/// Returns the names of `values` joined as `separator` joins them, with `last` before the final
/// one: `names_of(SANDBOX_MODES, ", ", " or ")` is "read-only, workspace-write or
/// danger-full-access". For texts that list the vocabulary (usage texts) from its tables.
template <class E, std::size_t N>
[[nodiscard]] std::string names_of(const std::array<E, N>& values, std::string_view separator, std::string_view last) {
  std::string text;
  for (std::size_t i = 0; i < N; ++i) {
    text.append(i == 0 ? std::string_view() : i + 1 == N ? last : separator).append(to_string(values[i]));
  }
  return text;
}

/// Returns the mode spelled exactly `text` (case-sensitive, no trimming), or nullopt.
[[nodiscard]] constexpr std::optional<SandboxMode> parse_sandbox_mode(std::string_view text) noexcept {
  return detail::enum_parse<SandboxMode>(text);
}
/// Returns the family spelled exactly `text` (case-sensitive, no trimming), or nullopt.
[[nodiscard]] constexpr std::optional<Family> parse_family(std::string_view text) noexcept {
  return detail::enum_parse<Family>(text);
}

/// Returns true if `mode` lets a call modify strictly more than `than` (read-only <
/// workspace-write < danger-full-access); false when they are equal, when `mode` is narrower,
/// and when either is a value outside the enum.
[[nodiscard]] constexpr bool is_strictly_wider(SandboxMode mode, SandboxMode than) noexcept {
  const std::size_t rank = detail::enum_index(mode);
  const std::size_t than_rank = detail::enum_index(than);
  return rank < SANDBOX_MODES.size() && than_rank < rank;
}

/// Returns the modes strictly wider than `mode`, narrowest first: a view of SANDBOX_MODES
/// (static storage). Empty for danger-full-access and for a value outside the enum.
[[nodiscard]] constexpr std::span<const SandboxMode> wider_modes(SandboxMode mode) noexcept {
  const std::size_t rank = detail::enum_index(mode);
  // From a pointer and a count rather than from the array: the array constructor's range
  // constraints cost every includer a tenth of a second at -O2 (GCC 12).
  return rank < SANDBOX_MODES.size()
             ? std::span<const SandboxMode>(SANDBOX_MODES.data() + rank + 1, SANDBOX_MODES.size() - rank - 1)
             : std::span<const SandboxMode>();
}

/// Stores the mode's string in `json`.
template <detail::ExactlyJson J> void to_json(J& json, SandboxMode mode) { json = to_string(mode); }
/// Reads a mode from its string; throws ConfigError naming the vocabulary and the value otherwise.
template <detail::ExactlyJson J> void from_json(const J& json, SandboxMode& mode) {
  mode = detail::enum_from_json<SandboxMode>(json, "sandbox mode");
}
/// Stores the family's string in `json`.
template <detail::ExactlyJson J> void to_json(J& json, Family family) { json = to_string(family); }
/// Reads a family from its string; throws ConfigError naming the vocabulary and the value otherwise.
template <detail::ExactlyJson J> void from_json(const J& json, Family& family) {
  family = detail::enum_from_json<Family>(json, "family");
}
/// Stores the mode source's string in `json`.
template <detail::ExactlyJson J> void to_json(J& json, ModeSource source) { json = to_string(source); }
/// Reads a mode source from its string; throws ConfigError otherwise.
template <detail::ExactlyJson J> void from_json(const J& json, ModeSource& source) {
  source = detail::enum_from_json<ModeSource>(json, "mode source");
}
/// Stores the root source's string in `json`.
template <detail::ExactlyJson J> void to_json(J& json, RootSource source) { json = to_string(source); }
/// Reads a root source from its string; throws ConfigError otherwise.
template <detail::ExactlyJson J> void from_json(const J& json, RootSource& source) {
  source = detail::enum_from_json<RootSource>(json, "root source");
}

/// A set of families; iterates in canonical order (filesystem, bash, terminal).
class FamilySet {
public:
  /// Iterates the members of a set in canonical order.
  class iterator {
  public:
    using value_type = Family;
    using difference_type = std::ptrdiff_t;

    constexpr iterator() noexcept = default;
    constexpr explicit iterator(std::uint8_t remaining) noexcept : remaining_(remaining) {}
    /// Returns the member this iterator is at.
    [[nodiscard]] constexpr Family operator*() const noexcept {
      return static_cast<Family>(std::countr_zero(static_cast<unsigned>(remaining_)));
    }
    /// Advances to the next member in canonical order.
    constexpr iterator& operator++() noexcept {
      remaining_ = static_cast<std::uint8_t>(remaining_ & (remaining_ - 1U));
      return *this;
    }
    /// Advances and returns the previous position.
    constexpr iterator operator++(int) noexcept {
      iterator before = *this;
      ++*this;
      return before;
    }
    [[nodiscard]] friend constexpr bool operator==(iterator, iterator) noexcept = default;

  private:
    std::uint8_t remaining_ = 0;
  };

  /// The empty set.
  constexpr FamilySet() noexcept = default;
  /// The set of the listed families.
  constexpr FamilySet(std::initializer_list<Family> families) noexcept {
    for (Family family : families) {
      insert(family);
    }
  }
  /// The set of all three families.
  [[nodiscard]] static constexpr FamilySet all() noexcept {
    return {Family::filesystem, Family::bash, Family::terminal};
  }

  /// Returns true if `family` is a member.
  [[nodiscard]] constexpr bool contains(Family family) const noexcept { return (bits_ & bit(family)) != 0; }
  /// Adds `family`; no effect if it is a member already.
  constexpr void insert(Family family) noexcept { bits_ = static_cast<std::uint8_t>(bits_ | bit(family)); }
  /// Removes `family`; no effect if it is not a member.
  constexpr void erase(Family family) noexcept { bits_ = static_cast<std::uint8_t>(bits_ & ~bit(family)); }
  /// Returns the number of members.
  [[nodiscard]] constexpr std::size_t size() const noexcept {
    return static_cast<std::size_t>(std::popcount(static_cast<unsigned>(bits_)));
  }
  /// Returns true if the set has no member.
  [[nodiscard]] constexpr bool empty() const noexcept { return bits_ == 0; }
  /// Returns an iterator to the first member in canonical order.
  [[nodiscard]] constexpr iterator begin() const noexcept { return iterator{bits_}; }
  /// Returns the end iterator.
  [[nodiscard]] constexpr iterator end() const noexcept { return iterator{}; }

  [[nodiscard]] friend constexpr bool operator==(FamilySet, FamilySet) noexcept = default;
  /// Returns the families in both sets.
  [[nodiscard]] friend constexpr FamilySet operator&(FamilySet a, FamilySet b) noexcept {
    return FamilySet(static_cast<std::uint8_t>(a.bits_ & b.bits_));
  }
  /// Returns the families in either set.
  [[nodiscard]] friend constexpr FamilySet operator|(FamilySet a, FamilySet b) noexcept {
    return FamilySet(static_cast<std::uint8_t>(a.bits_ | b.bits_));
  }

private:
  constexpr explicit FamilySet(std::uint8_t bits) noexcept : bits_(bits) {}
  [[nodiscard]] static constexpr std::uint8_t bit(Family family) noexcept {
    const auto index = static_cast<unsigned>(family);
    return index < FAMILIES.size() ? static_cast<std::uint8_t>(1U << index) : std::uint8_t{0};
  }
  std::uint8_t bits_ = 0;
};

/// Stores the set as a JSON array of family strings in canonical order.
template <detail::ExactlyJson J> void to_json(J& json, FamilySet families) {
  json = J::array();
  for (Family family : families) {
    json.push_back(to_string(family));
  }
}

} // namespace dsh
