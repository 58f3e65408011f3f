// SPDX-License-Identifier: Apache-2.0
// The k-way engine of the builtin partitioner: a subset of a hypergraph's vertices into k parts
// under a compute cap and a memory cap per part, minimising km1 (connectivity - 1).
//
// A run starts from one of several initial partitions (kway_initial.cc), refines it by label
// propagation, whole-row moves and data swaps, repairs the caps and refines again, then climbs
// out of local minima by FM passes (kway_refine.cc). The caps are enforced natively, never by
// scaling weights. The multilevel driver that coarsens (coarsen.h) and calls the engine at each
// level is in partition_blocks.cc. Internal to src/partition.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "dcp/partition.h"

namespace dcp::internal {

// One k-way problem: the vertices of `subset` of `graph` into parts 0..k-1, each part's compute
// at most compute_cap and its memory at most memory_cap. Holds references: the graph, the
// sequences and the subset outlive it.
struct KwayProblem {
  const Hypergraph& graph;
  // Per sequence, its first data block, and one entry more for the end (the batch's order).
  const std::vector<int32_t>& sequence_first_block;
  const std::vector<int32_t>& subset;
  int32_t k;
  double compute_cap, memory_cap;
  uint64_t seed;
  // Threads for the work of a run that splits into independent pieces (the first gains of an FM
  // pass); the result does not depend on it.
  int32_t threads = 1;

  // The same parts, caps, seed and threads on another graph (a coarser level of this one).
  KwayProblem On(const Hypergraph& g, const std::vector<int32_t>& sequences,
                 const std::vector<int32_t>& vertices) const {
    return {g, sequences, vertices, k, compute_cap, memory_cap, seed, threads};
  }
};

// How a run starts: from the geometric cut with its q axis stretched by `stretch` times the
// row/column byte ratio, from contiguous runs of data blocks, from the greedy whole-sequence
// packing, from stripes of whole rows, or from a given partition (such as the annealed whole rows
// of partition_blocks.cc, or a coarser level's partition projected onto this one).
struct KwayStart {
  enum class Kind { kGeometric, kContiguous, kGreedy, kStripes, kGiven } kind = Kind::kGeometric;
  double stretch = 1.0;                         // kGeometric
  const std::vector<int32_t>* given = nullptr;  // kGiven: a part per vertex of the graph
};

struct KwayResult {
  std::vector<int32_t> part;  // per vertex of the graph: its part, -1 outside the subset
  bool within_caps = false;   // every part within both caps
  double max_load = 0;        // the largest load relative to its cap, over parts and constraints
  int64_t connectivity = 0;   // sum over the subset's nets of weight x parts spanned
};

// FM passes a caller's final run usually asks for.
inline constexpr int kFmPasses = 2;

// Places the subset from `start`, runs up to `rounds` rounds of refinement, repairs the caps and
// refines again (rounds / 4), then `fm_passes` passes of FM while the caps hold. Deterministic
// for a given problem (its seed included). Once *stop (when given) is set, the run ends at its
// next round or pass with a result not to be used: for a run whose result may turn out not to be
// needed.
KwayResult RunKway(const KwayProblem& problem, const KwayStart& start, int rounds,
                   int fm_passes = 0, const std::atomic<bool>* stop = nullptr);

// RunKway, unless the start places the subset as one of *placed does (the partitions of earlier
// starts): a run is a function of its problem and its start's partition, so such a start would end
// where that one did. Its partition is then added to *placed.
std::optional<KwayResult> RunKwayFromNewPlacement(const KwayProblem& problem,
                                                  const KwayStart& start, int rounds, int fm_passes,
                                                  std::vector<std::vector<int32_t>>* placed);

}  // namespace dcp::internal
