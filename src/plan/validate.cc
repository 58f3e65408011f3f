// SPDX-License-Identifier: Apache-2.0
// The symbolic validator (include/dcp/plan.h): runs every device's program with slots holding
// identities instead of numbers, the DummyExecutor of the original DCP made strict. A slot holds
// nothing, a value (an input piece, a received piece or a Delta) or an accumulator (the set of
// compute blocks merged into a partial O/LSE, dQ or dKV of one piece). Devices run round-robin;
// a device blocked at a CommWait resumes once every peer of that launch has launched it too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_rules.h"

namespace dcp {
namespace {


std::string PieceText(const Piece& piece) {
  return fmt::format("block {}/group {}", piece.block.value, piece.head_group);
}

// "an O", "a dQ": the article that reads right before a tensor kind.
std::string WithArticle(TensorKind kind) {
  const bool vowel = kind == TensorKind::kO || kind == TensorKind::kLse;
  return fmt::format("{} {}", vowel ? "an" : "a", ToString(kind));
}


std::string InstructionLabel(const Instruction& instruction) {
  if (const auto* r = std::get_if<BlockwiseReduction>(&instruction)) {
    return fmt::format("BlockwiseReduction {}", ToString(r->kind));
  }
  if (const auto* l = std::get_if<CommLaunch>(&instruction)) {
    return fmt::format("CommLaunch {}", l->id);
  }
  if (const auto* w = std::get_if<CommWait>(&instruction)) return fmt::format("CommWait {}", w->id);
  if (std::holds_alternative<BlockwiseCopy>(instruction)) return "BlockwiseCopy";
  return "BlockwiseAttention";
}

std::string SlotCount(size_t n) { return fmt::format("{} slot{}", n, n == 1 ? "" : "s"); }

// "q slot 9", "source 2 slot 5": how a message names a slot an instruction touches.
std::string SlotRef(std::string_view role, int index, SlotId slot) {
  if (index < 0) return fmt::format("{} slot {}", role, slot);
  return fmt::format("{} {} slot {}", role, index, slot);
}

// What a slot holds.
struct Content {
  enum class Type : uint8_t { kEmpty, kValue, kAccumulator };
  Type type = Type::kEmpty;
  TensorKind kind = TensorKind::kQ;
  std::optional<Piece> piece;   // unset only for an accumulator no tile has reached yet
  std::vector<int32_t> blocks;  // accumulator: the compute blocks merged in, ascending

  static Content Value(TensorKind kind, Piece piece) {
    return {.type = Type::kValue, .kind = kind, .piece = piece, .blocks = {}};
  }
  static Content Accumulator(TensorKind kind, std::optional<Piece> piece = {},
                             std::vector<int32_t> blocks = {}) {
    return {.type = Type::kAccumulator, .kind = kind, .piece = piece, .blocks = std::move(blocks)};
  }
};

std::string Describe(const Content& c) {
  switch (c.type) {
    case Content::Type::kEmpty:
      return "nothing";
    case Content::Type::kValue:
      return fmt::format("{} of {}", ToString(c.kind), PieceText(*c.piece));
    case Content::Type::kAccumulator:
      if (!c.piece) return fmt::format("an empty {} accumulator", ToString(c.kind));
      return fmt::format("{} accumulator of {} with {} compute block{}", WithArticle(c.kind),
                         PieceText(*c.piece), c.blocks.size(), c.blocks.size() == 1 ? "" : "s");
  }
  return "unknown";
}

// Checks that `c` is a value of `kind` (and of `piece` when given).
Status ExpectValue(const Content& c, TensorKind kind, const std::optional<Piece>& piece,
                   std::string_view role, int index, SlotId slot) {
  if (c.type == Content::Type::kValue && c.kind == kind && (!piece || *c.piece == *piece)) {
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format(
      "{} holds {}, expected {}{}", SlotRef(role, index, slot), Describe(c), ToString(kind),
      piece ? fmt::format(" of {}", PieceText(*piece)) : std::string()));
}

// Checks that `c` is an accumulator of `kind` whose piece is unset or `piece` (any when unset).
Status ExpectAccumulator(const Content& c, TensorKind kind, const std::optional<Piece>& piece,
                         std::string_view role, int index, SlotId slot) {
  if (c.type == Content::Type::kAccumulator && c.kind == kind &&
      (!c.piece || !piece || *c.piece == *piece)) {
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format(
      "{} holds {}, expected {} accumulator{}", SlotRef(role, index, slot), Describe(c),
      WithArticle(kind), piece ? fmt::format(" of {}", PieceText(*piece)) : std::string()));
}

// Checks a tile's mask slices: each by the rules of plan_rules.h, and their area equal to the
// block's.
Status CheckSlices(std::span<const Slice> slices, int64_t q_tokens, int64_t kv_tokens,
                   int64_t area) {
  int64_t covered = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    if (Status status = internal::CheckSlice(s, q_tokens); !status.ok()) {
      return status.WithContext(fmt::format("slice {}", i));
    }
    covered += SliceArea(s, 0, q_tokens, 0, kv_tokens);
    if (covered > area) break;  // already wrong; stop before a long sum could overflow
  }
  if (covered != area) {
    return Status::InvalidArgument(fmt::format("slices cover area {}{}, the compute block has {}",
                                               covered, covered > area ? " or more" : "", area));
  }
  return Status::Ok();
}

// Checks that a tile's slices are its mask's (the call holds the tile's range: Holds).
Status CheckTileSlices(const Plan& plan, const BlockwiseAttention& attention,
                       const AttentionTile& tile) {
  const PlanComputeBlock& cb = plan.compute_blocks[tile.block.value];
  return CheckSlices(attention.SlicesOf(tile), plan.blocks[cb.q_block.value].tokens,
                     plan.blocks[cb.kv_block.value].tokens, cb.area);
}

// Pieces and their compute blocks, shared by both passes.
class PlanIndex {
 public:
  explicit PlanIndex(const Plan& plan)
      : head_groups_(static_cast<int32_t>(plan.head_groups)),
        by_q_(plan.blocks.size() * static_cast<size_t>(plan.head_groups)),
        by_kv_(by_q_.size()) {
    for (size_t c = 0; c < plan.compute_blocks.size(); ++c) {
      const PlanComputeBlock& cb = plan.compute_blocks[c];
      by_q_[Index({cb.q_block, cb.head_group})].push_back(static_cast<int32_t>(c));
      by_kv_[Index({cb.kv_block, cb.head_group})].push_back(static_cast<int32_t>(c));
    }
  }

