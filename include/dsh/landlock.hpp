// A Linux Landlock fence that makes a child process (the bash and terminal backends) obey
// the same resolved policy the model is told about.
//
// Use: prepare once, before fork, everything that allocates or may fail slowly
// (`PreparedFence::prepare`: the ruleset is created and filled in the parent); then in the
// child, between fork and exec, `PreparedFence::apply()` only issues two system calls.
// `FencedCommand` wraps the whole fork/apply/exec sequence.
//
// What is restricted: every write-class filesystem right the running kernel's Landlock ABI
// knows (the `LANDLOCK_WRITE_RIGHTS` table). Reading, listing, executing and device ioctls
// are never restricted. See README "Enforcement" for what Landlock does not cover.
#pragma once

#include <dsh/open_beneath.hpp>
#include <dsh/sandbox_policy.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/// 1 when this build can use Landlock (Linux, and DSH_SANDBOX_POLICY_NO_LANDLOCK not
/// defined); 0 when every fence is reported as unsupported.
#if defined(__linux__) && !defined(DSH_SANDBOX_POLICY_NO_LANDLOCK)
#define DSH_SANDBOX_POLICY_HAS_LANDLOCK 1
#else
#define DSH_SANDBOX_POLICY_HAS_LANDLOCK 0
#endif

#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

namespace dsh {

/// Thrown when a fence cannot be prepared (no Landlock and running unfenced was not allowed,
/// the workspace root cannot be opened, a Landlock call failed) or could not be applied in
/// the child. The message names the mode, the path or the failing call, and the reason.
class LandlockError : public Error {
public:
  using Error::Error;
};

/// One write-class Landlock filesystem access right.
struct LandlockRight {
  std::uint64_t bit;     ///< LANDLOCK_ACCESS_FS_* value
  std::string_view name; ///< the name reports use: the kernel name without the prefix, lower case
  int since_abi;         ///< first Landlock ABI that knows the right
  bool file_right;       ///< may be granted on a non-directory (landlock_add_rule refuses others)
};

/// Every right the fence handles, in kernel bit order. Deliberately absent: EXECUTE,
/// READ_FILE and READ_DIR (reads and execution are never restricted) and IOCTL_DEV (ABI 5):
/// it gates every driver ioctl on a device opened after the fence, including reads such as
/// a terminal's TCGETS, while writing to a device already needs WRITE_FILE at open time.
inline constexpr std::array<LandlockRight, 12> LANDLOCK_WRITE_RIGHTS{{
    {1ULL << 1, "write_file", 1, true},
    {1ULL << 4, "remove_dir", 1, false},
    {1ULL << 5, "remove_file", 1, false},
    {1ULL << 6, "make_char", 1, false},
    {1ULL << 7, "make_dir", 1, false},
    {1ULL << 8, "make_reg", 1, false},
    {1ULL << 9, "make_sock", 1, false},
    {1ULL << 10, "make_fifo", 1, false},
    {1ULL << 11, "make_block", 1, false},
    {1ULL << 12, "make_sym", 1, false},
    {1ULL << 13, "refer", 2, false},
    {1ULL << 14, "truncate", 3, true},
}};

/// The rights of `LANDLOCK_WRITE_RIGHTS` that Landlock ABI `abi` knows; 0 for `abi` <= 0.
[[nodiscard]] constexpr std::uint64_t landlock_write_rights(int abi) noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.since_abi <= abi) {
      rights |= right.bit;
    }
  }
  return rights;
}

/// The rights of `LANDLOCK_WRITE_RIGHTS` that may be granted on a non-directory.
[[nodiscard]] constexpr std::uint64_t landlock_file_rights() noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.file_right) {
      rights |= right.bit;
    }
  }
  return rights;
}

/// make_char and make_block: creating a device node is never granted, in any grant, so that
/// a fenced command cannot make a node for a disk (or any device) and write through it.
[[nodiscard]] constexpr std::uint64_t landlock_device_node_rights() noexcept {
  std::uint64_t rights = 0;
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if (right.name == "make_char" || right.name == "make_block") {
      rights |= right.bit;
    }
  }
  return rights;
}

/// LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (Landlock ABI 6): no connecting to an abstract unix
/// socket that a process outside the fenced command's own domain listens on.
inline constexpr std::uint64_t landlock_scope_abstract_unix_socket = 1ULL << 0;
/// LANDLOCK_SCOPE_SIGNAL (Landlock ABI 6): no signals to processes outside the fenced
/// command's own domain (its own children stay reachable).
inline constexpr std::uint64_t landlock_scope_signal = 1ULL << 1;
/// LANDLOCK_ACCESS_NET_BIND_TCP (Landlock ABI 4).
inline constexpr std::uint64_t landlock_net_bind_tcp = 1ULL << 0;
/// LANDLOCK_ACCESS_NET_CONNECT_TCP (Landlock ABI 4).
inline constexpr std::uint64_t landlock_net_connect_tcp = 1ULL << 1;

