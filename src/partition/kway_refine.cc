// SPDX-License-Identifier: Apache-2.0
// Refinement of the k-way engine (kway_engine.h): label propagation with whole-row moves and
// data swaps, the repair of overloaded parts, and FM passes.
#include <algorithm>
#include <numeric>
#include <queue>
#include <tuple>

#include "partition/kway_engine.h"
#include "util/parallel.h"

namespace dcp::internal {

// One pass of label propagation: single-vertex moves, then whole-row moves of data vertices.
// Vertices are visited in runs of kVisitRun consecutive ones, the runs in random order: random
// enough that no part is favoured, while neighbouring tiles (consecutive in block order) share
// the cache lines of their weights, labels and nets. Only active tiles are visited (active_):
// after the first round most tiles have nothing new to gain, and visiting them all again took
// most of the placement time (1M to 8M tokens: the same placements, in a third to a half of the
// time). Returns whether anything moved.
bool KwayEngine::RefineRound() {
  for (std::vector<int32_t>& list : data_of_part_) list.clear();
  for (int32_t v : data_vertices_) data_of_part_[state_.part(v)].push_back(v);
  constexpr size_t kVisitRun = 256;
  std::vector<size_t> runs((subset_.size() + kVisitRun - 1) / kVisitRun);
  std::iota(runs.begin(), runs.end(), 0);
  std::shuffle(runs.begin(), runs.end(), rng_);
  bool moved = false;
  std::vector<int32_t> candidates;
  for (size_t r : runs) {
    const size_t end = std::min(subset_.size(), (r + 1) * kVisitRun);
    for (size_t at = r * kVisitRun; at < end; ++at) {
      const int32_t v = subset_[at];
      // Data vertices every round: their row moves and swaps depend on every part's load.
      if (!active_[v] && IsCompute(v)) continue;
      active_[v] = 0;
      // Most tiles share both their nets with others on their part: no move of theirs can gain,
      // and skipping them here, before their candidate parts are listed, is most of a round.
      if (IsCompute(v) && !state_.MayGain(v)) continue;
      const int32_t from = state_.part(v);
      Candidates(v, &candidates);
      int32_t best = -1;
      int64_t best_delta = 0;
      for (int32_t to : candidates) {
        if (to == from) continue;
        if (!Fits(to, g_.compute_weight[v], g_.memory_weight[v])) {
          active_[v] = 1;  // a part that is full now may have room next round
          continue;
        }
        const int64_t delta = state_.MoveDelta(v, to);
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
  }
  return moved;
}

// The move of v that lowers km1 most (or raises it least) within the caps: its km1 gain, and
// the part in *to (-1 when no other part can take v).
int64_t KwayEngine::BestMove(int32_t v, std::vector<int32_t>* candidates, int32_t* to,
                             CandidateScratch* scratch) const {
  Candidates(v, candidates, scratch);
  *to = -1;
  int64_t best = 0;
  for (int32_t p : *candidates) {
    if (p == state_.part(v) || !Fits(p, g_.compute_weight[v], g_.memory_weight[v])) continue;
    const int64_t gain = -state_.MoveDelta(v, p);
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
bool KwayEngine::FmPass() {
  std::vector<int32_t> candidates;
  std::priority_queue<std::pair<int64_t, int32_t>> heap(std::less<std::pair<int64_t, int32_t>>(),
                                                        FirstGains());
  int32_t to = -1;
  std::vector<char> locked(g_.n_vertices(), 0);
  std::vector<std::pair<int32_t, int32_t>> moves;  // (vertex, part it left)
  const int64_t start = state_.connectivity();
  int64_t best = state_.connectivity();
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
    const int32_t from = state_.part(v), moved_to = to;
    moves.emplace_back(v, from);
    state_.Move(v, moved_to);
    locked[v] = 1;
    if (state_.connectivity() < best) {
      best = state_.connectivity();
      best_moves = moves.size();
      since_best = 0;
    } else {
      ++since_best;
    }
    // Only the gains the move raised are pushed again. Where a net has just reached moved_to,
    // each pin's move there gained, and only that move: its price is pushed (the pin's other
    // moves did not gain, so its best is still at most an entry already in the heap, and a
    // popped entry is priced whole). Where a net has one pin left on `from`, every move of that
    // pin gained: its best move is pushed. A gain the move lowered is found stale when popped
    // (above) and pushed back at its value.
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (g_.net_begin[n + 1] - g_.net_begin[n] > kFmNeighbourNetSize) continue;
      const bool reached = state_.pins(n, moved_to) == 1;
      const bool one_left = state_.pins(n, from) == 1;
      if (!reached && !one_left) continue;
      for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
        const int32_t u = g_.pins[j];
        if (locked[u] || !in_subset_[u]) continue;
        const int32_t at = state_.part(u);
        if (one_left && at == from) {
          int32_t best_to = -1;
          const int64_t g = BestMove(u, &candidates, &best_to);
          if (best_to >= 0) heap.push({g, u});
        } else if (reached && at != moved_to &&
                   Fits(moved_to, g_.compute_weight[u], g_.memory_weight[u])) {
          heap.push({-state_.MoveDelta(u, moved_to), u});
        }
      }
    }
  }
  while (moves.size() > best_moves) {
    const auto [v, from] = moves.back();
    moves.pop_back();
    state_.Move(v, from);
  }
  return best < start;
}

// (gain, vertex) of the best move of every vertex of the subset that has one. Each is a function
// of the state alone, so pieces of the subset are priced on problem_.threads threads: the same
// list, hence the same heap (its keys are distinct), on any thread count. One list, written in
// place and compacted: the first level's subset is every tile of the batch.
std::vector<std::pair<int64_t, int32_t>> KwayEngine::FirstGains() const {
  constexpr size_t kPiece = 4096;
  constexpr int32_t kNoMove = -1;
  const size_t n_pieces = (subset_.size() + kPiece - 1) / kPiece;
  std::vector<std::pair<int64_t, int32_t>> gains(subset_.size());
  ParallelFor(static_cast<int32_t>(n_pieces), problem_.threads, [&](int32_t i) {
    CandidateScratch scratch{.reached = std::vector<uint64_t>(state_.span_words(), 0)};
    std::vector<int32_t> candidates;
    int32_t to = -1;
    const size_t end = std::min(subset_.size(), (i + 1) * kPiece);
    for (size_t j = i * kPiece; j < end; ++j) {
      const int64_t gain = BestMove(subset_[j], &candidates, &to, &scratch);
      gains[j] = {gain, to >= 0 ? subset_[j] : kNoMove};
    }
  });
  std::erase_if(gains, [](const std::pair<int64_t, int32_t>& g) { return g.second == kNoMove; });
  return gains;
}

// Swaps data vertex d with a data vertex of another part when that lowers km1 and both parts
// stay within the memory cap: with every device's memory full, single moves cannot help. Two
// data vertices never share a net, so the gain of a swap is the sum of the two moves' gains.
bool KwayEngine::SwapData(int32_t d, const std::vector<int32_t>& candidates) {
  const int32_t a = state_.part(d);
  int32_t best_e = -1;
  int64_t best_delta = 0;
  for (int32_t b : candidates) {
    if (b == a) continue;
    const int64_t delta_d = state_.MoveDelta(d, b);
    if (delta_d >= 0) continue;
    for (int32_t e : data_of_part_[b]) {
      if (state_.part(e) != b) continue;  // moved since it was listed
      const int64_t m_d = g_.memory_weight[d], m_e = g_.memory_weight[e];
      if (static_cast<double>(state_.memory()[b] - m_e + m_d) > problem_.memory_cap ||
          static_cast<double>(state_.memory()[a] - m_d + m_e) > problem_.memory_cap) {
        continue;
      }
      const int64_t delta = delta_d + state_.MoveDelta(e, a);
      if (delta < best_delta) {
        best_delta = delta;
        best_e = e;
      }
    }
  }
  if (best_e < 0) return false;
  MoveVertex(d, state_.part(best_e));
  MoveVertex(best_e, a);
  return true;
}

// Moves data vertex d with the row tiles on its part to the candidate part that lowers km1
// most, if one fits.
bool KwayEngine::MoveRow(int32_t d, const std::vector<int32_t>& candidates) {
  if (candidates.size() < 2) return false;  // no part but its own
  const int32_t from = state_.part(d);
  std::vector<int32_t>& unit = unit_;
  unit.assign(1, d);
  int64_t compute = 0;
  const int64_t memory = g_.memory_weight[d];
  ForEachRowTile(d, [&](int32_t t) {
    if (state_.part(t) == from) {
      unit.push_back(t);
      compute += g_.compute_weight[t];
    }
  });
  if (unit.size() == 1) return false;
  // Most rows of a balanced partition fit no other part, and those that do fit few: only those
  // parts are priced.
  std::vector<int32_t>& fitting = row_parts_;
  fitting.clear();
  for (int32_t to : candidates) {
    if (to != from && Fits(to, compute, memory)) fitting.push_back(to);
  }
  if (fitting.empty()) return false;
  // The unit's pins on each net it touches: a net leaves `from` when the unit holds all its
  // pins there, and reaches `to` when it has none there yet.
  unit_nets_.clear();
  for (int32_t v : unit) {
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (unit_pins_[n]++ == 0) unit_nets_.push_back(n);
    }
  }
  // delta(to) = arrive - leave - (the weight of the unit's nets already on `to`).
  int64_t arrive = 0, leave = 0;
  std::vector<int64_t>& already = row_parts_weight_;
  already.assign(fitting.size(), 0);
  for (int32_t n : unit_nets_) {
    const int64_t w = g_.net_weight[n];
    arrive += w;
    if (unit_pins_[n] == state_.pins(n, from)) leave += w;
    for (size_t i = 0; i < fitting.size(); ++i) {
      if (state_.pins(n, fitting[i]) > 0) already[i] += w;
    }
    unit_pins_[n] = 0;
  }
  int32_t best = -1;
  int64_t best_delta = 0;
  for (size_t i = 0; i < fitting.size(); ++i) {
    const int64_t delta = arrive - leave - already[i];
    if (delta < best_delta) {
      best = fitting[i];
      best_delta = delta;
    }
  }
  if (best < 0) return false;
  for (int32_t v : unit) MoveVertex(v, best);
  return true;
}

// Moves the vertex of `members` (the vertices of part `over`) whose move to part `to` costs the
// fewest bytes among those that leave `to` below where `over` was on the overloaded constraint
// (and within the other constraint's cap): the sum of squared loads then falls, so repeated
// levelling ends. Returns whether a vertex moved.
bool KwayEngine::LevelOut(const std::vector<int32_t>& members, int32_t over, bool compute_over,
                          int32_t to) {
  const std::vector<int64_t>& load = compute_over ? state_.compute() : state_.memory();
  const std::vector<int64_t>& weight = compute_over ? g_.compute_weight : g_.memory_weight;
  int32_t best = -1;
  int64_t best_delta = 0;
  for (int32_t v : members) {
    if (state_.part(v) != over || weight[v] == 0 || load[to] + weight[v] >= load[over] ||
        !(compute_over ? Fits(to, 0, g_.memory_weight[v]) : Fits(to, g_.compute_weight[v], 0))) {
      continue;
    }
    const int64_t delta = state_.MoveDelta(v, to);
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
void KwayEngine::Repair() {
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
  const auto cap_of = [&](bool compute_over) {
    return compute_over ? problem_.compute_cap : problem_.memory_cap;
  };
  for (int pass = 0; pass < 4 * static_cast<int>(subset_.size()); ++pass) {
    int32_t over = -1;
    bool compute_over = false;
    for (int32_t p = 0; p < k_ && over < 0; ++p) {
      if (!stuck[2 * p] && static_cast<double>(state_.compute()[p]) > problem_.compute_cap) {
        over = p;
        compute_over = true;
      } else if (!stuck[2 * p + 1] &&
                 static_cast<double>(state_.memory()[p]) > problem_.memory_cap) {
        over = p;
      }
    }
    if (over < 0) return;
    const std::vector<int64_t>& load = compute_over ? state_.compute() : state_.memory();
    const std::vector<int64_t>& weight = compute_over ? g_.compute_weight : g_.memory_weight;
    const int32_t emptiest =
        static_cast<int32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members.clear();
    for (int32_t v : subset_) {
      if (state_.part(v) == over && weight[v] != 0) members.push_back(v);
    }
    heap = {};
    const auto offer = [&](int32_t v, int32_t to) {
      if (to != over && Fits(to, g_.compute_weight[v], g_.memory_weight[v])) {
        heap.push({state_.MoveDelta(v, to), v, to});
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
      if (state_.part(m.v) != over || !Fits(m.to, g_.compute_weight[m.v], g_.memory_weight[m.v])) {
        continue;
      }
      if (const int64_t now = state_.MoveDelta(m.v, m.to); now != m.delta) {
        heap.push({now, m.v, m.to});
        continue;
      }
      MoveVertex(m.v, m.to);
      // The move made the moves of its neighbours on `over` to m.to cheaper only where the net
      // has just reached m.to, or has one pin left on `over` (that pin). Elsewhere their offers
      // in the heap still hold.
      for (int32_t i = g_.vertex_begin[m.v]; i < g_.vertex_begin[m.v + 1]; ++i) {
        const int32_t n = g_.incident[i];
        if (g_.net_begin[n + 1] - g_.net_begin[n] > kFmNeighbourNetSize) continue;
        if (state_.pins(n, m.to) != 1 && state_.pins(n, over) != 1) continue;
        for (int32_t j = g_.net_begin[n]; j < g_.net_begin[n + 1]; ++j) {
          const int32_t u = g_.pins[j];
          if (state_.part(u) == over && in_subset_[u] && weight[u] != 0) offer(u, m.to);
        }
      }
    }
  }
}

}  // namespace dcp::internal
