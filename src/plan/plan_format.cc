// SPDX-License-Identifier: Apache-2.0
// The binary plan format, byte for byte as docs/plan_format.md specifies it: a 28-byte header
// (magic, version, payload length, XXH64 of the payload) and a payload that lists the plan's
// tables, then its programs, field by field in little-endian order.
//
// The decoder trusts nothing in the file. Every count is checked against the bytes left before
// anything is allocated, every enum code against its known values, and every id against the
// table it indexes, so a decoded Plan is safe to index everywhere (its semantics are
// ValidatePlan's business). Errors name the offending value and where it sits, built up on the
// way out: "plan: forward program 3: instruction 17: attention: tile 2: q slot 99 out of range
// (12 slots)".
#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "dcp/plan.h"
#include "plan/plan_format_internal.h"
#include "plan/plan_rules.h"

#define XXH_INLINE_ALL  // header-only: nothing to link
#include <xxhash.h>

namespace dcp {
namespace internal {

uint64_t PlanChecksum(std::string_view payload) { return XXH64(payload.data(), payload.size(), 0); }

namespace {

// Little-endian load of `bytes` bytes, whatever the host's byte order.
uint64_t LoadLittleEndian(const unsigned char* p, size_t bytes) {
  uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, bytes);
  } else {
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  }
  return v;
}

}  // namespace

}  // namespace internal

namespace {

using internal::kPlanHeaderBytes;

constexpr uint32_t kMaxCount = std::numeric_limits<uint32_t>::max();  // counts are uint32

// Fewest bytes one element of each list takes, to bound a count by the bytes left.
constexpr size_t kMinSeqlenBytes = 8;
constexpr size_t kMinBlockBytes = 20;
constexpr size_t kMinOwnerBytes = 4;
constexpr size_t kMinComputeBlockBytes = 20;
constexpr size_t kMinProgramBytes = 21;
constexpr size_t kMinSlotInfoBytes = 10;
constexpr size_t kMinBindingBytes = 13;
constexpr size_t kMinInstructionBytes = 5;
constexpr size_t kMinRowBytes = 24;
constexpr size_t kMinColumnBytes = 8;
constexpr size_t kMinTileBytes = 20;
constexpr size_t kMinSliceBytes = 34;
constexpr size_t kMinReductionOpBytes = 16;
constexpr size_t kMinCopyOpBytes = 8;
constexpr size_t kMinPeerSlotsBytes = 12;
constexpr size_t kMinI64Bytes = 8;
constexpr size_t kMinSlotIdBytes = 4;

// Instruction tags are the variant's alternative indices; a new alternative is a new version.
static_assert(std::variant_size_v<Instruction> == 5, "update docs/plan_format.md and the codec");
constexpr uint8_t kInstructionTags = 5;

// Codes of DType, which has no fixed underlying values of its own.
uint8_t DTypeCode(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0;
    case DType::kBFloat16:
      return 1;
  }
  DCP_CHECK(false, "unknown DType {}", static_cast<int>(dtype));
  return 0;
}


// Returns `status` with "<context>: " in front; the context is formatted only on error.
template <typename... Args>
Status Within(Status status, fmt::format_string<Args...> context, Args&&... args) {
  if (status.ok()) return status;
  return status.WithContext(fmt::format(context, std::forward<Args>(args)...));
}

// A check that fails with Corrupt; the message is formatted only on failure.
template <typename... Args>
Status Require(bool condition, fmt::format_string<Args...> message, Args&&... args) {
  if (condition) return Status::Ok();
  return Status::Corrupt(fmt::format(message, std::forward<Args>(args)...));
}

// A broken rule of plan_rules.h (or a Validate() failure) in a decoded plan is damage to the
// file, not a caller's mistake.
Status AsCorrupt(const Status& status) {
  return status.ok() ? status : Status::Corrupt(status.message());
}

Status CheckIndex(int64_t value, size_t size, std::string_view noun) {
  return Require(value >= 0 && static_cast<uint64_t>(value) < size, "{} {} out of range ({} {}s)",
                 noun, value, size, noun);
}

// ---------------------------------------------------------------------------------------------
// Writer and Reader

// Encodes values little-endian and hands the bytes to `sink` in order, in pieces of about
// kPieceBytes: a plan of millions of tiles encodes to gigabytes, which a file or a checksum never
// needs to hold at once.
class Writer {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit Writer(Sink sink) : sink_(std::move(sink)) { buffer_.reserve(kPieceBytes); }

