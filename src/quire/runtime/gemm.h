#pragma once
// Matrix products of the native CPU backend: C (m×n) = A (m×k) · B (k×n).
//
// Each product's summation order is part of its contract, so that the native
// code gives exactly the bits a kernel interpreter defines, whatever the
// blocking, the instruction set and the thread count:
//
//   sgemm (f32): every C[i,j] is the chain
//       acc = +0.0  (or C[i,j] when accumulating)
//       for p = 0 .. k−1, increasing:  acc = fmaf(A[i,p], B[p,j], acc)
//   with IEEE binary32 arithmetic (one rounding per fmaf, to nearest even,
//   subnormals kept: the default floating-point environment).
//
//   bf16gemm (bf16 operands, f32 result): every C[i,j] is the chain
//       acc = +0.0  (or C[i,j] when accumulating)
//       for q = 0 .. ⌈k/2⌉−1, increasing:
//         acc = bf16_dot_step(acc, A[i,2q+1], B[2q+1,j])   (the odd element first)
//         acc = bf16_dot_step(acc, A[i,2q],   B[2q,j])
//   where an odd k reads A[i,k] = B[k,j] = +0 (bits 0x0000), and
//   bf16_dot_step is one step of the AVX512-BF16 instruction VDPBF16PS
//   (defined below, verified against the instruction bit for bit).
//
// Blocking splits k into blocks whose partial sums are kept in f32 in C and
// continued by the next block in the same order, so it changes no bit; threads
// split the independent rows and columns of C, never k.
//
// NaN: a NaN input gives a NaN result. For sgemm which NaN (sign, payload) is
// not promised: fmaf's NaN propagation depends on the instruction's operand
// order. For bf16gemm it is exact (bf16_dot_step's rule).
//
// Operands: A[i,p] = a[i*a_rs + p*a_cs], B[p,j] = b[p*b_rs + j*b_cs] (any
// strides, in elements: transposed and broadcast operands are fine), and
// C[i,j] = c[i*c_rs + j] (rows contiguous). C must not overlap A or B.

#include <cstdint>

#include "quire/runtime/isa.h"

