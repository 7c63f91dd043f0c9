// A complete small agent host: one PolicyOwner, a write tool on dsh::write_file, a bash tool on
// FencedCommand::capture with the retry advice the owner's escalation choices allow, and a
// terminal on a pseudo-terminal, all under the one policy the model is told about. A scripted
// "model" calls them; every tool result is printed as the model would receive it.
//
// The workspace is a fresh directory, removed at exit; the output shows it as $WORKSPACE (and
// its parent as $BASE), so it is the same on every run and checked byte for byte
// (02_small_host.expected). The namespace layer is off (FenceOptions::isolation) so that a refused
// write reads `Permission denied` on every kernel, not `Read-only file system` where the layer
// applies. Exit status: 0; 77 when this kernel cannot fence commands (no Landlock), the test then
// being skipped; 1 on an unexpected error.
#include <dsh/command_output.hpp>
#include <dsh/denials.hpp>
#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/write_error.hpp>
#include <dsh/write_file.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <poll.h>
#include <pty.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

/// A fresh directory for the example's workspace, removed with everything in it at the end.
class Scratch {
public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "dsh-small-host-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    base_ = dsh::canonical_path(pattern);
    fs::create_directory(base_ / "workspace");
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(base_, ignored);
  }
  [[nodiscard]] const fs::path& base() const noexcept { return base_; }

private:
  fs::path base_;
};

/// The host: the owner, the session, and the three tools.
class SmallHost {
public:
  explicit SmallHost(const fs::path& base)
      : base_(base.native()), workspace_((base / "workspace").native()), owner_(config(base / "workspace")),
        session_(dsh::SessionHeader{"small-host", std::nullopt, 1764480000000}) {}

  /// The model text of the session's policy, as the host puts it in the prompt.
  [[nodiscard]] std::string context() const { return shown(owner_.context(session_)); }

  /// The user switches the session's standing mode.
  void switch_to(dsh::SandboxMode mode) { dsh::set_sandbox_mode(session_, mode); }

  /// The write tool: the whole `content` into `path` (relative to the workspace), parents made.
  [[nodiscard]] std::string write(const std::string& path, const std::string& content) const {
    const dsh::ResolvedPolicy policy = owner_.resolve(session_);
    dsh::WriteOptions options;
    options.create_parents = true;
    try {
      dsh::write_file(policy, path, content, options);
      return "wrote " + std::to_string(content.size()) + " bytes to " + path;
    } catch (const dsh::WriteError& error) {
      std::string result = std::string("error: ") + error.what();
      if (error.code() == std::errc::permission_denied) {
        const std::array<fs::path, 1> denied{dsh::canonical_path(policy.workspace_root / path)};
        result += "\n" +
                  dsh::retry_advice(policy, owner_.escalationChoices(session_, dsh::Family::filesystem), denied).text();
      }
      return shown(result);
    }
  }

  /// The bash tool: `command` under the fence of this call's policy (the session's, or the
  /// approved wider mode, checked), output captured and bounded, denials turned into advice.
  [[nodiscard]] std::string bash(const std::string& command, std::optional<dsh::SandboxMode> approved = std::nullopt,
                                 dsh::CaptureOptions capture = {}) const {
    const dsh::ResolvedPolicy policy =
        approved ? owner_.resolveApproved(session_, dsh::Family::bash, *approved) : owner_.resolve(session_);
    const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy, fence_options());
    dsh::FencedCommand call({"bash", "--norc", "--noprofile", "-c", command});
    call.in_directory(policy.workspace_root).set_env("LC_ALL", "C");
    const dsh::CommandOutput output = call.capture(fence, std::move(capture));
    std::string result = "exit status " + std::to_string(output.status) + (output.truncated ? " (output cut)" : "");
    result += "\n[stdout]\n" + output.out + (output.out.empty() || output.out.ends_with('\n') ? "" : "\n");
    result += "[stderr]\n" + output.err + (output.err.empty() || output.err.ends_with('\n') ? "" : "\n");
    if (output.denied) {
      result +=
          "[sandbox] " +
          dsh::retry_advice(policy, owner_.escalationChoices(session_, dsh::Family::bash), output.denied_paths).text() +
          "\n";
    }
    return shown(result);
  }

  /// The terminal: `command` typed into a shell on a new 24x80 pseudo-terminal under the fence
  /// of the session's policy; what the terminal showed (carriage returns dropped) and the status.
  [[nodiscard]] std::string terminal(const std::string& command) const {
    const dsh::ResolvedPolicy policy = owner_.resolve(session_);
    const dsh::PreparedFence fence = dsh::PreparedFence::prepare(policy, fence_options());
    dsh::FencedCommand shell({"bash", "--norc", "--noprofile", "-c", command});
    shell.in_directory(policy.workspace_root).set_env("LC_ALL", "C").set_env("TERM", "dumb");
    winsize size{};
    size.ws_row = 24;
    size.ws_col = 80;
    int master = -1;
    std::fflush(nullptr);
    const ::pid_t pid = ::forkpty(&master, nullptr, nullptr, &size);
    if (pid < 0) {
      throw std::system_error(errno, std::generic_category(), "forkpty");
    }
    if (pid == 0) {
      shell.exec_in_child(fence); // the terminal is the child's 0, 1 and 2 and its controlling terminal
    }
    const dsh::UniqueFd terminal{master};
    std::string screen;
    std::array<char, 4096> buffer{};
    for (;;) {
      pollfd ready{terminal.get(), POLLIN, 0};
      if (::poll(&ready, 1, 60000) <= 0) {
        break; // a safety net: the command ends on its own
      }
      const ::ssize_t got = ::read(terminal.get(), buffer.data(), buffer.size());
      if (got <= 0) {
        break; // EIO once the command has ended and the terminal closed
      }
      for (const char c : std::string_view(buffer.data(), static_cast<std::size_t>(got))) {
        if (c != '\r') {
          screen += c;
        }
      }
    }
    return shown(screen + "exit status " + std::to_string(dsh::FencedCommand::wait_for(pid)) + "\n");
  }

