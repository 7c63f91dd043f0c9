/// @file
/// `FencedCommand::capture`: a fenced call's output kept in memory, bounded, and its denials.
// Included by <dsh/landlock.hpp> after FencedCommand; the guard below, not `#pragma once`, lets
// it also compile on its own (HACKING.md#header-layout).
#include <dsh/landlock.hpp>

#ifndef DSH_DETAIL_CAPTURE_CALL_HPP
#define DSH_DETAIL_CAPTURE_CALL_HPP

#include <dsh/command_output.hpp>
#include <dsh/denials.hpp>
#include <dsh/detail/canonical.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

namespace dsh {

inline CommandOutput FencedCommand::capture(const PreparedFence& fence, CaptureOptions options) const {
  if (stdio_[1] >= 0 || stdio_[2] >= 0 || terminal_ >= 0) {
    throw ConfigError("FencedCommand::capture: expected stdout and stderr as pipes to capture, got " +
                      std::string(terminal_ >= 0 ? "a controlling terminal" : "a redirect of stdout or stderr"));
  }
  DenialScanner scanner =
      fence.denial_scanner(directory_.empty() ? std::filesystem::path(detail::current_directory()) : directory_);
  CommandOutput output;
  const std::size_t limit = options.max_bytes;
  const auto keep = [&output, limit](std::string& into, std::string_view bytes) {
    const std::size_t room = limit - std::min(limit, into.size());
    into.append(bytes.substr(0, room));
    output.truncated = output.truncated || bytes.size() > room;
  };
  FencedChild child = start(
      fence,
      [&](CommandStream stream, std::string_view bytes) {
        if (stream == CommandStream::err) {
          keep(output.err, bytes);
          scanner.feed(bytes);
        } else {
          keep(output.out, bytes);
        }
      },
      std::move(options.stdin_bytes));
  output.status = child.wait();
  scanner.finish();
  output.denied = scanner.denied();
  output.denied_paths = scanner.paths();
  return output;
}

} // namespace dsh

#endif // DSH_DETAIL_CAPTURE_CALL_HPP
