// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <initializer_list>
#include <optional>
#include <random>

#include "dcp/baselines.h"
#include "dcp/partition.h"
#include "partition/annealer.h"
#include "partition/coarsen.h"
#include "partition/kway_partitioner.h"
#include "partition/partition_state.h"
#include "partition/subgraph.h"

namespace dcp {
namespace {

// A random batch's sequence lengths: count.first + rng() % count.choices of them, each
// unit * (length.first + rng() % length.choices) tokens.
struct Draw {
  int64_t first, choices;
};
std::vector<int64_t> RandomLengths(std::mt19937_64& rng, Draw count, Draw length,
                                   int64_t unit = 1) {
  std::vector<int64_t> lengths(static_cast<size_t>(count.first) +
                               rng() % static_cast<uint64_t>(count.choices));
  for (int64_t& l : lengths) {
    l = unit * (length.first + static_cast<int64_t>(rng() % static_cast<uint64_t>(length.choices)));
  }
  return lengths;
}

BlockSet Blocks(const std::vector<int64_t>& lengths, const char* mask, int64_t block_size) {
  auto batch = Batch::Create(lengths, {*MaskSpec::Parse(mask)},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  if (!batch.ok()) ADD_FAILURE() << batch.status().ToString();
  auto set = MakeBlocks(*batch, {.block_size = block_size});
  if (!set.ok()) ADD_FAILURE() << set.status().ToString();
  return *set;
}

TEST(PartitionBlocks, PlacesEveryBlockOnADeviceOfTheTopology) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {1, 6}, {1, 5000});
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=16,window=700", 256);
    const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 3),
                            .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
    auto result = PartitionBlocks(set, topology, PartitionOptions{.seed = seed});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    ASSERT_EQ(result->placement.data_device.size(), set.data_blocks.size());
    ASSERT_EQ(result->placement.compute_device.size(), set.compute_blocks.size());
    for (DeviceId d : result->placement.data_device) {
      EXPECT_TRUE(d.value >= 0 && d.value < topology.devices());
    }
    for (DeviceId d : result->placement.compute_device) {
      EXPECT_TRUE(d.value >= 0 && d.value < topology.devices());
    }
  }
}

// Sixteen equal sequences on eight devices: two whole sequences per device meets both
// constraints exactly and moves nothing, so a partitioner must find a balanced placement.
TEST(PartitionBlocks, MeetsBothConstraintsWhenAPerfectPlacementExists) {
  const BlockSet set = Blocks(std::vector<int64_t>(16, 4096), "causal", 1024);
  auto result = PartitionBlocks(set, Topology{.nodes = 1, .devices_per_node = 8},
                                PartitionOptions{.eps_compute = 0.05, .eps_memory = 0.05});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->balanced);
  EXPECT_LE(result->report.compute_imbalance, 1 + 0.05 + 1e-9);
  EXPECT_LE(result->report.memory_imbalance, 1 + 0.05 + 1e-9);
  EXPECT_EQ(result->report.km1_bytes, 0);
}

TEST(PartitionBlocks, MeetsBothConstraintsOnALongCausalSequence) {
  const BlockSet set = Blocks({65536}, "causal", 1024);
  const PartitionOptions options{.eps_compute = 0.1, .eps_memory = 0.2};
  auto result = PartitionBlocks(set, Topology{.nodes = 1, .devices_per_node = 8}, options);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->balanced);
  EXPECT_LE(result->report.compute_imbalance, 1 + 0.1 + 1e-9);
  EXPECT_LE(result->report.memory_imbalance, 1 + 0.2 + 1e-9);
}

TEST(PartitionBlocks, IsDeterministicForASeed) {
  const BlockSet set = Blocks({30000, 9000, 4000, 777}, "causal", 512);
  const Topology topology{.nodes = 2, .devices_per_node = 4};
  auto a = PartitionBlocks(set, topology, PartitionOptions{.seed = 7});
  auto b = PartitionBlocks(set, topology, PartitionOptions{.seed = 7});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->placement.data_device, b->placement.data_device);
  EXPECT_EQ(a->placement.compute_device, b->placement.compute_device);
}

TEST(PartitionBlocks, ReportsInfeasibleBalanceInsteadOfFailing) {
  // Two token blocks cannot be spread over eight devices.
  const BlockSet set = Blocks({2048}, "causal", 1024);
  auto result = PartitionBlocks(set, Topology{.nodes = 2, .devices_per_node = 4}, {});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->balanced);
  EXPECT_GT(result->report.memory_imbalance, 1.2);
}

// With fewer blocks than the memory cap needs (e.g. 98 full blocks and a short one on 32 devices:
// the cap of 1.2 x 3.08 blocks admits 3 full ones per device, so two devices must hold 4), the
// placement is as level as whole blocks allow: no device holds more than ceil(full blocks /
// devices) blocks' worth of memory. (The multilevel engine once left 5 on a device here: coarse
// vertices hold two blocks, and repair gave up once every part was over the cap; the full
// blocks here are too few for 1.2 x the average to reach 4.)
TEST(PartitionBlocks, LevelsMemoryWhenTheCapCannotHold) {
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const Topology topology{.nodes = 4, .devices_per_node = 8};
    // Seed 0: the LongAlign-like batch of `dcp place --dataset longalign --scale 4 --seed 1`.
    const int64_t full = seed == 0 ? 98 : 3 * 32 + 1 + static_cast<int64_t>(rng() % 10);
    const int64_t tokens =
        seed == 0 ? 100787 : full * 1024 + 1 + static_cast<int64_t>(rng() % 1000);
    const char* mask = seed % 2 ? "causal" : "lambda";
    auto batch = Batch::Create({tokens}, {*MaskSpec::Parse(mask)}, AttentionShape{});
    ASSERT_TRUE(batch.ok());
    const BlockSet set = *MakeBlocks(*batch, {.block_size = 1024});
    auto result = PartitionBlocks(set, topology, PartitionOptions{.seed = seed});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const Hypergraph g = BuildHypergraph(set);
    std::vector<int64_t> memory(topology.devices(), 0);
    for (size_t b = 0; b < result->placement.data_device.size(); ++b) {
      memory[result->placement.data_device[b].value] += g.memory_weight[g.n_compute + b];
    }
    const int64_t full_block = g.memory_weight[g.n_compute];
    EXPECT_LE(*std::max_element(memory.begin(), memory.end()), (full + 31) / 32 * full_block)
        << full << " full blocks, " << mask;
  }
}

