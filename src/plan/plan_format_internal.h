// SPDX-License-Identifier: Apache-2.0
// The envelope of the binary plan format (docs/plan_format.md): the fixed header in front of the
// payload and the payload's checksum. Exposed so tests can forge a file whose checksum is right
// but whose payload is damaged, and reach the payload decoder with it. Internal to src/plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dcp::internal {

// The 8 bytes every plan file starts with, the NUL included.
inline constexpr std::string_view kPlanMagic{"DCPPLAN\0", 8};
// The version this build writes and the only one it reads.
inline constexpr uint32_t kPlanFormatVersion = 4;
// Magic (8), version (uint32), payload length (uint64), payload checksum (uint64).
inline constexpr size_t kPlanHeaderBytes = 28;
// Where the header fields start.
inline constexpr size_t kPlanVersionOffset = 8;
inline constexpr size_t kPlanPayloadLengthOffset = 12;
inline constexpr size_t kPlanChecksumOffset = 20;

// XXH64 of the payload with seed 0, exactly as specified by xxHash (doc/xxhash_spec.md of
// github.com/Cyan4973/xxHash), so any XXH64 implementation can check a plan file.
uint64_t PlanChecksum(std::string_view payload);

}  // namespace dcp::internal
