// SPDX-License-Identifier: Apache-2.0
// ChooseBlockSize against a plain re-implementation of the rule in include/dcp/blocks.h: the
// largest power of two, not below min_block_size, whose token blocks, spread largest first onto
// the least loaded device, give max/mean tokens <= 1 + eps_memory; min_block_size when none does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dcp/blocks.h"

namespace dcp {
namespace {

// max/mean tokens per device after placing the blocks, largest first, each on a least loaded
// device (a linear scan; ties do not change the loads' multiset).
double ReferenceImbalance(const std::vector<int64_t>& seqlens, int64_t block_size,
                          int64_t devices) {
  std::vector<int64_t> blocks;
  int64_t total = 0;
  for (int64_t len : seqlens) {
    total += len;
    const int64_t full = len / block_size;
    blocks.insert(blocks.end(), static_cast<size_t>(full), block_size);
    if (len % block_size != 0) blocks.push_back(len % block_size);
  }
  std::sort(blocks.rbegin(), blocks.rend());
  std::vector<int64_t> loads(devices, 0);
  for (int64_t b : blocks) *std::min_element(loads.begin(), loads.end()) += b;
  const int64_t max_load = *std::max_element(loads.begin(), loads.end());
  const double mean = static_cast<double>(total) / static_cast<double>(devices);
  return static_cast<double>(max_load) / mean;
}

BlockSizeChoice ReferenceChoice(const std::vector<int64_t>& seqlens,
                                const BlockSizeOptions& options) {
  const int64_t longest = *std::max_element(seqlens.begin(), seqlens.end());
  // Beyond the smallest power of two that holds the longest sequence every sequence is one block,
  // so larger sizes change nothing; scan every candidate from the smallest.
  int64_t top = options.min_block_size;
  while (top < longest) top *= 2;
  BlockSizeChoice choice{
      .block_size = options.min_block_size,
      .memory_imbalance = ReferenceImbalance(seqlens, options.min_block_size, options.devices)};
  for (int64_t p = options.min_block_size; p <= top; p *= 2) {
    const double imbalance = ReferenceImbalance(seqlens, p, options.devices);
    if (imbalance <= 1 + options.eps_memory)
      choice = {.block_size = p, .memory_imbalance = imbalance};
  }
  return choice;
}

BlockSizeChoice Choose(const std::vector<int64_t>& seqlens, const BlockSizeOptions& options) {
  const Result<BlockSizeChoice> choice = ChooseBlockSize(seqlens, options);
  EXPECT_TRUE(choice.ok()) << choice.status().ToString();
  return choice.ok() ? *choice : BlockSizeChoice{};
}

void ExpectInvalid(const Status& status, const std::string& substring) {
  ASSERT_FALSE(status.ok()) << "expected an error naming '" << substring << "'";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' does not name '" << substring << "'";
}

// ---------------------------------------------------------------------------------------------
// Against the reference

TEST(ChooseBlockSize, MatchesTheReferenceRuleOnRandomBatches) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    const auto uniform = [&rng](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    std::vector<int64_t> seqlens(static_cast<size_t>(uniform(1, 12)));
    const int64_t longest = int64_t{1} << uniform(4, 14);
    for (int64_t& len : seqlens) len = uniform(0, 4) == 0 ? uniform(1, 64) : uniform(1, longest);
    const BlockSizeOptions options{
        .devices = uniform(1, 64),
        .eps_memory = static_cast<double>(uniform(0, 100)) / 100 + 0.003,  // off exact ratios
        .min_block_size = int64_t{1} << uniform(3, 10)};
    std::string lengths;
    for (int64_t len : seqlens) lengths += " " + std::to_string(len);
    SCOPED_TRACE(testing::Message() << "seed " << seed << ", devices " << options.devices
                                    << ", eps " << options.eps_memory << ", min "
                                    << options.min_block_size << ", lengths" << lengths);
    const BlockSizeChoice expected = ReferenceChoice(seqlens, options);
    const BlockSizeChoice actual = Choose(seqlens, options);
    EXPECT_EQ(actual.block_size, expected.block_size);
    EXPECT_NEAR(actual.memory_imbalance, expected.memory_imbalance, 1e-12);
  }
}

TEST(ChooseBlockSize, ChoosesAPowerOfTwoNotBelowTheMinimum) {
  for (int64_t min : {1, 2, 64, 256, 4096}) {
    const BlockSizeChoice c =
        Choose({3000, 17, 999}, BlockSizeOptions{.devices = 4, .min_block_size = min});
    EXPECT_GE(c.block_size, min);
    EXPECT_EQ(c.block_size & (c.block_size - 1), 0) << c.block_size;
  }
}

// ---------------------------------------------------------------------------------------------
// Hand cases

TEST(ChooseBlockSize, SplitsOneLongSequenceIntoOneBlockPerDevice) {
  // 16384 tokens on 8 devices: 16384, 8192 and 4096 leave devices empty; 2048 gives 8 equal
  // blocks.
  const BlockSizeChoice c = Choose({16384}, BlockSizeOptions{.devices = 8});
  EXPECT_EQ(c.block_size, 2048);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 1.0);
}