TEST(PartitionBlocks, RejectsBadOptions) {
  const BlockSet set = Blocks({100}, "causal", 64);
  auto result = PartitionBlocks(set, Topology{}, PartitionOptions{.eps_compute = -0.1});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("eps_compute=-0.1"), std::string::npos);
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// The placement a flat partition of all devices gives, read on the multi-node topology.
TEST(PartitionBlocks, HierarchicalCrossesNodesNoMoreThanFlatAtTheSameBalance) {
  int compared = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {2, 6}, {1024, 40000});
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "shared-question", 1024);
    const Topology topology{.nodes = 2 + static_cast<int32_t>(rng() % 3), .devices_per_node = 4};
    const PartitionOptions options{
        .eps_compute = 0.1, .eps_inter = 0.1, .eps_memory = 0.2, .seed = seed};
    auto flat =
        PartitionBlocks(set, Topology{.nodes = 1, .devices_per_node = topology.devices()}, options);
    auto hierarchical = PartitionBlocks(set, topology, options);
    ASSERT_TRUE(flat.ok() && hierarchical.ok());
    auto flat_on_nodes = EvaluatePlacement(BuildHypergraph(set), flat->placement, topology);
    ASSERT_TRUE(flat_on_nodes.ok());
    if (!flat->balanced) continue;  // no balanced flat reference to compare with
    EXPECT_TRUE(hierarchical->balanced);
    EXPECT_LE(hierarchical->report.bytes_inter_node, flat_on_nodes->bytes_inter_node);
    ++compared;
  }
  EXPECT_GE(compared, 6);  // the comparison must not be skipped wholesale
}

// The placement claim, guarded: on 3 fixed LDC-like and 3 LongAlign-like batches (65536 causal
// tokens, scale 1, seeds 1-3, blocks of 1024, 2x4), the builtin partitioner at tolerances 0.05 /
// 0.05 balances compute within them (max/mean at most 1.1025) and moves at least 1.05x fewer bytes
// than the zigzag placement in all and across nodes on each batch, and 1.5x fewer in all over the
// six. Measured 2026-11-28 (SplitMix64 annealing): 1.10-4.39x in all, 1.09-4.25x across
// nodes, 1.95x over the six; dcp's compute max/mean 1.04-1.10, zigzag's 1.09-1.79 (on LDC seed 1
// zigzag happens to balance better, 1.092 against 1.097: the claim is the bytes at dcp's tolerance,
// not a balance better than zigzag's).
TEST(PartitionBlocks, MovesFewerBytesThanZigzagWithinItsTolerance) {
  int64_t dcp_bytes = 0, zigzag_bytes = 0;
  for (LengthDistribution distribution :
       {LengthDistribution::kLongDataCollections, LengthDistribution::kLongAlign}) {
    for (uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << ToString(distribution) << " seed " << seed);
      auto lengths =
          SyntheticBatch({.distribution = distribution, .scale = 1, .seed = seed}, 65536);
      ASSERT_TRUE(lengths.ok());
      auto batch =
          Batch::Create(*lengths, std::vector<MaskSpec>(lengths->size()), AttentionShape{});
      ASSERT_TRUE(batch.ok());
      auto set = MakeBlocks(*batch, {.block_size = 1024});
      ASSERT_TRUE(set.ok());
      const Topology topology{.nodes = 2, .devices_per_node = 4};
      auto dcp = PartitionBlocks(*set, topology, {.eps_compute = 0.05, .eps_inter = 0.05});
      auto zigzag =
          EvaluatePlacement(BuildHypergraph(*set), ZigzagPlacement(*set, topology), topology);
      ASSERT_TRUE(dcp.ok() && zigzag.ok());
      EXPECT_LE(dcp->report.compute_imbalance, 1.05 * 1.05 + 1e-9);
      EXPECT_LE(1.05 * static_cast<double>(dcp->report.km1_bytes),
                static_cast<double>(zigzag->km1_bytes));
      EXPECT_LE(1.05 * static_cast<double>(dcp->report.bytes_inter_node),
                static_cast<double>(zigzag->bytes_inter_node));
      dcp_bytes += dcp->report.km1_bytes;
      zigzag_bytes += zigzag->km1_bytes;
    }
  }
  EXPECT_LE(1.5 * static_cast<double>(dcp_bytes), static_cast<double>(zigzag_bytes));
}

TEST(PartitionerKind, ParsesAndPrints) {
  EXPECT_EQ(*ParsePartitionerKind("zoltan"), PartitionerKind::kZoltan);
  EXPECT_EQ(ToString(PartitionerKind::kBuiltin), "builtin");
  auto bad = ParsePartitionerKind("kahypar");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'kahypar'"), std::string::npos);
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// km1 of a part per vertex (parts of vertices outside the subset are -1 and count for nothing).
int64_t Km1(const Hypergraph& g, const std::vector<int32_t>& part) {
  int64_t km1 = 0;
  for (int32_t n = 0; n < g.n_nets(); ++n) {
    std::vector<int32_t> parts;
    for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
      if (part[g.pins[i]] >= 0) parts.push_back(part[g.pins[i]]);
    }
    std::sort(parts.begin(), parts.end());
    parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
    if (!parts.empty()) km1 += g.net_weight[n] * static_cast<int64_t>(parts.size() - 1);
  }
  return km1;
}

