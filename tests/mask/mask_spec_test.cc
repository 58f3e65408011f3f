// SPDX-License-Identifier: Apache-2.0
// MaskSpec's text and JSON forms (docs/mask_spec.md): canonical texts round-trip, defaults are the
// DCP paper's, every parse and build error has code InvalidArgument and names the problem and the
// offending value.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dcp/mask.h"
#include "mask/random_masks.h"
#include "testing/dense_mask.h"

namespace dcp {
namespace {

using ::dcp::testing::AreasMatch;
using ::dcp::testing::DenseFromSpec;
using ::dcp::testing::RandomRects;
using ::dcp::testing::RandomSpec;
using ::dcp::testing::Rng;
using ::dcp::testing::Uniform;

MaskSpec ParseOk(const std::string& text) {
  const Result<MaskSpec> spec = MaskSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << "'" << text << "': " << spec.status().ToString();
  return spec.ok() ? *spec : MaskSpec{};
}

// Expects `status` to be InvalidArgument with every one of `substrings` in its message.
void ExpectInvalidArgument(const Status& status, const std::vector<std::string>& substrings) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  for (const std::string& s : substrings) {
    EXPECT_NE(status.message().find(s), std::string::npos)
        << "message '" << status.message() << "' does not contain '" << s << "'";
  }
}

void ExpectParseError(const std::string& text, const std::vector<std::string>& substrings) {
  SCOPED_TRACE("spec '" + text + "'");
  const Result<MaskSpec> spec = MaskSpec::Parse(text);
  ASSERT_FALSE(spec.ok()) << "parsed as " << spec->ToString();
  ExpectInvalidArgument(spec.status(), substrings);
}

void ExpectBuildError(const std::string& text, int64_t length,
                      const std::vector<std::string>& substrings) {
  SCOPED_TRACE("spec '" + text + "', length " + std::to_string(length));
  const MaskSpec spec = ParseOk(text);
  const Result<Mask> mask = spec.Build(length);
  ASSERT_FALSE(mask.ok()) << "built a mask of area " << mask->TotalArea();
  ExpectInvalidArgument(mask.status(), substrings);
}

// ---- Canonical text and round trips ----------------------------------------------------------

TEST(MaskSpecParse, CanonicalTextOfEveryFamilyRoundTrips) {
  for (const char* text : {
           "causal",
           "full",
           "sliding-window:window=128",
           "lambda:sink=64,window=4096",
           "lambda:sink=0,window=1",
           "causal-blockwise:block=256,local=2",
           "causal-blockwise:block=1,local=0",
           "shared-question:question=0.2,answers=4",
           "shared-question:question=0,answers=1",
           "shared-question:question=0.999,answers=7",
           "documents:lengths=3/4/5",
           "documents:lengths=1",
           "documents:count=7",
           "modality:images=0-4/10-20",
           "modality:images=0-4/4-8",
           "modality:image=16,text=32",
           "modality:image=1,text=0",
       }) {
    SCOPED_TRACE(text);
    const MaskSpec spec = ParseOk(text);
    EXPECT_EQ(spec.ToString(), text);
    EXPECT_EQ(ParseOk(spec.ToString()), spec);
  }
}

TEST(MaskSpecParse, ParsesParametersIntoTheirFields) {
  const MaskSpec window = ParseOk("sliding-window:window=128");
  EXPECT_EQ(window.family, MaskFamily::kSlidingWindow);
  EXPECT_EQ(window.window, 128);

  const MaskSpec lambda = ParseOk("lambda:window=10,sink=3");  // any key order
  EXPECT_EQ(lambda.family, MaskFamily::kLambda);
  EXPECT_EQ(lambda.sink, 3);
  EXPECT_EQ(lambda.window, 10);
  EXPECT_EQ(lambda.ToString(), "lambda:sink=3,window=10");

  const MaskSpec blockwise = ParseOk("causal-blockwise:local=5,block=64");
  EXPECT_EQ(blockwise.block, 64);
  EXPECT_EQ(blockwise.local, 5);

  const MaskSpec question = ParseOk("shared-question:answers=3,question=0.5");
  EXPECT_EQ(question.question, 0.5);
  EXPECT_EQ(question.answers, 3);

  const MaskSpec docs = ParseOk("documents:lengths=3/4/5");
  EXPECT_EQ(docs.document_lengths, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(docs.document_count, 0);
  EXPECT_EQ(ParseOk("documents:count=9").document_count, 9);

  const MaskSpec spans = ParseOk("modality:images=0-4/10-20");
  EXPECT_EQ(spans.image_spans, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {10, 20}}));
  EXPECT_EQ(spans.image_tokens, 0);
  const MaskSpec periodic = ParseOk("modality:text=32,image=16");
  EXPECT_EQ(periodic.image_tokens, 16);
  EXPECT_EQ(periodic.text_tokens, 32);
  EXPECT_TRUE(periodic.image_spans.empty());
}

