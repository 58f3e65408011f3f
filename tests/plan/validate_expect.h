// SPDX-License-Identifier: Apache-2.0
// What the validator's tests share: reaching into one instruction of a hand-built plan to break
// it, and expecting the validator to name the defect.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>
#include <variant>

#include "dcp/plan.h"

namespace dcp::testing {

template <typename T>
T& Forward(Plan& plan, int device, size_t instruction) {
  return std::get<T>(plan.forward[device].instructions[instruction]);
}
template <typename T>
T& Backward(Plan& plan, int device, size_t instruction) {
  return std::get<T>(plan.backward[device].instructions[instruction]);
}

// ValidatePlan fails with InvalidArgument and a message containing `substring`.
inline void ExpectInvalid(const Plan& plan, std::string_view substring) {
  const Status status = ValidatePlan(plan);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_THAT(status.message(), ::testing::HasSubstr(substring));
}

}  // namespace dcp::testing
