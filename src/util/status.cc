// SPDX-License-Identifier: Apache-2.0
#include "dcp/status.h"

namespace dcp {

std::string_view ToString(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kCorrupt:
      return "Corrupt";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kCommFailure:
      return "CommFailure";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::move(message)});
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return ok() ? kEmpty : state_->message;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", dcp::ToString(state_->code), state_->message);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(state_->code, fmt::format("{}: {}", context, state_->message));
}

void CheckFailed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "dcp: internal check failed at %s:%d: %s %s\n", file, line, condition,
               detail.c_str());
  std::abort();
}

}  // namespace dcp
