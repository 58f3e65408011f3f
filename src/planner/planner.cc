// SPDX-License-Identifier: Apache-2.0
// The planner: blocking, placement, scheduling and compilation of one batch, and the candidate
// search around them (block sizes x tolerances, each simulated on the cluster model).
#include "dcp/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <thread>

#include "util/stopwatch.h"

namespace dcp {
namespace {

constexpr int32_t kMaxThreads = 1024;

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

Status CheckMemoryBudget(const Plan& plan, int64_t budget) {
  if (budget <= 0) return Status::Ok();
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(plan);
  const auto worst = std::max_element(peak.begin(), peak.end());
  if (worst != peak.end() && *worst > budget) {
    return Status::InvalidArgument(fmt::format(
        "device {} needs {} bytes of buffers, above the memory budget of {} bytes",
        worst - peak.begin(), *worst, budget));
  }
  return Status::Ok();
}

// One pass of the pipeline with every value pinned (block size, tolerances).
Result<PlannedBatch> PlanOnce(const Batch& batch, const PlanOptions& options) {
  PlannedBatch out;
  Stopwatch watch;
  BlockingOptions blocking{.block_size = options.block_size, .head_groups = options.head_groups};
  if (blocking.block_size == 0) {
    DCP_ASSIGN_OR_RETURN(
        BlockSizeChoice choice,
        ChooseBlockSize(batch.seqlens(), BlockSizeOptions{.devices = options.topology.devices(),
                                                          .eps_memory =
                                                              options.partition.eps_memory}));
    blocking.block_size = choice.block_size;
  }
  DCP_ASSIGN_OR_RETURN(out.blocks, MakeBlocks(batch, blocking));
  out.ms.blocking = watch.Lap();
  DCP_ASSIGN_OR_RETURN(out.placed, PartitionBlocks(out.blocks, options.topology, options.partition));
  out.ms.placement = watch.Lap();
  const ScheduleOptions scheduler = SchedulerOptionsFor(options);
  DCP_ASSIGN_OR_RETURN(
      Schedule schedule,
      options.division_choice == DivisionChoice::kSimulate
          ? ScheduleBySimulation(batch, out.blocks, out.placed.placement, options.topology,
                                 scheduler, options.cluster)
          : ScheduleDivisions(out.blocks, out.placed.placement, options.topology, scheduler));
  out.ms.scheduling = watch.Lap();
  DCP_ASSIGN_OR_RETURN(out.plan, CompilePlan(batch, out.blocks, out.placed.placement, schedule,
                                             options.topology));
  out.ms.compile = watch.Lap();
  DCP_RETURN_IF_ERROR(CheckMemoryBudget(out.plan, options.memory_budget_bytes));
  out.candidate = fmt::format("{}:{}/{}:{}", out.blocks.block_size, options.partition.eps_compute,
                              options.partition.eps_inter, out.plan.n_divisions);
  return out;
}

// Plans every (block size, tolerances) candidate on `threads` threads and keeps the fastest on
// the cluster model. Candidates are independent and the winner is chosen in candidate order, so
// the result does not depend on the thread count.
Result<PlannedBatch> SearchCandidates(const Batch& batch, const PlanOptions& options) {
  std::vector<PlanOptions> candidates;
  const std::vector<int64_t> block_sizes = options.candidate_block_sizes.empty()
                                               ? std::vector<int64_t>{options.block_size}
                                               : options.candidate_block_sizes;
  const std::vector<Tolerances> tolerances =
      options.candidate_tolerances.empty()
          ? std::vector<Tolerances>{{options.partition.eps_compute, options.partition.eps_inter}}
          : options.candidate_tolerances;
  for (int64_t block_size : block_sizes) {
    for (Tolerances eps : tolerances) {
      PlanOptions& c = candidates.emplace_back(options);
      c.block_size = block_size;
      c.partition.eps_compute = eps.compute;
      c.partition.eps_inter = eps.inter;
    }
  }
  struct Outcome {
    std::optional<Result<PlannedBatch>> planned;
    double seconds = 0;
  };
  std::vector<Outcome> outcomes(candidates.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      Result<PlannedBatch> planned = PlanOnce(batch, candidates[i]);
      if (planned.ok()) {
        Result<SimReport> report = SimulatePlan(planned->plan, options.cluster);
        if (!report.ok()) {
          planned = report.status();
        } else {
          outcomes[i].seconds = report->total_s();
        }
      }
      outcomes[i].planned = std::move(planned);
    }
  };
  Stopwatch watch;
  const size_t threads =
      std::min(static_cast<size_t>(options.threads), std::max<size_t>(candidates.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  const double search_ms = watch.Lap();

  std::optional<size_t> best;
  Status first_error;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Result<PlannedBatch>& planned = *outcomes[i].planned;
    if (!planned.ok()) {
      if (first_error.ok()) {
        first_error = planned.status().WithContext(fmt::format(
            "candidate block size {}, tolerances {}/{}", candidates[i].block_size,
            candidates[i].partition.eps_compute, candidates[i].partition.eps_inter));
      }
      continue;
    }
    if (!best || outcomes[i].seconds < outcomes[*best].seconds) best = i;
  }
  if (!best) return first_error;
  PlannedBatch chosen = std::move(*outcomes[*best].planned).value();
  chosen.simulated_s = outcomes[*best].seconds;
  chosen.ms.search = std::max(0.0, search_ms - chosen.ms.total());
  return chosen;
}

}  // namespace

Status PlanOptions::Validate() const {
  DCP_RETURN_IF_ERROR(topology.Validate().WithContext("PlanOptions.topology"));
  DCP_RETURN_IF_ERROR(cluster.Validate().WithContext("PlanOptions.cluster"));
  if (block_size < 0) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.block_size {} must be >= 1, or 0 for automatic", block_size));
  }
  for (int64_t b : candidate_block_sizes) {
    if (b < 1) {
      return Status::InvalidArgument(
          fmt::format("PlanOptions.candidate_block_sizes holds {}; block sizes must be >= 1", b));
    }
  }
  for (Tolerances eps : candidate_tolerances) {
    PartitionOptions p = partition;
    p.eps_compute = eps.compute;
    p.eps_inter = eps.inter;
    DCP_RETURN_IF_ERROR(p.Validate().WithContext("PlanOptions.candidate_tolerances"));
  }
  DCP_RETURN_IF_ERROR(partition.Validate().WithContext("PlanOptions.partition"));
  DCP_RETURN_IF_ERROR(SchedulerOptionsFor(*this).Validate().WithContext("PlanOptions"));
  if (threads < 1 || threads > kMaxThreads) {
    return Status::InvalidArgument(
        fmt::format("PlanOptions.threads {} must be in [1, {}]", threads, kMaxThreads));
  }
  const bool simulates = division_choice == DivisionChoice::kSimulate ||
                         !candidate_block_sizes.empty() || !candidate_tolerances.empty();
  if (simulates && cluster.devices_per_node != topology.devices_per_node) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions: the search simulates plans on cluster '{}' of {} devices per node, but the "
        "topology {} has {}",
        cluster.name, cluster.devices_per_node, topology.ToString(), topology.devices_per_node));
  }
  if (memory_budget_bytes < 0) {
    return Status::InvalidArgument(fmt::format(
        "PlanOptions.memory_budget_bytes {} must be >= 0 (0: no budget)", memory_budget_bytes));
  }
  return Status::Ok();
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
  if (!options.candidate_block_sizes.empty() || !options.candidate_tolerances.empty()) {
    return SearchCandidates(batch, options);
  }
  return PlanOnce(batch, options);
}

}  // namespace dcp
