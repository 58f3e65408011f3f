// SPDX-License-Identifier: Apache-2.0
#include "dcp/blocks.h"

#include <algorithm>
#include <limits>

#include "util/ranges.h"

namespace dcp {
namespace {

constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();

// Columns [first, last) a slice may touch on rows [u, v): its ends are monotone in the row.
std::pair<int64_t, int64_t> ColumnSpan(const Slice& s, int64_t u, int64_t v) {
  return {std::min(s.lo.At(u), s.lo.At(v - 1)), std::max(s.hi.At(u), s.hi.At(v - 1))};
}

// The slices covering rows [u, v), and the kv blocks they may touch there as merged, sorted
// ranges [first, last) of block indices. A superset of the non-empty tiles of the row.
void TouchedKvBlocks(const Mask& mask, int64_t u, int64_t v, int64_t block_size,
                     std::vector<const Slice*>* slices,
                     std::vector<std::pair<int64_t, int64_t>>* ranges) {
  slices->clear();
  ranges->clear();
  for (const Slice& s : mask.slices()) {
    if (s.row_begin >= v || s.row_end <= u) continue;
    slices->push_back(&s);
    const auto [first, last] = ColumnSpan(s, std::max(u, s.row_begin), std::min(v, s.row_end));
    ranges->emplace_back(first / block_size, (last + block_size - 1) / block_size);
  }
  internal::SortAndMergeRanges(ranges);
}

// Upper bound on the non-empty tiles of a sequence, from the kv blocks its slices may touch;
// counting stops once it passes `stop_above`.
int64_t TileBound(const Mask& mask, int64_t block_size, int64_t stop_above) {
  const int64_t length = mask.length();
  std::vector<const Slice*> slices;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t bound = 0;
  for (int64_t u = 0; u < length && bound <= stop_above; u += block_size) {
    TouchedKvBlocks(mask, u, std::min(length, u + block_size), block_size, &slices, &ranges);
    for (const auto& [first, last] : ranges) bound += last - first;
  }
  return bound;
}

// Appends the compute blocks of one sequence: those of head group 0, then copies of them for the
// other groups (areas are computed once per tile, and no list of the tiles is held beside them:
// one long sequence can have a hundred million).
// Returns false, with the blocks made so far, once there would be more than `limit`.
bool AddComputeBlocks(const Mask& mask, SequenceId sequence, int32_t first_block,
                      int64_t block_size, const BlockingOptions& options, int64_t limit,
                      BlockSet* set) {
  const int64_t length = mask.length();
  const int64_t n_blocks = (length + block_size - 1) / block_size;
  std::vector<const Slice*> slices;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<ComputeBlock>& out = set->compute_blocks;
  const size_t first = out.size();
  for (int64_t i = 0; i < n_blocks; ++i) {
    const int64_t u = i * block_size, v = std::min(length, u + block_size);
    TouchedKvBlocks(mask, u, v, block_size, &slices, &ranges);
    for (const auto& [first_kv, last_kv] : ranges) {
      for (int64_t j = first_kv; j < last_kv; ++j) {
        const int64_t k0 = j * block_size, k1 = std::min(length, k0 + block_size);
        int64_t area = 0;
        for (const Slice* s : slices) area += SliceArea(*s, u, v, k0, k1);
        if (area == 0) continue;
        if (static_cast<int64_t>(out.size()) >= limit) return false;
        out.push_back(ComputeBlock{
            .sequence = sequence,
            .head_group = 0,
            .q_block = DataBlockId{first_block + static_cast<int32_t>(i)},
            .kv_block = DataBlockId{first_block + static_cast<int32_t>(j)},
            .area = area,
        });
      }
    }
  }
  const size_t end = out.size();
  if (static_cast<int64_t>(first + (end - first) * options.head_groups) > limit) return false;
  for (int32_t g = 1; g < options.head_groups; ++g) {
    for (size_t k = first; k < end; ++k) {
      ComputeBlock copy = out[k];
      copy.head_group = g;
      out.push_back(copy);
    }
  }
  return true;
}

}  // namespace

Status BlockingOptions::Validate() const {
  if (block_size < 1 || block_size > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("block_size={} is not in [1, {}]", block_size, kMaxSequenceLength));
  }
  if (head_groups < 1) {
    return Status::InvalidArgument(fmt::format("head_groups={} is not positive", head_groups));
  }
  if (max_compute_blocks < 0) {
    return Status::InvalidArgument(
        fmt::format("max_compute_blocks={} is negative", max_compute_blocks));
  }
  return Status::Ok();
}

