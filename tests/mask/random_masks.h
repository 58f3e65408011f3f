// SPDX-License-Identifier: Apache-2.0
// Seeded random inputs for the mask tests: specs of every family, raw slice lists and rectangles,
// plus the comparison of a dcp::Mask against the dense reference over a list of rectangles.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dcp/mask.h"
#include "testing/dense_mask.h"

namespace dcp::testing {

using Rng = std::mt19937_64;

// A uniform integer in [lo, hi].
inline int64_t Uniform(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// True with probability 1 / n.
inline bool OneIn(Rng& rng, int64_t n) { return Uniform(rng, 1, n) == 1; }

struct Rect {
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

inline std::string ToString(const Rect& r) {
  return "rows [" + std::to_string(r.q0) + ", " + std::to_string(r.q1) + ") cols [" +
         std::to_string(r.k0) + ", " + std::to_string(r.k1) + ")";
}

// Rectangles for a sequence of `length` tokens: the whole sequence, ones reaching far outside it,
// empty and reversed ones, single rows, columns and cells, then `count` random ones whose corners
// lie a little outside [0, length) on either side (so some are empty or reversed too).
inline std::vector<Rect> RandomRects(int64_t length, int count, Rng& rng) {
  const int64_t l = length;
  std::vector<Rect> rects = {
      {0, l, 0, l},      {-1000, l + 1000, -1000, l + 1000},
      {-5, 3, -5, 3},    {l - 3, l + 5, l - 3, l + 5},
      {0, 0, 0, l},      {0, l, l, l},
      {l, 0, 0, l},      // reversed rows
      {0, l, l / 2, 0},  // reversed columns
      {l, l + 10, 0, l}, {0, l, -10, 0},
  };
  for (int j = 0; j < count; ++j) {
    const int64_t a = Uniform(rng, -5, l + 5), b = Uniform(rng, -5, l + 5);
    const int64_t c = Uniform(rng, -5, l + 5), d = Uniform(rng, -5, l + 5);
    switch (Uniform(rng, 0, 5)) {
      case 0:  // as drawn: may be empty or reversed
        rects.push_back({a, b, c, d});
        break;
      case 1: {  // one row
        const int64_t q = Uniform(rng, 0, l - 1);
        rects.push_back({q, q + 1, std::min(c, d), std::max(c, d)});
        break;
      }
      case 2: {  // one cell
        const int64_t q = Uniform(rng, 0, l - 1), k = Uniform(rng, 0, l - 1);
        rects.push_back({q, q + 1, k, k + 1});
        break;
      }
      default:
        rects.push_back({std::min(a, b), std::max(a, b), std::min(c, d), std::max(c, d)});
        break;
    }
  }
  return rects;
}

// Checks mask.Area against dense.Area on every rectangle, and the lengths and total areas. Names
// the first rectangle that differs.
inline ::testing::AssertionResult AreasMatch(const Mask& mask, const DenseMask& dense,
                                             std::span<const Rect> rects) {
  if (mask.length() != dense.length()) {
    return ::testing::AssertionFailure()
           << "length " << mask.length() << " vs dense " << dense.length();
  }
  if (mask.TotalArea() != dense.TotalArea()) {
    return ::testing::AssertionFailure()
           << "TotalArea " << mask.TotalArea() << " vs dense count " << dense.TotalArea();
  }
  for (const Rect& r : rects) {
    const int64_t got = mask.Area(r.q0, r.q1, r.k0, r.k1);
    const int64_t want = dense.Area(r.q0, r.q1, r.k0, r.k1);
    if (got != want) {
      return ::testing::AssertionFailure()
             << "Area over " << ToString(r) << " is " << got << ", dense count " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

// A random increasing list of positive lengths that sums to at most `length` (sometimes exactly).
inline std::vector<int64_t> RandomDocumentLengths(int64_t length, Rng& rng) {
  std::vector<int64_t> lengths;
  int64_t left = OneIn(rng, 3) ? length : Uniform(rng, 1, length);
  const int64_t n = Uniform(rng, 1, 6);
  for (int64_t d = 0; d < n && left > 0; ++d) {
    const int64_t len = d + 1 == n ? left : Uniform(rng, 1, left);
    lengths.push_back(len);
    left -= len;
  }
  return lengths;
}

// Random increasing, non-overlapping (possibly adjacent) image spans inside [0, length).
inline std::vector<std::pair<int64_t, int64_t>> RandomImageSpans(int64_t length, Rng& rng) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t at = OneIn(rng, 3) ? 0 : Uniform(rng, 0, length - 1);
  const int64_t n = Uniform(rng, 1, 5);
  for (int64_t s = 0; s < n && at < length; ++s) {
    const int64_t end = OneIn(rng, 4) ? length : Uniform(rng, at + 1, length);
    spans.emplace_back(at, end);
    at = OneIn(rng, 3) ? end : Uniform(rng, end, length);
  }
  return spans;
}

inline double RandomQuestion(Rng& rng) {
  static constexpr double kChoices[] = {0.0, 0.2, 0.25, 0.5, 0.3, 0.7, 0.9, 0.99, 0.999999};
  if (OneIn(rng, 2))
    return kChoices[Uniform(rng, 0, static_cast<int64_t>(std::size(kChoices)) - 1)];
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// A random valid spec of `family` that Build(length) accepts; parameters are drawn around the
// sequence length so that every regime (window longer than the sequence, one block, empty answers,
// one document per token, ...) turns up.
inline MaskSpec RandomSpec(MaskFamily family, int64_t length, Rng& rng) {
  const int64_t l = length;
  MaskSpec spec;
  spec.family = family;
  switch (family) {
    case MaskFamily::kCausal:
    case MaskFamily::kFull:
      break;
    case MaskFamily::kSlidingWindow:
      spec.window = OneIn(rng, 8) ? 1 : Uniform(rng, 1, l + 5);
      break;
    case MaskFamily::kLambda:
      spec.sink = OneIn(rng, 8) ? 0 : Uniform(rng, 0, l + 5);
      spec.window = OneIn(rng, 8) ? 1 : Uniform(rng, 1, l + 5);
      break;
    case MaskFamily::kCausalBlockwise:
      spec.block =
          OneIn(rng, 2) ? Uniform(rng, 1, std::max<int64_t>(1, l / 4)) : Uniform(rng, 1, l + 3);
      spec.local = Uniform(rng, 0, 6);
      break;
    case MaskFamily::kSharedQuestion:
      spec.question = RandomQuestion(rng);
      spec.answers = OneIn(rng, 4) ? Uniform(rng, 1, l + 3) : Uniform(rng, 1, 8);
      break;
    case MaskFamily::kDocuments:
      if (OneIn(rng, 2)) {
        spec.document_count = OneIn(rng, 6) ? l : Uniform(rng, 1, l);
      } else {
        spec.document_lengths = RandomDocumentLengths(l, rng);
      }
      break;
    case MaskFamily::kModality:
      if (OneIn(rng, 2)) {
        spec.image_spans = RandomImageSpans(l, rng);
      } else {
        spec.image_tokens = Uniform(rng, 1, 24);
        spec.text_tokens = OneIn(rng, 4) ? 0 : Uniform(rng, 0, 24);
      }
      break;
    case MaskFamily::kExplicit:
      for (int64_t s = Uniform(rng, 0, 4); s > 0; --s) {
        const int64_t r0 = Uniform(rng, 0, l), r1 = Uniform(rng, r0, l);
        spec.slices.push_back(Slice{r0,
                                    r1,
                                    {Uniform(rng, -l, l), Uniform(rng, 0, 1)},
                                    {Uniform(rng, -l, 2 * l), Uniform(rng, 0, 1)}});
      }
      break;
  }
  return spec;
}

// A random affine column for a sequence of `length` tokens: bases from well below 0 to well past
// `length`, slope 0 or 1.
inline AffineColumn RandomColumn(int64_t length, Rng& rng) {
  return AffineColumn{.base = Uniform(rng, -2 * length - 3, 2 * length + 3),
                      .slope = Uniform(rng, 0, 1)};
}

// A random list of raw slices for Mask::FromSlices: rows inside [0, length] (some empty), columns
// anywhere, often overlapping, some duplicated or nested, some empty on every row.
inline std::vector<Slice> RandomSlices(int64_t length, Rng& rng) {
  std::vector<Slice> slices;
  const int64_t n = Uniform(rng, 0, 8);
  for (int64_t s = 0; s < n; ++s) {
    Slice slice;
    slice.row_begin = Uniform(rng, 0, length);
    slice.row_end = OneIn(rng, 10) ? slice.row_begin : Uniform(rng, slice.row_begin, length);
    slice.lo = RandomColumn(length, rng);
    switch (Uniform(rng, 0, 4)) {
      case 0:  // independent endpoints: often empty on some or all rows
        slice.hi = RandomColumn(length, rng);
        break;
      case 1:  // a band: same slope, positive width
        slice.hi = {slice.lo.base + Uniform(rng, 1, length + 2), slice.lo.slope};
        break;
      case 2:  // a copy or a near copy of an earlier slice
        if (!slices.empty()) {
          slice = slices[static_cast<size_t>(Uniform(rng, 0, s - 1))];
          slice.hi.base += Uniform(rng, -1, 1);
          break;
        }
        [[fallthrough]];
      default:  // causal-like: hi follows the row
        slice.hi = {Uniform(rng, -2, length + 2), 1};
        break;
    }
    slices.push_back(slice);
  }
  return slices;
}

}  // namespace dcp::testing
