// SPDX-License-Identifier: Apache-2.0
// A dense reference for attention masks: the L x L boolean matrix of a mask, materialised token by
// token straight from the definitions in docs/mask_spec.md, with rectangle counts from 2D prefix
// sums. It shares no code with src/mask (it never calls MaskSpec::Build or Mask::FromSlices), so
// tests can check the slice arithmetic of dcp::Mask against it. Meant for short sequences (up to a
// few hundred tokens); memory is O(L^2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dcp/mask.h"

namespace dcp::testing {

class DenseMask {
 public:
  // `cells` holds row-major flags, cells[q * length + k] != 0 when row q may attend to column k.
  // REQUIRES: length >= 0, cells.size() == length * length.
  DenseMask(int64_t length, std::vector<uint8_t> cells)
      : length_(length), cells_(std::move(cells)), prefix_(Index(length, length) + 1, 0) {
    // prefix_[(q, k)] with stride length + 1 = allowed cells in rows [0, q), columns [0, k).
    const int64_t stride = length_ + 1;
    for (int64_t q = 0; q < length_; ++q) {
      int64_t row = 0;
      for (int64_t k = 0; k < length_; ++k) {
        row += allowed(q, k) ? 1 : 0;
        prefix_[static_cast<size_t>((q + 1) * stride + k + 1)] =
            prefix_[static_cast<size_t>(q * stride + k + 1)] + row;
      }
    }
  }

  // The mask whose cell (q, k) is allowed(q, k), a callable bool(int64_t q, int64_t k).
  template <typename Allowed>
  static DenseMask FromPredicate(int64_t length, Allowed allowed) {
    std::vector<uint8_t> cells(static_cast<size_t>(length * length), 0);
    for (int64_t q = 0; q < length; ++q) {
      for (int64_t k = 0; k < length; ++k) {
        cells[static_cast<size_t>(q * length + k)] = allowed(q, k) ? 1 : 0;
      }
    }
    return DenseMask(length, std::move(cells));
  }

  int64_t length() const { return length_; }

  // Whether row q may attend to column k; false outside the sequence.
  bool allowed(int64_t q, int64_t k) const {
    if (q < 0 || q >= length_ || k < 0 || k >= length_) return false;
    return cells_[static_cast<size_t>(q * length_ + k)] != 0;
  }

  // Allowed cells with q in [q0, q1) and k in [k0, k1), the rectangle clipped to the sequence;
  // 0 for an empty rectangle. O(1).
  int64_t Area(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    q0 = std::clamp<int64_t>(q0, 0, length_);
    q1 = std::clamp<int64_t>(q1, 0, length_);
    k0 = std::clamp<int64_t>(k0, 0, length_);
    k1 = std::clamp<int64_t>(k1, 0, length_);
    if (q0 >= q1 || k0 >= k1) return 0;
    return P(q1, k1) - P(q0, k1) - P(q1, k0) + P(q0, k0);
  }

  // The same count by visiting every cell; O(rectangle). Checks Area itself.
  int64_t AreaByLoop(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    int64_t total = 0;
    for (int64_t q = std::max<int64_t>(q0, 0); q < std::min(q1, length_); ++q) {
      for (int64_t k = std::max<int64_t>(k0, 0); k < std::min(k1, length_); ++k) {
        total += allowed(q, k) ? 1 : 0;
      }
    }
    return total;
  }

  int64_t TotalArea() const { return Area(0, length_, 0, length_); }

  // Row q drawn as text: 'x' for an allowed column, '.' for a masked one.
  std::string Row(int64_t q) const {
    std::string row;
    for (int64_t k = 0; k < length_; ++k) row += allowed(q, k) ? 'x' : '.';
    return row;
  }

 private:
  size_t Index(int64_t q, int64_t k) const { return static_cast<size_t>(q * (length_ + 1) + k); }
  int64_t P(int64_t q, int64_t k) const { return prefix_[Index(q, k)]; }