/// Names of the rights in `rights`, in table order, joined by ","; bits outside the table
/// are written as `bit<N>`. Returns "" for 0.
[[nodiscard]] inline std::string landlock_rights_to_string(std::uint64_t rights) {
  std::string text;
  const auto add = [&text](std::string_view name) {
    if (!text.empty()) {
      text += ',';
    }
    text += name;
  };
  for (const LandlockRight& right : LANDLOCK_WRITE_RIGHTS) {
    if ((rights & right.bit) != 0) {
      add(right.name);
      rights &= ~right.bit;
    }
  }
  for (unsigned bit = 0; bit < 64U; ++bit) {
    if ((rights & (1ULL << bit)) != 0) {
      add("bit" + std::to_string(bit));
    }
  }
  return text;
}

/// How a prepared fence treats the child.
enum class FenceStatus : std::uint8_t {
  enforced,     ///< a Landlock domain is applied
  unrestricted, ///< danger-full-access: nothing to restrict, nothing applied
  unfenced,     ///< the policy asks for a fence but Landlock is unavailable and the caller allowed running without it
};

/// "enforced", "unrestricted" or "unfenced".
[[nodiscard]] constexpr std::string_view to_string(FenceStatus status) noexcept {
  switch (status) {
  case FenceStatus::enforced:
    return "enforced";
  case FenceStatus::unrestricted:
    return "unrestricted";
  case FenceStatus::unfenced:
    break;
  }
  return "unfenced";
}

/// One path the fence grants rights beneath (or on, for a device).
struct FenceGrant {
  std::filesystem::path path; ///< canonical path as opened
  std::uint64_t rights = 0;   ///< granted LANDLOCK_ACCESS_FS_* bits
  /// Member-wise equality.
  bool operator==(const FenceGrant&) const = default;
};

/// What a fence enforces, for logs and for the host's own checks.
struct FenceReport {
  FenceStatus status = FenceStatus::unfenced; ///< see FenceStatus
  SandboxMode mode = SandboxMode::read_only;  ///< the policy mode the fence was prepared for
  int abi = 0;                                ///< the running kernel's Landlock ABI, 0 when unavailable
  std::uint64_t handled = 0;                  ///< rights denied everywhere except beneath `grants`
  std::uint64_t unenforced = 0;   ///< write rights this library knows but the kernel's ABI does not: NOT restricted
  std::uint64_t scoped = 0;       ///< landlock_scope_* bits in force (ABI 6+): signals, abstract unix sockets
  std::uint64_t handled_net = 0;  ///< landlock_net_* bits refused everywhere (FenceOptions::deny_tcp)
  std::vector<FenceGrant> grants; ///< in the order the rules were added
  std::vector<std::string> notes; ///< areas or devices not granted and why; missing scopes; the reason when unfenced

  /// One line: status, mode, ABI, handled and unenforced rights, scopes, refused TCP access,
  /// grants and notes; paths as JSON string literals.
  [[nodiscard]] std::string describe() const {
    std::string text = std::string(to_string(status)) + " " + std::string(to_string(mode));
    if (abi > 0) {
      text += " (Landlock ABI " + std::to_string(abi) + ")";
    }
    if (status == FenceStatus::enforced) {
      text += "; handled: " + landlock_rights_to_string(handled);
      if (unenforced != 0) {
        text += "; not enforceable on this kernel: " + landlock_rights_to_string(unenforced);
      }
      if (scoped != 0) {
        text +=
            "; scoped: " + std::string((scoped & landlock_scope_signal) != 0 ? "signal" : "") +
            ((scoped & landlock_scope_signal) != 0 && (scoped & landlock_scope_abstract_unix_socket) != 0 ? "," : "") +
            ((scoped & landlock_scope_abstract_unix_socket) != 0 ? "abstract_unix_socket" : "");
      }
      if (handled_net != 0) {
        text +=
            "; refused: " + std::string((handled_net & landlock_net_bind_tcp) != 0 ? "bind_tcp" : "") +
            ((handled_net & landlock_net_bind_tcp) != 0 && (handled_net & landlock_net_connect_tcp) != 0 ? "," : "") +
            ((handled_net & landlock_net_connect_tcp) != 0 ? "connect_tcp" : "");
      }
      text += "; granted:";
      for (std::size_t i = 0; i < grants.size(); ++i) {
        text += (i == 0 ? " " : "; ") + json_string_literal(grants[i].path.native()) + " (" +
                rights_of_grant(grants[i].rights) + ")";
      }
      if (grants.empty()) {
        text += " nothing";
      }
    }
    for (const std::string& note : notes) {
      text += "; " + note;
    }
    return text;
  }

private:
  /// "all handled", "all handled but X,Y" when only a few handled rights are missing, else the list.
  [[nodiscard]] std::string rights_of_grant(std::uint64_t rights) const {
    if (rights == handled) {
      return "all handled";
    }
    const std::uint64_t missing = handled & ~rights;
    if ((rights & ~handled) == 0 && std::popcount(missing) < std::popcount(rights)) {
      return "all handled but " + landlock_rights_to_string(missing);
    }
    return landlock_rights_to_string(rights);
  }
};

