// SPDX-License-Identifier: Apache-2.0
// dcp's placement against zigzag ring placement on the paper's micro-benchmark batches: 131072
// tokens from the LongDataCollections-like and LongAlign-like distributions at length scales 0.5,
// 1, 2 and 4, topology 4x8, block 1024, 8 query / 2 KV heads, head dim 128, bf16, causal and
// lambda masks, forward + backward traffic. Counters: inter-node and total bytes moved (MiB),
// compute and memory imbalance of both, and dcp's partitioning time (the benchmark's time).
#include <benchmark/benchmark.h>

#include <string>

#include "dcp/baselines.h"
#include "dcp/partition.h"

namespace {

void BM_Placement(benchmark::State& state, dcp::LengthDistribution distribution, double scale,
                  const char* mask) {
  auto lengths =
      dcp::SyntheticBatch({.distribution = distribution, .scale = scale, .seed = 1}, 131072);
  if (!lengths.ok()) {
    state.SkipWithError(lengths.status().ToString().c_str());
    return;
  }
  auto batch = dcp::Batch::Create(*lengths, {*dcp::MaskSpec::Parse(mask)}, dcp::AttentionShape{});
  auto blocks = dcp::MakeBlocks(*batch, {.block_size = 1024});
  const dcp::Topology topology{.nodes = 4, .devices_per_node = 8};
  dcp::Result<dcp::PartitionResult> result = dcp::Status::Internal("not run");
  for (auto _ : state) {
    result = dcp::PartitionBlocks(*blocks, topology, {});
  }
  const dcp::Hypergraph graph = dcp::BuildHypergraph(*blocks);
  auto zigzag = dcp::EvaluatePlacement(graph, dcp::ZigzagPlacement(*blocks, topology), topology);
  constexpr double kMiB = 1 << 20;
  state.counters["sequences"] = static_cast<double>(lengths->size());
  state.counters["dcp_inter_MiB"] = static_cast<double>(result->report.bytes_inter_node) / kMiB;
  state.counters["zz_inter_MiB"] = static_cast<double>(zigzag->bytes_inter_node) / kMiB;
  state.counters["dcp_total_MiB"] = static_cast<double>(result->report.km1_bytes) / kMiB;
  state.counters["zz_total_MiB"] = static_cast<double>(zigzag->km1_bytes) / kMiB;
  state.counters["dcp_compute_imb"] = result->report.compute_imbalance;
  state.counters["zz_compute_imb"] = zigzag->compute_imbalance;
  state.counters["dcp_memory_imb"] = result->report.memory_imbalance;
  state.counters["zz_memory_imb"] = zigzag->memory_imbalance;
}

void RegisterAll() {
  for (auto distribution :
       {dcp::LengthDistribution::kLongDataCollections, dcp::LengthDistribution::kLongAlign}) {
    for (double scale : {0.5, 1.0, 2.0, 4.0}) {
      for (const char* mask : {"causal", "lambda"}) {
        const std::string name = std::string("BM_Placement/") +
                                 std::string(ToString(distribution)) + "/scale" +
                                 std::to_string(scale).substr(0, 3) + "/" + mask;
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) { BM_Placement(state, distribution, scale, mask); })
            ->Unit(benchmark::kMillisecond)
            ->Iterations(1);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
