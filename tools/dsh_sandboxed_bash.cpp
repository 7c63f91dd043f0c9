// dsh-sandboxed-bash: the `bash` family backend of an agent host, in one file.
//
//   dsh-sandboxed-bash --log SESSION.jsonl [--approved MODE] [--default MODE] [--keep-env NAME]...
//                      [--isolation off|best-effort|required] [--timeout SECONDS] [--verbose] -- COMMAND...
//   dsh-sandboxed-bash --help
//
// Resolves the session's policy with a PolicyOwner (the same owner that would render the
// model text), registers `bash` as enforced and escalatable as a real backend does, and runs
// `bash -c COMMAND` in the session workspace under the Landlock fence of that policy, with this
// process's environment minus the variables whose names look like credentials (FencedCommand's
// default; --keep-env NAME passes one on, --verbose lists the names withheld). When
// the command is refused a write, it repeats the denial and says how to retry with an
// approved wider mode, one of the owner's escalation choices. --isolation selects the fence's
// namespace layer (FenceOptions::isolation; best-effort by default), and --verbose lists each of
// its rows, applied or not with the reason. --timeout SECONDS ends the call, with everything it
// started, after that many seconds (exit status 124). When this program's stdout is closed early
// (`... | head`), it stops relaying the command's output there, lets the command finish, and still
// exits with its status. --help prints the usage to stdout and exits 0. The exit status is the command's;
// 126 when it could not be fenced (including a workspace whose grant would let the command change
// this log or the workspace entry, which decide the next call, and a required namespace layer that
// cannot be had), 2 for a usage error or an
// --approved mode that is not strictly wider than the session's (refused before anything runs).
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <span>
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
  dsh::Isolation isolation = dsh::Isolation::best_effort;
  std::optional<std::chrono::seconds> timeout;
  bool help = false;
  std::vector<std::string> keep_env;
  std::vector<std::string> command;
};

/// The usage text, to `out`.
void print_usage(std::ostream& out) {
  out << "usage: " << program_name
      << " --log SESSION.jsonl [--approved MODE] [--default MODE] [--keep-env NAME]... "
         "[--isolation off|best-effort|required] [--timeout SECONDS] [--verbose] -- COMMAND...\n"
      << "MODE is read-only, workspace-write or danger-full-access\n"
      << "the command gets this environment without the variables whose names contain KEY, SECRET, TOKEN, "
         "PASSWORD, PASSWD, CREDENTIAL or AUTH (any case); --keep-env NAME passes one on\n"
      << "--timeout SECONDS (a whole number, at least 1) ends the call and everything it started; exit status 124\n";
}

