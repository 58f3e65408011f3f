// SPDX-License-Identifier: Apache-2.0
// CPU attention kernels and bf16 numbers (see include/dcp/kernels.h). The kernels follow
// FlashAttention's tiling with OpenBLAS SGEMM for the products (see "Kernels" below), fp32
// throughout. Thread safety: calls on distinct output buffers may run concurrently; each thread
// has its own scratch memory, and the kernels start no threads (every GEMM runs on the caller).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "dcp/kernels.h"

namespace dcp {

// ---------------------------------------------------------------------------------------------
// Numbers

uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    // Keep the sign and set the quiet bit, so a NaN whose payload sits only in the low 16 bits
    // does not truncate to infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow past the
  // largest finite value carries into the exponent and gives infinity, as rounding should.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

float LoadElement(const std::byte* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: {
      float value;
      std::memcpy(&value, data + i * 4, sizeof(value));
      return value;
    }
    case DType::kBFloat16: {
      uint16_t value;
      std::memcpy(&value, data + i * 2, sizeof(value));
      return Bf16ToFloat(value);
    }
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
  return 0.0f;
}

void StoreElement(std::byte* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(data + i * 4, &value, sizeof(value));
      return;
    case DType::kBFloat16: {
      const uint16_t bits = FloatToBf16(value);
      std::memcpy(data + i * 2, &bits, sizeof(bits));
      return;
    }
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

void LoadRun(const std::byte* data, DType dtype, int64_t i, float* to, int64_t n) {
  if (dtype == DType::kFloat32) {
    std::memcpy(to, data + i * 4, static_cast<size_t>(n) * 4);
    return;
  }
  DCP_CHECK(dtype == DType::kBFloat16, "unknown dtype {}", static_cast<int>(dtype));
  const std::byte* from = data + i * 2;
  for (int64_t k = 0; k < n; ++k) {
    uint16_t bits;
    std::memcpy(&bits, from + k * 2, sizeof(bits));
    to[k] = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  }
}

void StoreRun(std::byte* data, DType dtype, int64_t i, const float* from, int64_t n) {
  if (dtype == DType::kFloat32) {
    std::memcpy(data + i * 4, from, static_cast<size_t>(n) * 4);
    return;
  }
  DCP_CHECK(dtype == DType::kBFloat16, "unknown dtype {}", static_cast<int>(dtype));
  std::byte* to = data + i * 2;
  for (int64_t k = 0; k < n; ++k) {  // FloatToBf16, branch-free so it vectorises
    const uint32_t bits = std::bit_cast<uint32_t>(from[k]);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const auto out = static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded);
    std::memcpy(to + k * 2, &out, sizeof(out));
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels
//
// FlashAttention's schedule on a CPU. A tile is cut into chunks of query tokens; a chunk and one
// KV head hold at most kChunkRows query rows (token, query head of that KV head), which are
// gathered into an fp32 row-major panel. The columns the chunk can see (the union of its rows'
// allowed ranges, small gaps filled) are cut into pieces of at most kPieceColumns. Per piece:
// S = scale * Q K^T with SGEMM, the mask applied row by row (only allowed columns get exp, the
// rest of the piece gets 0), then the products with V (forward: online softmax, O += P V;
// backward: P from the final LSE, dV += P^T dO, dP = dO V^T, dS = P * (dP - Delta), dQ += dS K,
// dK += dS^T Q). Everything accumulates in fp32. Chunks and pieces no allowed pair reaches are
// never computed. K and V are read in place when they are fp32 (bf16 is converted once per call),
// dK and dV are accumulated in place.

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// Query rows (token, query head) per chunk: the M of every GEMM and the height of every panel
// (unless a KV head has more query heads than this; then a chunk is one token).
constexpr int64_t kChunkRows = 128;
// Columns per piece: the width of the S (and dP) panels, so a panel stays in L2.
constexpr int64_t kPieceColumns = 256;
// Allowed ranges of a chunk closer than this many columns are computed as one span (the gap is
// masked) instead of in separate GEMMs.
constexpr int64_t kSegmentGap = 32;
// Independent partial sums in reductions; enough lanes for one AVX-512 register of floats.
constexpr int64_t kLanes = 16;

// A half-open range of allowed columns of one row, in tile coordinates.
struct ColumnRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Runs the enclosed OpenBLAS calls on the calling thread only, and leaves no trace. The kernels
// link the OpenMP build of OpenBLAS (CMakeLists.txt), which takes each call's thread count from
// the calling thread's OpenMP setting: one thread here, since the runtime already runs one thread
// per device; the thread's own setting is restored after the call. (Debian's OpenBLAS 0.3.21 has
// no per-call thread count; its pthreads build has only a process-wide one, and its serial build
// is not safe to call from several threads at once.)
class OneBlasThread {
 public:
  OneBlasThread() : before_(omp_get_max_threads()) {
    if (before_ != 1) omp_set_num_threads(1);
  }
  ~OneBlasThread() {
    if (before_ != 1) omp_set_num_threads(before_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  const int before_;
};

// C = alpha * op(A) op(B) + beta * C, row-major. Leading dimensions are raised to 1 so that empty
// matrices (head_dim 0) stay legal for cblas.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const OneBlasThread one_thread;
  auto i = [](int64_t value) { return static_cast<blasint>(std::max<int64_t>(value, 1)); };
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, i(lda), b, i(ldb), beta, c, i(ldc));
}

// exp(x) in fp32, written so that GCC vectorizes loops over it without -ffast-math: no branch and
// no float select (with -ftrapping-math, the default, GCC will not if-convert those). x = n ln2 +
// r with |r| <= ln2 / 2; exp(r) by the polynomial of Cephes' expf; 2^n built in the exponent bits.
// Relative error below 1e-7 for x in [-87.3, 88.3] (measured against double exp over every
// float there). Outside the range of normal results it gives 0 below (x < -87.7, -inf included)
// and +inf above (x > 88.3, NaN included).
inline float Exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // Adding 1.5 * 2^23 rounds to the nearest integer, which lands in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  const float shifted = x * kLog2e + kRound;
  const int32_t n =
      static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound));
  // All ones when 2^n is a normal float, else 0. Outside, the polynomial runs on x = n = 0 and the
  // result is scaled by 0 or +inf. n as a float comes from the same `shifted`, so it agrees with
  // the integer n whether or not the compiler fuses the multiply-add.
  const uint32_t in_range = 0u - static_cast<uint32_t>(static_cast<uint32_t>(n + 126) <= 253u);
  const float y = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & in_range);
  const float ny = std::bit_cast<float>(std::bit_cast<uint32_t>(shifted - kRound) & in_range);
  float r = y - ny * 0.693359375f;  // ln2 in two parts, the first exact in 9 bits
  r = r - ny * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const uint32_t overflow = static_cast<uint32_t>(~(n >> 31)) & 0x7f800000u;  // +inf if n > 0
  const uint32_t scale =
      ((static_cast<uint32_t>(n + 127) << 23) & in_range) | (overflow & ~in_range);
  return p * std::bit_cast<float>(scale);
}

