// The `terminal` family: an interactive bash on a pseudo-terminal (forkpty), started under
// the same fence as one-shot commands, driven by keystrokes like a user would.
#include "support/landlock.hpp"

#include <dsh/landlock.hpp>
#include <dsh/sandbox_policy.hpp>

#include <array>
#include <csignal>
#include <initializer_list>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <unistd.h>

using dsh::PreparedFence;
using dsh::SandboxMode;
using namespace dsh::test;

namespace {

/// Starts `bash -i` on a new pseudo-terminal under `fence`, in `cwd`, types `keystrokes`, and
/// returns everything the terminal showed until the shell exited, plus its exit status.
std::pair<std::string, int> terminal_session(const PreparedFence& fence, const std::filesystem::path& cwd,
                                             const std::string& keystrokes) {
  dsh::FencedCommand shell({"env", "LC_ALL=C", "TERM=dumb", "PS1=dsh$ ", "bash", "--norc", "--noprofile", "-i"});
  shell.in_directory(cwd);
  winsize size{};
  size.ws_row = 24;
  size.ws_col = 200;
  int master = -1;
  std::fflush(nullptr);
  const ::pid_t pid = ::forkpty(&master, nullptr, nullptr, &size);
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), "forkpty");
  }
  if (pid == 0) {
    shell.exec_in_child(fence); // the child end of the terminal is already on 0, 1 and 2
  }
  const dsh::UniqueFd terminal{master};
  REQUIRE(::write(terminal.get(), keystrokes.data(), keystrokes.size()) == static_cast<ssize_t>(keystrokes.size()));
  std::string screen;
  std::array<char, 4096> buffer{};
  for (;;) {
    pollfd ready{terminal.get(), POLLIN, 0};
    // A safety net against a hung shell, not a timing assertion: the shell exits on its own.
    if (::poll(&ready, 1, 60000) <= 0) {
      break;
    }
    const ssize_t got = ::read(terminal.get(), buffer.data(), buffer.size());
    if (got <= 0) { // EIO once the shell has exited and the terminal closed
      break;
    }
    screen.append(buffer.data(), static_cast<std::size_t>(got));
  }
  return {screen, dsh::FencedCommand::wait_for(pid)};
}

bool shows(const std::string& screen, const std::string& text) { return screen.find(text) != std::string::npos; }

/// Checks that `screen` shows each of `texts`.
void check_shows(const std::string& screen, std::initializer_list<std::string> texts) {
  for (const std::string& text : texts) {
    CAPTURE(text);
    CHECK(shows(screen, text));
  }
}

} // namespace

TEST_CASE("an interactive terminal session obeys the workspace-write fence") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::workspace_write));
  const std::string outside = (lab.outside() / "out.txt").string();
  const dsh::test::TempDir scratch = dsh::test::scratch_in_granted_area(fence.report(), lab.workspace());
  const std::string tmp = (scratch / "t.txt").string();
  const auto [screen, status] = terminal_session(fence, lab.workspace(),
                                                 "echo typed > inside.txt; echo \"inside=$?\"\n"
                                                 "echo typed > " +
                                                     tmp +
                                                     "; echo \"tmp=$?\"\n"
                                                     "echo typed > " +
                                                     outside +
                                                     "; echo \"outside=$?\"\n"
                                                     "stty size; tty >/dev/null && echo \"tty=$?\"\n"
                                                     "exit 3\n");
  CAPTURE(screen);
  CHECK(status == 3);
  check_shows(screen, {
                          "inside=0",
                          "tmp=0",
                          "bash: " + outside + ": Permission denied",
                          "outside=1",
                          "24 200", // terminal ioctls on the inherited terminal work
                          "tty=0",
                      });
  CHECK(read_file(lab.workspace() / "inside.txt") == "typed\n");
  CHECK(read_file(tmp) == "typed\n");
  CHECK(read_file(outside) == "<missing>");
}

TEST_CASE("an interactive terminal session obeys the read-only fence") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::test::write_file(lab.workspace() / "notes.txt", "keep\n");
  const PreparedFence fence = dsh::test::prepare_base(lab.policy(SandboxMode::read_only));
  const auto [screen, status] = terminal_session(fence, lab.workspace(),
                                                 "cat notes.txt\n"
                                                 "echo changed >> notes.txt; echo \"append=$?\"\n"
                                                 "ls missing 2>/dev/null; echo \"null=$?\"\n"
                                                 "echo x > /dev/tty; echo \"devtty=$?\"\n"
                                                 "exit\n");
  CAPTURE(screen);
  CHECK(status == 0);
  check_shows(screen, {
                          "keep",
                          "bash: notes.txt: Permission denied",
                          "append=1",
                          "null=2",
                      });
  // Re-opening the terminal by name for writing is a write outside the grants
  // (docs/enforcement.md); the shell keeps the terminal it was started on.
  CHECK(shows(screen, "bash: /dev/tty: Permission denied"));
  CHECK(shows(screen, "devtty=1"));
  CHECK(read_file(lab.workspace() / "notes.txt") == "keep\n");
}

TEST_CASE("a terminal session under the namespace layer: PID 1 of its own namespace, its end passed on") {
  DSH_REQUIRE_LANDLOCK();
  const Lab lab;
  dsh::FenceOptions options;
  options.isolation = dsh::Isolation::required;
  const PreparedFence fence = PreparedFence::prepare(lab.policy(SandboxMode::workspace_write), options);
  const auto [screen, status] = terminal_session(fence, lab.workspace(),
                                                 "set -- /proc/[0-9]*; echo \"pids=$*\"\n"
                                                 "echo typed > /tmp/t.txt; echo \"tmp=$?\"\n"
                                                 "stty size\n"
                                                 "exit 3\n");
  CAPTURE(screen);
  CHECK(status == 3); // exec_in_child's process passes on how the command ended
  check_shows(screen, {
                          "pids=/proc/1\r\n", "tmp=0",
                          "24 200", // terminal ioctls on the inherited terminal work
                      });
  CHECK(read_file(fence.report().temporary_directory / "t.txt") == "typed\n");
  // A signal sent from inside does not end PID 1 of a namespace; a fault does (perl reads address 8).
  const auto [crashed_screen, crashed] =
      terminal_session(fence, lab.workspace(), "exec perl -e 'my $x = unpack(\"p\", pack(\"J\", 8))'\n");
  CAPTURE(crashed_screen);
  CHECK(crashed == 128 + SIGSEGV); // and the signal that ended it
}
