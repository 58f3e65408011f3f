// SPDX-License-Identifier: Apache-2.0
// Watching and stopping a long planning: the planner reports its progress through a monitor the
// caller owns, and polls it for cancellation between pieces of work (candidates, the nodes'
// placements, phases, refinement levels). A cancelled planning returns StatusCode::kCancelled.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>

#include "dcp/status.h"

namespace dcp {

class PlanningMonitor {
 public:
  // Called with the phase ("blocking", "placement", "scheduling", "compile", "candidates") and
  // how much of it is done, as done of total units (candidates, nodes placed; 0 of 1 when a phase
  // starts, 1 of 1 when it ends). Calls are serialised; they may come from planner threads.
  using Callback = std::function<void(std::string_view phase, int64_t done, int64_t total)>;

  PlanningMonitor() = default;
  explicit PlanningMonitor(Callback on_progress) : on_progress_(std::move(on_progress)) {}

  // From any thread: the planning stops at its next check and returns kCancelled.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  void Report(std::string_view phase, int64_t done, int64_t total) const {
    if (!on_progress_) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    on_progress_(phase, done, total);
  }

 private:
  Callback on_progress_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
};

// Null-safe helpers for the optional monitor of PlanOptions and PartitionOptions.
inline Status CheckCancelled(const PlanningMonitor* monitor) {
  if (monitor != nullptr && monitor->cancelled()) {
    return Status::Cancelled("planning was cancelled");
  }
  return Status::Ok();
}
inline void ReportProgress(const PlanningMonitor* monitor, std::string_view phase, int64_t done,
                           int64_t total) {
  if (monitor != nullptr) monitor->Report(phase, done, total);
}

}  // namespace dcp
