// philox_blocks.h's AVX2 path: only this function is compiled for AVX2 (a
// target attribute, never -march); random.cpp calls it after checking the
// CPU at run time.

#include <immintrin.h>

#include "quire/runtime/philox_blocks.h"

#define QUIRE_AVX2 __attribute__((target("avx2")))

namespace quire::runtime::philox_blocks {
namespace {

/// The 32×32→64 products of a's eight lanes with m: their high and low halves.
QUIRE_AVX2 inline void multiply(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0, 2, …: 64-bit products
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, …
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/// Eight lanes' rounds, from counter words (c0, c1) with c2 = 0, c3 = stream.
QUIRE_AVX2 inline void rounds(uint32_t k0, uint32_t k1, uint32_t stream, __m256i c0, __m256i c1, uint32_t* w0,
                              uint32_t* w1, uint32_t* w2, uint32_t* w3) {
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_set1_epi32(static_cast<int>(stream));
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    multiply(c0, m0, hi0, lo0);
    multiply(c2, m1, hi1, lo1);
    const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w0), c0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w1), c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w2), c2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w3), c3);
}

}  // namespace

QUIRE_AVX2 void block_avx2(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out) {
  alignas(32) uint32_t low[kLanes], high[kLanes];
  for (size_t l = 0; l < kLanes; ++l) {
    const uint64_t index = first + l;
    low[l] = static_cast<uint32_t>(index);
    high[l] = static_cast<uint32_t>(index >> 32);
  }
  for (size_t half = 0; half < kLanes; half += 8)
    rounds(k0, k1, stream, _mm256_load_si256(reinterpret_cast<const __m256i*>(low + half)),
           _mm256_load_si256(reinterpret_cast<const __m256i*>(high + half)), out.w[0] + half, out.w[1] + half,
           out.w[2] + half, out.w[3] + half);
}

}  // namespace quire::runtime::philox_blocks