/// A usage error: the problem, then the usage text, on stderr.
void usage(std::string_view problem) {
  std::cerr << program_name << ": " << problem << "\n";
  print_usage(std::cerr);
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
    } else if (arg == "--keep-env") {
      if (i + 1 >= argc) {
        usage("--keep-env needs a NAME");
        return std::nullopt;
      }
      options.keep_env.emplace_back(argv[++i]);
    } else if (arg == "--isolation") {
      const std::string_view value = i + 1 < argc ? std::string_view(argv[i + 1]) : std::string_view();
      bool known = false;
      for (const dsh::Isolation isolation :
           {dsh::Isolation::off, dsh::Isolation::best_effort, dsh::Isolation::required}) {
        if (value == dsh::to_string(isolation)) {
          options.isolation = isolation;
          known = true;
        }
      }
      if (!known) {
        usage(i + 1 < argc ? "unknown isolation \"" + std::string(value) + "\" for --isolation"
                           : std::string("--isolation needs off, best-effort or required"));
        return std::nullopt;
      }
      ++i;
    } else if (arg == "--timeout") {
      const std::string_view value = i + 1 < argc ? std::string_view(argv[i + 1]) : std::string_view();
      long long seconds = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      // Whole seconds, at least 1, at most a day's worth of years: anything else names itself.
      if (value.empty() || error != std::errc() || end != value.data() + value.size() || seconds < 1 ||
          seconds > 100LL * 365 * 24 * 3600) {
        usage(i + 1 < argc ? "--timeout expects a whole number of seconds from 1 to 3153600000, got \"" +
                                 std::string(value) + "\""
                           : std::string("--timeout needs SECONDS"));
        return std::nullopt;
      }
      options.timeout = std::chrono::seconds(seconds);
      ++i;
    } else if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
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
/// Landlock's checks, EXDEV from its rule against linking or moving across the fence, EROFS from
/// the namespace layer's read-only view.
bool is_denial(std::string_view line) {
  for (const std::string_view reason :
       {"Permission denied", "Operation not permitted", "Invalid cross-device link", "Read-only file system"}) {
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

/// A line of the command's stderr that reports a denial; `cut` when only its tail was kept
/// (see DenialWatch), which then names no path the retry hint could rely on.
struct Denial {
  std::string line;
  bool cut = false;
};

/// The narrowest of the owner's escalation `choices` that is strictly wider than the call's
/// mode (which an approval may have widened already) and would allow the denied write (any of
/// them when the denial names no path); nullopt when none would, so no retry is offered.
std::optional<dsh::SandboxMode> wider_mode(const dsh::ResolvedPolicy& policy, const std::optional<std::string>& path,
                                           std::span<const dsh::SandboxMode> choices) {
  for (const dsh::SandboxMode choice : choices) {
    dsh::ResolvedPolicy wider = policy;
    wider.mode = choice;
    if (dsh::is_strictly_wider(choice, policy.mode) && (!path || wider.permits_write(*path))) {
      return choice;
    }
  }
  return std::nullopt;
}

/// Watches the command's stderr as the fence relays it: passes every chunk on to our stderr
/// (stdout to our stdout) as it comes, and keeps the first line that reports a denial.
///
/// Its memory is bounded whatever the command writes: of a line it keeps at most the last
/// `line_limit` bytes, the part a denial message ends in (the reason comes last). A denial names
/// at most two paths, each at most PATH_MAX (4096) bytes, so a whole one fits; of a longer line
/// the kept tail is still scanned, and reported as cut. The storage is reserved once, so no
/// chunk of output allocates.
class DenialWatch {
public:
  static constexpr std::size_t line_limit = 16384;

  DenialWatch() { line_.reserve(line_limit); }

  void operator()(dsh::CommandStream stream, std::string_view bytes) {
    (stream == dsh::CommandStream::err ? std::cerr : std::cout)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()))
        .flush();
    if (stream != dsh::CommandStream::err) {
      return;
    }
    for (;;) {
      const std::size_t end = bytes.find('\n');
      append(bytes.substr(0, end));
      if (end == std::string_view::npos) {
        return;
      }
      note();
      bytes.remove_prefix(end + 1);
    }
  }

  /// The first denial, once the command has ended (a last line without newline included).
  [[nodiscard]] std::optional<Denial> first_denial() {
    note();
    return first_denial_;
  }

private:
  /// Adds `part` to the current line, dropping its oldest bytes beyond `line_limit`.
  void append(std::string_view part) {
    if (part.size() >= line_limit) {
      line_.assign(part.substr(part.size() - line_limit));
      cut_ = true;
      return;
    }
    if (const std::size_t total = line_.size() + part.size(); total > line_limit) {
      line_.erase(0, total - line_limit);
      cut_ = true;
    }
    line_.append(part);
  }

  /// Ends the current line: keeps it when it is the first denial.
  void note() {
    if (!first_denial_ && is_denial(line_)) {
      first_denial_ = Denial{line_, cut_};
    }
    line_.clear();
    cut_ = false;
  }

  std::string line_;
  bool cut_ = false; // line_ is the tail of a longer line
  std::optional<Denial> first_denial_;
};

