// SPDX-License-Identifier: Apache-2.0
// The simulator: replays a Plan's per-device programs on a model of a GPU cluster and reports how
// long each pass takes, where the time goes and a timeline (docs/simulator.md).
//
// The cluster is data (ClusterSpec): nodes of `devices_per_node` devices joined by a switch inside
// the node (NVSwitch: every device has its own port, `intra_node.bytes_per_s` in each direction)
// and a network between nodes (`inter_node.bytes_per_s` in each direction per NODE, shared by its
// devices), plus a kernel model of one device. Presets for AWS p4de (A100) and H100 nodes are
// built in; any spec can be written to and read from JSON.
//
// Replay (SimulatePlan): every device has one compute stream that executes its program in order.
// Attention, reductions and copies occupy the stream for the time the kernel model gives them.
// CommLaunch does not block: each (source -> destination) message of the launch becomes a flow
// that starts once both ends have executed the launch with that id (a rendezvous, as NCCL
// send/recv) plus the link latency, and then shares bandwidth with every other running flow by
// max-min fairness (progressive filling, recomputed whenever a flow starts or ends). A flow inside
// a node uses its source's switch egress and its destination's switch ingress; a flow between
// nodes uses its source node's network egress and its destination node's network ingress.
// CommWait(id) blocks the stream until every flow of that launch touching the device has
// finished. The backward pass starts when the forward pass has finished on every device; both are
// simulated from their own time 0 and reported separately.
//
// Thread safety: all functions are pure; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/plan.h"
#include "dcp/status.h"

namespace dcp {

// One direction of a link.
struct LinkSpec {
  // Bytes per second in each direction: per device for the intra-node switch, per node for the
  // inter-node network. Nominal rates; lower them to model a congested or less efficient fabric.
  double bytes_per_s = 0;
  // Seconds from the moment both ends are ready until the first byte moves (software + wire).
  double latency_s = 0;
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;
};

// Time of one BlockwiseAttention call (one fused kernel over its tiles):
//   launch_s + max(sum over tiles of tile_s, longest CTA)
//   tile_s = work_pairs * flops_per_pair * heads_per_group / (peak_flops * efficiency(tile))
//   efficiency(tile) = pass_efficiency * f(rows, rows_half) * f(cols, cols_half),
//   f(n, half) = n / (n + half)
// where work_pairs is the area of the tile's mask_tile_rows x mask_tile_cols sub-tiles that hold
// at least one allowed pair (flash kernels compute every touched sub-tile in full and skip the
// others), flops_per_pair is 4 * head_dim forward and 10 * head_dim backward. The longest CTA
// bounds calls with too few CTAs to fill the device: forward CTAs are one head's band of
// mask_tile_rows rows, backward CTAs one head's band of mask_tile_cols columns, each running at
// 1/sm_count of the device's rate.
struct AttentionKernelModel {
  // Fraction of peak_flops a kernel reaches on very large unmasked tiles.
  double forward_efficiency = 0.72;
  double backward_efficiency = 0.60;
  // Tile rows / columns at which f() is one half; 0 makes f() == 1.
  double rows_half = 105;
  double cols_half = 105;
  // Sub-tile of the kernel: partly masked sub-tiles are computed in full. 1 x 1 counts the mask
  // area exactly.
  int64_t mask_tile_rows = 128;
  int64_t mask_tile_cols = 128;
  // Streaming multiprocessors; 0 switches the longest-CTA bound off.
  int32_t sm_count = 108;
  // Fixed cost of one call, seconds.
  double launch_s = 10e-6;
  friend bool operator==(const AttentionKernelModel&, const AttentionKernelModel&) = default;
};

struct DeviceSpec {
  // Dense bf16 tensor-core FLOP/s.
  double peak_flops = 312e12;
  // Sustained HBM bytes per second. Reductions and copies are memory-bound: each call costs
  // memory_op_launch_s + (bytes read + bytes written) / hbm_bytes_per_s, counting slot capacities.
  double hbm_bytes_per_s = 1.6e12;
  double memory_op_launch_s = 5e-6;
  AttentionKernelModel attention = {};
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// The defaults are the p4de preset.
struct ClusterSpec {
  std::string name = "p4de";  // for reports only
  int32_t devices_per_node = 8;
  LinkSpec intra_node = {.bytes_per_s = 300e9, .latency_s = 5e-6};
  LinkSpec inter_node = {.bytes_per_s = 50e9, .latency_s = 25e-6};
  DeviceSpec device = {};

