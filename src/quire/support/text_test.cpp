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

namespace quire {
namespace {

TEST(Text, XmlEscapeEscapesMarkupAndDropsForbiddenControlCharacters) {
  EXPECT_EQ(xml_escape("a < b && \"c\" > d"), "a &lt; b &amp;&amp; &quot;c&quot; &gt; d");
  EXPECT_EQ(xml_escape(std::string("x\x01y\tz\n\r", 7)), "xy\tz\n\r");
  EXPECT_EQ(xml_escape("γ/%9 ‖∂L/∂v‖₁"), "γ/%9 ‖∂L/∂v‖₁");  // UTF-8 passes through
}

}  // namespace
}  // namespace quire
