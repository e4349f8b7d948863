// The AVX2+FMA parts of gemm.h: packing and the register micro-kernels of the
// Avx2 and Avx2FmaBf16 paths, for processors without AVX-512.
//
// As in gemm_avx512.cpp, only the functions here are compiled for AVX2 (target
// attributes, never -march): gemm.cpp calls them after checking the CPU at run
// time. The micro-kernels keep the contract's chain: each C element's
// accumulator starts from C (or +0) and takes one fused multiply-add per k, in
// increasing k. Only the tile differs from AVX-512's: 16 ymm registers hold a
// 6 × 16 tile of C (12 accumulators), two vectors of a B row and one broadcast
// of A.
//
// AVX2 has no mask registers: the lanes past C's last column are left out by
// VMASKMOVPS loads and stores (integer masks), which only the tiles at a
// block's right edge use; AMD's cores run the masked store slowly, and a full
// tile never pays for it.

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "quire/runtime/gemm.h"
#include "quire/runtime/gemm_bf16_environment.h"

#define QUIRE_AVX2 __attribute__((target("avx2,fma")))

namespace quire::native::gemm_detail {
namespace {

constexpr int kTileRows = kAvx2TileRows;
constexpr int kTileCols = kAvx2TileCols;
constexpr int kVectors = kTileCols / 8;  // ymm per tile row
constexpr int64_t panel_stride(int64_t kc_units) { return b_panel_stride(kc_units, kTileCols); }

static_assert(kTileCols % 8 == 0, "a tile row is whole ymm");
static_assert(kTileRows * kVectors + kVectors + 1 <= 16, "accumulators, B and a broadcast fit the 16 ymm");

// The lanes of ymm v of a tile row that lie inside `cols` columns, as
// VMASKMOVPS's mask (all bits set in a lane that is inside).
QUIRE_AVX2 inline __m256i column_mask(int64_t cols, int v) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t inside = std::clamp<int64_t>(cols - 8 * v, 0, 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(inside)), lane);
}

// ---------------------------------------------------------------------------
// The micro-kernel

// C tile (kRows × ≤ kTileCols) continues its chains over kc: acc = fma(A[r,p],
// B[p,j], acc). a: A[r, p] at a[r·a_rs + p·a_cs]: packed (kc × kRows,
// p-major: a_rs 1, a_cs kRows, both then fixed at compile time) or A's own
// elements; b: kc rows of kTileCols, b_stride apart (packed: kTileCols,
// 64-byte aligned; or B's own rows). kEdge: C has only `cols` < kTileCols
// columns here, so C and B are read and C written under column masks (which
// zero B's lanes past them, as packing's padding does).
template <int kRows, bool kPackedA, bool kEdge>
QUIRE_AVX2 void sgemm_tile(int64_t kc, const float* __restrict a, int64_t a_rs, int64_t a_cs, const float* __restrict b,
                           int64_t b_stride, float* c, int64_t c_rs, int64_t cols, bool load_c) {
  if constexpr (kPackedA) {
    a_rs = 1;
    a_cs = kRows;
  }
  __m256i masks[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) masks[v] = kEdge ? column_mask(cols, v) : _mm256_set1_epi32(-1);
  __m256 acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      float* row = c + r * c_rs + 8 * v;
      if (!load_c)
        acc[r][v] = _mm256_setzero_ps();
      else
        acc[r][v] = kEdge ? _mm256_maskload_ps(row, masks[v]) : _mm256_loadu_ps(row);
    }
  for (int64_t p = 0; p < kc; ++p) {
    __m256 bv[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      bv[v] = kEdge ? _mm256_maskload_ps(b + 8 * v, masks[v]) : _mm256_loadu_ps(b + 8 * v);
      // Row r: acc = a·b + acc as VFMADD231PS acc, a, b, the operand order
      // that matches VDPBF16PS's NaN propagation (gemm_avx512.cpp,
      // fma_acc_a_b), which the Avx2FmaBf16 path relies on. Assembly, since an
      // intrinsic leaves the form to the compiler; the broadcast is inside it
      // because with an FMA per statement GCC 12 copied accumulators between
      // registers in the loop (16 ymm leave it one spare).
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      static_assert(kVectors == 2, "the statement below names two vectors of B");
      __m256 ar;
      __asm__(
          "vbroadcastss %[a_rp], %[ar]\n\t"
          "vfmadd231ps %[b0], %[ar], %[acc0]\n\t"
          "vfmadd231ps %[b1], %[ar], %[acc1]"
          : [acc0] "+x"(acc[r][0]), [acc1] "+x"(acc[r][1]), [ar] "=&x"(ar)
          : [a_rp] "m"(a[r * a_rs]), [b0] "x"(bv[0]), [b1] "x"(bv[1]));
    }
    a += a_cs;
    b += b_stride;
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      float* row = c + r * c_rs + 8 * v;
      if constexpr (kEdge)
        _mm256_maskstore_ps(row, masks[v], acc[r][v]);
      else
        _mm256_storeu_ps(row, acc[r][v]);
    }
}

