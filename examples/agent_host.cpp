// The main demo: a scripted agent host talking to a fake model, showing what the model is told
// about the sandbox policy, when, and what that costs in history bytes and prompt cache.
//
//   agent_host [DIR]
//
// The session log and the workspace go to DIR (created if missing, kept afterwards, so that
// `dsh-policy history DIR/session.jsonl` can inspect it), or to a fresh temporary directory that
// is removed at exit. Exit status: 0 when every expectation held, 1 when one failed (each failure
// is reported on stderr), 2 for a usage error.
#include <dsh/runtime_context.hpp>
#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace {

namespace fs = std::filesystem;

constexpr std::string_view SYSTEM_PROMPT = "You are a coding agent. Use the tools to help the user with their project.";

constexpr std::string_view PREAMBLE = "Current runtime context. This snapshot supersedes earlier runtime-context "
                                      "snapshots.\n\n";

/// Returns the wall-clock time in epoch milliseconds (the session header's creation time).
std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

/// Counts failed expectations and reports each on stderr.
class Expectations {
public:
  /// Records `what` as failed unless `held`.
  void check(bool held, std::string_view what) {
    if (!held) {
      ++failures_;
      std::cerr << "EXPECTATION FAILED: " << what << '\n';
    }
  }
  [[nodiscard]] int failures() const noexcept { return failures_; }

private:
  int failures_ = 0;
};

/// The fake model. It reads its prompt the way a provider would: the system prompt, then every
/// message of the session's history in order. It keeps the previous prompt to show how much of
/// each new prompt a provider's prefix cache would serve, and it answers with the file policy it
/// believes it is under, read from the newest runtime-context snapshot in its history.
class FakeModel {
public:
  /// What one request looked like from the model's side.
  struct Reply {
    std::size_t prompt_bytes = 0; ///< The whole prompt.
    std::size_t cached_bytes = 0; ///< The longest prefix shared with the previous prompt.
    std::string believed_policy;  ///< "read-only", ..., "none" (cleared) or "unknown" (never told).
  };

  /// Serves one request for `log`.
  [[nodiscard]] Reply request(const dsh::SessionLog& log) {
    std::string prompt(SYSTEM_PROMPT);
    std::string newest_snapshot;
    for (const nlohmann::json& event : log.events()) {
      if (event.at("type") != dsh::USER_MESSAGE_EVENT) {
        continue; // mode switches and the like are host bookkeeping, not messages
      }
      const auto& text = event.at("data").at("content").at(0).at("text").get_ref<const std::string&>();
      prompt.append("\n\n[user] ").append(text);
      if (text.starts_with("Current runtime context")) {
        newest_snapshot = text;
      }
    }
    Reply reply{prompt.size(), shared_prefix(previous_prompt_, prompt), believed_policy(newest_snapshot)};
    previous_prompt_ = std::move(prompt);
    return reply;
  }

private:
  [[nodiscard]] static std::size_t shared_prefix(std::string_view a, std::string_view b) noexcept {
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) {
      ++n;
    }
    return n;
  }

  [[nodiscard]] static std::string believed_policy(std::string_view snapshot) {
    constexpr std::string_view marker = "file policy: ";
    if (snapshot.empty()) {
      return "unknown";
    }
    const std::size_t at = snapshot.find(marker);
    if (at == std::string_view::npos) {
      return "none";
    }
    const std::size_t begin = at + marker.size();
    return std::string(snapshot.substr(begin, snapshot.find('.', begin) - begin));
  }

  std::string previous_prompt_;
};

/// One enforcement backend: the family it fences, and (optionally) its escalation path.
struct Backend {
  dsh::Disposer enforced;
  dsh::Disposer escalatable;
};

/// Mounts a backend for `family` as a real backend would at start-up.
Backend mount(dsh::PolicyOwner& owner, dsh::Family family, bool escalatable) {
  Backend backend{owner.registerEnforcedFamily(family), {}};
  if (escalatable) {
    backend.escalatable = owner.registerEscalatableFamily(family);
  }
  return backend;
}

/// The `sandbox_permissions` parameter a tool of `family` advertises for the next call: a JSON
/// schema whose enum is the owner's escalation choices, or nullopt (the tool omits the
/// parameter) when there are none.
std::optional<nlohmann::json> sandbox_permissions(const dsh::PolicyOwner& owner, const dsh::SessionLog& log,
                                                  dsh::Family family) {
  const std::span<const dsh::SandboxMode> choices = owner.escalationChoices(log, family);
  if (choices.empty()) {
    return std::nullopt;
  }
  nlohmann::json modes = nlohmann::json::array();
  for (const dsh::SandboxMode mode : choices) {
    modes.push_back(dsh::to_string(mode));
  }
  return nlohmann::json{{"type", "string"}, {"enum", std::move(modes)}};
}

