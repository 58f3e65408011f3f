// SPDX-License-Identifier: Apache-2.0
#include "cli/planning.h"

#include <stdexcept>
#include <string>

namespace dcp::cli {

Result<Scheduling> SchedulingFor(const std::string& divisions, const ClusterSpec& cluster) {
  ScheduleOptions options;
  if (divisions != "auto" && divisions != "search") {
    try {
      size_t used = 0;
      options.divisions = std::stoi(divisions, &used);
      if (used != divisions.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      return Status::InvalidArgument(
          fmt::format("--divisions '{}' is not a number, 'auto' or 'search'", divisions));
    }
  }
  options.device_flops = cluster.device.peak_flops * cluster.device.attention.forward_efficiency;
  options.intra_node_bytes_per_s = cluster.intra_node.bytes_per_s;
  options.inter_node_bytes_per_s = cluster.inter_node.bytes_per_s;
  DCP_RETURN_IF_ERROR(options.Validate());
  Scheduling scheduling{.options = options, .search_on = std::nullopt};
  if (divisions == "search") scheduling.search_on = cluster;
  return scheduling;
}

Result<PlannedBatch> PlanBatch(Batch batch, const BlockingOptions& blocking,
                               const Topology& topology, const PartitionOptions& partition,
                               const Scheduling& scheduling) {
  DCP_RETURN_IF_ERROR(scheduling.options.Validate());
  PlanningTimes ms;
  Stopwatch watch;
  DCP_ASSIGN_OR_RETURN(BlockSet blocks, MakeBlocks(batch, blocking));
  ms.blocking = watch.Lap();
  DCP_ASSIGN_OR_RETURN(PartitionResult placed, PartitionBlocks(blocks, topology, partition));
  ms.placement = watch.Lap();
  DCP_ASSIGN_OR_RETURN(
      Schedule schedule,
      scheduling.search_on
          ? ScheduleBySimulation(batch, blocks, placed.placement, topology, scheduling.options,
                                 *scheduling.search_on)
          : ScheduleDivisions(blocks, placed.placement, topology, scheduling.options));
  ms.scheduling = watch.Lap();
  DCP_ASSIGN_OR_RETURN(Plan plan, CompilePlan(batch, blocks, placed.placement, schedule, topology));
  ms.compile = watch.Lap();
  return PlannedBatch{.batch = std::move(batch),
                      .blocks = std::move(blocks),
                      .topology = topology,
                      .placed = std::move(placed),
                      .plan = std::move(plan),
                      .ms = ms};
}

Result<PlannedBatch> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                  const Scheduling& scheduling) {
  DCP_ASSIGN_OR_RETURN(Batch batch, BuildBatch(batch_args));
  DCP_ASSIGN_OR_RETURN(BlockingOptions blocking, BuildBlockingOptions(batch_args, batch));
  DCP_ASSIGN_OR_RETURN(Topology topology, Topology::Parse(placement.topology));
  DCP_ASSIGN_OR_RETURN(PartitionOptions partition, BuildPartitionOptions(batch_args, placement));
  return PlanBatch(std::move(batch), blocking, topology, partition, scheduling);
}

}  // namespace dcp::cli