/// Options for `PreparedFence::prepare`.
///
/// The paths below decide later calls: a fenced command must never be able to change them,
/// or it could widen the policy of the next call (forge a mode switch in the session log,
/// swap the workspace for a symbolic link to "/", replace the host). In workspace-write the
/// fence therefore grants no temporary area or extra directory that would make one of them
/// (its content or any directory entry on the way to it) changeable, and refuses a
/// workspace root that would.
struct FenceOptions {
  /// When Landlock is unavailable (old or misconfigured kernel, non-Linux system), prepare
  /// an `unfenced` fence instead of throwing. Off by default: the fence fails closed.
  bool allow_unfenced = false;
  /// The session log the policy was resolved from, as the host opens it (empty: none). Its
  /// bytes and every directory entry on the way to it are protected.
  std::filesystem::path session_log{};
  /// The session cwd as the log's header spells it (empty: none). Every directory entry on
  /// the way to it, through symbolic links as spelled, is protected.
  std::filesystem::path session_cwd{};
  /// The host's own configuration and state, files or directories: their content and every
  /// directory entry on the way to them are protected. (The running executable always is.)
  std::vector<std::filesystem::path> protected_paths{};
  /// Directories to grant in workspace-write beyond the workspace and the temporary areas,
  /// absolute; each is granted only under the same rule as a temporary area (skipped, with a
  /// note, when it is missing or would expose a protected path). The model text does not
  /// mention them: grant only what the host tells the model about itself.
  std::vector<std::filesystem::path> extra_writable{};
  /// Refuse every TCP bind and connect in read-only and workspace-write (Landlock ABI 4,
  /// Linux 6.7; prepare throws LandlockError on an older kernel). Off by default: the model
  /// text says nothing about the network.
  bool deny_tcp = false;
};

/// The outcome of `PreparedFence::apply`: `error` is 0 on success, otherwise the errno of
/// the system call named by `step` (a string literal).
struct [[nodiscard]] ApplyResult {
  int error = 0;         ///< errno of the failed call, 0 on success
  const char* step = ""; ///< the failed call, "" on success
  /// True when the fence is in force (or nothing had to be applied).
  [[nodiscard]] constexpr bool ok() const noexcept { return error == 0; }
};

class PreparedFence;

namespace detail {

/// The result of asking the kernel for its Landlock ABI.
struct LandlockProbe {
  int abi = 0;   ///< 0 when unavailable
  int error = 0; ///< errno of the probe when unavailable
};

[[nodiscard]] PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                          LandlockProbe probe, const char* tmpdir);

#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
#if defined(SYS_landlock_create_ruleset)
inline constexpr long sys_landlock_create_ruleset = SYS_landlock_create_ruleset;
inline constexpr long sys_landlock_add_rule = SYS_landlock_add_rule;
inline constexpr long sys_landlock_restrict_self = SYS_landlock_restrict_self;
#else // the same numbers on every architecture (older libc headers lack the names)
inline constexpr long sys_landlock_create_ruleset = 444;
inline constexpr long sys_landlock_add_rule = 445;
inline constexpr long sys_landlock_restrict_self = 446;
#endif
inline constexpr unsigned landlock_create_ruleset_version = 1U << 0;
inline constexpr int landlock_rule_path_beneath = 1;

/// struct landlock_ruleset_attr as ABI 6 defines it. The size passed to the kernel is that
/// of the fields its ABI knows (`ruleset_attr_size`).
struct RulesetAttr {
  std::uint64_t handled_access_fs;  ///< ABI 1
  std::uint64_t handled_access_net; ///< ABI 4
  std::uint64_t scoped;             ///< ABI 6
};

/// The size of struct landlock_ruleset_attr on a kernel with Landlock ABI `abi`.
[[nodiscard]] constexpr std::size_t ruleset_attr_size(int abi) noexcept {
  if (abi >= 6) {
    return sizeof(RulesetAttr);
  }
  return abi >= 4 ? offsetof(RulesetAttr, scoped) : offsetof(RulesetAttr, handled_access_net);
}

/// struct landlock_path_beneath_attr (packed, 12 bytes).
struct __attribute__((packed)) PathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};
#endif

/// Asks the running kernel for its Landlock ABI version.
[[nodiscard]] inline LandlockProbe probe_landlock() noexcept {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  const long version = ::syscall(sys_landlock_create_ruleset, nullptr, 0, landlock_create_ruleset_version);
  if (version < 0) {
    return {0, errno};
  }
  return {static_cast<int>(version), 0};
#else
  return {0, ENOSYS};
#endif
}

/// Why Landlock is unavailable, in words a kernel owner can act on.
[[nodiscard]] inline std::string landlock_unavailable_reason(int error) {
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  if (error == EOPNOTSUPP) {
    return "Landlock is built into this kernel but disabled (add landlock to the lsm= boot "
           "parameter)";
  }
  if (error == ENOSYS) {
    return "this kernel has no Landlock (Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK=y "
           "is required)";
  }
  return std::string("the Landlock probe failed: ") + std::strerror(error);
#else
  (void)error;
#if defined(__linux__)
  return "this build has Landlock disabled (DSH_SANDBOX_POLICY_NO_LANDLOCK)";
#else
  return "Landlock exists only on Linux; this system has no equivalent fence";
#endif
#endif
}

