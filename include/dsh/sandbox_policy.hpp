/// @file
/// dsh-sandbox-policy: the single owner of an agent host's file-modification policy.
///
/// One `PolicyOwner` resolves, for every tool call, the sandbox mode and the canonical
/// workspace root; keeps the registry of enforced and escalatable families; and renders
/// the exact `sandbox:policy` text the model is shown. The per-session override is a
/// `sandbox/mode` event in the session's own log. The contract: docs/contract.md.
///
/// The header reads in the order a user meets the API: the errors; the vocabulary; sessions
/// and the fold `effective_mode`; the configuration and `PolicyOwner`; the registry and its
/// `Disposer`; the model text. The internals are in <dsh/detail/>, one file per concept.
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/enum_table.hpp>
#include <dsh/detail/epoch_time.hpp>
#include <dsh/detail/expectation.hpp>
#include <dsh/detail/json_members.hpp>
#include <dsh/detail/json_text.hpp>
#include <dsh/detail/last_event.hpp>
#include <dsh/detail/protected_paths.hpp>
#include <dsh/detail/session_concepts.hpp>
#include <dsh/errors.hpp>
#include <dsh/version.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <climits>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

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
#include <dsh/detail/vocabulary.hpp>

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
  return rank < SANDBOX_MODES.size() ? std::span<const SandboxMode>(SANDBOX_MODES).subspan(rank + 1)
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

// The internals the rest of this header is built on; they use the vocabulary above.
#include <dsh/detail/approval_refusal.hpp>
#include <dsh/detail/config_checks.hpp>
#include <dsh/detail/event_rules.hpp>
#include <dsh/detail/policy_text.hpp>
#include <dsh/detail/registry.hpp>

namespace dsh {

// ---------------------------------------------------------------------------------------------
// Sessions and the sandbox/mode event
// ---------------------------------------------------------------------------------------------

/// The immutable header of a session, written once at creation.
struct SessionHeader {
  std::string id;                 ///< The session id.
  std::optional<std::string> cwd; ///< The session workspace; absent or empty: the owner's fallback root.
  std::int64_t created_at = 0;    ///< Creation time, epoch milliseconds.
  bool operator==(const SessionHeader&) const = default;
};

/// A session the library can read: `header()` and a range of JSON events.
template <class S>
concept SessionLike = requires(const S& session) {
  { session.header() } -> std::convertible_to<const SessionHeader&>;
  { session.events() } -> detail::JsonEventRange;
};

/// A session the library can also append to.
template <class S>
concept AppendableSession = SessionLike<S> && requires(S& session, std::string_view type, nlohmann::json data) {
  session.append(type, std::move(data));
};

/// An appendable session that can also write extra envelope members beside type, seq, time
/// and data (`s.append(type, data, envelope)`), as the runtime-context snapshot's `surfaceOp` needs.
template <class S>
concept EnvelopeAppendableSession = AppendableSession<S> && detail::EnvelopeAppendable<S>;

/// A session that keeps the fold's result current as it appends, so `resolve` need not scan.
template <class S>
concept HasSandboxModeOverride = requires(const S& session) {
  { session.sandbox_mode_override() } -> std::convertible_to<std::optional<SandboxMode>>;
};
/// Checks the invariant of docs/contract.md#the-invariant on one event.
/// Returns nullopt if the event is valid (every event that is not a `sandbox/mode` object is);
/// otherwise the exact failure text: `sandbox/mode carries no mode` or
/// `sandbox/mode carries unknown mode <value as JavaScript's JSON.stringify writes it>`.
[[nodiscard]] inline std::optional<std::string> validate_event(const nlohmann::json& event) {
  return detail::mode_event_failure(event);
}

/// Checks the invariant of docs/contract.md#the-invariant; throws InvariantViolation with `validate_event`'s text
/// when the event is forged.
inline void check_event(const nlohmann::json& event) { detail::require_valid_event(event); }

/// Folds a range of events with a projection (`event -> std::optional<SandboxMode>`).
/// Returns the last non-empty projection, or nullopt when there is none. On a bidirectional
/// range it scans from the end and stops at the first match; otherwise it scans forward.
/// Throws whatever the projection throws.
template <std::ranges::input_range R, class Projection>
  requires std::invocable<Projection&, std::ranges::range_reference_t<R>> &&
      std::convertible_to<std::invoke_result_t<Projection&, std::ranges::range_reference_t<R>>,
                          std::optional<SandboxMode>>
[[nodiscard]] std::optional<SandboxMode> effective_mode(R&& events, Projection projection) {
  std::optional<SandboxMode> last;
  detail::walk_to_last(std::forward<R>(events), [&](auto&& event, bool) {
    if (std::optional<SandboxMode> mode = std::invoke(projection, event)) {
      last = mode;
      return true;
    }
    return false;
  });
  return last;
}

/// Folds a range of JSON events: returns the mode of the last `sandbox/mode` event, or nullopt
/// when there is none. Throws InvariantViolation when a `sandbox/mode` event it examines is
/// forged (the backward scan of a bidirectional range examines only the last one).
template <detail::JsonEventRange R> [[nodiscard]] std::optional<SandboxMode> effective_mode(R&& events) {
  return effective_mode(std::forward<R>(events),
                        [](const nlohmann::json& event) { return detail::switched_mode(event); });
}

/// Switches a session's mode: appends exactly one `sandbox/mode` event with
/// `data = {"mode": <mode>}`, even when the mode is unchanged. Throws what `append` throws.
template <AppendableSession S> void set_sandbox_mode(S& session, SandboxMode mode) {
  nlohmann::json data{{"mode", std::string(to_string(mode))}};
  check_event(nlohmann::json{{"type", SANDBOX_MODE_EVENT}, {"data", data}});
  session.append(SANDBOX_MODE_EVENT, std::move(data));
}

/// An in-memory session: an immutable header and an append-only vector of JSON events.
/// Not synchronized: like a `std::vector`, guard it yourself when threads share it.
class Session {
public:
  /// Creates a session from its header and earlier events; throws InvariantViolation, before
  /// storing anything, when a seed event is a forged `sandbox/mode` event.
  explicit Session(SessionHeader header, std::vector<nlohmann::json> seed = {})
      : header_(std::move(header)), events_(std::move(seed)) {
    for (const auto& event : events_) {
      if (auto mode = detail::switched_mode(event)) {
        override_ = mode;
      }
    }
  }

