// SPDX-License-Identifier: Apache-2.0
// The planner: blocking, placement, scheduling and compilation of one batch, and the tuning
// around them: candidates (dcp's placements at several block sizes and tolerances, the static
// layouts) planned in parallel, simulated on the cluster, the fastest kept.
#include "dcp/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "dcp/baselines.h"
#include "util/memory.h"
#include "util/parallel.h"
#include "util/stopwatch.h"

namespace dcp {
namespace {

constexpr int32_t kMaxCandidates = 4096;

using internal::Stopwatch;

// The scheduler's options: the division count, and its cost model taken from the cluster the
// plan is for, so divisions are sized for that machine.
ScheduleOptions SchedulerOptionsFor(const PlanOptions& options) {
  const ClusterSpec& cluster = options.cluster;
  return ScheduleOptions{
      .divisions = options.divisions,
      .device_flops = cluster.device.peak_flops * cluster.device.attention.forward_efficiency,
      .intra_node_bytes_per_s = cluster.intra_node.bytes_per_s,
      .inter_node_bytes_per_s = cluster.inter_node.bytes_per_s};
}

// A largest device peak of buffer bytes over the device's share of the batch (BatchShareBytes).
double PeakShare(const Batch& batch, const PlanOptions& options, int64_t peak_bytes) {
  return static_cast<double>(peak_bytes) /
         static_cast<double>(
             std::max<int64_t>(1, BatchShareBytes(batch, options.topology.devices())));
}

// The largest device peak of buffer bytes and max/mean of the peaks.
std::pair<int64_t, double> Peaks(const Plan& plan) {
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(plan);
  if (peak.empty()) return {0, 1};
  return {*std::max_element(peak.begin(), peak.end()), MaxOverMean(peak)};
}

Status CheckMemoryBudget(const Plan& plan, int64_t budget) {
  if (budget <= 0) return Status::Ok();
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(plan);
  const auto worst = std::max_element(peak.begin(), peak.end());
  if (worst != peak.end() && *worst > budget) {
    return Status::InvalidArgument(
        fmt::format("device {} needs {} bytes of buffers, above the memory budget of {} bytes",
                    worst - peak.begin(), *worst, budget));
  }
  return Status::Ok();
}

Status ScheduleAndCompile(const Batch& batch, const PlanOptions& options, int32_t divisions,
                          PlannedBatch* out, const PlanningMonitor* reports = nullptr);

int64_t PlanningMemoryLimit(const PlanOptions& options) {
  return internal::PlanningMemoryLimit(options.max_planning_bytes);
}

// Refuses blocks that one pass cannot plan within options.max_planning_bytes, before placement
// allocates for them.
Status CheckPlanningMemory(const BlockSet& blocks, const PlanOptions& options) {
  const int64_t limit = PlanningMemoryLimit(options);
  const auto tiles = static_cast<int64_t>(blocks.compute_blocks.size());
  if (tiles <= limit / kPlanningBytesPerTile) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "planning {} tiles (blocks of {} tokens) needs about {}, more than the {} allowed "
      "(PlanOptions.max_planning_bytes, --max-planning-memory; by default 80% of the memory this "
      "process may have): use larger blocks (--block-size) or a smaller batch",
      tiles, blocks.block_size, internal::ReadableBytes(tiles * kPlanningBytesPerTile),
      internal::ReadableBytes(limit)));
}

// The blocks of a pass: options.block_size, or the block-size heuristic's when it is 0.
Result<BlockSet> BlocksFor(const Batch& batch, const PlanOptions& options) {
  // One tile more than the memory allows, so that a batch over it fails while blocking, before
  // its tiles fill the memory (CheckPlanningMemory words the refusal of one that just fits).
  const int64_t limit = PlanningMemoryLimit(options);
  BlockingOptions blocking{.block_size = options.block_size,
                           .head_groups = options.head_groups,
                           .max_compute_blocks = limit / kPlanningBytesPerTile + 1};
  if (blocking.block_size == 0) {
    DCP_ASSIGN_OR_RETURN(
        BlockSizeChoice choice,
        ChooseBlockSize(batch.seqlens(),
                        BlockSizeOptions{.devices = options.topology.devices(),
                                         .eps_memory = options.partition.eps_memory}));
    blocking.block_size = choice.block_size;
  }
  // Options checked first, so that the errors given the memory's context are the blocks' size.
  DCP_RETURN_IF_ERROR(blocking.Validate());
  Result<BlockSet> blocks = MakeBlocks(batch, blocking);
  if (!blocks.ok()) {
    return blocks.status().WithContext(
        fmt::format("planning within {} bytes ({} per tile; PlanOptions.max_planning_bytes, "
                    "--max-planning-memory; by default 80% of the memory this process may have)",
                    limit, kPlanningBytesPerTile));
  }
  return blocks;
}

// One pass of the pipeline with block size (or its heuristic) and tolerances pinned. Its phases
// are reported to options.monitor when it is the whole planning (not one of several candidates).
Result<PlannedBatch> PlanOnce(const Batch& batch, const PlanOptions& options,
                              bool report_phases = false) {
  const PlanningMonitor* reports = report_phases ? options.monitor : nullptr;
  PlannedBatch out;
  Stopwatch watch;
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  ReportProgress(reports, "blocking", 0, 1);
  DCP_ASSIGN_OR_RETURN(out.blocks, BlocksFor(batch, options));
  DCP_RETURN_IF_ERROR(CheckPlanningMemory(out.blocks, options));
  out.ms.blocking = watch.Lap();
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  PartitionOptions partition = options.partition;
  partition.threads = options.threads;
  partition.monitor = options.monitor;
  partition.report_progress = report_phases;
  ReportProgress(reports, "placement", 0, 1);
  DCP_ASSIGN_OR_RETURN(out.placed, PartitionBlocks(out.blocks, options.topology, partition));
  out.ms.placement = watch.Lap();
  DCP_RETURN_IF_ERROR(ScheduleAndCompile(batch, options, options.divisions, &out, reports));
  return out;
}