std::vector<int32_t> AllVertices(const Hypergraph& g) {
  std::vector<int32_t> all(g.n_vertices());
  for (int32_t v = 0; v < g.n_vertices(); ++v) all[v] = v;
  return all;
}

// A k-way problem on `subset` of g (of `set`'s blocks) whose caps never bind.
internal::KwayProblem UncappedProblem(const BlockSet& set, const Hypergraph& g,
                                      const std::vector<int32_t>& subset, int32_t k,
                                      uint64_t seed) {
  return {.graph = g,
          .sequence_first_block = set.sequence_first_block,
          .subset = subset,
          .k = k,
          .compute_cap = 1e18,
          .memory_cap = 1e18,
          .seed = seed};
}

// A random batch's hypergraph for the PartitionState tests (causal or lambda by seed), and a part
// count. Draws its lengths from `rng`.
struct StateCase {
  BlockSet set;
  Hypergraph g;
  int32_t k;
};
StateCase MakeStateCase(uint64_t seed, std::mt19937_64& rng) {
  const std::vector<int64_t> lengths = RandomLengths(rng, {1, 4}, {1, 3000});
  BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=16,window=700", 256);
  Hypergraph g = BuildHypergraph(set);
  return {std::move(set), std::move(g), 2 + static_cast<int32_t>(seed % 3)};
}

// Runs of 37 neighbouring vertices on one part, with strays (one in eight on a random part): some
// tiles are their nets' last pin on their part, most are not. Vertices outside `vertices`: -1.
std::vector<int32_t> RunsWithStrays(const Hypergraph& g, const std::vector<int32_t>& vertices,
                                    int32_t k, std::mt19937_64& rng) {
  std::vector<int32_t> part(g.n_vertices(), -1);
  for (int32_t v : vertices) {
    part[v] = rng() % 8 == 0 ? static_cast<int32_t>(rng() % k) : (v / 37) % k;
  }
  return part;
}

// A tile can only lower km1 by leaving a net it is the last pin of on its part: MayGain (which
// lets refinement skip a tile without listing its candidate parts) is true whenever some move
// lowers km1 as counted from scratch.
TEST(PartitionState, MayGainWheneverAMoveLowersKm1) {
  int64_t improvable = 0, skipped = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const auto [set, g, k] = MakeStateCase(seed, rng);
    const std::vector<int32_t> part = RunsWithStrays(g, AllVertices(g), k, rng);
    internal::PartitionState state(g, k, std::vector<int32_t>(g.n_vertices(), -1));
    for (int32_t v = 0; v < g.n_vertices(); ++v) state.Assign(v, part[v]);
    const int64_t km1 = Km1(g, part);
    for (int32_t v = 0; v < g.n_compute; ++v) {
      bool lowers = false;
      for (int32_t to = 0; to < k; ++to) {
        if (to == part[v]) continue;
        std::vector<int32_t> moved = part;
        moved[v] = to;
        const int64_t delta = Km1(g, moved) - km1;
        EXPECT_EQ(state.MoveDelta(v, to), delta) << "vertex " << v << " to " << to;
        lowers = lowers || delta < 0;
      }
      if (lowers) {
        EXPECT_TRUE(state.MayGain(v)) << "vertex " << v;
      }
      improvable += lowers;
      skipped += !state.MayGain(v);
    }
  }
  EXPECT_GT(improvable, 0);
  EXPECT_GT(skipped, 0);
}

// span(n) is the set of parts net n has pins on, counted from scratch, through assignments and
// moves, for part counts on both sides of each 64-part word (the k-way engine lists a vertex's
// candidate parts from it).
TEST(PartitionState, SpanIsThePartsANetHasPinsOn) {
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const auto [set, g, unused_k] = MakeStateCase(seed, rng);
    for (const int32_t k : {3, 64, 65, 130}) {
      SCOPED_TRACE(k);
      std::vector<int32_t> part = RunsWithStrays(g, AllVertices(g), k, rng);
      internal::PartitionState state(g, k, std::vector<int32_t>(g.n_vertices(), -1));
      for (int32_t v = 0; v < g.n_vertices(); ++v) state.Assign(v, part[v]);
      for (int step = 0; step < 300; ++step) {
        const auto v = static_cast<int32_t>(rng() % g.n_vertices());
        part[v] = static_cast<int32_t>(rng() % k);
        state.Move(v, part[v]);
      }
      EXPECT_EQ(state.span_words(), (k + 63) / 64);
      for (int32_t n = 0; n < g.n_nets(); ++n) {
        std::vector<uint64_t> expected(state.span_words(), 0);
        for (int32_t j = g.net_begin[n]; j < g.net_begin[n + 1]; ++j) {
          const int32_t p = part[g.pins[j]];
          expected[p / 64] |= uint64_t{1} << (p % 64);
        }
        const std::span<const uint64_t> span = state.span(n);
        ASSERT_EQ(std::vector<uint64_t>(span.begin(), span.end()), expected) << "net " << n;
      }
    }
  }
}

