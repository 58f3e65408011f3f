// SPDX-License-Identifier: Apache-2.0
// Simulated annealing under two caps (see annealer.h).
#include "partition/annealer.h"

#include <cmath>

#include "partition/partition_state.h"
#include "util/random.h"

namespace dcp::internal {
namespace {

// The partition of the subset (vertices outside it keep their labels and count in nothing), with
// the annealer's moves: MayChange, SwapDelta and Move.
class AnnealState {
 public:
  AnnealState(const Hypergraph& g, const std::vector<int32_t>& subset,
              const std::vector<int32_t>& part, int32_t k, double compute_cap, double memory_cap)
      : state_(g, k, part),
        compute_cap_(compute_cap),
        memory_cap_(memory_cap),
        touched_weight_(TouchedNetWeight(g, subset)),
        members_(k),
        index_(g.n_vertices(), -1) {
    for (int32_t v : subset) {
      state_.Assign(v, part[v]);
      index_[v] = static_cast<int32_t>(members_[part[v]].size());
      members_[part[v]].push_back(v);
    }
  }
  // The subset's vertices on part p.
  const std::vector<int32_t>& members(int32_t p) const { return members_[p]; }

  int64_t km1() const { return state_.connectivity() - touched_weight_; }
  const std::vector<int32_t>& part() const { return state_.parts(); }
  int32_t part_of(int32_t v) const { return state_.part(v); }
  bool WithinCaps() const { return state_.WithinCaps(compute_cap_, memory_cap_); }

  // Whether part p may change its load by the given amounts: it ends within the caps, or no
  // further over a cap than it already was.
  bool MayChange(int32_t p, int64_t compute_change, int64_t memory_change) const {
    const auto ok = [](int64_t load, int64_t change, double cap) {
      return change <= 0 || static_cast<double>(load + change) <= cap;
    };
    return ok(state_.compute()[p], compute_change, compute_cap_) &&
           ok(state_.memory()[p], memory_change, memory_cap_);
  }

  int64_t MoveDelta(int32_t v, int32_t to) const { return state_.MoveDelta(v, to); }

  int64_t SwapDelta(int32_t v, int32_t u) const { return state_.SwapDelta(v, u); }

  // Moves v to part `to`.
  void Move(int32_t v, int32_t to) {
    std::vector<int32_t>& left = members_[state_.part(v)];
    index_[left.back()] = index_[v];
    left[index_[v]] = left.back();
    left.pop_back();
    index_[v] = static_cast<int32_t>(members_[to].size());
    members_[to].push_back(v);
    state_.Move(v, to);
  }

 private:
  PartitionState state_;
  double compute_cap_, memory_cap_;
  int64_t touched_weight_;  // of the nets the subset touches: a net on one part moves nothing
  std::vector<std::vector<int32_t>> members_;  // per part
  std::vector<int32_t> index_;                 // per vertex of the subset: its place in members_
};

}  // namespace

int64_t Anneal(const Hypergraph& g, const std::vector<int32_t>& subset, int32_t k,
               double compute_cap, double memory_cap, const AnnealOptions& options,
               std::vector<int32_t>* part) {
  AnnealState state(g, subset, *part, k, compute_cap, memory_cap);
  const size_t n = subset.size();
  int64_t best = state.km1();
  bool have_best = state.WithinCaps();
  if (n < 2 || k < 2 || options.steps <= 0) return best;

  // Temperatures are in units of the mean weight of the nets the subset touches.
  double mean_weight = 0;
  {
    std::vector<char> seen(g.n_nets(), 0);
    int64_t count = 0;
    for (int32_t v : subset) {
      for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i) {
        const int32_t net = g.incident[i];
        if (seen[net]) continue;
        seen[net] = 1;
        mean_weight += static_cast<double>(g.net_weight[net]);
        ++count;
      }
    }
    if (count == 0) return best;
    mean_weight /= static_cast<double>(count);
  }
  double heat = options.start_heat * mean_weight;
  const double cooling =
      std::pow(options.end_heat / options.start_heat, 1.0 / static_cast<double>(options.steps));

