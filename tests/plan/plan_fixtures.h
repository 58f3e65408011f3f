// SPDX-License-Identifier: Apache-2.0
// Tiny plans built by hand, small enough to check on paper, for the validator's tests.
//
// TwoBlockCausalPlan: one causal sequence of 8 tokens in 2 blocks of 4, one head group, 2 devices.
// Device 0 owns block 0, device 1 owns block 1. Compute blocks (q block, kv block, area):
//   c0 = (0, 0, 10)  on device 0
//   c1 = (1, 0, 16)  on device 0 (remote: device 1 sends Q1 there, gets O/LSE or dQ back)
//   c2 = (1, 1, 10)  on device 1
// Shape: 4 query heads, 1 KV head, head_dim 8, bf16. Bytes of one 4-token piece: Q, O, dO 256
// (bf16) or 512 (fp32 accumulators O, dQ); KV 128 (bf16) or 256 (fp32 dKV); LSE and Delta 64.
//
// Forward, device 0 (slots: 0 Q0, 1 KV0, 2 Q1 recv, 3/4 O/LSE acc of c0, 5/6 O/LSE acc of c1,
// 7/8 O/LSE outputs of block 0):
//   0 CommLaunch 0   recv [2] from 1
//   1 LseMerge init  (3,4), (5,6)
//   2 Attention      c0: q 0, kv 1, out 3, lse 4
//   3 CommWait 0
//   4 Attention      c1: q 2, kv 1, out 5, lse 6
//   5 CommLaunch 1   send [5, 6] to 1
//   6 Copy           3->7, 4->8
//   7 CommWait 1
// Forward, device 1 (slots: 0 Q1, 1 KV1, 2/3 O/LSE acc of c2, 4/5 O/LSE recv of c1, 6/7 outputs):
//   0 CommLaunch 0   send [0] to 0
//   1 LseMerge init  (2,3)
//   2 Attention      c2: q 0, kv 1, out 2, lse 3
//   3 CommWait 0
//   4 CommLaunch 1   recv [4, 5] from 0
//   5 CommWait 1
//   6 LseMerge       (6,7) <- (2,3), (4,5)
//
// Backward, device 0 (slots: 0 Q0, 1 KV0, 2 O0, 3 LSE0, 4 dO0, 5 Delta0, 6-9 Q1/dO1/LSE1/Delta1
// recv, 10 dQ acc of c0, 11 dKV acc of c0, 12 dQ acc of c1, 13 dKV acc of c1, 14 dQ0 out,
// 15 dKV0 out):
//   0 CommLaunch 0   recv [6, 7, 8, 9] from 1
//   1 Delta          5 <- [2, 4]
//   2 Sum init       10, 11, 12, 13
//   3 Attention      c0: q 0, kv 1, lse 3, d_o 4, delta 5, dq 10, dkv 11
//   4 CommWait 0
//   5 Attention      c1: q 6, kv 1, lse 8, d_o 7, delta 9, dq 12, dkv 13
//   6 CommLaunch 1   send [12] to 1
//   7 Copy           10->14
//   8 Sum            15 <- [11, 13]
//   9 CommWait 1
// Backward, device 1 (slots: 0 Q1, 1 KV1, 2 O1, 3 LSE1, 4 dO1, 5 Delta1, 6 dQ acc of c2, 7 dKV
// acc of c2, 8 dQ recv of c1, 9 dQ1 out, 10 dKV1 out):
//   0 Delta          5 <- [2, 4]
//   1 CommLaunch 0   send [0, 4, 3, 5] to 0
//   2 Sum init       6, 7
//   3 Attention      c2: q 0, kv 1, lse 3, d_o 4, delta 5, dq 6, dkv 7
//   4 CommWait 0
//   5 CommLaunch 1   recv [8] from 0
//   6 CommWait 1
//   7 Sum            9 <- [6, 8]
//   8 Copy           7->10
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "dcp/plan.h"

