// SPDX-License-Identifier: Apache-2.0
// Compiled plans of random batches must pass the symbolic validator and round-trip through the
// binary format.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <variant>

#include "dcp/plan.h"
#include "dcp/planner.h"
#include "testing/cases.h"
#include "testing/dense_mask.h"
#include "testing/random_plans.h"

namespace dcp {
namespace {

const char* const kMasks[] = {
    "causal",
    "full",
    "sliding-window:window=100",
    "lambda:sink=8,window=150",
    "causal-blockwise:block=64,local=2",
    "shared-question:question=0.3,answers=3",
    "documents:lengths=50/70",
    "modality:image=40,text=30",
    R"({"slices":[{"rows":[0,1],"lo":[0,0],"hi":[1,0]}]})",  // only the first row attends
};

using testing::RandomPlanCase;

RandomPlanCase MakeCase(uint64_t seed) {
  return testing::MakeRandomPlanCase(seed, kMasks, /*block_shifts=*/6,
                                     AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
}

Result<Plan> CompileCase(const RandomPlanCase& c, bool reduce_in_node = true) {
  return testing::CompileRandomPlanCase(c, reduce_in_node);
}

TEST(CompilePlan, PlansOfRandomBatchesPassTheValidator) {
  for (uint64_t seed = 0; seed < testing::RandomCases(2000); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString()
                                      << ", block " << c.block_size << ", mask " << c.mask);
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const Status valid = ValidatePlan(*plan);
    ASSERT_TRUE(valid.ok()) << valid.ToString();
  }
}

// Plans exact to the cell: every tile of every program, rebuilt cell by cell from its slices,
// allows exactly the cells the batch's mask allows over the tile's rectangle (the dense reference
// of docs/mask_spec.md, tests/testing/dense_mask.h), no cell twice, and as many as its area; every
// compute block is computed once per pass; the plan's compute-block table is the BlockSet's.
// Cases whose longest sequence is above 2048 tokens are skipped (the reference is L x L).
TEST(CompilePlan, TilesAllowExactlyTheMaskCellsOfTheirRectangle) {
  int checked = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    if (*std::max_element(c.lengths.begin(), c.lengths.end()) > 2048) continue;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", block " << c.block_size
                                      << ", mask " << c.mask);
    Result<Batch> batch = c.MakeBatch();
    ASSERT_TRUE(batch.ok());
    Result<BlockSet> blocks =
        MakeBlocks(*batch, {.block_size = c.block_size, .head_groups = c.head_groups});
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(blocks.ok() && plan.ok());
    ASSERT_EQ(plan->compute_blocks.size(), blocks->compute_blocks.size());
    for (size_t i = 0; i < blocks->compute_blocks.size(); ++i) {
      const ComputeBlock& want = blocks->compute_blocks[i];
      const PlanComputeBlock& got = plan->compute_blocks[i];
      EXPECT_TRUE(got.q_block == want.q_block && got.kv_block == want.kv_block &&
                  got.head_group == want.head_group && got.area == want.area)
          << "compute block " << i;
    }
    std::vector<testing::DenseMask> dense;
    for (size_t s = 0; s < batch->seqlens().size(); ++s) {
      dense.push_back(testing::DenseFromSpec(batch->mask_specs()[s], batch->seqlens()[s]));
    }
    for (const std::vector<Program>* programs : {&plan->forward, &plan->backward}) {
      std::vector<int> computed(plan->compute_blocks.size(), 0);
      for (const Program& program : *programs) {
        for (const Instruction& instruction : program.instructions) {
          const auto* attention = std::get_if<BlockwiseAttention>(&instruction);
          if (attention == nullptr) continue;
          for (const AttentionTile& tile : attention->tiles) {
            const PlanComputeBlock& cb = plan->compute_blocks[tile.block.value];
            const PlanBlock& q = plan->blocks[cb.q_block.value];
            const PlanBlock& kv = plan->blocks[cb.kv_block.value];
            ++computed[tile.block.value];
            std::vector<char> cells(static_cast<size_t>(q.tokens * kv.tokens), 0);
            int64_t area = 0;
            for (const Slice& slice : attention->SlicesOf(tile)) {
              ASSERT_TRUE(slice.row_begin >= 0 && slice.row_end <= q.tokens);
              for (int64_t i = slice.row_begin; i < slice.row_end; ++i) {
                for (int64_t k = std::max<int64_t>(0, slice.lo.At(i));
                     k < std::min(kv.tokens, slice.hi.At(i)); ++k) {
                  char& cell = cells[static_cast<size_t>(i * kv.tokens + k)];
                  ASSERT_EQ(cell, 0) << "cell (" << i << ", " << k << ") twice";
                  cell = 1;
                  ++area;
                }
              }
            }
            EXPECT_EQ(area, cb.area) << "compute block " << tile.block.value;
            const testing::DenseMask& mask = dense[q.sequence.value];
            for (int64_t i = 0; i < q.tokens; ++i) {
              for (int64_t k = 0; k < kv.tokens; ++k) {
                ASSERT_EQ(cells[static_cast<size_t>(i * kv.tokens + k)] != 0,
                          mask.allowed(q.token_begin + i, kv.token_begin + k))
                    << "compute block " << tile.block.value << ", cell (" << i << ", " << k
                    << ")";
              }
            }
          }
        }
      }
      for (size_t b = 0; b < computed.size(); ++b) {
        EXPECT_EQ(computed[b], 1) << "compute block " << b;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, static_cast<int>(testing::RandomCases(200) / 2));
}

// One causal sequence of `tokens` in blocks of 128 on one device, 4 query and 2 KV heads of 8.
Result<Plan> CausalPlanOnOneDevice(int64_t tokens) {
  DCP_ASSIGN_OR_RETURN(const Batch batch,
                       Batch::Create({tokens}, {MaskSpec{}},
                                     AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8}));
  DCP_ASSIGN_OR_RETURN(const BlockSet blocks, MakeBlocks(batch, {.block_size = 128}));
  const Topology one{.nodes = 1, .devices_per_node = 1};
  DCP_ASSIGN_OR_RETURN(const PartitionResult placed, PartitionBlocks(blocks, one, {}));
  DCP_ASSIGN_OR_RETURN(const Schedule schedule,
                       ScheduleDivisions(blocks, placed.placement, one, {}));
  return CompilePlan(batch, blocks, placed.placement, schedule, one);
}

// peak_buffer_bytes by hand: 256 causal tokens in 2 blocks of 128 on one device, 4 query and 2
// KV heads of 8, bf16. Per block, forward: Q 128 x 4 x 8 x 2 = 8192, KV 128 x 2 x 2 x 8 x 2 =
// 8192, the O accumulator in fp32 16384 and its LSE 128 x 4 x 4 = 2048, the O output in bf16 8192
// and its LSE 2048. The outputs are written by the final merge, after the attention has last read
// Q and KV, so they fit where Q and KV were: the workspace is what the attention holds, 8192 +
// 8192 + 16384 + 2048 = 34816. Backward: Q, KV, O, dO 8192 each, LSE and Delta 2048 each, the dQ
// and dKV accumulators in fp32 16384 each; the dQ and dKV outputs (8192 each) take the places of
// inputs the attention last read: 69632. The device's peak is the larger program's.
// A call names each of its pieces once: one row per q piece and one column per kv piece that its
// tiles touch (a row per tile would cost a plan of millions of tiles gigabytes). Which slots they
// name is the validator's check.
TEST(CompilePlan, CallsHaveOneRowPerQPieceAndOneColumnPerKvPiece) {
  for (uint64_t seed = 0; seed < testing::RandomCases(100); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Result<Plan> plan = CompileCase(MakeCase(seed));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (const std::vector<Program>* programs : {&plan->forward, &plan->backward}) {
      for (const Program& program : *programs) {
        for (const Instruction& instruction : program.instructions) {
          const auto* call = std::get_if<BlockwiseAttention>(&instruction);
          if (call == nullptr) continue;
          std::set<std::pair<int32_t, int32_t>> q_pieces, kv_pieces;
          std::vector<std::set<std::pair<int32_t, int32_t>>> row_pieces(call->rows.size()),
              column_pieces(call->columns.size());
          for (const AttentionTile& tile : call->tiles) {
            ASSERT_TRUE(call->Holds(tile));
            const PlanComputeBlock& cb = plan->compute_blocks[tile.block.value];
            q_pieces.insert({cb.q_block.value, cb.head_group});
            kv_pieces.insert({cb.kv_block.value, cb.head_group});
            row_pieces[tile.row].insert({cb.q_block.value, cb.head_group});
            column_pieces[tile.column].insert({cb.kv_block.value, cb.head_group});
          }
          EXPECT_EQ(call->rows.size(), q_pieces.size());
          EXPECT_EQ(call->columns.size(), kv_pieces.size());
          for (const auto* pieces : {&row_pieces, &column_pieces}) {
            for (const auto& of_one : *pieces) EXPECT_EQ(of_one.size(), 1u);
          }
        }
      }
    }
  }
}

TEST(CompilePlan, PeakBufferBytesCountedByHand) {
  const Result<Plan> plan = CausalPlanOnOneDevice(256);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int64_t forward = 2 * (8192 + 8192 + 16384 + 2048);
  const int64_t backward = 2 * (4 * 8192 + 2 * 2048 + 2 * 16384);
  EXPECT_EQ(plan->forward[0].PeakBufferBytes(), forward);
  EXPECT_EQ(plan->backward[0].PeakBufferBytes(), backward);
  EXPECT_EQ(PeakBufferBytesPerDevice(*plan), std::vector<int64_t>{backward});
}

// A plan holds its masks once per call, not once per tile: the full tiles of a causal sequence
// (every tile left of the diagonal) are all the rectangle of the tile, and consecutive ones share
// it. One 1024-token sequence in 8 blocks of 128 on one device: 36 tiles, 28 full; in q-block
// order, each row's full tiles share one slice, and each row's diagonal tile has its own.
TEST(CompilePlan, FullTilesShareOneRectangle) {
  const Result<Plan> plan = CausalPlanOnOneDevice(1024);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Slice rectangle{.row_begin = 0, .row_end = 128, .lo = {0, 0}, .hi = {128, 0}};
  int64_t tiles = 0, full = 0, slices = 0;
  for (const Instruction& instruction : plan->forward[0].instructions) {
    const auto* call = std::get_if<BlockwiseAttention>(&instruction);
    if (call == nullptr) continue;
    tiles += static_cast<int64_t>(call->tiles.size());
    slices += static_cast<int64_t>(call->slices.size());
    for (const AttentionTile& tile : call->tiles) {
      const PlanComputeBlock& cb = plan->compute_blocks[tile.block.value];
      if (cb.q_block == cb.kv_block) continue;
      ++full;
      EXPECT_TRUE(std::ranges::equal(call->SlicesOf(tile), std::span(&rectangle, 1)))
          << "compute block " << tile.block.value;
    }
  }
  EXPECT_EQ(tiles, 36);
  EXPECT_EQ(full, 28);
  EXPECT_EQ(slices, 8 + 7);  // 8 diagonal tiles, and one rectangle for each row but the first
}

TEST(CompilePlan, PlansRoundTripThroughTheBinaryFormat) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    SCOPED_TRACE(seed);
    Result<Plan> plan = CompileCase(MakeCase(seed));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::string bytes;
    EncodePlan(*plan, &bytes);
    Result<Plan> decoded = DecodePlan(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_TRUE(*decoded == *plan);
    std::string again;
    EncodePlan(*decoded, &again);
    EXPECT_EQ(again, bytes);
  }
}

