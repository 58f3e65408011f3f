// SPDX-License-Identifier: Apache-2.0
// Normalization of raw slices: the union of their cells as disjoint slices (see normalize.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/mask.h"

namespace dcp::internal {

// The slices of the union of `slices` over a sequence of `length` tokens, clipped to the sequence,
// as Mask::slices() describes them but in no particular order. InvalidArgument when the union
// needs more than `max_slices` slices (Mask::FromSlices passes kMaxMaskSlices).
// REQUIRES: length >= 1; each slice's rows lie inside [0, length), its slopes are 0 or 1 and its
// bases are small enough that base + slope * row cannot overflow (Mask::FromSlices checks all).
Result<std::vector<Slice>> NormalizeSlices(int64_t length, std::span<const Slice> slices,
                                           int64_t max_slices);

}  // namespace dcp::internal
