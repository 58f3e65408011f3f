// SPDX-License-Identifier: Apache-2.0
// Plans: one Program per device and pass, the instruction streams the runtime executes and the
// simulator replays. The binary format is specified in docs/plan_format.md.
//
// A Program works on typed buffer slots. Each slot holds one piece of one tensor: the tokens of
// one data block for the heads of one head group (the whole block when head_groups is 1). A slot
// lives from its first reference to its last, and slots whose lives do not overlap share memory
// (LayOutSlots), so a Program needs about its peak of live data.
//
// Semantics, instruction by instruction (the validator checks all of them):
//  - BlockwiseReduction with no sources sets its destination to the identity: O = 0, LSE = -inf,
//    dQ = dKV = 0. Every accumulator is initialised this way before its first use.
//  - BlockwiseAttention runs all its tiles as one fused call. A tile reads the slots of its row
//    (a q piece) and its column (a kv piece). Forward: each tile merges its result into its row's
//    (out, lse) accumulators by log-sum-exp, in fp32. Backward: each tile adds its dQ and dKV
//    contributions into its row's dq and its column's dkv accumulators, in fp32. A tile's mask is a
//    range of its call's slices, in tile coordinates (row 0 is the q block's first token, column 0
//    the kv block's first token).
//  - BlockwiseReduction with sources writes reduce(sources) into the destination: kLseMerge merges
//    (O, LSE) pairs (the O slots are listed, the LSE slots are paired positionally in lse_sources
//    and lse_destination); kSum adds; kDelta writes Delta = rowsum(O * dO) from sources [O, dO].
//  - BlockwiseCopy copies slot to slot (with a dtype conversion when the slot types differ).
//  - CommLaunch starts one all-to-all-v: to each peer it sends the listed slots' bytes packed in
//    order, and from each peer it receives bytes unpacked into the listed slots in order. Peers
//    with nothing to exchange are simply absent. It does not block.
//  - CommWait(id) completes the CommLaunch with that id; only then may its receive slots be read
//    and its send slots be overwritten.
//  - Tiles of one BlockwiseAttention run in order as far as results go: several tiles may merge or
//    add into the same accumulator (a kernel must not race on it). The ops of one
//    BlockwiseReduction or BlockwiseCopy are independent: none writes a slot another reads or
//    writes (an op may write into one of its own sources).
//  - Slot references a call or op does not use are -1: forward rows leave d_o, delta and dq unset
//    and forward columns dkv, backward rows leave out unset; kSum and kDelta ops leave
//    lse_destination unset. The slices of one tile never overlap.
//  - A message entry carries the leading bytes of its slot that hold its piece's tokens (a
//    sequence's last block, or a baseline's shorter chunk, moves only what it has).
//    The encoding of a plan replaces the contents of its output string.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "dcp/blocks.h"
#include "dcp/mask.h"
#include "dcp/partition.h"
#include "dcp/schedule.h"
#include "dcp/status.h"

