// SPDX-License-Identifier: Apache-2.0
#include "plan/program_builder.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

namespace dcp::internal {

Program ProgramBuilder::Finish() {
  constexpr int kStart = -1;
  const int end = static_cast<int>(program_.instructions.size());
  std::vector<int> first(buffers_.size(), std::numeric_limits<int>::max());
  std::vector<int> last(buffers_.size(), kStart - 1);
  const auto touch = [&](SlotId b, int at) {
    first[b] = std::min(first[b], at);
    last[b] = std::max(last[b], at);
  };
  for (const Binding& b : program_.inputs) touch(b.slot, kStart);
  for (const Binding& b : program_.outputs) touch(b.slot, end);
  std::map<int32_t, int> wait_of;  // launch id -> index of its wait
  for (int i = 0; i < end; ++i) {
    if (const auto* w = std::get_if<CommWait>(&program_.instructions[i])) wait_of[w->id] = i;
  }
  for (int i = 0; i < end; ++i) {
    Instruction& instruction = program_.instructions[i];
    ForEachSlot(instruction, [&](SlotId& b) { touch(b, i); });
    if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
      // Sent buffers stay live, and received ones reserved, until the wait.
      const int wait = wait_of.count(launch->id) ? wait_of[launch->id] : end;
      for (const auto& lists : {&launch->sends, &launch->recvs}) {
        for (const PeerSlots& p : *lists) {
          for (SlotId b : p.slots) touch(b, wait);
        }
      }
    }
  }

  // Linear scan by start: reuse a slot of the same type whose tenant died before this start.
  std::vector<SlotId> order(buffers_.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<SlotId>(b);
  std::sort(order.begin(), order.end(),
            [&](SlotId a, SlotId b) { return std::tie(first[a], a) < std::tie(first[b], b); });
  // Per slot type: the slots free for the next buffer (lowest id first) and the busy ones by the
  // instruction after which they free up. Buffers come in order of their first use, so a slot
  // once free stays free until it is handed out again.
  struct Pool {
    std::set<SlotId> free;
    std::priority_queue<std::pair<int, SlotId>, std::vector<std::pair<int, SlotId>>,
                        std::greater<>>
        busy;
  };
  std::map<std::tuple<TensorKind, DType, int64_t>, Pool> pools;
  std::vector<SlotId> slot_of(buffers_.size(), -1);
  for (SlotId b : order) {
    if (first[b] > last[b]) continue;  // never referenced
    const SlotInfo& type = buffers_[b];
    Pool& pool = pools[{type.kind, type.dtype, type.bytes}];
    while (!pool.busy.empty() && pool.busy.top().first < first[b]) {
      pool.free.insert(pool.busy.top().second);
      pool.busy.pop();
    }
    SlotId chosen;
    if (pool.free.empty()) {
      chosen = static_cast<SlotId>(program_.slots.size());
      program_.slots.push_back(type);
    } else {
      chosen = *pool.free.begin();
      pool.free.erase(pool.free.begin());
    }
    pool.busy.emplace(last[b], chosen);
    slot_of[b] = chosen;
  }

  for (Binding& b : program_.inputs) b.slot = slot_of[b.slot];
  for (Binding& b : program_.outputs) b.slot = slot_of[b.slot];
  for (Instruction& instruction : program_.instructions) {
    ForEachSlot(instruction, [&](SlotId& b) { b = slot_of[b]; });
  }
  return std::move(program_);
}

}  // namespace dcp::internal
