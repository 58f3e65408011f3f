// SPDX-License-Identifier: Apache-2.0
// The binary plan format (docs/plan_format.md). Random plans (random topologies, tables, and
// programs using every instruction alternative, with ids anywhere in their ranges and values at
// the format's bounds) must round-trip bit-exactly; parts of a plan must keep the tables and only
// their device's programs. Damage must always be refused without a crash: every truncation,
// random bit flips and byte overwrites, and, with the checksum forged so the payload decoder is
// reached, random damage to the payload, which is either refused as Corrupt or decodes to a plan
// that encodes back to the damaged bytes exactly. Hand cases cover every error path by code and
// message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_format_internal.h"
#include "testing/cases.h"
#include "util/file.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Rng = std::mt19937_64;

int64_t Uniform(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
int32_t Uniform32(Rng& rng, int64_t lo, int64_t hi) {
  return static_cast<int32_t>(Uniform(rng, lo, hi));
}
bool OneIn(Rng& rng, int64_t n) { return Uniform(rng, 1, n) == 1; }

// Bounds of docs/plan_format.md, "Checks".
constexpr int64_t kMaxSliceBase = int64_t{1} << 31;
constexpr int64_t kMaxSlotBytes = int64_t{1} << 40;

// ---------------------------------------------------------------------------------------------
// Random plans: within every id range and bound the decoder checks, not semantically valid.

class PlanGenerator {
 public:
  explicit PlanGenerator(uint64_t seed) : rng_(seed) {}

  Plan Make() {
    MakeTables();
    for (int32_t d = 0; d < plan_.topology.devices(); ++d) {
      plan_.forward.push_back(MakeProgram(DeviceId{d}, Pass::kForward));
    }
    if (!OneIn(rng_, 5)) {  // sometimes a plan without backward programs
      for (int32_t d = 0; d < plan_.topology.devices(); ++d) {
        plan_.backward.push_back(MakeProgram(DeviceId{d}, Pass::kBackward));
      }
    }
    return plan_;
  }

 private:
  void MakeTables() {
    plan_.topology = {Uniform32(rng_, 1, 4), Uniform32(rng_, 1, 8)};
    const int64_t kv_heads = int64_t{1} << Uniform(rng_, 0, 3);
    plan_.shape = {.heads = kv_heads * Uniform(rng_, 1, 4),
                   .kv_heads = kv_heads,
                   .head_dim = OneIn(rng_, 8) ? 4096 : Uniform(rng_, 1, 256),
                   .dtype = OneIn(rng_, 2) ? DType::kFloat32 : DType::kBFloat16};
    plan_.head_groups = int64_t{1} << Uniform(rng_, 0, std::countr_zero(uint64_t(kv_heads)));
    const bool huge = OneIn(rng_, 10);  // blocks and sequences at the format's bounds
    plan_.block_size = huge ? kMaxSequenceLength : Uniform(rng_, 1, 64);
    const int64_t n_sequences = Uniform(rng_, 1, 4);
    for (int32_t s = 0; s < n_sequences; ++s) {
      const int64_t length =
          huge ? (OneIn(rng_, 2) ? kMaxSequenceLength : Uniform(rng_, 1, kMaxSequenceLength))
               : Uniform(rng_, 1, 3 * plan_.block_size);
      plan_.seqlens.push_back(length);
      std::vector<DataBlockId> blocks;
      for (int64_t t = 0; t < length; t += plan_.block_size) {
        blocks.push_back(DataBlockId{static_cast<int32_t>(plan_.blocks.size())});
        plan_.blocks.push_back({SequenceId{s}, t, std::min(plan_.block_size, length - t)});
        plan_.block_owner.push_back(RandomDevice());
      }
      sequence_blocks_.push_back(blocks);
    }
    const int64_t n_compute = OneIn(rng_, 8) ? 0 : Uniform(rng_, 1, 16);
    for (int64_t i = 0; i < n_compute; ++i) plan_.compute_blocks.push_back(RandomComputeBlock());
    plan_.n_divisions = OneIn(rng_, 8) ? 0 : Uniform32(rng_, 1, 4);
  }

  DeviceId RandomDevice() { return DeviceId{Uniform32(rng_, 0, plan_.topology.devices() - 1)}; }

  PlanComputeBlock RandomComputeBlock() {
    const auto& blocks = sequence_blocks_[Uniform(rng_, 0, sequence_blocks_.size() - 1)];
    PlanComputeBlock c;
    c.q_block = blocks[Uniform(rng_, 0, blocks.size() - 1)];
    c.kv_block = blocks[Uniform(rng_, 0, blocks.size() - 1)];
    c.head_group = Uniform32(rng_, 0, plan_.head_groups - 1);
    const int64_t max_area =
        plan_.blocks[c.q_block.value].tokens * plan_.blocks[c.kv_block.value].tokens;
    c.area = OneIn(rng_, 4) ? (OneIn(rng_, 2) ? 1 : max_area) : Uniform(rng_, 1, max_area);
    return c;
  }

  Program MakeProgram(DeviceId device, Pass pass) {
    Program p;
    p.device = device;
    p.pass = pass;
    const int64_t n_slots = OneIn(rng_, 8) ? 0 : Uniform(rng_, 1, 12);
    for (int64_t i = 0; i < n_slots; ++i) {
      p.slots.push_back({static_cast<TensorKind>(Uniform(rng_, 0, 7)),
                         OneIn(rng_, 2) ? DType::kFloat32 : DType::kBFloat16,
                         OneIn(rng_, 8) ? kMaxSlotBytes : Uniform(rng_, 0, 1 << 20)});
    }
    n_slots_ = n_slots;
    slot_bytes_.clear();
    for (const SlotInfo& info : p.slots) slot_bytes_.push_back(info.bytes);
    if (n_slots == 0) return p;  // nothing can refer to a slot
    for (auto* bindings : {&p.inputs, &p.outputs}) {
      const int64_t n = Uniform(rng_, 0, 5);
      for (int64_t i = 0; i < n; ++i) bindings->push_back(RandomBinding());
    }
    // Every alternative at least once when there are 5 or more instructions.
    const int64_t n = Uniform(rng_, 0, 12);
    std::vector<int64_t> tags;
    for (int64_t i = 0; i < n; ++i) tags.push_back(i < 5 ? i : Uniform(rng_, 0, 4));
    std::shuffle(tags.begin(), tags.end(), rng_);
    for (int64_t tag : tags) p.instructions.push_back(RandomInstruction(tag));
    return p;
  }

  SlotId Slot() { return Uniform32(rng_, 0, n_slots_ - 1); }
  SlotId MaybeSlot() { return OneIn(rng_, 2) ? -1 : Slot(); }
  std::vector<SlotId> Slots(int64_t n) {
    std::vector<SlotId> slots;
    for (int64_t i = 0; i < n; ++i) slots.push_back(Slot());
    return slots;
  }
  int32_t AnyInt32() {
    if (OneIn(rng_, 4)) {
      return OneIn(rng_, 2) ? std::numeric_limits<int32_t>::min()
                            : std::numeric_limits<int32_t>::max();
    }
    return Uniform32(rng_, -100, 100);
  }

  Binding RandomBinding() {
    return {static_cast<TensorKind>(Uniform(rng_, 0, 7)),
            Piece{DataBlockId{Uniform32(rng_, 0, plan_.blocks.size() - 1)},
                  Uniform32(rng_, 0, plan_.head_groups - 1)},
            Slot()};
  }

  Instruction RandomInstruction(int64_t tag) {
    const bool can_attend = !plan_.compute_blocks.empty() && plan_.n_divisions > 0;
    switch (tag) {
      case 0:
        if (can_attend) return RandomAttention();
        return CommWait{AnyInt32()};
      case 1:
        return RandomReduction();
      case 2: {
        BlockwiseCopy c;
        const int64_t n = Uniform(rng_, 0, 4);
        for (int64_t i = 0; i < n; ++i) c.ops.emplace_back(Slot(), Slot());
        return c;
      }
      case 3:
        return CommLaunch{AnyInt32(), RandomPeers(), RandomPeers()};
      default:
        return CommWait{AnyInt32()};
    }
  }

  BlockwiseAttention RandomAttention() {
    BlockwiseAttention a;
    a.pass = OneIn(rng_, 2) ? Pass::kForward : Pass::kBackward;
    a.division = Uniform32(rng_, 0, plan_.n_divisions - 1);
    const int64_t n = Uniform(rng_, 0, 4);
    const bool fwd = a.pass == Pass::kForward;
    for (int64_t i = Uniform(rng_, n > 0 ? 1 : 0, 3); i > 0; --i) {
      AttentionRow r{.q = Slot(), .out = fwd ? Slot() : MaybeSlot(), .lse = Slot()};
      for (SlotId* s : {&r.d_o, &r.delta, &r.dq}) *s = fwd ? MaybeSlot() : Slot();
      a.rows.push_back(r);
    }
    for (int64_t i = Uniform(rng_, n > 0 ? 1 : 0, 3); i > 0; --i) {
      a.columns.push_back({.kv = Slot(), .dkv = fwd ? MaybeSlot() : Slot()});
    }
    std::vector<Slice> mask;
    for (int64_t i = 0; i < n; ++i) {
      const ComputeBlockId block{Uniform32(rng_, 0, plan_.compute_blocks.size() - 1)};
      RandomMask(block, &mask);
      a.AddTile(block, Uniform32(rng_, 0, a.rows.size() - 1),
                Uniform32(rng_, 0, a.columns.size() - 1), mask);
    }
    return a;
  }

  // Slices of a tile of compute block `block`, into *mask.
  void RandomMask(ComputeBlockId block, std::vector<Slice>* mask) {
    const int64_t rows = plan_.blocks[plan_.compute_blocks[block.value].q_block.value].tokens;
    const int64_t n = Uniform(rng_, 0, 3);
    mask->clear();
    for (int64_t i = 0; i < n; ++i) {
      Slice s;
      s.row_begin = Uniform(rng_, 0, rows);
      s.row_end = Uniform(rng_, s.row_begin, rows);
      s.lo = {RandomBase(rows), Uniform(rng_, 0, 1)};
      s.hi = {RandomBase(rows), Uniform(rng_, 0, 1)};
      mask->push_back(s);
    }
  }

  int64_t RandomBase(int64_t rows) {
    if (OneIn(rng_, 6)) return OneIn(rng_, 2) ? -kMaxSliceBase : kMaxSliceBase;
    return Uniform(rng_, -rows - 3, rows + 3);
  }

  BlockwiseReduction RandomReduction() {
    BlockwiseReduction r;
    r.kind = static_cast<ReductionKind>(Uniform(rng_, 0, 2));
    const int64_t n = Uniform(rng_, 0, 3);
    for (int64_t i = 0; i < n; ++i) {
      ReductionOp op;
      op.destination = Slot();
      op.sources = Slots(Uniform(rng_, 0, 4));
      if (r.kind == ReductionKind::kLseMerge) {
        op.lse_destination = Slot();
        op.lse_sources = Slots(op.sources.size());
      } else {
        op.lse_destination = MaybeSlot();
        op.lse_sources = Slots(Uniform(rng_, 0, 2));
      }
      r.ops.push_back(op);
    }
    return r;
  }

  std::vector<PeerSlots> RandomPeers() {
    std::vector<PeerSlots> peers;
    for (int32_t d = 0; d < plan_.topology.devices(); ++d) {
      if (!OneIn(rng_, 3)) continue;
      PeerSlots p{DeviceId{d}, Slots(Uniform(rng_, 0, 3))};
      for (SlotId s : p.slots) p.bytes.push_back(Uniform(rng_, 0, slot_bytes_[s]));
      peers.push_back(std::move(p));
    }
    return peers;
  }

  Rng rng_;
  Plan plan_;
  std::vector<std::vector<DataBlockId>> sequence_blocks_;
  int64_t n_slots_ = 0;
  std::vector<int64_t> slot_bytes_;  // capacities of the program being made
};

Plan RandomPlan(uint64_t seed) { return PlanGenerator(seed).Make(); }

std::string Encode(const Plan& plan) {
  std::string bytes;
  EncodePlan(plan, &bytes);
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// Hand-built plans

// The example of docs/plan_format.md: the smallest plan there is.
Plan SmallestPlan() {
  Plan p;
  p.shape = {.heads = 1, .kv_heads = 1, .head_dim = 1, .dtype = DType::kFloat32};
  p.block_size = 1;
  p.seqlens = {1};
  p.blocks = {{SequenceId{0}, 0, 1}};
  p.block_owner = {DeviceId{0}};
  Program forward;
  forward.device = DeviceId{0};
  p.forward = {forward};
  return p;
}

// A small plan on two devices whose programs hold one instruction of each kind, in tag order.
Program FixtureProgram(DeviceId device, Pass pass) {
  const bool fwd = pass == Pass::kForward;
  Program p;
  p.device = device;
  p.pass = pass;
  p.slots = {{TensorKind::kQ, DType::kBFloat16, 64},  {TensorKind::kKV, DType::kBFloat16, 128},
             {TensorKind::kO, DType::kFloat32, 128},  {TensorKind::kLse, DType::kFloat32, 32},
             {TensorKind::kDO, DType::kBFloat16, 64}, {TensorKind::kDelta, DType::kFloat32, 32},
             {TensorKind::kDQ, DType::kFloat32, 128}, {TensorKind::kDKV, DType::kFloat32, 256}};
  p.inputs = {{TensorKind::kQ, Piece{DataBlockId{0}, 0}, 0},
              {TensorKind::kKV, Piece{DataBlockId{0}, 0}, 1}};
  p.outputs = {{TensorKind::kO, Piece{DataBlockId{0}, 0}, 2}};
  BlockwiseAttention attention{.pass = pass,
                               .division = 1,
                               .rows = {AttentionRow{.q = 0,
                                                     .out = fwd ? 2 : -1,
                                                     .lse = 3,
                                                     .d_o = fwd ? -1 : 4,
                                                     .delta = fwd ? -1 : 5,
                                                     .dq = fwd ? -1 : 6}},
                               .columns = {AttentionColumn{.kv = 1, .dkv = fwd ? -1 : 7}}};
  attention.AddTile(ComputeBlockId{0}, 0, 0, std::vector<Slice>{Slice{0, 4, {0, 0}, {1, 1}}});
  const DeviceId peer{1 - device.value};
  p.instructions = {
      attention,
      BlockwiseReduction{ReductionKind::kLseMerge, {ReductionOp{2, {2}, 3, {3}}}},
      BlockwiseCopy{{{2, 0}}},
      CommLaunch{7, {PeerSlots{peer, {0}, {64}}}, {PeerSlots{peer, {1}, {100}}}},
      CommWait{7},
  };
  return p;
}

Plan FixturePlan() {
  Plan p;
  p.topology = {1, 2};
  p.shape = {.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = DType::kBFloat16};
  p.block_size = 4;
  p.head_groups = 2;
  p.seqlens = {6, 3};
  p.blocks = {{SequenceId{0}, 0, 4}, {SequenceId{0}, 4, 2}, {SequenceId{1}, 0, 3}};
  p.block_owner = {DeviceId{0}, DeviceId{1}, DeviceId{1}};
  p.compute_blocks = {{DataBlockId{0}, DataBlockId{0}, 0, 10},
                      {DataBlockId{1}, DataBlockId{0}, 1, 8},
                      {DataBlockId{2}, DataBlockId{2}, 0, 6}};
  p.n_divisions = 2;
  p.origin = "dcp 4:0.1/0.4:2";
  for (int32_t d = 0; d < 2; ++d) {
    p.forward.push_back(FixtureProgram(DeviceId{d}, Pass::kForward));
    p.backward.push_back(FixtureProgram(DeviceId{d}, Pass::kBackward));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Byte surgery on an encoded file

constexpr size_t kHeader = internal::kPlanHeaderBytes;

void PutLittleEndian(std::string* bytes, size_t offset, uint64_t value, size_t width) {
  for (size_t i = 0; i < width; ++i) (*bytes)[offset + i] = static_cast<char>(value >> (8 * i));
}

std::string LittleEndianBytes(uint64_t value, size_t width) {
  std::string bytes(width, '\0');
  PutLittleEndian(&bytes, 0, value, width);
  return bytes;
}

// Rewrites the header's payload length and checksum to match the payload as it now is, so the
// decoder gets past the envelope.
void Reseal(std::string* file) {
  const std::string_view payload = std::string_view(*file).substr(kHeader);
  PutLittleEndian(file, internal::kPlanPayloadLengthOffset, payload.size(), 8);
  PutLittleEndian(file, internal::kPlanChecksumOffset, internal::PlanChecksum(payload), 8);
}

// Overwrites a u32 at a payload offset and reseals.
std::string WithPayloadU32(std::string file, size_t payload_offset, uint32_t value) {
  PutLittleEndian(&file, kHeader + payload_offset, value, 4);
  Reseal(&file);
  return file;
}

Status DecodeStatus(std::string_view bytes, std::optional<DeviceId> expected = {}) {
  return DecodePlan(bytes, expected).status();
}

// ---------------------------------------------------------------------------------------------
// Checksum

TEST(PlanChecksum, MatchesXxh64ReferenceValues) {
  // Computed with xxHash's own xxhash.h (XXH64, seed 0).
  EXPECT_EQ(internal::PlanChecksum(""), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(internal::PlanChecksum("a"), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(internal::PlanChecksum("abc"), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(internal::PlanChecksum("DCPPLAN"), 0x741F4FD306F1F5AAULL);
  std::string pattern(1000, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 7 + 3);
  // Lengths around every branch of the algorithm: bytes, a 4-byte word, 8-byte words, stripes.
  const std::pair<size_t, uint64_t> expected[] = {
      {1, 0x1F25C8D0BC1F4BB6ULL},   {3, 0x31D2363F52E564C9ULL},  {4, 0x9BB64B7D66EE9FDAULL},
      {7, 0x9A7B149959CE60D8ULL},   {8, 0xDAB99D95C6F90092ULL},  {9, 0x170BB6BF975B4C02ULL},
      {12, 0xD52E407833AF5133ULL},  {15, 0x1B47CB8243CC8E32ULL}, {31, 0xA2AA5F33CC4A6119ULL},
      {32, 0x23C3C17EF790FD97ULL},  {33, 0x50A7CFC7BA588784ULL}, {63, 0x5E3E54B431C7493CULL},
      {64, 0x0EB64B3EF6EEB01FULL},  {65, 0xA383B724B2BD12F1ULL}, {100, 0xA61F8D4C170FE531ULL},
      {1000, 0x5F235FA033F1A3FBULL}};
  for (const auto& [length, hash] : expected) {
    EXPECT_EQ(internal::PlanChecksum(std::string_view(pattern).substr(0, length)), hash)
        << "length " << length;
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(PlanFormat, RandomPlansRoundTripBitExactly) {
  for (uint64_t seed = 0; seed < testing::RandomCases(300); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const Plan plan = RandomPlan(seed);
    const std::string bytes = Encode(plan);
    Result<Plan> decoded = DecodePlan(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_TRUE(*decoded == plan);
    EXPECT_EQ(Encode(*decoded), bytes);
    EXPECT_EQ(Encode(RandomPlan(seed)), bytes);  // deterministic
  }
}

TEST(PlanFormat, FixturePlanRoundTrips) {
  const Plan plan = FixturePlan();
  Result<Plan> decoded = DecodePlan(Encode(plan));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == plan);
}

TEST(PlanFormat, HeaderHoldsMagicVersionLengthAndChecksum) {
  const std::string bytes = Encode(FixturePlan());
  ASSERT_GT(bytes.size(), kHeader);
  const auto u64_at = [&](size_t offset) {
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i)
      v |= uint64_t{static_cast<uint8_t>(bytes[offset + i])} << (8 * i);
    return v;
  };
  EXPECT_EQ(bytes.substr(0, 8), std::string("DCPPLAN\0", 8));
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x04\x00\x00\x00", 4));
  EXPECT_EQ(u64_at(12), bytes.size() - kHeader);
  EXPECT_EQ(u64_at(20), internal::PlanChecksum(std::string_view(bytes).substr(kHeader)));
}

TEST(PlanFormat, SmallestPlanMatchesTheDocumentedExample) {
  // The payload of docs/plan_format.md's example, field by field.
  const auto u32 = [](uint64_t v) { return LittleEndianBytes(v, 4); };
  const auto u64 = [](uint64_t v) { return LittleEndianBytes(v, 8); };
  const std::string payload =
      u32(1) + u32(1) +                                  // topology 1x1
      u64(1) + u64(1) + u64(1) + std::string(1, '\0') +  // heads, kv_heads, head_dim, fp32
      u64(1) + u64(1) +                                  // block_size, head_groups
      u32(1) + u64(1) +                                  // seqlens [1]
      u32(1) + u32(0) + u64(0) + u64(1) +                // blocks [(0, 0, 1)]
      u32(1) + u32(0) +                                  // block_owner [0]
      u32(0) +                                           // compute_blocks []
      u32(0) + u32(0xffffffff) +                         // n_divisions 0, part_device -1
      u32(0) +                                           // origin ""
      u32(1) + u32(0) + std::string(1, '\0') +           // 1 forward program: device 0
      u32(0) + u32(0) + u32(0) + u32(0) +                // no slots, bindings, instructions
      u32(0);                                            // no backward programs
  ASSERT_EQ(payload.size(), 138u);
  const std::string bytes = Encode(SmallestPlan());
  EXPECT_EQ(bytes.substr(kHeader), payload);
  EXPECT_EQ(bytes.substr(0, kHeader),
            std::string("DCPPLAN\0", 8) + u32(4) + u64(138) + u64(0x5E839D656A0C9B8CULL));
}

TEST(PlanFormat, EncodeReplacesWhatTheOutputHeld) {
  std::string bytes = "left over";
  EncodePlan(FixturePlan(), &bytes);
  EXPECT_EQ(bytes, Encode(FixturePlan()));
}

// A plan whose encoding spans several of the encoder's 1 MiB pieces (its checksum is computed
// piece by piece while a file is written).
Plan PlanOfManyMegabytes() {
  Plan plan = RandomPlan(7);
  std::vector<Instruction>& instructions = plan.forward.at(0).instructions;
  if (instructions.empty()) instructions.push_back(CommWait{.id = 1});
  while (Encode(plan).size() < (size_t{5} << 20)) {
    const std::vector<Instruction> copy = instructions;
    instructions.insert(instructions.end(), copy.begin(), copy.end());
  }
  return plan;
}

TEST(WritePlanFile, WritesTheEncodedBytesOfAPlanOfManyMegabytes) {
  const Plan plan = PlanOfManyMegabytes();
  const std::string path = ::testing::TempDir() + "/write_plan_file_test.plan";
  ASSERT_TRUE(WritePlanFile(plan, path).ok());
  Result<std::string> file = internal::ReadWholeFile(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*file, Encode(plan));
  const std::string_view payload = std::string_view(*file).substr(kHeader);
  EXPECT_EQ(*file, std::string(internal::kPlanMagic) + LittleEndianBytes(4, 4) +
                       LittleEndianBytes(payload.size(), 8) +
                       LittleEndianBytes(internal::PlanChecksum(payload), 8) +
                       std::string(payload));
  Result<Plan> decoded = DecodePlan(*file);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == plan);
  std::remove(path.c_str());
}

// A pipe cannot go back to the header: it gets the same bytes, the header first.
TEST(WritePlanFile, WritesThePlanIntoAPipe) {
  const Plan plan = PlanOfManyMegabytes();
  const std::string path = ::testing::TempDir() + "/write_plan_file_test.fifo";
  std::remove(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(path, std::ios::binary);
    received.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  const Status s = WritePlanFile(plan, path);
  reader.join();
  std::remove(path.c_str());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(received == Encode(plan));
}

TEST(WritePlanFile, APathThatCannotBeWrittenIsNotFoundNamingIt) {
  const std::string directory = ::testing::TempDir();
  const Status s = WritePlanFile(FixturePlan(), directory);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(directory));
  // A device that takes no bytes: the write fails, and says so (not that it could not seek).
  const Status full = WritePlanFile(PlanOfManyMegabytes(), "/dev/full");
  EXPECT_EQ(full.code(), StatusCode::kNotFound);
  EXPECT_THAT(full.message(), HasSubstr("cannot write '/dev/full'"));
}

// ---------------------------------------------------------------------------------------------
// Parts

TEST(PlanPartForDevice, KeepsTheTablesAndOnlyThatDevicesPrograms) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const Plan plan = RandomPlan(seed);
    for (int32_t d = 0; d < plan.topology.devices(); ++d) {
      const Plan part = PlanPartForDevice(plan, DeviceId{d});
      Plan expected = plan;
      expected.part_device = d;
      expected.forward = {plan.forward[d]};
      expected.backward.clear();
      if (!plan.backward.empty()) expected.backward = {plan.backward[d]};
      EXPECT_TRUE(part == expected) << "device " << d;
      EXPECT_TRUE(PlanPartForDevice(part, DeviceId{d}) == part);

      const std::string bytes = Encode(part);
      Result<Plan> decoded = DecodePlan(bytes, DeviceId{d});
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_TRUE(*decoded == part);
      EXPECT_EQ(Encode(*decoded), bytes);
      ASSERT_TRUE(DecodePlan(bytes).ok());  // no expectation: any part is accepted
    }
  }
}

TEST(PlanPartForDevice, PartOfAnotherDeviceIsInvalidArgumentNamingBoth) {
  const std::string bytes = Encode(PlanPartForDevice(FixturePlan(), DeviceId{1}));
  const Status status = DecodeStatus(bytes, DeviceId{0});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("plan: this is the part of device 1, but device 0 was expected"));
}

TEST(PlanPartForDevice, WholePlanIsAcceptedForEveryDevice) {
  const std::string bytes = Encode(FixturePlan());
  for (int32_t d = 0; d < 2; ++d) EXPECT_TRUE(DecodeStatus(bytes, DeviceId{d}).ok());
}

TEST(PlanPartForDevice, ExpectedDeviceOutsideTheTopologyIsInvalidArgument) {
  for (const std::string& bytes :
       {Encode(FixturePlan()), Encode(PlanPartForDevice(FixturePlan(), DeviceId{0}))}) {
    for (int32_t d : {-1, 2}) {
      const Status status = DecodeStatus(bytes, DeviceId{d});
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(),
                  HasSubstr(fmt::format("expected device {} is not a device of topology 1x2", d)));
    }
  }
}

TEST(PlanPartForDevice, PlanWithoutProgramsGivesPartWithoutPrograms) {
  Plan plan = FixturePlan();
  plan.forward.clear();
  plan.backward.clear();
  const Plan part = PlanPartForDevice(plan, DeviceId{1});
  EXPECT_TRUE(part.forward.empty() && part.backward.empty());
  Result<Plan> decoded = DecodePlan(Encode(part), DeviceId{1});
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == part);
}

// ---------------------------------------------------------------------------------------------
// Damage: the envelope

TEST(PlanDecode, EmptyAndShortInputsAreCorrupt) {
  const std::string bytes = Encode(SmallestPlan());
  for (size_t n : {0, 1, 7, 8, 11, 12, 27}) {
    const Status status = DecodeStatus(std::string_view(bytes).substr(0, n));
    EXPECT_EQ(status.code(), StatusCode::kCorrupt) << n;
    EXPECT_THAT(status.message(), HasSubstr("plan: truncated header")) << n;
  }
}

TEST(PlanDecode, WrongMagicIsCorrupt) {
  for (size_t i = 0; i < 8; ++i) {
    std::string bytes = Encode(SmallestPlan());
    bytes[i] ^= 0x20;
    const Status status = DecodeStatus(bytes);
    EXPECT_EQ(status.code(), StatusCode::kCorrupt);
    EXPECT_EQ(status.message(), "plan: bad magic: not a dcp plan file");
  }
  EXPECT_EQ(DecodeStatus("PK\x03\x04").message(), "plan: bad magic: not a dcp plan file");
}

TEST(PlanDecode, OtherVersionIsUnsupportedNamingBothVersions) {
  for (uint32_t version : {0u, 3u, 5u, 0xffffffffu}) {
    std::string bytes = Encode(SmallestPlan());
    PutLittleEndian(&bytes, internal::kPlanVersionOffset, version, 4);
    const Status status = DecodeStatus(bytes);
    EXPECT_EQ(status.code(), StatusCode::kUnsupported);
    EXPECT_EQ(status.message(), fmt::format("plan: format version {} is not supported (this build "
                                            "reads version 4)",
                                            version));
  }
}

TEST(PlanDecode, PayloadLengthOtherThanTheBytesThatFollowIsCorrupt) {
  const std::string bytes = Encode(SmallestPlan());
  for (uint64_t length : {uint64_t{139}, uint64_t{1} << 63, ~uint64_t{0}}) {
    std::string damaged = bytes;
    PutLittleEndian(&damaged, internal::kPlanPayloadLengthOffset, length, 8);
    const Status status = DecodeStatus(damaged);
    EXPECT_EQ(status.code(), StatusCode::kCorrupt);
    EXPECT_THAT(status.message(),
                HasSubstr(fmt::format("plan: truncated: the header announces a payload of {} "
                                      "bytes, 138 follow",
                                      length)));
  }
  const Status status = DecodeStatus(bytes + "x");
  EXPECT_EQ(status.code(), StatusCode::kCorrupt);
  EXPECT_EQ(status.message(), "plan: 1 trailing bytes after the payload of 138 bytes");
}

TEST(PlanDecode, ChecksumMismatchIsCorrupt) {
  std::string bytes = Encode(SmallestPlan());
  bytes[internal::kPlanChecksumOffset] ^= 1;
  const Status status = DecodeStatus(bytes);
  EXPECT_EQ(status.code(), StatusCode::kCorrupt);
  EXPECT_THAT(status.message(), HasSubstr("plan: checksum mismatch: the payload hashes to 0x"));
}

// ---------------------------------------------------------------------------------------------
// Damage: the payload, with a valid checksum

TEST(PlanDecode, TrailingBytesInsideThePayloadAreCorrupt) {
  std::string bytes = Encode(SmallestPlan()) + std::string(3, '\0');
  Reseal(&bytes);
  const Status status = DecodeStatus(bytes);
  EXPECT_EQ(status.code(), StatusCode::kCorrupt);
  EXPECT_EQ(status.message(), "plan: 3 trailing bytes after the programs, at byte 166");
}

TEST(PlanDecode, HugeCountsAreRefusedBeforeAllocating) {
  // Payload offsets of the smallest plan's counts (docs/plan_format.md, "Example").
  const struct {
    size_t offset;
    std::string message;
  } cases[] = {
      {49, "plan: sequence count 4294967295 at byte 77 exceeds what the 85 bytes left can hold"},
      {61, "plan: data block count 4294967295 at byte 89"},
      {85, "plan: block owner count 4294967295 at byte 113"},
      {93, "plan: compute block count 4294967295 at byte 121"},
      {105, "plan: origin count 4294967295 at byte 133 exceeds what the 29 bytes left can hold"},
      {109, "plan: forward programs: program count 4294967295 at byte 137"},
      {118, "plan: forward program 0: slot count 4294967295 at byte 146"},
      {122, "plan: forward program 0: input count 4294967295 at byte 150"},
      {126, "plan: forward program 0: output count 4294967295 at byte 154"},
      {130,
       "plan: forward program 0: instruction count 4294967295 at byte 158 exceeds what the "
       "4 bytes left can hold"},
      {134,
       "plan: backward programs: program count 4294967295 at byte 162 exceeds what the 0 "
       "bytes left can hold"},
  };
  const std::string bytes = Encode(SmallestPlan());
  for (const auto& c : cases) {
    const Status status = DecodeStatus(WithPayloadU32(bytes, c.offset, 0xffffffff));
    EXPECT_EQ(status.code(), StatusCode::kCorrupt) << c.offset;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.offset;
  }
}

TEST(PlanDecode, UnknownEnumCodesAreCorrupt) {
  const std::string smallest = Encode(SmallestPlan());
  {
    std::string bytes = smallest;
    bytes[kHeader + 32] = 2;  // shape dtype
    Reseal(&bytes);
    EXPECT_EQ(DecodeStatus(bytes).message(), "plan: shape: dtype code 2 is not in [0, 1]");
  }
  {
    std::string bytes = smallest;
    bytes[kHeader + 117] = 2;  // forward program 0's pass
    Reseal(&bytes);
    EXPECT_EQ(DecodeStatus(bytes).message(),
              "plan: forward program 0: pass code 2 is not in [0, 1]");
  }
  {
    std::string bytes = smallest;
    bytes[kHeader + 117] = 1;  // a backward program in the forward list
    Reseal(&bytes);
    EXPECT_EQ(DecodeStatus(bytes).message(), "plan: forward program 0: holds a backward program");
  }
  Plan plan = SmallestPlan();
  plan.forward[0].slots = {{TensorKind::kQ, DType::kFloat32, 4}};
  plan.forward[0].instructions = {CommWait{1}};
  const std::string base = Encode(plan);
  // The instruction is the payload's last 9 bytes before the backward count: tag and id.
  const size_t tag_at = base.size() - 4 - 5;
  for (int tag : {5, 200}) {
    std::string bytes = base;
    bytes[tag_at] = static_cast<char>(tag);
    Reseal(&bytes);
    EXPECT_EQ(DecodeStatus(bytes).message(),
              fmt::format("plan: forward program 0: instruction 0: tag {} is not in [0, 4]", tag));
  }
  // The slot's kind and dtype codes sit right after the slot count.
  const size_t slot_at = kHeader + 122;
  const std::tuple<size_t, char, std::string> slot_cases[] = {
      {0, 8, "slot 0: tensor kind code 8 is not in [0, 7]"},
      {1, 2, "slot 0: dtype code 2 is not in [0, 1]"}};
  for (const auto& [offset, code, message] : slot_cases) {
    std::string bytes = base;
    bytes[slot_at + offset] = code;
    Reseal(&bytes);
    EXPECT_EQ(DecodeStatus(bytes).message(), "plan: forward program 0: " + message);
  }
}

// Each case breaks one rule of docs/plan_format.md's "Checks" in the fixture plan, through the
// Plan struct (the encoder writes whatever it is given).
TEST(PlanDecode, EveryFieldCheckNamesTheValueAndWhereItIs) {
  const struct {
    std::function<void(Plan&)> damage;
    std::string message;
  } cases[] = {
      {[](Plan& p) { p.topology.nodes = 0; },
       "plan: topology: topology 0x2 must have at least 1 node, 1 device per node and at most "
       "65536 "
       "devices"},
      {[](Plan& p) {
         p.topology = {70000, 1};
       },
       "plan: topology: topology 70000x1 must have"},
      {[](Plan& p) {
         p.topology = {256, 257};
       },
       "plan: topology: topology 256x257 must have"},
      {[](Plan& p) { p.shape.kv_heads = 3; }, "plan: shape: kv_heads=3 must be in [1, heads]"},
      {[](Plan& p) { p.block_size = 0; }, "plan: block_size 0 is not in [1, 1073741824]"},
      {[](Plan& p) { p.head_groups = 3; }, "plan: head_groups 3 does not divide kv_heads 2"},
      {[](Plan& p) { p.seqlens[1] = 0; }, "plan: sequence 1: length 0 is not in [1, 1073741824]"},
      {[](Plan& p) { p.blocks[2].sequence = SequenceId{2}; },
       "plan: data block 2: sequence 2 out of range (2 sequences)"},
      {[](Plan& p) { p.blocks[1].tokens = 5; },
       "plan: data block 1: 5 tokens are not in [1, block_size 4]"},
      {[](Plan& p) { p.blocks[1].token_begin = 5; },
       "plan: data block 1: tokens [5, 5 + 2) are not inside sequence 0 of 6 tokens"},
      {[](Plan& p) { p.block_owner[2] = DeviceId{2}; },
       "plan: block owner 2: device 2 out of range (2 devices)"},
      {[](Plan& p) { p.block_owner.pop_back(); }, "plan: 2 block owners for 3 data blocks"},
      {[](Plan& p) { p.compute_blocks[1].kv_block = DataBlockId{3}; },
       "plan: compute block 1: kv: data block 3 out of range (3 data blocks)"},
      {[](Plan& p) { p.compute_blocks[1].kv_block = DataBlockId{2}; },
       "plan: compute block 1: q block 1 (sequence 0) and kv block 2 (sequence 1) differ"},
      {[](Plan& p) { p.compute_blocks[2].head_group = 2; },
       "plan: compute block 2: head group 2 out of range (2 head groups)"},
      {[](Plan& p) { p.compute_blocks[0].area = 17; },
       "plan: compute block 0: area 17 is not in [1, 4 x 4]"},
      {[](Plan& p) { p.compute_blocks[0].area = 0; },
       "plan: compute block 0: area 0 is not in [1, 4 x 4]"},
      {[](Plan& p) { p.n_divisions = -1; }, "plan: n_divisions -1 is negative"},
      {[](Plan& p) { p.part_device = 2; },
       "plan: part_device 2 is neither -1 (the whole plan) nor one of the 2 devices"},
      {[](Plan& p) { p.forward.pop_back(); }, "plan: forward programs: 1 of them, expected 0 or 2"},
      {[](Plan& p) { p.part_device = 0; }, "plan: forward programs: 2 of them, expected 0 or 1"},
      {[](Plan& p) { std::swap(p.backward[0], p.backward[1]); },
       "plan: backward program 0: holds device 1 instead"},
      {[](Plan& p) { p.forward[0].slots[3].bytes = -1; },
       "plan: forward program 0: slot 3: -1 bytes are not in [0, 1099511627776]"},
      {[](Plan& p) { p.forward[1].inputs[1].slot = 8; },
       "plan: forward program 1: input 1: slot 8 out of range (8 slots)"},
      {[](Plan& p) { p.forward[1].outputs[0].piece.block = DataBlockId{-1}; },
       "plan: forward program 1: output 0: data block -1 out of range (3 data blocks)"},
      {[](Plan& p) { p.backward[0].inputs[0].piece.head_group = 2; },
       "plan: backward program 0: input 0: head group 2 out of range (2 head groups)"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[0]).division = 2; },
       "plan: forward program 0: instruction 0: attention: division 2 out of range (2 "
       "divisions)"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[1].instructions[0]).tiles[0].block =
             ComputeBlockId{3};
       },
       "plan: forward program 1: instruction 0: attention: tile 0: compute block 3 out of range "
       "(3 compute blocks)"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[0]).rows[0].q = 99; },
       "plan: forward program 0: instruction 0: attention: row 0: q slot 99 out of range (8 "
       "slots)"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[0]).tiles[0].row = 1; },
       "plan: forward program 0: instruction 0: attention: tile 0: row 1 out of range (1 rows)"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[0].instructions[0]).tiles[0].column = -1;
       },
       "plan: forward program 0: instruction 0: attention: tile 0: column -1 out of range (1 "
       "columns)"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[0].instructions[0]).tiles[0].n_slices = 2;
       },
       "plan: forward program 0: instruction 0: attention: tile 0: slices [0, 0 + 2) are not "
       "within the call's 1"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[0]).rows[0].out = -1; },
       "plan: forward program 0: instruction 0: attention: row 0: out slot -1 out of range"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.backward[0].instructions[0]).rows[0].delta = -1;
       },
       "plan: backward program 0: instruction 0: attention: row 0: delta slot -1 out of range"},
      {[](Plan& p) { std::get<BlockwiseAttention>(p.forward[0].instructions[0]).rows[0].dq = 8; },
       "plan: forward program 0: instruction 0: attention: row 0: dq slot 8 out of range"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.backward[0].instructions[0]).columns[0].dkv = -1;
       },
       "plan: backward program 0: instruction 0: attention: column 0: dkv slot -1 out of range"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[0].instructions[0]).slices[0].row_end = 5;
       },
       "plan: forward program 0: instruction 0: attention: tile 0: slice 0: rows [0, 5) are not "
       "inside the tile's 4 rows"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[0].instructions[0]).slices[0].hi.base =
             kMaxSliceBase + 1;
       },
       "slice 0: hi base 2147483649 is not in [-2147483648, 2147483648]"},
      {[](Plan& p) {
         std::get<BlockwiseAttention>(p.forward[0].instructions[0]).pass = static_cast<Pass>(7);
       },
       "plan: forward program 0: instruction 0: attention: pass code 7 is not in [0, 1]"},
      {[](Plan& p) {
         std::get<BlockwiseReduction>(p.forward[0].instructions[1]).ops[0].lse_sources.clear();
       },
       "plan: forward program 0: instruction 1: reduction: op 0: an LSE merge pairs its 1 "
       "sources with 0 lse sources"},
      {[](Plan& p) {
         std::get<BlockwiseReduction>(p.forward[0].instructions[1]).ops[0].lse_destination = -1;
       },
       "plan: forward program 0: instruction 1: reduction: op 0: lse_destination slot -1 out of "
       "range (8 slots)"},
      {[](Plan& p) {
         std::get<BlockwiseReduction>(p.forward[0].instructions[1]).ops[0].sources[0] = 8;
       },
       "plan: forward program 0: instruction 1: reduction: op 0: source 0: slot 8 out of range"},
      {[](Plan& p) {
         std::get<BlockwiseReduction>(p.forward[0].instructions[1]).kind =
             static_cast<ReductionKind>(3);
       },
       "plan: forward program 0: instruction 1: reduction: reduction kind code 3 is not in [0, "
       "2]"},
      {[](Plan& p) { std::get<BlockwiseCopy>(p.backward[1].instructions[2]).ops[0].second = -1; },
       "plan: backward program 1: instruction 2: copy: op 0: destination slot -1 out of range"},
      {[](Plan& p) {
         std::get<CommLaunch>(p.forward[0].instructions[3]).recvs[0].peer = DeviceId{2};
       },
       "plan: forward program 0: instruction 3: comm launch: recv 0: device 2 out of range (2 "
       "devices)"},
      {[](Plan& p) { std::get<CommLaunch>(p.forward[0].instructions[3]).sends[0].slots[0] = 12; },
       "plan: forward program 0: instruction 3: comm launch: send 0: entry 0: slot 12 out of "
       "range (8 slots)"},
      {[](Plan& p) { p.forward[0].slots[0].kind = static_cast<TensorKind>(8); },
       "plan: forward program 0: slot 0: tensor kind code 8 is not in [0, 7]"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << ": " << cases[i].message);
    Plan plan = FixturePlan();
    cases[i].damage(plan);
    const Status status = DecodeStatus(Encode(plan));
    EXPECT_EQ(status.code(), StatusCode::kCorrupt);
    EXPECT_THAT(status.message(), HasSubstr(cases[i].message));
  }
}

