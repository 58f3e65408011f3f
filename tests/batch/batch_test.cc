// SPDX-License-Identifier: Apache-2.0
// Batch::Create, AttentionShape and DType: the errors Create reports, by code and message, and the
// masks it builds, checked against the closed-form areas of docs/mask_spec.md.
#include "dcp/batch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dcp/mask.h"

namespace dcp {
namespace {

MaskSpec ParseSpec(const std::string& text) {
  Result<MaskSpec> spec = MaskSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status().ToString();
  return spec.ok() ? *spec : MaskSpec{};
}

void ExpectInvalid(const Result<Batch>& batch, const std::string& substring) {
  ASSERT_FALSE(batch.ok()) << "expected an error naming '" << substring << "'";
  EXPECT_EQ(batch.status().code(), StatusCode::kInvalidArgument) << batch.status().ToString();
  EXPECT_NE(batch.status().message().find(substring), std::string::npos)
      << "message '" << batch.status().message() << "' does not name '" << substring << "'";
}

TEST(BatchCreate, RejectsABatchWithoutSequences) {
  ExpectInvalid(Batch::Create({}, {MaskSpec{}}, AttentionShape{}), "no sequences");
}

TEST(BatchCreate, RejectsALengthOfZeroAndNamesTheSequence) {
  const Result<Batch> batch = Batch::Create({10, 0, 5}, {MaskSpec{}}, AttentionShape{});
  ExpectInvalid(batch, "length 0");
  ExpectInvalid(batch, "sequence 1");
}

TEST(BatchCreate, RejectsANegativeLength) {
  ExpectInvalid(Batch::Create({-3}, {MaskSpec{}}, AttentionShape{}), "length -3");
}

TEST(BatchCreate, RejectsALengthAboveTheMaximum) {
  ExpectInvalid(Batch::Create({kMaxSequenceLength + 1}, {MaskSpec{}}, AttentionShape{}),
                std::to_string(kMaxSequenceLength + 1));
}

TEST(BatchCreate, AcceptsALengthOfExactlyTheMaximum) {
  // The causal mask of the longest sequence is one slice, so this stays cheap.
  const Result<Batch> batch = Batch::Create({kMaxSequenceLength}, {MaskSpec{}}, AttentionShape{});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->total_tokens(), kMaxSequenceLength);
}

TEST(BatchCreate, RejectsMoreMasksThanSequences) {
  ExpectInvalid(Batch::Create({10, 20}, {MaskSpec{}, MaskSpec{}, MaskSpec{}}, AttentionShape{}),
                "3 masks");
}

TEST(BatchCreate, RejectsFewerMasksThanSequencesUnlessThereIsOne) {
  ExpectInvalid(Batch::Create({10, 20, 30}, {MaskSpec{}, MaskSpec{}}, AttentionShape{}), "2 masks");
}

TEST(BatchCreate, RejectsAnEmptyMaskList) {
  ExpectInvalid(Batch::Create({10, 20}, {}, AttentionShape{}), "0 masks");
}

TEST(BatchCreate, RejectsKvHeadsThatDoNotDivideHeads) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.heads = 8, .kv_heads = 3}),
                "kv_heads=3");
}

TEST(BatchCreate, RejectsMoreKvHeadsThanHeads) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.heads = 4, .kv_heads = 8}),
                "kv_heads=8");
}

TEST(BatchCreate, RejectsZeroHeads) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.heads = 0, .kv_heads = 1}),
                "heads=0");
}

TEST(BatchCreate, RejectsZeroKvHeads) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.heads = 8, .kv_heads = 0}),
                "kv_heads=0");
}

TEST(BatchCreate, RejectsZeroHeadDim) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.head_dim = 0}), "head_dim=0");
}

TEST(BatchCreate, RejectsANegativeHeadDim) {
  ExpectInvalid(Batch::Create({10}, {MaskSpec{}}, AttentionShape{.head_dim = -128}),
                "head_dim=-128");
}

TEST(BatchCreate, RejectsAMaskThatCannotBeBuiltForItsSequence) {
  // Documents of 100 tokens do not fit in a sequence of 50.
  const Result<Batch> batch =
      Batch::Create({200, 50}, {ParseSpec("documents:lengths=100")}, AttentionShape{});
  ExpectInvalid(batch, "sequence 1");
  ExpectInvalid(batch, "documents");
  ExpectInvalid(batch, "50");
}

