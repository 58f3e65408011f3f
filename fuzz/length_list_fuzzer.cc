// SPDX-License-Identifier: Apache-2.0
// Fuzzes the two text forms of sequence lengths (docs/datasets.md): the comma-separated list of
// --seqlens (ParseLengthList) and the one-per-line file of --seqlens-file (ReadLengthsFile, which
// reads the same bytes from an in-memory file). Each either refuses the text with InvalidArgument
// or returns lengths in [1, kMaxSequenceLength], at most one per comma or line; a file's lengths
// then make a causal batch, as --seqlens-file feeds one.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "dcp/batch.h"
#include "fuzz_util.h"

namespace dcp::fuzz {
namespace {

void CheckLengths(const std::vector<int64_t>& lengths, size_t most, std::string_view what) {
  DCP_FUZZ_CHECK(!lengths.empty() && lengths.size() <= most, "{}: {} lengths, at most {} allowed",
                 what, lengths.size(), most);
  for (int64_t len : lengths) {
    DCP_FUZZ_CHECK(len >= 1 && len <= kMaxSequenceLength, "{}: length {}", what, len);
  }
}

void CheckLengthText(std::string_view text) {
  const Result<std::vector<int64_t>> list = ParseLengthList(text);
  Outcome("length list", list.status(), {StatusCode::kInvalidArgument}, text);
  if (list.ok()) {
    CheckLengths(*list, static_cast<size_t>(std::count(text.begin(), text.end(), ',')) + 1,
                 "length list");
  }

  static MemoryFile file;
  file.Write(text);
  const Result<std::vector<int64_t>> lines = ReadLengthsFile(file.path());
  Outcome("lengths file", lines.status(), {StatusCode::kInvalidArgument}, file.path());
  if (!lines.ok()) return;
  CheckLengths(*lines, static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1,
               "lengths file");
  Outcome("batch", Batch::Create(*lines, {MaskSpec{}}, AttentionShape{}).status(),
          {StatusCode::kInvalidArgument});
}

}  // namespace
}  // namespace dcp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::CheckLengthText(dcp::fuzz::AsText(data, size));
  return 0;
}
