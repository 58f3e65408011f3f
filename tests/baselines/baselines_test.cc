// SPDX-License-Identifier: Apache-2.0
// The static baselines: their plans must be valid, compute exactly what the dense reference
// computes, and move data the way the strategy does (checked against counts made by hand).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "baselines/peer_strategies.h"
#include "dcp/baselines.h"
#include "dcp/runtime.h"
#include "testing/cases.h"
#include "testing/end_to_end.h"

namespace dcp {
namespace {

using testing::FillInputs;
const auto& kMasks = testing::kEndToEndMasks;

constexpr Strategy kBaselines[] = {Strategy::kRing, Strategy::kZigzag, Strategy::kUlysses,
                                   Strategy::kTe, Strategy::kLoongTrain};

Batch MakeBatch(std::vector<int64_t> lengths, const char* mask, AttentionShape shape) {
  std::vector<MaskSpec> masks;
  for (int64_t l : lengths) {
    masks.push_back(*MaskSpec::Parse(mask[0] == 'd' && l < 3 ? "causal" : mask));
  }
  auto batch = Batch::Create(std::move(lengths), std::move(masks), shape);
  DCP_CHECK(batch.ok(), "{}", batch.status().ToString());
  return *std::move(batch);
}

// The context ranks a te / loongtrain layout has on this shape and topology.
int32_t ContextRanks(const AttentionShape& shape, const Topology& topology) {
  return topology.devices() / static_cast<int32_t>(std::gcd(shape.kv_heads, int64_t{topology.devices()}));
}

TEST(PlanBaseline, EveryStrategyMatchesTheDenseReference) {
  int ran = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(100); ++seed) {
    std::mt19937_64 rng(seed);
    const Strategy strategy = kBaselines[seed % std::size(kBaselines)];
    std::vector<int64_t> lengths(1 + rng() % 3);
    for (int64_t& l : lengths) {
      l = rng() % 6 == 0 ? 1 + static_cast<int64_t>(rng() % 3)
                         : 3 + static_cast<int64_t>(rng() % 120);
    }
    const int64_t kv_heads[] = {8, 2, 1};
    const AttentionShape shape{.heads = 8,
                               .kv_heads = kv_heads[rng() % 3],
                               .head_dim = 8,
                               .dtype = rng() % 2 ? DType::kFloat32 : DType::kBFloat16};
    Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 2),
                      .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
    if (strategy == Strategy::kUlysses) {  // ulysses needs P | kv_heads
      topology = {.nodes = 1, .devices_per_node = static_cast<int32_t>(shape.kv_heads)};
    }
    BaselineOptions options{.topology = topology};
    if (strategy == Strategy::kLoongTrain) {
      const int32_t ranks = ContextRanks(shape, topology);
      for (int32_t w : {4, 2, 1}) {
        if (ranks % w == 0 && rng() % 2 == 0) {
          options.inner_ring = w;
          break;
        }
      }
    }
    const char* mask = kMasks[rng() % std::size(kMasks)];
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " " << ToString(strategy) << " mask " << mask
                 << " topology " << topology.ToString() << " kv_heads " << shape.kv_heads
                 << " inner ring " << options.inner_ring << " " << ToString(shape.dtype));
    const Batch batch = MakeBatch(lengths, mask, shape);
    auto planned = PlanBaseline(strategy, batch, options);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const Status valid = ValidatePlan(planned->plan);
    ASSERT_TRUE(valid.ok()) << valid.ToString();

    BatchTensors run = BatchTensors::ZerosFor(planned->plan);
    FillInputs(seed, shape.dtype, run);
    BatchTensors reference = run;
    ASSERT_TRUE(RunPlanInProcess(planned->plan, run, {}, 10.0).ok());
    DenseAttention(batch, 0, reference);
    testing::ExpectWithinTolerance(run, reference, shape.dtype);
    ++ran;
  }
  EXPECT_EQ(ran, static_cast<int>(testing::RandomCases(100)));
}

