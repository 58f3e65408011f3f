// SPDX-License-Identifier: Apache-2.0
// A hand-built plan over 2 nodes, small enough to check on paper, for the validator's tests of the
// paths a one-node plan lacks: a relay (a piece crosses the network once and is forwarded inside
// the destination node) and a node sum (partial gradients of two devices of one node are summed
// there and cross the network once). Reuses the helpers of plan_fixtures.h.
//
// TwoNodePlan: one causal sequence of 12 tokens in 3 blocks of 4, 2 head groups, 3 divisions,
// topology 2x2: devices 0 and 1 on node 0, devices 2 and 3 on node 1. Device 0 owns block 0,
// device 2 block 1, device 3 block 2; device 1 owns and computes nothing (its two programs are
// empty). Every tile is computed by the owner of its q block, so only KV (forward and backward)
// and partial dKV (backward) travel. Compute blocks (q block, kv block, area) for head group 0;
// compute block c + 6 is the same tile for head group 1, always computed with it:
//   c0 = (0, 0, 10)  on device 0, division 0
//   c1 = (1, 0, 16)  on device 2, division 1 (KV0 from device 0, across the network)
//   c2 = (1, 1, 10)  on device 2, division 0
//   c3 = (2, 0, 16)  on device 3, division 2 (KV0 relayed: device 0 -> 2 -> 3)
//   c4 = (2, 1, 16)  on device 3, division 1 (KV1 from device 2, inside node 1)
//   c5 = (2, 2, 10)  on device 3, division 0
// The node sum: dKV0 has partials on devices 2 (c1) and 3 (c3) of node 1. Device 3, whose last
// tile on it comes latest, is the aggregator: device 2 sends it its partial, device 3 adds it into
// its own in place (as the compiler does) and sends the one sum to device 0.
// Shape: 4 query heads, 2 KV heads, head_dim 8, bf16; a head group is 2 query heads and 1 KV head.
// Bytes of one 4-token piece: Q, O, dO 128 (bf16) or 256 (fp32 accumulators O, dQ); KV 128 (bf16)
// or 256 (fp32 dKV); LSE and Delta 32. Every message moves whole slots.
// Launches: 0 the KV of division 1 (owners to their readers, the relay's receive among them),
// 1 the relay forwarding KV0 to device 3, 2 the partials exchanged inside node 1 (backward),
// 3 the node sum crossing to device 0 (backward).
//
// Forward, device 0 (slots: 0 Q0/g0, 1 KV0/g0, 2 Q0/g1, 3 KV0/g1, 4/5 O/LSE acc g0, 6/7 O/LSE acc
// g1, 8/9 O/LSE outputs g0, 10/11 O/LSE outputs g1):
//   0 CommLaunch 0   send [1, 3] to 2
//   1 LseMerge init  (4,5), (6,7)
//   2 Attention      division 0: c0: q 0, kv 1, out 4, lse 5; c6: q 2, kv 3, out 6, lse 7
//   3 CommWait 0
//   4 Copy           4->8, 5->9, 6->10, 7->11
// Forward, device 2 (slots: 0 Q1/g0, 1 KV1/g0, 2 Q1/g1, 3 KV1/g1, 4 KV0/g0 recv, 5 KV0/g1 recv,
// 6/7 O/LSE acc g0, 8/9 O/LSE acc g1, 10/11 outputs g0, 12/13 outputs g1):
//   0 CommLaunch 0   send [1, 3] to 3, recv [4, 5] from 0
//   1 LseMerge init  (6,7), (8,9)
//   2 Attention      division 0: c2: q 0, kv 1, out 6, lse 7; c8: q 2, kv 3, out 8, lse 9
//   3 CommWait 0
//   4 CommLaunch 1   send [4, 5] to 3 (the relay: forwards KV0, arrived in launch 0)
//   5 Attention      division 1: c1: q 0, kv 4, out 6, lse 7; c7: q 2, kv 5, out 8, lse 9
//   6 CommWait 1
//   7 Copy           6->10, 7->11, 8->12, 9->13
// Forward, device 3 (slots: 0 Q2/g0, 1 KV2/g0, 2 Q2/g1, 3 KV2/g1, 4 KV1/g0 recv, 5 KV1/g1 recv,
// 6 KV0/g0 recv, 7 KV0/g1 recv, 8/9 O/LSE acc g0, 10/11 O/LSE acc g1, 12/13 outputs g0, 14/15
// outputs g1):
//   0 CommLaunch 0   recv [4, 5] from 2
//   1 LseMerge init  (8,9), (10,11)
//   2 Attention      division 0: c5: q 0, kv 1, out 8, lse 9; c11: q 2, kv 3, out 10, lse 11
//   3 CommWait 0
//   4 CommLaunch 1   recv [6, 7] from 2
//   5 Attention      division 1: c4: q 0, kv 4, out 8, lse 9; c10: q 2, kv 5, out 10, lse 11
//   6 CommWait 1
//   7 Attention      division 2: c3: q 0, kv 6, out 8, lse 9; c9: q 2, kv 7, out 10, lse 11
//   8 Copy           8->12, 9->13, 10->14, 11->15
//
// Backward: every owner's slots 0-11 are its inputs, 6g + (0 Q, 1 KV, 2 O, 3 LSE, 4 dO, 5 Delta)
// for head group g, and every tile reads its rows from them: "c1: kv 12, dq 14, dkv 16" stands for
// q 6g, kv 12, lse 6g+3, d_o 6g+4, delta 6g+5, dq 14, dkv 16 (g = 0 for c0-c5, 1 for c6-c11).
// Backward, device 0 (slots: 0-11 inputs, 12/13 dQ/dKV acc g0 (c0), 14/15 dQ/dKV acc g1 (c6),
// 16/17 dKV0 recv g0/g1 (the node sum), 18/19 dQ/dKV outputs g0, 20/21 dQ/dKV outputs g1):
//   0 CommLaunch 0   send [1, 7] to 2
//   1 Delta          5 <- [2, 4], 11 <- [8, 10]
//   2 Sum init       12, 13, 14, 15
//   3 Attention      division 0: c0: kv 1, dq 12, dkv 13; c6: kv 7, dq 14, dkv 15
//   4 CommWait 0
//   5 CommLaunch 3   recv [16, 17] from 3
//   6 Copy           12->18, 14->20
//   7 CommWait 3
//   8 Sum            19 <- [13, 16], 21 <- [15, 17]
// Backward, device 2 (slots: 0-11 inputs, 12/13 KV0 recv g0/g1, 14/15/16 dQ1/dKV1/dKV0 acc g0,
// 17/18/19 the same for g1, 20/21 dKV1 recv g0/g1 (c4, c10), 22/23 dQ/dKV outputs g0, 24/25 g1):
//   0 CommLaunch 0   send [1, 7] to 3, recv [12, 13] from 0
//   1 Delta          5 <- [2, 4], 11 <- [8, 10]
//   2 Sum init       14, 15, 16, 17, 18, 19
//   3 Attention      division 0: c2: kv 1, dq 14, dkv 15; c8: kv 7, dq 17, dkv 18
//   4 CommWait 0
//   5 CommLaunch 1   send [12, 13] to 3 (the relay)
//   6 Attention      division 1: c1: kv 12, dq 14, dkv 16; c7: kv 13, dq 17, dkv 19
//   7 CommWait 1
//   8 CommLaunch 2   send [16, 19] to 3 (partial dKV0 to the aggregator), recv [20, 21] from 3
//   9 Copy           14->22, 17->24
//  10 CommWait 2
//  11 Sum            23 <- [15, 20], 25 <- [18, 21]
// Backward, device 3 (slots: 0-11 inputs, 12/13 KV1 recv g0/g1, 14/15 KV0 recv g0/g1 (relayed),
// 16/17/18/19 dQ2/dKV2/dKV1/dKV0 acc g0, 20/21/22/23 the same for g1, 24/25 dKV0 recv g0/g1
// (c1, c7 from device 2), 26/27 dQ/dKV outputs g0, 28/29 g1):
//   0 CommLaunch 0   recv [12, 13] from 2
//   1 Delta          5 <- [2, 4], 11 <- [8, 10]
//   2 Sum init       16, 17, 18, 19, 20, 21, 22, 23
//   3 Attention      division 0: c5: kv 1, dq 16, dkv 17; c11: kv 7, dq 20, dkv 21
//   4 CommWait 0
//   5 CommLaunch 1   recv [14, 15] from 2
//   6 Attention      division 1: c4: kv 12, dq 16, dkv 18; c10: kv 13, dq 20, dkv 22
//   7 CommWait 1
//   8 CommLaunch 2   send [18, 22] to 2 (partial dKV1 home), recv [24, 25] from 2
//   9 Attention      division 2: c3: kv 14, dq 16, dkv 19; c9: kv 15, dq 20, dkv 23
//  10 CommWait 2
//  11 Sum            19 <- [19, 24], 23 <- [23, 25] (the node sum)
//  12 CommLaunch 3   send [19, 23] to 0
//  13 Copy           16->26, 17->27, 20->28, 21->29
//  14 CommWait 3
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_fixtures.h"

