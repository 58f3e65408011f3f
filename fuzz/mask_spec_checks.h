// SPDX-License-Identifier: Apache-2.0
// The checks the two mask spec harnesses (text and JSON form) run on every input: MaskSpec::Parse
// either refuses it with InvalidArgument, or the spec prints to a text that parses back to it and
// builds a Mask for every sequence length, or refuses that length with InvalidArgument.
//
// Built masks are checked against the contract of include/dcp/mask.h: normalized slices inside the
// sequence, sorted, non-empty on every row, and exact rectangle areas. On short sequences the whole
// mask is compared cell by cell with tests/testing/dense_mask.h, a reference written from the table
// of docs/mask_spec.md that shares no code with src/mask.
//
// Lengths: short ones for the dense comparison, then longer ones. The longest ones, up to
// kMaxSequenceLength, which a spec must handle (the CLI applies a spec to any length up to it),
// cost time and memory in proportion to the mask's slices: the text harness leaves them to its own
// harness (mask_spec_long_fuzzer.cc), so that it runs fast; explicit slices are bounded by the
// input size, so the JSON harness builds them at every length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/mask.h"
#include "fuzz_util.h"
#include "testing/dense_mask.h"

namespace dcp::fuzz {

// Lengths at or below this are compared with the dense reference (O(length^2) each).
inline constexpr int64_t kDenseLengthMax = 40;
inline constexpr int64_t kDenseLengths[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 40};
inline constexpr int64_t kLongLengths[] = {1000, 4096};
inline constexpr int64_t kHugeLengths[] = {int64_t{1} << 20, kMaxSequenceLength};

// The structural contract of a normalized mask; O(slices).
inline void CheckNormalized(const MaskSpec& spec, const Mask& mask, int64_t length) {
  DCP_FUZZ_CHECK(mask.length() == length, "'{}': length {} built as {}", spec.ToString(), length,
                 mask.length());
  const std::vector<Slice>& slices = mask.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    DCP_FUZZ_CHECK(0 <= s.row_begin && s.row_begin < s.row_end && s.row_end <= length,
                   "'{}' length {}: slice {} rows [{}, {})", spec.ToString(), length, i,
                   s.row_begin, s.row_end);
    DCP_FUZZ_CHECK((s.lo.slope == 0 || s.lo.slope == 1) && (s.hi.slope == 0 || s.hi.slope == 1),
                   "'{}' length {}: slice {} slopes {} {}", spec.ToString(), length, i, s.lo.slope,
                   s.hi.slope);
    // lo and hi are affine in the row, so holding at the first and last rows means every row.
    for (int64_t row : {s.row_begin, s.row_end - 1}) {
      DCP_FUZZ_CHECK(0 <= s.lo.At(row) && s.lo.At(row) < s.hi.At(row) && s.hi.At(row) <= length,
                     "'{}' length {}: slice {} row {} columns [{}, {})", spec.ToString(), length, i,
                     row, s.lo.At(row), s.hi.At(row));
    }
    if (i > 0) {
      const Slice& p = slices[i - 1];
      const bool sorted =
          p.row_begin < s.row_begin ||
          (p.row_begin == s.row_begin && p.lo.At(p.row_begin) <= s.lo.At(s.row_begin));
      DCP_FUZZ_CHECK(sorted, "'{}' length {}: slices {} and {} out of order", spec.ToString(),
                     length, i - 1, i);
    }
  }
  const int64_t total = mask.TotalArea();
  DCP_FUZZ_CHECK(0 <= total && total <= length * length, "'{}' length {}: total area {}",
                 spec.ToString(), length, total);
  const int64_t mid = length / 2;
  DCP_FUZZ_CHECK(mask.Area(0, mid, 0, length) + mask.Area(mid, length, 0, length) == total &&
                     mask.Area(0, length, 0, mid) + mask.Area(0, length, mid, length) == total,
                 "'{}' length {}: areas of the halves do not add up to {}", spec.ToString(), length,
                 total);
  // Rectangles reaching outside the sequence count only what is inside.
  DCP_FUZZ_CHECK(mask.Area(-length, 2 * length, -length, 2 * length) == total,
                 "'{}' length {}: an enclosing rectangle does not count {}", spec.ToString(),
                 length, total);
}

