// bench_policy's Fence group: a fenced `bash -c true` against a plain fork + execve and a
// posix_spawn, with and without the namespace layer.
#include "bench_policy.hpp"

namespace bench_policy {

namespace {

/// Starts `argv` (argv[0] a path) with fork, execve in the child and waitpid, its stdio
/// inherited; returns its exit status (-1 when it did not exit, 127 when execve failed).
int fork_exec_and_wait(const std::vector<char*>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), std::string("cannot fork to start ") + argv[0]);
  }
  if (pid == 0) {
    ::execve(argv[0], argv.data(), environ);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

/// A fenced `bash -c true` (resolve, prepare, run in workspace-write on a workspace with a
/// session log) against a plain one, in this process.
void fence(const Settings& settings, Table& table, const std::filesystem::path& directory) {
  const BashTrue plain("fence");
  const BaseFence base(directory);
  // The row with the namespace layer applied: it replaces /tmp, /var/tmp and /dev/shm, so that
  // call's workspace and session live outside them: in the working directory, else $HOME,
  // /var/lib or /opt (CI builds under /tmp).
  const auto in_temporary_area = [](const std::filesystem::path& place) {
    const std::string canonical = std::filesystem::weakly_canonical(place).native() + "/";
    return canonical.starts_with("/tmp/") || canonical.starts_with("/var/tmp/") || canonical.starts_with("/dev/shm/");
  };
  std::vector<std::filesystem::path> layer_bases{std::filesystem::current_path()};
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    layer_bases.emplace_back(home);
  }
  layer_bases.insert(layer_bases.end(), {"/var/lib", "/opt"});
  std::string layer_pattern;
  for (const std::filesystem::path& base_directory : layer_bases) {
    std::string pattern = (base_directory / "bench-fence-layer-XXXXXX").string();
    if (!in_temporary_area(base_directory) && ::mkdtemp(pattern.data()) != nullptr) {
      layer_pattern = pattern;
      break;
    }
  }
  require(!layer_pattern.empty(), "fence: no directory outside the temporary areas for the layer's workspace");
  const std::filesystem::path layer_root = layer_pattern;
  const std::filesystem::path layer_workspace = layer_root / "fence-workspace";
  const std::filesystem::path layer_log_path = layer_root / "fence-session.jsonl";
  const dsh::SessionLog layer_log = workspace_log(layer_log_path, layer_workspace, "fence-layer");
  dsh::FenceOptions layered = base.options;
  layered.session_log = layer_log_path;
  layered.session_cwd = layer_workspace;
  layered.isolation = dsh::Isolation::required;
  // 101 rounds at least: a fenced call is about 2 ms, and the medians of 21 rounds moved by 0.1
  // between runs of the same build (1.27-1.36 for the base row), more than the targets' margins.
  const int runs = settings.smoke ? 1 : std::max(101, settings.runs);

  const std::vector<double> medians = alternate(
      runs, {{"fence: the fork + execve baseline", [&] { return fork_exec_and_wait(plain.argv()) == 0; }},
             {"fence: the posix_spawn baseline", [&] { return spawn_and_wait(plain.argv()) == 0; }},
             {"fence: the fenced call", [&] { return base.call(); }},
             {"fence: the fenced call with the namespace layer", [&] { return base.call(layer_log, layered); }}});
  const std::string figure =
      "resolve + PreparedFence::prepare + FencedCommand::run of bash -c true, workspace-write, isolation off";
  table.ratio("Fence", figure, medians[2] * 1e9, "fork + execve + waitpid of bash -c true", medians[0] * 1e9, 1.3);
  table.ratio("Fence",
              "resolve + PreparedFence::prepare + FencedCommand::run of bash -c true, workspace-write, the namespace "
              "layer applied",
              medians[3] * 1e9, "fork + execve + waitpid of bash -c true", medians[0] * 1e9, 1.5);
  std::error_code ignored;
  std::filesystem::remove_all(layer_root, ignored);
  table.ratio("Fence", figure, medians[2] * 1e9, "posix_spawn + waitpid of bash -c true (vfork-like: stricter)",
              medians[1] * 1e9, std::nullopt);
}

} // namespace bench_policy