  // The compute blocks an output of `kind` for `piece` must hold, ascending.
  const std::vector<int32_t>& Expected(TensorKind kind, const Piece& piece) const {
    return kind == TensorKind::kDKV ? by_kv_[Index(piece)] : by_q_[Index(piece)];
  }

 private:
  size_t Index(const Piece& p) const {
    return static_cast<size_t>(p.block.value) * static_cast<size_t>(head_groups_) +
           static_cast<size_t>(p.head_group);
  }
  int32_t head_groups_;
  std::vector<std::vector<int32_t>> by_q_, by_kv_;
};

// A whole plan (not one device's part) whose tables obey plan_rules.h, with one program per
// device in each pass.
Status CheckWholePlan(const Plan& plan) {
  if (plan.part_device >= 0) {
    return Status::InvalidArgument(
        fmt::format("validate needs a whole plan, not the part of device {}", plan.part_device));
  }
  DCP_RETURN_IF_ERROR(internal::CheckPlanTables(plan));
  const auto devices = static_cast<size_t>(plan.topology.devices());
  if (plan.forward.size() != devices || plan.backward.size() != devices) {
    return Status::InvalidArgument(
        fmt::format("plan has {} forward and {} backward programs for {} devices",
                    plan.forward.size(), plan.backward.size(), devices));
  }
  return Status::Ok();
}

struct SlotState {
  Content content;
  std::optional<int32_t> receiving;  // the CommLaunch whose data this slot awaits
  std::vector<int32_t> sending;      // CommLaunches in flight that send this slot
};

// One device's program being executed.
struct SymbolicDevice {
  int32_t id = 0;
  const Program* program = nullptr;
  size_t pc = 0;  // next instruction
  bool finished = false;
  std::vector<SlotState> slots;
  std::map<int32_t, size_t> launch_at;  // CommLaunch id -> its instruction, whole program
  std::map<int32_t, bool> launched;     // CommLaunch ids executed so far -> waited

  bool AtEnd() const { return pc == program->instructions.size(); }
  const CommLaunch& Launch(int32_t launch_id) const {
    return std::get<CommLaunch>(program->instructions[launch_at.at(launch_id)]);
  }
};

// Validates one pass of a plan that passed CheckWholePlan.
class PassValidator {
 public:
  PassValidator(const Plan& plan, Pass pass, const PlanIndex& index)
      : plan_(plan),
        pass_(pass),
        index_(index),
        programs_(pass == Pass::kForward ? plan.forward : plan.backward),
        computed_(plan.compute_blocks.size(), false) {}

  Status Run();

 private:
  Status Prepare();
  Status PrepareDevice(SymbolicDevice& dev);
  Status CheckBinding(const SymbolicDevice& dev, const Binding& binding, bool output) const;
  bool Blocked(const SymbolicDevice& dev) const;
  Status Step(SymbolicDevice& dev);
  Status Finish(const SymbolicDevice& dev) const;
  Status Deadlock() const;
  Status CheckOutputs() const;

  Status Execute(SymbolicDevice& dev, const BlockwiseAttention& attention);
  Status CheckRowsAndColumns(const SymbolicDevice& dev, const BlockwiseAttention& attention) const;
  Status ForwardTile(SymbolicDevice& dev, const AttentionTile& tile, const AttentionRow& row,
                     const AttentionColumn& column);
  Status BackwardTile(SymbolicDevice& dev, const AttentionTile& tile, const AttentionRow& row,
                      const AttentionColumn& column);
  Status Execute(SymbolicDevice& dev, const BlockwiseReduction& reduction);
  Status LseMerge(SymbolicDevice& dev, const ReductionOp& op);
  Status Sum(SymbolicDevice& dev, const ReductionOp& op);
  Status Delta(SymbolicDevice& dev, const ReductionOp& op);
  Status Execute(SymbolicDevice& dev, const BlockwiseCopy& copy);
  Status Execute(SymbolicDevice& dev, const CommLaunch& launch);
  // The bytes of a slot of type `info` that hold `c`: its piece's tokens (the whole slot when the
  // content has no piece yet).
  int64_t PieceBytes(const SlotInfo& info, const Content& c) const {
    if (!c.piece) return info.bytes;
    return info.bytes / plan_.block_size * plan_.blocks[c.piece->block.value].tokens;
  }
  Status Execute(SymbolicDevice& dev, const CommWait& wait);
  Status CheckPeerMatches(const SymbolicDevice& dev, const CommLaunch& launch) const;

  // Slot access. Read: the slot exists and is not awaiting data. Modify/Store: moreover no launch
  // in flight is sending it; Store also checks the slot's kind.
  Result<const Content*> Read(const SymbolicDevice& dev, SlotId slot, std::string_view role,
                              int index = -1) const;
  Status CheckWritable(const SymbolicDevice& dev, SlotId slot, std::string_view role,
                       int index = -1) const;
  Result<Content*> Modify(SymbolicDevice& dev, SlotId slot, std::string_view role) const;
  Status Store(SymbolicDevice& dev, SlotId slot, Content content, std::string_view role,
               int index = -1) const;
  Status CheckSlotExists(const SymbolicDevice& dev, SlotId slot, std::string_view role,
                         int index) const;

  // The union of accumulators' block sets; an error names two sources that overlap.
  static Status Union(const std::vector<const Content*>& sources, std::vector<int32_t>* out);

