// SPDX-License-Identifier: Apache-2.0
// PackBatches against the rule of include/dcp/batch.h: shuffle with a seed, drop sequences longer
// than max_sequence_length, fill batches greedily in order, close a batch when the next sequence
// would overflow the budget, keep it only if it holds at least min_fill * budget tokens, and drop
// the last, unfinished batch.
//
// The shuffle is internal, so most checks are properties that hold for every order. One test goes
// further: the shuffle of a Fisher-Yates-style permutation depends only on the count and the seed,
// not on the values, so packing 1..n into a budget of exactly n(n+1)/2 reveals the permutation,
// and a plain re-implementation of the greedy rule applied to the permuted input must then give
// exactly the library's batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dcp/batch.h"

namespace dcp {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

Batches Pack(const std::vector<int64_t>& lengths, const PackOptions& options) {
  Result<Batches> batches = PackBatches(lengths, options);
  EXPECT_TRUE(batches.ok()) << batches.status().ToString();
  return batches.ok() ? *batches : Batches{};
}

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// The greedy rule on an order that is already shuffled.
Batches ReferencePack(const std::vector<int64_t>& ordered, const PackOptions& options) {
  const int64_t max_len =
      options.max_sequence_length == 0 ? options.token_budget : options.max_sequence_length;
  Batches kept;
  std::vector<int64_t> open;
  int64_t open_tokens = 0;
  const auto close = [&] {
    if (static_cast<double>(open_tokens) >=
        options.min_fill * static_cast<double>(options.token_budget)) {
      kept.push_back(open);
    }
    open.clear();
    open_tokens = 0;
  };
  for (int64_t len : ordered) {
    if (len > max_len) continue;
    if (open_tokens + len > options.token_budget) close();
    open.push_back(len);
    open_tokens += len;
  }
  // A batch filled to exactly the budget can take no further sequence, so it is finished.
  if (open_tokens == options.token_budget) close();
  return kept;
}

// The positions the library's shuffle sends n values to, found by packing 1..n into one batch of
// exactly their sum (every value fits, and the batch is full, so nothing is dropped).
std::vector<int64_t> RevealShuffle(int64_t n, uint64_t seed) {
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), int64_t{1});
  if (n == 0) return {};
  const Batches one = Pack(identity, PackOptions{.token_budget = n * (n + 1) / 2, .seed = seed});
  EXPECT_EQ(one.size(), 1u);
  return one.empty() ? std::vector<int64_t>{} : one.front();
}

// Multiset of values as value -> count.
std::map<int64_t, int64_t> Counts(const std::vector<int64_t>& v) {
  std::map<int64_t, int64_t> counts;
  for (int64_t x : v) ++counts[x];
  return counts;
}

struct RandomCase {
  std::vector<int64_t> lengths;
  PackOptions options;
};

RandomCase MakeRandomCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&rng](int64_t lo, int64_t hi) {  // in [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  RandomCase c;
  c.options.token_budget = uniform(1, 4) == 1 ? uniform(1, 20) : uniform(20, 5000);
  c.options.max_sequence_length = uniform(0, 2) == 0 ? 0 : uniform(1, c.options.token_budget);
  const int64_t fill_kind = uniform(0, 3);
  c.options.min_fill = fill_kind == 0   ? 0.0
                       : fill_kind == 1 ? 1.0
                                        : static_cast<double>(uniform(0, 1000)) / 1000;
  c.options.seed = rng();
  const int64_t n = uniform(0, 150);
  const int64_t longest = c.options.token_budget * uniform(1, 3) / 2 + 1;
  for (int64_t i = 0; i < n; ++i) c.lengths.push_back(uniform(1, 4) == 1 ? 1 : uniform(1, longest));
  return c;
}

std::string Describe(uint64_t seed, const RandomCase& c) {
  return testing::PrintToString(seed) + ": budget " + std::to_string(c.options.token_budget) +
         ", max " + std::to_string(c.options.max_sequence_length) + ", min_fill " +
         std::to_string(c.options.min_fill) + ", " + std::to_string(c.lengths.size()) + " lengths";
}

void ExpectInvalid(const Status& status, const std::string& substring) {
  ASSERT_FALSE(status.ok()) << "expected an error naming '" << substring << "'";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' does not name '" << substring << "'";
}

constexpr uint64_t kRandomCases = 300;

// ---------------------------------------------------------------------------------------------
// Properties over random inputs

TEST(PackBatches, KeepsEveryBatchWithinTheBudgetAndAboveMinFill) {
  for (uint64_t seed = 0; seed < kRandomCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    for (const std::vector<int64_t>& batch : Pack(c.lengths, c.options)) {
      EXPECT_FALSE(batch.empty());
      EXPECT_LE(Sum(batch), c.options.token_budget);
      EXPECT_GE(static_cast<double>(Sum(batch)),
                c.options.min_fill * static_cast<double>(c.options.token_budget));
    }
  }
}

