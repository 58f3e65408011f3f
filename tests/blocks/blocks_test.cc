// SPDX-License-Identifier: Apache-2.0
// MakeBlocks against a dense reference. For random batches (random lengths, including 1 and
// lengths that do not divide the block size, random block sizes, every mask family of
// docs/mask_spec.md, random shapes and head groups), the allowed (q, k) pairs of each tile are
// counted token by token: a pair is allowed when some slice of the mask covers its row and column.
// The compute blocks, their areas and FLOPs, the totals and the data blocks must all agree with
// that count and with the formulas of include/dcp/blocks.h.
#include "dcp/blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dcp/batch.h"
#include "dcp/mask.h"

namespace dcp {
namespace {

// ---------------------------------------------------------------------------------------------
// Dense reference

// Allowed pairs per (q block, kv block) tile of one mask, row-major over nb x nb tiles, counted
// one token pair at a time from the slices' raw membership.
std::vector<int64_t> DenseTileAreas(const Mask& mask, int64_t block_size) {
  const int64_t length = mask.length();
  const int64_t nb = (length + block_size - 1) / block_size;
  std::vector<int64_t> areas(nb * nb, 0);
  std::vector<char> allowed(length);
  for (int64_t i = 0; i < length; ++i) {
    std::fill(allowed.begin(), allowed.end(), 0);
    for (const Slice& s : mask.slices()) {
      if (i < s.row_begin || i >= s.row_end) continue;
      const int64_t lo = std::max<int64_t>(0, s.lo.At(i));
      const int64_t hi = std::min(length, s.hi.At(i));
      for (int64_t k = lo; k < hi; ++k) allowed[k] = 1;
    }
    for (int64_t k = 0; k < length; ++k) {
      if (allowed[k]) ++areas[(i / block_size) * nb + k / block_size];
    }
  }
  return areas;
}

// (sequence, head group, q block, kv block) -> area, only for tiles with a non-zero area. Block
// numbers are global data block ids: blocks are numbered over the batch, sequence by sequence.
using TileKey = std::tuple<int32_t, int32_t, int32_t, int32_t>;

std::map<TileKey, int64_t> ExpectedComputeBlocks(const Batch& batch, int64_t block_size,
                                                 int64_t head_groups) {
  std::map<TileKey, int64_t> expected;
  int32_t first_block = 0;
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int64_t nb = (batch.seqlens()[s] + block_size - 1) / block_size;
    const std::vector<int64_t> areas = DenseTileAreas(batch.masks()[s], block_size);
    for (int32_t g = 0; g < head_groups; ++g) {
      for (int64_t q = 0; q < nb; ++q) {
        for (int64_t k = 0; k < nb; ++k) {
          if (areas[q * nb + k] == 0) continue;
          expected[{static_cast<int32_t>(s), g, first_block + static_cast<int32_t>(q),
                    first_block + static_cast<int32_t>(k)}] = areas[q * nb + k];
        }
      }
    }
    first_block += static_cast<int32_t>(nb);
  }
  return expected;
}

// Bytes of one token of each tensor, from the shape alone: Q, O, dO and dQ hold heads * head_dim
// elements, K and V (and their gradients) 2 * kv_heads * head_dim, LSE one fp32 per query head.
DataBlockBytes ExpectedBytes(const AttentionShape& shape, int64_t tokens) {
  const int64_t elem = shape.dtype == DType::kFloat32 ? 4 : 2;
  const int64_t q = shape.heads * shape.head_dim * elem * tokens;
  const int64_t kv = 2 * shape.kv_heads * shape.head_dim * elem * tokens;
  return DataBlockBytes{
      .q = q, .kv = kv, .o = q, .lse = shape.heads * 4 * tokens, .d_o = q, .dq = q, .dkv = kv};
}

bool BytesEqual(const DataBlockBytes& a, const DataBlockBytes& b) {
  return a.q == b.q && a.kv == b.kv && a.o == b.o && a.lse == b.lse && a.d_o == b.d_o &&
         a.dq == b.dq && a.dkv == b.dkv;
}

// Checks every documented property of `set` against the dense reference.
void ExpectMatchesDenseReference(const Batch& batch, const BlockingOptions& options,
                                 const BlockSet& set) {
  const AttentionShape& shape = batch.shape();
  const int64_t bs = options.block_size;
  EXPECT_EQ(set.block_size, bs);
  EXPECT_EQ(set.head_groups, options.head_groups);
  EXPECT_EQ(set.shape, shape);

  // Data blocks: every token of every sequence exactly once, in order, with its bytes.
  const size_t n_seq = batch.seqlens().size();
  ASSERT_EQ(set.sequence_first_block.size(), n_seq + 1);
  EXPECT_EQ(set.sequence_first_block.front(), 0);
  size_t next_block = 0;
  int64_t batch_token = 0;
  // Per-block context is only formatted when a check fails (the cases have thousands of blocks).
  for (size_t s = 0; s < n_seq; ++s) {
    const int64_t len = batch.seqlens()[s];
    EXPECT_EQ(set.sequence_first_block[s], static_cast<int32_t>(next_block)) << "sequence " << s;
    int64_t covered = 0;
    for (int32_t index = 0; covered < len; ++index) {
      ASSERT_LT(next_block, set.data_blocks.size()) << "sequence " << s;
      const DataBlock& d = set.data_blocks[next_block];
      const auto where = [&] {
        return testing::Message() << "sequence " << s << ", data block " << next_block;
      };
      EXPECT_EQ(d.sequence.value, static_cast<int32_t>(s)) << where();
      EXPECT_EQ(d.index_in_sequence, index) << where();
      EXPECT_EQ(d.token_begin, covered) << where();
      EXPECT_EQ(d.tokens, std::min(bs, len - covered)) << where();
      EXPECT_EQ(d.batch_token_begin, batch_token + covered) << where();
      EXPECT_TRUE(BytesEqual(d.bytes, ExpectedBytes(shape, d.tokens))) << where();
      EXPECT_EQ(&set.data_block(DataBlockId{static_cast<int32_t>(next_block)}), &d) << where();
      ASSERT_GE(d.tokens, 1) << where();
      covered += d.tokens;
      ++next_block;
    }
    EXPECT_EQ(covered, len) << "sequence " << s;
    batch_token += len;
  }
  EXPECT_EQ(next_block, set.data_blocks.size());
  EXPECT_EQ(set.sequence_first_block.back(), static_cast<int32_t>(set.data_blocks.size()));

  // Compute blocks: exactly the non-empty tiles times the head groups, in the documented order.
  const std::map<TileKey, int64_t> expected = ExpectedComputeBlocks(batch, bs, options.head_groups);
  const int64_t heads_per_group = shape.heads / options.head_groups;
  std::map<TileKey, int64_t> actual;
  for (size_t c = 0; c < set.compute_blocks.size(); ++c) {
    const ComputeBlock& b = set.compute_blocks[c];
    const TileKey key{b.sequence.value, b.head_group, b.q_block.value, b.kv_block.value};
    const auto where = [&] {
      return testing::Message() << "compute block " << c << " (sequence " << b.sequence.value
                                << ", group " << b.head_group << ", q " << b.q_block.value
                                << ", kv " << b.kv_block.value << ")";
    };
    EXPECT_TRUE(actual.emplace(key, b.area).second) << "duplicate " << where();
    if (c > 0) {
      const ComputeBlock& p = set.compute_blocks[c - 1];
      EXPECT_LT(TileKey(p.sequence.value, p.head_group, p.q_block.value, p.kv_block.value), key)
          << where() << " is not ordered by sequence, head group, q block, kv block";
    }
    ASSERT_GE(b.q_block.value, 0) << where();
    ASSERT_GE(b.kv_block.value, 0) << where();
    ASSERT_LT(static_cast<size_t>(b.q_block.value), set.data_blocks.size()) << where();
    ASSERT_LT(static_cast<size_t>(b.kv_block.value), set.data_blocks.size()) << where();
    EXPECT_EQ(set.data_block(b.q_block).sequence, b.sequence) << where();
    EXPECT_EQ(set.data_block(b.kv_block).sequence, b.sequence) << where();
    EXPECT_GT(b.area, 0) << where();
    EXPECT_EQ(set.FlopsFwd(b), 4 * b.area * shape.head_dim * heads_per_group) << where();
    EXPECT_EQ(2 * set.FlopsBwd(b), 5 * set.FlopsFwd(b)) << where() << ": backward is not 2.5x";
    const auto it = expected.find(key);
    if (it == expected.end()) {
      ADD_FAILURE() << where() << " covers an empty tile";
    } else {
      EXPECT_EQ(b.area, it->second) << where() << ": area differs from the dense count";
    }
  }
  for (const auto& [key, area] : expected) {
    EXPECT_TRUE(actual.count(key))
        << "missing compute block: sequence " << std::get<0>(key) << ", group " << std::get<1>(key)
        << ", q " << std::get<2>(key) << ", kv " << std::get<3>(key) << " with area " << area;
  }
  EXPECT_EQ(actual.size(), expected.size());

  // Totals.
  int64_t dense_area = 0, causal_area = 0, flops_fwd = 0, flops_bwd = 0;
  for (size_t s = 0; s < n_seq; ++s) {
    for (int64_t a : DenseTileAreas(batch.masks()[s], bs)) dense_area += a;
    const int64_t len = batch.seqlens()[s];
    causal_area += len * (len + 1) / 2;
  }
  for (const ComputeBlock& b : set.compute_blocks) {
    flops_fwd += set.FlopsFwd(b);
    flops_bwd += set.FlopsBwd(b);
  }
  EXPECT_EQ(set.mask_area, dense_area);
  EXPECT_EQ(set.causal_area, causal_area);
  EXPECT_EQ(set.flops_fwd, flops_fwd);
  EXPECT_EQ(set.flops_bwd, flops_bwd);
  EXPECT_EQ(set.flops_fwd, 4 * dense_area * shape.head_dim * shape.heads);
  EXPECT_EQ(set.flops_bwd, 10 * dense_area * shape.head_dim * shape.heads);
  EXPECT_DOUBLE_EQ(set.DensityVsCausal(),
                   static_cast<double>(dense_area) / static_cast<double>(causal_area));
}

// ---------------------------------------------------------------------------------------------
// Random cases

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}
  int64_t Uniform(int64_t lo, int64_t hi) {  // in [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

 private:
  std::mt19937_64 rng_;
};

