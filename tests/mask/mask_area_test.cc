// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "dcp/mask.h"

namespace dcp {
namespace {

TEST(MaskArea, CausalMatchesFormula) {
  auto mask = MaskSpec{}.Build(100);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_EQ(mask->TotalArea(), CausalArea(100));
}

}  // namespace
}  // namespace dcp