// Partial dQ/dKV summed inside a node before crossing the network: the plans stay valid, the
// forward is untouched, and the backward never moves more bytes between nodes (one sum instead of
// one partial per device), and moves fewer somewhere among the cases.
TEST(CompilePlan, SumsPartialResultsInsideANodeBeforeTheyCrossTheNetwork) {
  int64_t saved = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(300); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    Result<Plan> reduced = CompileCase(c), direct = CompileCase(c, /*reduce_in_node=*/false);
    ASSERT_TRUE(reduced.ok() && direct.ok());
    const Status valid = ValidatePlan(*reduced);
    ASSERT_TRUE(valid.ok()) << valid.ToString();
    EXPECT_TRUE(reduced->forward == direct->forward);
    const int64_t with = MeasureTraffic(*reduced, Pass::kBackward).bytes_inter_node;
    const int64_t without = MeasureTraffic(*direct, Pass::kBackward).bytes_inter_node;
    EXPECT_LE(with, without);
    saved += without - with;
  }
  EXPECT_GT(saved, 0);
}

// Partials received during the pass (early returns to an owner, carries to a node's aggregator
// or a ring's next hop) are not held to the end beyond a bound: when an attention call starts,
// those a device has received and not read yet take at most the bytes of its inputs, plus one
// storage-dtype partial per output it owns (a lone return waiting for a second); a lone carried
// partial that the device's own tiles then add to is its own, not waiting. Summed only at
// the end, an aggregator of a 4M-token batch on 32x8 held 2.4 GB of them against 0.1 GB of
// inputs. Checked on random batches and on long causal sequences, where partials pile up.
void ExpectNoPileOfReceivedPartials(const Plan& plan, int64_t* received) {
  const int32_t outputs_launch = 2 * plan.n_divisions + 1;
  for (const std::vector<Program>* pass : {&plan.forward, &plan.backward}) {
    for (const Program& program : *pass) {
      const auto is_partial = [&](SlotId s) {
        const TensorKind kind = program.slots[s].kind;
        return kind == TensorKind::kO || kind == TensorKind::kDQ || kind == TensorKind::kDKV;
      };
      const auto bytes = [&](SlotId s) { return program.slots[s].bytes; };
      int64_t bound = 0;
      for (const Binding& b : program.inputs) bound += bytes(b.slot);
      for (const Binding& b : program.outputs) bound += is_partial(b.slot) ? bytes(b.slot) : 0;
      std::set<SlotId> accumulators;  // the slots the device's tiles add to
      for (const Instruction& instruction : program.instructions) {
        if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
          for (const AttentionRow& row : call->rows) accumulators.insert({row.out, row.dq});
          for (const AttentionColumn& column : call->columns) accumulators.insert(column.dkv);
        }
      }
      std::map<int32_t, std::vector<SlotId>> partials_of;  // per launch id: partials received
      for (const Instruction& instruction : program.instructions) {
        const auto* launch = std::get_if<CommLaunch>(&instruction);
        if (launch == nullptr || launch->id == outputs_launch) continue;
        for (const PeerSlots& from : launch->recvs) {
          for (SlotId s : from.slots) {
            if (is_partial(s) && !accumulators.contains(s)) partials_of[launch->id].push_back(s);
          }
        }
      }
      std::set<SlotId> unread;
      const auto read = [&](SlotId s) { unread.erase(s); };
      for (const Instruction& instruction : program.instructions) {
        if (const auto* r = std::get_if<BlockwiseReduction>(&instruction)) {
          for (const ReductionOp& op : r->ops) std::ranges::for_each(op.sources, read);
        } else if (const auto* copy = std::get_if<BlockwiseCopy>(&instruction)) {
          for (const auto& [from, to] : copy->ops) read(from);
        } else if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
          int64_t waiting = 0;
          for (SlotId s : unread) waiting += bytes(s);
          EXPECT_LE(waiting, bound) << ToString(program.pass) << " device " << program.device.value
                                    << " at division " << call->division;
          for (const AttentionRow& row : call->rows) read(row.out), read(row.dq);
          for (const AttentionColumn& column : call->columns) read(column.dkv);
        } else if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
          for (const PeerSlots& to : launch->sends) std::ranges::for_each(to.slots, read);
        } else if (const auto* wait = std::get_if<CommWait>(&instruction)) {
          const auto it = partials_of.find(wait->id);
          if (it == partials_of.end()) continue;
          *received += static_cast<int64_t>(it->second.size());
          unread.insert(it->second.begin(), it->second.end());
        }
      }
    }
  }
}

