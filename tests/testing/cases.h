// SPDX-License-Identifier: Apache-2.0
// How many seeded random cases a property test runs.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dcp::testing {

// All of them in optimised builds; a tenth under AddressSanitizer + UBSan, which run the same
// code 10-30 times slower and find memory errors from the variety of the cases, not their number.
constexpr uint64_t RandomCases(uint64_t n) {
#ifdef DCP_SANITIZE
  return std::max<uint64_t>(1, n / 10);
#else
  return n;
#endif
}

}  // namespace dcp::testing
