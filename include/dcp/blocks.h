// SPDX-License-Identifier: Apache-2.0
// Blocking: cutting a batch into data blocks (token blocks) and computation blocks (mask tiles).
//
// A data block is one token block of one sequence with everything attention keeps per token, for
// all heads: Q, K and V, O and LSE, dO, dQ, dK and dV. The last block of a sequence may be partial;
// nothing is padded. A computation block is one (head group, q block, kv block) tile of one
// sequence whose mask area is not zero, with its exact forward and backward FLOPs:
//   flops_fwd = 4 * area * head_dim * query heads of the group  (S = Q K^T and O = P V, 2 FLOPs per
//               multiply-add)
//   flops_bwd = 10 * area * head_dim * query heads of the group (S recomputed, dP = dO V^T,
//               dV = P^T dO, dQ = dS K, dK = dS^T Q), i.e. exactly 2.5x the forward.
// Softmax and scaling are element-wise, O(area) rather than O(area * head_dim), and not counted.
#pragma once

#include <compare>
#include <cstdint>
#include <vector>

#include "dcp/batch.h"
#include "dcp/status.h"

namespace dcp {

// Distinct id types so a data block index can't be passed where a compute block index is meant.
template <typename Tag>
struct Id {
  int32_t value = -1;
  friend auto operator<=>(const Id&, const Id&) = default;
};
using SequenceId = Id<struct SequenceTag>;
using DataBlockId = Id<struct DataBlockTag>;
using ComputeBlockId = Id<struct ComputeBlockTag>;

// Bytes of one data block, per tensor, for all heads.
struct DataBlockBytes {
  int64_t q = 0;    // queries
  int64_t kv = 0;   // keys and values
  int64_t o = 0;    // output
  int64_t lse = 0;  // log-sum-exp, fp32
  int64_t d_o = 0;  // output gradient
  int64_t dq = 0;   // query gradient
  int64_t dkv = 0;  // key and value gradients

  // What a device holds for the forward pass: Q, KV, O and LSE.
  int64_t Forward() const { return q + kv + o + lse; }
  int64_t Total() const { return q + kv + o + lse + d_o + dq + dkv; }
  // These bytes for `tokens` tokens (of bytes per token).
  DataBlockBytes Times(int64_t tokens) const {
    return {.q = q * tokens,
            .kv = kv * tokens,
            .o = o * tokens,
            .lse = lse * tokens,
            .d_o = d_o * tokens,
            .dq = dq * tokens,
            .dkv = dkv * tokens};
  }
};

struct DataBlock {
  SequenceId sequence;
  int32_t index_in_sequence = 0;  // token block number within its sequence
  int64_t token_begin = 0;        // first token, within the sequence
  int64_t tokens = 0;             // block_size, or fewer for the last block
  int64_t batch_token_begin = 0;  // first token, counted over the whole packed batch
  DataBlockBytes bytes;
};

struct ComputeBlock {
  SequenceId sequence;
  int32_t head_group =
      0;                 // query heads [g * heads/groups, (g+1) * heads/groups) and their KV heads
  DataBlockId q_block;   // the block whose queries, output and LSE this tile touches
  DataBlockId kv_block;  // the block whose keys and values this tile reads
  int64_t area = 0;      // allowed (q, k) pairs of the tile, per head
  // Its FLOPs are BlockSet::FlopsFwd and FlopsBwd: a batch has millions of compute blocks, and
  // two more fields per block were a tenth of the planner's memory.
};

struct BlockingOptions {
  // Tokens per block. Larger blocks mean fewer, bigger kernels and a smaller plan; smaller blocks
  // give the partitioner more freedom. The paper uses 512-4096. Must be >= 1.
  int64_t block_size = 1024;
  // Number of groups the heads are split into; each compute block covers one group. Must divide
  // kv_heads so a group never splits the query heads that share a KV head. More groups give more,
  // finer compute blocks.
  int64_t head_groups = 1;
  // Refuse a batch with more compute blocks than this (0: only the 2^31 every batch is held to),
  // before they are all made: the planner derives it from its memory limit, so blocks too small
  // for the batch fail with a message instead of exhausting memory while blocking.
  int64_t max_compute_blocks = 0;

