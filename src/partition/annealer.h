// SPDX-License-Identifier: Apache-2.0
// Simulated annealing of a k-way partition under a compute cap and a memory cap per part,
// minimising km1. It is meant for small hypergraphs (the row-contracted one of coarsen.h, a few
// hundred vertices), where local refinement stops in deep local minima: it walks through worse
// partitions at a temperature that falls geometrically, by single moves to a part a neighbour is
// on and by swaps with a vertex of such a part (with every part's memory full, only swaps move
// data). The caps are enforced natively: a step never takes a part above a cap, nor further above
// one it is already over, so a start within the caps stays within them. Seeded, so deterministic.
// Internal to src/partition.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

struct AnnealOptions {
  int64_t steps = 0;           // proposed moves or swaps; the work is about steps x vertex degree
  double start_heat = 3;       // first temperature, in mean net weights
  double end_heat = 0.125;     // last temperature, in mean net weights
  uint64_t seed = 0;
};

// Anneals `*part` (a part in [0, k) per vertex of `subset`; other entries are left alone) and
// stores the partition of least km1 met within both caps, or leaves `*part` as it was when none
// was (a start over a cap that never got within them). Returns the km1 of what it stores.
int64_t Anneal(const Hypergraph& g, const std::vector<int32_t>& subset, int32_t k,
               double compute_cap, double memory_cap, const AnnealOptions& options,
               std::vector<int32_t>* part);

}  // namespace dcp::internal
