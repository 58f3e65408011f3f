// SPDX-License-Identifier: Apache-2.0
// SimulatePlan on 131072-token batches, topology 4x8, block 1024, 8 query / 2 KV heads, head dim
// 128, bf16, p4de cluster. Target (issue 6): well under one second per plan on one core. Plans are
// made once, outside the timed loop; counters give the plan's size and the simulated times.
#include <benchmark/benchmark.h>

#include "dcp/baselines.h"
#include "dcp/planner.h"
#include "dcp/sim.h"

namespace {

struct Case {
  const char* mask;
  bool one_sequence;  // one 131072-token sequence instead of the LDC-like batch
  int64_t head_groups;
  dcp::Strategy strategy;
};

dcp::Result<dcp::Plan> MakePlan(const Case& c) {
  std::vector<int64_t> lengths = {131072};
  if (!c.one_sequence) {
    DCP_ASSIGN_OR_RETURN(lengths, dcp::SyntheticBatch({.scale = 1.0, .seed = 0}, 131072));
  }
  DCP_ASSIGN_OR_RETURN(dcp::MaskSpec mask, dcp::MaskSpec::Parse(c.mask));
  DCP_ASSIGN_OR_RETURN(dcp::Batch batch,
                       dcp::Batch::Create(lengths, {mask}, dcp::AttentionShape{}));
  const dcp::Topology topology{.nodes = 4, .devices_per_node = 8};
  if (c.strategy != dcp::Strategy::kDcp) {
    DCP_ASSIGN_OR_RETURN(dcp::BaselinePlan baseline,
                         dcp::PlanBaseline(c.strategy, batch, {.topology = topology}));
    return std::move(baseline.plan);
  }
  dcp::PlanOptions options = dcp::SinglePassOptions(topology, 1024);
  options.head_groups = c.head_groups;
  DCP_ASSIGN_OR_RETURN(dcp::PlannedBatch planned, dcp::PlanBatch(batch, options));
  return std::move(planned.plan);
}

void BM_Simulate(benchmark::State& state, Case c, bool trace) {
  const dcp::Result<dcp::Plan> plan = MakePlan(c);
  if (!plan.ok()) {
    state.SkipWithError(plan.status().ToString().c_str());
    return;
  }
  const dcp::ClusterSpec cluster = *dcp::ClusterPreset("p4de");
  dcp::SimReport report;
  for (auto _ : state) {
    dcp::Result<dcp::SimReport> r = dcp::SimulatePlan(*plan, cluster, {.trace = trace});
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    report = std::move(r).value();
    benchmark::DoNotOptimize(report);
  }
  int64_t tiles = 0;
  for (const auto* programs : {&plan->forward, &plan->backward}) {
    for (const dcp::Program& p : *programs) {
      for (const dcp::Instruction& i : p.instructions) {
        if (const auto* call = std::get_if<dcp::BlockwiseAttention>(&i)) {
          tiles += static_cast<int64_t>(call->tiles.size());
        }
      }
    }
  }
  state.counters["tiles"] = static_cast<double>(tiles);
  state.counters["flows"] = static_cast<double>(report.forward.flows + report.backward.flows);
  state.counters["sim_fwd_ms"] = report.forward.makespan_s * 1e3;
  state.counters["sim_bwd_ms"] = report.backward.makespan_s * 1e3;
}

constexpr Case kLdcCausal{"causal", false, 1, dcp::Strategy::kDcp};
constexpr Case kLdcFullTwoGroups{"full", false, 2, dcp::Strategy::kDcp};
constexpr Case kOneSequenceFullTwoGroups{"full", true, 2, dcp::Strategy::kDcp};
constexpr Case kLdcRing{"causal", false, 1, dcp::Strategy::kRing};
constexpr Case kLdcZigzag{"causal", false, 1, dcp::Strategy::kZigzag};

BENCHMARK_CAPTURE(BM_Simulate, dcp_ldc_causal, kLdcCausal, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, dcp_ldc_causal_trace, kLdcCausal, true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, dcp_ldc_full_2groups, kLdcFullTwoGroups, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, dcp_one_seq_full_2groups, kOneSequenceFullTwoGroups, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, ring_ldc_causal, kLdcRing, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, zigzag_ldc_causal, kLdcZigzag, false)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
