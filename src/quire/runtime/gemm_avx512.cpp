// The AVX-512 parts of gemm.h: packing and the register micro-kernels.
//
// Only the functions here are compiled for AVX-512 (target attributes, never
// -march): gemm.cpp calls them after checking the CPU at run time, so the
// binary still runs on any x86-64. The micro-kernels keep the contract's
// chain: each C element's accumulator starts from C (or +0) and takes one
// fused multiply-add (f32) or one VDPBF16PS pair (bf16) per k, in increasing k.

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <type_traits>
#include <utility>

#include "quire/runtime/gemm.h"
#include "quire/runtime/gemm_bf16_environment.h"

#define QUIRE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define QUIRE_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16")))

namespace quire::native::gemm_detail {
namespace {

constexpr int kTileRows = kAvx512TileRows;
constexpr int kTileCols = kAvx512TileCols;
constexpr int64_t panel_stride(int64_t kc_units) { return b_panel_stride(kc_units, kTileCols); }

static_assert(kTileCols == 32, "the kernels hold a tile row in two zmm");

// The lanes of the two zmm of a tile row that lie inside C's `cols` columns.
struct ColumnMasks {
  __mmask16 low, high;
};
inline ColumnMasks column_masks(int64_t cols) {
  const int64_t w = std::min<int64_t>(cols, kTileCols);
  const auto mask_of = [](int64_t lanes) -> __mmask16 {
    return lanes >= 16 ? __mmask16(0xFFFF) : lanes <= 0 ? __mmask16(0) : __mmask16((1u << lanes) - 1);
  };
  return {mask_of(w), mask_of(w - 16)};
}

// ---------------------------------------------------------------------------
// f32

// acc = a·b + acc as VFMADD231PS acc, a, b: this operand order (a the second
// source, b the third) decides which NaN propagates, and is the one that
// matches VDPBF16PS (a before b before acc) bit for bit, NaN payloads
// included: the bf16-via-FMA path relies on it. Written as assembly because
// an intrinsic leaves the form to the compiler.
QUIRE_AVX512 inline __m512 fma_acc_a_b(__m512 acc, __m512 a, __m512 b) {
  __asm__("vfmadd231ps %[b], %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "v"(b));
  return acc;
}

// C tile (kRows × ≤32) continues its chains over kc: acc = fma(A[r,p], B[p,j], acc).
// a: A[r, p] at a[r·a_rs + p·a_cs]: packed (kc × kRows, p-major: a_rs 1, a_cs
// kRows, both then fixed at compile time) or A's own elements; b: kc rows of
// 32, b_stride apart (packed: 32, 64-byte aligned; or B's own rows, read
// under the column masks, which zero the lanes past C's columns as
// packing's padding does).
template <int kRows, bool kPackedA>
QUIRE_AVX512 void sgemm_tile(int64_t kc, const float* __restrict a, int64_t a_rs, int64_t a_cs,
                             const float* __restrict b, int64_t b_stride, float* c, int64_t c_rs, ColumnMasks masks,
                             bool load_c) {
  if constexpr (kPackedA) {
    a_rs = 1;
    a_cs = kRows;
  }
  __m512 acc0[kRows], acc1[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    if (load_c) {
      acc0[r] = _mm512_maskz_loadu_ps(masks.low, c + r * c_rs);
      acc1[r] = _mm512_maskz_loadu_ps(masks.high, c + r * c_rs + 16);
    } else {
      acc0[r] = _mm512_setzero_ps();
      acc1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(masks.low, b);
    const __m512 b1 = _mm512_maskz_loadu_ps(masks.high, b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * a_rs]);
      acc0[r] = fma_acc_a_b(acc0[r], ar, b0);
      acc1[r] = fma_acc_a_b(acc1[r], ar, b1);
    }
    a += a_cs;
    b += b_stride;
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(c + r * c_rs, masks.low, acc0[r]);
    _mm512_mask_storeu_ps(c + r * c_rs + 16, masks.high, acc1[r]);
  }
}

using SgemmTile = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, ColumnMasks,
                           bool);
template <bool kPackedA, int... R>
constexpr std::array<SgemmTile, sizeof...(R)> sgemm_tiles(std::integer_sequence<int, R...>) {
  return {&sgemm_tile<R + 1, kPackedA>...};
}
// kSgemmTiles[h − 1] handles a micro-panel of h rows; kSgemmTilesOnA reads
// A where it lies.
constexpr auto kSgemmTiles = sgemm_tiles<true>(std::make_integer_sequence<int, kTileRows>{});
constexpr auto kSgemmTilesOnA = sgemm_tiles<false>(std::make_integer_sequence<int, kTileRows>{});

// ---------------------------------------------------------------------------
// bf16

// As sgemm_tile over kc pairs: acc = VDPBF16PS(acc, A pair, B pair). The A pair
// is the instruction's first source and B's the second: that order decides
// which NaN propagates (gemm.h, bf16_dot_step).
template <int kRows>
QUIRE_AVX512_BF16 void bf16gemm_tile(int64_t kc, const uint32_t* __restrict a, const uint32_t* __restrict b, float* c,
                                     int64_t c_rs, ColumnMasks masks, bool load_c) {
  __m512 acc0[kRows], acc1[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    if (load_c) {
      acc0[r] = _mm512_maskz_loadu_ps(masks.low, c + r * c_rs);
      acc1[r] = _mm512_maskz_loadu_ps(masks.high, c + r * c_rs + 16);
    } else {
      acc0[r] = _mm512_setzero_ps();
      acc1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t q = 0; q < kc; ++q) {
    const __m512i b0 = _mm512_load_si512(b);
    const __m512i b1 = _mm512_load_si512(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512i ar = _mm512_set1_epi32(static_cast<int>(a[r]));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], (__m512bh)ar, (__m512bh)b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], (__m512bh)ar, (__m512bh)b1);
    }
    a += kRows;
    b += kTileCols;
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(c + r * c_rs, masks.low, acc0[r]);
    _mm512_mask_storeu_ps(c + r * c_rs + 16, masks.high, acc1[r]);
  }
}

