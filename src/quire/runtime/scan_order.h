#pragma once
// The order of a scan's arithmetic (kernels.h, `scan` and `scan_grad_a`),
// stated once for every interpreter that evaluates one: the reference kernels
// (scan.cpp) in f64 or the accumulator's type, the exact reference in MPFR.

#include <cstdint>
#include <vector>

#include "quire/runtime/kernels.h"

namespace quire::runtime {

/// Strides of a row-major tensor of `shape`.
inline std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

/// Visits the elements of a scan over x of shape `x` in the order they are
/// computed: each batch position (every axis but t and n, row-major), its
/// steps (t ascending; the adjoint's descending), and each step's states n
/// ascending. For each element, visit(out, a0, a_step, h0, h_step, terms):
/// the element is x[out] plus, for m = 0 … terms − 1 in order, the terms
/// a[a0 + m·a_step] · h[h0 + m·h_step] (out and h index the result, which has
/// x's shape; a has `axes.m` inserted); terms is 0 at the first step.
template <class Visit>
void scan_order(const Shape& x, const ScanAxes& axes, bool adjoint, Visit&& visit) {
  const int64_t rank = static_cast<int64_t>(x.size());
  Shape a = x;
  a.insert(a.begin() + axes.m, x[static_cast<size_t>(axes.n)]);
  const std::vector<int64_t> xs = row_major_strides(x), a_full = row_major_strides(a);
  const auto a_stride = [&](int64_t d) { return a_full[static_cast<size_t>(d < axes.m ? d : d + 1)]; };
  Shape batch;
  std::vector<int64_t> batch_x, batch_a;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axes.t || d == axes.n) continue;
    batch.push_back(x[static_cast<size_t>(d)]);
    batch_x.push_back(xs[static_cast<size_t>(d)]);
    batch_a.push_back(a_stride(d));
  }
  const int64_t steps = x[static_cast<size_t>(axes.t)], states = x[static_cast<size_t>(axes.n)];
  if (steps == 0 || states == 0) return;
  const int64_t ts = xs[static_cast<size_t>(axes.t)], ns = xs[static_cast<size_t>(axes.n)];
  const int64_t ats = a_stride(axes.t), ans = a_stride(axes.n), am = a_full[static_cast<size_t>(axes.m)];
  // Forward: h[t, n] reads h[t − 1, m] through a[t, n, m]; the adjoint:
  // h[t, n] reads h[t + 1, m] through a[t + 1, m, n].
  const int64_t row = adjoint ? am : ans, column = adjoint ? ans : am;
  const int64_t count = element_count(batch);
  detail::StridedWalk<2> walk(batch, {batch_x, batch_a});
  for (int64_t b = 0; b < count; ++b, walk.next()) {
    const int64_t xo = walk.offset(0), ao = walk.offset(1);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = adjoint ? steps - 1 - i : i;
      const int64_t prev = adjoint ? t + 1 : t - 1;
      const int64_t a_step = ao + (adjoint ? prev : t) * ats;
      for (int64_t n = 0; n < states; ++n)
        visit(xo + t * ts + n * ns, a_step + n * row, column, xo + prev * ts, ns, i > 0 ? states : 0);
    }
  }
}

/// Visits the elements of the cotangent of a scan's a (shape: x's with
/// `axes.m` inserted) in row-major order: visit(out, l, h) for an element
/// that is λ[l] · h[h], skipping those at t = 0, which are +0.0.
template <class Visit>
void scan_grad_a_order(const Shape& x, const ScanAxes& axes, bool adjoint, Visit&& visit) {
  const int64_t rank = static_cast<int64_t>(x.size());
  Shape a = x;
  a.insert(a.begin() + axes.m, x[static_cast<size_t>(axes.n)]);
  const std::vector<int64_t> xs = row_major_strides(x);
  const int t_in_a = axes.t < axes.m ? axes.t : axes.t + 1;
  const int n_in_a = axes.n < axes.m ? axes.n : axes.n + 1;
  std::vector<int64_t> to_x(a.size(), 0);  // a's axis → x's stride, for the batch axes
  for (int64_t d = 0; d <= rank; ++d)
    if (d != axes.m && d != t_in_a && d != n_in_a)
      to_x[static_cast<size_t>(d)] = xs[static_cast<size_t>(d < axes.m ? d : d - 1)];
  const int64_t ts = xs[static_cast<size_t>(axes.t)], ns = xs[static_cast<size_t>(axes.n)];
  std::vector<int64_t> index(a.size(), 0);
  const int64_t total = element_count(a);
  for (int64_t e = 0; e < total; ++e) {
    const int64_t t = index[static_cast<size_t>(t_in_a)], n = index[static_cast<size_t>(n_in_a)],
                  m = index[static_cast<size_t>(axes.m)];
    if (t > 0) {
      int64_t batch = 0;
      for (size_t d = 0; d < index.size(); ++d) batch += index[d] * to_x[d];
      // Forward: λ[t, n] · h[t − 1, m]; the adjoint: λ[t − 1, m] · h[t, n].
      if (adjoint)
        visit(e, batch + (t - 1) * ts + m * ns, batch + t * ts + n * ns);
      else
        visit(e, batch + t * ts + n * ns, batch + (t - 1) * ts + m * ns);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < a[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace quire::runtime