/// The platform temporary areas the workspace-write fence may grant: /tmp, /var/tmp and
/// /dev/shm, canonical and without duplicates.
[[nodiscard]] inline std::vector<std::filesystem::path> platform_temporary_areas() {
  std::vector<std::filesystem::path> areas;
  for (const char* spelled : {"/tmp", "/var/tmp", "/dev/shm"}) {
    std::filesystem::path area = canonical_path(spelled);
    if (std::find(areas.begin(), areas.end(), area) == areas.end()) {
      areas.push_back(std::move(area));
    }
  }
  return areas;
}

/// Why `tmpdir` (the value of $TMPDIR) may not be granted, or "" when it may: it must be an
/// absolute path whose canonical path lies beneath one of `platform_temporary_areas()`.
/// Existence is not checked here.
[[nodiscard]] inline std::string tmpdir_ineligible(std::string_view tmpdir) {
  if (!tmpdir.starts_with('/')) {
    return "not an absolute path";
  }
  if (tmpdir.find('\0') != std::string_view::npos) {
    return "holds a NUL character";
  }
  const std::filesystem::path canonical = canonical_path(std::string(tmpdir));
  for (const std::filesystem::path& area : platform_temporary_areas()) {
    if (is_within(canonical, area)) {
      return {};
    }
  }
  return (canonical.native() == tmpdir ? std::string("not")
                                       : "its canonical path " + json_string_literal(canonical.native()) + " is not") +
         " beneath /tmp, /var/tmp or /dev/shm";
}

/// The temporary areas the workspace-write fence may grant, canonical and without
/// duplicates: `platform_temporary_areas()`, then `tmpdir` when it is non-null and eligible
/// (`tmpdir_ineligible`). Existence is not checked here.
[[nodiscard]] inline std::vector<std::filesystem::path> temporary_areas(const char* tmpdir) {
  std::vector<std::filesystem::path> areas = platform_temporary_areas();
  if (tmpdir != nullptr && tmpdir_ineligible(tmpdir).empty()) {
    std::filesystem::path area = canonical_path(tmpdir);
    if (std::find(areas.begin(), areas.end(), area) == areas.end()) {
      areas.push_back(std::move(area));
    }
  }
  return areas;
}

/// A path whose state decides a later call's policy, and what a grant must not reach of it.
struct Guard {
  std::string what;                           ///< for messages: "the session log \"/x/s.jsonl\""
  bool content = false;                       ///< its bytes (or, for a directory, its entries) decide too
  std::filesystem::path canonical;            ///< its canonical path, where `content` is checked
  std::vector<std::filesystem::path> entries; ///< every directory entry the kernel reads to resolve it
};

/// Appends to `entries` each directory entry that resolving `spelled` reads, as
/// "<canonical directory>/<name>": the components as spelled and, for every symbolic link
/// met, the components of its target, at most `links` links in all (the kernel's limit).
/// `..` reads no entry that a write can replace, so it adds none.
inline void append_resolution_entries(const std::string& spelled, std::vector<std::filesystem::path>& entries,
                                      int& links) {
  const std::filesystem::path absolute = absolute_native(spelled);
  std::filesystem::path prefix = absolute.root_path();
  for (const std::filesystem::path& part : absolute.relative_path()) {
    if (part.empty() || part == ".") {
      continue;
    }
    if (part == "..") {
      prefix /= part;
      continue;
    }
    const std::filesystem::path directory = canonical_path(prefix);
    std::filesystem::path entry = directory / part;
    prefix /= part;
    if (std::find(entries.begin(), entries.end(), entry) == entries.end()) {
      entries.push_back(entry);
    }
    if (links > 0) {
      if (const std::optional<std::filesystem::path> target = dangling_link_target(entry)) {
        --links;
        append_resolution_entries(target->is_absolute() ? target->native() : (directory / *target).native(), entries,
                                  links);
      }
    }
  }
}

/// The guard for `spelled`: its canonical path and its resolution entries. Throws what
/// `canonical_path` throws (a relative path when the working directory cannot be read).
[[nodiscard]] inline Guard make_guard(std::string what, const std::filesystem::path& spelled, bool content) {
  Guard guard{std::move(what), content, canonical_path(spelled), {}};
  if (spelled.native().find('\0') == std::string::npos) {
    int links = 40;
    append_resolution_entries(spelled.native(), guard.entries, links);
  }
  if (std::find(guard.entries.begin(), guard.entries.end(), guard.canonical) == guard.entries.end() &&
      guard.canonical != guard.canonical.root_path()) {
    guard.entries.push_back(guard.canonical);
  }
  return guard;
}

/// Why granting every right beneath the canonical directory `grant` would let a fenced
/// command change what `guard` protects, or "" when it would not. A path's content is
/// reachable when it lies beneath-or-at the grant (or, for a directory, the grant lies
/// beneath it); a directory entry is reachable when the directory holding it lies
/// beneath-or-at the grant (the entry can then be renamed, removed or replaced by a link).
[[nodiscard]] inline std::string exposure(const Guard& guard, const std::filesystem::path& grant) {
  if (guard.content && (is_within(guard.canonical, grant) || is_within(grant, guard.canonical))) {
    return "the command could change " + guard.what + ", which decides later calls";
  }
  for (const std::filesystem::path& entry : guard.entries) {
    if (is_within(entry.parent_path(), grant)) {
      return "the command could replace " + json_string_literal(entry.native()) + " on the way to " + guard.what +
             ", which decides later calls";
    }
  }
  return {};
}