// (source, destination) -> bytes of every message of a pass, the output exchange included.
std::map<std::pair<int32_t, int32_t>, int64_t> Messages(const Plan& plan, Pass pass) {
  std::map<std::pair<int32_t, int32_t>, int64_t> messages;
  for (const Program& p : pass == Pass::kForward ? plan.forward : plan.backward) {
    for (const Instruction& instruction : p.instructions) {
      if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
        for (const PeerSlots& send : launch->sends) {
          for (int64_t b : send.bytes) messages[{p.device.value, send.peer.value}] += b;
        }
      }
    }
  }
  return messages;
}

// Bytes `from` sends `to` in `messages` (0 when nothing).
int64_t Sent(const std::map<std::pair<int32_t, int32_t>, int64_t>& messages, int32_t from,
             int32_t to) {
  const auto it = messages.find({from, to});
  return it == messages.end() ? int64_t{0} : it->second;
}

// A ring's messages: each of `devices` devices sends `bytes` to its successor, and nothing else.
void ExpectOnlyToSuccessors(const std::map<std::pair<int32_t, int32_t>, int64_t>& messages,
                            int32_t devices, int64_t bytes) {
  ASSERT_EQ(messages.size(), static_cast<size_t>(devices));
  for (const auto& [ends, sent] : messages) {
    EXPECT_EQ(ends.second, (ends.first + 1) % devices);
    EXPECT_EQ(sent, bytes);
  }
}

const AttentionShape kShape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kBFloat16};
constexpr int64_t kKvBytesPerToken = 2 * 2 * 8 * 2;  // K and V, 2 KV heads, d 8, bf16
constexpr int64_t kQBytesPerToken = 4 * 8 * 2;

TEST(PlanBaseline, RingPassesKvToTheNextDeviceInPMinusOneSteps) {
  const Topology topology{.nodes = 2, .devices_per_node = 2};
  const Batch batch = MakeBatch({64, 32}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kRing, batch, {.topology = topology});
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(planned->plan.n_divisions, 4);
  EXPECT_EQ(planned->padded_tokens, 0);
  // Every device sends the KV of one chunk of each sequence (16 + 8 tokens) in each of 3 steps,
  // and only to its successor; queries and outputs never move.
  ExpectOnlyToSuccessors(Messages(planned->plan, Pass::kForward), 4, 3 * 24 * kKvBytesPerToken);
  // Backward: KV goes round the ring again and partial dKV follows it hop by hop, back home to
  // its owner from the last hop: still only to the successor. Each device sends the KV of 24
  // tokens in each of 3 steps; every chunk's partial dKV makes 4 hops (3 in fp32 round the
  // ring, the last one home in the storage dtype), so each device sends 3 fp32 and 1 bf16 dKV
  // hop of 24 tokens.
  ExpectOnlyToSuccessors(Messages(planned->plan, Pass::kBackward), 4,
                         3 * 24 * kKvBytesPerToken + 3 * 24 * 2 * kKvBytesPerToken +
                             24 * kKvBytesPerToken);
  // Chunk r of every sequence is on device r.
  for (size_t b = 0; b < planned->blocks.data_blocks.size(); ++b) {
    EXPECT_EQ(planned->placement.data_device[b].value,
              planned->blocks.data_blocks[b].index_in_sequence);
  }
}

