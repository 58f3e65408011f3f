// SPDX-License-Identifier: Apache-2.0
// The torch kernel backend's C++ half: every KernelBackend call becomes one call of the Python
// object, its pointers turned into torch.Tensor views on the backend's device (torch_view.h).
// Workspace memory is a torch tensor the object allocates, so it comes from torch's allocator on
// that device (its caching allocator on CUDA).
#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <cstdint>
#include <memory>

#include "python_calls.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

// Workspace held as the torch tensor that owns it.
class TorchMemory final : public DeviceMemory {
 public:
  TorchMemory(py::object tensor, std::byte* data, size_t bytes)
      : tensor_(std::move(tensor)), data_(data), bytes_(bytes) {}
  ~TorchMemory() override {
    py::gil_scoped_acquire gil;
    tensor_ = py::object();
  }
  std::byte* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  py::object tensor_;
  std::byte* data_;
  size_t bytes_;
};

// A tile's mask as Python sees it: ((row_begin, row_end, lo_base, lo_slope, hi_base, hi_slope),
// ...), hashable so the backend can cache the mask it builds from it.
py::tuple Slices(std::span<const Slice> slices) {
  py::tuple out(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    out[i] = py::make_tuple(s.row_begin, s.row_end, s.lo.base, s.lo.slope, s.hi.base, s.hi.slope);
  }
  return out;
}

class PythonBackend final : public KernelBackend {
 public:
  PythonBackend(py::object impl, DlDevice device)
      : impl_(std::move(impl)), views_(device), name_(py::str(impl_.attr("name"))) {}
  ~PythonBackend() override {
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  std::string_view Name() const override { return name_; }

  Result<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    py::gil_scoped_acquire gil;
    std::unique_ptr<DeviceMemory> memory;
    DCP_RETURN_IF_ERROR(Call([&] {
      py::object tensor = impl_.attr("allocate")(bytes);
      auto* data = reinterpret_cast<std::byte*>(tensor.attr("data_ptr")().cast<uintptr_t>());
      memory = std::make_unique<TorchMemory>(std::move(tensor), data, bytes);
    }));
    if (reinterpret_cast<uintptr_t>(memory->data()) % 64 != 0) {
      return Status::Internal(fmt::format("{}: allocate({}) returned memory not 64-byte aligned",
                                          name_, bytes));
    }
    return memory;
  }

  Status Copy(const TensorView& dst, const TensorView& src) override {
    py::gil_scoped_acquire gil;
    return Call([&] { impl_.attr("copy")(views_.Of(dst), views_.Of(src)); });
  }

  Status AttendForward(std::span<const ForwardTile> tiles, DType dtype, float scale) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      py::list args;
      for (const ForwardTile& t : tiles) {
        const TileShape& s = t.shape;
        args.append(py::make_tuple(
            views_.Of(t.o, DType::kFloat32, {s.q_tokens, s.heads, s.head_dim}),
            views_.Of(t.lse, DType::kFloat32, {s.q_tokens, s.heads}),
            views_.Of(t.q, dtype, {s.q_tokens, s.heads, s.head_dim}),
            views_.Of(t.kv, dtype, {s.kv_tokens, 2, s.kv_heads, s.head_dim}), Slices(t.slices)));
      }
      impl_.attr("attend_forward")(args, scale);
    });
  }

  Status AttendBackward(std::span<const BackwardTile> tiles, DType dtype, float scale) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      py::list args;
      for (const BackwardTile& t : tiles) {
        const TileShape& s = t.shape;
        args.append(py::make_tuple(
            views_.Of(t.dq, DType::kFloat32, {s.q_tokens, s.heads, s.head_dim}),
            views_.Of(t.dkv, DType::kFloat32, {s.kv_tokens, 2, s.kv_heads, s.head_dim}),
            views_.Of(t.q, dtype, {s.q_tokens, s.heads, s.head_dim}),
            views_.Of(t.kv, dtype, {s.kv_tokens, 2, s.kv_heads, s.head_dim}),
            views_.Of(t.d_o, dtype, {s.q_tokens, s.heads, s.head_dim}),
            views_.Of(t.lse, DType::kFloat32, {s.q_tokens, s.heads}),
            views_.Of(t.delta, DType::kFloat32, {s.q_tokens, s.heads}), Slices(t.slices)));
      }
      impl_.attr("attend_backward")(args, scale);
    });
  }

  Status MergeLse(SlotRef o, float* lse, std::span<const SlotRef> sources,
                  std::span<const float* const> lse_sources, int64_t rows,
                  int64_t head_dim) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      py::list outs, lses;
      for (const SlotRef& s : sources) outs.append(Rows(s, rows, head_dim));
      for (const float* l : lse_sources) lses.append(views_.Of(l, DType::kFloat32, {rows}));
      impl_.attr("merge_lse")(Rows(o, rows, head_dim), views_.Of(lse, DType::kFloat32, {rows}),
                              outs, lses);
    });
  }

  Status Sum(SlotRef dst, std::span<const SlotRef> sources) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      py::list views;
      for (const SlotRef& s : sources) views.append(views_.Of(s.data, s.dtype, {dst.elements}));
      impl_.attr("sum")(views_.Of(dst.data, dst.dtype, {dst.elements}), views);
    });
  }

  Status Delta(float* delta, SlotRef o, SlotRef d_o, int64_t rows, int64_t head_dim) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      impl_.attr("delta")(views_.Of(delta, DType::kFloat32, {rows}), Rows(o, rows, head_dim),
                          Rows(d_o, rows, head_dim));
    });
  }

 private:
  template <typename F>
  Status Call(F&& f) {
    return CallPython(StatusCode::kInternal, std::forward<F>(f));
  }
  py::object Rows(const SlotRef& s, int64_t rows, int64_t head_dim) const {
    return views_.Of(s.data, s.dtype, {rows, head_dim});
  }

  py::object impl_;
  const TorchViews views_;
  const std::string name_;
};

}  // namespace

std::unique_ptr<KernelBackend> MakePythonBackend(py::object impl, DlDevice device) {
  return std::make_unique<PythonBackend>(std::move(impl), device);
}

}  // namespace dcp::python