/// Writes `text` to `fd`, retrying short writes; only async-signal-safe calls.
inline void write_all(int fd, const char* text, std::size_t size) noexcept {
  while (size > 0) {
    const ::ssize_t written = ::write(fd, text, size);
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      return;
    }
    text += written;
    size -= static_cast<std::size_t>(written);
  }
}

/// Writes a C string to `fd`; async-signal-safe.
inline void write_text(int fd, const char* text) noexcept { write_all(fd, text, std::strlen(text)); }

/// Writes a non-negative number in decimal to `fd`; async-signal-safe.
inline void write_number(int fd, int value) noexcept {
  char digits[16];
  std::size_t at = sizeof digits;
  unsigned rest = value < 0 ? 0U : static_cast<unsigned>(value);
  do {
    digits[--at] = static_cast<char>('0' + rest % 10U);
    rest /= 10U;
  } while (rest != 0U && at > 0);
  write_all(fd, digits + at, sizeof digits - at);
}

/// What a child that could not start reports through the spawn pipe.
struct ChildFailure {
  int fence = 0; ///< 1 when applying the fence failed, 0 when exec failed
  int error = 0; ///< errno
};

} // namespace detail

/// A Landlock ruleset built from a resolved policy, ready to be entered by a child process.
///
/// Prepare it in the parent, before fork (it allocates, opens the granted paths and fills
/// the ruleset); the child then calls the noexcept `apply()`, which issues only
/// prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self(2). One fence can be applied by
/// any number of children. Move-only; owns the ruleset descriptor (close-on-exec).
class PreparedFence {
public:
  /// Builds the fence for `policy` on the running kernel.
  ///
  /// read-only: handles every right of `LANDLOCK_WRITE_RIGHTS` the kernel knows and grants
  /// only write_file and truncate on /dev/null, /dev/zero and /dev/full.
  /// workspace-write: the same, plus every handled right except make_char and make_block
  /// beneath `policy.workspace_root` and beneath each existing temporary area (/tmp,
  /// /var/tmp, /dev/shm; $TMPDIR as read now when it is absolute and its canonical path lies
  /// beneath one of them) and `options.extra_writable`, except an area that would let the
  /// command change what decides a later call (see FenceOptions): that one is skipped with
  /// a note. Both modes also scope signals and abstract unix sockets to the command's own
  /// processes where the kernel can (ABI 6), and refuse TCP with `options.deny_tcp`.
  /// danger-full-access: `unrestricted`, nothing is applied (and no Landlock needed).
  /// Returns the prepared fence; `report()` tells what it enforces.
  /// Throws LandlockError when Landlock is unavailable and `options.allow_unfenced` is false
  /// (fail closed), when `options.deny_tcp` is set and the kernel's ABI is below 4, when the
  /// workspace root is "/" or its grant would let the command change what decides a later
  /// call (the message names the path), when the workspace root cannot be opened, or when a
  /// Landlock call fails.
  [[nodiscard]] static PreparedFence prepare(const ResolvedPolicy& policy, const FenceOptions& options = {}) {
    return detail::prepare_fence(policy, options, detail::probe_landlock(), std::getenv("TMPDIR"));
  }

  PreparedFence(const PreparedFence&) = delete;
  PreparedFence& operator=(const PreparedFence&) = delete;
  /// Transfers the ruleset; applying the moved-from fence fails with EBADF.
  PreparedFence(PreparedFence&& other) noexcept = default;
  /// Transfers the ruleset, closing this one's.
  PreparedFence& operator=(PreparedFence&& other) noexcept = default;
  /// Closes the ruleset descriptor (children that already applied it stay fenced).
  ~PreparedFence() = default;

  /// What the fence enforces (status, mode, ABI, handled rights, grants).
  [[nodiscard]] const FenceReport& report() const noexcept { return report_; }

  /// Enters the fence in the calling thread and, after exec, everything it starts.
  ///
  /// Async-signal-safe: only prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self(2) are
  /// called, so it may run between fork and exec. Landlock restricts the calling thread
  /// only: call it in a single-threaded child. Does nothing for an `unrestricted` or
  /// `unfenced` fence. Returns the errno and the failing call when the kernel refused; the
  /// child must then not run the command (`FencedCommand` exits instead).
  ApplyResult apply() const noexcept {
    if (report_.status != FenceStatus::enforced) {
      return {};
    }
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
    if (!ruleset_) {
      return {EBADF, "landlock_restrict_self (moved-from fence)"};
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
      return {errno, "prctl(PR_SET_NO_NEW_PRIVS)"};
    }
    if (::syscall(detail::sys_landlock_restrict_self, ruleset_.get(), 0U) != 0) {
      return {errno, "landlock_restrict_self"};
    }
    return {};
#else
    return {ENOSYS, "landlock_restrict_self"};
#endif
  }

private:
  friend PreparedFence detail::prepare_fence(const ResolvedPolicy&, const FenceOptions&, detail::LandlockProbe,
                                             const char*);
  PreparedFence(FenceReport report, UniqueFd ruleset) noexcept
      : report_(std::move(report)), ruleset_(std::move(ruleset)) {}

