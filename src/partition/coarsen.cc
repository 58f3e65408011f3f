// SPDX-License-Identifier: Apache-2.0
// Contractions of attention hypergraphs: one level of pairs, or whole rows (see coarsen.h).
#include "partition/coarsen.h"
#include "partition/subgraph.h"

#include <algorithm>
#include <tuple>

namespace dcp::internal {

namespace {

// The coarse vertices' weights (sums of their fine ones) and the coarse subset, once
// level->coarse_of maps every vertex of `subset`.
void SumWeights(const Hypergraph& g, const std::vector<int32_t>& subset, CoarseLevel* level) {
  Hypergraph& c = level->graph;
  c.compute_weight.assign(c.n_vertices(), 0);
  c.memory_weight.assign(c.n_vertices(), 0);
  std::vector<char> in_coarse_subset(c.n_vertices(), 0);
  for (int32_t v : subset) {
    const int32_t cv = level->coarse_of[v];
    c.compute_weight[cv] += g.compute_weight[v];
    c.memory_weight[cv] += g.memory_weight[v];
    in_coarse_subset[cv] = 1;
  }
  for (int32_t cv = 0; cv < c.n_vertices(); ++cv) {
    if (in_coarse_subset[cv]) level->subset.push_back(cv);
  }
}

// Fills the nets and the incidence of `c` (whose vertex counts are set) from those of `g` under
// `coarse_of` (fine vertex -> coarse vertex, -1 outside) and `coarse_block` (fine data block ->
// coarse data block). Nets with the same coarse pins merge (weights add), and nets left with one
// pin are dropped (they can never span two parts). Merged nets are ordered by their first fine
// net, which keeps the per-data-block head-group order of BuildHypergraph.
void ContractNets(const Hypergraph& g, const std::vector<int32_t>& coarse_of,
                  const std::vector<int32_t>& coarse_block, Hypergraph* out) {
  Hypergraph& c = *out;
  struct CoarseNet {
    std::vector<int32_t> pins;
    int32_t fine;  // first fine net
  };
  std::vector<CoarseNet> nets;
  std::vector<int32_t> stamp(c.n_vertices(), -1);
  for (int32_t n = 0; n < g.n_nets(); ++n) {
    CoarseNet net{{}, n};
    for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
      const int32_t cv = coarse_of[g.pins[i]];
      if (cv < 0 || stamp[cv] == n) continue;
      stamp[cv] = n;
      net.pins.push_back(cv);
    }
    if (net.pins.size() < 2) continue;
    std::sort(net.pins.begin(), net.pins.end());
    nets.push_back(std::move(net));
  }
  std::sort(nets.begin(), nets.end(), [](const CoarseNet& a, const CoarseNet& b) {
    return std::tie(a.pins, a.fine) < std::tie(b.pins, b.fine);
  });
  struct Merged {
    int32_t fine, first;  // first fine net; index into `nets` of the group's first
    int64_t weight;
  };
  std::vector<Merged> merged;
  for (size_t i = 0; i < nets.size(); ++i) {
    if (i == 0 || nets[i].pins != nets[i - 1].pins) {
      merged.push_back({nets[i].fine, static_cast<int32_t>(i), 0});
    }
    merged.back().weight += g.net_weight[nets[i].fine];
  }
  std::sort(merged.begin(), merged.end(),
            [](const Merged& a, const Merged& b) { return a.fine < b.fine; });
  c.net_begin.push_back(0);
  for (const Merged& m : merged) {
    c.net_weight.push_back(m.weight);
    c.net_data_block.push_back(coarse_block[g.net_data_block[m.fine]]);
    c.net_kind.push_back(g.net_kind[m.fine]);
    const std::vector<int32_t>& pins = nets[m.first].pins;
    c.pins.insert(c.pins.end(), pins.begin(), pins.end());
    c.net_begin.push_back(static_cast<int32_t>(c.pins.size()));
  }

  FillIncidence(&c);
}

}  // namespace

