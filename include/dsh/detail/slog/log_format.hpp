/// @file
/// The rules of a session log's rows: the header, the seq sequence, packed chunk rows,
/// `sandbox/mode` events, and the limits of an appended line (docs/session-log.md#validation).
#pragma once

#include <dsh/detail/slog/chunk_rows.hpp>
#include <dsh/detail/slog/js_stringify.hpp>
#include <dsh/detail/slog/json_tree.hpp>
#include <dsh/detail/slog/log_io.hpp>
#include <dsh/detail/slog/row_scanner.hpp>
#include <dsh/detail/text/json_members.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log_types.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsh::detail::slog {

/// What validation has established so far about a log: the rows seen and what comes next.
struct Tally {
  std::size_t lines = 0;           ///< Complete lines validated, the header included.
  std::uint64_t next_seq = 0;      ///< The seq the next row must carry.
  std::optional<SandboxMode> mode; ///< The mode of the last `sandbox/mode` event.
};

/// Returns the decoded string of a string field (a view of the row unless it was escaped).
[[nodiscard]] inline std::string_view field_text(const Field& field, std::string& storage) {
  if (!field.escaped) {
    return field.token.substr(1, field.token.size() - 2);
  }
  storage = decode_string_token(field.token);
  return storage;
}

/// Scans one row; throws LogError for `line` unless it is a well-formed JSON object.
[[nodiscard]] inline RowFacts scan_object(std::string_view row, std::size_t line, const std::filesystem::path& path) {
  RowFacts facts;
  RowScanner scanner(row);
  if (!scanner.scan(facts)) {
    throw LogError(path, line, row.empty() ? std::string("empty line") : scanner.error());
  }
  if (facts.kind != RowKind::object) {
    throw LogError(path, line,
                   facts.kind == RowKind::array ? "expected a JSON object, found an array"
                                                : "expected a JSON object, found a scalar");
  }
  return facts;
}

/// Parses a row the scanner accepted into a tree (for the few rows that need one), each lone
/// surrogate escape read as U+FFFD (see `replace_lone_surrogates`).
[[nodiscard]] inline nlohmann::json parse_row(std::string_view row, std::size_t line,
                                              const std::filesystem::path& path) {
  try {
    if (row.find("\\u") != std::string_view::npos) {
      std::string text(row);
      if (replace_lone_surrogates(text)) {
        return parse_tree(text);
      }
    }
    return parse_tree(row);
  } catch (const nlohmann::json::exception& error) {
    throw LogError(path, line, std::string("not valid JSON: ") + error.what());
  }
}

/// Throws LogError for `line` unless `row` is the next valid row of the log; advances `tally`.
/// A row whose "type" has no "/" is a packed chunk row covering `data.dt.size() + 1` seqs
/// from "seq0"; any other row is one event with "seq"; a `sandbox/mode` event is parsed and
/// checked by `validate_event`.
inline void check_row(std::string_view row, std::size_t line, Tally& tally, const std::filesystem::path& path) {
  const RowFacts facts = scan_object(row, line, path);
  if (!facts.type.valid) {
    throw LogError(path, line, "expected a string \"type\"");
  }
  std::string storage;
  const std::string_view type = field_text(facts.type, storage);
  const bool packed = detail::is_packed_chunk_type(type);
  const Field& seq = packed ? facts.seq0 : facts.seq;
  const std::string_view seq_name = packed ? "seq0" : "seq";
  if (!seq.valid) {
    throw LogError(path, line,
                   packed ? "a row whose type has no \"/\" is a packed chunk row and needs a non-negative integer "
                            "\"seq0\""
                          : "expected a non-negative integer \"seq\"");
  }
  if (seq.number != tally.next_seq) {
    throw LogError(path, line,
                   std::string(seq_name) + " " + std::to_string(seq.number) + " where " +
                       std::to_string(tally.next_seq) + " was expected");
  }
  if (packed) {
    if (!facts.dt.valid) {
      throw LogError(path, line, "a packed chunk row needs an array \"data\".\"dt\"");
    }
    tally.next_seq += facts.dt.number + 1;
    return;
  }
  ++tally.next_seq;
  if (type == SANDBOX_MODE_EVENT) {
    const DisposedJson event(parse_row(row, line, path));
    if (auto failure = validate_event(event.value)) {
      // The tree has sorted the keys and replaced lone surrogates: show the value as DSH
      // itself would write it, from the row's own text.
      const std::optional<std::string> mode = js_mode_text(row);
      throw LogError(path, line, mode ? "sandbox/mode carries unknown mode " + *mode : *failure);
    }
    tally.mode = detail::switched_mode(event.value);
  }
}