TEST(MaskSpecParse, DefaultsAreThePapers) {
  const MaskSpec lambda = ParseOk("lambda");
  EXPECT_EQ(lambda.sink, 64);
  EXPECT_EQ(lambda.window, 4096);
  EXPECT_EQ(lambda.ToString(), "lambda:sink=64,window=4096");

  const MaskSpec blockwise = ParseOk("causal-blockwise");
  EXPECT_EQ(blockwise.block, 256);
  EXPECT_EQ(blockwise.local, 2);
  EXPECT_EQ(blockwise.ToString(), "causal-blockwise:block=256,local=2");

  const MaskSpec question = ParseOk("shared-question");
  EXPECT_EQ(question.question, 0.2);
  EXPECT_EQ(question.answers, 4);
  EXPECT_EQ(question.ToString(), "shared-question:question=0.2,answers=4");

  EXPECT_EQ(ParseOk("sliding-window").window, 4096);
  EXPECT_EQ(ParseOk("lambda:sink=1").window, 4096);
  EXPECT_EQ(ParseOk("lambda:window=8").sink, 64);
  EXPECT_EQ(ParseOk("modality:image=16").text_tokens, 0);
  EXPECT_EQ(ParseOk("modality:image=16").ToString(), "modality:image=16,text=0");
  EXPECT_EQ(MaskSpec{}.family, MaskFamily::kCausal);
  EXPECT_EQ(ParseOk("causal"), MaskSpec{});
}

TEST(MaskSpecParse, RandomSpecsOfEveryFamilyRoundTrip) {
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    Rng rng(seed);
    const auto family = static_cast<MaskFamily>(seed % 9);
    const MaskSpec spec = RandomSpec(family, Uniform(rng, 1, 300), rng);
    const std::string text = spec.ToString();
    SCOPED_TRACE("seed " + std::to_string(seed) + ", spec " + text);
    const Result<MaskSpec> parsed = MaskSpec::Parse(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, spec);
    EXPECT_EQ(parsed->ToString(), text);
  }
}

TEST(MaskSpecParse, QuestionSharesRoundTripExactly) {
  for (double q : {0.0, 0.1, 0.2, 1.0 / 3.0, 0.5, 0.7, 0.9999999999999999, 1e-7, 1e-300,
                   4.9406564584124654e-324 /* smallest subnormal */}) {
    MaskSpec spec;
    spec.family = MaskFamily::kSharedQuestion;
    spec.question = q;
    SCOPED_TRACE(spec.ToString());
    const Result<MaskSpec> parsed = MaskSpec::Parse(spec.ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->question, q);
  }
}

TEST(MaskSpecParse, AcceptsParametersUpToTheLongestSequence) {
  const std::string max = std::to_string(kMaxSequenceLength);
  EXPECT_EQ(ParseOk("sliding-window:window=" + max).window, kMaxSequenceLength);
  EXPECT_EQ(ParseOk("documents:count=" + max).document_count, kMaxSequenceLength);
  ExpectParseError("sliding-window:window=" + std::to_string(kMaxSequenceLength + 1),
                   {"window=" + std::to_string(kMaxSequenceLength + 1), "out of range"});
}

// ---- Parse errors --------------------------------------------------------------------------

TEST(MaskSpecErrors, UnknownFamilyIsNamed) {
  ExpectParseError("banana", {"unknown mask family", "'banana'"});
  ExpectParseError("window:window=4", {"unknown mask family", "'window'"});
  ExpectParseError("Causal", {"unknown mask family", "'Causal'"});
  ExpectParseError("", {"unknown mask family"});
  // The JSON form's family has no text form.
  ExpectParseError("explicit", {"unknown mask family", "'explicit'"});
}