TEST(PlanBaseline, ZigzagPairsChunksAndBalancesCausalWork) {
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  const Batch batch = MakeBatch({80, 10}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kZigzag, batch, {.topology = topology});
  ASSERT_TRUE(planned.ok());
  // The 80-token sequence is in 8 chunks of 10: device r holds chunks r and 7 - r.
  for (size_t b = 0; b < planned->blocks.data_blocks.size(); ++b) {
    const DataBlock& d = planned->blocks.data_blocks[b];
    if (d.sequence.value != 0) continue;
    const int32_t chunk = d.index_in_sequence;
    EXPECT_EQ(planned->placement.data_device[b].value, chunk < 4 ? chunk : 7 - chunk);
  }
  // Padding: 80 is a multiple of 2P = 8, 10 needs 6 more tokens.
  EXPECT_EQ(planned->padded_tokens, 6);
  // The long sequence's causal FLOPs are equal on every device.
  std::vector<int64_t> flops(4, 0);
  for (size_t c = 0; c < planned->blocks.compute_blocks.size(); ++c) {
    const ComputeBlock& cb = planned->blocks.compute_blocks[c];
    if (cb.sequence.value == 0) {
      flops[planned->placement.compute_device[c].value] += planned->blocks.FlopsFwd(cb);
    }
  }
  for (int64_t f : flops) EXPECT_EQ(f, flops[0]);
}

// Zigzag's bytes by hand: 80 tokens on 4 devices are 8 chunks of 10, device r holding chunks r
// and 7 - r (20 tokens). Forward, each device sends the KV of its 20 tokens to its successor in
// each of P - 1 = 3 steps, and nothing else (queries and outputs stay). Backward, the KV goes
// round again (3 steps of 20 tokens) and each device's partial dKV of the 20 tokens follows it:
// 3 hops in fp32 (twice the bf16 bytes) round the ring and the last one home in bf16.
TEST(PlanBaseline, ZigzagSendsItsTwoChunksKvToItsSuccessorInPMinusOneSteps) {
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  const Batch batch = MakeBatch({80}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kZigzag, batch, {.topology = topology});
  ASSERT_TRUE(planned.ok());
  ExpectOnlyToSuccessors(Messages(planned->plan, Pass::kForward), 4, 3 * 20 * kKvBytesPerToken);
  ExpectOnlyToSuccessors(Messages(planned->plan, Pass::kBackward), 4,
                         3 * 20 * kKvBytesPerToken + 3 * 20 * 2 * kKvBytesPerToken +
                             20 * kKvBytesPerToken);
}

// TransformerEngine's bytes by hand, 64 causal tokens on 1x4 with 4 query and 2 KV heads: h = 2
// head ranks, 2 context ranks, 4 zigzag chunks of 16 tokens (position 0 holds chunks 0 and 3,
// position 1 chunks 1 and 2), each cut into 2 sub-chunks of 8 tokens owned by devices 2p and
// 2p + 1 in turn: every device owns 16 tokens. Per token and head group: Q, O, dO and dQ 32 bytes
// (2 heads x 8 x bf16), KV and dKV 32 (1 KV head x K, V x 8 x bf16), LSE and Delta 8 (2 x fp32).
//  - a2a partners (devices 2p, 2p + 1), forward: the sender's 16 tokens of the partner's head
//    group, Q and KV (16 x 64), and O + LSE of the partner's 16 tokens computed for the sender's
//    head group (16 x 40): 1664. Backward: Q, dO, LSE, Delta and KV in (16 x 112), dQ back
//    (16 x 32; the partial dKV goes round the ring instead): 2304.
//  - the ring (2p + g to the other position's device of head g), forward: the KV of the
//    position's 32 tokens for head group g (32 x 32): 1024. Backward: that KV again (1024), the
//    partial dKV of those 32 tokens carried on in fp32 (32 x 64), and the partial dKV the sender
//    ends with, of the receiver's 16 tokens, home in bf16 (16 x 32): 3584.
//  - the other device of the other position: backward only, that last partial dKV home for its
//    16 tokens: 512.
TEST(PlanBaseline, TeBytesBetweenEveryPairOfDevicesCountedByHand) {
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  const Batch batch = MakeBatch({64}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kTe, batch, {.topology = topology});
  ASSERT_TRUE(planned.ok());
  const auto forward = Messages(planned->plan, Pass::kForward);
  const auto backward = Messages(planned->plan, Pass::kBackward);
  EXPECT_EQ(forward.size(), 8u);
  EXPECT_EQ(backward.size(), 12u);
  for (int32_t from = 0; from < 4; ++from) {
    for (int32_t to = 0; to < 4; ++to) {
      if (from == to) continue;
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      const bool partners = from / 2 == to / 2, ring = from % 2 == to % 2;
      EXPECT_EQ(Sent(forward, from, to),
                partners ? 16 * (32 + 32) + 16 * (32 + 8) : ring ? 32 * 32 : 0);
      EXPECT_EQ(Sent(backward, from, to), partners ? 16 * (32 + 32 + 8 + 8 + 32) + 16 * 32
                                          : ring   ? 32 * 32 + 32 * 64 + 16 * 32
                                                   : 16 * 32);
    }
  }
}

