// SPDX-License-Identifier: Apache-2.0
// What the communicator tests (local and MPI) send: every byte a function of the exchange and the
// two ranks, so a receiver checks each byte it got against the reference; and messages laid out
// in random parts, as the executor sends its buffer slots.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "dcp/communicator.h"

namespace dcp::testing {

// The byte at offset i of the message exchange `id` sends from src to dst.
inline std::byte ExpectedByte(int32_t id, int32_t src, int32_t dst, size_t i) {
  return static_cast<std::byte>((static_cast<size_t>(id) * 131 + static_cast<size_t>(src) * 31 +
                                 static_cast<size_t>(dst) * 7 + i * 13 + 5) &
                                0xff);
}

inline std::vector<std::byte> ExpectedMessage(int32_t id, int32_t src, int32_t dst, size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = ExpectedByte(id, src, dst, i);
  return out;
}

// A message in one part.
inline SendBuffer SendTo(int32_t peer, const std::byte* data, size_t bytes) {
  return {DeviceId{peer}, {std::span<const std::byte>(data, bytes)}};
}
inline SendBuffer SendTo(int32_t peer, const std::vector<std::byte>& data) {
  return SendTo(peer, data.data(), data.size());
}
inline RecvBuffer RecvFrom(int32_t peer, std::byte* data, size_t bytes) {
  return {DeviceId{peer}, {std::span<std::byte>(data, bytes)}};
}
inline RecvBuffer RecvFrom(int32_t peer, std::vector<std::byte>& data) {
  return RecvFrom(peer, data.data(), data.size());
}

// A message of `bytes` bytes laid out in 0 to 4 random parts (none only for an empty message;
// empty parts included), with gaps of kGap bytes before, between and after them that no
// communicator may write.
class ScatteredMessage {
 public:
  static constexpr std::byte kGap{0xA5};

  ScatteredMessage(size_t bytes, std::mt19937_64& rng) {
    const size_t parts = (bytes > 0 ? 1 : 0) + rng() % 4;
    std::vector<size_t> cuts{0, bytes};
    for (size_t k = 1; k < parts; ++k) cuts.push_back(bytes == 0 ? 0 : rng() % (bytes + 1));
    std::sort(cuts.begin(), cuts.end());
    size_t offset = 0;
    for (size_t k = 0; k < parts; ++k) {
      offset += rng() % 3;  // gap
      const size_t length = parts == 1 ? bytes : cuts[k + 1] - cuts[k];
      parts_.emplace_back(offset, length);
      offset += length;
    }
    storage_.assign(offset + rng() % 3, kGap);
  }

  // Writes `message` (of the right size) into the parts.
  void Fill(const std::vector<std::byte>& message) {
    size_t at = 0;
    for (const auto& [offset, length] : parts_) {
      std::copy_n(message.begin() + static_cast<ptrdiff_t>(at), length,
                  storage_.begin() + static_cast<ptrdiff_t>(offset));
      at += length;
    }
  }
  // The parts back to back.
  std::vector<std::byte> Gather() const {
    std::vector<std::byte> out;
    for (const auto& [offset, length] : parts_) {
      out.insert(out.end(), storage_.begin() + static_cast<ptrdiff_t>(offset),
                 storage_.begin() + static_cast<ptrdiff_t>(offset + length));
    }
    return out;
  }
  // Whether every byte outside the parts still holds kGap.
  bool GapsIntact() const {
    std::vector<bool> in_part(storage_.size(), false);
    for (const auto& [offset, length] : parts_) {
      std::fill_n(in_part.begin() + static_cast<ptrdiff_t>(offset), length, true);
    }
    for (size_t i = 0; i < storage_.size(); ++i) {
      if (!in_part[i] && storage_[i] != kGap) return false;
    }
    return true;
  }
  SendBuffer Send(int32_t peer) const {
    SendBuffer buffer{DeviceId{peer}};
    for (const auto& [offset, length] : parts_) {
      buffer.parts.emplace_back(storage_.data() + offset, length);
    }
    return buffer;
  }
  RecvBuffer Recv(int32_t peer) {
    RecvBuffer buffer{DeviceId{peer}};
    for (const auto& [offset, length] : parts_) {
      buffer.parts.emplace_back(storage_.data() + offset, length);
    }
    return buffer;
  }
  size_t parts() const { return parts_.size(); }

 private:
  std::vector<std::byte> storage_;
  std::vector<std::pair<size_t, size_t>> parts_;  // (offset in storage_, bytes)
};

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dcp::testing
