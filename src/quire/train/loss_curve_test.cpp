// The loss curve's SVG: well-formed, every mark inside the plot, the choice
// of a log or linear y axis and its tick labels, escaping of the title, the
// empty case, determinism, and the direction of a falling curve.

#include "quire/train/loss_curve.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>

#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct XY {
  double x, y;
};

struct Box {
  double left, top, right, bottom;
  bool holds(XY p) const { return p.x >= left && p.x <= right && p.y >= top && p.y <= bottom; }
};

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

/// "" when the tags of `svg` nest properly and every '&' starts an entity,
/// else what is wrong: a rough XML check, enough for the documents we write.
std::string tag_problem(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const size_t end = svg.find('>', at);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = svg.substr(at + 1, end - at - 1);
    if (tag.empty() || tag.find('<') != std::string::npos) return "bad tag <" + tag + ">";
    if (tag[0] == '?' || tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" \n") - (tag[0] == '/'));
    if (tag[0] != '/') {
      open.push_back(name);
    } else if (open.empty() || open.back() != name) {
      return "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">");
    } else {
      open.pop_back();
    }
  }
  if (!open.empty()) return "<" + open.back() + "> is not closed";
  static const std::regex bare_ampersand("&(?!amp;|lt;|gt;|quot;)");
  if (std::regex_search(svg, bare_ampersand)) return "a bare &";
  return "";
}

/// The plot area, from the document's `<rect class="plot-area" .../>`.
Box plot_area(const std::string& svg) {
  static const std::regex rect(R"re(class="plot-area" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)")re");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(svg, m, rect)) << svg;
  if (m.empty()) return {};
  const double x = std::stod(m[1]), y = std::stod(m[2]);
  return {x, y, x + std::stod(m[3]), y + std::stod(m[4])};
}

/// The points of the loss polyline, checking each number has 2 decimals.
std::vector<XY> polyline(const std::string& svg) {
  const size_t start = svg.find("points=\"", svg.find("<polyline"));
  if (start == std::string::npos) return {};
  const std::string points = svg.substr(start + 8, svg.find('"', start + 8) - start - 8);
  static const std::regex pair(R"((-?\d+\.\d\d),(-?\d+\.\d\d)( |$))");
  std::vector<XY> result;
  size_t matched = 0;
  for (std::sregex_iterator it(points.begin(), points.end(), pair), end; it != end; ++it) {
    result.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
    matched += it->length();
  }
  EXPECT_EQ(matched, points.size()) << "points=\"" << points << "\"";
  return result;
}

/// The y axis's tick labels, bottom to top.
std::vector<std::string> y_labels(const std::string& svg) {
  static const std::regex label(R"re(<text x="[\d.]+" y="[\d.]+" text-anchor="end">([^<]*)</text>)re");
  std::vector<std::string> labels;
  for (std::sregex_iterator it(svg.begin(), svg.end(), label), end; it != end; ++it) labels.push_back((*it)[1]);
  return labels;
}

/// `n` steps of a loss falling exponentially from `from` to `to`.
std::vector<CurvePoint> falling(int n, double from, double to) {
  std::vector<CurvePoint> points;
  for (int i = 0; i < n; ++i) points.push_back({i + 1, from * std::pow(to / from, double(i) / (n - 1))});
  return points;
}