  /// Returns the header given at construction.
  [[nodiscard]] const SessionHeader& header() const noexcept { return header_; }
  /// Returns every event, oldest first.
  [[nodiscard]] const std::vector<nlohmann::json>& events() const noexcept { return events_; }
  /// Returns the mode of the last `sandbox/mode` event, or nullopt; O(1).
  [[nodiscard]] std::optional<SandboxMode> sandbox_mode_override() const noexcept { return override_; }

  /// Appends `{"type":type,"seq":<number of events>,"time":<now>,"data":data}`. Throws
  /// InvariantViolation, leaving the session unchanged, when it is a forged `sandbox/mode` event.
  void append(std::string_view type, nlohmann::json data) { append(type, std::move(data), nlohmann::json::object()); }

  /// Appends like `append(type, data)` with the members of `envelope` (such as
  /// `"surfaceOp":"append"`) added beside `type`, `seq`, `time` and `data`. Throws ConfigError,
  /// leaving the session unchanged, when `envelope` is not an object or names one of those four.
  void append(std::string_view type, nlohmann::json data, const nlohmann::json& envelope) {
    nlohmann::json event = detail::make_event(type, events_.size(), std::move(data), envelope);
    const std::optional<SandboxMode> mode = detail::switched_mode(event);
    events_.push_back(std::move(event));
    if (mode) {
      override_ = mode;
    }
  }

private:
  SessionHeader header_;
  std::vector<nlohmann::json> events_;
  std::optional<SandboxMode> override_;
};

// ---------------------------------------------------------------------------------------------
// Canonicalization
// ---------------------------------------------------------------------------------------------

/// Canonicalizes a path as docs/contract.md#canonicalization says: absolute against the process working directory;
/// the physical identity (symbolic links followed, then each `..` taken physically) of the
/// longest prefix that exists; the rest normalized lexically; no trailing separator except
/// for "/". A dangling symbolic link at the end of the existing prefix is followed.
/// When the whole path exists this costs an open(O_PATH), a readlink of /proc/self/fd/N and a
/// close whatever its depth (realpath(3) where the kernel cannot answer so). Never fails for a
/// path that cannot be examined (it uses as much identity as it can obtain); a path holding a
/// NUL character is normalized lexically only. Throws dsh::SystemError only when `path` is relative and the
/// process working directory cannot be read.
[[nodiscard]] inline std::filesystem::path canonical_path(const std::filesystem::path& path) {
  return detail::canonical_native(path.native());
}

// ---------------------------------------------------------------------------------------------
// Configuration and the owner
// ---------------------------------------------------------------------------------------------

/// The deployment configuration of a `PolicyOwner`.
struct PolicyConfig {
  SandboxMode mode = SandboxMode::read_only;           ///< Deployment default; read-only is the fail-safe.
  std::optional<std::filesystem::path> workspace_root; ///< Fallback root; default: the process working directory.
  std::string host_label = "DSH";                      ///< The host's name in the model text.
  /// The paths beneath a writable root that stay read-only (docs/enforcement.md#protected-paths).
  ProtectedPathRules protected_paths{};