// The caller's placement (options.placement) scheduled and compiled like one of dcp's own.
Result<PlannedBatch> PlanGiven(const Batch& batch, const PlanOptions& options) {
  PlannedBatch out;
  Stopwatch watch;
  DCP_ASSIGN_OR_RETURN(out.blocks,
                       MakeBlocks(batch, BlockingOptions{.block_size = options.block_size,
                                                         .head_groups = options.head_groups}));
  DCP_RETURN_IF_ERROR(CheckPlanningMemory(out.blocks, options));
  out.ms.blocking = watch.Lap();
  const Placement& given = *options.placement;
  if (given.data_device.size() != out.blocks.data_blocks.size() ||
      given.compute_device.size() != out.blocks.compute_blocks.size()) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.placement places {} data and {} compute blocks, but block size {} cuts the "
        "batch into {} and {}",
        given.data_device.size(), given.compute_device.size(), options.block_size,
        out.blocks.data_blocks.size(), out.blocks.compute_blocks.size()));
  }
  out.placed.placement = given;
  DCP_ASSIGN_OR_RETURN(out.placed.report,
                       EvaluatePlacement(BuildHypergraph(out.blocks), given, options.topology));
  out.placed.balanced =
      out.placed.report.compute_imbalance <= ComputeBound(options.topology, options.partition) &&
      out.placed.report.memory_imbalance <= 1 + options.partition.eps_memory;
  out.ms.placement = watch.Lap();
  DCP_RETURN_IF_ERROR(ScheduleAndCompile(batch, options, options.divisions, &out));
  out.plan.origin = fmt::format("given {}:{}", out.blocks.block_size, out.plan.n_divisions);
  return out;
}

// What a plan's origin adds for tiles split into head groups: " g2" for two.
std::string HeadGroupsSuffix(int64_t head_groups) {
  return head_groups > 1 ? fmt::format(" g{}", head_groups) : std::string();
}

// What a plan's origin adds for a placement seed other than 0: " seed 2".
std::string SeedSuffix(uint64_t seed) { return seed == 0 ? "" : fmt::format(" seed {}", seed); }

// Schedules and compiles `out`'s placement with `divisions` (0: options.division_choice picks).
Status ScheduleAndCompile(const Batch& batch, const PlanOptions& options, int32_t divisions,
                          PlannedBatch* out, const PlanningMonitor* reports) {
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  ReportProgress(reports, "scheduling", 0, 1);
  Stopwatch watch;
  ScheduleOptions scheduler = SchedulerOptionsFor(options);
  scheduler.divisions = divisions;
  scheduler.threads = options.threads;
  DCP_ASSIGN_OR_RETURN(
      Schedule schedule,
      options.division_choice == DivisionChoice::kSimulate
          ? ScheduleBySimulation(batch, out->blocks, out->placed.placement, options.topology,
                                 scheduler, options.cluster)
          : ScheduleDivisions(out->blocks, out->placed.placement, options.topology, scheduler));
  out->ms.scheduling += watch.Lap();
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  ReportProgress(reports, "compile", 0, 1);
  DCP_ASSIGN_OR_RETURN(out->plan, CompilePlan(batch, out->blocks, out->placed.placement, schedule,
                                              options.topology, options.threads));
  out->ms.compile += watch.Lap();
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  ReportProgress(reports, "compile", 1, 1);
  out->plan.origin =
      fmt::format("dcp {}:{}/{}:{}{}{}", out->blocks.block_size, options.partition.eps_compute,
                  options.partition.eps_inter, out->plan.n_divisions,
                  HeadGroupsSuffix(options.head_groups), SeedSuffix(options.partition.seed));
  return Status::Ok();
}

// A plan of dcp's own whose peak buffers are spread worse than the tuning allows gets more
// divisions (each holds fewer remote blocks at once), doubling until they are spread well enough
// or the count is at its maximum. A doubling is kept when it spreads them less and its plan is at
// most the balance slack slower than the plan before it on the cluster model (the time the
// tuning pays for balance, TuningOptions::balance_slack); otherwise the plan before it is kept:
// LongAlign x4 causal seed 0 in blocks of 4096 went from 10 divisions (spread 1.52, 12.6 ms) to
// 16 (1.49, 15.4 ms) when 16 was the most. A plan over the memory budget doubles whatever it costs.
// The division count a caller pinned is kept. Returns what it learnt of the plan it keeps, so that
// it is not worked out again (the peaks lay out every device's slots: 0.2 s per pass at 8M tokens).
struct KeptPlan {
  std::pair<int64_t, double> peaks;  // Peaks
  std::optional<double> seconds;     // on the cluster model, when a doubling was priced
};
Result<KeptPlan> SpreadPeaks(const Batch& batch, const PlanOptions& options, PlannedBatch* out) {
  std::pair<int64_t, double> peaks = Peaks(out->plan);
  if (options.divisions != 0) return KeptPlan{.peaks = peaks, .seconds = std::nullopt};
  const ClusterSpec& cluster = options.cluster;
  const auto seconds_of = [&](const Plan& plan) -> std::optional<double> {
    Result<SimReport> report = SimulatePlan(plan, cluster);
    return report.ok() ? std::optional<double>(report->total_s()) : std::nullopt;
  };
  std::optional<double> seconds;  // of out->plan, once a doubling is priced against it
  while (peaks.second > options.tuning.max_peak_imbalance &&
         out->plan.n_divisions < kMaxDivisions) {
    const bool over_budget = !CheckMemoryBudget(out->plan, options.memory_budget_bytes).ok();
    if (!over_budget && !seconds && !(seconds = seconds_of(out->plan))) break;
    Plan fewer = std::move(out->plan);
    DCP_RETURN_IF_ERROR(
        ScheduleAndCompile(batch, options, std::min(2 * fewer.n_divisions, kMaxDivisions), out));
    const std::pair<int64_t, double> more = Peaks(out->plan);
    std::optional<double> more_seconds;
    if (more.second >= peaks.second ||
        (!over_budget && (!(more_seconds = seconds_of(out->plan)) ||
                          *more_seconds > *seconds * (1 + options.tuning.balance_slack)))) {
      out->plan = std::move(fewer);
      break;
    }
    peaks = more;
    seconds = more_seconds;
  }
  return KeptPlan{.peaks = peaks, .seconds = seconds};
}