  template <typename... T>
  void Write(T... values) {
    char bytes[(sizeof(T) + ...)];
    char* at = bytes;
    ((at = Put(values, at)), ...);
    buffer_.append(bytes, sizeof(bytes));
    if (buffer_.size() >= kPieceBytes) Flush();
  }
  void Count(size_t n) {
    DCP_CHECK(n <= kMaxCount, "a list of {} elements does not fit the format's uint32 count", n);
    Write(static_cast<uint32_t>(n));
  }
  template <typename Range, typename F>
  void List(const Range& list, F&& encode_one) {
    Count(list.size());
    for (const auto& element : list) encode_one(element);
  }
  void Text(std::string_view text) {
    Count(text.size());
    for (char c : text) Write(static_cast<uint8_t>(c));
  }
  // Hands over what is buffered; call it once the last value is written.
  void Flush() {
    if (!buffer_.empty()) sink_(buffer_);
    buffer_.clear();
  }

 private:
  static constexpr size_t kPieceBytes = size_t{1} << 20;

  // Stores `value` little-endian at `at`; returns the byte after it.
  template <typename T>
  static char* Put(T value, char* at) {
    static_assert(std::is_integral_v<T>);
    const uint64_t v = static_cast<std::make_unsigned_t<T>>(value);
    for (size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return at + sizeof(T);
  }

  Sink sink_;
  std::string buffer_;
};

class Reader {
 public:
  // `data` starts at byte `base_offset` of the file; offsets in errors are file offsets.
  Reader(std::string_view data, size_t base_offset) : data_(data), base_offset_(base_offset) {}

  size_t remaining() const { return data_.size() - pos_; }
  size_t offset() const { return base_offset_ + pos_; }

  // Reads the integers in order, or fails if the bytes left do not hold all of them.
  template <typename... T>
  Status Read(T*... values) {
    constexpr size_t bytes = (sizeof(T) + ...);
    DCP_RETURN_IF_ERROR(Require(bytes <= remaining(),
                                "truncated at byte {}: {} bytes needed, {} left", offset(), bytes,
                                remaining()));
    ((*values = Take<T>()), ...);
    return Status::Ok();
  }

  // Reads a list's count and checks that the bytes left can hold that many elements.
  Status Count(size_t min_element_bytes, std::string_view noun, uint32_t* n) {
    const size_t at = offset();
    DCP_RETURN_IF_ERROR(Read(n));
    return Require(*n <= remaining() / min_element_bytes,
                   "{} count {} at byte {} exceeds what the {} bytes left can hold", noun, *n, at,
                   remaining());
  }

  // Reads a count and that many elements through decode_one(T*); errors get "<noun> <i>: ".
  template <typename T, typename F>
  Status List(size_t min_element_bytes, std::string_view noun, std::vector<T>* list,
              F&& decode_one) {
    uint32_t n = 0;
    DCP_RETURN_IF_ERROR(Count(min_element_bytes, noun, &n));
    list->resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      DCP_RETURN_IF_ERROR(Within(decode_one(&(*list)[i]), "{} {}", noun, i));
    }
    return Status::Ok();
  }

  // Reads a count and that many bytes of text, at most `max_bytes`.
  Status Text(size_t max_bytes, std::string_view noun, std::string* text) {
    uint32_t n = 0;
    DCP_RETURN_IF_ERROR(Count(1, noun, &n));
    DCP_RETURN_IF_ERROR(Require(n <= max_bytes, "{} of {} bytes is longer than {}", noun, n,
                                max_bytes));
    text->assign(data_.substr(pos_, n));
    pos_ += n;
    return Status::Ok();
  }

  // Reads an enum stored as one byte whose codes are 0 .. last.
  template <typename E>
  Status Enum(E last, std::string_view noun, E* value) {
    uint8_t code = 0;
    DCP_RETURN_IF_ERROR(Read(&code));
    const auto max_code = static_cast<uint8_t>(last);
    DCP_RETURN_IF_ERROR(
        Require(code <= max_code, "{} code {} is not in [0, {}]", noun, code, max_code));
    *value = static_cast<E>(code);
    return Status::Ok();
  }

 private:
  template <typename T>
  T Take() {
    static_assert(std::is_integral_v<T>);
    const uint64_t v = internal::LoadLittleEndian(
        reinterpret_cast<const unsigned char*>(data_.data() + pos_), sizeof(T));
    pos_ += sizeof(T);
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
  }