using Bf16gemmTile = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, ColumnMasks, bool);
template <int... R>
constexpr std::array<Bf16gemmTile, sizeof...(R)> bf16gemm_tiles(std::integer_sequence<int, R...>) {
  return {&bf16gemm_tile<R + 1>...};
}
constexpr auto kBf16gemmTiles = bf16gemm_tiles(std::make_integer_sequence<int, kTileRows>{});

// The block loops shared by both element types: B panels outside (one panel,
// kc × 32, stays in L1 while every A micro-panel of the block streams past it
// from L2), A micro-panels inside.
template <typename Packed, typename Tile, size_t kTiles>
inline void block_loops(const PackedBlock<Packed>& block, const std::array<Tile, kTiles>& tiles) {
  for (int64_t j = 0; j < block.cols; j += kTileCols) {
    const ColumnMasks masks = column_masks(block.cols - j);
    // A packed panel, or B's own rows from column j (f32's tiles only).
    const Packed* b_panel = block.b_in_place ? block.b + j : block.b + (j / kTileCols) * panel_stride(block.kc);
    for (int64_t i = 0; i < block.rows; i += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, block.rows - i);
      if constexpr (std::is_same_v<Tile, SgemmTile>)
        // (Packed A's tiles ignore the strides.)
        tiles[rows - 1](block.kc, block.a_in_place ? block.a + i * block.a_rs : block.a + i * block.kc, block.a_rs,
                        block.a_cs, b_panel, block.b_in_place ? block.b_rs : kTileCols, block.c + i * block.c_rs + j,
                        block.c_rs, masks, block.load_c);
      else
        tiles[rows - 1](block.kc, block.a + i * block.kc, b_panel, block.c + i * block.c_rs + j, block.c_rs, masks,
                        block.load_c);
    }
  }
}

}  // namespace

void sgemm_block_avx512(const PackedBlock<float>& block) {
  block_loops(block, block.a_in_place ? kSgemmTilesOnA : kSgemmTiles);
}

void bf16gemm_block_avx512(const PackedBlock<uint32_t>& block) { block_loops(block, kBf16gemmTiles); }