TEST(MaskSpecErrors, UnknownKeyIsNamedWithItsFamily) {
  ExpectParseError("causal:window=4", {"unknown parameter", "'window'", "causal"});
  ExpectParseError("lambda:sinks=4", {"unknown parameter", "'sinks'", "lambda"});
  ExpectParseError("causal-blockwise:window=3", {"unknown parameter", "'window'"});
  ExpectParseError("documents:count=2,block=4", {"unknown parameter", "'block'"});
  ExpectParseError("sliding-window:Window=4", {"unknown parameter", "'Window'"});
}

TEST(MaskSpecErrors, DuplicateKeyIsNamed) {
  ExpectParseError("sliding-window:window=3,window=4", {"'window'", "twice"});
  ExpectParseError("lambda:sink=1,window=2,sink=1", {"'sink'", "twice"});
  ExpectParseError("documents:lengths=1/2,lengths=3", {"'lengths'", "twice"});
}

TEST(MaskSpecErrors, NonIntegerValueIsNamed) {
  ExpectParseError("sliding-window:window=abc", {"window", "'abc'", "not an integer"});
  ExpectParseError("sliding-window:window=1.5", {"window", "'1.5'", "not an integer"});
  ExpectParseError("sliding-window:window=", {"window", "not an integer"});
  ExpectParseError("sliding-window:window=12x", {"window", "'12x'", "not an integer"});
  ExpectParseError("sliding-window:window= 12", {"window", "not an integer"});
  ExpectParseError("lambda:sink=0x10", {"sink", "'0x10'", "not an integer"});
  ExpectParseError("documents:lengths=3/x/4", {"lengths", "'x'", "not an integer"});
  ExpectParseError("documents:lengths=3//4", {"lengths", "not an integer"});
  ExpectParseError("documents:count=two", {"count", "'two'", "not an integer"});
  ExpectParseError("modality:image=1e3", {"image", "'1e3'", "not an integer"});
  ExpectParseError("sliding-window:window=99999999999999999999999",
                   {"window", "99999999999999999999999"});
}

TEST(MaskSpecErrors, OutOfRangeIntegerIsNamed) {
  ExpectParseError("sliding-window:window=0", {"window=0", "out of range"});
  ExpectParseError("sliding-window:window=-3", {"window=-3", "out of range"});
  ExpectParseError("lambda:window=0", {"window=0", "out of range"});
  ExpectParseError("lambda:sink=-1", {"sink=-1", "out of range"});
  ExpectParseError("causal-blockwise:block=0", {"block=0", "out of range"});
  ExpectParseError("causal-blockwise:local=-1", {"local=-1", "out of range"});
  ExpectParseError("shared-question:answers=0", {"answers=0", "out of range"});
  ExpectParseError("documents:count=0", {"count=0", "out of range"});
  ExpectParseError("documents:lengths=3/0/4", {"lengths=0", "out of range"});
  ExpectParseError("documents:lengths=-2", {"lengths=-2", "out of range"});
  ExpectParseError("modality:image=0", {"image=0", "out of range"});
  ExpectParseError("modality:image=4,text=-1", {"text=-1", "out of range"});
  ExpectParseError("modality:images=-1-4", {"not BEGIN-END"});  // '-' splits the span
}

TEST(MaskSpecErrors, QuestionOutsideZeroToOneIsNamed) {
  ExpectParseError("shared-question:question=1.0", {"question=1", "out of range"});
  ExpectParseError("shared-question:question=1", {"question=1", "out of range"});
  ExpectParseError("shared-question:question=-0.1", {"question=-0.1", "out of range"});
  ExpectParseError("shared-question:question=2.5", {"question=2.5", "out of range"});
  ExpectParseError("shared-question:question=nan", {"question", "'nan'", "not a number"});
  ExpectParseError("shared-question:question=inf", {"question", "'inf'", "not a number"});
  ExpectParseError("shared-question:question=abc", {"question", "'abc'", "not a number"});
  ExpectParseError("shared-question:question=0.2x", {"question", "'0.2x'", "not a number"});
  ExpectParseError("shared-question:question=", {"question", "not a number"});
}

TEST(MaskSpecErrors, MalformedKeyValueIsNamed) {
  ExpectParseError("lambda:sink", {"'sink'", "not key=value"});
  ExpectParseError("lambda:=3", {"'=3'", "not key=value"});
  ExpectParseError("lambda:sink=3,", {"not key=value"});
  ExpectParseError("lambda:,sink=3", {"not key=value"});
  ExpectParseError("lambda:sink=3;window=4", {"sink", "'3;window=4'", "not an integer"});
  ExpectParseError("causal:", {"not key=value"});
}

