// SPDX-License-Identifier: Apache-2.0
// The token map: every token of the batch belongs to exactly one device, in the device's local
// order, and dispatch / undispatch move data between that order and the packed global one.
#include <gtest/gtest.h>

#include <random>

#include "dcp/planner.h"
#include "dcp/token_map.h"
#include "testing/cases.h"

namespace dcp {
namespace {

struct Planned {
  Batch batch;
  PlannedBatch planned;
};

Planned RandomPlan(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lengths(1 + rng() % 6);
  for (int64_t& l : lengths) l = 1 + static_cast<int64_t>(rng() % 700);
  const char* masks[] = {"causal", "lambda:sink=4,window=50", "documents:count=2"};
  const char* mask = masks[rng() % 3];
  std::vector<MaskSpec> specs;
  for (int64_t l : lengths) specs.push_back(*MaskSpec::Parse(l < 3 ? "causal" : mask));
  auto batch = Batch::Create(lengths, specs, AttentionShape{.heads = 2, .kv_heads = 1, .head_dim = 4});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 3),
                          .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
  const PlanOptions options = SinglePassOptions(topology, int64_t{16} << (rng() % 4));
  auto planned = PlanBatch(*batch, options);
  EXPECT_TRUE(planned.ok()) << planned.status().ToString();
  return {std::move(batch).value(), std::move(planned).value()};
}

TEST(TokenMap, EveryTokenBelongsToExactlyOneDeviceInBlockOrder) {
  for (uint64_t seed = 0; seed < testing::RandomCases(60); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const Planned p = RandomPlan(seed);
    const Plan& plan = p.planned.plan;
    const TokenMap map = TokenMap::Of(plan);
    ASSERT_EQ(map.devices(), plan.topology.devices());
    ASSERT_EQ(map.seqlens, p.batch.seqlens());
    std::vector<std::vector<int>> owners(p.batch.seqlens().size());
    for (size_t s = 0; s < owners.size(); ++s) owners[s].assign(p.batch.seqlens()[s], 0);
    for (int32_t d = 0; d < map.devices(); ++d) {
      for (const TokenRun& run : map.runs[d]) {
        ASSERT_GT(run.count, 0);
        for (int64_t t = run.begin; t < run.begin + run.count; ++t) {
          ++owners[run.sequence.value][t];
        }
      }
      // Local order is the order of the device's blocks: (sequence, token) ascending.
      for (size_t i = 1; i < map.runs[d].size(); ++i) {
        const TokenRun& a = map.runs[d][i - 1];
        const TokenRun& b = map.runs[d][i];
        EXPECT_TRUE(a.sequence < b.sequence ||
                    (a.sequence == b.sequence && a.begin + a.count < b.begin));
      }
    }
    for (const std::vector<int>& sequence : owners) {
      for (int owned : sequence) ASSERT_EQ(owned, 1);
    }
    // The placement's map (before compiling) is the plan's.
    EXPECT_EQ(TokenMap::Of(p.planned.blocks, p.planned.placed.placement, map.devices()).runs,
              map.runs);
  }
}

TEST(TokenMap, DispatchThenUndispatchIsTheIdentity) {
  for (uint64_t seed = 0; seed < testing::RandomCases(60); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const Planned p = RandomPlan(seed);
    const TokenMap map = TokenMap::Of(p.planned.plan);
    const int64_t width = 1 + static_cast<int64_t>(seed % 5);
    std::vector<int64_t> global(static_cast<size_t>(map.total_tokens() * width));
    std::mt19937_64 rng(seed);
    for (int64_t& x : global) x = static_cast<int64_t>(rng());
    std::vector<int64_t> back(global.size(), -1);
    int64_t local_total = 0;
    for (int32_t d = 0; d < map.devices(); ++d) {
      const std::vector<int64_t> local =
          Dispatch<int64_t>(global, width, map, DeviceId{d});
      ASSERT_EQ(static_cast<int64_t>(local.size()), map.LocalTokens(DeviceId{d}) * width);
      local_total += map.LocalTokens(DeviceId{d});
      Undispatch<int64_t>(local, width, map, DeviceId{d}, back);
    }
    EXPECT_EQ(local_total, map.total_tokens());
    EXPECT_EQ(back, global);
  }
}

TEST(TokenMap, PositionIdsAreEachTokensPlaceInItsSequence) {
  for (uint64_t seed = 0; seed < testing::RandomCases(30); ++seed) {
    const Planned p = RandomPlan(seed);
    const TokenMap map = TokenMap::Of(p.planned.plan);
    // Independently: the packed index minus the first packed index of the token's sequence.
    std::vector<int64_t> sequence_of, position_of;
    for (size_t s = 0; s < map.seqlens.size(); ++s) {
      for (int64_t t = 0; t < map.seqlens[s]; ++t) {
        sequence_of.push_back(static_cast<int64_t>(s));
        position_of.push_back(t);
      }
    }
    for (int32_t d = 0; d < map.devices(); ++d) {
      const std::vector<int64_t> global = map.GlobalIndices(DeviceId{d});
      const std::vector<int64_t> positions = map.PositionIds(DeviceId{d});
      ASSERT_EQ(global.size(), positions.size());
      for (size_t i = 0; i < global.size(); ++i) {
        EXPECT_EQ(positions[i], position_of[global[i]]);
      }
    }
  }
}

TEST(TokenMap, HandMadePlacement) {
  // Two sequences of 5 and 3 tokens in blocks of 2: blocks s0[0,2) s0[2,4) s0[4,5) s1[0,2)
  // s1[2,3), owned by devices 1 0 1 1 0.
  Plan plan;
  plan.topology = {.nodes = 1, .devices_per_node = 2};
  plan.seqlens = {5, 3};
  plan.blocks = {{SequenceId{0}, 0, 2}, {SequenceId{0}, 2, 2}, {SequenceId{0}, 4, 1},
                 {SequenceId{1}, 0, 2}, {SequenceId{1}, 2, 1}};
  plan.block_owner = {DeviceId{1}, DeviceId{0}, DeviceId{1}, DeviceId{1}, DeviceId{0}};
  const TokenMap map = TokenMap::Of(plan);
  EXPECT_EQ(map.runs[0], (std::vector<TokenRun>{{SequenceId{0}, 2, 2}, {SequenceId{1}, 2, 1}}));
  EXPECT_EQ(map.runs[1], (std::vector<TokenRun>{{SequenceId{0}, 0, 2},
                                                {SequenceId{0}, 4, 1},
                                                {SequenceId{1}, 0, 2}}));
  EXPECT_EQ(map.GlobalIndices(DeviceId{0}), (std::vector<int64_t>{2, 3, 7}));
  EXPECT_EQ(map.GlobalIndices(DeviceId{1}), (std::vector<int64_t>{0, 1, 4, 5, 6}));
  EXPECT_EQ(map.PositionIds(DeviceId{1}), (std::vector<int64_t>{0, 1, 4, 0, 1}));
}

}  // namespace
}  // namespace dcp
