// SPDX-License-Identifier: Apache-2.0
// The whole planning pipeline (blocking, placement, scheduling, compiling forward and backward)
// for a 131072-token LongDataCollections-like batch at scale 1, topology 4x8, block 1024, causal,
// 8 query / 2 KV heads, head dim 128, bf16, through the library planner (PlanBatch) with every
// value pinned. Target (issue 4): at most 200 ms on one core. Counters give the phase split in ms
// (of the last iteration).
#include <benchmark/benchmark.h>

#include "dcp/planner.h"

namespace {

void BM_Planning(benchmark::State& state, const char* mask_text, double scale) {
  auto lengths = dcp::SyntheticBatch({.scale = scale, .seed = 0}, 131072);
  auto batch =
      dcp::Batch::Create(*lengths, {*dcp::MaskSpec::Parse(mask_text)}, dcp::AttentionShape{});
  const dcp::PlanOptions options =
      dcp::SinglePassOptions({.nodes = 4, .devices_per_node = 8}, 1024);
  dcp::PlanningTimes ms;
  for (auto _ : state) {
    auto planned = dcp::PlanBatch(*batch, options);
    if (!planned.ok()) {
      state.SkipWithError(planned.status().ToString().c_str());
      return;
    }
    ms = planned->ms;
    benchmark::DoNotOptimize(planned);
  }
  state.counters["blocking_ms"] = ms.blocking;
  state.counters["placement_ms"] = ms.placement;
  state.counters["scheduling_ms"] = ms.scheduling;
  state.counters["compile_ms"] = ms.compile;
}

BENCHMARK_CAPTURE(BM_Planning, ldc_scale1_causal, "causal", 1.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Planning, ldc_scale1_lambda, "lambda", 1.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Planning, ldc_scale4_causal, "causal", 4.0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