  std::string_view data_;
  size_t base_offset_ = 0;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Encoding: one function per struct, in the order of docs/plan_format.md.

void Encode(Writer& w, const Slice& s) {
  DCP_CHECK((s.lo.slope == 0 || s.lo.slope == 1) && (s.hi.slope == 0 || s.hi.slope == 1),
            "slice slopes {} and {} must be 0 or 1", s.lo.slope, s.hi.slope);
  w.Write(s.row_begin, s.row_end, s.lo.base, static_cast<uint8_t>(s.lo.slope), s.hi.base,
          static_cast<uint8_t>(s.hi.slope));
}

// A tile's indices are written as they are: the decoder checks that they are in the call.
void Encode(Writer& w, const AttentionTile& t) {
  w.Write(t.block.value, t.row, t.column, t.first_slice, t.n_slices);
}

void EncodeSlots(Writer& w, const std::vector<SlotId>& slots) {
  w.List(slots, [&](SlotId s) { w.Write(s); });
}

void Encode(Writer& w, const BlockwiseAttention& a) {
  w.Write(static_cast<uint8_t>(a.pass), a.division);
  w.List(a.rows, [&](const AttentionRow& r) { w.Write(r.q, r.out, r.lse, r.d_o, r.delta, r.dq); });
  w.List(a.columns, [&](const AttentionColumn& c) { w.Write(c.kv, c.dkv); });
  w.List(a.slices, [&](const Slice& s) { Encode(w, s); });
  w.List(a.tiles, [&](const AttentionTile& t) { Encode(w, t); });
}

void Encode(Writer& w, const ReductionOp& op) {
  w.Write(op.destination);
  EncodeSlots(w, op.sources);
  w.Write(op.lse_destination);
  EncodeSlots(w, op.lse_sources);
}

void Encode(Writer& w, const BlockwiseReduction& r) {
  w.Write(static_cast<uint8_t>(r.kind));
  w.List(r.ops, [&](const ReductionOp& op) { Encode(w, op); });
}

void Encode(Writer& w, const BlockwiseCopy& c) {
  w.List(c.ops, [&](const std::pair<SlotId, SlotId>& op) { w.Write(op.first, op.second); });
}

void Encode(Writer& w, const PeerSlots& p) {
  w.Write(p.peer.value);
  EncodeSlots(w, p.slots);
  w.List(p.bytes, [&](int64_t b) { w.Write(b); });
}

void Encode(Writer& w, const CommLaunch& c) {
  w.Write(c.id);
  w.List(c.sends, [&](const PeerSlots& p) { Encode(w, p); });
  w.List(c.recvs, [&](const PeerSlots& p) { Encode(w, p); });
}

void Encode(Writer& w, const CommWait& c) { w.Write(c.id); }

void Encode(Writer& w, const Instruction& instruction) {
  w.Write(static_cast<uint8_t>(instruction.index()));
  std::visit([&](const auto& alternative) { Encode(w, alternative); }, instruction);
}

void Encode(Writer& w, const Binding& b) {
  w.Write(static_cast<uint8_t>(b.kind), b.piece.block.value, b.piece.head_group, b.slot);
}

void Encode(Writer& w, const Program& p) {
  w.Write(p.device.value, static_cast<uint8_t>(p.pass));
  w.List(p.slots, [&](const SlotInfo& s) {
    w.Write(static_cast<uint8_t>(s.kind), DTypeCode(s.dtype), s.bytes);
  });
  w.List(p.inputs, [&](const Binding& b) { Encode(w, b); });
  w.List(p.outputs, [&](const Binding& b) { Encode(w, b); });
  w.List(p.instructions, [&](const Instruction& i) { Encode(w, i); });
}

void EncodePayload(Writer& w, const Plan& plan) {
  w.Write(plan.topology.nodes, plan.topology.devices_per_node);
  w.Write(plan.shape.heads, plan.shape.kv_heads, plan.shape.head_dim, DTypeCode(plan.shape.dtype));
  w.Write(plan.block_size, plan.head_groups);
  w.List(plan.seqlens, [&](int64_t length) { w.Write(length); });
  w.List(plan.blocks,
         [&](const PlanBlock& b) { w.Write(b.sequence.value, b.token_begin, b.tokens); });
  w.List(plan.block_owner, [&](DeviceId d) { w.Write(d.value); });
  w.List(plan.compute_blocks, [&](const PlanComputeBlock& c) {
    w.Write(c.q_block.value, c.kv_block.value, c.head_group, c.area);
  });
  w.Write(plan.n_divisions, plan.part_device);
  w.Text(plan.origin);
  w.List(plan.forward, [&](const Program& p) { Encode(w, p); });
  w.List(plan.backward, [&](const Program& p) { Encode(w, p); });
}

// ---------------------------------------------------------------------------------------------
// Decoding: the same order, with the checks of docs/plan_format.md.

// What the checks of one program's contents need: the plan's tables and the program's slots.
struct ProgramScope {
  const Plan& plan;
  const std::vector<SlotInfo>& slots;
};

enum class SlotUse { kRequired, kOptional };  // kOptional: -1 means "no slot"

// `field` names the slot field in errors ("q slot 99 out of range"); empty for list entries.
Status CheckSlot(const ProgramScope& scope, SlotId slot, std::string_view field, SlotUse use) {
  if (slot == -1 && use == SlotUse::kOptional) return Status::Ok();
  return Require(slot >= 0 && static_cast<uint64_t>(slot) < scope.slots.size(),
                 "{}{}slot {} out of range ({} slots)", field, field.empty() ? "" : " ", slot,
                 scope.slots.size());
}

Status DecodeSlots(Reader& r, const ProgramScope& scope, std::string_view noun,
                   std::vector<SlotId>* slots) {
  return r.List(kMinSlotIdBytes, noun, slots, [&](SlotId* slot) {
    DCP_RETURN_IF_ERROR(r.Read(slot));
    return CheckSlot(scope, *slot, "", SlotUse::kRequired);
  });
}

Status DecodeDType(uint8_t code, DType* dtype) {
  switch (code) {
    case 0:
      *dtype = DType::kFloat32;
      return Status::Ok();
    case 1:
      *dtype = DType::kBFloat16;
      return Status::Ok();
  }
  return Status::Corrupt(fmt::format("dtype code {} is not in [0, 1]", code));
}

Status Decode(Reader& r, Slice* s) {
  uint8_t lo_slope = 0, hi_slope = 0;
  DCP_RETURN_IF_ERROR(
      r.Read(&s->row_begin, &s->row_end, &s->lo.base, &lo_slope, &s->hi.base, &hi_slope));
  s->lo.slope = lo_slope;
  s->hi.slope = hi_slope;
  // Rows are checked against each tile's q block where a tile names the slice (CheckTile).
  return AsCorrupt(internal::CheckSlice(*s, kMaxSequenceLength));
}

// A row's or a column's slots: the ones its pass reads or accumulates into are required, the
// others optional.
template <size_t N>
Status CheckCallSlots(const ProgramScope& scope, const std::array<internal::SlotField, N>& fields) {
  for (const internal::SlotField& f : fields) {
    DCP_RETURN_IF_ERROR(
        CheckSlot(scope, f.slot, f.name, f.used ? SlotUse::kRequired : SlotUse::kOptional));
  }
  return Status::Ok();
}

// A tile's compute block, row, column and slices exist, and its slices' rows lie inside its q
// block. `previous` is the call's tile before it, whose slices were checked already.
Status CheckTile(const ProgramScope& scope, const BlockwiseAttention& a, const AttentionTile& t,
                 const AttentionTile* previous) {
  DCP_RETURN_IF_ERROR(CheckIndex(t.block.value, scope.plan.compute_blocks.size(), "compute block"));
  DCP_RETURN_IF_ERROR(CheckIndex(t.row, a.rows.size(), "row"));
  DCP_RETURN_IF_ERROR(CheckIndex(t.column, a.columns.size(), "column"));
  DCP_RETURN_IF_ERROR(Require(a.Holds(t), "slices [{}, {} + {}) are not within the call's {}",
                              t.first_slice, t.first_slice, t.n_slices, a.slices.size()));
  const int64_t rows =
      scope.plan.blocks[scope.plan.compute_blocks[t.block.value].q_block.value].tokens;
  if (previous != nullptr && previous->first_slice == t.first_slice &&
      previous->n_slices == t.n_slices &&
      rows == scope.plan.blocks[scope.plan.compute_blocks[previous->block.value].q_block.value]
                  .tokens) {
    return Status::Ok();  // the previous tile's slices, on as many rows
  }
  const std::span<const Slice> slices = a.SlicesOf(t);
  for (size_t i = 0; i < slices.size(); ++i) {
    DCP_RETURN_IF_ERROR(Within(AsCorrupt(internal::CheckSlice(slices[i], rows)), "slice {}", i));
  }
  return Status::Ok();
}

Status Decode(Reader& r, const ProgramScope& scope, BlockwiseAttention* a) {
  DCP_RETURN_IF_ERROR(r.Enum(Pass::kBackward, "pass", &a->pass));
  DCP_RETURN_IF_ERROR(r.Read(&a->division));
  DCP_RETURN_IF_ERROR(AsCorrupt(internal::CheckDivision(a->division, scope.plan.n_divisions)));
  const auto decode_row = [&](AttentionRow* row) {
    DCP_RETURN_IF_ERROR(r.Read(&row->q, &row->out, &row->lse, &row->d_o, &row->delta, &row->dq));
    return CheckCallSlots(scope, internal::RowSlots(*row, a->pass));
  };
  const auto decode_column = [&](AttentionColumn* c) {
    DCP_RETURN_IF_ERROR(r.Read(&c->kv, &c->dkv));
    return CheckCallSlots(scope, internal::ColumnSlots(*c, a->pass));
  };
  DCP_RETURN_IF_ERROR(r.List(kMinRowBytes, "row", &a->rows, decode_row));
  DCP_RETURN_IF_ERROR(r.List(kMinColumnBytes, "column", &a->columns, decode_column));
  DCP_RETURN_IF_ERROR(
      r.List(kMinSliceBytes, "slice", &a->slices, [&](Slice* s) { return Decode(r, s); }));
  DCP_RETURN_IF_ERROR(Require(a->slices.size() <= std::numeric_limits<int32_t>::max(),
                              "more than {} slices in one attention call",
                              std::numeric_limits<int32_t>::max()));
  return r.List(kMinTileBytes, "tile", &a->tiles, [&](AttentionTile* t) {
    DCP_RETURN_IF_ERROR(
        r.Read(&t->block.value, &t->row, &t->column, &t->first_slice, &t->n_slices));
    return CheckTile(scope, *a, *t, t == a->tiles.data() ? nullptr : t - 1);
  });
}

Status Decode(Reader& r, const ProgramScope& scope, ReductionKind kind, ReductionOp* op) {
  const bool merge = kind == ReductionKind::kLseMerge;
  DCP_RETURN_IF_ERROR(r.Read(&op->destination));
  DCP_RETURN_IF_ERROR(CheckSlot(scope, op->destination, "destination", SlotUse::kRequired));
  DCP_RETURN_IF_ERROR(DecodeSlots(r, scope, "source", &op->sources));
  DCP_RETURN_IF_ERROR(r.Read(&op->lse_destination));
  DCP_RETURN_IF_ERROR(CheckSlot(scope, op->lse_destination, "lse_destination",
                                merge ? SlotUse::kRequired : SlotUse::kOptional));
  DCP_RETURN_IF_ERROR(DecodeSlots(r, scope, "lse source", &op->lse_sources));
  return Require(!merge || op->lse_sources.size() == op->sources.size(),
                 "an LSE merge pairs its {} sources with {} lse sources", op->sources.size(),
                 op->lse_sources.size());
}

Status Decode(Reader& r, const ProgramScope& scope, BlockwiseReduction* x) {
  DCP_RETURN_IF_ERROR(r.Enum(ReductionKind::kDelta, "reduction kind", &x->kind));
  return r.List(kMinReductionOpBytes, "op", &x->ops,
                [&](ReductionOp* op) { return Decode(r, scope, x->kind, op); });
}

Status Decode(Reader& r, const ProgramScope& scope, BlockwiseCopy* c) {
  return r.List(kMinCopyOpBytes, "op", &c->ops, [&](std::pair<SlotId, SlotId>* op) {
    DCP_RETURN_IF_ERROR(r.Read(&op->first, &op->second));
    DCP_RETURN_IF_ERROR(CheckSlot(scope, op->first, "source", SlotUse::kRequired));
    return CheckSlot(scope, op->second, "destination", SlotUse::kRequired);
  });
}

Status Decode(Reader& r, const ProgramScope& scope, PeerSlots* p) {
  DCP_RETURN_IF_ERROR(r.Read(&p->peer.value));
  DCP_RETURN_IF_ERROR(CheckIndex(p->peer.value, scope.plan.topology.devices(), "device"));
  DCP_RETURN_IF_ERROR(DecodeSlots(r, scope, "entry", &p->slots));
  DCP_RETURN_IF_ERROR(r.List(kMinI64Bytes, "entry byte count", &p->bytes,
                             [&](int64_t* b) { return r.Read(b); }));
  DCP_RETURN_IF_ERROR(Require(p->bytes.size() == p->slots.size(),
                              "{} entry byte counts for {} entries", p->bytes.size(),
                              p->slots.size()));
  for (size_t k = 0; k < p->slots.size(); ++k) {
    const Status bytes =
        internal::CheckEntryBytes(p->bytes[k], p->slots[k], scope.slots[p->slots[k]].bytes);
    DCP_RETURN_IF_ERROR(AsCorrupt(Within(bytes, "entry {}", k)));
  }
  return Status::Ok();
}

Status Decode(Reader& r, const ProgramScope& scope, CommLaunch* c) {
  DCP_RETURN_IF_ERROR(r.Read(&c->id));
  const auto decode_peer = [&](PeerSlots* p) { return Decode(r, scope, p); };
  DCP_RETURN_IF_ERROR(r.List(kMinPeerSlotsBytes, "send", &c->sends, decode_peer));
  return r.List(kMinPeerSlotsBytes, "recv", &c->recvs, decode_peer);
}

Status Decode(Reader& r, const ProgramScope&, CommWait* c) { return r.Read(&c->id); }

// Decodes the body of alternative I when `tag` is I, else tries the next alternative.
template <size_t I = 0>
Status DecodeAlternative(Reader& r, const ProgramScope& scope, uint8_t tag, Instruction* inst) {
  if constexpr (I < std::variant_size_v<Instruction>) {
    if (tag != I) return DecodeAlternative<I + 1>(r, scope, tag, inst);
    return Decode(r, scope, &inst->emplace<I>());
  } else {
    return Status::Corrupt(fmt::format("tag {} is not in [0, {}]", tag, kInstructionTags - 1));
  }
}

constexpr std::string_view kInstructionNames[kInstructionTags] = {"attention", "reduction", "copy",
                                                                  "comm launch", "comm wait"};

Status Decode(Reader& r, const ProgramScope& scope, Instruction* inst) {
  uint8_t tag = 0;
  DCP_RETURN_IF_ERROR(r.Read(&tag));
  Status status = DecodeAlternative(r, scope, tag, inst);
  if (status.ok() || tag >= kInstructionTags) return status;
  return status.WithContext(kInstructionNames[tag]);
}

Status Decode(Reader& r, const ProgramScope& scope, Binding* b) {
  DCP_RETURN_IF_ERROR(r.Enum(TensorKind::kDKV, "tensor kind", &b->kind));
  DCP_RETURN_IF_ERROR(r.Read(&b->piece.block.value, &b->piece.head_group, &b->slot));
  DCP_RETURN_IF_ERROR(CheckIndex(b->piece.block.value, scope.plan.blocks.size(), "data block"));
  DCP_RETURN_IF_ERROR(
      CheckIndex(b->piece.head_group, static_cast<size_t>(scope.plan.head_groups), "head group"));
  return CheckSlot(scope, b->slot, "", SlotUse::kRequired);
}

Status Decode(Reader& r, SlotInfo* s) {
  uint8_t dtype = 0;
  DCP_RETURN_IF_ERROR(r.Enum(TensorKind::kDKV, "tensor kind", &s->kind));
  DCP_RETURN_IF_ERROR(r.Read(&dtype, &s->bytes));
  DCP_RETURN_IF_ERROR(DecodeDType(dtype, &s->dtype));
  return AsCorrupt(internal::CheckSlotBytes(s->bytes));
}

// `device` and `pass`: what the program's position in the file says it must be.
Status Decode(Reader& r, const Plan& plan, DeviceId device, Pass pass, Program* p) {
  DCP_RETURN_IF_ERROR(r.Read(&p->device.value));
  DCP_RETURN_IF_ERROR(r.Enum(Pass::kBackward, "pass", &p->pass));
  DCP_RETURN_IF_ERROR(Require(p->device == device, "holds device {} instead", p->device.value));
  DCP_RETURN_IF_ERROR(Require(p->pass == pass, "holds a {} program", ToString(p->pass)));
  DCP_RETURN_IF_ERROR(
      r.List(kMinSlotInfoBytes, "slot", &p->slots, [&](SlotInfo* s) { return Decode(r, s); }));
  const ProgramScope scope{plan, p->slots};
  const auto decode_binding = [&](Binding* b) { return Decode(r, scope, b); };
  DCP_RETURN_IF_ERROR(r.List(kMinBindingBytes, "input", &p->inputs, decode_binding));
  DCP_RETURN_IF_ERROR(r.List(kMinBindingBytes, "output", &p->outputs, decode_binding));
  return r.List(kMinInstructionBytes, "instruction", &p->instructions,
                [&](Instruction* i) { return Decode(r, scope, i); });
}

// One pass's programs: none, or one per device (a whole plan), or the part's device's only.
Status DecodePrograms(Reader& r, const Plan& plan, Pass pass, std::vector<Program>* programs) {
  const std::string_view name = ToString(pass);
  uint32_t n = 0;
  DCP_RETURN_IF_ERROR(Within(r.Count(kMinProgramBytes, "program", &n), "{} programs", name));
  const bool part = plan.part_device >= 0;
  const uint32_t expected = part ? 1 : static_cast<uint32_t>(plan.topology.devices());
  DCP_RETURN_IF_ERROR(Require(n == 0 || n == expected, "{} programs: {} of them, expected 0 or {}",
                              name, n, expected));
  programs->resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const DeviceId device{part ? plan.part_device : static_cast<int32_t>(i)};
    DCP_RETURN_IF_ERROR(Within(Decode(r, plan, device, pass, &(*programs)[i]), "{} program {}",
                               name, device.value));
  }
  return Status::Ok();
}

