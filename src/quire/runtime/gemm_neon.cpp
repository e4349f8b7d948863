// The aarch64 NEON parts of gemm.h: packing and the register micro-kernel of
// the Neon and NeonFmaBf16 paths. Built on aarch64 only (src/CMakeLists.txt),
// where Advanced SIMD is part of every processor, so no target attribute or
// run-time check is needed.
//
// The micro-kernel keeps the contract's chain, as the x86 ones do: each C
// element's accumulator starts from C (or +0) and takes one fused
// multiply-add per k (FMLA, one rounding), in increasing k. Only the tile
// differs: 32 q registers hold an 8 × 12 tile of C (24 accumulators), the
// three vectors of a B row, and A's elements, which FMLA's by-element form
// multiplies without a broadcast.
//
// NEON has no masked loads: the micro-kernel always computes a whole tile's
// width. Packed B panels are zero-padded past C's last column; a tile at C's
// right edge computes into a 8 × 12 copy of its C, written back up to the
// last column; a B read in place has its edge panel packed first, so that
// no load passes the end of B's rows.
//
// bf16 widened to f32 (NeonFmaBf16). VDPBF16PS's step (gemm.h,
// bf16_dot_step) is an FMA with denormal inputs read as zeros and tiny
// results flushed to zero, tininess detected after rounding. FPCR.FZ reads
// denormal inputs as zeros of their sign too, and flushes; but AArch64
// detects tininess before rounding, so a result just below 2^-126 that
// rounds up to it is flushed here and kept by the step; and its NaNs
// propagate in another order, with another default NaN (0x7FC00000, where
// x86's is 0xFFC00000). Every other result is the step's bit for bit (one
// rounding to nearest even of the same exact value). A flush sets FPSR's
// cumulative underflow flag (UFC), and a NaN anywhere in a chain leaves a
// NaN at its end; so a micro-tile that ends with neither is exact, and one
// with either is computed again from its saved start by bf16_dot_step, in
// the caller's floating-point environment (which std::fma needs: the
// default one, as the contract says). Such tiles are rare outside tests:
// operands and sums near 2^-126, infinities, NaNs.

#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "quire/runtime/gemm.h"

namespace quire::native::gemm_detail {
namespace {

constexpr int kTileRows = kNeonTileRows;
constexpr int kTileCols = kNeonTileCols;
constexpr int kVectors = kTileCols / 4;  // q registers per tile row
constexpr int64_t panel_stride(int64_t kc_units) { return b_panel_stride(kc_units, kTileCols); }

static_assert(kTileCols % 4 == 0, "a tile row is whole q registers");
static_assert(kTileRows * kVectors + kVectors + kTileRows / 4 <= 32,
              "accumulators, a B row and A's elements fit the 32 q registers");

// ---------------------------------------------------------------------------
// The micro-kernel

// C tile (kRows × kTileCols, rows c_rs apart) continues its chains over kc:
// acc = fma(A[r,p], B[p,j], acc). a: A[r, p] at a[r·a_rs + p·a_cs]: packed
// (kc × kRows, p-major: a_rs 1, a_cs kRows, both then fixed at compile time)
// or A's own elements; b: kc rows of kTileCols, b_stride apart (a packed
// panel, or B's own rows).
template <int kRows, bool kPackedA>
void sgemm_tile(int64_t kc, const float* __restrict a, int64_t a_rs, int64_t a_cs, const float* __restrict b,
                int64_t b_stride, float* c, int64_t c_rs, bool load_c) {
  if constexpr (kPackedA) {
    a_rs = 1;
    a_cs = kRows;
  }
  float32x4_t acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) acc[r][v] = load_c ? vld1q_f32(c + r * c_rs + 4 * v) : vdupq_n_f32(0.0f);
  for (int64_t p = 0; p < kc; ++p) {
    float32x4_t bv[kVectors];
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) bv[v] = vld1q_f32(b + 4 * v);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const float a_rp = a[r * a_rs];
#pragma GCC unroll 3
      for (int v = 0; v < kVectors; ++v) acc[r][v] = vfmaq_n_f32(acc[r][v], bv[v], a_rp);  // acc + b·a, one rounding
    }
    a += a_cs;
    b += b_stride;
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) vst1q_f32(c + r * c_rs + 4 * v, acc[r][v]);
}

