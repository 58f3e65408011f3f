// SPDX-License-Identifier: Apache-2.0
#include "sim/flow_network.h"

#include <algorithm>

#include "dcp/status.h"

namespace dcp::sim {
namespace {

// Flows finishing within this relative distance of an event's time finish at it; it absorbs the
// rounding of a class's served bytes (served += rate * dt) against each flow's finishing point.
constexpr double kFinishTolerance = 1e-12;

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacities)
    : capacity_(std::move(capacities)), fill_(capacity_.size()) {
  for (double c : capacity_) DCP_CHECK(c > 0, "resource capacity {} is not positive", c);
  const size_t n = capacity_.size();
  left_.resize(n);
  count_.resize(n);
  cursor_.resize(n);
  begin_.resize(n);
  on_.resize(n);
  is_changed_.resize(n);
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
    active_index_.push_back(-1);
    in_group_.push_back(0);
  }
  return it->second;
}

void FlowNetwork::MarkChanged(int32_t r) {
  if (is_changed_[r]) return;
  is_changed_[r] = 1;
  changed_.push_back(r);
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
      active_index_[c] = static_cast<int32_t>(active_.size());
      active_.push_back(c);
      on_[cls.a].push_back(c);
      on_[cls.b].push_back(c);
    }
    cls.flows.emplace(cls.served + p.bytes, p.id);
    MarkChanged(cls.a);
    MarkChanged(cls.b);
  }
  pending_.clear();
  Share();
  for (int32_t c : active_) classes_[c].finish = FirstFinish(classes_[c]);
}

double FlowNetwork::FirstFinish(const Class& cls) const {
  const double remaining = cls.flows.top().first - cls.served;
  return remaining <= 0 ? time_ : time_ + remaining / cls.rate;
}

// Progressive filling over the classes linked to a change, each weighing its flow count: the
// resource with the smallest fair share fixes its classes' flows at that share. Only the resources
// those classes cross are touched (the per-resource tables are zero between calls). Why not every
// class: at an event of a baseline's pass over 16x8, 34-46 classes run in as many separate groups
// and one or two of them change; sharing all of them out at each event was 15% of a 1M-token
// default plan. The level a group's classes get is the same whichever other groups are filled
// beside it: resources come off the heap in order of share, and one below the level (rounding)
// comes off right after the resource of its own group that lowered it.
void FlowNetwork::Share() {
  // The classes linked to a changed resource: changed_ grows into the resources they cross.
  group_.clear();
  for (size_t i = 0; i < changed_.size(); ++i) {
    for (int32_t c : on_[changed_[i]]) {
      if (in_group_[c]) continue;
      in_group_[c] = 1;
      group_.push_back(c);
      MarkChanged(classes_[c].a);
      MarkChanged(classes_[c].b);
    }
  }
  for (int32_t r : changed_) is_changed_[r] = 0;
  changed_.clear();
  // In active_ order: sorted when the group is a few classes, read off active_ when it is most of
  // them (a group-cast links every class of an all-to-all over nodes).
  if (group_.size() * 16 < active_.size()) {
    std::sort(group_.begin(), group_.end(),
              [this](int32_t x, int32_t y) { return active_index_[x] < active_index_[y]; });
  } else {
    group_.clear();
    for (int32_t c : active_) {
      if (in_group_[c]) group_.push_back(c);
    }
  }
  for (int32_t c : group_) in_group_[c] = 0;

  // Per crossed resource (touched_), its flows (count_) and its classes in the group, as one
  // array of positions in group_ (members_[begin_[r] .. cursor_[r]), in active_ order).
  touched_.clear();
  for (int32_t c : group_) {
    for (const int32_t r : {classes_[c].a, classes_[c].b}) {
      if (cursor_[r]++ == 0) touched_.push_back(r);
      count_[r] += classes_[c].count();
    }
  }
  int32_t members = 0;
  for (int32_t r : touched_) {
    begin_[r] = members;
    members += cursor_[r];
    cursor_[r] = begin_[r];
  }
  members_.resize(members);
  for (size_t i = 0; i < group_.size(); ++i) {
    members_[cursor_[classes_[group_[i]].a]++] = static_cast<int32_t>(i);
    members_[cursor_[classes_[group_[i]].b]++] = static_cast<int32_t>(i);
  }
  fixed_.assign(group_.size(), 0);
  // A class alone on both its resources gets the smaller of their shares: what the filling
  // below would give it, without the heap (a ring's or TE's classes all are).
  for (size_t i = 0; i < group_.size(); ++i) {
    Class& cls = classes_[group_[i]];
    if (cursor_[cls.a] - begin_[cls.a] != 1 || cursor_[cls.b] - begin_[cls.b] != 1) continue;
    cls.rate = std::min(capacity_[cls.a], capacity_[cls.b]) / cls.count();
    fixed_[i] = 1;
    count_[cls.a] = count_[cls.b] = 0;
  }

  for (int32_t r : touched_) {
    if (count_[r] == 0) continue;
    left_[r] = capacity_[r];
    fill_.Set(r, left_[r] / count_[r]);
  }
  double level = 0;  // shares never fall below the last level; this guards rounding
  while (!fill_.empty()) {
    const int32_t r = fill_.top();
    level = std::max(level, fill_.key(r));
    fill_.Remove(r);
    for (int32_t m = begin_[r]; m < cursor_[r]; ++m) {
      const int32_t i = members_[m];
      if (fixed_[i]) continue;
      fixed_[i] = 1;
      Class& cls = classes_[group_[i]];
      cls.rate = level;
      const int32_t other = cls.a == r ? cls.b : cls.a;
      left_[other] = std::max(0.0, left_[other] - level * cls.count());
      count_[other] -= cls.count();
      if (count_[other] > 0) {
        fill_.Set(other, left_[other] / count_[other]);
      } else {
        fill_.Remove(other);
      }
    }
    count_[r] = 0;
  }
  for (int32_t r : touched_) {
    count_[r] = 0;
    cursor_[r] = 0;
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
    const size_t had = cls.flows.size();
    while (!cls.flows.empty()) {
      const double finish = FirstFinish(cls);
      if (finish > limit) {
        cls.finish = finish;  // NextFinish stays right before the next Reallocate
        break;
      }
      out->push_back(cls.flows.top().second);
      cls.flows.pop();
    }
    if (cls.flows.size() != had) {
      MarkChanged(cls.a);
      MarkChanged(cls.b);
    }
    if (cls.flows.empty()) {
      cls.finish = std::numeric_limits<double>::infinity();
      const int32_t c = active_[i];
      for (const int32_t r : {cls.a, cls.b}) {
        std::vector<int32_t>& on = on_[r];
        *std::find(on.begin(), on.end(), c) = on.back();
        on.pop_back();
      }
      active_index_[c] = -1;
      active_[i] = active_.back();
      active_.pop_back();
      if (i < active_.size()) {  // the last class moved here: its order among its links changed
        const Class& moved = classes_[active_[i]];
        active_index_[active_[i]] = static_cast<int32_t>(i);
        MarkChanged(moved.a);
        MarkChanged(moved.b);
      }
    } else {
      ++i;
    }
  }
}

}  // namespace dcp::sim
