/// @file
/// The walk of a DSH session store's directories: what an entry is (never following a link),
/// the log a session directory holds, and the one session a search finds.
// Included by <dsh/session_store.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/session_store.hpp>

#ifndef DSH_DETAIL_STORE_WALK_HPP
#define DSH_DETAIL_STORE_WALK_HPP

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
                                                            std::string project, std::string encoded_id) {
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

#endif // DSH_DETAIL_STORE_WALK_HPP