// A text spec of the given family (0..10, in the order of the table of docs/mask_spec.md, then
// the JSON form) with random parameters that fit a sequence of `length` tokens.
std::string RandomSpecText(int family, int64_t length, Random& rnd) {
  const auto join = [](const std::vector<std::string>& parts, const char* sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
    return out;
  };
  switch (family) {
    case 0:
      return "causal";
    case 1:
      return "full";
    case 2:
      return "sliding-window:window=" + std::to_string(rnd.Uniform(1, length + 5));
    case 3:
      return "lambda:sink=" + std::to_string(rnd.Uniform(0, length + 2)) +
             ",window=" + std::to_string(rnd.Uniform(1, length + 2));
    case 4:
      return "causal-blockwise:block=" +
             std::to_string(rnd.Uniform(1, std::max<int64_t>(1, length / 2))) +
             ",local=" + std::to_string(rnd.Uniform(0, 4));
    case 5:
      return "shared-question:question=0." + std::to_string(rnd.Uniform(0, 9)) +
             ",answers=" + std::to_string(rnd.Uniform(1, 6));
    case 6: {
      std::vector<std::string> docs;
      for (int64_t left = length; left > 0 && docs.size() < 6;) {
        const int64_t d = rnd.Uniform(1, left);
        docs.push_back(std::to_string(d));
        left -= d;
        if (rnd.Uniform(0, 3) == 0) break;  // leave a remainder document
      }
      return "documents:lengths=" + join(docs, "/");
    }
    case 7:
      return "documents:count=" + std::to_string(rnd.Uniform(1, std::min<int64_t>(length, 12)));
    case 8: {
      std::vector<std::string> spans;
      for (int64_t at = 0; at < length && spans.size() < 5;) {
        const int64_t begin = rnd.Uniform(at, length - 1);
        const int64_t end = rnd.Uniform(begin + 1, length);
        spans.push_back(std::to_string(begin) + "-" + std::to_string(end));
        at = end + rnd.Uniform(0, 3);
      }
      return "modality:images=" + join(spans, "/");
    }
    case 9:
      return "modality:image=" + std::to_string(rnd.Uniform(1, length)) +
             ",text=" + std::to_string(rnd.Uniform(0, length));
    default: {
      // Explicit slices that may overlap, reach outside the sequence and leave rows empty. Slope-1
      // ends get offsets that are small against the sequence, so that diagonals cross blocks at
      // every offset instead of being clipped away.
      const auto base = [&](int64_t slope) {
        return slope == 0 ? rnd.Uniform(-2, length + 2)
                          : rnd.Uniform(-length / 2 - 1, length / 2 + 1);
      };
      std::vector<std::string> slices;
      for (int64_t n = rnd.Uniform(0, 4); n > 0; --n) {
        const bool all_rows = rnd.Uniform(0, 2) == 0;
        const int64_t r0 = all_rows ? 0 : rnd.Uniform(0, length - 1);
        const int64_t r1 = all_rows ? length : rnd.Uniform(r0, length);
        const int64_t lo_slope = rnd.Uniform(0, 1), hi_slope = rnd.Uniform(0, 1);
        const int64_t lo_base = base(lo_slope);
        const int64_t hi_base =
            hi_slope == lo_slope ? lo_base + rnd.Uniform(-2, length / 2 + 1) : base(hi_slope);
        slices.push_back("{\"rows\": [" + std::to_string(r0) + ", " + std::to_string(r1) +
                         "], \"lo\": [" + std::to_string(lo_base) + ", " +
                         std::to_string(lo_slope) + "], \"hi\": [" + std::to_string(hi_base) +
                         ", " + std::to_string(hi_slope) + "]}");
      }
      return "{\"slices\": [" + join(slices, ", ") + "]}";
    }
  }
}