TEST(LossCurveTest, DocumentIsWellFormedAndMarksStayInThePlot) {
  std::vector<CurvePoint> points = falling(40, 3.0, 0.02);
  points[10].loss = kNaN;
  points[20].loss = kInf;
  points[30].skipped = true;  // a finite loss: on the curve and marked
  const std::string svg = loss_curve_svg(points, "run");
  EXPECT_EQ(tag_problem(svg), "");
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"", 0), 0u);
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_NE(svg.find(R"(xmlns="http://www.w3.org/2000/svg" version="1.1" width="720" height="420")"),
            std::string::npos);

  const Box box = plot_area(svg);
  EXPECT_GT(box.left, 0);
  EXPECT_LT(box.right, 720);
  EXPECT_GT(box.top, 0);
  EXPECT_LT(box.bottom, 420);
  const std::vector<XY> line = polyline(svg);
  ASSERT_EQ(line.size(), 38u);
  for (XY p : line) EXPECT_TRUE(box.holds(p)) << p.x << "," << p.y;
  EXPECT_EQ(line.front().x, box.left);
  EXPECT_EQ(line.back().x, box.right);

  // Three red crosses, centred on the bottom edge at their steps.
  static const std::regex cross(R"(<path d="M([\d.]+),([\d.]+) L([\d.]+),([\d.]+) M)");
  std::vector<XY> centres;
  for (std::sregex_iterator it(svg.begin(), svg.end(), cross), end; it != end; ++it)
    centres.push_back(
        {(std::stod((*it)[1]) + std::stod((*it)[3])) / 2, (std::stod((*it)[2]) + std::stod((*it)[4])) / 2});
  ASSERT_EQ(centres.size(), 3u);
  const double per_step = (box.right - box.left) / 39;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(centres[i].x, box.left + per_step * double(10 * (i + 1)), 0.01);
    EXPECT_EQ(centres[i].y, box.bottom);
  }
  EXPECT_NE(svg.find("x: 3 non-finite or skipped"), std::string::npos);
}

TEST(LossCurveTest, FallingLossRisesDownTheImage) {
  for (double to : {0.5, 1e-4}) {  // a linear and a log axis
    const std::vector<XY> line = polyline(loss_curve_svg(falling(30, 2.0, to), "falling"));
    ASSERT_EQ(line.size(), 30u);
    for (size_t i = 1; i < line.size(); ++i) {
      EXPECT_GT(line[i].x, line[i - 1].x) << to;
      EXPECT_GT(line[i].y, line[i - 1].y) << to;  // SVG y grows downward
    }
  }
}

TEST(LossCurveTest, LogScaleWhenLossesSpanMoreThanAFactorOf20) {
  // Under 3 decades: powers of ten and their 2 and 5 multiples.
  const std::string two_decades = loss_curve_svg(falling(20, 5.0, 0.05), "t");
  EXPECT_NE(two_decades.find(">loss (log scale)</text>"), std::string::npos);
  EXPECT_EQ(y_labels(two_decades), (std::vector<std::string>{"0.05", "0.1", "0.2", "0.5", "1", "2", "5"}));
  // Many decades: powers of ten only, every second one past 8 of them.
  EXPECT_EQ(y_labels(loss_curve_svg(falling(20, 100.0, 1e-4), "t")),
            (std::vector<std::string>{"0.0001", "0.001", "0.01", "0.1", "1", "10", "100"}));
  EXPECT_EQ(y_labels(loss_curve_svg(falling(20, 1e5, 1e-10), "t")),
            (std::vector<std::string>{"1e-10", "1e-8", "1e-6", "0.0001", "0.01", "1", "100", "10000"}));
}

TEST(LossCurveTest, LinearScaleOtherwise) {
  // A factor of 10: linear, ticks at multiples of 0.5.
  const std::string ten = loss_curve_svg(falling(20, 2.0, 0.2), "t");
  EXPECT_NE(ten.find(">loss</text>"), std::string::npos);
  EXPECT_EQ(ten.find("log scale"), std::string::npos);
  EXPECT_EQ(y_labels(ten), (std::vector<std::string>{"0.5", "1", "1.5", "2"}));
  // A loss ≤ 0 (a log-likelihood) cannot go on a log axis, however wide.
  const std::string negative = loss_curve_svg({{1, 100.0}, {2, 0.0}, {3, -5.0}}, "t");
  EXPECT_EQ(negative.find("log scale"), std::string::npos);
  EXPECT_EQ(y_labels(negative), (std::vector<std::string>{"0", "20", "40", "60", "80", "100"}));
  // A flat curve gets a range around it, and close ticks get the digits that tell them apart.
  EXPECT_EQ(y_labels(loss_curve_svg({{1, 0.5}, {2, 0.5}}, "t")),
            (std::vector<std::string>{"0.46", "0.48", "0.5", "0.52", "0.54"}));
  EXPECT_EQ(y_labels(loss_curve_svg({{1, 1.0000001}, {2, 1.0000003}}, "t")),
            (std::vector<std::string>{"1.0000001", "1.00000015", "1.0000002", "1.00000025", "1.0000003"}));
}

