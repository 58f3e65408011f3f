// SPDX-License-Identifier: Apache-2.0
// Property tests of the blocked CPU attention kernels (src/runtime/cpu/attention.cc) on the shapes
// that exercise their blocking: query-row chunks (128 rows of one KV head's query heads, so 128 /
// group tokens) and their boundaries, column pieces (up to 256 columns) and segments (allowed
// ranges of a chunk, small gaps filled), tiles of one row or one column, slices that start or end
// inside a chunk, many slices per row, GQA ratios 1, 4 and 8, bf16, accumulation into non-empty
// accumulators, and concurrent calls from several threads. The reference is written here, per
// element in double precision, and shares nothing with the kernels.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dcp/batch.h"
#include "dcp/mask.h"
#include "dcp/runtime.h"
#include "testing/expect_close.h"
#include "testing/tile_reference.h"

namespace dcp {
namespace {

using testing::ExpectClose;

constexpr double kInf = std::numeric_limits<double>::infinity();

size_t U(int64_t i) { return static_cast<size_t>(i); }

using Problem = testing::TileProblem;
using Expected = testing::TileReference;
using testing::Encode;

std::string Describe(const Problem& p) {
  const TileShape& s = p.shape;
  return std::string(ToString(p.dtype)) + " tile " + std::to_string(s.q_tokens) + "x" +
         std::to_string(s.kv_tokens) + " heads " + std::to_string(s.heads) + "/" +
         std::to_string(s.kv_heads) + " head_dim " + std::to_string(s.head_dim) + " slices " +
         std::to_string(p.slices.size());
}

std::vector<float> RandomValues(std::mt19937_64& rng, int64_t count, float magnitude, DType dtype) {
  std::uniform_real_distribution<float> dist(-magnitude, magnitude);
  std::vector<float> values(U(count));
  for (float& v : values) {
    v = dist(rng);
    if (dtype == DType::kBFloat16) v = Bf16ToFloat(FloatToBf16(v));
  }
  return values;
}

// Fills q, kv and d_o for the problem's shape.
void FillValues(Problem& p, uint64_t seed, float magnitude) {
  std::mt19937_64 rng(seed);
  const TileShape& s = p.shape;
  p.scale = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(s.head_dim, 1)));
  p.q = RandomValues(rng, s.q_tokens * s.heads * s.head_dim, magnitude, p.dtype);
  p.kv = RandomValues(rng, s.kv_tokens * 2 * s.kv_heads * s.head_dim, magnitude, p.dtype);
  p.d_o = RandomValues(rng, s.q_tokens * s.heads * s.head_dim, 1.0f, p.dtype);
}

// ---------------------------------------------------------------------------------------------
// Reference: tests/testing/tile_reference.h.

Expected Reference(const Problem& p) { return testing::ReferenceAttention(p); }

// ---------------------------------------------------------------------------------------------
// Running the kernels

struct Accumulators {
  std::vector<float> o, lse;
};

Accumulators EmptyAccumulators(const TileShape& s) {
  return {std::vector<float>(U(s.q_tokens * s.heads * s.head_dim), 0.0f),
          std::vector<float>(U(s.q_tokens * s.heads), -std::numeric_limits<float>::infinity())};
}

void Forward(const Problem& p, Accumulators& acc) {
  const std::vector<std::byte> q = Encode(p.q, p.dtype);
  const std::vector<std::byte> kv = Encode(p.kv, p.dtype);
  AttendForward(acc.o.data(), acc.lse.data(), q.data(), kv.data(), p.dtype, p.shape, p.slices,
                p.scale);
}

struct Gradients {
  std::vector<float> dq, dkv;
};

Gradients ZeroGradients(const TileShape& s) {
  return {std::vector<float>(U(s.q_tokens * s.heads * s.head_dim), 0.0f),
          std::vector<float>(U(s.kv_tokens * 2 * s.kv_heads * s.head_dim), 0.0f)};
}

