// dsh-policy: inspect and switch the sandbox policy of a DSH session log (docs/contract.md#the-session-log).
// Run `dsh-policy --help` for the usage. Exit status: 0 success, 1 refused input (a damaged or
// forged log, or one that cannot be opened), 2 usage error.
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>
#include <dsh/session_store.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

/// The usage text; its vocabulary comes from the library's tables.
std::string usage() {
  return R"(usage: dsh-policy show LOG [--families LIST] [--escalatable LIST] [--default-mode MODE] [--root DIR] [--json]
       dsh-policy history LOG
       dsh-policy set LOG MODE
       dsh-policy list --dsh-root DIR [--default-mode MODE]
       dsh-policy --help

Inspects the sandbox policy of a DSH session log (JSONL, one event per line).
Wherever LOG is expected, --dsh-root DIR --session ID [--cwd CWD] names the log of session ID
in the DSH session store DIR instead (found in every project directory unless CWD is given).

  show     the effective mode and the switch that set it (or that the deployment default
           applies), the canonical workspace root and where it came from, and the exact
           sandbox:policy text the model would be shown
  history  every sandbox/mode switch: seq, time (UTC), mode, source
  set      appends one sandbox/mode switch to MODE
  list     every session of the store: id, mode, whether the session or the default set it, log

Options of show (they describe the host, which the log does not record):
  --families LIST      enforced families, comma-separated (default: )" +
         dsh::names_of(dsh::FAMILIES, ",", ",") +
         R"(; "" for none)
  --escalatable LIST   families that offer an approved escalation (default: none)
  --default-mode MODE  the deployment default mode (default: )" +
         std::string(dsh::to_string(dsh::SandboxMode::read_only)) + R"()
  --root DIR           the fallback workspace root (default: the working directory)
  --json               one JSON object instead of text

)" + "MODE is " +
         dsh::names_of(dsh::SANDBOX_MODES, ", ", " or ") + "; a family is " +
         dsh::names_of(dsh::FAMILIES, ", ", " or ") + ".\n" +
         R"(Opening a log validates every line and cuts off a torn last line (reported on stderr).
Exit status: 0 success, 1 refused input (a damaged or forged log, or one that cannot be opened),
2 usage error.
)";
}

/// A mistake in the command line: exit status 2.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What `show` is told about the host.
struct ShowOptions {
  dsh::FamilySet enforced = dsh::FamilySet::all();
  dsh::FamilySet escalatable;
  dsh::PolicyConfig config;
  bool json = false;
};

dsh::SandboxMode parse_mode(std::string_view text) {
  if (const auto mode = dsh::parse_sandbox_mode(text)) {
    return *mode;
  }
  throw UsageError("unknown mode \"" + std::string(text) +
                   "\"; expected read-only, workspace-write or danger-full-access");
}

dsh::FamilySet parse_families(std::string_view list) {
  dsh::FamilySet families;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    const auto family = dsh::parse_family(name);
    if (!family) {
      throw UsageError("unknown family \"" + std::string(name) + "\"; expected filesystem, bash or terminal");
    }
    families.insert(*family);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (comma != std::string_view::npos && list.empty()) {
      throw UsageError("a family list must not end with ','");
    }
  }
  return families;
}

/// Parses the options of `show`: `--name VALUE`, `--name=VALUE` and `--json`.
ShowOptions parse_show_options(const std::vector<std::string_view>& args) {
  ShowOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view name = args[i];
    std::optional<std::string_view> value;
    if (const std::size_t equals = name.find('='); equals != std::string_view::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    if (name == "--json" && !value) {
      options.json = true;
      continue;
    }
    if (name != "--families" && name != "--escalatable" && name != "--default-mode" && name != "--root") {
      throw UsageError("unknown option " + std::string(args[i]) + " for show");
    }
    if (!value) {
      if (++i == args.size()) {
        throw UsageError("option " + std::string(name) + " needs a value");
      }
      value = args[i];
    }
    if (name == "--families") {
      options.enforced = parse_families(*value);
    } else if (name == "--escalatable") {
      options.escalatable = parse_families(*value);
    } else if (name == "--default-mode") {
      options.config.mode = parse_mode(*value);
    } else if (value->empty()) {
      throw UsageError("option --root needs a non-empty directory");
    } else {
      options.config.workspace_root = std::filesystem::path(*value);
    }
  }
  return options;
}

