// SPDX-License-Identifier: Apache-2.0
// The dense single-device reference every distributed run is checked against.
#include <algorithm>
#include <cmath>
#include <limits>

#include "dcp/kernels.h"
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
        for (size_t c = 0; c < cols.size(); ++c) {
          for (int64_t d = 0; d < D; ++d) {
            out[d] += p[c] * v_at(cols[c])[d];
            dp[c] += static_cast<double>(d_o[d]) * v_at(cols[c])[d];
          }
        }
        // Delta = rowsum(dO * O) of the output as stored, in the batch's dtype: the backward's O
        // is the forward's stored output, in dcp as in FlashAttention (docs/architecture.md).
        double rowsum = 0;
        for (int64_t d = 0; d < D; ++d) {
          o[d] = static_cast<float>(out[d]);
          const float stored = s.dtype == DType::kBFloat16 ? Bf16ToFloat(FloatToBf16(o[d])) : o[d];
          rowsum += static_cast<double>(d_o[d]) * stored;
        }
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

const char* ToString(Output output) {
  switch (output) {
    case Output::kO:
      return "o";
    case Output::kLse:
      return "lse";
    case Output::kDq:
      return "dq";
    case Output::kDk:
      return "dk";
    case Output::kDv:
      return "dv";
  }
  return "?";
}

namespace {

// The relative tolerance of an output stored in `dtype`, from its unit roundoff u (2^-8 for bf16,
// round to nearest even on 8 significant bits; 2^-24 for fp32). From the stored inputs, which the
// reference reads too, to a stored output there are at most three roundings: a partial result
// converted to the storage dtype before it goes to its owner, a node's sum of partials converted
// again before it crosses the network (Schedule::reduce_in_node), and the output itself. The
// output's own is at most u |e|; the partials' are u times the partials, whose cancellation the
// atol term covers (OutputTolerance). fp32 accumulation in the kernels adds about sqrt(n) 2^-24
// over n terms, below 2^-16 for every n dcp runs. bf16: 3u rounded up to 4u = 2^-6; fp32: the
// accumulation, 2^-16. docs/architecture.md ("Numerics") has the measured margins.
double StorageRtol(DType dtype) {
  return dtype == DType::kBFloat16 ? 4.0 * std::ldexp(1.0, -8) : std::ldexp(1.0, -16);
}

}  // namespace

ElementTolerance OutputTolerance(Output output, DType dtype, const std::vector<float>& expected) {
  if (output == Output::kLse) return {.rtol = 1e-5, .atol = 1e-5};
  double sum_squares = 0;
  int64_t finite = 0;
  for (float x : expected) {
    if (!std::isfinite(x)) continue;
    sum_squares += static_cast<double>(x) * x;
    ++finite;
  }
  const double rms = finite == 0 ? 0.0 : std::sqrt(sum_squares / static_cast<double>(finite));
  const double rtol = StorageRtol(dtype);
  return {.rtol = rtol, .atol = rtol * rms};
}

TensorError CompareTensors(const std::vector<float>& actual, const std::vector<float>& expected,
                           ElementTolerance tolerance) {
  TensorError e;
  e.tolerance = tolerance;
  double scale = 0;
  const double inf = std::numeric_limits<double>::infinity();
  const auto count = static_cast<int64_t>(std::min(actual.size(), expected.size()));
  for (int64_t i = 0; i < count; ++i) {
    const double a = actual[i], b = expected[i];
    if (std::isinf(b) && b < 0 && std::isinf(a) && a < 0) continue;
    double error = inf;
    if (!std::isnan(a) && !std::isinf(a) && !std::isinf(b)) {
      error = std::abs(a - b);
      scale = std::max(scale, std::abs(b));
    }
    e.max_abs = std::max(e.max_abs, error);
    const double bound = tolerance.atol + tolerance.rtol * (std::isinf(b) ? 0.0 : std::abs(b));
    const double ratio = error == 0 ? 0.0 : bound > 0 ? error / bound : inf;
    if (ratio > e.worst) {
      e.worst = ratio;
      e.worst_index = i;
    }
  }
  if (actual.size() != expected.size()) e.max_abs = e.worst = inf;
  e.relative = e.max_abs == 0 ? 0 : e.max_abs / std::max(scale, 1e-30);
  return e;
}

const std::vector<float>& OutputOf(const BatchTensors& tensors, Output output) {
  switch (output) {
    case Output::kO:
      return tensors.o;
    case Output::kLse:
      return tensors.lse;
    case Output::kDq:
      return tensors.dq;
    case Output::kDk:
      return tensors.dk;
    case Output::kDv:
      break;
  }
  return tensors.dv;
}

std::vector<TensorError> CompareOutputs(const BatchTensors& run, const BatchTensors& reference,
                                        DType dtype) {
  std::vector<TensorError> errors;
  for (Output output : kOutputs) {
    const std::vector<float>& expected = OutputOf(reference, output);
    errors.push_back(
        CompareTensors(OutputOf(run, output), expected, OutputTolerance(output, dtype, expected)));
  }
  return errors;
}

}  // namespace dcp
