// The error every in-process write of this library throws: a refusal by the policy (EACCES,
// EXDEV), a file the write tools never write (EPERM, EISDIR), or the system call that failed.
#pragma once

#include <dsh/errors.hpp>

#include <string>
#include <system_error>

namespace dsh {

/// Thrown by `open_beneath`, `open_for_write`, `write_file` and `create_directories`. A
/// `dsh::SystemError`, so a `dsh::Error` like every error this library throws on purpose; `code()` is the errno behind
/// it (EACCES when the policy refuses the write, EXDEV when a path resolves outside the root), and the message names
/// the path, and for a refusal the mode and the root.
class WriteError : public SystemError {
public:
  using SystemError::SystemError;
};

} // namespace dsh
