#include "quire/train/loss_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "quire/io/atomic_file.h"
#include "quire/support/text.h"

namespace quire::train {

namespace {

// The canvas and the plot area inside it (SVG y grows downward). The left
// margin holds tick labels of up to about 9 characters at font-size 11.
constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 80, kTop = 40, kRight = 690, kBottom = 350;
constexpr double kMaxDouble = std::numeric_limits<double>::max();
// About this many tick intervals at most on a linear axis (the nice step is
// the smallest 1, 2, 5 × 10^k that gives no more).
constexpr double kMaxIntervals = 7;
// A log axis over more decades than this labels every n-th one only.
constexpr int kMaxDecadeTicks = 8;

/// A coordinate, always with 2 decimals; + 0.0 keeps -0.0 from printing as "-0.00".
std::string coord(double v) { return fmt::format("{:.2f}", v + 0.0); }

/// `v` with `significant` digits, exponent without padding ("1e-5", not "1e-05").
std::string short_number(double v, int significant) {
  std::string s = fmt::format("{:.{}g}", v + 0.0, std::max(significant, 1));
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  const bool negative = exponent[0] == '-';
  exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

struct Tick {
  double at;  ///< in axis units (log10 of the loss on a log axis)
  std::string label;
};

/// An axis interval [lo, hi], lo < hi, in axis units. Losses near ±1e308
/// would overflow hi - lo; the span is then taken on halves (which would lose
/// the last bit of a subnormal span, so only then).
struct Range {
  double lo, hi;
  /// (hi - lo) / n.
  double span_over(double n) const {
    const double span = hi - lo;
    return std::isfinite(span) ? span / n : (hi / 2 - lo / 2) / (n / 2);
  }
  /// Where v lies: 0 at lo, 1 at hi.
  double fraction(double v) const {
    const double span = hi - lo;
    return std::isfinite(span) ? (v - lo) / span : (v / 2 - lo / 2) / (hi / 2 - lo / 2);
  }
};

/// Ticks at multiples of the nice step within `range`. `integral`: the step
/// is at least 1 and labels are integers (the step axis).
std::vector<Tick> linear_ticks(Range range, bool integral) {
  const double raw = range.span_over(kMaxIntervals);
  int exponent = static_cast<int>(std::floor(std::log10(raw)));
  double step = 0;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * std::pow(10.0, exponent);
    if (step >= raw * (1 - 1e-12)) {
      if (m == 10) ++exponent;
      break;
    }
  }
  if (integral && step < 1) {
    step = 1;
    exponent = 0;
  }
  const double first = std::ceil(range.lo / step - 1e-9), last = std::floor(range.hi / step + 1e-9);
  std::vector<Tick> ticks;
  // Only a step lost to underflow (losses ~1e-320) can fail this.
  if (!(last - first <= 4 * kMaxIntervals)) return ticks;
  const double largest = std::max(std::fabs(first * step), std::fabs(last * step));
  // Enough digits to tell ticks a step apart (down to 10^exponent), and at
  // least 6, so that "{:g}" writes 300 as "300", not "3e+02".
  const int needed = largest > 0 ? static_cast<int>(std::floor(std::log10(largest))) - exponent + 1 : 1;
  const int significant = std::max(needed, 6);
  for (double k = first; k <= last; ++k) {
    const double v = k * step;
    ticks.push_back({v, integral ? fmt::format("{:.0f}", v + 0.0) : short_number(v, significant)});
  }
  return ticks;
}

/// Ticks of a log10 axis at powers of ten, with 2 and 5 multiples when the
/// axis spans under 3 decades (else too few ticks to read a value off).
std::vector<Tick> log_ticks(Range range) {
  std::vector<Tick> ticks;
  const double lowest = std::floor(range.lo), highest = std::ceil(range.hi);
  if (range.hi - range.lo < 3) {
    for (double d = lowest; d <= highest; ++d)
      for (double m : {1.0, 2.0, 5.0}) {
        const double at = d + std::log10(m);
        if (at >= range.lo - 1e-9 && at <= range.hi + 1e-9)
          ticks.push_back({at, short_number(m * std::pow(10.0, d), 6)});
      }
    return ticks;
  }
  const double first = std::ceil(range.lo - 1e-9), last = std::floor(range.hi + 1e-9);
  // Every n-th decade, n chosen so at most kMaxDecadeTicks remain; ticks at
  // multiples of n so they read 1e-6, 1e-3, 1, not 1e-5, 1e-2, 10.
  const double n = std::max(1.0, std::ceil((last - first + 1) / kMaxDecadeTicks));
  for (double d = std::ceil(first / n) * n; d <= last; d += n) ticks.push_back({d, short_number(std::pow(10.0, d), 6)});
  return ticks;
}

/// The y range of linear losses in [lo, hi]: 5% padding each side, or ±10%
/// (±1 at 0) of a flat curve, so no point sits on the frame.
Range linear_range(double lo, double hi) {
  double pad = Range{lo, hi}.span_over(20);
  if (pad == 0) pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
  const Range padded{std::max(lo - pad, -kMaxDouble), std::min(hi + pad, kMaxDouble)};
  // A flat curve at a subnormal loss: 10% of it rounds to nothing.
  return padded.lo < padded.hi ? padded : Range{lo - 1, hi + 1};
}

std::string svg_header() {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0:.0f}\" height=\"{1:.0f}\" fill=\"#ffffff\"/>\n",
      kWidth, kHeight);
}

