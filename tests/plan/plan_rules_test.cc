// SPDX-License-Identifier: Apache-2.0
// The rules DecodePlan and ValidatePlan share (src/plan/plan_rules.h): the hand-built plan of
// tests/plan/plan_fixtures.h passes both, and each case breaks one rule and checks that both
// refuse it with the same message, Corrupt from the decoder and InvalidArgument from the
// validator. Before issue 18 they disagreed: the decoder took a compute block of area 0 and the
// validator did not; the validator took blocks longer than block_size, slice bases up to 2^41 and
// any slot size, divided by a block_size of 0, and never checked n_divisions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_fixtures.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using testing::TwoBlockCausalPlan;

std::string Encode(const Plan& plan) {
  std::string bytes;
  EncodePlan(plan, &bytes);
  return bytes;
}

Slice& FirstSlice(Plan& plan) {
  BlockwiseAttention& call = std::get<BlockwiseAttention>(plan.forward[0].instructions[2]);
  return call.slices[call.tiles[0].first_slice];
}

struct Damage {
  std::function<void(Plan&)> apply;
  std::string message;  // a substring of both errors
};

void ExpectBothRefuse(const Damage& damage) {
  SCOPED_TRACE(damage.message);
  Plan plan = TwoBlockCausalPlan();
  damage.apply(plan);
  const Status validated = ValidatePlan(plan);
  EXPECT_EQ(validated.code(), StatusCode::kInvalidArgument) << validated.ToString();
  EXPECT_THAT(validated.message(), HasSubstr(damage.message));
  const Status decoded = DecodePlan(Encode(plan)).status();
  EXPECT_EQ(decoded.code(), StatusCode::kCorrupt) << decoded.ToString();
  EXPECT_THAT(decoded.message(), HasSubstr(damage.message));
}

TEST(PlanRules, TheHandBuiltPlanPassesBothCheckers) {
  const Plan plan = TwoBlockCausalPlan();
  const Status validated = ValidatePlan(plan);
  EXPECT_TRUE(validated.ok()) << validated.ToString();
  const Result<Plan> decoded = DecodePlan(Encode(plan));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == plan);
}

// A compute block of area 0 is no tile (MakeBlocks and the baselines make none).
TEST(PlanRules, AComputeBlockOfAreaZeroIsRefusedByBoth) {
  ExpectBothRefuse({[](Plan& p) { p.compute_blocks[1].area = 0; },
                    "compute block 1: area 0 is not in [1, 4 x 4]"});
}

TEST(PlanRules, EveryBrokenRuleIsRefusedByBothWithTheSameMessage) {
  const Damage damages[] = {
      {[](Plan& p) { p.topology.nodes = 0; }, "topology: topology 0x2 must have"},
      {[](Plan& p) { p.shape.head_dim = 0; }, "shape: head_dim=0 is not in [1, 4096]"},
      {[](Plan& p) { p.block_size = 0; }, "block_size 0 is not in [1, 1073741824]"},
      {[](Plan& p) { p.head_groups = 2; }, "head_groups 2 does not divide kv_heads 1"},
      {[](Plan& p) { p.seqlens[0] = 0; }, "sequence 0: length 0 is not in [1, 1073741824]"},
      {[](Plan& p) { p.blocks[1].sequence = SequenceId{1}; },
       "data block 1: sequence 1 out of range (1 sequences)"},
      {[](Plan& p) {
         p.seqlens[0] = 9;
         p.blocks[1].tokens = 5;
       },
       "data block 1: 5 tokens are not in [1, block_size 4]"},
      {[](Plan& p) { p.blocks[1].token_begin = 5; },
       "data block 1: tokens [5, 5 + 4) are not inside sequence 0 of 8 tokens"},
      {[](Plan& p) { p.block_owner.pop_back(); }, "1 block owners for 2 data blocks"},
      {[](Plan& p) { p.block_owner[1] = DeviceId{2}; },
       "block owner 1: device 2 out of range (2 devices)"},
      {[](Plan& p) { p.compute_blocks[2].kv_block = DataBlockId{5}; },
       "compute block 2: kv: data block 5 out of range (2 data blocks)"},
      {[](Plan& p) { p.compute_blocks[0].head_group = 1; },
       "compute block 0: head group 1 out of range (1 head groups)"},
      {[](Plan& p) { p.compute_blocks[0].area = 17; },
       "compute block 0: area 17 is not in [1, 4 x 4]"},
      {[](Plan& p) { p.n_divisions = -1; }, "n_divisions -1 is negative"},
      {[](Plan& p) { p.forward[0].slots[7].bytes = (int64_t{1} << 40) + 1; },
       "slot 7: 1099511627777 bytes are not in [0, 1099511627776]"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[2]).division = 2; },
       "division 2 out of range (2 divisions)"},
      {[](Plan& p) { FirstSlice(p).row_end = 5; },
       "slice 0: rows [0, 5) are not inside the tile's 4 rows"},
      {[](Plan& p) { FirstSlice(p).hi.base = int64_t{1} << 32; },
       "slice 0: hi base 4294967296 is not in [-2147483648, 2147483648]"},
      {[](Plan& p) { p.forward[1].slots[5].bytes = 32; },
       "entry 1: moves 64 bytes of slot 5, which holds 32"},
  };
  for (const Damage& damage : damages) ExpectBothRefuse(damage);
}

}  // namespace
}  // namespace dcp
