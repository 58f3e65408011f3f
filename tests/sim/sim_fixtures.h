// SPDX-License-Identifier: Apache-2.0
// Hand-made plans for the simulator's tests: programs of copies and launches whose times follow
// from a few round numbers.
//
// SimpleCluster's kernel model is plain arithmetic: a copy of two slots of b bytes each moves 2b
// bytes through HBM at 1e9 bytes/s, so CopySeconds(p, s) adds a copy of s seconds; attention costs
// FLOPs / 1e12 with no launch cost, no sub-tile waste and no occupancy bound. Links: 1e9 bytes/s
// per device inside a node with 0.1 s latency, 1e8 bytes/s per node between nodes with 0.2 s
// latency.
#pragma once

#include <utility>
#include <vector>

#include "dcp/plan.h"
#include "dcp/sim.h"

namespace dcp::testing {

inline constexpr double kIntraBytesPerS = 1e9, kIntraLatencyS = 0.1;
inline constexpr double kInterBytesPerS = 1e8, kInterLatencyS = 0.2;
inline constexpr double kHbmBytesPerS = 1e9;

inline ClusterSpec SimpleCluster(int32_t devices_per_node) {
  ClusterSpec c;
  c.name = "simple";
  c.devices_per_node = devices_per_node;
  c.intra_node = {.bytes_per_s = kIntraBytesPerS, .latency_s = kIntraLatencyS};
  c.inter_node = {.bytes_per_s = kInterBytesPerS, .latency_s = kInterLatencyS};
  c.device = DeviceSpec{.peak_flops = 1e12,
                        .hbm_bytes_per_s = kHbmBytesPerS,
                        .memory_op_launch_s = 0,
                        .attention = {.forward_efficiency = 1,
                                      .backward_efficiency = 1,
                                      .rows_half = 0,
                                      .cols_half = 0,
                                      .mask_tile_rows = 1,
                                      .mask_tile_cols = 1,
                                      .sm_count = 0,
                                      .launch_s = 0}};
  return c;
}

// A plan on `topology` whose programs are all empty: one head of dimension 1, blocks of 1 token.
inline Plan EmptyPlan(Topology topology) {
  Plan plan;
  plan.topology = topology;
  plan.shape = AttentionShape{.heads = 1, .kv_heads = 1, .head_dim = 1};
  plan.block_size = 1;
  plan.head_groups = 1;
  for (int32_t d = 0; d < topology.devices(); ++d) {
    plan.forward.push_back(Program{.device = DeviceId{d}, .pass = Pass::kForward});
    plan.backward.push_back(Program{.device = DeviceId{d}, .pass = Pass::kBackward});
  }
  return plan;
}

inline SlotId AddSlot(Program& program, int64_t bytes) {
  program.slots.push_back(
      SlotInfo{.kind = TensorKind::kKV, .dtype = DType::kBFloat16, .bytes = bytes});
  return static_cast<SlotId>(program.slots.size() - 1);
}

// A copy that occupies the stream for `seconds` under SimpleCluster.
inline void CopySeconds(Program& program, double seconds) {
  const auto half = static_cast<int64_t>(seconds * kHbmBytesPerS / 2);
  const SlotId from = AddSlot(program, half), to = AddSlot(program, half);
  program.instructions.emplace_back(std::in_place_type<BlockwiseCopy>, BlockwiseCopy{.ops = {{from, to}}});
}

// Appends a CommLaunch `id` sending `bytes` to each of `to` and receiving `bytes` from each of
// `from` (one fresh slot per message).
inline void Launch(Program& program, int32_t id, std::vector<int32_t> to, std::vector<int32_t> from,
                   int64_t bytes) {
  CommLaunch launch{.id = id};
  for (int32_t peer : to) {
    launch.sends.push_back(
        PeerSlots{.peer = DeviceId{peer}, .slots = {AddSlot(program, bytes)}, .bytes = {bytes}});
  }
  for (int32_t peer : from) {
    launch.recvs.push_back(
        PeerSlots{.peer = DeviceId{peer}, .slots = {AddSlot(program, bytes)}, .bytes = {bytes}});
  }
  program.instructions.emplace_back(std::in_place_type<CommLaunch>, std::move(launch));
}

inline void Wait(Program& program, int32_t id) {
  program.instructions.emplace_back(std::in_place_type<CommWait>, CommWait{.id = id});
}

}  // namespace dcp::testing
