// SPDX-License-Identifier: Apache-2.0
// The static strategies as Placement + Schedule. One description covers all of them:
//
//   C context ranks ("ring positions") x h head ranks; device D(r, j) = r * h + j, so a head group
//   of devices is consecutive (inside a node when h divides the devices per node).
//   Every sequence is cut into `chunks` chunks; chunk k sits at ring position Position(k) (k for
//   ring, the zigzag pairing for 2C chunks); each chunk is cut into h sub-chunks, sub-chunk j
//   owned by D(r, j). Sub-chunks are the data blocks.
//   Device D(r, g) computes head group g of every tile whose queries are at position r: at ring
//   step s it holds the KV of the position kv with Step(r, kv) = s (r = Holder(kv, s)). Step 0 is
//   its own position.
//   With h > 1, an all-to-all first gives D(r, g) head group g of all of position r's sub-chunks
//   (division 1); division 0 is empty. With h = 1, step s is division s.
//   At every later step each device receives, from its ring predecessor, the KV that predecessor
//   held (the whole position's KV, needed or not: the pattern is the strategy's, not the mask's).
#include "dcp/baselines.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "baselines/peer_strategies.h"
#include "dcp/schedule.h"
#include "util/memory.h"

namespace dcp {
namespace {

struct Layout {
  Strategy strategy = Strategy::kRing;
  int32_t ranks = 1;        // C: context ranks, the ring length
  int32_t heads = 1;        // h: head ranks (head groups)
  int32_t chunks = 1;       // chunks per sequence: C (ring) or 2C (zigzag pairing)
  int32_t inner_ring = 1;   // loongtrain: ranks per inner ring (1 or C: a plain ring)

  int32_t Device(int32_t position, int32_t head) const { return position * heads + head; }
  int32_t Position(int32_t chunk) const {
    return chunk < ranks ? chunk : 2 * ranks - 1 - chunk;
  }
  // Ring step (0 .. C-1) at which position `r` holds the KV of position `kv`.
  int32_t Step(int32_t r, int32_t kv) const {
    const int32_t w = inner_ring;
    const int32_t outer = Mod(r / w - kv / w, ranks / w), inner = Mod(r % w - kv % w, w);
    return outer * w + inner;
  }
  // The position that holds the KV of position p at step s: Step(Holder(p, s), p) == s.
  int32_t Holder(int32_t p, int32_t s) const {
    const int32_t w = inner_ring, outers = ranks / w;
    return Mod(p / w + s / w, outers) * w + Mod(p % w + s % w, w);
  }
  // The position `r` got the KV it holds at step s from.
  int32_t Predecessor(int32_t r, int32_t s) const {
    const int32_t w = inner_ring, outers = ranks / w;
    if (s % w != 0) return (r / w) * w + Mod(r % w - 1, w);  // inner ring hop
    return Mod(r / w - 1, outers) * w + r % w;              // outer ring hop
  }
  int32_t FirstRingDivision() const { return heads > 1 ? 1 : 0; }