// The annealer prices a swap of two vertices with SwapDelta: the km1 change counted from scratch,
// for vertices that share nets (a tile and a pin of its row or column) and vertices that do not,
// on the block hypergraph and on the row hypergraphs (ContractRows) the annealer works on.
TEST(PartitionState, SwapDeltaIsTheKm1ChangeOfTheSwap) {
  int64_t sharing = 0, swaps = 0;
  const auto check = [&](const Hypergraph& g, const std::vector<int32_t>& vertices, int32_t k,
                         std::mt19937_64& rng) {
    const std::vector<int32_t> part = RunsWithStrays(g, vertices, k, rng);
    internal::PartitionState state(g, k, std::vector<int32_t>(g.n_vertices(), -1));
    for (int32_t v : vertices) state.Assign(v, part[v]);
    const int64_t km1 = Km1(g, part);
    const auto nets = [&](int32_t x) {
      return std::vector<int32_t>(g.incident.begin() + g.vertex_begin[x],
                                  g.incident.begin() + g.vertex_begin[x + 1]);
    };
    for (int trial = 0; trial < 400; ++trial) {
      const int32_t v = vertices[rng() % vertices.size()];
      int32_t u = vertices[rng() % vertices.size()];
      const int32_t degree = g.vertex_begin[v + 1] - g.vertex_begin[v];
      if (trial % 2 == 0 && degree > 0) {  // a pin of one of v's nets
        const int32_t n = g.incident[g.vertex_begin[v] + static_cast<int32_t>(rng() % degree)];
        u = g.pins[g.net_begin[n] +
                   static_cast<int32_t>(rng() % (g.net_begin[n + 1] - g.net_begin[n]))];
      }
      if (part[u] < 0 || part[u] == part[v]) continue;
      std::vector<int32_t> swapped = part;
      std::swap(swapped[v], swapped[u]);
      EXPECT_EQ(state.SwapDelta(v, u), Km1(g, swapped) - km1) << "vertices " << v << ", " << u;
      std::vector<int32_t> shared;
      std::ranges::set_intersection(nets(v), nets(u), std::back_inserter(shared));
      sharing += !shared.empty();
      ++swaps;
    }
  };
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const auto [set, g, k] = MakeStateCase(seed, rng);
    check(g, AllVertices(g), k, rng);
    const internal::CoarseLevel rows = internal::ContractRows(
        g, set.sequence_first_block, AllVertices(g), 1 + static_cast<int32_t>(seed % 3));
    check(rows.graph, rows.subset, k, rng);
  }
  EXPECT_GT(sharing, 200);          // swaps of vertices that share nets
  EXPECT_GT(swaps - sharing, 200);  // and of vertices that do not
}

TEST(Coarsen, ContractedWeightsSumToTheFineOnes) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {1, 5}, {1, 9000});
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=16,window=700", 512);
    const Hypergraph g = BuildHypergraph(set);
    const internal::CoarseLevel level =
        internal::Coarsen(g, set.sequence_first_block, AllVertices(g));
    const Hypergraph& c = level.graph;
    std::vector<int64_t> compute(c.n_vertices(), 0), memory(c.n_vertices(), 0);
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      const int32_t cv = level.coarse_of[v];
      ASSERT_TRUE(cv >= 0 && cv < c.n_vertices());
      EXPECT_EQ(cv < c.n_compute, v < g.n_compute);  // compute stays compute, data stays data
      compute[cv] += g.compute_weight[v];
      memory[cv] += g.memory_weight[v];
    }
    EXPECT_EQ(compute, c.compute_weight);
    EXPECT_EQ(memory, c.memory_weight);
    EXPECT_EQ(level.sequence_first_block.size(), set.sequence_first_block.size());
    EXPECT_EQ(level.sequence_first_block.back(), c.n_data);
    EXPECT_LT(c.n_data, std::max(g.n_data, 2));
  }
}

// On causal masks the row (and column) nets of blocks 2i and 2i+1 span the same super-tiles and
// merge, so a projected partition moves exactly what the coarse one does.
TEST(Coarsen, ProjectedPartitionHasTheCoarseKm1OnCausalBatches) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {1, 5}, {1, 40}, 256);
    const BlockSet set = Blocks(lengths, "causal", 256);
    const Hypergraph g = BuildHypergraph(set);
    const internal::CoarseLevel level =
        internal::Coarsen(g, set.sequence_first_block, AllVertices(g));
    const Hypergraph& c = level.graph;
    EXPECT_LT(c.n_nets(), g.n_nets());  // parallel nets merged
    std::vector<int32_t> coarse_part(c.n_vertices());
    for (int32_t& p : coarse_part) p = static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> fine_part(g.n_vertices());
    for (int32_t v = 0; v < g.n_vertices(); ++v) fine_part[v] = coarse_part[level.coarse_of[v]];
    EXPECT_EQ(Km1(g, fine_part), Km1(c, coarse_part));
  }
}

// Any mask: a projected partition never moves more than the coarse one (coarse nets only merge
// fine nets with identical coarse pins).
TEST(Coarsen, ProjectedPartitionNeverMovesMoreThanTheCoarseOne) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {1, 5}, {1, 9000});
    const BlockSet set = Blocks(lengths, "lambda:sink=16,window=700", 256);
    const Hypergraph g = BuildHypergraph(set);
    const internal::CoarseLevel level =
        internal::Coarsen(g, set.sequence_first_block, AllVertices(g));
    std::vector<int32_t> coarse_part(level.graph.n_vertices());
    for (int32_t& p : coarse_part) p = static_cast<int32_t>(rng() % 3);
    std::vector<int32_t> fine_part(g.n_vertices());
    for (int32_t v = 0; v < g.n_vertices(); ++v) fine_part[v] = coarse_part[level.coarse_of[v]];
    EXPECT_LE(Km1(g, fine_part), Km1(level.graph, coarse_part));
  }
}

// A subset (one node's share in the two-level placement) coarsens to vertices of the subset only.
TEST(Coarsen, KeepsVerticesOutsideTheSubsetOut) {
  const BlockSet set = Blocks({8192, 4096}, "causal", 512);
  const Hypergraph g = BuildHypergraph(set);
  std::vector<int32_t> subset;
  for (int32_t v = 0; v < g.n_vertices(); v += 3) subset.push_back(v);
  const internal::CoarseLevel level = internal::Coarsen(g, set.sequence_first_block, subset);
  int64_t fine_compute = 0, fine_memory = 0, coarse_compute = 0, coarse_memory = 0;
  for (int32_t v : subset) {
    fine_compute += g.compute_weight[v];
    fine_memory += g.memory_weight[v];
  }
  for (int32_t cv : level.subset) {
    coarse_compute += level.graph.compute_weight[cv];
    coarse_memory += level.graph.memory_weight[cv];
  }
  EXPECT_EQ(coarse_compute, fine_compute);
  EXPECT_EQ(coarse_memory, fine_memory);
  for (int32_t v = 0; v < g.n_vertices(); ++v) {
    const bool in = std::binary_search(subset.begin(), subset.end(), v);
    EXPECT_EQ(level.coarse_of[v] >= 0, in) << v;
  }
  for (int32_t p : level.graph.pins) {
    EXPECT_TRUE(std::binary_search(level.subset.begin(), level.subset.end(), p));
  }
}