// Another strategy's laid-out plan (LayOutBaseline) compiled, with its placement priced like
// dcp's.
Result<PlannedBatch> PlanStatic(const Batch& batch, Strategy strategy,
                                const BaselineOptions& options, BaselinePlan baseline) {
  PlannedBatch out;
  Stopwatch watch;
  DCP_RETURN_IF_ERROR(CompileBaseline(strategy, batch, options, &baseline));
  out.ms.compile = watch.Lap();
  out.blocks = std::move(baseline.blocks);
  out.placed.placement = std::move(baseline.placement);
  DCP_ASSIGN_OR_RETURN(
      out.placed.report,
      EvaluatePlacement(BuildHypergraph(out.blocks), out.placed.placement, options.topology));
  out.placed.balanced = true;
  out.ms.placement = watch.Lap();
  out.plan = std::move(baseline.plan);
  return out;
}

// One candidate of the tuning: dcp's own pipeline with `own`'s values, or another strategy's.
struct Candidate {
  std::optional<PlanOptions> own;
  Strategy strategy = Strategy::kDcp;
  BaselineOptions baseline;  // another strategy's configuration
  std::string name;  // as Plan::origin will be (dcp's own: without the divisions, not yet known)
};

int64_t BlockCount(const Batch& batch, int64_t block_size) {
  int64_t blocks = 0;
  for (int64_t length : batch.seqlens()) blocks += (length + block_size - 1) / block_size;
  return blocks;
}

// Whether blocks of `block_size` can be placed on the topology: every device gets one, or the
// blocks still spread over the devices within the memory tolerance (a device or two short of a
// block among many: LongAlign x4 seed 0, 124189 tokens in 31 blocks of 4096 on 32 devices, spread
// 1.055, plans in 12.02 ms, 1.096x TE's layout, where 2048 reaches 1.026x).
bool BlocksFit(const Batch& batch, int64_t block_size, const PlanOptions& options) {
  const int64_t devices = options.topology.devices();
  return BlockCount(batch, block_size) >= devices ||
         GreedySpreadImbalance(batch.seqlens(), block_size, devices) <=
             1 + options.partition.eps_memory;
}

// Whether blocks of `block_size` make more tiles per device than tuning.max_tiles_per_device
// allows: never when it is 0, nor when it times the devices overflows (no batch has that many).
bool TooFine(const Batch& batch, int64_t block_size, const PlanOptions& options) {
  int64_t max_tiles = 0;
  return options.tuning.max_tiles_per_device > 0 &&
         !__builtin_mul_overflow(options.tuning.max_tiles_per_device, options.topology.devices(),
                                 &max_tiles) &&
         HasMoreTilesThan(batch, block_size, max_tiles);
}

// The block sizes to try: the pinned one, or the tuning list without the sizes whose blocks do not
// fit the devices (BlocksFit) and those finer than needed beside a larger one (TooFine); when that
// leaves none, 0 (the block-size heuristic).
std::vector<int64_t> BlockSizesToTry(const Batch& batch, const PlanOptions& options) {
  if (options.block_size > 0) return {options.block_size};
  std::vector<int64_t> sizes;
  for (int64_t size : options.tuning.block_sizes) {
    if (BlocksFit(batch, size, options)) sizes.push_back(size);
  }
  if (sizes.empty()) return {0};
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::erase_if(sizes,
                [&](int64_t size) { return size < largest && TooFine(batch, size, options); });
  return sizes;
}

std::vector<Candidate> CandidatesOf(const Batch& batch, const PlanOptions& options) {
  const TuningOptions& tuning = options.tuning;
  const std::vector<Tolerances> tolerances =
      tuning.tolerances.empty()
          ? std::vector<Tolerances>{{options.partition.eps_compute, options.partition.eps_inter}}
          : tuning.tolerances;
  std::vector<Candidate> candidates;
  for (int64_t block_size : BlockSizesToTry(batch, options)) {
    for (Tolerances eps : tolerances) {
      if (static_cast<int32_t>(candidates.size()) == tuning.max_candidates) break;
      PlanOptions own = options;
      own.block_size = block_size;
      own.partition.eps_compute = eps.compute;
      own.partition.eps_inter = eps.inter;
      Candidate& c = candidates.emplace_back();
      c.name = fmt::format("dcp {}:{}/{}", block_size, eps.compute, eps.inter);
      c.own = std::move(own);
    }
  }
  if (tuning.other_strategies) {
    for (Strategy s : {Strategy::kRing, Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain,
                       Strategy::kFcp, Strategy::kMagi}) {
      for (BaselineVariant& v : BaselineVariants(s, batch.shape(), options.topology)) {
        // LoongTrain with inner rings of one is TE's layout, planned already.
        if (s == Strategy::kLoongTrain && v.options.inner_ring == 1) continue;
        Candidate& c = candidates.emplace_back();
        c.strategy = s;
        c.baseline = std::move(v.options);
        c.name = std::move(v.name);
      }
    }
  }
  // Several candidates are planned on the threads at once, each on one, with the best so far kept
  // beside them: each gets that share of the planning memory.
  const int64_t limit = PlanningMemoryLimit(options);
  const int64_t at_once =
      std::min<int64_t>(options.threads, static_cast<int64_t>(candidates.size())) + 1;
  const int64_t share = candidates.size() > 1 ? std::max<int64_t>(1, limit / at_once) : limit;
  for (Candidate& c : candidates) {
    if (c.own) {
      if (candidates.size() > 1) c.own->threads = 1;
      c.own->max_planning_bytes = share;
    } else {
      c.baseline.max_planning_bytes = share;
    }
  }
  return candidates;
}

// A candidate planned and measured; `planned` is empty when the candidate was skipped (its
// outcome's error says why) or the tuning was cancelled before it.
struct Tried {
  std::optional<Result<PlannedBatch>> planned;
  CandidateOutcome outcome;
  bool over_budget = false;
  bool released = false;  // planned, then emptied as it cannot be chosen (ReleaseLosers)
};

// Planned, whether or not its plan was released since.
bool Planned(const Tried& t) { return t.planned && t.planned->ok(); }

// Whether a candidate's peaks count as balanced in the choice (TuningOptions::max_peak_imbalance
// and max_peak_share).
bool MemoryBalanced(const CandidateOutcome& o, const TuningOptions& tuning) {
  return o.peak_imbalance <= tuning.max_peak_imbalance && o.peak_share <= tuning.max_peak_share;
}

