// SPDX-License-Identifier: Apache-2.0
// Static context-parallel strategies expressed in dcp's own IR (Placement + Schedule, compiled by
// CompilePlan), so they are measured with the same cost model, replayed by the same simulator and
// executed by the same runtime as dcp's own plans.
//
// Every strategy first lays the packed batch out the static way (each sequence cut into the same
// number of chunks, spread over the devices), then follows its own communication steps:
//  - ring:     each sequence in P chunks, device r holds chunk r; P - 1 ring steps pass KV to the
//              next device; every tile is computed where its queries live.
//  - zigzag:   2P chunks, device r holds chunks r and 2P - 1 - r; ring steps as above.
//  - ulysses:  head-parallel: each device holds 1/P of every sequence's tokens; one all-to-all
//              gives device g head group g of all tokens, one all-to-all returns O. Needs P to
//              divide the KV heads (no KV-head replication).
//  - te:       TransformerEngine a2a+p2p: an all-to-all over heads inside groups of h = min(KV
//              heads, P) devices, then a zigzag ring of P / h steps across the groups.
//  - loongtrain: LoongTrain double ring: head parallel h = min(KV heads, P) as te, the P / h
//              context ranks form outer rings of inner rings of `inner_ring` ranks; KV goes round
//              the inner ring, then moves one hop on the outer ring.
// Two dynamic strategies of 2025-2026 are expressed the same way (src/baselines/fcp.cc, magi.cc;
// what each models, and from which source, is in docs/baselines.md):
//  - fcp:      Flexible Context Parallelism: blocks of `fcp_block_tokens`, a causal sequence's
//              blocks paired i with n-1-i, pairs placed longest first on the least-loaded device;
//              KV sent peer to peer in congestion-free rounds (one division per round).
//  - magi:     MagiAttention: the packed batch cut into chunks of `magi_chunk_size` tokens, every
//              rank holding as many chunks (+-1), chosen to balance mask area; KV group-cast to the
//              ranks that need it, overlapped in 1 + `magi_overlap_degree` stages.
// A ring step is one division (division 0 holds only tiles whose inputs are all local). Chunks are
// nearly equal (sizes differ by at most one token); the padding the real systems need (TE and
// zigzag: every sequence to a multiple of 2P tokens) is reported in `padded_tokens`, not computed.
// Fully masked tiles are skipped in computation, the communication pattern stays the strategy's.
// In the backward pass partial dKV travels round the ring one step behind its KV, as in ring
// attention (Schedule::carry_gradients), and returns to its owner from the last hop. A difference
// from the real systems, common to all strategies in this IR: the backward pass fetches Q and KV
// again (the real ones keep them, in their head-parallel layout, from the forward pass).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "dcp/plan.h"
#include "dcp/status.h"

namespace dcp {

enum class Strategy : uint8_t { kDcp, kRing, kZigzag, kUlysses, kTe, kLoongTrain, kFcp, kMagi };

// "dcp", "ring", "zigzag", "ulysses", "te", "loongtrain", "fcp", "magi".
std::string_view ToString(Strategy strategy);
Result<Strategy> ParseStrategy(std::string_view name);

struct BaselineOptions {
  Topology topology = {};
  // LoongTrain: context ranks per inner ring; must divide P / h. (The paper searches 1, 2, 4, 8
  // and keeps the fastest; callers with a cost model do that search.)
  int32_t inner_ring = 1;
  // FCP: tokens per block; every sequence is cut into blocks of this size, its last one shorter.
  // 4096 is the block size of the paper's evaluation (one summary says 1K). Must be >= 1.
  int64_t fcp_block_tokens = 4096;
  // MagiAttention: tokens per dispatch chunk. 0 takes MagiAttention's default, ceil(total tokens /
  // (kMagiMinChunksPerRank * devices)); a positive value is capped at that, as MagiAttention caps
  // a given chunk_size. Must be >= 0.
  int64_t magi_chunk_size = 0;
  // MagiAttention: remote stages after the local one (OverlapConfig.degree, default 1: the local
  // attention overlaps the group-cast of all remote KV, then the remote attention runs). Each stage
  // is one division. Must be in [1, kMaxMagiOverlapDegree].
  int32_t magi_overlap_degree = 1;
  // The memory laying out and compiling the plan may take, as PlanOptions::max_planning_bytes: a
  // plan estimated to need more (from its devices x divisions, transfers, tiles and data blocks,
  // counted before they are made) is refused with InvalidArgument naming them, where it would
  // otherwise be killed for memory (ring on 1024x8 holds 8192 x 8192 device divisions). 0: 80% of
  // the memory this process may have (the machine's, or ulimit -v when lower). Must be >= 0.
  int64_t max_planning_bytes = 0;

