// SPDX-License-Identifier: Apache-2.0
// Runs a whole plan as rank-local Executors, one thread per device, the way a training job runs
// it on ranks: each device gets only its own tokens (dispatched from a whole batch's tensors), in
// the dtype and layout the test asks for, and its outputs are written back into the batch's.
// Hooks swap in another kernel backend or wrap a device's communicator (fault injection).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dcp/runtime.h"

namespace dcp::testing {

struct LocalRunOptions {
  DType dtype = DType::kFloat32;  // of the caller's local tensors
  // Local tensors with this many unused elements after every token (a strided layout).
  int64_t token_padding = 0;
  double timeout_s = 30.0;
  // After backward, every device exchanges one byte with every other one, as the next collective
  // of a training step would: a device that fails after its last exchange of the plan is then
  // noticed by every other device too.
  bool finish_together = false;
  // A device's kernel backend (default: the CPU backend).
  std::function<std::unique_ptr<KernelBackend>(int32_t device)> make_backend = {};
  // The plan a device runs (default: the whole plan); an error is that device's own failure.
  std::function<Result<Plan>(int32_t device)> part_of = {};
  // Wraps a device's communicator (default: used as is).
  std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>, int32_t device)>
      wrap_comm = {};
};

// One local tensor of `tokens` x `inner` values in a storage dtype, rows `inner + padding` apart.
class LocalBuffer {
 public:
  LocalBuffer(int64_t tokens, std::initializer_list<int64_t> inner, DType dtype, int64_t padding)
      : dtype_(dtype), tokens_(tokens), inner_(inner), padding_(padding) {
    width_ = 1;
    for (int64_t d : inner_) width_ *= d;
    bytes_.resize(static_cast<size_t>(tokens * (width_ + padding) * BytesPerElement(dtype)));
  }
  // Row t holds values [t * width, (t + 1) * width) of `from` (rounded to the dtype).
  void Fill(const std::vector<float>& from) {
    for (int64_t t = 0; t < tokens_; ++t) {
      for (int64_t i = 0; i < width_; ++i) {
        StoreElement(bytes_.data(), dtype_, t * (width_ + padding_) + i, from[t * width_ + i]);
      }
    }
  }
  std::vector<float> Read() const {
    std::vector<float> out(static_cast<size_t>(tokens_ * width_));
    for (int64_t t = 0; t < tokens_; ++t) {
      for (int64_t i = 0; i < width_; ++i) {
        out[t * width_ + i] = LoadElement(bytes_.data(), dtype_, t * (width_ + padding_) + i);
      }
    }
    return out;
  }
  TensorView View() {
    TensorView v{.data = bytes_.data(), .dtype = dtype_,
                 .rank = static_cast<int32_t>(inner_.size() + 1)};
    v.shape[0] = tokens_;
    v.strides[0] = width_ + padding_;
    int64_t stride = width_;
    for (size_t d = 0; d < inner_.size(); ++d) {
      v.shape[d + 1] = inner_[d];
      stride /= inner_[d];
      v.strides[d + 1] = stride;
    }
    return v;
  }

 private:
  DType dtype_;
  int64_t tokens_;
  std::vector<int64_t> inner_;
  int64_t padding_;
  int64_t width_ = 1;
  std::vector<std::byte> bytes_;
};

// One byte to and from every other device.
inline Status FinishTogether(Communicator& comm) {
  constexpr int32_t kFinishExchange = 1 << 20;  // far from the programs' own ids
  std::vector<std::byte> out(static_cast<size_t>(comm.size()), std::byte{1});
  std::vector<std::byte> in(static_cast<size_t>(comm.size()));
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  for (int32_t peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    sends.push_back({DeviceId{peer}, {{&out[static_cast<size_t>(peer)], 1}}});
    recvs.push_back({DeviceId{peer}, {{&in[static_cast<size_t>(peer)], 1}}});
  }
  DCP_RETURN_IF_ERROR(comm.Launch(kFinishExchange, std::move(sends), std::move(recvs)));
  return comm.Wait(kFinishExchange);
}

// Forward then backward of one device on its dispatched tensors; outputs go back into `batch`
// under `mutex`.
inline Status RunOneDevice(const Plan& plan, int32_t d, BatchTensors& batch,
                           KernelBackend& kernels, Communicator& comm,
                           const LocalRunOptions& options, std::mutex& mutex) {
  const AttentionShape& s = plan.shape;
  LocalTensors local;
  {
    std::lock_guard lock(mutex);
    local = LocalTensors::Dispatched(batch, plan, DeviceId{d});
  }
  DCP_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                       Executor::Create(plan, DeviceId{d}, kernels, comm));
  const int64_t L = executor->local_tokens();
  const DType dt = options.dtype;
  const int64_t pad = options.token_padding;
  LocalBuffer q(L, {s.heads, s.head_dim}, dt, pad), kv(L, {2, s.kv_heads, s.head_dim}, dt, pad),
      o(L, {s.heads, s.head_dim}, dt, pad), d_o(L, {s.heads, s.head_dim}, dt, pad),
      dq(L, {s.heads, s.head_dim}, dt, pad), dkv(L, {2, s.kv_heads, s.head_dim}, dt, pad),
      lse(L, {s.heads}, DType::kFloat32, pad);
  q.Fill(local.q);
  kv.Fill(local.kv);
  d_o.Fill(local.d_o);
  DCP_RETURN_IF_ERROR(executor->Forward(q.View(), kv.View(), o.View(), lse.View()));
  DCP_RETURN_IF_ERROR(executor->Backward(q.View(), kv.View(), o.View(), lse.View(), d_o.View(),
                                         dq.View(), dkv.View()));
  local.o = o.Read();
  local.lse = lse.Read();
  local.dq = dq.Read();
  local.dkv = dkv.Read();
  if (options.finish_together) DCP_RETURN_IF_ERROR(FinishTogether(comm));
  std::lock_guard lock(mutex);
  local.Undispatch(plan, DeviceId{d}, batch);
  return Status::Ok();
}

// Every device of the whole `plan` on its own thread. Returns each device's status.
inline std::vector<Status> RunLocalDevices(const Plan& plan, BatchTensors& batch,
                                           const LocalRunOptions& options = {}) {
  const int32_t devices = plan.topology.devices();
  auto group = MakeLocalGroup({.size = devices, .timeout_s = options.timeout_s});
  if (!group.ok()) return std::vector<Status>(static_cast<size_t>(devices), group.status());
  std::vector<std::unique_ptr<Communicator>> comms = std::move(group).value();
  std::vector<Status> status(static_cast<size_t>(devices));
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int32_t d = 0; d < devices; ++d) {
    if (options.wrap_comm) comms[d] = options.wrap_comm(std::move(comms[d]), d);
    threads.emplace_back([&, d] {
      std::unique_ptr<KernelBackend> kernels =
          options.make_backend ? options.make_backend(d) : MakeCpuBackend();
      Result<Plan> part = options.part_of ? options.part_of(d) : Result<Plan>(plan);
      Status s = part.ok() ? RunOneDevice(*part, d, batch, *kernels, *comms[d], options, mutex)
                           : part.status();
      if (!s.ok()) comms[d]->Fail(s);
      status[static_cast<size_t>(d)] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

// The first error that is not a CommFailure caused by another device's failure, else the first
// error, else OK.
inline Status RootCause(const std::vector<Status>& status) {
  for (const Status& s : status) {
    if (!s.ok() && s.code() != StatusCode::kCommFailure) return s;
  }
  for (const Status& s : status) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace dcp::testing