// A time that a candidate slower than it cannot win by (Choose): the least, over dcp's own planned
// candidates, of the simulated time, times 1 + balance_slack for one not MemoryBalanced. A
// candidate slower than a balanced one is neither the fastest nor the fastest balanced; one slower
// than 1 + slack times an unbalanced one is not the fastest and, as the fastest balanced, would
// lose to the fastest of all, as would the next balanced one without it.
// Infinite when none was planned.
double WinningBound(const std::vector<Tried>& tried, const TuningOptions& tuning) {
  double bound = std::numeric_limits<double>::infinity();
  for (const Tried& t : tried) {
    if (!Planned(t) || !t.outcome.own) continue;
    const double slack = MemoryBalanced(t.outcome, tuning) ? 1 : 1 + tuning.balance_slack;
    bound = std::min(bound, t.outcome.simulated_s * slack);
  }
  return bound;
}

// Another strategy's candidate, laid out and then compiled, unless even its attention's lower
// bound (AttentionLowerBoundSeconds) is above `bound_s`, or its compiled plan's
// (SimulationLowerBoundSeconds): then nothing (`skipped` says why), since it could not have been
// chosen. The second spares the replay of plans bound by their links: MagiAttention's at 16M
// tokens on 128x8 took 460 s of a 562 s default plan.
std::optional<Result<PlannedBatch>> PlanOther(const Batch& batch, const Candidate& candidate,
                                              const PlanOptions& options, double bound_s,
                                              std::string* skipped) {
  Result<BaselinePlan> laid = LayOutBaseline(candidate.strategy, batch, candidate.baseline);
  if (!laid.ok()) return laid.status();
  const double lower =
      AttentionLowerBoundSeconds(laid->blocks, laid->placement, laid->schedule,
                                 options.topology.devices(), options.cluster.device);
  if (lower > bound_s) {
    *skipped = fmt::format(
        "not planned: its attention alone takes at least {:.3f} ms on the cluster model, slower "
        "than a candidate of dcp's own ({:.3f} ms)",
        lower * 1e3, bound_s * 1e3);
    return std::nullopt;
  }
  Result<PlannedBatch> planned =
      PlanStatic(batch, candidate.strategy, candidate.baseline, std::move(*laid));
  if (!planned.ok()) return planned;
  const Result<double> replay = SimulationLowerBoundSeconds(planned->plan, options.cluster);
  if (replay.ok() && *replay > bound_s) {
    *skipped = fmt::format(
        "not simulated: its busiest compute stream or link alone takes at least {:.3f} ms on the "
        "cluster model, slower than a candidate of dcp's own ({:.3f} ms)",
        *replay * 1e3, bound_s * 1e3);
    return std::nullopt;
  }
  return planned;
}

Tried Try(const Batch& batch, const Candidate& candidate, const PlanOptions& options,
          double bound_s) {
  Tried t;
  t.outcome.own = candidate.own.has_value();
  t.outcome.name = candidate.name;
  std::optional<KeptPlan> kept;  // of dcp's own
  if (candidate.own) {
    t.planned = PlanOnce(batch, *candidate.own);
    if (t.planned->ok()) {
      Result<KeptPlan> spread = SpreadPeaks(batch, *candidate.own, &**t.planned);
      if (spread.ok()) {
        kept = *spread;
      } else {
        t.planned = spread.status();
      }
    }
  } else {
    t.planned = PlanOther(batch, candidate, options, bound_s, &t.outcome.error);
    if (!t.planned) {
      t.outcome.skipped = true;
      return t;
    }
  }
  Result<PlannedBatch>& planned = *t.planned;
  if (planned.ok()) {
    t.outcome.name = planned->plan.origin;
    std::tie(t.outcome.peak_bytes, t.outcome.peak_imbalance) =
        kept ? kept->peaks : Peaks(planned->plan);
    t.outcome.peak_share = PeakShare(batch, options, t.outcome.peak_bytes);
    Status budget = CheckMemoryBudget(planned->plan, options.memory_budget_bytes);
    if (!budget.ok()) {
      t.over_budget = true;
      planned = std::move(budget);
    } else if (kept && kept->seconds) {
      t.outcome.simulated_s = planned->simulated_s = *kept->seconds;
    } else if (Result<SimReport> report = SimulatePlan(planned->plan, options.cluster);
               report.ok()) {
      t.outcome.simulated_s = planned->simulated_s = report->total_s();
    } else {
      planned = report.status();
    }
  }
  if (!planned.ok()) t.outcome.error = planned.status().ToString();
  return t;
}

// The error when no candidate could be planned: the memory budget's, naming the smallest peak
// seen, or the first candidate's error.
Status NoCandidate(const std::vector<Tried>& tried, const PlanOptions& options) {
  const Tried* smallest = nullptr;
  for (const Tried& t : tried) {
    if (t.over_budget &&
        (smallest == nullptr || t.outcome.peak_bytes < smallest->outcome.peak_bytes)) {
      smallest = &t;
    }
  }
  if (smallest != nullptr) {
    return Status::InvalidArgument(fmt::format(
        "no plan fits the memory budget of {} bytes per device: the smallest peak among the {} "
        "candidates tried is {} bytes ({})",
        options.memory_budget_bytes, tried.size(), smallest->outcome.peak_bytes,
        smallest->outcome.name));
  }
  // Nothing is skipped unless a candidate was planned, so the first was tried and failed.
  return tried.front().planned->status().WithContext(
      fmt::format("candidate {}", tried.front().outcome.name));
}

