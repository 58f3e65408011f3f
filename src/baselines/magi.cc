// SPDX-License-Identifier: Apache-2.0
// MagiAttention (SandAI-org/MagiAttention, read at 2c641357), from its documentation and
// described defaults (sources and marks in docs/baselines.md):
//
//   Chunks.    The packed batch (its sequences in order) is cut into chunks of MagiChunkTokens
//              tokens, the last one shorter. A data block holds one sequence's tokens, so a chunk
//              that spans sequences is cut into pieces at their boundaries; its pieces stay
//              together. MagiAttention pads the batch to a multiple of chunk size x ranks so that
//              every rank holds the same number of chunks; dcp computes no padding (it is
//              reported in padded_tokens), so rank counts differ by at most one: each rank holds
//              floor(C / P) chunks and the first C mod P ranks to reach that count one more.
//   Dispatch.  MagiAttention's default solver (MinHeapDispatchAlg): chunks in decreasing order of
//              area (the mask's allowed pairs in the chunk's rows; ties in batch order), each to
//              the rank with the least area so far among those with room, ties to the lowest
//              rank.
//   Compute.   Every tile runs on the rank of its query chunk.
//   Traffic.   Keys and values are group-cast: each KV piece goes once to each rank with a tile
//              that reads it. Topology is not modelled (MagiAttention's hierarchical group-cast,
//              an option, is not).
//   Stages.    Division 0 computes the local tiles while remote KV moves (MagiAttention's host
//              stage). Then `magi_overlap_degree` remote stages (OverlapConfig.degree, default 1):
//              a rank's remote pieces, in token order, are split into that many runs of about
//              equal tokens (UniformOverlapAlg's contiguous split); run s arrives in division
//              s + 1, its group-cast launched while division s computes, and the tiles reading it
//              compute in division s + 1.
//   Backward.  The compiler's default: KV is group-cast again in the same stages, dQ stays home,
//              and each remote tile's partial dKV returns to its owner right after its stage (a
//              group-reduce; with one remote stage, in the output exchange).
#include <algorithm>
#include <queue>
#include <tuple>

#include "baselines/peer_strategies.h"
#include "dcp/schedule.h"

namespace dcp::internal {
namespace {

// Cuts the packed batch into chunk pieces; returns each data block's chunk.
std::vector<int64_t> MakeChunkPieces(const Batch& batch, int64_t chunk, BlockSet* set) {
  const DataBlockBytes per_token = BytesPerToken(set->shape);
  std::vector<int64_t> chunk_of;
  int64_t batch_token = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int64_t length = batch.seqlens()[s];
    const auto first = static_cast<int32_t>(set->data_blocks.size());
    set->sequence_first_block.push_back(first);
    for (int64_t begin = 0; begin < length;) {
      const int64_t c = (batch_token + begin) / chunk;
      const int64_t end = std::min(length, (c + 1) * chunk - batch_token);
      set->data_blocks.push_back(
          DataBlock{.sequence = SequenceId{static_cast<int32_t>(s)},
                    .index_in_sequence = static_cast<int32_t>(set->data_blocks.size()) - first,
                    .token_begin = begin,
                    .tokens = end - begin,
                    .batch_token_begin = batch_token + begin,
                    .bytes = per_token.Times(end - begin)});
      set->block_size = std::max(set->block_size, end - begin);
      chunk_of.push_back(c);
      begin = end;
    }
    batch_token += length;
  }
  set->sequence_first_block.push_back(static_cast<int32_t>(set->data_blocks.size()));
  return chunk_of;
}

}  // namespace

std::vector<int32_t> DispatchChunksByArea(const std::vector<int64_t>& area, int32_t ranks) {
  const auto n = static_cast<int64_t>(area.size());
  const int64_t base = n / ranks;
  int64_t extra = n % ranks;  // ranks that may still take one chunk more than `base`
  std::vector<int64_t> order(area.size());
  for (int64_t c = 0; c < n; ++c) order[c] = c;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return area[a] > area[b]; });
  using Load = std::pair<int64_t, int32_t>;  // area so far, rank
  std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
  for (int32_t r = 0; r < ranks; ++r) least.emplace(0, r);
  std::vector<int64_t> count(ranks, 0);
  std::vector<int32_t> rank_of(area.size(), -1);
  for (int64_t c : order) {
    while (true) {
      DCP_CHECK(!least.empty(), "every chunk finds a rank with room");
      const auto [load, r] = least.top();
      least.pop();
      const bool room = count[r] < base || (count[r] == base && extra > 0);
      if (!room) continue;  // full for good: counts only grow and `extra` only shrinks
      if (count[r] == base) --extra;
      ++count[r];
      rank_of[c] = r;
      least.emplace(load + area[c], r);
      break;
    }
  }
  return rank_of;
}

