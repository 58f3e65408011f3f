// SPDX-License-Identifier: Apache-2.0
// A k-way partition of a hypergraph's vertices, with what moves and their km1 changes need kept
// current vertex by vertex: each part's compute and memory load, each net's pins per part and the
// parts it spans, and the connectivity sum (each net's weight times the parts it spans; km1 is
// that minus the weight of the nets touched). The k-way engine (kway_engine.h) and the annealer
// (annealer.cc) each hold one. Internal to src/partition.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

// The weight of the nets with a pin in the subset: connectivity minus this is km1.
inline int64_t TouchedNetWeight(const Hypergraph& g, const std::vector<int32_t>& subset) {
  std::vector<char> touched(g.n_nets(), 0);
  int64_t total = 0;
  for (int32_t v : subset) {
    for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i) {
      const int32_t n = g.incident[i];
      if (!touched[n]) {
        touched[n] = 1;
        total += g.net_weight[n];
      }
    }
  }
  return total;
}

class PartitionState {
 public:
  // Every vertex starts with the label `part` gives it (-1: none) but counts in no load or pin
  // until it is assigned.
  PartitionState(const Hypergraph& g, int32_t k, std::vector<int32_t> part)
      : g_(g),
        k_(k),
        part_(std::move(part)),
        compute_(k, 0),
        memory_(k, 0),
        pin_count_(static_cast<size_t>(g.n_nets()) * k, 0),
        parts_of_net_(pin_count_.size(), 0),
        index_in_net_(pin_count_.size(), 0),
        n_parts_of_net_(g.n_nets(), 0) {}

  // The label of every vertex of the graph (-1: none).
  const std::vector<int32_t>& parts() const { return part_; }
  int32_t part(int32_t v) const { return part_[v]; }
  // Per part, the compute and the memory weight of its assigned vertices.
  const std::vector<int64_t>& compute() const { return compute_; }
  const std::vector<int64_t>& memory() const { return memory_; }
  // Pins of net n on part p.
  int32_t pins(int32_t n, int32_t p) const { return pin_count_[Slot(n, p)]; }
  // The parts net n has pins on, in no particular order.
  std::span<const int32_t> parts_of_net(int32_t n) const {
    return {parts_of_net_.data() + Slot(n, 0), static_cast<size_t>(n_parts_of_net_[n])};
  }
  // Each net's weight times the parts it spans, over the assigned vertices' nets.
  int64_t connectivity() const { return connectivity_; }

  // The largest load of a part relative to its cap, over both constraints (<= 1 within the caps).
  double MaxLoad(double compute_cap, double memory_cap) const {
    double most = 0;
    for (int32_t p = 0; p < k_; ++p) {
      most = std::max({most, static_cast<double>(compute_[p]) / compute_cap,
                       static_cast<double>(memory_[p]) / memory_cap});
    }
    return most;
  }
  // Whether every part is within both caps.
  bool WithinCaps(double compute_cap, double memory_cap) const {
    for (int32_t p = 0; p < k_; ++p) {
      if (static_cast<double>(compute_[p]) > compute_cap ||
          static_cast<double>(memory_[p]) > memory_cap) {
        return false;
      }
    }
    return true;
  }

  void Assign(int32_t v, int32_t p) {
    part_[v] = p;
    compute_[p] += g_.compute_weight[v];
    memory_[p] += g_.memory_weight[v];
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (pin_count_[Slot(n, p)]++ == 0) {
        connectivity_ += g_.net_weight[n];
        index_in_net_[Slot(n, p)] = n_parts_of_net_[n];
        parts_of_net_[Slot(n, n_parts_of_net_[n]++)] = p;
      }
    }
  }
  void Unassign(int32_t v) {
    const int32_t p = part_[v];
    compute_[p] -= g_.compute_weight[v];
    memory_[p] -= g_.memory_weight[v];
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (--pin_count_[Slot(n, p)] == 0) {
        connectivity_ -= g_.net_weight[n];
        const int32_t last = parts_of_net_[Slot(n, --n_parts_of_net_[n])];
        parts_of_net_[Slot(n, index_in_net_[Slot(n, p)])] = last;
        index_in_net_[Slot(n, last)] = index_in_net_[Slot(n, p)];
      }
    }
    part_[v] = -1;
  }
  void Move(int32_t v, int32_t to) {
    Unassign(v);
    Assign(v, to);
  }

  // Whether some move of v (assigned) could lower km1: only when v is the last pin of one of its
  // nets on its part (else every move keeps every net where it was and may add parts).
  bool MayGain(int32_t v) const {
    const int32_t from = part_[v];
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      if (pin_count_[Slot(g_.incident[i], from)] == 1) return true;
    }
    return false;
  }
  // The km1 change of moving v (assigned) to part `to`.
  int64_t MoveDelta(int32_t v, int32_t to) const {
    const int32_t from = part_[v];
    int64_t delta = 0;
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (pin_count_[Slot(n, from)] == 1) delta -= g_.net_weight[n];
      if (pin_count_[Slot(n, to)] == 0) delta += g_.net_weight[n];
    }
    return delta;
  }
  // The km1 change of swapping v and u (assigned, on different parts). A net of both keeps its
  // pin counts on both parts, so it changes nothing; every other net changes as in the one move
  // of its own vertex. Both vertices' nets are in net order (FillIncidence), so one merge of the
  // two lists finds the shared nets.
  int64_t SwapDelta(int32_t v, int32_t u) const {
    const int32_t p = part_[v], q = part_[u];
    const auto alone = [&](int32_t n, int32_t from, int32_t to) {
      return (pin_count_[Slot(n, to)] == 0 ? g_.net_weight[n] : 0) -
             (pin_count_[Slot(n, from)] == 1 ? g_.net_weight[n] : 0);
    };
    int32_t i = g_.vertex_begin[v], j = g_.vertex_begin[u];
    const int32_t i_end = g_.vertex_begin[v + 1], j_end = g_.vertex_begin[u + 1];
    int64_t delta = 0;
    while (i < i_end && j < j_end) {
      const int32_t a = g_.incident[i], b = g_.incident[j];
      if (a == b) {
        ++i;
        ++j;
      } else if (a < b) {
        delta += alone(a, p, q);
        ++i;
      } else {
        delta += alone(b, q, p);
        ++j;
      }
    }
    for (; i < i_end; ++i) delta += alone(g_.incident[i], p, q);
    for (; j < j_end; ++j) delta += alone(g_.incident[j], q, p);
    return delta;
  }

 private:
  size_t Slot(int32_t net, int32_t p) const { return static_cast<size_t>(net) * k_ + p; }

  const Hypergraph& g_;
  int32_t k_;
  std::vector<int32_t> part_;
  std::vector<int64_t> compute_, memory_;
  std::vector<int32_t> pin_count_;  // per (net, part): pins of the net on the part
  // Per net, the parts it has pins on: parts_of_net_[Slot(n, 0 .. n_parts_of_net_[n])], with
  // index_in_net_[Slot(n, p)] the place of p there; kept so that the parts a vertex's nets span
  // cost their number, not k per net.
  std::vector<int32_t> parts_of_net_, index_in_net_, n_parts_of_net_;
  int64_t connectivity_ = 0;  // sum over nets of weight x parts spanned
};

}  // namespace dcp::internal
