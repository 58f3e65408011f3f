// SPDX-License-Identifier: Apache-2.0
// The planner: the whole planning flow for one batch (blocks, placement, schedule, compiled and
// checked programs) from one PlanOptions. Every caller plans through it: the `dcp` command, the
// benchmarks and the Python package.
//
// The attention shape (heads, KV heads, head dim, storage dtype) is the Batch's own
// (Batch::Create): blocks, FLOPs and bytes are derived from it, so it is not repeated here.
//
// Thread safety: PlanBatch is a pure function of its arguments; concurrent calls are safe. The
// same batch and options give the same plan, whatever the machine's load and `threads`. A long
// planning can be watched and stopped through PlanOptions::monitor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "dcp/plan.h"
#include "dcp/planning_monitor.h"
#include "dcp/sim.h"
#include "dcp/status.h"

namespace dcp {

// Compute tolerances of the placement, per device inside a node and per node.
struct Tolerances {
  double compute = 0.1;
  double inter = 0.4;
  friend bool operator==(const Tolerances&, const Tolerances&) = default;
};

// How the number of divisions is chosen when PlanOptions::divisions is 0.
enum class DivisionChoice : uint8_t {
  kCostModel = 0,  // the scheduler's quick cost model, sized for `cluster` (fast)
  kSimulate = 1,   // compile and simulate counts on `cluster` (ScheduleBySimulation), keep the
                   // fastest (slower)
};

// The block sizes of a close call (TuningOptions::close_call) are multiples of this: the kernel's
// mask sub-tile, so no block cuts one.
inline constexpr int64_t kCloseCallBlockAlign = 128;

// What the planner tunes when PlanOptions leaves a value open. Every (block size, tolerances)
// pair is one candidate placement of dcp's own; with `other_strategies`, the plans of the other
// strategies of include/dcp/baselines.h (the static layouts ring, zigzag, TransformerEngine and
// LoongTrain at each inner ring; FCP at each block size; MagiAttention: BaselineVariants) are
// candidates too. Every candidate is planned and simulated on PlanOptions::cluster and the
// fastest wins (ties: the earlier in candidate order; memory balance and the winner's division
// search: docs/planner.md). The work is bounded by these lists, never
// by the clock, so the same inputs give the same plan on every machine and thread count.
struct TuningOptions {
  // Tried when PlanOptions::block_size is 0. Sizes that cut the batch into fewer blocks than
  // there are devices are left out unless a largest-first spread of the blocks still holds
  // max/mean tokens within 1 + partition.eps_memory (GreedySpreadImbalance); when none is left
  // (a small batch), the block-size heuristic picks one (ChooseBlockSize).
  std::vector<int64_t> block_sizes = {1024, 2048, 4096};
  // A size of that list whose blocks make more than this many tiles per device (compute blocks of
  // one head group, as HasMoreTilesThan bounds them) is left out when a larger listed size is
  // tried: with that many, finer blocks no longer balance the devices better, they run less
  // efficiently, and theirs are the dearest passes (16M tokens on 128x8 in blocks of 1024: 15.3K
  // per device, about 28 s of planning each). On 19 default plans of 256K-16M tokens
  // (bench/RESULTS.md) every size above this bound was slower than a larger one; blocks of 1024
  // lost to 4096 from 376 tiles per device up and won only with few (57 per device; on the
  // bench's 128K batches on 4x8, at most about 260 per device, they win half). 0: none left out.
  int64_t max_tiles_per_device = 2048;
  // Tried in order; empty: the one pair PlanOptions::partition holds (tolerances pinned).
  // (0.02, 0.1): tight inside nodes, looser across them; with it the default plans were 1.3%
  // faster (geometric mean) on 160 batches of seeds nobody tuned on (13-17, bench/RESULTS.md).
  std::vector<Tolerances> tolerances = {{0.1, 0.4}, {0.05, 0.05}, {0.02, 0.02}, {0.02, 0.1}};
  bool other_strategies = true;
  // At most this many of dcp's own candidates (block sizes outer, tolerances inner).
  int32_t max_candidates = 12;
  // Head group counts the best of those is planned again with (PlanOptions::head_groups stays the
  // candidates' own), each searching its division count: tiles split by KV-head group balance
  // long sequences more finely (LongAlign x4, one 100K causal sequence on 4x8, seed 1: 16.3 ->
  // 14.9 ms). Counts that do not divide the KV heads, or equal PlanOptions::head_groups, are left
  // out; empty: head groups pinned. Tried only when the best has at most
  // `split_max_tiles_per_device` tiles per device: with more, they are fine enough already and the
  // split doubles a costly plan (4M tokens on 32x8, 2148 per device: 0.7% faster for 45 s more).
  std::vector<int64_t> head_groups = {2};
  int64_t split_max_tiles_per_device = 256;
  // The fastest two of dcp's own after those splits are each planned once more with these
  // tolerances (their block size and head groups, the division count searched; one plan per
  // block size and head groups), when they are tighter than the candidate's own: batches of one
  // or two long causal sequences gain from a balance the candidates' tolerances do not reach
  // (111873 + 1611 tokens on 4x8: 17.93 -> 17.28 ms, faster than TE's 17.58). Unset: not tried
  // (nor when the tolerances are pinned). Same tile bound as the splits.
  std::optional<Tolerances> tightened = Tolerances{.compute = 0.005, .inter = 0.005};
  // The best of dcp's own after those is placed again from this many other seeds
  // (partition.seed + 1, + 2, ...), each searching its division count (same tile bound as the
  // splits; 0: not tried). A placement is one walk of a seeded search, and its simulated time
  // moves by several percent from one seed to the next where the bytes and balance barely do.
  int32_t placement_restarts = 2;
  static constexpr int32_t kMaxPlacementRestarts = 16;
  // A close call: when another strategy's candidate is the fastest, or dcp's best own is less than
  // this fraction faster than it, dcp's own is planned again at the block sizes that cut the
  // batch into about two blocks per device and about one (its tokens over twice the devices and
  // over the devices, rounded down and up to a multiple of kCloseCallBlockAlign), with the
  // tightened tolerances and the best own's head groups, the division count searched; they are
  // listed among dcp's own, before the other strategies. On one or two long causal sequences a
  // plan changes by up to about 20% from one block size to the next; two blocks per device is
  // where TE's layout balances such a batch exactly (bench/RESULTS.md: 29088 + 70759 tokens on
  // 4x8, 10.17 -> 9.12 ms against TE's 9.69), and one sequence of 100787 tokens on 4x8 plans in
  // 13.55 ms at one block per device (3200) against TE's 14.24 and 14.30 at two (1664).
  // Not tried when unset, when `tightened` is unset, or when the block size or the tolerances are
  // pinned. Same tile bound as the splits.
  std::optional<double> close_call = 0.02;
  // Memory balance without a budget: the fastest candidate whose peak buffer bytes are spread
  // within max_peak_imbalance (max/mean over devices) and whose largest device holds at most
  // max_peak_share times its share of the batch (BatchShareBytes) is chosen over a faster one
  // beyond either, when it is at most `balance_slack` slower (0.1: 10%); beyond that, speed wins.
  // The share bound keeps a layout that holds far more everywhere from winning by a hair: on a
  // 4M-token batch over 32x8, LoongTrain's layout held 41 shares (5.87 GiB) on its largest device
  // and was 0.9% faster than TE's, which held 4.4 (bench/RESULTS.md). dcp's default plans on the
  // bench's batches hold 1.6-3.5.
  double max_peak_imbalance = 1.5;
  double max_peak_share = 8;
  double balance_slack = 0.1;

