// SPDX-License-Identifier: Apache-2.0
// Each built-in mask family on a tiny sequence against a picture drawn by hand from the table in
// docs/mask_spec.md ('x': row may attend to column, '.': masked). Both the built Mask and the dense
// reference (tests/testing/dense_mask.h) must show the picture, which also checks the reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/mask.h"
#include "testing/dense_mask.h"

namespace dcp {
namespace {

std::vector<std::string> Picture(const Mask& mask) {
  std::vector<std::string> rows;
  for (int64_t q = 0; q < mask.length(); ++q) {
    std::string row;
    for (int64_t k = 0; k < mask.length(); ++k) {
      const int64_t cell = mask.Area(q, q + 1, k, k + 1);
      row += cell == 1 ? 'x' : cell == 0 ? '.' : '?';
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::string> Picture(const testing::DenseMask& dense) {
  std::vector<std::string> rows;
  for (int64_t q = 0; q < dense.length(); ++q) rows.push_back(dense.Row(q));
  return rows;
}

void ExpectPicture(const std::string& text, const std::vector<std::string>& picture) {
  SCOPED_TRACE("spec " + text);
  const auto length = static_cast<int64_t>(picture.size());
  const Result<MaskSpec> spec = MaskSpec::Parse(text);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const Result<Mask> mask = spec->Build(length);
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_EQ(Picture(*mask), picture) << "built mask";
  EXPECT_EQ(Picture(testing::DenseFromSpec(*spec, length)), picture) << "dense reference";
}

TEST(MaskFamilies, CausalSeesItselfAndEverythingBefore) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x...",
      "xx..",
      "xxx.",
      "xxxx",
  };
  // clang-format on
  ExpectPicture("causal", picture);
}

TEST(MaskFamilies, FullSeesEverything) {
  // clang-format off
  const std::vector<std::string> picture = {
      "xxx",
      "xxx",
      "xxx",
  };
  // clang-format on
  ExpectPicture("full", picture);
}

TEST(MaskFamilies, SlidingWindowSeesTheLastWindowTokens) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x....",
      "xx...",
      "xxx..",
      ".xxx.",
      "..xxx",
  };
  // clang-format on
  ExpectPicture("sliding-window:window=3", picture);
}

TEST(MaskFamilies, LambdaAddsSinkTokensToTheWindow) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x....",
      "xx...",
      "xxx..",
      "x.xx.",
      "x..xx",
  };
  // clang-format on
  ExpectPicture("lambda:sink=1,window=2", picture);
}

TEST(MaskFamilies, LambdaSinkIsCausalInsideTheSink) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x....",
      "xx...",
      "xxx..",
      "xxxx.",
      "xxx.x",
  };
  // clang-format on
  ExpectPicture("lambda:sink=3,window=1", picture);
}

TEST(MaskFamilies, CausalBlockwiseSeesFirstBlockAndLocalWindow) {
  // Blocks of 2: [0,2) [2,4) [4,6) [6,8) [8,9); the last one sees everything before it.
  // clang-format off
  const std::vector<std::string> picture = {
      "x........",
      "xx.......",
      "xxx......",
      "xxxx.....",
      "xxxxx....",
      "xx.xxx...",
      "xx..xxx..",
      "xx...xxx.",
      "xxxxxxxxx",
  };
  // clang-format on
  ExpectPicture("causal-blockwise:block=2,local=1", picture);
}

TEST(MaskFamilies, CausalBlockwiseWithoutLocalBlocksSeesOnlyItselfBesidesTheFirstBlock) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x......",
      "xx.....",
      "xxx....",
      "xx.x...",
      "xx..x..",
      "xx...x.",
      "xxxxxxx",
  };
  // clang-format on
  ExpectPicture("causal-blockwise:block=2,local=0", picture);
}

TEST(MaskFamilies, CausalBlockwiseWithTwoBlocksIsCausal) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x....",
      "xx...",
      "xxx..",
      "xxxx.",
      "xxxxx",
  };
  // clang-format on
  ExpectPicture("causal-blockwise:block=3,local=0", picture);
}

TEST(MaskFamilies, SharedQuestionAnswersSeeTheQuestionAndThemselves) {
  // q = floor(0.25 * 8) = 2; answers of 6 / 4 = 1 token, the last takes the remaining 3.
  // clang-format off
  const std::vector<std::string> picture = {
      "x.......",
      "xx......",
      "xxx.....",
      "xx.x....",
      "xx..x...",
      "xx...x..",
      "xx...xx.",
      "xx...xxx",
  };
  // clang-format on
  ExpectPicture("shared-question:question=0.25,answers=4", picture);
}

TEST(MaskFamilies, SharedQuestionWithoutQuestionIsCausalPerAnswer) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x....",
      "xx...",
      "..x..",
      "..xx.",
      "..xxx",
  };
  // clang-format on
  ExpectPicture("shared-question:question=0,answers=2", picture);
}