  // InvalidArgument naming the field and its range unless every value describes a machine:
  // devices_per_node >= 1; link rates in [1e6, 1e18] bytes/s, peak FLOP/s and HBM bytes/s in
  // [1e9, 1e18]; latencies and launch costs in [0, 1] s; efficiencies in [1e-3, 1]; halves in
  // [0, 1e6]; sub-tiles in [1, 65536]; sm_count in [0, 2^20]. Outside these the simulator's
  // arithmetic overflows.
  Status Validate() const;
  // InvalidArgument unless a node of `topology` fits in one of this cluster's nodes: a plan may
  // use part of each node (2x4 on p4de), never more devices than a node has.
  Status CheckHolds(const Topology& topology) const;
  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;
};

// "p4de": 8 x A100-80GB per node, NVSwitch 300 GB/s per direction per GPU, 4 x 100 Gbps EFA per
// node (50 GB/s per direction per node). "h100": 8 x H100 SXM per node, NVLink 450 GB/s per
// direction per GPU, 8 x 400 Gbps per node (400 GB/s per direction per node). NotFound for any
// other name, listing the presets. Calibration and sources: docs/simulator.md.
Result<ClusterSpec> ClusterPreset(std::string_view name);

// The spec as a JSON object (the format ParseClusterJson reads), pretty-printed.
std::string ClusterToJson(const ClusterSpec& cluster);
// Reads a JSON object with the keys ClusterToJson writes. Every key is optional: missing keys keep
// the values of the preset named by the optional key "preset" (default "p4de"). An unknown key, a
// value of the wrong type or a value Validate() rejects is InvalidArgument naming the key path
// (e.g. "device.attention.sm_count"); text that is not JSON is InvalidArgument with the position.
Result<ClusterSpec> ParseClusterJson(std::string_view json);

// The tile side of SimReport::ideal_s: the largest block size the planner's tuning considers by
// default (TuningOptions::block_sizes), whatever block size a plan uses.
inline constexpr int64_t kIdealTileTokens = 4096;

struct SimOptions {
  // Record a Chrome / Perfetto trace of both passes into SimReport::trace_json. Costs memory and
  // time proportional to the instructions and flows; off by default.
  bool trace = false;

  Status Validate() const;
};

// Where one device's time went in one pass: busy_s + exposed_comm_s + idle_s == makespan_s.
struct DeviceSimStats {
  double busy_s = 0;          // the compute stream ran an instruction
  double exposed_comm_s = 0;  // the stream was blocked in CommWait
  double idle_s = 0;          // the device had finished and waited for the slowest one
  int64_t bytes_sent_intra_node = 0;
  int64_t bytes_sent_inter_node = 0;
  int64_t attention_flops = 0;  // of its tiles' mask areas (what blocks.h counts, not the waste)
};

struct PassSimReport {
  double makespan_s = 0;                // the last device's finish
  std::vector<DeviceSimStats> devices;  // by device id
  DeviceSimStats total;                 // sums over devices
  int64_t flows = 0;                    // messages (one per source, destination and launch)
};

struct SimReport {
  PassSimReport forward;
  PassSimReport backward;  // starts when the forward has finished on every device
  // Chrome trace event JSON (chrome://tracing, ui.perfetto.dev) of both passes when
  // SimOptions::trace: one process per device, a "compute" thread with every instruction (named
  // by kind, with tile or op counts) and the time blocked in CommWait, and "comm" threads with the
  // device's outgoing flows, and a counter "buffer bytes" per device: the bytes of the slots of
  // the pass it runs (Program::PeakBufferBytes), 0 after the backward. Times in microseconds; the
  // backward follows the forward.
  std::string trace_json;
  // The batch's attention FLOPs spread evenly over every device at the kernel model's rate on
  // full square tiles of kIdealTileTokens, with no communication exposed: a bound no plan beats.
  double ideal_s = 0;