  Status Validate() const;
};

// MagiAttention's MAGI_ATTENTION_MIN_CHUNKS_PER_RANK default, which sets its default chunk size.
inline constexpr int64_t kMagiMinChunksPerRank = 8;
// MagiAttention's OverlapConfig.max_num_chunks default, the most stages it splits remote KV into.
inline constexpr int32_t kMaxMagiOverlapDegree = 64;

// The chunk size MagiAttention uses for a batch of `total_tokens` tokens under `options`
// (magi_chunk_size, capped or defaulted as documented there). REQUIRES: total_tokens >= 1.
int64_t MagiChunkTokens(int64_t total_tokens, const BaselineOptions& options);

struct BaselinePlan {
  BlockSet blocks;     // the strategy's chunks as data blocks, their tiles as compute blocks
  Placement placement;
  Schedule schedule;
  Plan plan;  // origin: the variant's name (BaselineVariant::name)
  int64_t padded_tokens = 0;  // tokens the real system would add to meet its divisibility rule
};

// The LoongTrain inner ring sizes the paper searches (1, 2, 4, 8) that divide the context ranks
// of `topology` for this shape (devices / gcd(KV heads, devices)).
std::vector<int32_t> LoongTrainInnerRings(const AttentionShape& shape, const Topology& topology);

// One configuration of a strategy, as its users would try it, and its name (Plan::origin).
struct BaselineVariant {
  BaselineOptions options;
  std::string name;  // "zigzag", "loongtrain:2", "fcp:2048", "magi:1"
};

// FCP's block sizes tried: the paper's evaluation's (4096) and the others reported or common.
inline constexpr int64_t kFcpBlockTokens[] = {1024, 2048, 4096};

// The configurations of `strategy` (not kDcp) a fair comparison tries on `topology`, the fastest
// to be kept: LoongTrain's inner rings (LoongTrainInnerRings, as in the DCP paper), FCP's block
// sizes kFcpBlockTokens; MagiAttention and the others with their default options (Magi's chunk
// size and overlap degree are its defaults, what its Megatron backend uses untuned).
std::vector<BaselineVariant> BaselineVariants(Strategy strategy, const AttentionShape& shape,
                                              const Topology& topology);

// PlanBaseline in two steps, for callers that look at a layout before paying for its compile:
// LayOutBaseline fills everything but `plan` (blocks, placement, schedule, padded_tokens; errors as
// PlanBaseline's), CompileBaseline then compiles it into `plan` (REQUIRES: `laid_out` from
// LayOutBaseline with the same strategy, batch and options).
Result<BaselinePlan> LayOutBaseline(Strategy strategy, const Batch& batch,
                                    const BaselineOptions& options);
Status CompileBaseline(Strategy strategy, const Batch& batch, const BaselineOptions& options,
                       BaselinePlan* laid_out);

// Plans `batch` the way `strategy` (not kDcp) would. Returns InvalidArgument for bad options or a
// plan above the planning memory (BaselineOptions::max_planning_bytes), and Unsupported where the
// strategy cannot run the batch on the topology (ulysses when P does not divide the KV heads), with
// the reason. fcp and magi plan every batch and mask.
Result<BaselinePlan> PlanBaseline(Strategy strategy, const Batch& batch,
                                  const BaselineOptions& options);

// ZigZag ring attention's placement at block granularity: every sequence is cut into 2P chunks
// (P = devices), device r holds chunks r and 2P-1-r, and each tile is computed where its queries
// live (KV travels around the ring). Block b of a sequence of n blocks falls in chunk
// floor(b * 2P / n). Sequences shorter than 2P blocks leave some devices without blocks of them.
Placement ZigzagPlacement(const BlockSet& blocks, const Topology& topology);

}  // namespace dcp