/// The host process: one policy owner, its backends and the open session log. A restart is
/// destroying it and building a new one from the same files.
struct Host {
  dsh::PolicyOwner owner;
  Backend filesystem;
  Backend bash;
  Backend terminal;
  dsh::SessionLog log;

  Host(const fs::path& fallback_root, dsh::SessionLog opened, bool with_terminal)
      : owner(dsh::PolicyConfig{dsh::SandboxMode::read_only, fallback_root, "DSH"}),
        filesystem(mount(owner, dsh::Family::filesystem, true)), bash(mount(owner, dsh::Family::bash, true)),
        terminal(with_terminal ? mount(owner, dsh::Family::terminal, false) : Backend{}), log(std::move(opened)) {}

  /// What the agent loop does before every model request: assemble the runtime context.
  [[nodiscard]] std::string snapshot() const { return dsh::RuntimeContext{}.add_sandbox_policy(owner, log).render(); }
};

/// Runs the scripted requests and checks every expectation.
class Demo {
public:
  explicit Demo(const fs::path& dir)
      : dir_(dir), log_path_(dir / "session.jsonl"), workspace_(dir / "workspace"),
        real_workspace_(dir / "repos" / "project") {}

  int run() {
    fs::create_directories(real_workspace_);
    fs::create_directory_symlink(fs::path("repos") / "project", workspace_);
    const std::string root = fs::canonical(real_workspace_).string();
    quoted_root_ = dsh::json_string_literal(root);

    std::cout << "dsh agent-host demo: a scripted host, a fake model, one session log\n"
              << "session log:   " << log_path_.string() << '\n'
              << "session cwd:   " << workspace_.string() << "  (a symbolic link)\n"
              << "canonical cwd: " << root << "  (what the policy and the model use)\n"
              << "system prompt: " << SYSTEM_PROMPT.size() << " bytes, the same bytes in every request\n"
              << "backends:      filesystem and bash (both can escalate), terminal\n";

    auto host = std::make_optional<Host>(
        dir_ / "fallback",
        dsh::SessionLog::create(log_path_, dsh::SessionHeader{"demo", workspace_.string(), now_ms()}), true);
    const std::string read_only_all = std::string(PREAMBLE).append(READ_ONLY_ALL);
    // In read-only the escalatable families offer both wider modes; terminal cannot escalate.
    const Offers from_read_only{std::string(BOTH_WIDER), std::string(BOTH_WIDER), "omitted"};
    request(*host, "1. first request", dsh::SnapshotOutcome::snapshot, read_only_all, "read-only", from_read_only);
    request(*host, "2. unchanged request", dsh::SnapshotOutcome::nothing, read_only_all, "read-only", from_read_only);

    switch_mode(*host, dsh::SandboxMode::workspace_write);
    // Never the current mode again: only danger-full-access is wider.
    const Offers from_workspace_write{std::string(DANGER_ONLY), std::string(DANGER_ONLY), "omitted"};
    request(*host, "3. next request", dsh::SnapshotOutcome::snapshot,
            std::string(PREAMBLE) +
                "Current DSH file policy: workspace-write. The write and edit tools, one-shot "
                "bash commands, and terminal sessions may modify files under the session "
                "workspace: " +
                quoted_root_ + ". Some platform temporary areas may also be writable.",
            "workspace-write", from_workspace_write);

    refused_approval(*host, dsh::Family::bash, dsh::SandboxMode::workspace_write,
                     "sandbox escalation to workspace-write is not strictly wider than this call's current "
                     "workspace-write mode; approve one of: danger-full-access");

    unmount(host->terminal, "the terminal backend");
    const std::string two_families = std::string(PREAMBLE) +
                                     "Current DSH file policy: workspace-write. The write and edit tools and one-shot "
                                     "bash commands may modify files under the session workspace: " +
                                     quoted_root_ + ". Some platform temporary areas may also be writable.";
    request(*host, "4. next request", dsh::SnapshotOutcome::snapshot, two_families, "workspace-write",
            from_workspace_write);

    host.reset();
    host.emplace(dir_ / "fallback", dsh::SessionLog::open(log_path_), false);
    restarted(*host, two_families);
    request(*host, "5. first request after the restart", dsh::SnapshotOutcome::nothing, two_families, "workspace-write",
            from_workspace_write);

    switch_mode(*host, dsh::SandboxMode::danger_full_access);
    // Nothing is wider: no tool advertises the parameter.
    const Offers nothing_wider{"omitted", "omitted", "omitted"};
    request(*host, "6. next request", dsh::SnapshotOutcome::snapshot,
            std::string(PREAMBLE) + "Current DSH file policy: danger-full-access. The DSH file sandbox does not "
                                    "restrict the write and edit tools or one-shot bash commands.",
            "danger-full-access", nothing_wider);

    unmount(host->filesystem, "the filesystem backend");
    unmount(host->bash, "the bash backend");
    request(*host, "7. next request", dsh::SnapshotOutcome::cleared, std::string(dsh::RUNTIME_CONTEXT_CLEARED), "none",
            nothing_wider);

    std::cout << "\nsummary: " << snapshots_ << " snapshot messages in " << requests_ << " requests, " << history_bytes_
              << " bytes of snapshot text in the history; the system prompt never changed.\n";
    if (expect_.failures() > 0) {
      std::cout << expect_.failures() << " expectation(s) failed\n";
      return 1;
    }
    std::cout << "every expectation held\n";
    return 0;
  }

private:
  /// The `enum` of each family's `sandbox_permissions` in canonical order, "omitted" when the
  /// tool has no such parameter.
  using Offers = std::array<std::string, 3>;

