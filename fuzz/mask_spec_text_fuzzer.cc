// SPDX-License-Identifier: Apache-2.0
// Fuzzes the text form of mask specs ("lambda:sink=64,window=4096", docs/mask_spec.md), as --mask
// takes it: MaskSpec::Parse, then the spec's round trip and its masks on sequences of up to 4096
// tokens, the short ones compared cell by cell with the dense reference (fuzz/mask_spec_checks.h).
// The same specs on the longest sequences are mask_spec_long_fuzzer.cc's. Inputs starting with '{'
// belong to the JSON harness (mask_spec_json_fuzzer.cc) and are rejected.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "mask_spec_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = dcp::fuzz::AsText(data, size);
  if (!text.empty() && text.front() == '{') return -1;  // not kept in the corpus
  dcp::fuzz::CheckMaskSpec(text, dcp::fuzz::Lengths::kShort);
  return 0;
}