  static int32_t Mod(int32_t a, int32_t m) { return ((a % m) + m) % m; }
};

// TE and LoongTrain split heads over as many ranks as the KV heads and the devices allow.
int32_t HeadRanks(const AttentionShape& shape, const Topology& topology) {
  return static_cast<int32_t>(std::gcd(shape.kv_heads, int64_t{topology.devices()}));
}

Result<Layout> MakeLayout(Strategy strategy, const AttentionShape& shape,
                          const BaselineOptions& options) {
  const int32_t p = options.topology.devices();
  const int32_t head_ranks = HeadRanks(shape, options.topology);
  Layout layout{.strategy = strategy};
  switch (strategy) {
    case Strategy::kRing:
      layout.ranks = p;
      layout.chunks = p;
      break;
    case Strategy::kZigzag:
      layout.ranks = p;
      layout.chunks = 2 * p;
      break;
    case Strategy::kUlysses:
      if (shape.kv_heads % p != 0) {
        return Status::Unsupported(fmt::format(
            "ulysses needs the devices ({}) to divide the KV heads ({}): each device computes "
            "whole KV heads",
            p, shape.kv_heads));
      }
      layout.heads = p;
      break;
    case Strategy::kTe:
    case Strategy::kLoongTrain:
      layout.heads = head_ranks;
      layout.ranks = p / head_ranks;
      layout.chunks = 2 * layout.ranks;
      if (strategy == Strategy::kLoongTrain) {
        if (layout.ranks % options.inner_ring != 0) {
          return Status::InvalidArgument(
              fmt::format("loongtrain: inner ring of {} ranks does not divide the {} context "
                          "ranks",
                          options.inner_ring, layout.ranks));
        }
        layout.inner_ring = options.inner_ring;
      }
      break;
    case Strategy::kDcp:
      return Status::InvalidArgument("dcp is not a baseline: plan it with the planner");
    case Strategy::kFcp:
    case Strategy::kMagi:
      return Status::Internal(
          fmt::format("{} has no ring layout (PlanBaseline plans it)", ToString(strategy)));
  }
  if (strategy != Strategy::kLoongTrain) layout.inner_ring = layout.ranks;
  return layout;
}

// Tokens the real system pads to: zigzag-style chunking needs every sequence to be a multiple of
// 2P tokens, ring of P, ulysses the packed batch of P.
int64_t PaddedTokens(const Layout& layout, const Batch& batch, int32_t devices) {
  const auto pad = [](int64_t n, int64_t multiple) { return (multiple - n % multiple) % multiple; };
  if (layout.strategy == Strategy::kUlysses) return pad(batch.total_tokens(), devices);
  const int64_t multiple = layout.strategy == Strategy::kRing ? devices : 2 * int64_t{devices};
  int64_t padded = 0;
  for (int64_t length : batch.seqlens()) padded += pad(length, multiple);
  return padded;
}

// The size of the layout's plan before it is made: its tiles are counted as they are made.
// A sequence of n tokens cut into `pieces` has min(n, pieces) non-empty ones (data blocks); each
// goes round the ring to every head group and, with head ranks, to the other head groups first.
internal::PlanSize LayoutSize(const Layout& layout, const Batch& batch, int32_t devices) {
  const int64_t pieces = int64_t{layout.chunks} * layout.heads;
  internal::PlanSize size{.devices = devices,
                          .divisions = layout.FirstRingDivision() + layout.ranks};
  for (int64_t length : batch.seqlens()) size.data_blocks += std::min(length, pieces);
  size.transfers = size.data_blocks * layout.heads * (layout.ranks - 1) +
                   (layout.heads > 1 ? size.data_blocks * (layout.heads - 1) * 2 : 0);
  return size;
}

// Cuts every sequence into chunks x h nearly equal sub-chunks (empty ones dropped), places them,
// and makes the tiles. Refuses, before making it, a plan that could not be planned within the
// planning memory of `options` (LayoutSize and the tiles counted as they are made).
Status MakeBlocksAndPlacement(const Layout& layout, const Batch& batch,
                              const BaselineOptions& options, BaselinePlan* out) {
  internal::PlanSize size = LayoutSize(layout, batch, options.topology.devices());
  DCP_RETURN_IF_ERROR(internal::CheckPlanSize(layout.strategy, size, options));
  const int64_t max_tiles = internal::TilesWithin(size, options);
  BlockSet& set = out->blocks;
  set.head_groups = layout.heads;
  set.shape = batch.shape();
  const DataBlockBytes per_token = BytesPerToken(set.shape);
  const int64_t pieces = int64_t{layout.chunks} * layout.heads;
  std::vector<int32_t> position;  // per data block: its chunk's ring position
  int64_t batch_token = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int64_t length = batch.seqlens()[s];
    const auto first = static_cast<int32_t>(set.data_blocks.size());
    set.sequence_first_block.push_back(first);
    for (int64_t m = 0; m < pieces; ++m) {
      const int64_t begin = m * length / pieces, end = (m + 1) * length / pieces;
      if (begin == end) continue;
      const int64_t tokens = end - begin;
      const auto chunk = static_cast<int32_t>(m / layout.heads);
      const auto head = static_cast<int32_t>(m % layout.heads);
      set.data_blocks.push_back(DataBlock{
          .sequence = SequenceId{static_cast<int32_t>(s)},
          .index_in_sequence = static_cast<int32_t>(set.data_blocks.size()) - first,
          .token_begin = begin,
          .tokens = tokens,
          .batch_token_begin = batch_token + begin,
          .bytes = per_token.Times(tokens)});
      set.block_size = std::max(set.block_size, tokens);
      position.push_back(layout.Position(chunk));
      out->placement.data_device.push_back(DeviceId{layout.Device(position.back(), head)});
    }
    batch_token += length;
    const Mask& mask = batch.masks()[s];
    set.mask_area += mask.TotalArea();
    set.causal_area += CausalArea(length);
    const auto last = static_cast<int32_t>(set.data_blocks.size());
    for (int32_t g = 0; g < layout.heads; ++g) {
      for (int32_t q = first; q < last; ++q) {
        const DataBlock& qb = set.data_blocks[q];
        for (int32_t kv = first; kv < last; ++kv) {
          const DataBlock& kb = set.data_blocks[kv];
          const int64_t area = mask.Area(qb.token_begin, qb.token_begin + qb.tokens,
                                         kb.token_begin, kb.token_begin + kb.tokens);
          if (area == 0) continue;
          if (static_cast<int64_t>(set.compute_blocks.size()) >= max_tiles) {
            return internal::TilesDoNotFit(layout.strategy, size, options);
          }
          set.compute_blocks.push_back(ComputeBlock{.sequence = qb.sequence,
                                                    .head_group = g,
                                                    .q_block = DataBlockId{q},
                                                    .kv_block = DataBlockId{kv},
                                                    .area = area});
          out->placement.compute_device.push_back(DeviceId{layout.Device(position[q], g)});
          out->schedule.compute_division.push_back(layout.FirstRingDivision() +
                                                   layout.Step(position[q], position[kv]));
          set.flops_fwd += set.FlopsFwd(set.compute_blocks.back());
          set.flops_bwd += set.FlopsBwd(set.compute_blocks.back());
        }
      }
    }
  }
  set.sequence_first_block.push_back(static_cast<int32_t>(set.data_blocks.size()));

