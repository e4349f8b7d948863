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

TEST(Diagnostics, StopsRecordingAfterTheLimit) {
  SourceManager sm;
  FileId f = sm.add("m.qr", "x");
  DiagnosticSink sink(3);
  for (int i = 0; i < 10; ++i) sink.error("E0001", {{f, 0}, 1}, "bad");
  EXPECT_EQ(sink.error_count(), 3u);
  EXPECT_TRUE(sink.saturated());
}

}  // namespace quire
