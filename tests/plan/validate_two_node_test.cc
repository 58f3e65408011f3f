// SPDX-License-Identifier: Apache-2.0
// The symbolic validator against a hand-built plan over 2 nodes (tests/plan/two_node_fixture.h),
// with a relay and a node sum: the plan passes and runs like the dense reference, and each test
// breaks one of those two paths and checks the error's code and message.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "dcp/batch.h"
#include "dcp/mask.h"
#include "dcp/plan.h"
#include "dcp/runtime.h"
#include "plan/two_node_fixture.h"
#include "plan/validate_expect.h"
#include "testing/end_to_end.h"

namespace dcp {
namespace {

using testing::TwoNodePlan;

using testing::Backward;
using testing::ExpectInvalid;
using testing::Forward;

TEST(ValidateTwoNodePlan, AcceptsTheHandBuiltPlan) {
  const Status status = ValidatePlan(TwoNodePlan());
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(ValidateTwoNodePlan, RunsForwardAndBackwardLikeTheDenseReference) {
  const Plan plan = TwoNodePlan();
  auto batch = Batch::Create(plan.seqlens, {*MaskSpec::Parse("causal")}, plan.shape);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  BatchTensors run = BatchTensors::ZerosFor(plan);
  testing::FillInputs(5, plan.shape.dtype, run);
  BatchTensors reference = run;
  const Status ran = RunPlanInProcess(plan, run, {}, 10.0);
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  DenseAttention(*batch, 0, reference);
  testing::ExpectWithinTolerance(run, reference, plan.shape.dtype);
}

// ---- The relay --------------------------------------------------------------------------------

TEST(ValidateTwoNodePlan, RejectsARelayForwardingAPieceBeforeItArrives) {
  Plan plan = TwoNodePlan();
  // Device 2 forwards KV0 (launch 1) before waiting for launch 0, which brings it from device 0.
  std::swap(plan.forward[2].instructions[3], plan.forward[2].instructions[4]);
  ExpectInvalid(plan,
                "forward, device 2, instruction 3 (CommLaunch 1): reads send slot 4 before "
                "CommWait 0 that receives it");
}

TEST(ValidateTwoNodePlan, RejectsARelayForwardingAnotherPiece) {
  Plan plan = TwoNodePlan();
  // Device 2 forwards its own KV1 instead of the KV0 it received.
  Forward<CommLaunch>(plan, 2, 4).sends[0].slots = {1, 3};
  ExpectInvalid(plan,
                "forward, device 3, instruction 7 (BlockwiseAttention): tile 0 (compute block 3): "
                "kv slot 6 holds KV of block 1/group 0, expected KV of block 0/group 0");
}

TEST(ValidateTwoNodePlan, RejectsARelayForwardingToTheWrongDevice) {
  Plan plan = TwoNodePlan();
  // Device 2 forwards KV0 of the backward to device 1 (node 0), not to device 3, which expects it
  // (device 3 reaches launch 1 first, so the receiver names the defect).
  Backward<CommLaunch>(plan, 2, 5).sends[0].peer = DeviceId{1};
  ExpectInvalid(plan,
                "backward, device 3, instruction 5 (CommLaunch 1): receives 2 slots from device 2, "
                "but device 2's CommLaunch 1 sends 0 slots to device 3");
}

TEST(ValidateTwoNodePlan, RejectsATileReadingTheRelayedPieceBeforeItArrives) {
  Plan plan = TwoNodePlan();
  // Device 3 computes division 2, which reads the relayed KV0, before waiting for launch 1.
  std::swap(plan.backward[3].instructions[7], plan.backward[3].instructions[9]);
  ExpectInvalid(plan,
                "backward, device 3, instruction 7 (BlockwiseAttention): tile 0 (compute block 3): "
                "reads kv slot 14 before CommWait 1 that receives it");
}

// ---- The node sum -----------------------------------------------------------------------------

TEST(ValidateTwoNodePlan, RejectsANodeSumMissingOneDevicesPartial) {
  Plan plan = TwoNodePlan();
  // Device 3 sends home its own partial dKV0 (compute block 3) without device 2's (block 1).
  Backward<BlockwiseReduction>(plan, 3, 11).ops[0].sources = {19};
  ExpectInvalid(plan,
                "backward, device 0, output 1 (dKV of block 0/group 0, slot 19): holds 2 of its 3 "
                "compute blocks, missing compute block 1");
}

TEST(ValidateTwoNodePlan, RejectsANodeSumCountingOnePartialTwice) {
  Plan plan = TwoNodePlan();
  Backward<BlockwiseReduction>(plan, 3, 11).ops[1].sources = {23, 25, 25};
  ExpectInvalid(plan,
                "backward, device 3, instruction 11 (BlockwiseReduction sum): op 1: sources 1 and "
                "2 overlap: both contain compute block 7");
}

TEST(ValidateTwoNodePlan, RejectsANodeSumBeforeThePartialArrives) {
  Plan plan = TwoNodePlan();
  // Device 3 sums before waiting for launch 2, which brings device 2's partial.
  std::swap(plan.backward[3].instructions[10], plan.backward[3].instructions[11]);
  ExpectInvalid(plan,
                "backward, device 3, instruction 10 (BlockwiseReduction sum): op 0: reads source 1 "
                "slot 24 before CommWait 2 that receives it");
}

TEST(ValidateTwoNodePlan, RejectsAPartialSentHomeBesidesTheNodeSum) {
  Plan plan = TwoNodePlan();
  // Device 2 also sends its partial dKV0 of head group 0 straight home to device 0 (launch 2),
  // which adds it to the node sum that already holds it.
  std::vector<PeerSlots>& sends = Backward<CommLaunch>(plan, 2, 8).sends;
  sends.insert(sends.begin(), testing::Peer(0, {16}));
  Program& d0 = plan.backward[0];
  d0.slots.push_back(testing::TwoNodeSlot(TensorKind::kDKV, /*fp32=*/true));  // slot 22
  d0.instructions.insert(d0.instructions.begin() + 5,
                         {testing::Launch(2, {}, {testing::Peer(2, {22})}), CommWait{.id = 2}});
  std::get<BlockwiseReduction>(d0.instructions.back()).ops[0].sources = {13, 16, 22};
  plan.backward = testing::WithWholeSlotsMoving(std::move(plan.backward));
  ExpectInvalid(plan,
                "backward, device 0, instruction 10 (BlockwiseReduction sum): op 0: sources 1 and "
                "2 overlap: both contain compute block 1");
}

}  // namespace
}  // namespace dcp