TEST(PlanDecode, OptionalSlotsMayBeAbsent) {
  Plan plan = FixturePlan();
  auto& op = std::get<BlockwiseReduction>(plan.forward[0].instructions[1]);
  op.kind = ReductionKind::kSum;
  op.ops[0].lse_destination = -1;
  op.ops[0].lse_sources.clear();
  Result<Plan> decoded = DecodePlan(Encode(plan));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == plan);
}

// ---------------------------------------------------------------------------------------------
// Fuzzing

// Random plans of modest size, and every truncation (or a dense sample of them for larger ones).
std::vector<size_t> TruncationLengths(size_t size) {
  std::vector<size_t> lengths;
  const size_t step = std::max<size_t>(1, size / 1500);
  for (size_t n = 0; n < size; n += step) lengths.push_back(n);
  lengths.push_back(size - 1);
  return lengths;
}

TEST(PlanDecodeFuzz, EveryTruncationFails) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const std::string bytes = Encode(RandomPlan(seed));
    for (size_t n : TruncationLengths(bytes.size())) {
      ASSERT_FALSE(DecodePlan(std::string_view(bytes).substr(0, n)).ok()) << "length " << n;
    }
  }
}

// Encodings of the first `count` random plans of at most `max_bytes` bytes, with their seeds:
// the resealed fuzz tests decode deep into each, so they keep to small plans.
std::vector<std::pair<uint64_t, std::string>> SmallEncodedPlans(int count, size_t max_bytes) {
  std::vector<std::pair<uint64_t, std::string>> plans;
  for (uint64_t seed = 0; static_cast<int>(plans.size()) < count; ++seed) {
    std::string bytes = Encode(RandomPlan(seed));
    if (bytes.size() <= max_bytes) plans.emplace_back(seed, std::move(bytes));
  }
  return plans;
}

