// SPDX-License-Identifier: Apache-2.0
// The CPU kernel backend: host memory, the tile kernels of attention.cc, and the element-wise
// reductions (log-sum-exp merge, sum, Delta) and copies, all in fp32 arithmetic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "dcp/kernels.h"

namespace dcp {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr std::align_val_t kAlignment{64};

class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(size_t bytes)
      : data_(static_cast<std::byte*>(::operator new(std::max<size_t>(bytes, 1), kAlignment))),
        bytes_(bytes) {}
  ~HostMemory() override { ::operator delete(data_, kAlignment); }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  std::byte* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  std::byte* data_;
  size_t bytes_;
};

// Calls fn(dst offset, src offset, n) for every innermost run of the views (offsets in elements).
template <typename Fn>
void ForEachRun(const TensorView& dst, const TensorView& src, Fn&& fn) {
  const int32_t rank = dst.rank;
  const int64_t inner = dst.shape[rank - 1];
  std::array<int64_t, TensorView::kMaxRank> index = {};
  int64_t outer = 1;
  for (int32_t d = 0; d + 1 < rank; ++d) outer *= dst.shape[d];
  for (int64_t i = 0; i < outer; ++i) {
    int64_t to = 0, from = 0;
    for (int32_t d = 0; d + 1 < rank; ++d) {
      to += index[d] * dst.strides[d];
      from += index[d] * src.strides[d];
    }
    fn(to, from, inner);
    for (int32_t d = rank - 2; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[d] < dst.shape[d]) break;
      index[d] = 0;
    }
  }
}

class CpuBackend final : public KernelBackend {
 public:
  std::string_view Name() const override { return "cpu"; }

  Result<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    try {
      return std::unique_ptr<DeviceMemory>(std::make_unique<HostMemory>(bytes));
    } catch (const std::bad_alloc&) {
      return Status::InvalidArgument(
          fmt::format("cpu backend: cannot allocate {} bytes of host memory", bytes));
    }
  }

  Status Copy(const TensorView& dst, const TensorView& src) override {
    if (dst.rank != src.rank || dst.rank < 1 ||
        !std::equal(dst.shape.begin(), dst.shape.begin() + dst.rank, src.shape.begin())) {
      return Status::InvalidArgument(
          fmt::format("cpu backend: copy from {} into {}: shapes differ", src.ToString(),
                      dst.ToString()));
    }
    if (dst.elements() == 0) return Status::Ok();
    const int64_t dst_step = dst.strides[dst.rank - 1], src_step = src.strides[src.rank - 1];
    std::vector<float>& row = Scratch();
    ForEachRun(dst, src, [&](int64_t to, int64_t from, int64_t n) {
      if (dst_step == 1 && src_step == 1) {
        if (dst.dtype == src.dtype) {
          const int64_t size = BytesPerElement(dst.dtype);
          std::copy_n(src.data + from * size, n * size, dst.data + to * size);
          return;
        }
        row.resize(static_cast<size_t>(n));
        LoadRun(src.data, src.dtype, from, row.data(), n);
        StoreRun(dst.data, dst.dtype, to, row.data(), n);
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        StoreElement(dst.data, dst.dtype, to + i * dst_step,
                     LoadElement(src.data, src.dtype, from + i * src_step));
      }
    });
    return Status::Ok();
  }

  Status AttendForward(std::span<const ForwardTile> tiles, DType dtype, float scale) override {
    for (const ForwardTile& t : tiles) {
      dcp::AttendForward(t.o, t.lse, t.q, t.kv, dtype, t.shape, t.slices, scale);
    }
    return Status::Ok();
  }

  Status AttendBackward(std::span<const BackwardTile> tiles, DType dtype, float scale) override {
    for (const BackwardTile& t : tiles) {
      dcp::AttendBackward(t.dq, t.dkv, t.q, t.kv, t.d_o, t.lse, t.delta, dtype, t.shape,
                          t.slices, scale);
    }
    return Status::Ok();
  }

  Status MergeLse(SlotRef o, float* lse, std::span<const SlotRef> sources,
                  std::span<const float* const> lse_sources, int64_t rows,
                  int64_t head_dim) override {
    std::vector<float> weight(sources.size());
    std::vector<float> acc(static_cast<size_t>(head_dim));
    std::vector<float>& row = Scratch();
    row.resize(static_cast<size_t>(head_dim));
    for (int64_t r = 0; r < rows; ++r) {
      float max = kNegInf;
      bool poisoned = false;  // a source's row is NaN (a NaN input reached it): so is the merge
      for (const float* s : lse_sources) {
        max = std::max(max, s[r]);
        poisoned = poisoned || std::isnan(s[r]);
      }
      if (poisoned) {
        std::fill(acc.begin(), acc.end(), std::numeric_limits<float>::quiet_NaN());
        StoreRun(o.data, o.dtype, r * head_dim, acc.data(), head_dim);
        lse[r] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      float total = 0;
      for (size_t i = 0; i < sources.size(); ++i) {
        weight[i] = max == kNegInf ? 0.f : std::exp(lse_sources[i][r] - max);
        total += weight[i];
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      if (total > 0) {
        for (size_t i = 0; i < sources.size(); ++i) {
          if (weight[i] == 0) continue;
          const float w = weight[i] / total;
          LoadRun(sources[i].data, sources[i].dtype, r * head_dim, row.data(), head_dim);
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += w * row[d];
        }
      }
      // Every source row is read before the destination row (possibly a source) is written.
      StoreRun(o.data, o.dtype, r * head_dim, acc.data(), head_dim);
      lse[r] = total > 0 ? max + std::log(total) : kNegInf;
    }
    return Status::Ok();
  }

  // In chunks, every source read before the destination (possibly a source) is written.
  Status Sum(SlotRef dst, std::span<const SlotRef> sources) override {
    constexpr int64_t kChunk = 4096;
    std::vector<float> total(kChunk);
    std::vector<float>& row = Scratch();
    row.resize(kChunk);
    for (int64_t begin = 0; begin < dst.elements; begin += kChunk) {
      const int64_t count = std::min(kChunk, dst.elements - begin);
      std::fill_n(total.begin(), count, 0.f);
      for (const SlotRef& s : sources) {
        LoadRun(s.data, s.dtype, begin, row.data(), count);
        for (int64_t i = 0; i < count; ++i) total[i] += row[i];
      }
      StoreRun(dst.data, dst.dtype, begin, total.data(), count);
    }
    return Status::Ok();
  }

  Status Delta(float* delta, SlotRef o, SlotRef d_o, int64_t rows, int64_t head_dim) override {
    std::vector<float> o_row(static_cast<size_t>(head_dim)), d_o_row(static_cast<size_t>(head_dim));
    for (int64_t r = 0; r < rows; ++r) {
      LoadRun(o.data, o.dtype, r * head_dim, o_row.data(), head_dim);
      LoadRun(d_o.data, d_o.dtype, r * head_dim, d_o_row.data(), head_dim);
      float total = 0;
      for (int64_t d = 0; d < head_dim; ++d) total += o_row[d] * d_o_row[d];
      delta[r] = total;
    }
    return Status::Ok();
  }

 private:
  // Conversion scratch of the calling thread (calls may come from several threads).
  static std::vector<float>& Scratch() {
    thread_local std::vector<float> scratch;
    return scratch;
  }
};

}  // namespace

std::unique_ptr<KernelBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace dcp