namespace quire::native {

/// The implementations of the products. All of a product's paths give the
/// same bits (NaN payloads of sgemm aside, see above).
enum class GemmPath : uint8_t {
  Portable,       ///< plain C++ (std::fma; the bf16 step emulated): any CPU
  Avx2,           ///< sgemm: AVX2+FMA register micro-kernel (6 × 16 tile) on the blocked driver
  Avx2FmaBf16,    ///< bf16gemm: as Avx512FmaBf16, on Avx2's micro-kernel
  Avx512,         ///< sgemm: AVX-512F register micro-kernel (14 × 32 tile) with packing and blocking
  Avx512Bf16,     ///< bf16gemm: the same structure on VDPBF16PS (AVX512-BF16)
  Avx512FmaBf16,  ///< bf16gemm: operands widened to f32 when packed, the f32
                  ///< micro-kernel under MXCSR flush-to-zero and
                  ///< denormals-are-zero, which reproduces VDPBF16PS's bits
  Neon,           ///< sgemm: aarch64 NEON register micro-kernel (8 × 12 tile) on the blocked driver
  NeonFmaBf16,    ///< bf16gemm: operands widened when packed, NEON's f32 micro-kernel
                  ///< under FPCR flush-to-zero, a tile whose flags show a flushed
                  ///< result or whose result holds a NaN redone by the emulated step
};

/// "portable", "avx2", "avx2-fma-bf16", "avx512", "avx512-bf16", "avx512-fma-bf16",
/// "neon", "neon-fma-bf16".
const char* gemm_path_name(GemmPath path);

/// Whether this CPU can run `path`, checked at run time (runtime/isa.h's
/// cpu_isa(), and AVX512-BF16 for Avx512Bf16): the binary itself is built for
/// any x86-64 (the x86 paths), any aarch64 (the NEON paths) or any other
/// target, where only Portable exists. QUIRE_ISA does not narrow it: it caps
/// the paths chosen, not those a caller names.
bool gemm_path_available(GemmPath path);

/// The path sgemm chooses under the instruction set `isa` (on a CPU that
/// has it): Avx512, Avx2, Neon or Portable.
GemmPath sgemm_path_for(runtime::Isa isa);
/// The path sgemm chooses here: sgemm_path_for(runtime::widest_isa()), so
/// that QUIRE_ISA caps it.
GemmPath sgemm_path();
/// The path bf16gemm chooses under `isa`: with AVX-512, Avx512Bf16 where
/// AVX512-BF16 exists unless VDPBF16PS is clearly slower than FMA, judged
/// once per process by timing ~0.1 ms of each instruction (on the Emerald
/// Rapids Xeon quire is developed on it runs at half FMA's FLOP rate, so
/// Avx512FmaBf16 wins), else Avx512FmaBf16; with AVX2, Avx2FmaBf16; with
/// NEON, NeonFmaBf16; else Portable. The choice cannot change a bit: the paths agree exactly, NaN
/// payloads included.
GemmPath bf16gemm_path_for(runtime::Isa isa);
/// bf16gemm_path_for(runtime::widest_isa()), chosen once per process.
GemmPath bf16gemm_path();

/// The columns of C a path computes at once (its register tile's width:
/// 32 on Avx512, 16 on Avx2, 12 on Neon, 1 on Portable): a product narrower than that
/// costs the whole width, its panels being zero-padded. For sgemm's paths.
int64_t sgemm_tile_columns(GemmPath path);

/// C = A·B (or C += A·B, continuing each C element's chain, when
/// `accumulate`), f32, with the contract above, on `threads` ≥ 1 threads of
/// WorkerPool::shared() (the caller included). The result does not depend on
/// `threads`.
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
           int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads);

/// How the blocked driver (Avx2, Avx512) reads its operands: an operand that fits in
/// half of a core's L2 where it lies (A at any strides, B when its columns
/// are adjacent), else packed; or always packed. The same bits either way.
enum class OperandReads { InPlaceWhereSmall, Packed };

/// sgemm on a chosen path (Portable, Avx2, Avx512 or Neon; it must be available): what the
/// tests use to compare every path, and both ways of reading the operands,
/// with the reference.
void sgemm_on(GemmPath path, int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads,
              OperandReads reads = OperandReads::InPlaceWhereSmall);

/// C = A·B (or C += A·B when `accumulate`) with bf16 operands given as their
/// bit patterns and an f32 result, with the contract above.
void bf16gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
              int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads);

/// bf16gemm on a chosen path (Portable, Avx2FmaBf16, Avx512Bf16,
/// Avx512FmaBf16 or NeonFmaBf16; it must be available).
void bf16gemm_on(GemmPath path, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                 const uint16_t* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads);

/// The definition of sgemm: the chain above, one element at a time, one
/// thread. Slow and obviously correct; every path is tested against it.
void sgemm_reference(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate);

/// The definition of bf16gemm, likewise.
void bf16gemm_reference(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                        const uint16_t* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate);

/// One step of VDPBF16PS, acc + a·b, as the instruction computes it (Intel
/// SDM: "FP32 FMA with DAZ in, FTZ out and RNE rounding; MXCSR neither
/// consulted nor updated"), checked against the instruction on random and
/// special inputs (gemm_test.cpp, GemmBf16Step):
///   - DAZ: a subnormal input (a, b as bf16, or acc) counts as a zero of its sign;
///   - the product a·b is exact and is added with one rounding to nearest
///     even, as an fmaf with an unbounded exponent (so a product beyond f32's
///     range still cancels against acc);
///   - FTZ: a result whose magnitude, rounded with an unbounded exponent, is
///     below 2^-126 (tininess after rounding) becomes a zero of the exact
///     result's sign;
///   - NaN: the first NaN of a, b, acc (in that order), made quiet, payload
///     kept; an invalid operation (∞·0, ∞−∞) gives 0xFFC00000.
float bf16_dot_step(float acc, uint16_t a, uint16_t b);