// Backward with the reference's LSE and Delta = rowsum(O * dO).
void Backward(const Problem& p, const Expected& e, Gradients& grad) {
  const TileShape& s = p.shape;
  std::vector<float> lse(e.lse.size()), delta(e.lse.size());
  for (size_t row = 0; row < lse.size(); ++row) {
    lse[row] = static_cast<float>(e.lse[row]);
    double sum = 0.0;
    for (int64_t k = 0; k < s.head_dim; ++k) {
      const size_t at = row * U(s.head_dim) + U(k);
      sum += e.o[at] * double{p.d_o[at]};
    }
    delta[row] = static_cast<float>(sum);
  }
  const std::vector<std::byte> q = Encode(p.q, p.dtype);
  const std::vector<std::byte> kv = Encode(p.kv, p.dtype);
  const std::vector<std::byte> d_o = Encode(p.d_o, p.dtype);
  AttendBackward(grad.dq.data(), grad.dkv.data(), q.data(), kv.data(), d_o.data(), lse.data(),
                 delta.data(), p.dtype, s, p.slices, p.scale);
}

// Forward from empty accumulators and backward from zero gradients against the reference.
void CheckAgainstReference(const Problem& p) {
  SCOPED_TRACE(Describe(p));
  const Expected e = Reference(p);
  Accumulators acc = EmptyAccumulators(p.shape);
  Forward(p, acc);
  ExpectClose(acc.o, e.o, "O");
  ExpectClose(acc.lse, e.lse, "LSE");
  Gradients grad = ZeroGradients(p.shape);
  Backward(p, e, grad);
  ExpectClose(grad.dq, e.dq, "dQ");
  ExpectClose(grad.dkv, e.dkv, "dKV");
}

// ---------------------------------------------------------------------------------------------
// Masks

Slice Causal(int64_t q_tokens, int64_t kv_tokens) {
  // The diagonal aligned with the tile's last row and column.
  return Slice{
      .row_begin = 0, .row_end = q_tokens, .lo = {0, 0}, .hi = {kv_tokens - q_tokens + 1, 1}};
}

Slice Full(int64_t q_tokens, int64_t kv_tokens) {
  return Slice{.row_begin = 0, .row_end = q_tokens, .lo = {0, 0}, .hi = {kv_tokens, 0}};
}

// A random slice of one of several shapes, rows and columns possibly reaching past the tile.
Slice RandomSlice(std::mt19937_64& rng, int64_t q_tokens, int64_t kv_tokens) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Slice slice;
  slice.row_begin = uniform(-3, q_tokens - 1);
  slice.row_end = uniform(slice.row_begin + 1, q_tokens + 3);
  const int64_t offset = kv_tokens - q_tokens;
  switch (uniform(0, 4)) {
    case 0:  // causal-like
      slice.lo = {uniform(-2, kv_tokens / 2), 0};
      slice.hi = {offset + 1 + uniform(-3, 3), 1};
      break;
    case 1: {  // sliding window
      const int64_t shift = offset + uniform(-3, 3);
      slice.lo = {shift - uniform(0, kv_tokens), 1};
      slice.hi = {shift + 1, 1};
      break;
    }
    case 2: {  // fixed columns
      const int64_t lo = uniform(-5, kv_tokens + 2);
      slice.lo = {lo, 0};
      slice.hi = {lo + uniform(0, kv_tokens / 2 + 2), 0};
      break;
    }
    case 3:  // diagonal start, fixed end
      slice.lo = {uniform(-kv_tokens, kv_tokens), 1};
      slice.hi = {uniform(0, kv_tokens + 3), 0};
      break;
    default:  // everything
      slice.lo = {-uniform(0, 4), 0};
      slice.hi = {kv_tokens + uniform(0, 4), 0};
      break;
  }
  return slice;
}