void bf16gemm_fma_block_avx512(const PackedBlock<float>& block) {
  const Bf16FloatEnvironment environment;
  block_loops(block, kSgemmTiles);
}

// ---------------------------------------------------------------------------
// Packing

namespace {

// Transposes the 16 × 16 block whose row i is r[i], in place: r[j] becomes
// column j. Four rounds of shuffles (pairs, quads, then 128-bit lanes twice).
QUIRE_AVX512 inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_ps(0xFFFF, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_ps(0xFFFF, r[2 * i], r[2 * i + 1]);
  }
  // u[4g + k], lane L: column 4L + k of rows 4g .. 4g + 3.
  __m512 u[16];
  for (int g = 0; g < 4; ++g)
    for (int half = 0; half < 2; ++half) {
      const __m512d x = _mm512_castps_pd(t[4 * g + half]), y = _mm512_castps_pd(t[4 * g + 2 + half]);
      u[4 * g + 2 * half] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, x, y));
      u[4 * g + 2 * half + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, x, y));
    }
  for (int k = 0; k < 4; ++k) {
    const __m512 even_lo = _mm512_maskz_shuffle_f32x4(0xFFFF, u[k], u[4 + k], 0x88),
                 odd_lo = _mm512_maskz_shuffle_f32x4(0xFFFF, u[k], u[4 + k], 0xDD);
    const __m512 even_hi = _mm512_maskz_shuffle_f32x4(0xFFFF, u[8 + k], u[12 + k], 0x88),
                 odd_hi = _mm512_maskz_shuffle_f32x4(0xFFFF, u[8 + k], u[12 + k], 0xDD);
    r[k] = _mm512_maskz_shuffle_f32x4(0xFFFF, even_lo, even_hi, 0x88);
    r[8 + k] = _mm512_maskz_shuffle_f32x4(0xFFFF, even_lo, even_hi, 0xDD);
    r[4 + k] = _mm512_maskz_shuffle_f32x4(0xFFFF, odd_lo, odd_hi, 0x88);
    r[12 + k] = _mm512_maskz_shuffle_f32x4(0xFFFF, odd_lo, odd_hi, 0xDD);
  }
}

// The 32-bit elements 0 .. len − 1 of `rows` rows (row i starts `i·stride`
// elements of T after row0; rows past `rows` are zeros) as columns: r[j]
// holds element j of every row. What each packer reads without gathers; T
// is the operand's element (a bf16 row's pairs may start at any element).
template <typename T>
QUIRE_AVX512 inline void load_transposed(const T* row0, int64_t stride, int64_t rows, int64_t len, __m512 r[16]) {
  const __mmask16 elements = static_cast<__mmask16>((1u << len) - 1);
  for (int64_t i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(elements, row0 + i * stride) : _mm512_setzero_ps();
  transpose_16x16(r);
}

}  // namespace

// A micro-panel stores, for each k, the panel's h rows contiguously (every
// panel but the last has kTileRows rows). Gathers are avoided: on AMD's cores
// they are microcoded and made packing a 256 × 256 operand cost a third of
// its product. Rows of A read down a column (a_rs = 1) are copied as they lie,
// one k at a time across every panel, so each cache line is read once;
// contiguous rows (a_cs = 1) are read 16 k at a time from each row and
// transposed in registers.
QUIRE_AVX512 void pack_a_f32_avx512(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc,
                                    float* dst) {
  static_assert(kTileRows <= 16, "a micro-panel's column fits one zmm");
  const auto height = [&](int64_t i0) { return std::min<int64_t>(kTileRows, rows - i0); };
  const auto mask = [](int64_t lanes) { return static_cast<__mmask16>((1u << lanes) - 1); };
  if (a_rs == 1) {
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
        const int64_t h = height(i0);
        _mm512_mask_storeu_ps(dst + i0 * kc + p * h, mask(h), _mm512_maskz_loadu_ps(mask(h), a + i0 + p * a_cs));
      }
    return;
  }
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows, dst += kTileRows * kc) {
    const int64_t h = height(i0);
    const float* src = a + i0 * a_rs;
    if (a_cs == 1) {
      for (int64_t p0 = 0; p0 < kc; p0 += 16) {
        const int64_t w = std::min<int64_t>(16, kc - p0);
        __m512 r[16];
        load_transposed(src + p0, a_rs, h, w, r);
        for (int64_t j = 0; j < w; ++j) _mm512_mask_storeu_ps(dst + (p0 + j) * h, mask(h), r[j]);
      }
    } else {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t r = 0; r < h; ++r) dst[p * h + r] = src[r * a_rs + p * a_cs];
    }
  }
}

