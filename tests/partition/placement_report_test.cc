// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "dcp/partition.h"

namespace dcp {
namespace {

BlockSet RandomBlocks(std::mt19937_64& rng, const char* mask, int64_t groups) {
  std::uniform_int_distribution<int64_t> len(3, 700);  // documents:count=3 needs 3 tokens
  std::vector<int64_t> lengths(1 + rng() % 4);
  for (int64_t& l : lengths) l = len(rng);
  const AttentionShape shape{.heads = 8, .kv_heads = 2, .head_dim = 16};
  auto batch = Batch::Create(lengths, {*MaskSpec::Parse(mask)}, shape);
  if (!batch.ok()) ADD_FAILURE() << batch.status().ToString();
  auto set = MakeBlocks(
      *batch, {.block_size = 1 + static_cast<int64_t>(rng() % 200), .head_groups = groups});
  EXPECT_TRUE(set.ok()) << set.status().ToString();
  return *set;
}

Placement RandomPlacement(std::mt19937_64& rng, const BlockSet& set, int32_t devices) {
  Placement p;
  for (size_t i = 0; i < set.data_blocks.size(); ++i) {
    p.data_device.push_back(DeviceId{static_cast<int32_t>(rng() % devices)});
  }
  for (size_t i = 0; i < set.compute_blocks.size(); ++i) {
    p.compute_device.push_back(DeviceId{static_cast<int32_t>(rng() % devices)});
  }
  return p;
}

// Bytes moved, counted from the blocks themselves: every (data block, head group, direction) is
// sent once to every device other than its owner that computes a tile needing it.
int64_t CountBytesMoved(const BlockSet& set, const Placement& p, int64_t* inter_node,
                        const Topology& topology) {
  std::set<std::tuple<int32_t, int32_t, int, int32_t>> needs;  // block, group, direction, device
  std::set<std::tuple<int32_t, int32_t, int, int32_t>> node_needs;
  for (size_t c = 0; c < set.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = set.compute_blocks[c];
    const int32_t d = p.compute_device[c].value;
    for (auto [dir, block] : {std::pair{0, cb.q_block}, std::pair{1, cb.kv_block}}) {
      const int32_t owner = p.data_device[block.value].value;
      if (d != owner) needs.insert({block.value, cb.head_group, dir, d});
      const int32_t node = topology.NodeOf(DeviceId{d});
      if (node != topology.NodeOf(DeviceId{owner})) {
        node_needs.insert({block.value, cb.head_group, dir, node});
      }
    }
  }
  const auto bytes = [&](int32_t block, int dir) {
    const NetBytes b = NetBytesOf(set.data_blocks[block], set.shape, set.head_groups);
    return dir == 0 ? b.row_fwd + b.row_bwd : b.column_fwd + b.column_bwd;
  };
  int64_t total = 0;
  for (const auto& [block, group, dir, device] : needs) total += bytes(block, dir);
  *inter_node = 0;
  for (const auto& [block, group, dir, node] : node_needs) *inter_node += bytes(block, dir);
  return total;
}

// NetBytesOf counted by hand for one shape: 1000 tokens, 8 query and 2 KV heads of 128 elements,
// two head groups (4 query heads and 1 KV head each), in bf16 (2 bytes) and fp32 (4 bytes); LSE
// and Delta are fp32 in both.
TEST(NetBytesOf, CountsEveryTensorOfARowAndAColumn) {
  DataBlock block;
  block.tokens = 1000;
  for (const auto& [dtype, e] : {std::pair{DType::kBFloat16, 2}, std::pair{DType::kFloat32, 4}}) {
    SCOPED_TRACE(e);
    const int64_t q = 1000 * 4 * 128 * e;  // Q, and likewise O, dO and dQ, per head group
    const int64_t lse = 1000 * 4 * 4;      // LSE, and likewise Delta
    const int64_t k = 1000 * 1 * 128 * e;  // K, and likewise V, dK and dV
    const NetBytes b = NetBytesOf(
        block, AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 128, .dtype = dtype}, 2);
    EXPECT_EQ(b.row_fwd, /*Q in*/ q + /*O and LSE out*/ q + lse);
    EXPECT_EQ(b.row_bwd, /*Q, dO, LSE, Delta in*/ q + q + lse + lse + /*dQ out*/ q);
    EXPECT_EQ(b.column_fwd, /*K, V in*/ k + k);
    EXPECT_EQ(b.column_bwd, /*K, V in*/ k + k + /*dK, dV out*/ k + k);
  }
}

TEST(EvaluatePlacement, Km1EqualsBytesCountedFromTheBlocks) {
  const char* masks[] = {"causal", "lambda:sink=8,window=100", "full", "documents:count=3"};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const BlockSet set = RandomBlocks(rng, masks[seed % 4], 1 + static_cast<int64_t>(seed % 2));
    const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 3),
                            .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
    const Placement p = RandomPlacement(rng, set, topology.devices());
    const Hypergraph graph = BuildHypergraph(set);
    auto report = EvaluatePlacement(graph, p, topology);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    int64_t inter = 0;
    EXPECT_EQ(report->km1_bytes, CountBytesMoved(set, p, &inter, topology));
    EXPECT_EQ(report->bytes_inter_node, inter);
    EXPECT_EQ(report->bytes_intra_node, report->km1_bytes - report->bytes_inter_node);
    // The imbalances, from the blocks each device holds (max / mean; 1 when all are zero).
    std::vector<int64_t> flops(topology.devices(), 0), bytes(topology.devices(), 0);
    for (size_t c = 0; c < set.compute_blocks.size(); ++c) {
      flops[p.compute_device[c].value] +=
          set.FlopsFwd(set.compute_blocks[c]) + set.FlopsBwd(set.compute_blocks[c]);
    }
    for (size_t d = 0; d < set.data_blocks.size(); ++d) {
      bytes[p.data_device[d].value] += set.data_blocks[d].bytes.Total();
    }
    const auto max_over_mean = [](const std::vector<int64_t>& load) {
      int64_t total = 0, most = 0;
      for (int64_t x : load) total += x, most = std::max(most, x);
      return total == 0 ? 1.0
                        : static_cast<double>(most) * static_cast<double>(load.size()) /
                              static_cast<double>(total);
    };
    EXPECT_NEAR(report->compute_imbalance, max_over_mean(flops), 1e-12);
    EXPECT_NEAR(report->memory_imbalance, max_over_mean(bytes), 1e-12);
  }
}

