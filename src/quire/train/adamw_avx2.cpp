// AdamW's element loop on AVX2 (adamw_update.h): four f64 lanes, the scalar
// update's operations in its order, as adamw_avx512.cpp states them in eight.
// Only this file's functions are compiled for AVX2 (a target attribute), and
// they are called after the CPU is checked (adamw_vectors_for, under
// QUIRE_ISA's cap), so the binary still runs on any x86-64. Built on x86-64
// only (src/CMakeLists.txt); adamw_update.h answers for other processors.
#include <immintrin.h>

#include "quire/train/adamw_update.h"

namespace quire::train {

namespace {

#define QUIRE_AVX2 __attribute__((target("avx2")))

QUIRE_AVX2 inline __m256d load(const void* base, bool is_f32, size_t i) {
  if (is_f32) return _mm256_cvtps_pd(_mm_loadu_ps(static_cast<const float*>(base) + i));
  return _mm256_loadu_pd(static_cast<const double*>(base) + i);
}

// The master type's rounding: none for f64; for f32 the processor's
// conversion, to nearest even with gradual underflow (round_to's fast path).
QUIRE_AVX2 inline __m256d round_master(__m256d x, bool f32) { return f32 ? _mm256_cvtps_pd(_mm256_cvtpd_ps(x)) : x; }

QUIRE_AVX2 inline void store(void* base, bool is_f32, size_t i, __m256d x) {
  if (is_f32)
    _mm_storeu_ps(static_cast<float*>(base) + i, _mm256_cvtpd_ps(x));
  else
    _mm256_storeu_pd(static_cast<double*>(base) + i, x);
}

QUIRE_AVX2 inline int nan_lanes(__m256d x) { return _mm256_movemask_pd(_mm256_cmp_pd(x, x, _CMP_UNORD_Q)); }

}  // namespace

QUIRE_AVX2 size_t adamw_vectors_avx2(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32,
                                     void* p, bool p_is_f32, const void* grad, bool grad_is_f32) {
  const bool f32 = c.master == runtime::FloatType::F32;
  const bool lerp_from_self = std::abs(c.m_weight) < 0.5;
  const __m256d coef = _mm256_set1_pd(c.coef), decay = _mm256_set1_pd(c.decay);
  const __m256d m_weight = _mm256_set1_pd(c.m_weight), m_weight_rest = _mm256_set1_pd(1.0 - c.m_weight);
  const __m256d beta2 = _mm256_set1_pd(c.beta2), v_weight = _mm256_set1_pd(c.v_weight);
  const __m256d bc2 = _mm256_set1_pd(c.bias_correction2_sqrt), eps = _mm256_set1_pd(c.eps);
  const __m256d neg_step = _mm256_set1_pd(c.neg_step_size);
  size_t i = lo;
  for (; i + 4 <= hi; i += 4) {
    __m256d g = load(grad, grad_is_f32, i);
    if (c.clipped) g = _mm256_mul_pd(g, coef);
    __m256d x = load(p, p_is_f32, i);
    if (c.decays) x = _mm256_mul_pd(x, decay);
    const __m256d m0 = load(m, state_is_f32, i), v0 = load(v, state_is_f32, i);
    const __m256d diff = _mm256_sub_pd(g, m0);
    const __m256d lerp = lerp_from_self ? _mm256_add_pd(m0, _mm256_mul_pd(m_weight, diff))
                                        : _mm256_sub_pd(g, _mm256_mul_pd(diff, m_weight_rest));
    const __m256d m1 = round_master(lerp, f32);
    const __m256d v1 =
        round_master(_mm256_add_pd(_mm256_mul_pd(v0, beta2), _mm256_mul_pd(_mm256_mul_pd(v_weight, g), g)), f32);
    const __m256d denom = _mm256_add_pd(_mm256_div_pd(_mm256_sqrt_pd(v1), bc2), eps);
    const __m256d x1 = round_master(_mm256_add_pd(x, _mm256_div_pd(_mm256_mul_pd(neg_step, m1), denom)), f32);
    // A NaN anywhere: leave the vector to the scalar update (its NaN rule).
    if (nan_lanes(m1) | nan_lanes(v1) | nan_lanes(x1)) break;
    store(m, state_is_f32, i, m1);
    store(v, state_is_f32, i, v1);
    store(p, p_is_f32, i, x1);
  }
  return i;
}

}  // namespace quire::train
