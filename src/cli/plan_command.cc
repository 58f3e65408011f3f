// SPDX-License-Identifier: Apache-2.0
// `dcp plan`: block, place, schedule and compile a batch; report per-phase time, traffic, balance
// and buffers; optionally validate, dump or write the plan.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/planning.h"

namespace dcp::cli {
namespace {

struct PlanArgs {
  PlacementArgs placement;
  PlannerArgs planner;
  std::string output;
  bool check = false;
  bool dump = false;
  bool json = false;
};

// max/mean of the FLOPs each device computes in one pass.
double ComputeImbalance(const BlockSet& blocks, const Placement& placement, int32_t devices,
                        Pass pass) {
  std::vector<double> load(devices, 0);
  double total = 0;
  for (size_t c = 0; c < blocks.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = blocks.compute_blocks[c];
    const auto flops =
        static_cast<double>(pass == Pass::kForward ? blocks.FlopsFwd(cb) : blocks.FlopsBwd(cb));
    load[placement.compute_device[c].value] += flops;
    total += flops;
  }
  if (total == 0) return 1;
  return *std::max_element(load.begin(), load.end()) * devices / total;
}

nlohmann::json PassJson(const Plan& plan, const BlockSet& blocks, const Placement& placement,
                        Pass pass) {
  const PlanTraffic t = MeasureTraffic(plan, pass);
  return {
      {"bytes_inter_node", t.bytes_inter_node},
      {"bytes_intra_node", t.bytes_intra_node},
      {"max_device_bytes_inter_node", t.max_device_bytes_inter_node},
      {"compute_imbalance", ComputeImbalance(blocks, placement, plan.topology.devices(), pass)}};
}

int Run(const BatchArgs& batch_args, const PlanArgs& args) {
  Result<PlannedFromArgs> planned =
      PlanFromArgs(batch_args, args.placement, args.planner, /*progress=*/!args.json);
  if (!planned.ok()) return ReportError(planned.status());
  const BlockSet* blocks = &planned->planned.blocks;
  const PartitionResult* placed = &planned->planned.placed;
  const Plan* plan = &planned->planned.plan;
  const Topology* topology = &plan->topology;
  const PlanningTimes& ms = planned->planned.ms;

  if (args.check) {
    if (Status s = ValidatePlan(*plan); !s.ok()) return ReportError(s.WithContext("plan check"));
  }
  if (!args.output.empty()) {
    if (Status s = WritePlanFile(*plan, args.output); !s.ok()) return ReportError(s);
  }
  if (args.dump) fmt::print("{}", DumpPlan(*plan));

  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(*plan);
  const nlohmann::json fwd = PassJson(*plan, *blocks, placed->placement, Pass::kForward);
  const nlohmann::json bwd = PassJson(*plan, *blocks, placed->placement, Pass::kBackward);
  if (args.json) {
    const nlohmann::json j = {{"planning_ms",
                               {{"total", ms.total()},
                                {"blocking", ms.blocking},
                                {"placement", ms.placement},
                                {"scheduling", ms.scheduling},
                                {"compile", ms.compile},
                                {"tuning", ms.search}}},
                              {"origin", plan->origin},
                              {"simulated_ms", planned->planned.simulated_s * 1e3},
                              {"candidates", CandidatesJson(planned->planned)},
                              {"fwd", fwd},
                              {"bwd", bwd},
                              {"memory_imbalance", placed->report.memory_imbalance},
                              {"balanced", placed->balanced},
                              {"n_divisions", plan->n_divisions},
                              {"peak_buffer_bytes", peak},
                              {"checked", args.check},
                              {"topology", topology->ToString()},
                              {"block_size", blocks->block_size},
                              {"data_blocks", blocks->data_blocks.size()},
                              {"compute_blocks", blocks->compute_blocks.size()},
                              {"seed", batch_args.seed},
                              {"token_map", TokenMapJson(TokenMap::Of(*plan))}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  constexpr double kMiB = 1 << 20;
  fmt::print("plan: {}", plan->origin);
  if (!planned->planned.candidates.empty()) {
    fmt::print(", the fastest of {} candidates on {} ({:.3f} ms simulated)",
               planned->planned.candidates.size(), args.planner.cluster,
               planned->planned.simulated_s * 1e3);
  }
  fmt::print(
      "\nplanning: {:.1f} ms total = blocking {:.1f} + placement {:.1f} + scheduling {:.1f} + "
      "compile {:.1f} + tuning {:.1f}\n",
      ms.total(), ms.blocking, ms.placement, ms.scheduling, ms.compile, ms.search);
  for (const auto& [name, j] : {std::pair{"forward", &fwd}, std::pair{"backward", &bwd}}) {
    fmt::print(
        "{:>8}: {:.1f} MiB inter-node (busiest device {:.1f}), {:.1f} MiB intra-node, "
        "compute imbalance {:.3f}\n",
        name, (*j)["bytes_inter_node"].get<double>() / kMiB,
        (*j)["max_device_bytes_inter_node"].get<double>() / kMiB,
        (*j)["bytes_intra_node"].get<double>() / kMiB, (*j)["compute_imbalance"].get<double>());
  }
  fmt::print(
      "memory imbalance {:.3f}{}, {} divisions, peak buffers per device {:.1f}-{:.1f} MiB{}\n",
      placed->report.memory_imbalance, placed->balanced ? "" : " (NOT within the tolerances)",
      plan->n_divisions, static_cast<double>(*std::min_element(peak.begin(), peak.end())) / kMiB,
      static_cast<double>(*std::max_element(peak.begin(), peak.end())) / kMiB,
      args.check ? ", plan checked" : "");
  return 0;
}

}  // namespace

CommandRunner AddPlanCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Block, place, schedule and compile a batch into per-device programs");
  auto batch_args = std::make_shared<BatchArgs>();
  auto args = std::make_shared<PlanArgs>();
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  AddPlannerOptions(*cmd, args->planner);
  cmd->add_option("-o,--output", args->output, "Write the plan to this file");
  cmd->add_flag("--check", args->check, "Validate the plan symbolically");
  cmd->add_flag("--dump", args->dump, "Print every program");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [cmd, batch_args, args]() -> int {
    if (!cmd->parsed()) return 0;
    return Run(*batch_args, *args);
  };
}

}  // namespace dcp::cli
