// SPDX-License-Identifier: Apache-2.0
// End to end: plans executed on in-process devices must equal the dense single-device reference,
// forward and backward, for every mask family, GQA ratio, dtype and topology.
#include <gtest/gtest.h>

#include <random>

#include "dcp/runtime.h"
#include "testing/cases.h"
#include "testing/end_to_end.h"

namespace dcp {
namespace {

using testing::FillInputs;
const auto& kMasks = testing::kEndToEndMasks;

struct Case {
  std::vector<int64_t> lengths;
  const char* mask;
  AttentionShape shape;
  Topology topology;
  int64_t block_size;
  int64_t head_groups;
};

Case MakeCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c;
  c.block_size = int64_t{16} << (rng() % 3);  // 16, 32, 64
  c.lengths.resize(1 + rng() % 4);
  for (int64_t& l : c.lengths) {
    l = rng() % 5 == 0 ? 1 + static_cast<int64_t>(rng() % 3)
                       : 3 + static_cast<int64_t>(rng() % (4 * c.block_size));
  }
  c.mask = kMasks[rng() % std::size(kMasks)];
  const int64_t kv_heads[] = {8, 2, 1};  // GQA ratios 1, 4, 8
  c.shape = AttentionShape{.heads = 8,
                           .kv_heads = kv_heads[rng() % 3],
                           .head_dim = 8 + static_cast<int64_t>(rng() % 3) * 4,
                           .dtype = rng() % 2 ? DType::kFloat32 : DType::kBFloat16};
  c.topology = Topology{.nodes = 1 + static_cast<int32_t>(rng() % 2),
                        .devices_per_node = 1 + static_cast<int32_t>(rng() % 8)};
  c.head_groups = c.shape.kv_heads % 2 == 0 && rng() % 3 == 0 ? 2 : 1;
  return c;
}

// Runs `plan` on in-process devices from inputs drawn with `seed` and expects the dense
// reference's outputs and gradients, within the tolerance of the batch's dtype.
void ExpectRunMatchesTheDenseReference(const Batch& batch, const Plan& plan, uint64_t seed,
                                       double timeout_s) {
  BatchTensors run = BatchTensors::ZerosFor(plan);
  FillInputs(seed, batch.shape().dtype, run);
  BatchTensors reference = run;
  ASSERT_TRUE(RunPlanInProcess(plan, run, {}, timeout_s).ok());
  DenseAttention(batch, 0, reference);
  testing::ExpectWithinTolerance(run, reference, batch.shape().dtype);
}

TEST(RunPlanInProcess, MatchesTheDenseReference) {
  for (uint64_t seed = 0; seed < testing::RandomCases(120); ++seed) {
    const Case c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " mask " << c.mask << " topology " << c.topology.ToString()
                 << " kv_heads " << c.shape.kv_heads << " dtype " << ToString(c.shape.dtype));
    std::vector<MaskSpec> masks;
    for (int64_t l : c.lengths) {
      const bool needs_length = c.mask[0] == 'd';
      masks.push_back(*MaskSpec::Parse(needs_length && l < 3 ? "causal" : c.mask));
    }
    auto batch = Batch::Create(c.lengths, masks, c.shape);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    auto blocks = MakeBlocks(*batch, {.block_size = c.block_size, .head_groups = c.head_groups});
    ASSERT_TRUE(blocks.ok());
    auto placed = PartitionBlocks(*blocks, c.topology, {.seed = seed});
    ASSERT_TRUE(placed.ok());
    auto schedule = ScheduleDivisions(*blocks, placed->placement, c.topology, {});
    ASSERT_TRUE(schedule.ok());
    auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, c.topology);
    ASSERT_TRUE(plan.ok());

    ASSERT_NO_FATAL_FAILURE(ExpectRunMatchesTheDenseReference(*batch, *plan, seed, 10.0));
  }
}