Status DecodeShape(Reader& r, AttentionShape* s) {
  uint8_t dtype = 0;
  DCP_RETURN_IF_ERROR(r.Read(&s->heads, &s->kv_heads, &s->head_dim, &dtype));
  return Within(DecodeDType(dtype, &s->dtype), "shape");
}

// Reads the tables, n_divisions and part_device as they are: DecodePayload then checks the tables
// with the rules ValidatePlan uses too (plan_rules.h).
Status DecodeTables(Reader& r, Plan* plan) {
  DCP_RETURN_IF_ERROR(r.Read(&plan->topology.nodes, &plan->topology.devices_per_node));
  DCP_RETURN_IF_ERROR(DecodeShape(r, &plan->shape));
  DCP_RETURN_IF_ERROR(r.Read(&plan->block_size, &plan->head_groups));
  DCP_RETURN_IF_ERROR(r.List(kMinSeqlenBytes, "sequence", &plan->seqlens,
                             [&](int64_t* length) { return r.Read(length); }));
  DCP_RETURN_IF_ERROR(r.List(kMinBlockBytes, "data block", &plan->blocks, [&](PlanBlock* b) {
    return r.Read(&b->sequence.value, &b->token_begin, &b->tokens);
  }));
  DCP_RETURN_IF_ERROR(r.List(kMinOwnerBytes, "block owner", &plan->block_owner,
                             [&](DeviceId* d) { return r.Read(&d->value); }));
  DCP_RETURN_IF_ERROR(r.List(
      kMinComputeBlockBytes, "compute block", &plan->compute_blocks, [&](PlanComputeBlock* c) {
        return r.Read(&c->q_block.value, &c->kv_block.value, &c->head_group, &c->area);
      }));
  return r.Read(&plan->n_divisions, &plan->part_device);
}

