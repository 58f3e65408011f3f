// SPDX-License-Identifier: Apache-2.0
#include "plan/program_builder.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>

namespace dcp::internal {

Program ProgramBuilder::Finish() {
  // Slots are numbered in the order of their buffers' first use (inputs first, outputs last); a
  // buffer the program never refers to gets none.
  const int end = static_cast<int>(program_.instructions.size());
  std::vector<int> first(buffers_.size(), std::numeric_limits<int>::max());
  const auto touch = [&](SlotId b, int at) { first[b] = std::min(first[b], at); };
  for (const Binding& b : program_.inputs) touch(b.slot, -1);
  for (int i = 0; i < end; ++i) {
    ForEachSlot(program_.instructions[i], [&](SlotId b) { touch(b, i); });
  }
  for (const Binding& b : program_.outputs) touch(b.slot, end);

  std::vector<SlotId> order(buffers_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](SlotId a, SlotId b) { return std::tie(first[a], a) < std::tie(first[b], b); });
  std::vector<SlotId> slot_of(buffers_.size(), -1);
  for (SlotId b : order) {
    if (first[b] == std::numeric_limits<int>::max()) break;
    slot_of[b] = static_cast<SlotId>(program_.slots.size());
    program_.slots.push_back(buffers_[b]);
  }

  for (Binding& b : program_.inputs) b.slot = slot_of[b.slot];
  for (Binding& b : program_.outputs) b.slot = slot_of[b.slot];
  for (Instruction& instruction : program_.instructions) {
    ForEachSlot(instruction, [&](SlotId& b) { b = slot_of[b]; });
  }
  return std::move(program_);
}

}  // namespace dcp::internal
