// AdamW's element loop on AVX-512 (adamw_update.h): eight f64 lanes, the
// scalar update's operations in its order. Only this file's functions are
// compiled for AVX-512 (a target attribute), and they are called after the
// CPU is checked (adamw_vectors_for, under QUIRE_ISA's cap), so the binary
// still runs on any x86-64. Built on x86-64 only (src/CMakeLists.txt);
// adamw_update.h answers for other processors.
#include <immintrin.h>

#include "quire/train/adamw_update.h"

namespace quire::train {

namespace {

#define QUIRE_AVX512F __attribute__((target("avx512f")))

// The maskz_ forms, every lane on: GCC 12 warns (-Wmaybe-uninitialized) inside
// the plain forms' _mm*_undefined_*.
QUIRE_AVX512F inline __m512d widen(__m256 x) { return _mm512_maskz_cvtps_pd(0xFF, x); }
QUIRE_AVX512F inline __m256 narrow(__m512d x) { return _mm512_maskz_cvtpd_ps(0xFF, x); }
QUIRE_AVX512F inline __m512d sqrt8(__m512d x) { return _mm512_maskz_sqrt_pd(0xFF, x); }

QUIRE_AVX512F inline __m512d load(const void* base, bool is_f32, size_t i) {
  if (is_f32) return widen(_mm256_loadu_ps(static_cast<const float*>(base) + i));
  return _mm512_loadu_pd(static_cast<const double*>(base) + i);
}

// The master type's rounding: none for f64; for f32 the processor's
// conversion, to nearest even with gradual underflow (round_to's fast path).
QUIRE_AVX512F inline __m512d round_master(__m512d x, bool f32) {
  return f32 ? widen(narrow(x)) : x;
}

QUIRE_AVX512F inline void store(void* base, bool is_f32, size_t i, __m512d x) {
  if (is_f32)
    _mm256_storeu_ps(static_cast<float*>(base) + i, narrow(x));
  else
    _mm512_storeu_pd(static_cast<double*>(base) + i, x);
}

}  // namespace

QUIRE_AVX512F size_t adamw_vectors_avx512(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v,
                                          bool state_is_f32, void* p, bool p_is_f32, const void* grad,
                                          bool grad_is_f32) {
  const bool f32 = c.master == runtime::FloatType::F32;
  const bool lerp_from_self = std::abs(c.m_weight) < 0.5;
  const __m512d coef = _mm512_set1_pd(c.coef), decay = _mm512_set1_pd(c.decay);
  const __m512d m_weight = _mm512_set1_pd(c.m_weight), m_weight_rest = _mm512_set1_pd(1.0 - c.m_weight);
  const __m512d beta2 = _mm512_set1_pd(c.beta2), v_weight = _mm512_set1_pd(c.v_weight);
  const __m512d bc2 = _mm512_set1_pd(c.bias_correction2_sqrt), eps = _mm512_set1_pd(c.eps);
  const __m512d neg_step = _mm512_set1_pd(c.neg_step_size);
  size_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    __m512d g = load(grad, grad_is_f32, i);
    if (c.clipped) g = _mm512_mul_pd(g, coef);
    __m512d x = load(p, p_is_f32, i);
    if (c.decays) x = _mm512_mul_pd(x, decay);
    const __m512d m0 = load(m, state_is_f32, i), v0 = load(v, state_is_f32, i);
    const __m512d diff = _mm512_sub_pd(g, m0);
    const __m512d lerp = lerp_from_self ? _mm512_add_pd(m0, _mm512_mul_pd(m_weight, diff))
                                        : _mm512_sub_pd(g, _mm512_mul_pd(diff, m_weight_rest));
    const __m512d m1 = round_master(lerp, f32);
    const __m512d v1 =
        round_master(_mm512_add_pd(_mm512_mul_pd(v0, beta2), _mm512_mul_pd(_mm512_mul_pd(v_weight, g), g)), f32);
    const __m512d denom = _mm512_add_pd(_mm512_div_pd(sqrt8(v1), bc2), eps);
    const __m512d x1 = round_master(_mm512_add_pd(x, _mm512_div_pd(_mm512_mul_pd(neg_step, m1), denom)), f32);
    // A NaN anywhere: leave the vector to the scalar update (its NaN rule).
    const __mmask8 nan = _mm512_cmp_pd_mask(m1, m1, _CMP_UNORD_Q) | _mm512_cmp_pd_mask(v1, v1, _CMP_UNORD_Q) |
                         _mm512_cmp_pd_mask(x1, x1, _CMP_UNORD_Q);
    if (nan) break;
    store(m, state_is_f32, i, m1);
    store(v, state_is_f32, i, v1);
    store(p, p_is_f32, i, x1);
  }
  return i;
}

}  // namespace quire::train
