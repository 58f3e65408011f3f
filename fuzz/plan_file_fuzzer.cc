// SPDX-License-Identifier: Apache-2.0
// Fuzzes plan files (docs/plan_format.md) as `dcp simulate --plan` and `dcp run` read them:
// DecodePlan either refuses the bytes with Corrupt or Unsupported, or returns a plan that
//  - encodes back to exactly the same bytes (the encoding is canonical),
//  - decodes again with an expected device exactly when it is one of its devices (and its part's),
//  - splits into device parts that encode and decode with their device,
//  - ValidatePlan accepts or refuses with InvalidArgument,
//  - SimulatePlan replays (with a trace) or refuses with InvalidArgument, on the default cluster
//    with the plan's devices per node, as `dcp simulate --plan` does without validating first;
//    it replays every plan ValidatePlan accepts.
// A mutated file almost never keeps its checksum, so each input is decoded twice: as it is, and
// with its header's version, payload length and checksum made right, which takes the mutation to
// the payload decoder. And since byte mutations seldom give a plan that still decodes, half of the
// mutations are made on the decoded plan instead (LLVMFuzzerCustomMutator below): one of its ids,
// slots, sizes or counts changed, or an instruction, tile, op or message entry dropped, repeated
// or moved, then encoded. That gives ValidatePlan and SimulatePlan well-formed plans that are
// wrong in one place.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "dcp/plan.h"
#include "dcp/sim.h"
#include "fuzz_util.h"
#include "plan/plan_format_internal.h"

namespace dcp::fuzz {
namespace {

void CheckPart(const Plan& plan, DeviceId device) {
  const Plan part = PlanPartForDevice(plan, device);
  std::string bytes;
  EncodePlan(part, &bytes);
  const Result<Plan> decoded = DecodePlan(bytes, device);
  DCP_FUZZ_CHECK(decoded.ok(), "the part of device {} does not decode: {}", device.value,
                 decoded.status().ToString());
  DCP_FUZZ_CHECK(*decoded == part, "the part of device {} decodes to another plan", device.value);
}

void CheckPlan(std::string_view data) {
  const Result<Plan> plan = DecodePlan(data);
  Outcome("plan decode", plan.status(), {StatusCode::kCorrupt, StatusCode::kUnsupported});
  if (!plan.ok()) return;
  std::string encoded;
  EncodePlan(*plan, &encoded);
  DCP_FUZZ_CHECK(encoded == data, "decoding then encoding changes the {} bytes (now {})",
                 data.size(), encoded.size());

  const int32_t devices = plan->topology.devices();
  for (int32_t d : {-1, 0, devices - 1, devices}) {
    const Result<Plan> mine = DecodePlan(data, DeviceId{d});
    const bool expected =
        d >= 0 && d < devices && (plan->part_device < 0 || plan->part_device == d);
    DCP_FUZZ_CHECK(mine.ok() == expected, "expected device {} (part_device {}, {} devices): {}", d,
                   plan->part_device, devices, mine.status().ToString());
    Outcome("plan decode for a device", mine.status(), {StatusCode::kInvalidArgument});
  }
  if (plan->part_device < 0) {
    CheckPart(*plan, DeviceId{0});
    CheckPart(*plan, DeviceId{devices - 1});
  } else {
    CheckPart(*plan, DeviceId{plan->part_device});
  }

  const Status valid = ValidatePlan(*plan);
  Outcome("plan validate", valid, {StatusCode::kInvalidArgument});
  ClusterSpec cluster;
  cluster.devices_per_node = plan->topology.devices_per_node;
  const Result<SimReport> report = SimulatePlan(*plan, cluster, SimOptions{.trace = true});
  Outcome("plan simulate", report.status(), {StatusCode::kInvalidArgument});
  // What the validator accepts runs: the simulator finds no missing launch or deadlock in it.
  DCP_FUZZ_CHECK(!valid.ok() || report.ok(), "a valid plan does not simulate: {}",
                 report.status().ToString());
}

// `data` with the header a writer would have put in front of its payload.
std::string WithRightHeader(std::string_view data) {
  std::string file(data);
  const std::string_view payload = std::string_view(file).substr(internal::kPlanHeaderBytes);
  const uint32_t version = internal::kPlanFormatVersion;
  const uint64_t length = payload.size();
  const uint64_t checksum = internal::PlanChecksum(payload);
  std::memcpy(file.data() + internal::kPlanVersionOffset, &version, sizeof(version));
  std::memcpy(file.data() + internal::kPlanPayloadLengthOffset, &length, sizeof(length));
  std::memcpy(file.data() + internal::kPlanChecksumOffset, &checksum, sizeof(checksum));
  return file;
}

// Every integer field of a plan's tables and programs, to change one of them. Slice slopes are
// apart: the encoder requires them to be 0 or 1, so they are only flipped.
struct IntFields {
  std::vector<int32_t*> i32;
  std::vector<int64_t*> i64;
  std::vector<int64_t*> slopes;