TEST(MaskSpecErrors, DocumentsNeedExactlyOneOfLengthsAndCount) {
  ExpectParseError("documents:lengths=3/4,count=2",
                   {"documents", "exactly one", "lengths", "count"});
  ExpectParseError("documents", {"documents", "exactly one"});
}

TEST(MaskSpecErrors, ModalitySpansMustBeNonEmptyIncreasingAndDisjoint) {
  ExpectParseError("modality:images=0-10/5-12", {"'5-12'", "overlaps"});
  ExpectParseError("modality:images=10-20/0-4", {"'0-4'", "precedes"});
  ExpectParseError("modality:images=4-4", {"'4-4'", "empty"});
  ExpectParseError("modality:images=6-2", {"'6-2'", "empty"});
  ExpectParseError("modality:images=3", {"'3'", "not BEGIN-END"});
  ExpectParseError("modality:images=1-2-3", {"'1-2-3'", "not BEGIN-END"});
  ExpectParseError("modality:images=", {"not BEGIN-END"});
  ExpectParseError("modality:images=a-4", {"image begin", "'a'"});
}

TEST(MaskSpecErrors, ModalityNeedsExactlyOneLayout) {
  ExpectParseError("modality", {"modality", "exactly one"});
  ExpectParseError("modality:images=0-4,image=3", {"modality", "exactly one"});
  ExpectParseError("modality:images=0-4,text=3", {"modality", "exactly one"});
  ExpectParseError("modality:text=3", {"text", "image"});
}

TEST(MaskSpecErrors, MessageQuotesTheWholeSpec) {
  ExpectParseError("lambda:sink=-1", {"mask 'lambda:sink=-1'"});
  ExpectParseError("banana:x=1", {"mask 'banana:x=1'"});
}

// A message quotes a long spec by a one-line excerpt and its size, never whole.
TEST(MaskSpecErrors, MessageQuotesALongSpecByAnExcerpt) {
  const std::string unknown(100000, 'x');
  ExpectParseError(unknown, {"mask 'xxxx", "... (100000 bytes)'"});
  EXPECT_LT(MaskSpec::Parse(unknown).status().message().size(), 400u);
  const Result<MaskSpec> json = MaskSpec::Parse("{\"slices\": [\n  {\"rows\": [0, 1]}\n]}");
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().message().find('\n'), std::string::npos) << json.status().message();
}

// Lists of documents, image spans and slices give at least one slice per element: a list longer
// than the limit of slices per mask is refused when it is parsed.
TEST(MaskSpecErrors, ListsLongerThanTheSliceLimitAreRefused) {
  std::string lengths = "documents:lengths=1";
  for (int64_t k = 0; k < kMaxMaskSlices; ++k) lengths += "/1";
  const Result<MaskSpec> spec = MaskSpec::Parse(lengths);
  ASSERT_FALSE(spec.ok());
  ExpectInvalidArgument(spec.status(), {"lengths lists more than 1048576 elements"});
  EXPECT_LT(spec.status().message().size(), 400u);
  lengths.resize(lengths.size() - 2);  // exactly the limit
  EXPECT_TRUE(MaskSpec::Parse(lengths).ok());
}

// ---- JSON form ---------------------------------------------------------------------------------

// Regression: a mask JSON nested 60,000 levels deep (120 KB) overflowed the stack while the error
// message printed the value; it is refused while parsing, with a short message.
TEST(MaskSpecJson, JsonNestedDeeperThanTheLimitIsRefused) {
  const std::string deep =
      "{\"slices\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
  ExpectParseError(deep, {"mask JSON is nested deeper than 64 levels"});
  EXPECT_LT(MaskSpec::Parse(deep).status().message().size(), 400u);
  // Nested within the limit, the slice is simply not a slice.
  ExpectParseError("{\"slices\": [" + std::string(60, '[') + std::string(60, ']') + "]}",
                   {"slice 0", "[[[["});
}

constexpr char kDocExample[] = R"({"slices": [
  {"rows": [0, 100],   "lo": [0, 0],  "hi": [1, 1]},
  {"rows": [100, 200], "lo": [0, 0],  "hi": [10, 0]},
  {"rows": [100, 200], "lo": [-9, 1], "hi": [1, 1]}
]})";