namespace dcp::testing {

inline constexpr int64_t kFixtureTokens = 4;  // tokens per block

// The causal mask inside a diagonal tile: row i sees columns [0, i].
inline std::vector<Slice> DiagonalSlices() {
  return {Slice{.row_begin = 0, .row_end = kFixtureTokens, .lo = {0, 0}, .hi = {1, 1}}};
}
// A tile below the diagonal: every row sees every column.
inline std::vector<Slice> FullSlices() {
  return {
      Slice{.row_begin = 0, .row_end = kFixtureTokens, .lo = {0, 0}, .hi = {kFixtureTokens, 0}}};
}

// A slot of one 4-token piece: `query_heads` query heads (4 in this fixture) of head_dim 8 and
// 1 KV head.
inline SlotInfo FixtureSlot(TensorKind kind, bool fp32 = false, int64_t query_heads = 4) {
  const DType dtype = fp32 ? DType::kFloat32 : DType::kBFloat16;
  const int64_t bytes_per_element = fp32 ? 4 : 2;
  switch (kind) {
    case TensorKind::kQ:
    case TensorKind::kO:
    case TensorKind::kDO:
    case TensorKind::kDQ:  // query heads x 8 elements per token
      return {kind, dtype, kFixtureTokens * query_heads * 8 * bytes_per_element};
    case TensorKind::kKV:
    case TensorKind::kDKV:  // K and V of 1 head x 8 elements per token
      return {kind, dtype, kFixtureTokens * 16 * bytes_per_element};
    case TensorKind::kLse:
    case TensorKind::kDelta:  // fp32 per token and query head
      return {kind, DType::kFloat32, kFixtureTokens * query_heads * 4};
  }
  return {};
}

inline Piece FixturePiece(int32_t block) { return Piece{DataBlockId{block}, 0}; }

// A tile with its slots and mask, before it joins a call (Attention).
struct MaskedTile {
  ComputeBlockId block;
  AttentionRow row;
  AttentionColumn column;
  std::vector<Slice> mask;
};

inline MaskedTile ForwardTile(int32_t c, SlotId q, SlotId kv, SlotId out, SlotId lse,
                              std::vector<Slice> slices) {
  return {ComputeBlockId{c}, AttentionRow{.q = q, .out = out, .lse = lse},
          AttentionColumn{.kv = kv}, std::move(slices)};
}

inline MaskedTile BackwardTile(int32_t c, SlotId q, SlotId kv, SlotId lse, SlotId d_o, SlotId delta,
                               SlotId dq, SlotId dkv, std::vector<Slice> slices) {
  return {ComputeBlockId{c}, AttentionRow{.q = q, .lse = lse, .d_o = d_o, .delta = delta, .dq = dq},
          AttentionColumn{.kv = kv, .dkv = dkv}, std::move(slices)};
}

// The index of `item` in *list, appended when it is not there yet.
template <typename T>
int32_t IndexIn(std::vector<T>* list, const T& item) {
  const auto it = std::find(list->begin(), list->end(), item);
  if (it != list->end()) return static_cast<int32_t>(it - list->begin());
  list->push_back(item);
  return static_cast<int32_t>(list->size() - 1);
}

// A call of these tiles, one row per distinct row of slots and one column per distinct column.
inline BlockwiseAttention Attention(Pass pass, int32_t division, std::vector<MaskedTile> tiles) {
  BlockwiseAttention call{.pass = pass, .division = division};
  for (const MaskedTile& t : tiles) {
    const int32_t row = IndexIn(&call.rows, t.row), column = IndexIn(&call.columns, t.column);
    call.AddTile(t.block, row, column, t.mask);
  }
  return call;
}

inline CommLaunch Launch(int32_t id, std::vector<PeerSlots> sends, std::vector<PeerSlots> recvs) {
  return CommLaunch{.id = id, .sends = std::move(sends), .recvs = std::move(recvs)};
}

inline PeerSlots Peer(int32_t device, std::vector<SlotId> slots) {
  return PeerSlots{.peer = DeviceId{device}, .slots = std::move(slots)};
}

// Every piece of the fixtures is a whole block, so every message entry moves its whole slot.
inline std::vector<Program> WithWholeSlotsMoving(std::vector<Program> programs) {
  for (Program& program : programs) {
    for (Instruction& instruction : program.instructions) {
      auto* launch = std::get_if<CommLaunch>(&instruction);
      if (launch == nullptr) continue;
      for (auto* list : {&launch->sends, &launch->recvs}) {
        for (PeerSlots& p : *list) {
          p.bytes.clear();
          for (SlotId s : p.slots) p.bytes.push_back(program.slots[s].bytes);
        }
      }
    }
  }
  return programs;
}

// A kLseMerge op initialising (out, lse), or merging sources into them.
inline ReductionOp MergeOp(SlotId out, SlotId lse, std::vector<SlotId> sources = {},
                           std::vector<SlotId> lse_sources = {}) {
  return ReductionOp{.destination = out,
                     .sources = std::move(sources),
                     .lse_destination = lse,
                     .lse_sources = std::move(lse_sources)};
}
inline ReductionOp SumOp(SlotId destination, std::vector<SlotId> sources = {}) {
  return ReductionOp{.destination = destination, .sources = std::move(sources)};
}
inline ReductionOp DeltaOp(SlotId delta, SlotId o, SlotId d_o) {
  return ReductionOp{.destination = delta, .sources = {o, d_o}};
}

inline std::vector<Program> TwoBlockCausalForward() {
  using K = TensorKind;
  Program d0{.device = DeviceId{0}, .pass = Pass::kForward};
  d0.slots = {FixtureSlot(K::kQ),       FixtureSlot(K::kKV),  FixtureSlot(K::kQ),
              FixtureSlot(K::kO, true), FixtureSlot(K::kLse), FixtureSlot(K::kO, true),
              FixtureSlot(K::kLse),     FixtureSlot(K::kO),   FixtureSlot(K::kLse)};
  d0.inputs = {{K::kQ, FixturePiece(0), 0}, {K::kKV, FixturePiece(0), 1}};
  d0.outputs = {{K::kO, FixturePiece(0), 7}, {K::kLse, FixturePiece(0), 8}};
  d0.instructions = {
      Launch(0, {}, {Peer(1, {2})}),
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(3, 4), MergeOp(5, 6)}},
      Attention(Pass::kForward, 0, {ForwardTile(0, 0, 1, 3, 4, DiagonalSlices())}),
      CommWait{.id = 0},
      Attention(Pass::kForward, 1, {ForwardTile(1, 2, 1, 5, 6, FullSlices())}),
      Launch(1, {Peer(1, {5, 6})}, {}),
      BlockwiseCopy{.ops = {{3, 7}, {4, 8}}},
      CommWait{.id = 1},
  };

  Program d1{.device = DeviceId{1}, .pass = Pass::kForward};
  d1.slots = {FixtureSlot(K::kQ),   FixtureSlot(K::kKV),      FixtureSlot(K::kO, true),
              FixtureSlot(K::kLse), FixtureSlot(K::kO, true), FixtureSlot(K::kLse),
              FixtureSlot(K::kO),   FixtureSlot(K::kLse)};
  d1.inputs = {{K::kQ, FixturePiece(1), 0}, {K::kKV, FixturePiece(1), 1}};
  d1.outputs = {{K::kO, FixturePiece(1), 6}, {K::kLse, FixturePiece(1), 7}};
  d1.instructions = {
      Launch(0, {Peer(0, {0})}, {}),
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(2, 3)}},
      Attention(Pass::kForward, 0, {ForwardTile(2, 0, 1, 2, 3, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {}, {Peer(0, {4, 5})}),
      CommWait{.id = 1},
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(6, 7, {2, 4}, {3, 5})}},
  };
  return WithWholeSlotsMoving({d0, d1});
}

