// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "dcp/plan.h"
#include "plan/program_builder.h"

namespace dcp {
namespace {

int64_t Aligned(int64_t bytes) {
  return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}

}  // namespace

std::string_view ToString(TensorKind kind) {
  switch (kind) {
    case TensorKind::kQ:
      return "Q";
    case TensorKind::kKV:
      return "KV";
    case TensorKind::kO:
      return "O";
    case TensorKind::kLse:
      return "LSE";
    case TensorKind::kDO:
      return "dO";
    case TensorKind::kDelta:
      return "Delta";
    case TensorKind::kDQ:
      return "dQ";
    case TensorKind::kDKV:
      return "dKV";
  }
  return "unknown";
}

std::string_view ToString(Pass pass) { return pass == Pass::kForward ? "forward" : "backward"; }

std::string_view ToString(ReductionKind kind) {
  switch (kind) {
    case ReductionKind::kLseMerge:
      return "lse-merge";
    case ReductionKind::kSum:
      return "sum";
    case ReductionKind::kDelta:
      return "delta";
  }
  return "unknown";
}

void BlockwiseAttention::AddTile(ComputeBlockId block, int32_t row, int32_t column,
                                 std::span<const Slice> mask) {
  AttentionTile tile{.block = block,
                     .row = row,
                     .column = column,
                     .first_slice = static_cast<int32_t>(slices.size()),
                     .n_slices = static_cast<int32_t>(mask.size())};
  if (!tiles.empty() && std::ranges::equal(SlicesOf(tiles.back()), mask)) {
    tile.first_slice = tiles.back().first_slice;
  } else {
    slices.insert(slices.end(), mask.begin(), mask.end());
  }
  tiles.push_back(tile);
}

int64_t Program::PeakBufferBytes() const { return LayOutSlots(*this).bytes; }

SlotLayout LayOutSlots(const Program& program) {
  const int n_slots = static_cast<int>(program.slots.size());
  const int end = static_cast<int>(program.instructions.size());
  std::vector<int> first(n_slots, std::numeric_limits<int>::max()), last(n_slots, -1);
  const auto touch = [&](SlotId s, int at) {
    first[s] = std::min(first[s], at);
    last[s] = std::max(last[s], at);
  };
  for (const Binding& b : program.inputs) touch(b.slot, -1);
  for (const Binding& b : program.outputs) touch(b.slot, end);
  std::unordered_map<int32_t, int> wait_of;  // launch id -> index of its wait
  for (int i = 0; i < end; ++i) {
    if (const auto* w = std::get_if<CommWait>(&program.instructions[i])) wait_of[w->id] = i;
  }
  for (int i = 0; i < end; ++i) {
    const Instruction& instruction = program.instructions[i];
    // A launch's slots stay live until its wait: the transfer reads or writes them until then.
    int until = i;
    if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
      const auto wait = wait_of.find(launch->id);
      until = wait == wait_of.end() ? end : std::max(i, wait->second);
    }
    internal::ForEachSlot(instruction, [&](SlotId s) {
      touch(s, i);
      touch(s, until);
    });
  }

  for (SlotId s = 0; s < n_slots; ++s) {
    if (first[s] > last[s]) first[s] = last[s] = -1;  // referred to nowhere: lives at the start
  }

  // Slots in order of first use; per capacity, the places that are free and those in use, by the
  // instruction after which they free up.
  std::vector<SlotId> order(n_slots);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](SlotId a, SlotId b) { return std::tie(first[a], a) < std::tie(first[b], b); });
  struct Places {
    std::set<int64_t> free;
    std::priority_queue<std::pair<int, int64_t>, std::vector<std::pair<int, int64_t>>,
                        std::greater<>>
        busy;
    int64_t count = 0;
  };
  std::map<int64_t, Places> by_capacity;
  std::vector<int64_t> place(n_slots, 0);
  for (SlotId s : order) {
    Places& places = by_capacity[Aligned(program.slots[s].bytes)];
    while (!places.busy.empty() && places.busy.top().first < first[s]) {
      places.free.insert(places.busy.top().second);
      places.busy.pop();
    }
    if (places.free.empty()) {
      place[s] = places.count++;
    } else {
      place[s] = *places.free.begin();
      places.free.erase(places.free.begin());
    }
    places.busy.emplace(last[s], place[s]);
  }

  SlotLayout layout{.offsets = std::vector<int64_t>(n_slots, 0), .bytes = 0};
  std::map<int64_t, int64_t> base;  // capacity -> offset of its first place
  for (const auto& [capacity, places] : by_capacity) {
    base[capacity] = layout.bytes;
    layout.bytes += capacity * places.count;
  }
  for (SlotId s = 0; s < n_slots; ++s) {
    const int64_t capacity = Aligned(program.slots[s].bytes);
    layout.offsets[s] = base[capacity] + place[s] * capacity;
  }
  return layout;
}

}  // namespace dcp

namespace dcp {

PlanTraffic MeasureTraffic(const Plan& plan, Pass pass) {
  const std::vector<Program>& programs = pass == Pass::kForward ? plan.forward : plan.backward;
  PlanTraffic traffic;
  std::vector<int64_t> inter(plan.topology.devices(), 0);
  for (const Program& program : programs) {
    for (const Instruction& instruction : program.instructions) {
      const auto* launch = std::get_if<CommLaunch>(&instruction);
      if (launch == nullptr) continue;
      for (const PeerSlots& send : launch->sends) {
        int64_t bytes = 0;
        for (int64_t b : send.bytes) bytes += b;
        if (plan.topology.NodeOf(send.peer) == plan.topology.NodeOf(program.device)) {
          traffic.bytes_intra_node += bytes;
        } else {
          traffic.bytes_inter_node += bytes;
          inter[program.device.value] += bytes;
          inter[send.peer.value] += bytes;
        }
      }
    }
  }
  for (int64_t b : inter)
    traffic.max_device_bytes_inter_node = std::max(traffic.max_device_bytes_inter_node, b);
  return traffic;
}

}  // namespace dcp
