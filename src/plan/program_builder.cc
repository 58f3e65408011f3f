// SPDX-License-Identifier: Apache-2.0
#include "plan/program_builder.h"

#include <algorithm>
#include <limits>

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

  // Buffers by (first use, id): a counting sort over the first uses -1 .. end, in id order.
  std::vector<int> starts(end + 3, 0);  // per first use + 1, then the prefix sums
  int used = 0;
  for (int f : first) {
    if (f == std::numeric_limits<int>::max()) continue;
    ++starts[f + 2];
    ++used;
  }
  for (size_t i = 1; i < starts.size(); ++i) starts[i] += starts[i - 1];
  std::vector<SlotId> order(used);
  for (SlotId b = 0; b < static_cast<SlotId>(buffers_.size()); ++b) {
    if (first[b] != std::numeric_limits<int>::max()) order[starts[first[b] + 1]++] = b;
  }
  std::vector<SlotId> slot_of(buffers_.size(), -1);
  program_.slots.reserve(order.size());
  for (SlotId b : order) {
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