// One causal sequence of `tokens` in blocks of 256 on nodes x 8, placed and scheduled by dcp
// (`divisions`: 0 lets the scheduler choose), and its plan.
struct ScheduledPlan {
  Schedule schedule;
  Plan plan;
};
ScheduledPlan OneCausalSequence(int64_t tokens, int32_t nodes, int32_t divisions) {
  const Batch batch = *Batch::Create({tokens}, {MaskSpec{}},
                                     AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
  const BlockSet blocks = *MakeBlocks(batch, {.block_size = 256});
  const Topology topology{.nodes = nodes, .devices_per_node = 8};
  const PartitionResult placed = *PartitionBlocks(blocks, topology, {});
  Schedule schedule =
      *ScheduleDivisions(blocks, placed.placement, topology, {.divisions = divisions});
  Plan plan = *CompilePlan(batch, blocks, placed.placement, schedule, topology);
  return {.schedule = std::move(schedule), .plan = std::move(plan)};
}

TEST(CompilePlan, HoldsNoPileOfReceivedPartials) {
  int64_t received = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(300); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ExpectNoPileOfReceivedPartials(*plan, &received);
  }
  for (int64_t tokens : {16384, 65536}) {
    for (int32_t nodes : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << tokens << " causal tokens on " << nodes << "x8");
      ExpectNoPileOfReceivedPartials(OneCausalSequence(tokens, nodes, 16).plan, &received);
    }
  }
  EXPECT_GT(received, 0);
}

