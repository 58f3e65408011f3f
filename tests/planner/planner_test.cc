// SPDX-License-Identifier: Apache-2.0
// The library planner: one call runs the whole pipeline; its candidate search keeps the fastest
// candidate on the cluster model whatever the thread count; the memory budget is enforced.
#include <gtest/gtest.h>

#include "dcp/planner.h"

namespace dcp {
namespace {

Batch TestBatch() {
  auto batch = Batch::Create({9000, 3000, 1200, 700}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return std::move(batch).value();
}

const Topology k2x4{.nodes = 2, .devices_per_node = 4};

// Options on 2x4 with `set` applied. (Designated initializers of PlanOptions temporaries trip
// GCC 12's -Wmaybe-uninitialized on the cluster's name.)
template <typename Set>
PlanOptions On2x4(Set&& set) {
  PlanOptions options;
  options.topology = k2x4;
  set(options);
  return options;
}

TEST(PlanBatch, IsThePipelineOfItsPhases) {
  const Batch batch = TestBatch();
  const PlanOptions options = On2x4([](PlanOptions& o) {
    o.block_size = 512;
    o.partition.seed = 3;
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  // The same phases called one by one, with the scheduler's cost model sized for the cluster.
  auto blocks = MakeBlocks(batch, {.block_size = 512});
  auto placed = PartitionBlocks(*blocks, k2x4, {.seed = 3});
  const ClusterSpec cluster;
  const ScheduleOptions scheduler{
      .device_flops = cluster.device.peak_flops * cluster.device.attention.forward_efficiency,
      .intra_node_bytes_per_s = cluster.intra_node.bytes_per_s,
      .inter_node_bytes_per_s = cluster.inter_node.bytes_per_s};
  auto schedule = ScheduleDivisions(*blocks, placed->placement, k2x4, scheduler);
  auto plan = CompilePlan(batch, *blocks, placed->placement, *schedule, k2x4);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(planned->plan, *plan);
  EXPECT_TRUE(ValidatePlan(planned->plan).ok());
  EXPECT_EQ(planned->candidate, fmt::format("512:0.1/0.4:{}", plan->n_divisions));
  EXPECT_GT(planned->ms.total(), 0);
}

TEST(PlanBatch, ChoosesTheBlockSizeWhenAskedTo) {
  const Batch batch = TestBatch();
  auto planned = PlanBatch(batch, On2x4([](PlanOptions& o) { o.block_size = 0; }));
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  auto choice = ChooseBlockSize(batch.seqlens(), {.devices = 8, .eps_memory = 0.2});
  EXPECT_EQ(planned->plan.block_size, choice->block_size);
}

// The search keeps the candidate the simulator finds fastest, and the result does not depend on
// the number of threads.
TEST(PlanBatch, CandidateSearchKeepsTheFastestCandidateWhateverTheThreads) {
  const Batch batch = TestBatch();
  PlanOptions options = On2x4([](PlanOptions& o) {
    o.cluster.devices_per_node = 4;
    o.candidate_block_sizes = {256, 512, 1024};
    o.candidate_tolerances = {{0.1, 0.4}, {0.05, 0.05}};
  });
  double fastest = std::numeric_limits<double>::infinity();
  for (int64_t b : options.candidate_block_sizes) {
    for (Tolerances eps : options.candidate_tolerances) {
      auto one = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                             o.block_size = b;
                             o.partition.eps_compute = eps.compute;
                             o.partition.eps_inter = eps.inter;
                           }));
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      fastest = std::min(fastest, SimulatePlan(one->plan, options.cluster)->total_s());
    }
  }
  auto single = PlanBatch(batch, options);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();

  EXPECT_DOUBLE_EQ(single->simulated_s, fastest);
  EXPECT_EQ(single->plan, threaded->plan);
  EXPECT_EQ(single->candidate, threaded->candidate);
}

TEST(PlanBatch, RefusesAPlanAboveTheMemoryBudgetNamingTheDevice) {
  const Batch batch = TestBatch();
  auto unbounded = PlanBatch(batch, On2x4([](PlanOptions& o) { o.block_size = 512; }));
  ASSERT_TRUE(unbounded.ok());
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(unbounded->plan);
  const int64_t worst = *std::max_element(peak.begin(), peak.end());
  const auto with_budget = [&](int64_t budget) {
    return PlanBatch(batch, On2x4([&](PlanOptions& o) {
                       o.block_size = 512;
                       o.memory_budget_bytes = budget;
                     }));
  };
  EXPECT_TRUE(with_budget(worst).ok());
  auto refused = with_budget(worst - 1);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(fmt::format("needs {} bytes", worst)),
            std::string::npos)
      << refused.status().ToString();
}

TEST(PlanBatch, RejectsBadOptionsNamingThem) {
  const Batch batch = TestBatch();
  const std::vector<std::pair<PlanOptions, const char*>> cases = {
      {On2x4([](PlanOptions& o) { o.threads = 0; }), "threads"},
      {On2x4([](PlanOptions& o) { o.memory_budget_bytes = -1; }), "memory_budget_bytes"},
      {On2x4([](PlanOptions& o) { o.block_size = -4; }), "block_size"},
      {On2x4([](PlanOptions& o) { o.candidate_block_sizes = {0}; }), "candidate_block_sizes"},
      {On2x4([](PlanOptions& o) { o.topology.nodes = 0; }), "topology"},
      {On2x4([](PlanOptions& o) { o.division_choice = DivisionChoice::kSimulate; }),
       "cluster 'p4de' of 8 devices per node"}};
  for (const auto& [options, field] : cases) {
    auto planned = PlanBatch(batch, options);
    EXPECT_EQ(planned.status().code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(planned.status().message().find(field), std::string::npos)
        << planned.status().ToString();
  }
}

}  // namespace
}  // namespace dcp
