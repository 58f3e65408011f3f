// SPDX-License-Identifier: Apache-2.0
// Builds one Program with virtual buffers, then makes each buffer the program uses a slot (where
// the slots lie in memory, sharing it when their lives do not overlap, is LayOutSlots' business).
// Internal to src/plan.
#pragma once

#include <type_traits>
#include <variant>
#include <vector>

#include "dcp/plan.h"

namespace dcp::internal {

class ProgramBuilder {
 public:
  ProgramBuilder(DeviceId device, Pass pass) {
    program_.device = device;
    program_.pass = pass;
  }

  DeviceId device() const { return program_.device; }

  // A new virtual buffer of this type; its id goes where a SlotId is expected.
  SlotId NewBuffer(const SlotInfo& info) {
    buffers_.push_back(info);
    return static_cast<SlotId>(buffers_.size() - 1);
  }
  void AddInput(TensorKind kind, Piece piece, SlotId buffer) {
    program_.inputs.push_back({kind, piece, buffer});
  }
  void AddOutput(TensorKind kind, Piece piece, SlotId buffer) {
    program_.outputs.push_back({kind, piece, buffer});
  }
  // Appends an instruction, constructed in place from one of Instruction's alternatives.
  template <typename T>
  void Emit(T&& instruction) {
    program_.instructions.emplace_back(std::forward<T>(instruction));
  }

  // Assigns slots to the virtual buffers and returns the program.
  Program Finish();

 private:
  std::vector<SlotInfo> buffers_;
  Program program_;
};

// Calls fn(SlotId&) for every slot reference of the instruction (fn(const SlotId&) when the
// instruction is const).
template <typename InstructionRef, typename Fn>
void ForEachSlot(InstructionRef& instruction, Fn&& fn) {
  const auto each = [&fn](auto&&... slots) { ((slots >= 0 ? fn(slots) : void()), ...); };
  std::visit(
      [&](auto& op) {
        using Op = std::remove_cvref_t<decltype(op)>;
        if constexpr (std::is_same_v<Op, BlockwiseAttention>) {
          for (auto& r : op.rows) each(r.q, r.out, r.lse, r.d_o, r.delta, r.dq);
          for (auto& c : op.columns) each(c.kv, c.dkv);
        } else if constexpr (std::is_same_v<Op, BlockwiseReduction>) {
          for (auto& o : op.ops) {
            fn(o.destination);
            if (o.lse_destination >= 0) fn(o.lse_destination);
            for (auto& s : o.sources) fn(s);
            for (auto& s : o.lse_sources) fn(s);
          }
        } else if constexpr (std::is_same_v<Op, BlockwiseCopy>) {
          for (auto& [from, to] : op.ops) {
            fn(from);
            fn(to);
          }
        } else if constexpr (std::is_same_v<Op, CommLaunch>) {
          for (auto* lists : {&op.sends, &op.recvs}) {
            for (auto& p : *lists) {
              for (auto& s : p.slots) fn(s);
            }
          }
        }
      },
      instruction);
}

}  // namespace dcp::internal
