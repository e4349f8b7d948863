// Columns of UTF-8 text: counted in code points, cut between characters;
// a count and its noun.

#include "quire/support/text.h"

#include <gtest/gtest.h>

namespace quire {
namespace {

TEST(Text, CountsCodePointsNotBytes) {
  EXPECT_EQ(code_points(""), 0u);
  EXPECT_EQ(code_points("abc"), 3u);
  EXPECT_EQ(code_points("ℝ[β]"), 4u);  // ℝ is 3 bytes, β 2
  EXPECT_EQ(pad_columns("β", 3), "β  ");
  EXPECT_EQ(pad_columns("abcd", 3), "abcd");
}

TEST(Text, ClipsBetweenCharacters) {
  EXPECT_EQ(clip_columns("short", 10), "short");
  EXPECT_EQ(clip_columns("abcdefgh", 6), "abc...");
  // A cut that bytes would have made inside β (2 bytes) or ℝ (3).
  EXPECT_EQ(clip_columns("aaβββββ", 6), "aaβ...");
  EXPECT_EQ(clip_columns("ℝℝℝℝℝℝℝ", 5), "ℝℝ...");
  EXPECT_EQ(code_points(clip_columns("call layer_norm{D = D}(x, βγδεζηθικλμνξ)", 30)), 30u);
  EXPECT_EQ(clip_columns("abcdef", 2), "...");
}

TEST(Text, PluralAgreesWithItsCount) {
  EXPECT_EQ(plural(1, "group", "groups"), "1 group");
  EXPECT_EQ(plural(0, "group", "groups"), "0 groups");
  EXPECT_EQ(plural(3, "launch", "launches"), "3 launches");
}

}  // namespace
}  // namespace quire
