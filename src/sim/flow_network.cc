// SPDX-License-Identifier: Apache-2.0
#include "sim/flow_network.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "dcp/status.h"

namespace dcp::sim {
namespace {

// Flows finishing within this relative distance of an event's time finish at it; it absorbs the
// rounding of remaining -= rate * dt.
constexpr double kFinishTolerance = 1e-12;

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacities) : capacity_(std::move(capacities)) {
  for (double c : capacity_) DCP_CHECK(c > 0, "resource capacity {} is not positive", c);
  const size_t n = capacity_.size();
  left_.resize(n);
  count_.resize(n);
  version_.resize(n);
  cursor_.resize(n);
  begin_.resize(n + 1);
}

void FlowNetwork::Add(int32_t id, double bytes, int32_t a, int32_t b) {
  DCP_CHECK(bytes > 0 && a != b && a >= 0 && b >= 0 &&
            static_cast<size_t>(std::max(a, b)) < capacity_.size());
  flows_.push_back(Flow{.id = id, .a = a, .b = b, .remaining = bytes});
}

void FlowNetwork::Reallocate(double time) {
  DCP_CHECK(time >= time_, "time goes back from {} to {}", time_, time);
  const double dt = time - time_;
  for (Flow& f : flows_) f.remaining = std::max(0.0, f.remaining - f.rate * dt);
  time_ = time;
  if (flows_.empty()) return;

  // The flows of each resource, as one array indexed by begin_.
  const size_t n = capacity_.size();
  std::fill(count_.begin(), count_.end(), 0);
  for (const Flow& f : flows_) {
    ++count_[f.a];
    ++count_[f.b];
  }
  begin_[0] = 0;
  for (size_t r = 0; r < n; ++r) begin_[r + 1] = begin_[r] + count_[r];
  members_.resize(begin_[n]);
  std::copy(begin_.begin(), begin_.end() - 1, cursor_.begin());
  for (size_t i = 0; i < flows_.size(); ++i) {
    members_[cursor_[flows_[i].a]++] = static_cast<int32_t>(i);
    members_[cursor_[flows_[i].b]++] = static_cast<int32_t>(i);
  }
  std::fill(version_.begin(), version_.end(), 0);
  std::copy(capacity_.begin(), capacity_.end(), left_.begin());
  fixed_.assign(flows_.size(), 0);

  // Progressive filling: the resource with the smallest fair share fixes its flows at that share.
  // Shares only change when a flow of the resource is fixed elsewhere; stale heap entries are
  // recognised by their version.
  using Entry = std::tuple<double, int32_t, int32_t>;  // share, resource, version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (size_t r = 0; r < n; ++r) {
    if (count_[r] > 0) heap.emplace(left_[r] / count_[r], static_cast<int32_t>(r), 0);
  }
  double level = 0;  // shares never fall below the last level; this guards rounding
  while (!heap.empty()) {
    const auto [share, r, version] = heap.top();
    heap.pop();
    if (version != version_[r] || count_[r] == 0) continue;
    level = std::max(level, share);
    for (int32_t m = begin_[r]; m < begin_[r + 1]; ++m) {
      const int32_t i = members_[m];
      if (fixed_[i]) continue;
      fixed_[i] = 1;
      Flow& f = flows_[i];
      f.rate = level;
      const int32_t other = f.a == r ? f.b : f.a;
      left_[other] = std::max(0.0, left_[other] - level);
      if (--count_[other] > 0) {
        heap.emplace(left_[other] / count_[other], other, ++version_[other]);
      }
    }
    count_[r] = 0;
  }
  for (Flow& f : flows_) {
    f.finish = f.remaining <= 0 ? time_ : time_ + f.remaining / f.rate;
  }
}

double FlowNetwork::NextFinish() const {
  double next = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_) next = std::min(next, f.finish);
  return next;
}

void FlowNetwork::TakeFinished(double time, std::vector<int32_t>* out) {
  const double limit = time + kFinishTolerance * std::max(time, 1e-6);
  for (size_t i = 0; i < flows_.size();) {
    if (flows_[i].finish <= limit) {
      out->push_back(flows_[i].id);
      flows_[i] = flows_.back();
      flows_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace dcp::sim