TEST(MaskSpecJson, ParsesSlicesOfTheDocsExample) {
  const MaskSpec spec = ParseOk(kDocExample);
  EXPECT_EQ(spec.family, MaskFamily::kExplicit);
  ASSERT_EQ(spec.slices.size(), 3u);
  EXPECT_EQ(spec.slices[0], (Slice{0, 100, {0, 0}, {1, 1}}));
  EXPECT_EQ(spec.slices[1], (Slice{100, 200, {0, 0}, {10, 0}}));
  EXPECT_EQ(spec.slices[2], (Slice{100, 200, {-9, 1}, {1, 1}}));
}

TEST(MaskSpecJson, DocsExampleMatchesDenseCount) {
  const MaskSpec spec = ParseOk(kDocExample);
  for (int64_t length : {200, 201, 256}) {
    SCOPED_TRACE("length " + std::to_string(length));
    const Result<Mask> mask = spec.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    Rng rng(static_cast<uint64_t>(length));
    EXPECT_TRUE(AreasMatch(*mask, DenseFromSpec(spec, length), RandomRects(length, 200, rng)));
  }
}

TEST(MaskSpecJson, RoundTripsThroughToString) {
  const MaskSpec spec = ParseOk(kDocExample);
  const std::string text = spec.ToString();
  EXPECT_EQ(text.front(), '{');
  EXPECT_EQ(ParseOk(text), spec);
  EXPECT_EQ(ParseOk(text).ToString(), text);

  MaskSpec empty;
  empty.family = MaskFamily::kExplicit;
  EXPECT_EQ(ParseOk(empty.ToString()), empty);
  const Result<Mask> nothing = empty.Build(5);
  ASSERT_TRUE(nothing.ok()) << nothing.status().ToString();
  EXPECT_EQ(nothing->TotalArea(), 0);
}

TEST(MaskSpecJson, ExplicitCausalSliceGivesTheCausalMask) {
  for (int64_t length : {1, 2, 17, 300, 1 << 20}) {
    SCOPED_TRACE("length " + std::to_string(length));
    const std::string json = R"({"slices": [{"rows": [0, )" + std::to_string(length) +
                             R"(], "lo": [0, 0], "hi": [1, 1]}]})";
    const MaskSpec spec = ParseOk(json);
    const Result<Mask> explicit_mask = spec.Build(length);
    ASSERT_TRUE(explicit_mask.ok()) << explicit_mask.status().ToString();
    const Result<Mask> causal = MaskSpec{}.Build(length);
    ASSERT_TRUE(causal.ok()) << causal.status().ToString();
    EXPECT_EQ(explicit_mask->TotalArea(), CausalArea(length));
    EXPECT_EQ(*explicit_mask, *causal);
    Rng rng(static_cast<uint64_t>(length));
    for (const testing::Rect& r : RandomRects(length, 50, rng)) {
      EXPECT_EQ(explicit_mask->Area(r.q0, r.q1, r.k0, r.k1), causal->Area(r.q0, r.q1, r.k0, r.k1))
          << testing::ToString(r);
    }
  }
}

TEST(MaskSpecJson, MalformedJsonIsAnError) {
  ExpectParseError("{slices", {"does not parse"});
  ExpectParseError(R"({"slices": [})", {"does not parse"});
  ExpectParseError("{}", {"\"slices\""});
  ExpectParseError(R"({"slices": 3})", {"\"slices\""});
  ExpectParseError(R"({"slices": [3]})", {"slice 0"});
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0, 0]}]})", {"slice 0"});
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0], "hi": [1, 1]}]})",
                   {"slice 0 lo", "[base, slope]"});
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0, 0], "hi": [1.5, 1]}]})",
                   {"slice 0 hi", "integers", "1.5"});
  ExpectParseError(R"({"slices": [{"rows": "0-4", "lo": [0, 0], "hi": [1, 1]}]})",
                   {"slice 0 rows"});
}

TEST(MaskSpecJson, SlopeOtherThanZeroOrOneIsNamed) {
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0, 2], "hi": [1, 1]}]})",
                   {"slice 0", "lo slope 2", "not 0 or 1"});
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0, 0], "hi": [1, 1]},
                                  {"rows": [0, 4], "lo": [0, 0], "hi": [1, -1]}]})",
                   {"slice 1", "hi slope -1", "not 0 or 1"});
}

