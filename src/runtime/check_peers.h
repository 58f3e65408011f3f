// SPDX-License-Identifier: Apache-2.0
// The argument checks every Communicator::Launch and Wait makes. Internal to src/runtime.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

#include "dcp/status.h"

namespace dcp::internal {

// Each peer of the send or receive list (`what`) in [0, size), listed once, with data for its
// bytes. `communicator` names the kind ("local", "mpi") in the message.
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
    for (const auto& part : buffer.parts) {
      if (!part.empty() && part.data() == nullptr) {
        return Status::InvalidArgument(fmt::format(
            "{} buffer for peer {} has a part of {} bytes but no data", where, peer, part.size()));
      }
    }
  }
  return Status::Ok();
}

// The parts of a message back to back, and the other way.
template <typename Parts>
std::vector<std::byte> Gathered(const Parts& parts) {
  std::vector<std::byte> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}
template <typename Parts>
void Scatter(const std::byte* from, const Parts& parts) {
  for (const auto& part : parts) {
    std::copy_n(from, part.size(), part.data());
    from += part.size();
  }
}

// What Communicator::Wait returns for an id with no exchange pending.
inline Status NotLaunched(std::string_view communicator, int32_t rank, int32_t id) {
  return Status::InvalidArgument(fmt::format(
      "{} communicator rank {}: Wait(id {}): id {} was never launched (or was already waited on)",
      communicator, rank, id, id));
}

}  // namespace dcp::internal