  /// Reads a configuration object with the optional keys "mode", "workspaceRoot", "hostLabel"
  /// and "protectedPaths" (an object with the optional keys "defaults", a boolean; "disable",
  /// an array of default names; "extra", an array of paths). Throws ConfigError, naming the
  /// key, the expectation and the value found, for anything but a JSON object, an unknown key,
  /// a wrong type, a mode outside the vocabulary, an empty root or one holding NUL, a label
  /// that is empty or holds a control character or `"`, a name outside the default list, and
  /// an extra path that is empty, holds NUL or a ".." component, or names the root itself.
  [[nodiscard]] static PolicyConfig from_json(const nlohmann::json& json) {
    if (!json.is_object()) {
      throw ConfigError(detail::expectation_message("PolicyConfig", "a JSON object", json));
    }
    PolicyConfig config;
    for (const auto& [key, value] : json.get_ref<const nlohmann::json::object_t&>()) { // see check_envelope
      if (key == "mode") {
        config.mode = detail::enum_from_json<SandboxMode>(value, "PolicyConfig key \"mode\"");
      } else if (key == "workspaceRoot") {
        config.workspace_root = detail::config_string(value, key);
        detail::require_valid_root(*config.workspace_root);
      } else if (key == "hostLabel") {
        config.host_label = detail::config_string(value, key);
        detail::require_valid_label(config.host_label);
      } else if (key == "protectedPaths") {
        config.protected_paths = detail::protected_rules_from_json(value);
      } else {
        throw ConfigError(detail::expectation_message(
            "PolicyConfig", "only the keys \"mode\", \"workspaceRoot\", \"hostLabel\" and \"protectedPaths\"", key));
      }
    }
    return config;
  }
};

/// The complete policy of one call: what every enforcement backend consumes.
struct ResolvedPolicy {
  SandboxMode mode = SandboxMode::read_only;       ///< The mode in force for this call.
  std::filesystem::path workspace_root;            ///< Canonical, absolute.
  ModeSource mode_source = ModeSource::deployment; ///< Which input decided `mode`.
  RootSource root_source = RootSource::deployment; ///< Which input decided `workspace_root`.
  /// The deployment's protected paths beneath the root (`PolicyConfig::protected_paths`).
  ProtectedPathRules protected_paths{};

  bool operator==(const ResolvedPolicy&) const = default;

