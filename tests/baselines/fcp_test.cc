// SPDX-License-Identifier: Apache-2.0
// FCP as a plan in dcp's IR: its placement (pairs, longest-first greedy), its congestion-free
// rounds, and its numerics against the dense reference on every mask family.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "dcp/baselines.h"
#include "testing/cases.h"
#include "testing/peer_cases.h"

namespace dcp {
namespace {

using testing::MakeMaskedBatch;
using testing::RandomLengths;

const AttentionShape kShape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kBFloat16};

BaselinePlan PlanFcp(const Batch& batch, const Topology& topology, int64_t block_tokens) {
  auto planned =
      PlanBaseline(Strategy::kFcp, batch,
                   BaselineOptions{.topology = topology, .fcp_block_tokens = block_tokens});
  DCP_CHECK(planned.ok(), "{}", planned.status().ToString());
  return *std::move(planned);
}

// Attention FLOPs (forward + backward) computed on each device.
std::vector<int64_t> DeviceCompute(const BaselinePlan& planned, int32_t devices) {
  std::vector<int64_t> load(devices, 0);
  for (size_t c = 0; c < planned.blocks.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = planned.blocks.compute_blocks[c];
    load[planned.placement.compute_device[c].value] +=
        planned.blocks.FlopsFwd(cb) + planned.blocks.FlopsBwd(cb);
  }
  return load;
}

TEST(Fcp, PairsBlockIWithBlockNMinusOneMinusIOfACausalSequence) {
  const Batch batch = MakeMaskedBatch({80, 72, 8}, "causal", kShape);
  const BaselinePlan planned = PlanFcp(batch, {.nodes = 1, .devices_per_node = 4}, 8);
  const BlockSet& set = planned.blocks;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int32_t first = set.sequence_first_block[s], last = set.sequence_first_block[s + 1];
    for (int32_t i = first, j = last - 1; i < j; ++i, --j) {
      EXPECT_EQ(planned.placement.data_device[i], planned.placement.data_device[j])
          << "sequence " << s << " blocks " << i - first << " and " << j - first;
    }
  }
  EXPECT_EQ(set.block_size, 8);
  EXPECT_EQ(set.data_blocks.size(), 10u + 9u + 1u);
}

TEST(Fcp, ComputesEveryTileWhereItsQueriesLive) {
  const Batch batch = MakeMaskedBatch({200, 50}, "sliding-window:window=37", kShape);
  const BaselinePlan planned = PlanFcp(batch, {.nodes = 2, .devices_per_node = 2}, 16);
  for (size_t c = 0; c < planned.blocks.compute_blocks.size(); ++c) {
    EXPECT_EQ(planned.placement.compute_device[c],
              planned.placement.data_device[planned.blocks.compute_blocks[c].q_block.value]);
  }
  for (const Transfer& t : planned.schedule.transfers) EXPECT_EQ(t.side, Side::kColumn);
}

// The units the test expects: pairs of a causal sequence, single blocks otherwise.
std::vector<std::vector<int32_t>> ExpectedUnits(const Batch& batch, const BlockSet& set) {
  std::vector<std::vector<int32_t>> units;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int32_t first = set.sequence_first_block[s], last = set.sequence_first_block[s + 1];
    if (batch.mask_specs()[s].family == MaskFamily::kCausal) {
      for (int32_t i = first, j = last - 1; i <= j; ++i, --j) {
        units.push_back(i < j ? std::vector<int32_t>{i, j} : std::vector<int32_t>{i});
      }
    } else {
      for (int32_t b = first; b < last; ++b) units.push_back({b});
    }
  }
  return units;
}

