// SPDX-License-Identifier: Apache-2.0
// torch.Tensor views of memory the executor holds pointers to (a caller's tensor, a workspace
// slot, a message part), made through DLPack so that they work on every device torch imports
// from (CPU, CUDA, ROCm): no copy, no ownership; the memory must outlive the view. This is how the
// Python communicator and the torch kernel backend see the executor's data.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <dlpack/dlpack.h>

#include "dcp/kernels.h"

namespace dcp::python {

// A device as DLPack names it: (DLDeviceType, index), what torch's Tensor.__dlpack_device__()
// returns.
struct DlDevice {
  int32_t type = 1;  // kDLCPU
  int32_t index = 0;
};

class TorchViews {
 public:
  // REQUIRES: the GIL is held (also for every call below).
  explicit TorchViews(DlDevice device);

  // A tensor over `view`'s elements with its shape and strides.
  pybind11::object Of(const TensorView& view) const;
  // A dense row-major tensor of `shape` at `data`.
  pybind11::object Of(const void* data, DType dtype, std::initializer_list<int64_t> shape) const;
  // `bytes` bytes at `data` as a 1-D uint8 tensor.
  pybind11::object Bytes(const void* data, size_t bytes) const;

  DlDevice device() const { return device_; }

 private:
  pybind11::object Make(void* data, DLDataType dtype, int32_t rank, const int64_t* shape,
                        const int64_t* strides) const;

  DlDevice device_;
  pybind11::object from_dlpack_;
};

}  // namespace dcp::python
