/// @file
/// DSH's session store: where DSH keeps each session's log under its configured root.
///
/// DSH writes a session to `<root>/<project>/<encoded id>/session.jsonl` (or
/// `session.jsonl.zstd` when it compresses), where `<project>` is the project key of the
/// session's cwd, or `_no-cwd` for a session without one, and `<encoded id>` the session id made
/// into one safe path segment. These functions compute those names exactly as DSH does, find a
/// session's log by id, list the logs of a store, and open one as a `dsh::SessionLog`.
///
/// The store never follows a symbolic link beneath the root: a project directory that is a link
/// is not part of the store (DSH's own listing skips it too), and a session directory or log
/// file that is a link is refused. The checks look at the directory entries before the log is
/// opened, so they guard against a mistaken or planted link, not against someone who can
/// rename entries inside the root while it is being read.
///
/// The public API comes first; the walk of the store's directories it is built on follows it,
/// at the end of this file.
#pragma once

#include <dsh/detail/store/dsh_segments.hpp>
#include <dsh/policy_types.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>

namespace dsh {

/// One session log of a DSH session store.
struct DshStoredSession {
  std::filesystem::path path; ///< `<root>/<project>/<encoded id>/session.jsonl[.zstd]`.
  std::string project;        ///< The project directory's name: a project key, or `_no-cwd`.
  std::string encoded_id;     ///< The session directory's name: the encoded session id.
  DshLogEncoding encoding = DshLogEncoding::plain;
  bool operator==(const DshStoredSession&) const = default;
};

/// The project directory of the sessions that have no cwd.
inline constexpr std::string_view DSH_NO_CWD_PROJECT = "_no-cwd";

/// Encodes `text` as DSH encodes a session id into one path segment: each UTF-16 code unit of
/// `A`-`Z`, `a`-`z`, `0`-`9`, `.`, `_` and `-` as it is, every other one (`/`, `~`, NUL,
/// non-ASCII, ...) as `~XXXX` (its four upper-case hex digits; a character beyond U+FFFF is two
/// units), and `.` and `..` as `~002E` and `~002E~002E`. The result is never empty, `.` or `..`,
/// and holds no `/`: it cannot leave the directory it is joined to. Throws ConfigError for an
/// empty `text` or one that is not UTF-8.
[[nodiscard]] inline std::string dsh_encode_segment(std::string_view text) {
  std::string out;
  detail::store::for_each_utf16_unit(text, "DSH session id", [&out](std::uint32_t unit) {
    if (detail::store::safe_unit(unit)) {
      out += static_cast<char>(unit);
    } else {
      detail::store::append_unit_escape(out, unit);
    }
  });
  if (out == "." || out == "..") {
    out = out == "." ? "~002E" : "~002E~002E";
  }
  return out;
}

/// Returns DSH's project key of the cwd `cwd`: each run of `/`, `\` and `:` becomes one `-`,
/// the other code units are kept or escaped as in `dsh_encode_segment`, leading `-` are
/// removed (an empty rest is `root`), the result is cut to 251 bytes and framed as `--key--`.
/// Throws ConfigError for an empty `cwd` or one that is not UTF-8.
[[nodiscard]] inline std::string dsh_project_key(std::string_view cwd) {
  std::string readable;
  bool separator_run = false;
  detail::store::for_each_utf16_unit(cwd, "DSH session cwd", [&](std::uint32_t unit) {
    if (unit == '/' || unit == '\\' || unit == ':') {
      if (!separator_run) {
        readable += '-';
      }
      separator_run = true;
      return;
    }
    separator_run = false;
    if (detail::store::safe_unit(unit)) {
      readable += static_cast<char>(unit);
    } else {
      detail::store::append_unit_escape(readable, unit);
    }
  });
  std::string_view slug(readable);
  slug.remove_prefix(std::min(slug.find_first_not_of('-'), slug.size()));
  if (slug.empty()) {
    slug = "root";
  }
  return "--" + std::string(slug.substr(0, 251)) + "--";
}

/// Returns the name of the project directory of a session with `cwd`: `_no-cwd` without one,
/// else `dsh_project_key(*cwd)`. Throws ConfigError for an empty cwd or one that is not UTF-8.
[[nodiscard]] inline std::string dsh_project_directory(const std::optional<std::string>& cwd) {
  return cwd ? dsh_project_key(*cwd) : std::string(DSH_NO_CWD_PROJECT);
}
} // namespace dsh

// The walk of the store's directories, built on DshStoredSession and dsh_encode_segment above.
namespace dsh::detail::store {

/// Returns what `lstat` says about `path`: nullopt when it does not exist; throws LogError for
/// `named` on any other failure.
[[nodiscard]] inline std::optional<struct stat> entry_status(const std::filesystem::path& path,
                                                             const std::filesystem::path& named) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    throw LogError(named, 0, slog::with_errno("cannot examine " + json_string_literal(path.native()), errno));
  }
  return status;
}

