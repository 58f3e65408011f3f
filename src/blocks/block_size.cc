// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <queue>

#include "dcp/blocks.h"

namespace dcp {

double GreedySpreadImbalance(const std::vector<int64_t>& seqlens, int64_t block_size,
                             int64_t devices) {
  if (block_size < 1 || devices < 1) return std::numeric_limits<double>::infinity();
  std::vector<int64_t> blocks;
  int64_t total = 0;
  for (int64_t len : seqlens) {
    for (int64_t begin = 0; begin < len; begin += block_size) {
      blocks.push_back(std::min(block_size, len - begin));
    }
    total += len;
  }
  if (total == 0) return std::numeric_limits<double>::infinity();
  std::sort(blocks.begin(), blocks.end(), std::greater<>());
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> loads;
  for (int64_t d = 0; d < devices; ++d) loads.push(0);
  int64_t max_load = 0;
  for (int64_t b : blocks) {
    const int64_t load = loads.top() + b;
    loads.pop();
    loads.push(load);
    max_load = std::max(max_load, load);
  }
  return static_cast<double>(max_load) * static_cast<double>(devices) / static_cast<double>(total);
}

Status BlockSizeOptions::Validate() const {
  if (devices < 1 || devices > 65536) {
    return Status::InvalidArgument(fmt::format("devices={} is not in [1, 65536]", devices));
  }
  if (!(eps_memory >= 0 && eps_memory <= 100)) {
    return Status::InvalidArgument(fmt::format("eps_memory={} is not in [0, 100]", eps_memory));
  }
  if (min_block_size < 1 || min_block_size > kMaxSequenceLength ||
      !std::has_single_bit(static_cast<uint64_t>(min_block_size))) {
    return Status::InvalidArgument(fmt::format("min_block_size={} is not a power of two in [1, {}]",
                                               min_block_size, kMaxSequenceLength));
  }
  return Status::Ok();
}

Result<BlockSizeChoice> ChooseBlockSize(const std::vector<int64_t>& seqlens,
                                        const BlockSizeOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  if (seqlens.empty()) return Status::InvalidArgument("no sequences to choose a block size for");
  for (int64_t len : seqlens) {
    if (len < 1 || len > kMaxSequenceLength) {
      return Status::InvalidArgument(
          fmt::format("sequence length {} is not in [1, {}]", len, kMaxSequenceLength));
    }
  }
  const int64_t longest = *std::max_element(seqlens.begin(), seqlens.end());
  int64_t block_size = std::max<int64_t>(
      options.min_block_size, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(longest))));
  while (true) {
    const double imbalance = GreedySpreadImbalance(seqlens, block_size, options.devices);
    if (imbalance <= 1 + options.eps_memory || block_size <= options.min_block_size) {
      return BlockSizeChoice{.block_size = block_size, .memory_imbalance = imbalance};
    }
    block_size /= 2;
  }
}

}  // namespace dcp