// Longest first onto the least loaded: the device that ends heaviest got its last unit while it
// was the lightest, so it ends at most one unit (the largest) above the mean.
TEST(Fcp, GreedyEndsWithinTheLargestUnitOfTheMeanOnRandomBatches) {
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    std::mt19937_64 rng(seed);
    const char* mask = testing::kEndToEndMasks[rng() % std::size(testing::kEndToEndMasks)];
    const std::vector<int64_t> lengths = RandomLengths(rng, 8, 400);
    const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 2),
                            .devices_per_node = 1 + static_cast<int32_t>(rng() % 8)};
    const int64_t block_tokens = 4 << (rng() % 4);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " mask " << mask << " topology "
                                      << topology.ToString() << " block " << block_tokens);
    const Batch batch = MakeMaskedBatch(lengths, mask, kShape);
    const BaselinePlan planned = PlanFcp(batch, topology, block_tokens);
    const BlockSet& set = planned.blocks;

    std::vector<int64_t> row_compute(set.data_blocks.size(), 0);
    for (const ComputeBlock& c : set.compute_blocks) {
      row_compute[c.q_block.value] += set.FlopsFwd(c) + set.FlopsBwd(c);
    }
    int64_t largest = 0;
    for (const std::vector<int32_t>& unit : ExpectedUnits(batch, set)) {
      int64_t compute = 0;
      for (int32_t b : unit) {
        compute += row_compute[b];
        EXPECT_EQ(planned.placement.data_device[b], planned.placement.data_device[unit[0]]);
      }
      largest = std::max(largest, compute);
    }
    const std::vector<int64_t> load = DeviceCompute(planned, topology.devices());
    int64_t total = 0;
    for (int64_t l : load) total += l;
    EXPECT_LE(*std::max_element(load.begin(), load.end()) * topology.devices(),
              total + largest * topology.devices());
  }
}

TEST(Fcp, BreaksComputeTiesByBytesThenDeviceId) {
  // Full masks, blocks of 12: units of 192 (12 tokens x 16), 64 (8 x 8), 64 (4 x 16) and
  // 4 (2 x 2) pairs. On 3 devices the first three take one device each; devices 1 and 2 then
  // tie on compute (64), and the last unit goes to device 2, which holds 4 tokens, not 8.
  const Batch batch = MakeMaskedBatch({16, 8, 2}, "full", kShape);
  const BaselinePlan planned = PlanFcp(batch, {.nodes = 1, .devices_per_node = 3}, 12);
  std::vector<int32_t> device;
  for (DeviceId d : planned.placement.data_device) device.push_back(d.value);
  // Blocks: sequence 0 [0, 12) and [12, 16), sequence 1 [0, 8), sequence 2 [0, 2).
  EXPECT_EQ(device, (std::vector<int32_t>{0, 2, 1, 2}));
}

// Rounds: per division every device sends to at most one device and receives from at most one,
// each needed KV block goes once to each device needing it, in the division of its tiles.
void ExpectCongestionFreeRounds(const BaselinePlan& planned, int32_t devices) {
  const std::vector<DeviceId>& owner = planned.placement.data_device;
  std::map<int32_t, std::set<std::pair<int32_t, int32_t>>> pairs;  // per division
  std::map<std::pair<int32_t, int32_t>, int32_t> arrives;          // (block, device) -> division
  for (const Transfer& t : planned.schedule.transfers) {
    EXPECT_GE(t.division, 1);
    EXPECT_LT(t.division, planned.schedule.n_divisions);
    EXPECT_EQ(t.source, owner[t.block.value]);
    EXPECT_NE(t.source, t.destination);
    pairs[t.division].insert({t.source.value, t.destination.value});
    EXPECT_TRUE(arrives.emplace(std::pair{t.block.value, t.destination.value}, t.division).second)
        << "block " << t.block.value << " sent twice to " << t.destination.value;
  }
  for (const auto& [division, edges] : pairs) {
    std::set<int32_t> senders, receivers;
    for (const auto& [from, to] : edges) {
      EXPECT_TRUE(senders.insert(from).second)
          << "device " << from << " sends twice in " << division;
      EXPECT_TRUE(receivers.insert(to).second)
          << "device " << to << " receives twice in " << division;
    }
  }
  std::set<std::pair<int32_t, int32_t>> needed;
  for (size_t c = 0; c < planned.blocks.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = planned.blocks.compute_blocks[c];
    const int32_t at = planned.placement.compute_device[c].value;
    const int32_t division = planned.schedule.compute_division[c];
    if (owner[cb.kv_block.value].value == at) {
      EXPECT_EQ(division, 0);
      continue;
    }
    needed.insert({cb.kv_block.value, at});
    const auto it = arrives.find({cb.kv_block.value, at});
    ASSERT_NE(it, arrives.end());
    EXPECT_EQ(it->second, division);
  }
  EXPECT_EQ(needed.size(), arrives.size());  // nothing moves that no tile reads

  // The compiled forward programs: one message out and one in per device and launch.
  for (const Program& program : planned.plan.forward) {
    for (const Instruction& instruction : program.instructions) {
      if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
        EXPECT_LE(launch->sends.size(), 1u) << "device " << program.device.value;
        EXPECT_LE(launch->recvs.size(), 1u) << "device " << program.device.value;
      }
    }
  }
  EXPECT_LE(planned.schedule.n_divisions, 2 * devices);  // at most 2 * (devices - 1) - 1 rounds
}

