// SPDX-License-Identifier: Apache-2.0
// Congestion-free rounds of peer-to-peer messages: repeated maximum bipartite matchings
// (Hopcroft-Karp), as FCP schedules its any-to-any key/value traffic.
#include <algorithm>
#include <iterator>
#include <limits>
#include <queue>

#include "baselines/peer_strategies.h"

namespace dcp::internal {
namespace {

constexpr int32_t kUnmatched = -1;
constexpr int32_t kInfinity = std::numeric_limits<int32_t>::max();

// Hopcroft-Karp on senders (left) x receivers (right), both numbered [0, n).
class HopcroftKarp {
 public:
  explicit HopcroftKarp(std::vector<std::vector<int32_t>> adjacency)
      : adjacency_(std::move(adjacency)),
        n_(static_cast<int32_t>(adjacency_.size())),
        match_left_(n_, kUnmatched),
        match_right_(n_, kUnmatched),
        layer_(n_),
        next_(n_) {}

  std::vector<DeviceEdge> Run() {
    while (LayerFreeSenders()) {
      std::fill(next_.begin(), next_.end(), 0);
      for (int32_t u = 0; u < n_; ++u) {
        if (match_left_[u] == kUnmatched) Augment(u);
      }
    }
    std::vector<DeviceEdge> matched;
    for (int32_t u = 0; u < n_; ++u) {
      if (match_left_[u] != kUnmatched) matched.emplace_back(u, match_left_[u]);
    }
    return matched;
  }

 private:
  // Breadth-first layers from the free senders along alternating paths; true when a free
  // receiver is reachable (an augmenting path exists).
  bool LayerFreeSenders() {
    std::queue<int32_t> queue;
    for (int32_t u = 0; u < n_; ++u) {
      layer_[u] = match_left_[u] == kUnmatched ? 0 : kInfinity;
      if (layer_[u] == 0) queue.push(u);
    }
    bool found = false;
    while (!queue.empty()) {
      const int32_t u = queue.front();
      queue.pop();
      for (int32_t v : adjacency_[u]) {
        const int32_t w = match_right_[v];
        if (w == kUnmatched) {
          found = true;
        } else if (layer_[w] == kInfinity) {
          layer_[w] = layer_[u] + 1;
          queue.push(w);
        }
      }
    }
    return found;
  }

  // Depth-first along the layers from sender u; flips the path when it ends at a free receiver.
  bool Augment(int32_t u) {
    for (size_t& i = next_[u]; i < adjacency_[u].size(); ++i) {
      const int32_t v = adjacency_[u][i];
      const int32_t w = match_right_[v];
      if (w == kUnmatched || (layer_[w] == layer_[u] + 1 && Augment(w))) {
        match_left_[u] = v;
        match_right_[v] = u;
        ++i;
        return true;
      }
    }
    layer_[u] = kInfinity;  // a dead end in this phase
    return false;
  }

  std::vector<std::vector<int32_t>> adjacency_;
  int32_t n_;
  std::vector<int32_t> match_left_, match_right_, layer_;
  std::vector<size_t> next_;
};

}  // namespace

std::vector<DeviceEdge> MaximumMatching(int32_t devices, const std::vector<DeviceEdge>& edges) {
  std::vector<std::vector<int32_t>> adjacency(static_cast<size_t>(devices));
  for (const auto& [from, to] : edges) adjacency[from].push_back(to);
  for (std::vector<int32_t>& list : adjacency) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return HopcroftKarp(std::move(adjacency)).Run();
}

std::vector<std::vector<DeviceEdge>> CongestionFreeRounds(int32_t devices,
                                                          std::vector<DeviceEdge> edges) {
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<std::vector<DeviceEdge>> rounds;
  while (!edges.empty()) {
    std::vector<DeviceEdge> round = MaximumMatching(devices, edges);
    DCP_CHECK(!round.empty(), "a non-empty graph has a non-empty matching");
    std::vector<DeviceEdge> rest;
    rest.reserve(edges.size() - round.size());
    std::set_difference(edges.begin(), edges.end(), round.begin(), round.end(),
                        std::back_inserter(rest));
    edges = std::move(rest);
    rounds.push_back(std::move(round));
  }
  return rounds;
}

}  // namespace dcp::internal