  // Transfers. The all-to-all: every sub-chunk's other head groups to their head ranks.
  std::vector<Transfer>& transfers = out->schedule.transfers;
  std::vector<std::vector<int32_t>> blocks_at(layout.ranks);  // data blocks per ring position
  for (int32_t b = 0; b < static_cast<int32_t>(set.data_blocks.size()); ++b) {
    blocks_at[position[b]].push_back(b);
  }
  const int32_t first_ring = layout.FirstRingDivision();
  if (layout.heads > 1) {
    for (int32_t b = 0; b < static_cast<int32_t>(set.data_blocks.size()); ++b) {
      const DeviceId owner = out->placement.data_device[b];
      for (int32_t g = 0; g < layout.heads; ++g) {
        const DeviceId to{layout.Device(position[b], g)};
        if (to == owner) continue;
        for (Side side : {Side::kRow, Side::kColumn}) {
          transfers.push_back(Transfer{.block = DataBlockId{b}, .head_group = g, .side = side,
                                       .source = owner, .destination = to, .division = 1});
        }
      }
    }
  }
  // The ring steps: each device gets, from its predecessor, the KV of the position it works on.
  // Only positions holding blocks are visited (through Holder), so the work is the transfers' and
  // not ranks^2: a 1000-token batch on 8192 ranks has about 1000 of them.
  std::vector<int32_t> held;  // the positions with blocks
  for (int32_t p = 0; p < layout.ranks; ++p) {
    if (!blocks_at[p].empty()) held.push_back(p);
  }
  for (int32_t s = 1; s < layout.ranks; ++s) {
    for (int32_t p : held) {
      const int32_t r = layout.Holder(p, s);
      const int32_t from = layout.Predecessor(r, s);
      for (int32_t b : blocks_at[p]) {
        for (int32_t g = 0; g < layout.heads; ++g) {
          transfers.push_back(Transfer{.block = DataBlockId{b},
                                       .head_group = g,
                                       .side = Side::kColumn,
                                       .source = DeviceId{layout.Device(from, g)},
                                       .destination = DeviceId{layout.Device(r, g)},
                                       .division = first_ring + s});
        }
      }
    }
  }
  // Made in ascending division (the all-to-all's 1, then each step's), so each division's run is
  // sorted on its own, as cheaply as the runs are short. Within a (source, destination) pair, the
  // order made (blocks ascending) is kept.
  for (auto run = transfers.begin(); run != transfers.end();) {
    const auto end = std::find_if(run, transfers.end(),
                                  [&](const Transfer& t) { return t.division != run->division; });
    std::stable_sort(run, end, [](const Transfer& a, const Transfer& b) {
      return std::tie(a.phase, a.source, a.destination) <
             std::tie(b.phase, b.source, b.destination);
    });
    run = end;
  }
  DCP_CHECK(static_cast<int64_t>(transfers.size()) == size.transfers,
            "LayoutSize counts the transfers made");
  out->schedule.n_divisions = first_ring + layout.ranks;
  out->schedule.carry_gradients = true;
  return Status::Ok();
}

// The name of a strategy's configuration: its options that vary between variants.
std::string VariantName(Strategy strategy, const BaselineOptions& options) {
  switch (strategy) {
    case Strategy::kLoongTrain:
      return fmt::format("loongtrain:{}", options.inner_ring);
    case Strategy::kFcp:
      return fmt::format("fcp:{}", options.fcp_block_tokens);
    case Strategy::kMagi:
      return fmt::format("magi:{}", options.magi_overlap_degree);
    default:
      return std::string(ToString(strategy));
  }
}

}  // namespace

