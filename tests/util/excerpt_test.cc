// SPDX-License-Identifier: Apache-2.0
// Excerpt (src/util/excerpt.h): what error messages quote of user text.
#include "util/excerpt.h"

#include <gtest/gtest.h>

#include <string>

namespace dcp::internal {
namespace {

TEST(Excerpt, KeepsShortTextWhole) {
  EXPECT_EQ(Excerpt("lambda:sink=-1"), "lambda:sink=-1");
  EXPECT_EQ(Excerpt(std::string(kMaxExcerptBytes, 'a')), std::string(kMaxExcerptBytes, 'a'));
  EXPECT_EQ(Excerpt(""), "");
}

TEST(Excerpt, CutsLongTextAndGivesItsSize) {
  const std::string text(kMaxExcerptBytes + 1, 'a');
  std::string cut(kMaxExcerptBytes, 'a');
  cut += "... (81 bytes)";
  EXPECT_EQ(Excerpt(text), cut);
  EXPECT_EQ(Excerpt(std::string(1 << 20, 'b'), 3), "bbb... (1048576 bytes)");
}

TEST(Excerpt, PutsTextOnOneLine) {
  EXPECT_EQ(Excerpt("{\"slices\":\n\t[]}\r"), "{\"slices\":  []} ");
}

TEST(Excerpt, NeverCutsAUtf8CharacterInTwo) {
  const std::string e_acute = "\xC3\xA9";   // 2 bytes
  const std::string euro = "\xE2\x82\xAC";  // 3 bytes
  EXPECT_EQ(Excerpt("a" + e_acute + "b", 2), "a... (4 bytes)");
  EXPECT_EQ(Excerpt("a" + e_acute + "b", 3), "a" + e_acute + "... (4 bytes)");
  EXPECT_EQ(Excerpt(euro + euro, 4), euro + "... (6 bytes)");
  EXPECT_EQ(Excerpt(euro + euro, 5), euro + "... (6 bytes)");
}

}  // namespace
}  // namespace dcp::internal
