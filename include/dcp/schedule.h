// SPDX-License-Identifier: Apache-2.0
// Division scheduling: which division each compute block runs in, and which data moves, from
// where to where, before each division.
//
// Division 0 holds tiles whose inputs are all local, so it needs no communication: a device's
// local tiles up to an n-th of its compute (the rest join the last division, so that no device's
// division 0 holds up the devices fetching from it). The other tiles of a device are spread over
// divisions 1..n-1; the inputs a division needs move while the previous division computes. A piece
// needed by devices of a node other than its owner's crosses the network once, to a relay device of
// that node, and is forwarded inside the node from there.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "dcp/status.h"

namespace dcp {

// The most divisions a schedule may have. The cost model's choice (ScheduleOptions::divisions 0)
// and the division search by simulation try at most kMaxSearchedDivisions; the planner's tuning
// goes beyond it only to spread a plan's peak buffers over more divisions, each holding fewer
// remote blocks at once (TuningOptions::max_peak_imbalance): 16M tokens on 128x8 in blocks of
// 4096 hold 1.40 GB on the largest device in 32 divisions against 2.07 GB in 16, and simulate
// 1.0% faster. Pricing every count up to 32 in every pass would double its scheduling.
inline constexpr int32_t kMaxDivisions = 32;
inline constexpr int32_t kMaxSearchedDivisions = 16;

struct ScheduleOptions {
  // Number of divisions (at most kMaxDivisions); 0 chooses per batch with the cost model below
  // (1 to kMaxSearchedDivisions).
  int32_t divisions = 0;
  // Cost model used only to choose the number of divisions (both passes' FLOPs and bytes in one
  // timeline: src/schedule/schedule_divisions.cc). Defaults: an H100-class device and an
  // 8-GPU node with NVSwitch (450 GB/s per direction per GPU) on a 400 Gbps network (50 GB/s per
  // node, shared by its devices).
  double device_flops = 400e12;           // sustained attention FLOP/s of one device
  double intra_node_bytes_per_s = 450e9;  // per device, per direction
  double inter_node_bytes_per_s = 50e9;   // per node, shared by its devices
  double division_overhead_s = 30e-6;     // fixed cost of a division: launches, waits, a kernel
  // Threads pricing the division counts at once (1 to PartitionOptions::kMaxThreads); the
  // schedule does not depend on it.
  int32_t threads = 1;

  Status Validate() const;
};

// Which side of a tile a transferred piece feeds: its queries' row (forward: Q; backward: Q, dO,
// LSE and Delta) or its keys' column (KV).
enum class Side : uint8_t { kRow = 0, kColumn = 1 };

// One piece moving to one device before a division. Phase 0 transfers start when the previous
// division starts; phase 1 transfers forward, inside a node, what a relay received in phase 0
// of the same division (dcp's schedules only for division 1: later, the relay receives it a
// division earlier and forwards in phase 0).
struct Transfer {
  DataBlockId block;
  int32_t head_group = 0;
  Side side = Side::kRow;
  DeviceId source, destination;
  int32_t division = 1;  // >= 1: needed by the destination from this division on
  int32_t phase = 0;     // 0 or 1
};

struct Schedule {
  int32_t n_divisions = 1;
  std::vector<int32_t> compute_division;  // per compute block
  std::vector<Transfer> transfers;        // sorted by (division, phase, source, destination)
  // Backward: partial dKV travels on behind its KV, hop by hop, as ring attention does, instead
  // of going straight to its owner at the end (see CompilePlan).
  bool carry_gradients = false;
  // Backward: partial dQ and dKV computed on a node other than their owner's are summed on one
  // device of that node, which sends the sum across the network once (the mirror of the relay
  // that fetches an input once per node). dcp's schedules set it; static baselines keep theirs.
  bool reduce_in_node = false;
};

// REQUIRES: placement covers `blocks` on `topology` (checked: InvalidArgument otherwise).
Result<Schedule> ScheduleDivisions(const BlockSet& blocks, const Placement& placement,
                                   const Topology& topology, const ScheduleOptions& options);

}  // namespace dcp
