// SPDX-License-Identifier: Apache-2.0
// The placement driver: across nodes first, then inside each node, with a k-way solver per level
// (the builtin engine, or Zoltan PHG followed by the builtin engine's repair and refinement).
#include <chrono>
#include <numeric>

#include "dcp/partition.h"
#include "partition/kway_partitioner.h"
#include "partition/zoltan_kway.h"

namespace dcp {
namespace {

int64_t Sum(const std::vector<int64_t>& w, const std::vector<int32_t>& subset) {
  int64_t total = 0;
  for (int32_t v : subset) total += w[v];
  return total;
}

// One level: `subset` into k parts under the caps; returns a part per vertex (-1 outside).
Result<std::vector<int32_t>> SolveLevel(const Hypergraph& g, const BlockSet& blocks,
                                        const std::vector<int32_t>& subset, int32_t k,
                                        double compute_cap, double memory_cap, uint64_t seed,
                                        const PartitionOptions& options) {
  internal::KwayPartitioner engine(g, blocks.sequence_first_block, subset, k, compute_cap,
                                   memory_cap, seed);
  switch (options.partitioner) {
    case PartitionerKind::kBuiltin:
      return engine.Run(options.refinement_rounds);
    case PartitionerKind::kZoltan: {
      DCP_ASSIGN_OR_RETURN(std::vector<int32_t> initial,
                           internal::ZoltanKway(g, subset, k, compute_cap, memory_cap));
      // Zoltan balances one weight; repair makes both caps hold. No further refinement, so the
      // result stays Zoltan's own.
      return engine.Run(/*rounds=*/0, &initial);
    }
  }
  return Status::Internal("unknown partitioner");
}

}  // namespace

std::string_view ToString(PartitionerKind kind) {
  switch (kind) {
    case PartitionerKind::kBuiltin:
      return "builtin";
    case PartitionerKind::kZoltan:
      return "zoltan";
  }
  return "unknown";
}

Result<PartitionerKind> ParsePartitionerKind(std::string_view text) {
  if (text == "builtin") return PartitionerKind::kBuiltin;
  if (text == "zoltan") return PartitionerKind::kZoltan;
  return Status::InvalidArgument(
      fmt::format("unknown partitioner '{}' (known: builtin, zoltan)", text));
}

Status PartitionOptions::Validate() const {
  for (const auto& [name, eps] :
       {std::pair{"eps_compute", eps_compute}, std::pair{"eps_inter", eps_inter},
        std::pair{"eps_memory", eps_memory}}) {
    if (!(eps >= 0 && eps <= 100)) {
      return Status::InvalidArgument(fmt::format("{}={} is not in [0, 100]", name, eps));
    }
  }
  if (refinement_rounds < 0 || refinement_rounds > 1000) {
    return Status::InvalidArgument(
        fmt::format("refinement_rounds={} is not in [0, 1000]", refinement_rounds));
  }
  return Status::Ok();
}

Result<PartitionResult> PartitionHypergraph(const Hypergraph& g, const BlockSet& blocks,
                                            const Topology& topology,
                                            const PartitionOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  DCP_RETURN_IF_ERROR(topology.Validate());
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> all(g.n_vertices());
  std::iota(all.begin(), all.end(), 0);
  const double compute_avg = static_cast<double>(Sum(g.compute_weight, all)) / topology.devices();
  const double memory_avg = static_cast<double>(Sum(g.memory_weight, all)) / topology.devices();
  const int32_t dpn = topology.devices_per_node;

  // Level 1: across nodes (skipped with one node). Memory gets half its tolerance here so that the
  // devices inside a node can still meet it.
  std::vector<int32_t> node(g.n_vertices(), 0);
  if (topology.nodes > 1) {
    DCP_ASSIGN_OR_RETURN(
        node,
        SolveLevel(g, blocks, all, topology.nodes, (1 + options.eps_inter) * compute_avg * dpn,
                   (1 + options.eps_memory / 2) * memory_avg * dpn, options.seed, options));
  }
  // Level 2: inside each node, relative to the node's own compute and the global memory average.
  std::vector<int32_t> device(g.n_vertices(), 0);
  for (int32_t n = 0; n < topology.nodes; ++n) {
    std::vector<int32_t> subset;
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      if (node[v] == n) subset.push_back(v);
    }
    const double node_compute_avg = static_cast<double>(Sum(g.compute_weight, subset)) / dpn;
    DCP_ASSIGN_OR_RETURN(
        std::vector<int32_t> part,
        SolveLevel(g, blocks, subset, dpn, (1 + options.eps_compute) * node_compute_avg,
                   (1 + options.eps_memory) * memory_avg, options.seed + 1 + n, options));
    for (int32_t v : subset) device[v] = n * dpn + part[v];
  }

  PartitionResult result;
  for (int32_t v = 0; v < g.n_vertices(); ++v) {
    (v < g.n_compute ? result.placement.compute_device : result.placement.data_device)
        .push_back(DeviceId{device[v]});
  }
  DCP_ASSIGN_OR_RETURN(result.report, EvaluatePlacement(g, result.placement, topology));
  const double compute_bound = topology.nodes > 1
                                   ? (1 + options.eps_inter) * (1 + options.eps_compute) - 1
                                   : options.eps_compute;
  constexpr double kSlack = 1e-9;  // rounding of the averages
  result.balanced = result.report.memory_imbalance <= options.eps_memory + kSlack &&
                    result.report.compute_imbalance <= compute_bound + kSlack;
  result.partition_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Result<PartitionResult> PartitionBlocks(const BlockSet& blocks, const Topology& topology,
                                        const PartitionOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  return PartitionHypergraph(BuildHypergraph(blocks), blocks, topology, options);
}

}  // namespace dcp