  /// The in-process write check of the `filesystem` family. Returns false in read-only and
  /// true in danger-full-access. In workspace-write returns true exactly when `target`,
  /// taken against the workspace root if relative and canonicalized like the root (so a
  /// symbolic link inside the workspace that points outside is outside), is the root or lies
  /// beneath it by whole components, and is not protected: false when it is a protected
  /// entry or lies beneath one (a pinned directory only refuses itself), and for every target
  /// beneath the root when its protected paths cannot be known (`dsh::protected_paths`
  /// throws then). That part looks at the filesystem as it is now: a few lstat(2) calls for a
  /// plain repository. An empty path is never permitted.
  /// A path check is only as good as the moment it runs: the filesystem can change between
  /// this check and the write (time of check / time of use). Open beneath the root with the
  /// kernel's help (`dsh::open_beneath` in <dsh/open_beneath.hpp>) where that matters.
  [[nodiscard]] bool permits_write(const std::filesystem::path& target) const {
    switch (mode) {
    case SandboxMode::danger_full_access:
      return true;
    case SandboxMode::workspace_write: {
      if (target.empty() || target.native().find('\0') != std::string::npos) {
        return false;
      }
      const std::filesystem::path canonical = canonical_path(target.is_absolute() ? target : workspace_root / target);
      return detail::is_within(canonical, workspace_root) &&
             !detail::protected_refusal(workspace_root, protected_paths, canonical);
    }
    case SandboxMode::read_only:
      break;
    }
    return false;
  }
};

/// Returns the protected entries beneath `policy.workspace_root` under `policy.protected_paths`
/// (docs/enforcement.md#protected-paths), whatever the mode: what `permits_write`,
/// `open_for_write` and the fence's namespace layer refuse, as the filesystem is now, in the
/// order the scan finds them. Throws ProtectedPathError naming the path, the expectation and
/// what was found when the list cannot be known (writes beneath the root are then refused).
[[nodiscard]] inline std::vector<detail::ProtectedEntry> protected_paths(const ResolvedPolicy& policy) {
  detail::ProtectedScan scan = detail::protected_entries(policy.workspace_root, policy.protected_paths);
  if (!scan.problem.empty()) {
    throw ProtectedPathError(scan.problem, scan.error);
  }
  return std::move(scan.entries);
}

/// Stores the policy as `{"mode","workspaceRoot","modeSource","rootSource"}`; a root that is
/// not valid UTF-8 is stored with U+FFFD replacements, as in the model text.
template <detail::ExactlyJson J> void to_json(J& json, const ResolvedPolicy& policy) {
  json = J{{"mode", policy.mode},
           {"workspaceRoot", detail::repaired_utf8(policy.workspace_root.native())},
           {"modeSource", policy.mode_source},
           {"rootSource", policy.root_source}};
}

/// Takes back one registration; defined with the registry below.
class Disposer;

/// The single owner of the sandbox policy: deployment default, fallback root, resolution,
/// the family registry and the model text. Every member function is safe to call from any
/// number of threads at once.
class PolicyOwner {
public:
  /// Validates the configuration and canonicalizes the fallback root once. Throws ConfigError
  /// for a mode outside the enum, an empty root or one holding NUL, an invalid host label, or
  /// invalid protected-path rules (as `PolicyConfig::from_json` names them);
  /// dsh::SystemError when the root is relative (or absent) and the working directory cannot be read.
  explicit PolicyOwner(PolicyConfig config = {})
      : default_mode_(config.mode), workspace_root_(canonical_root(config.workspace_root)),
        host_label_(std::move(config.host_label)), protected_paths_(std::move(config.protected_paths)),
        registry_(std::make_shared<detail::Registry>()) {
    detail::require_valid_mode(default_mode_);
    detail::require_valid_label(host_label_);
    detail::require_valid_protected_rules(protected_paths_);
  }
  // Disposers and listeners are tied to this owner's registry: hold the owner by reference
  // or pointer instead of copying or moving it.
  PolicyOwner(const PolicyOwner&) = delete;
  PolicyOwner& operator=(const PolicyOwner&) = delete;
  PolicyOwner(PolicyOwner&&) = delete;
  PolicyOwner& operator=(PolicyOwner&&) = delete;
  ~PolicyOwner() = default;

