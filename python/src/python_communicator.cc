// SPDX-License-Identifier: Apache-2.0
// The communicator's C++ half: each Communicator call becomes one call of the Python object
// (dcp.torch._comm.ProcessGroupComm), every message part a uint8 tensor over the executor's
// memory where it lies, so the process group reads and writes it without a copy.
#include <pybind11/pybind11.h>

#include <mutex>
#include <vector>

#include "python_calls.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

class PythonCommunicator final : public Communicator {
 public:
  PythonCommunicator(py::object impl, int32_t rank, int32_t size, DlDevice device)
      : impl_(std::move(impl)), views_(device), rank_(rank), size_(size) {}
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
      for (const SendBuffer& b : sends) s.append(py::make_tuple(b.peer.value, Parts(b.parts)));
      for (const RecvBuffer& b : recvs) r.append(py::make_tuple(b.peer.value, Parts(b.parts)));
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
    return CallPython(StatusCode::kCommFailure, std::forward<F>(f));
  }
  template <typename Part>
  py::list Parts(const std::vector<Part>& parts) const {
    py::list out;
    for (const Part& part : parts) out.append(views_.Bytes(part.data(), part.size()));
    return out;
  }

  py::object impl_;
  const TorchViews views_;
  const int32_t rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> MakePythonCommunicator(py::object impl, int32_t rank, int32_t size,
                                                     DlDevice device) {
  return std::make_unique<PythonCommunicator>(std::move(impl), rank, size, device);
}

}  // namespace dcp::python
