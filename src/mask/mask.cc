// SPDX-License-Identifier: Apache-2.0
// Masks: checking raw slices, normalizing them (mask/normalize.cc) and exact rectangle areas.
#include "dcp/mask.h"

#include <algorithm>
#include <limits>

#include "mask/normalize.h"

namespace dcp {
namespace {

// Bases beyond this cannot describe a column of any accepted sequence; rejecting them keeps all
// arithmetic below far from overflow.
constexpr int64_t kMaxAbsBase = int64_t{1} << 40;

// Sum over integer rows i in [p, q) of max(0, c + s * i), s in {-1, 0, 1}.
int64_t SumPositive(int64_t c, int64_t s, int64_t p, int64_t q) {
  if (p >= q) return 0;
  if (s == 0) return c > 0 ? c * (q - p) : 0;
  if (s == 1) {  // c + i > 0 for i >= 1 - c
    const int64_t first = std::max(p, 1 - c);
    if (first >= q) return 0;
    const int64_t n = q - first;
    return n * ((c + first) + (c + q - 1)) / 2;
  }
  // s == -1: c - i > 0 for i < c
  const int64_t last = std::min(q, c);  // one past
  if (p >= last) return 0;
  const int64_t n = last - p;
  return n * ((c - p) + (c - (last - 1))) / 2;
}

AffineColumn Constant(int64_t value) { return AffineColumn{.base = value, .slope = 0}; }

Status ValidateSlice(const Slice& s, size_t index, int64_t length) {
  if (s.row_begin < 0 || s.row_end > length || s.row_begin > s.row_end) {
    return Status::InvalidArgument(
        fmt::format("slice {}: rows [{}, {}) are not inside the sequence [0, {})", index,
                    s.row_begin, s.row_end, length));
  }
  for (const auto& [name, col] : {std::pair{"lo", s.lo}, std::pair{"hi", s.hi}}) {
    if (col.slope != 0 && col.slope != 1) {
      return Status::InvalidArgument(
          fmt::format("slice {}: {} slope {} is not 0 or 1", index, name, col.slope));
    }
    if (col.base < -kMaxAbsBase || col.base > kMaxAbsBase) {
      return Status::InvalidArgument(
          fmt::format("slice {}: {} base {} is out of range", index, name, col.base));
    }
  }
  return Status::Ok();
}

}  // namespace

int64_t SliceArea(const Slice& slice, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  const int64_t u = std::max(slice.row_begin, q0);
  const int64_t v = std::min(slice.row_end, q1);
  if (u >= v || k0 >= k1) return 0;
  // Columns of a valid slice lie within kMaxAbsBase + kMaxSequenceLength of 0; bounding the
  // rectangle's columns there changes no count and keeps the arithmetic below from overflowing.
  constexpr int64_t kColumnBound = 2 * kMaxAbsBase;
  k0 = std::clamp(k0, -kColumnBound, kColumnBound);
  k1 = std::clamp(k1, -kColumnBound, kColumnBound);
  // count(i) = min(hi(i), k1) - max(lo(i), k0): cut where hi reaches k1 and where lo reaches k0,
  // then each piece is affine in i.
  int64_t cuts[4] = {u, v, v, v};
  if (slice.hi.slope == 1) cuts[1] = std::clamp(k1 - slice.hi.base, u, v);
  if (slice.lo.slope == 1) cuts[2] = std::clamp(k0 - slice.lo.base, u, v);
  std::sort(cuts, cuts + 4);
  int64_t total = 0;
  for (int k = 0; k < 3; ++k) {
    const int64_t p = cuts[k], q = cuts[k + 1];
    if (p >= q) continue;
    const AffineColumn hi = slice.hi.At(p) >= k1 ? Constant(k1) : slice.hi;
    const AffineColumn lo = slice.lo.At(p) >= k0 ? slice.lo : Constant(k0);
    total += SumPositive(hi.base - lo.base, hi.slope - lo.slope, p, q);
  }
  return total;
}

Result<Mask> Mask::FromSlices(int64_t length, std::span<const Slice> slices) {
  if (length < 1 || length > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("sequence length {} is not in [1, {}]", length, kMaxSequenceLength));
  }
  if (slices.size() > static_cast<size_t>(kMaxMaskSlices)) {
    return Status::InvalidArgument(fmt::format("{} slices are more than the limit of {} per mask",
                                               slices.size(), kMaxMaskSlices));
  }
  for (size_t i = 0; i < slices.size(); ++i)
    DCP_RETURN_IF_ERROR(ValidateSlice(slices[i], i, length));

  DCP_ASSIGN_OR_RETURN(std::vector<Slice> out,
                       internal::NormalizeSlices(length, slices, kMaxMaskSlices));
  std::sort(out.begin(), out.end(), [](const Slice& a, const Slice& b) {
    if (a.row_begin != b.row_begin) return a.row_begin < b.row_begin;
    return a.lo.At(a.row_begin) < b.lo.At(b.row_begin);
  });
  return Mask(length, std::move(out));
}

int64_t Mask::Area(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  int64_t total = 0;
  for (const Slice& s : slices_) total += SliceArea(s, q0, q1, k0, k1);
  return total;
}

}  // namespace dcp
