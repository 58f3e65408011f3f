// SPDX-License-Identifier: Apache-2.0
// Fuzzes Megatron-LM index files (--idx F.idx, docs/datasets.md): ReadMegatronIndex, which takes a
// path, reads the bytes from an in-memory file. It either refuses them with Corrupt, or returns as
// many lengths as the header's sequence count, each the file's int32 length (>= 1). The lengths
// then make a causal batch, as --idx feeds one, which refuses lengths above kMaxSequenceLength.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dcp/batch.h"
#include "fuzz_util.h"

namespace dcp::fuzz {
namespace {

// Header: magic (9 bytes), version (u64), dtype code (u8), sequence count (u64), document count
// (u64); then the int32 lengths.
constexpr size_t kCountOffset = 9 + 8 + 1;
constexpr size_t kLengthsOffset = kCountOffset + 8 + 8;

void CheckIndex(std::string_view data) {
  static MemoryFile file;
  file.Write(data);
  const Result<std::vector<int64_t>> lengths = ReadMegatronIndex(file.path());
  Outcome("megatron index", lengths.status(), {StatusCode::kCorrupt}, file.path());
  if (!lengths.ok()) return;
  DCP_FUZZ_CHECK(data.size() >= kLengthsOffset, "a {}-byte file was read", data.size());
  uint64_t count = 0;
  std::memcpy(&count, data.data() + kCountOffset, sizeof(count));
  DCP_FUZZ_CHECK(lengths->size() == count && count >= 1, "{} lengths for a count of {}",
                 lengths->size(), count);
  for (size_t i = 0; i < lengths->size(); ++i) {
    int32_t stored = 0;
    std::memcpy(&stored, data.data() + kLengthsOffset + 4 * i, sizeof(stored));
    DCP_FUZZ_CHECK((*lengths)[i] == stored && stored >= 1, "length {}: read {}, stored {}", i,
                   (*lengths)[i], stored);
  }
  Outcome("batch", Batch::Create(*lengths, {MaskSpec{}}, AttentionShape{}).status(),
          {StatusCode::kInvalidArgument});
}

}  // namespace
}  // namespace dcp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::CheckIndex(dcp::fuzz::AsText(data, size));
  return 0;
}