  /// Returns the deployment default mode.
  [[nodiscard]] SandboxMode defaultMode() const noexcept { return default_mode_; }
  /// Returns the canonical fallback workspace root.
  [[nodiscard]] const std::filesystem::path& workspaceRoot() const noexcept { return workspace_root_; }
  /// Returns the host label the model text uses.
  [[nodiscard]] const std::string& hostLabel() const noexcept { return host_label_; }
  /// Returns the protected-path rules every resolved policy carries.
  [[nodiscard]] const ProtectedPathRules& protectedPaths() const noexcept { return protected_paths_; }

  /// Resolves the policy of a call without a session: `approved`, else the deployment default;
  /// the fallback root.
  [[nodiscard]] ResolvedPolicy resolve(std::optional<SandboxMode> approved = {}) const {
    return ResolvedPolicy{approved.value_or(default_mode_), workspace_root_,
                          approved ? ModeSource::approved : ModeSource::deployment, RootSource::deployment,
                          protected_paths_};
  }

  /// Resolves the policy of a call in `session`: mode = `approved`, else the session's last
  /// switch (its `sandbox_mode_override()` when it has one, the fold otherwise), else the
  /// default; root = the canonical session cwd when non-empty, else the fallback root.
  /// Throws InvariantViolation when the fold meets a forged event.
  template <SessionLike S>
  [[nodiscard]] ResolvedPolicy resolve(const S& session, std::optional<SandboxMode> approved = {}) const {
    const auto [mode, mode_source] = decide_mode(session, approved);
    if (std::optional<std::string> root = session_root(session.header())) {
      return ResolvedPolicy{mode, std::move(*root), mode_source, RootSource::session, protected_paths_};
    }
    return ResolvedPolicy{mode, workspace_root_, mode_source, RootSource::deployment, protected_paths_};
  }

  /// Registers one contribution enforcing `family`; the family stays enforced until the last
  /// of its contributions is disposed. Listeners run before this returns.
  [[nodiscard]] Disposer registerEnforcedFamily(Family family);
  /// Registers one contribution offering escalation for `family` (effective while it is enforced).
  [[nodiscard]] Disposer registerEscalatableFamily(Family family);

  /// Returns the families with at least one live enforced contribution.
  [[nodiscard]] FamilySet enforcedFamilies() const { return registry_->families().first; }
  /// Returns the families both enforced and escalatable.
  [[nodiscard]] FamilySet escalatableFamilies() const { return registry_->families().second; }

  /// Returns the escalation choices of a call of `family` in `session`: the modes the call may
  /// ask the user to approve, which are exactly the modes strictly wider than the mode
  /// `resolve(session)` decides, narrowest first (a view of SANDBOX_MODES, static storage). Empty
  /// when `family` is not both enforced and escalatable (a family outside the enum is neither),
  /// and in danger-full-access. A tool's `sandbox_permissions` enum is these modes, and the
  /// parameter is omitted when there are none. Throws what `resolve(session)` throws, whatever
  /// the family.
  template <SessionLike S>
  [[nodiscard]] std::span<const SandboxMode> escalationChoices(const S& session, Family family) const {
    const SandboxMode current = decide_mode(session, std::nullopt).first;
    return escalatableFamilies().contains(family) ? wider_modes(current) : std::span<const SandboxMode>();
  }

  /// Checks an approval before it is used. Returns nullopt if `approved` is one of
  /// `escalationChoices(session, family)`; otherwise the refusal text, which names both modes:
  /// `sandbox escalation to <approved> is not strictly wider than this call's current <current>
  /// mode; approve one of: <choices>` (`; no mode is wider, so the call needs no approval` in
  /// danger-full-access), or, when `family` is not both enforced and escalatable,
  /// `sandbox escalation to <approved> is not offered for <family>: that family is not both
  /// enforced and escalatable`. An approval equal to the current mode or narrower is refused
  /// rather than repeating or narrowing it. Throws what `resolve(session)` throws.
  template <SessionLike S> [[nodiscard]] std::optional<std::string> validateApproval(const S& session, Family family,
                                                                                     SandboxMode approved) const {
    return approval_refusal(family, approved, decide_mode(session, std::nullopt).first);
  }

