/// @file
/// The policy's data: a session's header, the canonical form of a path, the deployment's
/// `PolicyConfig` and the `ResolvedPolicy` of one call, with `json_string_literal`. A base header:
/// the fence, the write tools and the session log include it rather than <dsh/sandbox_policy.hpp>.
#pragma once

#include <dsh/detail/canonical.hpp>
#include <dsh/detail/policy/config_checks.hpp>
#include <dsh/detail/policy/protected_paths.hpp>
#include <dsh/detail/text/json_text.hpp>
#include <dsh/errors.hpp>
#include <dsh/vocabulary.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsh {

/// The immutable header of a session, written once at creation.
struct SessionHeader {
  std::string id;                 ///< The session id.
  std::optional<std::string> cwd; ///< The session workspace; absent or empty: the owner's fallback root.
  std::int64_t created_at = 0;    ///< Creation time, epoch milliseconds.
  bool operator==(const SessionHeader&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Canonicalization
// ---------------------------------------------------------------------------------------------

/// Canonicalizes a path as docs/contract.md#canonicalization says: absolute against the process working directory;
/// the physical identity (symbolic links followed, then each `..` taken physically) of the
/// longest prefix that exists; the rest normalized lexically; no trailing separator except
/// for "/". A dangling symbolic link at the end of the existing prefix is followed.
/// When the whole path exists this costs an open(O_PATH), a readlink of /proc/self/fd/N and a
/// close whatever its depth (realpath(3) where the kernel cannot answer so). Never fails for a
/// path that cannot be examined (it uses as much identity as it can obtain); a path holding a
/// NUL character is normalized lexically only. Throws dsh::SystemError only when `path` is relative and the
/// process working directory cannot be read.
[[nodiscard]] inline std::filesystem::path canonical_path(const std::filesystem::path& path) {
  return detail::canonical_native(path.native());
}

/// The deployment configuration of a `PolicyOwner`.
struct PolicyConfig {
  SandboxMode mode = SandboxMode::read_only;           ///< Deployment default; read-only is the fail-safe.
  std::optional<std::filesystem::path> workspace_root; ///< Fallback root; default: the process working directory.
  std::string host_label = "DSH";                      ///< The host's name in the model text.
  /// The paths beneath a writable root that stay read-only (docs/enforcement.md#protected-paths).
  ProtectedPathRules protected_paths{};

  /// Reads a configuration object with the optional keys "mode", "workspaceRoot", "hostLabel"
  /// and "protectedPaths" (an object with the optional keys "defaults", a boolean; "disable",
  /// an array of default names; "extra", an array of paths). Throws ConfigError, naming the
  /// key, the expectation and the value found, for anything but a JSON object, an unknown key,
  /// a wrong type, a mode outside the vocabulary, an empty root or one holding NUL, a label
  /// that is empty or holds a control character or `"`, a name outside the default list, and
  /// an extra path that is empty, holds NUL or a ".." component, or names the root itself.
  // A template (the parameter is unused) so that only a file that reads a configuration
  // instantiates the JSON walk.
  template <class Unused = void> [[nodiscard]] static PolicyConfig from_json(const nlohmann::json& json) {
    if (!json.is_object()) {
      throw ConfigError(detail::expectation_message("PolicyConfig", "a JSON object", json));
    }
    PolicyConfig config;
    for (const auto& [key, value] : json.get_ref<const nlohmann::json::object_t&>()) { // see check_envelope
      if (key == "mode") {
        config.mode = detail::enum_from_json<SandboxMode>(value, "PolicyConfig key \"mode\"");
      } else if (key == "workspaceRoot") {
        config.workspace_root = detail::config_string<Unused>(value, key);
        detail::require_valid_root(*config.workspace_root);
      } else if (key == "hostLabel") {
        config.host_label = detail::config_string<Unused>(value, key);
        detail::require_valid_label(config.host_label);
      } else if (key == "protectedPaths") {
        config.protected_paths = detail::protected_rules_from_json<Unused>(value);
      } else {
        throw ConfigError(detail::expectation_message(
            "PolicyConfig", "only the keys \"mode\", \"workspaceRoot\", \"hostLabel\" and \"protectedPaths\"", key));
      }
    }
    return config;
  }
};

/// The complete policy of one call: what every enforcement backend consumes.
struct ResolvedPolicy {
  SandboxMode mode = SandboxMode::read_only;       ///< The mode in force for this call.
  std::filesystem::path workspace_root;            ///< Canonical, absolute.
  ModeSource mode_source = ModeSource::deployment; ///< Which input decided `mode`.
  RootSource root_source = RootSource::deployment; ///< Which input decided `workspace_root`.
  /// The deployment's protected paths beneath the root (`PolicyConfig::protected_paths`).
  ProtectedPathRules protected_paths{};

  bool operator==(const ResolvedPolicy&) const = default;

  /// The in-process write check of the `filesystem` family. Returns false in read-only and
  /// true in danger-full-access. In workspace-write returns true exactly when `target`,
  /// taken against the workspace root if relative and canonicalized like the root (so a
  /// symbolic link inside the workspace that points outside is outside), is the root or lies
  /// beneath it by whole components, and is not protected: false when it is a protected
  /// entry or lies beneath one (a pinned directory only refuses itself), and for every target
  /// beneath the root when its protected paths cannot be known (`dsh::protected_paths`
  /// throws then). That part looks at the filesystem as it is now: a few lstat(2) calls for a
  /// plain repository. An empty path is never permitted.
  /// A path check is only as good as the moment it runs: the filesystem can change between
  /// this check and the write (time of check / time of use). Open beneath the root with the
  /// kernel's help (`dsh::open_beneath` in <dsh/open_beneath.hpp>) where that matters.
  /// A member template only so that the scan is compiled where a write is checked: call it as
  /// `policy.permits_write(target)` (`Unused` is always void; its address is
  /// `&ResolvedPolicy::permits_write<>`).
  template <class Unused = void> [[nodiscard]] bool permits_write(const std::filesystem::path& target) const {
    switch (mode) {
    case SandboxMode::danger_full_access:
      return true;
    case SandboxMode::workspace_write: {
      if (target.empty() || target.native().find('\0') != std::string::npos) {
        return false;
      }
      const std::filesystem::path canonical = canonical_path(target.is_absolute() ? target : workspace_root / target);
      return detail::is_within(canonical, workspace_root) &&
             !detail::protected_refusal<Unused>(workspace_root, protected_paths, canonical);
    }
    case SandboxMode::read_only:
      break;
    }
    return false;
  }
};

/// Returns the protected entries beneath `policy.workspace_root` under `policy.protected_paths`
/// (docs/enforcement.md#protected-paths), whatever the mode: what `permits_write`,
/// `open_for_write` and the fence's namespace layer refuse, as the filesystem is now, in the
/// order the scan finds them. Throws ProtectedPathError naming the path, the expectation and
/// what was found when the list cannot be known (writes beneath the root are then refused).
/// A template for the reason `permits_write` is one: call it as `dsh::protected_paths(policy)`.
template <class Unused = void>
[[nodiscard]] std::vector<detail::ProtectedEntry> protected_paths(const ResolvedPolicy& policy) {
  detail::ProtectedScan scan = detail::protected_entries<Unused>(policy.workspace_root, policy.protected_paths);
  if (!scan.problem.empty()) {
    throw ProtectedPathError(scan.problem, scan.error);
  }
  return std::move(scan.entries);
}

/// Stores the policy as `{"mode","workspaceRoot","modeSource","rootSource"}`; a root that is
/// not valid UTF-8 is stored with U+FFFD replacements, as in the model text.
template <detail::ExactlyJson J> void to_json(J& json, const ResolvedPolicy& policy) {
  json = J{{"mode", policy.mode},
           {"workspaceRoot", detail::repaired_utf8(policy.workspace_root.native())},
           {"modeSource", policy.mode_source},
           {"rootSource", policy.root_source}};
}

/// Returns `text` as a JSON string literal (see the model text's `{root}`).
[[nodiscard]] inline std::string json_string_literal(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  detail::append_json_string(out, text);
  return out;
}

} // namespace dsh
