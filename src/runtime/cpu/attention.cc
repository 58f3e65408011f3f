// SPDX-License-Identifier: Apache-2.0
// CPU attention kernels and bf16 numbers (see include/dcp/runtime.h). These kernels are the
// reference the device kernels are tested against, so they favour clarity over speed: one pass
// per row over the row's allowed column ranges, fp32 throughout, inner loops over head_dim kept
// contiguous so the compiler vectorizes them. No threads; each call is independent, so calls on
// distinct output buffers may run concurrently.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dcp/runtime.h"

namespace dcp {

// ---------------------------------------------------------------------------------------------
// Numbers

uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    // Keep the sign and set the quiet bit, so a NaN whose payload sits only in the low 16 bits
    // does not truncate to infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow past the
  // largest finite value carries into the exponent and gives infinity, as rounding should.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

float LoadElement(const std::byte* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: {
      float value;
      std::memcpy(&value, data + i * 4, sizeof(value));
      return value;
    }
    case DType::kBFloat16: {
      uint16_t value;
      std::memcpy(&value, data + i * 2, sizeof(value));
      return Bf16ToFloat(value);
    }
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
  return 0.0f;
}

void StoreElement(std::byte* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(data + i * 4, &value, sizeof(value));
      return;
    case DType::kBFloat16: {
      const uint16_t bits = FloatToBf16(value);
      std::memcpy(data + i * 2, &bits, sizeof(bits));
      return;
    }
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

// ---------------------------------------------------------------------------------------------
// Kernels

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// Independent partial sums in Dot; enough lanes for one AVX2 register of floats.
constexpr int64_t kDotLanes = 8;

// A half-open range of allowed columns of one row, in tile coordinates.
struct ColumnRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Copies `count` elements of `dtype` storage into fp32.
std::vector<float> ToFloat(const std::byte* data, DType dtype, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  switch (dtype) {
    case DType::kFloat32:
      if (count > 0) std::memcpy(out.data(), data, static_cast<size_t>(count) * sizeof(float));
      return out;
    case DType::kBFloat16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, data + i * 2, sizeof(bits));
        out[static_cast<size_t>(i)] = Bf16ToFloat(bits);
      }
      return out;
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
  return out;
}

// The slices that can allow some column of the tile, rows clipped to the tile. lo and hi are
// nondecreasing in the row (slope 0 or 1), so a slice whose hi at its last row is <= 0 or whose lo
// at its first row is >= kv_tokens allows nothing.
std::vector<Slice> RelevantSlices(std::span<const Slice> slices, const TileShape& shape) {
  std::vector<Slice> relevant;
  relevant.reserve(slices.size());
  for (Slice slice : slices) {
    slice.row_begin = std::max<int64_t>(slice.row_begin, 0);
    slice.row_end = std::min(slice.row_end, shape.q_tokens);
    if (slice.row_begin >= slice.row_end) continue;
    if (slice.hi.At(slice.row_end - 1) <= 0 || slice.lo.At(slice.row_begin) >= shape.kv_tokens) {
      continue;
    }
    relevant.push_back(slice);
  }
  return relevant;
}

// Fills `ranges` with the allowed columns of `row`: the union of the slices covering it, clipped
// to [0, kv_tokens), sorted and disjoint (overlapping or touching slices are merged).
void RowRanges(std::span<const Slice> slices, int64_t row, int64_t kv_tokens,
               std::vector<ColumnRange>& ranges) {
  ranges.clear();
  for (const Slice& slice : slices) {
    if (row < slice.row_begin || row >= slice.row_end) continue;
    const int64_t begin = std::max<int64_t>(slice.lo.At(row), 0);
    const int64_t end = std::min(slice.hi.At(row), kv_tokens);
    if (begin < end) ranges.push_back({begin, end});
  }
  if (ranges.size() < 2) return;
  std::sort(ranges.begin(), ranges.end(),
            [](const ColumnRange& a, const ColumnRange& b) { return a.begin < b.begin; });
  size_t kept = 0;
  for (size_t r = 1; r < ranges.size(); ++r) {
    if (ranges[r].begin <= ranges[kept].end) {
      ranges[kept].end = std::max(ranges[kept].end, ranges[r].end);
    } else {
      ranges[++kept] = ranges[r];
    }
  }
  ranges.resize(kept + 1);
}

// a . b over n floats. Fixed lanes of partial sums let the compiler vectorize without
// reassociating (no -ffast-math), and make the result independent of the caller.
inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lanes[kDotLanes] = {};
  int64_t k = 0;
  for (; k + kDotLanes <= n; k += kDotLanes) {
    for (int64_t l = 0; l < kDotLanes; ++l) lanes[l] += a[k + l] * b[k + l];
  }
  float sum = 0.0f;
  for (; k < n; ++k) sum += a[k] * b[k];
  for (int64_t l = 0; l < kDotLanes; ++l) sum += lanes[l];
  return sum;
}

