// SPDX-License-Identifier: Apache-2.0
// `dcp place`: place a batch's blocks on the devices of a topology and report bytes and balance.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/batch_args.h"
#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/partition.h"

namespace dcp::cli {
namespace {

struct PlaceArgs {
  PlacementArgs placement;
  std::string export_hypergraph;
  std::string read_partition;
  std::string write_partition;
  int32_t threads = 0;  // 0: one per core
  bool json = false;
};

nlohmann::json ToJson(const PlacementReport& r, const Topology& topology, double partition_ms,
                      bool balanced) {
  return {{"topology", topology.ToString()},
          {"km1_bytes", r.km1_bytes},
          {"bytes_inter_node", r.bytes_inter_node},
          {"bytes_intra_node", r.bytes_intra_node},
          {"max_device_bytes_inter_node", r.max_device_bytes_inter_node},
          {"compute_imbalance", r.compute_imbalance},
          {"memory_imbalance", r.memory_imbalance},
          {"balanced", balanced},
          {"device_compute", r.device_compute},
          {"device_memory", r.device_memory},
          {"partition_ms", partition_ms}};
}

int Run(const BatchArgs& batch_args, const PlaceArgs& args) {
  Result<Batch> batch = BuildBatch(batch_args);
  if (!batch.ok()) return ReportError(batch.status());
  Result<Topology> topology = BuildTopology(batch_args, args.placement);
  if (!topology.ok()) return ReportError(topology.status());
  Result<BlockingOptions> blocking = BuildBlockingOptions(batch_args, *batch, topology->devices());
  if (!blocking.ok()) return ReportError(blocking.status());
  Result<BlockSet> blocks = MakeBlocks(*batch, *blocking);
  if (!blocks.ok()) return ReportError(blocks.status());
  Result<PartitionOptions> options = BuildPartitionOptions(batch_args, args.placement);
  if (!options.ok()) return ReportError(options.status());
  options->threads = args.threads == 0 ? HardwareThreads() : args.threads;
  const Hypergraph graph = BuildHypergraph(*blocks);
  if (!args.export_hypergraph.empty()) {
    std::string hgr;
    WriteHmetis(graph, &hgr);
    if (Status s = WriteTextFile(args.export_hypergraph, hgr); !s.ok()) return ReportError(s);
  }
  PlacementReport report;
  Placement placed;
  double partition_ms = 0;
  bool balanced = false;
  if (!args.read_partition.empty()) {
    Result<std::string> text = internal::ReadWholeFile(args.read_partition);
    if (!text.ok()) return ReportError(text.status());
    Result<Placement> placement = ReadPartition(*text, graph, *topology);
    if (!placement.ok()) {
      return ReportError(placement.status().WithContext(args.read_partition));
    }
    Result<PlacementReport> r = EvaluatePlacement(graph, *placement, *topology);
    if (!r.ok()) return ReportError(r.status());
    report = *r;
    placed = *std::move(placement);
    balanced = report.compute_imbalance <= ComputeBound(*topology, *options) + 1e-9 &&
               report.memory_imbalance <= 1 + options->eps_memory + 1e-9;
  } else {
    Result<PartitionResult> result = PartitionBlocks(*blocks, *topology, *options);
    if (!result.ok()) return ReportError(result.status());
    report = result->report;
    placed = std::move(result->placement);
    partition_ms = result->partition_ms;
    balanced = result->balanced;
  }
  if (!args.write_partition.empty()) {
    if (Status s = WriteTextFile(args.write_partition, WritePartition(placed)); !s.ok()) {
      return ReportError(s);
    }
  }
  if (args.json) {
    nlohmann::json j = ToJson(report, *topology, partition_ms, balanced);
    j["token_map"] = TokenMapJson(TokenMap::Of(*blocks, placed, topology->devices()));
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  constexpr double kMiB = 1 << 20;
  fmt::print("topology {}: {} data blocks, {} compute blocks, placed in {:.1f} ms\n",
             topology->ToString(), blocks->data_blocks.size(), blocks->compute_blocks.size(),
             partition_ms);
  fmt::print(
      "bytes moved (fwd+bwd): {:.1f} MiB = {:.1f} MiB inter-node + {:.1f} MiB intra-node; "
      "busiest device receives {:.1f} MiB inter-node\n",
      static_cast<double>(report.km1_bytes) / kMiB,
      static_cast<double>(report.bytes_inter_node) / kMiB,
      static_cast<double>(report.bytes_intra_node) / kMiB,
      static_cast<double>(report.max_device_bytes_inter_node) / kMiB);
  fmt::print("imbalance (max/mean): compute {:.3f}, memory {:.3f}{}\n",
             report.compute_imbalance, report.memory_imbalance,
             balanced ? "" : "  (NOT within the tolerances)");
  return 0;
}

}  // namespace

CommandRunner AddPlaceCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "place", "Place a batch's blocks on devices; report bytes moved and balance");
  auto batch_args = std::make_shared<BatchArgs>();
  auto args = std::make_shared<PlaceArgs>();
  batch_args->block_size = std::to_string(kPlaceBlockSize);  // placement only: no tuning here
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  cmd->add_option("--export-hypergraph", args->export_hypergraph,
                  "Write the hypergraph in hMETIS format to this file");
  cmd->add_option(
      "--read-partition", args->read_partition,
      "Evaluate this partition file (one part per vertex line) instead of partitioning");
  cmd->add_option("--write-partition", args->write_partition,
                  "Write the placement as a partition file (what --read-partition of place, plan, "
                  "simulate and run reads)");
  cmd->add_option("--threads", args->threads,
                  "Partitioner threads (0: one per core): the nodes' placements at once; the "
                  "placement does not depend on it")
      ->check(CLI::Range(0, PartitionOptions::kMaxThreads))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [cmd, batch_args, args]() -> int {
    if (!cmd->parsed()) return 0;
    return Run(*batch_args, *args);
  };
}

}  // namespace dcp::cli
