// SPDX-License-Identifier: Apache-2.0
// The token map of a plan: which tokens each device owns, in the order the device holds them.
// It is the contract between the data loader (which tokens, labels and position ids a rank
// gets), the model and the executor (whose local q, kv, o, dq, dkv tensors are in this order).
//
// A device's local order: its data blocks by ascending id (sequence by sequence, token order
// inside a sequence), consecutive blocks of one sequence merged into one run. The packed global
// order: sequences one after the other, as in the batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "dcp/plan.h"
#include "dcp/status.h"

namespace dcp {

// `count` tokens of sequence `sequence` from token `begin` on.
struct TokenRun {
  SequenceId sequence;
  int64_t begin = 0;
  int64_t count = 0;
  friend bool operator==(const TokenRun&, const TokenRun&) = default;
};

struct TokenMap {
  std::vector<int64_t> seqlens;             // the batch's sequence lengths
  std::vector<std::vector<TokenRun>> runs;  // per device, in its local order

  // The map of a whole plan or of one device's part (both carry every block's owner).
  static TokenMap Of(const Plan& plan);
  // The map of a placement of `blocks` on `devices` devices, before any plan is compiled.
  static TokenMap Of(const BlockSet& blocks, const Placement& placement, int32_t devices);

  int32_t devices() const { return static_cast<int32_t>(runs.size()); }
  int64_t total_tokens() const;
  int64_t LocalTokens(DeviceId device) const;
  // Per local token of `device`: its index in the packed global order.
  std::vector<int64_t> GlobalIndices(DeviceId device) const;
  // Per local token of `device`: its position inside its sequence (position ids for rotary
  // embeddings on local data).
  std::vector<int64_t> PositionIds(DeviceId device) const;
};

// Dispatch: the rows of `global` (packed global order, `width` values per token) that `device`
// owns, in its local order. REQUIRES: global.size() == map.total_tokens() * width.
template <typename T>
std::vector<T> Dispatch(std::span<const T> global, int64_t width, const TokenMap& map,
                        DeviceId device) {
  std::vector<T> local;
  local.reserve(static_cast<size_t>(map.LocalTokens(device) * width));
  for (int64_t g : map.GlobalIndices(device)) {
    local.insert(local.end(), global.begin() + g * width, global.begin() + (g + 1) * width);
  }
  return local;
}

// Undispatch: writes the local rows of `device` back to their places in `global`.
template <typename T>
void Undispatch(std::span<const T> local, int64_t width, const TokenMap& map, DeviceId device,
                std::span<T> global) {
  int64_t l = 0;
  for (int64_t g : map.GlobalIndices(device)) {
    std::copy(local.begin() + l * width, local.begin() + (l + 1) * width,
              global.begin() + g * width);
    ++l;
  }
}

}  // namespace dcp