TEST(PackBatches, DropsSequencesLongerThanTheMaximumLength) {
  for (uint64_t seed = 0; seed < kRandomCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    const int64_t max_len =
        c.options.max_sequence_length == 0 ? c.options.token_budget : c.options.max_sequence_length;
    for (const std::vector<int64_t>& batch : Pack(c.lengths, c.options)) {
      for (int64_t len : batch) EXPECT_LE(len, max_len);
    }
  }
}

TEST(PackBatches, UsesEachInputSequenceAtMostOnce) {
  for (uint64_t seed = 0; seed < kRandomCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    std::map<int64_t, int64_t> available = Counts(c.lengths);
    for (const std::vector<int64_t>& batch : Pack(c.lengths, c.options)) {
      for (int64_t len : batch) EXPECT_GE(--available[len], 0) << "length " << len;
    }
  }
}

TEST(PackBatches, GivesTheSameBatchesForTheSameSeed) {
  for (uint64_t seed = 0; seed < kRandomCases; seed += 3) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    EXPECT_EQ(Pack(c.lengths, c.options), Pack(c.lengths, c.options));
  }
}

TEST(PackBatches, ShufflesDifferentlyForDifferentSeeds) {
  std::vector<int64_t> lengths(200);
  std::iota(lengths.begin(), lengths.end(), int64_t{1});
  const int64_t total = Sum(lengths);
  const Batches a = Pack(lengths, PackOptions{.token_budget = total, .seed = 1});
  const Batches b = Pack(lengths, PackOptions{.token_budget = total, .seed = 2});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(a, b);
  EXPECT_NE(a.front(), lengths) << "the input order came back unshuffled";
  EXPECT_EQ(Counts(a.front()), Counts(lengths));
}

TEST(PackBatches, ClosesABatchOnlyWhenTheNextSequenceWouldOverflow) {
  // With min_fill 0 every closed batch is kept, so consecutive batches are consecutive in the
  // shuffled order: the first sequence of a batch did not fit in the one before. Every input
  // sequence is either in a batch or in the dropped, unfinished tail, which is below the budget.
  for (uint64_t seed = 0; seed < kRandomCases; ++seed) {
    RandomCase c = MakeRandomCase(seed);
    c.options.min_fill = 0;
    SCOPED_TRACE(Describe(seed, c));
    const int64_t max_len =
        c.options.max_sequence_length == 0 ? c.options.token_budget : c.options.max_sequence_length;
    const Batches batches = Pack(c.lengths, c.options);
    for (size_t b = 0; b + 1 < batches.size(); ++b) {
      EXPECT_GT(Sum(batches[b]) + batches[b + 1].front(), c.options.token_budget);
    }
    std::map<int64_t, int64_t> tail;
    for (int64_t len : c.lengths) {
      if (len <= max_len) ++tail[len];
    }
    for (const std::vector<int64_t>& batch : batches) {
      for (int64_t len : batch) --tail[len];
    }
    int64_t tail_tokens = 0, tail_longest = 0;
    for (const auto& [len, count] : tail) {
      ASSERT_GE(count, 0);
      tail_tokens += len * count;
      if (count > 0) tail_longest = len;
    }
    EXPECT_LT(tail_tokens, c.options.token_budget);
    if (!batches.empty() && tail_tokens > 0) {
      EXPECT_GT(Sum(batches.back()) + tail_longest, c.options.token_budget);
    }
    if (!batches.empty() && tail_tokens == 0) {
      EXPECT_EQ(Sum(batches.back()), c.options.token_budget);
    }
  }
}

TEST(PackBatches, MatchesTheGreedyRuleOnTheShuffledOrder) {
  for (uint64_t seed = 0; seed < kRandomCases; ++seed) {
    const RandomCase c = MakeRandomCase(seed);
    SCOPED_TRACE(Describe(seed, c));
    const std::vector<int64_t> order =
        RevealShuffle(static_cast<int64_t>(c.lengths.size()), c.options.seed);
    ASSERT_EQ(order.size(), c.lengths.size());
    std::vector<int64_t> shuffled;
    for (int64_t position : order) shuffled.push_back(c.lengths[position - 1]);
    EXPECT_EQ(Pack(c.lengths, c.options), ReferencePack(shuffled, c.options));
  }
}

// ---------------------------------------------------------------------------------------------
// Hand cases (equal lengths, so the shuffle cannot matter)

TEST(PackBatches, KeepsOnlyBatchesAboveMinFill) {
  // Budget 100, sequences of 30: batches of three (90 tokens). Half-full batches are dropped.
  const std::vector<int64_t> lengths(10, 30);
  EXPECT_EQ(Pack(lengths, PackOptions{.token_budget = 100, .min_fill = 0.9}),
            Batches(3, std::vector<int64_t>(3, 30)));
  EXPECT_EQ(Pack(lengths, PackOptions{.token_budget = 100, .min_fill = 0.91}), Batches{});
}

