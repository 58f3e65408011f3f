// SPDX-License-Identifier: Apache-2.0
// A kernel backend for tests: forwards every call to the CPU backend, counts the calls by kind,
// and can fail the n-th call of one kind (as a device whose kernel breaks down).
#pragma once

#include <array>
#include <memory>

#include "dcp/kernels.h"

namespace dcp::testing {

enum class KernelCall { kAllocate, kCopy, kForward, kBackward, kMergeLse, kSum, kDelta, kCount };

struct KernelCounts {
  std::array<int64_t, static_cast<size_t>(KernelCall::kCount)> calls = {};
  int64_t forward_tiles = 0, backward_tiles = 0;  // over all attention calls
  int64_t& operator[](KernelCall c) { return calls[static_cast<size_t>(c)]; }
  int64_t operator[](KernelCall c) const { return calls[static_cast<size_t>(c)]; }
};

class RecordingBackend final : public KernelBackend {
 public:
  // Fails the `fail_at`-th call (1-based) of kind `fail_kind`; 0 never fails. When destroyed,
  // writes its counts to `report_to` (if given).
  explicit RecordingBackend(KernelCall fail_kind = KernelCall::kCount, int64_t fail_at = 0,
                            KernelCounts* report_to = nullptr)
      : inner_(MakeCpuBackend()), fail_kind_(fail_kind), fail_at_(fail_at),
        report_to_(report_to) {}
  ~RecordingBackend() override {
    if (report_to_ != nullptr) *report_to_ = counts_;
  }

  std::string_view Name() const override { return "recording"; }
  const KernelCounts& counts() const { return counts_; }

  Result<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kAllocate));
    return inner_->Allocate(bytes);
  }
  Status Copy(const TensorView& dst, const TensorView& src) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kCopy));
    return inner_->Copy(dst, src);
  }
  Status AttendForward(std::span<const ForwardTile> tiles, DType dtype, float scale) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kForward));
    counts_.forward_tiles += static_cast<int64_t>(tiles.size());
    return inner_->AttendForward(tiles, dtype, scale);
  }
  Status AttendBackward(std::span<const BackwardTile> tiles, DType dtype, float scale) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kBackward));
    counts_.backward_tiles += static_cast<int64_t>(tiles.size());
    return inner_->AttendBackward(tiles, dtype, scale);
  }
  Status MergeLse(SlotRef o, float* lse, std::span<const SlotRef> sources,
                  std::span<const float* const> lse_sources, int64_t rows,
                  int64_t head_dim) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kMergeLse));
    return inner_->MergeLse(o, lse, sources, lse_sources, rows, head_dim);
  }
  Status Sum(SlotRef dst, std::span<const SlotRef> sources) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kSum));
    return inner_->Sum(dst, sources);
  }
  Status Delta(float* delta, SlotRef o, SlotRef d_o, int64_t rows, int64_t head_dim) override {
    DCP_RETURN_IF_ERROR(Count(KernelCall::kDelta));
    return inner_->Delta(delta, o, d_o, rows, head_dim);
  }

 private:
  Status Count(KernelCall call) {
    if (++counts_[call] == fail_at_ && call == fail_kind_) {
      return Status::Internal(fmt::format("injected kernel failure at call {} of kind {}",
                                          fail_at_, static_cast<int>(call)));
    }
    return Status::Ok();
  }

  std::unique_ptr<KernelBackend> inner_;
  KernelCall fail_kind_;
  int64_t fail_at_;
  KernelCounts* report_to_;
  KernelCounts counts_;
};

}  // namespace dcp::testing
