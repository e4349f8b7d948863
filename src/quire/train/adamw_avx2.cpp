// AdamW's element loop on AVX2 (adamw_update.h): adamw_vectors.inc in four
// f64 lanes. Only this file's functions are compiled for AVX2 (a pragma
// after the headers), and they are called after the CPU is checked
// (adamw_vectors_for, under QUIRE_ISA's cap), so the binary still runs on any
// x86-64. Built on x86-64 only (src/CMakeLists.txt); adamw_update.h answers
// for other processors.
#include <immintrin.h>

#include <cmath>
#include <cstddef>

#include "quire/train/adamw_update.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace quire::train {

namespace {

struct V {
  using D = __m256d;
  static constexpr size_t kLanes = 4;
  static D set1(double x) { return _mm256_set1_pd(x); }
  static D load(const void* base, bool is_f32, size_t i) {
    if (is_f32) return _mm256_cvtps_pd(_mm_loadu_ps(static_cast<const float*>(base) + i));
    return _mm256_loadu_pd(static_cast<const double*>(base) + i);
  }
  static void store(void* base, bool is_f32, size_t i, D x) {
    if (is_f32)
      _mm_storeu_ps(static_cast<float*>(base) + i, _mm256_cvtpd_ps(x));
    else
      _mm256_storeu_pd(static_cast<double*>(base) + i, x);
  }
  static D round_f32(D x) { return _mm256_cvtps_pd(_mm256_cvtpd_ps(x)); }
  static D add(D a, D b) { return _mm256_add_pd(a, b); }
  static D sub(D a, D b) { return _mm256_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm256_mul_pd(a, b); }
  static D div(D a, D b) { return _mm256_div_pd(a, b); }
  static D sqrt(D x) { return _mm256_sqrt_pd(x); }
  static int nan_lanes(D x) { return _mm256_movemask_pd(_mm256_cmp_pd(x, x, _CMP_UNORD_Q)); }
  static bool any_nan(D a, D b, D c) { return (nan_lanes(a) | nan_lanes(b) | nan_lanes(c)) != 0; }
};

#include "quire/train/adamw_vectors.inc"

}  // namespace

size_t adamw_vectors_avx2(const AdamWConstants& c, size_t lo, size_t hi, void* m, void* v, bool state_is_f32, void* p,
                          bool p_is_f32, const void* grad, bool grad_is_f32) {
  return vector_loop(c, lo, hi, m, v, state_is_f32, p, p_is_f32, grad, grad_is_f32);
}

}  // namespace quire::train

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
