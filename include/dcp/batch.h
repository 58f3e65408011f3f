// SPDX-License-Identifier: Apache-2.0
// Batches of packed variable-length sequences, where their lengths come from, and how they are
// packed into token budgets.
//
// A Batch is the input of planning: the sequence lengths, one mask per sequence and the attention
// shape. Length sources: an explicit list, a text file, the sequence lengths of a Megatron-LM
// indexed dataset (.idx), and seeded synthetic distributions that mimic the datasets of the DCP
// paper. All functions are pure; Batch is an immutable value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/mask.h"
#include "dcp/status.h"

namespace dcp {

enum class DType { kFloat32, kBFloat16 };

std::string_view ToString(DType dtype);
Result<DType> ParseDType(std::string_view text);  // "fp32" | "bf16"
int64_t BytesPerElement(DType dtype);

// The attention layer's shape. Query head h uses KV head h / (heads / kv_heads).
struct AttentionShape {
  int64_t heads = 8;               // query heads; the paper's micro-benchmark uses 8
  int64_t kv_heads = 2;            // key/value heads (GQA); must divide heads
  int64_t head_dim = 128;          // elements per head
  DType dtype = DType::kBFloat16;  // storage of Q, K, V, O and their gradients; LSE is always fp32

  Status Validate() const;
  friend bool operator==(const AttentionShape&, const AttentionShape&) = default;
};

class Batch {
 public:
  // REQUIRES nothing; returns InvalidArgument if there are no sequences, a length is not in
  // [1, kMaxSequenceLength], `masks` has neither 1 entry (used for every sequence) nor one per
  // sequence, a mask cannot be built for its sequence, or the shape is invalid.
  static Result<Batch> Create(std::vector<int64_t> seqlens, std::vector<MaskSpec> masks,
                              AttentionShape shape);

  const std::vector<int64_t>& seqlens() const { return seqlens_; }
  const std::vector<MaskSpec>& mask_specs() const { return mask_specs_; }  // one per sequence
  const std::vector<Mask>& masks() const { return masks_; }                // one per sequence
  const AttentionShape& shape() const { return shape_; }
  int64_t total_tokens() const;

 private:
  Batch() = default;

  std::vector<int64_t> seqlens_;
  std::vector<MaskSpec> mask_specs_;
  std::vector<Mask> masks_;
  AttentionShape shape_;
};

// "4096,1000,17": comma-separated positive lengths.
Result<std::vector<int64_t>> ParseLengthList(std::string_view text);

// A text file with one length per line; blank lines and everything after '#' are ignored.
Result<std::vector<int64_t>> ReadLengthsFile(const std::string& path);

// The sequences of a Megatron-LM index file, less the empty ones.
struct MegatronIndexLengths {
  std::vector<int64_t> lengths;  // every sequence of length >= 1, in the index's order
  int64_t empty_sequences = 0;   // sequences of length 0 (empty documents), left out of `lengths`
};

// The sequence lengths of a Megatron-LM indexed dataset, read from its index file (.idx of the
// MMapIndexedDataset format: header "MMIDIDX\0\0", version 1, dtype code, sequence count, document
// count, then the int32 sequence lengths; docs/datasets.md). Sequences of length 0, which
// Megatron-LM writes for empty documents, are skipped and counted. Returns Corrupt for a malformed
// or truncated file, Unsupported for another version or the legacy TNTIDX format, and
// InvalidArgument when no sequence has a length >= 1.
Result<MegatronIndexLengths> ReadMegatronIndex(const std::string& path);

// Seeded synthetic length distributions, each a mixture of log-normals fitted by eye to the
// histograms of the DCP paper (Fig. 2); see docs/datasets.md for the parameters.
enum class LengthDistribution {
  kLongDataCollections,  // "ldc": short sequences dominate, long tail (mean ~8.5K tokens)
  kLongAlign,            // "longalign": longer mean (~15K tokens), few short sequences
};

std::string_view ToString(LengthDistribution distribution);
Result<LengthDistribution> ParseLengthDistribution(std::string_view text);  // "ldc" | "longalign"

struct SyntheticOptions {
  LengthDistribution distribution = LengthDistribution::kLongDataCollections;
  double scale = 1.0;  // every length is multiplied by this; the paper uses 0.5, 1, 2 and 4
  uint64_t seed = 0;   // same seed, same lengths, on every platform

  Status Validate() const;
};

// `count` lengths drawn from the distribution, each at least 1.
Result<std::vector<int64_t>> SampleLengths(const SyntheticOptions& options, int64_t count);

// How sequences are packed into batches, as in the DCP paper's micro-benchmark: shuffle with a
// seed, drop sequences longer than max_sequence_length, then fill batches greedily in order: a
// batch is closed when the next sequence would overflow the budget, and kept only if it holds at
// least min_fill * token_budget tokens. The last batch is kept only if it is filled exactly to the
// budget (nothing more could join it); otherwise it is unfinished and dropped.
struct PackOptions {
  int64_t token_budget = 131072;    // tokens per batch
  int64_t max_sequence_length = 0;  // longer sequences are dropped; 0 means token_budget
  double min_fill = 0.75;           // fraction of the budget a batch must reach to be kept
  uint64_t seed = 42;               // shuffle seed (the paper's scripts use 42)

  Status Validate() const;
};

Result<std::vector<std::vector<int64_t>>> PackBatches(std::vector<int64_t> lengths,
                                                      const PackOptions& options);

// One batch of about `tokens` tokens: draws sequences from the distribution and returns the
// first batch the packer keeps (budget and maximum length `tokens`, shuffle seed options.seed).
Result<std::vector<int64_t>> SyntheticBatch(const SyntheticOptions& options, int64_t tokens);

}  // namespace dcp
