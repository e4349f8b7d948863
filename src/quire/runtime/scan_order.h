#pragma once
// The order of a scan's arithmetic (kernels.h, `scan` and `scan_grad_a`),
// stated once for every interpreter that evaluates one: the reference kernels
// (scan.cpp) in f64 or the accumulator's type, the exact reference in MPFR.

#include <cstdint>
#include <vector>

#include "quire/runtime/kernels.h"
#include "quire/runtime/tensor.h"

namespace quire::runtime {

/// Where a scan over x of shape `x` reads and writes, as strides: the batch
/// (every axis but t and n, row-major) with x's and a's strides, the steps
/// and states with x's (the result's) and a's, and a's m.
struct ScanGeometry {
  Shape batch;
  std::vector<int64_t> batch_x, batch_a;
  int64_t steps = 0, states = 0;
  int64_t ts = 0, ns = 0;            ///< x's (and the result's) strides along t and n
  int64_t ats = 0, ans = 0, am = 0;  ///< a's along t, n and m
};

inline ScanGeometry scan_geometry(const Shape& x, const ScanAxes& axes) {
  const int64_t rank = static_cast<int64_t>(x.size());
  Shape a = x;
  a.insert(a.begin() + axes.m, x[static_cast<size_t>(axes.n)]);
  const std::vector<int64_t> xs = contiguous_strides(x), a_full = contiguous_strides(a);
  const auto a_stride = [&](int64_t d) { return a_full[static_cast<size_t>(d < axes.m ? d : d + 1)]; };
  ScanGeometry g;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axes.t || d == axes.n) continue;
    g.batch.push_back(x[static_cast<size_t>(d)]);
    g.batch_x.push_back(xs[static_cast<size_t>(d)]);
    g.batch_a.push_back(a_stride(d));
  }
  g.steps = x[static_cast<size_t>(axes.t)];
  g.states = x[static_cast<size_t>(axes.n)];
  g.ts = xs[static_cast<size_t>(axes.t)];
  g.ns = xs[static_cast<size_t>(axes.n)];
  g.ats = a_stride(axes.t);
  g.ans = a_stride(axes.n);
  g.am = a_full[static_cast<size_t>(axes.m)];
  return g;
}

/// Visits the elements of a scan over x of shape `x` in the order they are
/// computed: each batch position (row-major), its steps (t ascending; the
/// adjoint's descending), and each step's states n ascending. For each
/// element, visit(out, a0, a_step, h0, h_step, terms): the element is x[out]
/// plus, for m = 0 … terms − 1 in order, the terms a[a0 + m·a_step] ·
/// h[h0 + m·h_step] (out and h index the result, which has x's shape; a has
/// `axes.m` inserted); terms is 0 at the first step. (export/c_runtime.cpp's
/// quire_scan walks the same geometry.)
template <class Visit>
void scan_order(const Shape& x, const ScanAxes& axes, bool adjoint, Visit&& visit) {
  const ScanGeometry g = scan_geometry(x, axes);
  if (g.steps == 0 || g.states == 0) return;
  // Forward: h[t, n] reads h[t − 1, m] through a[t, n, m]; the adjoint:
  // h[t, n] reads h[t + 1, m] through a[t + 1, m, n].
  const int64_t row = adjoint ? g.am : g.ans, column = adjoint ? g.ans : g.am;
  const int64_t count = element_count(g.batch);
  detail::StridedWalk<2> walk(g.batch, {g.batch_x, g.batch_a});
  for (int64_t b = 0; b < count; ++b, walk.next()) {
    const int64_t xo = walk.offset(0), ao = walk.offset(1);
    for (int64_t i = 0; i < g.steps; ++i) {
      const int64_t t = adjoint ? g.steps - 1 - i : i;
      const int64_t prev = adjoint ? t + 1 : t - 1;
      const int64_t a_step = ao + (adjoint ? prev : t) * g.ats;
      for (int64_t n = 0; n < g.states; ++n)
        visit(xo + t * g.ts + n * g.ns, a_step + n * row, column, xo + prev * g.ts, g.ns, i > 0 ? g.states : 0);
    }
  }
}

/// The cotangent of a scan's a (shape: x's with `axes.m` inserted), walked
/// row-major: a's shape, and per axis of it the stride of x it moves
/// (0 for t, n and m, which the element's own indices place).
struct ScanGradGeometry {
  Shape a;
  std::vector<int64_t> to_x;
  int t_in_a = 0, n_in_a = 0, m = 0;
  int64_t ts = 0, ns = 0;
};

inline ScanGradGeometry scan_grad_geometry(const Shape& x, const ScanAxes& axes) {
  ScanGradGeometry g;
  g.a = x;
  g.a.insert(g.a.begin() + axes.m, x[static_cast<size_t>(axes.n)]);
  const std::vector<int64_t> xs = contiguous_strides(x);
  g.t_in_a = axes.t < axes.m ? axes.t : axes.t + 1;
  g.n_in_a = axes.n < axes.m ? axes.n : axes.n + 1;
  g.m = axes.m;
  g.to_x.assign(g.a.size(), 0);
  for (int d = 0; d < static_cast<int>(g.a.size()); ++d)
    if (d != g.m && d != g.t_in_a && d != g.n_in_a)
      g.to_x[static_cast<size_t>(d)] = xs[static_cast<size_t>(d < g.m ? d : d - 1)];
  g.ts = xs[static_cast<size_t>(axes.t)];
  g.ns = xs[static_cast<size_t>(axes.n)];
  return g;
}

/// Visits the elements of the cotangent of a scan's a in row-major order:
/// visit(out, l, h) for an element that is λ[l] · h[h], skipping those at
/// t = 0, which are +0.0. (export/c_runtime.cpp's quire_scan_grad_a walks
/// the same geometry.)
template <class Visit>
void scan_grad_a_order(const Shape& x, const ScanAxes& axes, bool adjoint, Visit&& visit) {
  const ScanGradGeometry g = scan_grad_geometry(x, axes);
  std::vector<int64_t> index(g.a.size(), 0);
  const int64_t total = element_count(g.a);
  for (int64_t e = 0; e < total; ++e) {
    const int64_t t = index[static_cast<size_t>(g.t_in_a)], n = index[static_cast<size_t>(g.n_in_a)],
                  m = index[static_cast<size_t>(g.m)];
    if (t > 0) {
      int64_t batch = 0;
      for (size_t d = 0; d < index.size(); ++d) batch += index[d] * g.to_x[d];
      // Forward: λ[t, n] · h[t − 1, m]; the adjoint: λ[t − 1, m] · h[t, n].
      if (adjoint)
        visit(e, batch + (t - 1) * g.ts + m * g.ns, batch + t * g.ts + n * g.ns);
      else
        visit(e, batch + t * g.ts + n * g.ns, batch + (t - 1) * g.ts + m * g.ns);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < g.a[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace quire::runtime
