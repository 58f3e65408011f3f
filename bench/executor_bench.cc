// SPDX-License-Identifier: Apache-2.0
// Executor overhead: the share of a rank-local executor's call spent outside kernels, staging
// copies and communication (instruction dispatch, building kernel arguments, checks), and how
// messages travel. A 16384-token causal batch (8192 + 4096 + 2 x 2048), block 1024, 8 query / 2
// KV heads, head dim 128, planned for 1x2 devices; each device is one Executor on its own thread
// with its local tensors (its own tokens only), called forward + backward twice as training steps
// would: the counters are the second step's (steady state). One benchmark iteration (the local
// group's communicators are handed to the device threads). Target: overhead below 2%.
//
// Counters: seconds per category summed over devices and passes; overhead_pct; messages and
// parts_per_message (the executor hands every slot to the communicator where it lies: one part
// per slot, no packing); staged_parts, the parts that do not point into the executor's slot
// workspace (a packing copy would show there; 0 expected).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "dcp/planner.h"
#include "dcp/runtime.h"

namespace {

// Counts what the executor launches; forwards everything.
class CountingCommunicator final : public dcp::Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<dcp::Communicator> inner)
      : inner_(std::move(inner)) {}
  std::string_view Name() const override { return inner_->Name(); }
  int32_t rank() const override { return inner_->rank(); }
  int32_t size() const override { return inner_->size(); }
  dcp::Status Launch(int32_t id, std::vector<dcp::SendBuffer> sends,
                     std::vector<dcp::RecvBuffer> recvs) override {
    for (const dcp::SendBuffer& s : sends) {
      ++messages;
      for (const auto& part : s.parts) {
        ++parts;
        staged += part.data() < workspace_begin || part.data() >= workspace_end;
      }
    }
    return inner_->Launch(id, std::move(sends), std::move(recvs));
  }
  dcp::Result<bool> Test(int32_t id) override { return inner_->Test(id); }
  dcp::Status Wait(int32_t id) override { return inner_->Wait(id); }
  void Fail(const dcp::Status& reason) override { inner_->Fail(reason); }
  void KeepAliveAfterFailure(std::shared_ptr<void> memory) override {
    inner_->KeepAliveAfterFailure(std::move(memory));
  }

  const std::byte* workspace_begin = nullptr;
  const std::byte* workspace_end = nullptr;
  int64_t messages = 0, parts = 0, staged = 0;

 private:
  std::unique_ptr<dcp::Communicator> inner_;
};

// The CPU backend, remembering where the executor's workspace is.
class TrackingBackend final : public dcp::KernelBackend {
 public:
  explicit TrackingBackend(CountingCommunicator* comm) : comm_(comm) {}
  std::string_view Name() const override { return "cpu"; }
  dcp::Result<std::unique_ptr<dcp::DeviceMemory>> Allocate(size_t bytes) override {
    auto memory = inner_->Allocate(bytes);
    if (memory.ok()) {
      comm_->workspace_begin = (*memory)->data();
      comm_->workspace_end = (*memory)->data() + bytes;
    }
    return memory;
  }
  dcp::Status Copy(const dcp::TensorView& d, const dcp::TensorView& s) override {
    return inner_->Copy(d, s);
  }
  dcp::Status AttendForward(std::span<const dcp::ForwardTile> t, dcp::DType d, float s) override {
    return inner_->AttendForward(t, d, s);
  }
  dcp::Status AttendBackward(std::span<const dcp::BackwardTile> t, dcp::DType d,
                             float s) override {
    return inner_->AttendBackward(t, d, s);
  }
  dcp::Status MergeLse(dcp::SlotRef o, float* l, std::span<const dcp::SlotRef> s,
                       std::span<const float* const> ls, int64_t r, int64_t h) override {
    return inner_->MergeLse(o, l, s, ls, r, h);
  }
  dcp::Status Sum(dcp::SlotRef d, std::span<const dcp::SlotRef> s) override {
    return inner_->Sum(d, s);
  }
  dcp::Status Delta(float* d, dcp::SlotRef o, dcp::SlotRef g, int64_t r, int64_t h) override {
    return inner_->Delta(d, o, g, r, h);
  }

 private:
  std::unique_ptr<dcp::KernelBackend> inner_ = dcp::MakeCpuBackend();
  CountingCommunicator* comm_;
};