  static constexpr std::string_view BOTH_WIDER = R"(["workspace-write","danger-full-access"])";
  static constexpr std::string_view DANGER_ONLY = R"(["danger-full-access"])";

  static constexpr std::string_view READ_ONLY_ALL =
      "Current DSH file policy: read-only. The write and edit tools, one-shot bash commands, and terminal sessions "
      "cannot modify files in the standing mode. For the write and edit tools and one-shot bash commands, do not "
      "refuse a required modification from this standing mode alone: attempt it normally and follow the tool's "
      "denial and escalation guidance.";

  /// One model request: assemble, announce, let the model read its prompt; print and check it.
  void request(Host& host, std::string_view title, dsh::SnapshotOutcome expected_outcome,
               const std::string& expected_text, std::string_view expected_belief, const Offers& expected_offers) {
    const std::uintmax_t log_before = fs::file_size(log_path_);
    const std::size_t events_before = host.log.events().size();
    const std::string text = host.snapshot();
    const dsh::SnapshotOutcome outcome = dsh::announce_runtime_context(host.log, text);
    const std::uintmax_t log_added = fs::file_size(log_path_) - log_before;
    const FakeModel::Reply reply = model_.request(host.log);
    const bool appended = outcome != dsh::SnapshotOutcome::nothing;
    ++requests_;

    std::cout << '\n' << title << '\n';
    if (appended) {
      const std::optional<dsh::SnapshotRecord> latest = dsh::latest_runtime_context(host.log);
      ++snapshots_;
      history_bytes_ += expected_text.size();
      std::cout << "  appended: " << dsh::to_string(outcome) << " message, seq " << latest->seq.value_or(-1) << ", +"
                << log_added << " bytes in the session log\n"
                << "  the model receives one new message (" << latest->text->size() << " bytes of text):\n";
      print_quoted(*latest->text);
    } else {
      std::cout << "  appended: nothing (+" << log_added << " bytes); the model receives the same prompt as before\n";
    }
    std::cout << "  prompt: " << reply.prompt_bytes << " bytes, " << reply.cached_bytes
              << " of them the previous prompt byte for byte (prefix cache), "
              << reply.prompt_bytes - reply.cached_bytes << " new\n"
              << "  the model: \"my file policy is " << reply.believed_policy << "\"\n"
              << "  sandbox_permissions:";
    Offers offers{};
    for (const dsh::Family family : dsh::FAMILIES) {
      const std::optional<nlohmann::json> schema = sandbox_permissions(host.owner, host.log, family);
      std::string& offer = offers.at(static_cast<std::size_t>(family));
      offer = schema ? schema->at("enum").dump() : "omitted";
      std::cout << (family == dsh::FAMILIES.front() ? " " : ", ") << dsh::to_string(family) << ' ' << offer;
    }
    std::cout << '\n';

    const std::string where = std::string(title) + ": ";
    expect_.check(outcome == expected_outcome, where + "outcome " + std::string(dsh::to_string(outcome)));
    expect_.check(host.log.events().size() == events_before + (appended ? 1U : 0U), where + "event count");
    expect_.check(appended == (log_added > 0), where + "log bytes");
    expect_.check((text.empty() ? std::string(dsh::RUNTIME_CONTEXT_CLEARED) : text) == expected_text,
                  where + "snapshot text");
    expect_.check(dsh::latest_runtime_context(host.log) == dsh::SnapshotRecord{expected_text, latest_seq(host)},
                  where + "latest snapshot in the log");
    expect_.check(reply.believed_policy == expected_belief, where + "what the model believes");
    expect_.check(offers == expected_offers, where + "the escalation choices the tool schemas advertise");
    expect_.check(reply.cached_bytes == previous_prompt_bytes_, where + "the previous prompt is a prefix");
    expect_.check(appended || reply.prompt_bytes == previous_prompt_bytes_, where + "unchanged prompt");
    previous_prompt_bytes_ = reply.prompt_bytes;
  }