// Cell by cell against the dense reference, plus the areas of a grid of rectangles.
inline void CheckAgainstDense(const MaskSpec& spec, const Mask& mask, int64_t length) {
  const testing::DenseMask want = testing::DenseFromSpec(spec, length);
  const testing::DenseMask got = testing::DenseFromSlices(length, mask.slices());
  for (int64_t q = 0; q < length; ++q) {
    DCP_FUZZ_CHECK(want.Row(q) == got.Row(q), "'{}' length {} row {}: want {}, built {}",
                   spec.ToString(), length, q, want.Row(q), got.Row(q));
  }
  // Normalized slices never overlap: their areas add up to the union's.
  int64_t sum = 0;
  for (const Slice& s : mask.slices()) sum += SliceArea(s, 0, length, 0, length);
  DCP_FUZZ_CHECK(sum == got.TotalArea(), "'{}' length {}: slices overlap ({} pairs, {} distinct)",
                 spec.ToString(), length, sum, got.TotalArea());
  const int64_t cuts[] = {-1, 0, 1, length / 3, length / 2, length - 1, length, length + 1};
  for (int64_t q0 : cuts) {
    for (int64_t q1 : cuts) {
      for (int64_t k0 : cuts) {
        for (int64_t k1 : cuts) {
          const int64_t expected = q0 < q1 && k0 < k1 ? want.Area(q0, q1, k0, k1) : 0;
          DCP_FUZZ_CHECK(mask.Area(q0, q1, k0, k1) == expected,
                         "'{}' length {}: Area({}, {}, {}, {}) = {}, want {}", spec.ToString(),
                         length, q0, q1, k0, k1, mask.Area(q0, q1, k0, k1), expected);
        }
      }
    }
  }
}

inline void CheckBuild(const MaskSpec& spec, int64_t length) {
  const Result<Mask> mask = spec.Build(length);
  Outcome("mask build", mask.status(), {StatusCode::kInvalidArgument}, spec.ToString());
  if (!mask.ok()) return;
  CheckNormalized(spec, *mask, length);
  if (length <= kDenseLengthMax) CheckAgainstDense(spec, *mask, length);
}

// Which lengths CheckMaskSpec builds a parsed spec for.
enum class Lengths {
  kShort,  // kDenseLengths and kLongLengths
  kAll,    // those and kHugeLengths
  kHuge,   // kHugeLengths only
};

inline void CheckMaskSpec(std::string_view text, Lengths lengths) {
  const Result<MaskSpec> spec = MaskSpec::Parse(text);
  Outcome("mask spec", spec.status(), {StatusCode::kInvalidArgument}, text);
  if (!spec.ok()) return;
  // Parse(ToString()) gives back an equal spec (include/dcp/mask.h).
  const std::string canonical = spec->ToString();
  const Result<MaskSpec> again = MaskSpec::Parse(canonical);
  DCP_FUZZ_CHECK(again.ok(), "canonical text '{}' does not parse: {}", canonical,
                 again.status().ToString());
  DCP_FUZZ_CHECK(*again == *spec, "canonical text '{}' parses to another spec ('{}')", canonical,
                 again->ToString());
  if (lengths != Lengths::kHuge) {
    for (int64_t length : kDenseLengths) CheckBuild(*spec, length);
    for (int64_t length : kLongLengths) CheckBuild(*spec, length);
  }
  if (lengths != Lengths::kShort) {
    for (int64_t length : kHugeLengths) CheckBuild(*spec, length);
  }
  // Explicit slices: also the shortest sequence that holds them all.
  if (spec->family == MaskFamily::kExplicit) {
    int64_t rows = 1;
    for (const Slice& s : spec->slices) rows = std::max(rows, s.row_end);
    CheckBuild(*spec, std::min(rows, kMaxSequenceLength));
  }
}

}  // namespace dcp::fuzz
