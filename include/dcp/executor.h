// SPDX-License-Identifier: Apache-2.0
// The rank-local executor: runs one device's forward and backward programs of one plan on that
// device's own tokens. A training framework makes one Executor per rank and plan, and calls it
// once per attention layer per step (one Forward, later one Backward with what Forward kept).
//
// Local tensors are in the plan's token-map order (include/dcp/token_map.h), L = the device's
// local tokens:
//   q, o, d_o, dq:  [L, heads, head_dim]
//   kv, dkv:        [L, 2, kv_heads, head_dim]   (K, then V)
//   lse:            [L, heads], fp32
// q, kv, o, d_o, dq and dkv may each be fp32 or bf16 and strided (TensorView); inputs are
// rounded to the plan's storage dtype, outputs converted from it (exactly, for fp32 outputs).
// Nothing on the execution path holds another device's tokens: the executor's memory is its
// buffer slots, sized from its programs, in the kernel backend's memory.
//
// Thread safety: one thread per Executor; executors of different plans (and devices) may live in
// one process and run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dcp/communicator.h"
#include "dcp/kernels.h"
#include "dcp/plan.h"
#include "dcp/status.h"
#include "dcp/token_map.h"

namespace dcp {

struct ExecutorOptions {
  double softmax_scale = 0;  // 0 means 1 / sqrt(head_dim)
};

// Where one call spent its time (seconds, wall clock).
struct ExecutionProfile {
  double total = 0;
  double attention = 0;      // BlockwiseAttention kernels
  double reduction = 0;      // BlockwiseReduction and BlockwiseCopy kernels
  double copies = 0;         // moving the local tensors into slots and results out of them
  double communication = 0;  // CommLaunch and CommWait
  // Everything else: instruction dispatch, building kernel arguments, checks.
  double Overhead() const { return total - attention - reduction - copies - communication; }
};

class Executor {
 public:
  // An executor of `device`'s programs in `plan` (the whole plan or that device's part). The
  // kernels and the communicator (rank `device` of a group of the plan's devices) must outlive
  // the executor. InvalidArgument when the plan has no programs for the device, the group does
  // not match, or the options are bad; the backend's error when the workspace cannot be had.
  static Result<std::unique_ptr<Executor>> Create(const Plan& plan, DeviceId device,
                                                  KernelBackend& kernels, Communicator& comm,
                                                  const ExecutorOptions& options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  DeviceId device() const;
  int64_t local_tokens() const;
  const std::vector<TokenRun>& token_runs() const;  // this device's entry of the token map
  size_t workspace_bytes() const;                   // the slots of the larger pass

  // Forward attention of the local queries: writes o and lse. On any error (bad views included)
  // the communicator's group is told this rank failed, so no other rank waits for it.
  Status Forward(const TensorView& q, const TensorView& kv, const TensorView& o,
                 const TensorView& lse);
  // Backward: from the forward's q, kv, o, lse and the output gradient d_o, writes dq and dkv.
  Status Backward(const TensorView& q, const TensorView& kv, const TensorView& o,
                  const TensorView& lse, const TensorView& d_o, const TensorView& dq,
                  const TensorView& dkv);

  const ExecutionProfile& last_profile() const;

 private:
  class Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dcp
