// SPDX-License-Identifier: Apache-2.0
// LayOutSlots: slots alive at the same time never share a byte of the workspace, and the
// workspace is no larger than the slots' capacities laid side by side; the layout is the one its
// rules (include/dcp/plan.h) give, found again the slow way.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <variant>

#include "dcp/plan.h"
#include "testing/cases.h"
#include "testing/random_plans.h"

namespace dcp {
namespace {

const char* const kMasks[] = {"causal", "full", "lambda:sink=8,window=150",
                              "causal-blockwise:block=64,local=2", "documents:lengths=50/70"};

// The instructions at which each slot is alive, [first, last], read off the program as
// include/dcp/plan.h states it: inputs from -1, outputs to the instruction count, a CommLaunch's
// slots until its CommWait.
std::vector<std::pair<int, int>> Lives(const Program& program) {
  const int end = static_cast<int>(program.instructions.size());
  std::vector<std::pair<int, int>> lives(program.slots.size(), {end + 1, -2});
  const auto touch = [&](SlotId s, int from, int to) {
    lives[s].first = std::min(lives[s].first, from);
    lives[s].second = std::max(lives[s].second, to);
  };
  for (const Binding& b : program.inputs) touch(b.slot, -1, -1);
  for (const Binding& b : program.outputs) touch(b.slot, end, end);
  for (int i = 0; i < end; ++i) {
    const Instruction& instruction = program.instructions[i];
    if (const auto* a = std::get_if<BlockwiseAttention>(&instruction)) {
      for (const AttentionRow& r : a->rows) {
        for (SlotId s : {r.q, r.out, r.lse, r.d_o, r.delta, r.dq}) {
          if (s >= 0) touch(s, i, i);
        }
      }
      for (const AttentionColumn& c : a->columns) {
        for (SlotId s : {c.kv, c.dkv}) {
          if (s >= 0) touch(s, i, i);
        }
      }
    } else if (const auto* r = std::get_if<BlockwiseReduction>(&instruction)) {
      for (const ReductionOp& op : r->ops) {
        touch(op.destination, i, i);
        if (op.lse_destination >= 0) touch(op.lse_destination, i, i);
        for (SlotId s : op.sources) touch(s, i, i);
        for (SlotId s : op.lse_sources) touch(s, i, i);
      }
    } else if (const auto* c = std::get_if<BlockwiseCopy>(&instruction)) {
      for (const auto& [from, to] : c->ops) {
        touch(from, i, i);
        touch(to, i, i);
      }
    } else if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
      int wait = end;
      for (int j = i + 1; j < end; ++j) {
        const auto* w = std::get_if<CommWait>(&program.instructions[j]);
        if (w != nullptr && w->id == launch->id) {
          wait = j;
          break;
        }
      }
      for (const auto* peers : {&launch->sends, &launch->recvs}) {
        for (const PeerSlots& p : *peers) {
          for (SlotId s : p.slots) touch(s, i, wait);
        }
      }
    }
  }
  return lives;
}

void ExpectSafeAndNoLargerThanSideBySide(const Program& program) {
  const SlotLayout layout = LayOutSlots(program);
  ASSERT_EQ(layout.offsets.size(), program.slots.size());
  EXPECT_EQ(program.PeakBufferBytes(), layout.bytes);
  const std::vector<std::pair<int, int>> lives = Lives(program);
  int64_t side_by_side = 0;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const int64_t bytes = program.slots[s].bytes;
    side_by_side += (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
    EXPECT_EQ(layout.offsets[s] % kSlotAlignment, 0) << "slot " << s;
    EXPECT_GE(layout.offsets[s], 0) << "slot " << s;
    EXPECT_LE(layout.offsets[s] + bytes, layout.bytes) << "slot " << s;
    for (size_t t = 0; t < s; ++t) {
      const bool together = lives[s].first <= lives[t].second && lives[t].first <= lives[s].second;
      const bool share = layout.offsets[s] < layout.offsets[t] + program.slots[t].bytes &&
                         layout.offsets[t] < layout.offsets[s] + bytes;
      if (together && share && bytes > 0 && program.slots[t].bytes > 0) {
        ADD_FAILURE() << "slots " << t << " and " << s << " alive at once ([" << lives[t].first
                      << ", " << lives[t].second << "] and [" << lives[s].first << ", "
                      << lives[s].second << "]) share bytes";
      }
    }
  }
  EXPECT_LE(layout.bytes, side_by_side);
  // No layout holds less than the most bytes alive at one instruction.
  const int end = static_cast<int>(program.instructions.size());
  int64_t most = 0;
  for (int i = -1; i <= end; ++i) {
    int64_t alive = 0;
    for (size_t s = 0; s < program.slots.size(); ++s) {
      if (lives[s].first <= i && i <= lives[s].second) alive += program.slots[s].bytes;
    }
    most = std::max(most, alive);
  }
  EXPECT_GE(layout.bytes, most);
}

// The layout plan.h specifies, found the slow way from the lives above: slots taken in order of
// first use (then id; a slot named nowhere is alive at the start), each either at the lowest place
// of its aligned capacity that no slot alive with it holds, or at the smallest gap (the lowest of
// equals) between the ranges of the slots alive with it, else at the gap reaching the top, which
// grows, else at the top; the smaller of the two workspaces.
SlotLayout ReferenceLayout(const Program& program) {
  std::vector<std::pair<int, int>> lives = Lives(program);
  const int end = static_cast<int>(program.instructions.size());
  for (auto& life : lives) {
    if (life.first == end + 1) life = {-1, -1};
  }
  const auto aligned = [&](size_t s) {
    return (program.slots[s].bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  };
  std::vector<size_t> order(lives.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lives[a].first < lives[b].first; });
  std::vector<size_t> placed;
  const auto alive_with = [&](size_t s) {
    std::vector<size_t> alive;
    for (size_t t : placed) {
      if (lives[t].second >= lives[s].first) alive.push_back(t);
    }
    return alive;
  };

  std::vector<int64_t> place(lives.size(), 0);
  std::map<int64_t, int64_t> places;  // capacity -> places used
  for (size_t s : order) {
    std::vector<bool> taken(lives.size() + 1, false);
    for (size_t t : alive_with(s)) {
      if (aligned(t) == aligned(s)) taken[place[t]] = true;
    }
    while (taken[place[s]]) ++place[s];
    places[aligned(s)] = std::max(places[aligned(s)], place[s] + 1);
    placed.push_back(s);
  }
  SlotLayout by_capacity{.offsets = std::vector<int64_t>(lives.size(), 0), .bytes = 0};
  std::map<int64_t, int64_t> base;
  for (const auto& [capacity, count] : places) {
    base[capacity] = by_capacity.bytes;
    by_capacity.bytes += capacity * count;
  }
  for (size_t s = 0; s < lives.size(); ++s) {
    by_capacity.offsets[s] = base[aligned(s)] + place[s] * aligned(s);
  }

  SlotLayout best_fit{.offsets = std::vector<int64_t>(lives.size(), 0), .bytes = 0};
  placed.clear();
  for (size_t s : order) {
    if (aligned(s) == 0) continue;
    std::vector<std::pair<int64_t, int64_t>> used;  // [begin, end) of the slots alive with s
    for (size_t t : alive_with(s))
      used.emplace_back(best_fit.offsets[t], best_fit.offsets[t] + aligned(t));
    std::sort(used.begin(), used.end());
    std::vector<std::pair<int64_t, int64_t>> gaps;  // [begin, end) below the top
    int64_t at = 0;
    for (const auto& [begin, range_end] : used) {
      if (begin > at) gaps.emplace_back(at, begin);
      at = std::max(at, range_end);
    }
    if (at < best_fit.bytes) gaps.emplace_back(at, best_fit.bytes);
    const std::pair<int64_t, int64_t>* best = nullptr;
    for (const auto& gap : gaps) {
      const int64_t size = gap.second - gap.first;
      if (size >= aligned(s) && (best == nullptr || size < best->second - best->first)) best = &gap;
    }
    if (best != nullptr) {
      best_fit.offsets[s] = best->first;
    } else if (!gaps.empty() && gaps.back().second == best_fit.bytes) {
      best_fit.offsets[s] = gaps.back().first;
      best_fit.bytes = gaps.back().first + aligned(s);
    } else {
      best_fit.offsets[s] = best_fit.bytes;
      best_fit.bytes += aligned(s);
    }
    placed.push_back(s);
  }
  return best_fit.bytes < by_capacity.bytes ? best_fit : by_capacity;
}

TEST(LayOutSlots, SlotsAliveTogetherNeverShareBytesInPlansOfRandomBatches) {
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    const testing::RandomPlanCase c = testing::MakeRandomPlanCase(
        seed, kMasks, /*block_shifts=*/4, AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString()
                                      << ", block " << c.block_size << ", mask " << c.mask);
    const Result<Plan> plan = testing::CompileRandomPlanCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (const auto* programs : {&plan->forward, &plan->backward}) {
      for (const Program& program : *programs) ExpectSafeAndNoLargerThanSideBySide(program);
    }
  }
}