constexpr int kFamilies = 11;

struct RandomCase {
  std::vector<int64_t> lengths;
  std::vector<std::string> spec_texts;
  AttentionShape shape;
  BlockingOptions options;
};

RandomCase MakeRandomCase(uint64_t seed) {
  Random rnd(seed);
  RandomCase c;
  // One case in ten uses tiny blocks, down to single tokens.
  c.options.block_size = rnd.Uniform(0, 9) == 0 ? rnd.Uniform(1, 4) : rnd.Uniform(1, 300);
  // Keep at most ~40 x 40 tiles per sequence so the dense count stays cheap.
  const int64_t longest = std::min<int64_t>(500, 40 * c.options.block_size);
  const int64_t n_seq = rnd.Uniform(1, 4);
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t kind = rnd.Uniform(0, 5);
    const int64_t len = kind == 0   ? 1
                        : kind == 1 ? std::min(longest, c.options.block_size * rnd.Uniform(1, 3))
                                    : rnd.Uniform(1, longest);
    c.lengths.push_back(len);
    // Cycle through the families so every seed range covers all of them.
    const int family = static_cast<int>((seed + static_cast<uint64_t>(s) * 3) % kFamilies);
    c.spec_texts.push_back(RandomSpecText(family, len, rnd));
  }
  const int64_t heads_log = rnd.Uniform(0, 4);
  c.shape.heads = int64_t{1} << heads_log;
  c.shape.kv_heads = int64_t{1} << rnd.Uniform(0, heads_log);
  c.shape.head_dim = rnd.Uniform(1, 256);
  c.shape.dtype = rnd.Uniform(0, 1) ? DType::kFloat32 : DType::kBFloat16;
  std::vector<int64_t> divisors;
  for (int64_t g = 1; g <= c.shape.kv_heads; ++g) {
    if (c.shape.kv_heads % g == 0) divisors.push_back(g);
  }
  c.options.head_groups = divisors[rnd.Uniform(0, static_cast<int64_t>(divisors.size()) - 1)];
  return c;
}

