// SPDX-License-Identifier: Apache-2.0
// The whole planning pipeline (blocking, placement, scheduling, compiling forward and backward)
// for a 131072-token LongDataCollections-like batch at scale 1, topology 4x8, block 1024, causal,
// 8 query / 2 KV heads, head dim 128, bf16. Target (issue 4): at most 200 ms on one core.
// Counters give the phase split in ms (of the last iteration).
#include <benchmark/benchmark.h>

#include <chrono>

#include "dcp/plan.h"

namespace {

double Since(std::chrono::steady_clock::time_point* last) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - *last).count();
  *last = now;
  return ms;
}

void BM_Planning(benchmark::State& state, const char* mask_text, double scale) {
  auto lengths = dcp::SyntheticBatch({.scale = scale, .seed = 0}, 131072);
  auto batch =
      dcp::Batch::Create(*lengths, {*dcp::MaskSpec::Parse(mask_text)}, dcp::AttentionShape{});
  const dcp::Topology topology{.nodes = 4, .devices_per_node = 8};
  double blocking = 0, placement = 0, scheduling = 0, compile = 0;
  for (auto _ : state) {
    auto last = std::chrono::steady_clock::now();
    auto blocks = dcp::MakeBlocks(*batch, {.block_size = 1024});
    blocking = Since(&last);
    auto placed = dcp::PartitionBlocks(*blocks, topology, {});
    placement = Since(&last);
    auto schedule = dcp::ScheduleDivisions(*blocks, placed->placement, topology, {});
    scheduling = Since(&last);
    auto plan = dcp::CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
    compile = Since(&last);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(plan);
  }
  state.counters["blocking_ms"] = blocking;
  state.counters["placement_ms"] = placement;
  state.counters["scheduling_ms"] = scheduling;
  state.counters["compile_ms"] = compile;
}

BENCHMARK_CAPTURE(BM_Planning, ldc_scale1_causal, "causal", 1.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Planning, ldc_scale1_lambda, "lambda", 1.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Planning, ldc_scale4_causal, "causal", 4.0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