  const Plan& plan_;
  Pass pass_;
  const PlanIndex& index_;
  const std::vector<Program>& programs_;
  std::vector<SymbolicDevice> devices_;
  std::vector<bool> computed_;  // per compute block: a tile of this pass has computed it
  // (launch id, sender, receiver) -> the contents sent, snapshot at the sender's launch.
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::vector<Content>> mailbox_;
};

Status PassValidator::Run() {
  DCP_RETURN_IF_ERROR(Prepare());
  while (true) {
    bool progressed = false, all_finished = true;
    for (SymbolicDevice& dev : devices_) {
      while (!dev.AtEnd() && !Blocked(dev)) {
        DCP_RETURN_IF_ERROR(Step(dev));
        progressed = true;
      }
      if (dev.AtEnd() && !dev.finished) {
        DCP_RETURN_IF_ERROR(Finish(dev));
        dev.finished = true;
      }
      all_finished = all_finished && dev.finished;
    }
    if (all_finished) break;
    if (!progressed) return Deadlock();
  }
  return CheckOutputs();
}

// Static checks per program, the launch index, and the input bindings' initial contents; also
// that every owned piece's outputs are bound exactly once.
Status PassValidator::Prepare() {
  devices_.resize(programs_.size());
  std::map<std::pair<TensorKind, Piece>, int32_t> output_device;
  for (size_t d = 0; d < programs_.size(); ++d) {
    SymbolicDevice& dev = devices_[d];
    dev.id = static_cast<int32_t>(d);
    dev.program = &programs_[d];
    DCP_RETURN_IF_ERROR(
        PrepareDevice(dev).WithContext(fmt::format("{}, device {}", ToString(pass_), dev.id)));
    for (size_t i = 0; i < dev.program->outputs.size(); ++i) {
      const Binding& b = dev.program->outputs[i];
      auto [it, inserted] = output_device.emplace(std::pair(b.kind, b.piece), dev.id);
      if (!inserted) {
        return Status::InvalidArgument(fmt::format(
            "{}, device {}, output {}: {} of {} is already an output of device {}", ToString(pass_),
            dev.id, i, ToString(b.kind), PieceText(b.piece), it->second));
      }
    }
  }
  const std::vector<TensorKind> kinds =
      pass_ == Pass::kForward ? std::vector<TensorKind>{TensorKind::kO, TensorKind::kLse}
                              : std::vector<TensorKind>{TensorKind::kDQ, TensorKind::kDKV};
  for (size_t b = 0; b < plan_.blocks.size(); ++b) {
    for (int32_t g = 0; g < plan_.head_groups; ++g) {
      const Piece piece{DataBlockId{static_cast<int32_t>(b)}, g};
      for (TensorKind kind : kinds) {
        if (!output_device.contains({kind, piece})) {
          return Status::InvalidArgument(fmt::format(
              "{}: no device outputs {} of {} (its owner is device {})", ToString(pass_),
              ToString(kind), PieceText(piece), plan_.block_owner[b].value));
        }
      }
    }
  }
  return Status::Ok();
}

Status PassValidator::PrepareDevice(SymbolicDevice& dev) {
  const Program& program = *dev.program;
  if (program.device.value != dev.id || program.pass != pass_) {
    return Status::InvalidArgument(fmt::format("program {} is the {} program of device {}", dev.id,
                                               ToString(program.pass), program.device.value));
  }
  dev.slots.resize(program.slots.size());
  for (size_t i = 0; i < program.slots.size(); ++i) {
    if (Status s = internal::CheckSlotBytes(program.slots[i].bytes); !s.ok()) {
      return s.WithContext(fmt::format("slot {}", i));
    }
  }
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const Binding& b = program.inputs[i];
    DCP_RETURN_IF_ERROR(
        CheckBinding(dev, b, /*output=*/false).WithContext(fmt::format("input {}", i)));
    if (dev.slots[b.slot].content.type != Content::Type::kEmpty) {
      return Status::InvalidArgument(
          fmt::format("input {}: slot {} is bound to two inputs", i, b.slot));
    }
    dev.slots[b.slot].content = Content::Value(b.kind, b.piece);
  }
  std::vector<bool> output_slot(program.slots.size(), false);
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const Binding& b = program.outputs[i];
    DCP_RETURN_IF_ERROR(
        CheckBinding(dev, b, /*output=*/true).WithContext(fmt::format("output {}", i)));
    if (output_slot[b.slot]) {
      return Status::InvalidArgument(
          fmt::format("output {}: slot {} is bound to two outputs", i, b.slot));
    }
    output_slot[b.slot] = true;
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const auto* launch = std::get_if<CommLaunch>(&program.instructions[i]);
    if (launch == nullptr) continue;
    auto [it, inserted] = dev.launch_at.emplace(launch->id, i);
    if (!inserted) {
      return Status::InvalidArgument(
          fmt::format("instruction {} (CommLaunch {}): duplicate CommLaunch id {} (also "
                      "instruction {})",
                      i, launch->id, launch->id, it->second));
    }
  }
  return Status::Ok();
}

Status PassValidator::CheckBinding(const SymbolicDevice& dev, const Binding& b, bool output) const {
  const std::vector<TensorKind> allowed =
      output
          ? (pass_ == Pass::kForward ? std::vector<TensorKind>{TensorKind::kO, TensorKind::kLse}
                                     : std::vector<TensorKind>{TensorKind::kDQ, TensorKind::kDKV})
          : (pass_ == Pass::kForward
                 ? std::vector<TensorKind>{TensorKind::kQ, TensorKind::kKV}
                 : std::vector<TensorKind>{TensorKind::kQ, TensorKind::kKV, TensorKind::kO,
                                           TensorKind::kLse, TensorKind::kDO});
  if (std::find(allowed.begin(), allowed.end(), b.kind) == allowed.end()) {
    return Status::InvalidArgument(fmt::format("{} cannot be a {} {}", ToString(b.kind),
                                               ToString(pass_), output ? "output" : "input"));
  }
  if (b.piece.block.value < 0 || static_cast<size_t>(b.piece.block.value) >= plan_.blocks.size() ||
      b.piece.head_group < 0 || b.piece.head_group >= plan_.head_groups) {
    return Status::InvalidArgument(
        fmt::format("{} names a piece that does not exist", PieceText(b.piece)));
  }
  const int32_t owner = plan_.block_owner[b.piece.block.value].value;
  if (owner != dev.id) {
    return Status::InvalidArgument(
        fmt::format("{} of {} is owned by device {}", ToString(b.kind), PieceText(b.piece), owner));
  }
  if (b.slot < 0 || static_cast<size_t>(b.slot) >= dev.slots.size()) {
    return Status::InvalidArgument(
        fmt::format("slot {} does not exist (the program has {} slots)", b.slot, dev.slots.size()));
  }
  const TensorKind slot_kind = dev.program->slots[b.slot].kind;
  if (slot_kind != b.kind) {
    return Status::InvalidArgument(fmt::format("{} of {} is bound to slot {} of kind {}",
                                               ToString(b.kind), PieceText(b.piece), b.slot,
                                               ToString(slot_kind)));
  }
  return Status::Ok();
}