// The backward's partials of a piece owned on another node are summed on one device of the node
// (Schedule::reduce_in_node); the devices it falls on share that work: on one long causal
// sequence, the most partials one device receives from its node-mates is at most twice its
// node's mean (where the node has at least 4 per device). (Chosen as the lowest device among the
// latest last tiles, the first device of each node received all 96 of its node's at 16K tokens on
// 2x8.)
TEST(CompilePlan, SpreadsANodesSumsOverItsDevices) {
  for (int64_t tokens : {16384, 32768, 65536}) {
    for (int32_t nodes : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << tokens << " tokens on " << nodes << "x8");
      const auto [schedule, plan] = OneCausalSequence(tokens, nodes, 0);
      ASSERT_TRUE(schedule.reduce_in_node);
      const Topology& topology = plan.topology;
      std::vector<int64_t> carried(topology.devices(), 0);  // fp32 partials from node-mates
      for (const Program& program : plan.backward) {
        for (const Instruction& instruction : program.instructions) {
          const auto* launch = std::get_if<CommLaunch>(&instruction);
          if (launch == nullptr) continue;
          for (const PeerSlots& from : launch->recvs) {
            if (topology.NodeOf(from.peer) != topology.NodeOf(program.device)) continue;
            for (SlotId s : from.slots) {
              const SlotInfo& slot = program.slots[s];
              carried[program.device.value] +=
                  slot.dtype == DType::kFloat32 &&
                  (slot.kind == TensorKind::kDQ || slot.kind == TensorKind::kDKV);
            }
          }
        }
      }
      int64_t total = 0;
      for (int32_t node = 0; node < nodes; ++node) {
        const auto first = carried.begin() + node * 8, last = first + 8;
        const int64_t sum = std::accumulate(first, last, int64_t{0});
        total += sum;
        if (sum < 32) continue;  // too few to spread over 8 devices
        EXPECT_LE(8 * *std::max_element(first, last), 2 * sum) << "node " << node;
      }
      EXPECT_GT(total, 0);
    }
  }
}

