// SPDX-License-Identifier: Apache-2.0
// Comparison of a kernel's fp32 results with a double-precision reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

namespace dcp::testing {

// Every element within tolerance * (1 + largest finite |expected|); infinities exactly; no NaN.
// Reports at most five elements out of bounds.
inline void ExpectClose(std::span<const float> actual, std::span<const double> expected,
                        const std::string& what, double tolerance = 2e-5) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0.0;
  for (double e : expected) {
    if (std::isfinite(e)) largest = std::max(largest, std::abs(e));
  }
  const double bound = tolerance * (1.0 + largest);
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << what << "[" << i << "] is NaN";
    if (std::isinf(expected[i])) {
      ASSERT_EQ(double{actual[i]}, expected[i]) << what << "[" << i << "]";
      continue;
    }
    const double error = std::abs(double{actual[i]} - expected[i]);
    if (error > bound && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", reference " << expected[i]
                    << ", error " << error << " > " << bound;
    }
  }
}

}  // namespace dcp::testing
