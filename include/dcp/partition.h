// SPDX-License-Identifier: Apache-2.0
// Placement of blocks on devices, and the hypergraph model it is optimised on.
//
// The hypergraph has one vertex per compute block, weighing [FLOPs forward + backward, 0], and one
// per data block, weighing [0, bytes]. Each data block has one net per head group and direction:
// a row net over the data block and the tiles that read its queries and write its outputs, and a
// column net over the data block and the tiles that read its keys and values. A net's weight is
// the bytes that cross to each extra device it spans over a forward and backward pass (see
// NetBytes), so connectivity - 1 (km1) summed over nets is exactly the bytes moved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/blocks.h"
#include "dcp/planning_monitor.h"
#include "dcp/status.h"

namespace dcp {

using DeviceId = Id<struct DeviceTag>;

// Devices are numbered node-major: device d is on node d / devices_per_node.
struct Topology {
  // The most devices a topology may have: a plan holds two programs per device, and placement,
  // scheduling and simulation keep tables per device (what a batch needs beyond that is checked
  // when it is planned).
  static constexpr int64_t kMaxDevices = 65536;

  int32_t nodes = 1;
  int32_t devices_per_node = 1;

  int32_t devices() const { return nodes * devices_per_node; }
  int32_t NodeOf(DeviceId d) const { return d.value / devices_per_node; }
  Status Validate() const;  // 1 <= devices() <= kMaxDevices
  // "4x8" (nodes x devices per node).
  static Result<Topology> Parse(std::string_view text);
  std::string ToString() const;
  friend bool operator==(const Topology&, const Topology&) = default;
};

// Bytes a net moves to each extra device it spans, forward and backward, per head group.
//   row net (data block's queries and outputs):
//     forward:  Q in, O and LSE back out for the merge
//     backward: Q, dO, LSE and Delta = rowsum(O * dO) (fp32 per row and head) in, dQ back out
//   column net (data block's keys and values):
//     forward:  K and V in
//     backward: K and V in, dK and dV back out
struct NetBytes {
  int64_t row_fwd = 0, row_bwd = 0;
  int64_t column_fwd = 0, column_bwd = 0;
};
NetBytes NetBytesOf(const DataBlock& block, const AttentionShape& shape, int64_t head_groups);

enum class NetKind { kRow, kColumn };

// A hypergraph in compressed form: the pins of net n are pins[net_begin[n] .. net_begin[n+1]),
// and the nets of vertex v are incident[vertex_begin[v] .. vertex_begin[v+1]), in increasing net
// order (the partitioner's swap pricing merges two such lists).
struct Hypergraph {
  int32_t n_compute = 0;  // vertices [0, n_compute) are compute blocks, in BlockSet order
  int32_t n_data = 0;     // vertices [n_compute, n_compute + n_data) are data blocks

  std::vector<int64_t> compute_weight;  // per vertex; 0 for data vertices
  std::vector<int64_t> memory_weight;   // per vertex; 0 for compute vertices
  std::vector<int64_t> net_weight;
  std::vector<int32_t> net_data_block;  // the data block each net belongs to
  std::vector<NetKind> net_kind;
  std::vector<int32_t> net_begin;
  std::vector<int32_t> pins;
  std::vector<int32_t> vertex_begin;
  std::vector<int32_t> incident;