  void Add(int32_t* v) { i32.push_back(v); }
  void Add(int64_t* v) { i64.push_back(v); }
  template <typename Tag>
  void Add(Id<Tag>* id) {
    i32.push_back(&id->value);
  }
  void Add(Slice* s) {
    for (int64_t* v : {&s->row_begin, &s->row_end, &s->lo.base, &s->hi.base}) i64.push_back(v);
    slopes.push_back(&s->lo.slope);
    slopes.push_back(&s->hi.slope);
  }
  void Add(Piece* p) {
    Add(&p->block);
    Add(&p->head_group);
  }
  template <typename T>
  void Add(std::vector<T>* values) {
    for (T& v : *values) Add(&v);
  }
};

void CollectFields(Program& p, IntFields& f) {
  for (SlotInfo& s : p.slots) f.Add(&s.bytes);
  for (std::vector<Binding>* bindings : {&p.inputs, &p.outputs}) {
    for (Binding& b : *bindings) {
      f.Add(&b.piece);
      f.Add(&b.slot);
    }
  }
  for (Instruction& inst : p.instructions) {
    if (auto* a = std::get_if<BlockwiseAttention>(&inst)) {
      f.Add(&a->division);
      for (AttentionRow& r : a->rows) {
        for (SlotId* slot : {&r.q, &r.out, &r.lse, &r.d_o, &r.delta, &r.dq}) f.Add(slot);
      }
      for (AttentionColumn& c : a->columns) {
        for (SlotId* slot : {&c.kv, &c.dkv}) f.Add(slot);
      }
      for (AttentionTile& t : a->tiles) {
        f.Add(&t.block);
        for (int32_t* index : {&t.row, &t.column, &t.first_slice, &t.n_slices}) f.Add(index);
      }
      f.Add(&a->slices);
    } else if (auto* r = std::get_if<BlockwiseReduction>(&inst)) {
      for (ReductionOp& op : r->ops) {
        f.Add(&op.destination);
        f.Add(&op.sources);
        f.Add(&op.lse_destination);
        f.Add(&op.lse_sources);
      }
    } else if (auto* c = std::get_if<BlockwiseCopy>(&inst)) {
      for (auto& [source, destination] : c->ops) {
        f.Add(&source);
        f.Add(&destination);
      }
    } else if (auto* l = std::get_if<CommLaunch>(&inst)) {
      f.Add(&l->id);
      for (std::vector<PeerSlots>* peers : {&l->sends, &l->recvs}) {
        for (PeerSlots& peer : *peers) {
          f.Add(&peer.peer);
          f.Add(&peer.slots);
          f.Add(&peer.bytes);
        }
      }
    } else if (auto* w = std::get_if<CommWait>(&inst)) {
      f.Add(&w->id);
    }
  }
}

IntFields CollectFields(Plan& plan) {
  IntFields f;
  f.Add(&plan.block_size);
  f.Add(&plan.seqlens);
  for (PlanBlock& b : plan.blocks) {
    f.Add(&b.sequence);
    f.Add(&b.token_begin);
    f.Add(&b.tokens);
  }
  f.Add(&plan.block_owner);
  for (PlanComputeBlock& c : plan.compute_blocks) {
    f.Add(&c.q_block);
    f.Add(&c.kv_block);
    f.Add(&c.head_group);
    f.Add(&c.area);
  }
  f.Add(&plan.n_divisions);
  for (std::vector<Program>* programs : {&plan.forward, &plan.backward}) {
    for (Program& p : *programs) CollectFields(p, f);
  }
  return f;
}

// A new value for `v`: a neighbour, 0 or -1, a small number, or the value of another field of
// the same type (another slot, id or size of the plan, which keeps most changes decodable).
template <typename T>
T NewValue(T v, const std::vector<T*>& fields, std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0:
      return static_cast<T>(v + 1);
    case 1:
      return static_cast<T>(v - 1);
    case 2:
      return static_cast<T>(rng() % 2 == 0 ? 0 : -1);
    case 3:
      return static_cast<T>(rng() % 16);
    default:
      return *fields[rng() % fields.size()];
  }
}

// Drops, repeats or swaps an element of `items` (moves it next to another for a swap).
template <typename T>
bool EditList(std::vector<T>& items, std::mt19937_64& rng) {
  if (items.empty()) return false;
  const size_t i = rng() % items.size();
  switch (rng() % 3) {
    case 0:
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    case 1:
      items.insert(items.begin() + static_cast<std::ptrdiff_t>(rng() % (items.size() + 1)),
                   T(items[i]));
      return true;
    default:
      std::swap(items[i], items[rng() % items.size()]);
      return true;
  }
}

// One structural change to one program: its instructions, or the tiles, ops or message entries of
// one instruction, or its inputs and outputs.
bool EditProgram(Program& p, std::mt19937_64& rng) {
  switch (rng() % 3) {
    case 0:
      return EditList(p.instructions, rng);
    case 1:
      return EditList(rng() % 2 == 0 ? p.inputs : p.outputs, rng);
    default:
      break;
  }
  if (p.instructions.empty()) return false;
  Instruction& inst = p.instructions[rng() % p.instructions.size()];
  if (auto* a = std::get_if<BlockwiseAttention>(&inst)) {
    if (a->tiles.empty() || rng() % 2 == 0) return EditList(a->tiles, rng);
    if (!std::ranges::all_of(a->tiles, [&](const AttentionTile& t) { return a->Holds(t); })) {
      return false;
    }
    // One tile's mask edited: the call is rebuilt from every tile's mask, as the compiler builds
    // it.
    std::vector<std::vector<Slice>> masks;
    for (const AttentionTile& t : a->tiles) {
      const std::span<const Slice> mask = a->SlicesOf(t);
      masks.emplace_back(mask.begin(), mask.end());
    }
    if (!EditList(masks[rng() % masks.size()], rng)) return false;
    BlockwiseAttention rebuilt{
        .pass = a->pass, .division = a->division, .rows = a->rows, .columns = a->columns};
    for (size_t i = 0; i < masks.size(); ++i) {
      const AttentionTile& t = a->tiles[i];
      rebuilt.AddTile(t.block, t.row, t.column, masks[i]);
    }
    *a = std::move(rebuilt);
    return true;
  }
  if (auto* r = std::get_if<BlockwiseReduction>(&inst)) {
    if (r->ops.empty() || rng() % 2 == 0) return EditList(r->ops, rng);
    return EditList(r->ops[rng() % r->ops.size()].sources, rng);
  }
  if (auto* c = std::get_if<BlockwiseCopy>(&inst)) return EditList(c->ops, rng);
  if (auto* l = std::get_if<CommLaunch>(&inst)) {
    std::vector<PeerSlots>& peers = rng() % 2 == 0 ? l->sends : l->recvs;
    if (peers.empty() || rng() % 2 == 0) return EditList(peers, rng);
    PeerSlots& peer = peers[rng() % peers.size()];
    if (peer.slots.empty()) return false;
    // Entries keep their slot and byte count together.
    const size_t k = rng() % peer.slots.size();
    peer.slots.erase(peer.slots.begin() + static_cast<std::ptrdiff_t>(k));
    peer.bytes.erase(peer.bytes.begin() + static_cast<std::ptrdiff_t>(k));
    return true;
  }
  return false;
}

bool MutatePlan(Plan& plan, std::mt19937_64& rng) {
  if (rng() % 3 == 0) {
    std::vector<Program>& programs = rng() % 2 == 0 ? plan.forward : plan.backward;
    if (!programs.empty() && EditProgram(programs[rng() % programs.size()], rng)) return true;
  }
  IntFields f = CollectFields(plan);
  if (!f.slopes.empty() && rng() % 8 == 0) {
    int64_t* slope = f.slopes[rng() % f.slopes.size()];
    *slope = 1 - *slope;
    return true;
  }
  if (f.i32.empty() && f.i64.empty()) return false;
  if (f.i64.empty() || (!f.i32.empty() && rng() % 3 != 0)) {
    int32_t* v = f.i32[rng() % f.i32.size()];
    *v = NewValue(*v, f.i32, rng);
  } else {
    int64_t* v = f.i64[rng() % f.i64.size()];
    *v = NewValue(*v, f.i64, rng);
  }
  return true;
}

}  // namespace
}  // namespace dcp::fuzz

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half of the mutations change the decoded plan (when the input decodes, with its header made
// right); the others are libFuzzer's byte mutations.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937_64 rng(seed);
  const std::string_view bytes = dcp::fuzz::AsText(data, size);
  if (rng() % 2 == 0 && bytes.size() >= dcp::internal::kPlanHeaderBytes &&
      bytes.starts_with(dcp::internal::kPlanMagic)) {
    dcp::Result<dcp::Plan> plan = dcp::DecodePlan(dcp::fuzz::WithRightHeader(bytes));
    if (plan.ok()) {
      const int changes = 1 + static_cast<int>(rng() % 2);
      bool changed = false;
      for (int i = 0; i < changes; ++i) changed = dcp::fuzz::MutatePlan(*plan, rng) || changed;
      std::string encoded;
      dcp::EncodePlan(*plan, &encoded);
      if (changed && encoded.size() <= max_size) {
        std::memcpy(data, encoded.data(), encoded.size());
        return encoded.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = dcp::fuzz::AsText(data, size);
  dcp::fuzz::CheckPlan(bytes);
  if (bytes.size() >= dcp::internal::kPlanHeaderBytes &&
      bytes.starts_with(dcp::internal::kPlanMagic)) {
    const std::string fixed = dcp::fuzz::WithRightHeader(bytes);
    if (fixed != bytes) dcp::fuzz::CheckPlan(fixed);
  }
  return 0;
}