/// Returns the log in the session directory `session_dir`, or nullopt when it holds none;
/// throws LogError when it holds both encodings or a log that is not a regular file (a link).
[[nodiscard]] inline std::optional<DshStoredSession> log_in(const std::filesystem::path& session_dir,
                                                            const std::string& project, const std::string& encoded_id) {
  std::optional<DshStoredSession> found;
  for (const DshLogEncoding encoding : {DshLogEncoding::plain, DshLogEncoding::zstd}) {
    std::filesystem::path path =
        session_dir / (encoding == DshLogEncoding::plain ? "session.jsonl" : "session.jsonl.zstd");
    const std::optional<struct stat> status = entry_status(path, path);
    if (!status) {
      continue;
    }
    if (S_ISLNK(status->st_mode)) {
      throw LogError(path, 0, "is a symbolic link; a DSH session store never follows one out of its root");
    }
    if (!S_ISREG(status->st_mode)) {
      throw LogError(path, 0, "not a regular file");
    }
    if (found) {
      throw LogError(path, 0,
                     "the session directory holds both session.jsonl and session.jsonl.zstd; DSH refuses such a "
                     "session as well");
    }
    found = DshStoredSession{std::move(path), project, encoded_id, encoding};
  }
  return found;
}

/// Returns the log of the session whose directory entry is `root/project/encoded_id`, or
/// nullopt when there is no such entry; throws LogError when the entry is a link or no directory.
[[nodiscard]] inline std::optional<DshStoredSession>
session_at(const std::filesystem::path& root, const std::string& project, const std::string& encoded_id) {
  const std::filesystem::path dir = root / project / encoded_id;
  const std::optional<struct stat> status = entry_status(dir, dir);
  if (!status) {
    return std::nullopt;
  }
  if (S_ISLNK(status->st_mode)) {
    throw LogError(dir, 0, "is a symbolic link; a DSH session store never follows one out of its root");
  }
  if (!S_ISDIR(status->st_mode)) {
    throw LogError(dir, 0, "not a directory, where DSH keeps a session's directory");
  }
  return log_in(dir, project, encoded_id);
}

/// Returns the names of the real directories (not links to one) in `dir`, sorted; throws
/// LogError for `dir` if it cannot be read.
[[nodiscard]] inline std::vector<std::string> subdirectories(const std::filesystem::path& dir) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) {
    throw LogError(dir, 0, "cannot read the directory: " + error.message());
  }
  std::vector<std::string> names;
  for (const std::filesystem::directory_iterator end; it != end; it.increment(error)) {
    if (error) {
      throw LogError(dir, 0, "cannot read the directory: " + error.message());
    }
    const std::filesystem::file_status status = it->symlink_status(error);
    if (!error && status.type() == std::filesystem::file_type::directory) {
      names.push_back(it->path().filename().native());
    }
  }
  if (error) {
    throw LogError(dir, 0, "cannot read the directory: " + error.message());
  }
  std::ranges::sort(names);
  return names;
}

/// Returns the one log of session `encoded` among the `projects` of `root`; `where` describes
/// them for the error when there is none.
[[nodiscard]] inline DshStoredSession locate_in(const std::filesystem::path& root, std::string_view session_id,
                                                const std::vector<std::string>& projects, std::string_view where) {
  const std::string encoded = dsh_encode_segment(session_id);
  std::vector<DshStoredSession> found;
  for (const std::string& project : projects) {
    if (std::optional<DshStoredSession> stored = session_at(root, project, encoded)) {
      found.push_back(std::move(*stored));
    }
  }
  if (found.empty()) {
    throw LogError(root, 0,
                   "no DSH session " + json_string_literal(session_id) + " (directory " + json_string_literal(encoded) +
                       ") in " + std::string(where));
  }
  if (found.size() > 1) {
    std::string names;
    for (const DshStoredSession& stored : found) {
      names.append(names.empty() ? "" : ", ").append(json_string_literal(stored.project));
    }
    throw LogError(root, 0,
                   "the DSH session " + json_string_literal(session_id) + " appears in " +
                       std::to_string(found.size()) + " project directories: " + names +
                       "; give its cwd to choose one");
  }
  return std::move(found.front());
}

} // namespace dsh::detail::store