// LoongTrain's bytes by hand, 64 causal tokens on 1x4, one KV head (h = 1), inner rings of 2: 8
// zigzag chunks of 8 tokens, device d holding chunks d and 7 - d; K and V are 32 bytes a token.
// Forward, KV only: step 1 each device sends its 16 tokens to its inner-ring partner, step 2 to
// the same slot of the other inner ring, step 3 the partner forwards what it got at step 2: 1024
// bytes to the partner, 512 across, nothing diagonally. Backward: the same KV again, and each
// device returns its partial dKV of every chunk it read (chunks up to its later query chunk,
// 7 - d) to the chunk's owner, in bf16 (256 bytes a chunk): the owner sends its KV to two
// devices, so no chain of carries starts.
TEST(PlanBaseline, LoongTrainBytesBetweenEveryPairOfDevicesCountedByHand) {
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  const AttentionShape mha{.heads = 4, .kv_heads = 1, .head_dim = 8, .dtype = DType::kBFloat16};
  const Batch batch = MakeBatch({64}, "causal", mha);
  auto planned =
      PlanBaseline(Strategy::kLoongTrain, batch, {.topology = topology, .inner_ring = 2});
  ASSERT_TRUE(planned.ok());
  const auto forward = Messages(planned->plan, Pass::kForward);
  const auto backward = Messages(planned->plan, Pass::kBackward);
  const auto owner = [](int32_t chunk) { return chunk < 4 ? chunk : 7 - chunk; };
  for (int32_t from = 0; from < 4; ++from) {
    for (int32_t to = 0; to < 4; ++to) {
      if (from == to) continue;
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      const int64_t kv = from / 2 == to / 2 ? 2 * 16 * 32 : from % 2 == to % 2 ? 16 * 32 : 0;
      int64_t returned = 0;
      for (int32_t chunk = 0; chunk <= 7 - from; ++chunk) {
        if (owner(chunk) == to) returned += 8 * 32;
      }
      EXPECT_EQ(Sent(forward, from, to), kv);
      EXPECT_EQ(Sent(backward, from, to), kv + returned);
    }
  }
}

