// SPDX-License-Identifier: Apache-2.0
// Flows sharing link resources with max-min fairness.
//
// Each running flow crosses at most two resources (a sender-side and a receiver-side port) and
// gets the rate progressive filling gives it: all rates rise together until a resource is full;
// the flows through it keep that rate and the others rise on. Rates are recomputed only when the
// caller says the set of flows changed (Reallocate); in between every flow moves at a fixed rate,
// so its finish time is known exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/indexed_heap.h"

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

 private:
  // The running flows over one pair of resources. They all get the same rate, so they are kept
  // together: rates are shared out between classes, not flows (an all-to-all over nodes has
  // devices^2 flows but only nodes^2 classes), and a flow's progress is the class's.
  struct Class {
    int32_t a = 0, b = 0;
    double served = 0;  // bytes a flow running since the class was last empty has moved
    double rate = 0;    // bytes per second, per flow, since time_
    double finish = std::numeric_limits<double>::infinity();  // of its first flow to finish
    // (served when the flow joined + its bytes, id): the flow with the least finishes first.
    std::priority_queue<std::pair<double, int32_t>, std::vector<std::pair<double, int32_t>>,
                        std::greater<>>
        flows;
    int32_t count() const { return static_cast<int32_t>(flows.size()); }
  };
  struct Pending {
    int32_t id = 0, a = 0, b = 0;
    double bytes = 0;
  };

  int32_t ClassOf(int32_t a, int32_t b);
  // Notes that the rates of the classes linked to resource r (through classes sharing resources)
  // must be shared out again.
  void MarkChanged(int32_t r);
  // Shares the rates out again over the classes linked to a changed resource. The other classes
  // keep theirs: the filling gives a set of classes linked by shared resources rates that depend
  // only on those classes, their flow counts and their order in active_ (which decides how
  // rounding falls), so they are the rates a filling over every class would give.
  void Share();
  // When the first of a class's flows finishes at the rates since time_ (REQUIRES: it has flows).
  double FirstFinish(const Class& cls) const;

  std::vector<double> capacity_;
  std::vector<Class> classes_;
  std::unordered_map<int64_t, int32_t> class_of_;  // a * resources + b -> index in classes_
  std::vector<int32_t> active_;                    // classes with running flows
  std::vector<int32_t> active_index_;              // per class, its place in active_, or -1
  std::vector<std::vector<int32_t>> on_;           // per resource, the active classes crossing it
  // Resources whose classes' rates are stale (changed_ lists those marked in is_changed_): a
  // class there gained or lost flows, joined or left active_, or moved in it.
  std::vector<int32_t> changed_;
  std::vector<char> is_changed_;
  std::vector<Pending> pending_;  // added since the last Reallocate
  double time_ = 0;
  // Scratch space of Share, kept to avoid allocations; count_ and cursor_ are zero and fill_ is
  // empty between calls.
  std::vector<double> left_;
  std::vector<int32_t> count_, cursor_, begin_, members_, touched_;
  std::vector<int32_t> group_;  // the classes Share recomputes, in active_ order
  std::vector<char> fixed_, in_group_;
  // The resources with flows left to fix, keyed by their fair share (capacity left / flows).
  internal::IndexedMinHeap fill_;
};

}  // namespace dcp::sim
