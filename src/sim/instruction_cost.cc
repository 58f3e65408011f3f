// SPDX-License-Identifier: Apache-2.0
// Seconds an instruction occupies a compute stream (the kernel model of include/dcp/sim.h).
#include "sim/instruction_cost.h"

#include <algorithm>
#include <utility>

namespace dcp::sim {
namespace {

// Column bases of a tile's slices lie within a sequence shifted by at most a sequence length
// (plan.h); anything larger describes no column and could overflow the row arithmetic.
constexpr int64_t kMaxSliceBase = int64_t{1} << 41;

// Narrows the rows [*begin, *end) to those where c + slope * i > 0 (slope in -1..1).
void KeepPositive(int64_t c, int64_t slope, int64_t* begin, int64_t* end) {
  if (slope == 0) {
    if (c <= 0) *end = *begin;
  } else if (slope > 0) {
    *begin = std::max(*begin, 1 - c);  // i > -c
  } else {
    *end = std::min(*end, c);  // i < c
  }
}

double Ceil(int64_t n, int64_t d) { return static_cast<double>((n + d - 1) / d); }

// f(n) = n / (n + half): the fraction of a kernel's rate a tile side of n reaches.
double SideFactor(int64_t n, double half) {
  const auto x = static_cast<double>(n);
  return half == 0 ? 1.0 : x / (x + half);
}

int64_t HeadsPerGroup(const Plan& plan) {
  return plan.head_groups > 0 ? plan.shape.heads / plan.head_groups : plan.shape.heads;
}

double AttentionSeconds(const Plan& plan, const BlockwiseAttention& call,
                        const DeviceSpec& device) {
  if (call.tiles.empty()) return 0;
  const AttentionKernelModel& model = device.attention;
  const bool forward = call.pass == Pass::kForward;
  const double flops_per_pair = static_cast<double>((forward ? 4 : 10) * plan.shape.head_dim);
  const auto heads = static_cast<double>(HeadsPerGroup(plan));
  const double efficiency = forward ? model.forward_efficiency : model.backward_efficiency;
  double sum_s = 0, longest_cta_s = 0;
  // Tiles that share a mask range (most full tiles of a call) and a shape do the same work.
  const AttentionTile* costed = nullptr;
  int64_t costed_rows = 0, costed_cols = 0;
  TileWork work;
  for (const AttentionTile& tile : call.tiles) {
    const PlanComputeBlock& cb = plan.compute_blocks[tile.block.value];
    const int64_t rows = plan.blocks[cb.q_block.value].tokens;
    const int64_t cols = plan.blocks[cb.kv_block.value].tokens;
    if (tile.n_slices == 0) {  // no mask given: cost the area, spread evenly over the bands
      work.pairs = static_cast<double>(cb.area);
      work.max_row_band = work.pairs / std::max(1.0, Ceil(rows, model.mask_tile_rows));
      work.max_col_band = work.pairs / std::max(1.0, Ceil(cols, model.mask_tile_cols));
      costed = nullptr;
    } else if (costed == nullptr || costed->first_slice != tile.first_slice ||
               costed->n_slices != tile.n_slices || costed_rows != rows || costed_cols != cols) {
      work =
          TouchedWork(call.SlicesOf(tile), rows, cols, model.mask_tile_rows, model.mask_tile_cols);
      costed = &tile;
      costed_rows = rows;
      costed_cols = cols;
    }
    const double rate = device.peak_flops * efficiency * SideFactor(rows, model.rows_half) *
                        SideFactor(cols, model.cols_half);
    if (rate <= 0) continue;  // an empty tile
    sum_s += work.pairs * flops_per_pair * heads / rate;
    if (model.sm_count > 0) {
      const double band = forward ? work.max_row_band : work.max_col_band;
      longest_cta_s = std::max(longest_cta_s, band * flops_per_pair * model.sm_count / rate);
    }
  }
  return model.launch_s + std::max(sum_s, longest_cta_s);
}

double SlotBytes(const Program& program, SlotId slot) {
  return slot < 0 ? 0.0 : static_cast<double>(program.slots[slot].bytes);
}

double MemorySeconds(double bytes, const DeviceSpec& device) {
  return device.memory_op_launch_s + bytes / device.hbm_bytes_per_s;
}

Status CheckSlot(const Program& program, SlotId slot, bool optional, size_t index,
                 std::string_view what) {
  if ((optional && slot == -1) || (slot >= 0 && static_cast<size_t>(slot) < program.slots.size())) {
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format("instruction {}: {} refers to slot {} of {}", index,
                                             what, slot, program.slots.size()));
}

Status CheckTile(const Plan& plan, const BlockwiseAttention& call, const AttentionTile& tile,
                 size_t index) {
  if (tile.block.value < 0 || static_cast<size_t>(tile.block.value) >= plan.compute_blocks.size()) {
    return Status::InvalidArgument(fmt::format("instruction {}: tile of compute block {} of {}",
                                               index, tile.block.value,
                                               plan.compute_blocks.size()));
  }
  const PlanComputeBlock& cb = plan.compute_blocks[tile.block.value];
  for (const DataBlockId b : {cb.q_block, cb.kv_block}) {
    if (b.value < 0 || static_cast<size_t>(b.value) >= plan.blocks.size()) {
      return Status::InvalidArgument(
          fmt::format("instruction {}: compute block {} refers to data block {} of {}", index,
                      tile.block.value, b.value, plan.blocks.size()));
    }
  }
  if (cb.area < 0) {
    return Status::InvalidArgument(fmt::format("instruction {}: compute block {} has area {}",
                                               index, tile.block.value, cb.area));
  }
  if (!call.Holds(tile)) {
    return Status::InvalidArgument(fmt::format(
        "instruction {}: the row, column or slices of compute block {} are not in the call", index,
        tile.block.value));
  }
  return Status::Ok();
}

// The slots of every row and column of the call.
Status CheckRowsAndColumns(const Program& program, const BlockwiseAttention& call, size_t index) {
  for (const AttentionRow& r : call.rows) {
    for (const SlotId s : {r.q, r.out, r.lse, r.d_o, r.delta, r.dq}) {
      DCP_RETURN_IF_ERROR(CheckSlot(program, s, /*optional=*/true, index, "a tile"));
    }
  }
  for (const AttentionColumn& c : call.columns) {
    for (const SlotId s : {c.kv, c.dkv}) {
      DCP_RETURN_IF_ERROR(CheckSlot(program, s, /*optional=*/true, index, "a tile"));
    }
  }
  return Status::Ok();
}

// Each slice of the call once (tiles share them).
Status CheckSlices(const BlockwiseAttention& call, size_t index) {
  for (const Slice& s : call.slices) {
    const bool slopes_ok =
        (s.lo.slope == 0 || s.lo.slope == 1) && (s.hi.slope == 0 || s.hi.slope == 1);
    const auto base_ok = [](int64_t base) {
      return base >= -kMaxSliceBase && base <= kMaxSliceBase;
    };
    if (!slopes_ok || !base_ok(s.lo.base) || !base_ok(s.hi.base) || s.row_begin > s.row_end ||
        s.row_begin < -kMaxSliceBase || s.row_end > kMaxSliceBase) {
      return Status::InvalidArgument(
          fmt::format("instruction {}: a slice has a slope other than 0 or 1, or rows or columns "
                      "out of range",
                      index));
    }
  }
  return Status::Ok();
}

}  // namespace

TileWork TouchedWork(std::span<const Slice> slices, int64_t rows, int64_t cols, int64_t tile_rows,
                     int64_t tile_cols) {
  TileWork work;
  if (rows <= 0 || cols <= 0) return work;
  // A full tile (most tiles of most masks) touches every cell: the bands below, in closed form.
  if (slices.size() == 1) {
    const Slice& s = slices[0];
    if (s.row_begin <= 0 && s.row_end >= rows && s.lo.slope == 0 && s.lo.base <= 0 &&
        s.hi.slope == 0 && s.hi.base >= cols) {
      work.pairs = static_cast<double>(rows * cols);
      work.max_row_band = static_cast<double>(std::min(rows, tile_rows) * cols);
      work.max_col_band = static_cast<double>(rows * std::min(cols, tile_cols));
      return work;
    }
  }
  // Scratch kept per thread: the simulator costs every tile of every candidate plan, and three
  // vectors allocated a call were a tenth of this function's instructions.
  thread_local std::vector<std::pair<int64_t, int64_t>> live, cells;
  thread_local std::vector<int64_t> column_rows;
  // The rows of each slice, inside the tile, whose clipped column interval is not empty:
  // lo(i) < hi(i), lo(i) < cols and hi(i) > 0, each a half-line of rows.
  live.clear();
  for (const Slice& s : slices) {
    int64_t begin = std::max<int64_t>(s.row_begin, 0), end = std::min(s.row_end, rows);
    KeepPositive(s.hi.base - s.lo.base, s.hi.slope - s.lo.slope, &begin, &end);
    KeepPositive(cols - s.lo.base, -s.lo.slope, &begin, &end);
    KeepPositive(s.hi.base, s.hi.slope, &begin, &end);
    live.emplace_back(begin, end);
  }
  const int64_t n_cells = (cols + tile_cols - 1) / tile_cols;
  column_rows.assign(n_cells + 1, 0);  // difference array of touched rows per cell
  // cells: the touched cell ranges of one band
  for (int64_t band = 0; band < rows; band += tile_rows) {
    const int64_t band_end = std::min(rows, band + tile_rows);
    cells.clear();
    for (size_t i = 0; i < slices.size(); ++i) {
      const int64_t first = std::max(band, live[i].first);
      const int64_t last = std::min(band_end, live[i].second) - 1;
      if (first > last) continue;
      // lo and hi never decrease and a row's interval is not empty, so consecutive rows'
      // intervals overlap or touch: the band's columns are [lo(first), hi(last)).
      const int64_t lo = std::max<int64_t>(slices[i].lo.At(first), 0);
      const int64_t hi = std::min(slices[i].hi.At(last), cols);
      cells.emplace_back(lo / tile_cols, (hi + tile_cols - 1) / tile_cols);
    }
    if (cells.empty()) continue;
    std::sort(cells.begin(), cells.end());
    const int64_t height = band_end - band;
    double band_pairs = 0;
    int64_t open_begin = cells[0].first, open_end = cells[0].second;
    const auto close = [&](int64_t b, int64_t e) {
      band_pairs += static_cast<double>((std::min(e * tile_cols, cols) - b * tile_cols) * height);
      column_rows[b] += height;
      column_rows[e] -= height;
    };
    for (size_t i = 1; i < cells.size(); ++i) {
      if (cells[i].first <= open_end) {
        open_end = std::max(open_end, cells[i].second);
      } else {
        close(open_begin, open_end);
        open_begin = cells[i].first;
        open_end = cells[i].second;
      }
    }
    close(open_begin, open_end);
    work.pairs += band_pairs;
    work.max_row_band = std::max(work.max_row_band, band_pairs);
  }
  int64_t touched_rows = 0;
  for (int64_t c = 0; c < n_cells; ++c) {
    touched_rows += column_rows[c];
    const int64_t width = std::min((c + 1) * tile_cols, cols) - c * tile_cols;
    work.max_col_band = std::max(work.max_col_band, static_cast<double>(touched_rows * width));
  }
  return work;
}

int64_t AttentionFlops(const Plan& plan, const BlockwiseAttention& call) {
  int64_t area = 0;
  for (const AttentionTile& tile : call.tiles) area += plan.compute_blocks[tile.block.value].area;
  return (call.pass == Pass::kForward ? 4 : 10) * area * plan.shape.head_dim * HeadsPerGroup(plan);
}

Status CheckInstruction(const Plan& plan, const Program& program, size_t index) {
  const Instruction& instruction = program.instructions[index];
  if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
    DCP_RETURN_IF_ERROR(CheckRowsAndColumns(program, *call, index));
    for (const AttentionTile& tile : call->tiles) {
      DCP_RETURN_IF_ERROR(CheckTile(plan, *call, tile, index));
    }
    DCP_RETURN_IF_ERROR(CheckSlices(*call, index));
  } else if (const auto* reduction = std::get_if<BlockwiseReduction>(&instruction)) {
    for (const ReductionOp& op : reduction->ops) {
      DCP_RETURN_IF_ERROR(CheckSlot(program, op.destination, false, index, "a reduction"));
      DCP_RETURN_IF_ERROR(CheckSlot(program, op.lse_destination, true, index, "a reduction"));
      for (const auto* list : {&op.sources, &op.lse_sources}) {
        for (const SlotId s : *list) {
          DCP_RETURN_IF_ERROR(CheckSlot(program, s, false, index, "a reduction"));
        }
      }
    }
  } else if (const auto* copy = std::get_if<BlockwiseCopy>(&instruction)) {
    for (const auto& [source, destination] : copy->ops) {
      DCP_RETURN_IF_ERROR(CheckSlot(program, source, false, index, "a copy"));
      DCP_RETURN_IF_ERROR(CheckSlot(program, destination, false, index, "a copy"));
    }
  } else if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
    for (const auto* list : {&launch->sends, &launch->recvs}) {
      for (const PeerSlots& p : *list) {
        if (p.peer.value < 0 || p.peer.value >= plan.topology.devices()) {
          return Status::InvalidArgument(
              fmt::format("instruction {}: CommLaunch {} names peer device {} of {}", index,
                          launch->id, p.peer.value, plan.topology.devices()));
        }
        for (const SlotId s : p.slots) {
          DCP_RETURN_IF_ERROR(CheckSlot(program, s, false, index, "a CommLaunch"));
        }
        for (const int64_t b : p.bytes) {
          if (b < 0) {
            return Status::InvalidArgument(fmt::format(
                "instruction {}: CommLaunch {} moves {} bytes of a slot", index, launch->id, b));
          }
        }
      }
    }
  }
  return Status::Ok();
}

