// SPDX-License-Identifier: Apache-2.0
// Blocking a 131072-token LongDataCollections-like batch (block 1024, 8 query heads, 2 KV heads,
// head dim 128) for every mask family. Target (issue 2): under 5 ms on one core.
#include <benchmark/benchmark.h>

#include "dcp/blocks.h"

namespace {

void BM_Blocking(benchmark::State& state, const char* mask_text) {
  const auto lengths = dcp::SyntheticBatch({.seed = 0}, 131072);
  const auto mask = dcp::MaskSpec::Parse(mask_text);
  if (!lengths.ok() || !mask.ok()) {
    state.SkipWithError("cannot build the batch");
    return;
  }
  const auto batch = dcp::Batch::Create(*lengths, {*mask}, dcp::AttentionShape{});
  if (!batch.ok()) {
    state.SkipWithError(batch.status().ToString().c_str());
    return;
  }
  int64_t compute_blocks = 0;
  for (auto _ : state) {
    auto set = dcp::MakeBlocks(*batch, {.block_size = 1024});
    benchmark::DoNotOptimize(set);
    compute_blocks = static_cast<int64_t>(set->compute_blocks.size());
  }
  state.counters["sequences"] = static_cast<double>(lengths->size());
  state.counters["compute_blocks"] = static_cast<double>(compute_blocks);
}

// Building the masks (parsing and normalizing) is part of making a batch; measure it too.
void BM_BatchAndBlocking(benchmark::State& state, const char* mask_text) {
  const auto lengths = dcp::SyntheticBatch({.seed = 0}, 131072);
  const auto mask = dcp::MaskSpec::Parse(mask_text);
  for (auto _ : state) {
    auto batch = dcp::Batch::Create(*lengths, {*mask}, dcp::AttentionShape{});
    auto set = dcp::MakeBlocks(*batch, {.block_size = 1024});
    benchmark::DoNotOptimize(set);
  }
}

#define DCP_FAMILY_BENCH(name, spec)                                         \
  BENCHMARK_CAPTURE(BM_Blocking, name, spec)->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(BM_BatchAndBlocking, name, spec)->Unit(benchmark::kMicrosecond)

DCP_FAMILY_BENCH(causal, "causal");
DCP_FAMILY_BENCH(full, "full");
DCP_FAMILY_BENCH(sliding_window, "sliding-window:window=4096");
DCP_FAMILY_BENCH(lambda, "lambda");
DCP_FAMILY_BENCH(causal_blockwise, "causal-blockwise");
DCP_FAMILY_BENCH(shared_question, "shared-question");
DCP_FAMILY_BENCH(documents, "documents:count=8");
DCP_FAMILY_BENCH(modality, "modality:image=1024,text=3072");

}  // namespace

BENCHMARK_MAIN();