using SgemmTile = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool);
template <bool kPackedA, int... R>
constexpr std::array<SgemmTile, sizeof...(R)> sgemm_tiles(std::integer_sequence<int, R...>) {
  return {&sgemm_tile<R + 1, kPackedA>...};
}
// kTiles[on A][h − 1] handles a micro-panel of h rows, reading A packed (0)
// or where it lies (1).
using Heights = std::make_integer_sequence<int, kTileRows>;
constexpr std::array<std::array<SgemmTile, kTileRows>, 2> kTiles = {
    {sgemm_tiles<true>(Heights{}), sgemm_tiles<false>(Heights{})}};

// One micro-tile of `rows` × `cols` (≤ the tile) of C: directly where the
// tile is whole, else through a full-width copy of its C.
struct MicroTile {
  int64_t kc;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_stride;
  float* c;
  int64_t c_rs;
  int64_t rows, cols;
  bool load_c;
};

void run_micro_tile(const MicroTile& t, bool a_in_place) {
  const SgemmTile tile = kTiles[a_in_place ? 1 : 0][t.rows - 1];
  if (t.cols == kTileCols) return tile(t.kc, t.a, t.a_rs, t.a_cs, t.b, t.b_stride, t.c, t.c_rs, t.load_c);
  alignas(16) float c_copy[kTileRows * kTileCols] = {};
  if (t.load_c)
    for (int64_t r = 0; r < t.rows; ++r)
      std::memcpy(c_copy + r * kTileCols, t.c + r * t.c_rs, sizeof(float) * static_cast<size_t>(t.cols));
  tile(t.kc, t.a, t.a_rs, t.a_cs, t.b, t.b_stride, c_copy, kTileCols, t.load_c);
  for (int64_t r = 0; r < t.rows; ++r)
    std::memcpy(t.c + r * t.c_rs, c_copy + r * kTileCols, sizeof(float) * static_cast<size_t>(t.cols));
}

// ---------------------------------------------------------------------------
// The floating-point environment of the widened-bf16 tiles

uint64_t read_fpcr() {
  uint64_t value;
  __asm__ volatile("mrs %0, fpcr" : "=r"(value) : : "memory");
  return value;
}
void write_fpcr(uint64_t value) { __asm__ volatile("msr fpcr, %0" : : "r"(value) : "memory"); }
uint64_t read_fpsr() {
  uint64_t value;
  __asm__ volatile("mrs %0, fpsr" : "=r"(value) : : "memory");
  return value;
}
void write_fpsr(uint64_t value) { __asm__ volatile("msr fpsr, %0" : : "r"(value) : "memory"); }

// FPCR's flush-to-zero under round to nearest even, for the block's tiles,
// and the caller's FPCR and FPSR back on return (the "memory" clobbers keep
// the tiles' loads and stores, and so their arithmetic, between the writes).
class FlushToZeroScope {
 public:
  FlushToZeroScope() : fpcr_(read_fpcr()), fpsr_(read_fpsr()) { write_fpcr(flushing()); }
  ~FlushToZeroScope() {
    write_fpcr(fpcr_);
    write_fpsr(fpsr_);
  }
  FlushToZeroScope(const FlushToZeroScope&) = delete;
  FlushToZeroScope& operator=(const FlushToZeroScope&) = delete;

  void clear_underflow() { write_fpsr(read_fpsr() & ~kUnderflowFlag); }
  bool underflowed() const { return (read_fpsr() & kUnderflowFlag) != 0; }
  /// Runs `f` under the caller's FPCR, then flushes again.
  template <typename F>
  void in_callers_environment(F&& f) {
    write_fpcr(fpcr_);
    f();
    write_fpcr(flushing());
  }

 private:
  static constexpr uint64_t kFlushToZero = uint64_t{1} << 24;   // FPCR.FZ
  static constexpr uint64_t kRoundingMode = uint64_t{3} << 22;  // FPCR.RMode; 00: to nearest even
  // FPCR.FIZ, AH, NEP (FEAT_AFP; reserved as zero without it): zero keeps
  // FZ's meaning above, flushing inputs and results alike.
  static constexpr uint64_t kAlternateHandling = uint64_t{7};
  static constexpr uint64_t kUnderflowFlag = uint64_t{1} << 3;  // FPSR.UFC