// Floats as int32 keys in the same order (-inf < ... < -0 < +0 < ... < +inf < NaN): a negative
// float's magnitude bits are flipped, and a NaN of either sign (x86's arithmetic makes negative
// ones) takes the largest key. GCC vectorizes an integer max but not a float one (that needs
// -ffinite-math-only).
inline int32_t OrderedKey(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  const int32_t is_nan = -static_cast<int32_t>((bits & 0x7fffffff) > 0x7f800000);
  return ((bits ^ ((bits >> 31) & 0x7fffffff)) & ~is_nan) | (0x7fffffff & is_nan);
}
inline float FromOrderedKey(int32_t key) {
  return std::bit_cast<float>(key ^ ((key >> 31) & 0x7fffffff));
}

// max(x[0..n)), -inf when n is 0, NaN if some x is NaN.
inline float MaxOf(const float* __restrict x, int64_t n) {
  int32_t result = OrderedKey(kNegativeInfinity);
  for (int64_t j = 0; j < n; ++j) result = std::max(result, OrderedKey(x[j]));
  return FromOrderedKey(result);
}

// x[j] = exp(x[j] - shift) over n floats; returns their sum. Two loops, because GCC vectorizes
// each alone but not the two fused; fixed lanes of partial sums let it vectorize the sum without
// reassociating (no -ffast-math).
inline float ExpInPlaceAndSum(float* __restrict x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = Exp(x[j] - shift);
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += x[j];
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// Over n columns: p = exp(s - lse) into s, and dS = scale * p * (dP - Delta) into dp, except
// that dS is 0 where p rounds to 1. There the row's whole softmax mass sits on this column, so
// dP - Delta = sum over the other columns k of p_k (dP - dP_k) is below the fp32 resolution of dP,
// and what the subtraction would give is only the difference between the roundings of two
// summation orders of the same dot product (dP by SGEMM here, Delta = O . dO by the caller). A
// row with a single allowed column then gets exactly zero dQ and dK, as in exact arithmetic.
inline void SoftmaxGradient(float* __restrict s, float* __restrict dp, int64_t n, float lse,
                            float delta, float scale) {
  constexpr uint32_t kOne = 0x3f800000u;  // the bits of 1.0f
  for (int64_t j = 0; j < n; ++j) {
    const float p = Exp(s[j] - lse);
    s[j] = p;
    const float ds = scale * p * (dp[j] - delta);
    // An integer mask, not a float select, so that GCC vectorizes the loop (see Exp).
    const uint32_t keep = 0u - static_cast<uint32_t>(std::bit_cast<uint32_t>(p) != kOne);
    dp[j] = std::bit_cast<float>(std::bit_cast<uint32_t>(ds) & keep);
  }
}

inline void Zero(float* x, int64_t n) {
  if (n > 0) std::memset(x, 0, static_cast<size_t>(n) * sizeof(float));
}

// Converts `count` elements of `dtype` storage starting at element `first` into fp32.
void ToFloat(float* out, const std::byte* data, DType dtype, int64_t first, int64_t count) {
  switch (dtype) {
    case DType::kFloat32:
      if (count > 0) {
        std::memcpy(out, data + first * 4, static_cast<size_t>(count) * sizeof(float));
      }
      return;
    case DType::kBFloat16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, data + (first + i) * 2, sizeof(bits));
        out[i] = Bf16ToFloat(bits);
      }
      return;
  }
  DCP_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

