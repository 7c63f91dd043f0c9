// dsh-sandboxed-bash: the `bash` family backend of an agent host, in one file.
//
//   dsh-sandboxed-bash --log SESSION.jsonl [--approved MODE] [--default MODE] [--verbose] -- COMMAND...
//
// Resolves the session's policy with a PolicyOwner (the same owner that would render the
// model text), registers `bash` as enforced and escalatable as a real backend does, and runs
// `bash -c COMMAND` in the session workspace under the Landlock fence of that policy. When
// the command is refused a write, it repeats the denial and says how to retry with an
// approved wider mode. The exit status is the command's; 126 when it could not be fenced,
// 2 for a usage error.
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace {

constexpr std::string_view program_name = "dsh-sandboxed-bash";

struct Options {
  std::string log;
  std::optional<dsh::SandboxMode> approved;
  dsh::SandboxMode default_mode = dsh::SandboxMode::read_only;
  bool verbose = false;
  std::vector<std::string> command;
};

void usage(std::string_view problem) {
  std::cerr << program_name << ": " << problem << "\n"
            << "usage: " << program_name
            << " --log SESSION.jsonl [--approved MODE] [--default MODE] [--verbose] -- COMMAND...\n"
            << "MODE is read-only, workspace-write or danger-full-access\n";
}

std::optional<Options> parse(int argc, char** argv) {
  Options options;
  int i = 1;
  const auto mode_value = [&](std::string_view flag) -> std::optional<dsh::SandboxMode> {
    if (i + 1 >= argc) {
      usage(std::string(flag) + " needs a MODE");
      return std::nullopt;
    }
    const auto mode = dsh::parse_sandbox_mode(argv[++i]);
    if (!mode) {
      usage("unknown mode \"" + std::string(argv[i]) + "\" for " + std::string(flag));
    }
    return mode;
  };
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      options.command.assign(argv + i + 1, argv + argc);
      break;
    }
    if (arg == "--log" && i + 1 < argc) {
      options.log = argv[++i];
    } else if (arg == "--approved" || arg == "--default") {
      const auto mode = mode_value(arg);
      if (!mode) {
        return std::nullopt;
      }
      if (arg == "--approved") {
        options.approved = mode;
      } else {
        options.default_mode = *mode;
      }
    } else if (arg == "--verbose") {
      options.verbose = true;
    } else {
      usage("unexpected argument \"" + std::string(arg) + "\"");
      return std::nullopt;
    }
  }
  if (options.log.empty() || options.command.empty()) {
    usage(options.log.empty() ? "--log SESSION.jsonl is required" : "no COMMAND after --");
    return std::nullopt;
  }
  return options;
}

