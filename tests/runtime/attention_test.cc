// SPDX-License-Identifier: Apache-2.0
// The CPU attention kernels and bf16 numbers, checked against a naive double-precision reference
// written here: a dense per-element mask built from the slices, a full-row softmax, and the
// textbook backward dS = P * (dP - rowsum(P * dP)), which shares nothing with the kernels' tiling,
// log-sum-exp merging or Delta trick.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dcp/batch.h"
#include "dcp/mask.h"
#include "dcp/runtime.h"
#include "testing/expect_close.h"
#include "testing/tile_reference.h"

namespace dcp {
namespace {

using testing::ExpectClose;

constexpr float kInf = std::numeric_limits<float>::infinity();

size_t U(int64_t i) { return static_cast<size_t>(i); }

// ---------------------------------------------------------------------------------------------
// bf16

uint16_t Bits16(float value) { return FloatToBf16(value); }
float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16, RoundTripsEveryNonNanValueExactly) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t value = static_cast<uint16_t>(bits);
    const float f = Bf16ToFloat(value);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), bits << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), value) << "bits " << bits;
    }
  }
}

TEST(Bf16, RoundsHalfwayCasesToEven) {
  EXPECT_EQ(Bits16(FromBits(0x3f808000u)), 0x3f80);  // tie, kept bit even: down
  EXPECT_EQ(Bits16(FromBits(0x3f818000u)), 0x3f82);  // tie, kept bit odd: up
  EXPECT_EQ(Bits16(FromBits(0x3f808001u)), 0x3f81);  // just above the tie: up
  EXPECT_EQ(Bits16(FromBits(0x3f807fffu)), 0x3f80);  // just below the tie: down
  EXPECT_EQ(Bits16(FromBits(0xbf818000u)), 0xbf82);  // negative values round the same way
  EXPECT_EQ(Bits16(1.0f), 0x3f80);
  EXPECT_EQ(Bits16(-2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even is 1.
  EXPECT_EQ(Bf16ToFloat(Bits16(1.0f + 1.0f / 256.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(Bits16(1.0f + 3.0f / 256.0f)), 1.0f + 4.0f / 256.0f);
}

TEST(Bf16, KeepsNanInfinityAndSignedZero) {
  EXPECT_TRUE(std::isnan(Bf16ToFloat(Bits16(std::numeric_limits<float>::quiet_NaN()))));
  // NaNs whose payload sits only in the bits that are dropped must not become infinity.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(Bits16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(Bits16(FromBits(0xff800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(Bits16(FromBits(0x7fffffffu)))));
  EXPECT_TRUE(std::signbit(Bf16ToFloat(Bits16(FromBits(0xffc00000u)))));
  EXPECT_EQ(Bits16(kInf), 0x7f80);
  EXPECT_EQ(Bits16(-kInf), 0xff80);
  EXPECT_EQ(Bits16(0.0f), 0x0000);
  EXPECT_EQ(Bits16(-0.0f), 0x8000);
  // The largest float rounds up past the largest bf16, to infinity.
  EXPECT_EQ(Bits16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(Bits16(FromBits(0x7f7f7fffu)), 0x7f7f);  // below the tie: largest finite bf16
}

TEST(Bf16, RoundsDenormalsToNearestEven) {
  EXPECT_EQ(Bits16(FromBits(0x00010000u)), 0x0001);  // smallest bf16 denormal, exact
  EXPECT_EQ(Bits16(FromBits(0x00000001u)), 0x0000);  // smallest fp32 denormal: to zero
  EXPECT_EQ(Bits16(FromBits(0x00008000u)), 0x0000);  // tie with zero: even is zero
  EXPECT_EQ(Bits16(FromBits(0x00018000u)), 0x0002);  // tie between 1 and 2: even is 2
  EXPECT_EQ(Bits16(FromBits(0x80008001u)), 0x8001);  // negative, above the tie
  EXPECT_EQ(Bits16(FromBits(0x007fffffu)), 0x0080);  // largest denormal rounds to the normal
  EXPECT_EQ(Bf16ToFloat(0x0001), FromBits(0x00010000u));
}

TEST(Bf16, LoadAndStoreElementsOfBothDtypes) {
  std::vector<std::byte> fp32(4 * 3);
  StoreElement(fp32.data(), DType::kFloat32, 2, 1.2345678f);
  StoreElement(fp32.data(), DType::kFloat32, 0, -3.0f);
  EXPECT_EQ(LoadElement(fp32.data(), DType::kFloat32, 2), 1.2345678f);
  EXPECT_EQ(LoadElement(fp32.data(), DType::kFloat32, 0), -3.0f);

  std::vector<std::byte> bf16(2 * 3);
  StoreElement(bf16.data(), DType::kBFloat16, 1, 1.2345678f);
  StoreElement(bf16.data(), DType::kBFloat16, 2, FromBits(0x3f818000u));
  EXPECT_EQ(LoadElement(bf16.data(), DType::kBFloat16, 1), Bf16ToFloat(Bits16(1.2345678f)));
  EXPECT_EQ(LoadElement(bf16.data(), DType::kBFloat16, 2), Bf16ToFloat(0x3f82));
  EXPECT_EQ(LoadElement(bf16.data(), DType::kBFloat16, 0), 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Reference

using Case = testing::TileProblem;
using Reference = testing::TileReference;
using testing::Encode;

Reference ComputeReference(const Case& c) { return testing::ReferenceAttention(c); }

std::vector<float> ReferenceDelta(const Case& c, const Reference& r) {
  const TileShape& s = c.shape;
  std::vector<float> delta(U(s.q_tokens * s.heads), 0.0f);
  for (int64_t row = 0; row < s.q_tokens * s.heads; ++row) {
    double sum = 0.0;
    for (int64_t k = 0; k < s.head_dim; ++k) {
      sum += r.o[U(row * s.head_dim + k)] * double{c.d_o[U(row * s.head_dim + k)]};
    }
    delta[U(row)] = static_cast<float>(sum);
  }
  return delta;
}

std::vector<float> ToFloats(const std::vector<double>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i]);
  return out;
}

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 2e-5; }

// ---------------------------------------------------------------------------------------------
// Random cases

// A random slice of one of several shapes, rows and columns possibly reaching past the tile.
Slice RandomSlice(std::mt19937_64& rng, int64_t q_tokens, int64_t kv_tokens) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Slice slice;
  slice.row_begin = uniform(-3, q_tokens - 1);
  slice.row_end = uniform(slice.row_begin + 1, q_tokens + 3);
  const int64_t offset = kv_tokens - q_tokens;  // aligns the diagonal with the tile's end
  switch (uniform(0, 4)) {
    case 0:  // causal-like: a fixed start, a diagonal end
      slice.lo = {uniform(-2, kv_tokens / 2), 0};
      slice.hi = {offset + 1 + uniform(-3, 3), 1};
      break;
    case 1: {  // sliding window
      const int64_t shift = offset + uniform(-3, 3);
      slice.lo = {shift - uniform(0, kv_tokens), 1};
      slice.hi = {shift + 1, 1};
      break;
    }
    case 2: {  // a fixed column range
      const int64_t lo = uniform(-5, kv_tokens + 2);
      slice.lo = {lo, 0};
      slice.hi = {lo + uniform(0, kv_tokens / 2 + 2), 0};
      break;
    }
    case 3:  // diagonal start, fixed end (rows after the crossing are empty)
      slice.lo = {uniform(-kv_tokens, kv_tokens), 1};
      slice.hi = {uniform(0, kv_tokens + 3), 0};
      break;
    default:  // everything, reaching past both ends
      slice.lo = {-uniform(0, 4), 0};
      slice.hi = {kv_tokens + uniform(0, 4), 0};
      break;
  }
  return slice;
}

float RoundTo(DType dtype, float value) {
  return dtype == DType::kFloat32 ? value : Bf16ToFloat(FloatToBf16(value));
}

std::vector<float> RandomValues(std::mt19937_64& rng, int64_t count, float magnitude, DType dtype) {
  std::uniform_real_distribution<float> dist(-magnitude, magnitude);
  std::vector<float> values(U(count));
  for (float& v : values) v = RoundTo(dtype, dist(rng));
  return values;
}

Case RandomCase(uint64_t seed, DType dtype) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case c;
  c.dtype = dtype;
  c.shape.q_tokens = uniform(1, 70);
  c.shape.kv_tokens = uniform(1, 70);
  c.shape.heads = uniform(1, 8);
  std::vector<int64_t> divisors;
  for (int64_t k = 1; k <= c.shape.heads; ++k) {
    if (c.shape.heads % k == 0) divisors.push_back(k);
  }
  c.shape.kv_heads = divisors[U(uniform(0, static_cast<int64_t>(divisors.size()) - 1))];
  c.shape.head_dim = uniform(1, 40);
  c.scale = 1.0f / std::sqrt(static_cast<float>(c.shape.head_dim));
  const int64_t slice_count = uniform(0, 6);
  for (int64_t k = 0; k < slice_count; ++k) {
    c.slices.push_back(RandomSlice(rng, c.shape.q_tokens, c.shape.kv_tokens));
  }
  // Larger magnitudes make some softmax rows peaked, smaller ones nearly flat.
  const float magnitude = std::uniform_real_distribution<float>(0.5f, 3.0f)(rng);
  const TileShape& s = c.shape;
  c.q = RandomValues(rng, s.q_tokens * s.heads * s.head_dim, magnitude, dtype);
  c.kv = RandomValues(rng, s.kv_tokens * 2 * s.kv_heads * s.head_dim, magnitude, dtype);
  c.d_o = RandomValues(rng, s.q_tokens * s.heads * s.head_dim, 1.0f, dtype);
  return c;
}

std::string Describe(uint64_t seed, const Case& c) {
  return "seed " + std::to_string(seed) + " dtype " + std::string(ToString(c.dtype)) + " tile " +
         std::to_string(c.shape.q_tokens) + "x" + std::to_string(c.shape.kv_tokens) + " heads " +
         std::to_string(c.shape.heads) + "/" + std::to_string(c.shape.kv_heads) + " head_dim " +
         std::to_string(c.shape.head_dim) + " slices " + std::to_string(c.slices.size());
}

// Splits [0, n) at up to `pieces - 1` random points; returns the boundaries, first 0, last n.
std::vector<int64_t> RandomSplit(std::mt19937_64& rng, int64_t n, int64_t pieces) {
  std::vector<int64_t> cuts = {0, n};
  for (int64_t k = 1; k < pieces; ++k) {
    cuts.push_back(std::uniform_int_distribution<int64_t>(0, n)(rng));
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// The slices of the whole tile seen from the sub-tile starting at row r0, column c0.
std::vector<Slice> ShiftSlices(const std::vector<Slice>& slices, int64_t r0, int64_t c0) {
  std::vector<Slice> out;
  for (Slice s : slices) {
    // Row i of the sub-tile is row i + r0 of the tile: base + slope * (i + r0) - c0.
    s.lo.base += s.lo.slope * r0 - c0;
    s.hi.base += s.hi.slope * r0 - c0;
    s.row_begin -= r0;
    s.row_end -= r0;
    out.push_back(s);
  }
  return out;
}

struct Forward {
  std::vector<float> o, lse;
};

Forward RunForward(const Case& c) {
  const TileShape& s = c.shape;
  Forward f{std::vector<float>(U(s.q_tokens * s.heads * s.head_dim), 0.0f),
            std::vector<float>(U(s.q_tokens * s.heads), -kInf)};
  const std::vector<std::byte> q = Encode(c.q, c.dtype);
  const std::vector<std::byte> kv = Encode(c.kv, c.dtype);
  AttendForward(f.o.data(), f.lse.data(), q.data(), kv.data(), c.dtype, s, c.slices, c.scale);
  return f;
}

// Forward over kv column tiles [cuts[t], cuts[t+1]) in the given order, merged in one accumulator.
Forward RunSplitForward(const Case& c, const std::vector<int64_t>& cuts, bool reverse) {
  const TileShape& s = c.shape;
  Forward f{std::vector<float>(U(s.q_tokens * s.heads * s.head_dim), 0.0f),
            std::vector<float>(U(s.q_tokens * s.heads), -kInf)};
  const std::vector<std::byte> q = Encode(c.q, c.dtype);
  const std::vector<std::byte> kv = Encode(c.kv, c.dtype);
  const int64_t kv_bytes_per_token = 2 * s.kv_heads * s.head_dim * BytesPerElement(c.dtype);
  const size_t tiles = cuts.size() - 1;
  for (size_t k = 0; k < tiles; ++k) {
    const size_t t = reverse ? tiles - 1 - k : k;
    TileShape sub = s;
    sub.kv_tokens = cuts[t + 1] - cuts[t];
    const std::vector<Slice> slices = ShiftSlices(c.slices, 0, cuts[t]);
    AttendForward(f.o.data(), f.lse.data(), q.data(), kv.data() + cuts[t] * kv_bytes_per_token,
                  c.dtype, sub, slices, c.scale);
  }
  return f;
}

struct Backward {
  std::vector<float> dq, dkv;
};

// Backward over the sub-tiles of a grid of row cuts x column cuts, summed into dq and dkv.
Backward RunBackward(const Case& c, const Reference& r, const std::vector<int64_t>& row_cuts,
                     const std::vector<int64_t>& col_cuts) {
  const TileShape& s = c.shape;
  const int64_t d = s.head_dim;
  Backward b{std::vector<float>(U(s.q_tokens * s.heads * d), 0.0f),
             std::vector<float>(U(s.kv_tokens * 2 * s.kv_heads * d), 0.0f)};
  const std::vector<std::byte> q = Encode(c.q, c.dtype);
  const std::vector<std::byte> kv = Encode(c.kv, c.dtype);
  const std::vector<std::byte> d_o = Encode(c.d_o, c.dtype);
  const std::vector<float> lse = ToFloats(r.lse);
  const std::vector<float> delta = ReferenceDelta(c, r);
  const int64_t bytes = BytesPerElement(c.dtype);
  for (size_t ri = 0; ri + 1 < row_cuts.size(); ++ri) {
    for (size_t ci = 0; ci + 1 < col_cuts.size(); ++ci) {
      const int64_t r0 = row_cuts[ri];
      const int64_t c0 = col_cuts[ci];
      TileShape sub = s;
      sub.q_tokens = row_cuts[ri + 1] - r0;
      sub.kv_tokens = col_cuts[ci + 1] - c0;
      const std::vector<Slice> slices = ShiftSlices(c.slices, r0, c0);
      AttendBackward(b.dq.data() + r0 * s.heads * d, b.dkv.data() + c0 * 2 * s.kv_heads * d,
                     q.data() + r0 * s.heads * d * bytes,
                     kv.data() + c0 * 2 * s.kv_heads * d * bytes,
                     d_o.data() + r0 * s.heads * d * bytes, lse.data() + r0 * s.heads,
                     delta.data() + r0 * s.heads, c.dtype, sub, slices, c.scale);
    }
  }
  return b;
}

constexpr int kRandomCases = 150;

void CheckForwardMatchesReference(DType dtype, uint64_t first_seed) {
  for (uint64_t seed = first_seed; seed < first_seed + kRandomCases; ++seed) {
    const Case c = RandomCase(seed, dtype);
    SCOPED_TRACE(Describe(seed, c));
    const Reference r = ComputeReference(c);
    const Forward f = RunForward(c);
    ExpectClose(f.o, r.o, "O", Tolerance(dtype));
    ExpectClose(f.lse, r.lse, "LSE", Tolerance(dtype));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(AttendForward, MatchesTheDenseReferenceInFp32) {
  CheckForwardMatchesReference(DType::kFloat32, 1000);
}

TEST(AttendForward, MatchesTheDenseReferenceInBf16) {
  CheckForwardMatchesReference(DType::kBFloat16, 2000);
}

TEST(AttendForward, MergingColumnTilesEqualsOneCallOverTheWholeTile) {
  for (uint64_t seed = 3000; seed < 3000 + kRandomCases; ++seed) {
    const DType dtype = seed % 2 == 0 ? DType::kFloat32 : DType::kBFloat16;
    const Case c = RandomCase(seed, dtype);
    SCOPED_TRACE(Describe(seed, c));
    std::mt19937_64 rng(seed * 7919);
    const std::vector<int64_t> cuts =
        RandomSplit(rng, c.shape.kv_tokens, std::uniform_int_distribution<int64_t>(2, 3)(rng));
    const Reference r = ComputeReference(c);
    const Forward whole = RunForward(c);
    for (bool reverse : {false, true}) {
      const Forward split = RunSplitForward(c, cuts, reverse);
      ExpectClose(split.o, r.o, reverse ? "O (reversed)" : "O", Tolerance(dtype));
      ExpectClose(split.lse, r.lse, reverse ? "LSE (reversed)" : "LSE", Tolerance(dtype));
      for (size_t i = 0; i < whole.o.size(); ++i) {
        ASSERT_NEAR(split.o[i], whole.o[i], 1e-5f * (1.0f + std::abs(whole.o[i]))) << "O " << i;
      }
      for (size_t i = 0; i < whole.lse.size(); ++i) {
        if (std::isinf(whole.lse[i])) {
          ASSERT_EQ(split.lse[i], whole.lse[i]) << "LSE " << i;
        } else {
          ASSERT_NEAR(split.lse[i], whole.lse[i], 1e-5f * (1.0f + std::abs(whole.lse[i])));
        }
      }
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(AttendForward, RowsTheTileDoesNotAllowKeepTheirAccumulators) {
  Case c = RandomCase(4000, DType::kFloat32);
  c.shape.q_tokens = 4;
  c.shape.kv_tokens = 5;
  c.shape.heads = 2;
  c.shape.kv_heads = 1;
  c.shape.head_dim = 3;
  c.q.assign(4 * 2 * 3, 0.5f);
  c.kv.assign(5 * 2 * 1 * 3, 0.25f);
  // Only row 1 is allowed, columns [1, 3).
  c.slices = {Slice{.row_begin = 1, .row_end = 2, .lo = {1, 0}, .hi = {3, 0}}};
  std::vector<float> o(4 * 2 * 3, 7.0f);
  std::vector<float> lse(4 * 2, 1.5f);
  const std::vector<std::byte> q = Encode(c.q, c.dtype);
  const std::vector<std::byte> kv = Encode(c.kv, c.dtype);
  AttendForward(o.data(), lse.data(), q.data(), kv.data(), c.dtype, c.shape, c.slices, 1.0f);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      if (i == 1) {
        // Merged: every score is 3 * 0.5 * 0.25 = 0.375, so the tile lse is 0.375 + log 2; v =
        // 0.25.
        const double tile_lse = 0.375 + std::log(2.0);
        const double merged =
            std::max(1.5, tile_lse) + std::log1p(std::exp(-std::abs(1.5 - tile_lse)));
        EXPECT_NEAR(lse[U(i * 2 + h)], merged, 1e-6);
        const double expected_o = 7.0 * std::exp(1.5 - merged) + 0.25 * std::exp(tile_lse - merged);
        for (int64_t k = 0; k < 3; ++k) EXPECT_NEAR(o[U((i * 2 + h) * 3 + k)], expected_o, 1e-6);
      } else {
        EXPECT_EQ(lse[U(i * 2 + h)], 1.5f);
        for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(o[U((i * 2 + h) * 3 + k)], 7.0f);
      }
    }
  }
}

TEST(AttendForward, FullyMaskedRowsGiveZeroOutputAndNegativeInfinityLse) {
  for (uint64_t seed = 5000; seed < 5010; ++seed) {
    Case c = RandomCase(seed, seed % 2 == 0 ? DType::kFloat32 : DType::kBFloat16);
    SCOPED_TRACE(Describe(seed, c));
    // No slice, slices outside the tile, and empty slices (hi <= lo).
    c.slices = {
        Slice{.row_begin = 0, .row_end = c.shape.q_tokens, .lo = {5, 0}, .hi = {5, 0}},
        Slice{.row_begin = 0,
              .row_end = c.shape.q_tokens,
              .lo = {c.shape.kv_tokens, 0},
              .hi = {c.shape.kv_tokens + 9, 0}},
        Slice{.row_begin = 0, .row_end = c.shape.q_tokens, .lo = {-9, 0}, .hi = {0, 0}},
        Slice{.row_begin = c.shape.q_tokens,
              .row_end = c.shape.q_tokens + 5,
              .lo = {0, 0},
              .hi = {c.shape.kv_tokens, 0}},
        Slice{.row_begin = 0, .row_end = c.shape.q_tokens, .lo = {3, 1}, .hi = {2, 1}},
    };
    const Forward f = RunForward(c);
    for (float v : f.o) ASSERT_EQ(v, 0.0f);
    for (float v : f.lse) ASSERT_EQ(v, -kInf);
  }
}

void CheckBackwardMatchesReference(DType dtype, uint64_t first_seed, bool split) {
  for (uint64_t seed = first_seed; seed < first_seed + kRandomCases; ++seed) {
    const Case c = RandomCase(seed, dtype);
    SCOPED_TRACE(Describe(seed, c));
    std::mt19937_64 rng(seed * 104729);
    const std::vector<int64_t> row_cuts =
        split ? RandomSplit(rng, c.shape.q_tokens, 2) : std::vector<int64_t>{0, c.shape.q_tokens};
    const std::vector<int64_t> col_cuts =
        split
            ? RandomSplit(rng, c.shape.kv_tokens, std::uniform_int_distribution<int64_t>(2, 3)(rng))
            : std::vector<int64_t>{0, c.shape.kv_tokens};
    const Reference r = ComputeReference(c);
    const Backward b = RunBackward(c, r, row_cuts, col_cuts);
    ExpectClose(b.dq, r.dq, "dQ", Tolerance(dtype));
    ExpectClose(b.dkv, r.dkv, "dKV", Tolerance(dtype));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(AttendBackward, MatchesTheDenseReferenceInFp32) {
  CheckBackwardMatchesReference(DType::kFloat32, 6000, false);
}

TEST(AttendBackward, MatchesTheDenseReferenceInBf16) {
  CheckBackwardMatchesReference(DType::kBFloat16, 7000, false);
}

TEST(AttendBackward, TilesSplitAcrossRowsAndColumnsSumToTheReference) {
  CheckBackwardMatchesReference(DType::kFloat32, 8000, true);
  CheckBackwardMatchesReference(DType::kBFloat16, 9000, true);
}

TEST(AttendBackward, FullyMaskedRowsGiveZeroGradients) {
  Case c = RandomCase(10000, DType::kFloat32);
  SCOPED_TRACE(Describe(10000, c));
  // Only the first row attends; every other row is masked and has LSE = -inf.
  c.slices = {Slice{.row_begin = 0, .row_end = 1, .lo = {0, 0}, .hi = {1, 0}}};
  const Reference r = ComputeReference(c);
  const Backward b = RunBackward(c, r, {0, c.shape.q_tokens}, {0, c.shape.kv_tokens});
  ExpectClose(b.dq, r.dq, "dQ", Tolerance(c.dtype));
  ExpectClose(b.dkv, r.dkv, "dKV", Tolerance(c.dtype));
  const int64_t row = c.shape.heads * c.shape.head_dim;
  for (size_t i = U(row); i < b.dq.size(); ++i) ASSERT_EQ(b.dq[i], 0.0f) << i;
  const int64_t kv_row = 2 * c.shape.kv_heads * c.shape.head_dim;
  for (size_t i = U(kv_row); i < b.dkv.size(); ++i) ASSERT_EQ(b.dkv[i], 0.0f) << i;

  // With no allowed column at all, everything stays zero even though the slices cover rows.
  c.slices = {Slice{.row_begin = 0, .row_end = c.shape.q_tokens, .lo = {4, 1}, .hi = {4, 1}}};
  const Reference empty = ComputeReference(c);
  const Backward none = RunBackward(c, empty, {0, c.shape.q_tokens}, {0, c.shape.kv_tokens});
  for (float v : none.dq) ASSERT_EQ(v, 0.0f);
  for (float v : none.dkv) ASSERT_EQ(v, 0.0f);
}

TEST(AttendBackward, RowsWithNegativeInfinityLseContributeNothingEvenIfAllowed) {
  Case c = RandomCase(11000, DType::kFloat32);
  c.slices = {Slice{
      .row_begin = 0, .row_end = c.shape.q_tokens, .lo = {0, 0}, .hi = {c.shape.kv_tokens, 0}}};
  const TileShape& s = c.shape;
  const std::vector<std::byte> q = Encode(c.q, c.dtype);
  const std::vector<std::byte> kv = Encode(c.kv, c.dtype);
  const std::vector<std::byte> d_o = Encode(c.d_o, c.dtype);
  const std::vector<float> lse(U(s.q_tokens * s.heads), -kInf);
  const std::vector<float> delta(U(s.q_tokens * s.heads), 0.5f);
  std::vector<float> dq(U(s.q_tokens * s.heads * s.head_dim), 0.0f);
  std::vector<float> dkv(U(s.kv_tokens * 2 * s.kv_heads * s.head_dim), 0.0f);
  AttendBackward(dq.data(), dkv.data(), q.data(), kv.data(), d_o.data(), lse.data(), delta.data(),
                 c.dtype, s, c.slices, c.scale);
  for (float v : dq) ASSERT_EQ(v, 0.0f);
  for (float v : dkv) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace dcp
