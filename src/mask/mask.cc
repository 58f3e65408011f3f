// SPDX-License-Identifier: Apache-2.0
// Mask normalization and exact rectangle areas.
//
// Normalization cuts the rows into segments on which every comparison between two endpoints
// (the lo and hi of every slice, and the sequence bounds 0 and length) keeps its sign. Two affine
// columns with slopes 0 and 1 change order at most once, at a row c where they are equal, so
// cutting at c and c + 1 is enough. Inside a segment the union of intervals can then be computed
// once, at its first row, and its result holds for every row of the segment with the same affine
// endpoints.
#include "dcp/mask.h"

#include <algorithm>
#include <limits>

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

// Adds the rows strictly inside (begin, end) where f and g change order: c and c + 1, where c is
// the row at which they are equal.
void AddCrossings(const AffineColumn& f, const AffineColumn& g, int64_t begin, int64_t end,
                  std::vector<int64_t>* cuts) {
  if (f.slope == g.slope) return;
  const int64_t c = f.slope == 1 ? g.base - f.base : f.base - g.base;
  for (int64_t row : {c, c + 1}) {
    if (row > begin && row < end) cuts->push_back(row);
  }
}

// The endpoint clipped to [0, length) on a segment where its order against 0 and length is fixed.
AffineColumn ClipToSequence(const AffineColumn& f, int64_t row, int64_t length) {
  const int64_t v = f.At(row);
  if (v < 0) return Constant(0);
  if (v > length) return Constant(length);
  return f;
}

struct Interval {
  AffineColumn lo, hi;
};

// Appends the normalized slices of rows [begin, end), on which `active` slices cover every row and
// all endpoint comparisons keep their sign. Extends slices of `out` that end at `begin` with the
// same endpoints instead of starting new ones.
void EmitSegment(int64_t begin, int64_t end, int64_t length,
                 const std::vector<const Slice*>& active, std::vector<Slice>* out,
                 size_t open_from) {
  std::vector<Interval> intervals;
  intervals.reserve(active.size());
  for (const Slice* s : active) {
    Interval iv{ClipToSequence(s->lo, begin, length), ClipToSequence(s->hi, begin, length)};
    if (iv.hi.At(begin) > iv.lo.At(begin)) intervals.push_back(iv);
  }
  std::sort(intervals.begin(), intervals.end(), [begin](const Interval& a, const Interval& b) {
    return a.lo.At(begin) < b.lo.At(begin);
  });
  std::vector<Interval> merged;
  for (const Interval& iv : intervals) {
    if (!merged.empty() && iv.lo.At(begin) <= merged.back().hi.At(begin)) {
      if (iv.hi.At(begin) > merged.back().hi.At(begin)) merged.back().hi = iv.hi;
    } else {
      merged.push_back(iv);
    }
  }
  for (const Interval& iv : merged) {
    bool extended = false;
    for (size_t k = open_from; k < out->size(); ++k) {
      Slice& s = (*out)[k];
      if (s.row_end == begin && s.lo == iv.lo && s.hi == iv.hi) {
        s.row_end = end;
        extended = true;
        break;
      }
    }
    if (!extended) out->push_back(Slice{begin, end, iv.lo, iv.hi});
  }
}

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

  // Elementary row intervals: between consecutive slice row boundaries the active set is fixed.
  std::vector<int64_t> bounds = {0, length};
  for (const Slice& s : slices) {
    if (s.row_begin == s.row_end) continue;
    bounds.push_back(s.row_begin);
    bounds.push_back(s.row_end);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());

  std::vector<const Slice*> by_start;
  for (const Slice& s : slices) {
    if (s.row_begin < s.row_end) by_start.push_back(&s);
  }
  std::sort(by_start.begin(), by_start.end(),
            [](const Slice* a, const Slice* b) { return a->row_begin < b->row_begin; });

  std::vector<Slice> out;
  std::vector<const Slice*> active;
  std::vector<AffineColumn> ends;
  std::vector<int64_t> cuts;
  size_t next = 0;
  size_t open_from = 0;  // slices emitted for the previous segment start here
  for (size_t b = 0; b + 1 < bounds.size(); ++b) {
    const int64_t begin = bounds[b], end = bounds[b + 1];
    std::erase_if(active, [begin](const Slice* s) { return s->row_end <= begin; });
    while (next < by_start.size() && by_start[next]->row_begin == begin) {
      active.push_back(by_start[next++]);
    }
    if (active.empty()) {
      open_from = out.size();
      continue;
    }
    ends = {Constant(0), Constant(length)};
    for (const Slice* s : active) {
      ends.push_back(s->lo);
      ends.push_back(s->hi);
    }
    cuts = {begin, end};
    for (size_t i = 0; i < ends.size(); ++i) {
      for (size_t j = i + 1; j < ends.size(); ++j)
        AddCrossings(ends[i], ends[j], begin, end, &cuts);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const size_t before = out.size();
      EmitSegment(cuts[c], cuts[c + 1], length, active, &out, open_from);
      // Slices of this segment are the only ones the next segment may extend; earlier ones that
      // were extended stay open too, so keep the window starting at the first still-open slice.
      size_t first_open = before;
      for (size_t k = open_from; k < before; ++k) {
        if (out[k].row_end == cuts[c + 1]) {
          first_open = k;
          break;
        }
      }
      open_from = first_open;
    }
  }
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
