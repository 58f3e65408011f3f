// SPDX-License-Identifier: Apache-2.0
// The symbolic validator against a hand-built plan (tests/plan/plan_fixtures.h): the plan passes,
// and each test breaks it in one way and checks the error's code and message.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_fixtures.h"
#include "plan/validate_expect.h"

namespace dcp {
namespace {

using testing::TwoBlockCausalPlan;

using testing::Backward;
using testing::ExpectInvalid;
using testing::Forward;

TEST(ValidatePlan, AcceptsTheHandBuiltPlan) {
  const Status status = ValidatePlan(TwoBlockCausalPlan());
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(ValidatePlan, AcceptsAReductionIntoOneOfItsSources) {
  Plan plan = TwoBlockCausalPlan();
  // Forward, device 1: merge the received partial into the local accumulator, then copy it out.
  plan.forward[1].instructions.back() = BlockwiseReduction{
      .kind = ReductionKind::kLseMerge, .ops = {testing::MergeOp(2, 3, {2, 4}, {3, 5})}};
  plan.forward[1].instructions.push_back(BlockwiseCopy{.ops = {{2, 6}, {3, 7}}});
  // Backward, device 1: the same with a sum.
  Backward<BlockwiseReduction>(plan, 1, 7).ops = {testing::SumOp(6, {6, 8})};
  Backward<BlockwiseCopy>(plan, 1, 8).ops.emplace_back(6, 9);
  const Status status = ValidatePlan(plan);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(ValidatePlan, NamesPassDeviceInstructionTileAndContents) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseAttention>(plan, 0, 2).columns[0].kv = 0;
  EXPECT_EQ(ValidatePlan(plan).message(),
            "forward, device 0, instruction 2 (BlockwiseAttention): tile 0 (compute block 0): kv "
            "slot 0 holds Q of block 0/group 0, expected KV of block 0/group 0");
}

TEST(ValidatePlan, RejectsThePartOfOneDevice) {
  Plan plan = TwoBlockCausalPlan();
  plan.part_device = 1;
  plan.forward.erase(plan.forward.begin());
  plan.backward.erase(plan.backward.begin());
  ExpectInvalid(plan, "validate needs a whole plan");
}

TEST(ValidatePlan, RejectsAMissingProgram) {
  Plan plan = TwoBlockCausalPlan();
  plan.backward.pop_back();
  ExpectInvalid(plan, "2 forward and 1 backward programs for 2 devices");
}

TEST(ValidatePlan, RejectsAProgramOfAnotherDevice) {
  Plan plan = TwoBlockCausalPlan();
  std::swap(plan.forward[0], plan.forward[1]);
  ExpectInvalid(plan, "forward, device 0: program 0 is the forward program of device 1");
}

TEST(ValidatePlan, RejectsALaunchThePeerLacks) {
  Plan plan = TwoBlockCausalPlan();
  Forward<CommLaunch>(plan, 1, 0).id = 7;
  Forward<CommWait>(plan, 1, 3).id = 7;
  ExpectInvalid(plan,
                "forward, device 0, instruction 0 (CommLaunch 0): receives from device 1, which "
                "has no CommLaunch 0");
}

TEST(ValidatePlan, RejectsMismatchedSlotCounts) {
  Plan plan = TwoBlockCausalPlan();
  Forward<CommLaunch>(plan, 0, 5).sends[0].slots = {5};
  ExpectInvalid(plan,
                "device 1, instruction 4 (CommLaunch 1): receives 2 slots from device 0, but "
                "device 0's CommLaunch 1 sends 1 slot to device 1");
}

TEST(ValidatePlan, RejectsAPeerTheOtherSideDoesNotList) {
  Plan plan = TwoBlockCausalPlan();
  Backward<CommLaunch>(plan, 0, 6).sends.clear();
  ExpectInvalid(plan, "receives 1 slot from device 0, but device 0's CommLaunch 1 sends 0 slots");
}

TEST(ValidatePlan, RejectsMismatchedSlotSizes) {
  Plan plan = TwoBlockCausalPlan();
  plan.forward[1].slots[5].bytes = 32;
  ExpectInvalid(plan, "recv entry 1: moves 64 bytes of slot 5, which holds 32");
}

TEST(ValidatePlan, RejectsMismatchedMessageBytes) {
  Plan plan = TwoBlockCausalPlan();
  std::get<CommLaunch>(plan.forward[1].instructions[4]).recvs[0].bytes[1] = 32;
  ExpectInvalid(plan,
                "recv slot 5 moves 32 bytes as position 1 of the exchange with device 0, whose "
                "slot 6 there moves 64 bytes");
}

TEST(ValidatePlan, RejectsASendOfMoreOrLessThanItsPiece) {
  Plan plan = TwoBlockCausalPlan();
  auto& sends = std::get<CommLaunch>(plan.forward[0].instructions[5]).sends[0];
  auto& recvs = std::get<CommLaunch>(plan.forward[1].instructions[4]).recvs[0];
  sends.bytes[1] = recvs.bytes[1] = 32;
  ExpectInvalid(plan,
                "device 0, instruction 5 (CommLaunch 1): sends 32 bytes of slot 6, which holds an "
                "LSE accumulator of block 1/group 0 with 1 compute block (64 bytes)");
}

TEST(ValidatePlan, RejectsByteCountsThatDoNotMatchTheSlots) {
  Plan plan = TwoBlockCausalPlan();
  std::get<CommLaunch>(plan.forward[0].instructions[5]).sends[0].bytes.pop_back();
  ExpectInvalid(plan, "sends 2 slots to device 1 with 1 byte counts");
}

TEST(ValidatePlan, RejectsReadingASlotBeforeItsWait) {
  Plan plan = TwoBlockCausalPlan();
  std::swap(plan.forward[0].instructions[3], plan.forward[0].instructions[4]);
  ExpectInvalid(plan,
                "device 0, instruction 3 (BlockwiseAttention): tile 0 (compute block 1): reads q "
                "slot 2 before CommWait 0 that receives it");
}

TEST(ValidatePlan, RejectsOverwritingASlotStillBeingSent) {
  Plan plan = TwoBlockCausalPlan();
  auto& code = plan.forward[0].instructions;
  code.insert(code.begin() + 6, BlockwiseReduction{.kind = ReductionKind::kLseMerge,
                                                   .ops = {testing::MergeOp(5, 6)}});
  ExpectInvalid(plan, "overwrites destination slot 5 still being sent by CommLaunch 1");
}

TEST(ValidatePlan, RejectsOverwritingASlotStillBeingReceived) {
  Plan plan = TwoBlockCausalPlan();
  // Device 1 initialises its receive slots for the partial O before the data has arrived.
  auto& code = plan.forward[1].instructions;
  code.insert(code.begin() + 5, BlockwiseReduction{.kind = ReductionKind::kLseMerge,
                                                   .ops = {testing::MergeOp(4, 5)}});
  ExpectInvalid(plan, "overwrites destination slot 4 still being received by CommLaunch 1");
}

TEST(ValidatePlan, RejectsALaunchThatIsNeverWaited) {
  Plan plan = TwoBlockCausalPlan();
  plan.forward[0].instructions.pop_back();
  ExpectInvalid(plan,
                "forward, device 0, end of program: CommLaunch 1 (instruction 5) is never waited");
}

TEST(ValidatePlan, RejectsAWaitBeforeItsLaunch) {
  Plan plan = TwoBlockCausalPlan();
  std::swap(plan.forward[0].instructions[5], plan.forward[0].instructions[7]);
  ExpectInvalid(plan, "instruction 5 (CommWait 1): CommWait 1 comes before its CommLaunch 1");
}

TEST(ValidatePlan, RejectsDuplicateLaunchIds) {
  Plan plan = TwoBlockCausalPlan();
  Forward<CommLaunch>(plan, 0, 5).id = 0;
  Forward<CommWait>(plan, 0, 7).id = 0;
  ExpectInvalid(plan, "forward, device 0: instruction 5 (CommLaunch 0): duplicate CommLaunch id 0");
}

TEST(ValidatePlan, ReportsADeadlock) {
  Plan plan = TwoBlockCausalPlan();
  // Device 1 first receives the partial O (launch 1), and only then sends Q1 (launch 0): device 0
  // waits for launch 0 before it launches 1.
  auto& code = plan.forward[1].instructions;
  code = {code[4], code[5], code[0], code[1], code[2], code[3], code[6]};
  ExpectInvalid(plan,
                "forward: deadlock: device 0 waits at instruction 3 (CommWait 0) for device 1; "
                "device 1 waits at instruction 1 (CommWait 1) for device 0");
}

TEST(ValidatePlan, RejectsAContentOfAnotherKindInASlot) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseCopy>(plan, 0, 6).ops = {{3, 8}, {4, 7}};
  ExpectInvalid(plan,
                "op 0: destination slot 8 is of kind LSE, cannot hold an O accumulator of block "
                "0/group 0 with 1 compute block");
}

TEST(ValidatePlan, RejectsAReceiveIntoASlotOfAnotherKind) {
  Plan plan = TwoBlockCausalPlan();
  plan.forward[0].slots[2] = testing::FixtureSlot(TensorKind::kO);  // same bytes as Q
  ExpectInvalid(plan,
                "instruction 3 (CommWait 0): from device 1: recv slot 2 is of kind O, cannot hold "
                "Q of block 1/group 0");
}

TEST(ValidatePlan, RejectsATileComputedTwice) {
  Plan plan = TwoBlockCausalPlan();
  auto& tiles = Forward<BlockwiseAttention>(plan, 1, 2).tiles;
  tiles.push_back(tiles[0]);
  ExpectInvalid(plan, "tile 1 (compute block 2): compute block 2 is computed a second time");
}

TEST(ValidatePlan, RejectsAnOutputMissingATile) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseAttention>(plan, 0, 4).tiles.clear();
  ExpectInvalid(plan,
                "forward, device 1, output 0 (O of block 1/group 0, slot 6): holds 1 of its 2 "
                "compute blocks, missing compute block 1");
}

TEST(ValidatePlan, RejectsAReductionThatDropsAPartialResult) {
  Plan plan = TwoBlockCausalPlan();
  Backward<BlockwiseReduction>(plan, 1, 7).ops[0].sources = {6};
  ExpectInvalid(plan,
                "backward, device 1, output 0 (dQ of block 1/group 0, slot 9): holds 1 of its 2 "
                "compute blocks, missing compute block 1");
}

TEST(ValidatePlan, RejectsOverlappingReductionSources) {
  Plan plan = TwoBlockCausalPlan();
  ReductionOp& merge = Forward<BlockwiseReduction>(plan, 1, 6).ops[0];
  merge.sources = {2, 4, 2};
  merge.lse_sources = {3, 5, 3};
  ExpectInvalid(plan, "op 0: sources 0 and 2 overlap: both contain compute block 2");
}

TEST(ValidatePlan, RejectsOverlappingSumSources) {
  Plan plan = TwoBlockCausalPlan();
  Backward<BlockwiseReduction>(plan, 0, 8).ops[0].sources = {11, 13, 11};
  ExpectInvalid(plan, "sources 0 and 2 overlap: both contain compute block 0");
}

TEST(ValidatePlan, RejectsAnOAndLseSourceThatAreNotOnePair) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseReduction>(plan, 1, 6).ops[0].lse_sources = {5, 3};
  ExpectInvalid(plan, "source 0 slot 2 and lse source 0 slot 5 are not one pair");
}