namespace dcp {

enum class Pass : uint8_t { kForward = 0, kBackward = 1 };
std::string_view ToString(Pass pass);  // "forward", "backward"

// What a slot holds, per token of one piece.
enum class TensorKind : uint8_t {
  kQ = 0,      // queries, storage dtype
  kKV = 1,     // keys and values, storage dtype
  kO = 2,      // output: storage dtype as input/output, fp32 as an accumulator
  kLse = 3,    // log-sum-exp, fp32
  kDO = 4,     // output gradient, storage dtype
  kDelta = 5,  // rowsum(O * dO), fp32
  kDQ = 6,     // query gradient: storage dtype as output, fp32 as an accumulator
  kDKV = 7,    // key/value gradient: storage dtype as output, fp32 as an accumulator
};
std::string_view ToString(TensorKind kind);

// One data block's tokens for one head group.
struct Piece {
  DataBlockId block;
  int32_t head_group = 0;
  friend auto operator<=>(const Piece&, const Piece&) = default;
};

using SlotId = int32_t;

struct SlotInfo {
  TensorKind kind = TensorKind::kQ;
  DType dtype = DType::kFloat32;
  int64_t bytes = 0;  // capacity: block_size tokens of this kind for one head group
  friend bool operator==(const SlotInfo&, const SlotInfo&) = default;
};

// A slot the executor fills before running (inputs) or reads after (outputs).
struct Binding {
  TensorKind kind = TensorKind::kQ;
  Piece piece;
  SlotId slot = -1;
  friend bool operator==(const Binding&, const Binding&) = default;
};

// The slots of one q piece that a call's tiles read and accumulate into. Forward: q, and the
// (out, lse) accumulators. Backward: q, d_o, lse, delta, and the dq accumulator; out is unset.
struct AttentionRow {
  SlotId q = -1;
  SlotId out = -1, lse = -1;
  SlotId d_o = -1, delta = -1, dq = -1;
  friend bool operator==(const AttentionRow&, const AttentionRow&) = default;
};

// The slots of one kv piece: kv, and backward the dkv accumulator.
struct AttentionColumn {
  SlotId kv = -1;
  SlotId dkv = -1;
  friend bool operator==(const AttentionColumn&, const AttentionColumn&) = default;
};

// A tile names its slots by a row and a column of its call (a call has millions of tiles but few
// pieces: a tile of 20 bytes rather than one of 44 that repeats its pieces' slots).
struct AttentionTile {
  ComputeBlockId block;  // the compute block this tile is
  int32_t row = 0, column = 0;
  // The mask inside the tile, in tile coordinates: slices [first_slice, first_slice + n_slices)
  // of its BlockwiseAttention (BlockwiseAttention::SlicesOf).
  int32_t first_slice = 0, n_slices = 0;
  friend bool operator==(const AttentionTile&, const AttentionTile&) = default;
};

struct BlockwiseAttention {
  Pass pass = Pass::kForward;
  int32_t division = 0;
  std::vector<AttentionRow> rows = {};
  std::vector<AttentionColumn> columns = {};
  std::vector<AttentionTile> tiles = {};
  // The tiles' masks, one array for the call rather than a heap block per tile (a plan has
  // millions of tiles). Tiles with the same mask may share a range.
  std::vector<Slice> slices = {};

  // Whether the tile's row, column and range of slices exist (ValidatePlan and DecodePlan check
  // it for every tile).
  bool Holds(const AttentionTile& tile) const {
    return tile.row >= 0 && static_cast<size_t>(tile.row) < rows.size() && tile.column >= 0 &&
           static_cast<size_t>(tile.column) < columns.size() && tile.first_slice >= 0 &&
           tile.n_slices >= 0 &&
           static_cast<size_t>(tile.first_slice) + static_cast<size_t>(tile.n_slices) <=
               slices.size();
  }
  // REQUIRES: Holds(tile), for these three.
  const AttentionRow& RowOf(const AttentionTile& tile) const { return rows[tile.row]; }
  const AttentionColumn& ColumnOf(const AttentionTile& tile) const { return columns[tile.column]; }
  std::span<const Slice> SlicesOf(const AttentionTile& tile) const {
    return std::span<const Slice>(slices).subspan(tile.first_slice, tile.n_slices);
  }
  // Appends a tile of rows[row] x columns[column] whose mask is `mask`, sharing the previous
  // tile's range of slices when it is the same.
  void AddTile(ComputeBlockId block, int32_t row, int32_t column, std::span<const Slice> mask);
  friend bool operator==(const BlockwiseAttention&, const BlockwiseAttention&) = default;
};

enum class ReductionKind : uint8_t { kLseMerge = 0, kSum = 1, kDelta = 2 };
std::string_view ToString(ReductionKind kind);  // "lse-merge", "sum", "delta"

struct ReductionOp {
  SlotId destination = -1;
  std::vector<SlotId> sources = {};
  SlotId lse_destination = -1;           // kLseMerge only
  std::vector<SlotId> lse_sources = {};  // kLseMerge only, paired with sources
  friend bool operator==(const ReductionOp&, const ReductionOp&) = default;
};

struct BlockwiseReduction {
  ReductionKind kind = ReductionKind::kSum;
  std::vector<ReductionOp> ops = {};
  friend bool operator==(const BlockwiseReduction&, const BlockwiseReduction&) = default;
};

struct BlockwiseCopy {
  std::vector<std::pair<SlotId, SlotId>> ops = {};  // (source, destination)
  friend bool operator==(const BlockwiseCopy&, const BlockwiseCopy&) = default;
};

struct PeerSlots {
  DeviceId peer;
  std::vector<SlotId> slots = {};
  std::vector<int64_t> bytes = {};  // per slot: its leading bytes that travel (the piece's tokens)
  friend bool operator==(const PeerSlots&, const PeerSlots&) = default;
};

struct CommLaunch {
  int32_t id = 0;                     // unique within the program; the matching launch on every
                                      // peer carries the same id
  std::vector<PeerSlots> sends = {};  // by ascending peer
  std::vector<PeerSlots> recvs = {};  // by ascending peer
  friend bool operator==(const CommLaunch&, const CommLaunch&) = default;
};

struct CommWait {
  int32_t id = 0;
  friend bool operator==(const CommWait&, const CommWait&) = default;
};

using Instruction =
    std::variant<BlockwiseAttention, BlockwiseReduction, BlockwiseCopy, CommLaunch, CommWait>;

struct Program {
  DeviceId device;
  Pass pass = Pass::kForward;
  std::vector<SlotInfo> slots = {};
  std::vector<Binding> inputs = {};   // forward: Q, KV; backward: Q, KV, O, LSE, dO of owned pieces
  std::vector<Binding> outputs = {};  // forward: O, LSE; backward: dQ, dKV of owned pieces
  std::vector<Instruction> instructions = {};