  uint64_t flushing() const { return (fpcr_ & ~(kRoundingMode | kAlternateHandling)) | kFlushToZero; }

  uint64_t fpcr_, fpsr_;
};

// The upper half of a widened bf16: the bf16 itself.
uint16_t narrowed(float widened) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(widened) >> 16); }

// A micro-tile of the widened-bf16 block (A packed: bf16 is never read in
// place) under `scope`, exact as the file's comment says.
void run_bf16_micro_tile(const MicroTile& t, FlushToZeroScope& scope) {
  alignas(16) float start[kTileRows * kTileCols] = {};  // C before the tile: +0 unless load_c
  if (t.load_c)
    for (int64_t r = 0; r < t.rows; ++r)
      std::memcpy(start + r * kTileCols, t.c + r * t.c_rs, sizeof(float) * static_cast<size_t>(t.cols));
  scope.clear_underflow();
  run_micro_tile(t, false);
  bool exact = !scope.underflowed();
  for (int64_t r = 0; r < t.rows && exact; ++r)
    for (int64_t j = 0; j < t.cols; ++j) exact = exact && !std::isnan(t.c[r * t.c_rs + j]);
  if (exact) return;
  scope.in_callers_environment([&] {
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t j = 0; j < t.cols; ++j) {
        float acc = start[r * kTileCols + j];
        // The packed order is the contract's: virtual k 2q holds the odd
        // element (or +0), 2q + 1 the even one.
        for (int64_t p = 0; p < t.kc; ++p)
          acc = bf16_dot_step(acc, narrowed(t.a[p * t.rows + r]), narrowed(t.b[p * t.b_stride + j]));
        t.c[r * t.c_rs + j] = acc;
      }
  });
}

// B's edge panel (fewer than kTileCols columns) when B is read in place,
// packed per thread.
thread_local std::vector<float> tls_edge_panel;

// The block loops: B panels outside (each streamed from L2 while the block's
// A micro-panels pass it), A micro-panels inside. `scope`: the widened-bf16
// block's environment, or null for sgemm's.
void block_loops(const PackedBlock<float>& block, FlushToZeroScope* scope) {
  for (int64_t j = 0; j < block.cols; j += kTileCols) {
    const int64_t cols = std::min<int64_t>(kTileCols, block.cols - j);
    // A packed panel, or B's own rows from column j (its edge packed here).
    const float* b_panel = nullptr;
    int64_t b_stride = kTileCols;
    if (!block.b_in_place) {
      b_panel = block.b + (j / kTileCols) * panel_stride(block.kc);
    } else if (cols == kTileCols) {
      b_panel = block.b + j;
      b_stride = block.b_rs;
    } else {
      tls_edge_panel.resize(static_cast<size_t>(block.kc * kTileCols));
      pack_b_f32_neon(block.b + j, block.b_rs, 1, block.kc, cols, tls_edge_panel.data());
      b_panel = tls_edge_panel.data();
    }
    for (int64_t i = 0; i < block.rows; i += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, block.rows - i);
      // (Packed A's tiles ignore the strides.)
      const float* a = block.a_in_place ? block.a + i * block.a_rs : block.a + i * block.kc;
      // The next micro-tile's C, fetched while this one runs (kc FMA steps).
      if (block.load_c) {
        const int64_t next_i = i + kTileRows < block.rows ? i + kTileRows : 0;
        const int64_t next_j = i + kTileRows < block.rows ? j : j + kTileCols;
        if (next_j < block.cols)
          for (int64_t r = 0; r < std::min<int64_t>(kTileRows, block.rows - next_i); ++r)
            __builtin_prefetch(block.c + (next_i + r) * block.c_rs + next_j);
      }
      const MicroTile tile{.kc = block.kc,
                           .a = a,
                           .a_rs = block.a_rs,
                           .a_cs = block.a_cs,
                           .b = b_panel,
                           .b_stride = b_stride,
                           .c = block.c + i * block.c_rs + j,
                           .c_rs = block.c_rs,
                           .rows = rows,
                           .cols = cols,
                           .load_c = block.load_c};
      if (scope != nullptr)
        run_bf16_micro_tile(tile, *scope);
      else
        run_micro_tile(tile, block.a_in_place);
    }
  }
}

}  // namespace

