// philox_blocks.h's AVX-512 path: only this function is compiled for
// AVX-512 (a target attribute, never -march); random.cpp calls it after
// checking the CPU at run time.

#include <immintrin.h>

#include "quire/runtime/philox_blocks.h"

#define QUIRE_AVX512 __attribute__((target("avx512f")))

namespace quire::runtime::philox_blocks {
namespace {

// The maskz_ forms, every lane on: GCC 12 warns (-Wmaybe-uninitialized)
// inside the plain forms' _mm512_undefined_epi32.
QUIRE_AVX512 inline __m512i mul_even(__m512i a, __m512i b) { return _mm512_maskz_mul_epu32(0xFF, a, b); }
QUIRE_AVX512 inline __m512i shift_down(__m512i a) { return _mm512_maskz_srli_epi64(0xFF, a, 32); }
QUIRE_AVX512 inline __m512i shift_up(__m512i a) { return _mm512_maskz_slli_epi64(0xFF, a, 32); }

/// The 32×32→64 products of a's sixteen lanes with m: their high and low halves.
QUIRE_AVX512 inline void multiply(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = mul_even(a, m);             // lanes 0, 2, …: 64-bit products
  const __m512i odd = mul_even(shift_down(a), m);  // lanes 1, 3, …
  lo = _mm512_mask_blend_epi32(0xAAAA, even, shift_up(odd));
  hi = _mm512_mask_blend_epi32(0xAAAA, shift_down(even), odd);
}

}  // namespace

QUIRE_AVX512 void block_avx512(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out) {
  alignas(64) uint32_t low[kLanes], high[kLanes];
  for (size_t l = 0; l < kLanes; ++l) {
    const uint64_t index = first + l;
    low[l] = static_cast<uint32_t>(index);
    high[l] = static_cast<uint32_t>(index >> 32);
  }
  __m512i c0 = _mm512_load_si512(low), c1 = _mm512_load_si512(high);
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_set1_epi32(static_cast<int>(stream));
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    multiply(c0, m0, hi0, lo0);
    multiply(c2, m1, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  _mm512_storeu_si512(out.w[0], c0);
  _mm512_storeu_si512(out.w[1], c1);
  _mm512_storeu_si512(out.w[2], c2);
  _mm512_storeu_si512(out.w[3], c3);
}

}  // namespace quire::runtime::philox_blocks