namespace internal {

int64_t PlanSize::Bytes() const {
  return devices * divisions * kBytesPerDeviceDivision + transfers * kBytesPerTransfer +
         tiles * bytes_per_tile + data_blocks * kBytesPerDataBlock;
}

int64_t TilesWithin(const PlanSize& size, const BaselineOptions& options) {
  PlanSize rest = size;
  rest.tiles = 0;
  return std::max<int64_t>(
      0, (PlanningMemoryLimit(options.max_planning_bytes) - rest.Bytes()) / size.bytes_per_tile);
}

namespace {

// The refusal of `size` above `limit`; `tiles_so_far`: its tiles were counted until they did not
// fit.
Status PlanSizeRefusal(Strategy strategy, const PlanSize& size, const BaselineOptions& options,
                       int64_t limit, bool tiles_so_far) {
  return Status::InvalidArgument(fmt::format(
      "{} on {}: planning it would take about {} ({} devices x {} divisions, {} transfers, {}{} "
      "tiles, {} data blocks), more than the {} allowed (BaselineOptions.max_planning_bytes, "
      "--max-planning-memory; by default 80% of the memory this process may have): use fewer "
      "devices or a smaller batch",
      ToString(strategy), options.topology.ToString(), ReadableBytes(size.Bytes()), size.devices,
      size.divisions, size.transfers, tiles_so_far ? "at least " : "", size.tiles, size.data_blocks,
      ReadableBytes(limit)));
}

}  // namespace

Status CheckPlanSize(Strategy strategy, const PlanSize& size, const BaselineOptions& options) {
  const int64_t limit = PlanningMemoryLimit(options.max_planning_bytes);
  if (size.Bytes() <= limit) return Status::Ok();
  return PlanSizeRefusal(strategy, size, options, limit, /*tiles_so_far=*/false);
}

Status TilesDoNotFit(Strategy strategy, PlanSize size, const BaselineOptions& options) {
  size.tiles = TilesWithin(size, options) + 1;
  return PlanSizeRefusal(strategy, size, options, PlanningMemoryLimit(options.max_planning_bytes),
                         /*tiles_so_far=*/true);
}

}  // namespace internal

std::string_view ToString(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDcp:
      return "dcp";
    case Strategy::kRing:
      return "ring";
    case Strategy::kZigzag:
      return "zigzag";
    case Strategy::kUlysses:
      return "ulysses";
    case Strategy::kTe:
      return "te";
    case Strategy::kLoongTrain:
      return "loongtrain";
    case Strategy::kFcp:
      return "fcp";
    case Strategy::kMagi:
      return "magi";
  }
  return "unknown";
}

Result<Strategy> ParseStrategy(std::string_view name) {
  for (Strategy s : {Strategy::kDcp, Strategy::kRing, Strategy::kZigzag, Strategy::kUlysses,
                     Strategy::kTe, Strategy::kLoongTrain, Strategy::kFcp, Strategy::kMagi}) {
    if (ToString(s) == name) return s;
  }
  return Status::InvalidArgument(fmt::format(
      "unknown strategy '{}' (expected dcp, ring, zigzag, ulysses, te, loongtrain, fcp or magi)",
      name));
}

std::vector<int32_t> LoongTrainInnerRings(const AttentionShape& shape, const Topology& topology) {
  const int32_t context_ranks = topology.devices() / HeadRanks(shape, topology);
  std::vector<int32_t> rings;
  for (int32_t r : {1, 2, 4, 8}) {
    if (context_ranks % r == 0) rings.push_back(r);
  }
  return rings;
}

