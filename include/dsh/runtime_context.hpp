/// @file
/// The runtime-context snapshot (docs/contract.md#the-runtime-context-snapshot): how the `sandbox:policy` text, and
/// every other context contribution of a host, reaches the model.
///
/// Before each request the host assembles its contributions into one snapshot text
/// (`RuntimeContext::render`) and hands it to `announce_runtime_context`, which appends it to
/// the session as a `user/message` only when it differs from the latest snapshot message in
/// the session's own log. An unchanged request adds nothing, the stable system prompt is never
/// rewritten, and a restarted host finds "what the model was last told" in the log alone.
///
/// The public API comes first, as declarations where it is built on the log scan of
/// <dsh/detail/snapshot_log.hpp>; their definitions follow that include.
#pragma once

#include <dsh/detail/chunk_rows.hpp>
#include <dsh/detail/json_members.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsh {

/// The order of the `sandbox:policy` contribution in a snapshot (lower orders come first).
inline constexpr int SANDBOX_POLICY_CONTEXT_ORDER = 110;

/// The first paragraph of every non-empty snapshot.
inline constexpr std::string_view RUNTIME_CONTEXT_PREAMBLE =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";

/// The text announced when an earlier snapshot exists and every contribution is now empty.
inline constexpr std::string_view RUNTIME_CONTEXT_CLEARED =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// The `type` of the event that carries a snapshot.
inline constexpr std::string_view USER_MESSAGE_EVENT = "user/message";

/// The plugin named by the `source` of snapshot messages; it is what tells a snapshot apart from
/// the user's own messages.
inline constexpr std::string_view RUNTIME_CONTEXT_PLUGIN = "@deepseek-ai/dsh-system-prompt";

/// The prefix of a snapshot message's `id`; the rest is the `seq` the event is expected to get.
inline constexpr std::string_view RUNTIME_CONTEXT_ID_PREFIX = "runtime-context-";

/// One named piece of the runtime context.
struct ContextContribution {
  std::string name; ///< Unique within a snapshot, such as `sandbox:policy`.
  int order = 0;    ///< Position in the snapshot; lower comes first, ties go by name.
  std::string text; ///< The paragraph; an empty text is left out of the snapshot.
  bool operator==(const ContextContribution&) const = default;
};

/// Assembles the contributions of one request into the snapshot text of docs/contract.md#the-runtime-context-snapshot.
/// A value type: build one per request (the texts depend on the session and the registry at
/// that moment). The snapshot's bytes depend only on the contributions, never on the order in
/// which they were added.
class RuntimeContext {
public:
  /// Adds the contribution `name` at `order` with `text` and returns `*this`. Throws ConfigError,
  /// leaving the assembler unchanged, when `name` is empty or was added already.
  RuntimeContext& add(std::string_view name, int order, std::string text) {
    if (name.empty() || std::ranges::any_of(contributions_, [&](const auto& c) { return c.name == name; })) {
      throw ConfigError(detail::expectation_message("RuntimeContext contribution name",
                                                    "a non-empty name not added before", std::string(name)));
    }
    const auto position = std::ranges::upper_bound(
        contributions_, std::pair<int, std::string_view>(order, name), std::less<>{},
        [](const ContextContribution& c) { return std::pair<int, std::string_view>(c.order, c.name); });
    contributions_.insert(position, ContextContribution{std::string(name), order, std::move(text)});
    return *this;
  }

  /// Adds the `sandbox:policy` contribution: `owner.context(session)` at SANDBOX_POLICY_CONTEXT_ORDER.
  /// Throws what `add` and `PolicyOwner::context` throw.
  template <SessionLike S> RuntimeContext& add_sandbox_policy(const PolicyOwner& owner, const S& session) {
    return add(SANDBOX_POLICY_CONTEXT, SANDBOX_POLICY_CONTEXT_ORDER, owner.context(session));
  }

  /// Returns the contributions sorted by order, then by name.
  [[nodiscard]] const std::vector<ContextContribution>& contributions() const noexcept { return contributions_; }

