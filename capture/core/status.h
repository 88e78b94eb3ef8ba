// Status and Result<T>: how errors cross layer boundaries in tracecache.
//
// A Status is either ok or carries a code and a human-readable message. Result<T> holds a T or
// a non-ok Status. Both are plain values: cheap to move, safe to copy, no thread affinity.
//
// `Error` is the exception thrown by the tensor API for errors that end the operation (a shape
// mismatch at record time, an unknown op); it carries a Status. Code that cannot throw across
// its boundary (the CLI, the store) converts it back with `Error::status()`.
#pragma once

#include <cassert>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace tracecache {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (bad shape, bad attribute)
  kNotFound,         // a named thing (file, op, parameter) does not exist
  kParseError,       // a text input (trace program, .npy header) is malformed
  kCorruption,       // stored data failed a checksum or a bounds check
  kIOError,          // the OS refused a read or a write
  kUnsupported,      // valid request, not implemented for this case
  kInternal,         // a broken invariant inside tracecache
  kResourceExhausted,  // a device (or other budget) has no room for the request
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status parse_error(std::string m) { return {StatusCode::kParseError, std::move(m)}; }
inline Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

// Thrown by the tensor API; see the header comment.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.is_ok() && "a Result built from a Status must carry an error");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // REQUIRES: is_ok().
  T& value() & { assert(is_ok()); return *value_; }
  const T& value() const& { assert(is_ok()); return *value_; }
  T&& value() && { assert(is_ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // The value, or throws Error carrying the status.
  T value_or_throw() && {
    if (!is_ok()) throw Error(status_);
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tracecache
