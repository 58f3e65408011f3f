// SPDX-License-Identifier: Apache-2.0
// The runtime: attention kernels, communicators and the executor that runs a device's Program.
//
// Tensor layouts (all token-major, one piece = one data block's tokens for one head group):
//   Q, O, dO, dQ:   [tokens][heads_in_group][head_dim]
//   KV, dKV:        [tokens][2][kv_heads_in_group][head_dim]   (K first, then V)
//   LSE, Delta:     [tokens][heads_in_group], always fp32
// Storage is fp32 or bf16 (bf16 = the upper 16 bits of an IEEE fp32, round to nearest even);
// accumulators are fp32. Query head h of a group uses KV head h / (heads / kv_heads) of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "dcp/communicator.h"
#include "dcp/plan.h"
#include "dcp/status.h"

namespace dcp {

// ---------------------------------------------------------------------------------------------
// Numbers

// bf16 <-> fp32. Rounds to nearest even; NaN stays NaN.
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t value);

// Reads element i of a storage buffer of the given dtype as fp32; writes the same way.
float LoadElement(const std::byte* data, DType dtype, int64_t i);
void StoreElement(std::byte* data, DType dtype, int64_t i, float value);
// The same for the n elements from i on, in one vectorised loop.
void LoadRun(const std::byte* data, DType dtype, int64_t i, float* to, int64_t n);
void StoreRun(std::byte* data, DType dtype, int64_t i, const float* from, int64_t n);

// ---------------------------------------------------------------------------------------------
// Kernels (src/runtime/cpu). The CPU kernels are the reference later kernels are tested against.

struct TileShape {
  int64_t q_tokens = 0;   // rows of the tile
  int64_t kv_tokens = 0;  // columns of the tile
  int64_t heads = 0;      // query heads of the group
  int64_t kv_heads = 0;   // KV heads of the group; divides heads
  int64_t head_dim = 0;
};

// Forward attention of one tile, merged by log-sum-exp into fp32 accumulators (o [q_tokens]
// [heads][head_dim], lse [q_tokens][heads]). q and kv are in `dtype` storage. Row i attends to
// column j iff some slice covers (i, j) (tile coordinates, columns clipped to the tile). Rows the
// tile does not allow leave the accumulators unchanged; an accumulator that never receives
// anything stays O = 0, LSE = -inf. `scale` multiplies q.k before the softmax.
void AttendForward(float* o, float* lse, const std::byte* q, const std::byte* kv, DType dtype,
                   const TileShape& shape, std::span<const Slice> slices, float scale);

// Backward attention of one tile: adds this tile's contributions to fp32 dq [q_tokens][heads]
// [head_dim] and dkv [kv_tokens][2][kv_heads][head_dim]. lse is the final forward LSE and delta
// = rowsum(O * dO), both fp32 [q_tokens][heads]; q, kv, d_o are in `dtype` storage.
void AttendBackward(float* dq, float* dkv, const std::byte* q, const std::byte* kv,
                    const std::byte* d_o, const float* lse, const float* delta, DType dtype,
                    const TileShape& shape, std::span<const Slice> slices, float scale);

}  // namespace dcp

namespace dcp {

// ---------------------------------------------------------------------------------------------
// Executor

// The tensors of a whole batch in fp32, token-major over the packed batch (sequences one after
// the other): q, o, d_o, dq [tokens][heads][head_dim]; k, v, dk, dv [tokens][kv_heads][head_dim];
// lse [tokens][heads]. Devices read and write only the pieces they own, so one BatchTensors can be
// shared by the threads of an in-process run.
struct BatchTensors {
  std::vector<float> q, k, v, d_o;  // inputs
  std::vector<float> o, lse;        // forward outputs (and backward inputs)
  std::vector<float> dq, dk, dv;    // backward outputs

  // Zeroed tensors sized for the plan's batch and shape.
  static BatchTensors ZerosFor(const Plan& plan);
};

struct ExecutorOptions {
  double softmax_scale = 0;  // 0 means 1 / sqrt(head_dim)
};

// Where one device's execution of one program spent its time (seconds, wall clock).
struct ExecutionProfile {
  double total = 0;
  double attention = 0;    // BlockwiseAttention kernels
  double reduction = 0;    // BlockwiseReduction and BlockwiseCopy kernels
  double communication = 0;  // CommLaunch (packing included) and CommWait (unpacking included)
  // Everything else: gathering inputs, scattering outputs, slot allocation, dispatch.
  double Overhead() const { return total - attention - reduction - communication; }
};

// Runs one device's program: gathers its input pieces from `tensors` (rounded to the storage
// dtype), executes the instructions with `comm`, scatters its output pieces back. Returns the
// first error; on error it calls comm.Fail so the other ranks stop too.
Status ExecuteProgram(const Plan& plan, const Program& program, Communicator& comm,
                      BatchTensors& tensors, const ExecutorOptions& options,
                      ExecutionProfile* profile = nullptr);

// Runs the forward programs of all devices, then the backward ones, each device on its own
// thread with an in-process communicator group. Returns the first root-cause error.
// `profiles`, when given, receives one profile per device and pass: [pass][device].
Status RunPlanInProcess(const Plan& plan, BatchTensors& tensors, const ExecutorOptions& options,
                        double comm_timeout_s = 30.0,
                        std::vector<std::vector<ExecutionProfile>>* profiles = nullptr);

}  // namespace dcp

namespace dcp {

// ---------------------------------------------------------------------------------------------
// Dense reference

// Single-device attention of the whole batch, computed densely per sequence in double precision
// straight from the masks (no blocks, no plan, no kernels), with the textbook backward (dS = P *
// (dP - rowsum(P * dP))). Reads q, k, v, d_o of `tensors`, writes o, lse, dq, dk, dv. Fully masked
// rows give O = 0, LSE = -inf and zero gradients. REQUIRES: tensors sized for the batch.
void DenseAttention(const Batch& batch, double softmax_scale, BatchTensors& tensors);

// Error of `actual` against `expected`: the largest absolute difference, and that divided by the
// largest |expected| (norm-relative). Entries that are -inf in both count as equal; -inf in only
// one is an infinite error.
struct TensorError {
  double max_abs = 0;
  double relative = 0;
};
TensorError CompareTensors(const std::vector<float>& actual, const std::vector<float>& expected);

}  // namespace dcp
