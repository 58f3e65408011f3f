// SPDX-License-Identifier: Apache-2.0
// Shared by the end-to-end tests that execute plans and compare them with the dense reference.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dcp/runtime.h"

namespace dcp::testing {

// One spec of every mask family, sized for sequences of a few hundred tokens.
inline const char* const kEndToEndMasks[] = {
    "causal",
    "full",
    "sliding-window:window=37",
    "lambda:sink=5,window=40",
    "causal-blockwise:block=16,local=2",
    "shared-question:question=0.25,answers=3",
    "documents:count=3",
    "modality:image=12,text=20",
};

// Random inputs in [-1, 1), already representable in the storage dtype.
inline void FillInputs(uint64_t seed, DType dtype, BatchTensors& t) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::vector<float>* v : {&t.q, &t.k, &t.v, &t.d_o}) {
    for (float& x : *v) {
      x = u(rng);
      if (dtype == DType::kBFloat16) x = Bf16ToFloat(FloatToBf16(x));
    }
  }
}

// Every output of `run` within OutputTolerance of the dense `reference` (a batch stored in
// `dtype`); a failure names the output, its worst element and how far past its bound that element
// is.
inline void ExpectWithinTolerance(const BatchTensors& run, const BatchTensors& reference,
                                  DType dtype) {
  const std::vector<TensorError> errors = CompareOutputs(run, reference, dtype);
  for (size_t i = 0; i < errors.size(); ++i) {
    const TensorError& e = errors[i];
    if (e.within()) continue;
    const auto at = static_cast<size_t>(e.worst_index);
    const Output output = kOutputs[i];
    const std::vector<float>& actual = OutputOf(run, output);
    const std::vector<float>& expected = OutputOf(reference, output);
    ADD_FAILURE() << ToString(output) << "[" << at
                  << "] = " << (at < actual.size() ? actual[at] : 0.f) << ", reference "
                  << (at < expected.size() ? expected[at] : 0.f) << ": " << e.worst
                  << "x its bound (max abs error " << e.max_abs << ", " << e.relative
                  << " of the largest |reference|)";
  }
}

}  // namespace dcp::testing