// A device is blocked at a CommWait whose launch it has executed while a peer of that launch has
// not executed its own yet. Any other problem with the wait is left for Step to report.
bool PassValidator::Blocked(const SymbolicDevice& dev) const {
  const auto* wait = std::get_if<CommWait>(&dev.program->instructions[dev.pc]);
  if (wait == nullptr) return false;
  auto it = dev.launched.find(wait->id);
  if (it == dev.launched.end() || it->second) return false;
  const CommLaunch& launch = dev.Launch(wait->id);
  for (const auto* list : {&launch.sends, &launch.recvs}) {
    for (const PeerSlots& p : *list) {
      if (!devices_[p.peer.value].launched.contains(wait->id)) return true;
    }
  }
  return false;
}

Status PassValidator::Step(SymbolicDevice& dev) {
  const Instruction& instruction = dev.program->instructions[dev.pc];
  Status status = std::visit([&](const auto& op) { return Execute(dev, op); }, instruction);
  if (!status.ok()) {
    return status.WithContext(fmt::format("{}, device {}, instruction {} ({})", ToString(pass_),
                                          dev.id, dev.pc, InstructionLabel(instruction)));
  }
  ++dev.pc;
  return Status::Ok();
}

Status PassValidator::Finish(const SymbolicDevice& dev) const {
  for (const auto& [id, waited] : dev.launched) {
    if (!waited) {
      return Status::InvalidArgument(
          fmt::format("{}, device {}, end of program: CommLaunch {} (instruction {}) is never "
                      "waited",
                      ToString(pass_), dev.id, id, dev.launch_at.at(id)));
    }
  }
  return Status::Ok();
}

Status PassValidator::Deadlock() const {
  std::vector<std::string> waits;
  for (const SymbolicDevice& dev : devices_) {
    if (dev.AtEnd()) continue;
    const int32_t id = std::get<CommWait>(dev.program->instructions[dev.pc]).id;
    const CommLaunch& launch = dev.Launch(id);
    std::vector<int32_t> peers;
    for (const auto* list : {&launch.sends, &launch.recvs}) {
      for (const PeerSlots& p : *list) {
        if (!devices_[p.peer.value].launched.contains(id)) peers.push_back(p.peer.value);
      }
    }
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    waits.push_back(fmt::format("device {} waits at instruction {} (CommWait {}) for device{} {}",
                                dev.id, dev.pc, id, peers.size() == 1 ? "" : "s",
                                fmt::join(peers, ", ")));
  }
  return Status::InvalidArgument(
      fmt::format("{}: deadlock: {}", ToString(pass_), fmt::join(waits, "; ")));
}

Status PassValidator::CheckOutputs() const {
  for (const SymbolicDevice& dev : devices_) {
    for (size_t i = 0; i < dev.program->outputs.size(); ++i) {
      const Binding& b = dev.program->outputs[i];
      const Content& c = dev.slots[b.slot].content;
      const std::string where =
          fmt::format("{}, device {}, output {} ({} of {}, slot {})", ToString(pass_), dev.id, i,
                      ToString(b.kind), PieceText(b.piece), b.slot);
      if (c.type != Content::Type::kAccumulator || c.kind != b.kind ||
          (c.piece && *c.piece != b.piece)) {
        return Status::InvalidArgument(
            fmt::format("{}: holds {} at the end, expected {} "
                        "accumulator of {}",
                        where, Describe(c), WithArticle(b.kind), PieceText(b.piece)));
      }
      const std::vector<int32_t>& expected = index_.Expected(b.kind, b.piece);
      if (c.blocks != expected) {
        // Tiles always match the accumulator's piece, so the output can only lack blocks.
        std::vector<int32_t> missing;
        std::set_difference(expected.begin(), expected.end(), c.blocks.begin(), c.blocks.end(),
                            std::back_inserter(missing));
        return Status::InvalidArgument(
            fmt::format("{}: holds {} of its {} compute blocks, missing compute block{} {}", where,
                        c.blocks.size(), expected.size(), missing.size() == 1 ? "" : "s",
                        fmt::join(missing, ", ")));
      }
    }
  }
  return Status::Ok();
}

// ---- Slot access ------------------------------------------------------------------------------

Status PassValidator::CheckSlotExists(const SymbolicDevice& dev, SlotId slot, std::string_view role,
                                      int index) const {
  if (slot < 0 || static_cast<size_t>(slot) >= dev.slots.size()) {
    return Status::InvalidArgument(fmt::format("{} does not exist (the program has {} slots)",
                                               SlotRef(role, index, slot), dev.slots.size()));
  }
  return Status::Ok();
}

Result<const Content*> PassValidator::Read(const SymbolicDevice& dev, SlotId slot,
                                           std::string_view role, int index) const {
  DCP_RETURN_IF_ERROR(CheckSlotExists(dev, slot, role, index));
  const SlotState& s = dev.slots[slot];
  if (s.receiving) {
    return Status::InvalidArgument(fmt::format("reads {} before CommWait {} that receives it",
                                               SlotRef(role, index, slot), *s.receiving));
  }
  return &s.content;
}

Status PassValidator::CheckWritable(const SymbolicDevice& dev, SlotId slot, std::string_view role,
                                    int index) const {
  DCP_RETURN_IF_ERROR(CheckSlotExists(dev, slot, role, index));
  const SlotState& s = dev.slots[slot];
  if (s.receiving) {
    return Status::InvalidArgument(
        fmt::format("overwrites {} still being received by CommLaunch {}",
                    SlotRef(role, index, slot), *s.receiving));
  }
  if (!s.sending.empty()) {
    return Status::InvalidArgument(fmt::format("overwrites {} still being sent by CommLaunch {}",
                                               SlotRef(role, index, slot), s.sending.front()));
  }
  return Status::Ok();
}