  Status Validate() const;
};

struct BlockSet {
  int64_t block_size = 0;
  int64_t head_groups = 0;
  AttentionShape shape;
  std::vector<DataBlock> data_blocks;        // ordered by sequence, then index_in_sequence
  std::vector<ComputeBlock> compute_blocks;  // ordered by sequence, head group, q block, kv block
  // Index of each sequence's first data block; size = sequences + 1.
  std::vector<int32_t> sequence_first_block;

  int64_t mask_area = 0;    // allowed pairs over the batch, per head
  int64_t causal_area = 0;  // what a causal mask would allow on the same sequences
  int64_t flops_fwd = 0;
  int64_t flops_bwd = 0;

  // Mask area relative to causal attention on the same sequences (1.0 for causal, 2.0 - ~0 for
  // full, below 1 for sparse masks).
  double DensityVsCausal() const;
  const DataBlock& data_block(DataBlockId id) const { return data_blocks[id.value]; }
  // A compute block's FLOPs (the formulas at the top of this file).
  int64_t FlopsFwd(const ComputeBlock& cb) const { return 4 * cb.area * FlopsPerPairAndPass(); }
  int64_t FlopsBwd(const ComputeBlock& cb) const { return 10 * cb.area * FlopsPerPairAndPass(); }

 private:
  // head_dim x the query heads of one head group (1 group when head_groups is not set yet).
  int64_t FlopsPerPairAndPass() const {
    return shape.head_dim * (shape.heads / (head_groups > 0 ? head_groups : 1));
  }
};

// Cuts the batch into blocks. Returns InvalidArgument for invalid options or when head_groups does
// not divide the batch's kv_heads, or when the batch would need more than 2^31 blocks.
Result<BlockSet> MakeBlocks(const Batch& batch, const BlockingOptions& options);

// Whether blocks of `block_size` cut the batch into more than `limit` tiles (compute blocks of one
// head group), counting per query block the KV blocks its mask may touch (exact for causal
// masks, an upper bound on others) and stopping once past `limit`; no block is made.
// REQUIRES: block_size >= 1, limit >= 0.
bool HasMoreTilesThan(const Batch& batch, int64_t block_size, int64_t limit);

// Bytes per token of each tensor of a data block, for the given shape.
DataBlockBytes BytesPerToken(const AttentionShape& shape);

struct BlockSizeOptions {
  int64_t devices = 1;           // devices the token blocks are spread over, >= 1
  double eps_memory = 0.2;       // allowed memory imbalance: max/mean <= 1 + eps_memory
  int64_t min_block_size = 256;  // never choose a smaller block (a power of two)

  Status Validate() const;
};

struct BlockSizeChoice {
  int64_t block_size = 0;
  // Token imbalance (max/mean over devices) of a greedy largest-first spread of the blocks at
  // that size; above 1 + eps_memory only when even min_block_size could not reach the tolerance.
  double memory_imbalance = 0;
};

// max/mean tokens per device after placing the batch's token blocks of `block_size` largest first
// on the least loaded of `devices` devices (LPT): O(blocks) time and memory. Infinity when there
// are no devices, no tokens or block_size < 1; sequence lengths must be positive.
double GreedySpreadImbalance(const std::vector<int64_t>& seqlens, int64_t block_size,
                             int64_t devices);

// The largest power of two, not below min_block_size, whose token blocks a largest-first greedy
// spread places on `devices` devices with max/mean tokens <= 1 + eps_memory. Starts from the
// smallest power of two that holds the longest sequence.
Result<BlockSizeChoice> ChooseBlockSize(const std::vector<int64_t>& seqlens,
                                        const BlockSizeOptions& options);

}  // namespace dcp