TEST(ValidatePlan, RejectsSlicesOfTheWrongArea) {
  Plan plan = TwoBlockCausalPlan();
  // Rows see [0, i) instead of [0, i]: 0 + 1 + 2 + 3 = 6 pairs instead of 10.
  Forward<BlockwiseAttention>(plan, 0, 2).slices[0].hi.base = 0;
  ExpectInvalid(plan, "tile 0 (compute block 0): slices cover area 6, the compute block has 10");
}

TEST(ValidatePlan, RejectsSlicesOutsideTheTile) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseAttention>(plan, 0, 4).slices[0].row_end = 5;
  ExpectInvalid(plan, "slice 0: rows [0, 5) are not inside the tile's 4 rows");
}

TEST(ValidatePlan, RejectsATileWhoseRowColumnOrSlicesAreNotInItsCall) {
  Plan plan = TwoBlockCausalPlan();
  AttentionTile& tile = Forward<BlockwiseAttention>(plan, 0, 4).tiles[0];
  tile.first_slice = 1;
  ExpectInvalid(plan,
                "row 0, column 0 or slices [1, 1 + 1) are not in the call (1 rows, 1 columns, 1 "
                "slices)");
  tile.first_slice = -1;
  ExpectInvalid(plan, "slices [-1, -1 + 1) are not in the call");
  tile.first_slice = 0;
  tile.row = 1;
  ExpectInvalid(plan, "tile 0 (compute block 1): row 1, column 0 or slices [0, 0 + 1)");
  tile.row = 0;
  tile.column = -1;
  ExpectInvalid(plan, "tile 0 (compute block 1): row 0, column -1 or slices [0, 0 + 1)");
}

