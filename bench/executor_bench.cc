// SPDX-License-Identifier: Apache-2.0
// Executor overhead (issue 5): the share of a plan's execution spent outside kernels and
// communication (gathering inputs, scattering outputs, slot allocation, dispatch). A 16384-token
// causal batch (8192 + 4096 + 2 x 2048), block 1024, 8 query / 2 KV heads, head dim 128, planned
// for 1x2 devices and run forward + backward on the in-process runtime, twice: the counters are
// the second run's (steady state, as in training, where the slot workspace is reused). Target:
// below 2%. Counters: seconds per category summed over devices and passes, and overhead_pct.
#include <benchmark/benchmark.h>

#include "dcp/runtime.h"

namespace {

void BM_Execute(benchmark::State& state, dcp::DType dtype) {
  const dcp::AttentionShape shape{.heads = 8, .kv_heads = 2, .head_dim = 128, .dtype = dtype};
  auto batch = dcp::Batch::Create({8192, 4096, 2048, 2048}, {dcp::MaskSpec{}}, shape);
  const dcp::Topology topology{.nodes = 1, .devices_per_node = 2};
  auto blocks = dcp::MakeBlocks(*batch, {.block_size = 1024});
  auto placed = dcp::PartitionBlocks(*blocks, topology, {});
  auto schedule = dcp::ScheduleDivisions(*blocks, placed->placement, topology, {});
  auto plan = dcp::CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
  if (!plan.ok()) {
    state.SkipWithError(plan.status().ToString().c_str());
    return;
  }
  dcp::BatchTensors tensors = dcp::BatchTensors::ZerosFor(*plan);
  for (std::vector<float>* v : {&tensors.q, &tensors.k, &tensors.v, &tensors.d_o}) {
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  }
  dcp::ExecutionProfile sum;
  for (auto _ : state) {
    std::vector<std::vector<dcp::ExecutionProfile>> profiles;
    const dcp::Status status = dcp::RunPlanInProcess(*plan, tensors, {}, 600.0, &profiles);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return;
    }
    sum = {};
    for (const auto& pass : profiles) {
      for (const dcp::ExecutionProfile& p : pass) {
        sum.total += p.total;
        sum.attention += p.attention;
        sum.reduction += p.reduction;
        sum.communication += p.communication;
      }
    }
  }
  state.counters["attention_s"] = sum.attention;
  state.counters["reduction_s"] = sum.reduction;
  state.counters["communication_s"] = sum.communication;
  state.counters["overhead_s"] = sum.Overhead();
  state.counters["overhead_pct"] = 100 * sum.Overhead() / sum.total;
}

BENCHMARK_CAPTURE(BM_Execute, causal_16k_fp32, dcp::DType::kFloat32)
    ->Unit(benchmark::kSecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(BM_Execute, causal_16k_bf16, dcp::DType::kBFloat16)
    ->Unit(benchmark::kSecond)
    ->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
