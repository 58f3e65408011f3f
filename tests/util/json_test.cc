// SPDX-License-Identifier: Apache-2.0
// ParseJson (src/util/json.h): the one reader of user JSON refuses deep nesting before anything
// recursive sees it, and its errors quote a short excerpt, never the whole input.
#include "util/json.h"

#include <gtest/gtest.h>

#include <string>

namespace dcp::internal {
namespace {

// `levels` arrays nested inside each other, the innermost one empty.
std::string NestedArrays(int levels) {
  return std::string(static_cast<size_t>(levels), '[') +
         std::string(static_cast<size_t>(levels), ']');
}

void ExpectRefused(const Result<nlohmann::json>& value, const std::string& fragment) {
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(value.status().message().find(fragment), std::string::npos) << value.status().message();
  EXPECT_LT(value.status().message().size(), 400u) << "the message quotes too much";
}

TEST(ParseJson, AcceptsNestingUpToTheLimit) {
  const Result<nlohmann::json> value = ParseJson(NestedArrays(kMaxJsonDepth), "test JSON");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(JsonExcerpt(*value).substr(0, 4), "[[[[");
  EXPECT_TRUE(ParseJson(R"({"a": [1, {"b": [2, 3]}], "c": "d"})", "test JSON").ok());
}

TEST(ParseJson, RefusesNestingBeyondTheLimit) {
  ExpectRefused(ParseJson(NestedArrays(kMaxJsonDepth + 1), "test JSON"),
                "test JSON is nested deeper than 64 levels");
  std::string objects;
  for (int i = 0; i <= kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth + 1, '}');
  ExpectRefused(ParseJson(objects, "test JSON"), "nested deeper than 64 levels");
}

// Regression: 60,000 levels (120 KB) overflowed the stack of every reader that printed the value.
TEST(ParseJson, RefusesSixtyThousandLevelsWithoutRecursing) {
  ExpectRefused(ParseJson(NestedArrays(60000), "test JSON"), "nested deeper than 64 levels");
  ExpectRefused(ParseJson("{\"slices\": " + NestedArrays(60000) + "}", "test JSON"),
                "nested deeper than 64 levels");
}

TEST(ParseJson, NamesTheByteWhereParsingFailedWithAShortExcerpt) {
  ExpectRefused(ParseJson("{\"a\": ", "test JSON"), "test JSON does not parse at byte");
  ExpectRefused(ParseJson("", "test JSON"), "does not parse");
  // An unterminated string: the parser's message ends with the whole token it was reading.
  ExpectRefused(ParseJson("[\"" + std::string(100000, 'x'), "test JSON"), "does not parse");
}

// The last of two equal keys would win silently (a mask's second "slices" emptied it).
TEST(ParseJson, RefusesAKeyGivenTwiceInOneObject) {
  ExpectRefused(ParseJson(R"({"slices": [1], "slices": []})", "test JSON"),
                "test JSON repeats the key \"slices\" in one object");
  ExpectRefused(ParseJson(R"([{"a": {"b": 1, "b": 2}}])", "test JSON"), "repeats the key \"b\"");
  ExpectRefused(ParseJson(R"({"": 1, "": 2})", "test JSON"), "repeats the key \"\"");
  // The same key in sibling or nested objects is not a repeat.
  EXPECT_TRUE(ParseJson(R"([{"a": 1}, {"a": 2}, {"a": {"a": 3}}])", "test JSON").ok());
}

// Many elements: the first pass and the parse are linear (the callback parser used before took
// 12 s for 200K objects in one array).
TEST(ParseJson, ReadsTwoHundredThousandObjectsInOneArray) {
  std::string text = "[";
  for (int i = 0; i < 200000; ++i) text += i == 0 ? "{\"a\":1}" : ",{\"a\":1}";
  text += "]";
  const Result<nlohmann::json> value = ParseJson(text, "test JSON");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(value->size(), 200000u);
}

TEST(JsonExcerpt, CutsLongValues) {
  const Result<nlohmann::json> value = ParseJson("[\"" + std::string(100000, 'x') + "\"]", "test");
  ASSERT_TRUE(value.ok());
  const std::string excerpt = JsonExcerpt(*value);
  EXPECT_LT(excerpt.size(), 120u);
  EXPECT_NE(excerpt.find("(100004 bytes)"), std::string::npos) << excerpt;
}

}  // namespace
}  // namespace dcp::internal