std::string Describe(uint64_t seed, const RandomCase& c) {
  std::string out = "seed " + std::to_string(seed) + ", block size " +
                    std::to_string(c.options.block_size) + ", head groups " +
                    std::to_string(c.options.head_groups) + ", heads " +
                    std::to_string(c.shape.heads) + "/" + std::to_string(c.shape.kv_heads) +
                    ", head dim " + std::to_string(c.shape.head_dim) + ", sequences:";
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    out += " " + std::to_string(c.lengths[s]) + " '" + c.spec_texts[s] + "'";
  }
  return out;
}

TEST(MakeBlocks, MatchesTheDenseCountForRandomBatchesOfEveryMaskFamily) {
  constexpr uint64_t kCases = 220;  // 20 per family as the first sequence's mask
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    std::vector<MaskSpec> specs;
    for (const std::string& text : c.spec_texts) {
      Result<MaskSpec> spec = MaskSpec::Parse(text);
      ASSERT_TRUE(spec.ok()) << spec.status().ToString();
      specs.push_back(*spec);
    }
    const Result<Batch> batch = Batch::Create(c.lengths, specs, c.shape);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    const Result<BlockSet> set = MakeBlocks(*batch, c.options);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ExpectMatchesDenseReference(*batch, c.options, *set);
    if (HasFatalFailure() || HasNonfatalFailure()) return;  // one failing seed is enough to read
  }
}