TEST(BatchCreate, RejectsAnImageSpanPastTheEndOfItsSequence) {
  const Result<Batch> batch =
      Batch::Create({300, 100, 300}, {ParseSpec("modality:images=50-150")}, AttentionShape{});
  ExpectInvalid(batch, "sequence 1");
  ExpectInvalid(batch, "50-150");
}

TEST(BatchCreate, RejectsAPerSequenceMaskThatDoesNotFitOnlyForItsSequence) {
  // The same spec fits sequence 0 but not sequence 2.
  const MaskSpec docs = ParseSpec("documents:count=20");
  const Result<Batch> batch =
      Batch::Create({30, 40, 10}, {docs, MaskSpec{}, docs}, AttentionShape{});
  ExpectInvalid(batch, "sequence 2");
  ExpectInvalid(batch, "count=20");
}

TEST(BatchCreate, AppliesOneMaskToEverySequence) {
  const MaskSpec full = ParseSpec("full");
  const std::vector<int64_t> lengths = {1, 7, 100, 4096};
  const Result<Batch> batch = Batch::Create(lengths, {full}, AttentionShape{});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->seqlens(), lengths);
  ASSERT_EQ(batch->mask_specs().size(), lengths.size());
  ASSERT_EQ(batch->masks().size(), lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(batch->mask_specs()[s], full);
    EXPECT_EQ(batch->masks()[s].length(), lengths[s]);
    EXPECT_EQ(batch->masks()[s].TotalArea(), lengths[s] * lengths[s]);
  }
  EXPECT_EQ(batch->total_tokens(), 1 + 7 + 100 + 4096);
}

TEST(BatchCreate, AppliesOneMaskPerSequenceInOrder) {
  const std::vector<MaskSpec> specs = {ParseSpec("causal"), ParseSpec("full"),
                                       ParseSpec("sliding-window:window=10"),
                                       ParseSpec("documents:count=4")};
  const std::vector<int64_t> lengths = {100, 50, 64, 40};
  const Result<Batch> batch = Batch::Create(lengths, specs, AttentionShape{});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->mask_specs(), specs);
  ASSERT_EQ(batch->masks().size(), 4u);
  EXPECT_EQ(batch->masks()[0].TotalArea(), 100 * 101 / 2);
  EXPECT_EQ(batch->masks()[1].TotalArea(), 50 * 50);
  // Rows 0..9 see i+1 tokens, the other 54 rows see 10.
  EXPECT_EQ(batch->masks()[2].TotalArea(), 10 * 11 / 2 + 54 * 10);
  // Four causal documents of 10 tokens.
  EXPECT_EQ(batch->masks()[3].TotalArea(), 4 * (10 * 11 / 2));
  for (size_t s = 0; s < lengths.size(); ++s) EXPECT_EQ(batch->masks()[s].length(), lengths[s]);
}

TEST(BatchCreate, KeepsTheShape) {
  const AttentionShape shape{.heads = 32, .kv_heads = 8, .head_dim = 64, .dtype = DType::kFloat32};
  const Result<Batch> batch = Batch::Create({5, 6}, {MaskSpec{}}, shape);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->shape(), shape);
  EXPECT_EQ(batch->total_tokens(), 11);
}

TEST(BatchCreate, AcceptsMultiQueryAndMultiHeadShapes) {
  for (int64_t kv_heads : {1, 2, 4, 8}) {
    SCOPED_TRACE(kv_heads);
    const Result<Batch> batch =
        Batch::Create({5}, {MaskSpec{}}, AttentionShape{.heads = 8, .kv_heads = kv_heads});
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  }
}

TEST(AttentionShape, DefaultIsValid) { EXPECT_TRUE(AttentionShape{}.Validate().ok()); }

TEST(DType, ParsesWhatToStringPrints) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Result<DType> parsed = ParseDType(ToString(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(ToString(DType::kFloat32), "fp32");
  EXPECT_EQ(ToString(DType::kBFloat16), "bf16");
}

TEST(DType, HasTheBytesOfItsStorage) {
  EXPECT_EQ(BytesPerElement(DType::kFloat32), 4);
  EXPECT_EQ(BytesPerElement(DType::kBFloat16), 2);
}

TEST(DType, RejectsAnUnknownNameAndNamesIt) {
  const Result<DType> parsed = ParseDType("fp16");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("fp16"), std::string::npos);
}

}  // namespace
}  // namespace dcp
