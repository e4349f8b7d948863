// attention_rows.inc compiled for AVX-512 (a pragma, never -march): attention.cpp
// calls these only after checking the CPU at run time. The headers come
// before the pragma, so that no inline function they define is compiled for
// AVX-512 here and merged with the other files' copies; what follows it has
// internal linkage.

#include <math.h>    // NOLINT: elementary.inc is C, and uses the C names
#include <stdint.h>  // NOLINT
#include <string.h>  // NOLINT

#include "quire/runtime/attention.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
#endif

namespace quire::runtime::attention_detail {
namespace {
#include "quire/runtime/elementary.inc"
// after quire_exp, which it calls
#include "quire/runtime/attention_rows.inc"
}  // namespace

void forward_rows_avx512(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z, uint8_t* kept,
                         float* wd) {
  forward_rows(r, p, x, e, w, m, z, kept, wd);
}
void backward_rows_avx512(const Rows& r, const float* x, const float* e, const float* w, const float* m, const float* z,
                          const uint8_t* kept, float* g, float* tmp) {
  backward_rows(r, x, e, w, m, z, kept, g, tmp);
}

}  // namespace quire::runtime::attention_detail

#if defined(__clang__)
#pragma clang attribute pop
#endif
