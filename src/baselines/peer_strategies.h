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
// 0), in BlockSet order, and the FLOP and area totals. REQUIRES: set->data_blocks,
// sequence_first_block and shape filled from `batch`, head_groups == 1.
void AddTiles(const Batch& batch, BlockSet* set);

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
