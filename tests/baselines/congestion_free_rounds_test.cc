// SPDX-License-Identifier: Apache-2.0
// Maximum bipartite matching (Hopcroft-Karp) against brute force, and the congestion-free rounds
// FCP sends its keys and values in: every round a matching, maximal, all edges covered once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "baselines/peer_strategies.h"
#include "testing/cases.h"

namespace dcp::internal {
namespace {

std::vector<DeviceEdge> RandomEdges(std::mt19937_64& rng, int32_t devices, double density) {
  std::bernoulli_distribution keep(density);
  std::vector<DeviceEdge> edges;
  for (int32_t u = 0; u < devices; ++u) {
    for (int32_t v = 0; v < devices; ++v) {
      if (u != v && keep(rng)) edges.emplace_back(u, v);
    }
  }
  std::shuffle(edges.begin(), edges.end(), rng);
  return edges;
}

// The largest matching, by trying every subset of edges.
size_t BruteForceMatchingSize(const std::vector<DeviceEdge>& edges) {
  size_t best = 0;
  for (uint32_t subset = 0; subset < (1u << edges.size()); ++subset) {
    std::set<int32_t> senders, receivers;
    bool matching = true;
    for (size_t e = 0; e < edges.size() && matching; ++e) {
      if ((subset >> e & 1u) == 0) continue;
      matching = senders.insert(edges[e].first).second && receivers.insert(edges[e].second).second;
    }
    if (matching) best = std::max<size_t>(best, __builtin_popcount(subset));
  }
  return best;
}

bool IsMatching(const std::vector<DeviceEdge>& edges) {
  std::set<int32_t> senders, receivers;
  for (const auto& [u, v] : edges) {
    if (!senders.insert(u).second || !receivers.insert(v).second) return false;
  }
  return true;
}

TEST(MaximumMatching, IsAsLargeAsBruteForceOnSmallGraphs) {
  for (uint64_t seed = 0; seed < testing::RandomCases(300); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    const auto devices = static_cast<int32_t>(2 + rng() % 4);
    std::vector<DeviceEdge> edges = RandomEdges(rng, devices, 0.4);
    if (edges.size() > 14) edges.resize(14);
    const std::vector<DeviceEdge> matched = MaximumMatching(devices, edges);
    EXPECT_TRUE(IsMatching(matched));
    for (const DeviceEdge& e : matched) {
      EXPECT_NE(std::find(edges.begin(), edges.end(), e), edges.end());
    }
    EXPECT_EQ(matched.size(), BruteForceMatchingSize(edges));
  }
}

TEST(MaximumMatching, DoesNotDependOnTheOrderOfTheEdges) {
  std::mt19937_64 rng(7);
  std::vector<DeviceEdge> edges = RandomEdges(rng, 12, 0.3);
  const std::vector<DeviceEdge> first = MaximumMatching(12, edges);
  std::shuffle(edges.begin(), edges.end(), rng);
  EXPECT_EQ(MaximumMatching(12, edges), first);
}

TEST(CongestionFreeRounds, EveryRoundIsAMaximalMatchingAndEveryEdgeIsInOne) {
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    const auto devices = static_cast<int32_t>(1 + rng() % 24);
    const double density = 0.05 + 0.9 * static_cast<double>(rng() % 100) / 100.0;
    std::vector<DeviceEdge> edges = RandomEdges(rng, devices, density);
    const std::vector<DeviceEdge> duplicate = edges;  // a duplicate edge counts once
    edges.insert(edges.end(), duplicate.begin(), duplicate.begin() + duplicate.size() / 2);
    const std::vector<std::vector<DeviceEdge>> rounds = CongestionFreeRounds(devices, edges);

    std::map<int32_t, int32_t> degree;
    const std::set<DeviceEdge> all(edges.begin(), edges.end());
    for (const auto& [u, v] : all) {
      ++degree[2 * u];
      ++degree[2 * v + 1];
    }
    std::set<DeviceEdge> left = all;
    for (const std::vector<DeviceEdge>& round : rounds) {
      ASSERT_FALSE(round.empty());
      EXPECT_TRUE(IsMatching(round));
      std::set<int32_t> busy_senders, busy_receivers;
      for (const DeviceEdge& e : round) {
        EXPECT_EQ(left.erase(e), 1u) << e.first << " -> " << e.second;
        busy_senders.insert(e.first);
        busy_receivers.insert(e.second);
      }
      // Maximal: an edge left for later has a busy end in this round.
      for (const auto& [u, v] : left) {
        EXPECT_TRUE(busy_senders.contains(u) || busy_receivers.contains(v)) << u << " -> " << v;
      }
    }
    EXPECT_TRUE(left.empty());
    int32_t max_degree = 0;
    for (const auto& [vertex, d] : degree) max_degree = std::max(max_degree, d);
    EXPECT_GE(static_cast<int32_t>(rounds.size()), max_degree);
    EXPECT_LE(static_cast<int32_t>(rounds.size()), std::max(0, 2 * max_degree - 1));
  }
}

TEST(CongestionFreeRounds, AllToAllTakesDevicesMinusOneRounds) {
  // Every device sends to every other: a regular bipartite graph, so each maximum matching is
  // perfect and what is left stays regular.
  for (int32_t devices : {2, 3, 8, 32}) {
    std::vector<DeviceEdge> edges;
    for (int32_t u = 0; u < devices; ++u) {
      for (int32_t v = 0; v < devices; ++v) {
        if (u != v) edges.emplace_back(u, v);
      }
    }
    const auto rounds = CongestionFreeRounds(devices, edges);
    EXPECT_EQ(static_cast<int32_t>(rounds.size()), devices - 1) << devices << " devices";
    for (const auto& round : rounds) EXPECT_EQ(static_cast<int32_t>(round.size()), devices);
  }
  EXPECT_TRUE(CongestionFreeRounds(4, {}).empty());
}

}  // namespace
}  // namespace dcp::internal
