// One AdamW update of an element (optimizer.cpp's adamw_pass), written once
// for the scalar loop and stated again, operation for operation, by the
// vector loop (adamw_vectors.inc, compiled by adamw_avx512.cpp and
// adamw_avx2.cpp).
// Requires: the constants of one update (AdamWConstants); m and v both as f64
// arrays or both as f32 ones (an f32 master's state, whose values its
// rounding makes f32 numbers); the parameter and the gradient each as f64 or
// as an f32 view.
// Keeps: torch.optim.AdamW's order of operations in f64, every result rounded
// once to the master type. The vector loop gives the scalar loop's bits: each
// of its operations is the same IEEE operation (no contraction; the f32
// rounding is the processor's conversion), and a vector with a NaN result is
// left to the scalar loop, which makes a NaN the quiet NaN of its sign.
#pragma once

#include <cmath>
#include <cstddef>

#include "quire/runtime/float_types.h"
#include "quire/runtime/isa.h"

namespace quire::train {

/// The numbers one AdamW update applies to every element.
struct AdamWConstants {
  bool clipped = false;      ///< the gradients are scaled by coef
  double coef = 1.0;         ///< the clipping coefficient
  bool decays = false;       ///< weight decay is on
  double decay = 1.0;        ///< 1 − lr·weight_decay
  double m_weight = 0.1;     ///< 1 − β₁, lerp's weight
  double beta2 = 0.999;      ///< β₂
  double v_weight = 0.001;   ///< 1 − β₂
  double bias_correction2_sqrt = 1.0;
  double eps = 1e-8;
  double neg_step_size = 0;  ///< −lr / (1 − β₁ᵗ)
  runtime::FloatType master = runtime::FloatType::F64;
};

/// torch.lerp(self, end, weight) as ATen computes it: the form that is
/// exact at the nearer end.
inline double adamw_lerp(double self, double end, double weight) {
  return std::abs(weight) < 0.5 ? self + weight * (end - self) : end - (end - self) * (1.0 - weight);
}

/// Element i's update. S (the state), P and G are double or float (an f32 view).
template <typename S, typename P, typename G>
inline void adamw_element(const AdamWConstants& c, size_t i, S* m, S* v, P* p, const G* grad) {
  const double g = c.clipped ? grad[i] * c.coef : grad[i];
  double x = p[i];
  if (c.decays) x = x * c.decay;
  const double m1 = runtime::round_to(c.master, adamw_lerp(m[i], g, c.m_weight));
  const double v1 = runtime::round_to(c.master, static_cast<double>(v[i]) * c.beta2 + c.v_weight * g * g);
  m[i] = static_cast<S>(m1);
  v[i] = static_cast<S>(v1);
  const double denom = std::sqrt(v1) / c.bias_correction2_sqrt + c.eps;
  p[i] = static_cast<P>(runtime::round_to(c.master, x + c.neg_step_size * m1 / denom));
}

/// A vector loop: updates whole vectors from `lo` while a vector's elements
/// remain before `hi` and no result of the vector is a NaN; returns the first
/// element it did not update (the caller updates that one, or the tail, with
/// adamw_element). The state (m and v), the parameter and the gradient are f32
/// views where the flags say so.
using AdamWVectors = size_t (*)(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32,
                                void* p, bool p_is_f32, const void* grad, bool grad_is_f32);

#if defined(__x86_64__)
/// Eight f64 lanes (adamw_avx512.cpp).
size_t adamw_vectors_avx512(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32, void* p,
                            bool p_is_f32, const void* grad, bool grad_is_f32);
/// Four f64 lanes (adamw_avx2.cpp).
size_t adamw_vectors_avx2(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32, void* p,
                          bool p_is_f32, const void* grad, bool grad_is_f32);
#endif

/// The vector loop for `isa`: masters f64 and f32 on x86-64 with AVX2 or
/// AVX-512; null elsewhere (the scalar loop runs alone). The caller passes
/// the processor's level under QUIRE_ISA's cap (runtime::widest_isa()), or a
/// lower one to test a narrower path.
inline AdamWVectors adamw_vectors_for(runtime::FloatType master, runtime::Isa isa) {
  if (master != runtime::FloatType::F64 && master != runtime::FloatType::F32) return nullptr;
#if defined(__x86_64__)
  if (isa >= runtime::Isa::Avx512) return adamw_vectors_avx512;
  if (isa >= runtime::Isa::Avx2) return adamw_vectors_avx2;
#endif
  return nullptr;
}

}  // namespace quire::train
