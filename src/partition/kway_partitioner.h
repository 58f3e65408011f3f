// SPDX-License-Identifier: Apache-2.0
// The k-way engine of the builtin partitioner: a subset of a hypergraph's vertices into k parts
// under a compute cap and a memory cap per part, minimising km1 (connectivity - 1).
//
// Start: a sequence whose blocks fit on one part goes there whole (it then moves nothing); longer
// sequences are cut into rows (a data block with the tiles that read its queries), placed largest
// first on the least loaded part, or in stripes of whole rows. Refinement moves single vertices
// and whole rows to the part that most reduces km1 without breaking a cap, then a repair pass moves
// vertices out of overloaded parts at the least km1 cost. The caps are enforced natively, never by
// scaling weights. Internal to src/partition.
#pragma once

#include <algorithm>
#include <numeric>
#include <queue>
#include <random>
#include <tuple>
#include <vector>

#include "dcp/partition.h"
#include "partition/partition_state.h"

namespace dcp::internal {

// One k-way problem: the vertices of `subset` into parts 0..k-1 under per-part caps.
class KwayPartitioner : public PartitionState {
 public:
  KwayPartitioner(const Hypergraph& g, const std::vector<int32_t>& sequence_first_block,
                  std::vector<int32_t> subset, int32_t k, double compute_cap, double memory_cap,
                  uint64_t seed)
      : PartitionState(g, k, compute_cap, memory_cap, std::vector<int32_t>(g.n_vertices(), -1)),
        sequence_first_block_(sequence_first_block),
        subset_(std::move(subset)),
        rng_(seed),
        in_subset_(g.n_vertices(), 0) {
    for (int32_t v : subset_) {
      in_subset_[v] = 1;
      if (v >= g.n_compute) data_vertices_.push_back(v);
    }
  }

  // How the engine starts: from the geometric cut with its q axis stretched by `stretch` times
  // the row/column byte ratio, from contiguous runs of data blocks, from the greedy whole-sequence
  // packing, from stripes of whole rows (StripePlacement), or from a given partition (such as
  // the annealed whole rows of SolveWholeRows in partition_blocks.cc).
  struct Start {
    enum class Kind { kGeometric, kContiguous, kGreedy, kStripes, kGiven } kind = Kind::kGeometric;
    double stretch = 1.0;                         // kGeometric
    const std::vector<int32_t>* given = nullptr;  // kGiven: a part per vertex
  };

  static constexpr int kFmPasses = 2;  // what a caller's final Run usually asks for

  // Places the subset from `start`, refines, repairs the caps and refines again. Returns the part
  // of every vertex of the subset (others -1).
  // Then `fm_passes` passes of FM (FmPass) when the caps hold.
  std::vector<int32_t> Run(int rounds, const Start& start, int fm_passes = 0) {
    switch (start.kind) {
      case Start::Kind::kGeometric:
        GeometricPlacement(start.stretch);
        break;
      case Start::Kind::kGreedy:
        InitialPlacement();
        break;
      case Start::Kind::kContiguous:
        ContiguousPlacement();
        break;
      case Start::Kind::kStripes:
        StripePlacement();
        break;
      case Start::Kind::kGiven:
        for (int32_t v : subset_) Assign(v, (*start.given)[v]);
        break;
    }
    for (int r = 0; r < rounds; ++r) {
      if (!RefineRound()) break;
    }
    Repair();
    for (int r = 0; r < rounds / 4; ++r) {
      if (!RefineRound()) break;
    }
    for (int r = 0; r < fm_passes && WithinCaps(); ++r) {
      if (!FmPass()) break;
    }
    return part_;
  }

 private:
  bool IsCompute(int32_t v) const { return v < g_.n_compute; }

  // Max over the two constraints of the load relative to its cap, if v were added to p.
  double LoadWith(int32_t p, int32_t v) const {
    return std::max((static_cast<double>(compute_[p] + g_.compute_weight[v])) / compute_cap_,
                    (static_cast<double>(memory_[p] + g_.memory_weight[v])) / memory_cap_);
  }
  // Whether part p can take the weights within its caps. A zero weight never breaks a cap, even
  // on a part already over it (a tile adds no memory to a part whose memory is being repaired).
  bool Fits(int32_t p, int64_t compute, int64_t memory) const {
    return (compute == 0 || static_cast<double>(compute_[p] + compute) <= compute_cap_) &&
           (memory == 0 || static_cast<double>(memory_[p] + memory) <= memory_cap_);
  }