  // InvalidArgument naming the field.
  Status Validate() const;
};

struct PlanOptions {
  // --- What the plan is for.
  // Nodes x devices per node; the plan has one forward and one backward program per device.
  Topology topology = {.nodes = 1, .devices_per_node = 1};
  // The cluster the plan is costed for (the scheduler's division cost model, the division and
  // candidate searches). Its nodes must hold the topology's devices per node (a plan may use
  // part of each node: ClusterSpec::CheckHolds).
  ClusterSpec cluster = {};

  // --- Blocking.
  // Tokens per data block; 0 tunes it (tuning.block_sizes), or when no size of that list suits
  // the batch, the largest power of two that spreads its blocks over the devices within
  // partition.eps_memory.
  int64_t block_size = 0;
  // Compute blocks per tile: divides the batch's KV heads. dcp's own candidates use it; the best
  // of them is also tried with tuning.head_groups.
  int64_t head_groups = 1;

  // --- Placement: partitioner, tolerances (compute, inter-node, memory), seed. The compute and
  // inter-node tolerances are used as given only when tuning.tolerances is empty.
  PartitionOptions partition = {};

  // A placement made elsewhere (ReadPartition: another partitioner's, a hand-made one) for the
  // blocks of `block_size` (which must then be > 0): it is scheduled, compiled and costed as
  // given, with nothing tuned but the division count; tolerances and other strategies play no part.
  // InvalidArgument when it does not fit the blocks or the topology.
  std::optional<Placement> placement;

