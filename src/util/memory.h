// SPDX-License-Identifier: Apache-2.0
// How much memory this process may have, for the guards that refuse work before it runs out
// (the planner's planning memory, a local `dcp run`). Internal to dcp.
#pragma once

#include <cstdint>
#include <string>

namespace dcp::internal {

// The machine's physical memory, or less under an address-space limit (ulimit -v); 0 when
// neither can be read.
int64_t ProcessMemoryBytes();

// The memory planning may take: `max_planning_bytes` when positive, else 80% of
// ProcessMemoryBytes() (no limit, INT64_MAX, when that cannot be read). The rule of
// PlanOptions::max_planning_bytes and BaselineOptions::max_planning_bytes.
int64_t PlanningMemoryLimit(int64_t max_planning_bytes);

// "1.5 GiB", or "12345 bytes" under a tenth of a GiB: sizes in the planning-memory refusals.
std::string ReadableBytes(int64_t bytes);

}  // namespace dcp::internal