  SplitMix64 rng(options.seed);
  const auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  // A step's five choices share two 64-bit draws (a draw per choice made the generator over a
  // quarter of a step's instructions): a number in [0, bound) is `bits` random bits times bound,
  // shifted down by `bits` (no division).
  const auto scale = [](uint64_t random_bits, int bits, size_t bound) {
    return static_cast<size_t>((random_bits * static_cast<uint64_t>(bound)) >> bits);
  };
  constexpr uint64_t kLow32 = 0xffffffffu;
  const auto accept = [&](int64_t delta) {
    return delta <= 0 || uniform() < std::exp(-static_cast<double>(delta) / heat);
  };
  // A new best is copied out only when the walk is about to leave it (a move that does not lower
  // km1) or at the end: copying on every improvement would cost a whole partition per step while
  // the walk descends.
  bool best_is_current = false;
  const auto note_if_best = [&] {
    if (state.km1() < best || !have_best) {
      if (!state.WithinCaps()) return;
      best = state.km1();
      have_best = true;
      best_is_current = true;
    }
  };
  const auto before_leaving = [&](int64_t delta) {
    if (best_is_current && delta >= 0) {
      *part = state.part();
      best_is_current = false;
    }
  };
  // The part of a pin of one of v's nets (any part when v has no nets; -1 for a pin outside the
  // subset): where a move or swap of v can share a net. The net comes from the draw's high half,
  // the pin from its low half.
  const auto neighbour_part = [&](int32_t v, uint64_t draw) {
    const int32_t degree = g.vertex_begin[v + 1] - g.vertex_begin[v];
    if (degree == 0) return static_cast<int32_t>(scale(draw >> 32, 32, static_cast<size_t>(k)));
    const int32_t net =
        g.incident[g.vertex_begin[v] + static_cast<int32_t>(scale(draw >> 32, 32, degree))];
    const size_t size = g.net_begin[net + 1] - g.net_begin[net];
    return state.part_of(
        g.pins[g.net_begin[net] + static_cast<int32_t>(scale(draw & kLow32, 32, size))]);
  };
  for (int64_t step = 0; step < options.steps; ++step, heat *= cooling) {
    // The first draw: the vertex (high half), move or swap (bit 0), the swap's partner (bits
    // 1-31); the second: the neighbouring part.
    const uint64_t draw = rng();
    const int32_t v = subset[scale(draw >> 32, 32, n)];
    const int32_t from = state.part_of(v);
    const int64_t cv = g.compute_weight[v], mv = g.memory_weight[v];
    const int32_t to = neighbour_part(v, rng());
    if (to < 0 || to == from) continue;
    if (draw & 1) {
      // A move to a neighbouring part.
      if (!state.MayChange(to, cv, mv)) continue;
      const int64_t delta = state.MoveDelta(v, to);
      if (!accept(delta)) continue;
      before_leaving(delta);
      state.Move(v, to);
    } else {
      // A swap with a vertex of a neighbouring part. (A partner drawn from every part, as before,
      // is almost always on a part none of v's nets reach once parts are many: 95% of those
      // swaps were priced and refused at 128 parts.)
      const std::vector<int32_t>& others = state.members(to);
      if (others.empty()) continue;
      const int32_t u = others[scale((draw & kLow32) >> 1, 31, others.size())];
      const int64_t cu = g.compute_weight[u], mu = g.memory_weight[u];
      if (!state.MayChange(to, cv - cu, mv - mu) || !state.MayChange(from, cu - cv, mu - mv)) {
        continue;
      }
      const int64_t delta = state.SwapDelta(v, u);
      if (!accept(delta)) continue;
      before_leaving(delta);
      state.Move(v, to);
      state.Move(u, from);
    }
    note_if_best();
  }
  if (best_is_current) *part = state.part();
  return best;
}

}  // namespace dcp::internal
