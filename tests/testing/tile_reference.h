// SPDX-License-Identifier: Apache-2.0
// The independent reference of the attention kernel tests: one tile's O, LSE, dQ and dKV in
// double, element by element from the definition of a slice, a full-row softmax and the textbook
// backward, sharing nothing with the kernels' chunking, pieces or GEMMs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dcp/runtime.h"

namespace dcp::testing {

// One tile and its inputs: values exactly representable in `dtype`, in the layouts of runtime.h.
struct TileProblem {
  TileShape shape;
  DType dtype = DType::kFloat32;
  std::vector<Slice> slices;
  float scale = 1.0f;
  std::vector<float> q, kv, d_o;
  // Delta = rowsum(dO * O) from O as stored in `dtype` (DenseAttention's and the executor's
  // definition) instead of the exact rowsum(P * dP) (the kernels are given Delta).
  bool delta_of_stored_o = false;
};

struct TileReference {
  std::vector<double> o, lse, dq, dkv;
};

// The values in `dtype`, packed as the kernels read them.
inline std::vector<std::byte> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> out(values.size() * static_cast<size_t>(BytesPerElement(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    StoreElement(out.data(), dtype, static_cast<int64_t>(i), values[i]);
  }
  return out;
}

inline TileReference ReferenceAttention(const TileProblem& c) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto U = [](int64_t i) { return static_cast<size_t>(i); };
  const TileShape& s = c.shape;
  const int64_t d = s.head_dim;
  const int64_t group = s.heads / s.kv_heads;
  const auto allowed = [&](int64_t i, int64_t j) {
    for (const Slice& slice : c.slices) {
      if (i >= slice.row_begin && i < slice.row_end && j >= slice.lo.base + slice.lo.slope * i &&
          j < slice.hi.base + slice.hi.slope * i) {
        return true;
      }
    }
    return false;
  };
  const auto q = [&](int64_t i, int64_t h, int64_t k) {
    return double{c.q[U((i * s.heads + h) * d + k)]};
  };
  const auto d_o = [&](int64_t i, int64_t h, int64_t k) {
    return double{c.d_o[U((i * s.heads + h) * d + k)]};
  };
  const auto kv_index = [&](int64_t j, int64_t which, int64_t g, int64_t k) {
    return U(((j * 2 + which) * s.kv_heads + g) * d + k);
  };

  TileReference r;
  r.o.assign(U(s.q_tokens * s.heads * d), 0.0);
  r.lse.assign(U(s.q_tokens * s.heads), -kInf);
  r.dq.assign(U(s.q_tokens * s.heads * d), 0.0);
  r.dkv.assign(U(s.kv_tokens * 2 * s.kv_heads * d), 0.0);
  std::vector<double> p(U(s.kv_tokens)), dp(U(s.kv_tokens));
  std::vector<char> row_allowed(U(s.kv_tokens));
  for (int64_t i = 0; i < s.q_tokens; ++i) {
    for (int64_t j = 0; j < s.kv_tokens; ++j) row_allowed[U(j)] = allowed(i, j);
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      double row_max = -kInf;
      for (int64_t j = 0; j < s.kv_tokens; ++j) {
        if (!row_allowed[U(j)]) continue;
        double dot = 0.0;
        for (int64_t k = 0; k < d; ++k) dot += q(i, h, k) * double{c.kv[kv_index(j, 0, g, k)]};
        p[U(j)] = double{c.scale} * dot;
        row_max = std::max(row_max, p[U(j)]);
      }
      if (row_max == -kInf) continue;  // fully masked
      double sum = 0.0;
      for (int64_t j = 0; j < s.kv_tokens; ++j) {
        if (!row_allowed[U(j)]) continue;
        p[U(j)] = std::exp(p[U(j)] - row_max);
        sum += p[U(j)];
      }
      r.lse[U(i * s.heads + h)] = row_max + std::log(sum);
      // P, O, dP and rowsum(P * dP).
      double p_dp = 0.0;
      for (int64_t j = 0; j < s.kv_tokens; ++j) {
        if (!row_allowed[U(j)]) {
          p[U(j)] = 0.0;
          continue;
        }
        p[U(j)] /= sum;
        double dot = 0.0;
        for (int64_t k = 0; k < d; ++k) {
          r.o[U((i * s.heads + h) * d + k)] += p[U(j)] * double{c.kv[kv_index(j, 1, g, k)]};
          dot += d_o(i, h, k) * double{c.kv[kv_index(j, 1, g, k)]};
        }
        dp[U(j)] = dot;
        p_dp += p[U(j)] * dot;
      }
      if (c.delta_of_stored_o) {
        p_dp = 0.0;
        for (int64_t k = 0; k < d; ++k) {
          const auto o = static_cast<float>(r.o[U((i * s.heads + h) * d + k)]);
          const float stored = c.dtype == DType::kBFloat16 ? Bf16ToFloat(FloatToBf16(o)) : o;
          p_dp += d_o(i, h, k) * double{stored};
        }
      }
      for (int64_t j = 0; j < s.kv_tokens; ++j) {
        if (!row_allowed[U(j)]) continue;
        const double ds = double{c.scale} * p[U(j)] * (dp[U(j)] - p_dp);
        for (int64_t k = 0; k < d; ++k) {
          r.dq[U((i * s.heads + h) * d + k)] += ds * double{c.kv[kv_index(j, 0, g, k)]};
          r.dkv[kv_index(j, 0, g, k)] += ds * q(i, h, k);
          r.dkv[kv_index(j, 1, g, k)] += p[U(j)] * d_o(i, h, k);
        }
      }
    }
  }
  return r;
}

}  // namespace dcp::testing
