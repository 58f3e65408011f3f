// SPDX-License-Identifier: Apache-2.0
// Wall-clock laps in milliseconds, for the planner's phase times and the command's reports.
#pragma once

#include <chrono>

namespace dcp::internal {

class Stopwatch {
 public:
  // Milliseconds since the previous lap (or construction).
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace dcp::internal