/// Throws LogError for line 1 saying what the header's `key` should have been.
[[noreturn]] inline void bad_header(const std::filesystem::path& path, const char* key, std::string_view expected,
                                    const nlohmann::json* found) {
  std::string what = "session header \"";
  what.append(key).append("\": expected ").append(expected).append("; found ");
  what += found == nullptr ? std::string("nothing") : detail::compact_json(*found);
  throw LogError(path, 1, what);
}

/// Validates the header row (line 1) and returns its fields; `json` receives the whole header.
/// Compares through `get_ref` and `get`: nlohmann_json's `==` with a string or number builds
/// a temporary value inside a noexcept operator, which would end the process if that
/// allocation failed.
[[nodiscard]] inline SessionHeader check_header(std::string_view row, const std::filesystem::path& path,
                                                nlohmann::json& json) {
  static_cast<void>(scan_object(row, 1, path));
  json = parse_row(row, 1, path);
  const nlohmann::json* type = detail::member(json, "type");
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "session") {
    bad_header(path, "type", "\"session\"", type);
  }
  const nlohmann::json* version = detail::member(json, "version");
  if (version == nullptr || !version->is_number_integer() || version->get<std::int64_t>() != 0) {
    bad_header(path, "version", "0 (the only version this library reads)", version);
  }
  SessionHeader header;
  const nlohmann::json* id = detail::member(json, "id");
  if (id == nullptr || !id->is_string()) {
    bad_header(path, "id", "a string", id);
  }
  header.id = id->get<std::string>();
  const nlohmann::json* created = detail::member(json, "createdAt");
  if (created == nullptr || !created->is_number_integer() ||
      (created->is_number_unsigned() && created->get<std::uint64_t>() > INT64_MAX)) {
    bad_header(path, "createdAt", "an integer (epoch milliseconds)", created);
  }
  header.created_at = created->get<std::int64_t>();
  if (const nlohmann::json* cwd = detail::member(json, "cwd")) {
    if (!cwd->is_string()) {
      bad_header(path, "cwd", "a string, or no \"cwd\" at all", cwd);
    }
    header.cwd = cwd->get<std::string>();
  }
  return header;
}

/// Returns `value` as compact JSON; throws LogError naming `what` when it holds invalid UTF-8.
[[nodiscard]] inline std::string dump_or_throw(const nlohmann::json& value, const std::filesystem::path& path,
                                               std::string_view what) {
  try {
    return value.dump();
  } catch (const nlohmann::json::type_error& error) {
    throw LogError(path, 0, "cannot write " + std::string(what) + ": " + error.what());
  }
}

/// The largest number of bytes Linux transfers in one write(2) (0x7ffff000); an event line
/// must be shorter, since a line is written with exactly one write(2).
inline constexpr std::uint64_t MAX_WRITE_BYTES = 2'147'479'552;

/// Throws LogError, before anything is written, if an event line of `size` bytes cannot be
/// written with one write(2).
inline void check_line_size(std::uint64_t size, const std::filesystem::path& path) {
  if (size >= MAX_WRITE_BYTES) {
    throw LogError(path, 0,
                   "cannot append an event line of " + std::to_string(size) +
                       " bytes: one write(2) transfers at most 2147479552 bytes; nothing was written");
  }
}

} // namespace dsh::detail::slog