TEST(PlanBaseline, UlyssesIsTwoAllToAllsAndNeedsDevicesToDivideKvHeads) {
  const Topology two{.nodes = 1, .devices_per_node = 2};
  const Batch batch = MakeBatch({40}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kUlysses, batch, {.topology = two});
  ASSERT_TRUE(planned.ok());
  // Device d holds tokens [20d, 20d + 20); it sends the other head group's Q and KV of them and
  // receives back its O (storage dtype) and LSE (fp32) for that head group.
  const int64_t q_half = kQBytesPerToken / 2, kv_half = kKvBytesPerToken / 2, lse_half = 2 * 4;
  const auto messages = Messages(planned->plan, Pass::kForward);
  ASSERT_EQ(messages.size(), 2u);
  for (const auto& [ends, bytes] : messages) {
    EXPECT_EQ(bytes, 20 * (q_half + kv_half) + 20 * (q_half + lse_half));
  }
  auto four = PlanBaseline(Strategy::kUlysses, batch, {.topology = {.nodes = 1, .devices_per_node = 4}});
  ASSERT_FALSE(four.ok());
  EXPECT_EQ(four.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(four.status().message().find("ulysses needs the devices (4) to divide the KV heads (2)"),
            std::string::npos)
      << four.status().ToString();
}

TEST(PlanBaseline, TeKeepsItsAllToAllInsideHeadGroupsAndRingsAcrossThem) {
  const Topology topology{.nodes = 2, .devices_per_node = 4};
  const Batch batch = MakeBatch({128}, "causal", kShape);
  auto planned = PlanBaseline(Strategy::kTe, batch, {.topology = topology});
  ASSERT_TRUE(planned.ok());
  // h = 2 head ranks, 4 context ranks; device 2r + g. A message goes either inside a head group
  // (the all-to-all: devices 2r and 2r + 1) or to the same head rank of the next context rank.
  for (const auto& [ends, bytes] : Messages(planned->plan, Pass::kForward)) {
    const auto [from, to] = ends;
    const bool a2a = from / 2 == to / 2;
    const bool ring = from % 2 == to % 2 && (to / 2) == (from / 2 + 1) % 4;
    EXPECT_TRUE(a2a || ring) << from << " -> " << to;
  }
  EXPECT_EQ(planned->plan.n_divisions, 1 + 4);
}

TEST(PlanBaseline, LoongTrainHopsInsideInnerRingsAndOnceAcrossThem) {
  const Topology topology{.nodes = 2, .devices_per_node = 4};
  const AttentionShape mha{.heads = 4, .kv_heads = 1, .head_dim = 8, .dtype = DType::kBFloat16};
  const Batch batch = MakeBatch({256}, "causal", mha);
  // h = 1: 8 context ranks in 2 inner rings of 4 (one per node).
  auto planned = PlanBaseline(Strategy::kLoongTrain, batch, {.topology = topology, .inner_ring = 4});
  ASSERT_TRUE(planned.ok());
  int64_t inner = 0, outer = 0;
  for (const Transfer& t : planned->schedule.transfers) {
    const int32_t from = t.source.value, to = t.destination.value;
    if (from / 4 == to / 4) {
      EXPECT_EQ(to % 4, (from % 4 + 1) % 4);
      ++inner;
    } else {
      EXPECT_EQ(to % 4, from % 4);  // the outer ring joins the same slot of the next inner ring
      ++outer;
    }
  }
  // 7 steps; steps 4 hops across the inner rings, the other 6 inside them; 8 devices each receive
  // the 2 chunks (zigzag) of a position per step.
  EXPECT_EQ(outer, 1 * 8 * 2);
  EXPECT_EQ(inner, 6 * 8 * 2);
  auto bad = PlanBaseline(Strategy::kLoongTrain, batch, {.topology = topology, .inner_ring = 3});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// What a finished plan is estimated to need to plan, from its own counts at the documented rates
// (MagiAttention's tiles at their own).
int64_t PlanningBytes(Strategy strategy, const BaselinePlan& planned, const Topology& topology) {
  using internal::PlanSize;
  return PlanSize{.devices = topology.devices(),
                  .divisions = planned.schedule.n_divisions,
                  .transfers = static_cast<int64_t>(planned.schedule.transfers.size()),
                  .tiles = static_cast<int64_t>(planned.blocks.compute_blocks.size()),
                  .data_blocks = static_cast<int64_t>(planned.blocks.data_blocks.size()),
                  .bytes_per_tile = strategy == Strategy::kMagi ? PlanSize::kMagiBytesPerTile
                                                                : PlanSize::kBytesPerTile}
      .Bytes();
}

// Every strategy plans within exactly the memory its plan is estimated to need, and is refused,
// naming the limit, one byte below it. The static layouts count their size before they make it,
// so they refuse while making their tiles ("at least"), before the compile.
TEST(PlanBaseline, PlansWithinThePlanningMemoryItsPlanNeedsAndIsRefusedBelowIt) {
  constexpr Strategy kAll[] = {Strategy::kRing, Strategy::kZigzag,     Strategy::kUlysses,
                               Strategy::kTe,   Strategy::kLoongTrain, Strategy::kFcp,
                               Strategy::kMagi};
  for (uint64_t seed = 0; seed < testing::RandomCases(70); ++seed) {
    std::mt19937_64 rng(seed);
    const Strategy strategy = kAll[seed % std::size(kAll)];
    std::vector<int64_t> lengths(1 + rng() % 4);
    for (int64_t& l : lengths) l = 1 + static_cast<int64_t>(rng() % 3000);
    Topology topology{.nodes = 1 + static_cast<int32_t>(rng() % 3),
                      .devices_per_node = 1 + static_cast<int32_t>(rng() % 4)};
    if (strategy == Strategy::kUlysses) topology = {.nodes = 1, .devices_per_node = 2};
    BaselineOptions options{.topology = topology};
    if (strategy == Strategy::kFcp) options.fcp_block_tokens = 64 << (rng() % 4);
    const char* mask = kMasks[rng() % std::size(kMasks)];
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << ToString(strategy) << " mask "
                                      << mask << " topology " << topology.ToString());
    const Batch batch = MakeBatch(lengths, mask, kShape);
    auto unlimited = PlanBaseline(strategy, batch, options);
    ASSERT_TRUE(unlimited.ok()) << unlimited.status().ToString();
    const int64_t need = PlanningBytes(strategy, *unlimited, topology);

    options.max_planning_bytes = need;
    auto within = PlanBaseline(strategy, batch, options);
    ASSERT_TRUE(within.ok()) << "within " << need << ": " << within.status().ToString();
    EXPECT_EQ(within->plan.forward.size(), unlimited->plan.forward.size());

    options.max_planning_bytes = need - 1;
    auto below = PlanBaseline(strategy, batch, options);
    ASSERT_EQ(below.status().code(), StatusCode::kInvalidArgument);
    const std::string message(below.status().message());
    EXPECT_NE(message.find(std::string(ToString(strategy)) + " on " + topology.ToString()),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("max_planning_bytes"), std::string::npos) << message;
    const bool laid_out_statically = strategy != Strategy::kFcp && strategy != Strategy::kMagi;
    if (laid_out_statically && !unlimited->blocks.compute_blocks.empty()) {
      EXPECT_NE(message.find("at least"), std::string::npos) << message;
    }
  }
}

// A static layout whose devices x divisions alone are beyond the limit is refused before anything
// is made: ring on 1024 devices holds 1024 x 1024 of them however small the batch.
TEST(PlanBaseline, RefusesARingTooLargeToPlanBeforeMakingIt) {
  const Batch batch = MakeBatch({1000}, "causal", kShape);
  const Topology topology{.nodes = 128, .devices_per_node = 8};
  for (Strategy s : {Strategy::kRing, Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain}) {
    auto refused = LayOutBaseline(s, batch, {.topology = topology, .max_planning_bytes = 1 << 30});
    ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << ToString(s);
    EXPECT_NE(refused.status().message().find(" 0 tiles"), std::string::npos)
        << refused.status().ToString();
  }
  EXPECT_EQ(
      PlanBaseline(Strategy::kRing, batch, {.topology = {1, 2}, .max_planning_bytes = -1})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(PlanBaseline, StrategyNamesRoundTrip) {
  for (Strategy s : {Strategy::kDcp, Strategy::kRing, Strategy::kZigzag, Strategy::kUlysses,
                     Strategy::kTe, Strategy::kLoongTrain, Strategy::kFcp, Strategy::kMagi}) {
    EXPECT_EQ(*ParseStrategy(ToString(s)), s);
  }
  EXPECT_EQ(ParseStrategy("megatron").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ParseStrategy("megatron")
                .status()
                .message()
                .find("(expected dcp, ring, zigzag, ulysses, te, loongtrain, fcp or magi)"),
            std::string::npos);
  const Batch batch = MakeBatch({8}, "causal", kShape);
  EXPECT_EQ(PlanBaseline(Strategy::kDcp, batch, {.topology = {1, 2}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanBaseline(Strategy::kRing, batch, {.topology = {0, 2}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