// A node-mate's partial is carried to the node's aggregator of its piece only when the
// aggregator's last tile on the piece comes at most 2 divisions after the node-mate's: the
// carried partial waits there until then, and partials carried from far earlier piled up on
// aggregators (87 dKV, 0.18 of a device's 0.45 GB, on a 1M-token plan on 16x8). Those go home
// directly instead. Checked on long causal sequences, whose node-mates' last tiles on a piece
// lie many divisions apart.
TEST(CompilePlan, CarriesAPartialToItsAggregatorOnlyFromCloseBeforeItsLastTile) {
  int64_t carried = 0, spread = 0;
  for (int64_t tokens : {32768, 65536}) {
    for (int32_t nodes : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << tokens << " causal tokens on " << nodes << "x8");
      const Plan plan = OneCausalSequence(tokens, nodes, 16).plan;
      const Topology& topology = plan.topology;
      // Per device: the division of its last tile on each piece's partial, and the piece of
      // each of its accumulators.
      std::vector<std::map<std::pair<int32_t, TensorKind>, int32_t>> last(topology.devices());
      std::vector<std::map<SlotId, std::pair<int32_t, TensorKind>>> piece_of(topology.devices());
      for (const Program& program : plan.backward) {
        const int32_t d = program.device.value;
        for (const Instruction& instruction : program.instructions) {
          const auto* call = std::get_if<BlockwiseAttention>(&instruction);
          if (call == nullptr) continue;
          for (const AttentionTile& tile : call->tiles) {
            const PlanComputeBlock& cb = plan.compute_blocks[tile.block.value];
            for (const auto& [key, slot] :
                 {std::pair{std::pair{cb.q_block.value, TensorKind::kDQ}, call->RowOf(tile).dq},
                  std::pair{std::pair{cb.kv_block.value, TensorKind::kDKV},
                            call->ColumnOf(tile).dkv}}) {
              last[d][key] = std::max(last[d].contains(key) ? last[d][key] : 0, call->division);
              piece_of[d][slot] = key;
            }
          }
        }
      }
      // Node-mates' last tiles on a piece owned on another node, many divisions apart.
      std::map<std::pair<std::pair<int32_t, TensorKind>, int32_t>, std::pair<int32_t, int32_t>>
          range;  // per (piece, node): first and last of its devices' last tiles
      for (int32_t d = 0; d < topology.devices(); ++d) {
        for (const auto& [key, division] : last[d]) {
          const int32_t node = topology.NodeOf(DeviceId{d});
          if (node == topology.NodeOf(plan.block_owner[key.first])) continue;
          auto [it, fresh] = range.try_emplace({key, node}, division, division);
          it->second = {std::min(it->second.first, division),
                        std::max(it->second.second, division)};
        }
      }
      for (const auto& [group, r] : range) spread += r.second - r.first > 2;
      const int32_t outputs_launch = 2 * plan.n_divisions + 1;
      for (const Program& program : plan.backward) {
        const int32_t d = program.device.value;
        for (const Instruction& instruction : program.instructions) {
          const auto* launch = std::get_if<CommLaunch>(&instruction);
          if (launch == nullptr || launch->id == outputs_launch) continue;
          for (const PeerSlots& to : launch->sends) {
            if (topology.NodeOf(to.peer) != topology.NodeOf(program.device)) continue;
            for (SlotId s : to.slots) {
              const auto it = piece_of[d].find(s);
              if (it == piece_of[d].end() || program.slots[s].dtype != DType::kFloat32) continue;
              const auto& key = it->second;
              if (plan.block_owner[key.first] == to.peer) continue;  // an early return
              ++carried;
              ASSERT_TRUE(last[to.peer.value].contains(key)) << "device " << d;
              EXPECT_LE(last[to.peer.value][key] - last[d][key], 2)
                  << "device " << d << " to " << to.peer.value << ", block " << key.first;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(carried, 0);
  EXPECT_GT(spread, 0);
}

// What the partitioner prices is what the programs send. Every device that needs a piece gets it
// once and every partial result goes home once, so with partial results sent straight home the
// programs send exactly the placement's km1 bytes (sum over nets of weight x (devices spanned -
// 1)), forward and backward together. Across nodes the placement's estimate counts each net once
// per node it reaches; inputs do cross once per node (to a relay), but forward partial (O, LSE)
// go home from every device, so the programs send at least that estimate across nodes (up to
// 1.28x on these cases). Summing backward partials inside a node first moves bytes from the
// network into the node: never more across nodes, never fewer in all.
TEST(CompilePlan, SendsTheBytesThePlacementPredicts) {
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    Result<testing::ScheduledCase> scheduled = testing::ScheduleRandomPlanCase(c);
    ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
    const auto& [batch, blocks, placed, schedule] = *scheduled;
    Result<PlacementReport> predicted =
        EvaluatePlacement(BuildHypergraph(blocks), placed.placement, c.topology);
    ASSERT_TRUE(predicted.ok());
    int64_t direct_inter = 0, direct_total = 0;
    for (bool reduce_in_node : {false, true}) {
      Schedule s = schedule;
      s.reduce_in_node = reduce_in_node;
      Result<Plan> plan = CompilePlan(batch, blocks, placed.placement, s, c.topology);
      ASSERT_TRUE(plan.ok());
      const PlanTraffic f = MeasureTraffic(*plan, Pass::kForward);
      const PlanTraffic b = MeasureTraffic(*plan, Pass::kBackward);
      const int64_t inter = f.bytes_inter_node + b.bytes_inter_node;
      const int64_t total = inter + f.bytes_intra_node + b.bytes_intra_node;
      EXPECT_GE(inter, predicted->bytes_inter_node);
      if (!reduce_in_node) {
        EXPECT_EQ(total, predicted->km1_bytes);
        direct_inter = inter;
        direct_total = total;
      } else {
        EXPECT_LE(inter, direct_inter);
        EXPECT_GE(total, direct_total);
      }
      if (c.topology.nodes == 1) {
        EXPECT_EQ(total, predicted->km1_bytes);
      }
    }
  }
}

TEST(CompilePlan, IsDeterministic) {
  const RandomPlanCase c = MakeCase(7);
  Result<Plan> a = CompileCase(c), b = CompileCase(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
}

TEST(ScheduleDivisions, RejectsOneDivisionWhenTilesNeedRemoteData) {
  auto batch = Batch::Create({4096}, {MaskSpec{}}, AttentionShape{});
  auto blocks = MakeBlocks(*batch, {.block_size = 1024});
  const Topology topology{.nodes = 1, .devices_per_node = 4};
  auto placed = PartitionBlocks(*blocks, topology, {});
  auto schedule =
      ScheduleDivisions(*blocks, placed->placement, topology, ScheduleOptions{.divisions = 1});
  ASSERT_FALSE(schedule.ok());
  EXPECT_NE(schedule.status().message().find("divisions=1"), std::string::npos);
}

// The division count is priced on threads; the schedule is the same on any number of them.
TEST(ScheduleDivisions, SchedulesAlikeOnAnyThreadCount) {
  auto batch = Batch::Create({9000, 5000, 3000, 1200}, {MaskSpec{}}, AttentionShape{});
  auto blocks = MakeBlocks(*batch, {.block_size = 256});
  const Topology topology{.nodes = 2, .devices_per_node = 4};
  auto placed = PartitionBlocks(*blocks, topology, {});
  ASSERT_TRUE(placed.ok());
  auto one = ScheduleDivisions(*blocks, placed->placement, topology, {.threads = 1});
  ASSERT_TRUE(one.ok());
  for (int32_t threads : {2, 3, 8}) {
    auto many = ScheduleDivisions(*blocks, placed->placement, topology, {.threads = threads});
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(many->n_divisions, one->n_divisions);
    EXPECT_EQ(many->compute_division, one->compute_division);
    ASSERT_EQ(many->transfers.size(), one->transfers.size());
    for (size_t i = 0; i < one->transfers.size(); ++i) {
      const Transfer &a = one->transfers[i], &b = many->transfers[i];
      EXPECT_TRUE(a.block == b.block && a.head_group == b.head_group && a.side == b.side &&
                  a.source == b.source && a.destination == b.destination &&
                  a.division == b.division && a.phase == b.phase)
          << "transfer " << i << " on " << threads << " threads";
    }
  }
  EXPECT_FALSE(ScheduleDivisions(*blocks, placed->placement, topology, {.threads = 0}).ok());
}

// Division 0 holds only tiles whose inputs are all local: each device's first ones up to an n-th
// of its compute (at least one), the others in the last division, where there is more than one.
TEST(ScheduleDivisions, PutsLocalTilesInDivisionZeroUpToAnNthOfTheDeviceAndTheRestLast) {
  auto batch = Batch::Create({4096, 3000, 1000}, {MaskSpec{}}, AttentionShape{});
  auto blocks = MakeBlocks(*batch, {.block_size = 512});
  const Topology topology{.nodes = 2, .devices_per_node = 2};
  auto placed = PartitionBlocks(*blocks, topology, {});
  const Placement& p = placed->placement;
  int64_t late = 0, largest_tile = 0;
  for (int32_t divisions : {2, 3, 5, 8}) {
    auto schedule = ScheduleDivisions(*blocks, p, topology, {.divisions = divisions});
    ASSERT_TRUE(schedule.ok());
    std::vector<int64_t> total(topology.devices(), 0), first(topology.devices(), 0);
    std::vector<int64_t> first_local(topology.devices(), -1);
    for (size_t c = 0; c < blocks->compute_blocks.size(); ++c) {
      const ComputeBlock& cb = blocks->compute_blocks[c];
      const int32_t d = p.compute_device[c].value;
      const bool local = p.data_device[cb.q_block.value] == p.compute_device[c] &&
                         p.data_device[cb.kv_block.value] == p.compute_device[c];
      const int64_t flops = blocks->FlopsFwd(cb) + blocks->FlopsBwd(cb);
      largest_tile = std::max(largest_tile, flops);
      const int32_t division = schedule->compute_division[c];
      total[d] += flops;
      if (division == 0) first[d] += flops;
      if (local && first_local[d] < 0) first_local[d] = division;
      if (division == 0) {
        EXPECT_TRUE(local) << "compute block " << c;
      }
      if (local) {
        EXPECT_TRUE(division == 0 || division == divisions - 1) << "compute block " << c;
        late += division != 0;
      }
    }
    for (int32_t d = 0; d < topology.devices(); ++d) {
      if (first_local[d] >= 0) {
        EXPECT_EQ(first_local[d], 0) << "device " << d;
      }
      // The head is cut at a tile's middle, so it passes an n-th by at most half a tile.
      EXPECT_LE(first[d], total[d] / divisions + largest_tile / 2) << "device " << d;
    }
    // Every transfer across nodes goes to a device that needs it first or forwards it.
    for (const Transfer& t : schedule->transfers) {
      EXPECT_GE(t.division, 1);
      if (topology.NodeOf(t.source) != topology.NodeOf(t.destination)) {
        EXPECT_EQ(t.phase, 0);
      }
    }
  }
  EXPECT_GT(late, 0);
}

// Per data block, the first and last division in which one device's tiles read it; AliveIn counts
// the blocks whose span holds a division.
class DivisionSpans {
 public:
  void Note(int32_t block, int32_t division) {
    auto [it, fresh] = span_.try_emplace(block, division, division);
    it->second = {std::min(it->second.first, division), std::max(it->second.second, division)};
  }
  int32_t AliveIn(int32_t division) const {
    int32_t n = 0;
    for (const auto& [block, s] : span_) n += s.first <= division && division <= s.second;
    return n;
  }
  size_t size() const { return span_.size(); }

 private:
  std::map<int32_t, std::pair<int32_t, int32_t>> span_;
};

// A device computing a grid of tiles whose 8 rows and 8 columns all belong to other devices: the
// ring order (by the columns' owners) would keep every row alive in every division. Rows weigh
// more than columns here (8 query heads, 1 key/value head), so the rows are taken one after
// another: in each division at most 2 of them are alive (read there and in divisions before and
// after), against 8 in the ring order.
TEST(ScheduleDivisions, StreamsTheHeavierSideWhereTheRingOrderKeepsItAlive) {
  const Batch batch = *Batch::Create({24 * 256}, {MaskSpec{}},
                                     AttentionShape{.heads = 8, .kv_heads = 1, .head_dim = 8});
  const BlockSet blocks = *MakeBlocks(batch, {.block_size = 256});
  ASSERT_EQ(blocks.data_blocks.size(), 24u);
  const Topology topology{.nodes = 1, .devices_per_node = 17};
  constexpr int32_t kGrid = 16;  // the device computing the grid
  Placement placement;
  for (int32_t b = 0; b < 24; ++b)
    placement.data_device.push_back(DeviceId{b < 16 ? b % 8 : b - 8});
  const auto in_grid = [](const ComputeBlock& cb) {
    return cb.q_block.value >= 16 && cb.kv_block.value < 8;
  };
  for (const ComputeBlock& cb : blocks.compute_blocks) {
    placement.compute_device.push_back(in_grid(cb) ? DeviceId{kGrid}
                                                   : placement.data_device[cb.q_block.value]);
  }
  const Schedule schedule = *ScheduleDivisions(blocks, placement, topology, {.divisions = 9});
  DivisionSpans rows;
  int32_t tiles = 0;
  for (size_t c = 0; c < blocks.compute_blocks.size(); ++c) {
    if (!in_grid(blocks.compute_blocks[c])) continue;
    ++tiles;
    rows.Note(blocks.compute_blocks[c].q_block.value, schedule.compute_division[c]);
  }
  ASSERT_EQ(tiles, 64);
  ASSERT_EQ(rows.size(), 8u);
  for (int32_t division = 1; division < 9; ++division) {
    EXPECT_LE(rows.AliveIn(division), 2) << "division " << division;
  }
}

// A device computing a square of 16 rows by 2 columns and a strip of 2 rows by 16 columns, every
// row and column another device's: the ring order (by the columns' owners) and the column order
// keep the square's 16 rows alive together, the row order the strip's 16 columns. Along a Z
// curve over the device's rows and columns, a division reads a few of each (4 here; without the
// curve up to 18 rows are alive in one division).
TEST(ScheduleDivisions, TakesTheZCurveWhereRowsAndColumnsBothKeepOneSideAlive) {
  const Batch batch = *Batch::Create({40 * 256}, {MaskSpec{}},
                                     AttentionShape{.heads = 2, .kv_heads = 2, .head_dim = 8});
  const BlockSet blocks = *MakeBlocks(batch, {.block_size = 256});
  ASSERT_EQ(blocks.data_blocks.size(), 40u);
  const Topology topology{.nodes = 1, .devices_per_node = 9};
  constexpr int32_t kDevice = 8;  // computes the square and the strip, owns no block
  Placement placement;
  for (int32_t b = 0; b < 40; ++b) placement.data_device.push_back(DeviceId{b % 8});
  const auto in_square = [](const ComputeBlock& cb) {
    return cb.q_block.value >= 2 && cb.q_block.value < 18 && cb.kv_block.value < 2;
  };
  const auto in_strip = [](const ComputeBlock& cb) {
    return cb.q_block.value >= 38 && cb.kv_block.value >= 18 && cb.kv_block.value < 34;
  };
  for (const ComputeBlock& cb : blocks.compute_blocks) {
    placement.compute_device.push_back(in_square(cb) || in_strip(cb)
                                           ? DeviceId{kDevice}
                                           : placement.data_device[cb.q_block.value]);
  }
  constexpr int32_t kDivisions = 9;
  const Schedule schedule =
      *ScheduleDivisions(blocks, placement, topology, {.divisions = kDivisions});
  DivisionSpans rows, columns;
  int32_t tiles = 0;
  for (size_t c = 0; c < blocks.compute_blocks.size(); ++c) {
    if (placement.compute_device[c].value != kDevice) continue;
    ++tiles;
    rows.Note(blocks.compute_blocks[c].q_block.value, schedule.compute_division[c]);
    columns.Note(blocks.compute_blocks[c].kv_block.value, schedule.compute_division[c]);
  }
  ASSERT_EQ(tiles, 64);
  ASSERT_EQ(rows.size(), 18u);
  ASSERT_EQ(columns.size(), 18u);
  for (int32_t division = 1; division < kDivisions; ++division) {
    EXPECT_LE(rows.AliveIn(division), 6) << "division " << division;
    EXPECT_LE(columns.AliveIn(division), 6) << "division " << division;
  }
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

TEST(ScheduleDivisions, CrossesTheNetworkOncePerPieceAndNode) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SCOPED_TRACE(seed);
    const RandomPlanCase c = MakeCase(seed);
    auto batch = Batch::Create(c.lengths, {MaskSpec{}},
                               AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
    auto blocks = MakeBlocks(*batch, {.block_size = c.block_size});
    auto placed = PartitionBlocks(*blocks, c.topology, {});
    auto schedule = ScheduleDivisions(*blocks, placed->placement, c.topology, {});
    ASSERT_TRUE(schedule.ok());
    std::set<std::tuple<int32_t, int32_t, Side, int32_t>> crossed;  // piece, side, node
    for (const Transfer& t : schedule->transfers) {
      const int32_t node = c.topology.NodeOf(t.destination);
      if (c.topology.NodeOf(t.source) == node) continue;
      EXPECT_TRUE(crossed.insert({t.block.value, t.head_group, t.side, node}).second)
          << "block " << t.block.value << " crosses into node " << node << " twice";
    }
  }
}

// Every device holds each remote piece it reads by the division of its first tile reading it,
// and a relay forwards a piece only once it holds it. A forward in phase 1 waits for the relay
// to finish the division before and moves while nothing computes, so it is left only for
// division 1 (division 0 has no launch to fetch earlier with): from division 2 on, a relay
// fetches what it shares with its node a division early.
TEST(ScheduleDivisions, RelaysForwardInPhaseOneOnlyForTheFirstDivision) {
  int64_t forwards = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    SCOPED_TRACE(seed);
    Result<testing::ScheduledCase> scheduled = testing::ScheduleRandomPlanCase(MakeCase(seed));
    ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
    const BlockSet& blocks = scheduled->blocks;
    const Placement& p = scheduled->placed.placement;
    const Schedule& schedule = scheduled->schedule;
    using Held = std::tuple<int32_t, int32_t, Side, int32_t>;  // block, group, side, device
    std::map<Held, std::pair<int32_t, int32_t>> arrival;       // (division, phase)
    for (const Transfer& t : schedule.transfers) {
      arrival[{t.block.value, t.head_group, t.side, t.destination.value}] = {t.division, t.phase};
    }
    for (const Transfer& t : schedule.transfers) {
      if (t.phase == 1) {
        EXPECT_EQ(t.division, 1) << "block " << t.block.value;
      }
      if (p.data_device[t.block.value] == t.source) continue;
      ++forwards;
      auto held = arrival.find({t.block.value, t.head_group, t.side, t.source.value});
      ASSERT_NE(held, arrival.end()) << "device " << t.source.value << " forwards block "
                                     << t.block.value << " it never receives";
      EXPECT_LT(held->second, std::pair(t.division, t.phase)) << "block " << t.block.value;
    }
    for (size_t i = 0; i < blocks.compute_blocks.size(); ++i) {
      const ComputeBlock& cb = blocks.compute_blocks[i];
      const DeviceId d = p.compute_device[i];
      for (auto [side, block] : {std::pair{Side::kRow, cb.q_block}, {Side::kColumn, cb.kv_block}}) {
        if (p.data_device[block.value] == d) continue;
        auto held = arrival.find({block.value, cb.head_group, side, d.value});
        ASSERT_NE(held, arrival.end()) << "compute block " << i;
        EXPECT_LE(held->second.first, schedule.compute_division[i]) << "compute block " << i;
      }
    }
  }
  EXPECT_GT(forwards, 0);
}

}  // namespace
}  // namespace dcp