TEST(LayOutSlots, IsTheLayoutItsRulesGiveInPlansOfRandomBatches) {
  for (uint64_t seed = 0; seed < testing::RandomCases(100); ++seed) {
    const testing::RandomPlanCase c = testing::MakeRandomPlanCase(
        seed, kMasks, /*block_shifts=*/4, AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString()
                                      << ", block " << c.block_size << ", mask " << c.mask);
    const Result<Plan> plan = testing::CompileRandomPlanCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (const auto* programs : {&plan->forward, &plan->backward}) {
      for (const Program& program : *programs) {
        const SlotLayout layout = LayOutSlots(program);
        const SlotLayout expected = ReferenceLayout(program);
        ASSERT_EQ(layout.bytes, expected.bytes) << "device " << program.device.value;
        ASSERT_EQ(layout.offsets, expected.offsets) << "device " << program.device.value;
      }
    }
  }
}

// A hand-made program: an input read by a copy into a buffer of another capacity, a send kept
// alive until its wait, a slot of the input's capacity received after the input is dead (it
// takes the input's place), an output, and a slot no instruction names (alive at the start).
TEST(LayOutSlots, ReusesAPlaceOfTheSameCapacityOnlyOnceItsTenantIsDead) {
  Program program;
  program.slots = {SlotInfo{TensorKind::kQ, DType::kBFloat16, 100},   // 0: input, 128 aligned
                   SlotInfo{TensorKind::kO, DType::kFloat32, 256},    // 1: copy of 0, sent
                   SlotInfo{TensorKind::kKV, DType::kBFloat16, 128},  // 2: received after
                   SlotInfo{TensorKind::kDQ, DType::kBFloat16, 128},  // 3: output
                   SlotInfo{TensorKind::kLse, DType::kFloat32, 64}};  // 4: never named
  program.inputs = {Binding{TensorKind::kQ, Piece{}, 0}};
  program.outputs = {Binding{TensorKind::kDQ, Piece{}, 3}};
  program.instructions = {
      BlockwiseCopy{.ops = {{0, 1}}},  // 0
      CommLaunch{.id = 1,
                 .sends = {PeerSlots{.peer = DeviceId{1}, .slots = {1}, .bytes = {256}}},
                 .recvs = {}},  // 1
      CommLaunch{.id = 2,
                 .sends = {},
                 .recvs = {PeerSlots{.peer = DeviceId{1}, .slots = {2}, .bytes = {128}}}},  // 2
      CommWait{.id = 2},                                                                    // 3
      BlockwiseCopy{.ops = {{2, 3}}},                                                       // 4
      CommWait{.id = 1},                                                                    // 5
  };
  const SlotLayout layout = LayOutSlots(program);
  // Places per capacity would take 64 (slot 4) + 2 x 128 (slots 0 and 2 share one, 3 needs
  // another: 2 is alive at the copy that writes 3) + 256 (slot 1) = 576 bytes. Best fit, in order
  // of first use: 0 at [0, 128), 4 at [128, 192); at instruction 0, 4 is dead and 1 takes its range
  // grown to [128, 384); at 2, 0 is dead and 2 takes [0, 128); at 4 nothing is free: 3 at the top.
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 128, 0, 384, 128}));
  EXPECT_EQ(layout.bytes, 512);
  ExpectSafeAndNoLargerThanSideBySide(program);
}

}  // namespace
}  // namespace dcp
