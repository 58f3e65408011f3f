// SPDX-License-Identifier: Apache-2.0
// Attention masks of one sequence, as lists of slices (see docs/mask_spec.md).
//
// A slice covers a row range [row_begin, row_end) and, for each row i in it, the column interval
// [lo(i), hi(i)) where lo and hi are affine in i with slope 0 or 1. Any number of slices may cover
// a row, so any number of intervals per row can be expressed. A Mask is normalized on construction:
// columns are clipped to [0, length), empty rows are dropped and the intervals of one row never
// overlap. That makes the number of allowed (q, k) pairs in any rectangle an exact sum of clipped
// trapezoids, computed in O(slices) whatever the rectangle's size, without materialising the mask.
//
// Masks are immutable values; sharing one between threads is safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dcp/status.h"

namespace dcp {

// Longest sequence dcp accepts, in tokens. Keeps every area and FLOP count far from int64 overflow.
inline constexpr int64_t kMaxSequenceLength = int64_t{1} << 30;

// Most slices one mask may have: raw slices given to Mask::FromSlices or listed by a spec, the
// slices a family builds for one sequence, and the normalized slices of a Mask. Memory and time
// grow with the slices, so a spec such as modality:image=5 on a 2^30-token sequence (4 * 10^8
// slices) is refused instead of exhausting memory. Realistic masks stay far below: a million
// one-token documents fit. See docs/mask_spec.md.
inline constexpr int64_t kMaxMaskSlices = int64_t{1} << 20;

// A column position that moves with the row: value(row) = base + slope * row, slope 0 or 1.
struct AffineColumn {
  int64_t base = 0;
  int64_t slope = 0;  // 0: a fixed column; 1: moves with the row

  int64_t At(int64_t row) const { return base + slope * row; }
  friend bool operator==(const AffineColumn&, const AffineColumn&) = default;
};

struct Slice {
  int64_t row_begin = 0;  // first row
  int64_t row_end = 0;    // one past the last row
  AffineColumn lo;        // first allowed column of row i is lo.At(i)
  AffineColumn hi;        // one past the last allowed column of row i is hi.At(i)

  friend bool operator==(const Slice&, const Slice&) = default;
};

class Mask {
 public:
  // Builds the normalized mask of a sequence of `length` tokens from slices that may overlap, be
  // empty on some rows or reach outside [0, length) in columns (columns outside the sequence do not
  // exist, so they are clipped away by definition). Returns InvalidArgument if length is not in
  // [1, kMaxSequenceLength], a slice's rows are not inside [0, length), a slope is not 0 or 1, a
  // base is so large that it cannot describe a column of this sequence, or there are more than
  // kMaxMaskSlices slices, given or normalized. Costs about (n + k) log n for n slices given and k
  // normalized, however much they overlap (src/mask/normalize.cc gives the exact bound).
  static Result<Mask> FromSlices(int64_t length, std::span<const Slice> slices);

  int64_t length() const { return length_; }
  // Normalized slices, sorted by (row_begin, lo at row_begin). On every row each slice is non-empty
  // and inside [0, length), and no two slices overlap.
  const std::vector<Slice>& slices() const { return slices_; }

  // Number of allowed (q, k) pairs with q in [q0, q1) and k in [k0, k1); 0 for an empty rectangle.
  // Cost O(slices), independent of the rectangle's size.
  int64_t Area(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;
  // Number of allowed pairs of the whole mask.
  int64_t TotalArea() const { return Area(0, length_, 0, length_); }

  friend bool operator==(const Mask&, const Mask&) = default;

 private:
  Mask(int64_t length, std::vector<Slice> slices) : length_(length), slices_(std::move(slices)) {}

  int64_t length_ = 0;
  std::vector<Slice> slices_;
};

// Allowed pairs of one slice inside the rectangle, columns as given (no clipping to a sequence).
// REQUIRES: lo.At(i) <= hi.At(i) is not needed; rows where hi <= lo count zero.
int64_t SliceArea(const Slice& slice, int64_t q0, int64_t q1, int64_t k0, int64_t k1);

// Number of allowed pairs of the causal mask of a sequence of `length` tokens: length*(length+1)/2.
inline int64_t CausalArea(int64_t length) { return length * (length + 1) / 2; }

enum class MaskFamily {
  kCausal,           // row i attends to [0, i]
  kFull,             // bidirectional: every row attends to the whole sequence
  kSlidingWindow,    // row i attends to the last `window` tokens up to itself
  kLambda,           // sink tokens plus a sliding window (StreamingLLM's Λ shape)
  kCausalBlockwise,  // in-context learning: first block, local window, last block sees everything
  kSharedQuestion,   // a causal question, then answers that see the question and themselves
  kDocuments,        // causal inside each of several documents packed into one sequence
  kModality,         // text causal, image spans bidirectional
  kExplicit,         // slices given explicitly (the JSON form)
};

std::string_view ToString(MaskFamily family);

// A parsed mask specification: a family and its parameters. It does not know the sequence length;
// Build(length) makes the Mask of one sequence. The text forms are specified in docs/mask_spec.md.
// Fields that do not belong to `family` keep their defaults.
struct MaskSpec {
  MaskFamily family = MaskFamily::kCausal;

  int64_t window = 4096;  // sliding-window, lambda: tokens a row sees up to itself, >= 1
  int64_t sink = 64;      // lambda: leading tokens every row sees, >= 0
  int64_t block = 256;    // causal-blockwise: block size in tokens, >= 1
  int64_t local = 2;      // causal-blockwise: blocks of causal look-back besides the first, >= 0
  double question = 0.2;  // shared-question: share of the sequence that is the question, [0, 1)
  int64_t answers = 4;    // shared-question: number of answers, >= 1

  // documents: either explicit lengths (tokens past their sum form one more document) or a count
  // of near-equal documents. Exactly one of the two is set.
  std::vector<int64_t> document_lengths;
  int64_t document_count = 0;

  // modality: either explicit image spans [begin, end), or a periodic layout of `text_tokens` text
  // tokens followed by `image_tokens` image tokens, repeated to the end of the sequence.
  std::vector<std::pair<int64_t, int64_t>> image_spans;
  int64_t text_tokens = 0;
  int64_t image_tokens = 0;

  std::vector<Slice> slices;  // explicit: rows and columns in tokens of the sequence

  // Parses a text spec ("causal", "lambda:sink=64,window=4096", ...) or, when the text starts with
  // '{', the JSON form. Errors name the problem and the offending value.
  static Result<MaskSpec> Parse(std::string_view text);
  // The canonical text of this spec; Parse(ToString()) gives back an equal spec.
  std::string ToString() const;
  // The mask of one sequence of `length` tokens. Fails when the spec cannot describe a sequence
  // of that length (documents longer than it, an image span or explicit slice past its end).
  Result<Mask> Build(int64_t length) const;

  friend bool operator==(const MaskSpec&, const MaskSpec&) = default;
};

}  // namespace dcp
