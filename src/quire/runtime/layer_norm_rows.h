#pragma once
// The row loops of runtime/layer_norm.h, built for each instruction set
// (layer_norm_rows.inc under layer_norm.cpp's portable build and
// layer_norm_rows_avx2.cpp / layer_norm_rows_avx512.cpp) and chosen under
// QUIRE_ISA. A row's sums run in increasing j from +0 as the lines' do; a
// group of up to kLanes rows is transposed so that each row's chain is one
// vector lane, the rows' chains side by side. Every path gives the same bits.

#include <cstdint>

namespace quire::runtime::layer_norm_detail {

/// Rows a group holds: one per lane.
inline constexpr int64_t kLanes = 16;

/// Floats of scratch a group takes: x and ct transposed.
inline int64_t group_scratch_floats(int64_t width) { return 2 * width * kLanes; }

/// Rows [0, n) of x (n ≤ kLanes, row stride `width`): each row's μ and r.
using StatisticsFn = void (*)(const float* x, int64_t n, int64_t width, float eps, float* mean, float* rstd,
                              float* scratch);
/// Rows [0, n): y from x and each row's μ and r.
using ForwardFn = void (*)(const float* x, int64_t n, int64_t width, const float* gamma, const float* beta,
                           const float* mean, const float* rstd, float* y);
/// The vjp of rows [0, n) at ct: each row's μ and r, y and dx.
using BackwardFn = void (*)(const float* x, const float* ct, int64_t n, int64_t width, const float* gamma,
                            const float* beta, float eps, float* mean, float* rstd, float* y, float* dx,
                            float* scratch);
/// Columns [j0, j1) of dγ and dβ continued over rows [0, n) in increasing
/// order: sg[j] += ct·((x − μ)·r), sb[j] += ct.
using ColumnsFn = void (*)(const float* x, const float* ct, int64_t n, int64_t width, int64_t j0, int64_t j1,
                           const float* mean, const float* rstd, float* sg, float* sb);
/// n elements of the residual sum: s = x + (kept ? y / κ : +0), or x + y
/// when `on` is false.
using ResidualFn = void (*)(const float* x, const float* y, const uint8_t* kept, float kappa, bool on, int64_t n,
                            float* s);
/// n elements of the residual's vjp: ds = ct_s + dx (into dx), dy = (kept ?
/// ds : +0) / κ, or ds when `on` is false.
using ResidualVjpFn = void (*)(const float* ct_s, const uint8_t* kept, float kappa, bool on, int64_t n, float* dx,
                               float* dy);

struct Paths {
  StatisticsFn statistics;
  ForwardFn forward;
  BackwardFn backward;
  ColumnsFn columns;
  ResidualFn residual;
  ResidualVjpFn residual_vjp;
};

Paths paths_portable();
#if defined(__x86_64__)
Paths paths_avx2();
Paths paths_avx512();
#endif
/// The widest paths runtime::widest_isa() allows.
Paths paths();

}  // namespace quire::runtime::layer_norm_detail