  /// Returns the snapshot text: "" when every text is empty (or there is none); otherwise
  /// RUNTIME_CONTEXT_PREAMBLE, a blank line, and the non-empty texts in order joined by a
  /// blank line ("\n\n"), without a trailing newline.
  [[nodiscard]] std::string render() const {
    std::string snapshot;
    for (const ContextContribution& contribution : contributions_) {
      if (contribution.text.empty()) {
        continue;
      }
      if (snapshot.empty()) {
        snapshot = RUNTIME_CONTEXT_PREAMBLE;
      }
      snapshot.append("\n\n").append(contribution.text);
    }
    return snapshot;
  }

private:
  std::vector<ContextContribution> contributions_;
};

/// What `announce_runtime_context` or `reannounce_runtime_context` appended.
enum class SnapshotOutcome : std::uint8_t {
  nothing,  ///< No event: the log already holds this snapshot, or there is nothing to say.
  snapshot, ///< One `user/message` carrying the snapshot text.
  cleared,  ///< One `user/message` carrying RUNTIME_CONTEXT_CLEARED.
};

/// Returns "nothing", "snapshot" or "cleared"; "" for a value outside the enum.
[[nodiscard]] constexpr std::string_view to_string(SnapshotOutcome outcome) noexcept;

/// The latest snapshot message of a session's log: what the model was last told.
struct SnapshotRecord {
  std::optional<std::string> text; ///< Its text; nullopt when the message is malformed.
  std::optional<std::int64_t> seq; ///< Its `seq`, when it carries an integer one.
  bool operator==(const SnapshotRecord&) const = default;
};

/// Returns the latest snapshot message of `session`'s log (found in the log itself, scanning
/// backwards on a bidirectional range), or nullopt when the log holds none. Throws what
/// iterating `session.events()` throws.
template <SessionLike S> [[nodiscard]] std::optional<SnapshotRecord> latest_runtime_context(const S& session);

/// Brings the model up to date before a request. Appends one `user/message` event
/// `{"id":"runtime-context-<seq>","role":"user","content":[{"type":"text","text":<text>}],
/// "source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt"}}` when the text
/// differs from the latest snapshot message in the log (a malformed one always differs), where
/// <seq> is the seq the event is expected to get (one past the last event's). With an empty
/// `snapshot_text` the text is RUNTIME_CONTEXT_CLEARED, appended only when the log holds an
/// earlier snapshot whose text is not that already. Returns what was appended. Reads nothing
/// but the log: there is no in-memory mirror, so a restarted host behaves the same. Throws
/// what `session.events()` and `session.append` throw; a failed append leaves what the
/// session guarantees (both `dsh::Session` and `dsh::SessionLog` leave the log unchanged).
template <EnvelopeAppendableSession S>
SnapshotOutcome announce_runtime_context(S& session, std::string_view snapshot_text);

/// Like `announce_runtime_context`, but appends even when the log's latest snapshot has the
/// same text: for a host whose own history no longer holds that message (after compaction,
/// say). With an empty `snapshot_text` it appends RUNTIME_CONTEXT_CLEARED when the log holds
/// any earlier snapshot, and nothing otherwise.
template <EnvelopeAppendableSession S>
SnapshotOutcome reannounce_runtime_context(S& session, std::string_view snapshot_text);

} // namespace dsh

// The log scan the functions declared above are built on; it uses the types above.
#include <dsh/detail/snapshot_log.hpp>

namespace dsh {

// The definitions of the functions declared above.

constexpr std::string_view to_string(SnapshotOutcome outcome) noexcept { return detail::enum_name(outcome); }

template <SessionLike S> std::optional<SnapshotRecord> latest_runtime_context(const S& session) {
  return detail::scan_snapshots(session.events()).latest;
}

template <EnvelopeAppendableSession S>
SnapshotOutcome announce_runtime_context(S& session, std::string_view snapshot_text) {
  return detail::announce(session, snapshot_text, false);
}

template <EnvelopeAppendableSession S>
SnapshotOutcome reannounce_runtime_context(S& session, std::string_view snapshot_text) {
  return detail::announce(session, snapshot_text, true);
}

} // namespace dsh