Status DecodePayload(Reader& r, Plan* plan) {
  DCP_RETURN_IF_ERROR(DecodeTables(r, plan));
  DCP_RETURN_IF_ERROR(AsCorrupt(internal::CheckPlanTables(*plan)));
  DCP_RETURN_IF_ERROR(
      Require(plan->part_device >= -1 && plan->part_device < plan->topology.devices(),
              "part_device {} is neither -1 (the whole plan) nor one of the {} devices",
              plan->part_device, plan->topology.devices()));
  DCP_RETURN_IF_ERROR(r.Text(kMaxOriginBytes, "origin", &plan->origin));
  DCP_RETURN_IF_ERROR(DecodePrograms(r, *plan, Pass::kForward, &plan->forward));
  DCP_RETURN_IF_ERROR(DecodePrograms(r, *plan, Pass::kBackward, &plan->backward));
  return Require(r.remaining() == 0, "{} trailing bytes after the programs, at byte {}",
                 r.remaining(), r.offset());
}

// Checks the header and returns the payload it vouches for.
Result<std::string_view> OpenEnvelope(std::string_view data) {
  const std::string_view magic = data.substr(0, std::min(data.size(), internal::kPlanMagic.size()));
  if (magic != internal::kPlanMagic.substr(0, magic.size())) {
    return Status::Corrupt("bad magic: not a dcp plan file");
  }
  if (data.size() < kPlanHeaderBytes) {
    return Status::Corrupt(
        fmt::format("truncated header: {} of {} bytes", data.size(), kPlanHeaderBytes));
  }
  Reader header(data.substr(internal::kPlanVersionOffset), internal::kPlanVersionOffset);
  uint32_t version = 0;
  uint64_t payload_bytes = 0, checksum = 0;
  DCP_RETURN_IF_ERROR(header.Read(&version, &payload_bytes, &checksum));
  if (version != internal::kPlanFormatVersion) {
    return Status::Unsupported(
        fmt::format("format version {} is not supported (this build reads "
                    "version {})",
                    version, internal::kPlanFormatVersion));
  }
  const std::string_view payload = data.substr(kPlanHeaderBytes);
  DCP_RETURN_IF_ERROR(Require(payload_bytes <= payload.size(),
                              "truncated: the header announces a payload of {} bytes, {} follow",
                              payload_bytes, payload.size()));
  DCP_RETURN_IF_ERROR(Require(payload_bytes == payload.size(),
                              "{} trailing bytes after the payload of {} bytes",
                              payload.size() - payload_bytes, payload_bytes));
  const uint64_t actual = internal::PlanChecksum(payload);
  DCP_RETURN_IF_ERROR(Require(actual == checksum,
                              "checksum mismatch: the payload hashes to {:#018x}, the header says "
                              "{:#018x}",
                              actual, checksum));
  return payload;
}