Result<BaselinePlan> PlanMagi(const Batch& batch, const BaselineOptions& options) {
  const int32_t p = options.topology.devices();
  const int64_t chunk = MagiChunkTokens(batch.total_tokens(), options);
  BaselinePlan out;
  BlockSet& set = out.blocks;
  set.head_groups = 1;
  set.shape = batch.shape();
  const std::vector<int64_t> chunk_of = MakeChunkPieces(batch, chunk, &set);
  // Its data blocks, one division (the local stage; the remote ones may stay empty) and its tiles
  // as they are made; the stages and transfers are counted before the compile (CompileBaseline).
  const PlanSize size{.devices = p,
                      .divisions = 1,
                      .data_blocks = static_cast<int64_t>(set.data_blocks.size()),
                      .bytes_per_tile = PlanSize::BytesPerTile(Strategy::kMagi)};
  DCP_RETURN_IF_ERROR(CheckPlanSize(Strategy::kMagi, size, options));
  if (!AddTiles(batch, TilesWithin(size, options), &set)) {
    return TilesDoNotFit(Strategy::kMagi, size, options);
  }

  const int64_t n_chunks = (batch.total_tokens() + chunk - 1) / chunk;
  std::vector<int64_t> area(n_chunks, 0);
  for (const ComputeBlock& c : set.compute_blocks) area[chunk_of[c.q_block.value]] += c.area;
  const std::vector<int32_t> rank_of = DispatchChunksByArea(area, p);
  for (int64_t c : chunk_of) out.placement.data_device.push_back(DeviceId{rank_of[c]});
  const std::vector<DeviceId>& owner = out.placement.data_device;
  for (const ComputeBlock& c : set.compute_blocks) {
    out.placement.compute_device.push_back(owner[c.q_block.value]);
  }

  // The group-cast: (destination, kv piece) pairs, each once, in token order per destination.
  std::vector<std::pair<int32_t, int32_t>> needs;
  for (const ComputeBlock& c : set.compute_blocks) {
    const int32_t to = owner[c.q_block.value].value;
    if (owner[c.kv_block.value].value != to) needs.emplace_back(to, c.kv_block.value);
  }
  std::sort(needs.begin(), needs.end());
  needs.erase(std::unique(needs.begin(), needs.end()), needs.end());

  // Each destination's remote tokens split into `degree` runs of about equal tokens.
  const int64_t degree = options.magi_overlap_degree;
  std::vector<int32_t> division(needs.size());
  for (size_t i = 0; i < needs.size();) {
    size_t end = i;
    int64_t total = 0;
    for (; end < needs.size() && needs[end].first == needs[i].first; ++end) {
      total += set.data_blocks[needs[end].second].tokens;
    }
    for (int64_t before = 0; i < end; ++i) {
      division[i] = 1 + static_cast<int32_t>(std::min(degree - 1, before * degree / total));
      before += set.data_blocks[needs[i].second].tokens;
    }
  }
  const auto division_of = [&](int32_t to, int32_t kv) {
    const auto it = std::lower_bound(needs.begin(), needs.end(), std::pair{to, kv});
    return division[it - needs.begin()];
  };

  Schedule& schedule = out.schedule;
  schedule.n_divisions = needs.empty() ? 1 : 1 + options.magi_overlap_degree;
  for (const ComputeBlock& c : set.compute_blocks) {
    const int32_t to = owner[c.q_block.value].value;
    schedule.compute_division.push_back(
        owner[c.kv_block.value].value == to ? 0 : division_of(to, c.kv_block.value));
  }
  for (size_t i = 0; i < needs.size(); ++i) {
    const auto [to, block] = needs[i];
    schedule.transfers.push_back(Transfer{.block = DataBlockId{block},
                                          .side = Side::kColumn,
                                          .source = owner[block],
                                          .destination = DeviceId{to},
                                          .division = division[i]});
  }
  std::stable_sort(schedule.transfers.begin(), schedule.transfers.end(),
                   [](const Transfer& a, const Transfer& b) {
                     return std::tie(a.division, a.phase, a.source, a.destination) <
                            std::tie(b.division, b.phase, b.source, b.destination);
                   });
  const int64_t multiple = chunk * p;
  out.padded_tokens = (multiple - batch.total_tokens() % multiple) % multiple;
  return out;
}

}  // namespace dcp::internal