/// Rounds an f32 to bf16 (to nearest even; NaN → quiet NaN of the same sign).
/// For tests and benchmarks that make bf16 operands.
uint16_t bf16_from_float(float x);
/// The f32 holding a bf16 exactly.
float bf16_to_float(uint16_t bits);

// ---------------------------------------------------------------------------
// Internal: the interface between gemm.cpp (dispatch, blocking, threading) and
// gemm_avx512.cpp / gemm_avx2.cpp / gemm_neon.cpp (packing and micro-kernels
// compiled for AVX-512 / AVX2+FMA on x86-64, NEON on aarch64; each file is
// built on its architecture only). Not for other callers.
namespace gemm_detail {

/// The register tiles: kTileRows × kTileCols of C held in accumulators.
/// AVX-512: 14 × 32 in 28 zmm (32 registers in all: 28 accumulators, 2 rows
/// of B, and one broadcast of A); kAvx512TileCols is two zmm of f32 lanes.
inline constexpr int kAvx512TileRows = 14;
inline constexpr int kAvx512TileCols = 32;
/// AVX2: 6 × 16 in 12 ymm (16 registers in all: 12 accumulators, 2 rows of
/// B, one broadcast of A). 4 × 24 (12 accumulators, 3 rows of B) measured
/// 2–9 % slower on the AMD EPYC (Zen 4) of docs/performance.md.
inline constexpr int kAvx2TileRows = 6;
inline constexpr int kAvx2TileCols = 16;
/// NEON: 8 × 12 in 24 q registers of 4 f32 (32 registers in all: 24
/// accumulators, 3 of a B row, A's 8 elements in the rest), the tile most
/// aarch64 BLAS kernels use.
inline constexpr int kNeonTileRows = 8;
inline constexpr int kNeonTileCols = 12;

/// Packed layouts (all buffers 64-byte aligned), for a path whose tile is
/// kTileRows × kTileCols:
///  - an A micro-panel of `rows` ≤ kTileRows rows and kc columns is stored
///    p-major: panel[p*rows + r] = A[i0+r, p0+p] (f32), or for bf16 one 32-bit
///    pair per (q, r): panel[q*rows + r] = A[i0+r, p0+2q] | A[i0+r, p0+2q+1] << 16;
///  - a B panel of kTileCols columns is stored p-major, zero padded past the
///    last column: panel[p*kTileCols + j] = B[p0+p, j0+j] (f32), or per pair
///    panel[q*kTileCols + j] = B[p0+2q, j] | B[p0+2q+1, j] << 16 (bf16).
///    Consecutive panels of a block are b_panel_stride(kc units, kTileCols)
///    words apart.

/// The distance between consecutive B panels, in packed words: the panel and
/// one cache line more, so that packing, which writes row p of every panel in
/// turn, does not send them all to one L1 set (kc × 32 or kc × 16 words is a
/// multiple of 4 KiB whenever kc is a multiple of 32 or 64).
inline constexpr int64_t b_panel_stride(int64_t kc_units, int64_t tile_cols) { return kc_units * tile_cols + 16; }

/// Packs a block of A, rows × kc, into micro-panels of kTileRows rows (the
/// last one shorter): micro-panel t at dst + t*kTileRows*kc (bf16: in pairs,
/// dst + t*kTileRows*⌈kc/2⌉ 32-bit words; an odd kc pads with zero). The
/// _avx512 functions use AVX-512's tile, the _avx2 ones AVX2's.
void pack_a_f32_avx512(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_a_bf16_avx512(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, uint32_t* dst);

/// Packs a block of B, kc × cols, into ⌈cols/kTileCols⌉ panels (buffer:
/// panels × b_panel_stride words).
void pack_b_f32_avx512(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);
void pack_b_bf16_avx512(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, uint32_t* dst);

/// For Avx512FmaBf16: bf16 widened to f32 in the f32 layouts, each pair's two
/// elements swapped (virtual k index 2q holds element 2q+1, or +0 past an odd
/// kc; 2q+1 holds element 2q), so that the f32 chain runs in the bf16
/// contract's order. A block of kc elements becomes 2⌈kc/2⌉ virtual ones.
void pack_a_bf16_as_f32_avx512(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_b_bf16_as_f32_avx512(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);

/// One block product on packed operands: C (rows × cols) continues its chains
/// over kc more k units, starting from +0 unless load_c.
template <typename Packed>
struct PackedBlock {
  int64_t kc;          ///< k extent in packed units (f32 elements, bf16 pairs, or widened bf16 elements)
  int64_t rows, cols;  ///< C extent
  const Packed* a;     ///< rows × kc in micro-panels
  const Packed* b;     ///< kc × cols in panels, or B itself (b_rs)
  float* c;
  int64_t c_rs;
  bool load_c;
  /// Whether b is B's own elements (f32 only), row p of the block at
  /// b + p·b_rs and its columns adjacent: a B that lies so needs no packing,
  /// its panel rows being read as the packed ones would be.
  bool b_in_place = false;
  int64_t b_rs = 0;
  /// Whether a is A's own elements (f32 only), A[i, p] of the block at
  /// a + i·a_rs + p·a_cs.
  bool a_in_place = false;
  int64_t a_rs = 0, a_cs = 0;
};
void sgemm_block_avx512(const PackedBlock<float>& block);
void bf16gemm_block_avx512(const PackedBlock<uint32_t>& block);
/// The f32 block under VDPBF16PS's floating-point environment (MXCSR FTZ,
/// DAZ, round to nearest even), restored on return.
void bf16gemm_fma_block_avx512(const PackedBlock<float>& block);

/// The AVX2+FMA counterparts of the f32 and widened-bf16 functions above, on
/// AVX2's tile (kAvx2TileRows × kAvx2TileCols); there is no AVX2 form of the
/// bf16 pairs (VDPBF16PS is AVX-512's).
void pack_a_f32_avx2(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_b_f32_avx2(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);
void pack_a_bf16_as_f32_avx2(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_b_bf16_as_f32_avx2(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);
void sgemm_block_avx2(const PackedBlock<float>& block);
void bf16gemm_fma_block_avx2(const PackedBlock<float>& block);

/// The NEON counterparts (aarch64), on NEON's tile (kNeonTileRows ×
/// kNeonTileCols). sgemm_block_neon reads A in place where asked; B in place
/// too, its edge panel (fewer than kNeonTileCols columns) being packed first.
void pack_a_f32_neon(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_b_f32_neon(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);
void pack_a_bf16_as_f32_neon(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst);
void pack_b_bf16_as_f32_neon(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst);
void sgemm_block_neon(const PackedBlock<float>& block);
/// The widened-bf16 block: each micro-tile runs NEON's f32 micro-kernel
/// under FPCR flush-to-zero (inputs and results) and round to nearest even,
/// which gives bf16_dot_step's bits wherever no result was flushed and no
/// NaN arose; a micro-tile where one was (FPSR's underflow flag, a NaN in its
/// result) is computed again from its start by bf16_dot_step. FPCR and FPSR
/// are restored on return.
void bf16gemm_fma_block_neon(const PackedBlock<float>& block);

/// VDPBF16PS's FLOP rate over VFMADD231PS's on this core, measured (~0.1 ms).
/// Requires AVX512-BF16.
double vdpbf16ps_relative_speed();

}  // namespace gemm_detail
}  // namespace quire::native