  /// A stale call asks for a mode that is not among the choices (the schema it was built from
  /// predates the switch): the owner refuses the approval before the backend runs anything.
  void refused_approval(const Host& host, dsh::Family family, dsh::SandboxMode approved, std::string_view expected) {
    const std::optional<std::string> refusal = host.owner.validateApproval(host.log, family, approved);
    std::cout << "\n-- a stale " << dsh::to_string(family) << " call asks for sandbox_permissions "
              << dsh::to_string(approved) << ": refused before anything runs --\n"
              << "  " << refusal.value_or("(accepted)") << '\n';
    expect_.check(refusal == expected, "a stale approval: the refusal text");
  }

  /// A backend shuts down: its registrations are disposed.
  static void unmount(Backend& backend, std::string_view name) {
    backend = Backend{};
    std::cout << "\n-- " << name << " unmounted: nothing in the log --\n";
  }

  /// The user switches the session's mode: one sandbox/mode event in the log, nothing for the model yet.
  void switch_mode(Host& host, dsh::SandboxMode mode) {
    const std::uintmax_t log_before = fs::file_size(log_path_);
    dsh::set_sandbox_mode(host.log, mode);
    std::cout << "\n-- set_sandbox_mode(" << dsh::to_string(mode) << "): one sandbox/mode event, +"
              << fs::file_size(log_path_) - log_before << " bytes in the session log, none in the prompt --\n";
    expect_.check(host.log.sandbox_mode_override() == mode, "set_sandbox_mode: the session's mode");
  }

  /// The restart: what comes back from the log alone.
  void restarted(Host& host, const std::string& last_text) {
    const dsh::ResolvedPolicy policy = host.owner.resolve(host.log);
    const std::optional<dsh::SnapshotRecord> latest = dsh::latest_runtime_context(host.log);
    std::cout << "\n-- host restarted: new PolicyOwner, filesystem and bash backends mounted again, log reopened --\n"
              << "  from the log: mode " << dsh::to_string(policy.mode) << " (source "
              << dsh::to_string(policy.mode_source) << "), root " << policy.workspace_root.string() << " (source "
              << dsh::to_string(policy.root_source) << ")\n"
              << "  from the log: the model was last told the snapshot at seq "
              << (latest ? latest->seq.value_or(-1) : -1) << '\n';
    expect_.check(policy.mode == dsh::SandboxMode::workspace_write && policy.mode_source == dsh::ModeSource::session,
                  "restart: the mode comes back from the log");
    expect_.check(policy.workspace_root == fs::canonical(real_workspace_), "restart: the canonical root");
    expect_.check(latest && latest->text == last_text, "restart: the last snapshot comes back from the log");
  }

  /// Returns the seq of the newest snapshot message (the scan the library does, done forward here).
  [[nodiscard]] static std::optional<std::int64_t> latest_seq(const Host& host) {
    std::optional<std::int64_t> seq;
    for (const nlohmann::json& event : host.log.events()) {
      if (event.at("type") == dsh::USER_MESSAGE_EVENT) {
        seq = event.at("seq").get<std::int64_t>();
      }
    }
    return seq;
  }

  static void print_quoted(std::string_view text) {
    std::size_t begin = 0;
    while (begin <= text.size()) {
      const std::size_t end = std::min(text.find('\n', begin), text.size());
      const std::string_view line = text.substr(begin, end - begin);
      std::cout << "  |" << (line.empty() ? "" : " ") << line << '\n';
      begin = end + 1;
    }
  }

  fs::path dir_;
  fs::path log_path_;
  fs::path workspace_;
  fs::path real_workspace_;
  std::string quoted_root_;
  FakeModel model_;
  Expectations expect_;
  std::size_t previous_prompt_bytes_ = 0;
  int requests_ = 0;
  int snapshots_ = 0;
  std::size_t history_bytes_ = 0;
};

/// A fresh directory under the system temporary area, removed with its contents at exit.
class ScratchDirectory {
public:
  ScratchDirectory() {
    std::string pattern = (fs::temp_directory_path() / "dsh-agent-host-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }

private:
  fs::path path_;
};

} // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::string_view(argv[1]).starts_with('-') || argv[1][0] == '\0'))) {
    std::cerr << "usage: agent_host [DIR]\n";
    return 2;
  }
  try {
    if (argc == 2) {
      fs::create_directories(argv[1]);
      return Demo(fs::absolute(argv[1])).run();
    }
    const ScratchDirectory scratch;
    return Demo(scratch.path()).run();
  } catch (const std::exception& error) {
    std::cerr << "agent_host: " << error.what() << '\n';
    return 1;
  }
}