TEST(Fcp, SendsKvInCongestionFreeRounds) {
  for (uint64_t seed = 0; seed < testing::RandomCases(100); ++seed) {
    std::mt19937_64 rng(seed);
    const char* mask = testing::kEndToEndMasks[rng() % std::size(testing::kEndToEndMasks)];
    const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 4),
                            .devices_per_node = 1 + static_cast<int32_t>(rng() % 8)};
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " mask " << mask << " topology " << topology.ToString());
    const Batch batch = MakeMaskedBatch(RandomLengths(rng, 6, 500), mask, kShape);
    ExpectCongestionFreeRounds(PlanFcp(batch, topology, 8 << (rng() % 3)), topology.devices());
  }
}

TEST(Fcp, OneDeviceNeedsOneDivisionAndNoTransfer) {
  const Batch batch = MakeMaskedBatch({100, 30}, "causal", kShape);
  const BaselinePlan planned = PlanFcp(batch, {.nodes = 1, .devices_per_node = 1}, 16);
  EXPECT_EQ(planned.schedule.n_divisions, 1);
  EXPECT_TRUE(planned.schedule.transfers.empty());
  EXPECT_EQ(planned.plan.origin, "fcp:16");
  EXPECT_EQ(planned.padded_tokens, 0);
}

TEST(Fcp, RejectsABlockSizeBelowOne) {
  const Batch batch = MakeMaskedBatch({100}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kFcp, batch,
                              BaselineOptions{.topology = {1, 2}, .fcp_block_tokens = 0});
  ASSERT_FALSE(planned.ok());
  EXPECT_EQ(planned.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(planned.status().message().find("fcp_block_tokens=0"), std::string::npos);
}

TEST(Fcp, SamePlanForTheSameBatch) {
  const Batch batch = MakeMaskedBatch({300, 120, 77, 5}, "causal", kShape);
  const BaselinePlan a = PlanFcp(batch, {.nodes = 2, .devices_per_node = 4}, 16);
  const BaselinePlan b = PlanFcp(batch, {.nodes = 2, .devices_per_node = 4}, 16);
  std::string encoded_a, encoded_b;
  EncodePlan(a.plan, &encoded_a);
  EncodePlan(b.plan, &encoded_b);
  EXPECT_EQ(encoded_a, encoded_b);
}

class FcpOnEveryMaskFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(FcpOnEveryMaskFamily, MatchesTheDenseReference) {
  const char* mask = GetParam();
  for (uint64_t seed = 0; seed < testing::RandomCases(16); ++seed) {
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> lengths = RandomLengths(rng, 4, 200);
    const int64_t kv_heads[] = {4, 2, 1};
    const AttentionShape shape{.heads = 4,
                               .kv_heads = kv_heads[rng() % 3],
                               .head_dim = 8,
                               .dtype = rng() % 2 ? DType::kFloat32 : DType::kBFloat16};
    const Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 2),
                            .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
    const int64_t block_tokens = int64_t{8} << (rng() % 4);
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " topology " << topology.ToString() << " block "
                 << block_tokens << " kv_heads " << shape.kv_heads << " " << ToString(shape.dtype));
    const Batch batch = MakeMaskedBatch(lengths, mask, shape);
    auto planned = PlanBaseline(Strategy::kFcp, batch,
                                {.topology = topology, .fcp_block_tokens = block_tokens});
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    testing::ExpectMatchesDenseReference(*planned, batch, seed);
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, FcpOnEveryMaskFamily, ::testing::ValuesIn(testing::kEndToEndMasks),
                         testing::MaskFamilyName);

}  // namespace
}  // namespace dcp
