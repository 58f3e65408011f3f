// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory_resource>
#include <numeric>
#include <queue>
#include <set>
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

namespace {

// A slot's life: the instructions from its first reference to its last (plan.h, LayOutSlots).
struct Life {
  int first = std::numeric_limits<int>::max();
  int last = -1;
};

std::vector<Life> SlotLives(const Program& program) {
  const int end = static_cast<int>(program.instructions.size());
  std::vector<Life> lives(program.slots.size());
  const auto touch = [&](SlotId s, int at) {
    lives[s].first = std::min(lives[s].first, at);
    lives[s].last = std::max(lives[s].last, at);
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
  for (Life& life : lives) {
    if (life.first > life.last) life = {-1, -1};  // referred to nowhere: lives at the start
  }
  return lives;
}

// Slots grouped by a position of their lives (first or last reference, an instruction index from
// -1 to the program's end), in id order within a position: a counting sort (a comparison sort of
// the slots was 15% of the layout, and heaps of the lives in use another 15%).
struct SlotsByPosition {
  std::vector<int32_t> begin;  // the slots at position p are slots[begin[p + 1] .. begin[p + 2])
  std::vector<SlotId> slots;

  SlotsByPosition(const std::vector<Life>& lives, size_t instructions, int Life::*position)
      : begin(instructions + 3, 0), slots(lives.size()) {
    for (const Life& life : lives) ++begin[life.*position + 2];
    std::partial_sum(begin.begin(), begin.end(), begin.begin());
    std::vector<int32_t> next(begin.begin(), begin.end() - 1);
    for (size_t s = 0; s < lives.size(); ++s)
      slots[next[lives[s].*position + 1]++] = static_cast<SlotId>(s);
  }
};

// Calls release(slot) for every slot whose life ends before `first`, once each, as `first` grows:
// the slots placed in order of first reference give their space back when the next one begins
// after their lives. In which order slots that end together are released does not matter to
// either packing (a free place joins a set, a free range merges with its neighbours).
class Releases {
 public:
  explicit Releases(const SlotsByPosition& ends) : ends_(ends) {}
  template <typename Fn>
  void Before(int first, Fn&& release) {
    for (; next_ < first; ++next_) {
      for (int32_t i = ends_.begin[next_ + 1]; i < ends_.begin[next_ + 2]; ++i) {
        release(ends_.slots[i]);
      }
    }
  }

 private:
  const SlotsByPosition& ends_;
  int next_ = -1;  // the positions before next_ are released
};

// Per capacity, numbered places: a slot takes the lowest free place of its capacity.
SlotLayout ByCapacity(const Program& program, const std::vector<Life>& lives,
                      const std::vector<SlotId>& order, const SlotsByPosition& ends) {
  struct Places {
    std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free;  // lowest on top
    int64_t count = 0;
  };
  std::map<int64_t, Places> by_capacity;
  std::vector<Places*> places_of(lives.size(), nullptr);
  std::vector<int64_t> place(lives.size(), 0);
  Releases releases(ends);
  for (SlotId s : order) {
    releases.Before(lives[s].first, [&](SlotId e) { places_of[e]->free.push(place[e]); });
    Places& places = by_capacity[Aligned(program.slots[s].bytes)];
    places_of[s] = &places;
    if (places.free.empty()) {
      place[s] = places.count++;
    } else {
      place[s] = places.free.top();
      places.free.pop();
    }
  }
  SlotLayout layout{.offsets = std::vector<int64_t>(lives.size(), 0), .bytes = 0};
  std::map<int64_t, int64_t> base;  // capacity -> offset of its first place
  for (const auto& [capacity, places] : by_capacity) {
    base[capacity] = layout.bytes;
    layout.bytes += capacity * places.count;
  }
  for (size_t s = 0; s < lives.size(); ++s) {
    const int64_t capacity = Aligned(program.slots[s].bytes);
    layout.offsets[s] = base[capacity] + place[s] * capacity;
  }
  return layout;
}

// Byte ranges: a slot takes the smallest free range it fits (the lowest of equals), else the top
// of the workspace; ranges freed next to each other merge.
SlotLayout BestFit(const Program& program, const std::vector<Life>& lives,
                   const std::vector<SlotId>& order, const SlotsByPosition& ends) {
  SlotLayout layout{.offsets = std::vector<int64_t>(lives.size(), 0), .bytes = 0};
  // The free ranges by offset (to merge neighbours) and by (bytes, offset) (to find the best fit):
  // a scan of the ranges in offset order was quadratic where thousands of them are free at once
  // (100,000 one-token sequences on one device: 31 s of a 32 s simulate).
  // Their nodes come from a pool: allocating each one was as slow as the scan where few are free.
  std::pmr::unsynchronized_pool_resource pool;
  std::pmr::map<int64_t, int64_t> by_offset(&pool);
  std::pmr::set<std::pair<int64_t, int64_t>> by_size(&pool);
  const auto add = [&](int64_t offset, int64_t bytes) {
    by_offset.emplace(offset, bytes);
    by_size.emplace(bytes, offset);
  };
  const auto remove = [&](std::pmr::map<int64_t, int64_t>::iterator range) {
    by_size.erase({range->second, range->first});
    return by_offset.erase(range);
  };
  const auto release = [&](SlotId e) {
    int64_t offset = layout.offsets[e], bytes = Aligned(program.slots[e].bytes);
    if (bytes == 0) return;  // an empty slot took no range
    auto next = by_offset.lower_bound(offset);
    if (next != by_offset.end() && next->first == offset + bytes) {
      bytes += next->second;
      next = remove(next);
    }
    if (next != by_offset.begin()) {
      const auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        remove(prev);
      }
    }
    add(offset, bytes);
  };
  Releases releases(ends);
  for (SlotId s : order) {
    releases.Before(lives[s].first, release);
    const int64_t bytes = Aligned(program.slots[s].bytes);
    if (bytes == 0) continue;  // an empty slot needs no range
    int64_t offset = layout.bytes;
    const auto best = by_size.lower_bound({bytes, std::numeric_limits<int64_t>::min()});
    if (best != by_size.end()) {
      const auto [size, at] = *best;
      offset = at;
      remove(by_offset.find(at));
      if (size > bytes) add(at + bytes, size - bytes);  // what is left keeps its place
    } else if (!by_offset.empty() &&
               by_offset.rbegin()->first + by_offset.rbegin()->second == layout.bytes) {
      offset = by_offset.rbegin()->first;  // the range at the top grows
      remove(std::prev(by_offset.end()));
      layout.bytes = offset + bytes;
    } else {
      layout.bytes += bytes;
    }
    layout.offsets[s] = offset;
  }
  return layout;
}

}  // namespace

SlotLayout LayOutSlots(const Program& program) {
  const std::vector<Life> lives = SlotLives(program);
  // The slots in order of first reference, then id; and by last reference, to be released.
  const SlotsByPosition firsts(lives, program.instructions.size(), &Life::first);
  const SlotsByPosition ends(lives, program.instructions.size(), &Life::last);
  SlotLayout by_capacity = ByCapacity(program, lives, firsts.slots, ends);
  SlotLayout best_fit = BestFit(program, lives, firsts.slots, ends);
  return best_fit.bytes < by_capacity.bytes ? best_fit : by_capacity;
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