// The spread the tuning's block sizes are held to: 9000 + 3000 tokens in blocks of 4096 are
// 4096, 4096, 3000 and 808 on 3 devices; the 808 joins the 3000, so the largest load is 4096
// against 12000 / 3 = 4000 on average. No device, no block size, no tokens: infinity, not a crash
// or a hang.
TEST(GreedySpreadImbalance, PlacesLargestFirstOnTheLeastLoadedDevice) {
  EXPECT_DOUBLE_EQ(GreedySpreadImbalance({9000, 3000}, 4096, 3), 4096.0 / 4000);
  EXPECT_DOUBLE_EQ(GreedySpreadImbalance({16384}, 2048, 8), 1.0);
  EXPECT_DOUBLE_EQ(GreedySpreadImbalance({16384}, 4096, 8), 2.0);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(GreedySpreadImbalance({1000}, 1024, 0), inf);
  EXPECT_EQ(GreedySpreadImbalance({1000}, 0, 8), inf);
  EXPECT_EQ(GreedySpreadImbalance({}, 1024, 8), inf);
}

TEST(ChooseBlockSize, KeepsWholeSequencesWhenTheyAlreadyBalance) {
  // Eight sequences of 1000 on 8 devices: one 1024-token block each.
  const BlockSizeChoice c = Choose(std::vector<int64_t>(8, 1000), BlockSizeOptions{.devices = 8});
  EXPECT_EQ(c.block_size, 1024);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 1.0);
}

TEST(ChooseBlockSize, UsesEveryBlockSizeBetweenMinimumAndLongestSequence) {
  // 1000 tokens on 4 devices: 1024 gives 4.0, 512 gives 512*4/1000 = 2.048, 256 gives
  // 256*4/1000 = 1.024.
  const BlockSizeChoice c = Choose({1000}, BlockSizeOptions{.devices = 4});
  EXPECT_EQ(c.block_size, 256);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 1.024);
}

TEST(ChooseBlockSize, FallsBackToTheMinimumAndReportsItsImbalance) {
  // 100 tokens cannot fill 4 devices at block size 256 or more.
  const BlockSizeChoice c = Choose({100}, BlockSizeOptions{.devices = 4});
  EXPECT_EQ(c.block_size, 256);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 4.0);
  EXPECT_GT(c.memory_imbalance, 1 + BlockSizeOptions{}.eps_memory);
}

TEST(ChooseBlockSize, StartsAtTheMinimumWhenItExceedsTheLongestSequence) {
  const BlockSizeChoice c =
      Choose({10, 10}, BlockSizeOptions{.devices = 2, .min_block_size = 1024});
  EXPECT_EQ(c.block_size, 1024);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 1.0);
}

