// SPDX-License-Identifier: Apache-2.0
// The placement driver: across nodes first, then inside each node, with a k-way solver per level
// (the builtin engine, or Zoltan PHG followed by the builtin engine's repair and refinement).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <tuple>

#include "dcp/partition.h"
#include "partition/coarsen.h"
#include "partition/kway_partitioner.h"
#include "partition/zoltan_kway.h"

namespace dcp {
namespace {

int64_t Sum(const std::vector<int64_t>& w, const std::vector<int32_t>& subset) {
  int64_t total = 0;
  for (int32_t v : subset) total += w[v];
  return total;
}

// The builtin engine, multilevel. Coarsens the subset (coarsen.h) while every part would still
// get at least kMinDataPerPart data vertices, so the caps can still be met with whole coarse
// vertices; tries several starts on the coarsest hypergraph and keeps the best; then projects it
// level by level back to `g`, refining at each level under the same caps (weights sum, so the caps
// mean the same at every level). Coarse moves shift whole patches of tiles and whole pairs of
// rows, which single-tile moves at the finest level cannot do without first paying for them.
// The stripe start needs rows one block tall, so it runs on `g` itself, and competes with the
// multilevel result.
std::vector<int32_t> SolveBuiltin(const Hypergraph& g,
                                  const std::vector<int32_t>& sequence_first_block,
                                  const std::vector<int32_t>& subset, int32_t k, double compute_cap,
                                  double memory_cap, uint64_t seed, int rounds) {
  using Engine = internal::KwayPartitioner;
  using Kind = Engine::Start::Kind;
  constexpr int64_t kMinDataPerPart = 4;
  // Level 0 is `g` itself; level i > 0 is levels[i - 1].
  std::vector<internal::CoarseLevel> levels;
  const auto graph_at = [&](size_t i) -> const Hypergraph& {
    return i == 0 ? g : levels[i - 1].graph;
  };
  const auto sequences_at = [&](size_t i) -> const std::vector<int32_t>& {
    return i == 0 ? sequence_first_block : levels[i - 1].sequence_first_block;
  };
  const auto subset_at = [&](size_t i) -> const std::vector<int32_t>& {
    return i == 0 ? subset : levels[i - 1].subset;
  };
  const auto data_in = [](const Hypergraph& h, const std::vector<int32_t>& vertices) {
    return std::count_if(vertices.begin(), vertices.end(),
                         [&](int32_t v) { return v >= h.n_compute; });
  };
  for (;;) {
    const size_t top = levels.size();
    const int64_t data = data_in(graph_at(top), subset_at(top));
    if (data < 2 * kMinDataPerPart * k) break;
    internal::CoarseLevel next =
        internal::Coarsen(graph_at(top), sequences_at(top), subset_at(top));
    // Sequences of one block do not contract; stop when too little does.
    if (10 * data_in(next.graph, next.subset) > 9 * data) break;
    levels.push_back(std::move(next));
  }
  const size_t top = levels.size();

  // Within the caps first, then the fewest bytes.
  std::vector<int32_t> best;
  std::pair<bool, int64_t> best_score{false, 0};
  const auto keep_better = [&](std::vector<int32_t> part, const Engine& engine) {
    const std::pair<bool, int64_t> score{engine.WithinCaps(), engine.km1()};
    if (best.empty() || (score.first && !best_score.first) ||
        (score.first == best_score.first && score.second < best_score.second)) {
      best = std::move(part);
      best_score = score;
    }
  };

  // Several starts on the coarsest level. FM on each when that level is coarse (it is cheap
  // there); on `g` itself only once, on the best start.
  const Engine::Start starts[] = {{Kind::kGeometric, 1.0},
                                  {Kind::kGeometric, 0.5},
                                  {Kind::kGeometric, 2.0},
                                  {Kind::kContiguous},
                                  {Kind::kGreedy}};
  for (const Engine::Start& start : starts) {
    Engine engine(graph_at(top), sequences_at(top), subset_at(top), k, compute_cap, memory_cap,
                  seed);
    keep_better(engine.Run(rounds, start, top > 0 ? Engine::kFmPasses : 0), engine);
  }
  if (top == 0) {
    Engine engine(g, sequence_first_block, subset, k, compute_cap, memory_cap, seed);
    return engine.Run(/*rounds=*/0, {.kind = Kind::kGiven, .given = &best}, Engine::kFmPasses);
  }

  // Project and refine, level by level.
  for (size_t level = top; level > 0; --level) {
    const internal::CoarseLevel& coarse = levels[level - 1];
    std::vector<int32_t> fine(graph_at(level - 1).n_vertices(), -1);
    for (int32_t v : subset_at(level - 1)) fine[v] = best[coarse.coarse_of[v]];
    Engine engine(graph_at(level - 1), sequences_at(level - 1), subset_at(level - 1), k,
                  compute_cap, memory_cap, seed);
    best.clear();
    keep_better(engine.Run(rounds, {.kind = Kind::kGiven, .given = &fine}, Engine::kFmPasses),
                engine);
  }
  Engine stripes(g, sequence_first_block, subset, k, compute_cap, memory_cap, seed);
  keep_better(stripes.Run(rounds, {.kind = Kind::kStripes}, Engine::kFmPasses), stripes);
  return best;
}

// One level: `subset` into k parts under the caps; returns a part per vertex (-1 outside).
Result<std::vector<int32_t>> SolveLevel(const Hypergraph& g, const BlockSet& blocks,
                                        const std::vector<int32_t>& subset, int32_t k,
                                        double compute_cap, double memory_cap, uint64_t seed,
                                        const PartitionOptions& options) {
  using Engine = internal::KwayPartitioner;
  switch (options.partitioner) {
    case PartitionerKind::kBuiltin:
      return SolveBuiltin(g, blocks.sequence_first_block, subset, k, compute_cap, memory_cap, seed,
                          options.refinement_rounds);
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