TEST(MaskSpecJson, ReversedOrNegativeRowsAreNamed) {
  ExpectParseError(R"({"slices": [{"rows": [10, 5], "lo": [0, 0], "hi": [1, 1]}]})",
                   {"slice 0", "rows [10, 5)"});
  ExpectParseError(R"({"slices": [{"rows": [-1, 5], "lo": [0, 0], "hi": [1, 1]}]})",
                   {"slice 0", "rows [-1, 5)"});
}

TEST(MaskSpecJson, UnknownKeyIsNamed) {
  ExpectParseError(R"({"slices": [], "length": 5})", {"unknown key", "'length'"});
  ExpectParseError(R"({"slices": [{"rows": [0, 4], "lo": [0, 0], "hi": [1, 1], "x": 1}]})",
                   {"slice 0", "\"x\""});
}

// Regression (src/mask/mask_spec.cc, ParseColumn, fixed): a JSON integer above INT64_MAX was read
// with j.get<int64_t>() from nlohmann's unsigned representation and wrapped, so
// "hi": [18446744073709551615, 0] became hi base -1 and the slice silently empty. Out-of-range
// values are errors that name the value (InvalidArgument, at Parse or at Build).
TEST(MaskSpecJson, IntegerBeyondInt64IsRejectedNotWrapped) {
  const std::string json =
      R"({"slices": [{"rows": [0, 4], "lo": [0, 0], "hi": [18446744073709551615, 0]}]})";
  const Result<MaskSpec> spec = MaskSpec::Parse(json);
  if (spec.ok()) {
    const Result<Mask> mask = spec->Build(4);
    ASSERT_FALSE(mask.ok()) << "accepted: hi base read as " << spec->slices[0].hi.base
                            << ", total area " << mask->TotalArea();
    ExpectInvalidArgument(mask.status(), {"slice 0"});
  } else {
    ExpectInvalidArgument(spec.status(), {"18446744073709551615"});
  }
}

// ---- Build errors ------------------------------------------------------------------------------

TEST(MaskSpecBuild, RejectsLengthsOutsideTheAcceptedRange) {
  ExpectBuildError("causal", 0, {"sequence length 0"});
  ExpectBuildError("lambda", -1, {"sequence length -1"});
  ExpectBuildError("full", kMaxSequenceLength + 1, {std::to_string(kMaxSequenceLength + 1)});
  ExpectBuildError("sliding-window:window=3", 0, {"mask 'sliding-window:window=3'"});
}

TEST(MaskSpecBuild, RejectsDocumentsLongerThanTheSequence) {
  ExpectBuildError("documents:lengths=6/6", 10, {"documents", "lengths", "10"});
  ExpectBuildError("documents:lengths=11", 10, {"documents", "10"});
  ExpectBuildError("documents:count=11", 10, {"count=11", "10"});
  // Exactly the sequence is fine, and so is less (the rest is one more document).
  EXPECT_TRUE(ParseOk("documents:lengths=6/4").Build(10).ok());
  EXPECT_TRUE(ParseOk("documents:lengths=6").Build(10).ok());
  EXPECT_TRUE(ParseOk("documents:count=10").Build(10).ok());
}

TEST(MaskSpecBuild, RejectsImageSpansPastTheSequence) {
  ExpectBuildError("modality:images=2-12", 10, {"image span 2-12", "10"});
  ExpectBuildError("modality:images=0-4/8-11", 10, {"image span 8-11", "10"});
  ExpectBuildError("modality:images=12-14", 10, {"image span 12-14", "10"});
  EXPECT_TRUE(ParseOk("modality:images=2-10").Build(10).ok());
  // A periodic layout is cut at the end of the sequence instead.
  EXPECT_TRUE(ParseOk("modality:image=7,text=5").Build(10).ok());
}

TEST(MaskSpecBuild, RejectsExplicitSlicesPastTheSequence) {
  const std::string json = R"({"slices": [{"rows": [0, 5], "lo": [0, 0], "hi": [1, 1]},
                                          {"rows": [3, 20], "lo": [0, 0], "hi": [1, 1]}]})";
  ExpectBuildError(json, 10, {"slice 1", "[3, 20)", "[0, 10)"});
  EXPECT_TRUE(ParseOk(json).Build(20).ok());
}