// Batches with many blocks per device coarsen several levels; the caps must hold once the
// partition is projected back and refined.
TEST(PartitionBlocks, MeetsBothCapsAfterUncoarseningOnRandomBatches) {
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {2, 6}, {4, 60}, 1024);
    const BlockSet set = Blocks(lengths, seed % 3 ? "causal" : "lambda:sink=64,window=4096", 512);
    const Topology topology{.nodes = 1, .devices_per_node = 2 + static_cast<int32_t>(rng() % 7)};
    const PartitionOptions options{.eps_compute = 0.05, .eps_memory = 0.05, .seed = seed};
    auto result = PartitionBlocks(set, topology, options);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(result->balanced);
    EXPECT_LE(result->report.compute_imbalance, 1 + 0.05 + 1e-9);
    EXPECT_LE(result->report.memory_imbalance, 1 + 0.05 + 1e-9);
  }
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// Every run of rows_per_vertex rows of a sequence (the data blocks of the subset and the tiles of
// the subset that read their queries) is one coarse vertex, weights sum, and a projected partition
// moves exactly what the row hypergraph prices.
TEST(ContractRows, KeepsEachRunOfRowsWithItsDataAndPricesProjectedPartitionsExactly) {
  for (uint64_t seed = 0; seed < 18; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {1, 5}, {1, 9000});
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=16,window=700", 512);
    const Hypergraph g = BuildHypergraph(set);
    const auto rows_per_vertex = static_cast<int32_t>(1 + seed % 3);
    std::vector<int32_t> subset;  // every other seed: a random half of the vertices
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      if (seed % 3 == 0 || rng() % 2) subset.push_back(v);
    }
    const internal::CoarseLevel rows =
        internal::ContractRows(g, set.sequence_first_block, subset, rows_per_vertex);
    const Hypergraph& c = rows.graph;
    std::vector<char> in(g.n_vertices(), 0);
    for (int32_t v : subset) in[v] = 1;
    std::vector<int64_t> compute(c.n_vertices(), 0), memory(c.n_vertices(), 0);
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      ASSERT_EQ(rows.coarse_of[v] >= 0, in[v] == 1) << v;
      if (!in[v]) continue;
      compute[rows.coarse_of[v]] += g.compute_weight[v];
      memory[rows.coarse_of[v]] += g.memory_weight[v];
    }
    EXPECT_EQ(compute, c.compute_weight);
    EXPECT_EQ(memory, c.memory_weight);
    // The first data block of block b's run, counted from its sequence's first block.
    std::vector<int32_t> run_start(g.n_data);
    for (size_t q = 0; q + 1 < set.sequence_first_block.size(); ++q) {
      for (int32_t b = set.sequence_first_block[q]; b < set.sequence_first_block[q + 1]; ++b) {
        run_start[b] = b - (b - set.sequence_first_block[q]) % rows_per_vertex;
      }
    }
    for (int32_t b = 0; b < g.n_data; ++b) {
      if (in[g.n_compute + b]) {
        EXPECT_EQ(rows.coarse_of[g.n_compute + b], c.n_compute + run_start[b]);
      }
    }
    // A tile of the subset whose row's data is in the subset joins that data block's run; tiles
    // of rows whose data is outside join one compute vertex per run.
    std::vector<int32_t> foreign(g.n_data, -1);
    for (int32_t n = 0; n < g.n_nets(); ++n) {
      if (g.net_kind[n] != NetKind::kRow) continue;
      const int32_t b = g.net_data_block[n];
      for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
        const int32_t t = g.pins[i];
        if (!in[t] || t >= g.n_compute) continue;
        if (in[g.n_compute + b]) {
          EXPECT_EQ(rows.coarse_of[t], c.n_compute + run_start[b]);
        } else {
          EXPECT_LT(rows.coarse_of[t], c.n_compute);
          if (foreign[run_start[b]] < 0) foreign[run_start[b]] = rows.coarse_of[t];
          EXPECT_EQ(rows.coarse_of[t], foreign[run_start[b]]);
        }
      }
    }
    std::vector<int32_t> coarse_part(c.n_vertices(), -1);
    for (int32_t cv : rows.subset) coarse_part[cv] = static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> fine_part(g.n_vertices(), -1);
    for (int32_t v : subset) fine_part[v] = coarse_part[rows.coarse_of[v]];
    EXPECT_EQ(Km1(g, fine_part), Km1(c, coarse_part));
  }
}

