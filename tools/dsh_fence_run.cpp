// dsh-fence-run: the fence as the `runnerCommand` of DSH's local sandbox provider.
//
//   dsh-fence-run PROFILE... -- COMMAND...
//
// DSH's provider, configured with `runnerCommand: ["dsh-fence-run"]`, runs
// `dsh-fence-run <bubblewrap profile arguments> -- <argv>`. This program accepts exactly DSH's
// two profiles, in any order:
//
//   read-only:       --ro-bind / / --dev /dev --unshare-pid --proc /proc --die-with-parent
//   workspace-write: the same, plus --tmpfs /tmp --bind ROOT ROOT
//
// resolves the policy with a PolicyOwner (no session: the profile's mode as the approved mode,
// the canonical ROOT as the root), prepares the fence with the namespace layer where the system
// grants it, runs the command in this process's working directory with this process's stdin,
// and exits with the command's status (128 + N when signal N ended it).
//
// Anything else is refused before anything runs, with one stderr line starting with
// "dsh-fence-run: " (the failure signature the operator configures) and exit status 2. A fence
// that cannot be prepared or a command that cannot be started gives the same kind of line and
// 126 (127 when the program is not found). Once the command has started, this program prints
// nothing of its own: the command's stderr is the only stderr, so DSH's denial classifier sees the
// fence's refusals ("Permission denied" from Landlock, "Read-only file system" from the namespace
// layer's read-only view) and never a line of this program's.
// See docs/enforcement.md#using-the-fence-from-dsh.
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

constexpr std::string_view program_name = "dsh-fence-run";

/// Exit status of a refused argument (nothing ran).
constexpr int refused_exit_code = 2;

/// One fixed option of DSH's profile: its name and the exact values it must carry.
struct FixedOption {
  std::string_view name;
  std::array<std::string_view, 2> values;
  std::size_t arity;
  bool workspace_write_only; ///< in the workspace-write profile only
};

/// The fixed options of the profile, in the order DSH emits them (`--bind ROOT ROOT` apart).
constexpr std::array<FixedOption, 6> fixed_options{{
    {"--ro-bind", {"/", "/"}, 2, false},
    {"--dev", {"/dev", ""}, 1, false},
    {"--unshare-pid", {"", ""}, 0, false},
    {"--proc", {"/proc", ""}, 1, false},
    {"--die-with-parent", {"", ""}, 0, false},
    {"--tmpfs", {"/tmp", ""}, 1, true},
}};

/// `option` as the profile spells it: the name, then each value.
std::string spelled(const FixedOption& option) {
  std::string text(option.name);
  for (std::size_t i = 0; i < option.arity; ++i) {
    text += " ";
    text += option.values[i];
  }
  return text;
}

/// What the command line asked for: the workspace root of `--bind` (none: read-only) and the command.
struct Request {
  std::optional<std::string> root;
  std::vector<std::string> command;
};

/// The outcome of parsing: a request, or the refusal's text (after "dsh-fence-run: ").
struct Parsed {
  std::optional<Request> request;
  std::string refusal;
};

Parsed refuse(std::string text) { return Parsed{std::nullopt, std::move(text)}; }

/// Parses `argv` against DSH's two profiles; every deviation is a refusal naming it.
Parsed parse(int argc, char** argv) {
  Request request;
  std::array<bool, fixed_options.size()> seen{};
  bool separator = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      separator = true;
      break;
    }
    const int left = argc - i - 1; // the arguments after this one
    if (arg == "--bind") {
      if (left < 2) {
        return refuse("--bind needs a source and a destination (expected --bind ROOT ROOT)");
      }
      const std::string source = argv[i + 1];
      const std::string destination = argv[i + 2];
      i += 2;
      if (request.root) {
        return refuse("a second --bind " + dsh::json_string_literal(source) + " " +
                      dsh::json_string_literal(destination) + ": the profile binds one workspace root");
      }
      if (source != destination) {
        return refuse("--bind " + dsh::json_string_literal(source) + " " + dsh::json_string_literal(destination) +
                      ": the source and the destination differ (expected --bind ROOT ROOT)");
      }
      if (source.empty() || source.front() != '/') {
        return refuse("--bind " + dsh::json_string_literal(source) + " " + dsh::json_string_literal(destination) +
                      ": expected an absolute workspace root");
      }
      request.root = source;
      continue;
    }
    bool known = false;
    for (std::size_t k = 0; k < fixed_options.size(); ++k) {
      const FixedOption& option = fixed_options[k];
      if (arg != option.name) {
        continue;
      }
      known = true;
      if (static_cast<std::size_t>(left) < option.arity) {
        return refuse(std::string(arg) + ": too few values (expected " + spelled(option) + ")");
      }
      for (std::size_t v = 0; v < option.arity; ++v) {
        if (argv[i + 1 + static_cast<int>(v)] != option.values[v]) {
          std::string given(arg);
          for (std::size_t w = 0; w < option.arity; ++w) {
            given += " " + dsh::json_string_literal(argv[i + 1 + static_cast<int>(w)]);
          }
          return refuse(given + ": expected " + spelled(option));
        }
      }
      if (seen[k]) {
        return refuse(spelled(option) + " given twice");
      }
      seen[k] = true;
      i += static_cast<int>(option.arity);
      break;
    }
    if (known) {
      continue;
    }
    if (arg.starts_with("-")) {
      return refuse("unknown option " + dsh::json_string_literal(arg) +
                    " (expected DSH's bubblewrap profile, then --, then the command)");
    }
    return refuse("missing -- before the command " + dsh::json_string_literal(arg));
  }
  if (!separator) {
    return refuse("missing -- and the command after it");
  }
  request.command.assign(argv + i + 1, argv + argc);
  if (request.command.empty()) {
    return refuse("no command after --");
  }
  for (std::size_t k = 0; k < fixed_options.size(); ++k) {
    if (!seen[k] && !fixed_options[k].workspace_write_only) {
      return refuse("the profile lacks " + spelled(fixed_options[k]));
    }
  }
  const bool tmpfs = seen[fixed_options.size() - 1];
  if (tmpfs != request.root.has_value()) {
    return refuse(
        std::string(tmpfs ? "--tmpfs /tmp without --bind ROOT ROOT" : "--bind ROOT ROOT without --tmpfs /tmp") +
        " (DSH's workspace-write profile has both, its read-only profile neither)");
  }
  return Parsed{std::move(request), {}};
}