Result<Content*> PassValidator::Modify(SymbolicDevice& dev, SlotId slot,
                                       std::string_view role) const {
  DCP_RETURN_IF_ERROR(CheckWritable(dev, slot, role, -1));
  return &dev.slots[slot].content;
}

Status PassValidator::Store(SymbolicDevice& dev, SlotId slot, Content content,
                            std::string_view role, int index) const {
  DCP_RETURN_IF_ERROR(CheckWritable(dev, slot, role, index));
  const TensorKind slot_kind = dev.program->slots[slot].kind;
  if (slot_kind != content.kind) {
    return Status::InvalidArgument(fmt::format("{} is of kind {}, cannot hold {}",
                                               SlotRef(role, index, slot), ToString(slot_kind),
                                               Describe(content)));
  }
  dev.slots[slot].content = std::move(content);
  return Status::Ok();
}

Status PassValidator::Union(const std::vector<const Content*>& sources, std::vector<int32_t>* out) {
  out->clear();
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::vector<int32_t>& add = sources[i]->blocks;
    for (int32_t c : add) {
      if (!std::binary_search(out->begin(), out->end(), c)) continue;
      for (size_t j = 0; j < i; ++j) {
        if (std::binary_search(sources[j]->blocks.begin(), sources[j]->blocks.end(), c)) {
          return Status::InvalidArgument(
              fmt::format("sources {} and {} overlap: both contain compute block {}", j, i, c));
        }
      }
    }
    std::vector<int32_t> merged;
    merged.reserve(out->size() + add.size());
    std::merge(out->begin(), out->end(), add.begin(), add.end(), std::back_inserter(merged));
    *out = std::move(merged);
  }
  return Status::Ok();
}

// ---- BlockwiseAttention -----------------------------------------------------------------------

// Checks that every row and column names a slot for each field its pass uses, and -1 for the
// others (a row or column no tile uses too: the decoder checks them all).
Status PassValidator::CheckRowsAndColumns(const SymbolicDevice& dev,
                                          const BlockwiseAttention& attention) const {
  const auto check = [&](std::string_view what, size_t index, const auto& fields) {
    for (const internal::SlotField& f : fields) {
      Status status = f.used         ? CheckSlotExists(dev, f.slot, f.name, -1)
                      : f.slot == -1 ? Status::Ok()
                                     : Status::InvalidArgument(fmt::format(
                                           "sets {} slot {} (unused: must be -1)", f.name, f.slot));
      if (!status.ok()) return status.WithContext(fmt::format("{} {}", what, index));
    }
    return Status::Ok();
  };
  for (size_t i = 0; i < attention.rows.size(); ++i) {
    DCP_RETURN_IF_ERROR(check("row", i, internal::RowSlots(attention.rows[i], attention.pass)));
  }
  for (size_t i = 0; i < attention.columns.size(); ++i) {
    DCP_RETURN_IF_ERROR(
        check("column", i, internal::ColumnSlots(attention.columns[i], attention.pass)));
  }
  return Status::Ok();
}

Status PassValidator::Execute(SymbolicDevice& dev, const BlockwiseAttention& attention) {
  if (attention.pass != pass_) {
    return Status::InvalidArgument(
        fmt::format("a {} attention in the {} pass", ToString(attention.pass), ToString(pass_)));
  }
  DCP_RETURN_IF_ERROR(internal::CheckDivision(attention.division, plan_.n_divisions));
  DCP_RETURN_IF_ERROR(CheckRowsAndColumns(dev, attention));
  for (size_t t = 0; t < attention.tiles.size(); ++t) {
    const AttentionTile& tile = attention.tiles[t];
    const int32_t c = tile.block.value;
    if (c < 0 || static_cast<size_t>(c) >= plan_.compute_blocks.size()) {
      return Status::InvalidArgument(fmt::format("tile {}: compute block {} does not exist", t, c));
    }
    Status status =
        attention.Holds(tile)
            ? CheckTileSlices(plan_, attention, tile)
            : Status::InvalidArgument(fmt::format(
                  "row {}, column {} or slices [{}, {} + {}) are not in the call ({} rows, {} "
                  "columns, {} slices)",
                  tile.row, tile.column, tile.first_slice, tile.first_slice, tile.n_slices,
                  attention.rows.size(), attention.columns.size(), attention.slices.size()));
    if (status.ok()) {
      status = pass_ == Pass::kForward
                   ? ForwardTile(dev, tile, attention.RowOf(tile), attention.ColumnOf(tile))
                   : BackwardTile(dev, tile, attention.RowOf(tile), attention.ColumnOf(tile));
    }
    if (!status.ok()) return status.WithContext(fmt::format("tile {} (compute block {})", t, c));
  }
  return Status::Ok();
}

// Counts the tile's compute block as computed, once.
Status CheckComputedOnce(const AttentionTile& tile, std::vector<bool>& computed) {
  if (computed[tile.block.value]) {
    return Status::InvalidArgument(
        fmt::format("compute block {} is computed a second time", tile.block.value));
  }
  computed[tile.block.value] = true;
  return Status::Ok();
}

// Adds compute block c to an accumulator of `piece`.
void AddBlock(Content& acc, const Piece& piece, int32_t c) {
  acc.piece = piece;
  acc.blocks.insert(std::lower_bound(acc.blocks.begin(), acc.blocks.end(), c), c);
}

Status PassValidator::ForwardTile(SymbolicDevice& dev, const AttentionTile& tile,
                                  const AttentionRow& row, const AttentionColumn& column) {
  const PlanComputeBlock& cb = plan_.compute_blocks[tile.block.value];
  const Piece qp{cb.q_block, cb.head_group}, kvp{cb.kv_block, cb.head_group};
  DCP_ASSIGN_OR_RETURN(const Content* q, Read(dev, row.q, "q"));
  DCP_RETURN_IF_ERROR(ExpectValue(*q, TensorKind::kQ, qp, "q", -1, row.q));
  DCP_ASSIGN_OR_RETURN(const Content* kv, Read(dev, column.kv, "kv"));
  DCP_RETURN_IF_ERROR(ExpectValue(*kv, TensorKind::kKV, kvp, "kv", -1, column.kv));
  DCP_ASSIGN_OR_RETURN(Content * out, Modify(dev, row.out, "out"));
  DCP_RETURN_IF_ERROR(ExpectAccumulator(*out, TensorKind::kO, qp, "out", -1, row.out));
  DCP_ASSIGN_OR_RETURN(Content * lse, Modify(dev, row.lse, "lse"));
  DCP_RETURN_IF_ERROR(ExpectAccumulator(*lse, TensorKind::kLse, qp, "lse", -1, row.lse));
  if (out->blocks != lse->blocks) {
    return Status::InvalidArgument(
        fmt::format("out slot {} and lse slot {} hold different compute blocks ({} and {})",
                    row.out, row.lse, Describe(*out), Describe(*lse)));
  }
  DCP_RETURN_IF_ERROR(CheckComputedOnce(tile, computed_));
  AddBlock(*out, qp, tile.block.value);
  AddBlock(*lse, qp, tile.block.value);
  return Status::Ok();
}

