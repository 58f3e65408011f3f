// SPDX-License-Identifier: Apache-2.0
// Builds one Program with virtual buffers, then gives them slots: every virtual buffer lives from
// its first to its last reference (a sent buffer until the wait of its launch, an input from the
// start, an output to the end), and a slot is reused by a later buffer of the same type once its
// previous tenant is dead. Internal to src/plan.
#pragma once

#include <map>
#include <vector>

#include "dcp/plan.h"

namespace dcp::internal {

class ProgramBuilder {
 public:
  ProgramBuilder(DeviceId device, Pass pass) {
    program_.device = device;
    program_.pass = pass;
  }

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

// Calls fn(SlotId&) for every slot reference of the instruction.
template <typename Fn>
void ForEachSlot(Instruction& instruction, Fn&& fn) {
  struct Visitor {
    Fn& fn;
    void operator()(BlockwiseAttention& a) {
      for (AttentionRow& r : a.rows) {
        for (SlotId* s : {&r.q, &r.out, &r.lse, &r.d_o, &r.delta, &r.dq}) {
          if (*s >= 0) fn(*s);
        }
      }
      for (AttentionColumn& c : a.columns) {
        for (SlotId* s : {&c.kv, &c.dkv}) {
          if (*s >= 0) fn(*s);
        }
      }
    }
    void operator()(BlockwiseReduction& r) {
      for (ReductionOp& op : r.ops) {
        fn(op.destination);
        if (op.lse_destination >= 0) fn(op.lse_destination);
        for (SlotId& s : op.sources) fn(s);
        for (SlotId& s : op.lse_sources) fn(s);
      }
    }
    void operator()(BlockwiseCopy& c) {
      for (auto& [from, to] : c.ops) {
        fn(from);
        fn(to);
      }
    }
    void operator()(CommLaunch& l) {
      for (PeerSlots& p : l.sends) {
        for (SlotId& s : p.slots) fn(s);
      }
      for (PeerSlots& p : l.recvs) {
        for (SlotId& s : p.slots) fn(s);
      }
    }
    void operator()(CommWait&) {}
  };
  std::visit(Visitor{fn}, instruction);
}

}  // namespace dcp::internal
