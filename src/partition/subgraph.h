// SPDX-License-Identifier: Apache-2.0
// Hypergraph pieces shared by the partitioner's phases: the vertex -> nets incidence of a
// hypergraph whose nets are set, and the hypergraph a subset of vertices induces, so that a
// sub-problem (one node's devices, at the second level of the placement) costs what its subset
// holds rather than what the whole batch does. Internal to src/partition.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

// Fills vertex_begin and incident from net_begin and pins (vertex counts set): each vertex's
// nets in net order.
void FillIncidence(Hypergraph* g);

struct Subgraph {
  // Every data block of the parent (those outside the subset are vertices outside `subset`, on no
  // net), the subset's compute blocks in parent order, and every parent net, in parent order, its
  // pins restricted to the subset (a net may have none). Net indices, kinds, data blocks and
  // weights are the parent's, so sequence_first_block, head-group ranks and touched-net weights
  // mean the same on both, and a partition of it costs what it would cost on the parent.
  Hypergraph graph;
  std::vector<int32_t> subset;     // the vertices standing for the parent's subset, ascending
  std::vector<int32_t> parent_of;  // per vertex: its vertex in the parent
};

Subgraph ExtractSubgraph(const Hypergraph& g, const std::vector<int32_t>& subset);

}  // namespace dcp::internal