// The slices that can allow some column of the tile, rows clipped to the tile. lo and hi are
// nondecreasing in the row (slope 0 or 1), so a slice whose hi at its last row is <= 0 or whose lo
// at its first row is >= kv_tokens allows nothing.
std::vector<Slice> RelevantSlices(std::span<const Slice> slices, const TileShape& shape) {
  std::vector<Slice> relevant;
  relevant.reserve(slices.size());
  for (Slice slice : slices) {
    slice.row_begin = std::max<int64_t>(slice.row_begin, 0);
    slice.row_end = std::min(slice.row_end, shape.q_tokens);
    if (slice.row_begin >= slice.row_end) continue;
    if (slice.hi.At(slice.row_end - 1) <= 0 || slice.lo.At(slice.row_begin) >= shape.kv_tokens) {
      continue;
    }
    relevant.push_back(slice);
  }
  return relevant;
}

// Merges sorted-by-begin ranges in place: ranges that overlap or lie fewer than `gap` columns
// apart become one.
void MergeSorted(std::vector<ColumnRange>& ranges, size_t first, int64_t gap) {
  if (ranges.size() - first < 2) return;
  size_t kept = first;
  for (size_t r = first + 1; r < ranges.size(); ++r) {
    if (ranges[r].begin - ranges[kept].end < gap) {
      ranges[kept].end = std::max(ranges[kept].end, ranges[r].end);
    } else {
      ranges[++kept] = ranges[r];
    }
  }
  ranges.resize(kept + 1);
}

