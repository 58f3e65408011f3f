// SPDX-License-Identifier: Apache-2.0
// Mask::FromSlices on thousands of random raw slice lists against the dense union of the raw
// slices, the normalization invariants of Mask::slices(), its speed on 100,000 overlapping slices,
// FromSlices' errors, and SliceArea against per-row loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dcp/mask.h"
#include "mask/random_masks.h"
#include "testing/cases.h"
#include "testing/dense_mask.h"

namespace dcp {
namespace {

using ::dcp::testing::AreasMatch;
using ::dcp::testing::DenseFromSlices;
using ::dcp::testing::DenseMask;
using ::dcp::testing::OneIn;
using ::dcp::testing::RandomRects;
using ::dcp::testing::RandomSlices;
using ::dcp::testing::Rect;
using ::dcp::testing::Rng;
using ::dcp::testing::Uniform;

constexpr int kRandomSliceSets = 4000;

std::string Describe(const Slice& s) {
  return "{rows [" + std::to_string(s.row_begin) + ", " + std::to_string(s.row_end) + "), lo " +
         std::to_string(s.lo.base) + "+" + std::to_string(s.lo.slope) + "i, hi " +
         std::to_string(s.hi.base) + "+" + std::to_string(s.hi.slope) + "i}";
}

std::string Describe(std::span<const Slice> slices) {
  std::string out;
  for (const Slice& s : slices) out += Describe(s) + " ";
  return out;
}

// A random sequence length for a raw slice list; tiny ones often.
int64_t RandomLength(Rng& rng) { return OneIn(rng, 5) ? Uniform(rng, 1, 3) : Uniform(rng, 1, 48); }

// Checks the contract of Mask::slices() (include/dcp/mask.h) against the dense union `dense`:
// every slice is non-empty on each of its rows and inside [0, length), slopes are 0 or 1, the
// slices are sorted by (row_begin, lo at row_begin), every cell of a slice is in the union, and
// the slices' cell counts add up to the union's, so no two slices share a cell.
::testing::AssertionResult IsNormalizedCoverOf(const Mask& mask, const DenseMask& dense) {
  const int64_t length = mask.length();
  const std::vector<Slice>& slices = mask.slices();
  int64_t cells = 0;
  for (size_t j = 0; j < slices.size(); ++j) {
    const Slice& s = slices[j];
    const auto fail = [&]() {
      return ::testing::AssertionFailure() << "slice " << j << " " << Describe(s) << ": ";
    };
    if (s.lo.slope < 0 || s.lo.slope > 1 || s.hi.slope < 0 || s.hi.slope > 1) {
      return fail() << "slope not 0 or 1";
    }
    if (s.row_begin < 0 || s.row_end > length || s.row_begin >= s.row_end) {
      return fail() << "rows empty or outside [0, " << length << ")";
    }
    for (int64_t i = s.row_begin; i < s.row_end; ++i) {
      const int64_t lo = s.lo.At(i), hi = s.hi.At(i);
      if (lo < 0 || hi > length) return fail() << "row " << i << " reaches outside the sequence";
      if (lo >= hi) return fail() << "row " << i << " is empty";
      for (int64_t k = lo; k < hi; ++k) {
        if (!dense.allowed(i, k)) return fail() << "cell (" << i << ", " << k << ") not in mask";
      }
      cells += hi - lo;
    }
    if (j > 0) {
      const Slice& p = slices[j - 1];
      if (p.row_begin > s.row_begin ||
          (p.row_begin == s.row_begin && p.lo.At(p.row_begin) > s.lo.At(s.row_begin))) {
        return fail() << "not sorted after " << Describe(p);
      }
    }
  }
  if (cells != dense.TotalArea()) {
    return ::testing::AssertionFailure() << "slices hold " << cells << " cells, the union "
                                         << dense.TotalArea() << ": slices overlap or miss cells";
  }
  return ::testing::AssertionSuccess();
}

TEST(MaskFromSlices, AreaMatchesDenseUnionOfRandomSlices) {
  for (uint64_t seed = 0; seed < kRandomSliceSets; ++seed) {
    Rng rng(seed);
    const int64_t length = RandomLength(rng);
    const std::vector<Slice> raw = RandomSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> mask = Mask::FromSlices(length, raw);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    const DenseMask dense = DenseFromSlices(length, raw);
    const std::vector<Rect> rects = RandomRects(length, 12, rng);
    ASSERT_TRUE(AreasMatch(*mask, dense, rects)) << "normalized: " << Describe(mask->slices());
  }
}

TEST(MaskFromSlices, NormalizedSlicesAreDisjointSortedAndInsideTheSequence) {
  for (uint64_t seed = 0; seed < kRandomSliceSets; ++seed) {
    Rng rng(seed);
    const int64_t length = RandomLength(rng);
    const std::vector<Slice> raw = RandomSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> mask = Mask::FromSlices(length, raw);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    ASSERT_TRUE(IsNormalizedCoverOf(*mask, DenseFromSlices(length, raw)))
        << "normalized: " << Describe(mask->slices());
  }
}

TEST(MaskFromSlices, NormalizingNormalizedSlicesKeepsTheMask) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    Rng rng(seed);
    const int64_t length = RandomLength(rng);
    const std::vector<Slice> raw = RandomSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> mask = Mask::FromSlices(length, raw);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    const Result<Mask> again = Mask::FromSlices(length, mask->slices());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    const DenseMask dense = DenseFromSlices(length, raw);
    EXPECT_TRUE(AreasMatch(*again, dense, RandomRects(length, 12, rng)));
    EXPECT_TRUE(IsNormalizedCoverOf(*again, dense));
  }
}

