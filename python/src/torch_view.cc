// SPDX-License-Identifier: Apache-2.0
#include "torch_view.h"

#include <algorithm>
#include <array>
#include <memory>

namespace py = pybind11;

namespace dcp::python {
namespace {

DLDataType DlType(DType dtype) {
  if (dtype == DType::kBFloat16) return DLDataType{.code = kDLBfloat, .bits = 16, .lanes = 1};
  return DLDataType{.code = kDLFloat, .bits = 32, .lanes = 1};
}

// One DLManagedTensor and the shape and strides it points to; deleted by its deleter.
struct Managed {
  DLManagedTensor tensor{};
  std::array<int64_t, TensorView::kMaxRank> shape{};
  std::array<int64_t, TensorView::kMaxRank> strides{};
};

// The capsule's destructor: the consumer renames a capsule it takes ("used_dltensor") and then
// calls the deleter itself; an unconsumed one is deleted here.
void DeleteUnconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    tensor->deleter(tensor);
  }
}

}  // namespace

TorchViews::TorchViews(DlDevice device)
    : device_(device), from_dlpack_(py::module_::import("torch").attr("from_dlpack")) {}

py::object TorchViews::Make(void* data, DLDataType dtype, int32_t rank, const int64_t* shape,
                            const int64_t* strides) const {
  auto managed = std::make_unique<Managed>();
  std::copy(shape, shape + rank, managed->shape.begin());
  std::copy(strides, strides + rank, managed->strides.begin());
  DLTensor& t = managed->tensor.dl_tensor;
  t.data = data;
  t.device = DLDevice{static_cast<DLDeviceType>(device_.type), device_.index};
  t.ndim = rank;
  t.dtype = dtype;
  t.shape = managed->shape.data();
  t.strides = managed->strides.data();
  t.byte_offset = 0;
  managed->tensor.manager_ctx = managed.get();
  managed->tensor.deleter = [](DLManagedTensor* self) {
    delete static_cast<Managed*>(self->manager_ctx);
  };
  PyObject* capsule = PyCapsule_New(&managed->tensor, "dltensor", DeleteUnconsumed);
  if (capsule == nullptr) throw py::error_already_set();
  managed.release();  // owned by the capsule now
  return from_dlpack_(py::reinterpret_steal<py::object>(capsule));
}

py::object TorchViews::Of(const TensorView& view) const {
  return Make(view.data, DlType(view.dtype), view.rank, view.shape.data(), view.strides.data());
}

py::object TorchViews::Of(const void* data, DType dtype,
                          std::initializer_list<int64_t> shape) const {
  return Of(TensorView::Contiguous(const_cast<void*>(data), dtype, shape));
}

py::object TorchViews::Bytes(const void* data, size_t bytes) const {
  const int64_t shape = static_cast<int64_t>(bytes), stride = 1;
  return Make(const_cast<void*>(data), DLDataType{.code = kDLUInt, .bits = 8, .lanes = 1}, 1,
              &shape, &stride);
}

}  // namespace dcp::python