/// The log a command works on: a path given as it is, or a session of a DSH store.
struct LogSource {
  std::string path; ///< As shown: the path given, or the stored log's path.
  std::optional<dsh::DshStoredSession> stored;
};

/// The options that name a session of a DSH store.
struct StoreOptions {
  std::optional<std::string> root;
  std::optional<std::string> session;
  std::optional<std::string> cwd;
};

/// Removes `--dsh-root`, `--session` and `--cwd` (with their values, `--name VALUE` or
/// `--name=VALUE`) from `args`, wherever they are, and returns them.
StoreOptions take_store_options(std::vector<std::string_view>& args) {
  StoreOptions options;
  std::vector<std::string_view> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view name = args[i];
    std::optional<std::string_view> value;
    if (const std::size_t equals = name.find('='); equals != std::string_view::npos && name.starts_with("--")) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    std::optional<std::string>* slot = name == "--dsh-root"  ? &options.root
                                       : name == "--session" ? &options.session
                                       : name == "--cwd"     ? &options.cwd
                                                             : nullptr;
    if (slot == nullptr) {
      rest.push_back(args[i]);
      continue;
    }
    if (!value) {
      if (++i == args.size()) {
        throw UsageError("option " + std::string(name) + " needs a value");
      }
      value = args[i];
    }
    if (*slot) {
      throw UsageError("option " + std::string(name) + " is given twice");
    }
    *slot = std::string(*value);
  }
  args = std::move(rest);
  return options;
}

/// Finds the stored session the options name.
LogSource stored_source(const StoreOptions& options) {
  if (!options.session) {
    throw UsageError("--dsh-root needs --session ID");
  }
  const dsh::DshStoredSession stored = options.cwd
                                           ? dsh::locate_dsh_session(*options.root, *options.session, *options.cwd)
                                           : dsh::locate_dsh_session(*options.root, *options.session);
  return LogSource{stored.path.native(), stored};
}

/// Opens the log; reports a torn last line that opening cut off.
dsh::SessionLog open_log(const LogSource& source) {
  dsh::SessionLog log = source.stored ? dsh::open_dsh_session(*source.stored) : dsh::SessionLog::open(source.path);
  if (const auto repair = log.tail_repair()) {
    std::cerr << "dsh-policy: session log " << dsh::json_string_literal(source.path);
    if (log.encoding() == dsh::DshLogEncoding::zstd) {
      std::cerr << ": repaired a torn last frame at byte " << repair->offset << " (cut " << repair->removed_bytes
                << " bytes; complete rows kept in a new frame: " << repair->recovered_rows << ")\n";
    } else {
      std::cerr << " line " << repair->line << ": cut off a torn last line (" << repair->removed_bytes
                << " bytes without a final newline)\n";
    }
  }
  return log;
}

/// Returns epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
std::string utc_time(std::int64_t epoch_ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> when{milliseconds(epoch_ms)};
  const sys_days day = floor<days>(when);
  const year_month_day date{day};
  const hh_mm_ss clock{when - day};
  std::ostringstream out;
  out << std::setfill('0') << std::setw(4) << static_cast<int>(date.year()) << '-' << std::setw(2)
      << static_cast<unsigned>(date.month()) << '-' << std::setw(2) << static_cast<unsigned>(date.day()) << 'T'
      << std::setw(2) << clock.hours().count() << ':' << std::setw(2) << clock.minutes().count() << ':' << std::setw(2)
      << clock.seconds().count() << '.' << std::setw(3) << clock.subseconds().count() << 'Z';
  return out.str();
}

/// A `sandbox/mode` event as the inspector shows it.
struct Switch {
  nlohmann::json seq;    ///< As stored (an integer in a valid log).
  nlohmann::json time;   ///< As stored; null when absent.
  std::string mode;      ///< The mode it switched to.
  nlohmann::json source; ///< `data.source` as stored; null when absent.

  explicit Switch(const nlohmann::json& event)
      : seq(event.at("seq")), time(event.value("time", nlohmann::json())),
        mode(event.at("data").at("mode").get<std::string>()),
        source(event.at("data").value("source", nlohmann::json())) {}