TEST(MaskFamilies, DocumentsByLengthsAreCausalInsideEachDocument) {
  // Documents [0,2) [2,5), and the remaining [5,7) as one more.
  // clang-format off
  const std::vector<std::string> picture = {
      "x......",
      "xx.....",
      "..x....",
      "..xx...",
      "..xxx..",
      ".....x.",
      ".....xx",
  };
  // clang-format on
  ExpectPicture("documents:lengths=2/3", picture);
}

TEST(MaskFamilies, DocumentsByCountSplitTheSequenceNearEqually) {
  // d * 7 / 3: documents [0,2) [2,4) [4,7).
  // clang-format off
  const std::vector<std::string> picture = {
      "x......",
      "xx.....",
      "..x....",
      "..xx...",
      "....x..",
      "....xx.",
      "....xxx",
  };
  // clang-format on
  ExpectPicture("documents:count=3", picture);
}

TEST(MaskFamilies, ModalityImagesSeeAllBeforeThemAndTheirWholeImage) {
  // clang-format off
  const std::vector<std::string> picture = {
      "x......",
      "xxx....",
      "xxx....",
      "xxxx...",
      "xxxxx..",
      "xxxxxx.",
      "xxxxxxx",
  };
  // clang-format on
  ExpectPicture("modality:images=1-3/5-6", picture);
}

TEST(MaskFamilies, ModalityPeriodicLayoutCutsTheLastImage) {
  // One text token, three image tokens, repeated: t iii t i (the last image cut at 6).
  // clang-format off
  const std::vector<std::string> picture = {
      "x.....",
      "xxxx..",
      "xxxx..",
      "xxxx..",
      "xxxxx.",
      "xxxxxx",
  };
  // clang-format on
  ExpectPicture("modality:image=3,text=1", picture);
}

TEST(MaskFamilies, ModalityPeriodicLayoutWithoutTextIsBlockDiagonalPlusPast) {
  // clang-format off
  const std::vector<std::string> picture = {
      "xx...",
      "xx...",
      "xxxx.",
      "xxxx.",
      "xxxxx",
  };
  // clang-format on
  ExpectPicture("modality:image=2", picture);
}

TEST(MaskFamilies, ExplicitSlicesAreTheUnionOfTheirColumns) {
  // Rows 0-2 causal; rows 3-5 see [0, 2) and [i-1, i+1), as in the docs' example.
  // clang-format off
  const std::vector<std::string> picture = {
      "x.....",
      "xx....",
      "xxx...",
      "xxxx..",
      "xx.xx.",
      "xx..xx",
  };
  // clang-format on
  ExpectPicture(R"({"slices": [
      {"rows": [0, 3], "lo": [0, 0],  "hi": [1, 1]},
      {"rows": [3, 6], "lo": [0, 0],  "hi": [2, 0]},
      {"rows": [3, 6], "lo": [-1, 1], "hi": [1, 1]}]})",
                picture);
}

TEST(MaskFamilies, ExplicitRowsWithoutSlicesAttendToNothing) {
  // clang-format off
  const std::vector<std::string> picture = {
      "...",
      "xxx",
      "...",
  };
  // clang-format on
  ExpectPicture(R"({"slices": [{"rows": [1, 2], "lo": [0, 0], "hi": [3, 0]}]})", picture);
}

TEST(MaskFamilies, OneTokenSequenceAttendsToItselfInEveryFamily) {
  for (const char* text :
       {"causal", "full", "sliding-window:window=1", "lambda:sink=0,window=1", "lambda",
        "causal-blockwise:block=1,local=0", "shared-question",
        "shared-question:question=0,answers=1", "documents:count=1", "documents:lengths=1",
        "modality:images=0-1", "modality:image=1", "modality:image=5,text=3"}) {
    ExpectPicture(text, {"x"});
  }
}

TEST(MaskFamilies, FamilyNamesAreTheSpecNames) {
  EXPECT_EQ(ToString(MaskFamily::kCausal), "causal");
  EXPECT_EQ(ToString(MaskFamily::kFull), "full");
  EXPECT_EQ(ToString(MaskFamily::kSlidingWindow), "sliding-window");
  EXPECT_EQ(ToString(MaskFamily::kLambda), "lambda");
  EXPECT_EQ(ToString(MaskFamily::kCausalBlockwise), "causal-blockwise");
  EXPECT_EQ(ToString(MaskFamily::kSharedQuestion), "shared-question");
  EXPECT_EQ(ToString(MaskFamily::kDocuments), "documents");
  EXPECT_EQ(ToString(MaskFamily::kModality), "modality");
  EXPECT_EQ(ToString(MaskFamily::kExplicit), "explicit");
}

}  // namespace
}  // namespace dcp