namespace {

// The pair (A[r, 2q], A[r, 2q+1]) as one 32-bit word, even element low; +0
// for the odd element past an odd kc.
inline uint32_t a_pair(const uint16_t* row, int64_t a_cs, int64_t q, int64_t kc) {
  const uint32_t even = row[2 * q * a_cs];
  const uint32_t odd = 2 * q + 1 < kc ? row[(2 * q + 1) * a_cs] : 0u;
  return even | odd << 16;
}

// Stores column q of pairs of a micro-panel of h rows: as pairs (VDPBF16PS's
// layout), or widened to f32 with each pair's elements swapped (virtual k 2q
// holds the odd element, the high half; 2q+1 the even one).
template <bool kWiden>
QUIRE_AVX512 inline void store_pair_column(void* panel, int64_t q, int64_t h, __m512i column) {
  const __mmask16 lanes = static_cast<__mmask16>((1u << h) - 1);
  if constexpr (kWiden) {
    float* dst = static_cast<float*>(panel);
    const __m512i odd = _mm512_and_si512(column, _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u)));
    const __m512i even = _mm512_maskz_slli_epi32(0xFFFF, column, 16);
    _mm512_mask_storeu_epi32(dst + 2 * q * h, lanes, odd);
    _mm512_mask_storeu_epi32(dst + (2 * q + 1) * h, lanes, even);
  } else {
    _mm512_mask_storeu_epi32(static_cast<uint32_t*>(panel) + q * h, lanes, column);
  }
}

// Packs A's rows into micro-panels of pairs (or widened, see above). With
// contiguous rows (a_cs = 1) a pair is one 32-bit word, so 16 pairs of each
// row are loaded at once and transposed as words (no gathers, as for f32); a
// last, half-padded pair is read element by element, since its word would
// reach past the row.
template <bool kWiden>
QUIRE_AVX512 void pack_a_pairs(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, void* dst) {
  const int64_t pairs = (kc + 1) / 2;
  const int64_t words_per_pair = kWiden ? 2 : 1;
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
    const int64_t h = std::min<int64_t>(kTileRows, rows - i0);
    const uint16_t* src = a + i0 * a_rs;
    int64_t q = 0;
    if (a_cs == 1) {
      for (; q < kc / 2; q += 16) {
        const int64_t w = std::min<int64_t>(16, kc / 2 - q);
        __m512 r[16];
        load_transposed(src + 2 * q, a_rs, h, w, r);
        for (int64_t j = 0; j < w; ++j) store_pair_column<kWiden>(dst, q + j, h, _mm512_castps_si512(r[j]));
      }
      q = kc / 2;
    }
    for (; q < pairs; ++q) {
      alignas(64) uint32_t column[16] = {};
      for (int64_t r = 0; r < h; ++r) column[r] = a_pair(src + r * a_rs, a_cs, q, kc);
      store_pair_column<kWiden>(dst, q, h, _mm512_load_si512(column));
    }
    dst = static_cast<uint32_t*>(dst) + h * pairs * words_per_pair;
  }
}

}  // namespace

void pack_a_bf16_avx512(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, uint32_t* dst) {
  pack_a_pairs<false>(a, a_rs, a_cs, rows, kc, dst);
}

void pack_a_bf16_as_f32_avx512(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
  pack_a_pairs<true>(a, a_rs, a_cs, rows, kc, dst);
}

