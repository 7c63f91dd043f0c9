/// @file
/// The builder of a `PreparedFence`: the ruleset of a resolved policy on the running kernel.
// Included by <dsh/landlock.hpp> after the public types it uses; the guard below, not
// `#pragma once`, lets it also compile on its own (HACKING.md#header-layout).
#include <dsh/landlock.hpp>

#ifndef DSH_DETAIL_FENCE_BUILDER_HPP
#define DSH_DETAIL_FENCE_BUILDER_HPP

#include <dsh/detail/host_environment.hpp>
#include <dsh/detail/mount_table.hpp>
#include <dsh/detail/path_trust.hpp>
#include <dsh/detail/private_temporary.hpp>

#include <sys/sysmacros.h>

namespace dsh::detail {

/// Why `terminal` is not the child side of a pseudo-terminal (a character device of the
/// UNIX 98 pty slave majors 136-143), or "".
[[nodiscard]] inline std::string not_a_pseudo_terminal(const std::filesystem::path& terminal) {
  struct stat info {};
  if (::stat(terminal.c_str(), &info) != 0) {
    return std::strerror(errno);
  }
  if (!S_ISCHR(info.st_mode) || major(info.st_rdev) < 136 || major(info.st_rdev) > 143) {
    return "expected the child side of a pseudo-terminal (a character device of major 136-143), found " +
           std::string(S_ISCHR(info.st_mode) ? "the character device " + std::to_string(major(info.st_rdev)) + ":" +
                                                   std::to_string(minor(info.st_rdev))
                                             : "no character device");
  }
  return {};
}

/// The fence body, with the kernel probe and the host's environment passed in so that every
/// branch (including "no Landlock" and older ABIs) runs in tests on any kernel.
[[nodiscard]] inline PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                                 LandlockProbe probe, const HostEnvironment& environment) {
  FenceReport report;
  report.mode = policy.mode;
  report.abi = probe.abi;
  if (policy.mode == SandboxMode::danger_full_access) {
    report.status = FenceStatus::unrestricted;
    return PreparedFence{std::move(report), UniqueFd{}};
  }
  const std::string subject = "Landlock fence for " + std::string(to_string(policy.mode));
  // The system-call filter holds with or without Landlock: it is built first.
  std::vector<SyscallFilterInstruction> filter;
  std::vector<SyscallFilterInstruction> refusing_filter;
  if (const int filter_error = probe_syscall_filter(); filter_error != 0) {
    const std::string reason = syscall_filter_unavailable_reason(filter_error);
    if (!options.allow_unfenced) {
      throw LandlockError(subject + ": the system-call filter cannot be installed: " + reason +
                          "; refusing to run without it (set FenceOptions::allow_unfenced to run without the fence)");
    }
    report.notes.push_back("NOT FILTERED: " + reason);
  } else {
    report.syscall_filter = true;
    report.ipc_namespace = holds_sys_admin();
    // with /dev/tty granted, the command must keep the terminal the host gave it
    const bool terminal = !options.terminal.empty();
    refusing_filter = shared_syscall_filter(true, terminal);
    if (report.ipc_namespace) {
      filter = shared_syscall_filter(false, terminal);
    }
  }
  if (probe.abi <= 0) {
    const std::string reason = landlock_unavailable_reason(probe.error);
    if (!options.allow_unfenced) {
      throw LandlockError(subject + ": " + reason +
                          "; refusing to run unfenced (set FenceOptions::allow_unfenced to "
                          "run without the fence)");
    }
    report.status = FenceStatus::unfenced;
    report.notes.push_back("NOT FENCED: " + reason);
    return PreparedFence{std::move(report), UniqueFd{}, OwnedDirectory{}, std::move(filter),
                         std::move(refusing_filter)};
  }
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  report.status = FenceStatus::enforced;
  OwnedDirectory owned_temporary; // a fence without a session removes its directory when destroyed
  report.handled = landlock_write_rights(probe.abi);
  report.unenforced = landlock_write_rights(std::numeric_limits<int>::max()) & ~report.handled;
  if (options.deny_tcp) {
    if (probe.abi < 4) {
      throw LandlockError(subject +
                          ": FenceOptions::deny_tcp asks to refuse TCP bind and connect, which needs "
                          "Landlock ABI 4 (Linux 6.7); this kernel has ABI " +
                          std::to_string(probe.abi));
    }
    report.handled_net = landlock_net_bind_tcp | landlock_net_connect_tcp;
  }
  if (probe.abi >= 6) {
    report.scoped = landlock_scope_signal | landlock_scope_abstract_unix_socket;
  } else {
    report.notes.push_back("signals and abstract unix sockets are not scoped: Landlock ABI " +
                           std::to_string(probe.abi) + " cannot (ABI 6, Linux 6.12, can)");
  }

  const RulesetAttr attr{report.handled, report.handled_net, report.scoped};
  UniqueFd ruleset{static_cast<int>(::syscall(sys_landlock_create_ruleset, &attr, ruleset_attr_size(probe.abi), 0U))};
  if (!ruleset) {
    const int error = errno;
    throw LandlockError(subject + ": landlock_create_ruleset failed: " + std::strerror(error));
  }
  // Adds one rule and records it; returns "" or, when the anchor cannot be opened, is not of
  // the expected kind, or (a directory) is no longer the canonical path that was checked,
  // why (optional grants are then skipped, never widened).
  const auto grant = [&](const std::filesystem::path& path, bool directory, std::uint64_t rights) -> std::string {
    const UniqueFd anchor{open_rule_anchor(path, directory)};
    struct stat info {};
    if (!anchor || ::fstat(anchor.get(), &info) != 0) {
      const int error = errno;
      return std::strerror(error);
    }
    if (!directory && !S_ISCHR(info.st_mode)) {
      return "not a character device";
    }
    if (directory) {
      if (const std::optional<std::string> opened = recorded_path(anchor.get()); opened != path.native()) {
        return "it was replaced while the fence was prepared";
      }
    }
    const PathBeneathAttr rule{rights, anchor.get()};
    if (::syscall(sys_landlock_add_rule, ruleset.get(), landlock_rule_path_beneath, &rule, 0U) != 0) {
      const int error = errno;
      throw LandlockError(subject + ": landlock_add_rule for " + json_string_literal(path.native()) +
                          " failed: " + std::strerror(error));
    }
    report.grants.push_back({path, rights});
    return {};
  };

  if (probe.abi < 5) {
    report.notes.push_back("device ioctls are not restricted: Landlock ABI " + std::to_string(probe.abi) +
                           " cannot (ABI 5, Linux 6.10, can)");
  }
  // The devices every command drives: write_file, truncate and (ABI 5) ioctl_dev; never
  // resolve_unix, which belongs to the writable directories alone.
  const std::uint64_t device_rights = report.handled & landlock_file_rights() & ~landlock_resolve_unix;
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/full"}) {
    if (const std::string why = grant(device, false, device_rights); !why.empty()) {
      report.notes.push_back("skipped " + json_string_literal(device) + ": " + why);
    }
  }
  if (!options.terminal.empty()) {
    const std::filesystem::path terminal = canonical_path(options.terminal);
    if (const std::string why = not_a_pseudo_terminal(terminal); !why.empty()) {
      throw LandlockError(subject + ": FenceOptions::terminal " + json_string_literal(options.terminal.native()) +
                          ": " + why);
    }
    for (const std::filesystem::path& device : {terminal, std::filesystem::path("/dev/tty")}) {
      if (const std::string why = grant(device, false, device_rights); !why.empty()) {
        throw LandlockError(subject + ": cannot grant the command's terminal " + json_string_literal(device.native()) +
                            ": " + why);
      }
    }
  }
  if (policy.mode == SandboxMode::workspace_write) {
    const std::filesystem::path& root = policy.workspace_root;
    const std::uint64_t directory_rights = report.handled & ~landlock_device_rights();
    if (root == root.root_path()) {
      throw LandlockError(subject + ": refusing the workspace root " + json_string_literal(root.native()) +
                          ": it would grant the whole filesystem, including the session log, the workspace entry "
                          "and the host, which decide later calls");
    }
    // Paths another local user could swap are refused before anything is granted.
    if (!options.allow_shared_directories) {
      const std::string advice = " (set FenceOptions::allow_shared_directories to trust it)";
      std::vector<const std::filesystem::path*> trusted; // judged already: the same spelling walks the same way
      for (const auto& [what, path] :
           {std::pair{"the workspace root", root}, std::pair{"the session cwd", options.session_cwd},
            std::pair{"the temporary root", temporary_root_of(options, environment)}}) {
        if (path.empty() || std::any_of(trusted.begin(), trusted.end(), [&](const std::filesystem::path* done) {
              return done->native() == path.native();
            })) {
          continue;
        }
        if (const std::string why = untrusted_directory(path); !why.empty()) {
          throw LandlockError(subject + ": refusing " + what + " " + json_string_literal(path.native()) + ": " + why +
                              advice);
        }
        trusted.push_back(&path);
      }
    }
    const std::shared_ptr<const std::vector<MountEntry>> mount_table = current_mount_table();
    const std::vector<MountEntry>& mounts = *mount_table;
    std::vector<Guard> guards = workspace_guards(policy, options, environment, mounts);
    // The session's private temporary directory: named now, made only once the workspace root
    // is known to expose nothing, so that a refused fence leaves nothing behind.
    const bool default_root = options.temporary_root.empty();
    // As spelled, not canonical: the root itself must not be a link (another local user may
    // have planted one under /tmp); where it is found is the canonical path of its parent.
    const std::filesystem::path temporary_root = temporary_root_of(options, environment);
    const std::string temporary_name = private_temporary_name(options);
    const std::filesystem::path temporary =
        canonical_path(temporary_root.parent_path()) / temporary_root.filename() / temporary_name;
    guards.push_back(make_guard("the session's temporary directory " + json_string_literal(temporary.native()),
                                temporary, false, mounts));
    const std::vector<FilesystemLocation> root_regions = reachable_beneath(mounts, root);
    for (const Guard& guard : guards) {
      if (const std::string why = exposure(guard, root, root_regions); !why.empty()) {
        throw LandlockError(subject + ": refusing the workspace root " + json_string_literal(root.native()) + ": " +
                            why);
      }
    }
    if (const std::string why = grant(root, true, directory_rights); !why.empty()) {
      throw LandlockError(subject + ": cannot open the workspace root " + json_string_literal(root.native()) + ": " +
                          why);
    }
    std::vector<std::filesystem::path> granted{root};

    // The private directory is granted to this session alone; it must expose nothing either.
    {
      const std::filesystem::path made = make_private_temporary(temporary_root, temporary_name, default_root);
      if (temporary_name.starts_with("call-")) {
        owned_temporary = OwnedDirectory(made);
      }
      const std::vector<FilesystemLocation> regions = reachable_beneath(mounts, made);
      for (const Guard& guard : guards) {
        if (const std::string why = guard.canonical == temporary ? std::string() : exposure(guard, made, regions);
            !why.empty()) {
          throw LandlockError(subject + ": refusing the session's temporary directory " +
                              json_string_literal(made.native()) + ": " + why);
        }
      }
      if (const std::string why = grant(made, true, directory_rights); !why.empty()) {
        throw LandlockError(subject + ": cannot open the session's temporary directory " +
                            json_string_literal(made.native()) + ": " + why);
      }
      granted.push_back(made);
      report.temporary_directory = made;
    }

    // Optional directories: each is skipped (never widened) when it is missing, when it
    // would expose a guard, or when its own path runs through a directory entry this fence
    // lets the command replace (a later call would then grant wherever the entry points).
    const auto grant_optional = [&](const std::string& label, const std::filesystem::path& spelled) {
      Guard self = make_guard(label, spelled, false, mounts);
      const std::filesystem::path& directory = self.canonical;
      for (const std::filesystem::path& done : granted) {
        if (is_within(directory, done)) {
          return; // already writable through `done`
        }
      }
      std::string why;
      if (directory == directory.root_path()) {
        why = "a grant of the filesystem root would lift the fence";
      }
      const std::vector<FilesystemLocation> regions = reachable_beneath(mounts, directory);
      for (std::size_t i = 0; i < guards.size() && why.empty(); ++i) {
        why = exposure(guards[i], directory, regions);
      }
      for (const std::filesystem::path& entry : self.entries) {
        if (why.empty() && (is_within(entry.parent_path(), directory) ||
                            std::any_of(granted.begin(), granted.end(), [&](const std::filesystem::path& done) {
                              return is_within(entry.parent_path(), done);
                            }))) {
          why = "the command could replace " + json_string_literal(entry.native()) +
                " on the way to it, and a later call would grant what it then names";
        }
      }
      if (why.empty()) {
        why = grant(directory, true, directory_rights);
      }
      if (!why.empty()) {
        report.notes.push_back("skipped " + label + ": " + why);
        return;
      }
      granted.push_back(directory);
      self.what = "the granted directory " + json_string_literal(directory.native());
      guards.push_back(std::move(self));
    };
    if (options.shared_temporary_areas) {
      for (const char* area : {"/tmp", "/var/tmp", "/dev/shm"}) {
        grant_optional(json_string_literal(canonical_path(area).native()), area);
      }
    }
    for (const std::filesystem::path& extra : options.extra_writable) {
      if (!extra.is_absolute()) {
        report.notes.push_back("skipped " + json_string_literal(extra.native()) + ": not an absolute path");
      } else {
        grant_optional(json_string_literal(extra.native()), extra);
      }
    }
    const char* tmpdir = environment.tmpdir;
    if (options.shared_temporary_areas && tmpdir != nullptr && *tmpdir != '\0') {
      const std::string label = "$TMPDIR " + json_string_literal(tmpdir);
      if (const std::string why = tmpdir_ineligible(tmpdir); !why.empty()) {
        report.notes.push_back("skipped " + label + ": " + why);
      } else {
        grant_optional(label, tmpdir);
      }
    }
  }
  return PreparedFence{std::move(report), std::move(ruleset), std::move(owned_temporary), std::move(filter),
                       std::move(refusing_filter)};
#else
  (void)environment;
  throw LandlockError(subject + ": Landlock reported ABI " + std::to_string(probe.abi) +
                      " but this build has no Landlock support");
#endif
}

/// `prepare_fence` with the host's loader variables and runtime directory as they are now and
/// `tmpdir` as $TMPDIR (nullptr: none), for tests that pin $TMPDIR.
[[nodiscard]] inline PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                                 LandlockProbe probe, const char* tmpdir) {
  HostEnvironment environment = HostEnvironment::current();
  environment.tmpdir = tmpdir;
  return prepare_fence(policy, options, probe, environment);
}

} // namespace dsh::detail

#endif // DSH_DETAIL_FENCE_BUILDER_HPP