Status PassValidator::BackwardTile(SymbolicDevice& dev, const AttentionTile& tile,
                                   const AttentionRow& row, const AttentionColumn& column) {
  const PlanComputeBlock& cb = plan_.compute_blocks[tile.block.value];
  const Piece qp{cb.q_block, cb.head_group}, kvp{cb.kv_block, cb.head_group};
  const struct {
    std::string_view role;
    SlotId slot;
    TensorKind kind;
    Piece piece;
  } inputs[] = {{"q", row.q, TensorKind::kQ, qp},
                {"kv", column.kv, TensorKind::kKV, kvp},
                {"d_o", row.d_o, TensorKind::kDO, qp},
                {"lse", row.lse, TensorKind::kLse, qp},
                {"delta", row.delta, TensorKind::kDelta, qp}};
  for (const auto& in : inputs) {
    DCP_ASSIGN_OR_RETURN(const Content* c, Read(dev, in.slot, in.role));
    DCP_RETURN_IF_ERROR(ExpectValue(*c, in.kind, in.piece, in.role, -1, in.slot));
  }
  DCP_ASSIGN_OR_RETURN(Content * dq, Modify(dev, row.dq, "dq"));
  DCP_RETURN_IF_ERROR(ExpectAccumulator(*dq, TensorKind::kDQ, qp, "dq", -1, row.dq));
  DCP_ASSIGN_OR_RETURN(Content * dkv, Modify(dev, column.dkv, "dkv"));
  DCP_RETURN_IF_ERROR(ExpectAccumulator(*dkv, TensorKind::kDKV, kvp, "dkv", -1, column.dkv));
  DCP_RETURN_IF_ERROR(CheckComputedOnce(tile, computed_));
  AddBlock(*dq, qp, tile.block.value);
  AddBlock(*dkv, kvp, tile.block.value);
  return Status::Ok();
}

// ---- BlockwiseReduction and BlockwiseCopy -----------------------------------------------------

// The ops of one reduction or copy run as one call, so no op may write a slot another op reads or
// writes (an op may read its own destination: accumulation in place).
struct OpSlots {
  std::vector<SlotId> reads, writes;
};
Status CheckNoHazards(const std::vector<OpSlots>& ops) {
  std::map<SlotId, size_t> writer;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (SlotId s : ops[i].writes) {
      auto [it, inserted] = writer.emplace(s, i);
      if (!inserted && it->second != i) {
        return Status::InvalidArgument(
            fmt::format("ops {} and {} both write slot {}", it->second, i, s));
      }
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    for (SlotId s : ops[i].reads) {
      auto it = writer.find(s);
      if (it != writer.end() && it->second != i) {
        return Status::InvalidArgument(fmt::format(
            "op {} reads slot {}, which op {} writes in the same instruction", i, s, it->second));
      }
    }
  }
  return Status::Ok();
}

Status PassValidator::Execute(SymbolicDevice& dev, const BlockwiseReduction& reduction) {
  const Pass expected_pass =
      reduction.kind == ReductionKind::kLseMerge ? Pass::kForward : Pass::kBackward;
  if (expected_pass != pass_) {
    return Status::InvalidArgument(fmt::format("a {} reduction in the {} pass",
                                               ToString(reduction.kind), ToString(pass_)));
  }
  std::vector<OpSlots> slots(reduction.ops.size());
  for (size_t i = 0; i < reduction.ops.size(); ++i) {
    const ReductionOp& op = reduction.ops[i];
    slots[i].writes = {op.destination};
    if (op.lse_destination != -1) slots[i].writes.push_back(op.lse_destination);
    slots[i].reads = op.sources;
    slots[i].reads.insert(slots[i].reads.end(), op.lse_sources.begin(), op.lse_sources.end());
  }
  DCP_RETURN_IF_ERROR(CheckNoHazards(slots));
  for (size_t i = 0; i < reduction.ops.size(); ++i) {
    const ReductionOp& op = reduction.ops[i];
    if (reduction.kind != ReductionKind::kLseMerge &&
        (op.lse_destination != -1 || !op.lse_sources.empty())) {
      return Status::InvalidArgument(
          fmt::format("op {}: a {} op sets LSE slots", i, ToString(reduction.kind)));
    }
    Status status;
    switch (reduction.kind) {
      case ReductionKind::kLseMerge:
        status = LseMerge(dev, op);
        break;
      case ReductionKind::kSum:
        status = Sum(dev, op);
        break;
      case ReductionKind::kDelta:
        status = Delta(dev, op);
        break;
    }
    if (!status.ok()) return status.WithContext(fmt::format("op {}", i));
  }
  return Status::Ok();
}