QUIRE_AVX512 void pack_b_f32_avx512(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols,
                                    float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  if (b_cs == 1) {
    // Rows of B are contiguous: each row of the block is read once, in order.
    for (int64_t p = 0; p < kc; ++p) {
      const float* row = b + p * b_rs;
      for (int64_t t = 0; t < panels; ++t) {
        const ColumnMasks masks = column_masks(cols - t * kTileCols);
        float* out = dst + t * panel_stride(kc) + p * kTileCols;
        _mm512_store_ps(out, _mm512_maskz_loadu_ps(masks.low, row + t * kTileCols));
        _mm512_store_ps(out + 16, _mm512_maskz_loadu_ps(masks.high, row + t * kTileCols + 16));
      }
    }
    return;
  }
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    float* out = dst + t * panel_stride(kc);
    if (w < kTileCols) std::memset(out, 0, sizeof(float) * kc * kTileCols);
    if (b_rs == 1) {
      // Columns of B are contiguous (B read transposed): 16 k of 16 columns
      // at a time, transposed in registers as A's rows are.
      for (int64_t j0 = 0; j0 < w; j0 += 16) {
        const int64_t hw = std::min<int64_t>(16, w - j0);
        for (int64_t p0 = 0; p0 < kc; p0 += 16) {
          const int64_t pw = std::min<int64_t>(16, kc - p0);
          __m512 r[16];
          load_transposed(b + (t * kTileCols + j0) * b_cs + p0, b_cs, hw, pw, r);
          for (int64_t q = 0; q < pw; ++q) _mm512_storeu_ps(out + (p0 + q) * kTileCols + j0, r[q]);
        }
      }
      continue;
    }
    for (int64_t j = 0; j < w; ++j) {
      const float* col = b + (t * kTileCols + j) * b_cs;
      for (int64_t p = 0; p < kc; ++p) out[p * kTileCols + j] = col[p * b_rs];
    }
  }
}

namespace {
// The maskz_ forms of these intrinsics, all lanes on: GCC 12 warns
// (-Wmaybe-uninitialized) inside the plain forms' _mm512_undefined_epi32.
QUIRE_AVX512 inline __m512i widen_u16(__m256i x) { return _mm512_maskz_cvtepu16_epi32(0xFFFF, x); }
}  // namespace

QUIRE_AVX512 void pack_b_bf16_as_f32_avx512(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols,
                                            float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  const int64_t pairs = (kc + 1) / 2;
  if (b_cs == 1) {
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* even_row = b + 2 * q * b_rs;
      const uint16_t* odd_row = 2 * q + 1 < kc ? even_row + b_rs : nullptr;
      for (int64_t t = 0; t < panels; ++t) {
        const ColumnMasks masks = column_masks(cols - t * kTileCols);
        float* out = dst + t * panel_stride(2 * pairs) + 2 * q * kTileCols;  // the odd row, then the even row
        const int64_t j = t * kTileCols;
        const __m512i zero = _mm512_setzero_si512();
        const __m512i odd0 = odd_row ? widen_u16(_mm256_maskz_loadu_epi16(masks.low, odd_row + j)) : zero;
        const __m512i odd1 = odd_row ? widen_u16(_mm256_maskz_loadu_epi16(masks.high, odd_row + j + 16)) : zero;
        const __m512i even0 = widen_u16(_mm256_maskz_loadu_epi16(masks.low, even_row + j));
        const __m512i even1 = widen_u16(_mm256_maskz_loadu_epi16(masks.high, even_row + j + 16));
        _mm512_store_si512(out, _mm512_maskz_slli_epi32(0xFFFF, odd0, 16));
        _mm512_store_si512(out + 16, _mm512_maskz_slli_epi32(0xFFFF, odd1, 16));
        _mm512_store_si512(out + kTileCols, _mm512_maskz_slli_epi32(0xFFFF, even0, 16));
        _mm512_store_si512(out + kTileCols + 16, _mm512_maskz_slli_epi32(0xFFFF, even1, 16));
      }
    }
    return;
  }
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    float* out = dst + t * panel_stride(2 * pairs);
    if (w < kTileCols || kc % 2 != 0) std::memset(out, 0, sizeof(float) * 2 * pairs * kTileCols);
    for (int64_t j = 0; j < w; ++j) {
      const uint16_t* col = b + (t * kTileCols + j) * b_cs;
      for (int64_t p = 0; p < kc; ++p) {
        // Element p goes to virtual row p + 1 if p is even, p − 1 if odd.
        const uint32_t widened = uint32_t{col[p * b_rs]} << 16;
        std::memcpy(out + (p % 2 == 0 ? p + 1 : p - 1) * kTileCols + j, &widened, sizeof(float));
      }
    }
  }
}

