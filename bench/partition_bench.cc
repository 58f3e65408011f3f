// SPDX-License-Identifier: Apache-2.0
// The reference partitioning instances (bench/RESULTS.md, "Partitioning, reference instances"):
// the original DCP's hypergraph model of causal batches (32 query / 8 KV heads, head dim 128, bf16,
// block 1024, forward-only traffic: Q, KV and O+LSE nets; memory = Q + KV + O + LSE), both
// constraints at tolerance 0.05, for the builtin partitioner and Zoltan in the same run. Counters:
// km1 in MiB, the imbalances (max/mean), whether both constraints hold, and the reference table's
// figures (zigzag, Zoltan PHG and KaHyPar km1, measured outside this repository).
#include <benchmark/benchmark.h>

#include <vector>

#include "dcp/partition.h"

namespace {

struct Instance {
  const char* name;
  std::vector<int64_t> lengths;
  int32_t k;
  double zigzag_mib, zoltan_mib, kahypar_mib;  // from the reference table
};

std::vector<int64_t> Repeat(std::initializer_list<std::pair<int64_t, int>> parts) {
  std::vector<int64_t> out;
  for (auto [len, n] : parts) out.insert(out.end(), n, len);
  return out;
}

const Instance kInstances[] = {
    {"S_k8", Repeat({{32768, 1}, {16384, 1}, {8192, 2}}), 8, 1232, 739, 716},
    {"M_k8", Repeat({{131072, 1}, {65536, 1}, {32768, 2}, {16384, 4}}), 8, 6720, 3214, 2465},
    {"M_k32", Repeat({{131072, 1}, {65536, 1}, {32768, 2}, {16384, 4}}), 32, 23744, 12156, 8922},
    {"M_k64", Repeat({{131072, 1}, {65536, 1}, {32768, 2}, {16384, 4}}), 64, 38144, 18544, 14296},
    {"L_k64", Repeat({{262144, 1}, {131072, 1}, {65536, 2}, {32768, 4}, {16384, 8}}), 64, 100480,
     44617, 31093},
};

void BM_Partition(benchmark::State& state, const Instance& instance, dcp::PartitionerKind kind) {
  const dcp::AttentionShape shape{.heads = 32, .kv_heads = 8, .head_dim = 128};
  auto batch = dcp::Batch::Create(instance.lengths, {dcp::MaskSpec{}}, shape);
  auto blocks = dcp::MakeBlocks(*batch, {.block_size = 1024});
  const dcp::Hypergraph graph = dcp::BuildHypergraph(*blocks, dcp::TrafficModel::kForwardOnly);
  const dcp::Topology topology{.nodes = 1, .devices_per_node = instance.k};
  const dcp::PartitionOptions options{
      .partitioner = kind, .eps_compute = 0.05, .eps_inter = 0.05, .eps_memory = 0.05};
  dcp::Result<dcp::PartitionResult> result = dcp::Status::Internal("not run");
  for (auto _ : state) {
    result = dcp::PartitionHypergraph(graph, *blocks, topology, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      return;
    }
  }
  constexpr double kMiB = 1 << 20;
  state.counters["km1_MiB"] = static_cast<double>(result->report.km1_bytes) / kMiB;
  state.counters["compute_imb"] = result->report.compute_imbalance;
  state.counters["memory_imb"] = result->report.memory_imbalance;
  state.counters["balanced"] = result->balanced ? 1 : 0;
  state.counters["ref_zoltan_MiB"] = instance.zoltan_mib;
  state.counters["ref_kahypar_MiB"] = instance.kahypar_mib;
}

void RegisterAll() {
  for (const Instance& instance : kInstances) {
    for (auto kind : {dcp::PartitionerKind::kBuiltin, dcp::PartitionerKind::kZoltan}) {
      benchmark::RegisterBenchmark(
          (std::string("BM_Partition/") + instance.name + "/" + std::string(ToString(kind)))
              .c_str(),
          [&instance, kind](benchmark::State& state) { BM_Partition(state, instance, kind); })
          ->Unit(benchmark::kMillisecond);
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
