// SPDX-License-Identifier: Apache-2.0
#include <algorithm>

#include "dcp/plan.h"

namespace dcp {

std::string_view ToString(TensorKind kind) {
  switch (kind) {
    case TensorKind::kQ:
      return "Q";
    case TensorKind::kKV:
      return "KV";
    case TensorKind::kO:
      return "O";
    case TensorKind::kLse:
      return "LSE";
    case TensorKind::kDO:
      return "dO";
    case TensorKind::kDelta:
      return "Delta";
    case TensorKind::kDQ:
      return "dQ";
    case TensorKind::kDKV:
      return "dKV";
  }
  return "unknown";
}

std::string_view ToString(Pass pass) { return pass == Pass::kForward ? "forward" : "backward"; }

std::string_view ToString(ReductionKind kind) {
  switch (kind) {
    case ReductionKind::kLseMerge:
      return "lse-merge";
    case ReductionKind::kSum:
      return "sum";
    case ReductionKind::kDelta:
      return "delta";
  }
  return "unknown";
}

void BlockwiseAttention::AddTile(ComputeBlockId block, int32_t row, int32_t column,
                                 std::span<const Slice> mask) {
  AttentionTile tile{.block = block,
                     .row = row,
                     .column = column,
                     .first_slice = static_cast<int32_t>(slices.size()),
                     .n_slices = static_cast<int32_t>(mask.size())};
  if (!tiles.empty() && std::ranges::equal(SlicesOf(tiles.back()), mask)) {
    tile.first_slice = tiles.back().first_slice;
  } else {
    slices.insert(slices.end(), mask.begin(), mask.end());
  }
  tiles.push_back(tile);
}

int64_t Program::PeakBufferBytes() const {
  int64_t total = 0;
  for (const SlotInfo& s : slots) total += s.bytes;
  return total;
}

}  // namespace dcp

namespace dcp {

PlanTraffic MeasureTraffic(const Plan& plan, Pass pass) {
  const std::vector<Program>& programs = pass == Pass::kForward ? plan.forward : plan.backward;
  PlanTraffic traffic;
  std::vector<int64_t> inter(plan.topology.devices(), 0);
  for (const Program& program : programs) {
    for (const Instruction& instruction : program.instructions) {
      const auto* launch = std::get_if<CommLaunch>(&instruction);
      if (launch == nullptr) continue;
      for (const PeerSlots& send : launch->sends) {
        int64_t bytes = 0;
        for (int64_t b : send.bytes) bytes += b;
        if (plan.topology.NodeOf(send.peer) == plan.topology.NodeOf(program.device)) {
          traffic.bytes_intra_node += bytes;
        } else {
          traffic.bytes_inter_node += bytes;
          inter[program.device.value] += bytes;
          inter[send.peer.value] += bytes;
        }
      }
    }
  }
  for (int64_t b : inter)
    traffic.max_device_bytes_inter_node = std::max(traffic.max_device_bytes_inter_node, b);
  return traffic;
}

}  // namespace dcp
