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
  const Result<MegatronIndexLengths> read = ReadMegatronIndex(file.path());
  // Corrupt bytes; Unsupported: another version or the legacy format; InvalidArgument: no
  // sequence of at least one token.
  Outcome("megatron index", read.status(),
          {StatusCode::kCorrupt, StatusCode::kUnsupported, StatusCode::kInvalidArgument},
          file.path());
  if (!read.ok()) return;
  const std::vector<int64_t>& lengths = read->lengths;
  DCP_FUZZ_CHECK(data.size() >= kLengthsOffset, "a {}-byte file was read", data.size());
  uint64_t count = 0;
  std::memcpy(&count, data.data() + kCountOffset, sizeof(count));
  DCP_FUZZ_CHECK(lengths.size() + static_cast<uint64_t>(read->empty_sequences) == count &&
                     !lengths.empty(),
                 "{} lengths and {} empty for a count of {}", lengths.size(),
                 read->empty_sequences, count);
  // The stored lengths, the empty ones left out, in order.
  size_t next = 0;
  for (uint64_t i = 0; i < count; ++i) {
    int32_t stored = 0;
    std::memcpy(&stored, data.data() + kLengthsOffset + 4 * i, sizeof(stored));
    if (stored == 0) continue;
    DCP_FUZZ_CHECK(next < lengths.size() && lengths[next] == stored && stored >= 1,
                   "length {}: stored {}", i, stored);
    ++next;
  }
  Outcome("batch", Batch::Create(lengths, {MaskSpec{}}, AttentionShape{}).status(),
          {StatusCode::kInvalidArgument});
}

}  // namespace
}  // namespace dcp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::CheckIndex(dcp::fuzz::AsText(data, size));
  return 0;
}
