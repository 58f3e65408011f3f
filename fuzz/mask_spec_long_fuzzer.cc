// SPDX-License-Identifier: Apache-2.0
// Fuzzes text mask specs (docs/mask_spec.md) on the longest sequences: MaskSpec::Parse, the
// spec's round trip, then Build for 2^20 tokens and for kMaxSequenceLength, the longest sequence
// the CLI accepts, with the structural checks of fuzz/mask_spec_checks.h. A spec whose mask at
// such a length would not fit in memory must be refused with InvalidArgument, not crash or run
// out of memory or time. Kept apart from mask_spec_text_fuzzer.cc because each input costs time in
// proportion to its mask's slices. Inputs starting with '{' are rejected (the JSON harness builds
// explicit slices at these lengths).
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "mask_spec_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = dcp::fuzz::AsText(data, size);
  if (!text.empty() && text.front() == '{') return -1;  // not kept in the corpus
  dcp::fuzz::CheckMaskSpec(text, dcp::fuzz::Lengths::kHuge);
  return 0;
}
