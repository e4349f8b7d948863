#include "quire/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace quire::train {

namespace {

/// `x` in e-notation with `digits` significant digits. fmt would print a
/// negative NaN as "-nan"; its sign means nothing, so every NaN is "nan".
std::string scientific(double x, int digits) {
  if (std::isnan(x)) return "nan";
  return fmt::format("{:.{}e}", x, digits - 1);
}

/// The throughput with enough digits to be read: a slow run (an interpreted
/// model) would otherwise show "0 samples/s".
std::string throughput(double samples_per_s) {
  if (std::isnan(samples_per_s)) return "nan";
  const double a = std::fabs(samples_per_s);
  const int decimals = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  return fmt::format("{:.{}f}", samples_per_s, decimals);
}

/// A loss scale: a power of two in practice, printed whole ("32768").
std::string scale_text(double scale) { return std::isnan(scale) ? "nan" : fmt::format("{}", scale); }

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  // Whole seconds as a double: exact far beyond any real duration, and no
  // integer conversion that could overflow on a huge ETA. (+ 0.0 turns a
  // -0.0 into 0, which would print as "-0:00".)
  const double total = std::round(seconds) + 0.0;
  const double s = std::fmod(total, 60);
  const double minutes = std::floor(total / 60);
  if (total < 3600) return fmt::format("{:.0f}:{:02.0f}", minutes, s);
  return fmt::format("{:.0f}:{:02.0f}:{:02.0f}", std::floor(total / 3600), std::fmod(minutes, 60), s);
}

std::string progress_line(const StepRecord& r) {
  std::string line = fmt::format("step {}/{}  epoch {}/{}  loss {}", r.step, r.total_steps, r.epoch + 1, r.epochs,
                                 scientific(r.loss, 5));
  if (r.skipped) line += r.loss_scale ? fmt::format("  skipped (scale {})", scale_text(*r.loss_scale)) : "  skipped";
  line += fmt::format("  lr {}  |g| {}", scientific(r.lr, 4), scientific(r.grad_norm, 5));
  if (r.clipped) line += " (clipped)";
  if (r.loss_scale && !r.skipped) line += fmt::format("  scale {}", scale_text(*r.loss_scale));
  line += fmt::format("  {} samples/s  {} left", throughput(r.samples_per_s), format_duration(r.eta_s));
  return line;
}

int64_t default_log_every(int64_t total_steps) {
  if (total_steps <= 100) return 1;
  return (total_steps + 49) / 50;
}

Progress::Progress(std::ostream& out, bool tty, int64_t every)
    : out_(out), tty_(tty), every_(std::max<int64_t>(every, 1)) {}

Progress::~Progress() { finish(); }

void Progress::draw() {
  out_ << '\r' << last_line_ << "\x1b[K";
  out_.flush();
  line_open_ = true;
}

void Progress::step(const StepRecord& r) {
  last_line_ = progress_line(r);
  if (tty_) {
    draw();
    return;
  }
  // The first step seen, not only step 1: a resumed run shows at once that it runs.
  const bool first = !seen_step_;
  seen_step_ = true;
  if (first || r.step == 1 || r.step % every_ == 0 || r.step == r.total_steps || r.skipped) {
    out_ << last_line_ << '\n';
    out_.flush();
  }
}

void Progress::message(const std::string& text) {
  if (!line_open_) {
    out_ << text << '\n';
    out_.flush();
    return;
  }
  out_ << "\r\x1b[K" << text << '\n';
  draw();
}

void Progress::finish() {
  if (!line_open_) return;
  out_ << '\n';
  out_.flush();
  line_open_ = false;
}

}  // namespace quire::train