  int64_t PeakBufferBytes() const;  // LayOutSlots(*this).bytes: the workspace a runtime allocates
  friend bool operator==(const Program&, const Program&) = default;
};

// Slots start at multiples of this many bytes in a program's workspace.
inline constexpr int64_t kSlotAlignment = 64;

// Where the slots of a program lie in its workspace. A slot lives from its first reference to its
// last: an input from before the first instruction, an output until after the last, a slot a
// CommLaunch sends or receives until that launch's CommWait (the end when it has none). Slots
// whose lives do not overlap may share memory. Two packings, slots taken in order of first use
// with capacities rounded up to kSlotAlignment: numbered places per capacity (a slot takes the
// lowest free place of its own capacity), and best fit (the smallest free byte range it fits, else
// the top); the smaller workspace is kept. Neither holds less than the most bytes alive at once.
struct SlotLayout {
  std::vector<int64_t> offsets;  // per slot, in bytes from the workspace's start
  int64_t bytes = 0;             // the workspace
};
SlotLayout LayOutSlots(const Program& program);

// Where a data block's tokens are; enough for a runtime to gather and scatter real tensors.
struct PlanBlock {
  SequenceId sequence;
  int64_t token_begin = 0;  // within the sequence
  int64_t tokens = 0;
  friend bool operator==(const PlanBlock&, const PlanBlock&) = default;
};

struct PlanComputeBlock {
  DataBlockId q_block, kv_block;
  int32_t head_group = 0;
  int64_t area = 0;  // allowed (q, k) pairs per head, >= 1; the tile's slices cover exactly this
  friend bool operator==(const PlanComputeBlock&, const PlanComputeBlock&) = default;
};

inline constexpr size_t kMaxOriginBytes = 256;

struct Plan {
  Topology topology = {};
  AttentionShape shape = {};
  int64_t block_size = 0;
  int64_t head_groups = 1;
  std::vector<int64_t> seqlens = {};
  std::vector<PlanBlock> blocks = {};      // per data block
  std::vector<DeviceId> block_owner = {};  // per data block: the device holding its inputs/outputs
  std::vector<PlanComputeBlock> compute_blocks = {};  // per compute block (ComputeBlockId)
  int32_t n_divisions = 0;
  // One per device, by device id; or, for one device's part of a plan (part_device >= 0), only
  // that device's program.
  std::vector<Program> forward = {};
  std::vector<Program> backward = {};
  int32_t part_device = -1;  // -1: the whole plan
  // What made the plan, for reports: "dcp 2048:0.05/0.05:9" (dcp's placement: block size,
  // compute/inter-node tolerances, divisions), "zigzag", "loongtrain:2", ...; at most
  // kMaxOriginBytes. Empty when the maker did not say.
  std::string origin = {};
  friend bool operator==(const Plan&, const Plan&) = default;
};

// Compiles the forward and backward Programs of every device from a placement and its schedule.
// Forward: every device computes its tiles division by division, with the next division's inputs
// moving meanwhile; partial outputs are sent to the owner of their queries (O in the storage
// dtype, LSE in fp32) and merged there by log-sum-exp. Backward: owners compute Delta = rowsum(O *
// dO); remote tiles get Q, dO, LSE and Delta for their rows and KV for their columns; partial dQ
// and dKV are accumulated in fp32, sent to their owners and summed. REQUIRES: `blocks` were made
// from `batch`, placement and schedule from `blocks` (checked: InvalidArgument otherwise).
// Devices are compiled on `threads` threads; the plan does not depend on it.
Result<Plan> CompilePlan(const Batch& batch, const BlockSet& blocks, const Placement& placement,
                         const Schedule& schedule, const Topology& topology,
                         int32_t threads = 1);

// Serialization (docs/plan_format.md): little-endian, magic "DCPPLAN\0", format version, payload
// length and a checksum of the payload. Encoding cannot fail.
void EncodePlan(const Plan& plan, std::string* out);
// Writes EncodePlan's bytes to the file at `path` (created or truncated; a pipe or a terminal
// too) without holding them in memory: a plan of millions of tiles encodes to gigabytes. NotFound
// names the path when it cannot be opened or written.
Status WritePlanFile(const Plan& plan, const std::string& path);
// The part of `plan` one device needs: header tables plus that device's two programs.
Plan PlanPartForDevice(const Plan& plan, DeviceId device);
// Decodes a plan. Returns Corrupt for a truncated or damaged file (wrong magic, checksum, count or
// offset; an id out of range), Unsupported for another format version, and InvalidArgument when
// `expected_device` is given and the file is the part of another device. Never crashes.
Result<Plan> DecodePlan(std::string_view data, std::optional<DeviceId> expected_device = {});

// Executes every device's programs symbolically (slots hold block identities, not numbers) and
// returns the first violation, naming the pass, device, instruction index and the defect:
//  - a table, slot size, division, slice or transfer size that breaks a rule DecodePlan checks too
//    (docs/plan_format.md, "Checks"; the two share the code, so a valid plan always decodes);
//  - a CommLaunch without a matching launch (same id) on a peer, or whose send and receive lists
//    differ in count, order or slot sizes; a CommWait without launch; a deadlock;
//  - an instruction reading a slot whose content is not what it needs (wrong kind or piece, not
//    yet received, overwritten), or writing a slot still being sent;
//  - a tile computed twice, a reduction of overlapping partial results, a tile's slices whose
//    area differs from its compute block's;
//  - an output that is missing tiles at the end (every output is the reduction of exactly all
//    tiles of its piece).
Status ValidatePlan(const Plan& plan);

}  // namespace dcp

namespace dcp {

// Bytes a pass moves, from its programs' communication.
struct PlanTraffic {
  int64_t bytes_inter_node = 0;             // sent between devices of different nodes
  int64_t bytes_intra_node = 0;             // sent between devices of one node
  int64_t max_device_bytes_inter_node = 0;  // the most one device sends or receives across nodes
};
PlanTraffic MeasureTraffic(const Plan& plan, Pass pass);

}  // namespace dcp

namespace dcp {

// A readable listing of a program or a whole plan (`dcp plan --dump`), for people; not parsed.
std::string DumpProgram(const Program& program);
std::string DumpPlan(const Plan& plan);

}  // namespace dcp