private:
  static dsh::PolicyConfig config(const fs::path& workspace) {
    dsh::PolicyConfig config;
    config.mode = dsh::SandboxMode::read_only;
    config.workspace_root = workspace;
    config.host_label = "Small host";
    return config;
  }

  static dsh::FenceOptions fence_options() {
    dsh::FenceOptions options;
    options.isolation = dsh::Isolation::off;
    return options;
  }

  /// `text` with the workspace shown as $WORKSPACE and its parent as $BASE.
  [[nodiscard]] std::string shown(std::string text) const {
    for (const auto& [path, name] : {std::pair{std::string_view(workspace_), std::string_view("$WORKSPACE")},
                                     std::pair{std::string_view(base_), std::string_view("$BASE")}}) {
      for (std::size_t at = text.find(path); at != std::string::npos; at = text.find(path, at + name.size())) {
        text.replace(at, path.size(), name);
      }
    }
    return text;
  }

  std::string base_;
  std::string workspace_;
  dsh::PolicyOwner owner_;
  dsh::Session session_;
  // Each tool's family is enforced as long as the host runs; the write and bash tools can retry
  // a refused call with an approved wider mode, the terminal cannot.
  dsh::Disposer write_tool_ = owner_.registerEnforcedFamily(dsh::Family::filesystem);
  dsh::Disposer write_retry_ = owner_.registerEscalatableFamily(dsh::Family::filesystem);
  dsh::Disposer bash_tool_ = owner_.registerEnforcedFamily(dsh::Family::bash);
  dsh::Disposer bash_retry_ = owner_.registerEscalatableFamily(dsh::Family::bash);
  dsh::Disposer terminal_ = owner_.registerEnforcedFamily(dsh::Family::terminal);
};

/// Prints one tool call and its result.
void show(std::string_view call, const std::string& result) {
  std::cout << "> " << call << '\n' << result << (result.ends_with('\n') ? "" : "\n") << '\n';
}

} // namespace

int main() try {
  if (dsh::landlock_abi() == 0) {
    std::cerr << "02_small_host: skipped: this kernel cannot fence commands (no Landlock)\n";
    return 77;
  }
  const Scratch scratch;
  SmallHost host(scratch.base());
  std::cout << host.context() << "\n\n";

  show("write notes.txt", host.write("notes.txt", "first notes\n"));
  show("bash: echo draft > notes.txt", host.bash("echo draft > notes.txt"));

  host.switch_to(dsh::SandboxMode::workspace_write);
  std::cout << "(the user switches this session to workspace-write)\n" << host.context() << "\n\n";

  show("write src/hello.txt", host.write("src/hello.txt", "hello\nworld\n"));
  show("bash: cat src/hello.txt; ls missing", host.bash("cat src/hello.txt; ls missing"));
  dsh::CaptureOptions small;
  small.max_bytes = 12;
  show("bash (max_bytes 12): seq 1 100000", host.bash("seq 1 100000", std::nullopt, small));
  dsh::CaptureOptions input;
  input.stdin_bytes = "b\na\nc\n";
  show("bash (stdin \"b\\na\\nc\\n\"): sort | tee sorted.txt", host.bash("sort | tee sorted.txt", std::nullopt, input));
  show("bash: echo beside > ../beside.txt", host.bash("echo beside > ../beside.txt"));
  show("write ../beside.txt", host.write("../beside.txt", "beside\n"));
  show("bash, approved danger-full-access: echo beside > ../beside.txt && cat ../beside.txt",
       host.bash("echo beside > ../beside.txt && cat ../beside.txt", dsh::SandboxMode::danger_full_access));
  show("terminal: tty, stty size, a write inside and one outside",
       host.terminal("tty -s && echo on a terminal; stty size; echo typed > typed.txt && cat typed.txt; "
                     "touch ../outside.txt"));
  return 0;
} catch (const std::exception& error) {
  std::cerr << "02_small_host: " << error.what() << '\n';
  return 1;
}
