// SPDX-License-Identifier: Apache-2.0
#include "plan/plan_rules.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace dcp::internal {
namespace {

// A check that fails with InvalidArgument; the message is formatted only on failure.
template <typename... Args>
Status Require(bool condition, fmt::format_string<Args...> message, Args&&... args) {
  if (condition) return Status::Ok();
  return Status::InvalidArgument(fmt::format(message, std::forward<Args>(args)...));
}

// Returns `status` with "<context>: " in front; the context is formatted only on error, as the
// tables of a large plan have hundreds of thousands of entries.
template <typename... Args>
Status Within(Status status, fmt::format_string<Args...> context, Args&&... args) {
  if (status.ok()) return status;
  return status.WithContext(fmt::format(context, std::forward<Args>(args)...));
}

Status CheckIndex(int64_t value, size_t size, std::string_view noun) {
  return Require(value >= 0 && static_cast<uint64_t>(value) < size, "{} {} out of range ({} {}s)",
                 noun, value, size, noun);
}

Status CheckBlock(const Plan& plan, const PlanBlock& b) {
  DCP_RETURN_IF_ERROR(CheckIndex(b.sequence.value, plan.seqlens.size(), "sequence"));
  const int64_t length = plan.seqlens[b.sequence.value];
  DCP_RETURN_IF_ERROR(Require(b.tokens >= 1 && b.tokens <= plan.block_size,
                              "{} tokens are not in [1, block_size {}]", b.tokens,
                              plan.block_size));
  return Require(b.token_begin >= 0 && b.token_begin <= length - b.tokens,
                 "tokens [{}, {} + {}) are not inside sequence {} of {} tokens", b.token_begin,
                 b.token_begin, b.tokens, b.sequence.value, length);
}

Status CheckComputeBlock(const Plan& plan, const PlanComputeBlock& c) {
  DCP_RETURN_IF_ERROR(
      CheckIndex(c.q_block.value, plan.blocks.size(), "data block").WithContext("q"));
  DCP_RETURN_IF_ERROR(
      CheckIndex(c.kv_block.value, plan.blocks.size(), "data block").WithContext("kv"));
  DCP_RETURN_IF_ERROR(
      CheckIndex(c.head_group, static_cast<size_t>(plan.head_groups), "head group"));
  const PlanBlock& q = plan.blocks[c.q_block.value];
  const PlanBlock& kv = plan.blocks[c.kv_block.value];
  DCP_RETURN_IF_ERROR(Require(q.sequence == kv.sequence,
                              "q block {} (sequence {}) and kv block {} (sequence {}) differ in "
                              "sequence",
                              c.q_block.value, q.sequence.value, c.kv_block.value,
                              kv.sequence.value));
  return Require(c.area >= 1 && c.area <= q.tokens * kv.tokens, "area {} is not in [1, {} x {}]",
                 c.area, q.tokens, kv.tokens);
}

Status CheckSliceBase(int64_t base, std::string_view side) {
  return Require(base >= -kMaxSliceBase && base <= kMaxSliceBase, "{} base {} is not in [{}, {}]",
                 side, base, -kMaxSliceBase, kMaxSliceBase);
}

}  // namespace

Status CheckPlanTables(const Plan& plan) {
  DCP_RETURN_IF_ERROR(plan.topology.Validate().WithContext("topology"));
  DCP_RETURN_IF_ERROR(plan.shape.Validate().WithContext("shape"));
  DCP_RETURN_IF_ERROR(Require(plan.block_size >= 1 && plan.block_size <= kMaxSequenceLength,
                              "block_size {} is not in [1, {}]", plan.block_size,
                              kMaxSequenceLength));
  DCP_RETURN_IF_ERROR(Require(plan.head_groups >= 1 && plan.shape.kv_heads % plan.head_groups == 0,
                              "head_groups {} does not divide kv_heads {}", plan.head_groups,
                              plan.shape.kv_heads));
  for (size_t s = 0; s < plan.seqlens.size(); ++s) {
    DCP_RETURN_IF_ERROR(Require(plan.seqlens[s] >= 1 && plan.seqlens[s] <= kMaxSequenceLength,
                                "sequence {}: length {} is not in [1, {}]", s, plan.seqlens[s],
                                kMaxSequenceLength));
  }
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    DCP_RETURN_IF_ERROR(Within(CheckBlock(plan, plan.blocks[b]), "data block {}", b));
  }
  DCP_RETURN_IF_ERROR(Require(plan.block_owner.size() == plan.blocks.size(),
                              "{} block owners for {} data blocks", plan.block_owner.size(),
                              plan.blocks.size()));
  for (size_t b = 0; b < plan.block_owner.size(); ++b) {
    DCP_RETURN_IF_ERROR(
        Within(CheckIndex(plan.block_owner[b].value, plan.topology.devices(), "device"),
               "block owner {}", b));
  }
  for (size_t c = 0; c < plan.compute_blocks.size(); ++c) {
    DCP_RETURN_IF_ERROR(
        Within(CheckComputeBlock(plan, plan.compute_blocks[c]), "compute block {}", c));
  }
  return Require(plan.n_divisions >= 0, "n_divisions {} is negative", plan.n_divisions);
}

Status CheckSlotBytes(int64_t bytes) {
  return Require(bytes >= 0 && bytes <= kMaxSlotBytes, "{} bytes are not in [0, {}]", bytes,
                 kMaxSlotBytes);
}

Status CheckDivision(int32_t division, int32_t n_divisions) {
  return Require(division >= 0 && division < n_divisions, "division {} out of range ({} divisions)",
                 division, n_divisions);
}

Status CheckSlice(const Slice& s, int64_t rows) {
  DCP_RETURN_IF_ERROR(Require(0 <= s.row_begin && s.row_begin <= s.row_end && s.row_end <= rows,
                              "rows [{}, {}) are not inside the tile's {} rows", s.row_begin,
                              s.row_end, rows));
  DCP_RETURN_IF_ERROR(
      Require((s.lo.slope == 0 || s.lo.slope == 1) && (s.hi.slope == 0 || s.hi.slope == 1),
              "slopes {} and {} must be 0 or 1", s.lo.slope, s.hi.slope));
  DCP_RETURN_IF_ERROR(CheckSliceBase(s.lo.base, "lo"));
  return CheckSliceBase(s.hi.base, "hi");
}

Status CheckEntryBytes(int64_t bytes, SlotId slot, int64_t capacity) {
  return Require(bytes >= 0 && bytes <= capacity, "moves {} bytes of slot {}, which holds {}",
                 bytes, slot, capacity);
}

}  // namespace dcp::internal