  /// Returns the time as `1764480000600 (2025-11-30T05:20:00.600Z)`, or "-" when it has none.
  [[nodiscard]] std::string time_text() const {
    if (!time.is_number_integer()) {
      return time.is_null() ? "-" : compact(time);
    }
    const auto ms = time.get<std::int64_t>();
    return std::to_string(ms) + " (" + utc_time(ms) + ")";
  }
  /// Returns the source as written, or "-" when it has none.
  [[nodiscard]] std::string source_text() const {
    return source.is_null() ? "-" : source.is_string() ? source.get<std::string>() : compact(source);
  }
  [[nodiscard]] static std::string compact(const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
};

/// Returns the last `sandbox/mode` event of the log: the library's fold walks the log from the
/// end and stops at the switch it decides by, and the projection keeps that event.
std::optional<Switch> last_switch(const dsh::SessionLog& log) {
  std::optional<Switch> last;
  (void)dsh::effective_mode(log.events(), [&last](const nlohmann::json& event) {
    const std::optional<dsh::SandboxMode> mode = dsh::effective_mode(std::span<const nlohmann::json>(&event, 1));
    if (mode) {
      last.emplace(event);
    }
    return mode;
  });
  return last;
}

std::string family_list(dsh::FamilySet families) {
  std::string text;
  for (const dsh::Family family : families) {
    text.append(text.empty() ? "" : ", ").append(dsh::to_string(family));
  }
  return text.empty() ? "none" : text;
}

int show(const LogSource& source, const ShowOptions& options) {
  const std::string& path = source.path;
  const dsh::SessionLog log = open_log(source);
  dsh::PolicyOwner owner(options.config);
  std::vector<dsh::Disposer> registrations;
  for (const dsh::Family family : options.enforced) {
    registrations.push_back(owner.registerEnforcedFamily(family));
  }
  for (const dsh::Family family : options.escalatable) {
    registrations.push_back(owner.registerEscalatableFamily(family));
  }
  const dsh::ResolvedPolicy policy = owner.resolve(log);
  const std::optional<Switch> last = policy.mode_source == dsh::ModeSource::session ? last_switch(log) : std::nullopt;
  const std::string context = owner.context(log);

  if (options.json) {
    nlohmann::json out = policy;
    out["log"] = path;
    out["session"] = log.header().id;
    out["switch"] =
        last ? nlohmann::json{{"seq", last->seq}, {"time", last->time}, {"source", last->source}} : nlohmann::json();
    out["enforced"] = owner.enforcedFamilies();
    out["escalatable"] = owner.escalatableFamilies();
    out["context"] = context;
    std::cout << Switch::compact(out) << '\n';
    return 0;
  }
  std::cout << "log:       " << path << '\n' << "session:   " << log.header().id << '\n' << "mode:      ";
  if (last) {
    std::cout << dsh::to_string(policy.mode) << ", set by the switch at seq " << Switch::compact(last->seq) << ", time "
              << last->time_text() << ", source " << last->source_text() << '\n';
  } else {
    std::cout << dsh::to_string(policy.mode) << ", the deployment default (the log holds no sandbox/mode switch)\n";
  }
  std::cout << "root:      " << policy.workspace_root.string()
            << (policy.root_source == dsh::RootSource::session
                    ? " (the session's cwd)\n"
                    : " (the fallback root: --root or the working directory)\n")
            << "families:  enforced " << family_list(owner.enforcedFamilies()) << "; escalatable "
            << family_list(owner.escalatableFamilies()) << '\n'
            << "sandbox:policy:" << (context.empty() ? " (empty: no family is enforced)\n" : "\n" + context + "\n");
  return 0;
}

int history(const LogSource& source) {
  const std::string& path = source.path;
  const dsh::SessionLog log = open_log(source);
  std::vector<Switch> switches;
  for (const nlohmann::json& event : log.events()) {
    if (event.at("type") == dsh::SANDBOX_MODE_EVENT) {
      switches.emplace_back(event);
    }
  }
  if (switches.empty()) {
    std::cout << "no sandbox/mode switch in " << path << "; the deployment default applies\n";
    return 0;
  }
  for (const Switch& entry : switches) {
    std::cout << "seq " << Switch::compact(entry.seq) << "  time " << entry.time_text() << "  mode " << entry.mode
              << "  source " << entry.source_text() << '\n';
  }
  return 0;
}

int set(const LogSource& source, dsh::SandboxMode mode) {
  const std::string& path = source.path;
  dsh::SessionLog log = open_log(source);
  const std::uint64_t seq = log.next_seq();
  dsh::set_sandbox_mode(log, mode);
  std::cout << "appended sandbox/mode " << dsh::to_string(mode) << " at seq " << seq << " to " << path << '\n';
  return 0;
}

/// Lists the sessions of the store at `root`: one line each on standard output; a session that
/// cannot be read is reported on standard error, and makes the exit status 1.
int list(const std::string& root, dsh::SandboxMode default_mode) {
  std::vector<dsh::LogError> problems;
  const std::vector<dsh::DshStoredSession> sessions = dsh::list_dsh_sessions(root, &problems);
  int status = problems.empty() ? 0 : 1;
  for (const dsh::LogError& problem : problems) {
    std::cerr << "dsh-policy: " << problem.what() << '\n';
  }
  if (sessions.empty()) {
    std::cout << "no session in the DSH session store " << dsh::json_string_literal(root) << '\n';
    return status;
  }
  dsh::PolicyConfig config;
  config.mode = default_mode;
  config.workspace_root = std::filesystem::path(root); // list shows no root: the store's, so the cwd is never read
  const dsh::PolicyOwner owner(config);
  for (const dsh::DshStoredSession& stored : sessions) {
    const std::string where = stored.project + "/" + stored.encoded_id + "/" + stored.path.filename().native();
    try {
      const dsh::SessionLog log = open_log(LogSource{stored.path.native(), stored});
      const dsh::ResolvedPolicy policy = owner.resolve(log); // the owner's precedence: session, else default
      std::cout << dsh::json_string_literal(log.header().id) << "  " << dsh::to_string(policy.mode)
                << (policy.mode_source == dsh::ModeSource::session ? "  session  " : "  default  ") << where << '\n';
    } catch (const dsh::Error& error) {
      std::cerr << "dsh-policy: " << where << ": " << error.what() << '\n';
      status = 1;
    }
  }
  return status;
}

int run(std::vector<std::string_view> args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << usage();
    return 0;
  }
  if (args.empty()) {
    throw UsageError("missing command");
  }
  const std::string_view command = args[0];
  if (command != "show" && command != "history" && command != "set" && command != "list") {
    throw UsageError("unknown command \"" + std::string(command) + "\"");
  }
  const StoreOptions store = take_store_options(args);
  if (!store.root && (store.session || store.cwd)) {
    throw UsageError("--session and --cwd name a session of a DSH store: they need --dsh-root DIR");
  }
  if (command == "list") {
    if (!store.root || store.session || store.cwd) {
      throw UsageError("list takes --dsh-root DIR and no session");
    }
    dsh::SandboxMode default_mode = dsh::SandboxMode::read_only;
    if (args.size() == 3 && args[1] == "--default-mode") {
      default_mode = parse_mode(args[2]);
    } else if (args.size() == 2 && args[1].starts_with("--default-mode=")) {
      default_mode = parse_mode(args[1].substr(15));
    } else if (args.size() != 1) {
      throw UsageError("list takes only --dsh-root DIR and --default-mode MODE");
    }
    return list(*store.root, default_mode);
  }
  // The log: a path in the place of LOG, or the session the store options name (then the
  // remaining arguments shift left by one).
  LogSource source;
  std::size_t first_option = 1;
  if (store.root) {
    source = stored_source(store);
  } else {
    if (args.size() < 2 || args[1].empty() || args[1].starts_with("--")) {
      throw UsageError(std::string(command) + " needs a session log");
    }
    source.path = std::string(args[1]);
    first_option = 2;
  }
  const std::vector<std::string_view> rest(args.begin() + static_cast<std::ptrdiff_t>(first_option), args.end());
  if (command == "show") {
    return show(source, parse_show_options(rest));
  }
  if (command == "history") {
    if (!rest.empty()) {
      throw UsageError("history takes only a session log");
    }
    return history(source);
  }
  if (rest.size() != 1) {
    throw UsageError("set takes a session log and a mode");
  }
  return set(source, parse_mode(rest[0]));
}

} // namespace

int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) must make a session-log append fail with EFBIG, which the
  // log rolls back and reports, rather than kill this process in the middle of it.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  try {
    return run(args);
  } catch (const UsageError& error) {
    std::cerr << "dsh-policy: " << error.what() << " (see dsh-policy --help)\n";
    return 2;
  } catch (const dsh::ConfigError& error) {
    std::cerr << "dsh-policy: " << error.what() << " (see dsh-policy --help)\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "dsh-policy: " << error.what() << '\n';
    return 1;
  }
}
