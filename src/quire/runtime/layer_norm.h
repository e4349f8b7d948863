#pragma once
// Layer norm on the processor in one pass over its rows each way: the
// prelude's `layer_norm` and its vjp (prelude/nn.qr) with exactly the bits
// the native backend gives their lines in f32, where the lines take five
// launches forward and a dozen back.
//
// The lines, for one row x of D elements (every operation one f32 rounding;
// Σ in increasing j from +0):
//
//   forward                          vjp, with the cotangent ct of the result
//   μ   = (Σ x_j) / D                n_j = d_j · r,  a_j = ct_j · γ_j,  c_j = a_j · r
//   d_j = x_j − μ                    S1 = Σ a_j · d_j,  S2 = Σ −c_j
//   v   = (Σ d_j · d_j) / D          g  = S1 · (−0.5 · ((r · r) · r)),  q = g / D
//   r   = f32(1 / sqrt(v + ε))       h_j = q · (2 · d_j),  S3 = Σ −h_j
//   y_j = ((d_j · r) · γ_j) + β_j    dx_j = (c_j + h_j) + (S2 + S3) / D
//                                    dγ_j = Σ_rows ct_j · n_j,  dβ_j = Σ_rows ct_j
//
// with ε = f32(eps), 1 / sqrt in f64 (the kernels' rsqrt) rounded to f32, and
// the column sums dγ, dβ over the rows in increasing order. Rows are
// independent (threads take runs of them); the column sums split the
// columns. The result does not depend on `threads`.
//
// The prelude's `dropout_add_layer_norm(k, y, p, x, γ, β, eps)` puts a
// residual step before the norm, in the same pass: row i of the sum is
//
//   s_j = x_j + (kept_j ? y_j / κ : +0),   n = layer_norm(s)
//
// with κ = f32(1 − p) and kept_j element i·D + j of bernoulli(key, κ) over
// y's shape (runtime/random.h); κ = 1 keeps every element (every draw is
// below 1). Its vjp at the cotangents (ct_s, ct_n) runs layer norm's vjp on
// s with ct_n and then, per element, ds = ct_s + dx_norm, dx = ds and
// dy = (kept ? ds : +0) / κ, as the lines' reverse sweep does.

#include <cstdint>

#include "quire/runtime/random.h"

namespace quire::runtime {

/// y = layer_norm(x, γ, β, eps) over rows × D.
void layer_norm_forward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                            float eps, float* y, int threads);

/// The vjp at cotangent ct: y (as the forward), dx, dγ, dβ.
void layer_norm_backward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                             float eps, const float* ct, float* y, float* dx, float* dgamma, float* dbeta, int threads);

/// Bytes of scratch layer_norm holds: per thread a group's transposed rows
/// (runtime/layer_norm_rows.h: 16 rows of x and of ct), and in the vjp μ and
/// r of every row.
inline int64_t layer_norm_scratch_bytes(int64_t rows, int64_t width, int threads, bool vjp) {
  return (vjp ? 8 * rows : 0) + int64_t{threads} * 2 * width * 16 * 4;
}


/// s = x + dropout(k, y, p) and n = layer_norm(s, γ, β, eps) over rows × D.
void dropout_add_layer_norm_forward_f32(int64_t rows, int64_t width, const float* y, const DropoutDraw& drop,
                                        const float* x, const float* gamma, const float* beta, float eps, float* s,
                                        float* n, int threads);

/// The vjp at the cotangents ct_s, ct_n: s and n (as the forward), dy, dx, dγ, dβ.
void dropout_add_layer_norm_backward_f32(int64_t rows, int64_t width, const float* y, const DropoutDraw& drop,
                                         const float* x, const float* gamma, const float* beta, float eps,
                                         const float* ct_s, const float* ct_n, float* s, float* n, float* dy,
                                         float* dx, float* dgamma, float* dbeta, int threads);

/// Bytes of scratch dropout_add_layer_norm holds: the vjp's statistics, and
/// per thread a group's transposed rows and its mask.
inline int64_t dropout_add_layer_norm_scratch_bytes(int64_t rows, int64_t width, int threads, bool vjp) {
  return layer_norm_scratch_bytes(rows, width, threads, vjp) + int64_t{threads} * 16 * width;
}

}  // namespace quire::runtime