  // The compute vertices that read the queries of data vertex d and lie in the subset, each once
  // (a coarse data vertex may keep two row nets that share super-tiles; coarse nets list their
  // pins in vertex order, so the data vertex is not always a net's first pin).
  std::vector<int32_t> RowTiles(int32_t d) const {
    std::vector<int32_t> tiles;
    int32_t row_nets = 0;
    for (int32_t i = g_.vertex_begin[d]; i < g_.vertex_begin[d + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (g_.net_kind[n] != NetKind::kRow) continue;
      ++row_nets;
      for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
        const int32_t t = g_.pins[j];
        if (IsCompute(t) && in_subset_[t]) tiles.push_back(t);
      }
    }
    if (row_nets > 1) {
      std::sort(tiles.begin(), tiles.end());
      tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
    }
    return tiles;
  }

  // Start for attention hypergraphs: tiles are points (q block, kv block) in the batch's block
  // coordinates, with the q axis stretched by the ratio of row-net to column-net bytes, and are
  // cut by recursive bisection into k regions of equal compute. A region a rows tall and b
  // columns wide costs about row_bytes * a + column_bytes * b for a * b tiles, so square regions in
  // the stretched coordinates move the fewest bytes. Each data block then goes to the part that
  // saves the most bytes holding it, within the memory cap.
  void GeometricPlacement(double stretch_factor) {
    struct Point {
      int32_t v;
      double x, y;
    };
    std::vector<Point> points;
    std::vector<int32_t> data;
    std::vector<double> net_sum(2, 0), net_count(2, 0);
    for (int32_t n = 0; n < g_.n_nets(); ++n) {
      const int kind = g_.net_kind[n] == NetKind::kRow ? 0 : 1;
      net_sum[kind] += static_cast<double>(g_.net_weight[n]);
      net_count[kind] += 1;
    }
    const double stretch =
        stretch_factor * (net_count[0] > 0 && net_count[1] > 0 && net_sum[1] > 0
                              ? (net_sum[0] / net_count[0]) / (net_sum[1] / net_count[1])
                              : 1.0);
    for (int32_t v : subset_) {
      if (!IsCompute(v)) {
        data.push_back(v);
        continue;
      }
      Point p{v, 0, 0};
      for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
        const int32_t n = g_.incident[i];
        if (g_.net_kind[n] == NetKind::kRow)
          p.x = stretch * g_.net_data_block[n];
        else
          p.y = g_.net_data_block[n];
      }
      points.push_back(p);
    }
    Bisect(points.data(), points.data() + points.size(), 0, k_);
    for (const Point& p : points) Assign(p.v, part_of_point_[p.v]);
    PlaceData(data);
  }

  template <typename Point>
  void Bisect(Point* begin, Point* end, int32_t first_part, int32_t parts) {
    if (parts == 1 || end - begin <= 1) {
      for (Point* p = begin; p != end; ++p) part_of_point_[p->v] = first_part;
      return;
    }
    double x0 = begin->x, x1 = begin->x, y0 = begin->y, y1 = begin->y;
    int64_t total = 0;
    for (Point* p = begin; p != end; ++p) {
      x0 = std::min(x0, p->x), x1 = std::max(x1, p->x);
      y0 = std::min(y0, p->y), y1 = std::max(y1, p->y);
      total += g_.compute_weight[p->v];
    }
    const bool along_x = x1 - x0 >= y1 - y0;
    std::sort(begin, end, [along_x](const Point& a, const Point& b) {
      return along_x ? std::tie(a.x, a.y, a.v) < std::tie(b.x, b.y, b.v)
                     : std::tie(a.y, a.x, a.v) < std::tie(b.y, b.x, b.v);
    });
    const int32_t left_parts = parts / 2;
    const double target = static_cast<double>(total) * left_parts / parts;
    Point* cut = begin;
    int64_t prefix = 0;
    while (cut != end && static_cast<double>(prefix + g_.compute_weight[cut->v]) <= target) {
      prefix += g_.compute_weight[cut->v];
      ++cut;
    }
    // Take the next tile too if that lands closer to the target.
    if (cut != end && static_cast<double>(prefix + g_.compute_weight[cut->v]) - target <
                          target - static_cast<double>(prefix)) {
      ++cut;
    }
    Bisect(begin, cut, first_part, left_parts);
    Bisect(cut, end, first_part + left_parts, parts - left_parts);
  }

