// SPDX-License-Identifier: Apache-2.0
#include "dcp/batch.h"

#include <numeric>

namespace dcp {

std::string_view ToString(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

Result<DType> ParseDType(std::string_view text) {
  if (text == "fp32") return DType::kFloat32;
  if (text == "bf16") return DType::kBFloat16;
  return Status::InvalidArgument(fmt::format("unknown dtype '{}' (known: fp32, bf16)", text));
}

int64_t BytesPerElement(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

Status AttentionShape::Validate() const {
  constexpr int64_t kMaxHeads = 4096, kMaxHeadDim = 4096;
  if (heads < 1 || heads > kMaxHeads) {
    return Status::InvalidArgument(fmt::format("heads={} is not in [1, {}]", heads, kMaxHeads));
  }
  if (kv_heads < 1 || kv_heads > heads || heads % kv_heads != 0) {
    return Status::InvalidArgument(
        fmt::format("kv_heads={} must be in [1, heads] and divide heads={}", kv_heads, heads));
  }
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return Status::InvalidArgument(
        fmt::format("head_dim={} is not in [1, {}]", head_dim, kMaxHeadDim));
  }
  return Status::Ok();
}

Result<Batch> Batch::Create(std::vector<int64_t> seqlens, std::vector<MaskSpec> masks,
                            AttentionShape shape) {
  DCP_RETURN_IF_ERROR(shape.Validate());
  if (seqlens.empty()) return Status::InvalidArgument("batch has no sequences");
  if (masks.size() != 1 && masks.size() != seqlens.size()) {
    return Status::InvalidArgument(
        fmt::format("batch has {} sequences but {} masks (give 1 mask for all, or 1 per sequence)",
                    seqlens.size(), masks.size()));
  }
  Batch batch;
  batch.shape_ = shape;
  for (size_t s = 0; s < seqlens.size(); ++s) {
    if (seqlens[s] < 1 || seqlens[s] > kMaxSequenceLength) {
      return Status::InvalidArgument(fmt::format("sequence {}: length {} is not in [1, {}]", s,
                                                 seqlens[s], kMaxSequenceLength));
    }
    const MaskSpec& spec = masks.size() == 1 ? masks[0] : masks[s];
    Result<Mask> mask = spec.Build(seqlens[s]);
    if (!mask.ok()) return mask.status().WithContext(fmt::format("sequence {}", s));
    batch.mask_specs_.push_back(spec);
    batch.masks_.push_back(std::move(mask).value());
  }
  batch.seqlens_ = std::move(seqlens);
  return batch;
}

int64_t Batch::total_tokens() const {
  return std::accumulate(seqlens_.begin(), seqlens_.end(), int64_t{0});
}

}  // namespace dcp
