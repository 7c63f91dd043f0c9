/// @file
/// The errors of dsh-sandbox-policy: one base, `dsh::Error`, for everything the library throws on
/// purpose, and its kinds. The bottom of the include graph: every other header may include it.
#pragma once

#include <stdexcept>
#include <string>
#include <system_error>

namespace dsh {

/// The base of every error this library throws on purpose, so a host can catch them all in one
/// place. Its derived types say what kind of input was refused.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Invalid configuration, vocabulary or argument: the message names the input, what was
/// expected and what was found.
class ConfigError : public Error {
public:
  using Error::Error;
};

/// A forged `sandbox/mode` event; `what()` is exactly the failure text of `validate_event`.
class InvariantViolation : public Error {
public:
  using Error::Error;
};

/// The protected paths of a writable root cannot be known (docs/enforcement.md#protected-paths):
/// a `.git` pointer or `commondir` file that does not name a git directory, a symbolic link on
/// the way to a protected path, a path that cannot be examined. The message names the path,
/// the expectation and what was found; `code()` is the system call's error when one failed.
class ProtectedPathError : public Error {
public:
  /// An error with `message`, and `code` when a system call failed.
  explicit ProtectedPathError(const std::string& message, std::error_code code = {}) : Error(message), code_(code) {}
  /// Returns the failed system call's error, or an empty code.
  [[nodiscard]] std::error_code code() const noexcept { return code_; }

private:
  std::error_code code_;
};

/// A system call failed: the message names the operation (and the path or object it was
/// about) and ends with the system's reason, as `std::system_error` words it; `code()` is the
/// error. Thrown for failures of the process layer (pipes, fork, poll), of reading the working
/// directory and `/proc/thread-self/mountinfo`; the write tools throw `WriteError`, one of these.
class SystemError : public Error {
public:
  /// The error `code` in `operation`: the message is `<operation>: <code.message()>`.
  SystemError(std::error_code code, const std::string& operation)
      : Error(operation + ": " + code.message()), code_(code) {}
  /// The errno value `error` in `operation`, in the generic category.
  SystemError(int error, const std::string& operation)
      : SystemError(std::error_code(error, std::generic_category()), operation) {}
  /// Returns the system error behind it.
  [[nodiscard]] const std::error_code& code() const noexcept { return code_; }

private:
  std::error_code code_;
};

/// A fenced call's processes could not be supervised, or its supervisor died before it
/// reported how the call ended: a failure of the process layer, not of the policy or of Landlock.
/// The message names the program and the failed step; `code()` is the system call's error when
/// one failed, or an empty code when the supervisor was killed.
class ProcessError : public Error {
public:
  /// An error with `message`, and `code` when a system call failed.
  explicit ProcessError(const std::string& message, std::error_code code = {}) : Error(message), code_(code) {}
  /// Returns the failed system call's error, or an empty code.
  [[nodiscard]] std::error_code code() const noexcept { return code_; }

private:
  std::error_code code_;
};

} // namespace dsh
