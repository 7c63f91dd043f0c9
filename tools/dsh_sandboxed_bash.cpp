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
// the fence refused the command a write (dsh::DenialScanner), it repeats the denial and says how
// to retry with an approved wider mode, one of the owner's escalation choices (dsh::retry_advice). --isolation selects
// the fence's namespace layer (FenceOptions::isolation; best-effort by default), and --verbose lists each of its rows,
// applied or not with the reason. --timeout SECONDS ends the call, with everything it started, after that many seconds
// (exit status 124). When this program's stdout is closed early
// (`... | head`), it stops relaying the command's output there, lets the command finish, and still
// exits with its status. --help prints the usage to stdout and exits 0. The exit status is the command's;
// 126 when it could not be fenced (including a workspace whose grant would let the command change
// this log or the workspace entry, which decide the next call, and a required namespace layer that
// cannot be had), 2 for a usage error or an
// --approved mode that is not strictly wider than the session's (refused before anything runs).
#include <dsh/denials.hpp>
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
      << "MODE is " << dsh::names_of(dsh::SANDBOX_MODES, ", ", " or ") << "\n"
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

/// Relays the command's output as it comes (stdout to our stdout, stderr to our stderr) and
/// feeds its stderr to the fence's denial scanner, whose memory stays bounded whatever the
/// command writes (dsh::DenialScanner).
class Relay {
public:
  explicit Relay(dsh::DenialScanner& scanner) : scanner_(&scanner) {}

  void operator()(dsh::CommandStream stream, std::string_view bytes) {
    (stream == dsh::CommandStream::err ? std::cerr : std::cout)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()))
        .flush();
    if (stream == dsh::CommandStream::err) {
      scanner_->feed(bytes);
    }
  }

private:
  dsh::DenialScanner* scanner_;
};

int run(const Options& options) {
  dsh::FencedCommand command({"bash", "-c", join(options.command, false)});
  // This program is small and runs one call: forking it costs less than starting a launcher.
  command.launch(dsh::Launch::fork);
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

  // An approval must widen this call: the owner's checked resolve refuses one that is not
  // strictly wider than the session's mode, before anything runs.
  dsh::ResolvedPolicy policy;
  if (options.approved) {
    try {
      policy = owner.resolveApproved(log, dsh::Family::bash, *options.approved);
    } catch (const dsh::ConfigError& refusal) {
      std::cerr << program_name << ": --approved refused: " << refusal.what() << "\n";
      return 2;
    }
  } else {
    policy = owner.resolve(log);
  }
  // What decides the next call (this log, the workspace as the header spells it) must stay
  // out of the command's reach; prepare refuses a workspace grant that would expose it.
  dsh::FenceOptions fence_options;
  fence_options.session_log = options.log;
  // The private temporary directory belongs to this session: its id and its log's path name it,
  // so a new session made at the same path (the log removed and created again) starts empty.
  fence_options.session_id = log.header().id + "\n" + dsh::canonical_path(options.log).native();
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

  dsh::DenialScanner scanner = fence.denial_scanner(policy.workspace_root);
  command.in_directory(policy.workspace_root).on_output(Relay(scanner));
  std::cout.flush();
  const int status = command.run(fence);
  scanner.finish();

  // A refused write (the fence's, never an ordinary failure): the line that reported it, and
  // the retry the owner's narrowest escalation choice allowing every refused path gives.
  if (scanner.denied()) {
    std::cerr << program_name << ": denied by the " << dsh::to_string(policy.mode)
              << " file policy (Landlock fence): " << (scanner.first_line_cut() ? "..." : "") << scanner.first_line()
              << "\n";
    const dsh::RetryAdvice advice =
        dsh::retry_advice(policy, owner.escalationChoices(log, dsh::Family::bash), scanner.paths());
    if (advice.retry_mode) {
      std::cerr << program_name
                << ": if this change is required, ask for approval and re-run with a wider mode: " << program_name
                << " --log " << shell_quote(options.log) << " --approved " << dsh::to_string(*advice.retry_mode)
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
