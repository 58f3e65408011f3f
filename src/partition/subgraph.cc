// SPDX-License-Identifier: Apache-2.0
// Incidence and induced sub-hypergraphs (see subgraph.h).
#include "partition/subgraph.h"

#include <algorithm>

namespace dcp::internal {

void FillIncidence(Hypergraph* g) {
  const int32_t n = g->n_vertices();
  g->vertex_begin.assign(n + 1, 0);
  for (int32_t p : g->pins) g->vertex_begin[p + 1]++;
  for (int32_t v = 0; v < n; ++v) g->vertex_begin[v + 1] += g->vertex_begin[v];
  g->incident.resize(g->pins.size());
  std::vector<int32_t> fill(g->vertex_begin.begin(), g->vertex_begin.end() - 1);
  for (int32_t net = 0; net < g->n_nets(); ++net) {
    for (int32_t i = g->net_begin[net]; i < g->net_begin[net + 1]; ++i) {
      g->incident[fill[g->pins[i]]++] = net;
    }
  }
}

Subgraph ExtractSubgraph(const Hypergraph& g, const std::vector<int32_t>& subset) {
  Subgraph out;
  Hypergraph& s = out.graph;
  std::vector<int32_t> sorted = subset;
  std::sort(sorted.begin(), sorted.end());
  // New vertex of each subset compute vertex; data vertices keep their block's place.
  std::vector<int32_t> compute_of;
  for (int32_t v : sorted) {
    if (v < g.n_compute) compute_of.push_back(v);
  }
  s.n_compute = static_cast<int32_t>(compute_of.size());
  s.n_data = g.n_data;
  const auto vertex_of = [&](int32_t v, int32_t index) {
    return v < g.n_compute ? index : s.n_compute + (v - g.n_compute);
  };
  out.parent_of = compute_of;
  for (int32_t b = 0; b < g.n_data; ++b) out.parent_of.push_back(g.n_compute + b);
  for (int32_t v = 0; v < s.n_vertices(); ++v) {
    s.compute_weight.push_back(g.compute_weight[out.parent_of[v]]);
    s.memory_weight.push_back(g.memory_weight[out.parent_of[v]]);
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    out.subset.push_back(vertex_of(sorted[i], static_cast<int32_t>(i)));
  }
  s.net_weight = g.net_weight;
  s.net_data_block = g.net_data_block;
  s.net_kind = g.net_kind;
  // Pins per net, then filled data vertices first and compute vertices in order: each net keeps
  // the parent's pin order (its data block first, then its tiles in block order).
  s.net_begin.assign(g.n_nets() + 1, 0);
  for (int32_t v : sorted) {
    for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i) {
      s.net_begin[g.incident[i] + 1]++;
    }
  }
  for (int32_t n = 0; n < g.n_nets(); ++n) s.net_begin[n + 1] += s.net_begin[n];
  s.pins.resize(s.net_begin.back());
  std::vector<int32_t> fill(s.net_begin.begin(), s.net_begin.end() - 1);
  for (bool data : {true, false}) {
    for (size_t k = 0; k < sorted.size(); ++k) {
      const int32_t v = sorted[k];
      if ((v >= g.n_compute) != data) continue;
      for (int32_t i = g.vertex_begin[v]; i < g.vertex_begin[v + 1]; ++i) {
        s.pins[fill[g.incident[i]]++] = vertex_of(v, static_cast<int32_t>(k));
      }
    }
  }
  FillIncidence(&s);
  return out;
}

}  // namespace dcp::internal