inline std::vector<Program> TwoBlockCausalBackward() {
  using K = TensorKind;
  Program d0{.device = DeviceId{0}, .pass = Pass::kBackward};
  d0.slots = {FixtureSlot(K::kQ),        FixtureSlot(K::kKV),        FixtureSlot(K::kO),
              FixtureSlot(K::kLse),      FixtureSlot(K::kDO),        FixtureSlot(K::kDelta),
              FixtureSlot(K::kQ),        FixtureSlot(K::kDO),        FixtureSlot(K::kLse),
              FixtureSlot(K::kDelta),    FixtureSlot(K::kDQ, true),  FixtureSlot(K::kDKV, true),
              FixtureSlot(K::kDQ, true), FixtureSlot(K::kDKV, true), FixtureSlot(K::kDQ),
              FixtureSlot(K::kDKV)};
  d0.inputs = {{K::kQ, FixturePiece(0), 0},
               {K::kKV, FixturePiece(0), 1},
               {K::kO, FixturePiece(0), 2},
               {K::kLse, FixturePiece(0), 3},
               {K::kDO, FixturePiece(0), 4}};
  d0.outputs = {{K::kDQ, FixturePiece(0), 14}, {K::kDKV, FixturePiece(0), 15}};
  d0.instructions = {
      Launch(0, {}, {Peer(1, {6, 7, 8, 9})}),
      BlockwiseReduction{.kind = ReductionKind::kDelta, .ops = {DeltaOp(5, 2, 4)}},
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(10), SumOp(11), SumOp(12), SumOp(13)}},
      Attention(Pass::kBackward, 0, {BackwardTile(0, 0, 1, 3, 4, 5, 10, 11, DiagonalSlices())}),
      CommWait{.id = 0},
      Attention(Pass::kBackward, 1, {BackwardTile(1, 6, 1, 8, 7, 9, 12, 13, FullSlices())}),
      Launch(1, {Peer(1, {12})}, {}),
      BlockwiseCopy{.ops = {{10, 14}}},
      BlockwiseReduction{.kind = ReductionKind::kSum, .ops = {SumOp(15, {11, 13})}},
      CommWait{.id = 1},
  };

  Program d1{.device = DeviceId{1}, .pass = Pass::kBackward};
  d1.slots = {FixtureSlot(K::kQ),        FixtureSlot(K::kKV),        FixtureSlot(K::kO),
              FixtureSlot(K::kLse),      FixtureSlot(K::kDO),        FixtureSlot(K::kDelta),
              FixtureSlot(K::kDQ, true), FixtureSlot(K::kDKV, true), FixtureSlot(K::kDQ, true),
              FixtureSlot(K::kDQ),       FixtureSlot(K::kDKV)};
  d1.inputs = {{K::kQ, FixturePiece(1), 0},
               {K::kKV, FixturePiece(1), 1},
               {K::kO, FixturePiece(1), 2},
               {K::kLse, FixturePiece(1), 3},
               {K::kDO, FixturePiece(1), 4}};
  d1.outputs = {{K::kDQ, FixturePiece(1), 9}, {K::kDKV, FixturePiece(1), 10}};
  d1.instructions = {
      BlockwiseReduction{.kind = ReductionKind::kDelta, .ops = {DeltaOp(5, 2, 4)}},
      Launch(0, {Peer(0, {0, 4, 3, 5})}, {}),
      BlockwiseReduction{.kind = ReductionKind::kSum, .ops = {SumOp(6), SumOp(7)}},
      Attention(Pass::kBackward, 0, {BackwardTile(2, 0, 1, 3, 4, 5, 6, 7, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {}, {Peer(0, {8})}),
      CommWait{.id = 1},
      BlockwiseReduction{.kind = ReductionKind::kSum, .ops = {SumOp(9, {6, 8})}},
      BlockwiseCopy{.ops = {{7, 10}}},
  };
  return WithWholeSlotsMoving({d0, d1});
}

// The whole plan; see the file comment for its programs.
inline Plan TwoBlockCausalPlan() {
  Plan plan;
  plan.topology = Topology{.nodes = 1, .devices_per_node = 2};
  plan.shape = AttentionShape{.heads = 4, .kv_heads = 1, .head_dim = 8, .dtype = DType::kBFloat16};
  plan.block_size = kFixtureTokens;
  plan.head_groups = 1;
  plan.seqlens = {2 * kFixtureTokens};
  plan.blocks = {
      PlanBlock{.sequence = SequenceId{0}, .token_begin = 0, .tokens = kFixtureTokens},
      PlanBlock{
          .sequence = SequenceId{0}, .token_begin = kFixtureTokens, .tokens = kFixtureTokens}};
  plan.block_owner = {DeviceId{0}, DeviceId{1}};
  // Causal areas: a diagonal tile of 4 tokens allows 1 + 2 + 3 + 4 = 10 pairs, the tile below it
  // 4 x 4 = 16.
  plan.compute_blocks = {
      PlanComputeBlock{.q_block = DataBlockId{0}, .kv_block = DataBlockId{0}, .area = 10},
      PlanComputeBlock{.q_block = DataBlockId{1}, .kv_block = DataBlockId{0}, .area = 16},
      PlanComputeBlock{.q_block = DataBlockId{1}, .kv_block = DataBlockId{1}, .area = 10}};
  plan.n_divisions = 2;
  plan.forward = TwoBlockCausalForward();
  plan.backward = TwoBlockCausalBackward();
  return plan;
}

}  // namespace dcp::testing