// Realistic head size and length: head_dim 128 over a few thousand tokens on 2 nodes of 2 devices,
// in fp32 and bf16, every output within the per-element bound of docs/architecture.md.
TEST(RunPlanInProcess, HeadDim128OnThousandsOfTokensMatchesTheDenseReference) {
#ifdef DCP_SANITIZE
  const std::vector<int64_t> lengths = {600, 300, 124};
#else
  const std::vector<int64_t> lengths = {1200, 600, 248};
#endif
  const std::vector<MaskSpec> masks = {*MaskSpec::Parse("causal"),
                                       *MaskSpec::Parse("lambda:sink=16,window=256"),
                                       *MaskSpec::Parse("documents:count=3")};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(ToString(dtype));
    const AttentionShape shape{.heads = 2, .kv_heads = 1, .head_dim = 128, .dtype = dtype};
    auto batch = Batch::Create(lengths, masks, shape);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    auto blocks = MakeBlocks(*batch, {.block_size = 128});
    const Topology topology{.nodes = 2, .devices_per_node = 2};
    auto placed = PartitionBlocks(*blocks, topology, {});
    auto schedule = ScheduleDivisions(*blocks, placed->placement, topology, {});
    auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectRunMatchesTheDenseReference(*batch, *plan, 21, 30.0));
  }
}

// A causal sequence over four nodes: partial dQ/dKV are summed inside a node before they
// cross (fewer bytes between nodes than sending each partial home), and the sums still give the
// dense reference's gradients.
TEST(RunPlanInProcess, PartialsSummedInsideANodeMatchTheDenseReference) {
  const AttentionShape shape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kFloat32};
  auto batch = Batch::Create({512}, {MaskSpec{}}, shape);
  auto blocks = MakeBlocks(*batch, {.block_size = 32});
  const Topology topology{.nodes = 4, .devices_per_node = 4};
  auto placed = PartitionBlocks(*blocks, topology, {});
  auto schedule = ScheduleDivisions(*blocks, placed->placement, topology, {.divisions = 6});
  ASSERT_TRUE(schedule.ok() && schedule->reduce_in_node);
  auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
  Schedule direct_schedule = *schedule;
  direct_schedule.reduce_in_node = false;
  auto direct = CompilePlan(*batch, *blocks, placed->placement, direct_schedule, topology);
  ASSERT_TRUE(plan.ok() && direct.ok());
  ASSERT_LT(MeasureTraffic(*plan, Pass::kBackward).bytes_inter_node,
            MeasureTraffic(*direct, Pass::kBackward).bytes_inter_node);

  ExpectRunMatchesTheDenseReference(*batch, *plan, 1, 10.0);
}

// The most divisions a schedule may have (more than the division choice and search try: the
// tuning goes there to spread peaks) still give the dense reference; one more is refused.
TEST(RunPlanInProcess, APlanOfTheMostDivisionsMatchesTheDenseReference) {
  const AttentionShape shape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kFloat32};
  auto batch = Batch::Create({1500, 700}, {MaskSpec{}}, shape);
  auto blocks = MakeBlocks(*batch, {.block_size = 32});
  const Topology topology{.nodes = 2, .devices_per_node = 4};
  auto placed = PartitionBlocks(*blocks, topology, {});
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_FALSE(
      ScheduleDivisions(*blocks, placed->placement, topology, {.divisions = kMaxDivisions + 1})
          .ok());
  auto schedule =
      ScheduleDivisions(*blocks, placed->placement, topology, {.divisions = kMaxDivisions});
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
  ASSERT_EQ(schedule->n_divisions, kMaxDivisions);
  ASSERT_GE(*std::max_element(schedule->compute_division.begin(), schedule->compute_division.end()),
            kMaxSearchedDivisions);  // tiles beyond what the division choice would give
  auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectRunMatchesTheDenseReference(*batch, *plan, 5, 30.0);
}

TEST(RunPlanInProcess, AFailingRankStopsEveryRankWithAClearError) {
  auto batch = Batch::Create({200, 90}, {MaskSpec{}},
                             AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
  auto blocks = MakeBlocks(*batch, {.block_size = 32});
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  auto placed = PartitionBlocks(*blocks, topology, {});
  auto schedule = ScheduleDivisions(*blocks, placed->placement, topology, {});
  auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
  ASSERT_TRUE(plan.ok());
  // Corrupt device 2's program: a wait for an exchange it never launched.
  plan->forward[2].instructions.emplace(plan->forward[2].instructions.begin(),
                                        std::in_place_type<CommWait>, CommWait{.id = 99});
  BatchTensors t = BatchTensors::ZerosFor(*plan);
  const Status s = RunPlanInProcess(*plan, t, {}, 5.0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("device 2"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dcp
