// SPDX-License-Identifier: Apache-2.0
// The pieces of the extension module dcp._core, one per concept, and the one place where a dcp
// Status becomes a Python exception.
//
// Errors: InvalidArgument, NotFound, Corrupt and Unsupported (the caller's input) raise ValueError,
// CommFailure, Timeout and Internal (faults at run time) raise RuntimeError; the message is dcp's.
// The bindings check what the library leaves to its callers as REQUIRES (ranks in range, ...), so
// no input from Python reaches a DCP_CHECK.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "dcp/status.h"

namespace dcp::python {

// Throws the C++ exception pybind11 turns into the Python exception of `status`.
// REQUIRES: !status.ok().
[[noreturn]] void Raise(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}

void BindMask(pybind11::module_& m);   // MaskSpec
void BindBatch(pybind11::module_& m);  // AttentionShape, Batch, length sources
void BindPlan(pybind11::module_& m);   // Plan, plan(), plan_baseline(), simulate()
void BindExecutor(pybind11::module_& m);  // RankExecutor (one rank of a plan, for dcp.torch)

}  // namespace dcp::python
