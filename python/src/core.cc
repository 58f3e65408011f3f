// SPDX-License-Identifier: Apache-2.0
// The extension module dcp._core: bindings of dcp's planning library (masks, batches, the
// planner, plans and their token maps, the simulator). The package dcp re-exports them.
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "bindings.h"

namespace dcp::python {

void Raise(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kCorrupt:
    case StatusCode::kUnsupported:
      throw pybind11::value_error(status.message());
    case StatusCode::kCommFailure:
    case StatusCode::kTimeout:
    case StatusCode::kCancelled:
    case StatusCode::kInternal:
      throw std::runtime_error(status.message());
    case StatusCode::kOk:
      break;
  }
  throw std::runtime_error("dcp: an OK status raised as an error");
}

}  // namespace dcp::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "dcp's planning library (the package dcp re-exports it; import dcp instead).";
  dcp::python::BindMask(m);
  dcp::python::BindBatch(m);
  dcp::python::BindPlan(m);
  dcp::python::BindExecutor(m);
}
