// SPDX-License-Identifier: Apache-2.0
// Kernels: the only way the executor touches tensor data. A KernelBackend owns the memory the
// executor's buffer slots live in and runs every computation on it: copies between the caller's
// tensors and slots, tile attention forward and backward, the log-sum-exp merge, partial sums and
// Delta = rowsum(O * dO). The CPU kernels (MakeCpuBackend) are the first backend and the reference
// later ones are tested against; a torch or CUDA backend plugs in without touching the executor.
//
// Slot layouts (all token-major, one piece = one data block's tokens for one head group):
//   Q, O, dO, dQ:   [tokens][heads_in_group][head_dim]
//   KV, dKV:        [tokens][2][kv_heads_in_group][head_dim]   (K first, then V)
//   LSE, Delta:     [tokens][heads_in_group], always fp32
// Storage is fp32 or bf16 (bf16 = the upper 16 bits of an IEEE fp32, round to nearest even);
// accumulators are fp32. Query head h of a group uses KV head h / (heads / kv_heads) of it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "dcp/batch.h"
#include "dcp/mask.h"
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
// Tensor views

// A strided view of memory the caller owns (rank 1 to 4; strides in elements, any sign-free
// layout). The view does not own its data.
struct TensorView {
  static constexpr int kMaxRank = 4;
  std::byte* data = nullptr;
  DType dtype = DType::kFloat32;
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> shape = {};
  std::array<int64_t, kMaxRank> strides = {};

  // A dense row-major view of `shape`.
  static TensorView Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  // The same view with explicit strides (one per dimension).
  static TensorView Strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  int64_t elements() const;  // product of the shape
  // Dimension `dim` cut to [begin, begin + count). REQUIRES: within the shape.
  TensorView Slice(int32_t dim, int64_t begin, int64_t count) const;
  // "[3, 8, 128] bf16 strides [1024, 128, 1]", for messages.
  std::string ToString() const;
};

// InvalidArgument naming `what` unless `view` has this rank and shape and one of `dtypes`, data
// for its elements and non-negative strides.
Status CheckView(std::string_view what, const TensorView& view, std::span<const int64_t> shape,
                 std::initializer_list<DType> dtypes);

// ---------------------------------------------------------------------------------------------
// Kernel arguments

struct TileShape {
  int64_t q_tokens = 0;   // rows of the tile
  int64_t kv_tokens = 0;  // columns of the tile
  int64_t heads = 0;      // query heads of the group
  int64_t kv_heads = 0;   // KV heads of the group; divides heads
  int64_t head_dim = 0;
};

// One tile of a forward call: merges softmax(q k^T * scale) v into fp32 accumulators o
// [q_tokens][heads][head_dim] and lse [q_tokens][heads] by log-sum-exp.
struct ForwardTile {
  float* o = nullptr;
  float* lse = nullptr;
  const std::byte* q = nullptr;   // storage dtype
  const std::byte* kv = nullptr;  // storage dtype
  TileShape shape;
  std::span<const Slice> slices;  // the mask inside the tile, tile coordinates
};

// One tile of a backward call: adds its contributions to fp32 dq [q_tokens][heads][head_dim] and
// dkv [kv_tokens][2][kv_heads][head_dim]. lse is the final forward LSE and delta = rowsum(O * dO).
struct BackwardTile {
  float* dq = nullptr;
  float* dkv = nullptr;
  const std::byte* q = nullptr;
  const std::byte* kv = nullptr;
  const std::byte* d_o = nullptr;
  const float* lse = nullptr;
  const float* delta = nullptr;
  TileShape shape;
  std::span<const Slice> slices;
};

// A slot: `elements` values of `dtype` at `data`, in the backend's memory.
struct SlotRef {
  std::byte* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t elements = 0;
};

// Memory of a backend (host memory for the CPU backend, device memory for others). Frees itself.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual std::byte* data() = 0;
  virtual size_t bytes() const = 0;
};

// ---------------------------------------------------------------------------------------------
// The backend interface

// Thread safety: one thread per KernelBackend object at a time, unless a backend says more (the
// CPU backend: calls on distinct output buffers may run concurrently from any threads).
class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  KernelBackend(const KernelBackend&) = delete;
  KernelBackend& operator=(const KernelBackend&) = delete;

  virtual std::string_view Name() const = 0;

  // `bytes` of this backend's memory, 64-byte aligned, contents undefined.
  virtual Result<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) = 0;

  // dst = src element by element, converting between fp32 and bf16 (rounding to nearest even).
  // Same rank and shape; either may be strided, neither may overlap the other. Moves a piece
  // between a caller's tensor and a slot, or a slot to another.
  virtual Status Copy(const TensorView& dst, const TensorView& src) = 0;

  // The tiles of one BlockwiseAttention instruction, in order (several may accumulate into one
  // buffer: a backend must not race on it). Rows a tile does not allow leave its accumulators
  // unchanged; an accumulator that never receives anything stays O = 0, LSE = -inf. `scale`
  // multiplies q.k before the softmax; q, kv and d_o are in `dtype`. NaN is never lost: a row
  // whose allowed scores hold a NaN or +inf gets NaN in O and LSE, and in the backward NaN in
  // dQ and in the dK and dV of its allowed columns, as the dense softmax gives (NaN may also
  // reach more elements of the same tile, through the products).
  virtual Status AttendForward(std::span<const ForwardTile> tiles, DType dtype, float scale) = 0;
  virtual Status AttendBackward(std::span<const BackwardTile> tiles, DType dtype,
                                float scale) = 0;

  // (o, lse) = log-sum-exp merge of the (sources[i], lse_sources[i]) pairs, in fp32, over `rows`
  // rows (tokens x heads) of `head_dim` values; no sources give O = 0, LSE = -inf; a source
  // row with LSE NaN makes the row NaN. The destination may be one of the sources.
  virtual Status MergeLse(SlotRef o, float* lse, std::span<const SlotRef> sources,
                          std::span<const float* const> lse_sources, int64_t rows,
                          int64_t head_dim) = 0;
  // dst = sum of the sources (dst.elements values, fp32 arithmetic); no sources give zeros. The
  // destination may be one of the sources.
  virtual Status Sum(SlotRef dst, std::span<const SlotRef> sources) = 0;
  // delta[r] = sum over d of o[r][d] * d_o[r][d], fp32, for `rows` rows of `head_dim` values.
  virtual Status Delta(float* delta, SlotRef o, SlotRef d_o, int64_t rows, int64_t head_dim) = 0;

 protected:
  KernelBackend() = default;
};

// The CPU kernels: FlashAttention's tiling with OpenBLAS SGEMM, fp32 arithmetic. They start no
// threads and change no process-wide state: every GEMM runs on the calling thread.
std::unique_ptr<KernelBackend> MakeCpuBackend();

// The CPU tile kernels themselves, one tile per call (ForwardTile / BackwardTile semantics).
void AttendForward(float* o, float* lse, const std::byte* q, const std::byte* kv, DType dtype,
                   const TileShape& shape, std::span<const Slice> slices, float scale);
void AttendBackward(float* dq, float* dkv, const std::byte* q, const std::byte* kv,
                    const std::byte* d_o, const float* lse, const float* delta, DType dtype,
                    const TileShape& shape, std::span<const Slice> slices, float scale);

}  // namespace dcp
