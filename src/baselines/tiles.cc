// SPDX-License-Identifier: Apache-2.0
// The tiles of data blocks of any sizes: every (q block, kv block) pair of one sequence whose mask
// area is not zero. MakeBlocks does the same for blocks of one fixed size; strategies whose blocks
// vary (MagiAttention's chunks cut at sequence boundaries) use this.
#include <algorithm>
#include <utility>
#include <vector>

#include "baselines/peer_strategies.h"
#include "util/ranges.h"

namespace dcp::internal {
namespace {

// The kv blocks among blocks[first, last) (one sequence's, in token order) that the mask may touch
// on rows [u, v), as merged, sorted ranges [begin, end) of block indices: each slice on those rows
// spans the columns between its ends at the first and last row (both ends are monotone in the
// row). A superset of the row's non-empty tiles, so that a sliding window costs its own tiles, not
// every pair of the sequence's blocks.
void TouchedKvBlocks(const Mask& mask, const std::vector<DataBlock>& blocks, int32_t first,
                     int32_t last, int64_t u, int64_t v,
                     std::vector<std::pair<int32_t, int32_t>>* ranges) {
  ranges->clear();
  const auto begin = blocks.begin() + first, end = blocks.begin() + last;
  // The index of the first block that starts at or after `column`.
  const auto block_from = [&](int64_t column) {
    return static_cast<int32_t>(
        std::partition_point(begin, end,
                             [&](const DataBlock& b) { return b.token_begin < column; }) -
        blocks.begin());
  };
  for (const Slice& s : mask.slices()) {
    if (s.row_begin >= v || s.row_end <= u) continue;
    const int64_t r0 = std::max(u, s.row_begin), r1 = std::min(v, s.row_end) - 1;
    const int64_t lo = std::min(s.lo.At(r0), s.lo.At(r1)), hi = std::max(s.hi.At(r0), s.hi.At(r1));
    // The block holding column lo: the one before the first starting after it.
    ranges->emplace_back(block_from(lo + 1) - 1, block_from(hi));
  }
  SortAndMergeRanges(ranges);
}

}  // namespace

bool AddTiles(const Batch& batch, int64_t max_tiles, BlockSet* set) {
  DCP_CHECK(set->head_groups == 1, "AddTiles makes the tiles of one head group");
  const AttentionShape& shape = set->shape;
  const int64_t fwd_per_pair = 4 * shape.head_dim * shape.heads;
  const int64_t bwd_per_pair = 10 * shape.head_dim * shape.heads;
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const Mask& mask = batch.masks()[s];
    set->mask_area += mask.TotalArea();
    set->causal_area += CausalArea(batch.seqlens()[s]);
    const int32_t first = set->sequence_first_block[s], last = set->sequence_first_block[s + 1];
    for (int32_t q = first; q < last; ++q) {
      const DataBlock& qb = set->data_blocks[q];
      TouchedKvBlocks(mask, set->data_blocks, first, last, qb.token_begin,
                      qb.token_begin + qb.tokens, &ranges);
      for (const auto& [kv_begin, kv_end] : ranges) {
        for (int32_t kv = kv_begin; kv < kv_end; ++kv) {
          const DataBlock& kb = set->data_blocks[kv];
          const int64_t area = mask.Area(qb.token_begin, qb.token_begin + qb.tokens, kb.token_begin,
                                         kb.token_begin + kb.tokens);
          if (area == 0) continue;
          if (static_cast<int64_t>(set->compute_blocks.size()) >= max_tiles) return false;
          set->compute_blocks.push_back(ComputeBlock{.sequence = qb.sequence,
                                                     .head_group = 0,
                                                     .q_block = DataBlockId{q},
                                                     .kv_block = DataBlockId{kv},
                                                     .area = area});
          set->flops_fwd += area * fwd_per_pair;
          set->flops_bwd += area * bwd_per_pair;
        }
      }
    }
  }
  return true;
}

}  // namespace dcp::internal
