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

// The parts of a message as writable memoryviews (torch.frombuffer wraps them without a copy).
template <typename Part>
py::list Views(const std::vector<Part>& parts) {
  py::list views;
  for (const Part& part : parts) {
    views.append(py::memoryview::from_memory(
        const_cast<std::byte*>(part.data()), static_cast<py::ssize_t>(part.size()), false));
  }
  return views;
}

// A Communicator whose calls go to a Python object with launch(id, sends, recvs), test(id) ->
// bool, wait(id) and fail(reason); sends and recvs are lists of (peer, [memoryview, ...]). A
// Python exception from it becomes CommFailure (its message), or Timeout when it is TimeoutError.
class PythonCommunicator final : public Communicator {
 public:
  PythonCommunicator(py::object impl, int32_t rank, int32_t size)
      : impl_(std::move(impl)), rank_(rank), size_(size) {}
  ~PythonCommunicator() override {
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  std::string_view Name() const override { return "python"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    py::gil_scoped_acquire gil;
    return Call([&] {
      py::list s, r;
      for (const SendBuffer& b : sends) s.append(py::make_tuple(b.peer.value, Views(b.parts)));
      for (const RecvBuffer& b : recvs) r.append(py::make_tuple(b.peer.value, Views(b.parts)));
      impl_.attr("launch")(id, s, r);
    });
  }
  Result<bool> Test(int32_t id) override {
    py::gil_scoped_acquire gil;
    bool done = false;
    DCP_RETURN_IF_ERROR(Call([&] { done = impl_.attr("test")(id).cast<bool>(); }));
    return done;
  }
  Status Wait(int32_t id) override {
    py::gil_scoped_acquire gil;
    return Call([&] { impl_.attr("wait")(id); });
  }
  void Fail(const Status& reason) override {
    py::gil_scoped_acquire gil;
    (void)Call([&] { impl_.attr("fail")(reason.ToString()); });
  }
  // The process group's transfers given up on may still touch the executor's memory until the
  // group ends them, and a Python communicator cannot know when: kept for the process's life.
  void KeepAliveAfterFailure(std::shared_ptr<void> memory) override {
    static std::mutex mutex;
    static std::vector<std::shared_ptr<void>> kept;
    std::lock_guard lock(mutex);
    kept.push_back(std::move(memory));
  }

 private:
  template <typename F>
  Status Call(F&& f) {
    try {
      f();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      const bool timeout = e.matches(PyExc_TimeoutError);
      const std::string message = e.what();
      return timeout ? Status::Timeout(message) : Status::CommFailure(message);
    }
  }

  py::object impl_;
  const int32_t rank_, size_;
};

// What one rank needs to run a plan: its kernels, its communicator, its executor.
class RankExecutor {
 public:
  RankExecutor(const PyPlan& plan, int32_t rank, int32_t size, py::object comm)
      : kernels_(MakeCpuBackend()),
        comm_(std::make_unique<PythonCommunicator>(std::move(comm), rank, size)) {
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
                           "One rank's executor of a plan (CPU kernels, a Python communicator).")
      .def(py::init<const PyPlan&, int32_t, int32_t, py::object>(), py::arg("plan"),
           py::arg("rank"), py::arg("size"), py::arg("comm"))
      .def_property_readonly("local_tokens", &RankExecutor::local_tokens)
      .def("forward", &RankExecutor::Forward, py::arg("q"), py::arg("kv"), py::arg("o"),
           py::arg("lse"))
      .def("backward", &RankExecutor::Backward, py::arg("q"), py::arg("kv"), py::arg("o"),
           py::arg("lse"), py::arg("d_o"), py::arg("dq"), py::arg("dkv"))
      .def("last_profile", &RankExecutor::LastProfile);
}

}  // namespace dcp::python