Status PassValidator::LseMerge(SymbolicDevice& dev, const ReductionOp& op) {
  if (op.sources.size() != op.lse_sources.size()) {
    return Status::InvalidArgument(
        fmt::format("{} O sources but {} LSE sources", op.sources.size(), op.lse_sources.size()));
  }
  std::optional<Piece> piece;
  std::vector<const Content*> outs;
  for (size_t i = 0; i < op.sources.size(); ++i) {
    const int index = static_cast<int>(i);
    DCP_ASSIGN_OR_RETURN(const Content* o, Read(dev, op.sources[i], "source", index));
    DCP_RETURN_IF_ERROR(
        ExpectAccumulator(*o, TensorKind::kO, piece, "source", index, op.sources[i]));
    DCP_ASSIGN_OR_RETURN(const Content* l, Read(dev, op.lse_sources[i], "lse source", index));
    DCP_RETURN_IF_ERROR(
        ExpectAccumulator(*l, TensorKind::kLse, piece, "lse source", index, op.lse_sources[i]));
    if (o->piece != l->piece || o->blocks != l->blocks) {
      return Status::InvalidArgument(
          fmt::format("source {} slot {} and lse source {} slot {} are not one pair: {} and {}", i,
                      op.sources[i], i, op.lse_sources[i], Describe(*o), Describe(*l)));
    }
    if (!piece) piece = o->piece;
    outs.push_back(o);
  }
  std::vector<int32_t> blocks;
  DCP_RETURN_IF_ERROR(Union(outs, &blocks));
  DCP_RETURN_IF_ERROR(Store(dev, op.destination,
                            Content::Accumulator(TensorKind::kO, piece, blocks), "destination"));
  return Store(dev, op.lse_destination,
               Content::Accumulator(TensorKind::kLse, piece, std::move(blocks)), "lse destination");
}

Status PassValidator::Sum(SymbolicDevice& dev, const ReductionOp& op) {
  if (op.sources.empty()) {
    DCP_RETURN_IF_ERROR(CheckSlotExists(dev, op.destination, "destination", -1));
    const TensorKind kind = dev.program->slots[op.destination].kind;
    if (kind != TensorKind::kDQ && kind != TensorKind::kDKV) {
      return Status::InvalidArgument(
          fmt::format("initialises destination slot {} of kind {}, expected a dQ or dKV slot",
                      op.destination, ToString(kind)));
    }
    return Store(dev, op.destination, Content::Accumulator(kind), "destination");
  }
  std::optional<Piece> piece;
  std::optional<TensorKind> kind;
  std::vector<const Content*> sources;
  for (size_t i = 0; i < op.sources.size(); ++i) {
    const int index = static_cast<int>(i);
    DCP_ASSIGN_OR_RETURN(const Content* c, Read(dev, op.sources[i], "source", index));
    if (!kind) {
      if (c->type != Content::Type::kAccumulator ||
          (c->kind != TensorKind::kDQ && c->kind != TensorKind::kDKV)) {
        return Status::InvalidArgument(fmt::format("{} holds {}, expected a dQ or dKV accumulator",
                                                   SlotRef("source", index, op.sources[i]),
                                                   Describe(*c)));
      }
      kind = c->kind;
    }
    DCP_RETURN_IF_ERROR(ExpectAccumulator(*c, *kind, piece, "source", index, op.sources[i]));
    if (!piece) piece = c->piece;
    sources.push_back(c);
  }
  std::vector<int32_t> blocks;
  DCP_RETURN_IF_ERROR(Union(sources, &blocks));
  return Store(dev, op.destination, Content::Accumulator(*kind, piece, std::move(blocks)),
               "destination");
}

Status PassValidator::Delta(SymbolicDevice& dev, const ReductionOp& op) {
  if (op.sources.size() != 2) {
    return Status::InvalidArgument(
        fmt::format("a Delta op needs sources [O, dO], has {} sources", op.sources.size()));
  }
  DCP_ASSIGN_OR_RETURN(const Content* o, Read(dev, op.sources[0], "source", 0));
  DCP_RETURN_IF_ERROR(ExpectValue(*o, TensorKind::kO, std::nullopt, "source", 0, op.sources[0]));
  const Piece piece = *o->piece;
  DCP_ASSIGN_OR_RETURN(const Content* d_o, Read(dev, op.sources[1], "source", 1));
  DCP_RETURN_IF_ERROR(ExpectValue(*d_o, TensorKind::kDO, piece, "source", 1, op.sources[1]));
  return Store(dev, op.destination, Content::Value(TensorKind::kDelta, piece), "destination");
}

Status PassValidator::Execute(SymbolicDevice& dev, const BlockwiseCopy& copy) {
  std::vector<OpSlots> slots(copy.ops.size());
  for (size_t i = 0; i < copy.ops.size(); ++i) {
    slots[i] = {{copy.ops[i].first}, {copy.ops[i].second}};
  }
  DCP_RETURN_IF_ERROR(CheckNoHazards(slots));
  for (size_t i = 0; i < copy.ops.size(); ++i) {
    const auto [from, to] = copy.ops[i];
    Result<const Content*> source = Read(dev, from, "source");
    if (!source.ok()) return source.status().WithContext(fmt::format("op {}", i));
    if ((*source)->type == Content::Type::kEmpty) {
      return Status::InvalidArgument(fmt::format("op {}: source slot {} holds nothing", i, from));
    }
    Content content = **source;  // a copy: `to` may be `from`
    DCP_RETURN_IF_ERROR(
        Store(dev, to, std::move(content), "destination").WithContext(fmt::format("op {}", i)));
  }
  return Status::Ok();
}

// ---- CommLaunch and CommWait ------------------------------------------------------------------