/// Prints the one line of a call that did not run and returns `status`.
int not_run(const std::string& text, int status) {
  std::cerr << program_name << ": " << text << "\n";
  return status;
}

/// Resolves the policy, prepares the fence and runs the command; the exit status.
int run(const Request& request) {
  dsh::PolicyConfig config; // the deployment default stays read-only, the narrowest mode
  if (request.root) {
    config.workspace_root = *request.root;
  }
  const dsh::PolicyOwner owner(config);
  if (request.root && owner.workspaceRoot() == "/") {
    return not_run("--bind " + dsh::json_string_literal(*request.root) + " " + dsh::json_string_literal(*request.root) +
                       ": refusing the root of the file system as the workspace root",
                   refused_exit_code);
  }
  // The profile's mode is this call's approval; the owner decides the rest as it does for
  // every call (without a session: the approved mode, the canonical fallback root).
  const dsh::ResolvedPolicy policy =
      owner.resolve(request.root ? dsh::SandboxMode::workspace_write : dsh::SandboxMode::read_only);

  dsh::FenceOptions options;
  options.isolation = dsh::Isolation::best_effort;
  const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy, options);

  dsh::FencedCommand command(request.command);
  command.launch(dsh::Launch::fork); // one call from a small program: a fork is cheaper than a launcher
  // The command reads what DSH gives this program (its `stdin` bytes, or nothing); stdout and
  // stderr are relayed. The working directory is this program's: the namespace layer enters it
  // again in the command's view, where the workspace is the writable one. A terminal is never
  // handed on (run by hand from a shell): through it the command could reconfigure the user's
  // terminal (echo, canonical mode), which the fence keeps out of its reach; it reads /dev/null.
  if (::fcntl(STDIN_FILENO, F_GETFD) >= 0 && ::isatty(STDIN_FILENO) == 0) {
    command.redirect(STDIN_FILENO, STDIN_FILENO);
  }
  std::optional<dsh::FencedChild> child;
  try {
    child.emplace(command.spawn(fence));
  } catch (const dsh::SystemError& error) {
    // The supervisor reports an exec that found no program as ENOENT; nothing ran.
    return not_run(std::string("not run: ") + error.what(), error.code() == std::errc::no_such_file_or_directory
                                                                ? dsh::FencedCommand::not_found_exit_code
                                                                : dsh::FencedCommand::cannot_run_exit_code);
  }
  try {
    return child->wait();
  } catch (const std::exception& error) {
    // The command ran: no line of this program may now carry the failure signature, which
    // would make DSH report that nothing ran.
    std::cerr << program_name << " (after the command started): " << error.what() << "\n";
    return dsh::FencedCommand::cannot_run_exit_code;
  }
}

} // namespace

int main(int argc, char** argv) {
  // A closed stdout must not end this program in the middle of the call: the relay drops
  // the bytes and the command's status is still returned. (The command gets the default back.)
  std::signal(SIGPIPE, SIG_IGN);
  const Parsed parsed = parse(argc, argv);
  if (!parsed.request) {
    return not_run(parsed.refusal, refused_exit_code);
  }
  try {
    return run(*parsed.request);
  } catch (const std::exception& error) {
    return not_run(std::string("not run: ") + error.what(), dsh::FencedCommand::cannot_run_exit_code);
  }
}