  FenceReport report_;
  UniqueFd ruleset_;
};

namespace detail {

/// Opens `path` as a Landlock rule anchor (O_PATH, following symlinks); -1 with errno set.
[[nodiscard]] inline int open_rule_anchor(const std::filesystem::path& path, bool directory) noexcept {
#if defined(__linux__)
  return ::open(path.c_str(), O_PATH | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
#else
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
#endif
}

/// The guards of a workspace-write fence, in the order a refusal names them: the running
/// host executable, an absolute $TMPDIR, the workspace root and, when given, the session cwd
/// as spelled, the session log and the host's protected paths.
[[nodiscard]] inline std::vector<Guard> workspace_guards(const ResolvedPolicy& policy, const FenceOptions& options,
                                                         const char* tmpdir) {
  const auto named = [](std::string_view what, const std::filesystem::path& path) {
    return std::string(what) + " " + json_string_literal(path.native());
  };
  std::vector<Guard> guards;
  const std::filesystem::path host = canonical_path("/proc/self/exe");
  guards.push_back(make_guard(named("the host executable", host), host, true));
  // Even a $TMPDIR that is not granted now decides later calls: replaced by a link into
  // /tmp, it would be granted next time.
  if (tmpdir != nullptr && *tmpdir == '/') {
    guards.push_back(make_guard(named("$TMPDIR", tmpdir), tmpdir, false));
  }
  guards.push_back(make_guard(named("the workspace root", policy.workspace_root), policy.workspace_root, false));
  if (!options.session_cwd.empty()) {
    guards.push_back(make_guard(named("the session cwd", options.session_cwd), options.session_cwd, false));
  }
  if (!options.session_log.empty()) {
    guards.push_back(make_guard(named("the session log", options.session_log), options.session_log, true));
  }
  for (const std::filesystem::path& path : options.protected_paths) {
    guards.push_back(make_guard(named("the protected path", path), path, true));
  }
  return guards;
}

/// The fence body, with the kernel probe and $TMPDIR passed in so that every branch
/// (including "no Landlock" and older ABIs) runs in tests on any kernel.
[[nodiscard]] inline PreparedFence prepare_fence(const ResolvedPolicy& policy, const FenceOptions& options,
                                                 LandlockProbe probe, const char* tmpdir) {
  FenceReport report;
  report.mode = policy.mode;
  report.abi = probe.abi;
  if (policy.mode == SandboxMode::danger_full_access) {
    report.status = FenceStatus::unrestricted;
    return PreparedFence{std::move(report), UniqueFd{}};
  }
  const std::string subject = "Landlock fence for " + std::string(to_string(policy.mode));
  if (probe.abi <= 0) {
    const std::string reason = landlock_unavailable_reason(probe.error);
    if (!options.allow_unfenced) {
      throw LandlockError(subject + ": " + reason +
                          "; refusing to run unfenced (set FenceOptions::allow_unfenced to "
                          "run without the fence)");
    }
    report.status = FenceStatus::unfenced;
    report.notes.push_back("NOT FENCED: " + reason);
    return PreparedFence{std::move(report), UniqueFd{}};
  }
#if DSH_SANDBOX_POLICY_HAS_LANDLOCK
  report.status = FenceStatus::enforced;
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

  for (const char* device : {"/dev/null", "/dev/zero", "/dev/full"}) {
    if (const std::string why = grant(device, false, report.handled & landlock_file_rights()); !why.empty()) {
      report.notes.push_back("skipped " + json_string_literal(device) + ": " + why);
    }
  }
  if (policy.mode == SandboxMode::workspace_write) {
    const std::filesystem::path& root = policy.workspace_root;
    const std::uint64_t directory_rights = report.handled & ~landlock_device_node_rights();
    if (root == root.root_path()) {
      throw LandlockError(subject + ": refusing the workspace root " + json_string_literal(root.native()) +
                          ": it would grant the whole filesystem, including the session log, the workspace entry "
                          "and the host, which decide later calls");
    }
    std::vector<Guard> guards = workspace_guards(policy, options, tmpdir);
    for (const Guard& guard : guards) {
      if (const std::string why = exposure(guard, root); !why.empty()) {
        throw LandlockError(subject + ": refusing the workspace root " + json_string_literal(root.native()) + ": " +
                            why);
      }
    }
    if (const std::string why = grant(root, true, directory_rights); !why.empty()) {
      throw LandlockError(subject + ": cannot open the workspace root " + json_string_literal(root.native()) + ": " +
                          why);
    }
    std::vector<std::filesystem::path> granted{root};

    // Optional directories: each is skipped (never widened) when it is missing, when it
    // would expose a guard, or when its own path runs through a directory entry this fence
    // lets the command replace (a later call would then grant wherever the entry points).
    const auto grant_optional = [&](const std::string& label, const std::filesystem::path& spelled) {
      Guard self = make_guard(label, spelled, false);
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
      for (std::size_t i = 0; i < guards.size() && why.empty(); ++i) {
        why = exposure(guards[i], directory);
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
    for (const char* area : {"/tmp", "/var/tmp", "/dev/shm"}) {
      grant_optional(json_string_literal(canonical_path(area).native()), area);
    }
    for (const std::filesystem::path& extra : options.extra_writable) {
      if (!extra.is_absolute()) {
        report.notes.push_back("skipped " + json_string_literal(extra.native()) + ": not an absolute path");
      } else {
        grant_optional(json_string_literal(extra.native()), extra);
      }
    }
    if (tmpdir != nullptr && *tmpdir != '\0') {
      const std::string label = "$TMPDIR " + json_string_literal(tmpdir);
      if (const std::string why = tmpdir_ineligible(tmpdir); !why.empty()) {
        report.notes.push_back("skipped " + label + ": " + why);
      } else {
        grant_optional(label, tmpdir);
      }
    }
  }
  return PreparedFence{std::move(report), std::move(ruleset)};
#else
  (void)tmpdir;
  throw LandlockError(subject + ": Landlock reported ABI " + std::to_string(probe.abi) +
                      " but this build has no Landlock support");
#endif
}

/// Marks every descriptor above 2 close-on-exec, so that nothing the host opened before the
/// fence (and which Landlock therefore does not check) reaches the command. Async-signal-safe.
inline void close_inherited_descriptors_on_exec() noexcept {
#if defined(__linux__) && defined(SYS_close_range)
  constexpr unsigned close_range_cloexec = 1U << 2;
  if (::syscall(SYS_close_range, 3U, ~0U, close_range_cloexec) == 0) {
    return;
  }
#endif
  const long limit = ::sysconf(_SC_OPEN_MAX);
  const int last = limit > 0 && limit < 65536 ? static_cast<int>(limit) : 65536;
  for (int fd = 3; fd < last; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) {
      ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }
}

} // namespace detail

/// A command to run under a fence: its argv is built and its program found through $PATH
/// at construction, so the child between fork and exec allocates nothing.
///
/// The child inherits only descriptors 0, 1 and 2 (all others are marked close-on-exec:
/// Landlock does not check files opened before the fence; see `redirect`), the environment,
/// and the working directory (see `in_directory`). Move-only.
class FencedCommand {
public:
  /// Exit status of a child that could not apply the fence or could not exec the program
  /// for a reason other than "not found".
  static constexpr int cannot_run_exit_code = 126;
  /// Exit status of a child whose program was not found.
  static constexpr int not_found_exit_code = 127;

  /// Keeps `argv` and resolves `argv[0]` now: as given when it contains '/', else the first
  /// executable regular file `<dir>/argv[0]` for the directories of $PATH (default
  /// "/usr/local/bin:/usr/bin:/bin"); unresolved names stay as given and fail at exec.
  /// Throws std::invalid_argument when `argv` is empty.
  explicit FencedCommand(std::vector<std::string> argv) : args_(std::move(argv)) {
    if (args_.empty()) {
      throw std::invalid_argument("FencedCommand: argv must name a program, got an empty argv");
    }
    program_ = resolve_program(args_.front());
    for (std::string& arg : args_) {
      argv_.push_back(arg.data());
    }
    argv_.push_back(nullptr);
  }
  FencedCommand(const FencedCommand&) = delete;
  FencedCommand& operator=(const FencedCommand&) = delete;
  /// Transfers the command (the argv pointers stay valid: the strings do not move).
  FencedCommand(FencedCommand&&) noexcept = default;
  /// Transfers the command.
  FencedCommand& operator=(FencedCommand&&) noexcept = default;
  /// Releases the argv.
  ~FencedCommand() = default;

  /// Makes the child's descriptor `child_fd` (0, 1 or 2) a copy of the parent's `parent_fd`
  /// (which must stay open until the child has started). Returns `*this`. Throws
  /// std::invalid_argument for a `child_fd` other than 0, 1 or 2, or a negative `parent_fd`.
  FencedCommand& redirect(int child_fd, int parent_fd) {
    if (child_fd < 0 || child_fd > 2 || parent_fd < 0) {
      throw std::invalid_argument("FencedCommand::redirect: expected a child descriptor 0, 1 or 2 and an "
                                  "open parent descriptor, got " +
                                  std::to_string(child_fd) + " <- " + std::to_string(parent_fd));
    }
    stdio_[static_cast<std::size_t>(child_fd)] = parent_fd;
    return *this;
  }

  /// Makes the child change to `directory` before it applies the fence. Returns `*this`.
  FencedCommand& in_directory(std::filesystem::path directory) {
    directory_ = std::move(directory);
    return *this;
  }

  /// The program that will be executed (resolved path, or argv[0] when not found).
  [[nodiscard]] const std::string& program() const noexcept { return program_; }
  /// The arguments, argv[0] first.
  [[nodiscard]] const std::vector<std::string>& args() const noexcept { return args_; }

  /// In a freshly forked child: changes directory and redirects descriptors as configured,
  /// applies `fence`, then execs the program; never returns.
  ///
  /// Async-signal-safe. When the fence cannot be applied the program is not run: with
  /// `error_pipe` >= 0 a `detail::ChildFailure` record is written to it, otherwise one line
  /// naming the failed call and errno goes to stderr; the child exits with
  /// `cannot_run_exit_code` (or `not_found_exit_code` when exec reported ENOENT).
  [[noreturn]] void exec_in_child(const PreparedFence& fence, int error_pipe = -1) const noexcept {
    if (!directory_.empty() && ::chdir(directory_.c_str()) != 0) {
      fail_in_child(error_pipe, false, errno, "chdir");
    }
    for (int child_fd = 0; child_fd < 3; ++child_fd) {
      const int parent_fd = stdio_[static_cast<std::size_t>(child_fd)];
      if (parent_fd >= 0 && ::dup2(parent_fd, child_fd) < 0) {
        fail_in_child(error_pipe, false, errno, "dup2");
      }
    }
    const ApplyResult applied = fence.apply();
    if (!applied.ok()) {
      fail_in_child(error_pipe, true, applied.error, applied.step);
    }
    detail::close_inherited_descriptors_on_exec();
    ::execv(program_.c_str(), argv_.data());
    fail_in_child(error_pipe, false, errno, "execv");
  }

  /// Forks a child that runs the command under `fence`; returns its pid once the program
  /// is executing (the caller reaps it, e.g. with `wait_for`).
  /// Throws LandlockError when the child could not apply the fence, std::system_error when
  /// pipe/fork fail or the program could not be executed (the child is reaped then).
  [[nodiscard]] ::pid_t spawn(const PreparedFence& fence) const {
    int ends[2] = {-1, -1};
#if defined(__linux__)
    const int piped = ::pipe2(ends, O_CLOEXEC); // atomically: no other thread's child inherits it
#else
    const int piped = ::pipe(ends);
#endif
    if (piped != 0) {
      throw std::system_error(errno, std::generic_category(), "FencedCommand::spawn: pipe");
    }
    UniqueFd reader{ends[0]};
    UniqueFd writer{ends[1]};
#if !defined(__linux__)
    ::fcntl(reader.get(), F_SETFD, FD_CLOEXEC);
    ::fcntl(writer.get(), F_SETFD, FD_CLOEXEC);
#endif
    const ::pid_t pid = ::fork();
    if (pid < 0) {
      throw std::system_error(errno, std::generic_category(), "FencedCommand::spawn: fork");
    }
    if (pid == 0) {
      exec_in_child(fence, writer.get());
    }
    writer.reset();
    detail::ChildFailure failure{};
    ::ssize_t got = 0;
    do {
      got = ::read(reader.get(), &failure, sizeof failure);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
      return pid; // the close-on-exec pipe closed: the program is running
    }
    (void)wait_for(pid);
    const std::string what = "cannot run " + json_string_literal(program_);
    if (failure.fence != 0) {
      throw LandlockError(what + " under the " + std::string(to_string(fence.report().mode)) +
                          " fence: the child could not enter it: " + std::strerror(failure.error));
    }
    throw std::system_error(failure.error, std::generic_category(), what);
  }

  /// `spawn(fence)` then `wait_for` the child; returns its exit status as the shell reports it.
  [[nodiscard]] int run(const PreparedFence& fence) const { return wait_for(spawn(fence)); }

  /// Waits for `pid` (retrying on EINTR); returns its exit code, or 128 + the signal number
  /// when it was killed, or -1 when waitpid failed.
  [[nodiscard]] static int wait_for(::pid_t pid) noexcept {
    int status = 0;
    ::pid_t done = -1;
    do {
      done = ::waitpid(pid, &status, 0);
    } while (done < 0 && errno == EINTR);
    if (done < 0) {
      return -1;
    }
    if (WIFEXITED(status)) {
      return WEXITSTATUS(status);
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }

private:
  [[nodiscard]] static std::string resolve_program(const std::string& name) {
    if (name.find('/') != std::string::npos) {
      return name;
    }
    const char* path_env = std::getenv("PATH");
    const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= search.size()) {
      const std::size_t end = std::min(search.find(':', start), search.size());
      std::string candidate = end == start ? std::string(".") : search.substr(start, end - start);
      candidate.append("/").append(name);
      struct stat info {};
      if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
      start = end + 1;
    }
    return name;
  }

  [[noreturn]] static void fail_in_child(int error_pipe, bool fence, int error, const char* step) noexcept {
    if (error_pipe >= 0) {
      const detail::ChildFailure failure{fence ? 1 : 0, error};
      detail::write_all(error_pipe, reinterpret_cast<const char*>(&failure), sizeof failure);
    } else {
      detail::write_text(STDERR_FILENO, fence ? "dsh: refusing to run the command: the Landlock "
                                                "fence could not be applied ("
                                              : "dsh: cannot run the command (");
      detail::write_text(STDERR_FILENO, step);
      detail::write_text(STDERR_FILENO, " failed, errno ");
      detail::write_number(STDERR_FILENO, error);
      detail::write_text(STDERR_FILENO, ")\n");
    }
    ::_exit(!fence && error == ENOENT ? not_found_exit_code : cannot_run_exit_code);
  }

  std::vector<std::string> args_;
  std::vector<char*> argv_;
  std::string program_;
  std::filesystem::path directory_;
  std::array<int, 3> stdio_{-1, -1, -1};
};

/// The kernel's Landlock ABI version, or 0 when Landlock is unavailable (or this is not a
/// Landlock build). Asks the kernel on every call.
[[nodiscard]] inline int landlock_abi() noexcept { return detail::probe_landlock().abi; }

} // namespace dsh
