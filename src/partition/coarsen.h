// SPDX-License-Identifier: Apache-2.0
// Coarsening of attention hypergraphs for the multilevel builtin partitioner.
//
// One level contracts each pair of consecutive data blocks of a sequence (2i, 2i+1) into one data
// vertex, and the tiles (q, kv) of a head group into super-tiles (q/2, kv/2), so the coarse
// hypergraph is again an attention hypergraph: its tiles lie on a (q block, kv block) grid of
// coarse data blocks and every net still belongs to one data block, with its kind, so the engine's
// starts and whole-row moves work on it unchanged. On causal masks the row nets of blocks 2i and
// 2i+1 then span the same super-tiles and are merged into one net of their summed weight (likewise
// the column nets): moving a super-tile moves a whole 2x2 patch, which reshapes region boundaries
// where single-tile moves cannot. Weights sum, so caps that hold at a coarse level hold when the
// partition is projected back, and a projected partition has exactly the coarse km1.
//
// Internal to src/partition.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

// A coarse hypergraph and how the finer one maps onto it.
struct CoarseLevel {
  Hypergraph graph;
  // Per coarse sequence s, its first coarse data block (one entry more than sequences).
  std::vector<int32_t> sequence_first_block;
  std::vector<int32_t> subset;     // coarse vertices holding at least one fine subset vertex
  std::vector<int32_t> coarse_of;  // per fine vertex: its coarse vertex (-1 outside the subset)
};

// Contracts the `subset` of `g` one level. Fine vertices outside the subset are left out of the
// coarse nets and weights. Every fine data block still gets a coarse data block (empty and outside
// the coarse subset when its pair lies wholly outside the fine subset) so that coarse
// net_data_block values and sequence_first_block stay one coordinate system.
// REQUIRES: sequence_first_block covers the data blocks of g, in order.
CoarseLevel Coarsen(const Hypergraph& g, const std::vector<int32_t>& sequence_first_block,
                    const std::vector<int32_t>& subset);

// Contracts each data vertex of the `subset` with its row: the tiles of the subset that read its
// queries. Row nets then have one pin and vanish, so the coarse hypergraph prices only what rows
// exchange (column nets over the rows that read them) and a partition of it keeps every row whole
// with its data. Row nets weigh several times column nets (Q + O against KV), and the top rows of
// a long causal sequence are light fillers whose columns the rows below read anyway, so whole
// rows are a strong model on causal batches. With rows_per_vertex r > 1, each run of r
// consecutive rows of a sequence (from its first block) is one vertex, so that large batches
// give a small row hypergraph. Coarse data vertex n_compute + b stands for the rows from fine
// data block b when b starts a run (every other coarse data vertex is empty and outside the
// coarse subset) and carries their compute; the tiles of rows whose data lies outside the subset
// form one coarse compute vertex per run, numbered first. sequence_first_block is copied.
CoarseLevel ContractRows(const Hypergraph& g, const std::vector<int32_t>& sequence_first_block,
                         const std::vector<int32_t>& subset, int32_t rows_per_vertex = 1);

}  // namespace dcp::internal
