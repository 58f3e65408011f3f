// SPDX-License-Identifier: Apache-2.0
// The C++ interfaces dcp.torch implements in Python (a Communicator over a process group, a
// KernelBackend of torch operations), and the one rule for calling into them: the executor runs
// with the GIL released, each call takes it for its own duration, and a Python exception becomes
// a Status carrying its message.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "dcp/communicator.h"
#include "dcp/kernels.h"
#include "dcp/status.h"
#include "torch_view.h"

namespace dcp::python {

// Runs f (with the GIL held by the caller). A Python TimeoutError becomes Timeout, any other
// exception `otherwise` (CommFailure for a communicator, Internal for kernels).
template <typename F>
Status CallPython(StatusCode otherwise, F&& f) {
  try {
    f();
    return Status::Ok();
  } catch (pybind11::error_already_set& e) {
    const StatusCode code = e.matches(PyExc_TimeoutError) ? StatusCode::kTimeout : otherwise;
    return Status(code, e.what());
  }
}

// A Communicator whose calls go to a Python object with launch(id, sends, recvs), test(id) ->
// bool, wait(id) and fail(reason); sends and recvs are lists of (peer, [part, ...]), each part a
// 1-D uint8 torch.Tensor over the executor's memory on `device`.
std::unique_ptr<Communicator> MakePythonCommunicator(pybind11::object impl, int32_t rank,
                                                     int32_t size, DlDevice device);

// A KernelBackend whose calls go to a Python object with the methods of
// dcp.torch.kernels.TorchKernels (allocate, copy, attend_forward, attend_backward, merge_lse,
// sum, delta), each given torch.Tensor views of the executor's memory on `device`.
std::unique_ptr<KernelBackend> MakePythonBackend(pybind11::object impl, DlDevice device);

}  // namespace dcp::python