TEST(ValidatePlan, RejectsARowOrColumnThatSetsASlotItsPassDoesNotUse) {
  Plan plan = TwoBlockCausalPlan();
  Forward<BlockwiseAttention>(plan, 0, 4).rows[0].dq = 3;
  ExpectInvalid(plan,
                "instruction 4 (BlockwiseAttention): row 0: sets dq slot 3 (unused: must be -1)");
  plan = TwoBlockCausalPlan();
  Forward<BlockwiseAttention>(plan, 0, 4).columns[0].dkv = 3;
  ExpectInvalid(plan, "column 0: sets dkv slot 3 (unused: must be -1)");
  plan = TwoBlockCausalPlan();
  Backward<BlockwiseAttention>(plan, 0, 5).rows[0].out = 3;
  ExpectInvalid(plan, "row 0: sets out slot 3 (unused: must be -1)");
}

TEST(ValidatePlan, RejectsARowNoTileUsesWithAMissingSlot) {
  Plan plan = TwoBlockCausalPlan();
  auto& call = Forward<BlockwiseAttention>(plan, 0, 4);
  call.rows.push_back(AttentionRow{.q = 1, .out = 99, .lse = 2});
  ExpectInvalid(plan, "row 1: out slot 99 does not exist");
}

TEST(ValidatePlan, RejectsAnAccumulatorOfAnotherPiece) {
  Plan plan = TwoBlockCausalPlan();
  AttentionRow& row = Forward<BlockwiseAttention>(plan, 0, 4).rows[0];
  row.out = 3;
  row.lse = 4;
  ExpectInvalid(plan,
                "out slot 3 holds an O accumulator of block 0/group 0 with 1 compute block, "
                "expected an O accumulator of block 1/group 0");
}

