#include "quire/precision/error_forms.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace quire::precision {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

uint32_t ErrorSymbols::fresh(double spread) {
  if (spread_.size() >= std::numeric_limits<uint32_t>::max())
    throw std::length_error("the running bound has more local errors than it can name");
  spread_.push_back(static_cast<float>(std::clamp(spread, 0.0, 1.0)));
  return static_cast<uint32_t>(spread_.size() - 1);
}

double ErrorForms::largest() const {
  double worst = 0;
  for (double t : total) worst = std::isnan(t) ? kInf : std::max(worst, t);
  return worst;
}

double ErrorForms::estimate(size_t i, const ErrorSymbols& symbols, double lambda) const {
  if (!std::isfinite(total[i])) return total[i];
  double fixed = std::fabs(center[i]) + rest[i], squares = 0;
  for (size_t t = offset[i]; t < offset[i + 1]; ++t) {
    const double a = std::fabs(coefficient[t]);
    const double spread = symbols.spread(symbol[t]);
    if (spread > 0)
      squares += (spread * a) * (spread * a);
    else
      fixed += a;
  }
  return std::min(total[i], fixed + lambda * std::sqrt(squares));
}

SharedForms exact_forms(size_t n) {
  auto f = std::make_shared<ErrorForms>();
  f->center.assign(n, 0);
  f->rest.assign(n, 0);
  f->total.assign(n, 0);
  f->offset.assign(n + 1, 0);
  return f;
}

SharedForms bound_forms(const std::vector<double>& rest) {
  auto f = std::make_shared<ErrorForms>();
  f->center.assign(rest.size(), 0);
  f->rest = rest;
  f->total = rest;
  f->offset.assign(rest.size() + 1, 0);
  return f;
}

void FormBuilder::begin(size_t n) {
  out_ = std::make_unique<ErrorForms>();
  out_->center.reserve(n);
  out_->rest.reserve(n);
  out_->total.reserve(n);
  out_->offset.reserve(n + 1);
  out_->offset.push_back(0);
  center_ = rest_ = 0;
}

void FormBuilder::add_term(uint32_t k, double coefficient) {
  if (coefficient == 0) return;
  if (k >= dense_.size()) {
    const size_t n = std::max<size_t>(symbols_.size(), k + 1);
    dense_.resize(n, 0);
    seen_.resize(n, 0);
  }
  if (!seen_[k]) {
    seen_[k] = 1;
    touched_.push_back(k);
  }
  dense_[k] += coefficient;
}

void FormBuilder::add(const ErrorForms& f, size_t i, double scale) {
  if (scale == 0) return;  // 0·∞ is no error: an element the result does not depend on
  center_ += scale * f.center[i];
  rest_ += std::fabs(scale) * f.rest[i];
  for (size_t t = f.offset[i]; t < f.offset[i + 1]; ++t) add_term(f.symbol[t], scale * f.coefficient[t]);
}

double FormBuilder::current_total() const {
  double sum = std::fabs(center_) + rest_;
  for (uint32_t k : touched_) sum += std::fabs(dense_[k]);
  return sum;
}

void FormBuilder::replace_by_bound(double bound) {
  for (uint32_t k : touched_) {
    dense_[k] = 0;
    seen_[k] = 0;
  }
  touched_.clear();
  center_ = 0;
  rest_ = bound;
}

void FormBuilder::next() {
  // The largest terms first when there are too many: the rest go to ρ.
  if (touched_.size() > kMaxTerms) {
    std::nth_element(touched_.begin(), touched_.begin() + static_cast<std::ptrdiff_t>(kMaxTerms), touched_.end(),
                     [&](uint32_t a, uint32_t b) { return std::fabs(dense_[a]) > std::fabs(dense_[b]); });
    for (size_t t = kMaxTerms; t < touched_.size(); ++t) {
      rest_ += std::fabs(dense_[touched_[t]]);
      dense_[touched_[t]] = 0;
      seen_[touched_[t]] = 0;
    }
    touched_.resize(kMaxTerms);
  }
  double total = std::fabs(center_) + rest_;
  for (uint32_t k : touched_) {
    const double a = dense_[k];
    if (a != 0) {
      out_->symbol.push_back(k);
      out_->coefficient.push_back(a);
      total += std::fabs(a);
    }
    dense_[k] = 0;
    seen_[k] = 0;
  }
  touched_.clear();
  if (std::isnan(total) || std::isnan(rest_)) total = kInf;
  out_->center.push_back(center_);
  out_->rest.push_back(std::isnan(rest_) ? kInf : rest_);
  out_->total.push_back(total);
  out_->offset.push_back(out_->symbol.size());
  center_ = rest_ = 0;
}

SharedForms FormBuilder::finish() {
  if (touched_.size() || center_ != 0 || rest_ != 0)
    throw std::logic_error("internal: a form was left unfinished");
  return SharedForms(std::move(out_));
}

}  // namespace quire::precision
