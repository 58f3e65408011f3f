// SPDX-License-Identifier: Apache-2.0
// The placement driver: across nodes first, then inside each node, with a k-way solver per level
// (the builtin engine, or Zoltan PHG followed by the builtin engine's repair and refinement).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <tuple>

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
  using Engine = internal::KwayPartitioner;
  switch (options.partitioner) {
    case PartitionerKind::kBuiltin: {
      // Several starts, keep the best: within the caps first, then the fewest bytes.
      using Kind = Engine::Start::Kind;
      const Engine::Start starts[] = {{Kind::kGeometric, 1.0},
                                      {Kind::kGeometric, 0.5},
                                      {Kind::kGeometric, 2.0},
                                      {Kind::kContiguous},
                                      {Kind::kGreedy}};
      std::vector<int32_t> best;
      std::pair<bool, int64_t> best_score{false, 0};
      for (const Engine::Start& start : starts) {
        Engine engine(g, blocks.sequence_first_block, subset, k, compute_cap, memory_cap, seed);
        std::vector<int32_t> part = engine.Run(options.refinement_rounds, start);
        const std::pair<bool, int64_t> score{engine.WithinCaps(), engine.km1()};
        if (best.empty() || (score.first && !best_score.first) ||
            (score.first == best_score.first && score.second < best_score.second)) {
          best = std::move(part);
          best_score = score;
        }
      }
      // FM once, on the best start: it costs more than the starts' label propagation.
      Engine engine(g, blocks.sequence_first_block, subset, k, compute_cap, memory_cap, seed);
      return engine.Run(/*rounds=*/0, {.kind = Kind::kGiven, .given = &best}, Engine::kFmPasses);
    }
    case PartitionerKind::kZoltan: {
      DCP_ASSIGN_OR_RETURN(std::vector<int32_t> initial,
                           internal::ZoltanKway(g, subset, k, compute_cap, memory_cap, seed));
      // Zoltan balances one weight; repair makes both caps hold. No refinement, so the result
      // stays Zoltan's own.
      Engine engine(g, blocks.sequence_first_block, subset, k, compute_cap, memory_cap, seed);
      return engine.Run(/*rounds=*/0, {.kind = Engine::Start::Kind::kGiven, .given = &initial});
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

namespace {

struct Averages {
  double compute = 0, memory = 0;  // per device
};

// Across nodes first (eps_inter), then inside each node (eps_compute). Returns a device per vertex.
Result<std::vector<int32_t>> PlaceTwoLevel(const Hypergraph& g, const BlockSet& blocks,
                                           const Topology& topology, const Averages& avg,
                                           const PartitionOptions& options) {
  const int32_t dpn = topology.devices_per_node;
  std::vector<int32_t> all(g.n_vertices());
  std::iota(all.begin(), all.end(), 0);
  // A node may hold only what its devices can: whole blocks, each device up to its cap. With
  // blocks of the largest size that is floor(cap / largest) of them per device, so the node cap
  // is that many (never below the average, which must always fit).
  const double device_memory_cap = (1 + options.eps_memory) * avg.memory;
  const double largest =
      static_cast<double>(*std::max_element(g.memory_weight.begin(), g.memory_weight.end()));
  const double whole_blocks =
      largest > 0 ? std::floor(device_memory_cap / largest) * largest : device_memory_cap;
  const double node_memory_cap = std::max(avg.memory, whole_blocks) * dpn;
  DCP_ASSIGN_OR_RETURN(
      std::vector<int32_t> node,
      SolveLevel(g, blocks, all, topology.nodes, (1 + options.eps_inter) * avg.compute * dpn,
                 node_memory_cap, options.seed, options));
  // Inside each node, relative to the node's own compute and the global memory average.
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
                   device_memory_cap, options.seed + 1 + n, options));
    for (int32_t v : subset) device[v] = n * dpn + part[v];
  }
  return device;
}

// All devices at once, each within eps_compute of the average.
Result<std::vector<int32_t>> PlaceFlat(const Hypergraph& g, const BlockSet& blocks,
                                       const Topology& topology, const Averages& avg,
                                       const PartitionOptions& options) {
  std::vector<int32_t> all(g.n_vertices());
  std::iota(all.begin(), all.end(), 0);
  return SolveLevel(g, blocks, all, topology.devices(), (1 + options.eps_compute) * avg.compute,
                    (1 + options.eps_memory) * avg.memory, options.seed, options);
}

Result<PartitionResult> Evaluate(const Hypergraph& g, const std::vector<int32_t>& device,
                                 const Topology& topology, const PartitionOptions& options) {
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
  return result;
}

// Less violation of the tolerances first (balanced placements have none), then fewer inter-node
// bytes, then fewer bytes.
bool Better(const PartitionResult& a, const PartitionResult& b, const Topology& topology,
            const PartitionOptions& options) {
  const double compute_bound = topology.nodes > 1
                                   ? (1 + options.eps_inter) * (1 + options.eps_compute) - 1
                                   : options.eps_compute;
  const auto key = [&](const PartitionResult& r) {
    const double violation = std::max(0.0, r.report.compute_imbalance - compute_bound) +
                             std::max(0.0, r.report.memory_imbalance - options.eps_memory);
    return std::make_tuple(violation, r.report.bytes_inter_node, r.report.km1_bytes);
  };
  return key(a) < key(b);
}

}  // namespace

Result<PartitionResult> PartitionHypergraph(const Hypergraph& g, const BlockSet& blocks,
                                            const Topology& topology,
                                            const PartitionOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  DCP_RETURN_IF_ERROR(topology.Validate());
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> all(g.n_vertices());
  std::iota(all.begin(), all.end(), 0);
  const Averages avg{
      .compute = static_cast<double>(Sum(g.compute_weight, all)) / topology.devices(),
      .memory = static_cast<double>(Sum(g.memory_weight, all)) / topology.devices()};

  // The flat placement balances every device to eps_compute, tighter than the two-level bound,
  // so the two-level one is kept only when it really crosses the network less.
  DCP_ASSIGN_OR_RETURN(std::vector<int32_t> flat, PlaceFlat(g, blocks, topology, avg, options));
  DCP_ASSIGN_OR_RETURN(PartitionResult result, Evaluate(g, flat, topology, options));
  if (topology.nodes > 1) {
    DCP_ASSIGN_OR_RETURN(std::vector<int32_t> two_level,
                         PlaceTwoLevel(g, blocks, topology, avg, options));
    DCP_ASSIGN_OR_RETURN(PartitionResult hierarchical, Evaluate(g, two_level, topology, options));
    if (Better(hierarchical, result, topology, options)) result = std::move(hierarchical);
  }
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
