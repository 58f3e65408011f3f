// SPDX-License-Identifier: Apache-2.0
// How much memory this process may have, for the guards that refuse work before it runs out
// (the planner's planning memory, a local `dcp run`). Internal to dcp.
#pragma once

#include <cstdint>

namespace dcp::internal {

// The machine's physical memory, or less under an address-space limit (ulimit -v); 0 when
// neither can be read.
int64_t ProcessMemoryBytes();

}  // namespace dcp::internal
