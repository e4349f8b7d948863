// philox_blocks.h's AVX-512 path: only these functions are compiled for
// AVX-512 (a target attribute, never -march); random.cpp calls them after
// checking the CPU at run time.

#include <immintrin.h>

#include "quire/runtime/philox_blocks.h"

#define QUIRE_AVX512 __attribute__((target("avx512f")))
#define QUIRE_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

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

/// B blocks side by side, block b at counters first + 16·b: ten rounds are a
/// chain of dependent products, so independent blocks fill its latency.
template <int B>
QUIRE_AVX512 inline void group(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out) {
  __m512i c0[B], c1[B], c2[B], c3[B];
  for (int b = 0; b < B; ++b) {
    alignas(64) uint32_t low[kLanes], high[kLanes];
    for (size_t l = 0; l < kLanes; ++l) {
      const uint64_t index = first + static_cast<uint64_t>(b) * kLanes + l;
      low[l] = static_cast<uint32_t>(index);
      high[l] = static_cast<uint32_t>(index >> 32);
    }
    c0[b] = _mm512_load_si512(low);
    c1[b] = _mm512_load_si512(high);
    c2[b] = _mm512_setzero_si512();
    c3[b] = _mm512_set1_epi32(static_cast<int>(stream));
  }
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
#pragma GCC unroll 4
    for (int b = 0; b < B; ++b) {
      __m512i hi0, lo0, hi1, lo1;
      multiply(c0[b], m0, hi0, lo0);
      multiply(c2[b], m1, hi1, lo1);
      c0[b] = _mm512_xor_si512(_mm512_xor_si512(hi1, c1[b]), key0);
      c2[b] = _mm512_xor_si512(_mm512_xor_si512(hi0, c3[b]), key1);
      c1[b] = lo1;
      c3[b] = lo0;
    }
  }
  for (int b = 0; b < B; ++b) {
    _mm512_storeu_si512(out[b].w[0], c0[b]);
    _mm512_storeu_si512(out[b].w[1], c1[b]);
    _mm512_storeu_si512(out[b].w[2], c2[b]);
    _mm512_storeu_si512(out[b].w[3], c3[b]);
  }
}

}  // namespace

QUIRE_AVX512 void blocks_avx512(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out,
                                size_t count) {
  size_t b = 0;
  for (; b + 4 <= count; b += 4) group<4>(k0, k1, first + b * kLanes, stream, out + b);
  if (b + 2 <= count) {
    group<2>(k0, k1, first + b * kLanes, stream, out + b);
    b += 2;
  }
  if (b < count) group<1>(k0, k1, first + b * kLanes, stream, out + b);
}

QUIRE_AVX512_BW void bernoulli_bytes_avx512(const Words& w, uint64_t below, uint8_t* out) {
  // bits53 = (w0 << 21) XOR (w1 >> 11) in eight 64-bit lanes, twice.
  const __m512i limit = _mm512_set1_epi64(static_cast<long long>(below));
  __mmask8 kept[2];
  for (int half = 0; half < 2; ++half) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.w[0] + 8 * half));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.w[1] + 8 * half));
    const __m512i hi = _mm512_maskz_cvtepu32_epi64(0xFF, w0);
    const __m512i lo = _mm512_maskz_cvtepu32_epi64(0xFF, w1);
    const __m512i bits =
        _mm512_xor_si512(_mm512_maskz_slli_epi64(0xFF, hi, 21), _mm512_maskz_srli_epi64(0xFF, lo, 11));
    kept[half] = _mm512_cmplt_epu64_mask(bits, limit);
  }
  const __mmask16 all = static_cast<__mmask16>(kept[0] | (static_cast<unsigned>(kept[1]) << 8));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_maskz_mov_epi8(all, _mm_set1_epi8(1)));
}

}  // namespace quire::runtime::philox_blocks
