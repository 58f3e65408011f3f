// SPDX-License-Identifier: Apache-2.0
// The tiles of data blocks of any sizes: every (q block, kv block) pair of one sequence whose mask
// area is not zero. MakeBlocks does the same for blocks of one fixed size; strategies whose blocks
// vary (MagiAttention's chunks cut at sequence boundaries) use this.
#include "baselines/peer_strategies.h"

namespace dcp::internal {

bool AddTiles(const Batch& batch, int64_t max_tiles, BlockSet* set) {
  DCP_CHECK(set->head_groups == 1, "AddTiles makes the tiles of one head group");
  const AttentionShape& shape = set->shape;
  const int64_t fwd_per_pair = 4 * shape.head_dim * shape.heads;
  const int64_t bwd_per_pair = 10 * shape.head_dim * shape.heads;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const Mask& mask = batch.masks()[s];
    set->mask_area += mask.TotalArea();
    set->causal_area += CausalArea(batch.seqlens()[s]);
    const int32_t first = set->sequence_first_block[s], last = set->sequence_first_block[s + 1];
    for (int32_t q = first; q < last; ++q) {
      const DataBlock& qb = set->data_blocks[q];
      for (int32_t kv = first; kv < last; ++kv) {
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
  return true;
}

}  // namespace dcp::internal