// HasMoreTilesThan against the dense count of one head group's non-empty tiles: never below it
// (the planner leaves a block size out on it) nor above the tile grid, and exactly it where every
// mask is causal.
TEST(HasMoreTilesThan, BoundsTheDenseTileCountOfRandomBatchesOfEveryMaskFamily) {
  constexpr uint64_t kCases = 220;
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    std::vector<MaskSpec> specs;
    for (const std::string& text : c.spec_texts) specs.push_back(*MaskSpec::Parse(text));
    const Result<Batch> batch = Batch::Create(c.lengths, specs, c.shape);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    const auto tiles = static_cast<int64_t>(
        ExpectedComputeBlocks(*batch, c.options.block_size, /*head_groups=*/1).size());
    int64_t grid = 0;  // every (q block, kv block) pair of each sequence
    for (int64_t length : c.lengths) {
      const int64_t n = (length + c.options.block_size - 1) / c.options.block_size;
      grid += n * n;
    }
    if (tiles > 0) {
      EXPECT_TRUE(HasMoreTilesThan(*batch, c.options.block_size, 0));
      EXPECT_TRUE(HasMoreTilesThan(*batch, c.options.block_size, tiles - 1));
    }
    EXPECT_FALSE(HasMoreTilesThan(*batch, c.options.block_size, grid));
  }
}

TEST(HasMoreTilesThan, CountsCausalTilesExactly) {
  Random rnd(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t block_size = rnd.Uniform(1, 64);
    std::vector<int64_t> lengths;
    int64_t tiles = 0;  // a causal sequence of n blocks has n (n + 1) / 2 tiles
    for (int64_t s = rnd.Uniform(1, 5); s > 0; --s) {
      lengths.push_back(rnd.Uniform(1, 2000));
      const int64_t n = (lengths.back() + block_size - 1) / block_size;
      tiles += n * (n + 1) / 2;
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ", block size " + std::to_string(block_size));
    const Result<Batch> batch = Batch::Create(lengths, {*MaskSpec::Parse("causal")},
                                              AttentionShape{.heads = 4, .kv_heads = 2});
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    EXPECT_TRUE(HasMoreTilesThan(*batch, block_size, tiles - 1));
    EXPECT_FALSE(HasMoreTilesThan(*batch, block_size, tiles));
  }
}