// The allowed columns of every row of the tile: the union of the slices covering it, clipped to
// [0, kv_tokens), sorted and disjoint (overlapping or touching slices are merged).
class RowRanges {
 public:
  RowRanges(std::span<const Slice> slices, const TileShape& shape) {
    first_.reserve(static_cast<size_t>(shape.q_tokens) + 1);
    for (int64_t row = 0; row < shape.q_tokens; ++row) {
      first_.push_back(ranges_.size());
      const size_t row_first = ranges_.size();
      for (const Slice& slice : slices) {
        if (row < slice.row_begin || row >= slice.row_end) continue;
        const int64_t begin = std::max<int64_t>(slice.lo.At(row), 0);
        const int64_t end = std::min(slice.hi.At(row), shape.kv_tokens);
        if (begin < end) ranges_.push_back({begin, end});
      }
      std::sort(ranges_.begin() + static_cast<std::ptrdiff_t>(row_first), ranges_.end(),
                [](const ColumnRange& a, const ColumnRange& b) { return a.begin < b.begin; });
      MergeSorted(ranges_, row_first, 1);  // touching ranges too
    }
    first_.push_back(ranges_.size());
  }

  std::span<const ColumnRange> Of(int64_t row) const {
    const size_t first = first_[static_cast<size_t>(row)];
    return {ranges_.data() + first, first_[static_cast<size_t>(row) + 1] - first};
  }

 private:
  std::vector<ColumnRange> ranges_;
  std::vector<size_t> first_;  // ranges of row i: [first_[i], first_[i + 1])
};

// The pieces of the chunk of rows [row_begin, row_end): the union of their allowed ranges, gaps
// narrower than kSegmentGap filled, cut into ranges of at most kPieceColumns. Empty if no row of
// the chunk allows anything.
void ChunkPieces(const RowRanges& rows, int64_t row_begin, int64_t row_end,
                 std::vector<ColumnRange>& spans, std::vector<ColumnRange>& pieces) {
  spans.clear();
  for (int64_t row = row_begin; row < row_end; ++row) {
    for (const ColumnRange& range : rows.Of(row)) spans.push_back(range);
  }
  std::sort(spans.begin(), spans.end(),
            [](const ColumnRange& a, const ColumnRange& b) { return a.begin < b.begin; });
  MergeSorted(spans, 0, kSegmentGap);
  pieces.clear();
  for (const ColumnRange& span : spans) {
    // Equal pieces rather than full ones and a sliver.
    const int64_t width = span.end - span.begin;
    const int64_t count = (width + kPieceColumns - 1) / kPieceColumns;
    for (int64_t p = 0; p < count; ++p) {
      pieces.push_back({span.begin + width * p / count, span.begin + width * (p + 1) / count});
    }
  }
}

// The allowed ranges of a row clipped to a piece [begin, end), in piece coordinates (0 = begin).
void ClipToPiece(std::span<const ColumnRange> ranges, ColumnRange piece,
                 std::vector<ColumnRange>& clipped) {
  clipped.clear();
  for (const ColumnRange& range : ranges) {
    if (range.end <= piece.begin) continue;
    if (range.begin >= piece.end) break;
    clipped.push_back({std::max(range.begin, piece.begin) - piece.begin,
                       std::min(range.end, piece.end) - piece.begin});
  }
}

// Index arithmetic of the layouts at the top of include/dcp/kernels.h.
struct TileLayout {
  int64_t heads;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t group;  // query heads per KV head

  explicit TileLayout(const TileShape& shape)
      : heads(shape.heads),
        kv_heads(shape.kv_heads),
        head_dim(shape.head_dim),
        group(shape.heads / shape.kv_heads) {}

