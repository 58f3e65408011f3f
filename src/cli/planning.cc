// SPDX-License-Identifier: Apache-2.0
#include "cli/planning.h"

#include <charconv>

namespace dcp::cli {

Result<PlanOptions> PlanOptionsFromArgs(const BatchArgs& batch_args, const Batch& batch,
                                        const PlacementArgs& placement,
                                        const std::string& divisions,
                                        const ClusterSpec& cluster) {
  PlanOptions options{.cluster = cluster};
  DCP_ASSIGN_OR_RETURN(options.topology, Topology::Parse(placement.topology));
  DCP_ASSIGN_OR_RETURN(BlockingOptions blocking, BuildBlockingOptions(batch_args, batch));
  options.block_size = blocking.block_size;
  options.head_groups = blocking.head_groups;
  DCP_ASSIGN_OR_RETURN(options.partition, BuildPartitionOptions(batch_args, placement));
  if (divisions == "search") {
    options.division_choice = DivisionChoice::kSimulate;
  } else if (divisions != "auto") {
    const auto [end, ec] =
        std::from_chars(divisions.data(), divisions.data() + divisions.size(), options.divisions);
    if (ec != std::errc() || end != divisions.data() + divisions.size() || options.divisions < 1) {
      return Status::InvalidArgument(fmt::format(
          "--divisions '{}' is not a number >= 1, 'auto' or 'search'", divisions));
    }
  }
  DCP_RETURN_IF_ERROR(options.Validate());
  return options;
}

Result<PlannedFromArgs> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                     const std::string& divisions, const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(Batch batch, BuildBatch(batch_args));
  DCP_ASSIGN_OR_RETURN(PlanOptions options,
                       PlanOptionsFromArgs(batch_args, batch, placement, divisions, cluster));
  DCP_ASSIGN_OR_RETURN(PlannedBatch planned, PlanBatch(batch, options));
  return PlannedFromArgs{.batch = std::move(batch), .planned = std::move(planned)};
}

nlohmann::json TokenMapJson(const TokenMap& map) {
  nlohmann::json devices = nlohmann::json::array();
  for (const std::vector<TokenRun>& runs : map.runs) {
    nlohmann::json device = nlohmann::json::array();
    for (const TokenRun& run : runs) {
      device.push_back({{"sequence", run.sequence.value}, {"begin", run.begin}, {"count", run.count}});
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace dcp::cli