// y += alpha * x over n floats.
inline void Axpy(float* __restrict y, float alpha, const float* __restrict x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += alpha * x[k];
}

// Index arithmetic of the layouts at the top of include/dcp/runtime.h.
struct TileLayout {
  int64_t heads;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t group;  // query heads per KV head

  explicit TileLayout(const TileShape& shape)
      : heads(shape.heads),
        kv_heads(shape.kv_heads),
        head_dim(shape.head_dim),
        group(shape.heads / shape.kv_heads) {}

  int64_t Row(int64_t token, int64_t head) const { return token * heads + head; }
  int64_t Q(int64_t token, int64_t head) const { return Row(token, head) * head_dim; }
  int64_t K(int64_t token, int64_t kv_head) const {
    return (token * 2 * kv_heads + kv_head) * head_dim;
  }
  int64_t V(int64_t token, int64_t kv_head) const {
    return ((token * 2 + 1) * kv_heads + kv_head) * head_dim;
  }
};

void CheckShape(const TileShape& shape) {
  DCP_CHECK(shape.q_tokens >= 0 && shape.kv_tokens >= 0 && shape.head_dim >= 0,
            "bad tile shape {}x{} head_dim {}", shape.q_tokens, shape.kv_tokens, shape.head_dim);
  DCP_CHECK(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
            "heads {} is not a multiple of kv_heads {}", shape.heads, shape.kv_heads);
}

}  // namespace

