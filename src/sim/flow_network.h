// SPDX-License-Identifier: Apache-2.0
// Flows sharing link resources with max-min fairness.
//
// Each running flow crosses at most two resources (a sender-side and a receiver-side port) and
// gets the rate progressive filling gives it: all rates rise together until a resource is full;
// the flows through it keep that rate and the others rise on. Rates are recomputed only when the
// caller says the set of flows changed (Reallocate); in between every flow moves at a fixed rate,
// so its finish time is known exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace dcp::sim {

class FlowNetwork {
 public:
  // One capacity (bytes per second, > 0) per resource.
  explicit FlowNetwork(std::vector<double> capacities);

  // Starts flow `id` of `bytes` (> 0) at the current time over resources a and b (distinct, each
  // a resource index). It moves nothing until the next Reallocate.
  void Add(int32_t id, double bytes, int32_t a, int32_t b);

  // Moves every flow forward to `time` at its current rate, then recomputes all rates.
  // REQUIRES: time >= the previous Reallocate's time.
  void Reallocate(double time);

  // The earliest finish time of a running flow; infinity when none runs.
  double NextFinish() const;

  // Removes the flows that finish at `time` (within rounding) and appends their ids to `out`.
  void TakeFinished(double time, std::vector<int32_t>* out);

  size_t running() const { return flows_.size(); }

 private:
  struct Flow {
    int32_t id = 0;
    int32_t a = 0, b = 0;
    double remaining = 0;  // bytes left at time_
    double rate = 0;       // bytes per second since time_
    double finish = std::numeric_limits<double>::infinity();
  };

  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  double time_ = 0;
  // Scratch space of Reallocate, kept to avoid allocations.
  std::vector<double> left_;
  std::vector<int32_t> count_, version_, cursor_, begin_, members_;
  std::vector<char> fixed_;
};

}  // namespace dcp::sim
