// SPDX-License-Identifier: Apache-2.0
// The argument checks every Communicator::Launch, Test and Wait makes, and the errors they
// share. Internal to src/runtime.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "dcp/status.h"

namespace dcp::internal {

// Each peer of the send or receive list (`what`) in [0, size), listed once, each of its parts
// with data for its bytes (an empty part may have none). `communicator` names the kind ("local",
// "mpi") in the message.
template <typename Buffer>
Status CheckPeers(std::string_view communicator, int32_t rank, int32_t size, int32_t id,
                  const char* what, const std::vector<Buffer>& buffers) {
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (const Buffer& buffer : buffers) {
    const int32_t peer = buffer.peer.value;
    const std::string where =
        fmt::format("{} communicator rank {}: Launch(id {}): {}", communicator, rank, id, what);
    if (peer < 0 || peer >= size) {
      return Status::InvalidArgument(
          fmt::format("{} peer {} is out of range [0, {})", where, peer, size));
    }
    if (seen[static_cast<size_t>(peer)]) {
      return Status::InvalidArgument(fmt::format("{} peer {} is listed twice", where, peer));
    }
    seen[static_cast<size_t>(peer)] = true;
    for (size_t k = 0; k < buffer.parts.size(); ++k) {
      if (!buffer.parts[k].empty() && buffer.parts[k].data() == nullptr) {
        return Status::InvalidArgument(
            fmt::format("{} part {} for peer {} has {} bytes but no data", where, k, peer,
                        buffer.parts[k].size()));
      }
    }
  }
  return Status::Ok();
}

// What Communicator::Wait and Test (`call`) return for an id with no exchange pending.
inline Status NotLaunched(std::string_view communicator, int32_t rank, std::string_view call,
                          int32_t id) {
  return Status::InvalidArgument(
      fmt::format("{} communicator rank {}: {}(id {}): id {} was never launched (or was already "
                  "completed)",
                  communicator, rank, call, id, id));
}

// What every call returns once `failed_rank` has failed for `reason`.
inline Status PeerFailed(int32_t failed_rank, std::string_view reason) {
  return Status::CommFailure(fmt::format("rank {} failed: {}", failed_rank, reason));
}

}  // namespace dcp::internal
