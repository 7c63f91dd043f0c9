// A Linux Landlock fence that makes a child process (the bash and terminal backends) obey
// the same resolved policy the model is told about.
//
// Use: prepare once, before fork, everything that allocates or may fail slowly
// (`PreparedFence::prepare`: the ruleset is created and filled in the parent); then in the
// child, between fork and exec, `PreparedFence::apply()` only issues system calls (the namespace
// layer's, then no_new_privs, landlock_restrict_self, the capability drop and the filter).
// `FencedCommand` wraps the whole fork/apply/exec sequence.
//
// What is restricted: every write-class filesystem right the running kernel's Landlock ABI
// knows (the `LANDLOCK_WRITE_RIGHTS` table), device ioctls but on the devices a command drives,
// and reading beneath /dev without the namespace layer. Reading elsewhere, listing and executing are never restricted.
// See docs/enforcement.md for what Landlock does not cover.
//
// The header reads: the error, the rights and the fence's report and options, the capabilities
// a fence drops, `PreparedFence`, then `FencedChild` and `FencedCommand`. The kernel interface,
// the guards, the child's steps, the supervisor and the builder are in <dsh/detail/>.
#pragma once

#pragma once

#include <dsh/fence_types.hpp>
#include <dsh/fenced_child.hpp>
#include <dsh/fenced_command.hpp>
#include <dsh/prepared_fence.hpp>

#include <dsh/detail/fence/landlock_kernel.hpp>

namespace dsh {

/// The kernel's Landlock ABI version, or 0 when Landlock is unavailable (or this is not a
/// Landlock build). Asks the kernel on every call.
[[nodiscard]] inline int landlock_abi() noexcept { return detail::probe_landlock().abi; }

} // namespace dsh
