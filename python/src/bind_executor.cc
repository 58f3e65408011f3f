// SPDX-License-Identifier: Apache-2.0
// The rank-local executor for Python: dcp.torch drives it with the caller's tensors (data
// pointers, no copies) and a communicator written in Python over a torch.distributed process
// group. The executor runs with the GIL released; each call into the Python communicator takes the
// GIL for the call's duration only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "dcp/executor.h"
#include "py_plan.h"
#include "python_calls.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

// A tensor as dcp.torch passes it: (data pointer, "fp32" | "bf16", shape, strides in elements).
using TensorArg = std::tuple<uintptr_t, std::string, std::vector<int64_t>, std::vector<int64_t>>;

TensorView ViewOf(const char* name, const TensorArg& arg) {
  const auto& [data, dtype, shape, strides] = arg;
  if (shape.empty() || shape.size() > TensorView::kMaxRank || strides.size() != shape.size()) {
    throw py::value_error(fmt::format("{}: rank {} with {} strides; expected rank 1 to {}", name,
                                      shape.size(), strides.size(), TensorView::kMaxRank));
  }
  TensorView view{.data = reinterpret_cast<std::byte*>(data),
                  .rank = static_cast<int32_t>(shape.size())};
  if (dtype == "fp32") {
    view.dtype = DType::kFloat32;
  } else if (dtype == "bf16") {
    view.dtype = DType::kBFloat16;
  } else {
    throw py::value_error(fmt::format("{}: dtype {} is not supported (float32 or bfloat16)", name,
                                      dtype));
  }
  std::copy(shape.begin(), shape.end(), view.shape.begin());
  std::copy(strides.begin(), strides.end(), view.strides.begin());
  return view;
}

// What one rank needs to run a plan: its kernels, its communicator, its executor. `kernels` is
// None for dcp's CPU kernels, else a Python kernel backend on `device` (DLPack's (type, index)).
class RankExecutor {
 public:
  RankExecutor(const PyPlan& plan, int32_t rank, int32_t size, py::object comm,
               py::object kernels, std::pair<int32_t, int32_t> device) {
    const DlDevice dl{device.first, device.second};
    if (kernels.is_none() && dl.type != kDLCPU) {
      throw py::value_error("dcp's CPU kernels run on CPU memory only; use the torch kernels");
    }
    kernels_ = kernels.is_none() ? MakeCpuBackend() : MakePythonBackend(std::move(kernels), dl);
    comm_ = MakePythonCommunicator(std::move(comm), rank, size, dl);
    executor_ = ValueOrThrow(Executor::Create(plan.plan, plan.Rank(rank), *kernels_, *comm_));
  }

  int64_t local_tokens() const { return executor_->local_tokens(); }

  void Forward(const TensorArg& q, const TensorArg& kv, const TensorArg& o, const TensorArg& lse) {
    const TensorView views[] = {ViewOf("q", q), ViewOf("kv", kv), ViewOf("o", o),
                                ViewOf("lse", lse)};
    Status status;
    {
      py::gil_scoped_release release;
      status = executor_->Forward(views[0], views[1], views[2], views[3]);
    }
    ThrowIfError(status);
  }

  void Backward(const TensorArg& q, const TensorArg& kv, const TensorArg& o, const TensorArg& lse,
                const TensorArg& d_o, const TensorArg& dq, const TensorArg& dkv) {
    const TensorView views[] = {ViewOf("q", q),     ViewOf("kv", kv),  ViewOf("o", o),
                                ViewOf("lse", lse), ViewOf("d_o", d_o), ViewOf("dq", dq),
                                ViewOf("dkv", dkv)};
    Status status;
    {
      py::gil_scoped_release release;
      status = executor_->Backward(views[0], views[1], views[2], views[3], views[4], views[5],
                                   views[6]);
    }
    ThrowIfError(status);
  }

  py::dict LastProfile() const {
    const ExecutionProfile& p = executor_->last_profile();
    py::dict d;
    d["total_s"] = p.total;
    d["attention_s"] = p.attention;
    d["reduction_s"] = p.reduction;
    d["copies_s"] = p.copies;
    d["communication_s"] = p.communication;
    d["overhead_s"] = p.Overhead();
    return d;
  }

 private:
  std::unique_ptr<KernelBackend> kernels_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace

void BindExecutor(py::module_& m) {
  py::class_<RankExecutor>(m, "RankExecutor",
                           "One rank's executor of a plan (CPU or Python kernels, a Python communicator).")
      .def(py::init<const PyPlan&, int32_t, int32_t, py::object, py::object,
                    std::pair<int32_t, int32_t>>(),
           py::arg("plan"), py::arg("rank"), py::arg("size"), py::arg("comm"),
           py::arg("kernels") = py::none(), py::arg("device") = std::make_pair(1, 0))
      .def_property_readonly("local_tokens", &RankExecutor::local_tokens)
      .def("forward", &RankExecutor::Forward, py::arg("q"), py::arg("kv"), py::arg("o"),
           py::arg("lse"))
      .def("backward", &RankExecutor::Backward, py::arg("q"), py::arg("kv"), py::arg("o"),
           py::arg("lse"), py::arg("d_o"), py::arg("dq"), py::arg("dkv"))
      .def("last_profile", &RankExecutor::LastProfile);
}

}  // namespace dcp::python