  // --- Scheduling.
  // Divisions per pass; 0 lets `division_choice` pick, for each candidate.
  int32_t divisions = 0;
  DivisionChoice division_choice = DivisionChoice::kCostModel;

  // --- Tuning: the candidates tried for what is left open above.
  TuningOptions tuning = {};
  // Threads planning candidates at once (>= 1). The result does not depend on it.
  int32_t threads = 1;

  // --- Watching: progress reports and cancellation (kCancelled), or none; not owned, and must
  // outlive the call.
  const PlanningMonitor* monitor = nullptr;

  // --- Memory. When > 0, every device's peak buffer bytes (the larger of its forward and backward
  // programs) must stay within it: candidates above it are skipped, and when none fits planning
  // fails (InvalidArgument naming the smallest peak among the candidates tried).
  int64_t memory_budget_bytes = 0;
  // The memory planning itself may take: dcp's own passes refuse a batch whose blocks they
  // estimate to need more (InvalidArgument naming the tiles and the estimate, before placement
  // allocates for them, and blocking stops once past it), where it would otherwise be killed for
  // memory. 0: 80% of the memory this process may have (the machine's physical memory, or its
  // address-space limit, ulimit -v, when lower). One pass holds about kPlanningBytesPerTile per
  // tile at its peak; when candidates are tuned, each of dcp's own gets an equal share with the
  // others planned at once and the best kept so far (threads + 1 shares).
  int64_t max_planning_bytes = 0;

  // InvalidArgument naming the field when a value is out of range.
  Status Validate() const;
};

// What one pass of dcp's pipeline holds per tile at its peak (the end of compilation: the tile's
// compute block in the blocks and in the plan, its forward and backward tiles, placement,
// schedule and the compiler's tables), measured as peak RSS over tiles: 125-127 bytes at 16M
// tokens on 128x8, 136 at 8M on 64x8 (bench/RESULTS.md, "Planning at cluster scale").
inline constexpr int64_t kPlanningBytesPerTile = 136;

// Options that plan in one pass of dcp's own pipeline, nothing tuned: this topology and block
// size, the default tolerances (PartitionOptions), no other strategies.
PlanOptions SinglePassOptions(const Topology& topology, int64_t block_size);

// Milliseconds per phase of the chosen plan; building the batch itself is not counted.
struct PlanningTimes {
  double blocking = 0, placement = 0, scheduling = 0, compile = 0;
  double search = 0;  // the rest of the tuning around them (other candidates, simulation)
  double total() const { return blocking + placement + scheduling + compile + search; }
};

// One candidate of the tuning and how it fared.
struct CandidateOutcome {
  std::string name;           // as Plan::origin
  bool own = true;            // dcp's own placement; false: another strategy's layout
  double simulated_s = 0;     // forward + backward on the cluster; 0 when it was not planned
  int64_t peak_bytes = 0;     // the largest device peak of buffer bytes
  double peak_imbalance = 0;  // max/mean of the devices' peaks
  double peak_share = 0;      // peak_bytes over BatchShareBytes
  std::string error;          // why it was not planned (or was over the memory budget), or empty
  // Not planned because it could not have been chosen: its attention alone is slower on the
  // cluster model than a candidate of dcp's own (AttentionLowerBoundSeconds; `error` says by how
  // much).
  bool skipped = false;
};

struct PlannedBatch {
  BlockSet blocks;
  PartitionResult placed;  // the placement and its report
  Plan plan;               // plan.origin names the candidate chosen
  PlanningTimes ms;
  // The simulated forward + backward time of the plan on options.cluster, in seconds, when
  // candidates were compared (0 for a single pinned pass).
  double simulated_s = 0;
  // Every candidate, in candidate order (empty for a single pinned pass).
  std::vector<CandidateOutcome> candidates;
  // The fastest of dcp's own candidates (an index into `candidates`), whether chosen or not.
  std::optional<size_t> best_own;
};

// Blocks, places, schedules and compiles `batch` into one forward and one backward program per
// device, timing each phase. Errors: InvalidArgument for bad options or a batch the options
// cannot plan (the message names the value), and whatever a phase returns.
Result<PlannedBatch> PlanBatch(const Batch& batch, const PlanOptions& options);

// Peak buffer bytes of every device: the larger of its forward and backward programs'.
std::vector<int64_t> PeakBufferBytesPerDevice(const Plan& plan);

// One device's share of the batch's tensors of a backward pass: Q, K, V, O, dO, dQ, dK and dV in
// the storage dtype and LSE and Delta in fp32, for every token, over `devices`. No plan holds less
// on its largest device.
int64_t BatchShareBytes(const Batch& batch, int32_t devices);

}  // namespace dcp