TEST(PackBatches, DropsTheUnfinishedLastBatch) {
  // 7 x 25 into 100: one full batch of 4; the 3 left over (75 tokens, above min_fill) are the
  // unfinished tail.
  EXPECT_EQ(Pack(std::vector<int64_t>(7, 25), PackOptions{.token_budget = 100}),
            (Batches{{25, 25, 25, 25}}));
}

TEST(PackBatches, KeepsALastBatchThatIsExactlyFull) {
  EXPECT_EQ(Pack(std::vector<int64_t>(8, 25), PackOptions{.token_budget = 100}),
            Batches(2, {25, 25, 25, 25}));
}

TEST(PackBatches, DropsSequencesLongerThanTheBudgetByDefault) {
  EXPECT_EQ(Pack({200, 50, 300, 50, 101}, PackOptions{.token_budget = 100}), (Batches{{50, 50}}));
}

TEST(PackBatches, DropsSequencesLongerThanAnExplicitMaximum) {
  // Sequences of 60 fit the budget but not max_sequence_length 40.
  EXPECT_EQ(Pack({60, 20, 60, 20, 60, 20, 20, 20},
                 PackOptions{.token_budget = 100, .max_sequence_length = 40, .min_fill = 0}),
            (Batches{{20, 20, 20, 20, 20}}));
}

TEST(PackBatches, KeepsASequenceOfExactlyTheMaximumLength) {
  EXPECT_EQ(Pack({100, 100}, PackOptions{.token_budget = 100}), Batches(2, {100}));
}

TEST(PackBatches, GivesNoBatchesForNoSequences) { EXPECT_EQ(Pack({}, PackOptions{}), Batches{}); }

TEST(PackBatches, GivesNoBatchesWhenEverySequenceIsTooLong) {
  EXPECT_EQ(Pack({500, 600}, PackOptions{.token_budget = 100}), Batches{});
}

TEST(PackBatches, KeepsEveryClosedBatchWhenMinFillIsZero) {
  // 5 x 60 into 100: each sequence closes the batch before it; the last one is the tail.
  EXPECT_EQ(Pack(std::vector<int64_t>(5, 60), PackOptions{.token_budget = 100, .min_fill = 0}),
            Batches(4, {60}));
}

TEST(PackBatches, KeepsOnlyFullBatchesWhenMinFillIsOne) {
  EXPECT_EQ(Pack(std::vector<int64_t>(9, 50), PackOptions{.token_budget = 100, .min_fill = 1}),
            Batches(4, {50, 50}));
  EXPECT_EQ(Pack(std::vector<int64_t>(9, 30), PackOptions{.token_budget = 100, .min_fill = 1}),
            Batches{});
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(PackBatches, RejectsAZeroLength) {
  ExpectInvalid(PackBatches({10, 0, 20}, PackOptions{.token_budget = 100}).status(), "0");
}

TEST(PackBatches, RejectsANegativeLength) {
  ExpectInvalid(PackBatches({10, -7}, PackOptions{.token_budget = 100}).status(), "-7");
}

TEST(PackOptions, DefaultIsValid) { EXPECT_TRUE(PackOptions{}.Validate().ok()); }

TEST(PackOptions, RejectsANonPositiveBudget) {
  ExpectInvalid(PackOptions{.token_budget = 0}.Validate(), "token_budget=0");
  ExpectInvalid(PackBatches({1}, PackOptions{.token_budget = -4}).status(), "token_budget=-4");
}

TEST(PackOptions, RejectsABudgetAboveTheMaximumSequenceLength) {
  ExpectInvalid(PackOptions{.token_budget = kMaxSequenceLength + 1}.Validate(),
                "token_budget=" + std::to_string(kMaxSequenceLength + 1));
}

TEST(PackOptions, RejectsANegativeMaximumLength) {
  ExpectInvalid(PackOptions{.max_sequence_length = -1}.Validate(), "max_sequence_length=-1");
}

TEST(PackOptions, RejectsAMaximumLengthAboveTheBudget) {
  ExpectInvalid(PackOptions{.token_budget = 100, .max_sequence_length = 101}.Validate(),
                "max_sequence_length=101");
  EXPECT_TRUE((PackOptions{.token_budget = 100, .max_sequence_length = 100}.Validate().ok()));
}

TEST(PackOptions, RejectsMinFillOutsideZeroToOne) {
  for (double min_fill : {-0.01, 1.01, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(min_fill);
    ExpectInvalid(PackOptions{.min_fill = min_fill}.Validate(), "min_fill=");
    ExpectInvalid(PackBatches({1}, PackOptions{.min_fill = min_fill}).status(), "min_fill=");
  }
}

}  // namespace
}  // namespace dcp
