// SPDX-License-Identifier: Apache-2.0
// The rules a plan's tables, slots, slices and transfers obey (docs/plan_format.md, "Checks"),
// in one place for the two that check them: DecodePlan reports a broken rule as Corrupt,
// ValidatePlan as InvalidArgument. Because both call these functions they cannot disagree: a plan
// the validator accepts decodes after encoding, and neither accepts a table the other refuses.
// Each function returns InvalidArgument naming the value and, within the plan, where it is;
// callers add the context above that. Internal to src/plan.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "dcp/plan.h"

namespace dcp::internal {

// |base| of a slice's column bounds: a tile's columns lie within its sequence, shifted by at most
// a sequence length; anything larger describes no column and could overflow SliceArea.
inline constexpr int64_t kMaxSliceBase = 2 * kMaxSequenceLength;
// The most bytes one slot may hold.
inline constexpr int64_t kMaxSlotBytes = int64_t{1} << 40;

// The plan-wide tables, in the order a plan file holds them: topology, shape, block_size,
// head_groups, sequence lengths, data blocks, their owners, compute blocks (a compute block has an
// area of at least 1: one of area 0 is no tile, and MakeBlocks makes none), n_divisions. On OK,
// every id in the tables is safe to index with. Reads no other field (not part_device, not the
// programs). Errors: "data block 1: 5 tokens are not in [1, block_size 4]".
Status CheckPlanTables(const Plan& plan);

// A slot's capacity: bytes in [0, kMaxSlotBytes].
Status CheckSlotBytes(int64_t bytes);

// A BlockwiseAttention's division, in [0, n_divisions).
Status CheckDivision(int32_t division, int32_t n_divisions);

// A mask slice of a tile whose q block has `rows` tokens: rows inside the tile, slopes 0 or 1,
// bases in [-kMaxSliceBase, kMaxSliceBase].
Status CheckSlice(const Slice& slice, int64_t rows);

// One slot field of an attention call's row or column, and whether the call's pass uses it: a
// used field names a slot, an unused one is -1 (the validator insists, the decoder allows a slot).
struct SlotField {
  std::string_view name;
  SlotId slot;
  bool used;
};
inline std::array<SlotField, 6> RowSlots(const AttentionRow& row, Pass pass) {
  const bool forward = pass == Pass::kForward;
  return {{{"q", row.q, true},
           {"out", row.out, forward},
           {"lse", row.lse, true},
           {"d_o", row.d_o, !forward},
           {"delta", row.delta, !forward},
           {"dq", row.dq, !forward}}};
}
inline std::array<SlotField, 2> ColumnSlots(const AttentionColumn& column, Pass pass) {
  return {{{"kv", column.kv, true}, {"dkv", column.dkv, pass == Pass::kBackward}}};
}

// The bytes a CommLaunch entry moves of `slot`, which holds `capacity`: in [0, capacity].
Status CheckEntryBytes(int64_t bytes, SlotId slot, int64_t capacity);

}  // namespace dcp::internal