using SgemmTile = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                           bool);
template <bool kPackedA, bool kEdge, int... R>
constexpr std::array<SgemmTile, sizeof...(R)> sgemm_tiles(std::integer_sequence<int, R...>) {
  return {&sgemm_tile<R + 1, kPackedA, kEdge>...};
}
// kTiles[on A][edge][h − 1] handles a micro-panel of h rows, reading A
// packed (0) or where it lies (1), a full tile's columns (0) or fewer (1).
using Heights = std::make_integer_sequence<int, kTileRows>;
constexpr std::array<std::array<std::array<SgemmTile, kTileRows>, 2>, 2> kTiles = {{
    {{sgemm_tiles<true, false>(Heights{}), sgemm_tiles<true, true>(Heights{})}},
    {{sgemm_tiles<false, false>(Heights{}), sgemm_tiles<false, true>(Heights{})}},
}};

// The block loops: B panels outside (each streamed from L2 while the block's
// A micro-panels pass it), A micro-panels inside.
void block_loops(const PackedBlock<float>& block) {
  const auto& tiles = kTiles[block.a_in_place ? 1 : 0];
  for (int64_t j = 0; j < block.cols; j += kTileCols) {
    const int64_t cols = std::min<int64_t>(kTileCols, block.cols - j);
    const auto& heights = tiles[cols < kTileCols ? 1 : 0];
    // A packed panel, or B's own rows from column j.
    const float* b_panel = block.b_in_place ? block.b + j : block.b + (j / kTileCols) * panel_stride(block.kc);
    const int64_t b_stride = block.b_in_place ? block.b_rs : kTileCols;
    for (int64_t i = 0; i < block.rows; i += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, block.rows - i);
      // (Packed A's tiles ignore the strides.)
      const float* a = block.a_in_place ? block.a + i * block.a_rs : block.a + i * block.kc;
      // The next micro-tile's C, fetched while this one runs (kc FMA steps).
      if (block.load_c) {
        const int64_t next_i = i + kTileRows < block.rows ? i + kTileRows : 0;
        const int64_t next_j = i + kTileRows < block.rows ? j : j + kTileCols;
        if (next_j < block.cols)
          for (int64_t r = 0; r < std::min<int64_t>(kTileRows, block.rows - next_i); ++r) {
            const float* row = block.c + (next_i + r) * block.c_rs + next_j;
            _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(row + kTileCols - 1), _MM_HINT_T0);
          }
      }
      heights[rows - 1](block.kc, a, block.a_rs, block.a_cs, b_panel, b_stride, block.c + i * block.c_rs + j,
                        block.c_rs, cols, block.load_c);
    }
  }
}

}  // namespace

void sgemm_block_avx2(const PackedBlock<float>& block) { block_loops(block); }