CoarseLevel Coarsen(const Hypergraph& g, const std::vector<int32_t>& sequence_first_block,
                    const std::vector<int32_t>& subset) {
  CoarseLevel level;
  std::vector<char> in_subset(g.n_vertices(), 0);
  for (int32_t v : subset) in_subset[v] = 1;

  // Data blocks: pairs within each sequence.
  std::vector<int32_t> coarse_block(g.n_data, -1);
  int32_t n_coarse_data = 0;
  const int32_t n_sequences = static_cast<int32_t>(sequence_first_block.size()) - 1;
  level.sequence_first_block.push_back(0);
  for (int32_t s = 0; s < n_sequences; ++s) {
    const int32_t first = sequence_first_block[s];
    for (int32_t b = first; b < sequence_first_block[s + 1]; ++b) {
      coarse_block[b] = n_coarse_data + (b - first) / 2;
    }
    n_coarse_data += (sequence_first_block[s + 1] - first + 1) / 2;
    level.sequence_first_block.push_back(n_coarse_data);
  }

  // Tiles: by (q pair, head group, kv pair). The head group of a tile is the rank of its row net
  // among its data block's row nets (BuildHypergraph adds them per data block in head-group
  // order, and Coarsen keeps that order), so tiles of different head groups stay apart.
  std::vector<int32_t> rank(g.n_nets(), 0);
  {
    std::vector<int32_t> seen(2 * static_cast<size_t>(g.n_data), 0);
    for (int32_t n = 0; n < g.n_nets(); ++n) {
      rank[n] = seen[2 * static_cast<size_t>(g.net_data_block[n]) +
                     (g.net_kind[n] == NetKind::kRow ? 0 : 1)]++;
    }
  }
  struct TileKey {
    int32_t q, group, kv, v;
  };
  std::vector<TileKey> tiles;
  for (int32_t v : subset) {
    if (v >= g.n_compute) continue;
    TileKey key{-1, 0, -1, v};
    for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i) {
      const int32_t n = g.incident[i];
      if (g.net_kind[n] == NetKind::kRow) {
        key.q = coarse_block[g.net_data_block[n]];
        key.group = rank[n];
      } else {
        key.kv = coarse_block[g.net_data_block[n]];
      }
    }
    tiles.push_back(key);
  }
  std::sort(tiles.begin(), tiles.end(), [](const TileKey& a, const TileKey& b) {
    return std::tie(a.q, a.group, a.kv, a.v) < std::tie(b.q, b.group, b.kv, b.v);
  });
  level.coarse_of.assign(g.n_vertices(), -1);
  int32_t n_coarse_compute = 0;
  for (size_t i = 0; i < tiles.size(); ++i) {
    if (i > 0 && std::tie(tiles[i].q, tiles[i].group, tiles[i].kv) !=
                     std::tie(tiles[i - 1].q, tiles[i - 1].group, tiles[i - 1].kv)) {
      ++n_coarse_compute;
    }
    level.coarse_of[tiles[i].v] = n_coarse_compute;
  }
  if (!tiles.empty()) ++n_coarse_compute;

  Hypergraph& c = level.graph;
  c.n_compute = n_coarse_compute;
  c.n_data = n_coarse_data;
  for (int32_t v : subset) {
    if (v >= g.n_compute) level.coarse_of[v] = c.n_compute + coarse_block[v - g.n_compute];
  }
  SumWeights(g, subset, &level);

  ContractNets(g, level.coarse_of, coarse_block, &c);
  return level;
}

CoarseLevel ContractRows(const Hypergraph& g, const std::vector<int32_t>& sequence_first_block,
                         const std::vector<int32_t>& subset, int32_t rows_per_vertex) {
  CoarseLevel level;
  level.sequence_first_block = sequence_first_block;
  std::vector<char> in_subset(g.n_vertices(), 0);
  for (int32_t v : subset) in_subset[v] = 1;
  // The first data block of each block's run of rows_per_vertex consecutive rows.
  std::vector<int32_t> leader(g.n_data);
  for (size_t s = 0; s + 1 < sequence_first_block.size(); ++s) {
    const int32_t first = sequence_first_block[s];
    for (int32_t b = first; b < sequence_first_block[s + 1]; ++b) {
      leader[b] = first + (b - first) / rows_per_vertex * rows_per_vertex;
    }
  }

  // The data block whose row each tile of the subset reads.
  std::vector<int32_t> row_of(g.n_compute, -1);
  for (int32_t n = 0; n < g.n_nets(); ++n) {
    if (g.net_kind[n] != NetKind::kRow) continue;
    for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
      const int32_t t = g.pins[i];
      if (t < g.n_compute && in_subset[t]) row_of[t] = g.net_data_block[n];
    }
  }
  // Tiles of rows whose data lies outside the subset form one coarse compute vertex per run
  // (they share its row nets, so keeping them together saves them), numbered first.
  Hypergraph& c = level.graph;
  level.coarse_of.assign(g.n_vertices(), -1);
  const auto with_its_data = [&](int32_t t) {
    return row_of[t] >= 0 && in_subset[g.n_compute + row_of[t]];
  };
  std::vector<int32_t> foreign_run(g.n_data, -1);
  for (int32_t v : subset) {
    if (v >= g.n_compute || with_its_data(v)) continue;
    if (row_of[v] < 0) {  // no row net (not made by BuildHypergraph): a vertex of its own
      level.coarse_of[v] = c.n_compute++;
      continue;
    }
    int32_t& coarse = foreign_run[leader[row_of[v]]];
    if (coarse < 0) coarse = c.n_compute++;
    level.coarse_of[v] = coarse;
  }
  c.n_data = g.n_data;
  for (int32_t v : subset) {
    if (v >= g.n_compute) {
      level.coarse_of[v] = c.n_compute + leader[v - g.n_compute];
    } else if (with_its_data(v)) {
      level.coarse_of[v] = c.n_compute + leader[row_of[v]];
    }
  }
  SumWeights(g, subset, &level);
  ContractNets(g, level.coarse_of, leader, &c);
  return level;
}

}  // namespace dcp::internal