  int64_t Row(int64_t token, int64_t head) const { return token * heads + head; }
  int64_t Q(int64_t token, int64_t head) const { return Row(token, head) * head_dim; }
  int64_t K(int64_t token, int64_t kv_head) const {
    return (token * 2 * kv_heads + kv_head) * head_dim;
  }
  int64_t V(int64_t token, int64_t kv_head) const {
    return ((token * 2 + 1) * kv_heads + kv_head) * head_dim;
  }
  // Distance between the K (or V) rows of consecutive tokens.
  int64_t KvStride() const { return 2 * kv_heads * head_dim; }
  // Query tokens per chunk: kChunkRows rows of one KV head's query heads (one token when a KV
  // head has more than kChunkRows query heads).
  int64_t ChunkTokens() const { return std::max<int64_t>(1, kChunkRows / group); }
  // Rows of the largest chunk: the height of the panels.
  int64_t ChunkRows() const { return ChunkTokens() * group; }
};

void CheckShape(const TileShape& shape) {
  DCP_CHECK(shape.q_tokens >= 0 && shape.kv_tokens >= 0 && shape.head_dim >= 0,
            "bad tile shape {}x{} head_dim {}", shape.q_tokens, shape.kv_tokens, shape.head_dim);
  DCP_CHECK(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
            "heads {} is not a multiple of kv_heads {}", shape.heads, shape.kv_heads);
}

// Scratch memory of one thread, kept between calls so a call allocates nothing once warm.
struct Workspace {
  std::vector<float> kv;                // fp32 copy of kv when it is not fp32 in place
  std::vector<float> q, d_o, o, d_q;    // [chunk rows][head_dim] panels
  std::vector<float> s, d_p;            // [chunk rows][kPieceColumns] panels
  std::vector<float> row_max, row_sum;  // [chunk rows]
  std::vector<ColumnRange> spans, pieces, clipped;

  static float* Sized(std::vector<float>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  }
};

Workspace& ThreadWorkspace() {
  thread_local Workspace workspace;
  return workspace;
}

// kv as fp32: in place when it is fp32 and aligned, else converted into the workspace.
const float* KvAsFloat(const std::byte* kv, DType dtype, const TileShape& shape, Workspace& ws) {
  if (dtype == DType::kFloat32 && reinterpret_cast<uintptr_t>(kv) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(kv);
  }
  const int64_t count = shape.kv_tokens * 2 * shape.kv_heads * shape.head_dim;
  float* out = Workspace::Sized(ws.kv, count);
  ToFloat(out, kv, dtype, 0, count);
  return out;
}

// Gathers rows (token, query head of kv_head) of tokens [t0, t1) of a [tokens][heads][head_dim]
// tensor into a [rows][head_dim] fp32 panel; the query heads of one KV head are adjacent.
void GatherRows(float* panel, const std::byte* data, DType dtype, const TileLayout& at,
                int64_t kv_head, int64_t t0, int64_t t1) {
  const int64_t width = at.group * at.head_dim;
  for (int64_t t = t0; t < t1; ++t) {
    ToFloat(panel + (t - t0) * width, data, dtype, at.Q(t, kv_head * at.group), width);
  }
}

// The loops over scores are compiled twice on x86-64, for AVX2 + FMA (x86-64-v3) and for the
// baseline (SSE2), and the loader picks the one the CPU runs (GCC and Clang function
// multiversioning): 8 floats a vector instead of 4 makes the forward about 20% faster. The AVX2
// clone may fuse multiply-adds, so its results can differ from the baseline's in the last bits;
// on one machine, results are deterministic.
#if defined(__x86_64__) && defined(__GNUC__)
#define DCP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DCP_VECTOR_CLONES
#endif

