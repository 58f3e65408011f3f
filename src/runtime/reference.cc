// SPDX-License-Identifier: Apache-2.0
// The dense single-device reference every distributed run is checked against.
#include <algorithm>
#include <cmath>
#include <limits>

#include "dcp/runtime.h"

namespace dcp {
namespace {

// The allowed columns of row i as sorted, disjoint intervals (the mask is normalized).
std::vector<std::pair<int64_t, int64_t>> RowIntervals(const Mask& mask, int64_t i) {
  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const Slice& s : mask.slices()) {
    if (i < s.row_begin || i >= s.row_end) continue;
    const int64_t lo = std::max<int64_t>(0, s.lo.At(i)), hi = std::min(mask.length(), s.hi.At(i));
    if (lo < hi) intervals.emplace_back(lo, hi);
  }
  std::sort(intervals.begin(), intervals.end());
  return intervals;
}

}  // namespace

void DenseAttention(const Batch& batch, double softmax_scale, BatchTensors& t) {
  const AttentionShape& s = batch.shape();
  const int64_t H = s.heads, Hk = s.kv_heads, D = s.head_dim, group = H / Hk;
  const double scale = softmax_scale > 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::fill(t.dq.begin(), t.dq.end(), 0.f);
  std::fill(t.dk.begin(), t.dk.end(), 0.f);
  std::fill(t.dv.begin(), t.dv.end(), 0.f);
  std::vector<double> dk(t.dk.size(), 0), dv(t.dv.size(), 0);
  int64_t base = 0;
  for (size_t seq = 0; seq < batch.seqlens().size(); ++seq) {
    const int64_t L = batch.seqlens()[seq];
    const Mask& mask = batch.masks()[seq];
    for (int64_t i = 0; i < L; ++i) {
      const auto intervals = RowIntervals(mask, i);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t hk = h / group;
        const float* q = &t.q[((base + i) * H + h) * D];
        const float* d_o = &t.d_o[((base + i) * H + h) * D];
        const auto k_at = [&](int64_t j) { return &t.k[((base + j) * Hk + hk) * D]; };
        const auto v_at = [&](int64_t j) { return &t.v[((base + j) * Hk + hk) * D]; };
        std::vector<int64_t> cols;
        std::vector<double> p;
        double max = -std::numeric_limits<double>::infinity();
        for (const auto& [lo, hi] : intervals) {
          for (int64_t j = lo; j < hi; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k_at(j)[d];
            cols.push_back(j);
            p.push_back(scale * dot);
            max = std::max(max, p.back());
          }
        }
        float* o = &t.o[((base + i) * H + h) * D];
        float* lse = &t.lse[(base + i) * H + h];
        if (cols.empty()) {
          std::fill(o, o + D, 0.f);
          *lse = -std::numeric_limits<float>::infinity();
          continue;
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - max));
        for (double& x : p) x /= sum;
        *lse = static_cast<float>(max + std::log(sum));
        std::vector<double> out(D, 0), dp(cols.size(), 0);
        double rowsum = 0;
        for (size_t c = 0; c < cols.size(); ++c) {
          for (int64_t d = 0; d < D; ++d) {
            out[d] += p[c] * v_at(cols[c])[d];
            dp[c] += static_cast<double>(d_o[d]) * v_at(cols[c])[d];
          }
          rowsum += p[c] * dp[c];
        }
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(out[d]);
        std::vector<double> dq(D, 0);
        for (size_t c = 0; c < cols.size(); ++c) {
          const double ds = p[c] * (dp[c] - rowsum);
          const int64_t kv_index = ((base + cols[c]) * Hk + hk) * D;
          for (int64_t d = 0; d < D; ++d) {
            dq[d] += scale * ds * k_at(cols[c])[d];
            dk[kv_index + d] += scale * ds * q[d];
            dv[kv_index + d] += p[c] * d_o[d];
          }
        }
        for (int64_t d = 0; d < D; ++d)
          t.dq[((base + i) * H + h) * D + d] = static_cast<float>(dq[d]);
      }
    }
    base += L;
  }
  for (size_t i = 0; i < dk.size(); ++i) {
    t.dk[i] = static_cast<float>(dk[i]);
    t.dv[i] = static_cast<float>(dv[i]);
  }
}

TensorError CompareTensors(const std::vector<float>& actual, const std::vector<float>& expected) {
  TensorError e;
  double scale = 0;
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    const double a = actual[i], b = expected[i];
    if (std::isinf(b) && b < 0 && std::isinf(a) && a < 0) continue;
    if (std::isnan(a) || std::isinf(a) || std::isinf(b)) {
      e.max_abs = inf;
      continue;
    }
    e.max_abs = std::max(e.max_abs, std::abs(a - b));
    scale = std::max(scale, std::abs(b));
  }
  if (actual.size() != expected.size()) e.max_abs = inf;
  e.relative = e.max_abs == 0 ? 0 : e.max_abs / std::max(scale, 1e-30);
  return e;
}

}  // namespace dcp