TEST(MaskSpecBuild, RejectsExplicitBasesBeyondTheLimit) {
  ExpectBuildError(R"({"slices": [{"rows": [0, 5], "lo": [0, 0], "hi": [2000000000000, 0]}]})", 10,
                   {"slice 0", "hi base 2000000000000"});
}

// Regression (src/mask/mask_families.cc, MaskSpec::Build, fixed): errors from RawSlices (documents
// longer than the sequence, an image span past it) lacked the "mask '<spec>'" context Build adds to
// every other error, so the user could not tell which spec failed (STYLE.md, "Errors").
TEST(MaskSpecBuild, ErrorsNameTheSpec) {
  ExpectBuildError("documents:lengths=6/6", 10, {"mask 'documents:lengths=6/6'"});
  ExpectBuildError("documents:count=11", 10, {"mask 'documents:count=11'"});
  ExpectBuildError("modality:images=2-12", 10, {"mask 'modality:images=2-12'"});
}

// Regression: periodic families built one slice per period before looking at the count, so
// valid specs on a 2^30-token sequence aborted with std::bad_alloc. They are refused before
// anything is allocated, naming the family, the length and the slices needed.
TEST(MaskSpecBuild, RefusesFamiliesThatNeedMoreSlicesThanTheLimit) {
  const int64_t l = kMaxSequenceLength;
  ExpectBuildError("modality:image=5", l,
                   {"mask 'modality:image=5,text=0': modality: a sequence of 1073741824 tokens "
                    "needs 429496731 slices, more than the limit of 1048576 per mask"});
  ExpectBuildError("modality:image=1,text=1", l, {"modality", "1073741825 slices"});
  ExpectBuildError("documents:count=1073741824", l, {"documents", "1073741824 slices", "limit"});
  ExpectBuildError("shared-question:question=0,answers=1073741824", l,
                   {"shared-question", "1073741824 tokens", "2147483649 slices"});
  // Just past the limit.
  ExpectBuildError("documents:count=1048577", l, {"1048577 slices"});
  ExpectBuildError("shared-question:question=0,answers=524288", l, {"1048577 slices"});
  ExpectBuildError("modality:image=2048", l, {"1048577 slices"});
}

// The slices a family needs depend on the sequence, not on its numbers alone: huge parameters
// that need few slices build, and every product of a length and a parameter stays in range (UBSan
// checks the arithmetic in CI).
TEST(MaskSpecBuild, HugeParametersThatNeedFewSlicesBuild) {
  const int64_t l = kMaxSequenceLength;
  for (const auto& [text, length] : std::vector<std::pair<std::string, int64_t>>{
           {"shared-question:question=0.5,answers=1073741824", 100},  // only the last answer
           {"shared-question:question=0.999999,answers=1073741824", l},
           {"modality:image=1073741824,text=1073741824", l},
           {"modality:image=4096,text=1073737728", l},  // one image, at the end
           {"documents:count=1024", l},
           {"sliding-window:window=1073741824", l},
           {"lambda:sink=1073741824,window=1073741824", l},
           {"causal-blockwise:block=1,local=1073741824", l},
           {"causal-blockwise:block=32768,local=32768", l},
           {"causal-blockwise:block=1073741824,local=1073741824", l}}) {
    SCOPED_TRACE(text);
    const Result<Mask> mask = ParseOk(text).Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    EXPECT_GT(mask->TotalArea(), 0);
  }
  const MaskSpec few_answers = ParseOk("shared-question:question=0.5,answers=1073741824");
  EXPECT_TRUE(AreasMatch(*few_answers.Build(100), DenseFromSpec(few_answers, 100),
                         std::vector<testing::Rect>{{0, 100, 0, 100}, {50, 100, 0, 100}}));
}

TEST(MaskSpecBuild, SameSpecBuildsEveryLength) {
  // A spec does not know the sequence length: one spec, many lengths, each against the reference.
  const MaskSpec spec = ParseOk("causal-blockwise:block=16,local=1");
  for (int64_t length = 1; length <= 80; ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    const Result<Mask> mask = spec.Build(length);
    ASSERT_TRUE(mask.ok()) << mask.status().ToString();
    Rng rng(static_cast<uint64_t>(length));
    EXPECT_TRUE(AreasMatch(*mask, DenseFromSpec(spec, length), RandomRects(length, 10, rng)));
  }
}

}  // namespace
}  // namespace dcp
