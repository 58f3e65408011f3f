// SPDX-License-Identifier: Apache-2.0
// The planner: the whole planning flow for one batch (blocks, placement, schedule, compiled and
// checked programs) from one PlanOptions. Every caller plans through it: the `dcp` command, the
// benchmarks and the Python package.
//
// The attention shape (heads, KV heads, head dim, storage dtype) is the Batch's own
// (Batch::Create): blocks, FLOPs and bytes are derived from it, so it is not repeated here.
//
// Thread safety: PlanBatch is a pure function of its arguments; concurrent calls are safe. The
// same batch and options give the same plan, whatever the machine's load and `threads`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "dcp/plan.h"
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
  kSimulate = 1,   // compile and simulate every count on `cluster`, keep the fastest (slower)
};

struct PlanOptions {
  // --- What the plan is for.
  // Nodes x devices per node; the plan has one forward and one backward program per device.
  Topology topology = {.nodes = 1, .devices_per_node = 1};
  // The cluster the plan is costed for: the scheduler's division cost model, the division and
  // candidate searches. When a search simulates plans on it, its devices_per_node must be the
  // topology's.
  ClusterSpec cluster = {};

  // --- Blocking.
  // Tokens per data block; 0 picks the largest power of two that spreads the batch's blocks over
  // the topology's devices within partition.eps_memory (ChooseBlockSize).
  int64_t block_size = 1024;
  // Compute blocks per tile: divides the batch's KV heads.
  int64_t head_groups = 1;

  // --- Placement: partitioner, tolerances (compute, inter-node, memory), seed.
  PartitionOptions partition = {};

  // --- Scheduling.
  // Divisions per pass; 0 lets `division_choice` pick.
  int32_t divisions = 0;
  DivisionChoice division_choice = DivisionChoice::kCostModel;

  // --- Candidate search. When either list is non-empty, every (block size, tolerances) pair
  // (an empty list stands for this options' own value) is planned, simulated on `cluster`, and
  // the fastest plan is kept; PlannedBatch::candidate names it. Ties keep the earlier candidate.
  std::vector<int64_t> candidate_block_sizes = {};
  std::vector<Tolerances> candidate_tolerances = {};
  // Threads planning candidates at once (>= 1). The result does not depend on it.
  int32_t threads = 1;

  // --- Memory. When > 0, every device's peak buffer bytes (the larger of its forward and backward
  // programs) must stay within it; a plan above it is refused (InvalidArgument naming the device
  // and its peak), and in a candidate search such candidates are skipped.
  int64_t memory_budget_bytes = 0;

  // InvalidArgument naming the field when a value is out of range.
  Status Validate() const;
};

// Milliseconds per phase of the chosen plan; building the batch itself is not counted.
struct PlanningTimes {
  double blocking = 0, placement = 0, scheduling = 0, compile = 0;
  double search = 0;  // the candidate search around them, when there was one (wall clock)
  double total() const { return blocking + placement + scheduling + compile + search; }
};

struct PlannedBatch {
  BlockSet blocks;
  PartitionResult placed;  // the placement and its report
  Plan plan;
  PlanningTimes ms;
  // "block size:eps compute/eps inter:divisions" of the plan, e.g. "2048:0.05/0.05:9".
  std::string candidate;
  // The simulated forward + backward time on options.cluster, in seconds, when a candidate
  // search ran (0 otherwise).
  double simulated_s = 0;
};

// Blocks, places, schedules and compiles `batch` into one forward and one backward program per
// device, timing each phase. Errors: InvalidArgument for bad options or a batch the options
// cannot plan (the message names the value), and whatever a phase returns.
Result<PlannedBatch> PlanBatch(const Batch& batch, const PlanOptions& options);

// Peak buffer bytes of every device: the larger of its forward and backward programs'.
std::vector<int64_t> PeakBufferBytesPerDevice(const Plan& plan);

}  // namespace dcp