// The best plan of dcp's own, its division count searched by simulation
// (DivisionChoice::kSimulate) when the candidates used the quick cost model: one candidate's
// search instead of every candidate's. Kept when faster and, beyond either memory bound
// (MemoryBalanced), no worse than before.
void RefineDivisions(const Batch& batch, const PlanOptions& own, const PlanOptions& options,
                     int32_t threads, PlannedBatch* best, CandidateOutcome* outcome) {
  if (own.divisions != 0 || own.division_choice != DivisionChoice::kCostModel) return;
  PlanOptions search = own;
  search.division_choice = DivisionChoice::kSimulate;
  search.threads = threads;  // the counts are replayed on these
  // The blocks and placement, not the plan, which the search compiles anew.
  PlannedBatch refined;
  refined.blocks = best->blocks;
  refined.placed = best->placed;
  refined.ms = best->ms;
  if (!ScheduleAndCompile(batch, search, 0, &refined).ok()) return;
  const auto [peak, spread] = Peaks(refined.plan);
  const double share = PeakShare(batch, options, peak);
  const TuningOptions& tuning = options.tuning;
  Result<SimReport> report = SimulatePlan(refined.plan, options.cluster);
  if (!report.ok() || report->total_s() >= best->simulated_s ||
      CheckMemoryBudget(refined.plan, options.memory_budget_bytes).ok() == false ||
      (spread > tuning.max_peak_imbalance && spread > outcome->peak_imbalance) ||
      (share > tuning.max_peak_share && share > outcome->peak_share)) {
    return;
  }
  refined.simulated_s = report->total_s();
  *best = std::move(refined);
  outcome->name = best->plan.origin;
  outcome->simulated_s = best->simulated_s;
  outcome->peak_bytes = peak;
  outcome->peak_imbalance = spread;
  outcome->peak_share = share;
}

// The fastest planned candidate and the fastest of those MemoryBalanced; ties go to the earlier
// candidate.
struct Fastest {
  std::optional<size_t> fastest, balanced;
};

Fastest FindFastest(const std::vector<Tried>& tried, const TuningOptions& tuning, bool own_only) {
  Fastest f;
  for (size_t i = 0; i < tried.size(); ++i) {
    const CandidateOutcome& o = tried[i].outcome;
    if (!Planned(tried[i]) || (own_only && !o.own)) continue;
    if (!f.fastest || o.simulated_s < tried[*f.fastest].outcome.simulated_s) f.fastest = i;
    if (MemoryBalanced(o, tuning) &&
        (!f.balanced || o.simulated_s < tried[*f.balanced].outcome.simulated_s)) {
      f.balanced = i;
    }
  }
  return f;
}

// The fastest planned candidate, or the fastest of those MemoryBalanced when it is within the
// slack of the fastest.
std::optional<size_t> Choose(const std::vector<Tried>& tried, const TuningOptions& tuning,
                             bool own_only) {
  const Fastest f = FindFastest(tried, tuning, own_only);
  if (f.balanced && tried[*f.balanced].outcome.simulated_s <=
                        tried[*f.fastest].outcome.simulated_s * (1 + tuning.balance_slack)) {
    return f.balanced;
  }
  return f.fastest;
}

// Empties the plans no later candidate can make chosen and returns them (to be freed outside any
// lock). Choose picks the fastest or the fastest balanced candidate, of all or of dcp's own, and
// a candidate that is none of these now never becomes one: later candidates only add rivals, and
// RefineDivisions only makes the best own and the runner-up faster (a released runner-up is
// planned again before its refinement). Its outcome stays; the tuning then holds a few
// plans, not one per candidate (a 3000-token sequence in blocks of 1 token: 9.6 GB before).
std::vector<PlannedBatch> ReleaseLosers(std::vector<Tried>& tried, const TuningOptions& tuning) {
  std::vector<PlannedBatch> released;
  const Fastest all = FindFastest(tried, tuning, /*own_only=*/false);
  const Fastest own = FindFastest(tried, tuning, /*own_only=*/true);
  for (size_t i = 0; i < tried.size(); ++i) {
    if (!Planned(tried[i]) || tried[i].released || i == all.fastest || i == all.balanced ||
        i == own.fastest || i == own.balanced) {
      continue;
    }
    released.push_back(std::move(**tried[i].planned));
    tried[i].released = true;
  }
  return released;
}

// The fastest planned candidate of dcp's own other than `best` (ties: the earlier), whose plan
// may have been released.
std::optional<size_t> RunnerUp(const std::vector<Tried>& tried, size_t best) {
  std::optional<size_t> next;
  for (size_t i = 0; i < tried.size(); ++i) {
    if (i == best || !Planned(tried[i]) || !tried[i].outcome.own) continue;
    if (!next || tried[i].outcome.simulated_s < tried[*next].outcome.simulated_s) next = i;
  }
  return next;
}

// The counts of tuning.head_groups dcp's best candidate is planned again with: those dividing the
// KV heads, other than PlanOptions::head_groups, each once.
std::vector<int64_t> HeadGroupsToTry(const Batch& batch, const PlanOptions& options) {
  std::vector<int64_t> counts;
  for (int64_t g : options.tuning.head_groups) {
    if (g != options.head_groups && batch.shape().kv_heads % g == 0 &&
        std::find(counts.begin(), counts.end(), g) == counts.end()) {
      counts.push_back(g);
    }
  }
  return counts;
}

// Whether a candidate of this many tiles is refined (split into head groups, tightened, sized in
// a close call): at most TuningOptions::split_max_tiles_per_device per device.
bool FewEnoughTilesToRefine(int64_t tiles, const PlanOptions& options) {
  return tiles <= options.tuning.split_max_tiles_per_device * options.topology.devices();
}

// dcp's own candidate `best` at `block_size` with TuningOptions::tightened.
Candidate AtTightened(const Candidate& best, int64_t block_size, const PlanOptions& options) {
  const Tolerances eps = *options.tuning.tightened;
  Candidate c = best;
  c.own->block_size = block_size;
  c.own->partition.eps_compute = eps.compute;
  c.own->partition.eps_inter = eps.inter;
  c.own->threads = options.threads;
  c.name = fmt::format("dcp {}:{}/{}{}", block_size, eps.compute, eps.inter,
                       HeadGroupsSuffix(c.own->head_groups));
  return c;
}

// dcp's own candidate `best`, planned with `tried`, again with TuningOptions::tightened, when they
// are tighter than its tolerances and it has few enough tiles
// (TuningOptions::split_max_tiles_per_device). A released plan's blocks are made again.
std::optional<Candidate> Tightened(const Batch& batch, const Candidate& best, const Tried& tried,
                                   const PlanOptions& options) {
  const Tolerances eps = *options.tuning.tightened;
  const PartitionOptions& own = best.own->partition;
  const bool tighter = eps.compute <= own.eps_compute && eps.inter <= own.eps_inter &&
                       (eps.compute < own.eps_compute || eps.inter < own.eps_inter);
  if (!tighter || !Planned(tried)) return std::nullopt;
  Result<BlockSet> remade = tried.released ? BlocksFor(batch, *best.own) : BlockSet{};
  if (!remade.ok()) return std::nullopt;
  const BlockSet& blocks = tried.released ? *remade : (**tried.planned).blocks;
  if (!FewEnoughTilesToRefine(static_cast<int64_t>(blocks.compute_blocks.size()), options)) {
    return std::nullopt;
  }
  return AtTightened(best, blocks.block_size, options);
}

