// SPDX-License-Identifier: Apache-2.0
// The planning pipeline shared by `dcp plan` and `dcp run`: batch, blocks, placement, schedule and
// plan from the command-line options, with the time of each phase.
#pragma once

#include <chrono>
#include <optional>

#include "cli/batch_args.h"
#include "dcp/plan.h"
#include "dcp/schedule.h"
#include "dcp/sim.h"

namespace dcp::cli {

class Stopwatch {
 public:
  // Milliseconds since the previous lap (or construction).
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

struct PlanningTimes {  // milliseconds per phase; building the batch itself is not counted
  double blocking = 0, placement = 0, scheduling = 0, compile = 0;
  double total() const { return blocking + placement + scheduling + compile; }
};

struct PlannedBatch {
  Batch batch;
  BlockSet blocks;
  Topology topology;
  PartitionResult placed;
  Plan plan;
  PlanningTimes ms;
};

// How the divisions are chosen: the scheduler's options and, for --divisions search, the cluster
// on which ScheduleBySimulation replays every division count.
struct Scheduling {
  ScheduleOptions options;
  std::optional<ClusterSpec> search_on;
};

// Scheduling from --divisions ("auto", "search" or a number), with the scheduler's cost model
// taken from the cluster the plan is for, so divisions are sized for that machine.
Result<Scheduling> SchedulingFor(const std::string& divisions, const ClusterSpec& cluster = {});

// Blocks, places, schedules and compiles `batch`, timing each phase.
Result<PlannedBatch> PlanBatch(Batch batch, const BlockingOptions& blocking,
                               const Topology& topology, const PartitionOptions& partition,
                               const Scheduling& scheduling);

// PlanBatch of the batch and options the command line describes.
Result<PlannedBatch> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                  const Scheduling& scheduling);

}  // namespace dcp::cli