QUIRE_AVX512 void pack_b_bf16_avx512(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols,
                                     uint32_t* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  const int64_t pairs = (kc + 1) / 2;
  if (b_cs == 1) {
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* even_row = b + 2 * q * b_rs;
      const uint16_t* odd_row = 2 * q + 1 < kc ? even_row + b_rs : nullptr;
      for (int64_t t = 0; t < panels; ++t) {
        const ColumnMasks masks = column_masks(cols - t * kTileCols);
        uint32_t* out = dst + t * panel_stride(pairs) + q * kTileCols;
        const int64_t j = t * kTileCols;
        __m512i even0 = widen_u16(_mm256_maskz_loadu_epi16(masks.low, even_row + j));
        __m512i even1 = widen_u16(_mm256_maskz_loadu_epi16(masks.high, even_row + j + 16));
        if (odd_row != nullptr) {
          const __m512i odd0 = widen_u16(_mm256_maskz_loadu_epi16(masks.low, odd_row + j));
          const __m512i odd1 = widen_u16(_mm256_maskz_loadu_epi16(masks.high, odd_row + j + 16));
          even0 = _mm512_or_si512(even0, _mm512_maskz_slli_epi32(0xFFFF, odd0, 16));
          even1 = _mm512_or_si512(even1, _mm512_maskz_slli_epi32(0xFFFF, odd1, 16));
        }
        _mm512_store_si512(out, even0);
        _mm512_store_si512(out + 16, even1);
      }
    }
    return;
  }
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    uint32_t* out = dst + t * panel_stride(pairs);
    if (w < kTileCols) std::memset(out, 0, sizeof(uint32_t) * pairs * kTileCols);
    for (int64_t j = 0; j < w; ++j) {
      const uint16_t* col = b + (t * kTileCols + j) * b_cs;
      for (int64_t q = 0; q < pairs; ++q) {
        const uint32_t even = col[2 * q * b_rs];
        const uint32_t odd = 2 * q + 1 < kc ? col[(2 * q + 1) * b_rs] : 0u;
        out[q * kTileCols + j] = even | odd << 16;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Which bf16 path is faster here

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSpeedChains = 12;       // independent chains: enough to hide either latency
constexpr int64_t kSpeedRounds = 4000;  // 48 000 instructions: 10–100 µs

template <typename Step>
double best_seconds(Step step) {
  double best = 1e30;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto start = Clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

QUIRE_AVX512 void fma_chains() {
  __m512 acc[kSpeedChains];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  __m512 a = _mm512_set1_ps(1.0f);
  const __m512 b = _mm512_set1_ps(0x1p-7f);
  for (int64_t round = 0; round < kSpeedRounds; ++round) {
    __asm__ volatile("" : "+v"(a));  // keeps the loop from being folded
#pragma GCC unroll 16
    for (__m512& x : acc) x = fma_acc_a_b(x, a, b);
  }
  for (__m512& x : acc) __asm__ volatile("" : : "v"(x));
}

QUIRE_AVX512_BF16 void dpbf16_chains() {
  __m512 acc[kSpeedChains];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  __m512i a = _mm512_set1_epi32(0x3F803F80);        // bf16 pairs (1, 1)
  const __m512i b = _mm512_set1_epi32(0x3C003C00);  // (2^-7, 2^-7)
  for (int64_t round = 0; round < kSpeedRounds; ++round) {
    __asm__ volatile("" : "+v"(a));
#pragma GCC unroll 16
    for (__m512& x : acc) x = _mm512_dpbf16_ps(x, (__m512bh)a, (__m512bh)b);
  }
  for (__m512& x : acc) __asm__ volatile("" : : "v"(x));
}

}  // namespace

double vdpbf16ps_relative_speed() {
  // FLOP per instruction: 64 for VDPBF16PS (16 lanes × 2 products), 32 for an FMA.
  return 2.0 * best_seconds(fma_chains) / best_seconds(dpbf16_chains);
}

}  // namespace quire::native::gemm_detail
