// SPDX-License-Identifier: Apache-2.0
// The oracle checked: DenseAttention, the reference of every end-to-end test and of `dcp run`, is
// compared with the independent tile reference (testing/tile_reference.h: a per-element mask test,
// K and V interleaved, its own loops), each sequence of a batch as one tile covering the whole
// sequence, under GQA 1, 4 and 8 and every mask family.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dcp/runtime.h"
#include "testing/end_to_end.h"
#include "testing/tile_reference.h"

namespace dcp {
namespace {

// `expected` in double rounded once to fp32 by DenseAttention; both sides compute in double, in
// different orders, so each element differs by at most its own fp32 rounding (2^-24 relative)
// plus double-precision noise on sums that cancel (far below 1e-12 at these sizes).
void ExpectEqualToRounding(const std::vector<float>& actual, const std::vector<double>& expected,
                           const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected[i], a = actual[i];
    if (std::isinf(e)) {
      EXPECT_EQ(a, e) << what << "[" << i << "]";
      continue;
    }
    if (std::abs(a - e) > 1e-12 + std::ldexp(std::abs(e), -23) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << a << ", tile reference " << e;
    }
  }
}

TEST(DenseAttention, EqualsTheTileReferenceOnEverySequenceUnderGqa148) {
  std::mt19937_64 rng(5);
  const int64_t kv_heads[] = {8, 2, 1};  // 8 query heads: GQA 1, 4, 8
  for (const char* spec : testing::kEndToEndMasks) {
    for (int64_t kv : kv_heads) {
      const DType dtype = rng() % 2 ? DType::kFloat32 : DType::kBFloat16;
      SCOPED_TRACE(::testing::Message() << spec << " kv_heads " << kv << " " << ToString(dtype));
      const AttentionShape shape{.heads = 8, .kv_heads = kv, .head_dim = 12, .dtype = dtype};
      const std::vector<int64_t> lengths = {static_cast<int64_t>(40 + rng() % 120),
                                            static_cast<int64_t>(1 + rng() % 60)};
      const MaskSpec mask = *MaskSpec::Parse(spec);
      auto batch = Batch::Create(lengths, {mask, lengths[1] < 3 ? MaskSpec{} : mask}, shape);
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      BatchTensors t;
      const auto tokens = static_cast<size_t>(batch->total_tokens());
      t.q.resize(tokens * 8 * 12);
      t.d_o.resize(t.q.size());
      t.k.resize(tokens * static_cast<size_t>(kv) * 12);
      t.v.resize(t.k.size());
      t.o.resize(t.q.size());
      t.dq.resize(t.q.size());
      t.dk.resize(t.k.size());
      t.dv.resize(t.k.size());
      t.lse.resize(tokens * 8);
      testing::FillInputs(rng(), dtype, t);
      const double scale = 0.25;  // exact in fp32, as the tile reference takes it
      DenseAttention(*batch, scale, t);

      size_t base = 0;
      for (size_t s = 0; s < lengths.size(); ++s) {
        const int64_t length = lengths[s];
        const auto rows = static_cast<size_t>(length);
        testing::TileProblem p;
        p.shape = TileShape{length, length, 8, kv, 12};
        p.slices = batch->masks()[s].slices();
        p.scale = static_cast<float>(scale);
        p.dtype = dtype;
        p.delta_of_stored_o = true;
        const size_t q_width = 8 * 12, kv_width = static_cast<size_t>(kv) * 12;
        p.q.assign(t.q.begin() + base * q_width, t.q.begin() + (base + rows) * q_width);
        p.d_o.assign(t.d_o.begin() + base * q_width, t.d_o.begin() + (base + rows) * q_width);
        for (size_t j = 0; j < rows; ++j) {  // the tile's [token][K, V][kv head][dim]
          const auto at = t.k.begin() + (base + j) * kv_width;
          p.kv.insert(p.kv.end(), at, at + kv_width);
          const auto v_at = t.v.begin() + (base + j) * kv_width;
          p.kv.insert(p.kv.end(), v_at, v_at + kv_width);
        }
        const testing::TileReference r = testing::ReferenceAttention(p);
        const auto slice = [&](const std::vector<float>& v, size_t width) {
          return std::vector<float>(v.begin() + base * width, v.begin() + (base + rows) * width);
        };
        ExpectEqualToRounding(slice(t.o, q_width), r.o, "o");
        ExpectEqualToRounding(slice(t.lse, 8), r.lse, "lse");
        ExpectEqualToRounding(slice(t.dq, q_width), r.dq, "dq");
        std::vector<float> dkv;
        for (size_t j = 0; j < rows; ++j) {
          const auto dk = t.dk.begin() + (base + j) * kv_width;
          dkv.insert(dkv.end(), dk, dk + kv_width);
          const auto dv = t.dv.begin() + (base + j) * kv_width;
          dkv.insert(dkv.end(), dv, dv + kv_width);
        }
        ExpectEqualToRounding(dkv, r.dkv, "dkv");
        base += rows;
      }
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace dcp
