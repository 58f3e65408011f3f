// SPDX-License-Identifier: Apache-2.0
#include "sim/flow_network.h"

#include <algorithm>
#include <tuple>

#include "dcp/status.h"

namespace dcp::sim {
namespace {

// Flows finishing within this relative distance of an event's time finish at it; it absorbs the
// rounding of a class's served bytes (served += rate * dt) against each flow's finishing point.
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
  pending_.push_back({.id = id, .a = a, .b = b, .bytes = bytes});
}

int32_t FlowNetwork::ClassOf(int32_t a, int32_t b) {
  const int64_t key = static_cast<int64_t>(a) * static_cast<int64_t>(capacity_.size()) + b;
  const auto [it, inserted] = class_of_.try_emplace(key, static_cast<int32_t>(classes_.size()));
  if (inserted) {
    classes_.emplace_back();
    classes_.back().a = a;
    classes_.back().b = b;
  }
  return it->second;
}

void FlowNetwork::Reallocate(double time) {
  DCP_CHECK(time >= time_, "time goes back from {} to {}", time_, time);
  const double dt = time - time_;
  for (int32_t c : active_) classes_[c].served += classes_[c].rate * dt;
  time_ = time;
  for (const Pending& p : pending_) {
    const int32_t c = ClassOf(p.a, p.b);
    Class& cls = classes_[c];
    if (cls.flows.empty()) {
      cls.served = 0;
      active_.push_back(c);
    }
    cls.flows.emplace(cls.served + p.bytes, p.id);
  }
  pending_.clear();
  if (active_.empty()) return;
  Share();
  for (int32_t c : active_) classes_[c].finish = FirstFinish(classes_[c]);
}

double FlowNetwork::FirstFinish(const Class& cls) const {
  const double remaining = cls.flows.top().first - cls.served;
  return remaining <= 0 ? time_ : time_ + remaining / cls.rate;
}

// Progressive filling over the active classes, each weighing its flow count: the resource with
// the smallest fair share fixes its classes' flows at that share. Shares only change when a class
// of the resource is fixed elsewhere; stale heap entries are recognised by their version.
void FlowNetwork::Share() {
  const size_t n = capacity_.size();
  // Per resource, its flows (count_) and its active classes (cursor_, then as one array of
  // positions in active_ indexed by begin_).
  std::fill(count_.begin(), count_.end(), 0);
  std::fill(cursor_.begin(), cursor_.end(), 0);
  for (int32_t c : active_) {
    for (const int32_t r : {classes_[c].a, classes_[c].b}) {
      count_[r] += classes_[c].count();
      ++cursor_[r];
    }
  }
  begin_[0] = 0;
  for (size_t r = 0; r < n; ++r) begin_[r + 1] = begin_[r] + cursor_[r];
  members_.resize(begin_[n]);
  std::copy(begin_.begin(), begin_.end() - 1, cursor_.begin());
  for (size_t i = 0; i < active_.size(); ++i) {
    members_[cursor_[classes_[active_[i]].a]++] = static_cast<int32_t>(i);
    members_[cursor_[classes_[active_[i]].b]++] = static_cast<int32_t>(i);
  }
  std::fill(version_.begin(), version_.end(), 0);
  std::copy(capacity_.begin(), capacity_.end(), left_.begin());
  fixed_.assign(active_.size(), 0);

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
      Class& cls = classes_[active_[i]];
      cls.rate = level;
      const int32_t other = cls.a == r ? cls.b : cls.a;
      left_[other] = std::max(0.0, left_[other] - level * cls.count());
      count_[other] -= cls.count();
      if (count_[other] > 0) {
        heap.emplace(left_[other] / count_[other], other, ++version_[other]);
      }
    }
    count_[r] = 0;
  }
}

double FlowNetwork::NextFinish() const {
  double next = std::numeric_limits<double>::infinity();
  for (int32_t c : active_) next = std::min(next, classes_[c].finish);
  return next;
}

void FlowNetwork::TakeFinished(double time, std::vector<int32_t>* out) {
  const double limit = time + kFinishTolerance * std::max(time, 1e-6);
  for (size_t i = 0; i < active_.size();) {
    Class& cls = classes_[active_[i]];
    // Its flows in finishing order, each at the time its own bytes would take at the rate.
    while (!cls.flows.empty()) {
      const double finish = FirstFinish(cls);
      if (finish > limit) {
        cls.finish = finish;  // NextFinish stays right before the next Reallocate
        break;
      }
      out->push_back(cls.flows.top().second);
      cls.flows.pop();
    }
    if (cls.flows.empty()) {
      cls.finish = std::numeric_limits<double>::infinity();
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace dcp::sim