TEST(EvaluatePlacement, OneDeviceMovesNothingAndIsBalanced) {
  std::mt19937_64 rng(1);
  const BlockSet set = RandomBlocks(rng, "causal", 1);
  const Hypergraph graph = BuildHypergraph(set);
  Placement p{.data_device = std::vector<DeviceId>(set.data_blocks.size(), DeviceId{0}),
              .compute_device = std::vector<DeviceId>(set.compute_blocks.size(), DeviceId{0})};
  auto report = EvaluatePlacement(graph, p, Topology{});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->km1_bytes, 0);
  EXPECT_EQ(report->compute_imbalance, 1);
  EXPECT_EQ(report->memory_imbalance, 1);
}

TEST(EvaluatePlacement, RejectsDevicesOutsideTheTopology) {
  std::mt19937_64 rng(2);
  const BlockSet set = RandomBlocks(rng, "causal", 1);
  const Hypergraph graph = BuildHypergraph(set);
  Placement p = RandomPlacement(rng, set, 2);
  p.data_device[0] = DeviceId{5};
  auto report = EvaluatePlacement(graph, p, Topology{.nodes = 1, .devices_per_node = 2});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("device 5"), std::string::npos);
}

TEST(Hmetis, ExportThenReadBackGivesTheSameReport) {
  std::mt19937_64 rng(3);
  const BlockSet set = RandomBlocks(rng, "lambda:sink=4,window=64", 2);
  const Hypergraph graph = BuildHypergraph(set);
  const Topology topology{.nodes = 2, .devices_per_node = 2};
  const Placement p = RandomPlacement(rng, set, topology.devices());
  std::string hgr;
  WriteHmetis(graph, &hgr);
  // Header: comment, then "nets vertices 11".
  const size_t header = hgr.find('\n') + 1;
  EXPECT_EQ(hgr.substr(header, hgr.find('\n', header) - header),
            fmt::format("{} {} 11", graph.n_nets(), graph.n_vertices()));
  std::string partition;
  for (DeviceId d : p.compute_device) partition += fmt::format("{}\n", d.value);
  for (DeviceId d : p.data_device) partition += fmt::format("{}\n", d.value);
  auto read = ReadPartition(partition, graph, topology);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->compute_device, p.compute_device);
  EXPECT_EQ(read->data_device, p.data_device);
}