// The subgraph of a random subset has the subset's weights and, net by net, the subset's pins in
// the parent's order, so any partition of it costs what it costs on the parent.
TEST(ExtractSubgraph, KeepsTheSubsetsPinsAndPricesPartitionsAsTheParent) {
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const BlockSet set = Blocks(RandomLengths(rng, {1, 5}, {1, 9000}),
                                seed % 2 ? "causal" : "lambda:sink=16,window=700", 512);
    const Hypergraph g = BuildHypergraph(set);
    std::vector<int32_t> subset;
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      if (rng() % 3) subset.push_back(v);
    }
    std::shuffle(subset.begin(), subset.end(), rng);  // any order
    const internal::Subgraph sub = internal::ExtractSubgraph(g, subset);
    const Hypergraph& s = sub.graph;
    std::vector<char> in(g.n_vertices(), 0);
    for (int32_t v : subset) in[v] = 1;
    ASSERT_EQ(s.n_data, g.n_data);
    ASSERT_EQ(s.n_nets(), g.n_nets());
    ASSERT_EQ(sub.subset.size(), subset.size());
    for (int32_t v : sub.subset) {
      const int32_t p = sub.parent_of[v];
      EXPECT_TRUE(in[p]);
      EXPECT_EQ(v < s.n_compute, p < g.n_compute);
      EXPECT_EQ(s.compute_weight[v], g.compute_weight[p]);
      EXPECT_EQ(s.memory_weight[v], g.memory_weight[p]);
    }
    EXPECT_TRUE(std::is_sorted(sub.subset.begin(), sub.subset.end()));
    for (int32_t n = 0; n < g.n_nets(); ++n) {
      std::vector<int32_t> expected, got;
      for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
        if (in[g.pins[i]]) expected.push_back(g.pins[i]);
      }
      for (int32_t i = s.net_begin[n]; i < s.net_begin[n + 1]; ++i) {
        got.push_back(sub.parent_of[s.pins[i]]);
      }
      EXPECT_EQ(got, expected) << "net " << n;
      EXPECT_EQ(s.net_weight[n], g.net_weight[n]);
    }
    for (int32_t v = 0; v < s.n_vertices(); ++v) {  // the incidence is the pins' transpose
      for (int32_t i = s.vertex_begin[v]; i < s.vertex_begin[v + 1]; ++i) {
        const int32_t n = s.incident[i];
        EXPECT_NE(
            std::find(s.pins.begin() + s.net_begin[n], s.pins.begin() + s.net_begin[n + 1], v),
            s.pins.begin() + s.net_begin[n + 1]);
      }
    }
    std::vector<int32_t> sub_part(s.n_vertices(), -1), parent_part(g.n_vertices(), -1);
    for (int32_t v : sub.subset) {
      sub_part[v] = static_cast<int32_t>(rng() % 5);
      parent_part[sub.parent_of[v]] = sub_part[v];
    }
    EXPECT_EQ(Km1(s, sub_part), Km1(g, parent_part));
  }
}

// Annealing never breaks a cap that held, never returns worse than it started, returns the km1 of
// what it stores, and depends only on its seed.
TEST(Anneal, StaysWithinTheCapsAndNeverWorsensAndIsDeterministic) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {2, 5}, {1, 24}, 1024);
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=64,window=2048", 1024);
    const Hypergraph g = BuildHypergraph(set);
    const int32_t k = 2 + static_cast<int32_t>(rng() % 6);
    // Round robin over the vertices sorted by weight is within generous caps.
    std::vector<int32_t> part(g.n_vertices());
    for (int32_t v = 0; v < g.n_vertices(); ++v) part[v] = v % k;
    std::vector<int64_t> compute(k, 0), memory(k, 0);
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      compute[part[v]] += g.compute_weight[v];
      memory[part[v]] += g.memory_weight[v];
    }
    const double compute_cap =
        1.02 * static_cast<double>(*std::max_element(compute.begin(), compute.end()));
    const double memory_cap =
        1.02 * static_cast<double>(*std::max_element(memory.begin(), memory.end()));
    const int64_t start = Km1(g, part);
    const internal::AnnealOptions options{.steps = 20000, .seed = seed};
    std::vector<int32_t> a = part, b = part;
    const int64_t km1 =
        internal::Anneal(g, AllVertices(g), k, compute_cap, memory_cap, options, &a);
    internal::Anneal(g, AllVertices(g), k, compute_cap, memory_cap, options, &b);
    EXPECT_EQ(a, b);
    EXPECT_EQ(km1, Km1(g, a));
    EXPECT_LE(km1, start);
    std::fill(compute.begin(), compute.end(), 0);
    std::fill(memory.begin(), memory.end(), 0);
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      ASSERT_TRUE(a[v] >= 0 && a[v] < k);
      compute[a[v]] += g.compute_weight[v];
      memory[a[v]] += g.memory_weight[v];
    }
    for (int32_t p = 0; p < k; ++p) {
      EXPECT_LE(static_cast<double>(compute[p]), compute_cap);
      EXPECT_LE(static_cast<double>(memory[p]), memory_cap);
    }
  }
}

// Two equal sequences on two devices: annealing from alternating rows (within caps that leave
// room for it) finds the placement that moves nothing, one sequence per device.
TEST(Anneal, FindsThePlacementThatMovesNothing) {
  const BlockSet set = Blocks({8192, 8192}, "causal", 1024);
  const Hypergraph g = BuildHypergraph(set);
  const internal::CoarseLevel rows =
      internal::ContractRows(g, set.sequence_first_block, AllVertices(g));
  std::vector<int32_t> part(rows.graph.n_vertices(), -1);
  int64_t compute = 0, memory = 0;
  for (int32_t v : rows.subset) {
    part[v] = v % 2;
    compute += rows.graph.compute_weight[v];
    memory += rows.graph.memory_weight[v];
  }
  const double compute_cap = 0.6 * static_cast<double>(compute);
  const double memory_cap = 0.6 * static_cast<double>(memory);
  ASSERT_GT(Km1(rows.graph, part), 0);
  const int64_t km1 = internal::Anneal(rows.graph, rows.subset, 2, compute_cap, memory_cap,
                                       {.steps = 20000, .seed = 1}, &part);
  EXPECT_EQ(km1, 0);
}

// Four equal sequences on four devices, their rows dealt round robin, every device's memory full:
// no single move fits, so only swaps (with a vertex of a part the row's columns reach) can gather
// each sequence on one device, which moves nothing.
TEST(Anneal, SwapsGatherTheSequencesWhenEveryPartIsFull) {
  const BlockSet set = Blocks({8192, 8192, 8192, 8192}, "causal", 1024);
  const Hypergraph g = BuildHypergraph(set);
  const internal::CoarseLevel rows =
      internal::ContractRows(g, set.sequence_first_block, AllVertices(g));
  constexpr int32_t k = 4;
  std::vector<int32_t> part(rows.graph.n_vertices(), -1);
  int64_t compute = 0, memory = 0;
  for (int32_t v : rows.subset) {
    part[v] = v % k;
    compute += rows.graph.compute_weight[v];
    memory += rows.graph.memory_weight[v];
  }
  const double memory_cap = static_cast<double>(memory) / k;  // 8 rows per part, as dealt
  ASSERT_GT(Km1(rows.graph, part), 0);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    SCOPED_TRACE(seed);
    std::vector<int32_t> annealed = part;
    const int64_t km1 = internal::Anneal(rows.graph, rows.subset, k, static_cast<double>(compute),
                                         memory_cap, {.steps = 40000, .seed = seed}, &annealed);
    EXPECT_EQ(km1, 0);
    EXPECT_EQ(Km1(rows.graph, annealed), 0);
  }
}

