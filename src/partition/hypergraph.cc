// SPDX-License-Identifier: Apache-2.0
// The hypergraph model of a BlockSet (see include/dcp/partition.h).
#include "dcp/partition.h"
#include "partition/subgraph.h"

namespace dcp {

NetBytes NetBytesOf(const DataBlock& block, const AttentionShape& shape, int64_t head_groups) {
  const int64_t e = BytesPerElement(shape.dtype);
  const int64_t t = block.tokens;
  const int64_t q = t * (shape.heads / head_groups) * shape.head_dim * e;  // Q, O, dO or dQ
  const int64_t kv = t * 2 * (shape.kv_heads / head_groups) * shape.head_dim * e;
  const int64_t row_scalar = t * (shape.heads / head_groups) * 4;  // LSE or Delta, fp32
  return NetBytes{.row_fwd = q + q + row_scalar,
                  .row_bwd = q + q + row_scalar + row_scalar + q,
                  .column_fwd = kv,
                  .column_bwd = kv + kv};
}

Hypergraph BuildHypergraph(const BlockSet& blocks, TrafficModel traffic) {
  const bool backward = traffic == TrafficModel::kForwardAndBackward;
  Hypergraph g;
  g.n_compute = static_cast<int32_t>(blocks.compute_blocks.size());
  g.n_data = static_cast<int32_t>(blocks.data_blocks.size());
  const int32_t n = g.n_vertices();
  g.compute_weight.assign(n, 0);
  g.memory_weight.assign(n, 0);
  for (int32_t c = 0; c < g.n_compute; ++c) {
    g.compute_weight[c] = blocks.FlopsFwd(blocks.compute_blocks[c]) +
                          (backward ? blocks.FlopsBwd(blocks.compute_blocks[c]) : 0);
  }
  for (int32_t d = 0; d < g.n_data; ++d) {
    const DataBlockBytes& bytes = blocks.data_blocks[d].bytes;
    g.memory_weight[g.n_compute + d] = backward ? bytes.Total() : bytes.Forward();
  }

  // Tiles of each (data block, head group) by direction, in compute-block order.
  const int64_t groups = blocks.head_groups;
  std::vector<std::vector<int32_t>> row(g.n_data * groups), column(g.n_data * groups);
  for (int32_t c = 0; c < g.n_compute; ++c) {
    const ComputeBlock& cb = blocks.compute_blocks[c];
    row[cb.q_block.value * groups + cb.head_group].push_back(c);
    column[cb.kv_block.value * groups + cb.head_group].push_back(c);
  }
  g.net_begin.push_back(0);
  const auto add_net = [&](int32_t data, NetKind kind, int64_t weight,
                           const std::vector<int32_t>& tiles) {
    if (tiles.empty()) return;  // a net with one pin never moves anything
    g.net_weight.push_back(weight);
    g.net_data_block.push_back(data);
    g.net_kind.push_back(kind);
    g.pins.push_back(g.n_compute + data);
    g.pins.insert(g.pins.end(), tiles.begin(), tiles.end());
    g.net_begin.push_back(static_cast<int32_t>(g.pins.size()));
  };
  for (int32_t d = 0; d < g.n_data; ++d) {
    const NetBytes bytes = NetBytesOf(blocks.data_blocks[d], blocks.shape, groups);
    for (int64_t h = 0; h < groups; ++h) {
      add_net(d, NetKind::kRow, bytes.row_fwd + (backward ? bytes.row_bwd : 0),
              row[d * groups + h]);
      add_net(d, NetKind::kColumn, bytes.column_fwd + (backward ? bytes.column_bwd : 0),
              column[d * groups + h]);
    }
  }

  internal::FillIncidence(&g);
  return g;
}

}  // namespace dcp
