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
#include <dsh/detail/policy/last_event.hpp>
#include <dsh/detail/policy/protected_paths.hpp>
#include <dsh/detail/policy/session_concepts.hpp>
#include <dsh/detail/text/enum_table.hpp>
#include <dsh/detail/text/epoch_time.hpp>
#include <dsh/detail/text/expectation.hpp>
#include <dsh/detail/text/json_members.hpp>
#include <dsh/detail/text/json_text.hpp>
#include <dsh/errors.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/version.hpp>
#include <dsh/vocabulary.hpp>

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

// The internals the rest of this header is built on; they use the vocabulary above.
#include <dsh/detail/policy/approval_refusal.hpp>
#include <dsh/detail/policy/config_checks.hpp>
#include <dsh/detail/policy/event_rules.hpp>
#include <dsh/detail/policy/policy_text.hpp>
#include <dsh/detail/policy/registry.hpp>

namespace dsh {

// ---------------------------------------------------------------------------------------------
// Sessions and the sandbox/mode event
// ---------------------------------------------------------------------------------------------

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
  template <class Unused = void> void append(std::string_view type, nlohmann::json data) {
    // value_t::object rather than json::object(): the same empty object, without instantiating
    // the initializer-list constructor in every includer.
    append(type, std::move(data), nlohmann::json(nlohmann::json::value_t::object));
  }

  /// Appends like `append(type, data)` with the members of `envelope` (such as
  /// `"surfaceOp":"append"`) added beside `type`, `seq`, `time` and `data`. Throws ConfigError,
  /// leaving the session unchanged, when `envelope` is not an object or names one of those four.
  template <class Unused = void>
  void append(std::string_view type, nlohmann::json data, const nlohmann::json& envelope) {
    nlohmann::json event = detail::make_event<Unused>(type, events_.size(), std::move(data), envelope);
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
// Configuration and the owner
// ---------------------------------------------------------------------------------------------

// SessionHeader, canonical_path, PolicyConfig, ResolvedPolicy, protected_paths and
// json_string_literal: <dsh/policy_types.hpp>, included above, so that the fence, the write tools
// and the session log can use them without this header.

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

/// Renders the `sandbox:policy` text of docs/contract.md#the-model-text, byte for byte. Returns "" when `enforced`
/// is empty; otherwise one line without a trailing newline. Only families both enforced and
/// in `escalatable` are named as escalatable, and only in read-only. The text depends only
/// on the mode, the families, `host_label` and the root.
[[nodiscard]] inline std::string render_policy_context(const ResolvedPolicy& policy, FamilySet enforced,
                                                       FamilySet escalatable, std::string_view host_label = "DSH") {
  return detail::render_policy_text(policy.mode, policy.workspace_root.native(), enforced, escalatable, host_label);
}

} // namespace dsh