// Batches with one long sequence and several short ones on few devices, the case whole rows are
// for: the placement meets both caps for every seed and the same seed gives the same placement.
TEST(PartitionBlocks, MeetsBothCapsDeterministicallyOnLongAndShortSequences) {
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    std::vector<int64_t> lengths = {1024 * (16 + static_cast<int64_t>(rng() % 48))};
    for (int i = 0; i < 2 + static_cast<int>(rng() % 5); ++i) {
      lengths.push_back(1024 * (1 + static_cast<int64_t>(rng() % 12)));
    }
    const BlockSet set = Blocks(lengths, seed % 3 ? "causal" : "lambda:sink=64,window=4096", 1024);
    const Topology topology{.nodes = 1, .devices_per_node = 2 + static_cast<int32_t>(rng() % 7)};
    const PartitionOptions options{.eps_compute = 0.05, .eps_memory = 0.05, .seed = seed};
    auto a = PartitionBlocks(set, topology, options);
    auto b = PartitionBlocks(set, topology, options);
    ASSERT_TRUE(a.ok() && b.ok());
    // Blocks are all 1024 tokens, so the memory cap holds only when whole blocks can fill it.
    const int64_t blocks = static_cast<int64_t>(set.data_blocks.size());
    const int64_t devices = topology.devices();
    const auto per_device =
        static_cast<int64_t>(1.05 * static_cast<double>(blocks) / static_cast<double>(devices));
    if (per_device * devices >= blocks) {
      EXPECT_TRUE(a->balanced);
    }
    EXPECT_EQ(a->placement.data_device, b->placement.data_device);
    EXPECT_EQ(a->placement.compute_device, b->placement.compute_device);
  }
}

// Places `set` on one thread, then on each of `threads`, and expects the same placement each time.
void ExpectPlacesAlikeOn(const BlockSet& set, const Topology& topology, PartitionOptions options,
                         std::initializer_list<int32_t> threads) {
  options.threads = 1;
  auto one = PartitionBlocks(set, topology, options);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (int32_t t : threads) {
    options.threads = t;
    auto more = PartitionBlocks(set, topology, options);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    EXPECT_EQ(one->placement.data_device, more->placement.data_device) << t << " threads";
    EXPECT_EQ(one->placement.compute_device, more->placement.compute_device) << t << " threads";
  }
}

// The nodes' second-level problems are solved on any number of threads with the same result.
TEST(PartitionBlocks, PlacesAlikeOnAnyThreadCount) {
  for (uint64_t seed = 0; seed < 6; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const BlockSet set =
        Blocks(RandomLengths(rng, {2, 6}, {1, 40}, 1024), seed % 2 ? "causal" : "full", 512);
    const Topology topology{.nodes = 2 + static_cast<int32_t>(rng() % 5), .devices_per_node = 4};
    ExpectPlacesAlikeOn(set, topology, {.seed = seed}, {3});
  }
}

// One level of 128 parts over about 400 data blocks: the whole-row walk is long enough to be split
// into two chains (partition_blocks.cc kSplitSteps), and the multilevel starts run side by side
// on more than one thread. Neither changes the placement.
TEST(PartitionBlocks, PlacesAlikeOnAnyThreadCountWhenWalksAreSplit) {
  for (uint64_t seed = 0; seed < 2; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const BlockSet set = Blocks(RandomLengths(rng, {40, 60}, {1, 16}, 512),
                                seed % 2 ? "causal" : "lambda:sink=64,window=2048", 512);
    ASSERT_GE(set.data_blocks.size(), 350u);
    ExpectPlacesAlikeOn(set, {.nodes = 1, .devices_per_node = 128},
                        {.eps_compute = 0.5, .eps_memory = 100, .seed = seed}, {2, 3});
  }
}

// One level of 4, 32 or 128 parts: on more than one thread the multilevel starts run beside the
// whole rows, and those that start before the rows are known to win stop when they do. Neither
// changes the placement.
TEST(PartitionBlocks, PlacesAlikeOnAnyThreadCountWhetherOrNotTheRowsWin) {
  for (uint64_t seed = 0; seed < 6; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed + 100);
    const int32_t parts = std::array<int32_t, 3>{4, 32, 128}[seed % 3];
    const BlockSet set = Blocks(RandomLengths(rng, {4, 12}, {1, 48}, 1024),
                                seed % 2 ? "causal" : "lambda:sink=64,window=4096", 512);
    ExpectPlacesAlikeOn(set, {.nodes = 1, .devices_per_node = parts},
                        {.eps_compute = 0.3, .eps_memory = 100, .seed = seed}, {2, 8});
  }
}

// A k-way run told to stop ends with an empty result; one given a stop flag that stays clear
// runs as if it had none.
TEST(RunKway, StopsWhenToldAndRunsAsBeforeWhenNot) {
  const BlockSet set = Blocks({8192, 4096, 2048}, "causal", 512);
  const Hypergraph g = BuildHypergraph(set);
  const std::vector<int32_t> subset = AllVertices(g);
  const internal::KwayProblem problem = UncappedProblem(set, g, subset, 4, 1);
  const internal::KwayStart start{.kind = internal::KwayStart::Kind::kGeometric};
  const internal::KwayResult free_run = internal::RunKway(problem, start, 8, 2);
  std::atomic<bool> stop{false};
  const internal::KwayResult watched = internal::RunKway(problem, start, 8, 2, &stop);
  EXPECT_EQ(watched.part, free_run.part);
  EXPECT_EQ(watched.connectivity, free_run.connectivity);
  ASSERT_EQ(free_run.part.size(), subset.size());
  stop = true;
  EXPECT_TRUE(internal::RunKway(problem, start, 8, 2, &stop).part.empty());
}

