#include "quire/support/diagnostics.h"

#include <gtest/gtest.h>

namespace quire {

TEST(Diagnostics, RendersLineAndCaretCountingCodePoints) {
  SourceManager sm;
  FileId f = sm.add("m.qr", "param γ : ℝ[D]\n  x + yy\n");
  DiagnosticSink sink;
  // "yy" on line 2, column 7
  sink.error("E0401", {{f, 24}, 2}, "unknown name `yy`", "did you mean `y`?");
  EXPECT_EQ(sink.render(sm),
            "m.qr:2:7: error[E0401]: unknown name `yy`\n"
            "    2 |   x + yy\n"
            "      |       ^^\n"
            "      = hint: did you mean `y`?\n");
  SourceLoc gamma{f, 6};
  EXPECT_EQ(sm.line_col(gamma).column, 7u);
  EXPECT_EQ(sm.line_col({f, 14}).column, 12u);  // after `γ` (2 bytes) and `ℝ` (3 bytes): `[`
}

TEST(Diagnostics, ALongLineIsShownAsAWindowAroundTheCaret) {
  // 300 code points (`é` is 2 bytes): the error at code point 200 shows 120 of
  // them, from 40 before the caret, each cut marked with `…`.
  std::string line;
  for (int i = 0; i < 300; ++i) line += i % 10 == 0 ? "é" : std::string(1, static_cast<char>('a' + i % 10));
  SourceManager sm;
  FileId f = sm.add("m.qr", line + "\n");
  const uint32_t at = 200 + 20;  // code point 200, after 20 two-byte `é`
  DiagnosticSink sink;
  sink.error("E0201", {{f, at}, 1000}, "here");
  const std::string rendered = sink.render(sm);
  std::string window;
  for (int i = 160; i < 280; ++i) window += i % 10 == 0 ? "é" : std::string(1, static_cast<char>('a' + i % 10));
  // The caret runs to the window's end, not to the range's: 280 - 200 code points.
  EXPECT_EQ(rendered, "m.qr:1:201: error[E0201]: here\n"
                      "    1 | …" + window + "…\n"
                      "      | " + std::string(41, ' ') + std::string(80, '^') + "\n");
  // Near the line's start there is nothing cut before.
  DiagnosticSink start;
  start.error("E0201", {{f, 0}, 1}, "here");
  EXPECT_NE(start.render(sm).find("    1 | éb"), std::string::npos);
  EXPECT_NE(start.render(sm).find("…\n      | ^\n"), std::string::npos);
}

TEST(Diagnostics, StopsRecordingAfterTheLimit) {
  SourceManager sm;
  FileId f = sm.add("m.qr", "x");
  DiagnosticSink sink(3);
  for (int i = 0; i < 10; ++i) sink.error("E0001", {{f, 0}, 1}, "bad");
  EXPECT_EQ(sink.error_count(), 3u);
  EXPECT_TRUE(sink.saturated());
}

}  // namespace quire