// Forward, one piece of the chunk of tokens [t0, t1): turns the scores S [rows][w] into P =
// exp(S - running max) on each row's allowed columns and 0 elsewhere (online softmax), updating
// the running max and sum of every row and rescaling its O panel row when the max grows. A row
// with no allowed column in the piece, or only -inf scores, takes nothing from it. A row with a
// NaN or +inf score, which only non-finite inputs or an overflowing dot product give, is
// poisoned: its running max becomes NaN, and the merge makes its O and LSE NaN, as the dense
// softmax does, so that a diverging model shows NaN instead of an output that hides it.
DCP_VECTOR_CLONES void OnlineSoftmax(const RowRanges& rows, int64_t t0, int64_t t1, int64_t group,
                                     ColumnRange piece, float* s_panel, float* row_max,
                                     float* row_sum, float* o_panel, int64_t d,
                                     std::vector<ColumnRange>& clipped) {
  const int64_t w = piece.end - piece.begin;
  for (int64_t t = t0; t < t1; ++t) {
    ClipToPiece(rows.Of(t), piece, clipped);
    for (int64_t r = (t - t0) * group; r < (t - t0 + 1) * group; ++r) {
      float* s_row = s_panel + r * w;
      float piece_max = kNegativeInfinity;
      for (const ColumnRange& c : clipped) {
        const float m = MaxOf(s_row + c.begin, c.end - c.begin);
        if (m > piece_max || std::isnan(m)) piece_max = m;  // std::max would drop a NaN m
      }
      if (std::isnan(row_max[r]) || !(piece_max < kInfinity)) {
        row_max[r] = std::numeric_limits<float>::quiet_NaN();
        Zero(s_row, w);
        continue;
      }
      if (piece_max == kNegativeInfinity) {
        Zero(s_row, w);
        continue;
      }
      const float new_max = std::max(row_max[r], piece_max);
      float sum = 0.0f;
      int64_t done = 0;
      for (const ColumnRange& c : clipped) {
        Zero(s_row + done, c.begin - done);
        sum += ExpInPlaceAndSum(s_row + c.begin, c.end - c.begin, new_max);
        done = c.end;
      }
      Zero(s_row + done, w - done);
      if (new_max > row_max[r] && row_max[r] > kNegativeInfinity) {
        const float shrink = std::exp(row_max[r] - new_max);
        row_sum[r] *= shrink;
        for (int64_t k = 0; k < d; ++k) o_panel[r * d + k] *= shrink;
      }
      row_sum[r] += sum;
      row_max[r] = new_max;
    }
  }
}

// Backward, one piece of the chunk of tokens [t0, t1) and KV head g: turns S [rows][w] into P =
// exp(S - LSE) and dP into dS = scale * P * (dP - Delta) on each row's allowed columns, both 0
// elsewhere. A row with LSE = -inf attended to nothing: no softmax and no gradient. A row whose
// LSE or Delta is not finite (the forward poisoned it, or dO holds a NaN) gets NaN in P and dS
// on its allowed columns, so that its dQ and the dK and dV of its columns are NaN, as in the
// dense backward.
DCP_VECTOR_CLONES void SoftmaxGradients(const RowRanges& rows, int64_t t0, int64_t t1,
                                        const TileLayout& at, int64_t g, ColumnRange piece,
                                        const float* lse, const float* delta, float scale,
                                        float* s_panel, float* dp_panel,
                                        std::vector<ColumnRange>& clipped) {
  const int64_t w = piece.end - piece.begin;
  for (int64_t t = t0; t < t1; ++t) {
    ClipToPiece(rows.Of(t), piece, clipped);
    for (int64_t r = (t - t0) * at.group; r < (t - t0 + 1) * at.group; ++r) {
      const int64_t row = at.Row(t, g * at.group + r % at.group);
      float* s_row = s_panel + r * w;
      float* dp_row = dp_panel + r * w;
      if (lse[row] == kNegativeInfinity) {
        Zero(s_row, w);
        Zero(dp_row, w);
        continue;
      }
      const bool poisoned = !(std::abs(lse[row]) < kInfinity && std::abs(delta[row]) < kInfinity);
      int64_t done = 0;
      for (const ColumnRange& c : clipped) {
        Zero(s_row + done, c.begin - done);
        Zero(dp_row + done, c.begin - done);
        if (poisoned) {
          std::fill(s_row + c.begin, s_row + c.end, std::numeric_limits<float>::quiet_NaN());
          std::fill(dp_row + c.begin, dp_row + c.end, std::numeric_limits<float>::quiet_NaN());
        } else {
          SoftmaxGradient(s_row + c.begin, dp_row + c.begin, c.end - c.begin, lse[row],
                          delta[row], scale);
        }
        done = c.end;
      }
      Zero(s_row + done, w - done);
      Zero(dp_row + done, w - done);
    }
  }
}