// The .hgr body parsed and checked against the blocks it was made of, not against the Hypergraph
// it was written from: one net per (data block, head group, rows or columns) with tiles, whose pins
// are the data block and exactly the tiles of that head group whose q block (rows) or kv block
// (columns) it is, weighted by NetBytesOf forward + backward; one weight line per vertex, FLOPs
// of a tile forward + backward or bytes of a data block, each divided by the scale the header
// comment states (at least 1).
TEST(Hmetis, BodyListsEveryNetAndWeightOfTheBlocks) {
  std::mt19937_64 rng(8);
  const BlockSet set = RandomBlocks(rng, "causal-blockwise:block=16,local=2", 2);
  ASSERT_GE(set.head_groups, 1);
  std::string hgr;
  const HmetisScale scale = WriteHmetis(BuildHypergraph(set), &hgr);
  std::istringstream in(hgr);
  std::string comment;
  std::getline(in, comment);
  EXPECT_NE(comment.find(fmt::format("FLOPs / {}", scale.compute)), std::string::npos) << comment;
  EXPECT_NE(comment.find(fmt::format("net weight = bytes / {}", scale.net)), std::string::npos);
  const auto scaled = [](int64_t weight, double by) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(weight) / by));
  };
  const auto n_compute = static_cast<int64_t>(set.compute_blocks.size());
  const auto n_data = static_cast<int64_t>(set.data_blocks.size());

  // Expected nets: (weight, sorted 1-based pins).
  std::multiset<std::pair<int64_t, std::vector<int64_t>>> expected;
  for (int64_t d = 0; d < n_data; ++d) {
    const NetBytes bytes = NetBytesOf(set.data_blocks[d], set.shape, set.head_groups);
    for (int64_t g = 0; g < set.head_groups; ++g) {
      std::vector<int64_t> rows = {n_compute + d + 1}, columns = {n_compute + d + 1};
      for (int64_t c = 0; c < n_compute; ++c) {
        const ComputeBlock& cb = set.compute_blocks[c];
        if (cb.head_group != g) continue;
        if (cb.q_block.value == d) rows.push_back(c + 1);
        if (cb.kv_block.value == d) columns.push_back(c + 1);
      }
      for (auto& [pins, weight] : {std::pair{rows, bytes.row_fwd + bytes.row_bwd},
                                   std::pair{columns, bytes.column_fwd + bytes.column_bwd}}) {
        if (pins.size() < 2) continue;
        std::vector<int64_t> sorted = pins;
        std::sort(sorted.begin(), sorted.end());
        expected.emplace(scaled(weight, scale.net), sorted);
      }
    }
  }
  int64_t nets = 0, vertices = 0, format = 0;
  in >> nets >> vertices >> format;
  EXPECT_EQ(nets, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(vertices, n_compute + n_data);
  EXPECT_EQ(format, 11);
  std::string line;
  std::getline(in, line);  // the rest of the counts line
  std::multiset<std::pair<int64_t, std::vector<int64_t>>> written;
  for (int64_t n = 0; n < nets && std::getline(in, line); ++n) {
    std::istringstream fields(line);
    int64_t weight = 0;
    fields >> weight;
    std::vector<int64_t> pins;
    for (int64_t pin; fields >> pin;) pins.push_back(pin);
    std::sort(pins.begin(), pins.end());
    written.emplace(weight, pins);
  }
  EXPECT_TRUE(written == expected)
      << written.size() << " nets written, " << expected.size() << " expected";
  for (int64_t v = 0; v < n_compute + n_data; ++v) {
    ASSERT_TRUE(std::getline(in, line)) << "vertex " << v + 1 << " has no weight line";
    const int64_t want =
        v < n_compute
            ? scaled(set.FlopsFwd(set.compute_blocks[v]) + set.FlopsBwd(set.compute_blocks[v]),
                     scale.compute)
            : scaled(set.data_blocks[v - n_compute].bytes.Total(), scale.memory);
    EXPECT_EQ(std::stoll(line), want) << "vertex " << v + 1;
  }
  EXPECT_FALSE(std::getline(in, line)) << "after the last vertex: '" << line << "'";
}

TEST(ReadPartition, RejectsBadFiles) {
  std::mt19937_64 rng(4);
  const BlockSet set = RandomBlocks(rng, "causal", 1);
  const Hypergraph graph = BuildHypergraph(set);
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  EXPECT_NE(ReadPartition("0\n1\n", graph, topology).status().message().find("vertices"),
            std::string::npos);
  EXPECT_NE(ReadPartition("7\n", graph, topology).status().message().find("'7'"),
            std::string::npos);
  EXPECT_NE(ReadPartition("x\n", graph, topology).status().message().find("'x'"),
            std::string::npos);
}

TEST(Topology, ParsesAndRejects) {
  auto t = Topology::Parse("4x8");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->devices(), 32);
  EXPECT_EQ(t->NodeOf(DeviceId{9}), 1);
  EXPECT_EQ(t->ToString(), "4x8");
  EXPECT_TRUE(Topology::Parse("128x8").ok());  // 1024 devices
  EXPECT_TRUE(Topology::Parse("1x65536").ok());
  for (const char* bad : {"4", "x8", "4x", "0x8", "4x0", "256x257", "65537x1", "99999x99999",
                          "4x8x2", "-1x4"}) {
    SCOPED_TRACE(bad);
    auto r = Topology::Parse(bad);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace dcp