// Whether the best of dcp's own (planned, so not released) is placed again from other seeds
// (TuningOptions::placement_restarts): when it has few enough tiles.
bool RestartsBest(const Tried& best, const PlanOptions& options) {
  return Planned(best) && !best.released &&
         FewEnoughTilesToRefine(static_cast<int64_t>((**best.planned).blocks.compute_blocks.size()),
                                options);
}

// At most this many block sizes in a close call (CloseCallBlockSizes).
constexpr int32_t kCloseCallSizes = 4;

// The block sizes of a close call (TuningOptions::close_call): about two blocks per device, then
// about one, the batch's tokens over twice the devices and over the devices, each rounded down and
// up to a multiple of kCloseCallBlockAlign (one size when that is exact; at least one alignment),
// without those that cut the batch into fewer blocks than there are devices (a block per device is
// the point; BlocksFit's looser rule is for the listed sizes).
std::vector<int64_t> CloseCallBlockSizes(const Batch& batch, const Topology& topology) {
  const int64_t tokens = batch.total_tokens();
  std::vector<int64_t> sizes;
  for (int64_t blocks_per_device : {2, 1}) {
    const int64_t step = blocks_per_device * topology.devices() * kCloseCallBlockAlign;
    for (int64_t aligned : {tokens / step, (tokens + step - 1) / step}) {
      const int64_t size = std::max<int64_t>(1, aligned) * kCloseCallBlockAlign;
      if (BlockCount(batch, size) >= topology.devices() &&
          std::find(sizes.begin(), sizes.end(), size) == sizes.end()) {
        sizes.push_back(size);
      }
    }
  }
  return sizes;
}

// Whether dcp's best own (tried[best_own]) is slower than the fastest candidate of another
// strategy, or less than `margin` faster than it.
bool IsCloseCall(const std::vector<Tried>& tried, size_t best_own, double margin) {
  std::optional<double> other;
  for (const Tried& t : tried) {
    if (Planned(t) && !t.outcome.own && (!other || t.outcome.simulated_s < *other)) {
      other = t.outcome.simulated_s;
    }
  }
  return other && tried[best_own].outcome.simulated_s > (1 - margin) * *other;
}

// dcp's own candidate `best` at block size `block_size` with TuningOptions::tightened, unless a
// candidate of dcp's own has those values already or its blocks have too many tiles
// (TuningOptions::split_max_tiles_per_device).
std::optional<Candidate> AtCloseCallBlockSize(const Batch& batch, const Candidate& best,
                                              int64_t block_size,
                                              const std::vector<Candidate>& candidates,
                                              const PlanOptions& options) {
  Candidate c = AtTightened(best, block_size, options);
  const auto same = [&](const Candidate& other) {
    return other.own && other.own->block_size == block_size &&
           other.own->head_groups == c.own->head_groups &&
           other.own->partition.eps_compute == c.own->partition.eps_compute &&
           other.own->partition.eps_inter == c.own->partition.eps_inter;
  };
  if (std::any_of(candidates.begin(), candidates.end(), same)) return std::nullopt;
  Result<BlockSet> blocks = BlocksFor(batch, *c.own);
  if (!blocks.ok() ||
      !FewEnoughTilesToRefine(static_cast<int64_t>(blocks->compute_blocks.size()), options)) {
    return std::nullopt;
  }
  return c;
}