  /// Resolves a call of `family` in `session` with an approved escalation, checked first:
  /// returns `resolve(session, approved)` when `validateApproval` accepts `approved`; throws
  /// ConfigError with `validateApproval`'s refusal text otherwise, and what `resolve(session)`
  /// throws. The session's mode is read once, so the check and the resolved policy cannot
  /// disagree. `resolve(session, approved)` keeps its precedence (the approval wins, unchecked)
  /// for callers that check on their own.
  template <SessionLike S>
  [[nodiscard]] ResolvedPolicy resolveApproved(const S& session, Family family, SandboxMode approved) const {
    if (std::optional<std::string> refusal =
            approval_refusal(family, approved, decide_mode(session, std::nullopt).first)) {
      throw ConfigError(*refusal);
    }
    return resolve(session, approved);
  }

  /// Returns the `sandbox:policy` contribution for `session`: "" when no family is enforced,
  /// otherwise `render_policy_context(resolve(session), ...)`. Throws what `resolve` throws.
  template <SessionLike S> [[nodiscard]] std::string context(const S& session) const {
    const auto [enforced, escalatable] = registry_->families();
    if (enforced.empty()) {
      return {};
    }
    // What resolve decides, without building the std::filesystem::path the text never needs.
    const SandboxMode mode = decide_mode(session, std::nullopt).first;
    const std::optional<std::string> root = session_root(session.header());
    return detail::render_policy_text(mode, root ? std::string_view(*root) : std::string_view(workspace_root_.native()),
                                      enforced, escalatable, host_label_);
  }

  /// Calls `listener` after every registration and disposal of a family contribution, on the
  /// thread that made it, outside any lock. A listener must not throw. Dispose the returned
  /// `Disposer` to stop.
  [[nodiscard]] Disposer onChange(std::function<void()> listener);

private:
  [[nodiscard]] static std::filesystem::path canonical_root(const std::optional<std::filesystem::path>& root) {
    if (!root) {
      return canonical_path(detail::current_directory());
    }
    detail::require_valid_root(*root);
    return canonical_path(*root);
  }

  /// The refusal text of `approved` for a call of `family` whose current mode is `current`, or
  /// nullopt when it is one of that call's escalation choices.
  [[nodiscard]] std::optional<std::string> approval_refusal(Family family, SandboxMode approved,
                                                            SandboxMode current) const {
    const bool offered = escalatableFamilies().contains(family);
    if (offered && is_strictly_wider(approved, current)) {
      return std::nullopt;
    }
    return detail::escalation_refusal(approved, current, family, offered);
  }

  /// The mode of a call and which input decided it (docs/contract.md#precedence).
  template <SessionLike S> [[nodiscard]] std::pair<SandboxMode, ModeSource>
  decide_mode(const S& session, std::optional<SandboxMode> approved) const {
    if (approved) {
      return {*approved, ModeSource::approved};
    }
    if (const std::optional<SandboxMode> switched = session_mode(session)) {
      return {*switched, ModeSource::session};
    }
    return {default_mode_, ModeSource::deployment};
  }

  /// The canonical session cwd, or nullopt when the session has none (the fallback root applies).
  [[nodiscard]] static std::optional<std::string> session_root(const SessionHeader& header) {
    if (header.cwd && !header.cwd->empty()) {
      return detail::canonical_native(*header.cwd);
    }
    return std::nullopt;
  }

  template <SessionLike S> [[nodiscard]] static std::optional<SandboxMode> session_mode(const S& session) {
    if constexpr (HasSandboxModeOverride<S>) {
      return session.sandbox_mode_override();
    } else {
      return effective_mode(session.events());
    }
  }

  /// Registers one contribution of `kind`; throws ConfigError for a family outside the enum.
  [[nodiscard]] Disposer add(detail::Contribution kind, Family family);

