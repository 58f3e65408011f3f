// SPDX-License-Identifier: Apache-2.0
// Fuzzes the JSON form of mask specs ({"slices": [...]}, docs/mask_spec.md), as --mask and
// --mask @file take it: MaskSpec::Parse, then the spec's round trip and its masks
// (fuzz/mask_spec_checks.h). Inputs not starting with '{' are text specs, left to
// mask_spec_text_fuzzer.cc, and rejected.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "mask_spec_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = dcp::fuzz::AsText(data, size);
  if (text.empty() || text.front() != '{') return -1;  // not kept in the corpus
  dcp::fuzz::CheckMaskSpec(text, dcp::fuzz::Lengths::kAll);
  return 0;
}