// Starts run through RunKwayFromNewPlacement in turn: one that places the subset as none before
// it did ends as RunKway would; one refused ends as an earlier refined one did, so refusing it
// loses nothing. Few rows on 8 parts make the geometric cuts coincide, so some are refused.
TEST(RunKwayFromNewPlacement, RefinesEachPlacementOnceAndLosesNoResult) {
  using Kind = internal::KwayStart::Kind;
  const internal::KwayStart starts[] = {{Kind::kGeometric, 1.0}, {Kind::kGeometric, 0.5},
                                        {Kind::kGeometric, 2.0}, {Kind::kContiguous},
                                        {Kind::kGreedy},         {Kind::kStripes}};
  int64_t refused = 0, refined = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed + 300);
    const BlockSet set = Blocks(RandomLengths(rng, {1, 6}, {1, 12}, 1024),
                                seed % 2 ? "causal" : "lambda:sink=64,window=2048", 512);
    const Hypergraph g = BuildHypergraph(set);
    const std::vector<int32_t> subset = AllVertices(g);
    const internal::KwayProblem problem = UncappedProblem(set, g, subset, seed % 3 ? 8 : 4, seed);
    std::vector<std::vector<int32_t>> placed;
    std::vector<internal::KwayResult> ends;
    for (const internal::KwayStart& start : starts) {
      const internal::KwayResult full = internal::RunKway(problem, start, 8, 1);
      const std::optional<internal::KwayResult> once =
          internal::RunKwayFromNewPlacement(problem, start, 8, 1, &placed);
      if (once) {
        ++refined;
        EXPECT_EQ(once->part, full.part);
        EXPECT_EQ(once->connectivity, full.connectivity);
        ends.push_back(full);
      } else {
        ++refused;
        EXPECT_TRUE(std::any_of(ends.begin(), ends.end(), [&](const internal::KwayResult& end) {
          return end.part == full.part && end.connectivity == full.connectivity;
        }));
      }
    }
    EXPECT_EQ(placed.size(), ends.size());
    // A given partition is new once, then refused.
    const std::vector<int32_t> given = ends.front().part;
    const internal::KwayStart from_given{.kind = Kind::kGiven, .given = &given};
    EXPECT_TRUE(internal::RunKwayFromNewPlacement(problem, from_given, 8, 1, &placed).has_value());
    EXPECT_FALSE(internal::RunKwayFromNewPlacement(problem, from_given, 8, 1, &placed).has_value());
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(refined, 16);
}

// The km1 change of moving v to part `to`, counted from scratch on v's nets.
int64_t MoveKm1Change(const Hypergraph& g, std::vector<int32_t> part, int32_t v, int32_t to) {
  const auto spanned = [&](int32_t n) {
    std::vector<int32_t> parts;
    for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) parts.push_back(part[g.pins[i]]);
    std::sort(parts.begin(), parts.end());
    return static_cast<int64_t>(std::unique(parts.begin(), parts.end()) - parts.begin());
  };
  int64_t change = 0;
  for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i)
    change -= g.net_weight[g.incident[i]] * spanned(g.incident[i]);
  part[v] = to;
  for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i)
    change += g.net_weight[g.incident[i]] * spanned(g.incident[i]);
  return change;
}

// An FM pass moves the vertex of best gain each time and keeps the best prefix of its moves, so
// where it ends no vertex it did not move can lower km1 by a move: that move would have been the
// next one taken and would have ended lower. (Caps are loose, so every move fits.)
TEST(RunKway, AnFmPassLeavesNoVertexItDidNotMoveAMoveThatLowersKm1) {
  int64_t moved = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, {2, 6}, {1000, 8000});
    const BlockSet set = Blocks(lengths, seed % 2 ? "causal" : "lambda:sink=16,window=700", 256);
    const Hypergraph g = BuildHypergraph(set);
    const int32_t k = 2 + static_cast<int32_t>(seed % 7);
    const std::vector<int32_t> all = AllVertices(g);
    const std::vector<int32_t> start = RunsWithStrays(g, all, k, rng);
    const internal::KwayProblem problem = UncappedProblem(set, g, all, k, seed);
    const internal::KwayResult result = internal::RunKway(
        problem, {.kind = internal::KwayStart::Kind::kGiven, .given = &start}, /*rounds=*/0,
        /*fm_passes=*/1);
    EXPECT_LE(Km1(g, result.part), Km1(g, start));
    for (int32_t v = 0; v < g.n_vertices(); ++v) {
      if (result.part[v] != start[v]) {
        ++moved;
        continue;
      }
      for (int32_t to = 0; to < k; ++to) {
        EXPECT_GE(MoveKm1Change(g, result.part, v, to), 0) << "vertex " << v << " to part " << to;
      }
    }
  }
  EXPECT_GT(moved, 0);
}

// A topology whose widest problem needs more partitioner tables than the bound allows is refused
// with the reason, before anything is allocated for it.
TEST(PartitionBlocks, RefusesATopologyWhoseTablesWouldNotFit) {
  // 4096 blocks of 256 tokens: 8192 nets; 65536 parts at once need 6 GiB of tables.
  const BlockSet set = Blocks({1 << 20}, "lambda:sink=16,window=256", 256);
  const Topology one_node{.nodes = 1, .devices_per_node = 65536};
  auto r = PartitionBlocks(set, one_node, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("topology 1x65536: placing 8192 nets on 65536 parts"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace dcp
