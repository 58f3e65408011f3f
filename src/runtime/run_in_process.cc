// SPDX-License-Identifier: Apache-2.0
// Whole-batch conveniences on top of the rank-local executor: dispatching a batch's tensors to
// devices and back, and running a whole plan on in-process devices.
#include <fmt/format.h>

#include <algorithm>
#include <new>
#include <numeric>
#include <system_error>
#include <thread>

#include "dcp/runtime.h"

namespace dcp {
namespace {

// k and v ([tokens][kv_heads][dim] each) interleaved into kv ([tokens][2][kv_heads][dim]).
std::vector<float> Interleave(const std::vector<float>& k, const std::vector<float>& v,
                              int64_t width) {
  std::vector<float> kv(2 * k.size());
  for (size_t t = 0; t < k.size() / static_cast<size_t>(width); ++t) {
    std::copy_n(k.begin() + t * width, width, kv.begin() + 2 * t * width);
    std::copy_n(v.begin() + t * width, width, kv.begin() + (2 * t + 1) * width);
  }
  return kv;
}

}  // namespace

BatchTensors BatchTensors::ZerosFor(const Plan& plan) {
  const int64_t tokens = std::accumulate(plan.seqlens.begin(), plan.seqlens.end(), int64_t{0});
  const AttentionShape& s = plan.shape;
  const auto n = [&](int64_t heads, int64_t dim) {
    return static_cast<size_t>(tokens * heads * dim);
  };
  BatchTensors t;
  t.q = t.o = t.d_o = t.dq = std::vector<float>(n(s.heads, s.head_dim), 0.f);
  t.k = t.v = t.dk = t.dv = std::vector<float>(n(s.kv_heads, s.head_dim), 0.f);
  t.lse = std::vector<float>(n(s.heads, 1), 0.f);
  return t;
}

LocalTensors LocalTensors::Dispatched(const BatchTensors& batch, const Plan& plan,
                                      DeviceId device) {
  const TokenMap map = TokenMap::Of(plan);
  const AttentionShape& s = plan.shape;
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  const auto dispatch = [&](const std::vector<float>& global, int64_t width) {
    return Dispatch<float>(global, width, map, device);
  };
  LocalTensors t;
  t.q = dispatch(batch.q, q_width);
  t.d_o = dispatch(batch.d_o, q_width);
  t.kv = Interleave(dispatch(batch.k, kv_width), dispatch(batch.v, kv_width), kv_width);
  t.o = t.dq = std::vector<float>(t.q.size(), 0.f);
  t.dkv = std::vector<float>(t.kv.size(), 0.f);
  t.lse = std::vector<float>(static_cast<size_t>(map.LocalTokens(device) * s.heads), 0.f);
  return t;
}

void LocalTensors::Undispatch(const Plan& plan, DeviceId device, BatchTensors& batch) const {
  const TokenMap map = TokenMap::Of(plan);
  const AttentionShape& s = plan.shape;
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  dcp::Undispatch<float>(o, q_width, map, device, batch.o);
  dcp::Undispatch<float>(lse, s.heads, map, device, batch.lse);
  dcp::Undispatch<float>(dq, q_width, map, device, batch.dq);
  // dkv [tokens][2][kv_width]: K halves to dk, V halves to dv.
  std::vector<float> dk(dkv.size() / 2), dv(dkv.size() / 2);
  for (size_t t = 0; t < dk.size() / static_cast<size_t>(kv_width); ++t) {
    std::copy_n(dkv.begin() + 2 * t * kv_width, kv_width, dk.begin() + t * kv_width);
    std::copy_n(dkv.begin() + (2 * t + 1) * kv_width, kv_width, dv.begin() + t * kv_width);
  }
  dcp::Undispatch<float>(dk, kv_width, map, device, batch.dk);
  dcp::Undispatch<float>(dv, kv_width, map, device, batch.dv);
}

Status RunPlanInProcess(const Plan& plan, BatchTensors& tensors, const ExecutorOptions& options,
                        double comm_timeout_s,
                        std::vector<std::vector<ExecutionProfile>>* profiles) {
  const int32_t devices = plan.topology.devices();
  if (plan.part_device != -1 || static_cast<int32_t>(plan.forward.size()) != devices ||
      static_cast<int32_t>(plan.backward.size()) != devices) {
    return Status::InvalidArgument("running in process needs a whole plan");
  }
  if (profiles != nullptr) profiles->assign(2, std::vector<ExecutionProfile>(devices));
  DCP_ASSIGN_OR_RETURN(
      std::vector<std::unique_ptr<Communicator>> group,
      MakeLocalGroup(LocalGroupOptions{.size = devices, .timeout_s = comm_timeout_s}));
  const std::unique_ptr<KernelBackend> kernels = MakeCpuBackend();
  const AttentionShape& s = plan.shape;
  std::vector<Status> status(static_cast<size_t>(devices));
  std::vector<LocalTensors> local(static_cast<size_t>(devices));
  // Every device on its own thread, as they talk to each other. Running out of memory or threads
  // fails the whole group (the started devices then stop waiting for the others) with a Status.
  const auto fail_all = [&](const Status& why) {
    for (const std::unique_ptr<Communicator>& c : group) c->Fail(why);
  };
  std::vector<std::thread> threads;
  Status start_failure;
  for (int32_t d = 0; d < devices; ++d) {
    const auto run_device = [&, d] {
      const DeviceId device{d};
      LocalTensors& t = local[static_cast<size_t>(d)];
      t = LocalTensors::Dispatched(tensors, plan, device);
      Result<std::unique_ptr<Executor>> executor =
          Executor::Create(plan, device, *kernels, *group[static_cast<size_t>(d)], options);
      if (!executor.ok()) {
        group[static_cast<size_t>(d)]->Fail(executor.status());
        status[static_cast<size_t>(d)] = executor.status();
        return;
      }
      Executor& e = **executor;
      const int64_t L = e.local_tokens();
      const auto q_like = [&](std::vector<float>& v) {
        return TensorView::Contiguous(v.data(), DType::kFloat32, {L, s.heads, s.head_dim});
      };
      const auto kv_like = [&](std::vector<float>& v) {
        return TensorView::Contiguous(v.data(), DType::kFloat32, {L, 2, s.kv_heads, s.head_dim});
      };
      const TensorView lse = TensorView::Contiguous(t.lse.data(), DType::kFloat32, {L, s.heads});
      Status st = e.Forward(q_like(t.q), kv_like(t.kv), q_like(t.o), lse);
      if (profiles != nullptr) (*profiles)[0][d] = e.last_profile();
      if (st.ok()) {
        st = e.Backward(q_like(t.q), kv_like(t.kv), q_like(t.o), lse, q_like(t.d_o), q_like(t.dq),
                        kv_like(t.dkv));
        if (profiles != nullptr) (*profiles)[1][d] = e.last_profile();
      }
      status[static_cast<size_t>(d)] = st;
    };
    const auto guarded = [&, d, run_device] {
      try {
        run_device();
      } catch (const std::bad_alloc&) {
        status[static_cast<size_t>(d)] =
            Status::InvalidArgument(fmt::format("device {}: out of memory", d));
        fail_all(status[static_cast<size_t>(d)]);
      }
    };
    try {
      threads.emplace_back(guarded);
    } catch (const std::system_error& e) {
      start_failure = Status::InvalidArgument(fmt::format(
          "cannot start the thread of device {} of {} ({}): running in process takes a thread "
          "per device; use fewer devices or an MPI launch",
          d, devices, e.what()));
      fail_all(start_failure);
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (!start_failure.ok()) return start_failure;
  // The root cause, not the failures it caused on the other ranks.
  for (const Status& st : status) {
    if (!st.ok() && st.code() != StatusCode::kCommFailure) return st;
  }
  for (const Status& st : status) {
    if (!st.ok()) return st;
  }
  for (int32_t d = 0; d < devices; ++d) {
    local[static_cast<size_t>(d)].Undispatch(plan, DeviceId{d}, tensors);
  }
  return Status::Ok();
}

}  // namespace dcp