Status CheckExpectedDevice(const Plan& plan, DeviceId expected) {
  if (expected.value < 0 || expected.value >= plan.topology.devices()) {
    return Status::InvalidArgument(
        fmt::format("expected device {} is not a device of topology {} ({} devices)",
                    expected.value, plan.topology.ToString(), plan.topology.devices()));
  }
  if (plan.part_device >= 0 && plan.part_device != expected.value) {
    return Status::InvalidArgument(
        fmt::format("this is the part of device {}, but device {} was expected", plan.part_device,
                    expected.value));
  }
  return Status::Ok();
}

Result<Plan> Decode(std::string_view data, std::optional<DeviceId> expected_device) {
  DCP_ASSIGN_OR_RETURN(const std::string_view payload, OpenEnvelope(data));
  Plan plan;
  Reader r(payload, kPlanHeaderBytes);
  DCP_RETURN_IF_ERROR(DecodePayload(r, &plan));
  if (expected_device) DCP_RETURN_IF_ERROR(CheckExpectedDevice(plan, *expected_device));
  return plan;
}

// XXH64 of a payload handed over in pieces, and its length.
class PayloadHash {
 public:
  PayloadHash() : state_(XXH64_createState(), &XXH64_freeState) {
    DCP_CHECK(state_ != nullptr, "out of memory for an XXH64 state");
    XXH64_reset(state_.get(), 0);
  }
  void Add(std::string_view piece) {
    XXH64_update(state_.get(), piece.data(), piece.size());
    bytes_ += piece.size();
  }
  // The header in front of the payload hashed so far: magic, version, length and checksum.
  std::string Header() const {
    std::string header(internal::kPlanMagic);
    Writer w([&](std::string_view piece) { header.append(piece); });
    w.Write(internal::kPlanFormatVersion, bytes_, uint64_t{XXH64_digest(state_.get())});
    w.Flush();
    return header;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state_;
  uint64_t bytes_ = 0;
};

}  // namespace

