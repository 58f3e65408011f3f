// SPDX-License-Identifier: Apache-2.0
// What the communicator tests (local and MPI) send: every byte a function of the exchange and the
// two ranks, so a receiver checks each byte it got against the reference.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

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

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dcp::testing
