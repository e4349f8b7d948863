#include "quire/explain/document.h"

#include <gtest/gtest.h>

namespace quire::explain {
namespace {

Document sample() {
  Document d;
  d.title = "`loss` of 07_train.qr";
  Section s{"fusion", "§7 Fusion", 2, {}};
  s.blocks.push_back(Paragraph{"A value `x < y` & more, see [§7.1](#sub)."});
  s.blocks.push_back(Table{{"Value", "Why"}, {{"`a|b`", "read by <call>"}}, {}});
  s.blocks.push_back(Table{{"Site", "Seen"}, {{"`loss/%7`", "`loss/%7`"}}, {"site-1"}});
  s.blocks.push_back(Listing{"%8 = mean loss/%7; loss/%70 and xloss/%7 are others\n"});
  s.blocks.push_back(Listing{"fn f() {\n  ``` inside\n}\n"});
  s.blocks.push_back(BarChart{"Sensitivities", "‖∂L/∂v‖₁", {"big", "half", "zero"}, {4.0, 2.0, 0.0}});
  s.blocks.push_back(Commands{{"quire dump 07_train.qr --stage realize --entry loss"}});
  d.sections.push_back(s);
  d.sections.push_back(Section{"sub", "§7.1 Sub", 3, {Paragraph{"p"}}});
  d.links = {{"loss/%7", "site-1"}};
  return d;
}

TEST(ExplainDocument, MarkdownEscapesTableCellsAndFencesListingsAboveTheirBackquotes) {
  const std::string md = render_markdown(sample());
  EXPECT_EQ(md.rfind("# `loss` of 07_train.qr\n\n<a id=\"fusion\"></a>\n\n## §7 Fusion\n\n", 0), 0u) << md;
  EXPECT_NE(md.find("see [§7.1](#sub)."), std::string::npos) << md;
  // A row's anchor rides in its first cell; Markdown leaves names unlinked.
  EXPECT_NE(md.find("| <a id=\"site-1\"></a>`loss/%7` | `loss/%7` |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `a\\|b` | read by <call> |"), std::string::npos) << md;
  // The listing holds three backquotes, so its fence has four.
  EXPECT_NE(md.find("````text\nfn f() {\n  ``` inside\n}\n````\n"), std::string::npos) << md;
  // A chart is a table of its values in Markdown.
  EXPECT_NE(md.find("| big | 4.000e+00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Command:\n\n```sh\nquire dump 07_train.qr --stage realize --entry loss\n```"), std::string::npos)
      << md;
  EXPECT_NE(md.find("### §7.1 Sub\n\np"), std::string::npos) << md;
  EXPECT_EQ(md.back(), '\n');
  EXPECT_NE(md.substr(md.size() - 2), "\n\n");
}

TEST(ExplainDocument, HtmlEscapesTextMakesCodeSpansAndLinksEverySection) {
  const std::string html = render_html(sample());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<p>A value <code>x &lt; y</code> &amp; more, see <a href=\"#sub\">§7.1</a>.</p>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td><code>a|b</code></td><td>read by &lt;call&gt;</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<pre>fn f() {\n  ``` inside\n}\n</pre>"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"#fusion\">§7 Fusion</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("<section id=\"sub\">\n<h3>§7.1 Sub</h3>"), std::string::npos) << html;
  // Nothing runs and nothing is fetched.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg\" width"), html.find("http://"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(ExplainDocument, HtmlLinksEveryWholeOccurrenceOfANameToItsRowButTheRowItself) {
  const std::string html = render_html(sample());
  EXPECT_NE(html.find("<tr id=\"site-1\"><td><code>loss/%7</code></td><td><code><a href=\"#site-1\">loss/%7</a>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<pre>%8 = mean <a href=\"#site-1\">loss/%7</a>; loss/%70 and xloss/%7 are others\n</pre>"),
            std::string::npos)
      << html;
}

TEST(ExplainDocument, ChartBarsAreDrawnToScale) {
  const std::string html = render_html(sample());
  // The bar area is 360 px less 8: the largest value fills 352, half of it 176, zero nothing.
  EXPECT_NE(html.find("width=\"352.0\""), std::string::npos) << html;
  EXPECT_NE(html.find("width=\"176.0\""), std::string::npos) << html;
  EXPECT_NE(html.find("width=\"0.0\""), std::string::npos) << html;
  EXPECT_NE(html.find(">4.000e+00</text>"), std::string::npos) << html;
}

TEST(ExplainDocument, TheSameDocumentGivesTheSameBytes) {
  EXPECT_EQ(render_markdown(sample()), render_markdown(sample()));
  EXPECT_EQ(render_html(sample()), render_html(sample()));
}

}  // namespace
}  // namespace quire::explain