  double total_s() const { return forward.makespan_s + backward.makespan_s; }
  double efficiency() const { return total_s() > 0 ? ideal_s / total_s() : 0; }
  // Max / mean over devices of their attention FLOPs, forward + backward (1 when all are equal).
  double ComputeImbalance() const;
};

// Simulates the forward then the backward programs of `plan` on `cluster`. Returns
// InvalidArgument when the cluster or options are invalid, when the plan is only one device's part
// or its programs do not match its topology, when the topology's nodes hold more devices than
// the cluster's do (ClusterSpec::CheckHolds; part of each node is fine), when an instruction refers
// to a slot, block or peer that does not exist, when a launch has no matching launch (same id,
// matching send and receive bytes) on a peer, when a CommWait has no earlier CommLaunch with its
// id, and on a deadlock (naming a blocked device, its instruction and the launch id). Never hangs.
Result<SimReport> SimulatePlan(const Plan& plan, const ClusterSpec& cluster,
                               const SimOptions& options = {});

// A lower bound on SimulatePlan(plan, cluster)->total_s() for the cost of its checks, without the
// replay: per pass, the longer of the busiest compute stream (the time of all a device's compute
// instructions) and the busiest link (the bytes of the waited messages crossing one switch port or
// network port, over its bandwidth). Lets a caller skip replaying a plan that cannot beat a time
// it already has: MagiAttention's group-cast over 128x8 takes minutes to replay. Errors as
// SimulatePlan's.
Result<double> SimulationLowerBoundSeconds(const Plan& plan, const ClusterSpec& cluster);

// The schedule of `placement` whose compiled plan `cluster` runs fastest (forward + backward)
// among ScheduleDivisions' own choice, the counts 2, 4, 8, 12 and 16 (kMaxSearchedDivisions), and
// the two counts next to the fastest of these, each compiled and simulated. That cost model sees
// only the forward inputs; this one sees the whole timeline (backward, partial results going home,
// rendezvous), at the price of one compile and replay per count tried. With options.divisions
// fixed, or nothing needing remote data, it is ScheduleDivisions.
Result<Schedule> ScheduleBySimulation(const Batch& batch, const BlockSet& blocks,
                                      const Placement& placement, const Topology& topology,
                                      const ScheduleOptions& options, const ClusterSpec& cluster);

// ---------------------------------------------------------------------------------------------
// End-to-end estimate: the rest of a transformer layer around the simulated attention.

// A decoder-only transformer with grouped-query attention and a SwiGLU MLP.
struct ModelSpec {
  std::string name;
  int64_t layers = 32;
  int64_t hidden = 4096;
  int64_t heads = 32;  // query heads; head_dim = hidden / heads
  int64_t kv_heads = 8;
  int64_t ffn = 14336;  // MLP inner size
  // Fraction of DeviceSpec::peak_flops the layer's GEMMs reach.
  double linear_efficiency = 0.75;

  // Linear parameters per layer: Q and O (hidden^2 each), K and V (hidden x kv_heads x head_dim
  // each), the MLP's three matrices (hidden x ffn each).
  int64_t LinearParameters() const;
  Status Validate() const;
};

// "llama3-8b" (32 layers, hidden 4096, 32 heads, 8 KV heads, ffn 14336), or
// "layers=L,hidden=H,heads=A,kv_heads=K,ffn=F". NotFound for another name, InvalidArgument for a
// bad spec.
Result<ModelSpec> ParseModelSpec(std::string_view text);

struct EndToEndEstimate {
  double attention_s = 0;  // every layer's simulated attention, forward + backward
  double linear_s = 0;     // every layer's linear layers on the device with the most tokens
  double total_s = 0;
};

// One training step of `model` on the plan's batch: per layer, the simulated attention (the plan
// must have the model's attention shape) plus the linear layers, which no device can start before
// the slowest finishes, so they cost what the device holding the most tokens needs (forward 2,
// backward 4 FLOPs per parameter and token). Embeddings, norms and the loss are left out.
EndToEndEstimate EstimateEndToEnd(const Plan& plan, const SimReport& report, const ModelSpec& model,
                                  const DeviceSpec& device);

// A lower bound on SimulatePlan(plan).total_s() for every plan compiled from `placement` of
// `blocks` with `schedule`, on a cluster with this device: per pass, the busiest device's attention
// calls (one per division holding a tile of it), each its launch plus, for each tile, the kernel
// model's time for the tile's mask area alone (no partly masked sub-tiles, no communication, no
// reductions). Lets a caller skip compiling and simulating a placement that cannot beat a time it
// already has. REQUIRES: one device in [0, devices) per compute block in
// placement.compute_device, one division in [0, schedule.n_divisions) in schedule.compute_division.
double AttentionLowerBoundSeconds(const BlockSet& blocks, const Placement& placement,
                                  const Schedule& schedule, int32_t devices,
                                  const DeviceSpec& device);

// Seconds one instruction occupies a compute stream of `device`: the kernel model above for
// attention, the memory-bound model for reductions and copies, 0 for CommLaunch and CommWait.
// REQUIRES: the instruction's slots exist in `program` and its compute blocks and their data blocks
// in `plan` (SimulatePlan checks this before costing; this function does not).
double InstructionSeconds(const Plan& plan, const Program& program, const Instruction& instruction,
                          const DeviceSpec& device);

}  // namespace dcp