  int32_t n_vertices() const { return n_compute + n_data; }
  int32_t n_nets() const { return static_cast<int32_t>(net_weight.size()); }
  int32_t n_pins() const { return static_cast<int32_t>(pins.size()); }
};

// Which traffic the net weights count. The forward-only model is the one of the original DCP and of
// the reference partitioning instances of bench/partition_bench.cc; dcp plans with both passes.
enum class TrafficModel { kForwardAndBackward, kForwardOnly };

Hypergraph BuildHypergraph(const BlockSet& blocks,
                           TrafficModel traffic = TrafficModel::kForwardAndBackward);

// Standard hMETIS format with net and vertex weights (fmt 11), readable by hMETIS, KaHyPar and
// Mt-KaHyPar: a '%' comment line stating the scales, "n_nets n_vertices 11", one line per net
// "weight pin pin ..." (1-based vertex ids), then one line per vertex with its weight. A vertex
// has one non-zero weight, so a compute vertex writes its FLOPs and a data vertex its bytes, each
// divided by its own scale (chosen so totals fit 32-bit integers; at least 1 per vertex and net).
struct HmetisScale {
  double compute = 1, memory = 1, net = 1;  // exported weight = max(1, round(weight / scale))
};
HmetisScale WriteHmetis(const Hypergraph& graph, std::string* out);

// Placement of every block on a device.
struct Placement {
  std::vector<DeviceId> data_device;     // per data block
  std::vector<DeviceId> compute_device;  // per compute block
};

// A partition file: one part number per line, one line per hypergraph vertex (compute blocks,
// then data blocks), as written by hMETIS, KaHyPar and Mt-KaHyPar.
Result<Placement> ReadPartition(std::string_view text, const Hypergraph& graph,
                                const Topology& topology);
// The partition file of a placement, as ReadPartition reads it: one device per line, the compute
// blocks first, then the data blocks.
std::string WritePartition(const Placement& placement);

// What a placement costs: bytes moved (km1), split by link class, and balance.
struct PlacementReport {
  int64_t km1_bytes = 0;         // sum over nets of weight * (devices spanned - 1)
  int64_t bytes_inter_node = 0;  // sum over nets of weight * (nodes spanned - 1): the network
                                 // carries a block once per node, then it is relayed inside
  int64_t bytes_intra_node = 0;  // km1_bytes - bytes_inter_node
  int64_t max_device_bytes_inter_node = 0;  // the most any device receives over the network
  std::vector<int64_t> device_compute;      // FLOPs forward + backward per device
  std::vector<int64_t> device_memory;       // bytes of data blocks per device
  double compute_imbalance = 1;             // max / mean (1: perfect)
  double memory_imbalance = 1;              // max / mean (1: perfect)
};

// Max / mean of per-device loads (1 when all are equal, and when all are zero): what every
// "imbalance" dcp reports means.
double MaxOverMean(const std::vector<int64_t>& loads);

// REQUIRES: placement sizes match the graph, devices within the topology (checked: returns
// InvalidArgument otherwise).
Result<PlacementReport> EvaluatePlacement(const Hypergraph& graph, const Placement& placement,
                                          const Topology& topology);

}  // namespace dcp

namespace dcp {

enum class PartitionerKind {
  kBuiltin,  // dcp's own: greedy start and refinement with both constraints enforced natively
  kZoltan,   // Zoltan PHG on one weight (memory pinned by scaling), then dcp's balance repair
};

std::string_view ToString(PartitionerKind kind);
Result<PartitionerKind> ParsePartitionerKind(std::string_view text);  // "builtin" | "zoltan"

struct PartitionOptions {
  PartitionerKind partitioner = PartitionerKind::kBuiltin;
  // Compute per device <= (1 + eps_compute) * its node's average, inside each node; over all
  // devices that allows (1 + eps_inter) * (1 + eps_compute) times the mean (ComputeBound).
  double eps_compute = 0.1;
  // Compute per node <= (1 + eps_inter) * average at the first, across-node level: a looser bound
  // there buys fewer inter-node bytes; the second level restores eps_compute per device when the
  // node's share allows it (the paper's defaults: 0.1 and 0.4).
  double eps_inter = 0.4;
  // Data bytes per device <= (1 + eps_memory) * average.
  double eps_memory = 0.2;
  uint64_t seed = 0;           // same seed, same placement
  int refinement_rounds = 24;  // label-propagation passes per level; more is slower, rarely better
  // Threads for the placement's independent pieces (1 to kMaxThreads): the nodes' second-level
  // problems, a level's starts, the chains of a split walk. The placement does not depend on it.
  int32_t threads = 1;
  static constexpr int32_t kMaxThreads = 1024;
  // Cancellation (kCancelled) and, with report_progress, progress ("placement": nodes placed of
  // all); not owned.
  const PlanningMonitor* monitor = nullptr;
  bool report_progress = true;

  Status Validate() const;
};

// The most compute imbalance (max/mean over all devices) the tolerances allow:
// (1 + eps_inter) * (1 + eps_compute) across nodes, 1 + eps_compute on one node.
double ComputeBound(const Topology& topology, const PartitionOptions& options);

struct PartitionResult {
  Placement placement;
  PlacementReport report;
  // False when no placement within the tolerances was found (too few blocks for the devices, or
  // one block heavier than a device's share); the placement is then the most balanced one found
  // and `report` states the imbalance reached.
  bool balanced = false;
  double partition_ms = 0;
};

// Places every block on a device of the topology: across nodes first (eps_inter), then inside each
// node (eps_compute), minimising bytes moved. Deterministic for a given seed. Returns Unsupported
// for the Zoltan backend in a build without Zoltan.
Result<PartitionResult> PartitionBlocks(const BlockSet& blocks, const Topology& topology,
                                        const PartitionOptions& options);

// The same on a given hypergraph (e.g. built with another traffic model) of `blocks`.
Result<PartitionResult> PartitionHypergraph(const Hypergraph& graph, const BlockSet& blocks,
                                            const Topology& topology,
                                            const PartitionOptions& options);

}  // namespace dcp
