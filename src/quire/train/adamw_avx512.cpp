// AdamW's element loop on AVX-512 (adamw_update.h): adamw_vectors.inc in
// eight f64 lanes. Only this file's functions are compiled for AVX-512 (a
// pragma after the headers), and they are called after the CPU is checked
// (adamw_vectors_for, under QUIRE_ISA's cap), so the binary still runs on any
// x86-64. Built on x86-64 only (src/CMakeLists.txt); adamw_update.h answers
// for other processors.
#include <immintrin.h>

#include <cmath>
#include <cstddef>

#include "quire/train/adamw_update.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace quire::train {

namespace {

// The maskz_ forms, every lane on: GCC 12 warns (-Wmaybe-uninitialized) inside
// the plain forms' _mm*_undefined_*.
struct V {
  using D = __m512d;
  static constexpr size_t kLanes = 8;
  static D set1(double x) { return _mm512_set1_pd(x); }
  static D widen(__m256 x) { return _mm512_maskz_cvtps_pd(0xFF, x); }
  static __m256 narrow(D x) { return _mm512_maskz_cvtpd_ps(0xFF, x); }
  static D load(const void* base, bool is_f32, size_t i) {
    if (is_f32) return widen(_mm256_loadu_ps(static_cast<const float*>(base) + i));
    return _mm512_loadu_pd(static_cast<const double*>(base) + i);
  }
  static void store(void* base, bool is_f32, size_t i, D x) {
    if (is_f32)
      _mm256_storeu_ps(static_cast<float*>(base) + i, narrow(x));
    else
      _mm512_storeu_pd(static_cast<double*>(base) + i, x);
  }
  static D round_f32(D x) { return widen(narrow(x)); }
  static D add(D a, D b) { return _mm512_add_pd(a, b); }
  static D sub(D a, D b) { return _mm512_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm512_mul_pd(a, b); }
  static D div(D a, D b) { return _mm512_div_pd(a, b); }
  static D sqrt(D x) { return _mm512_maskz_sqrt_pd(0xFF, x); }
  static bool any_nan(D a, D b, D c) {
    return (_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_pd_mask(b, b, _CMP_UNORD_Q) |
            _mm512_cmp_pd_mask(c, c, _CMP_UNORD_Q)) != 0;
  }
};

#include "quire/train/adamw_vectors.inc"

}  // namespace

size_t adamw_vectors_avx512(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32, void* p,
                            bool p_is_f32, const void* grad, bool grad_is_f32) {
  return vector_loop(c, lo, hi, m, v, state_is_f32, p, p_is_f32, grad, grad_is_f32);
}

}  // namespace quire::train

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