TEST(ValidatePlan, RejectsAnOutputOverwrittenAtTheEnd) {
  Plan plan = TwoBlockCausalPlan();
  plan.backward[1].instructions.push_back(
      BlockwiseReduction{.kind = ReductionKind::kSum, .ops = {testing::SumOp(9)}});
  ExpectInvalid(plan,
                "backward, device 1, output 0 (dQ of block 1/group 0, slot 9): holds 0 of its 2 "
                "compute blocks, missing compute blocks 1, 2");
}

TEST(ValidatePlan, RejectsADeltaOfAnotherPiece) {
  Plan plan = TwoBlockCausalPlan();
  auto& call = Backward<BlockwiseAttention>(plan, 0, 5);
  call.rows[call.tiles[0].row].delta = 5;
  ExpectInvalid(plan,
                "tile 0 (compute block 1): delta slot 5 holds Delta of block 0/group 0, expected "
                "Delta of block 1/group 0");
}

TEST(ValidatePlan, RejectsADeltaFromSwappedSources) {
  Plan plan = TwoBlockCausalPlan();
  Backward<BlockwiseReduction>(plan, 1, 0).ops[0].sources = {4, 2};
  ExpectInvalid(plan, "op 0: source 0 slot 4 holds dO of block 1/group 0, expected O");
}

TEST(ValidatePlan, RejectsOpsOfOneInstructionThatWriteOneSlot) {
  Plan plan = TwoBlockCausalPlan();
  Backward<BlockwiseReduction>(plan, 0, 2).ops[1] = testing::SumOp(10);
  ExpectInvalid(plan, "ops 0 and 1 both write slot 10");
}

TEST(ValidatePlan, RejectsAMissingOutputBinding) {
  Plan plan = TwoBlockCausalPlan();
  plan.forward[1].outputs.pop_back();
  ExpectInvalid(plan, "forward: no device outputs LSE of block 1/group 0 (its owner is device 1)");
}