bool HasMoreTilesThan(const Batch& batch, int64_t block_size, int64_t limit) {
  int64_t tiles = 0;
  for (const Mask& mask : batch.masks()) {
    tiles += TileBound(mask, block_size, limit - tiles);
    if (tiles > limit) return true;
  }
  return false;
}

DataBlockBytes BytesPerToken(const AttentionShape& shape) {
  const int64_t e = BytesPerElement(shape.dtype);
  const int64_t q = shape.heads * shape.head_dim * e;
  const int64_t kv = 2 * shape.kv_heads * shape.head_dim * e;
  return DataBlockBytes{
      .q = q, .kv = kv, .o = q, .lse = shape.heads * 4, .d_o = q, .dq = q, .dkv = kv};
}

double BlockSet::DensityVsCausal() const {
  return causal_area > 0 ? static_cast<double>(mask_area) / static_cast<double>(causal_area) : 0;
}

Result<BlockSet> MakeBlocks(const Batch& batch, const BlockingOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  const AttentionShape& shape = batch.shape();
  if (shape.kv_heads % options.head_groups != 0) {
    return Status::InvalidArgument(fmt::format("head_groups={} does not divide kv_heads={}",
                                               options.head_groups, shape.kv_heads));
  }
  BlockSet set;
  set.block_size = options.block_size;
  set.head_groups = options.head_groups;
  set.shape = shape;

  // Totals first, so FLOP counts are known to fit before any block is made.
  int64_t flops_bwd_per_pair = 10 * shape.head_dim * shape.heads;
  int64_t n_data_blocks = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int64_t len = batch.seqlens()[s];
    n_data_blocks += (len + options.block_size - 1) / options.block_size;
    if (__builtin_add_overflow(set.mask_area, batch.masks()[s].TotalArea(), &set.mask_area) ||
        __builtin_add_overflow(set.causal_area, CausalArea(len), &set.causal_area)) {
      return Status::InvalidArgument("batch is too large: its mask area overflows 64 bits");
    }
  }
  int64_t unused = 0;
  if (n_data_blocks > kMaxBlocks || __builtin_mul_overflow(std::max(set.mask_area, set.causal_area),
                                                           flops_bwd_per_pair, &unused)) {
    return Status::InvalidArgument("batch is too large: its blocks or FLOPs overflow");
  }

  // Bound the tile count first, so an absurd batch fails fast instead of exhausting memory, and
  // reserve once: growing a large vector repeatedly costs more than filling it.
  int64_t tile_bound = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    tile_bound += TileBound(batch.masks()[s], options.block_size, kMaxBlocks) * options.head_groups;
    if (tile_bound > kMaxBlocks) {
      return Status::InvalidArgument(fmt::format(
          "batch needs more than 2^31 compute blocks in blocks of {} tokens (sequence {} of {} "
          "tokens); use larger blocks",
          options.block_size, s, batch.seqlens()[s]));
    }
  }
  const int64_t limit = options.max_compute_blocks > 0
                            ? std::min<int64_t>(options.max_compute_blocks, kMaxBlocks)
                            : kMaxBlocks;
  set.compute_blocks.reserve(std::min(tile_bound, limit));

  const DataBlockBytes per_token = BytesPerToken(shape);
  set.data_blocks.reserve(n_data_blocks);
  int64_t batch_token = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const SequenceId sequence{static_cast<int32_t>(s)};
    const int64_t len = batch.seqlens()[s];
    const auto first_block = static_cast<int32_t>(set.data_blocks.size());
    set.sequence_first_block.push_back(first_block);
    for (int64_t begin = 0, index = 0; begin < len; begin += options.block_size, ++index) {
      const int64_t tokens = std::min(options.block_size, len - begin);
      set.data_blocks.push_back(DataBlock{
          .sequence = sequence,
          .index_in_sequence = static_cast<int32_t>(index),
          .token_begin = begin,
          .tokens = tokens,
          .batch_token_begin = batch_token + begin,
          .bytes = per_token.Times(tokens),
      });
    }
    batch_token += len;
    if (!AddComputeBlocks(batch.masks()[s], sequence, first_block, options.block_size, options,
                          limit, &set)) {
      return Status::InvalidArgument(fmt::format(
          "batch has more than {} compute blocks in blocks of {} tokens (at sequence {} of {} "
          "tokens), the most allowed; use larger blocks",
          limit, options.block_size, s, len));
    }
  }
  set.sequence_first_block.push_back(static_cast<int32_t>(set.data_blocks.size()));
  for (const ComputeBlock& c : set.compute_blocks) {
    set.flops_fwd += set.FlopsFwd(c);
    set.flops_bwd += set.FlopsBwd(c);
  }
  return set;
}

}  // namespace dcp