void BM_Execute(benchmark::State& state, dcp::DType dtype) {
  const dcp::AttentionShape shape{.heads = 8, .kv_heads = 2, .head_dim = 128, .dtype = dtype};
  auto batch = dcp::Batch::Create({8192, 4096, 2048, 2048}, {dcp::MaskSpec{}}, shape);
  auto planned =
      dcp::PlanBatch(*batch, dcp::SinglePassOptions({.nodes = 1, .devices_per_node = 2}, 1024));
  if (!planned.ok()) {
    state.SkipWithError(planned.status().ToString().c_str());
    return;
  }
  const dcp::Plan& plan = planned->plan;
  dcp::BatchTensors tensors = dcp::BatchTensors::ZerosFor(plan);
  for (std::vector<float>* v : {&tensors.q, &tensors.k, &tensors.v, &tensors.d_o}) {
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  }
  auto group = dcp::MakeLocalGroup({.size = 2, .timeout_s = 600});
  std::vector<dcp::ExecutionProfile> profiles(4);
  std::atomic<int64_t> messages{0}, parts{0}, staged{0};
  std::vector<dcp::Status> status(2);
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int32_t d = 0; d < 2; ++d) {
      threads.emplace_back([&, d] {
        CountingCommunicator comm(std::move((*group)[d]));
        TrackingBackend kernels(&comm);
        dcp::LocalTensors t = dcp::LocalTensors::Dispatched(tensors, plan, dcp::DeviceId{d});
        auto executor = dcp::Executor::Create(plan, dcp::DeviceId{d}, kernels, comm);
        if (!executor.ok()) {
          status[d] = executor.status();
          return;
        }
        const int64_t L = (*executor)->local_tokens();
        const auto q = [&](std::vector<float>& v) {
          return dcp::TensorView::Contiguous(v.data(), dcp::DType::kFloat32,
                                             {L, shape.heads, shape.head_dim});
        };
        const auto kv = [&](std::vector<float>& v) {
          return dcp::TensorView::Contiguous(v.data(), dcp::DType::kFloat32,
                                             {L, 2, shape.kv_heads, shape.head_dim});
        };
        const dcp::TensorView lse =
            dcp::TensorView::Contiguous(t.lse.data(), dcp::DType::kFloat32, {L, shape.heads});
        for (int step = 0; step < 2 && status[d].ok(); ++step) {  // the second step is measured
          comm.messages = comm.parts = comm.staged = 0;
          status[d] = (*executor)->Forward(q(t.q), kv(t.kv), q(t.o), lse);
          profiles[2 * d] = (*executor)->last_profile();
          if (!status[d].ok()) return;
          status[d] = (*executor)->Backward(q(t.q), kv(t.kv), q(t.o), lse, q(t.d_o), q(t.dq),
                                            kv(t.dkv));
          profiles[2 * d + 1] = (*executor)->last_profile();
        }
        messages += comm.messages;  // atomics: both device threads add
        parts += comm.parts;
        staged += comm.staged;
      });
    }
    for (std::thread& t : threads) t.join();
    for (const dcp::Status& s : status) {
      if (!s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        return;
      }
    }
  }
  dcp::ExecutionProfile sum;
  for (const dcp::ExecutionProfile& p : profiles) {
    sum.total += p.total;
    sum.attention += p.attention;
    sum.reduction += p.reduction;
    sum.copies += p.copies;
    sum.communication += p.communication;
  }
  state.counters["attention_s"] = sum.attention;
  state.counters["reduction_s"] = sum.reduction;
  state.counters["staging_s"] = sum.copies;
  state.counters["communication_s"] = sum.communication;
  state.counters["overhead_s"] = sum.Overhead();
  state.counters["overhead_pct"] = 100 * sum.Overhead() / sum.total;
  state.counters["messages"] = static_cast<double>(messages.load());
  state.counters["parts_per_message"] =
      static_cast<double>(parts.load()) / static_cast<double>(std::max<int64_t>(messages.load(), 1));
  state.counters["staged_parts"] = static_cast<double>(staged.load());
}

BENCHMARK_CAPTURE(BM_Execute, causal_16k_fp32, dcp::DType::kFloat32)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Execute, causal_16k_bf16, dcp::DType::kBFloat16)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