namespace dcp::testing {

inline constexpr int32_t kTwoNodeHeadGroups = 2;
inline constexpr int32_t kTwoNodeTiles = 6;  // tiles per head group: compute block c + 6g

// A slot of one 4-token piece of one head group (2 query heads, 1 KV head, head_dim 8).
inline SlotInfo TwoNodeSlot(TensorKind kind, bool fp32 = false) {
  return FixtureSlot(kind, fp32, /*query_heads=*/2);
}

inline Piece GroupPiece(int32_t block, int32_t group) { return Piece{DataBlockId{block}, group}; }

// Appends an owner's input slots of `block`, per head group: forward Q, KV (slots 2g, 2g + 1);
// backward Q, KV, O, LSE, dO and Delta (slots 6g to 6g + 5), all bound but Delta, which the owner
// computes.
inline void AddOwnedInputs(Program& program, int32_t block) {
  using K = TensorKind;
  const std::vector<K> kinds =
      program.pass == Pass::kForward
          ? std::vector<K>{K::kQ, K::kKV}
          : std::vector<K>{K::kQ, K::kKV, K::kO, K::kLse, K::kDO, K::kDelta};
  for (int32_t g = 0; g < kTwoNodeHeadGroups; ++g) {
    for (K kind : kinds) {
      const auto slot = static_cast<SlotId>(program.slots.size());
      program.slots.push_back(TwoNodeSlot(kind));
      if (kind != K::kDelta) program.inputs.push_back({kind, GroupPiece(block, g), slot});
    }
  }
}

// Appends an owner's output slots of `block`, bound, per head group: forward O, LSE; backward dQ,
// dKV.
inline void AddOwnedOutputs(Program& program, int32_t block) {
  using K = TensorKind;
  const std::vector<K> kinds = program.pass == Pass::kForward ? std::vector<K>{K::kO, K::kLse}
                                                              : std::vector<K>{K::kDQ, K::kDKV};
  for (int32_t g = 0; g < kTwoNodeHeadGroups; ++g) {
    for (K kind : kinds) {
      const auto slot = static_cast<SlotId>(program.slots.size());
      program.slots.push_back(TwoNodeSlot(kind));
      program.outputs.push_back({kind, GroupPiece(block, g), slot});
    }
  }
}

// Appends unbound slots: received values (KV), or fp32 accumulators and received partials.
inline void AddSlots(Program& program, const std::vector<TensorKind>& kinds, bool fp32) {
  for (TensorKind kind : kinds) program.slots.push_back(TwoNodeSlot(kind, fp32));
}

// A backward tile computed by the owner of its rows: q, lse, d_o and delta are slots 6g + 0, 3, 4
// and 5 (see the file comment).
inline MaskedTile OwnedRowsTile(int32_t c, SlotId kv, SlotId dq, SlotId dkv,
                                std::vector<Slice> slices) {
  const SlotId base = 6 * (c / kTwoNodeTiles);
  return BackwardTile(c, base, kv, base + 3, base + 4, base + 5, dq, dkv, std::move(slices));
}

// Every owner's first backward instruction after launch 0: Delta of both head groups.
inline BlockwiseReduction OwnedDeltas() {
  return BlockwiseReduction{.kind = ReductionKind::kDelta,
                            .ops = {DeltaOp(5, 2, 4), DeltaOp(11, 8, 10)}};
}

inline std::vector<Program> TwoNodeForward() {
  using K = TensorKind;
  const std::vector<K> o_lse_acc = {K::kO, K::kLse, K::kO, K::kLse};  // g0 then g1

  Program d0{.device = DeviceId{0}, .pass = Pass::kForward};
  AddOwnedInputs(d0, 0);                   // 0-3
  AddSlots(d0, o_lse_acc, /*fp32=*/true);  // 4-7
  AddOwnedOutputs(d0, 0);                  // 8-11
  d0.instructions = {
      Launch(0, {Peer(2, {1, 3})}, {}),
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(4, 5), MergeOp(6, 7)}},
      Attention(Pass::kForward, 0,
                {ForwardTile(0, 0, 1, 4, 5, DiagonalSlices()),
                 ForwardTile(6, 2, 3, 6, 7, DiagonalSlices())}),
      CommWait{.id = 0},
      BlockwiseCopy{.ops = {{4, 8}, {5, 9}, {6, 10}, {7, 11}}},
  };

  Program d1{.device = DeviceId{1}, .pass = Pass::kForward};  // idle

  Program d2{.device = DeviceId{2}, .pass = Pass::kForward};
  AddOwnedInputs(d2, 1);                           // 0-3
  AddSlots(d2, {K::kKV, K::kKV}, /*fp32=*/false);  // 4-5
  AddSlots(d2, o_lse_acc, /*fp32=*/true);          // 6-9
  AddOwnedOutputs(d2, 1);                          // 10-13
  d2.instructions = {
      Launch(0, {Peer(3, {1, 3})}, {Peer(0, {4, 5})}),
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(6, 7), MergeOp(8, 9)}},
      Attention(Pass::kForward, 0,
                {ForwardTile(2, 0, 1, 6, 7, DiagonalSlices()),
                 ForwardTile(8, 2, 3, 8, 9, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {Peer(3, {4, 5})}, {}),
      Attention(
          Pass::kForward, 1,
          {ForwardTile(1, 0, 4, 6, 7, FullSlices()), ForwardTile(7, 2, 5, 8, 9, FullSlices())}),
      CommWait{.id = 1},
      BlockwiseCopy{.ops = {{6, 10}, {7, 11}, {8, 12}, {9, 13}}},
  };

  Program d3{.device = DeviceId{3}, .pass = Pass::kForward};
  AddOwnedInputs(d3, 2);                                           // 0-3
  AddSlots(d3, {K::kKV, K::kKV, K::kKV, K::kKV}, /*fp32=*/false);  // 4-7
  AddSlots(d3, o_lse_acc, /*fp32=*/true);                          // 8-11
  AddOwnedOutputs(d3, 2);                                          // 12-15
  d3.instructions = {
      Launch(0, {}, {Peer(2, {4, 5})}),
      BlockwiseReduction{.kind = ReductionKind::kLseMerge, .ops = {MergeOp(8, 9), MergeOp(10, 11)}},
      Attention(Pass::kForward, 0,
                {ForwardTile(5, 0, 1, 8, 9, DiagonalSlices()),
                 ForwardTile(11, 2, 3, 10, 11, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {}, {Peer(2, {6, 7})}),
      Attention(
          Pass::kForward, 1,
          {ForwardTile(4, 0, 4, 8, 9, FullSlices()), ForwardTile(10, 2, 5, 10, 11, FullSlices())}),
      CommWait{.id = 1},
      Attention(
          Pass::kForward, 2,
          {ForwardTile(3, 0, 6, 8, 9, FullSlices()), ForwardTile(9, 2, 7, 10, 11, FullSlices())}),
      BlockwiseCopy{.ops = {{8, 12}, {9, 13}, {10, 14}, {11, 15}}},
  };
  return WithWholeSlotsMoving({d0, d1, d2, d3});
}

inline std::vector<Program> TwoNodeBackward() {
  using K = TensorKind;

  Program d0{.device = DeviceId{0}, .pass = Pass::kBackward};
  AddOwnedInputs(d0, 0);                                            // 0-11
  AddSlots(d0, {K::kDQ, K::kDKV, K::kDQ, K::kDKV}, /*fp32=*/true);  // 12-15
  AddSlots(d0, {K::kDKV, K::kDKV}, /*fp32=*/true);                  // 16-17
  AddOwnedOutputs(d0, 0);                                           // 18-21
  d0.instructions = {
      Launch(0, {Peer(2, {1, 7})}, {}),
      OwnedDeltas(),
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(12), SumOp(13), SumOp(14), SumOp(15)}},
      Attention(Pass::kBackward, 0,
                {OwnedRowsTile(0, 1, 12, 13, DiagonalSlices()),
                 OwnedRowsTile(6, 7, 14, 15, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(3, {}, {Peer(3, {16, 17})}),
      BlockwiseCopy{.ops = {{12, 18}, {14, 20}}},
      CommWait{.id = 3},
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(19, {13, 16}), SumOp(21, {15, 17})}},
  };

  Program d1{.device = DeviceId{1}, .pass = Pass::kBackward};  // idle

  Program d2{.device = DeviceId{2}, .pass = Pass::kBackward};
  AddOwnedInputs(d2, 1);                                                              // 0-11
  AddSlots(d2, {K::kKV, K::kKV}, /*fp32=*/false);                                     // 12-13
  AddSlots(d2, {K::kDQ, K::kDKV, K::kDKV, K::kDQ, K::kDKV, K::kDKV}, /*fp32=*/true);  // 14-19
  AddSlots(d2, {K::kDKV, K::kDKV}, /*fp32=*/true);                                    // 20-21
  AddOwnedOutputs(d2, 1);                                                             // 22-25
  d2.instructions = {
      Launch(0, {Peer(3, {1, 7})}, {Peer(0, {12, 13})}),
      OwnedDeltas(),
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(14), SumOp(15), SumOp(16), SumOp(17), SumOp(18), SumOp(19)}},
      Attention(Pass::kBackward, 0,
                {OwnedRowsTile(2, 1, 14, 15, DiagonalSlices()),
                 OwnedRowsTile(8, 7, 17, 18, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {Peer(3, {12, 13})}, {}),
      Attention(
          Pass::kBackward, 1,
          {OwnedRowsTile(1, 12, 14, 16, FullSlices()), OwnedRowsTile(7, 13, 17, 19, FullSlices())}),
      CommWait{.id = 1},
      Launch(2, {Peer(3, {16, 19})}, {Peer(3, {20, 21})}),
      BlockwiseCopy{.ops = {{14, 22}, {17, 24}}},
      CommWait{.id = 2},
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(23, {15, 20}), SumOp(25, {18, 21})}},
  };

  Program d3{.device = DeviceId{3}, .pass = Pass::kBackward};
  AddOwnedInputs(d3, 2);                                           // 0-11
  AddSlots(d3, {K::kKV, K::kKV, K::kKV, K::kKV}, /*fp32=*/false);  // 12-15
  AddSlots(d3, {K::kDQ, K::kDKV, K::kDKV, K::kDKV, K::kDQ, K::kDKV, K::kDKV, K::kDKV},
           /*fp32=*/true);                          // 16-23
  AddSlots(d3, {K::kDKV, K::kDKV}, /*fp32=*/true);  // 24-25
  AddOwnedOutputs(d3, 2);                           // 26-29
  d3.instructions = {
      Launch(0, {}, {Peer(2, {12, 13})}),
      OwnedDeltas(),
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(16), SumOp(17), SumOp(18), SumOp(19), SumOp(20), SumOp(21),
                                 SumOp(22), SumOp(23)}},
      Attention(Pass::kBackward, 0,
                {OwnedRowsTile(5, 1, 16, 17, DiagonalSlices()),
                 OwnedRowsTile(11, 7, 20, 21, DiagonalSlices())}),
      CommWait{.id = 0},
      Launch(1, {}, {Peer(2, {14, 15})}),
      Attention(Pass::kBackward, 1,
                {OwnedRowsTile(4, 12, 16, 18, FullSlices()),
                 OwnedRowsTile(10, 13, 20, 22, FullSlices())}),
      CommWait{.id = 1},
      Launch(2, {Peer(2, {18, 22})}, {Peer(2, {24, 25})}),
      Attention(
          Pass::kBackward, 2,
          {OwnedRowsTile(3, 14, 16, 19, FullSlices()), OwnedRowsTile(9, 15, 20, 23, FullSlices())}),
      CommWait{.id = 2},
      BlockwiseReduction{.kind = ReductionKind::kSum,
                         .ops = {SumOp(19, {19, 24}), SumOp(23, {23, 25})}},
      Launch(3, {Peer(0, {19, 23})}, {}),
      BlockwiseCopy{.ops = {{16, 26}, {17, 27}, {20, 28}, {21, 29}}},
      CommWait{.id = 3},
  };
  return WithWholeSlotsMoving({d0, d1, d2, d3});
}