int run(const Options& options) {
  dsh::FencedCommand command({"bash", "-c", join(options.command, false)});
  if (options.timeout) {
    command.time_limit(std::chrono::duration_cast<std::chrono::milliseconds>(*options.timeout));
  }
  try {
    for (const std::string& name : options.keep_env) {
      command.keep_env(name);
    }
  } catch (const dsh::ConfigError& error) {
    usage(std::string("--keep-env: ") + error.what());
    return 2;
  }
  const dsh::SessionLog log = dsh::SessionLog::open(options.log);
  dsh::PolicyConfig config;
  config.mode = options.default_mode;
  dsh::PolicyOwner owner(config);
  const dsh::Disposer enforced = owner.registerEnforcedFamily(dsh::Family::bash);
  const dsh::Disposer escalatable = owner.registerEscalatableFamily(dsh::Family::bash);

  // An approval must widen this call: one that is not strictly wider than the session's mode is
  // refused before anything runs.
  if (options.approved) {
    if (const std::optional<std::string> refusal = owner.validateApproval(log, dsh::Family::bash, *options.approved)) {
      std::cerr << program_name << ": --approved refused: " << *refusal << "\n";
      return 2;
    }
  }
  const dsh::ResolvedPolicy policy = owner.resolve(log, options.approved);
  // What decides the next call (this log, the workspace as the header spells it) must stay
  // out of the command's reach; prepare refuses a workspace grant that would expose it.
  dsh::FenceOptions fence_options;
  fence_options.session_log = options.log;
  fence_options.isolation = options.isolation;
  if (log.header().cwd) {
    fence_options.session_cwd = *log.header().cwd;
  }
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy, fence_options);
  if (options.verbose) {
    std::cerr << program_name << ": model text: " << owner.context(log) << "\n"
              << program_name << ": fence: " << fence.report().describe() << "\n";
    for (const dsh::FenceLayer& layer : fence.report().layers) {
      std::cerr << program_name << ": namespace layer: " << layer.name
                << (layer.applied ? ": applied" : ": not applied: " + layer.reason) << "\n";
    }
    std::cerr << program_name << ": environment: withheld";
    const std::vector<std::string> withheld = command.removed_env_names();
    if (withheld.empty()) {
      std::cerr << ": none\n";
    } else {
      std::cerr << " (names that look like credentials; --keep-env NAME passes one on): ";
      for (std::size_t i = 0; i < withheld.size(); ++i) {
        std::cerr << (i == 0 ? "" : ", ") << withheld[i];
      }
      std::cerr << "\n";
    }
  }

  DenialWatch watch;
  command.in_directory(policy.workspace_root).on_output([&watch](dsh::CommandStream stream, std::string_view bytes) {
    watch(stream, bytes);
  });
  std::cout.flush();
  const int status = command.run(fence);
  const std::optional<Denial> denial = watch.first_denial();

  if (denial && policy.mode != dsh::SandboxMode::danger_full_access) {
    std::cerr << program_name << ": denied by the " << dsh::to_string(policy.mode)
              << " file policy (Landlock fence): " << (denial->cut ? "..." : "") << denial->line << "\n";
    const std::optional<std::string> path = denial->cut ? std::nullopt : denied_path(denial->line);
    const std::optional<dsh::SandboxMode> wider =
        wider_mode(policy, path, owner.escalationChoices(log, dsh::Family::bash));
    if (wider) {
      std::cerr << program_name
                << ": if this change is required, ask for approval and re-run with a wider mode: " << program_name
                << " --log " << shell_quote(options.log) << " --approved " << dsh::to_string(*wider)
                << (options.isolation == dsh::Isolation::best_effort
                        ? std::string()
                        : " --isolation " + std::string(dsh::to_string(options.isolation)))
                << " -- " << join(options.command, true) << "\n";
    }
  }
  return status;
}

} // namespace

int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) must make a session-log append fail with EFBIG, which the
  // log rolls back and reports, rather than kill this process in the middle of it.
  std::signal(SIGXFSZ, SIG_IGN);
  // A closed stdout (`... | head`) must not end this process in the middle of the call: the
  // relay then sees EPIPE, stops writing there and keeps draining the command's output, and the
  // command's own status is still returned. (The command gets the default disposition back.)
  std::signal(SIGPIPE, SIG_IGN);
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    return 2;
  }
  if (options->help) {
    print_usage(std::cout);
    return std::cout.flush() ? 0 : 1;
  }
  try {
    return run(*options);
  } catch (const std::exception& error) {
    std::cerr << program_name << ": not run: " << error.what() << "\n";
    return dsh::FencedCommand::cannot_run_exit_code;
  }
}
