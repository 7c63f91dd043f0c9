/// @file
/// The runtime-context snapshot in a session log: the names of the outcomes, how a snapshot
/// message is recognized, the seq the next event gets, and the one scan and append that
/// `announce_runtime_context` and its relatives are built on.
// Included by <dsh/runtime_context.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/runtime_context.hpp>

#ifndef DSH_DETAIL_SNAPSHOT_LOG_HPP
#define DSH_DETAIL_SNAPSHOT_LOG_HPP

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

#endif // DSH_DETAIL_SNAPSHOT_LOG_HPP
