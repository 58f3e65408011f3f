// SPDX-License-Identifier: Apache-2.0
// Mask::Area of every built-in family against a dense per-token count (tests/testing/dense_mask.h),
// over seeded random sequence lengths, parameters and rectangles; and closed-form areas of long
// sequences that are too long to materialise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dcp/mask.h"
#include "mask/random_masks.h"
#include "testing/dense_mask.h"

namespace dcp {
namespace {

using ::dcp::testing::AreasMatch;
using ::dcp::testing::DenseFromSpec;
using ::dcp::testing::DenseMask;
using ::dcp::testing::RandomRects;
using ::dcp::testing::RandomSpec;
using ::dcp::testing::Rect;
using ::dcp::testing::Rng;
using ::dcp::testing::Uniform;

// Lengths every family is tried on: tiny ones, primes, powers of two and their neighbours (which
// are or are not multiples of the block sizes drawn).
constexpr int64_t kFixedLengths[] = {1,  2,  3,  4,  5,   7,   8,   13,  16,  17,  31,
                                     32, 33, 64, 97, 100, 127, 128, 129, 255, 256, 299};
constexpr int kRandomCasesPerFamily = 120;
constexpr int kRectsPerCase = 60;

constexpr MaskFamily kBuiltInFamilies[] = {
    MaskFamily::kCausal,          MaskFamily::kFull,
    MaskFamily::kSlidingWindow,   MaskFamily::kLambda,
    MaskFamily::kCausalBlockwise, MaskFamily::kSharedQuestion,
    MaskFamily::kDocuments,       MaskFamily::kModality,
    MaskFamily::kExplicit,
};

class MaskAreaOfFamily : public ::testing::TestWithParam<MaskFamily> {};

// One (length, seed) case: a random spec of the family, built and compared with the dense count.
void CheckRandomCase(MaskFamily family, int64_t length, uint64_t seed) {
  Rng rng(seed);
  const MaskSpec spec = RandomSpec(family, length, rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) + ", spec " +
               spec.ToString());
  const Result<Mask> mask = spec.Build(length);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  const DenseMask dense = DenseFromSpec(spec, length);
  const std::vector<Rect> rects = RandomRects(length, kRectsPerCase, rng);
  EXPECT_TRUE(AreasMatch(*mask, dense, rects));
}

TEST_P(MaskAreaOfFamily, MatchesDenseCountOnFixedLengths) {
  const MaskFamily family = GetParam();
  for (int64_t length : kFixedLengths) {
    for (uint64_t draw = 0; draw < 3; ++draw) {
      CheckRandomCase(family, length, 1000 * static_cast<uint64_t>(length) + draw);
    }
  }
}

TEST_P(MaskAreaOfFamily, MatchesDenseCountOnRandomLengths) {
  const MaskFamily family = GetParam();
  for (uint64_t seed = 0; seed < kRandomCasesPerFamily; ++seed) {
    Rng length_rng(seed * 7919 + static_cast<uint64_t>(family));
    const int64_t length = Uniform(length_rng, 1, 300);
    CheckRandomCase(family, length, 0x5eed0000 + seed);
  }
}

TEST_P(MaskAreaOfFamily, IgnoresPartsOfRectanglesOutsideTheSequence) {
  const MaskFamily family = GetParam();
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Rng rng(seed);
    const int64_t length = Uniform(rng, 1, 120);
    const MaskSpec spec = RandomSpec(family, length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) + ", spec " +
                 spec.ToString());
    const Result<Mask> mask = spec.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    const int64_t total = mask->TotalArea();
    constexpr int64_t kFar = int64_t{1} << 62;
    EXPECT_EQ(mask->Area(-kFar, kFar, -kFar, kFar), total);
    EXPECT_EQ(mask->Area(-kFar, kFar, 0, length), total);
    EXPECT_EQ(mask->Area(0, length, -kFar, kFar), total);
    EXPECT_EQ(mask->Area(length, kFar, -kFar, kFar), 0);
    EXPECT_EQ(mask->Area(-kFar, 0, -kFar, kFar), 0);
    EXPECT_EQ(mask->Area(-kFar, kFar, length, kFar), 0);
    EXPECT_EQ(mask->Area(-kFar, kFar, -kFar, 0), 0);
  }
}

TEST_P(MaskAreaOfFamily, SplitsAdditivelyAtAnyRowAndColumn) {
  // Area is a sum over cells, so cutting a rectangle in four must keep the total.
  const MaskFamily family = GetParam();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Rng rng(seed + 424242);
    const int64_t length = Uniform(rng, 1, 200);
    const MaskSpec spec = RandomSpec(family, length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) + ", spec " +
                 spec.ToString());
    const Result<Mask> mask = spec.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    for (int j = 0; j < 20; ++j) {
      const int64_t q = Uniform(rng, 0, length), k = Uniform(rng, 0, length);
      EXPECT_EQ(mask->Area(0, q, 0, k) + mask->Area(q, length, 0, k) + mask->Area(0, q, k, length) +
                    mask->Area(q, length, k, length),
                mask->TotalArea())
          << "cut at row " << q << ", column " << k;
    }
  }
}

