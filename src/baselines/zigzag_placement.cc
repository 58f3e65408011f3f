// SPDX-License-Identifier: Apache-2.0
#include "dcp/baselines.h"

namespace dcp {

Placement ZigzagPlacement(const BlockSet& blocks, const Topology& topology) {
  const int64_t p = topology.devices();
  Placement placement;
  placement.data_device.reserve(blocks.data_blocks.size());
  for (const DataBlock& d : blocks.data_blocks) {
    const int64_t n = blocks.sequence_first_block[d.sequence.value + 1] -
                      blocks.sequence_first_block[d.sequence.value];
    const int64_t chunk = d.index_in_sequence * 2 * p / n;
    placement.data_device.push_back(
        DeviceId{static_cast<int32_t>(chunk < p ? chunk : 2 * p - 1 - chunk)});
  }
  placement.compute_device.reserve(blocks.compute_blocks.size());
  for (const ComputeBlock& c : blocks.compute_blocks) {
    placement.compute_device.push_back(placement.data_device[c.q_block.value]);
  }
  return placement;
}

}  // namespace dcp
