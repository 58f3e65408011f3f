// SPDX-License-Identifier: Apache-2.0
// Command-line options to the library planner (include/dcp/planner.h), shared by `dcp plan`,
// `run` and `simulate`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cli/batch_args.h"
#include "dcp/planner.h"
#include "dcp/token_map.h"
#include "util/stopwatch.h"

namespace dcp::cli {

using internal::Stopwatch;

// The planner's options from the batch and placement options, --divisions ("auto": the
// scheduler's cost model, "search": simulate every count, or a number) and the cluster the plan
// is for.
Result<PlanOptions> PlanOptionsFromArgs(const BatchArgs& batch_args, const Batch& batch,
                                        const PlacementArgs& placement,
                                        const std::string& divisions,
                                        const ClusterSpec& cluster = {});

struct PlannedFromArgs {
  Batch batch;
  PlannedBatch planned;
};

// The batch the command line describes, planned by PlanBatch.
Result<PlannedFromArgs> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                     const std::string& divisions,
                                     const ClusterSpec& cluster = {});

// The token map as `dcp plan --json` and `dcp place --json` print it: one array per device of
// {"sequence", "begin", "count"} objects, in the device's local order.
nlohmann::json TokenMapJson(const TokenMap& map);

}  // namespace dcp::cli
