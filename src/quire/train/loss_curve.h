#pragma once
// The loss curve of a training run as an SVG image, written beside the
// metrics file so that a run can be judged at a glance in a browser or a CI
// artifact, with no plotting tool installed.
//
// The document is a pure function of its input: fixed 2-decimal coordinates,
// no timestamps, no randomness, so it can be golden-tested and diffed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace quire::train {

/// The loss of one step; a skipped step (f16 gradients not finite) is marked.
struct CurvePoint {
  CurvePoint(int64_t step, double loss, bool skipped = false, std::optional<double> held_out = std::nullopt)
      : step(step), loss(loss), skipped(skipped), held_out(held_out) {}
  int64_t step;
  double loss;
  bool skipped = false;
  std::optional<double> held_out;  ///< the held-out loss evaluated after this step, if it was
};

/// A self-contained SVG 1.1 document, 720 × 420:
///  - a polyline of the finite losses in step order; the x axis is linear
///    over [first step, last step], the y axis log10-scaled when every finite
///    loss is > 0 and max/min > 20 (a loss falling by decades would otherwise
///    be a flat line after its first steps), else linear with 5% padding;
///  - tick labels at nice values: 1, 2, 5 × 10^k on a linear axis; powers of
///    ten on a log axis, with 2 and 5 multiples when it spans under 3 decades;
///  - the held-out losses, where points have one, as a second polyline
///    (class "held-out", orange, a dot at each) on the same axes, and a
///    legend naming both curves; the y range covers both;
///  - axis titles "step" and "loss" (+ " (log scale)"), and `title` above;
///  - a small red cross on the bottom edge at the step of each point whose
///    loss is not finite or which was skipped.
/// The plot area is the `<rect class="plot-area" .../>`; every mark but the
/// crosses lies inside it. Without a finite loss the document shows the
/// title and "no finite loss".
std::string loss_curve_svg(const std::vector<CurvePoint>& points, const std::string& title);

/// Writes loss_curve_svg(points, title) to `path` atomically, so a viewer
/// never sees half a document. io::IoError naming the path on failure.
void write_loss_curve(const std::string& path, const std::vector<CurvePoint>& points, const std::string& title);

}  // namespace quire::train