TEST(MakeBlocks, MatchesTheDenseCountWhenOneMaskAppliesToAllSequences) {
  const char* const kSpecs[] = {"causal",
                                "full",
                                "sliding-window:window=37",
                                "lambda:sink=5,window=20",
                                "causal-blockwise:block=16,local=1",
                                "shared-question:question=0.3,answers=3",
                                "documents:count=3",
                                "modality:image=9,text=14"};
  const std::vector<int64_t> lengths = {3, 64, 100, 130, 17};
  for (const char* text : kSpecs) {
    for (int64_t block_size : {2, 7, 32, 64, 200}) {
      SCOPED_TRACE(testing::Message() << text << ", block size " << block_size);
      const Result<MaskSpec> spec = MaskSpec::Parse(text);
      ASSERT_TRUE(spec.ok()) << spec.status().ToString();
      const Result<Batch> batch = Batch::Create(lengths, {*spec}, AttentionShape{});
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      const BlockingOptions options{.block_size = block_size, .head_groups = 2};
      const Result<BlockSet> set = MakeBlocks(*batch, options);
      ASSERT_TRUE(set.ok()) << set.status().ToString();
      ExpectMatchesDenseReference(*batch, options, *set);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hand cases

Batch MakeBatch(std::vector<int64_t> lengths, const std::string& spec_text,
                AttentionShape shape = {}) {
  Result<MaskSpec> spec = MaskSpec::Parse(spec_text);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  Result<Batch> batch = Batch::Create(std::move(lengths), {*spec}, shape);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return *batch;
}

TEST(MakeBlocks, FindsTheTilesAShiftedDiagonalReachesWithinOneRowBlock) {
  // Row i sees [0, i + 5): rows 5..9 of q block 0 reach into kv block 1, which the first row of
  // the block does not. Likewise for windows that end left of the diagonal.
  const char* const kSpecs[] = {R"({"slices": [{"rows": [0, 20], "lo": [0, 0], "hi": [5, 1]}]})",
                                R"({"slices": [{"rows": [0, 20], "lo": [-3, 1], "hi": [4, 1]}]})",
                                R"({"slices": [{"rows": [0, 20], "lo": [-12, 1], "hi": [-6, 1]}]})",
                                R"({"slices": [{"rows": [3, 17], "lo": [7, 0], "hi": [-2, 1]}]})"};
  for (const char* text : kSpecs) {
    SCOPED_TRACE(text);
    const Batch batch = MakeBatch({20}, text);
    for (int64_t block_size : {3, 4, 10}) {
      SCOPED_TRACE(block_size);
      const BlockingOptions options{.block_size = block_size};
      const Result<BlockSet> set = MakeBlocks(batch, options);
      ASSERT_TRUE(set.ok()) << set.status().ToString();
      ExpectMatchesDenseReference(batch, options, *set);
    }
  }
}

TEST(MakeBlocks, CutsACausalSequenceOfThreeTokensIntoThreeTiles) {
  // Block size 2: rows 0-1 see 1 + 2 tokens of block 0; rows 2 sees 2 tokens of block 0 and 1 of
  // block 1; tile (0, 1) is empty.
  const Batch batch =
      MakeBatch({3}, "causal", AttentionShape{.heads = 2, .kv_heads = 1, .head_dim = 4});
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 2});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->data_blocks.size(), 2u);
  EXPECT_EQ(set->data_blocks[0].tokens, 2);
  EXPECT_EQ(set->data_blocks[1].tokens, 1);
  ASSERT_EQ(set->compute_blocks.size(), 3u);
  const int64_t expected[3][3] = {{0, 0, 3}, {1, 0, 2}, {1, 1, 1}};  // q, kv, area
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(set->compute_blocks[c].q_block.value, expected[c][0]);
    EXPECT_EQ(set->compute_blocks[c].kv_block.value, expected[c][1]);
    EXPECT_EQ(set->compute_blocks[c].area, expected[c][2]);
    EXPECT_EQ(set->FlopsFwd(set->compute_blocks[c]), 4 * expected[c][2] * 4 * 2);
    EXPECT_EQ(set->FlopsBwd(set->compute_blocks[c]), 10 * expected[c][2] * 4 * 2);
  }
  EXPECT_EQ(set->mask_area, 6);
  EXPECT_EQ(set->flops_fwd, 4 * 6 * 4 * 2);
}

TEST(MakeBlocks, CutsTheCliExampleIntoFiveDataAndElevenComputeBlocks) {
  const Batch batch = MakeBatch({4096, 1000}, "causal");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 1024});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->data_blocks.size(), 5u);
  EXPECT_EQ(set->compute_blocks.size(), 4u * 5 / 2 + 1);  // lower triangle of 4x4, plus 1x1
  EXPECT_EQ(set->sequence_first_block, (std::vector<int32_t>{0, 4, 5}));
  EXPECT_EQ(set->data_blocks[4].batch_token_begin, 4096);
  EXPECT_EQ(set->data_blocks[4].tokens, 1000);
  const int64_t area = 4096 * 4097 / 2 + 1000 * 1001 / 2;
  EXPECT_EQ(set->mask_area, area);
  EXPECT_EQ(set->flops_fwd, 4 * area * 128 * 8);
  EXPECT_EQ(set->flops_bwd, 10 * area * 128 * 8);
}