TEST(MaskFromSlices, IsDeterministicAndKeepsAreasWhenSlicesAreReordered) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    Rng rng(seed);
    const int64_t length = RandomLength(rng);
    std::vector<Slice> raw = RandomSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> a = Mask::FromSlices(length, raw);
    const Result<Mask> b = Mask::FromSlices(length, raw);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    std::reverse(raw.begin(), raw.end());
    const Result<Mask> reversed = Mask::FromSlices(length, raw);
    ASSERT_TRUE(reversed.ok());
    EXPECT_TRUE(AreasMatch(*reversed, DenseFromSlices(length, raw), RandomRects(length, 12, rng)));
  }
}

TEST(MaskFromSlices, AreaMatchesDenseUnionOnEveryRectangleOfTinySequences) {
  // Exhaustive: every rectangle with corners in [-1, length + 1].
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Rng rng(seed + 77);
    const int64_t length = Uniform(rng, 1, 5);
    const std::vector<Slice> raw = RandomSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> mask = Mask::FromSlices(length, raw);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    const DenseMask dense = DenseFromSlices(length, raw);
    std::vector<Rect> rects;
    for (int64_t q0 = -1; q0 <= length + 1; ++q0) {
      for (int64_t q1 = -1; q1 <= length + 1; ++q1) {
        for (int64_t k0 = -1; k0 <= length + 1; ++k0) {
          for (int64_t k1 = -1; k1 <= length + 1; ++k1) rects.push_back({q0, q1, k0, k1});
        }
      }
    }
    ASSERT_TRUE(AreasMatch(*mask, dense, rects)) << "normalized: " << Describe(mask->slices());
  }
}

// Many raw slices for a short sequence: over every row, over random rows or over 1 to 3 rows,
// their bases often drawn near a quarter of the length: slices share, touch, cross and hide each
// other's bounds, and short ones come and go between others, the cases where the sweep of
// mask/normalize.cc changes the union's components.
std::vector<Slice> CrowdedSlices(int64_t length, Rng& rng) {
  const auto base = [&]() {
    if (OneIn(rng, 4)) return Uniform(rng, -length, length);
    return length * Uniform(rng, 0, 4) / 4 + Uniform(rng, -2, 2) - (OneIn(rng, 3) ? length : 0);
  };
  std::vector<Slice> slices;
  for (int64_t n = Uniform(rng, 0, 40); n > 0; --n) {
    Slice s;
    switch (Uniform(rng, 0, 2)) {
      case 0:  // every row
        s.row_end = length;
        break;
      case 1:
        s.row_begin = Uniform(rng, 0, length);
        s.row_end = Uniform(rng, s.row_begin, length);
        break;
      default:  // a few rows
        s.row_begin = Uniform(rng, 0, length);
        s.row_end = std::min(length, s.row_begin + Uniform(rng, 1, 3));
        break;
    }
    s.lo = {base(), Uniform(rng, 0, 1)};
    s.hi = OneIn(rng, 2) ? AffineColumn{s.lo.base + Uniform(rng, 1, 4), s.lo.slope}
                         : AffineColumn{base() + length / 2, Uniform(rng, 0, 1)};
    slices.push_back(s);
  }
  return slices;
}