// Narrow fixed-column slices over random row ranges, separated by gaps both narrower and wider
// than the kernel fills: many ranges per row and several segments per chunk.
std::vector<Slice> Stripes(std::mt19937_64& rng, int64_t q_tokens, int64_t kv_tokens) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Slice> slices;
  for (int64_t column = uniform(0, 5); column < kv_tokens; column += uniform(2, 90)) {
    const int64_t width = uniform(1, 6);
    const int64_t row_begin = uniform(0, q_tokens - 1);
    slices.push_back(Slice{.row_begin = row_begin,
                           .row_end = uniform(row_begin + 1, q_tokens),
                           .lo = {column, 0},
                           .hi = {column + width, 0}});
    column += width;
  }
  return slices;
}

Problem MakeProblem(int64_t q_tokens, int64_t kv_tokens, int64_t heads, int64_t kv_heads,
                    int64_t head_dim, DType dtype) {
  Problem p;
  p.shape = TileShape{q_tokens, kv_tokens, heads, kv_heads, head_dim};
  p.dtype = dtype;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Tests

// Row counts around the chunk boundaries of each GQA ratio (chunks of 128, 32 and 16 tokens for
// groups 1, 4 and 8) and column counts around the piece width, causal and full.
// The kernels run their GEMMs on the calling thread and leave the thread's OpenMP setting (from
// which the OpenMP build of OpenBLAS takes its thread count) as they found it.
TEST(AttendKernel, LeavesTheCallersThreadSettingAsItFoundIt) {
  Problem p = MakeProblem(300, 300, 8, 2, 64, DType::kFloat32);
  p.slices = {Causal(300, 300)};
  FillValues(p, 5, 2.0f);
  omp_set_num_threads(3);
  CheckAgainstReference(p);
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(1);
  CheckAgainstReference(p);
  EXPECT_EQ(omp_get_max_threads(), 1);
}

TEST(AttendKernel, CausalAndFullTilesAcrossChunkAndPieceBoundaries) {
  struct Heads {
    int64_t heads, kv_heads;
  };
  const Heads gqa[] = {{2, 2}, {4, 1}, {8, 1}, {8, 2}};
  const int64_t rows[] = {1, 15, 16, 17, 33, 127, 129};
  const int64_t columns[] = {1, 255, 257, 300};
  uint64_t seed = 100;
  for (const Heads& h : gqa) {
    for (int64_t q_tokens : rows) {
      for (int64_t kv_tokens : columns) {
        for (bool causal : {false, true}) {
          const DType dtype = seed % 3 == 0 ? DType::kBFloat16 : DType::kFloat32;
          Problem p = MakeProblem(q_tokens, kv_tokens, h.heads, h.kv_heads, 8, dtype);
          p.slices = {causal ? Causal(q_tokens, kv_tokens) : Full(q_tokens, kv_tokens)};
          FillValues(p, seed++, 2.0f);
          CheckAgainstReference(p);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(AttendKernel, RandomSlicesOnLargerTilesMatchTheReference) {
  for (uint64_t seed = 200; seed < 240; ++seed) {
    std::mt19937_64 rng(seed);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t kv_heads_choices[] = {8, 2, 1};  // GQA 1, 4, 8
    Problem p = MakeProblem(uniform(1, 200), uniform(1, 600), 8, kv_heads_choices[seed % 3],
                            uniform(1, 20), seed % 2 == 0 ? DType::kFloat32 : DType::kBFloat16);
    const int64_t count = uniform(1, 8);
    for (int64_t k = 0; k < count; ++k) {
      p.slices.push_back(RandomSlice(rng, p.shape.q_tokens, p.shape.kv_tokens));
    }
    FillValues(p, seed, std::uniform_real_distribution<float>(0.5f, 3.0f)(rng));
    CheckAgainstReference(p);
    if (::testing::Test::HasFailure()) return;
  }
}

// The head sizes of real models: 64 and 128, causal and random slices, both dtypes, GQA 1 and 4.
TEST(AttendKernel, HeadDims64And128MatchTheReference) {
  uint64_t seed = 260;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t kv_heads : {4, 1}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        for (bool causal : {true, false}) {
          std::mt19937_64 rng(seed);
          Problem p = MakeProblem(150, 280, 4, kv_heads, head_dim, dtype);
          p.slices = {causal ? Causal(150, 280) : RandomSlice(rng, 150, 280)};
          FillValues(p, seed++, 1.0f);
          CheckAgainstReference(p);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(AttendKernel, ManySlicesPerRowMatchTheReference) {
  for (uint64_t seed = 300; seed < 312; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t q_tokens = std::uniform_int_distribution<int64_t>(1, 150)(rng);
    const int64_t kv_tokens = std::uniform_int_distribution<int64_t>(1, 800)(rng);
    Problem p = MakeProblem(q_tokens, kv_tokens, 4, seed % 2 == 0 ? 1 : 4, 12,
                            seed % 3 == 0 ? DType::kBFloat16 : DType::kFloat32);
    p.slices = Stripes(rng, q_tokens, kv_tokens);
    if (seed % 2 == 0) p.slices.push_back(RandomSlice(rng, q_tokens, kv_tokens));
    FillValues(p, seed, 2.0f);
    CheckAgainstReference(p);
    if (::testing::Test::HasFailure()) return;
  }
}

// Slices that begin and end inside a chunk, leaving fully masked rows in the same chunk as rows
// that attend: those rows keep their accumulators (O = 0, LSE = -inf) and get no gradient.
TEST(AttendKernel, SlicesEndingInsideAChunkLeaveTheOtherRowsAlone) {
  for (int64_t kv_heads : {4, 1}) {
    Problem p = MakeProblem(100, 300, 4, kv_heads, 16, DType::kFloat32);
    p.slices = {Slice{.row_begin = 5, .row_end = 13, .lo = {0, 0}, .hi = {7, 1}},
                Slice{.row_begin = 40, .row_end = 41, .lo = {290, 0}, .hi = {400, 0}},
                Slice{.row_begin = 70, .row_end = 90, .lo = {-60, 1}, .hi = {200, 0}}};
    FillValues(p, 400 + static_cast<uint64_t>(kv_heads), 2.0f);
    CheckAgainstReference(p);
  }
}

TEST(AttendKernel, TilesOfOneRowOrOneColumnMatchTheReference) {
  uint64_t seed = 500;
  for (int64_t other : {1, 2, 200, 513}) {
    for (bool one_row : {true, false}) {
      const int64_t q_tokens = one_row ? 1 : other;
      const int64_t kv_tokens = one_row ? other : 1;
      Problem p = MakeProblem(q_tokens, kv_tokens, 8, 2, 5,
                              seed % 2 == 0 ? DType::kFloat32 : DType::kBFloat16);
      p.slices = {Full(q_tokens, kv_tokens)};
      FillValues(p, seed++, 1.5f);
      CheckAgainstReference(p);
    }
  }
}

// A KV head with more query heads than a chunk has rows: chunks of one token.
TEST(AttendKernel, GroupsLargerThanAChunkMatchTheReference) {
  Problem p = MakeProblem(3, 300, 130, 1, 4, DType::kFloat32);
  p.slices = {Causal(3, 300)};
  FillValues(p, 550, 1.5f);
  CheckAgainstReference(p);
}

// Peaked rows (large scores): exp of very negative arguments must underflow to 0, not to garbage.
TEST(AttendKernel, PeakedSoftmaxRowsMatchTheReference) {
  Problem p = MakeProblem(70, 400, 2, 1, 32, DType::kFloat32);
  p.slices = {Causal(70, 400), Slice{.row_begin = 0, .row_end = 70, .lo = {0, 0}, .hi = {50, 0}}};
  FillValues(p, 600, 8.0f);  // scores up to 8 * 8 * 32 / sqrt(32), spread over hundreds
  CheckAgainstReference(p);
}

// A tile merged into accumulators that already hold other tiles' results (forward), and added to
// gradients that are not zero (backward).
TEST(AttendKernel, AccumulatesIntoNonEmptyAccumulators) {
  for (uint64_t seed = 700; seed < 704; ++seed) {
    std::mt19937_64 rng(seed);
    Problem p = MakeProblem(150, 280, 8, 2, 16, DType::kFloat32);
    p.slices = {Slice{.row_begin = 10, .row_end = 150, .lo = {0, 0}, .hi = {140, 1}}};
    FillValues(p, seed, 2.0f);
    const Expected e = Reference(p);
    const TileShape& s = p.shape;

    // Earlier results: every second row holds a previous tile's (O, LSE).
    Accumulators acc = EmptyAccumulators(s);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int64_t row = 0; row < s.q_tokens * s.heads; row += 2) {
      acc.lse[U(row)] = u(rng);
      for (int64_t k = 0; k < s.head_dim; ++k) acc.o[U(row * s.head_dim + k)] = u(rng);
    }
    Expected merged = e;
    for (int64_t row = 0; row < s.q_tokens * s.heads; ++row) {
      const double prev = acc.lse[U(row)];
      const double tile = e.lse[U(row)];
      if (prev == -kInf) continue;  // the expected values are the tile's alone
      const double total =
          tile == -kInf ? prev
                        : std::max(prev, tile) + std::log1p(std::exp(-std::abs(prev - tile)));
      merged.lse[U(row)] = total;
      for (int64_t k = 0; k < s.head_dim; ++k) {
        const size_t at = U(row * s.head_dim + k);
        merged.o[at] = double{acc.o[at]} * std::exp(prev - total) +
                       (tile == -kInf ? 0.0 : e.o[at] * std::exp(tile - total));
      }
    }
    Forward(p, acc);
    ExpectClose(acc.o, merged.o, "O");
    ExpectClose(acc.lse, merged.lse, "LSE");

    Gradients grad = ZeroGradients(s);
    for (float& v : grad.dq) v = u(rng);
    for (float& v : grad.dkv) v = u(rng);
    Expected summed = e;
    for (size_t i = 0; i < grad.dq.size(); ++i) summed.dq[i] += double{grad.dq[i]};
    for (size_t i = 0; i < grad.dkv.size(); ++i) summed.dkv[i] += double{grad.dkv[i]};
    Backward(p, e, grad);
    ExpectClose(grad.dq, summed.dq, "dQ");
    ExpectClose(grad.dkv, summed.dkv, "dKV");
    if (::testing::Test::HasFailure()) return;
  }
}

// Rows that see a single column have P = 1 there and, in exact arithmetic, dS = dP - Delta = 0.
// With LSE and Delta from the kernels' own forward (as the executor computes them), dQ and dK
// come out exactly 0 rather than the rounding difference between two dot products.
TEST(AttendKernel, RowsWithASingleColumnGetExactlyZeroDqAndDk) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Problem p = MakeProblem(150, 150, 8, 2, 24, dtype);
    p.slices = {Slice{.row_begin = 0, .row_end = 150, .lo = {0, 1}, .hi = {1, 1}}};
    FillValues(p, 1000, 2.0f);
    const TileShape& s = p.shape;
    Accumulators acc = EmptyAccumulators(s);
    Forward(p, acc);
    std::vector<float> delta(acc.lse.size());
    for (size_t row = 0; row < delta.size(); ++row) {
      float sum = 0.0f;
      for (int64_t k = 0; k < s.head_dim; ++k) {
        const size_t at = row * U(s.head_dim) + U(k);
        sum += acc.o[at] * p.d_o[at];
      }
      delta[row] = sum;
    }
    const std::vector<std::byte> q = Encode(p.q, p.dtype);
    const std::vector<std::byte> kv = Encode(p.kv, p.dtype);
    const std::vector<std::byte> d_o = Encode(p.d_o, p.dtype);
    Gradients grad = ZeroGradients(s);
    AttendBackward(grad.dq.data(), grad.dkv.data(), q.data(), kv.data(), d_o.data(), acc.lse.data(),
                   delta.data(), p.dtype, s, p.slices, p.scale);
    for (float v : grad.dq) ASSERT_EQ(v, 0.0f);
    const int64_t d = s.head_dim;
    for (int64_t j = 0; j < s.kv_tokens; ++j) {
      for (int64_t g = 0; g < s.kv_heads; ++g) {
        for (int64_t k = 0; k < d; ++k) {
          ASSERT_EQ(grad.dkv[U(((j * 2) * s.kv_heads + g) * d + k)], 0.0f) << "dK " << j;
          // dV of column j is the sum of dO over the query heads of KV head g in row j.
          double expected = 0.0;
          for (int64_t h = g * 4; h < (g + 1) * 4; ++h)
            expected += p.d_o[U((j * s.heads + h) * d + k)];
          ASSERT_NEAR(grad.dkv[U(((j * 2 + 1) * s.kv_heads + g) * d + k)], expected, 1e-5);
        }
      }
    }
  }
}

// head_dim 0: scores are all 0, so LSE = log(allowed columns); nothing else to compute.
TEST(AttendKernel, HeadDimZeroGivesTheLogOfTheAllowedCount) {
  Problem p = MakeProblem(3, 5, 2, 1, 0, DType::kFloat32);
  p.slices = {Slice{.row_begin = 0, .row_end = 3, .lo = {0, 0}, .hi = {2, 1}}};
  FillValues(p, 800, 1.0f);
  Accumulators acc = EmptyAccumulators(p.shape);
  Forward(p, acc);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_NEAR(acc.lse[U(i * 2 + h)], std::log(static_cast<double>(i + 2)), 1e-6);
    }
  }
  Gradients grad = ZeroGradients(p.shape);
  Backward(p, Reference(p), grad);
}

// Calls on different threads (the runtime's one thread per device) give the same bits as calls on
// one thread.
TEST(AttendKernel, ConcurrentCallsGiveTheSameResultsAsSequentialOnes) {
  constexpr int kThreads = 4;
  std::vector<Problem> problems;
  for (int t = 0; t < kThreads; ++t) {
    Problem p = MakeProblem(90 + 40 * t, 300 + 50 * t, 8, t % 2 == 0 ? 2 : 8, 16,
                            t % 2 == 0 ? DType::kFloat32 : DType::kBFloat16);
    p.slices = {Causal(p.shape.q_tokens, p.shape.kv_tokens)};
    FillValues(p, 900 + static_cast<uint64_t>(t), 2.0f);
    problems.push_back(std::move(p));
  }
  std::vector<Expected> expected;
  for (const Problem& p : problems) expected.push_back(Reference(p));

  auto run = [&](int t, Accumulators& acc, Gradients& grad) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      acc = EmptyAccumulators(problems[U(t)].shape);
      grad = ZeroGradients(problems[U(t)].shape);
      Forward(problems[U(t)], acc);
      Backward(problems[U(t)], expected[U(t)], grad);
    }
  };
  std::vector<Accumulators> seq_acc(kThreads), par_acc(kThreads);
  std::vector<Gradients> seq_grad(kThreads), par_grad(kThreads);
  for (int t = 0; t < kThreads; ++t) run(t, seq_acc[U(t)], seq_grad[U(t)]);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { run(t, par_acc[U(t)], par_grad[U(t)]); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(par_acc[U(t)].o, seq_acc[U(t)].o);
    EXPECT_EQ(par_acc[U(t)].lse, seq_acc[U(t)].lse);
    EXPECT_EQ(par_grad[U(t)].dq, seq_grad[U(t)].dq);
    EXPECT_EQ(par_grad[U(t)].dkv, seq_grad[U(t)].dkv);
    ExpectClose(par_acc[U(t)].o, expected[U(t)].o, "O");
    ExpectClose(par_grad[U(t)].dkv, expected[U(t)].dkv, "dKV");
  }
}

}  // namespace
}  // namespace dcp
