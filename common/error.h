// Errors that travel up as values: Result<T> = tl::expected<T, Error>.
#ifndef ONEHPC_COMMON_ERROR_H_
#define ONEHPC_COMMON_ERROR_H_

#include <string>
#include <tl/expected.hpp>
#include <utility>

namespace onehpc {

/// What kind of failure an Error is; decides exit codes and retry behaviour.
enum class ErrorKind {
  kInternal,      ///< a bug or an unexpected system failure
  kInvalidInput,  ///< bad context variable, malformed file, bad argument
  kNotFound,      ///< a file, variable, device or remote object does not exist
  kIo,            ///< reading or writing a local resource failed
  kProcess,       ///< a child process failed, timed out or could not start
  kNetwork,       ///< a remote service failed or could not be reached
  kUnsafe,        ///< refusing to act because it could destroy data
};

/// A failure: a kind and a human-readable message (never containing secrets).
struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;

  /// Returns a copy with "context: " put in front of the message.
  Error WithContext(const std::string& context) const {
    return Error{kind, context + ": " + message};
  }
};

template <typename T>
using Result = tl::expected<T, Error>;
using Status = tl::expected<void, Error>;

/// Builds an unexpected Error for `return Fail(...)`.
inline tl::unexpected<Error> Fail(ErrorKind kind, std::string message) {
  return tl::unexpected<Error>(Error{kind, std::move(message)});
}
inline tl::unexpected<Error> Fail(Error error) { return tl::unexpected<Error>(std::move(error)); }

/// The success value of a Status.
inline Status Ok() { return {}; }

}  // namespace onehpc

#endif  // ONEHPC_COMMON_ERROR_H_