// The property test of the sweep: every cell of every normalized slice is in the union of the raw
// slices, cell by cell (DenseFromSlices shares no code with src/mask), and the slices cover it
// exactly once.
TEST(MaskFromSlices, MatchesTheCellByCellUnionOfCrowdedSlices) {
  for (uint64_t seed = 0; seed < testing::RandomCases(5000); ++seed) {
    Rng rng(seed);
    const int64_t length = OneIn(rng, 4) ? Uniform(rng, 49, 120) : RandomLength(rng);
    const std::vector<Slice> raw = CrowdedSlices(length, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", length " + std::to_string(length) +
                 ", slices " + Describe(raw));
    const Result<Mask> mask = Mask::FromSlices(length, raw);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    ASSERT_TRUE(IsNormalizedCoverOf(*mask, DenseFromSlices(length, raw)))
        << "normalized: " << Describe(mask->slices());
  }
}

// A component must keep the row where it merges with its right neighbor while another component
// comes between them and goes: [0, i + 1) reaches [28, 60) on row 27, and on row 12 alone the
// slice [i + 3, i + 7) lies between them.
TEST(MaskFromSlices, MergesOnTimeAfterAComponentInBetweenCameAndWent) {
  const std::vector<Slice> raw = {{0, 60, {28, 0}, {55, 1}},
                                  {40, 56, {-2, 0}, {17, 0}},
                                  {12, 13, {3, 1}, {7, 1}},
                                  {0, 60, {-3, 0}, {1, 1}}};
  const Result<Mask> mask = Mask::FromSlices(60, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_TRUE(IsNormalizedCoverOf(*mask, DenseFromSlices(60, raw)))
      << "normalized: " << Describe(mask->slices());
}

// Allowed columns of row i: the raw intervals of the row clipped to the sequence, sorted and
// merged.
int64_t RowArea(std::span<const Slice> slices, int64_t i, int64_t length) {
  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const Slice& s : slices) {
    if (i < s.row_begin || i >= s.row_end) continue;
    const int64_t lo = std::max<int64_t>(s.lo.At(i), 0), hi = std::min(s.hi.At(i), length);
    if (lo < hi) intervals.emplace_back(lo, hi);
  }
  std::sort(intervals.begin(), intervals.end());
  int64_t area = 0, reached = 0;
  for (const auto& [lo, hi] : intervals) {
    area += std::max<int64_t>(0, hi - std::max(lo, reached));
    reached = std::max(reached, hi);
  }
  return area;
}