double IdealSeconds(int64_t forward_flops, int64_t backward_flops, int32_t devices,
                    const DeviceSpec& device) {
  const AttentionKernelModel& model = device.attention;
  const double tile =
      SideFactor(kIdealTileTokens, model.rows_half) * SideFactor(kIdealTileTokens, model.cols_half);
  const double rate = device.peak_flops * tile * devices;
  return static_cast<double>(forward_flops) / (rate * model.forward_efficiency) +
         static_cast<double>(backward_flops) / (rate * model.backward_efficiency);
}

}  // namespace dcp::sim

namespace dcp {

double AttentionLowerBoundSeconds(const BlockSet& blocks, const Placement& placement,
                                  const Schedule& schedule, int32_t devices,
                                  const DeviceSpec& device) {
  if (devices <= 0) return 0;
  const AttentionKernelModel& model = device.attention;
  const int64_t groups = blocks.head_groups > 0 ? blocks.head_groups : 1;
  const auto heads = static_cast<double>(blocks.shape.heads / groups);
  const auto head_dim = static_cast<double>(blocks.shape.head_dim);
  std::vector<double> forward(devices, 0), backward(devices, 0);
  // Each (device, division) with a tile is one call per pass, and each call one launch.
  std::vector<char> called(static_cast<size_t>(devices) * schedule.n_divisions, 0);
  for (size_t c = 0; c < blocks.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = blocks.compute_blocks[c];
    // AttentionSeconds' rate and FLOPs, with the mask's area for the touched sub-tiles' pairs.
    const double tile = device.peak_flops *
                        sim::SideFactor(blocks.data_block(cb.q_block).tokens, model.rows_half) *
                        sim::SideFactor(blocks.data_block(cb.kv_block).tokens, model.cols_half);
    const double work = static_cast<double>(cb.area) * head_dim * heads;
    const int32_t d = placement.compute_device[c].value;
    if (const double rate = tile * model.forward_efficiency; rate > 0) {
      forward[d] += work * 4 / rate;
    }
    if (const double rate = tile * model.backward_efficiency; rate > 0) {
      backward[d] += work * 10 / rate;
    }
    char& call =
        called[static_cast<size_t>(d) * schedule.n_divisions + schedule.compute_division[c]];
    if (!call) {
      call = 1;
      forward[d] += model.launch_s;
      backward[d] += model.launch_s;
    }
  }
  return *std::max_element(forward.begin(), forward.end()) +
         *std::max_element(backward.begin(), backward.end());
}

double InstructionSeconds(const Plan& plan, const Program& program, const Instruction& instruction,
                          const DeviceSpec& device) {
  if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
    return sim::AttentionSeconds(plan, *call, device);
  }
  if (const auto* reduction = std::get_if<BlockwiseReduction>(&instruction)) {
    if (reduction->ops.empty()) return 0;
    double bytes = 0;
    for (const ReductionOp& op : reduction->ops) {
      bytes +=
          sim::SlotBytes(program, op.destination) + sim::SlotBytes(program, op.lse_destination);
      for (const SlotId s : op.sources) bytes += sim::SlotBytes(program, s);
      for (const SlotId s : op.lse_sources) bytes += sim::SlotBytes(program, s);
    }
    return sim::MemorySeconds(bytes, device);
  }
  if (const auto* copy = std::get_if<BlockwiseCopy>(&instruction)) {
    if (copy->ops.empty()) return 0;
    double bytes = 0;
    for (const auto& [source, destination] : copy->ops) {
      bytes += sim::SlotBytes(program, source) + sim::SlotBytes(program, destination);
    }
    return sim::MemorySeconds(bytes, device);
  }
  return 0;  // CommLaunch, CommWait: no time on the compute stream
}

}  // namespace dcp
