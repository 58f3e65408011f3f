// SPDX-License-Identifier: Apache-2.0
// Status and Result<T>: errors as values. An OK Status holds no allocation, so returning it is
// free. An error holds a code and a message that names the problem, the offending value and where
// it came from. The library never throws across its API, never prints and never aborts on bad
// input; only a broken internal invariant (a bug) stops the process, through DCP_CHECK.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace dcp {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the caller: a spec, a shape, an option
  kNotFound,         // a file or a named thing does not exist
  kCorrupt,          // a file or message does not decode
  kUnsupported,      // valid request this build or backend cannot serve
  kCommFailure,      // a peer failed or went away
  kTimeout,          // a deadline passed
  kCancelled,        // the caller asked to stop (PlanningMonitor::Cancel)
  kInternal,         // an error inside dcp that is not the caller's fault
};

std::string_view ToString(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message)};
  }
  static Status NotFound(std::string message) {
    return {StatusCode::kNotFound, std::move(message)};
  }
  static Status Corrupt(std::string message) { return {StatusCode::kCorrupt, std::move(message)}; }
  static Status Unsupported(std::string message) {
    return {StatusCode::kUnsupported, std::move(message)};
  }
  static Status CommFailure(std::string message) {
    return {StatusCode::kCommFailure, std::move(message)};
  }
  static Status Timeout(std::string message) { return {StatusCode::kTimeout, std::move(message)}; }
  static Status Cancelled(std::string message) {
    return {StatusCode::kCancelled, std::move(message)};
  }
  static Status Internal(std::string message) {
    return {StatusCode::kInternal, std::move(message)};
  }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return ok() ? StatusCode::kOk : state_->code; }
  // The message without the code; empty when OK.
  const std::string& message() const;
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  // Shared so copies are cheap; an error is immutable once made.
  std::shared_ptr<const State> state_;
};

// A value or an error. REQUIRES for value(): ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& detail);

}  // namespace dcp

#define DCP_STATUS_CONCAT_INNER(a, b) a##b
#define DCP_STATUS_CONCAT(a, b) DCP_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is an error.
#define DCP_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::dcp::Status dcp_status_ = (expr);        \
    if (!dcp_status_.ok()) return dcp_status_; \
  } while (false)

// `DCP_ASSIGN_OR_RETURN(T x, F());` declares x from F()'s value or returns F()'s error.
#define DCP_ASSIGN_OR_RETURN(lhs, expr) \
  DCP_ASSIGN_OR_RETURN_IMPL(DCP_STATUS_CONCAT(dcp_result_, __LINE__), lhs, expr)
#define DCP_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                              \
  if (!result.ok()) return result.status();          \
  lhs = std::move(result).value()

// A broken internal invariant: a bug in dcp, never a reaction to bad input.
#define DCP_CHECK(condition, ...)                                                        \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      ::dcp::CheckFailed(__FILE__, __LINE__, #condition, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                    \
  } while (false)
