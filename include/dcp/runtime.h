// SPDX-License-Identifier: Apache-2.0
// The runtime: the rank-local executor (executor.h) over kernel backends (kernels.h) and
// communicators (communicator.h), the token map (token_map.h), and on top of them two whole-batch
// conveniences for tests and `dcp run`: running a plan on in-process devices, and the dense
// single-device reference.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/communicator.h"
#include "dcp/executor.h"
#include "dcp/kernels.h"
#include "dcp/plan.h"
#include "dcp/status.h"
#include "dcp/token_map.h"

namespace dcp {

// The tensors of a whole batch in fp32, token-major over the packed batch (sequences one after
// the other): q, o, d_o, dq [tokens][heads][head_dim]; k, v, dk, dv [tokens][kv_heads][head_dim];
// lse [tokens][heads]. A convenience for tests and `dcp run`: the executor never sees it.
struct BatchTensors {
  std::vector<float> q, k, v, d_o;  // inputs
  std::vector<float> o, lse;        // forward outputs (and backward inputs)
  std::vector<float> dq, dk, dv;    // backward outputs

  // Zeroed tensors sized for the plan's batch and shape.
  static BatchTensors ZerosFor(const Plan& plan);
};

// One device's local tensors (executor.h layouts, fp32), dispatched from a whole batch's.
struct LocalTensors {
  std::vector<float> q, kv, o, lse, d_o, dq, dkv;
  // q, kv and d_o of `device`'s tokens, o, lse, dq and dkv zeroed.
  static LocalTensors Dispatched(const BatchTensors& batch, const Plan& plan, DeviceId device);
  // Writes o, lse, dq and dkv back into `batch` at the device's tokens.
  void Undispatch(const Plan& plan, DeviceId device, BatchTensors& batch) const;
};

// Runs forward then backward on every device of a whole plan, each device an Executor on its own
// thread with the CPU kernels and an in-process communicator group: dispatches every device's
// tokens from `tensors`, and writes o, lse, dq, dk and dv back. Returns the first root-cause
// error. `profiles`, when given, receives one profile per pass and device: [pass][device].
Status RunPlanInProcess(const Plan& plan, BatchTensors& tensors, const ExecutorOptions& options,
                        double comm_timeout_s = 30.0,
                        std::vector<std::vector<ExecutionProfile>>* profiles = nullptr);

// Single-device attention of the whole batch, computed densely per sequence in double precision
// straight from the masks (no blocks, no plan, no kernels), with the textbook backward (dS = P *
// (dP - Delta)), Delta = rowsum(dO * O) of O as stored in the batch's dtype: the backward of a
// stored forward, as dcp and FlashAttention compute it. Reads q, k, v, d_o of `tensors`, writes
// o, lse, dq, dk, dv. Fully masked rows give O = 0, LSE = -inf and zero gradients. REQUIRES:
// tensors sized for the batch.
void DenseAttention(const Batch& batch, double softmax_scale, BatchTensors& tensors);

// How far an output of a run may be from DenseAttention's, element by element:
// |actual - expected| <= atol + rtol * |expected|. OutputTolerance derives both
// (docs/architecture.md, "Numerics").
struct ElementTolerance {
  double rtol = 0;
  double atol = 0;
};

// The outputs of a run, in BatchTensors order.
enum class Output { kO, kLse, kDq, kDk, kDv };
inline constexpr Output kOutputs[] = {Output::kO, Output::kLse, Output::kDq, Output::kDk,
                                      Output::kDv};
const char* ToString(Output output);
// The tensor of `output` in `tensors`.
const std::vector<float>& OutputOf(const BatchTensors& tensors, Output output);

// The tolerance of `output` stored in `dtype` (lse is fp32 in both), given the whole expected
// tensor: rtol counts the roundings on the way from the exact inputs to the output (derivation in
// reference.cc), atol is rtol times the root-mean-square of `expected`, which covers elements that
// are sums of rounded partial results cancelling to near zero. LSE: 1e-5 * (1 + |expected|).
ElementTolerance OutputTolerance(Output output, DType dtype, const std::vector<float>& expected);

// Error of `actual` against `expected`: the largest absolute difference, that divided by the
// largest |expected| (norm-relative), and the largest ratio of an element's difference to its
// bound under `tolerance` (within the tolerance when at most 1) with that element's index, and the
// tolerance itself. Entries
// that are -inf in both count as equal; -inf in only one, NaN, or a size mismatch is an infinite
// error.
struct TensorError {
  double max_abs = 0;
  double relative = 0;
  double worst = 0;
  int64_t worst_index = -1;
  ElementTolerance tolerance;
  bool within() const { return worst <= 1.0; }
};
TensorError CompareTensors(const std::vector<float>& actual, const std::vector<float>& expected,
                           ElementTolerance tolerance);

// Every output of `run` against the same output of `reference` (both whole-batch tensors of a
// batch stored in `dtype`), in Output order.
std::vector<TensorError> CompareOutputs(const BatchTensors& run, const BatchTensors& reference,
                                        DType dtype);

}  // namespace dcp