/// `text` quoted for a POSIX shell.
std::string shell_quote(std::string_view text) {
  std::string quoted = "'";
  for (const char c : text) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

std::string join(const std::vector<std::string>& words, bool quote) {
  std::string joined;
  for (const std::string& word : words) {
    joined += (joined.empty() ? "" : " ") + (quote ? shell_quote(word) : word);
  }
  return joined;
}

/// True when a line of the command's stderr reports a refused write: EACCES and EPERM from
/// Landlock's checks, EXDEV from its rule against linking or moving across the fence.
bool is_denial(std::string_view line) {
  for (const std::string_view reason : {"Permission denied", "Operation not permitted", "Invalid cross-device link"}) {
    if (line.find(reason) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

/// The path a denial line names, when it has one of the two common shapes:
/// `tool: cannot ... 'PATH': reason` (coreutils) or `bash: [line N: ]PATH: reason`.
std::optional<std::string> denied_path(std::string_view line) {
  if (const auto open = line.find('\''); open != std::string_view::npos) {
    if (const auto close = line.find('\'', open + 1); close != std::string_view::npos) {
      return std::string(line.substr(open + 1, close - open - 1));
    }
  }
  constexpr std::string_view bash_prefix = "bash: ";
  if (!line.starts_with(bash_prefix)) {
    return std::nullopt;
  }
  line.remove_prefix(bash_prefix.size());
  if (line.starts_with("line ")) {
    line.remove_prefix(line.find(": ") + 2);
  }
  const auto reason = line.rfind(": ");
  return reason == std::string_view::npos ? std::nullopt : std::optional(std::string(line.substr(0, reason)));
}

/// The narrowest wider mode that would allow the denied write.
dsh::SandboxMode wider_mode(const dsh::ResolvedPolicy& policy, const std::optional<std::string>& path) {
  if (policy.mode == dsh::SandboxMode::read_only) {
    dsh::ResolvedPolicy workspace = policy;
    workspace.mode = dsh::SandboxMode::workspace_write;
    if (!path || workspace.permits_write(*path)) {
      return dsh::SandboxMode::workspace_write;
    }
  }
  return dsh::SandboxMode::danger_full_access;
}

/// Copies the command's stderr (`from`) to our stderr as it arrives; returns the first line
/// that reports a denial, if any.
std::optional<std::string> relay_stderr(int from) {
  std::optional<std::string> first_denial;
  std::string line;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t got = ::read(from, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      break;
    }
    std::cerr.write(buffer.data(), got).flush();
    for (const char c : std::string_view(buffer.data(), static_cast<std::size_t>(got))) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (!first_denial && is_denial(line)) {
        first_denial = line;
      }
      line.clear();
    }
  }
  if (!first_denial && is_denial(line)) {
    first_denial = line;
  }
  return first_denial;
}

int run(const Options& options) {
  const dsh::SessionLog log = dsh::SessionLog::open(options.log);
  dsh::PolicyConfig config;
  config.mode = options.default_mode;
  dsh::PolicyOwner owner(config);
  const dsh::Disposer enforced = owner.registerEnforcedFamily(dsh::Family::bash);
  const dsh::Disposer escalatable = owner.registerEscalatableFamily(dsh::Family::bash);

  const dsh::ResolvedPolicy policy = owner.resolve(log, options.approved);
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy);
  if (options.verbose) {
    std::cerr << program_name << ": model text: " << owner.context(log) << "\n"
              << program_name << ": fence: " << fence.report().describe() << "\n";
  }

  std::array<int, 2> pipe_ends{-1, -1};
  if (::pipe(pipe_ends.data()) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
  const dsh::UniqueFd reader{pipe_ends[0]};
  dsh::UniqueFd writer{pipe_ends[1]};
  dsh::FencedCommand command({"bash", "-c", join(options.command, false)});
  command.in_directory(policy.workspace_root).redirect(STDERR_FILENO, writer.get());
  std::cout.flush();
  const ::pid_t child = command.spawn(fence);
  writer.reset();
  const std::optional<std::string> denial = relay_stderr(reader.get());
  const int status = dsh::FencedCommand::wait_for(child);

  if (denial && policy.mode != dsh::SandboxMode::danger_full_access) {
    const dsh::SandboxMode wider = wider_mode(policy, denied_path(*denial));
    std::cerr << program_name << ": denied by the " << dsh::to_string(policy.mode)
              << " file policy (Landlock fence): " << *denial << "\n"
              << program_name
              << ": if this change is required, ask for approval and re-run with a wider mode: " << program_name
              << " --log " << shell_quote(options.log) << " --approved " << dsh::to_string(wider) << " -- "
              << join(options.command, true) << "\n";
  }
  return status;
}

} // namespace

int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) must make a session-log append fail with EFBIG, which the
  // log rolls back and reports, rather than kill this process in the middle of it.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    return 2;
  }
  try {
    return run(*options);
  } catch (const std::exception& error) {
    std::cerr << program_name << ": not run: " << error.what() << "\n";
    return dsh::FencedCommand::cannot_run_exit_code;
  }
}
