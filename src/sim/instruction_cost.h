// SPDX-License-Identifier: Apache-2.0
// The kernel model of include/dcp/sim.h applied to single instructions, and the checks that make
// an instruction safe to cost.
#pragma once

#include <cstdint>
#include <span>

#include "dcp/plan.h"
#include "dcp/sim.h"

namespace dcp::sim {

// What the flash kernel computes of one tile, in (q, k) pairs of one head.
struct TileWork {
  double pairs = 0;         // area of the touched sub-tiles (clipped to the tile)
  double max_row_band = 0;  // the most pairs in one band of mask_tile_rows rows
  double max_col_band = 0;  // the most pairs in one band of mask_tile_cols columns
};

// REQUIRES: the slices passed CheckInstruction (slopes 0 or 1, bases in range).
TileWork TouchedWork(std::span<const Slice> slices, int64_t rows, int64_t cols, int64_t tile_rows,
                     int64_t tile_cols);

// Attention FLOPs of a call as blocks.h counts them (mask area, forward 4 and backward 10 FLOPs per
// pair and head dimension).
int64_t AttentionFlops(const Plan& plan, const BlockwiseAttention& call);

// SimReport::ideal_s of a batch whose passes have these attention FLOPs, on `devices` devices.
double IdealSeconds(int64_t forward_flops, int64_t backward_flops, int32_t devices,
                    const DeviceSpec& device);

// InvalidArgument when the instruction refers to a slot, block or peer that does not exist, or a
// tile's slices could not be costed. The message starts with the instruction index.
Status CheckInstruction(const Plan& plan, const Program& program, size_t index);

}  // namespace dcp::sim
