// SPDX-License-Identifier: Apache-2.0
// The k-way engine behind RunKway (kway_partitioner.h): one problem's partition state and the
// phases that change it. Its members are defined by phase: kway_engine.cc (a run, and what every
// phase uses), kway_initial.cc (the starts), kway_refine.cc (refinement, repair, FM). Internal to
// src/partition; only those files include it.
#pragma once

#include <random>
#include <utility>
#include <vector>

#include "partition/kway_partitioner.h"
#include "partition/partition_state.h"

namespace dcp::internal {

class KwayEngine {
 public:
  explicit KwayEngine(const KwayProblem& problem);

  // RunKway's run (kway_partitioner.h) in two steps: the start's partition of the subset (a part
  // per vertex of the graph, -1 outside it), then everything after it.
  const std::vector<int32_t>& Place(const KwayStart& start);
  KwayResult Refine(int rounds, int fm_passes, const std::atomic<bool>* stop = nullptr);

 private:
  // A unit of the greedy starts: vertices placed together.
  struct Unit {
    std::vector<int32_t> vertices;
    int64_t compute = 0, memory = 0;
  };

  // --- What every phase uses (kway_engine.cc) ---
  bool IsCompute(int32_t v) const { return v < g_.n_compute; }
  // Whether part p can take the weights within its caps. A zero weight never breaks a cap, even
  // on a part already over it (a tile adds no memory to a part whose memory is being repaired).
  bool Fits(int32_t p, int64_t compute, int64_t memory) const {
    return (compute == 0 ||
            static_cast<double>(state_.compute()[p] + compute) <= problem_.compute_cap) &&
           (memory == 0 || static_cast<double>(state_.memory()[p] + memory) <= problem_.memory_cap);
  }
  // Calls f(t) for each compute vertex t of the subset that reads the queries of data vertex d,
  // each once: in pin order when d has one row net (every data vertex of the batch's own graph),
  // else in vertex order (a coarse data vertex may keep two row nets that share super-tiles).
  template <typename F>
  void ForEachRowTile(int32_t d, const F& f) {
    int32_t row_net = -1;
    for (int32_t i = g_.vertex_begin[d]; i < g_.vertex_begin[d + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (g_.net_kind[n] != NetKind::kRow) continue;
      if (row_net >= 0) {
        RowTiles(d, &row_tiles_);
        for (int32_t t : row_tiles_) f(t);
        return;
      }
      row_net = n;
    }
    if (row_net < 0) return;
    for (int32_t j = g_.net_begin[row_net]; j < g_.net_begin[row_net + 1]; ++j) {
      const int32_t t = g_.pins[j];
      if (IsCompute(t) && in_subset_[t]) f(t);
    }
  }
  // ForEachRowTile's tiles into *tiles (cleared first): in pin order for one row net, in vertex
  // order for more.
  void RowTiles(int32_t d, std::vector<int32_t>* tiles) const;
  // Candidates' scratch: the bitset of the parts v's nets reach (PartitionState::span). One per
  // thread that lists candidates.
  struct CandidateScratch {
    std::vector<uint64_t> reached;
  };
  void Candidates(int32_t v, std::vector<int32_t>* out, CandidateScratch* scratch) const;
  void Candidates(int32_t v, std::vector<int32_t>* out) { Candidates(v, out, &scratch_); }
  void MoveVertex(int32_t v, int32_t to);
  void ActivateAll();

  // --- Starts (kway_initial.cc) ---
  void GeometricPlacement(double stretch_factor);
  void PlaceData(const std::vector<int32_t>& data);
  void ContiguousPlacement();
  void BuildUnits(std::vector<Unit>* whole_units, std::vector<std::vector<Unit>>* rows_of) const;
  void PlaceLeastLoaded(std::vector<Unit> units);
  void GreedyPlacement();
  void StripePlacement();

  // --- Refinement (kway_refine.cc) ---
  bool RefineRound();
  int64_t BestMove(int32_t v, std::vector<int32_t>* candidates, int32_t* to,
                   CandidateScratch* scratch) const;
  int64_t BestMove(int32_t v, std::vector<int32_t>* candidates, int32_t* to) {
    return BestMove(v, candidates, to, &scratch_);
  }
  std::vector<std::pair<int64_t, int32_t>> FirstGains() const;
  bool FmPass();
  bool SwapData(int32_t d, const std::vector<int32_t>& candidates);
  bool MoveRow(int32_t d, const std::vector<int32_t>& candidates);
  bool LevelOut(const std::vector<int32_t>& members, int32_t over, bool compute_over, int32_t to);
  void Repair();

  static constexpr int kFmPatience = 100;             // moves without a new best before a pass ends
  static constexpr int32_t kFmNeighbourNetSize = 64;  // nets whose pins get fresh gains on a move

  const KwayProblem& problem_;
  const Hypergraph& g_;                 // problem_.graph
  const std::vector<int32_t>& subset_;  // problem_.subset
  const int32_t k_;                     // problem_.k
  PartitionState state_;
  std::mt19937_64 rng_;
  std::vector<char> in_subset_;
  // The tiles a RefineRound visits: all at the start of a refinement, then those whose candidate
  // parts or gains a move may have changed since their last visit (MoveVertex) and those a cap
  // kept from a candidate part. (Data vertices are visited every round.)
  std::vector<char> active_;
  std::vector<int32_t> data_vertices_;  // of the subset
  // Per part, its data vertices (SwapData's partners), listed at each RefineRound and appended to
  // as data vertices move; an entry whose vertex has left the part since is skipped.
  std::vector<std::vector<int32_t>> data_of_part_;
  // ForEachRowTile's and MoveRow's scratch: a row's tiles, the unit it moves, the nets the unit
  // touches, its pins on each (0 outside the unit), the parts that can take it and the weight of
  // its nets already on each of those. Kept across calls: MoveRow runs for every data vertex in
  // every round.
  std::vector<int32_t> row_tiles_, unit_, unit_nets_, unit_pins_, row_parts_;
  std::vector<int64_t> row_parts_weight_;
  CandidateScratch scratch_;  // the engine's own thread's
};

}  // namespace dcp::internal