void bf16gemm_fma_block_avx2(const PackedBlock<float>& block) {
  const Bf16FloatEnvironment environment;
  block_loops(block);
}

// ---------------------------------------------------------------------------
// Packing

namespace {

// Transposes the 8 × 8 block whose row i is r[i], in place: r[j] becomes
// column j. Three rounds of shuffles (pairs, quads, 128-bit lanes).
QUIRE_AVX2 inline void transpose_8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + k], lane L of each 128-bit half: column 4·half + k of rows 4g .. 4g + 3.
  for (int g = 0; g < 2; ++g)
    for (int half = 0; half < 2; ++half) {
      const __m256 x = t[4 * g + half], y = t[4 * g + 2 + half];
      u[4 * g + 2 * half] = _mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * g + 2 * half + 1] = _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

// The floats 0 .. len − 1 (len ≤ 8) of `rows` ≤ 8 rows (row i at
// row0 + i·stride; rows past `rows` and lanes past len are zeros) as
// columns: r[j] holds element j of every row.
QUIRE_AVX2 inline void load_transposed(const float* row0, int64_t stride, int64_t rows, int64_t len, __m256 r[8]) {
  const __m256i elements = column_mask(len, 0);
  for (int64_t i = 0; i < 8; ++i)
    r[i] = i >= rows  ? _mm256_setzero_ps()
           : len == 8 ? _mm256_loadu_ps(row0 + i * stride)
                      : _mm256_maskload_ps(row0 + i * stride, elements);
  transpose_8x8(r);
}

}  // namespace

// A micro-panel stores, for each k, the panel's h rows contiguously (every
// panel but the last has kTileRows rows). Rows of A read down a column
// (a_rs = 1) are copied as they lie, one k at a time across every panel;
// contiguous rows (a_cs = 1) are read 8 k at a time from each row and
// transposed in registers (no gathers: AMD's cores microcode them).
QUIRE_AVX2 void pack_a_f32_avx2(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
  static_assert(kTileRows <= 8, "a micro-panel's column fits one ymm");
  const auto height = [&](int64_t i0) { return std::min<int64_t>(kTileRows, rows - i0); };
  if (a_rs == 1) {
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t i0 = 0; i0 < rows; i0 += kTileRows)
        std::memcpy(dst + i0 * kc + p * height(i0), a + i0 + p * a_cs, sizeof(float) * height(i0));
    return;
  }
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows, dst += kTileRows * kc) {
    const int64_t h = height(i0);
    const float* src = a + i0 * a_rs;
    if (a_cs == 1) {
      const __m256i lanes = column_mask(h, 0);
      for (int64_t p0 = 0; p0 < kc; p0 += 8) {
        const int64_t w = std::min<int64_t>(8, kc - p0);
        __m256 r[8];
        load_transposed(src + p0, a_rs, h, w, r);
        // A column's store may spill its zero lanes into the next columns'
        // slots, which the next stores overwrite, but not past the panel.
        for (int64_t j = 0; j < w; ++j) {
          if ((p0 + j) * h + 8 <= kc * h)
            _mm256_storeu_ps(dst + (p0 + j) * h, r[j]);
          else
            _mm256_maskstore_ps(dst + (p0 + j) * h, lanes, r[j]);
        }
      }
    } else {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t r = 0; r < h; ++r) dst[p * h + r] = src[r * a_rs + p * a_cs];
    }
  }
}