std::string title_and_frame(const std::string& title) {
  return fmt::format(
      "<text x=\"{}\" y=\"24.00\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n"
      "<rect class=\"plot-area\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444444\"/>\n",
      coord(kWidth / 2), xml_escape(title), coord(kLeft), coord(kTop), coord(kRight - kLeft), coord(kBottom - kTop));
}

}  // namespace

std::string loss_curve_svg(const std::vector<CurvePoint>& points, const std::string& title) {
  std::vector<CurvePoint> sorted = points;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  std::vector<const CurvePoint*> finite, marked, held_out;
  for (const CurvePoint& p : sorted) {
    if (std::isfinite(p.loss)) finite.push_back(&p);
    if (!std::isfinite(p.loss) || p.skipped) marked.push_back(&p);
    if (p.held_out && std::isfinite(*p.held_out)) held_out.push_back(&p);
  }

  std::string svg = svg_header() + title_and_frame(title);
  if (finite.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#666666\">",
                       coord((kLeft + kRight) / 2), coord((kTop + kBottom) / 2));
    svg += "no finite loss</text>\n</svg>\n";
    return svg;
  }

  // The x range covers the marked points too: a run that diverged at its
  // end must show where.
  Range x{double(sorted.front().step), double(sorted.back().step)};
  if (x.lo == x.hi) x = {x.lo - 1, x.hi + 1};
  double lo = finite.front()->loss, hi = lo;
  for (const CurvePoint* p : finite) {
    lo = std::min(lo, p->loss);
    hi = std::max(hi, p->loss);
  }
  for (const CurvePoint* p : held_out) {
    lo = std::min(lo, *p->held_out);
    hi = std::max(hi, *p->held_out);
  }
  const bool log = lo > 0 && hi / lo > 20;
  auto axis_value = [log](double loss) { return log ? std::log10(loss) : loss; };
  Range y = linear_range(lo, hi);
  if (log) {
    const double l = std::log10(lo), h = std::log10(hi), pad = 0.05 * (h - l);
    y = {l - pad, h + pad};
  }
  auto px = [&](double step) { return kLeft + x.fraction(step) * (kRight - kLeft); };
  auto py = [&](double v) { return kBottom - y.fraction(v) * (kBottom - kTop); };

  // Grid lines and labels first, so that the curve is drawn over them.
  std::string grid, labels;
  for (const Tick& t : linear_ticks(x, /*integral=*/true)) {
    const std::string at = coord(px(t.at));
    grid += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", at, coord(kTop), coord(kBottom));
    labels += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", at, coord(kBottom + 18),
                          xml_escape(t.label));
  }
  for (const Tick& t : log ? log_ticks(y) : linear_ticks(y, /*integral=*/false)) {
    const std::string at = coord(py(t.at));
    grid += fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\"/>\n", at, coord(kLeft), coord(kRight));
    labels += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", coord(kLeft - 8),
                          coord(py(t.at) + 4), xml_escape(t.label));
  }
  svg += "<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n" + grid + "</g>\n";
  svg += "<g class=\"tick-labels\" font-size=\"11\" fill=\"#333333\">\n" + labels + "</g>\n";

  svg +=
      "<polyline class=\"loss\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" stroke-linejoin=\"round\" "
      "points=\"";
  for (size_t i = 0; i < finite.size(); ++i)
    svg += fmt::format("{}{},{}", i ? " " : "", coord(px(double(finite[i]->step))),
                       coord(py(axis_value(finite[i]->loss))));
  svg += "\"/>\n";
  // A polyline of one point draws nothing.
  if (finite.size() == 1)
    svg += fmt::format("<circle class=\"loss\" cx=\"{}\" cy=\"{}\" r=\"2.50\" fill=\"#1f77b4\"/>\n",
                       coord(px(double(finite[0]->step))), coord(py(axis_value(finite[0]->loss))));

  if (!held_out.empty()) {
    svg +=
        "<polyline class=\"held-out\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
        "stroke-linejoin=\"round\" points=\"";
    for (size_t i = 0; i < held_out.size(); ++i)
      svg += fmt::format("{}{},{}", i ? " " : "", coord(px(double(held_out[i]->step))),
                         coord(py(axis_value(*held_out[i]->held_out))));
    svg += "\"/>\n<g class=\"held-out\" fill=\"#ff7f0e\">\n";
    for (const CurvePoint* p : held_out)
      svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.50\"/>\n", coord(px(double(p->step))),
                         coord(py(axis_value(*p->held_out))));
    svg += "</g>\n";
    svg += fmt::format(
        "<g class=\"legend\" font-size=\"11\"><text x=\"{0}\" y=\"{1}\" text-anchor=\"end\" fill=\"#1f77b4\">"
        "training loss (each step's batch)</text><text x=\"{0}\" y=\"{2}\" text-anchor=\"end\" fill=\"#ff7f0e\">"
        "held-out loss</text></g>\n",
        coord(kRight - 8), coord(kTop + 16), coord(kTop + 30));
  }

  if (!marked.empty()) {
    svg += "<g class=\"bad-steps\" stroke=\"#d62728\" stroke-width=\"1.5\">\n";
    for (const CurvePoint* p : marked) {
      const double cx = px(double(p->step));
      svg += fmt::format("<path d=\"M{0},{2} L{1},{3} M{0},{3} L{1},{2}\"/>\n", coord(cx - 4), coord(cx + 4),
                         coord(kBottom - 4), coord(kBottom + 4));
    }
    svg += "</g>\n";
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\" fill=\"#d62728\">x: {} non-finite or "
        "skipped</text>\n",
        coord(kRight), coord(kHeight - 8), marked.size());
  }

  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">step</text>\n",
                     coord((kLeft + kRight) / 2), coord(kHeight - 22));
  svg += fmt::format(
      "<text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">loss{}</text>\n",
      coord(20), coord((kTop + kBottom) / 2), log ? " (log scale)" : "");
  svg += "</svg>\n";
  return svg;
}

void write_loss_curve(const std::string& path, const std::vector<CurvePoint>& points, const std::string& title) {
  io::write_file_atomically(path, loss_curve_svg(points, title));
}

}  // namespace quire::train
