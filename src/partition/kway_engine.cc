// SPDX-License-Identifier: Apache-2.0
// The k-way engine: a run through its phases, and what every phase uses (kway_engine.h).
#include "partition/kway_engine.h"

#include <algorithm>
#include <bit>

namespace dcp::internal {

KwayEngine::KwayEngine(const KwayProblem& problem)
    : problem_(problem),
      g_(problem.graph),
      subset_(problem.subset),
      k_(problem.k),
      state_(problem.graph, problem.k, std::vector<int32_t>(problem.graph.n_vertices(), -1)),
      rng_(problem.seed),
      in_subset_(problem.graph.n_vertices(), 0),
      active_(problem.graph.n_vertices(), 0),
      data_of_part_(problem.k),
      unit_pins_(problem.graph.n_nets(), 0),
      scratch_{.reached = std::vector<uint64_t>(state_.span_words(), 0)} {
  for (int32_t v : subset_) {
    in_subset_[v] = 1;
    if (!IsCompute(v)) data_vertices_.push_back(v);
  }
}

const std::vector<int32_t>& KwayEngine::Place(const KwayStart& start) {
  switch (start.kind) {
    case KwayStart::Kind::kGeometric:
      GeometricPlacement(start.stretch);
      break;
    case KwayStart::Kind::kGreedy:
      GreedyPlacement();
      break;
    case KwayStart::Kind::kContiguous:
      ContiguousPlacement();
      break;
    case KwayStart::Kind::kStripes:
      StripePlacement();
      break;
    case KwayStart::Kind::kGiven:
      for (int32_t v : subset_) state_.Assign(v, (*start.given)[v]);
      break;
  }
  return state_.parts();
}

KwayResult KwayEngine::Refine(int rounds, int fm_passes, const std::atomic<bool>* stop) {
  const auto stopped = [stop] { return stop != nullptr && stop->load(); };
  ActivateAll();
  for (int r = 0; r < rounds && !stopped(); ++r) {
    if (!RefineRound()) break;
  }
  if (stopped()) return {};
  // Moves activate the vertices whose gains they change, so only a repair (which also changes
  // which parts have room) needs every vertex looked at again.
  const bool over_caps = !state_.WithinCaps(problem_.compute_cap, problem_.memory_cap);
  Repair();
  if (over_caps) ActivateAll();
  for (int r = 0; r < rounds / 4 && !stopped(); ++r) {
    if (!RefineRound()) break;
  }
  const auto within_caps = [&] {
    return state_.WithinCaps(problem_.compute_cap, problem_.memory_cap);
  };
  for (int r = 0; r < fm_passes && within_caps() && !stopped(); ++r) {
    if (!FmPass()) break;
  }
  if (stopped()) return {};
  return {.part = state_.parts(),
          .within_caps = within_caps(),
          .max_load = state_.MaxLoad(problem_.compute_cap, problem_.memory_cap),
          .connectivity = state_.connectivity()};
}

KwayResult RunKway(const KwayProblem& problem, const KwayStart& start, int rounds, int fm_passes,
                   const std::atomic<bool>* stop) {
  KwayEngine engine(problem);
  engine.Place(start);
  return engine.Refine(rounds, fm_passes, stop);
}

std::optional<KwayResult> RunKwayFromNewPlacement(const KwayProblem& problem,
                                                  const KwayStart& start, int rounds, int fm_passes,
                                                  std::vector<std::vector<int32_t>>* placed) {
  KwayEngine engine(problem);
  const std::vector<int32_t>& part = engine.Place(start);
  if (std::find(placed->begin(), placed->end(), part) != placed->end()) return std::nullopt;
  placed->push_back(part);
  return engine.Refine(rounds, fm_passes);
}

void KwayEngine::RowTiles(int32_t d, std::vector<int32_t>* tiles) const {
  tiles->clear();
  int32_t row_nets = 0;
  for (int32_t i = g_.vertex_begin[d]; i < g_.vertex_begin[d + 1]; ++i) {
    const int32_t n = g_.incident[i];
    if (g_.net_kind[n] != NetKind::kRow) continue;
    ++row_nets;
    for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
      const int32_t t = g_.pins[j];
      if (IsCompute(t) && in_subset_[t]) tiles->push_back(t);
    }
  }
  if (row_nets > 1) {
    std::sort(tiles->begin(), tiles->end());
    tiles->erase(std::unique(tiles->begin(), tiles->end()), tiles->end());
  }
}

// Parts where v's nets already have pins, in part order.
void KwayEngine::Candidates(int32_t v, std::vector<int32_t>* out, CandidateScratch* scratch) const {
  out->clear();
  const auto push_bits = [out](uint64_t bits, int32_t first) {
    for (; bits != 0; bits &= bits - 1) out->push_back(first + std::countr_zero(bits));
  };
  // v's own part is among them (v is a pin of each of its nets), and the only one when v has none.
  const int32_t own = state_.part(v);
  const uint64_t own_bit = own >= 0 ? PartitionState::SpanBit(own) : 0;
  if (state_.span_words() == 1) {  // k <= 64: one word per net, no scratch
    uint64_t reached = own_bit;
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      reached |= state_.span(g_.incident[i])[0];
    }
    push_bits(reached, 0);
    return;
  }
  std::vector<uint64_t>& reached = scratch->reached;
  std::fill(reached.begin(), reached.end(), 0);
  if (own >= 0) reached[own / 64] = own_bit;
  for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
    const std::span<const uint64_t> span = state_.span(g_.incident[i]);
    for (size_t w = 0; w < reached.size(); ++w) reached[w] |= span[w];
  }
  for (size_t w = 0; w < reached.size(); ++w) push_bits(reached[w], static_cast<int32_t>(64 * w));
}

// Moves v to part `to`, keeping data_of_part_ current. Activates the pins of each net whose span
// the move changed (it left `from` or reached `to`): their candidate parts changed; and the last
// pin of a net on `from`, which may now gain by leaving.
void KwayEngine::MoveVertex(int32_t v, int32_t to) {
  const int32_t from = state_.part(v);
  state_.Move(v, to);
  if (!IsCompute(v)) data_of_part_[to].push_back(v);
  for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
    const int32_t n = g_.incident[i];
    const int32_t left = state_.pins(n, from);
    const bool span_changed = left == 0 || state_.pins(n, to) == 1;
    if (!span_changed && left != 1) continue;
    for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
      const int32_t u = g_.pins[j];
      if (span_changed || state_.part(u) == from) active_[u] = 1;
    }
  }
}

void KwayEngine::ActivateAll() {
  for (int32_t v : subset_) active_[v] = 1;
}

}  // namespace dcp::internal