// Regression: normalization cut the rows at every crossing of two slice endpoints and merged all
// intervals again between cuts, cubic in the slices covering a row: 1,000 random slices like
// these took 2.8 s, 3,000 took 77 s. 100,000 now take a fraction of a second in Release; the test
// asserts nothing on time, a cubic normalization would simply never finish.
TEST(MaskFromSlices, NormalizesAHundredThousandOverlappingSlices) {
  constexpr int64_t kLength = int64_t{1} << 20;
  Rng rng(18);
  std::vector<Slice> raw;
  for (int k = 0; k < 100000; ++k) {
    const int64_t a = Uniform(rng, 0, kLength), b = Uniform(rng, 0, kLength);
    raw.push_back(Slice{std::min(a, b),
                        std::max(a, b),
                        {Uniform(rng, -kLength / 2, kLength / 2), Uniform(rng, 0, 1)},
                        {Uniform(rng, 0, kLength), Uniform(rng, 0, 1)}});
  }
  const Result<Mask> mask = Mask::FromSlices(kLength, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  for (int k = 0; k < 100; ++k) {
    const int64_t i = Uniform(rng, 0, kLength - 1);
    ASSERT_EQ(mask->Area(i, i + 1, 0, kLength), RowArea(raw, i, kLength)) << "row " << i;
  }
}

TEST(MaskFromSlices, EmptyListGivesAFullyMaskedSequence) {
  const Result<Mask> mask = Mask::FromSlices(10, {});
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_TRUE(mask->slices().empty());
  EXPECT_EQ(mask->length(), 10);
  EXPECT_EQ(mask->TotalArea(), 0);
}

TEST(MaskFromSlices, DropsSlicesThatAreEmptyOrOutsideTheColumns) {
  const std::vector<Slice> raw = {
      {3, 3, {0, 0}, {10, 0}},      // no rows
      {0, 10, {5, 0}, {5, 0}},      // hi == lo
      {0, 10, {7, 0}, {2, 0}},      // hi < lo
      {0, 10, {-20, 0}, {0, 0}},    // left of column 0
      {0, 10, {10, 0}, {30, 0}},    // right of the last column
      {0, 10, {-30, 1}, {-20, 1}},  // left of column 0 on every row
  };
  const Result<Mask> mask = Mask::FromSlices(10, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_TRUE(mask->slices().empty()) << Describe(mask->slices());
  EXPECT_EQ(mask->TotalArea(), 0);
}

TEST(MaskFromSlices, ClipsColumnsToTheSequence) {
  // Rows 0..9 attend to [-5, 15) clipped: the full row.
  const std::vector<Slice> raw = {{0, 10, {-5, 0}, {15, 0}}};
  const Result<Mask> mask = Mask::FromSlices(10, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  ASSERT_EQ(mask->slices().size(), 1u);
  EXPECT_EQ(mask->slices()[0], (Slice{0, 10, {0, 0}, {10, 0}}));
  EXPECT_EQ(mask->TotalArea(), 100);
}

TEST(MaskFromSlices, MergesTouchingAndOverlappingIntervals) {
  // [0, 4) and [4, 8) and [2, 6) on every row: one interval [0, 8).
  const std::vector<Slice> raw = {
      {0, 6, {0, 0}, {4, 0}}, {0, 6, {4, 0}, {8, 0}}, {0, 6, {2, 0}, {6, 0}}};
  const Result<Mask> mask = Mask::FromSlices(8, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  ASSERT_EQ(mask->slices().size(), 1u) << Describe(mask->slices());
  EXPECT_EQ(mask->slices()[0], (Slice{0, 6, {0, 0}, {8, 0}}));
}

TEST(MaskFromSlices, AcceptsBasesUpToTheLimit) {
  constexpr int64_t kLimit = int64_t{1} << 40;
  const std::vector<Slice> raw = {{0, 4, {-kLimit, 1}, {kLimit, 0}}};
  const Result<Mask> mask = Mask::FromSlices(4, raw);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_EQ(mask->TotalArea(), 16);
}

void ExpectInvalid(int64_t length, const std::vector<Slice>& raw,
                   const std::vector<std::string>& substrings) {
  const Result<Mask> mask = Mask::FromSlices(length, raw);
  ASSERT_FALSE(mask.ok()) << "length " << length << ", slices " << Describe(raw);
  EXPECT_EQ(mask.status().code(), StatusCode::kInvalidArgument) << mask.status().ToString();
  for (const std::string& s : substrings) {
    EXPECT_NE(mask.status().message().find(s), std::string::npos)
        << "message '" << mask.status().message() << "' does not contain '" << s << "'";
  }
}

TEST(MaskFromSlices, RejectsLengthsOutsideTheAcceptedRange) {
  ExpectInvalid(0, {}, {"sequence length 0"});
  ExpectInvalid(-3, {}, {"sequence length -3"});
  ExpectInvalid(kMaxSequenceLength + 1, {}, {std::to_string(kMaxSequenceLength + 1)});
  const Result<Mask> longest = Mask::FromSlices(kMaxSequenceLength, {});
  EXPECT_TRUE(longest.ok()) << longest.status().ToString();
}

TEST(MaskFromSlices, RejectsRowsOutsideTheSequence) {
  const AffineColumn zero{0, 0}, row{1, 1};
  ExpectInvalid(10, {{0, 11, zero, row}}, {"slice 0", "[0, 11)", "[0, 10)"});
  ExpectInvalid(10, {{0, 10, zero, row}, {-1, 5, zero, row}}, {"slice 1", "[-1, 5)"});
  ExpectInvalid(10, {{6, 4, zero, row}}, {"slice 0", "[6, 4)"});
  ExpectInvalid(10, {{11, 11, zero, row}}, {"slice 0", "[11, 11)"});
}

TEST(MaskFromSlices, RejectsSlopesOtherThanZeroOrOne) {
  ExpectInvalid(10, {{0, 10, {0, 2}, {1, 1}}}, {"slice 0", "lo slope 2"});
  ExpectInvalid(10, {{0, 10, {0, 0}, {1, -1}}}, {"slice 0", "hi slope -1"});
}

TEST(MaskFromSlices, RejectsBasesBeyondTheLimit) {
  constexpr int64_t kTooFar = (int64_t{1} << 40) + 1;
  ExpectInvalid(10, {{0, 10, {-kTooFar, 0}, {1, 1}}},
                {"slice 0", "lo base " + std::to_string(-kTooFar)});
  ExpectInvalid(10, {{0, 10, {0, 0}, {kTooFar, 0}}},
                {"slice 0", "hi base " + std::to_string(kTooFar)});
}

TEST(MaskFromSlices, RejectsMoreSlicesThanTheLimit) {
  const std::vector<Slice> raw(static_cast<size_t>(kMaxMaskSlices) + 1,
                               Slice{0, 1, {0, 0}, {1, 0}});
  ExpectInvalid(1, raw,
                {std::to_string(kMaxMaskSlices + 1) + " slices",
                 "limit of " + std::to_string(kMaxMaskSlices)});
}

// Allowed pairs of one slice in a rectangle, one row at a time; columns not clipped.
int64_t SliceAreaByRows(const Slice& s, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  int64_t total = 0;
  for (int64_t i = std::max(s.row_begin, q0); i < std::min(s.row_end, q1); ++i) {
    total += std::max<int64_t>(0, std::min(s.hi.At(i), k1) - std::max(s.lo.At(i), k0));
  }
  return total;
}

TEST(SliceArea, MatchesPerRowLoopOnRandomSlicesAndRectangles) {
  // Rows and columns anywhere, negative included; many slices have rows where hi <= lo.
  Rng rng(2024);
  for (int c = 0; c < 30000; ++c) {
    const int64_t r0 = Uniform(rng, -40, 60);
    const Slice s{r0,
                  OneIn(rng, 8) ? r0 - Uniform(rng, 0, 3) : r0 + Uniform(rng, 0, 60),
                  {Uniform(rng, -80, 80), Uniform(rng, 0, 1)},
                  {Uniform(rng, -80, 80), Uniform(rng, 0, 1)}};
    const int64_t q0 = Uniform(rng, -60, 120), q1 = Uniform(rng, -60, 120);
    const int64_t k0 = Uniform(rng, -100, 160), k1 = Uniform(rng, -100, 160);
    ASSERT_EQ(SliceArea(s, q0, q1, k0, k1), SliceAreaByRows(s, q0, q1, k0, k1))
        << "case " << c << ": slice " << Describe(s) << ", rows [" << q0 << ", " << q1 << ") cols ["
        << k0 << ", " << k1 << ")";
  }
}

TEST(SliceArea, CountsZeroOnRowsWhereHiIsNotAboveLo) {
  // hi = 10 fixed, lo = i: width 10 - i, zero from row 10 on, never negative.
  const Slice narrowing{0, 20, {0, 1}, {10, 0}};
  EXPECT_EQ(SliceArea(narrowing, 0, 20, -100, 100), 55);
  EXPECT_EQ(SliceArea(narrowing, 10, 20, -100, 100), 0);
  EXPECT_EQ(SliceArea(narrowing, 8, 20, -100, 100), 3);
  // hi = i - 5, lo = 0: empty on rows 0..5, then width i - 5.
  const Slice widening{0, 10, {0, 0}, {-5, 1}};
  EXPECT_EQ(SliceArea(widening, 0, 10, -100, 100), 1 + 2 + 3 + 4);
  EXPECT_EQ(SliceArea(widening, 0, 6, -100, 100), 0);
  // hi below lo on every row.
  EXPECT_EQ(SliceArea(Slice{0, 10, {5, 1}, {3, 1}}, 0, 10, -100, 100), 0);
  EXPECT_EQ(SliceArea(Slice{0, 10, {5, 0}, {5, 0}}, 0, 10, -100, 100), 0);
}

TEST(SliceArea, IsZeroForEmptyOrDisjointRectangles) {
  const Slice band{0, 10, {-2, 1}, {3, 1}};
  EXPECT_EQ(SliceArea(band, 0, 10, -100, 100), 50);
  EXPECT_EQ(SliceArea(band, 5, 5, -100, 100), 0);
  EXPECT_EQ(SliceArea(band, 7, 3, -100, 100), 0);
  EXPECT_EQ(SliceArea(band, 0, 10, 4, 4), 0);
  EXPECT_EQ(SliceArea(band, 0, 10, 9, 2), 0);
  EXPECT_EQ(SliceArea(band, 10, 20, -100, 100), 0);
  EXPECT_EQ(SliceArea(band, 0, 10, 13, 100), 0);
  EXPECT_EQ(SliceArea(band, 0, 10, -100, -2), 0);
  EXPECT_EQ(SliceArea(Slice{4, 4, {0, 0}, {10, 0}}, 0, 10, 0, 10), 0);
}

TEST(SliceArea, DoesNotClipColumnsToASequence) {
  // Columns [-5, 5) on 4 rows: all 10 count when the rectangle allows them.
  const Slice s{0, 4, {-5, 0}, {5, 0}};
  EXPECT_EQ(SliceArea(s, 0, 4, -10, 10), 40);
  EXPECT_EQ(SliceArea(s, 0, 4, 0, 10), 20);
}

}  // namespace
}  // namespace dcp
