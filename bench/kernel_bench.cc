// SPDX-License-Identifier: Apache-2.0
// Forward attention throughput of one full 1024 x 1024 tile (head dim 128, 8 query / 2 KV heads,
// fp32 storage), causal and full, as FLOP/s and as a ratio to the machine's SGEMM from OpenBLAS
// (single-threaded) measured in the same run. Target (issue 5): at least 0.5 of SGEMM.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "dcp/runtime.h"

namespace {

constexpr int64_t kTokens = 1024, kHeads = 8, kKvHeads = 2, kDim = 128;

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void BM_AttendForward(benchmark::State& state, bool causal) {
  const std::vector<float> q = Random(kTokens * kHeads * kDim, 1);
  const std::vector<float> kv = Random(kTokens * 2 * kKvHeads * kDim, 2);
  std::vector<float> o(kTokens * kHeads * kDim), lse(kTokens * kHeads);
  const dcp::Slice slice = causal ? dcp::Slice{0, kTokens, {0, 0}, {1, 1}}
                                  : dcp::Slice{0, kTokens, {0, 0}, {kTokens, 0}};
  const dcp::TileShape shape{kTokens, kTokens, kHeads, kKvHeads, kDim};
  for (auto _ : state) {
    std::fill(o.begin(), o.end(), 0.f);
    std::fill(lse.begin(), lse.end(), -INFINITY);
    dcp::AttendForward(o.data(), lse.data(), reinterpret_cast<const std::byte*>(q.data()),
                       reinterpret_cast<const std::byte*>(kv.data()), dcp::DType::kFloat32, shape,
                       {&slice, 1}, 0.088f);
    benchmark::DoNotOptimize(o.data());
  }
  const double area = causal ? kTokens * (kTokens + 1) / 2.0 : kTokens * double(kTokens);
  state.counters["FLOPS"] =
      benchmark::Counter(4 * area * kDim * kHeads, benchmark::Counter::kIsIterationInvariantRate);
}

// The same multiply-adds as a full tile's two products (S = Q K^T and O = P V) for all heads.
void BM_Sgemm(benchmark::State& state) {
  openblas_set_num_threads(1);
  const std::vector<float> a = Random(kTokens * kDim, 3), b = Random(kTokens * kDim, 4);
  std::vector<float> c(kTokens * kTokens);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kTokens, kTokens, kDim, 1.f, a.data(),
                kDim, b.data(), kDim, 0.f, c.data(), kTokens);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * kTokens * kTokens * kDim,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_AttendForward, full, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttendForward, causal, true)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