// Checks the peer lists: ascending peers that exist, each matched by the peer's own launch with
// the same id listing this device on the other side, with the same number of slots and equal
// slot sizes in order.
Status PassValidator::CheckPeerMatches(const SymbolicDevice& dev, const CommLaunch& launch) const {
  for (const bool send : {true, false}) {
    const std::vector<PeerSlots>& list = send ? launch.sends : launch.recvs;
    const std::string_view verb = send ? "sends" : "receives";
    const std::string_view other_verb = send ? "receives" : "sends";
    const std::string_view to = send ? "to" : "from";
    for (size_t i = 0; i < list.size(); ++i) {
      const int32_t peer = list[i].peer.value;
      if (peer < 0 || peer >= static_cast<int32_t>(devices_.size())) {
        return Status::InvalidArgument(
            fmt::format("{} {} device {}, which does not exist", verb, to, peer));
      }
      if (list[i].slots.empty()) {
        return Status::InvalidArgument(fmt::format(
            "lists device {} with no slots (peers with nothing to exchange are absent)", peer));
      }
      if (list[i].bytes.size() != list[i].slots.size()) {
        return Status::InvalidArgument(
            fmt::format("{} {} {} device {} with {} byte counts", verb,
                        SlotCount(list[i].slots.size()), to, peer, list[i].bytes.size()));
      }
      if (i > 0 && list[i - 1].peer.value >= peer) {
        return Status::InvalidArgument(
            fmt::format("{} lists peers out of order: device {} after device {}", verb, peer,
                        list[i - 1].peer.value));
      }
      const SymbolicDevice& other = devices_[peer];
      if (!other.launch_at.contains(launch.id)) {
        return Status::InvalidArgument(
            fmt::format("{} {} device {}, which has no CommLaunch {}", verb, to, peer, launch.id));
      }
      const CommLaunch& theirs = other.Launch(launch.id);
      const std::vector<PeerSlots>& their_list = send ? theirs.recvs : theirs.sends;
      auto match = std::find_if(their_list.begin(), their_list.end(),
                                [&](const PeerSlots& p) { return p.peer.value == dev.id; });
      const size_t mine = list[i].slots.size();
      const size_t their_count = match == their_list.end() ? 0 : match->slots.size();
      if (mine != their_count) {
        return Status::InvalidArgument(
            fmt::format("{} {} {} device {}, but device {}'s CommLaunch {} {} {} {} device {}",
                        verb, SlotCount(mine), to, peer, peer, launch.id, other_verb,
                        SlotCount(their_count), send ? "from" : "to", dev.id));
      }
      for (size_t k = 0; k < mine; ++k) {
        const SlotId s = list[i].slots[k], t = match->slots[k];
        if (s < 0 || static_cast<size_t>(s) >= dev.slots.size()) {
          return Status::InvalidArgument(
              fmt::format("{} slot {} does not exist (the program has {} slots)",
                          send ? "send" : "recv", s, dev.slots.size()));
        }
        const int64_t my_bytes = list[i].bytes[k];
        if (Status bytes = internal::CheckEntryBytes(my_bytes, s, dev.program->slots[s].bytes);
            !bytes.ok()) {
          return bytes.WithContext(fmt::format("{} entry {}", send ? "send" : "recv", k));
        }
        if (t < 0 || static_cast<size_t>(t) >= other.slots.size() ||
            k >= match->bytes.size()) {
          continue;  // the peer reports its own defect
        }
        const int64_t their_bytes = match->bytes[k];
        if (my_bytes != their_bytes) {
          return Status::InvalidArgument(fmt::format(
              "{} slot {} moves {} bytes as position {} of the exchange with device {}, whose "
              "slot {} there moves {} bytes",
              send ? "send" : "recv", s, my_bytes, k, peer, t, their_bytes));
        }
      }
    }
  }
  return Status::Ok();
}

Status PassValidator::Execute(SymbolicDevice& dev, const CommLaunch& launch) {
  DCP_RETURN_IF_ERROR(CheckPeerMatches(dev, launch));
  // Snapshot what is sent, then mark the send slots in flight.
  for (const PeerSlots& p : launch.sends) {
    std::vector<Content>& box = mailbox_[{launch.id, dev.id, p.peer.value}];
    for (size_t k = 0; k < p.slots.size(); ++k) {
      DCP_ASSIGN_OR_RETURN(const Content* c, Read(dev, p.slots[k], "send"));
      if (c->type == Content::Type::kEmpty) {
        return Status::InvalidArgument(
            fmt::format("sends slot {}, which holds nothing", p.slots[k]));
      }
      const int64_t expected = PieceBytes(dev.program->slots[p.slots[k]], *c);
      if (p.bytes[k] != expected) {
        return Status::InvalidArgument(
            fmt::format("sends {} bytes of slot {}, which holds {} ({} bytes)", p.bytes[k],
                        p.slots[k], Describe(*c), expected));
      }
      box.push_back(*c);
    }
  }
  for (const PeerSlots& p : launch.sends) {
    for (SlotId s : p.slots) dev.slots[s].sending.push_back(launch.id);
  }
  for (const PeerSlots& p : launch.recvs) {
    for (SlotId s : p.slots) {
      if (dev.slots[s].receiving == launch.id) {
        return Status::InvalidArgument(fmt::format("receives into slot {} twice", s));
      }
      DCP_RETURN_IF_ERROR(CheckWritable(dev, s, "recv"));
      dev.slots[s].receiving = launch.id;
    }
  }
  dev.launched.emplace(launch.id, false);
  return Status::Ok();
}

Status PassValidator::Execute(SymbolicDevice& dev, const CommWait& wait) {
  auto it = dev.launched.find(wait.id);
  if (it == dev.launched.end()) {
    auto later = dev.launch_at.find(wait.id);
    if (later != dev.launch_at.end()) {
      return Status::InvalidArgument(
          fmt::format("CommWait {} comes before its CommLaunch {} "
                      "(instruction {})",
                      wait.id, wait.id, later->second));
    }
    return Status::InvalidArgument(fmt::format("no CommLaunch {} to wait for", wait.id));
  }
  if (it->second) {
    return Status::InvalidArgument(fmt::format("CommLaunch {} is already waited", wait.id));
  }
  it->second = true;
  const CommLaunch& launch = dev.Launch(wait.id);
  for (const PeerSlots& p : launch.sends) {
    for (SlotId s : p.slots) std::erase(dev.slots[s].sending, wait.id);
  }
  for (const PeerSlots& p : launch.recvs) {
    // Blocked() held this device until the sender launched, so its contents are in the mailbox.
    auto box = mailbox_.find({wait.id, p.peer.value, dev.id});
    DCP_CHECK(box != mailbox_.end(), "launch {} from device {} to {} left no contents", wait.id,
              p.peer.value, dev.id);
    for (size_t k = 0; k < p.slots.size(); ++k) {
      dev.slots[p.slots[k]].receiving.reset();
      Status status = Store(dev, p.slots[k], std::move(box->second[k]), "recv");
      if (!status.ok()) return status.WithContext(fmt::format("from device {}", p.peer.value));
    }
    mailbox_.erase(box);
  }
  return Status::Ok();
}

}  // namespace

Status ValidatePlan(const Plan& plan) {
  DCP_RETURN_IF_ERROR(CheckWholePlan(plan));
  const PlanIndex index(plan);
  DCP_RETURN_IF_ERROR(PassValidator(plan, Pass::kForward, index).Run());
  return PassValidator(plan, Pass::kBackward, index).Run();
}

}  // namespace dcp