TEST(LossCurveTest, StepAxisHasIntegerTicks) {
  static const std::regex label(R"re(<text x="[\d.]+" y="[\d.]+" text-anchor="middle">([^<]*)</text>)re");
  auto x_labels = [](const std::string& svg) {
    std::vector<std::string> labels;
    for (std::sregex_iterator it(svg.begin(), svg.end(), label), end; it != end; ++it) labels.push_back((*it)[1]);
    return labels;
  };
  EXPECT_EQ(x_labels(loss_curve_svg(falling(320, 1, 0.5), "t")),
            (std::vector<std::string>{"50", "100", "150", "200", "250", "300"}));
  EXPECT_EQ(x_labels(loss_curve_svg(falling(3, 1, 0.5), "t")), (std::vector<std::string>{"1", "2", "3"}));
}

TEST(LossCurveTest, TitleIsEscaped) {
  const std::string svg = loss_curve_svg(falling(5, 1, 0.5), "a<b & \"c\" > d\x01");
  EXPECT_NE(svg.find(">a&lt;b &amp; &quot;c&quot; &gt; d</text>"), std::string::npos);
  EXPECT_EQ(tag_problem(svg), "");
}

TEST(LossCurveTest, NoFiniteLoss) {
  for (const auto& points : {std::vector<CurvePoint>{}, std::vector<CurvePoint>{{1, kNaN}, {2, kInf, true}}}) {
    const std::string svg = loss_curve_svg(points, "diverged & gone");
    EXPECT_EQ(tag_problem(svg), "");
    EXPECT_NE(svg.find(">no finite loss</text>"), std::string::npos);
    EXPECT_NE(svg.find(">diverged &amp; gone</text>"), std::string::npos);
    EXPECT_EQ(svg.find("<polyline"), std::string::npos);
    EXPECT_EQ(count(svg, "<svg"), 1u);
    EXPECT_EQ(count(svg, "</svg>"), 1u);
  }
}

TEST(LossCurveTest, OnePointIsACircle) {
  const std::string svg = loss_curve_svg({{5, 0.3}}, "one");
  EXPECT_EQ(tag_problem(svg), "");
  ASSERT_EQ(polyline(svg).size(), 1u);
  EXPECT_TRUE(plot_area(svg).holds(polyline(svg)[0]));
  EXPECT_EQ(count(svg, "<circle"), 1u);
}

TEST(LossCurveTest, OutputIsDeterministicAndInStepOrder) {
  std::vector<CurvePoint> points = falling(50, 4.0, 0.1);
  points[7].loss = kNaN;
  const std::string svg = loss_curve_svg(points, "t");
  EXPECT_EQ(loss_curve_svg(points, "t"), svg);
  std::reverse(points.begin(), points.end());
  EXPECT_EQ(loss_curve_svg(points, "t"), svg);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(LossCurveTest, ExtremeLossesStayInThePlot) {
  const std::vector<std::vector<CurvePoint>> cases = {
      {{1, 1e308}, {2, -1.7e308}, {3, 5e-324}},  // the span overflows a double
      {{1, 5e-324}, {2, 5e-324}},                // 10% of a flat subnormal curve is 0
      {{1, 1e-300}, {2, 1e300}},                 // 600 decades
  };
  for (const auto& points : cases) {
    const std::string svg = loss_curve_svg(points, "t");
    EXPECT_EQ(tag_problem(svg), "");
    EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
    const std::vector<XY> line = polyline(svg);
    ASSERT_EQ(line.size(), points.size());
    for (XY p : line) EXPECT_TRUE(plot_area(svg).holds(p)) << p.x << "," << p.y;
  }
}

TEST(LossCurveTest, WriteLossCurve) {
  quire::testing::ScratchDir dir("loss-curve");
  const std::string path = dir.file("loss.svg");
  write_loss_curve(path, falling(10, 1, 0.1), "t");
  EXPECT_EQ(io::read_file(path), loss_curve_svg(falling(10, 1, 0.1), "t"));
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"loss.svg"}));
  const std::string nowhere = dir.file("missing/loss.svg");
  EXPECT_EQ(quire::testing::error_of<io::IoError>([&] { write_loss_curve(nowhere, {}, "t"); }).rfind(nowhere + ": ", 0),
            0u);
}

}  // namespace
}  // namespace quire::train
