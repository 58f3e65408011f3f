// SPDX-License-Identifier: Apache-2.0
#include "dcp/token_map.h"

#include <numeric>

namespace dcp {

namespace {

// Appends a block's tokens to its device's runs, merging with the run before when it continues it.
void Append(std::vector<TokenRun>& runs, SequenceId sequence, int64_t begin, int64_t count) {
  if (!runs.empty() && runs.back().sequence == sequence &&
      runs.back().begin + runs.back().count == begin) {
    runs.back().count += count;
  } else {
    runs.push_back({sequence, begin, count});
  }
}

}  // namespace

TokenMap TokenMap::Of(const Plan& plan) {
  TokenMap map{.seqlens = plan.seqlens,
               .runs = std::vector<std::vector<TokenRun>>(
                   static_cast<size_t>(plan.topology.devices()))};
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const PlanBlock& block = plan.blocks[b];
    Append(map.runs[static_cast<size_t>(plan.block_owner[b].value)], block.sequence,
           block.token_begin, block.tokens);
  }
  return map;
}

TokenMap TokenMap::Of(const BlockSet& blocks, const Placement& placement, int32_t devices) {
  TokenMap map{.seqlens = {}, .runs = std::vector<std::vector<TokenRun>>(
                                  static_cast<size_t>(devices))};
  for (size_t b = 0; b < blocks.data_blocks.size(); ++b) {
    const DataBlock& block = blocks.data_blocks[b];
    if (map.seqlens.size() <= static_cast<size_t>(block.sequence.value)) {
      map.seqlens.resize(static_cast<size_t>(block.sequence.value) + 1, 0);
    }
    map.seqlens[static_cast<size_t>(block.sequence.value)] += block.tokens;
    Append(map.runs[static_cast<size_t>(placement.data_device[b].value)], block.sequence,
           block.token_begin, block.tokens);
  }
  return map;
}

int64_t TokenMap::total_tokens() const {
  return std::accumulate(seqlens.begin(), seqlens.end(), int64_t{0});
}

int64_t TokenMap::LocalTokens(DeviceId device) const {
  int64_t n = 0;
  for (const TokenRun& run : runs[static_cast<size_t>(device.value)]) n += run.count;
  return n;
}

std::vector<int64_t> TokenMap::GlobalIndices(DeviceId device) const {
  std::vector<int64_t> first(seqlens.size(), 0);  // packed index of each sequence's first token
  for (size_t s = 1; s < seqlens.size(); ++s) first[s] = first[s - 1] + seqlens[s - 1];
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(LocalTokens(device)));
  for (const TokenRun& run : runs[static_cast<size_t>(device.value)]) {
    for (int64_t t = 0; t < run.count; ++t) out.push_back(first[run.sequence.value] + run.begin + t);
  }
  return out;
}

std::vector<int64_t> TokenMap::PositionIds(DeviceId device) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(LocalTokens(device)));
  for (const TokenRun& run : runs[static_cast<size_t>(device.value)]) {
    for (int64_t t = 0; t < run.count; ++t) out.push_back(run.begin + t);
  }
  return out;
}

}  // namespace dcp