// max_compute_blocks: a batch with exactly that many is made; one more than allowed is refused,
// head groups counted, and blocking stops there (a causal sequence of 20K tokens in blocks of 1
// token has 2e8 tiles: reserved whole, they exhausted memory before the planner's check ran).
TEST(MakeBlocks, RefusesMoreComputeBlocksThanAllowedBeforeMakingThem) {
  const Batch batch = MakeBatch({4096, 1000}, "causal");  // 11 tiles in blocks of 1024
  EXPECT_TRUE(MakeBlocks(batch, {.block_size = 1024, .max_compute_blocks = 11}).ok());
  const Result<BlockSet> over = MakeBlocks(batch, {.block_size = 1024, .max_compute_blocks = 10});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("more than 10 compute blocks in blocks of 1024 tokens (at "
                                         "sequence 1 of 1000 tokens)"),
            std::string::npos)
      << over.status().message();
  const Batch grouped =
      MakeBatch({300}, "causal", AttentionShape{.heads = 16, .kv_heads = 4, .head_dim = 64});
  EXPECT_TRUE(
      MakeBlocks(grouped, {.block_size = 100, .head_groups = 4, .max_compute_blocks = 24}).ok());
  EXPECT_FALSE(
      MakeBlocks(grouped, {.block_size = 100, .head_groups = 4, .max_compute_blocks = 23}).ok());
  const Result<BlockSet> huge =
      MakeBlocks(MakeBatch({20000}, "causal"), {.block_size = 1, .max_compute_blocks = 1000});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than 1000 compute blocks"), std::string::npos);
  EXPECT_FALSE(MakeBlocks(batch, {.block_size = 1024, .max_compute_blocks = -1}).ok());
}

TEST(MakeBlocks, SplitsEveryTileIntoOneComputeBlockPerHeadGroup) {
  const Batch batch =
      MakeBatch({300}, "causal", AttentionShape{.heads = 16, .kv_heads = 4, .head_dim = 64});
  const Result<BlockSet> one = MakeBlocks(batch, BlockingOptions{.block_size = 100});
  const Result<BlockSet> four =
      MakeBlocks(batch, BlockingOptions{.block_size = 100, .head_groups = 4});
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(one->compute_blocks.size(), 6u);
  EXPECT_EQ(four->compute_blocks.size(), 24u);
  // Same total work, split four ways.
  EXPECT_EQ(four->flops_fwd, one->flops_fwd);
  EXPECT_EQ(four->flops_bwd, one->flops_bwd);
  EXPECT_EQ(four->FlopsFwd(four->compute_blocks[0]) * 4, one->FlopsFwd(one->compute_blocks[0]));
}

TEST(MakeBlocks, SizesDataBlocksFromTheShape) {
  // 8 heads, 2 KV heads, head dim 128, bf16: per token Q = 8*128*2 = 2048 bytes, KV = 2*2*128*2 =
  // 1024 bytes, LSE = 8*4 = 32 bytes.
  const Batch batch = MakeBatch({1500}, "causal");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 1024});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->data_blocks.size(), 2u);
  const DataBlockBytes& last = set->data_blocks[1].bytes;
  EXPECT_EQ(last.q, 476 * 2048);
  EXPECT_EQ(last.kv, 476 * 1024);
  EXPECT_EQ(last.o, 476 * 2048);
  EXPECT_EQ(last.lse, 476 * 32);
  EXPECT_EQ(last.d_o, 476 * 2048);
  EXPECT_EQ(last.dq, 476 * 2048);
  EXPECT_EQ(last.dkv, 476 * 1024);
  EXPECT_EQ(last.Forward(), 476 * (2048 + 1024 + 2048 + 32));
  EXPECT_EQ(last.Total(), 476 * (4 * 2048 + 2 * 1024 + 32));
}

TEST(BytesPerToken, FollowsTheShapeAndDtype) {
  const AttentionShape shape{.heads = 32, .kv_heads = 8, .head_dim = 64, .dtype = DType::kFloat32};
  const DataBlockBytes b = BytesPerToken(shape);
  EXPECT_TRUE(BytesEqual(b, ExpectedBytes(shape, 1)));
  EXPECT_EQ(b.q, 32 * 64 * 4);
  EXPECT_EQ(b.kv, 2 * 8 * 64 * 4);
  EXPECT_EQ(b.lse, 32 * 4);
}

TEST(MakeBlocks, HasDensityOneForCausalMasks) {
  const Batch batch = MakeBatch({1, 2, 1000, 4097}, "causal");
  for (int64_t block_size : {64, 333, 1024, 8192}) {
    const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = block_size});
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(set->DensityVsCausal(), 1.0);
    EXPECT_EQ(set->mask_area, set->causal_area);
  }
}

TEST(MakeBlocks, HasDensityNearTwoForFullMasks) {
  const Batch batch = MakeBatch({1000}, "full");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 256});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_DOUBLE_EQ(set->DensityVsCausal(), 1000.0 * 1000.0 / (1000.0 * 1001.0 / 2));
  EXPECT_EQ(set->compute_blocks.size(), 16u);
}

