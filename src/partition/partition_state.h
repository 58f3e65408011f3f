// SPDX-License-Identifier: Apache-2.0
// A k-way partition of a hypergraph's vertices, with what moves and their km1 changes need kept
// current vertex by vertex: each part's compute and memory load, each net's pins per part and the
// parts it spans (a bitset), and the connectivity sum (each net's weight times the parts it spans;
// km1 is that minus the weight of the nets touched). The k-way engine (kway_engine.h) and the
// annealer (annealer.cc) each hold one. Internal to src/partition.
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
        words_((k + 63) / 64),
        pin_count_(static_cast<size_t>(g.n_nets()) * k, 0),
        span_(static_cast<size_t>(g.n_nets()) * words_, 0) {}

  // The label of every vertex of the graph (-1: none).
  const std::vector<int32_t>& parts() const { return part_; }
  int32_t part(int32_t v) const { return part_[v]; }
  // Per part, the compute and the memory weight of its assigned vertices.
  const std::vector<int64_t>& compute() const { return compute_; }
  const std::vector<int64_t>& memory() const { return memory_; }
  // Pins of net n on part p.
  int32_t pins(int32_t n, int32_t p) const { return pin_count_[Slot(n, p)]; }
  // The parts net n has pins on, as a bitset: bit p % 64 of word p / 64 of the span is set when
  // the net has a pin on part p.
  std::span<const uint64_t> span(int32_t n) const {
    return {span_.data() + static_cast<size_t>(n) * words_, static_cast<size_t>(words_)};
  }
  // Words per span() bitset.
  int32_t span_words() const { return words_; }
  // Part p's bit in word p / 64 of a span() bitset.
  static uint64_t SpanBit(int32_t p) { return uint64_t{1} << (p % 64); }
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
        SpanWord(n, p) |= SpanBit(p);
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
        SpanWord(n, p) &= ~SpanBit(p);
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
  uint64_t& SpanWord(int32_t net, int32_t p) {
    return span_[static_cast<size_t>(net) * words_ + p / 64];
  }

  const Hypergraph& g_;
  int32_t k_;
  std::vector<int32_t> part_;
  std::vector<int64_t> compute_, memory_;
  int32_t words_;                   // per span bitset: ceil(k / 64)
  std::vector<int32_t> pin_count_;  // per (net, part): pins of the net on the part
  // Per net, the bitset of the parts it has pins on (span()): the parts a vertex's nets reach are
  // the OR of a few words per net, already in part order.
  std::vector<uint64_t> span_;
  int64_t connectivity_ = 0;  // sum over nets of weight x parts spanned
};

}  // namespace dcp::internal