Status BaselineOptions::Validate() const {
  DCP_RETURN_IF_ERROR(topology.Validate());
  if (inner_ring < 1) {
    return Status::InvalidArgument(fmt::format("inner_ring={} is not positive", inner_ring));
  }
  if (fcp_block_tokens < 1 || fcp_block_tokens > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("fcp_block_tokens={} is not in [1, {}]", fcp_block_tokens, kMaxSequenceLength));
  }
  if (magi_chunk_size < 0) {
    return Status::InvalidArgument(fmt::format(
        "magi_chunk_size={} is negative (0: MagiAttention's default)", magi_chunk_size));
  }
  if (max_planning_bytes < 0) {
    return Status::InvalidArgument(fmt::format(
        "max_planning_bytes={} is negative (0: 80% of the memory this process may have)",
        max_planning_bytes));
  }
  if (magi_overlap_degree < 1 || magi_overlap_degree > kMaxMagiOverlapDegree) {
    return Status::InvalidArgument(fmt::format("magi_overlap_degree={} is not in [1, {}]",
                                               magi_overlap_degree, kMaxMagiOverlapDegree));
  }
  return Status::Ok();
}

int64_t MagiChunkTokens(int64_t total_tokens, const BaselineOptions& options) {
  const int64_t ranks = options.topology.devices();
  const int64_t chunks = kMagiMinChunksPerRank * ranks;
  const int64_t automatic = (total_tokens + chunks - 1) / chunks;
  return options.magi_chunk_size > 0 ? std::min(automatic, options.magi_chunk_size) : automatic;
}

Result<BaselinePlan> LayOutBaseline(Strategy strategy, const Batch& batch,
                                    const BaselineOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  if (strategy == Strategy::kFcp) return internal::PlanFcp(batch, options);
  if (strategy == Strategy::kMagi) return internal::PlanMagi(batch, options);
  BaselinePlan out;
  DCP_ASSIGN_OR_RETURN(const Layout layout, MakeLayout(strategy, batch.shape(), options));
  DCP_RETURN_IF_ERROR(MakeBlocksAndPlacement(layout, batch, options, &out));
  out.padded_tokens = PaddedTokens(layout, batch, options.topology.devices());
  return out;
}

Status CompileBaseline(Strategy strategy, const Batch& batch, const BaselineOptions& options,
                       BaselinePlan* laid_out) {
  DCP_RETURN_IF_ERROR(internal::CheckPlanSize(
      strategy,
      {.devices = options.topology.devices(),
       .divisions = laid_out->schedule.n_divisions,
       .transfers = static_cast<int64_t>(laid_out->schedule.transfers.size()),
       .tiles = static_cast<int64_t>(laid_out->blocks.compute_blocks.size()),
       .data_blocks = static_cast<int64_t>(laid_out->blocks.data_blocks.size()),
       .bytes_per_tile = internal::PlanSize::BytesPerTile(strategy)},
      options));
  DCP_ASSIGN_OR_RETURN(laid_out->plan, CompilePlan(batch, laid_out->blocks, laid_out->placement,
                                                   laid_out->schedule, options.topology));
  laid_out->plan.origin = VariantName(strategy, options);
  return Status::Ok();
}

Result<BaselinePlan> PlanBaseline(Strategy strategy, const Batch& batch,
                                  const BaselineOptions& options) {
  DCP_ASSIGN_OR_RETURN(BaselinePlan out, LayOutBaseline(strategy, batch, options));
  DCP_RETURN_IF_ERROR(CompileBaseline(strategy, batch, options, &out));
  return out;
}

std::vector<BaselineVariant> BaselineVariants(Strategy strategy, const AttentionShape& shape,
                                              const Topology& topology) {
  std::vector<BaselineOptions> tried;
  const BaselineOptions defaults{.topology = topology};
  if (strategy == Strategy::kLoongTrain) {
    for (int32_t inner : LoongTrainInnerRings(shape, topology)) {
      tried.push_back(defaults);
      tried.back().inner_ring = inner;
    }
  } else if (strategy == Strategy::kFcp) {
    for (int64_t tokens : kFcpBlockTokens) {
      tried.push_back(defaults);
      tried.back().fcp_block_tokens = tokens;
    }
  } else {
    tried.push_back(defaults);
  }
  std::vector<BaselineVariant> variants;
  for (const BaselineOptions& options : tried) {
    variants.push_back({options, VariantName(strategy, options)});
  }
  return variants;
}

}  // namespace dcp