  SandboxMode default_mode_;
  std::filesystem::path workspace_root_;
  std::string host_label_;
  ProtectedPathRules protected_paths_;
  std::shared_ptr<detail::Registry> registry_;
};

// ---------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------

/// Takes back one registration when disposed or destroyed. Move-only; `dispose()` is
/// idempotent; disposing after the owner is gone does nothing.
class Disposer {
public:
  /// An inactive disposer.
  Disposer() noexcept = default;
  Disposer(const Disposer&) = delete;
  Disposer& operator=(const Disposer&) = delete;
  /// Takes over `other`'s registration; `other` becomes inactive.
  Disposer(Disposer&& other) noexcept
      : registry_(std::move(other.registry_)), kind_(other.kind_), family_(other.family_),
        listener_id_(other.listener_id_), active_(std::exchange(other.active_, false)) {}
  /// Disposes this registration, then takes over `other`'s.
  Disposer& operator=(Disposer&& other) noexcept {
    if (this != &other) {
      dispose();
      registry_ = std::move(other.registry_);
      kind_ = other.kind_;
      family_ = other.family_;
      listener_id_ = other.listener_id_;
      active_ = std::exchange(other.active_, false);
    }
    return *this;
  }
  /// Disposes.
  ~Disposer() { dispose(); }

  /// Takes the registration back (the listeners of the owner run before it returns, and must
  /// not throw: this function is noexcept). Does nothing if inactive or the owner is gone.
  void dispose() noexcept {
    if (!std::exchange(active_, false)) {
      return;
    }
    if (const auto registry = registry_.lock()) {
      if (kind_ == detail::Contribution::listener) {
        registry->remove_listener(listener_id_);
      } else {
        registry->remove(kind_, family_);
      }
    }
    registry_.reset();
  }

  /// Returns true until disposed or moved from.
  [[nodiscard]] bool active() const noexcept { return active_; }

private:
  friend class PolicyOwner;
  Disposer(std::weak_ptr<detail::Registry> registry, detail::Contribution kind, Family family,
           std::uint64_t listener_id) noexcept
      : registry_(std::move(registry)), kind_(kind), family_(family), listener_id_(listener_id), active_(true) {}

  std::weak_ptr<detail::Registry> registry_;
  detail::Contribution kind_ = detail::Contribution::enforced;
  Family family_ = Family::filesystem;
  std::uint64_t listener_id_ = 0;
  bool active_ = false;
};
inline Disposer PolicyOwner::registerEnforcedFamily(Family family) {
  return add(detail::Contribution::enforced, family);
}

inline Disposer PolicyOwner::registerEscalatableFamily(Family family) {
  return add(detail::Contribution::escalatable, family);
}

inline Disposer PolicyOwner::onChange(std::function<void()> listener) {
  if (!listener) {
    throw ConfigError("PolicyOwner::onChange: expected a callable listener; found an empty std::function");
  }
  const std::uint64_t id = registry_->add_listener(std::move(listener));
  return Disposer(registry_, detail::Contribution::listener, Family::filesystem, id);
}

inline Disposer PolicyOwner::add(detail::Contribution kind, Family family) {
  if (to_string(family).empty()) {
    throw ConfigError(
        detail::expectation_message("PolicyOwner family", detail::enum_vocabulary<Family>(), static_cast<int>(family)));
  }
  registry_->add(kind, family);
  return Disposer(registry_, kind, family, 0);
}

// ---------------------------------------------------------------------------------------------
// The model text
// ---------------------------------------------------------------------------------------------

/// The name of the context contribution this library renders.
inline constexpr std::string_view SANDBOX_POLICY_CONTEXT = "sandbox:policy";

/// Returns `text` as a JSON string literal (see the model text's `{root}`).
[[nodiscard]] inline std::string json_string_literal(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  detail::append_json_string(out, text);
  return out;
}

/// Renders the `sandbox:policy` text of docs/contract.md#the-model-text, byte for byte. Returns "" when `enforced`
/// is empty; otherwise one line without a trailing newline. Only families both enforced and
/// in `escalatable` are named as escalatable, and only in read-only. The text depends only
/// on the mode, the families, `host_label` and the root.
[[nodiscard]] inline std::string render_policy_context(const ResolvedPolicy& policy, FamilySet enforced,
                                                       FamilySet escalatable, std::string_view host_label = "DSH") {
  return detail::render_policy_text(policy.mode, policy.workspace_root.native(), enforced, escalatable, host_label);
}

} // namespace dsh