TEST(PlanDecodeFuzz, EveryTruncationOfAResealedPayloadIsCorrupt) {
  for (const auto& [seed, bytes] : SmallEncodedPlans(10, 3000)) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    for (size_t n = kHeader; n < bytes.size(); ++n) {
      std::string truncated = bytes.substr(0, n);
      Reseal(&truncated);
      const Status status = DecodeStatus(truncated);
      ASSERT_EQ(status.code(), StatusCode::kCorrupt) << "length " << n << ": " << status.ToString();
    }
  }
}

// A random mutation at or after byte `begin`: single and multiple bit flips, a byte overwritten,
// a run of bytes set to 0x00 or 0xff (zero or huge counts), a u32 set to a small value, bytes
// erased or inserted. Returns false if it changed nothing.
bool Mutate(Rng& rng, std::string* bytes, size_t begin) {
  const std::string before = *bytes;
  const auto at = [&]() { return static_cast<size_t>(Uniform(rng, begin, bytes->size() - 1)); };
  switch (Uniform(rng, 0, 6)) {
    case 0:
      (*bytes)[at()] ^= static_cast<char>(1 << Uniform(rng, 0, 7));
      break;
    case 1:
      for (int64_t k = Uniform(rng, 2, 8); k > 0; --k) {
        (*bytes)[at()] ^= static_cast<char>(1 << Uniform(rng, 0, 7));
      }
      break;
    case 2:
      (*bytes)[at()] = static_cast<char>(Uniform(rng, 0, 255));
      break;
    case 3: {
      const size_t from = at();
      const size_t to = std::min(bytes->size(), from + static_cast<size_t>(Uniform(rng, 1, 8)));
      const char fill = OneIn(rng, 2) ? '\0' : '\xff';
      for (size_t i = from; i < to; ++i) (*bytes)[i] = fill;
      break;
    }
    case 4: {
      const size_t from = at();
      if (from + 4 <= bytes->size()) PutLittleEndian(bytes, from, Uniform(rng, 0, 20), 4);
      break;
    }
    case 5:  // bytes lost: everything after them shifts
      bytes->erase(at(), static_cast<size_t>(Uniform(rng, 1, 8)));
      break;
    default:  // bytes inserted
      bytes->insert(at(), static_cast<size_t>(Uniform(rng, 1, 8)),
                    static_cast<char>(Uniform(rng, 0, 255)));
      break;
  }
  return *bytes != before;
}

