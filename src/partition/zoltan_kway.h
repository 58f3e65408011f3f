// SPDX-License-Identifier: Apache-2.0
// Zoltan PHG as a k-way solver for one level of placement. Internal to src/partition.
#pragma once

#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

// Parts of the `subset` vertices of g (a part per vertex of g, -1 outside the subset) from Zoltan
// PHG on km1 (connectivity - 1). Zoltan balances a single weight, so memory is pinned the way the
// original DCP does it: a data vertex weighs its bytes scaled to outweigh all compute a hundred
// times, and the tolerance is the memory cap's. Compute balance is not enforced here; the caller
// repairs it. Zoltan's random generator is reseeded from `seed` on every call, so results do not
// depend on earlier calls. Returns Unsupported in a build without Zoltan, Internal if Zoltan fails.
Result<std::vector<int32_t>> ZoltanKway(const Hypergraph& g, const std::vector<int32_t>& subset,
                                        int32_t k, double compute_cap, double memory_cap,
                                        uint64_t seed);

}  // namespace dcp::internal