  // Each data vertex to the part where its nets already have pins worth the most bytes, within
  // the memory cap; the rest to the part with the most memory room.
  void PlaceData(const std::vector<int32_t>& data) {
    struct Choice {
      int64_t saving;
      int32_t v, part;
    };
    std::vector<Choice> choices;
    for (int32_t v : data) {
      for (int32_t p = 0; p < k_; ++p) {
        int64_t saving = 0;
        for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
          if (pin_count_[Slot(g_.incident[i], p)] > 0) saving += g_.net_weight[g_.incident[i]];
        }
        if (saving > 0) choices.push_back({saving, v, p});
      }
    }
    std::sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) {
      return std::tie(b.saving, a.v, a.part) < std::tie(a.saving, b.v, b.part);
    });
    for (const Choice& c : choices) {
      if (part_[c.v] < 0 && Fits(c.part, 0, g_.memory_weight[c.v])) Assign(c.v, c.part);
    }
    for (int32_t v : data) {
      if (part_[v] >= 0) continue;
      int32_t best = 0;
      for (int32_t p = 1; p < k_; ++p) {
        if (memory_[p] < memory_[best]) best = p;
      }
      Assign(v, best);
    }
  }

  // Start that keeps sequences together: data blocks in batch order cut into k runs of equal
  // memory, every tile on the part holding its queries (row nets are the heavy ones). Compute is
  // then unbalanced where long causal sequences sit; the repair pass moves the cheapest tiles out,
  // and once a part imports a row or column, more tiles of it come almost free, so the moved tiles
  // gather into compact regions.
  void ContiguousPlacement() {
    int64_t total = 0;
    for (int32_t v : data_vertices_) total += g_.memory_weight[v];
    int64_t prefix = 0;
    std::vector<int32_t> row_owner(g_.n_data, -1);
    for (int32_t v : data_vertices_) {  // ascending vertex id: batch order
      const auto p = static_cast<int32_t>(std::min<int64_t>(
          k_ - 1, (2 * prefix + g_.memory_weight[v]) * k_ / (2 * std::max<int64_t>(total, 1))));
      prefix += g_.memory_weight[v];
      Assign(v, p);
      row_owner[v - g_.n_compute] = p;
    }
    for (int32_t v : subset_) {
      if (!IsCompute(v)) continue;
      int32_t p = 0;
      for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
        const int32_t n = g_.incident[i];
        if (g_.net_kind[n] == NetKind::kRow && row_owner[g_.net_data_block[n]] >= 0) {
          p = row_owner[g_.net_data_block[n]];
        }
      }
      Assign(v, p);
    }
  }

  // A unit of the greedy starts: vertices placed together.
  struct Unit {
    std::vector<int32_t> vertices;
    int64_t compute = 0, memory = 0;
  };
  // The units of the subset: a whole sequence if it fits half a part (in *whole), else its rows,
  // one list per sequence in block order (in *rows); tiles whose row's data block is outside the
  // subset are units of their own (in *whole).
  void BuildUnits(std::vector<Unit>* whole_units, std::vector<std::vector<Unit>>* rows_of) const {
    std::vector<char> covered(g_.n_vertices(), 0);
    const auto add = [&](Unit& u, int32_t v) {
      if (covered[v]) return;
      covered[v] = 1;
      u.vertices.push_back(v);
      u.compute += g_.compute_weight[v];
      u.memory += g_.memory_weight[v];
    };
    const int32_t n_sequences = static_cast<int32_t>(sequence_first_block_.size()) - 1;
    for (int32_t s = 0; s < n_sequences; ++s) {
      Unit whole;
      std::vector<Unit> rows;
      for (int32_t b = sequence_first_block_[s]; b < sequence_first_block_[s + 1]; ++b) {
        const int32_t d = g_.n_compute + b;
        if (!in_subset_[d]) continue;
        Unit row;
        add(row, d);
        for (int32_t t : RowTiles(d)) add(row, t);
        whole.compute += row.compute;
        whole.memory += row.memory;
        whole.vertices.insert(whole.vertices.end(), row.vertices.begin(), row.vertices.end());
        rows.push_back(std::move(row));
      }
      if (static_cast<double>(whole.compute) <= compute_cap_ / 2 &&
          static_cast<double>(whole.memory) <= memory_cap_ / 2) {
        if (!whole.vertices.empty()) whole_units->push_back(std::move(whole));
      } else {
        rows_of->push_back(std::move(rows));
      }
    }
    for (int32_t v : subset_) {
      if (!covered[v]) {
        Unit u;
        add(u, v);
        whole_units->push_back(std::move(u));
      }
    }
  }

  // Places units largest first (by the constraint each presses hardest), each onto the least
  // loaded part.
  void PlaceLeastLoaded(std::vector<Unit> units) {
    const auto size = [&](const Unit& u) {
      return std::max(static_cast<double>(u.compute) / compute_cap_,
                      static_cast<double>(u.memory) / memory_cap_);
    };
    std::stable_sort(units.begin(), units.end(),
                     [&](const Unit& a, const Unit& b) { return size(a) > size(b); });
    for (const Unit& u : units) {
      int32_t best = 0;
      double best_load = 0;
      for (int32_t p = 0; p < k_; ++p) {
        const double load = std::max(static_cast<double>(compute_[p] + u.compute) / compute_cap_,
                                     static_cast<double>(memory_[p] + u.memory) / memory_cap_);
        if (p == 0 || load < best_load) {
          best = p;
          best_load = load;
        }
      }
      for (int32_t v : u.vertices) Assign(v, best);
    }
  }

  // Greedy start: whole short sequences and the rows of long ones, largest first onto the least
  // loaded part.
  void InitialPlacement() {
    std::vector<Unit> units;
    std::vector<std::vector<Unit>> rows_of;
    BuildUnits(&units, &rows_of);
    for (std::vector<Unit>& rows : rows_of) {
      for (Unit& r : rows) units.push_back(std::move(r));
    }
    PlaceLeastLoaded(std::move(units));
  }

  // Start that cuts long sequences into stripes of whole rows. Row nets weigh several times
  // column nets, so a part that holds whole rows with their data pays only for the columns it
  // reads from above its stripe. Rows go bottom-up (the long, compute-heavy rows first), each part
  // filled until its compute plus the compute of the short sequences needed to fill its memory to
  // the average would pass the average; whole short sequences then fill the parts least loaded
  // first. Top rows (short, data-heavy) thus end in a stripe of many rows or fill other parts.
  void StripePlacement() {
    std::vector<Unit> units;
    std::vector<std::vector<Unit>> rows_of;
    BuildUnits(&units, &rows_of);
    double total_compute = 0, total_memory = 0, filler_compute = 0, filler_memory = 0;
    for (int32_t v : subset_) {
      total_compute += static_cast<double>(g_.compute_weight[v]);
      total_memory += static_cast<double>(g_.memory_weight[v]);
    }
    for (const Unit& u : units) {
      filler_compute += static_cast<double>(u.compute);
      filler_memory += static_cast<double>(u.memory);
    }
    // Compute the fillers bring per byte of memory.
    const double density = filler_memory > 0 ? filler_compute / filler_memory : 0;
    const double avg_compute = total_compute / k_, avg_memory = total_memory / k_;
    std::stable_sort(rows_of.begin(), rows_of.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    int32_t p = 0;
    double c = 0, m = 0;
    for (const std::vector<Unit>& rows : rows_of) {
      for (auto r = rows.rbegin(); r != rows.rend(); ++r) {
        const double next_c = c + static_cast<double>(r->compute);
        const double next_m = m + static_cast<double>(r->memory);
        const bool full = next_m > avg_memory ||
                          next_c + std::max(0.0, avg_memory - next_m) * density > avg_compute;
        if (full && (c > 0 || m > 0) && p + 1 < k_) {
          ++p;
          c = m = 0;
        }
        c += static_cast<double>(r->compute);
        m += static_cast<double>(r->memory);
        for (int32_t v : r->vertices) Assign(v, p);
      }
    }
    PlaceLeastLoaded(std::move(units));
  }

  // One pass of label propagation: single-vertex moves, then whole-row moves of data vertices.
  // Vertices are visited in runs of kVisitRun consecutive ones, the runs in random order: random
  // enough that no part is favoured, while neighbouring tiles (consecutive in block order) share
  // the cache lines of their weights, labels and nets. Returns whether anything moved.
  bool RefineRound() {
    for (std::vector<int32_t>& list : data_of_part_) list.clear();
    for (int32_t v : data_vertices_) data_of_part_[part_[v]].push_back(v);
    constexpr size_t kVisitRun = 256;
    std::vector<size_t> runs((subset_.size() + kVisitRun - 1) / kVisitRun);
    std::iota(runs.begin(), runs.end(), 0);
    std::shuffle(runs.begin(), runs.end(), rng_);
    std::vector<int32_t> order;
    order.reserve(subset_.size());
    for (size_t r : runs) {
      order.insert(order.end(), subset_.begin() + r * kVisitRun,
                   subset_.begin() + std::min(subset_.size(), (r + 1) * kVisitRun));
    }
    bool moved = false;
    std::vector<int32_t> candidates;
    for (int32_t v : order) {
      const int32_t from = part_[v];
      Candidates(v, &candidates);
      int32_t best = -1;
      int64_t best_delta = 0;
      for (int32_t to : candidates) {
        if (to == from || !Fits(to, g_.compute_weight[v], g_.memory_weight[v])) continue;
        const int64_t delta = MoveDelta(v, to);
        if (delta < best_delta) {
          best = to;
          best_delta = delta;
        }
      }
      if (best >= 0) {
        MoveVertex(v, best);
        moved = true;
      }
      if (!IsCompute(v)) moved = MoveRow(v, candidates) || SwapData(v, candidates) || moved;
    }
    return moved;
  }

  // The move of v that lowers km1 most (or raises it least) within the caps: its km1 gain, and
  // the part in *to (-1 when no other part can take v).
  int64_t BestMove(int32_t v, std::vector<int32_t>* candidates, int32_t* to) const {
    Candidates(v, candidates);
    *to = -1;
    int64_t best = 0;
    for (int32_t p : *candidates) {
      if (p == part_[v] || !Fits(p, g_.compute_weight[v], g_.memory_weight[v])) continue;
      const int64_t gain = -MoveDelta(v, p);
      if (*to < 0 || gain > best) {
        *to = p;
        best = gain;
      }
    }
    return best;
  }

  // One pass of Fiduccia-Mattheyses: moves the vertex of best gain, negative gains included, each
  // vertex at most once, until kFmPatience moves in a row find nothing better, then rolls back to
  // the best prefix. It climbs out of the local minima where label propagation stops. Gains are
  // kept lazily in a heap: a popped entry is recomputed and pushed back when it has changed; the
  // pins of small nets are re-pushed after every move, as their gains change most.
  bool FmPass() {
    std::vector<int32_t> candidates;
    std::priority_queue<std::pair<int64_t, int32_t>> heap;  // (gain, vertex)
    int32_t to = -1;
    for (int32_t v : subset_) {
      const int64_t gain = BestMove(v, &candidates, &to);
      if (to >= 0) heap.push({gain, v});
    }
    std::vector<char> locked(g_.n_vertices(), 0);
    std::vector<std::pair<int32_t, int32_t>> moves;  // (vertex, part it left)
    const int64_t start = connectivity_;
    int64_t best = connectivity_;
    size_t best_moves = 0;
    int since_best = 0;
    while (!heap.empty() && since_best < kFmPatience) {
      const auto [gain, v] = heap.top();
      heap.pop();
      if (locked[v]) continue;
      const int64_t now = BestMove(v, &candidates, &to);
      if (to < 0) continue;
      if (now != gain) {
        heap.push({now, v});
        continue;
      }
      moves.emplace_back(v, part_[v]);
      Unassign(v);
      Assign(v, to);
      locked[v] = 1;
      if (connectivity_ < best) {
        best = connectivity_;
        best_moves = moves.size();
        since_best = 0;
      } else {
        ++since_best;
      }
      for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
        const int32_t n = g_.incident[i];
        if (g_.net_begin[n + 1] - g_.net_begin[n] > kFmNeighbourNetSize) continue;
        for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
          const int32_t u = g_.pins[j];
          if (locked[u] || !in_subset_[u]) continue;
          const int64_t g = BestMove(u, &candidates, &to);
          if (to >= 0) heap.push({g, u});
        }
      }
    }
    while (moves.size() > best_moves) {
      const auto [v, from] = moves.back();
      moves.pop_back();
      Unassign(v);
      Assign(v, from);
    }
    return best < start;
  }

  // Swaps data vertex d with a data vertex of another part when that lowers km1 and both parts
  // stay within the memory cap: with every device's memory full, single moves cannot help. Two
  // data vertices never share a net, so the gain of a swap is the sum of the two moves' gains.
  bool SwapData(int32_t d, const std::vector<int32_t>& candidates) {
    const int32_t a = part_[d];
    int32_t best_e = -1;
    int64_t best_delta = 0;
    for (int32_t b : candidates) {
      if (b == a) continue;
      const int64_t delta_d = MoveDelta(d, b);
      if (delta_d >= 0) continue;
      for (int32_t e : data_of_part_[b]) {
        if (part_[e] != b) continue;  // moved since it was listed
        const int64_t m_d = g_.memory_weight[d], m_e = g_.memory_weight[e];
        if (static_cast<double>(memory_[b] - m_e + m_d) > memory_cap_ ||
            static_cast<double>(memory_[a] - m_d + m_e) > memory_cap_) {
          continue;
        }
        const int64_t delta = delta_d + MoveDelta(e, a);
        if (delta < best_delta) {
          best_delta = delta;
          best_e = e;
        }
      }
    }
    if (best_e < 0) return false;
    MoveVertex(d, part_[best_e]);
    MoveVertex(best_e, a);
    return true;
  }

  // Moves v to part `to`, keeping data_of_part_ current.
  void MoveVertex(int32_t v, int32_t to) {
    Unassign(v);
    Assign(v, to);
    if (!IsCompute(v)) data_of_part_[to].push_back(v);
  }

  // Moves data vertex d with the row tiles on its part to the candidate part that lowers km1
  // most, if one fits.
  bool MoveRow(int32_t d, const std::vector<int32_t>& candidates) {
    if (candidates.size() < 2) return false;  // no part but its own
    const int32_t from = part_[d];
    std::vector<int32_t> unit = {d};
    int64_t compute = 0, memory = g_.memory_weight[d];
    for (int32_t t : RowTiles(d)) {
      if (part_[t] == from) {
        unit.push_back(t);
        compute += g_.compute_weight[t];
      }
    }
    if (unit.size() == 1) return false;
    // The unit's pins on each net it touches: a net leaves `from` when the unit holds all its
    // pins there, and reaches `to` when it has none there yet.
    unit_nets_.clear();
    for (int32_t v : unit) {
      for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
        const int32_t n = g_.incident[i];
        if (unit_pins_[n]++ == 0) unit_nets_.push_back(n);
      }
    }
    // delta(to) = arrive - leave - (the weight of the unit's nets already on `to`), summed for
    // every part at once over the parts each net spans (not nets x candidates).
    int64_t arrive = 0, leave = 0;
    for (int32_t n : unit_nets_) {
      arrive += g_.net_weight[n];
      if (unit_pins_[n] == pin_count_[Slot(n, from)]) leave += g_.net_weight[n];
      for (int32_t j = 0; j < n_parts_of_net_[n]; ++j) {
        row_weight_on_[parts_of_net_[Slot(n, j)]] += g_.net_weight[n];
      }
      unit_pins_[n] = 0;
    }
    int32_t best = -1;
    int64_t best_delta = 0;
    for (int32_t to : candidates) {
      if (to == from || !Fits(to, compute, memory)) continue;
      const int64_t delta = arrive - leave - row_weight_on_[to];
      if (delta < best_delta) {
        best = to;
        best_delta = delta;
      }
    }
    for (int32_t n : unit_nets_) {
      for (int32_t j = 0; j < n_parts_of_net_[n]; ++j) row_weight_on_[parts_of_net_[Slot(n, j)]] = 0;
    }
    if (best < 0) return false;
    for (int32_t v : unit) MoveVertex(v, best);
    return true;
  }

  // Parts where v's nets already have pins.
  void Candidates(int32_t v, std::vector<int32_t>* out) const {
    out->clear();
    // Most vertices are interior (every net on one part, v's own): skip the set building.
    if (part_[v] >= 0 && std::all_of(g_.incident.begin() + g_.vertex_begin[v],
                                     g_.incident.begin() + g_.vertex_begin[v + 1],
                                     [&](int32_t n) { return n_parts_of_net_[n] <= 1; })) {
      out->push_back(part_[v]);
      return;
    }
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      for (int32_t j = 0; j < n_parts_of_net_[n]; ++j) {
        const int32_t p = parts_of_net_[Slot(n, j)];
        if (seen_[p] != seen_stamp_) {
          seen_[p] = seen_stamp_;
          out->push_back(p);
        }
      }
    }
    if (++seen_stamp_ == 0) {  // wrapped: start the stamps afresh
      std::fill(seen_.begin(), seen_.end(), 0);
      seen_stamp_ = 1;
    }
    std::sort(out->begin(), out->end());
  }

  // Moves the vertex of `members` (the vertices of part `over`) whose move to part `to` costs the
  // fewest bytes among those that leave `to` below where `over` was on the overloaded constraint
  // (and within the other constraint's cap): the sum of squared loads then falls, so repeated
  // levelling ends. Returns whether a vertex moved.
  bool LevelOut(const std::vector<int32_t>& members, int32_t over, bool compute_over, int32_t to) {
    const std::vector<int64_t>& load = compute_over ? compute_ : memory_;
    const std::vector<int64_t>& weight = compute_over ? g_.compute_weight : g_.memory_weight;
    int32_t best = -1;
    int64_t best_delta = 0;
    for (int32_t v : members) {
      if (part_[v] != over || weight[v] == 0 || load[to] + weight[v] >= load[over] ||
          !(compute_over ? Fits(to, 0, g_.memory_weight[v]) : Fits(to, g_.compute_weight[v], 0))) {
        continue;
      }
      const int64_t delta = MoveDelta(v, to);
      if (best < 0 || delta < best_delta) {
        best = v;
        best_delta = delta;
      }
    }
    if (best < 0) return false;
    MoveVertex(best, to);
    return true;
  }

  // Moves vertices out of parts above a cap, each to the part with room where km1 grows least.
  // The moves out of an overloaded part are kept in a heap by km1 change; a popped move is priced
  // again and pushed back when its price has changed, and a move that imports a row or column
  // into a part offers that part to the moved vertex's neighbours (their moves there become
  // cheap). Each move is thus priced at its current cost, at a cost near-linear in the moves.
  void Repair() {
    struct Move {
      int64_t delta;
      int32_t v, to;
      bool operator>(const Move& o) const {
        return std::tie(delta, v, to) > std::tie(o.delta, o.v, o.to);
      }
    };
    std::priority_queue<Move, std::vector<Move>, std::greater<>> heap;
    std::vector<int32_t> members, targets;
    // A (part, constraint) pair no move can relieve is stuck (e.g. memory when blocks are too few
    // for the devices); the others are still repaired.
    std::vector<char> stuck(2 * static_cast<size_t>(k_), 0);
    const auto cap_of = [&](bool compute_over) { return compute_over ? compute_cap_ : memory_cap_; };
    for (int pass = 0; pass < 4 * static_cast<int>(subset_.size()); ++pass) {
      int32_t over = -1;
      bool compute_over = false;
      for (int32_t p = 0; p < k_ && over < 0; ++p) {
        if (!stuck[2 * p] && static_cast<double>(compute_[p]) > compute_cap_) {
          over = p;
          compute_over = true;
        } else if (!stuck[2 * p + 1] && static_cast<double>(memory_[p]) > memory_cap_) {
          over = p;
        }
      }
      if (over < 0) return;
      const std::vector<int64_t>& load = compute_over ? compute_ : memory_;
      const std::vector<int64_t>& weight = compute_over ? g_.compute_weight : g_.memory_weight;
      const int32_t emptiest =
          static_cast<int32_t>(std::min_element(load.begin(), load.end()) - load.begin());
      members.clear();
      for (int32_t v : subset_) {
        if (part_[v] == over && weight[v] != 0) members.push_back(v);
      }
      heap = {};
      const auto offer = [&](int32_t v, int32_t to) {
        if (to != over && Fits(to, g_.compute_weight[v], g_.memory_weight[v])) {
          heap.push({MoveDelta(v, to), v, to});
        }
      };
      for (int32_t v : members) {
        Candidates(v, &targets);
        targets.push_back(emptiest);
        for (int32_t to : targets) offer(v, to);
      }
      if (heap.empty()) {
        // Nothing fits anywhere: the caps cannot all hold (e.g. fewer blocks than devices need).
        // Level the load instead, so the worst part ends as low as it can.
        if (!LevelOut(members, over, compute_over, emptiest)) {
          stuck[2 * over + (compute_over ? 0 : 1)] = 1;
        }
        continue;
      }
      while (!heap.empty() && static_cast<double>(load[over]) > cap_of(compute_over)) {
        const Move m = heap.top();
        heap.pop();
        if (part_[m.v] != over || !Fits(m.to, g_.compute_weight[m.v], g_.memory_weight[m.v])) {
          continue;
        }
        if (const int64_t now = MoveDelta(m.v, m.to); now != m.delta) {
          heap.push({now, m.v, m.to});
          continue;
        }
        MoveVertex(m.v, m.to);
        for (int32_t i = g_.vertex_begin[m.v]; i < g_.vertex_begin[m.v + 1]; ++i) {
          const int32_t n = g_.incident[i];
          if (g_.net_begin[n + 1] - g_.net_begin[n] > kFmNeighbourNetSize) continue;
          for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
            const int32_t u = g_.pins[j];
            if (part_[u] == over && in_subset_[u] && weight[u] != 0) offer(u, m.to);
          }
        }
      }
    }
  }

  const std::vector<int32_t>& sequence_first_block_;
  static constexpr int kFmPatience = 100;             // moves without a new best before a pass ends
  static constexpr int32_t kFmNeighbourNetSize = 64;  // nets whose pins get fresh gains on a move
  std::vector<int32_t> subset_;
  std::mt19937_64 rng_;
  std::vector<int32_t> part_of_point_ = std::vector<int32_t>(g_.n_vertices(), -1);
  std::vector<char> in_subset_;
  std::vector<int32_t> data_vertices_;  // of the subset
  // Per part, its data vertices (SwapData's partners), listed at each RefineRound and appended to
  // as data vertices move; an entry whose vertex has left the part since is skipped.
  std::vector<std::vector<int32_t>> data_of_part_ = std::vector<std::vector<int32_t>>(k_);
  // MoveRow's scratch: the nets a row unit touches, and its pins on each (0 outside the unit).
  std::vector<int32_t> unit_nets_, unit_pins_ = std::vector<int32_t>(g_.n_nets(), 0);
  std::vector<int64_t> row_weight_on_ = std::vector<int64_t>(k_, 0);  // per part
  // Candidates' scratch: seen_[p] == seen_stamp_ when p is already in the list being built.
  mutable std::vector<uint32_t> seen_ = std::vector<uint32_t>(k_, 0);
  mutable uint32_t seen_stamp_ = 1;
};

}  // namespace dcp::internal