// What both passes set up before their loops: the tile's layout, the column ranges of its rows,
// K/V in fp32 and this thread's workspace. Empty when the tile allows no (query, key) pair.
struct TileContext {
  TileLayout at;
  RowRanges rows;
  Workspace& ws;
  const float* kvf;
};

std::optional<TileContext> PrepareTile(const std::byte* kv, DType dtype, const TileShape& shape,
                                       std::span<const Slice> slices) {
  CheckShape(shape);
  const std::vector<Slice> relevant = RelevantSlices(slices, shape);
  if (relevant.empty() || shape.kv_tokens == 0) return std::nullopt;
  Workspace& ws = ThreadWorkspace();
  return TileContext{.at = TileLayout(shape),
                     .rows = RowRanges(relevant, shape),
                     .ws = ws,
                     .kvf = KvAsFloat(kv, dtype, shape, ws)};
}

}  // namespace

void AttendForward(float* o, float* lse, const std::byte* q, const std::byte* kv, DType dtype,
                   const TileShape& shape, std::span<const Slice> slices, float scale) {
  const std::optional<TileContext> tile = PrepareTile(kv, dtype, shape, slices);
  if (!tile) return;
  const auto& [at, rows, ws, kvf] = *tile;
  const int64_t d = shape.head_dim;
  const int64_t ld_kv = at.KvStride();
  const int64_t panel_rows = at.ChunkRows();
  float* q_panel = Workspace::Sized(ws.q, panel_rows * d);
  float* o_panel = Workspace::Sized(ws.o, panel_rows * d);
  float* s_panel = Workspace::Sized(ws.s, panel_rows * kPieceColumns);
  float* row_max = Workspace::Sized(ws.row_max, panel_rows);
  float* row_sum = Workspace::Sized(ws.row_sum, panel_rows);

  const int64_t chunk_tokens = at.ChunkTokens();
  for (int64_t t0 = 0; t0 < shape.q_tokens; t0 += chunk_tokens) {
    const int64_t t1 = std::min(t0 + chunk_tokens, shape.q_tokens);
    ChunkPieces(rows, t0, t1, ws.spans, ws.pieces);
    if (ws.pieces.empty()) continue;
    const int64_t m = (t1 - t0) * at.group;
    for (int64_t g = 0; g < shape.kv_heads; ++g) {
      GatherRows(q_panel, q, dtype, at, g, t0, t1);
      Zero(o_panel, m * d);
      std::fill(row_max, row_max + m, kNegativeInfinity);
      std::fill(row_sum, row_sum + m, 0.0f);
      for (const ColumnRange& piece : ws.pieces) {
        const int64_t w = piece.end - piece.begin;
        Gemm(false, true, m, w, d, scale, q_panel, d, kvf + at.K(piece.begin, g), ld_kv, 0.0f,
             s_panel, w);
        OnlineSoftmax(rows, t0, t1, at.group, piece, s_panel, row_max, row_sum, o_panel, d,
                      ws.clipped);
        Gemm(false, false, m, d, w, 1.0f, s_panel, w, kvf + at.V(piece.begin, g), ld_kv, 1.0f,
             o_panel, d);
      }

      // Merge by log-sum-exp into the accumulators; a poisoned row (NaN) poisons its
      // accumulator, and a poisoned accumulator stays so.
      for (int64_t r = 0; r < m; ++r) {
        if (row_max[r] == kNegativeInfinity) continue;
        const int64_t row = at.Row(t0 + r / at.group, g * at.group + r % at.group);
        float* acc_o = o + row * d;
        float& acc_lse = lse[row];
        if (std::isnan(row_max[r]) || std::isnan(acc_lse)) {
          std::fill(acc_o, acc_o + d, std::numeric_limits<float>::quiet_NaN());
          acc_lse = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        const float sum = row_sum[r];
        const float tile_lse = row_max[r] + std::log(sum);
        const float* tile_o = o_panel + r * d;
        if (acc_lse == kNegativeInfinity) {
          const float inv_sum = 1.0f / sum;
          for (int64_t k = 0; k < d; ++k) acc_o[k] = tile_o[k] * inv_sum;
          acc_lse = tile_lse;
        } else {
          const float hi = std::max(acc_lse, tile_lse);
          const float lo = std::min(acc_lse, tile_lse);
          const float new_lse = hi + std::log1p(std::exp(lo - hi));
          const float acc_weight = std::exp(acc_lse - new_lse);
          const float tile_weight = std::exp(tile_lse - new_lse) / sum;
          for (int64_t k = 0; k < d; ++k)
            acc_o[k] = acc_o[k] * acc_weight + tile_o[k] * tile_weight;
          acc_lse = new_lse;
        }
      }
    }
  }
}

void AttendBackward(float* dq, float* dkv, const std::byte* q, const std::byte* kv,
                    const std::byte* d_o, const float* lse, const float* delta, DType dtype,
                    const TileShape& shape, std::span<const Slice> slices, float scale) {
  const std::optional<TileContext> tile = PrepareTile(kv, dtype, shape, slices);
  if (!tile) return;
  const auto& [at, rows, ws, kvf] = *tile;
  const int64_t d = shape.head_dim;
  const int64_t ld_kv = at.KvStride();
  const int64_t panel_rows = at.ChunkRows();
  float* q_panel = Workspace::Sized(ws.q, panel_rows * d);
  float* do_panel = Workspace::Sized(ws.d_o, panel_rows * d);
  float* dq_panel = Workspace::Sized(ws.d_q, panel_rows * d);
  float* s_panel = Workspace::Sized(ws.s, panel_rows * kPieceColumns);
  float* dp_panel = Workspace::Sized(ws.d_p, panel_rows * kPieceColumns);

  const int64_t chunk_tokens = at.ChunkTokens();
  for (int64_t t0 = 0; t0 < shape.q_tokens; t0 += chunk_tokens) {
    const int64_t t1 = std::min(t0 + chunk_tokens, shape.q_tokens);
    ChunkPieces(rows, t0, t1, ws.spans, ws.pieces);
    if (ws.pieces.empty()) continue;
    const int64_t m = (t1 - t0) * at.group;
    for (int64_t g = 0; g < shape.kv_heads; ++g) {
      GatherRows(q_panel, q, dtype, at, g, t0, t1);
      GatherRows(do_panel, d_o, dtype, at, g, t0, t1);
      for (size_t p = 0; p < ws.pieces.size(); ++p) {
        const ColumnRange piece = ws.pieces[p];
        const int64_t w = piece.end - piece.begin;
        Gemm(false, true, m, w, d, scale, q_panel, d, kvf + at.K(piece.begin, g), ld_kv, 0.0f,
             s_panel, w);
        Gemm(false, true, m, w, d, 1.0f, do_panel, d, kvf + at.V(piece.begin, g), ld_kv, 0.0f,
             dp_panel, w);
        SoftmaxGradients(rows, t0, t1, at, g, piece, lse, delta, scale, s_panel, dp_panel,
                         ws.clipped);
        Gemm(true, false, w, d, m, 1.0f, s_panel, w, do_panel, d, 1.0f, dkv + at.V(piece.begin, g),
             ld_kv);
        Gemm(true, false, w, d, m, 1.0f, dp_panel, w, q_panel, d, 1.0f, dkv + at.K(piece.begin, g),
             ld_kv);
        Gemm(false, false, m, d, w, 1.0f, dp_panel, w, kvf + at.K(piece.begin, g), ld_kv,
             p == 0 ? 0.0f : 1.0f, dq_panel, d);
      }
      for (int64_t r = 0; r < m; ++r) {
        float* dq_row = dq + at.Q(t0 + r / at.group, g * at.group + r % at.group);
        const float* from = dq_panel + r * d;
        for (int64_t k = 0; k < d; ++k) dq_row[k] += from[k];
      }
    }
  }
}

}  // namespace dcp
