// SPDX-License-Identifier: Apache-2.0
// The dynamic strategies of other systems (FCP, MagiAttention) that PlanBaseline dispatches to,
// and what they share: the tiles of arbitrary data blocks and the congestion-free rounds of a
// set of peer-to-peer messages. Internal to the baselines module; tests include it directly.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dcp/baselines.h"

namespace dcp::internal {

// What laying out, compiling and simulating a strategy's plan holds at its peak, from its size.
// The rates are fitted to the peak RSS of `dcp simulate --strategy ring` (1000 tokens on 16x8,
// 32x8 and 64x8; 100,000 x 1, 50,000 x 2 and 20,000 x 8 tokens on 1x1, 1x2 and 1x8), and predict
// a case left out of the fit, 5,000 x 64 tokens on 4x8, at 2.58 GB (measured: 2.56 GB).
struct PlanSize {
  int64_t devices = 0;
  int64_t divisions = 0;    // per device: its instructions and tables of each division
  int64_t transfers = 0;    // each one a send and a receive in both passes
  int64_t tiles = 0;        // compute blocks, in the blocks, the schedule and both passes
  int64_t data_blocks = 0;  // their slots in every program they reach

  static constexpr int64_t kBytesPerDeviceDivision = 2100, kBytesPerTransfer = 300,
                           kBytesPerTile = 450, kBytesPerDataBlock = 1300;
  // MagiAttention's tiles, compiled into one call per stage, hold a quarter of that: fitted to
  // `dcp simulate --strategy magi` of one causal sequence of 1M tokens on 32x8 (2.1M tiles, 0.40
  // GB) and on 64x8 (8.4M, 1.56 GB) above the rest of the estimate; a 2M-token one on 128x8 (33.6M
  // tiles), left out, is predicted at 6.23 GB and measured 6.2 GB (the ring's rate said 16.3 GiB).
  static constexpr int64_t kMagiBytesPerTile = 115;
  int64_t bytes_per_tile = kBytesPerTile;  // BytesPerTile(strategy)
  int64_t Bytes() const;

  static int64_t BytesPerTile(Strategy strategy) {
    return strategy == Strategy::kMagi ? kMagiBytesPerTile : kBytesPerTile;
  }
};

// The tiles that fit within the planning memory of `options` beside the rest of `size` (whose
// tiles are not counted); 0 when the rest alone does not fit.
int64_t TilesWithin(const PlanSize& size, const BaselineOptions& options);

// InvalidArgument when planning `size` would take more than the planning memory of `options`
// (BaselineOptions::max_planning_bytes), naming the strategy, the topology, the size, the
// estimate and the limit.
Status CheckPlanSize(Strategy strategy, const PlanSize& size, const BaselineOptions& options);

// CheckPlanSize's refusal of a plan whose tiles, counted as they were made, went past
// TilesWithin(size, options): it names them as at least one more than that.
Status TilesDoNotFit(Strategy strategy, PlanSize size, const BaselineOptions& options);

// FCP (src/baselines/fcp.cc). REQUIRES: options validated.
Result<BaselinePlan> PlanFcp(const Batch& batch, const BaselineOptions& options);

// MagiAttention (src/baselines/magi.cc). REQUIRES: options validated.
Result<BaselinePlan> PlanMagi(const Batch& batch, const BaselineOptions& options);

// MagiAttention's min-heap dispatch under equal counts: chunks in decreasing order of `area` (ties
// in index order), each to the rank with the least area so far among those with room (ties to the
// lowest rank). Every rank holds floor(C / ranks) chunks, and the first C mod ranks ranks to reach
// that count one more. Returns each chunk's rank. REQUIRES: ranks >= 1.
std::vector<int32_t> DispatchChunksByArea(const std::vector<int64_t>& area, int32_t ranks);

// Fills set->compute_blocks with every tile of non-zero mask area of every sequence (head group
// 0), in BlockSet order, and the FLOP and area totals. Returns false, with the tiles made so far,
// once there would be more than `max_tiles`. REQUIRES: set->data_blocks, sequence_first_block
// and shape filled from `batch`, head_groups == 1.
bool AddTiles(const Batch& batch, int64_t max_tiles, BlockSet* set);

// One message from a device to another (source, destination).
using DeviceEdge = std::pair<int32_t, int32_t>;

// A maximum matching of the bipartite graph senders x receivers whose edges are `edges` (each
// sender on the left, each receiver on the right), by Hopcroft-Karp, O(E sqrt(V)). Returns the
// matched edges, sorted. Deterministic: the same edges, in any order, give the same matching.
// REQUIRES: every device in [0, devices).
std::vector<DeviceEdge> MaximumMatching(int32_t devices, const std::vector<DeviceEdge>& edges);

// Splits `edges` into rounds in which no device sends twice or receives twice: each round is a
// maximum matching of the edges not yet scheduled (greedy, as FCP describes), until none is
// left. Round r of the result holds its edges, sorted. Being maximal, each round leaves an edge
// out only when one of its ends is busy, so at most 2 * max degree - 1 rounds are made (a
// bipartite graph's optimum is its max degree). Duplicate edges count once.
std::vector<std::vector<DeviceEdge>> CongestionFreeRounds(int32_t devices,
                                                          std::vector<DeviceEdge> edges);

}  // namespace dcp::internal