// The whole plan; see the file comment for its programs.
inline Plan TwoNodePlan() {
  Plan plan;
  plan.topology = Topology{.nodes = 2, .devices_per_node = 2};
  plan.shape = AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kBFloat16};
  plan.block_size = kFixtureTokens;
  plan.head_groups = kTwoNodeHeadGroups;
  plan.seqlens = {3 * kFixtureTokens};
  for (int64_t b = 0; b < 3; ++b) {
    plan.blocks.push_back(PlanBlock{
        .sequence = SequenceId{0}, .token_begin = b * kFixtureTokens, .tokens = kFixtureTokens});
  }
  plan.block_owner = {DeviceId{0}, DeviceId{2}, DeviceId{3}};
  // (q block, kv block) of tiles c0-c5; causal areas: 10 on the diagonal, 16 below it.
  const std::pair<int32_t, int32_t> tiles[kTwoNodeTiles] = {{0, 0}, {1, 0}, {1, 1},
                                                            {2, 0}, {2, 1}, {2, 2}};
  for (int32_t g = 0; g < kTwoNodeHeadGroups; ++g) {
    for (const auto& [q, kv] : tiles) {
      plan.compute_blocks.push_back(PlanComputeBlock{.q_block = DataBlockId{q},
                                                     .kv_block = DataBlockId{kv},
                                                     .head_group = g,
                                                     .area = q == kv ? 10 : 16});
    }
  }
  plan.n_divisions = 3;
  plan.forward = TwoNodeForward();
  plan.backward = TwoNodeBackward();
  return plan;
}

}  // namespace dcp::testing