TEST(MakeBlocks, HasDensityBelowOneForSlidingWindows) {
  const Batch batch = MakeBatch({8192}, "sliding-window:window=1024");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 1024});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_LT(set->DensityVsCausal(), 0.3);
  // Each q block touches itself and the block before: 8 + 7 tiles.
  EXPECT_EQ(set->compute_blocks.size(), 15u);
}

TEST(MakeBlocks, LeavesNoComputeBlocksForFullyMaskedRows) {
  const Batch batch =
      MakeBatch({10, 20}, R"({"slices": [{"rows": [0, 5], "lo": [0, 0], "hi": [0, 0]}]})");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 4});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_TRUE(set->compute_blocks.empty());
  EXPECT_EQ(set->data_blocks.size(), 3u + 5u);
  EXPECT_EQ(set->mask_area, 0);
  EXPECT_EQ(set->flops_fwd, 0);
  EXPECT_EQ(set->DensityVsCausal(), 0.0);
}

TEST(MakeBlocks, UsesOneBlockPerSequenceWhenTheBlockIsLarger) {
  const Batch batch = MakeBatch({5, 9, 1}, "causal");
  const Result<BlockSet> set = MakeBlocks(batch, BlockingOptions{.block_size = 1 << 20});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->data_blocks.size(), 3u);
  EXPECT_EQ(set->compute_blocks.size(), 3u);
  EXPECT_EQ(set->sequence_first_block, (std::vector<int32_t>{0, 1, 2, 3}));
}

// ---------------------------------------------------------------------------------------------
// Errors

void ExpectInvalid(const Status& status, const std::string& substring) {
  ASSERT_FALSE(status.ok()) << "expected an error naming '" << substring << "'";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' does not name '" << substring << "'";
}

TEST(MakeBlocks, RejectsHeadGroupsThatDoNotDivideKvHeads) {
  const Batch batch = MakeBatch({100}, "causal", AttentionShape{.heads = 12, .kv_heads = 6});
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.head_groups = 4}).status(), "head_groups=4");
  // 12 divides heads but is more than kv_heads: a group would split a KV head's query heads.
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.head_groups = 12}).status(), "head_groups=12");
  EXPECT_TRUE(MakeBlocks(batch, BlockingOptions{.head_groups = 3}).ok());
  EXPECT_TRUE(MakeBlocks(batch, BlockingOptions{.head_groups = 6}).ok());
}

TEST(MakeBlocks, RejectsZeroHeadGroups) {
  const Batch batch = MakeBatch({100}, "causal");
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.head_groups = 0}).status(), "head_groups=0");
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.head_groups = -2}).status(), "head_groups=-2");
}

TEST(MakeBlocks, RejectsABlockSizeOfZero) {
  const Batch batch = MakeBatch({100}, "causal");
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.block_size = 0}).status(), "block_size=0");
}

TEST(MakeBlocks, RejectsANegativeBlockSize) {
  const Batch batch = MakeBatch({100}, "causal");
  ExpectInvalid(MakeBlocks(batch, BlockingOptions{.block_size = -64}).status(), "block_size=-64");
}

// blocks.h: MakeBlocks "returns InvalidArgument ... when the batch would need more than 2^31
// blocks". A bidirectional (full) sequence of 2^20 tokens in blocks of 16 has 65536 token blocks
// and 65536^2 = 2^32 non-empty tiles. Its areas and FLOPs fit in 64 bits, so only the block limit
// stops it, and it must do so before materialising any tile (this once ran out of memory).
TEST(MakeBlocks, ReportsMoreThan2To31ComputeBlocksBeforeMaterialisingThem) {
  const Batch batch = MakeBatch({int64_t{1} << 20}, "full");
  ExpectInvalid(MakeBlocks(batch, {.block_size = 16}).status(), "more than 2^31 compute blocks");
}

TEST(BlockingOptions, DefaultIsValid) { EXPECT_TRUE(BlockingOptions{}.Validate().ok()); }

TEST(BlockingOptions, RejectsABlockSizeAboveTheMaximumSequenceLength) {
  ExpectInvalid(BlockingOptions{.block_size = kMaxSequenceLength + 1}.Validate(),
                "block_size=" + std::to_string(kMaxSequenceLength + 1));
}

}  // namespace
}  // namespace dcp