// Encodes the payload into `sink`, piece by piece.
void StreamPayload(const Plan& plan, Writer::Sink sink) {
  Writer w(std::move(sink));
  EncodePayload(w, plan);
  w.Flush();
}

// The payload's hash and length, from a pass that keeps none of it.
PayloadHash HashPayload(const Plan& plan) {
  PayloadHash hash;
  StreamPayload(plan, [&](std::string_view piece) { hash.Add(piece); });
  return hash;
}

void EncodePlan(const Plan& plan, std::string* out) {
  // The header comes first but depends on the whole payload: a first pass hashes it (and sizes
  // the output, so a large plan's string grows once).
  const PayloadHash hash = HashPayload(plan);
  *out = hash.Header();
  out->reserve(out->size() + hash.bytes());
  StreamPayload(plan, [out](std::string_view piece) { out->append(piece); });
}

Status WritePlanFile(const Plan& plan, const std::string& path) {
  // A file (or a path not there yet) is written in one pass: the payload is hashed as it goes out
  // after a placeholder header, which is then overwritten (files of gigabytes are written at about
  // 1 GB/s, as fast as they are encoded). A pipe or a terminal (`-o /dev/stdout`) cannot go back
  // to its header: the header is sent first, from a pass that only hashes the payload.
  std::error_code error;
  const bool seekable =
      !std::filesystem::exists(path, error) || std::filesystem::is_regular_file(path, error);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return Status::NotFound(fmt::format("cannot open '{}' for writing", path));
  const auto send = [&](std::string_view piece) {
    file.write(piece.data(), static_cast<std::streamsize>(piece.size()));
  };
  if (seekable) {
    PayloadHash hash;
    send(std::string(kPlanHeaderBytes, '\0'));
    StreamPayload(plan, [&](std::string_view piece) {
      hash.Add(piece);
      send(piece);
    });
    if (!file) return Status::NotFound(fmt::format("cannot write '{}'", path));
    if (!file.seekp(0)) {
      return Status::NotFound(fmt::format("cannot go back to the header of '{}'", path));
    }
    send(hash.Header());
  } else {
    send(HashPayload(plan).Header());
    StreamPayload(plan, send);
  }
  file.close();
  if (!file) return Status::NotFound(fmt::format("cannot write '{}'", path));
  return Status::Ok();
}

