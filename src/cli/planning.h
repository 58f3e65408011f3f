// SPDX-License-Identifier: Apache-2.0
// Command-line options to the library planner (include/dcp/planner.h), shared by `dcp plan`,
// `run` and `simulate`: what a user leaves out is tuned (block size, tolerances, divisions, and
// the static layouts as candidates), what a user gives is pinned.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/batch_args.h"
#include "dcp/baselines.h"
#include "dcp/planner.h"
#include "dcp/token_map.h"
#include "util/stopwatch.h"

namespace dcp::cli {

using internal::Stopwatch;

struct PlannerArgs {
  std::string divisions = "auto";  // "auto" (cost model), "search" (simulate each count), or N
  std::string cluster = "p4de";    // preset or JSON file: the cost model of the tuning
  int32_t threads = 0;             // 0: one per core
  int32_t max_candidates = TuningOptions{}.max_candidates;
  bool dcp_only = false;           // no static layouts among the candidates
  int64_t memory_budget = 0;       // bytes of buffers per device; 0: none
  int64_t max_planning_memory = 0;  // bytes planning may take; 0: 80% of this machine's memory
  std::string read_partition;      // a placement file to plan as given; empty: dcp places
};

void AddPlannerOptions(CLI::App& app, PlannerArgs& args);

// InvalidArgument when --read-partition comes with another strategy than dcp: that strategy has
// its own placement.
Status CheckPartitionWithStrategy(const PlannerArgs& planner, Strategy strategy);

// A preset name, or a JSON file in the format of docs/simulator.md.
Result<ClusterSpec> LoadCluster(const std::string& name);

// Threads when none are asked for (--threads 0): one per core, 1 to PartitionOptions::kMaxThreads.
int32_t HardwareThreads();

// The planner's options from the batch, placement and planner options.
Result<PlanOptions> PlanOptionsFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                        const PlannerArgs& planner);

struct PlannedFromArgs {
  Batch batch;
  PlannedBatch planned;
  int64_t empty_sequences = 0;  // of an --idx file, left out of the batch
};

// The batch the command line describes, planned by PlanBatch. With `progress`, a progress line on
// stderr once planning has taken a second, when stderr is a terminal (commands pass !--json).
Result<PlannedFromArgs> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                     const PlannerArgs& planner, bool progress);

// The candidates of a tuning as JSON: [{"name", "own", "simulated_ms", "peak_bytes", "error"}].
nlohmann::json CandidatesJson(const PlannedBatch& planned);

// The token map as `dcp plan --json` and `dcp place --json` print it: one array per device of
// {"sequence", "begin", "count"} objects, in the device's local order.
nlohmann::json TokenMapJson(const TokenMap& map);

}  // namespace dcp::cli
