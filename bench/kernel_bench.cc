// SPDX-License-Identifier: Apache-2.0
// Attention kernel throughput against SGEMM (issue 5): forward and backward of one 1024 x 1024
// tile, head dim 128, causal and full, 8 query / 2 KV heads and 1 / 1, fp32 storage (and one bf16
// case), as FLOP/s; and OpenBLAS SGEMM, single-threaded, on the shapes of the kernels' GEMMs and a
// square 1024^3, in the same run. Every run ends with a table of each kernel's FLOP/s divided by
// SGEMM's. Target: at least 0.5 of SGEMM.
//
// FLOPs count only allowed (query, key) pairs: forward 4 * area * head_dim * heads (S = Q K^T and
// O = P V), backward 10 * area * head_dim * heads (S, dP = dO V^T, dV, dK, dQ). Work the kernel
// spends on masked pairs (the diagonal pieces of a causal tile) is not counted. Rates are per
// CPU second (Google Benchmark's default), so a busy machine slows both sides alike.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dcp/runtime.h"

namespace {

constexpr int64_t kTokens = 1024, kDim = 128;

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<std::byte> Store(const std::vector<float>& values, dcp::DType dtype) {
  std::vector<std::byte> out(values.size() * static_cast<size_t>(dcp::BytesPerElement(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    dcp::StoreElement(out.data(), dtype, static_cast<int64_t>(i), values[i]);
  }
  return out;
}

struct Config {
  bool backward = false;
  bool causal = false;
  int64_t heads = 8;
  int64_t kv_heads = 2;
  dcp::DType dtype = dcp::DType::kFloat32;
};

// One tile's inputs; for the backward also the forward's LSE and Delta = rowsum(O * dO).
struct Tile {
  dcp::TileShape shape;
  dcp::DType dtype;
  dcp::Slice slice;
  float scale;
  std::vector<std::byte> q, kv, d_o;
  std::vector<float> o, lse, delta, dq, dkv;

  explicit Tile(const Config& c)
      : shape{kTokens, kTokens, c.heads, c.kv_heads, kDim},
        dtype(c.dtype),
        slice(c.causal ? dcp::Slice{0, kTokens, {0, 0}, {1, 1}}
                       : dcp::Slice{0, kTokens, {0, 0}, {kTokens, 0}}),
        scale(1.0f / std::sqrt(float{kDim})),
        q(Store(Random(size_t{kTokens} * c.heads * kDim, 1), c.dtype)),
        kv(Store(Random(size_t{kTokens} * 2 * c.kv_heads * kDim, 2), c.dtype)),
        d_o(Store(Random(size_t{kTokens} * c.heads * kDim, 5), c.dtype)),
        o(size_t{kTokens} * c.heads * kDim),
        lse(size_t{kTokens} * c.heads),
        delta(size_t{kTokens} * c.heads),
        dq(o.size()),
        dkv(size_t{kTokens} * 2 * c.kv_heads * kDim) {}

  void Forward() {
    std::fill(o.begin(), o.end(), 0.f);
    std::fill(lse.begin(), lse.end(), -INFINITY);
    dcp::AttendForward(o.data(), lse.data(), q.data(), kv.data(), dtype, shape, {&slice, 1}, scale);
  }
  void PrepareBackward() {
    Forward();
    for (size_t row = 0; row < delta.size(); ++row) {
      double sum = 0;
      for (int64_t k = 0; k < kDim; ++k) {
        const int64_t i = static_cast<int64_t>(row) * kDim + k;
        sum += double{o[static_cast<size_t>(i)]} * dcp::LoadElement(d_o.data(), dtype, i);
      }
      delta[row] = static_cast<float>(sum);
    }
  }
  void Backward() {
    std::fill(dq.begin(), dq.end(), 0.f);
    std::fill(dkv.begin(), dkv.end(), 0.f);
    dcp::AttendBackward(dq.data(), dkv.data(), q.data(), kv.data(), d_o.data(), lse.data(),
                        delta.data(), dtype, shape, {&slice, 1}, scale);
  }
};

void BM_Attend(benchmark::State& state, Config c) {
  Tile tile(c);
  if (c.backward) tile.PrepareBackward();
  for (auto _ : state) {
    if (c.backward) {
      tile.Backward();
      benchmark::DoNotOptimize(tile.dkv.data());
    } else {
      tile.Forward();
      benchmark::DoNotOptimize(tile.o.data());
    }
    benchmark::ClobberMemory();
  }
  const double area = c.causal ? kTokens * (kTokens + 1) / 2.0 : kTokens * double(kTokens);
  const double flops = (c.backward ? 10 : 4) * area * kDim * double(c.heads);
  state.counters["FLOPS"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// C[m x n] = A[m x k] op(B), B = [n x k] transposed (trans_b) or [k x n]; A transposed when
// trans_a (then stored [k x m]), as the kernels' dV and dK products.
void BM_Sgemm(benchmark::State& state, int64_t m, int64_t n, int64_t k, bool trans_a,
              bool trans_b) {
  const std::vector<float> a = Random(size_t(m * k), 3), b = Random(size_t(k * n), 4);
  std::vector<float> c(size_t(m * n));
  const int lda = int(trans_a ? m : k), ldb = int(trans_b ? k : n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.f, a.data(), lda,
                b.data(), ldb, 0.f, c.data(), int(n));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * double(m) * double(n) * double(k),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Attend, fwd_full_8_2, Config{})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, fwd_causal_8_2, Config{.causal = true})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, bwd_full_8_2, Config{.backward = true})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, bwd_causal_8_2, Config{.backward = true, .causal = true})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, fwd_full_1_1, Config{.heads = 1, .kv_heads = 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, fwd_causal_1_1, Config{.causal = true, .heads = 1, .kv_heads = 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, bwd_full_1_1, Config{.backward = true, .heads = 1, .kv_heads = 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, bwd_causal_1_1,
                  Config{.backward = true, .causal = true, .heads = 1, .kv_heads = 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, fwd_causal_8_2_bf16,
                  Config{.causal = true, .dtype = dcp::DType::kBFloat16})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attend, bwd_causal_8_2_bf16,
                  Config{.backward = true, .causal = true, .dtype = dcp::DType::kBFloat16})
    ->Unit(benchmark::kMillisecond);

// A whole tile's products for one head: S = Q K^T (the yardstick of the target) and O = P V.
BENCHMARK_CAPTURE(BM_Sgemm, nt_1024x1024x128, 1024, 1024, 128, false, true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sgemm, nn_1024x128x1024, 1024, 128, 1024, false, false)
    ->Unit(benchmark::kMillisecond);
// The kernels' per-piece products: 128 query rows x 256 columns x head dim 128.
BENCHMARK_CAPTURE(BM_Sgemm, nt_128x256x128, 128, 256, 128, false, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sgemm, nn_128x128x256, 128, 128, 256, false, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sgemm, tn_256x128x128, 256, 128, 128, true, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sgemm, nn_1024x1024x1024, 1024, 1024, 1024, false, false)
    ->Unit(benchmark::kMillisecond);

// The console output, plus the FLOP/s of every run kept for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const auto counter = run.counters.find("FLOPS");
      if (run.error_occurred || counter == run.counters.end()) continue;
      // Prefer the median when repetitions are aggregated.
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const std::string name = run.run_name.str();
      if (median || (run.run_type == Run::RT_Iteration && !medians_.count(name))) {
        flops_[name] = counter->second.value;
        if (median) medians_[name] = true;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    const auto gemm = flops_.find("BM_Sgemm/nt_1024x1024x128");
    const auto square = flops_.find("BM_Sgemm/nn_1024x1024x1024");
    if (gemm == flops_.end() || square == flops_.end()) return;
    std::printf("\n%-34s %10s %16s %10s\n", "kernel", "GFLOP/s", "/ 1024x1024x128", "/ 1024^3");
    for (const auto& [name, flops] : flops_) {
      if (name.rfind("BM_Attend", 0) != 0) continue;
      std::printf("%-34s %10.1f %16.2f %10.2f\n", name.c_str(), flops / 1e9, flops / gemm->second,
                  flops / square->second);
    }
    std::printf("%-34s %10.1f\n%-34s %10.1f\n", gemm->first.c_str(), gemm->second / 1e9,
                square->first.c_str(), square->second / 1e9);
  }

 private:
  std::map<std::string, double> flops_;
  std::map<std::string, bool> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