Plan PlanPartForDevice(const Plan& plan, DeviceId device) {
  DCP_CHECK(device.value >= 0 && device.value < plan.topology.devices(),
            "device {} is not in topology {}", device.value, plan.topology.ToString());
  DCP_CHECK(plan.part_device == -1 || plan.part_device == device.value,
            "plan is the part of device {}, not of device {}", plan.part_device, device.value);
  Plan part;
  part.topology = plan.topology;
  part.shape = plan.shape;
  part.block_size = plan.block_size;
  part.head_groups = plan.head_groups;
  part.seqlens = plan.seqlens;
  part.blocks = plan.blocks;
  part.block_owner = plan.block_owner;
  part.compute_blocks = plan.compute_blocks;
  part.n_divisions = plan.n_divisions;
  part.part_device = device.value;
  part.origin = plan.origin;
  const auto take = [&](const std::vector<Program>& programs, std::vector<Program>* out) {
    if (programs.empty()) return;
    const size_t index = plan.part_device == -1 ? static_cast<size_t>(device.value) : 0;
    DCP_CHECK(index < programs.size(), "plan has {} programs per pass, not one per device",
              programs.size());
    out->push_back(programs[index]);
  };
  take(plan.forward, &part.forward);
  take(plan.backward, &part.backward);
  return part;
}

Result<Plan> DecodePlan(std::string_view data, std::optional<DeviceId> expected_device) {
  Result<Plan> plan = Decode(data, expected_device);
  if (!plan.ok()) return plan.status().WithContext("plan");
  return plan;
}

}  // namespace dcp