  int64_t length_;
  std::vector<uint8_t> cells_;
  std::vector<int64_t> prefix_;
};

// The union over `slices` of columns [lo(i), hi(i)) of each row i of each slice, with columns
// clipped to [0, length): the meaning of a raw slice list (docs/mask_spec.md, "JSON form").
// Rows outside [0, length) are ignored.
inline DenseMask DenseFromSlices(int64_t length, std::span<const Slice> slices) {
  std::vector<uint8_t> cells(static_cast<size_t>(length * length), 0);
  for (const Slice& s : slices) {
    for (int64_t i = std::max<int64_t>(s.row_begin, 0); i < std::min(s.row_end, length); ++i) {
      const int64_t lo = std::max<int64_t>(s.lo.base + s.lo.slope * i, 0);
      const int64_t hi = std::min(s.hi.base + s.hi.slope * i, length);
      for (int64_t k = lo; k < hi; ++k) cells[static_cast<size_t>(i * length + k)] = 1;
    }
  }
  return DenseMask(length, std::move(cells));
}

// For each token of a `documents` spec, the first token of its document. REQUIRES: the listed
// lengths sum to at most `length`, and count <= length.
inline std::vector<int64_t> DocumentStarts(const MaskSpec& spec, int64_t length) {
  std::vector<int64_t> start(static_cast<size_t>(length), 0);
  if (spec.document_count > 0) {
    const int64_t n = spec.document_count;
    for (int64_t d = 0; d < n; ++d) {
      for (int64_t t = d * length / n; t < (d + 1) * length / n; ++t) {
        start[static_cast<size_t>(t)] = d * length / n;
      }
    }
    return start;
  }
  int64_t begin = 0;
  for (int64_t len : spec.document_lengths) {
    for (int64_t t = begin; t < begin + len; ++t) start[static_cast<size_t>(t)] = begin;
    begin += len;
  }
  // Tokens after the listed documents form one more document.
  for (int64_t t = begin; t < length; ++t) start[static_cast<size_t>(t)] = begin;
  return start;
}

// For each token of a `modality` spec, one past the end of its image, or -1 for a text token.
// REQUIRES: every image span ends at or before `length`.
inline std::vector<int64_t> ImageEnds(const MaskSpec& spec, int64_t length) {
  std::vector<int64_t> end(static_cast<size_t>(length), -1);
  for (const auto& [b, e] : spec.image_spans) {
    for (int64_t t = b; t < e; ++t) end[static_cast<size_t>(t)] = e;
  }
  if (spec.image_tokens > 0) {
    const int64_t period = spec.text_tokens + spec.image_tokens;
    for (int64_t t = 0; t < length; ++t) {
      const int64_t offset = t % period;  // text first, then the image
      if (offset >= spec.text_tokens) {
        end[static_cast<size_t>(t)] = std::min(length, t - offset + period);
      }
    }
  }
  return end;
}

// The mask of `spec` on a sequence of `length` tokens, each cell decided on its own from the table
// in docs/mask_spec.md. REQUIRES: Build(length) of the spec succeeds (lengths and spans fit).
inline DenseMask DenseFromSpec(const MaskSpec& spec, int64_t length) {
  const int64_t n = length;
  switch (spec.family) {
    case MaskFamily::kCausal:
      return DenseMask::FromPredicate(n, [](int64_t i, int64_t k) { return k <= i; });
    case MaskFamily::kFull:
      return DenseMask::FromPredicate(n, [](int64_t, int64_t) { return true; });
    case MaskFamily::kSlidingWindow:
      return DenseMask::FromPredicate(
          n, [w = spec.window](int64_t i, int64_t k) { return i - w + 1 <= k && k <= i; });
    case MaskFamily::kLambda:
      return DenseMask::FromPredicate(n, [s = spec.sink, w = spec.window](int64_t i, int64_t k) {
        const bool sink = k < std::min(s, i + 1);
        const bool window = i - w + 1 <= k && k <= i;
        return sink || window;
      });
    case MaskFamily::kCausalBlockwise: {
      const int64_t b = spec.block, local = spec.local;
      const int64_t blocks = (n + b - 1) / b;
      return DenseMask::FromPredicate(n, [=](int64_t i, int64_t k) {
        const int64_t block = i / b;
        if (block == 0 || block == blocks - 1) return k <= i;
        const bool first_block = k < b;
        const bool local_window = std::max(b, i - local * b) <= k && k <= i;
        return first_block || local_window;
      });
    }
    case MaskFamily::kSharedQuestion: {
      const auto q = static_cast<int64_t>(std::floor(spec.question * static_cast<double>(n)));
      const int64_t answers = spec.answers;
      const int64_t answer_len = (n - q) / answers;
      return DenseMask::FromPredicate(n, [=](int64_t i, int64_t k) {
        if (i < q) return k <= i;
        // Answers 0 .. answers-2 have answer_len tokens; the last one takes the rest.
        const int64_t a =
            answer_len == 0 ? answers - 1 : std::min((i - q) / answer_len, answers - 1);
        const int64_t a0 = q + a * answer_len;
        return k < q || (a0 <= k && k <= i);
      });
    }
    case MaskFamily::kDocuments: {
      const std::vector<int64_t> start = DocumentStarts(spec, n);
      return DenseMask::FromPredicate(n, [&start](int64_t i, int64_t k) {
        return start[static_cast<size_t>(i)] <= k && k <= i;
      });
    }
    case MaskFamily::kModality: {
      const std::vector<int64_t> image_end = ImageEnds(spec, n);
      return DenseMask::FromPredicate(n, [&image_end](int64_t i, int64_t k) {
        const int64_t e = image_end[static_cast<size_t>(i)];
        return e >= 0 ? k < e : k <= i;
      });
    }
    case MaskFamily::kExplicit:
      return DenseFromSlices(n, spec.slices);
  }
  return DenseMask(0, {});
}

}  // namespace dcp::testing