TEST(PlanDecodeFuzz, BitFlipsAndByteOverwritesFail) {
  int tried = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const std::string bytes = Encode(RandomPlan(seed));
    Rng rng(seed + 1000);
    for (int i = 0; i < 500; ++i) {
      std::string damaged = bytes;
      if (!Mutate(rng, &damaged, 0)) continue;
      ++tried;
      // The checksum could in principle match by chance (2^-64); it never does here.
      ASSERT_FALSE(DecodePlan(damaged).ok()) << "mutation " << i;
    }
  }
  EXPECT_GT(tried, 3000);
}

TEST(PlanDecodeFuzz, ResealedDamageIsCorruptOrDecodesToItsOwnBytes) {
  int refused = 0, accepted = 0;
  for (const auto& [seed, bytes] : SmallEncodedPlans(40, 6000)) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Rng rng(seed + 2000);
    for (int i = 0; i < 400; ++i) {
      std::string damaged = bytes;
      if (!Mutate(rng, &damaged, kHeader)) continue;
      Reseal(&damaged);
      Result<Plan> decoded = DecodePlan(damaged);
      if (decoded.ok()) {
        // The format is canonical: whatever decodes encodes back to the same bytes.
        ASSERT_EQ(Encode(*decoded), damaged) << "mutation " << i;
        ++accepted;
      } else {
        ASSERT_EQ(decoded.status().code(), StatusCode::kCorrupt)
            << "mutation " << i << ": " << decoded.status().ToString();
        ++refused;
      }
    }
  }
  // Most damage breaks a check; some only changes a value within its bounds.
  EXPECT_GT(refused, 10000);
  EXPECT_GT(accepted, 500);
}

}  // namespace
}  // namespace dcp