namespace dsh {

/// Finds the log of session `session_id` in the DSH store at `root`, searching every project
/// directory as DSH does when it does not know the cwd. Throws ConfigError for an empty id or
/// one that is not UTF-8; throws LogError when there is no such log, when the id is found in
/// several project directories (naming them), when the session directory or its log is a
/// symbolic link or of the wrong kind, when it holds both encodings, or when the root cannot
/// be read.
[[nodiscard]] inline DshStoredSession locate_dsh_session(const std::filesystem::path& root,
                                                         std::string_view session_id) {
  return detail::store::locate_in(root, session_id, detail::store::subdirectories(root), "any project directory");
}

/// Finds the log of session `session_id` whose cwd is `cwd` (`std::nullopt`: a session without
/// one) in the DSH store at `root`: only in that cwd's project directory, as DSH computes it.
/// Throws what the search above throws, ConfigError also for an empty cwd or one that is not
/// UTF-8, and LogError when the project directory is a symbolic link.
[[nodiscard]] inline DshStoredSession locate_dsh_session(const std::filesystem::path& root, std::string_view session_id,
                                                         const std::optional<std::string>& cwd) {
  const std::string project = dsh_project_directory(cwd);
  const std::filesystem::path dir = root / project;
  const std::optional<struct stat> status = detail::store::entry_status(dir, dir);
  if (status && S_ISLNK(status->st_mode)) {
    throw LogError(dir, 0, "is a symbolic link; a DSH session store never follows one out of its root");
  }
  return detail::store::locate_in(root, session_id, {project}, "the project directory " + json_string_literal(project));
}

/// Lists every session log of the DSH store at `root`, sorted by project directory and then
/// session directory. Entries that are symbolic links are not part of the store and are
/// skipped, as are session directories without a log. Throws LogError when the root or a
/// project directory cannot be read. A session directory that holds both encodings, or a log
/// that is a link or not a regular file, throws LogError too, unless `problems` is given: then
/// the error is added there and the listing goes on.
[[nodiscard]] inline std::vector<DshStoredSession> list_dsh_sessions(const std::filesystem::path& root,
                                                                     std::vector<LogError>* problems = nullptr) {
  std::vector<DshStoredSession> sessions;
  for (const std::string& project : detail::store::subdirectories(root)) {
    for (const std::string& encoded : detail::store::subdirectories(root / project)) {
      try {
        if (std::optional<DshStoredSession> stored =
                detail::store::log_in(root / project / encoded, project, encoded)) {
          sessions.push_back(std::move(*stored));
        }
      } catch (const LogError& error) {
        if (problems == nullptr) {
          throw;
        }
        problems->push_back(error);
      }
    }
  }
  return sessions;
}

/// Opens a stored session's log (see `SessionLog::open`) and checks that its header names the
/// session that lives there: the id and cwd of the header must lead to the project and session
/// directories the log was found in, as DSH requires. Throws LogError for a header that leads
/// elsewhere, for a directory on the way that another user can change (before anything is read;
/// see `SessionLogOptions::allow_shared_directories`), for a file whose content is not in the encoding its name says
/// (DSH would not read it), and for what `SessionLog::open` throws.
[[nodiscard]] inline SessionLog open_dsh_session(const DshStoredSession& stored) {
  const auto refuse_mismatch = [&stored] {
    throw LogError(stored.path, 0,
                   stored.encoding == DshLogEncoding::zstd
                       ? "named session.jsonl.zstd, but the file holds plain JSON lines, not Zstandard frames"
                       : "named session.jsonl, but the file holds Zstandard frames, not plain JSON lines");
  };
  // Before the peek below reads anything: SessionLog::open would refuse such a directory too.
  detail::slog::check_directories(stored.path, SessionLogOptions{});
  {
    // Looked at before opening, which may repair a torn tail: a mismatched file is left as it is.
    const UniqueFd peek = detail::slog::open_file(stored.path, O_RDONLY | O_NOFOLLOW, 0, stored.path);
    const std::uint64_t size = detail::slog::regular_file_size(peek.get(), stored.path);
    const bool compressed = detail::slog::starts_with_zstd_magic(peek.get(), stored.path, size);
    if (size > 0 && compressed != (stored.encoding == DshLogEncoding::zstd)) {
      refuse_mismatch();
    }
  }
  SessionLog log = SessionLog::open(stored.path);
  if (log.encoding() != stored.encoding) {
    refuse_mismatch(); // the file was replaced in between
  }
  std::string project;
  std::string encoded;
  try {
    project = dsh_project_directory(log.header().cwd);
    encoded = dsh_encode_segment(log.header().id);
  } catch (const ConfigError& error) {
    throw LogError(stored.path, 1, std::string("the session header cannot name a storage path: ") + error.what());
  }
  if (project != stored.project || encoded != stored.encoded_id) {
    throw LogError(stored.path, 1,
                   "the session header's id " + json_string_literal(log.header().id) + " and cwd belong in " +
                       json_string_literal(project + "/" + encoded) + ", not in " +
                       json_string_literal(stored.project + "/" + stored.encoded_id));
  }
  return log;
}

} // namespace dsh