std::string FamilyName(const ::testing::TestParamInfo<MaskFamily>& info) {
  std::string name(ToString(info.param));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(MaskFamilies, MaskAreaOfFamily, ::testing::ValuesIn(kBuiltInFamilies),
                         FamilyName);

// Regression (src/mask/mask.cc, SliceArea, fixed): the cut rows were computed as
// `k1 - slice.hi.base` and `k0 - slice.lo.base` without a guard, so a rectangle bound at the int64
// limits (a natural "to the end" value; Mask::Area states no REQUIRES on its bounds) was signed
// overflow whenever a normalized slice has a slope-1 lo with a positive base (lo = i + 1:
// INT64_MIN - 1) or a slope-1 hi with a negative base (hi = i - 5: INT64_MAX - (-5)). A plain build
// wrapped to the right count; under -DDCP_SANITIZE=ON UBSan stops on it, so this test guards it
// there.
TEST(MaskArea, AcceptsInt64LimitsAsRectangleBounds) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<Slice> raw = {{6, 10, {0, 0}, {-5, 1}}, {0, 6, {1, 1}, {10, 0}}};
  const Result<Mask> mask = Mask::FromSlices(10, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  const DenseMask dense = testing::DenseFromSlices(10, raw);
  EXPECT_EQ(mask->Area(kMin, kMax, kMin, kMax), dense.TotalArea());
  EXPECT_EQ(mask->Area(0, kMax, 0, kMax), dense.TotalArea());
  EXPECT_EQ(mask->Area(kMin, kMax, 3, kMax), dense.Area(0, 10, 3, 10));
}

TEST(MaskArea, DenseReferenceCountsMatchCellLoops) {
  // The prefix sums of the reference itself, against visiting every cell.
  Rng rng(99);
  for (int c = 0; c < 20; ++c) {
    const int64_t length = Uniform(rng, 1, 40);
    const MaskSpec spec = testing::RandomSpec(MaskFamily::kLambda, length, rng);
    const DenseMask dense = DenseFromSpec(spec, length);
    for (const Rect& r : RandomRects(length, 30, rng)) {
      EXPECT_EQ(dense.Area(r.q0, r.q1, r.k0, r.k1), dense.AreaByLoop(r.q0, r.q1, r.k0, r.k1))
          << testing::ToString(r);
    }
  }
}

TEST(MaskArea, CausalMatchesFormula) {
  for (int64_t length :
       {int64_t{1}, int64_t{2}, int64_t{100}, int64_t{1000003}, kMaxSequenceLength}) {
    const Result<Mask> mask = MaskSpec{}.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    EXPECT_EQ(mask->TotalArea(), CausalArea(length)) << "length " << length;
    EXPECT_EQ(mask->TotalArea(), length * (length + 1) / 2) << "length " << length;
  }
}

TEST(MaskArea, FullIsLengthSquaredUpToTheLongestSequence) {
  const Result<MaskSpec> spec = MaskSpec::Parse("full");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  for (int64_t length : {int64_t{1}, int64_t{7}, int64_t{1} << 20, kMaxSequenceLength}) {
    const Result<Mask> mask = spec->Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    EXPECT_EQ(mask->TotalArea(), length * length) << "length " << length;
    // The lower-left quarter of a full mask is full too.
    EXPECT_EQ(mask->Area(length / 2, length, 0, length / 2), (length - length / 2) * (length / 2));
  }
}

TEST(MaskArea, SlidingWindowMatchesFormulaOnLongSequences) {
  // Row i sees min(W, i + 1) tokens: W(W+1)/2 for the first W rows, then W per row.
  const int64_t length = int64_t{1} << 30;
  for (int64_t window : {int64_t{1}, int64_t{4096}, int64_t{1} << 29, length}) {
    MaskSpec spec;
    spec.family = MaskFamily::kSlidingWindow;
    spec.window = window;
    const Result<Mask> mask = spec.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    EXPECT_EQ(mask->TotalArea(), window * (window + 1) / 2 + (length - window) * window)
        << spec.ToString();
  }
}

TEST(MaskArea, DocumentsMatchSumOfCausalAreasOnLongSequences) {
  const int64_t length = 1000000007;
  MaskSpec spec;
  spec.family = MaskFamily::kDocuments;
  spec.document_lengths = {123456789, 1, 500000000};  // the rest is one more document
  const Result<Mask> mask = spec.Build(length);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  const int64_t rest = length - 123456789 - 1 - 500000000;
  EXPECT_EQ(mask->TotalArea(),
            CausalArea(123456789) + CausalArea(1) + CausalArea(500000000) + CausalArea(rest));
}

TEST(MaskArea, LambdaMatchesFormulaOnLongSequences) {
  // Rows past sink + window see S sink tokens and W window tokens, disjoint.
  const int64_t length = int64_t{1} << 30, sink = 64, window = 4096;
  const Result<MaskSpec> spec = MaskSpec::Parse("lambda");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const Result<Mask> mask = spec->Build(length);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  const int64_t tail_rows = length - (sink + window);
  EXPECT_EQ(mask->Area(sink + window, length, 0, length), tail_rows * (sink + window));
  EXPECT_EQ(mask->Area(sink + window, length, 0, sink), tail_rows * sink);
}

}  // namespace
}  // namespace dcp