// Plans every candidate on `threads` threads and keeps the fastest on the cluster model: dcp's
// own first; then the best of them and the runner-up get their division counts searched and are
// planned again split into head groups (HeadGroupsToTry), the fastest two tightened and the best
// placed again from other seeds (TuningOptions::placement_restarts); then the other strategies,
// each skipped when its layout's attention alone is slower than the own ones' WinningBound (so
// the choice is the one planning every candidate would make: 128K tokens on 4x8 skip TE, zigzag
// and LoongTrain on most batches, the costliest to compile, as they cut every sequence into 2 x
// devices chunks); then, in a close call, dcp's own at two blocks per device.
// Each stage's candidates are independent and the winner is chosen in candidate order, so the
// result does not depend on the thread count.
Result<PlannedBatch> Tune(const Batch& batch, const PlanOptions& options,
                          std::vector<Candidate> candidates) {
  const auto own = static_cast<int32_t>(std::count_if(candidates.begin(), candidates.end(),
                                                      [](const Candidate& c) { return c.own; }));
  // dcp's own come first (CandidatesOf); the best of them split into head groups after them.
  const std::vector<int64_t> head_groups = HeadGroupsToTry(batch, options);
  // Two refined candidates (the best own and the runner-up) are each split; then the fastest two
  // of dcp's own are tightened.
  const bool tighten = options.tuning.tightened && !options.tuning.tolerances.empty();
  // Then, in a close call, dcp's own at up to two more block sizes (not when the size is pinned).
  const bool close_calls =
      tighten && options.tuning.close_call.has_value() && options.block_size == 0;
  const int32_t restarts = options.tuning.placement_restarts;
  const auto refinements = 2 * static_cast<int32_t>(head_groups.size()) + (tighten ? 2 : 0) +
                           restarts + (close_calls ? kCloseCallSizes : 0);
  std::vector<Tried> tried(candidates.size());
  Stopwatch watch;
  const auto total = static_cast<int32_t>(candidates.size()) + refinements;
  int32_t done = 0;
  std::mutex done_mutex;  // one count and its report at a time, so reports come in order
  const auto report_done = [&] {
    const std::lock_guard<std::mutex> lock(done_mutex);
    ReportProgress(options.monitor, "candidates", ++done, total);
  };
  ReportProgress(options.monitor, "candidates", 0, total);
  std::mutex tried_mutex;  // tried, while candidates are planned on the threads
  const auto keep = [&](int32_t i, Tried t) {
    std::vector<PlannedBatch> released;  // freed after the lock: a large plan takes long to free
    {
      const std::lock_guard<std::mutex> lock(tried_mutex);
      tried[i] = std::move(t);
      released = ReleaseLosers(tried, options.tuning);
    }
  };
  const auto try_range = [&](int32_t begin, int32_t end, double bound_s) {
    internal::ParallelFor(end - begin, options.threads, [&](int32_t k) {
      const int32_t i = begin + k;
      if (CheckCancelled(options.monitor).ok()) {
        keep(i, Try(batch, candidates[i], options, bound_s));
      }
      report_done();
    });
  };
  constexpr double kNoBound = std::numeric_limits<double>::infinity();
  try_range(0, own, kNoBound);
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  std::optional<size_t> best_own = Choose(tried, options.tuning, /*own_only=*/true);
  int32_t others = own;  // the first candidate of another strategy
  // A refinement of dcp's own (a split, a tightening, a close call's block size): planned after
  // the own candidates before it, its division count searched.
  const auto plan_own = [&](Candidate c) {
    const Candidate& added = *candidates.insert(candidates.begin() + others, std::move(c));
    Tried& t = *tried.insert(tried.begin() + others, Try(batch, added, options, kNoBound));
    if (Planned(t)) {
      RefineDivisions(batch, *added.own, options, options.threads, &**t.planned, &t.outcome);
    }
    ReleaseLosers(tried, options.tuning);
    ++others;
  };
  // The best of dcp's own and the runner-up each get their division count searched, then are
  // planned again split into head groups, each of those as the others were and then searching its
  // own count (the split pays only with its own count). Refining only the best made a larger
  // candidate set choose worse whenever the runner-up gained more from its refinement. One after
  // the other, each on every thread: the division counts are replayed at once (the same plans on
  // any thread count). The other strategies are held to the best.
  std::vector<size_t> to_refine;
  if (best_own) {
    to_refine.push_back(*best_own);
    if (std::optional<size_t> next = RunnerUp(tried, *best_own)) to_refine.push_back(*next);
  }
  for (const size_t index : to_refine) {
    DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
    const Candidate refined = candidates[index];
    // A released plan is planned again: the same plan.
    if (tried[index].released) tried[index] = Try(batch, refined, options, kNoBound);
    if (!Planned(tried[index])) continue;
    RefineDivisions(batch, *refined.own, options, options.threads, &**tried[index].planned,
                    &tried[index].outcome);
    const auto tiles = static_cast<int64_t>((*tried[index].planned)->blocks.compute_blocks.size());
    ReleaseLosers(tried, options.tuning);
    if (!FewEnoughTilesToRefine(tiles, options)) continue;
    for (int64_t g : head_groups) {
      DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
      Candidate c = refined;
      c.own->head_groups = g;
      c.own->threads = options.threads;
      c.name += HeadGroupsSuffix(g);
      plan_own(std::move(c));
      report_done();
    }
  }
  best_own = Choose(tried, options.tuning, /*own_only=*/true);
  if (best_own && tighten) {
    std::vector<size_t> to_tighten = {*best_own};
    if (std::optional<size_t> next = RunnerUp(tried, *best_own)) to_tighten.push_back(*next);
    std::vector<std::pair<int64_t, int64_t>> made;  // (block size, head groups): one plan each
    for (const size_t index : to_tighten) {         // both before `others`, where the new ones go
      DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
      std::optional<Candidate> c = Tightened(batch, candidates[index], tried[index], options);
      if (c && std::find(made.begin(), made.end(),
                         std::pair{c->own->block_size, c->own->head_groups}) == made.end()) {
        made.emplace_back(c->own->block_size, c->own->head_groups);
        plan_own(*std::move(c));
      }
      report_done();
    }
    best_own = Choose(tried, options.tuning, /*own_only=*/true);
  }
  // The best of dcp's own placed again from other seeds, each searching its division count.
  if (best_own && restarts > 0 && RestartsBest(tried[*best_own], options)) {
    const Candidate best = candidates[*best_own];
    for (int32_t r = 1; r <= restarts; ++r) {
      DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
      Candidate c = best;
      c.own->partition.seed += static_cast<uint64_t>(r);
      c.own->threads = options.threads;
      c.name += SeedSuffix(c.own->partition.seed);
      plan_own(std::move(c));
      report_done();
    }
    best_own = Choose(tried, options.tuning, /*own_only=*/true);
  }
  // The refinements not made count as done.
  done = own + refinements - (close_calls ? kCloseCallSizes : 0);
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  try_range(others, static_cast<int32_t>(candidates.size()), WinningBound(tried, options.tuning));
  DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  // A close call with another strategy: dcp's own at about two blocks per device. The other
  // strategies skipped above stay skipped: they were slower than a plan of dcp's own already.
  if (close_calls && best_own && IsCloseCall(tried, *best_own, *options.tuning.close_call)) {
    const Candidate best = candidates[*best_own];
    for (int64_t block_size : CloseCallBlockSizes(batch, options.topology)) {
      DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
      std::optional<Candidate> c =
          AtCloseCallBlockSize(batch, best, block_size, candidates, options);
      if (c) plan_own(*std::move(c));
      report_done();
    }
    best_own = Choose(tried, options.tuning, /*own_only=*/true);
    DCP_RETURN_IF_ERROR(CheckCancelled(options.monitor));
  }
  while (close_calls && done < total) report_done();  // the block sizes not tried
  const double tuning_ms = watch.Lap();

  const std::optional<size_t> best = Choose(tried, options.tuning, /*own_only=*/false);
  if (!best) return NoCandidate(tried, options);
  if (tried[*best].released) return Status::Internal("tuning: the chosen plan was released");
  PlannedBatch chosen = std::move(*tried[*best].planned).value();
  chosen.ms.search = std::max(0.0, watch.Lap() + tuning_ms - chosen.ms.total());
  chosen.best_own = best_own;
  for (Tried& t : tried) chosen.candidates.push_back(std::move(t.outcome));
  return chosen;
}

}  // namespace