TEST(ValidatePlan, RejectsAnInputBoundOnAnotherDevice) {
  Plan plan = TwoBlockCausalPlan();
  plan.backward[0].inputs[2].piece = testing::FixturePiece(1);
  ExpectInvalid(plan, "backward, device 0: input 2: O of block 1/group 0 is owned by device 1");
}

// Every id field of a program: slot ids, launch ids, peers, compute blocks, pieces.
std::vector<int32_t*> IdFields(Program& program) {
  std::vector<int32_t*> fields;
  for (std::vector<Binding>* bindings : {&program.inputs, &program.outputs}) {
    for (Binding& b : *bindings) {
      fields.insert(fields.end(), {&b.slot, &b.piece.block.value, &b.piece.head_group});
    }
  }
  for (Instruction& instruction : program.instructions) {
    if (auto* a = std::get_if<BlockwiseAttention>(&instruction)) {
      fields.push_back(&a->division);
      for (AttentionRow& r : a->rows) {
        fields.insert(fields.end(), {&r.q, &r.out, &r.lse, &r.d_o, &r.delta, &r.dq});
      }
      for (AttentionColumn& c : a->columns) fields.insert(fields.end(), {&c.kv, &c.dkv});
      for (AttentionTile& t : a->tiles) {
        fields.insert(fields.end(), {&t.block.value, &t.row, &t.column, &t.first_slice});
      }
    } else if (auto* r = std::get_if<BlockwiseReduction>(&instruction)) {
      for (ReductionOp& op : r->ops) {
        fields.insert(fields.end(), {&op.destination, &op.lse_destination});
        for (SlotId& s : op.sources) fields.push_back(&s);
        for (SlotId& s : op.lse_sources) fields.push_back(&s);
      }
    } else if (auto* c = std::get_if<BlockwiseCopy>(&instruction)) {
      for (auto& [from, to] : c->ops) fields.insert(fields.end(), {&from, &to});
    } else if (auto* l = std::get_if<CommLaunch>(&instruction)) {
      fields.push_back(&l->id);
      for (std::vector<PeerSlots>* list : {&l->sends, &l->recvs}) {
        for (PeerSlots& p : *list) {
          fields.push_back(&p.peer.value);
          for (SlotId& s : p.slots) fields.push_back(&s);
        }
      }
    } else if (auto* w = std::get_if<CommWait>(&instruction)) {
      fields.push_back(&w->id);
    }
  }
  return fields;
}

TEST(ValidatePlan, ReturnsAnErrorForAnyDamagedIdWithoutCrashing) {
  int rejected = 0;
  for (uint32_t seed = 0; seed < 1000; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    Plan plan = TwoBlockCausalPlan();
    for (uint32_t m = 0; m < 1 + rng() % 3; ++m) {
      std::vector<Program>& programs = rng() % 2 == 0 ? plan.forward : plan.backward;
      std::vector<int32_t*> fields = IdFields(programs[rng() % programs.size()]);
      *fields[rng() % fields.size()] = static_cast<int32_t>(rng() % 20) - 3;  // -3 .. 16
    }
    const Status status = ValidatePlan(plan);
    if (status.ok()) continue;
    ++rejected;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  }
  EXPECT_GT(rejected, 800);
}

TEST(ValidatePlan, ReturnsAnErrorForDamagedSlicesWithoutCrashing) {
  const int64_t values[] = {INT64_MIN, -(int64_t{1} << 41) - 1, -5,       -1, 0, 1, 2, 4,
                            5,         int64_t{1} << 41,        INT64_MAX};
  for (int field = 0; field < 6; ++field) {
    for (int64_t v : values) {
      Plan plan = TwoBlockCausalPlan();
      Slice& s = Forward<BlockwiseAttention>(plan, 0, 2).slices[0];
      int64_t* fields[] = {&s.row_begin, &s.row_end, &s.lo.base,
                           &s.lo.slope,  &s.hi.base, &s.hi.slope};
      *fields[field] = v;
      const Status status = ValidatePlan(plan);
      EXPECT_TRUE(status.ok() || status.code() == StatusCode::kInvalidArgument)
          << status.ToString();
    }
  }
}

}  // namespace
}  // namespace dcp
