// SPDX-License-Identifier: Apache-2.0
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <span>

#include "dcp/kernels.h"

namespace dcp {
TensorView TensorView::Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  DCP_CHECK(shape.size() >= 1 && shape.size() <= kMaxRank, "rank {}", shape.size());
  TensorView v{.data = static_cast<std::byte*>(data), .dtype = dtype,
               .rank = static_cast<int32_t>(shape.size())};
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  int64_t stride = 1;
  for (int32_t d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

TensorView TensorView::Strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  DCP_CHECK(strides.size() == shape.size(), "{} strides for rank {}", strides.size(),
            shape.size());
  TensorView v = Contiguous(data, dtype, shape);
  std::copy(strides.begin(), strides.end(), v.strides.begin());
  return v;
}

int64_t TensorView::elements() const {
  int64_t n = rank > 0 ? 1 : 0;
  for (int32_t d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

TensorView TensorView::Slice(int32_t dim, int64_t begin, int64_t count) const {
  DCP_CHECK(dim >= 0 && dim < rank && begin >= 0 && count >= 0 && begin + count <= shape[dim],
            "slice [{}, {}) of dimension {} of {}", begin, begin + count, dim, ToString());
  TensorView v = *this;
  if (count > 0) v.data += begin * strides[dim] * BytesPerElement(dtype);
  v.shape[dim] = count;
  return v;
}

std::string TensorView::ToString() const {
  return fmt::format("[{}] {} strides [{}]",
                     fmt::join(std::span(shape.data(), static_cast<size_t>(rank)), ", "),
                     dcp::ToString(dtype),
                     fmt::join(std::span(strides.data(), static_cast<size_t>(rank)), ", "));
}

Status CheckView(std::string_view what, const TensorView& view, std::span<const int64_t> shape,
                 std::initializer_list<DType> dtypes) {
  const auto fail = [&](std::string_view problem) {
    return Status::InvalidArgument(
        fmt::format("{} {}: {} (expected shape [{}])", what, view.ToString(), problem,
                    fmt::join(shape, ", ")));
  };
  if (view.rank != static_cast<int32_t>(shape.size()) ||
      !std::equal(shape.begin(), shape.end(), view.shape.begin())) {
    return fail("wrong shape");
  }
  if (std::find(dtypes.begin(), dtypes.end(), view.dtype) == dtypes.end()) {
    return fail(view.dtype == DType::kFloat32 ? "fp32 is not accepted here, bf16 is"
                                              : "bf16 is not accepted here, fp32 is");
  }
  for (int32_t d = 0; d < view.rank; ++d) {
    if (view.strides[d] < 0) return fail("negative strides are not supported");
  }
  if (view.elements() > 0 && view.data == nullptr) return fail("no data");
  return Status::Ok();
}

}  // namespace dcp