void AttendForward(float* o, float* lse, const std::byte* q, const std::byte* kv, DType dtype,
                   const TileShape& shape, std::span<const Slice> slices, float scale) {
  CheckShape(shape);
  const std::vector<Slice> relevant = RelevantSlices(slices, shape);
  if (relevant.empty() || shape.kv_tokens == 0) return;
  const TileLayout at(shape);
  const int64_t d = shape.head_dim;
  const std::vector<float> qf = ToFloat(q, dtype, shape.q_tokens * shape.heads * d);
  const std::vector<float> kvf = ToFloat(kv, dtype, shape.kv_tokens * 2 * shape.kv_heads * d);

  std::vector<ColumnRange> ranges;
  std::vector<float> scores(static_cast<size_t>(shape.kv_tokens));
  std::vector<float> tile_o(static_cast<size_t>(d));
  for (int64_t i = 0; i < shape.q_tokens; ++i) {
    RowRanges(relevant, i, shape.kv_tokens, ranges);
    if (ranges.empty()) continue;
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_head = h / at.group;
      const float* q_row = qf.data() + at.Q(i, h);

      // Scores and their max.
      float row_max = kNegativeInfinity;
      size_t n = 0;
      for (const ColumnRange& range : ranges) {
        for (int64_t j = range.begin; j < range.end; ++j) {
          const float s = scale * Dot(q_row, kvf.data() + at.K(j, kv_head), d);
          scores[n++] = s;
          row_max = std::max(row_max, s);
        }
      }
      // Every score -inf (or NaN) only happens with non-finite inputs; treat it as no column
      // rather than produce NaN from -inf - -inf.
      if (!(row_max > kNegativeInfinity)) continue;

      // Unnormalized tile output and the softmax denominator.
      std::fill(tile_o.begin(), tile_o.end(), 0.0f);
      float sum = 0.0f;
      n = 0;
      for (const ColumnRange& range : ranges) {
        for (int64_t j = range.begin; j < range.end; ++j) {
          const float p = std::exp(scores[n++] - row_max);
          sum += p;
          Axpy(tile_o.data(), p, kvf.data() + at.V(j, kv_head), d);
        }
      }
      const float tile_lse = row_max + std::log(sum);

      // Merge by log-sum-exp into the accumulators.
      float* acc_o = o + at.Q(i, h);
      float& acc_lse = lse[at.Row(i, h)];
      if (!(acc_lse > kNegativeInfinity)) {
        const float inv_sum = 1.0f / sum;
        for (int64_t k = 0; k < d; ++k) acc_o[k] = tile_o[static_cast<size_t>(k)] * inv_sum;
        acc_lse = tile_lse;
      } else {
        const float hi = std::max(acc_lse, tile_lse);
        const float lo = std::min(acc_lse, tile_lse);
        const float new_lse = hi + std::log1p(std::exp(lo - hi));
        const float acc_weight = std::exp(acc_lse - new_lse);
        const float tile_weight = std::exp(tile_lse - new_lse) / sum;
        for (int64_t k = 0; k < d; ++k) {
          acc_o[k] = acc_o[k] * acc_weight + tile_o[static_cast<size_t>(k)] * tile_weight;
        }
        acc_lse = new_lse;
      }
    }
  }
}

void AttendBackward(float* dq, float* dkv, const std::byte* q, const std::byte* kv,
                    const std::byte* d_o, const float* lse, const float* delta, DType dtype,
                    const TileShape& shape, std::span<const Slice> slices, float scale) {
  CheckShape(shape);
  const std::vector<Slice> relevant = RelevantSlices(slices, shape);
  if (relevant.empty() || shape.kv_tokens == 0) return;
  const TileLayout at(shape);
  const int64_t d = shape.head_dim;
  const std::vector<float> qf = ToFloat(q, dtype, shape.q_tokens * shape.heads * d);
  const std::vector<float> dof = ToFloat(d_o, dtype, shape.q_tokens * shape.heads * d);
  const std::vector<float> kvf = ToFloat(kv, dtype, shape.kv_tokens * 2 * shape.kv_heads * d);

  std::vector<ColumnRange> ranges;
  for (int64_t i = 0; i < shape.q_tokens; ++i) {
    RowRanges(relevant, i, shape.kv_tokens, ranges);
    if (ranges.empty()) continue;
    for (int64_t h = 0; h < shape.heads; ++h) {
      const float row_lse = lse[at.Row(i, h)];
      // A row that attended to nothing has no softmax and no gradient.
      if (!(row_lse > kNegativeInfinity)) continue;
      const float row_delta = delta[at.Row(i, h)];
      const int64_t kv_head = h / at.group;
      const float* q_row = qf.data() + at.Q(i, h);
      const float* do_row = dof.data() + at.Q(i, h);
      float* dq_row = dq + at.Q(i, h);
      for (const ColumnRange& range : ranges) {
        for (int64_t j = range.begin; j < range.end; ++j) {
          const float* k_row = kvf.data() + at.K(j, kv_head);
          const float* v_row = kvf.data() + at.V(j, kv_head);
          const float p = std::exp(scale * Dot(q_row, k_row, d) - row_lse);
          const float dp = Dot(do_row, v_row, d);
          const float ds_scaled = scale * p * (dp - row_delta);
          Axpy(dq_row, ds_scaled, k_row, d);
          Axpy(dkv + at.K(j, kv_head), ds_scaled, q_row, d);
          Axpy(dkv + at.V(j, kv_head), p, do_row, d);
        }
      }
    }
  }
}

}  // namespace dcp