Status TuningOptions::Validate() const {
  for (int64_t b : block_sizes) {
    if (b < 1 || b > kMaxSequenceLength) {
      return Status::InvalidArgument(
          fmt::format("PlanOptions.tuning.block_sizes holds {}; block sizes must be in [1, {}]", b,
                      kMaxSequenceLength));
    }
  }
  for (Tolerances eps : tolerances) {
    PartitionOptions p;
    p.eps_compute = eps.compute;
    p.eps_inter = eps.inter;
    DCP_RETURN_IF_ERROR(p.Validate().WithContext("PlanOptions.tuning.tolerances"));
  }
  if (tightened) {
    PartitionOptions p;
    p.eps_compute = tightened->compute;
    p.eps_inter = tightened->inter;
    DCP_RETURN_IF_ERROR(p.Validate().WithContext("PlanOptions.tuning.tightened"));
  }
  if (close_call && !(*close_call >= 0 && *close_call <= 1)) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.tuning.close_call {} must be in [0, 1] (a fraction of the other strategy's "
        "time)",
        *close_call));
  }
  if (!(balance_slack >= 0)) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.tuning.balance_slack {} must be >= 0", balance_slack));
  }
  if (!(max_peak_share > 0)) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.tuning.max_peak_share {} must be > 0 (a multiple of a device's share of the "
        "batch)",
        max_peak_share));
  }
  if (!(max_peak_imbalance >= 1)) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.tuning.max_peak_imbalance {} must be >= 1 (max/mean)", max_peak_imbalance));
  }
  for (int64_t g : head_groups) {
    if (g < 1) {
      return Status::InvalidArgument(
          fmt::format("PlanOptions.tuning.head_groups holds {}; head groups must be >= 1", g));
    }
  }
  if (max_tiles_per_device < 0) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.tuning.max_tiles_per_device {} must be >= 0", max_tiles_per_device));
  }
  if (split_max_tiles_per_device < 0) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.tuning.split_max_tiles_per_device {} must be >= 0",
                    split_max_tiles_per_device));
  }
  if (placement_restarts < 0 || placement_restarts > kMaxPlacementRestarts) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.tuning.placement_restarts {} must be in [0, {}]",
                    placement_restarts, kMaxPlacementRestarts));
  }
  if (max_candidates < 1 || max_candidates > kMaxCandidates) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.tuning.max_candidates {} must be in [1, {}]", max_candidates, kMaxCandidates));
  }
  return Status::Ok();
}

Status PlanOptions::Validate() const {
  DCP_RETURN_IF_ERROR(topology.Validate().WithContext("PlanOptions.topology"));
  DCP_RETURN_IF_ERROR(cluster.Validate().WithContext("PlanOptions.cluster"));
  DCP_RETURN_IF_ERROR(cluster.CheckHolds(topology).WithContext("PlanOptions"));
  if (block_size < 0 || block_size > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.block_size {} must be in [1, {}], or 0 to tune it", block_size,
                    kMaxSequenceLength));
  }
  DCP_RETURN_IF_ERROR(partition.Validate().WithContext("PlanOptions.partition"));
  DCP_RETURN_IF_ERROR(tuning.Validate());
  DCP_RETURN_IF_ERROR(SchedulerOptionsFor(*this).Validate().WithContext("PlanOptions"));
  if (threads < 1 || threads > PartitionOptions::kMaxThreads) {
    return Status::InvalidArgument(fmt::format("PlanOptions.threads {} must be in [1, {}]", threads,
                                               PartitionOptions::kMaxThreads));
  }
  if (placement && block_size == 0) {
    return Status::InvalidArgument(
        "PlanOptions.placement is given: block_size must be the block size it was made for");
  }
  if (memory_budget_bytes < 0) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.memory_budget_bytes {} must be >= 0 (0: no budget)", memory_budget_bytes));
  }
  if (max_planning_bytes < 0) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.max_planning_bytes {} must be >= 0 (0: 80% of the memory this "
                    "process may have)",
                    max_planning_bytes));
  }
  return Status::Ok();
}

PlanOptions SinglePassOptions(const Topology& topology, int64_t block_size) {
  PlanOptions options;
  options.topology = topology;
  options.block_size = block_size;
  options.tuning.tolerances.clear();
  options.tuning.other_strategies = false;
  return options;
}

int64_t BatchShareBytes(const Batch& batch, int32_t devices) {
  const AttentionShape& s = batch.shape();
  // Q, O, dO and dQ have a row per query head, K, V, dK and dV one per KV head.
  const int64_t storage = BytesPerElement(s.dtype) * s.head_dim * (4 * s.heads + 4 * s.kv_heads);
  const int64_t fp32 = BytesPerElement(DType::kFloat32) * 2 * s.heads;  // LSE and Delta
  const int64_t bytes = batch.total_tokens() * (storage + fp32);
  return devices > 0 ? (bytes + devices - 1) / devices : bytes;
}

std::vector<int64_t> PeakBufferBytesPerDevice(const Plan& plan) {
  std::vector<int64_t> peak;
  for (size_t d = 0; d < plan.forward.size() && d < plan.backward.size(); ++d) {
    peak.push_back(std::max(plan.forward[d].PeakBufferBytes(), plan.backward[d].PeakBufferBytes()));
  }
  return peak;
}

Result<PlannedBatch> PlanBatch(const Batch& batch, const PlanOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  // A value that fits no batch of this shape is the caller's error, not a candidate's failure.
  if (options.head_groups < 1 || batch.shape().kv_heads % options.head_groups != 0) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.head_groups {} does not divide the "
                    "batch's {} KV heads",
                    options.head_groups, batch.shape().kv_heads));
  }
  if (options.placement) {
    DCP_ASSIGN_OR_RETURN(PlannedBatch planned, PlanGiven(batch, options));
    DCP_RETURN_IF_ERROR(CheckMemoryBudget(planned.plan, options.memory_budget_bytes));
    return planned;
  }
  const std::vector<Candidate> candidates = CandidatesOf(batch, options);
  if (candidates.size() == 1 && candidates.front().own) {  // every value pinned: one pass
    DCP_ASSIGN_OR_RETURN(PlannedBatch planned,
                         PlanOnce(batch, *candidates.front().own, /*report_phases=*/true));
    DCP_RETURN_IF_ERROR(CheckMemoryBudget(planned.plan, options.memory_budget_bytes));
    return planned;
  }
  return Tune(batch, options, std::move(candidates));
}

}  // namespace dcp
