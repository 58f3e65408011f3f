// SPDX-License-Identifier: Apache-2.0
// The CPU kernel backend's element-wise operations against loops written in the test: strided
// copies with dtype conversion, the log-sum-exp merge, sums and Delta.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dcp/kernels.h"

namespace dcp {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A [3][4][5] tensor read through a view whose last two dimensions are swapped ([3][5][4], inner
// stride 5), copied into a dense bf16 tensor and back.
TEST(CpuBackend, CopiesBetweenAnyStridesAndDtypes) {
  const std::unique_ptr<KernelBackend> cpu = MakeCpuBackend();
  std::vector<float> source = Random(60, 1);
  const TensorView transposed =
      TensorView::Strided(source.data(), DType::kFloat32, {3, 5, 4}, {20, 1, 5});
  std::vector<uint16_t> bf16(60);
  ASSERT_TRUE(cpu->Copy(TensorView::Contiguous(bf16.data(), DType::kBFloat16, {3, 5, 4}),
                        transposed)
                  .ok());
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 5; ++b) {
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(bf16[(a * 5 + b) * 4 + c], FloatToBf16(source[a * 20 + c * 5 + b]));
      }
    }
  }
  // Back into a padded fp32 layout: rows 7 apart, the padding untouched.
  std::vector<float> padded(3 * 5 * 7, 42.f);
  ASSERT_TRUE(cpu->Copy(TensorView::Strided(padded.data(), DType::kFloat32, {3, 5, 4}, {35, 7, 1}),
                        TensorView::Contiguous(bf16.data(), DType::kBFloat16, {3, 5, 4}))
                  .ok());
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 5; ++b) {
      for (int c = 0; c < 7; ++c) {
        const float expected = c < 4 ? Bf16ToFloat(bf16[(a * 5 + b) * 4 + c]) : 42.f;
        EXPECT_EQ(padded[a * 35 + b * 7 + c], expected);
      }
    }
  }
  const Status mismatch = cpu->Copy(TensorView::Contiguous(padded.data(), DType::kFloat32, {4, 5}),
                                    TensorView::Contiguous(source.data(), DType::kFloat32, {5, 4}));
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
}

TEST(CpuBackend, MergesByLogSumExpSumsAndTakesDelta) {
  const std::unique_ptr<KernelBackend> cpu = MakeCpuBackend();
  constexpr int64_t kRows = 6, kDim = 5;
  std::vector<float> o1 = Random(kRows * kDim, 2), o2 = Random(kRows * kDim, 3);
  std::vector<float> l1 = Random(kRows, 4), l2 = Random(kRows, 5);
  l1[1] = kNegInf;  // row 1: only the second source
  l1[2] = l2[2] = kNegInf;  // row 2: nothing at all
  std::vector<float> o(kRows * kDim), lse(kRows);
  const SlotRef sources[] = {{reinterpret_cast<std::byte*>(o1.data()), DType::kFloat32, kRows * kDim},
                             {reinterpret_cast<std::byte*>(o2.data()), DType::kFloat32, kRows * kDim}};
  const float* lse_sources[] = {l1.data(), l2.data()};
  ASSERT_TRUE(cpu->MergeLse({reinterpret_cast<std::byte*>(o.data()), DType::kFloat32, kRows * kDim},
                            lse.data(), sources, lse_sources, kRows, kDim)
                  .ok());
  for (int64_t r = 0; r < kRows; ++r) {
    const double m = std::max(l1[r], l2[r]);
    if (m == kNegInf) {
      EXPECT_EQ(lse[r], kNegInf);
      for (int64_t d = 0; d < kDim; ++d) EXPECT_EQ(o[r * kDim + d], 0.f);
      continue;
    }
    const double w1 = std::exp(l1[r] - m), w2 = std::exp(l2[r] - m);
    EXPECT_NEAR(lse[r], m + std::log(w1 + w2), 1e-5);
    for (int64_t d = 0; d < kDim; ++d) {
      EXPECT_NEAR(o[r * kDim + d], (w1 * o1[r * kDim + d] + w2 * o2[r * kDim + d]) / (w1 + w2),
                  1e-5);
    }
  }

  std::vector<float> sum(kRows * kDim);
  ASSERT_TRUE(
      cpu->Sum({reinterpret_cast<std::byte*>(sum.data()), DType::kFloat32, kRows * kDim}, sources)
          .ok());
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_FLOAT_EQ(sum[i], o1[i] + o2[i]);

  std::vector<float> delta(kRows);
  ASSERT_TRUE(cpu->Delta(delta.data(), sources[0], sources[1], kRows, kDim).ok());
  for (int64_t r = 0; r < kRows; ++r) {
    double expected = 0;
    for (int64_t d = 0; d < kDim; ++d) expected += double(o1[r * kDim + d]) * o2[r * kDim + d];
    EXPECT_NEAR(delta[r], expected, 1e-5);
  }
}

}  // namespace
}  // namespace dcp
