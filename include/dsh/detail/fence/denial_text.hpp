/// @file
/// The stderr dialects of a refused write: which lines report one, and the paths they name.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dsh::detail {

/// The C locale's texts of the errors a fence gives a refused write: EACCES and EPERM (Landlock,
/// the system-call filter), EROFS (the namespace layer's read-only views), EXDEV (Landlock's rule
/// against linking or renaming across the fence).
inline constexpr std::array<std::string_view, 4> denial_reasons{
    {"Permission denied", "Operation not permitted", "Read-only file system", "Invalid cross-device link"}};

/// Phrases of a failed read, listing, lookup or exec: the fence never refuses those, so a line
/// holding one reports no refused write whatever its path.
inline constexpr std::array<std::string_view, 10> read_phrases{
    {"cannot open directory", "cannot access", "cannot read", "can't read", "cannot stat", "for reading",
     "reading directory", "cannot execute", "cannot open shared object", "cannot change directory"}};

/// What stands before the path in the `tool: PHRASE PATH: reason` lines of common tools
/// (dash, git, sed, perl): the path is what follows the phrase.
inline constexpr std::array<std::string_view, 9> path_phrases{
    {"cannot create ", "can't create ", "could not lock config file ", "couldn't open temporary file ",
     "couldn't open file ", "could not create ", "unable to create ", "Can't open ", "cannot open "}};

/// The position of the first denial reason in `line` that ends it or is followed by ':' (the
/// reason is the last field of the line, or Python's `[Errno 13] Permission denied: 'PATH'`), or
/// npos when it has none.
[[nodiscard]] inline std::size_t denial_reason_at(std::string_view line) noexcept {
  for (const std::string_view reason : denial_reasons) {
    for (std::size_t at = line.find(reason); at != std::string_view::npos; at = line.find(reason, at + 1)) {
      const std::size_t end = at + reason.size();
      if (end == line.size() || line[end] == ':') {
        return at;
      }
    }
  }
  return std::string_view::npos;
}

/// True when `c` may stand right before an opening quote of a quoted path: the line's start, a
/// space, or an opening bracket.
[[nodiscard]] constexpr bool opens_quote(std::string_view before) noexcept {
  return before.empty() || before.back() == ' ' || before.back() == '(' || before.back() == '[';
}

/// True when `after` may follow a closing quote: the line's end, or ':', ' ', ',', ')' or ']'.
[[nodiscard]] constexpr bool closes_quote(std::string_view after) noexcept {
  return after.empty() || after.front() == ':' || after.front() == ' ' || after.front() == ',' ||
         after.front() == ')' || after.front() == ']';
}

/// The quoted paths of `line`: 'PATH', "PATH" and ‘PATH’ (coreutils in a UTF-8 locale), each
/// opened after a space or bracket (or at the start) and closed before ':', ' ', ',' or a bracket
/// (or at the end). A name a tool escaped for the shell ('a'\''b') breaks those rules and is
/// not taken. `first` receives the offset of the first path's opening quote.
[[nodiscard]] inline std::vector<std::string> quoted_paths(std::string_view line, std::size_t& first) {
  struct Quotes {
    std::string_view open;
    std::string_view close;
  };
  constexpr std::array<Quotes, 3> quotes{{{"'", "'"}, {"\"", "\""}, {"\xE2\x80\x98", "\xE2\x80\x99"}}};
  std::vector<std::string> paths;
  first = std::string_view::npos;
  std::size_t at = 0;
  while (at < line.size()) {
    bool taken = false;
    for (const Quotes& quote : quotes) {
      if (line.substr(at, quote.open.size()) != quote.open || !opens_quote(line.substr(0, at))) {
        continue;
      }
      const std::size_t start = at + quote.open.size();
      const std::size_t end = line.find(quote.close, start);
      if (end == std::string_view::npos || end == start || !closes_quote(line.substr(end + quote.close.size()))) {
        continue;
      }
      paths.emplace_back(line.substr(start, end - start));
      first = first == std::string_view::npos ? at : first;
      at = end + quote.close.size();
      taken = true;
      break;
    }
    if (!taken) {
      ++at;
    }
  }
  return paths;
}

/// The paths a stderr line that reports a refused write names, as written (relative ones
/// included); empty when the line reports no refusal, is a failed read (`read_phrases`), or
/// names no path in a shape it recognizes:
/// * quoted paths anywhere in the line (coreutils, git, Python: `quoted_paths`); otherwise
/// * `... : PATH: reason`, the field before the reason: the whole field for bash
///   (`bash: [line N: ]PATH: reason`, spaces allowed), else the rest of the field after one of
///   `path_phrases` (`sh: 1: cannot create PATH: reason`), else the field when it holds no
///   space (`tee: PATH: reason`).
/// `cut`: the line is the tail of a longer one, so a path starting at its first byte may have
/// lost its beginning and is not taken.
[[nodiscard]] inline std::vector<std::string> denial_paths_in(std::string_view line, bool cut) {
  const std::size_t reason = denial_reason_at(line);
  if (reason == std::string_view::npos) {
    return {};
  }
  for (const std::string_view phrase : read_phrases) {
    if (line.find(phrase) != std::string_view::npos) {
      return {};
    }
  }
  std::size_t first = std::string_view::npos;
  std::vector<std::string> paths = quoted_paths(line, first);
  if (!paths.empty()) {
    if (cut && first == 0) {
      paths.erase(paths.begin()); // its opening quote is the kept tail's first byte: it may close a cut path
    }
    return paths;
  }
  std::string_view before = line.substr(0, reason);
  if (!before.ends_with(": ")) {
    return {};
  }
  before.remove_suffix(2);
  const std::size_t separator = before.rfind(": ");
  std::size_t start = separator == std::string_view::npos ? 0 : separator + 2;
  std::string_view field = before.substr(start);
  if (!line.starts_with("bash: ")) {
    for (const std::string_view phrase : path_phrases) {
      if (field.starts_with(phrase)) {
        field.remove_prefix(phrase.size());
        start += phrase.size();
        break;
      }
    }
    if (field.find(' ') != std::string_view::npos) {
      return {};
    }
  }
  if (field.empty() || (cut && start == 0) || separator == std::string_view::npos) {
    return {}; // a line with no `tool: ` before the path is no tool's message
  }
  return {std::string(field)};
}

} // namespace dsh::detail
