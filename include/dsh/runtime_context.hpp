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
/// The public API comes first, as declarations; the log scan it is built on follows it, then
/// their definitions.
#pragma once

#include <dsh/detail/slog/chunk_rows.hpp>
#include <dsh/detail/text/json_members.hpp>
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

// The log scan the functions declared above are built on.
namespace dsh::detail {

/// The string table of SnapshotOutcome: the only place its strings are spelled.
template <> struct EnumTable<SnapshotOutcome> {
  static constexpr std::string_view what = "a snapshot outcome";
  static constexpr std::array<EnumEntry<SnapshotOutcome>, 3> entries{{
      {SnapshotOutcome::nothing, "nothing"},
      {SnapshotOutcome::snapshot, "snapshot"},
      {SnapshotOutcome::cleared, "cleared"},
  }};
};

/// Returns true if `event` is a `user/message` whose `data.source` names the snapshot plugin
/// (`kind` "plugin", `plugin` RUNTIME_CONTEXT_PLUGIN; further members of the source are allowed).
[[nodiscard]] inline bool is_snapshot_message(const nlohmann::json& event) {
  if (!has_type(event, USER_MESSAGE_EVENT)) {
    return false;
  }
  const nlohmann::json* data = member(event, "data");
  const nlohmann::json* source = data == nullptr ? nullptr : member(*data, "source");
  if (source == nullptr) {
    return false;
  }
  const std::string* kind = string_member(*source, "kind");
  const std::string* plugin = string_member(*source, "plugin");
  return kind != nullptr && *kind == "plugin" && plugin != nullptr && *plugin == RUNTIME_CONTEXT_PLUGIN;
}

/// Returns the text of a snapshot message, or nullopt when it is malformed: anything but
/// `role` "user" and `content` holding exactly one part `{"type":"text","text":<string>}`.
[[nodiscard]] inline std::optional<std::string> message_text(const nlohmann::json& event) {
  const nlohmann::json& data = event.at("data");
  const std::string* role = string_member(data, "role");
  const nlohmann::json* content = member(data, "content");
  if (role == nullptr || *role != "user" || content == nullptr || !content->is_array() || content->size() != 1) {
    return std::nullopt;
  }
  const nlohmann::json& part = content->front();
  const std::string* type = string_member(part, "type");
  const std::string* text = string_member(part, "text");
  if (type == nullptr || *type != "text" || text == nullptr) {
    return std::nullopt;
  }
  return *text;
}

/// Returns the seq that follows `event`, decided by its type as the log's validator decides it
/// (docs/contract.md#the-session-log): for a packed chunk row (a string `type` without '/')
/// `seq0 + size(data.dt) + 1`, for any other event `seq + 1`; nullopt when the member that
/// type calls for is missing or of the wrong type.
[[nodiscard]] inline std::optional<std::int64_t> seq_after(const nlohmann::json& event) {
  const std::string* type = string_member(event, "type");
  if (type == nullptr || !is_packed_chunk_type(*type)) {
    const std::optional<std::int64_t> seq = integer_member(event, "seq");
    return seq ? std::optional<std::int64_t>(*seq + 1) : std::nullopt;
  }
  const std::optional<std::int64_t> seq0 = integer_member(event, "seq0");
  const nlohmann::json* data = member(event, "data");
  const nlohmann::json* dt = data == nullptr ? nullptr : member(*data, "dt");
  if (!seq0 || dt == nullptr || !dt->is_array()) {
    return std::nullopt;
  }
  return *seq0 + static_cast<std::int64_t>(dt->size()) + 1;
}

/// What one scan of a log finds.
struct SnapshotScan {
  std::optional<SnapshotRecord> latest; ///< The latest snapshot message, if any.
  std::optional<std::int64_t> next_seq; ///< The seq after the last event that has one.
};

/// Returns the record of a snapshot message.
[[nodiscard]] inline SnapshotRecord snapshot_record(const nlohmann::json& event) {
  return SnapshotRecord{message_text(event), integer_member(event, "seq")};
}

/// Scans a range of events for the latest snapshot message and the next seq. On a
/// bidirectional range it walks from the end and stops at the latest snapshot, so its cost
/// is the length of the log after that snapshot; otherwise it walks the whole range.
template <JsonEventRange R> [[nodiscard]] SnapshotScan scan_snapshots(R&& events) {
  SnapshotScan scan;
  walk_to_last(std::forward<R>(events), [&](const nlohmann::json& event, bool newest_first) {
    if (!newest_first || !scan.next_seq) {
      if (const auto next = seq_after(event)) {
        scan.next_seq = next;
      }
    }
    if (is_snapshot_message(event)) {
      scan.latest = snapshot_record(event);
    }
    return scan.latest.has_value();
  });
  return scan;
}

/// Appends the snapshot message carrying `text` with the id `runtime-context-<next_seq>`.
template <EnvelopeAppendableSession S> void append_snapshot(S& session, std::string_view text, std::int64_t next_seq) {
  nlohmann::json data{
      {"id", std::string(RUNTIME_CONTEXT_ID_PREFIX) + std::to_string(next_seq)},
      {"role", "user"},
      {"content", nlohmann::json::array({nlohmann::json{{"type", "text"}, {"text", text}}})},
      {"source", nlohmann::json{{"kind", "plugin"}, {"plugin", RUNTIME_CONTEXT_PLUGIN}}},
  };
  session.append(USER_MESSAGE_EVENT, std::move(data), nlohmann::json{{"surfaceOp", "append"}});
}

/// The shared body of announce and re-announce.
template <EnvelopeAppendableSession S>
SnapshotOutcome announce(S& session, std::string_view snapshot_text, bool even_if_unchanged) {
  const SnapshotScan scan = scan_snapshots(session.events());
  const bool clearing = snapshot_text.empty();
  if (clearing && !scan.latest) {
    return SnapshotOutcome::nothing;
  }
  const std::string_view wanted = clearing ? RUNTIME_CONTEXT_CLEARED : snapshot_text;
  if (!even_if_unchanged && scan.latest && scan.latest->text == wanted) {
    return SnapshotOutcome::nothing;
  }
  append_snapshot(session, wanted, scan.next_seq.value_or(0));
  return clearing ? SnapshotOutcome::cleared : SnapshotOutcome::snapshot;
}

} // namespace dsh::detail

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