TEST(ChooseBlockSize, ChoosesTheLargestBlockOnOneDevice) {
  const BlockSizeChoice c = Choose({5000, 70000, 3}, BlockSizeOptions{.devices = 1});
  EXPECT_EQ(c.block_size, 131072);
  EXPECT_DOUBLE_EQ(c.memory_imbalance, 1.0);
}

TEST(ChooseBlockSize, AcceptsImbalanceUpToExactlyTheTolerance) {
  // 3 x 1024 + 512 tokens on 2 devices: at 1024 and at 512 the greedy loads are 2048 and 1536,
  // max/mean = 2048/1792 = 8/7; at 256 they are equal. eps just above 1/7 accepts 1024, eps just
  // below refuses 1024 and 512.
  const BlockSizeChoice accepted =
      Choose({1024, 1024, 1024, 512}, BlockSizeOptions{.devices = 2, .eps_memory = 0.1429});
  EXPECT_EQ(accepted.block_size, 1024);
  const BlockSizeChoice refused =
      Choose({1024, 1024, 1024, 512}, BlockSizeOptions{.devices = 2, .eps_memory = 0.1428});
  EXPECT_EQ(refused.block_size, 256);
  EXPECT_DOUBLE_EQ(refused.memory_imbalance, 1.0);
}

TEST(ChooseBlockSize, AcceptsPerfectBalanceWithZeroTolerance) {
  // eps 0 still accepts max/mean == 1 exactly ("<= 1 + eps_memory").
  const BlockSizeChoice c = Choose({16384}, BlockSizeOptions{.devices = 8, .eps_memory = 0});
  EXPECT_EQ(c.block_size, 2048);
  EXPECT_EQ(c.memory_imbalance, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(BlockSizeOptions, DefaultIsValid) { EXPECT_TRUE(BlockSizeOptions{}.Validate().ok()); }

TEST(BlockSizeOptions, RejectsZeroDevices) {
  ExpectInvalid(BlockSizeOptions{.devices = 0}.Validate(), "devices=0");
  ExpectInvalid(ChooseBlockSize({100}, BlockSizeOptions{.devices = -1}).status(), "devices=-1");
}

TEST(BlockSizeOptions, RejectsANegativeOrNanTolerance) {
  ExpectInvalid(BlockSizeOptions{.eps_memory = -0.1}.Validate(), "eps_memory=");
  ExpectInvalid(BlockSizeOptions{.eps_memory = std::numeric_limits<double>::quiet_NaN()}.Validate(),
                "eps_memory=");
}

TEST(BlockSizeOptions, RejectsAMinimumThatIsNotAPowerOfTwo) {
  ExpectInvalid(BlockSizeOptions{.min_block_size = 0}.Validate(), "min_block_size=0");
  ExpectInvalid(BlockSizeOptions{.min_block_size = 3}.Validate(), "min_block_size=3");
  ExpectInvalid(BlockSizeOptions{.min_block_size = 1000}.Validate(), "min_block_size=1000");
  ExpectInvalid(BlockSizeOptions{.min_block_size = -256}.Validate(), "min_block_size=-256");
  ExpectInvalid(ChooseBlockSize({100}, BlockSizeOptions{.min_block_size = 384}).status(),
                "min_block_size=384");
}

TEST(ChooseBlockSize, RejectsNoSequences) {
  ExpectInvalid(ChooseBlockSize({}, BlockSizeOptions{}).status(), "no sequences");
}

TEST(ChooseBlockSize, RejectsABadSequenceLength) {
  ExpectInvalid(ChooseBlockSize({100, 0}, BlockSizeOptions{}).status(), "length 0");
  ExpectInvalid(ChooseBlockSize({kMaxSequenceLength + 1}, BlockSizeOptions{}).status(),
                std::to_string(kMaxSequenceLength + 1));
}

}  // namespace
}  // namespace dcp
