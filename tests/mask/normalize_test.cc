// SPDX-License-Identifier: Apache-2.0
// internal::NormalizeSlices (src/mask/normalize.cc): its bound on the slices of the union, and
// the compact output of the shapes the families build. Its correctness on random slices is
// checked through Mask::FromSlices (mask_slices_test.cc).
#include "mask/normalize.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/mask.h"
#include "testing/dense_mask.h"

namespace dcp {
namespace {

// `n` fixed stripes [64j, 64j + 8) crossed by `n` moving ones [i - 64j, i - 64j + 8) on every row:
// the union changes shape wherever two stripes meet, so it needs about 4 n² slices.
std::vector<Slice> CrossingStripes(int64_t length, int64_t n) {
  std::vector<Slice> slices;
  for (int64_t j = 0; j < n; ++j) {
    slices.push_back(Slice{0, length, {64 * j, 0}, {64 * j + 8, 0}});
    slices.push_back(Slice{0, length, {-64 * j, 1}, {-64 * j + 8, 1}});
  }
  return slices;
}

TEST(NormalizeSlices, RefusesAUnionThatNeedsMoreSlicesThanTheLimit) {
  const std::vector<Slice> raw = CrossingStripes(1024, 10);
  const Result<std::vector<Slice>> all = internal::NormalizeSlices(1024, raw, kMaxMaskSlices);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const auto needed = static_cast<int64_t>(all->size());
  EXPECT_GT(needed, 100);
  const Result<Mask> mask = Mask::FromSlices(1024, raw);
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(mask->TotalArea(), testing::DenseFromSlices(1024, raw).TotalArea());

  EXPECT_TRUE(internal::NormalizeSlices(1024, raw, needed).ok());
  const Result<std::vector<Slice>> refused = internal::NormalizeSlices(1024, raw, needed - 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than " + std::to_string(needed - 1) + " slices"),
            std::string::npos)
      << refused.status().message();
}

// Each family shape normalizes to as few slices as it has affine pieces, whatever the slices'
// order: one per interval of rows on which the union's bounds keep one form.
TEST(NormalizeSlices, GivesOneSlicePerAffinePieceOfTheUnion) {
  const auto normalized = [](int64_t length, const std::vector<Slice>& raw) {
    Result<std::vector<Slice>> out = internal::NormalizeSlices(length, raw, kMaxMaskSlices);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->size() : 0;
  };
  // Causal: [0, i + 1).
  EXPECT_EQ(normalized(100, {{0, 100, {0, 0}, {1, 1}}}), 1u);
  // Sliding window of 10: clipped at column 0 for the first 9 rows, then moving.
  EXPECT_EQ(normalized(100, {{0, 100, {-9, 1}, {1, 1}}}), 2u);
  // Causal rows split into many overlapping slices: still one.
  EXPECT_EQ(normalized(100, {{0, 60, {0, 0}, {1, 1}},
                             {40, 100, {0, 0}, {1, 1}},
                             {10, 20, {0, 0}, {1, 1}},
                             {0, 100, {0, 0}, {-5, 1}}}),
            1u);
  // A sink of 4 columns and a window of 10 (lambda): causal while the window reaches the sink
  // (rows 0..13), then the sink and the moving window apart.
  EXPECT_EQ(normalized(
                100, {{0, 100, {-9, 1}, {1, 1}}, {0, 4, {0, 0}, {1, 1}}, {4, 100, {0, 0}, {4, 0}}}),
            3u);
}

}  // namespace
}  // namespace dcp
