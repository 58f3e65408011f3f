// SPDX-License-Identifier: Apache-2.0
// Random batches for the property tests of the compiler and the simulator: one to five sequences
// (single tokens, whole blocks and random lengths) under one mask family, a random topology of up
// to 4 x 8 devices, block size, head grouping and division count, planned by dcp's pipeline.
#pragma once

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dcp/plan.h"

namespace dcp::testing {

struct RandomPlanCase {
  std::vector<int64_t> lengths;
  std::string mask;
  AttentionShape shape;
  Topology topology;
  int64_t block_size = 0;
  int64_t head_groups = 1;
  int32_t divisions = 0;  // 0: the scheduler chooses

  // The batch; masks with fixed spans (documents, JSON) fall back to causal on short sequences.
  Result<Batch> MakeBatch() const {
    std::vector<MaskSpec> masks;
    for (int64_t l : lengths) {
      const bool fits = mask[0] != 'd' && mask[0] != '{' ? true : l >= 121;
      DCP_ASSIGN_OR_RETURN(MaskSpec spec, MaskSpec::Parse(fits ? mask : "causal"));
      masks.push_back(std::move(spec));
    }
    return Batch::Create(lengths, masks, shape);
  }
};

// Block sizes 64 << [0, block_shifts).
inline RandomPlanCase MakeRandomPlanCase(uint64_t seed, std::span<const char* const> masks,
                                         int block_shifts, AttentionShape shape) {
  std::mt19937_64 rng(seed);
  RandomPlanCase c;
  c.shape = shape;
  c.block_size = int64_t{64} << (rng() % static_cast<uint64_t>(block_shifts));
  const int64_t max_length = std::max<int64_t>(8 * c.block_size, 300);
  c.lengths.resize(1 + rng() % 5);
  for (int64_t& l : c.lengths) {
    const uint64_t kind = rng() % 4;
    l = kind == 0   ? 1
        : kind == 1 ? c.block_size * (1 + static_cast<int64_t>(rng() % 4))
                    : 1 + static_cast<int64_t>(rng() % max_length);
  }
  c.mask = masks[rng() % masks.size()];
  c.topology = Topology{.nodes = 1 + static_cast<int32_t>(rng() % 4),
                        .devices_per_node = 1 + static_cast<int32_t>(rng() % 8)};
  c.head_groups = rng() % 3 == 0 ? 2 : 1;
  c.divisions = rng() % 3 == 0 ? 2 + static_cast<int32_t>(rng() % 4) : 0;
  return c;
}

// A case through dcp's pipeline up to its schedule, each stage kept for the tests that check it.
struct ScheduledCase {
  Batch batch;
  BlockSet blocks;
  PartitionResult placed;
  Schedule schedule;
};

// Blocks, places (builtin partitioner) and schedules the case.
inline Result<ScheduledCase> ScheduleRandomPlanCase(const RandomPlanCase& c) {
  DCP_ASSIGN_OR_RETURN(Batch batch, c.MakeBatch());
  DCP_ASSIGN_OR_RETURN(BlockSet blocks, MakeBlocks(batch, {.block_size = c.block_size,
                                                           .head_groups = c.head_groups}));
  DCP_ASSIGN_OR_RETURN(PartitionResult placed, PartitionBlocks(blocks, c.topology, {}));
  DCP_ASSIGN_OR_RETURN(Schedule schedule,
                       ScheduleDivisions(blocks, placed.placement, c.topology,
                                         ScheduleOptions{.divisions = c.divisions}));
  return ScheduledCase{.batch = std::move(batch),
                       .blocks = std::move(blocks),
                       .placed = std::move(placed),
                       .schedule = std::move(schedule)};
}

// Blocks, places (builtin partitioner), schedules and compiles the case.
inline Result<Plan> CompileRandomPlanCase(const RandomPlanCase& c, bool reduce_in_node = true) {
  DCP_ASSIGN_OR_RETURN(ScheduledCase s, ScheduleRandomPlanCase(c));
  s.schedule.reduce_in_node = reduce_in_node;
  return CompilePlan(s.batch, s.blocks, s.placed.placement, s.schedule, c.topology);
}

}  // namespace dcp::testing