QUIRE_AVX2 void pack_b_f32_avx2(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  if (b_cs == 1) {
    // Rows of B are contiguous: each row of the block is read once, in order.
    for (int64_t p = 0; p < kc; ++p) {
      const float* row = b + p * b_rs;
      for (int64_t t = 0; t < panels; ++t) {
        float* out = dst + t * panel_stride(kc) + p * kTileCols;
        const float* in = row + t * kTileCols;
        const int64_t w = cols - t * kTileCols;
        for (int v = 0; v < kVectors; ++v)
          _mm256_store_ps(out + 8 * v, w >= kTileCols ? _mm256_loadu_ps(in + 8 * v)
                                                      : _mm256_maskload_ps(in + 8 * v, column_mask(w, v)));
      }
    }
    return;
  }
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    float* out = dst + t * panel_stride(kc);
    if (w < kTileCols) std::memset(out, 0, sizeof(float) * kc * kTileCols);
    if (b_rs == 1) {
      // Columns of B are contiguous (B read transposed): 8 k of 8 columns at
      // a time, transposed in registers as A's rows are.
      for (int64_t j0 = 0; j0 < w; j0 += 8) {
        const int64_t hw = std::min<int64_t>(8, w - j0);
        for (int64_t p0 = 0; p0 < kc; p0 += 8) {
          const int64_t pw = std::min<int64_t>(8, kc - p0);
          __m256 r[8];
          load_transposed(b + (t * kTileCols + j0) * b_cs + p0, b_cs, hw, pw, r);
          for (int64_t q = 0; q < pw; ++q) _mm256_storeu_ps(out + (p0 + q) * kTileCols + j0, r[q]);
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

// A bf16 element widened to the f32 it stands for, as bits.
inline uint32_t widened(uint16_t x) { return uint32_t{x} << 16; }

// Eight elements of a row widened, as f32 bits; past `w` of them, zeros.
QUIRE_AVX2 inline __m256i widen8(const uint16_t* row, int64_t w) {
  __m128i x;
  if (w >= 8) {
    x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
  } else {
    alignas(16) uint16_t part[8] = {};
    if (w > 0) std::memcpy(part, row, sizeof(uint16_t) * w);
    x = _mm_load_si128(reinterpret_cast<const __m128i*>(part));
  }
  return _mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16);
}

}  // namespace

// Widened bf16 (gemm.h): virtual k 2q holds element 2q + 1 (or +0 past an odd
// kc), 2q + 1 holds element 2q. Element by element: A is packed once per
// product, a small part of its time.
void pack_a_bf16_as_f32_avx2(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
    const int64_t h = std::min<int64_t>(kTileRows, rows - i0);
    for (int64_t q = 0; q < pairs; ++q)
      for (int64_t r = 0; r < h; ++r) {
        const uint16_t* row = a + (i0 + r) * a_rs;
        const uint32_t odd = 2 * q + 1 < kc ? widened(row[(2 * q + 1) * a_cs]) : 0u;
        const uint32_t even = widened(row[2 * q * a_cs]);
        std::memcpy(dst + 2 * q * h + r, &odd, sizeof(float));
        std::memcpy(dst + (2 * q + 1) * h + r, &even, sizeof(float));
      }
    dst += h * 2 * pairs;
  }
}

QUIRE_AVX2 void pack_b_bf16_as_f32_avx2(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols,
                                        float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  const int64_t pairs = (kc + 1) / 2;
  if (b_cs == 1) {
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* even_row = b + 2 * q * b_rs;
      const uint16_t* odd_row = 2 * q + 1 < kc ? even_row + b_rs : nullptr;
      for (int64_t t = 0; t < panels; ++t) {
        float* out = dst + t * panel_stride(2 * pairs) + 2 * q * kTileCols;  // the odd row, then the even row
        const int64_t j = t * kTileCols, w = cols - j;
        for (int v = 0; v < kVectors; ++v) {
          const __m256i odd = odd_row ? widen8(odd_row + j + 8 * v, w - 8 * v) : _mm256_setzero_si256();
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * v), odd);
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + kTileCols + 8 * v),
                             widen8(even_row + j + 8 * v, w - 8 * v));
        }
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
        const uint32_t bits = widened(col[p * b_rs]);
        std::memcpy(out + (p % 2 == 0 ? p + 1 : p - 1) * kTileCols + j, &bits, sizeof(float));
      }
    }
  }
}

}  // namespace quire::native::gemm_detail
