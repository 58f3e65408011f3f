// SPDX-License-Identifier: Apache-2.0
// Shared by the tests of the FCP and MagiAttention strategies: random batches over every mask
// family, and the run of a baseline's plan against the dense single-device reference.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "dcp/baselines.h"
#include "dcp/runtime.h"
#include "testing/end_to_end.h"

namespace dcp::testing {

// A batch of `lengths` with `mask` on every sequence; the documents mask needs 3 tokens, so
// shorter sequences are causal.
inline Batch MakeMaskedBatch(std::vector<int64_t> lengths, const std::string& mask,
                             const AttentionShape& shape) {
  std::vector<MaskSpec> masks;
  for (int64_t l : lengths) {
    masks.push_back(*MaskSpec::Parse(mask.starts_with("documents") && l < 3 ? "causal" : mask));
  }
  auto batch = Batch::Create(std::move(lengths), std::move(masks), shape);
  DCP_CHECK(batch.ok(), "{}", batch.status().ToString());
  return *std::move(batch);
}

// 1 to `max_sequences` lengths: mostly 3 to `max_length` tokens, sometimes 1 to 3.
inline std::vector<int64_t> RandomLengths(std::mt19937_64& rng, int max_sequences,
                                          int64_t max_length) {
  std::vector<int64_t> lengths(1 + rng() % max_sequences);
  for (int64_t& l : lengths) {
    l = rng() % 6 == 0 ? 1 + static_cast<int64_t>(rng() % 3)
                       : 3 + static_cast<int64_t>(rng() % (max_length - 2));
  }
  return lengths;
}

// A gtest parameter name for a mask spec: its family, letters and digits only.
inline std::string MaskFamilyName(const ::testing::TestParamInfo<const char*>& info) {
  std::string name;
  for (const char* c = info.param; *c != '\0' && *c != ':'; ++c) {
    if (std::isalnum(static_cast<unsigned char>(*c))) name += *c;
  }
  return name;
}

// Validates the plan, runs it forward and backward on in-process devices with seeded inputs and
// compares every output with the dense reference.
inline void ExpectMatchesDenseReference(const BaselinePlan& planned, const Batch& batch,
                                        uint64_t seed) {
  const Status valid = ValidatePlan(planned.plan);
  ASSERT_TRUE(valid.ok()) << valid.ToString();
  BatchTensors run = BatchTensors::ZerosFor(planned.plan);
  FillInputs(seed, batch.shape().dtype, run);
  BatchTensors reference = run;
  const Status ran = RunPlanInProcess(planned.plan, run, {}, 10.0);
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  DenseAttention(batch, 0, reference);
  testing::ExpectWithinTolerance(run, reference, batch.shape().dtype);
}

}  // namespace dcp::testing