void sgemm_block_neon(const PackedBlock<float>& block) { block_loops(block, nullptr); }

void bf16gemm_fma_block_neon(const PackedBlock<float>& block) {
  FlushToZeroScope scope;
  block_loops(block, &scope);
}

// ---------------------------------------------------------------------------
// Packing. Element by element but for B's contiguous rows (packed once per
// tile and k block), which are copied or widened four at a time; no aarch64
// machine has yet measured what transposing A in registers would gain.

// A micro-panel stores, for each k, the panel's h rows contiguously (every
// panel but the last has kTileRows rows). Rows of A read down a column
// (a_rs = 1) are copied as they lie.
void pack_a_f32_neon(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows, dst += kTileRows * kc) {
    const int64_t h = std::min<int64_t>(kTileRows, rows - i0);
    const float* src = a + i0 * a_rs;
    for (int64_t p = 0; p < kc; ++p) {
      if (a_rs == 1)
        std::memcpy(dst + p * h, src + p * a_cs, sizeof(float) * static_cast<size_t>(h));
      else
        for (int64_t r = 0; r < h; ++r) dst[p * h + r] = src[r * a_rs + p * a_cs];
    }
  }
}

void pack_b_f32_neon(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    float* out = dst + t * panel_stride(kc);
    const float* in = b + t * kTileCols * b_cs;
    for (int64_t p = 0; p < kc; ++p, out += kTileCols) {
      if (b_cs == 1 && w == kTileCols) {
        std::memcpy(out, in + p * b_rs, sizeof(float) * kTileCols);
        continue;
      }
      int64_t j = 0;
      for (; j < w; ++j) out[j] = in[p * b_rs + j * b_cs];
      for (; j < kTileCols; ++j) out[j] = 0.0f;
    }
  }
}

namespace {

// A bf16 element widened to the f32 it stands for.
float widened(uint16_t x) { return std::bit_cast<float>(uint32_t{x} << 16); }

}  // namespace

// Widened bf16 (gemm.h): virtual k 2q holds element 2q + 1 (or +0 past an odd
// kc), 2q + 1 holds element 2q.
void pack_a_bf16_as_f32_neon(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
    const int64_t h = std::min<int64_t>(kTileRows, rows - i0);
    for (int64_t q = 0; q < pairs; ++q)
      for (int64_t r = 0; r < h; ++r) {
        const uint16_t* row = a + (i0 + r) * a_rs;
        dst[2 * q * h + r] = 2 * q + 1 < kc ? widened(row[(2 * q + 1) * a_cs]) : 0.0f;
        dst[(2 * q + 1) * h + r] = widened(row[2 * q * a_cs]);
      }
    dst += h * 2 * pairs;
  }
}

void pack_b_bf16_as_f32_neon(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst) {
  const int64_t panels = (cols + kTileCols - 1) / kTileCols;
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t t = 0; t < panels; ++t) {
    const int64_t w = std::min<int64_t>(kTileCols, cols - t * kTileCols);
    float* out = dst + t * panel_stride(2 * pairs);
    const uint16_t* in = b + t * kTileCols * b_cs;
    for (int64_t v = 0; v < 2 * pairs; ++v, out += kTileCols) {
      // Virtual row v holds element v + 1 if v is even, v − 1 if odd.
      const int64_t p = v % 2 == 0 ? v + 1 : v - 1;
      if (p >= kc) {
        std::fill(out, out + kTileCols, 0.0f);
        continue;
      }
      const uint16_t* row = in + p * b_rs;
      if (b_cs == 1 && w == kTileCols) {
        // SHLL: each 16-bit element to the top of a 32-bit lane.
        for (int q = 0; q < kTileCols; q += 4)
          vst1q_f32(out + q, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(row + q), 16)));
        continue;
      }
      int64_t j = 0;
      for (; j < w; ++j) out[j] = widened(row[j * b_cs]);
      for (; j < kTileCols; ++j) out[j] = 0.0f;
    }
  }
}

}  // namespace quire::native::gemm_detail
