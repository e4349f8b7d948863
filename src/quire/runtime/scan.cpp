// The linear recurrence along an axis (kernels.h, `scan`) and the cotangent
// of its a, in the order scan_order.h states: each step reads the step before
// it, and each state element folds its terms in the order of m, every step
// rounded to the accumulator's type (no fused multiply-add).
#include <fmt/format.h>

#include <utility>

#include "quire/runtime/kernels.h"
#include "quire/runtime/scan_order.h"

namespace quire::runtime {

namespace {

double step(FloatType acc, double v) { return acc == FloatType::F64 ? v : round_to(acc, v); }

/// KernelMisuse unless the axes fit x (rank r) and a has x's shape with m
/// inserted, as long as n.
void require_scan_shapes(const char* op, const Shape& a, const Shape& x, const ScanAxes& axes) {
  const int64_t rank = static_cast<int64_t>(x.size());
  detail::require_axis(axes.t, rank, op);
  detail::require_axis(axes.n, rank, op);
  detail::require_axis(axes.m, rank + 1, op);
  if (axes.t == axes.n) detail::misuse(op, "the step axis is the state axis");
  Shape expected = x;
  expected.insert(expected.begin() + axes.m, x[static_cast<size_t>(axes.n)]);
  if (a != expected)
    detail::misuse(op, fmt::format("a has shape {}, x {} (a should be {})", shape_string(a), shape_string(x),
                                   shape_string(expected)));
}

}  // namespace

Tensor scan(const Tensor& a, const Tensor& x, const ScanAxes& axes, bool adjoint, FloatType acc) {
  const char* op = "scan";
  detail::require_well_formed(a, op);
  detail::require_well_formed(x, op);
  if (!a.is_real() || !x.is_real()) detail::misuse(op, "takes real operands");
  require_scan_shapes(op, a.shape, x.shape, axes);
  Tensor out = Tensor::real(x.shape);
  const double* av = std::as_const(a.reals).data();
  const double* xv = std::as_const(x.reals).data();
  double* h = out.reals.data();
  scan_order(x.shape, axes, adjoint,
             [&](int64_t o, int64_t a0, int64_t a_step, int64_t h0, int64_t h_step, int64_t terms) {
               double s = step(acc, xv[o]);
               for (int64_t m = 0; m < terms; ++m)
                 s = step(acc, s + step(acc, av[a0 + m * a_step] * h[h0 + m * h_step]));
               h[o] = s;
             });
  return out;
}

Tensor scan_grad_a(const Tensor& lambda, const Tensor& h, const ScanAxes& axes, bool adjoint) {
  const char* op = "scan_grad_a";
  detail::require_well_formed(lambda, op);
  detail::require_well_formed(h, op);
  if (!lambda.is_real() || !h.is_real()) detail::misuse(op, "takes real operands");
  if (lambda.shape != h.shape)
    detail::misuse(op, fmt::format("λ has shape {}, h {}", shape_string(lambda.shape), shape_string(h.shape)));
  Shape shape = h.shape;
  detail::require_axis(axes.n, h.rank(), op);
  detail::require_axis(axes.m, h.rank() + 1, op);
  shape.insert(shape.begin() + axes.m, h.shape[static_cast<size_t>(axes.n)]);
  require_scan_shapes(op, shape, h.shape, axes);
  Tensor out = Tensor::real(shape);  // +0.0 where the first step does not read a
  const double* lv = std::as_const(lambda.reals).data();
  const double* hv = std::as_const(h.reals).data();
  double* r = out.reals.data();
  scan_grad_a_order(h.shape, axes, adjoint, [&](int64_t o, int64_t l, int64_t k) { r[o] = lv[l] * hv[k]; });
  return out;
}

}  // namespace quire::runtime
