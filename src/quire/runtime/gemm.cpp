// The products of gemm.h: their definitions (the references), the bf16 step,
// the portable paths, and the blocked driver of the AVX2, AVX-512 and NEON
// paths (blocking, packing buffers, threading), parametrized on each
// instruction set's register tile; the packing and micro-kernels themselves
// are in gemm_avx2.cpp and gemm_avx512.cpp (built on x86-64 only) and
// gemm_neon.cpp (aarch64 only), so each architecture's kernels are named here
// under its preprocessor test.
//
// No expression here may be contracted into a fused multiply-add behind the
// contract's back: every fused operation is an explicit std::fma, and there is
// no `x * y + z` on floats in this file.

#include "quire/runtime/gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "quire/runtime/workers.h"

namespace quire::native {

using runtime::Isa;

// ---------------------------------------------------------------------------
// Paths

const char* gemm_path_name(GemmPath path) {
  switch (path) {
    case GemmPath::Portable: return "portable";
    case GemmPath::Avx2: return "avx2";
    case GemmPath::Avx2FmaBf16: return "avx2-fma-bf16";
    case GemmPath::Avx512: return "avx512";
    case GemmPath::Avx512Bf16: return "avx512-bf16";
    case GemmPath::Avx512FmaBf16: return "avx512-fma-bf16";
    case GemmPath::Neon: return "neon";
    case GemmPath::NeonFmaBf16: return "neon-fma-bf16";
  }
  return "?";
}

bool gemm_path_available(GemmPath path) {
  const Isa cpu = runtime::cpu_isa();
  switch (path) {
    case GemmPath::Portable: return true;
    case GemmPath::Avx2:
    case GemmPath::Avx2FmaBf16: return cpu >= Isa::Avx2;
    case GemmPath::Avx512:
    case GemmPath::Avx512FmaBf16: return cpu >= Isa::Avx512;
    case GemmPath::Avx512Bf16:
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
      return cpu >= Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
#else
      return false;
#endif
    // cpu_isa() is Neon on aarch64 alone, where gemm_neon.cpp is built.
    case GemmPath::Neon:
    case GemmPath::NeonFmaBf16: return cpu == Isa::Neon;
  }
  return false;
}

GemmPath sgemm_path_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return GemmPath::Avx512;
    case Isa::Avx2: return GemmPath::Avx2;
    case Isa::Neon: return GemmPath::Neon;
    case Isa::Baseline: return GemmPath::Portable;
  }
  return GemmPath::Portable;
}

GemmPath sgemm_path() {
  static const GemmPath path = sgemm_path_for(runtime::widest_isa());
  return path;
}

int64_t sgemm_tile_columns(GemmPath path) {
  switch (path) {
    case GemmPath::Portable: return 1;
    case GemmPath::Avx2:
    case GemmPath::Avx2FmaBf16: return gemm_detail::kAvx2TileCols;
    case GemmPath::Avx512:
    case GemmPath::Avx512Bf16:
    case GemmPath::Avx512FmaBf16: return gemm_detail::kAvx512TileCols;
    case GemmPath::Neon:
    case GemmPath::NeonFmaBf16: return gemm_detail::kNeonTileCols;
  }
  return 1;
}

GemmPath bf16gemm_path_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: {
      // VDPBF16PS reads half the bytes of the widened operands, so it is
      // chosen unless clearly slower (as on Emerald Rapids, where it
      // measures 0.5).
#if defined(__x86_64__)
      constexpr double kEnoughRelativeSpeed = 0.9;
      if (gemm_path_available(GemmPath::Avx512Bf16) &&
          gemm_detail::vdpbf16ps_relative_speed() >= kEnoughRelativeSpeed)
        return GemmPath::Avx512Bf16;
#endif
      return GemmPath::Avx512FmaBf16;
    }
    case Isa::Avx2: return GemmPath::Avx2FmaBf16;
    case Isa::Neon: return GemmPath::NeonFmaBf16;
    case Isa::Baseline: return GemmPath::Portable;
  }
  return GemmPath::Portable;
}

GemmPath bf16gemm_path() {
  static const GemmPath path = bf16gemm_path_for(runtime::widest_isa());
  return path;
}

// ---------------------------------------------------------------------------
// bf16 and its dot-product step

namespace {

float float_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// DAZ: a subnormal counts as a zero of its sign.
float denormals_as_zero(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

float quieted(float nan) { return float_from_bits(bits_of(nan) | 0x00400000u); }

// x86's "real indefinite", the NaN an invalid operation produces.
constexpr uint32_t kDefaultNanBits = 0xFFC00000u;

}  // namespace

float bf16_to_float(uint16_t bits) { return float_from_bits(static_cast<uint32_t>(bits) << 16); }

uint16_t bf16_from_float(float x) {
  const uint32_t bits = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t round_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round_bias) >> 16);
}

float bf16_dot_step(float acc, uint16_t a_bits, uint16_t b_bits) {
  const float a = denormals_as_zero(bf16_to_float(a_bits));
  const float b = denormals_as_zero(bf16_to_float(b_bits));
  acc = denormals_as_zero(acc);
  if (std::isnan(a)) return quieted(a);
  if (std::isnan(b)) return quieted(b);
  if (std::isnan(acc)) return quieted(acc);
  // The exact a·b + acc rounded once; std::fma rounds with gradual underflow,
  // which agrees with rounding under an unbounded exponent wherever the
  // result is at least 2^-126 in magnitude.
  const float sum = std::fma(a, b, acc);
  if (std::isnan(sum)) return float_from_bits(kDefaultNanBits);
  const float magnitude = std::fabs(sum);
  if (magnitude > 0x1p-126f) return sum;
  if (magnitude < 0x1p-126f) return std::copysign(0.0f, sum);  // FTZ; fma keeps the exact result's sign
  // |sum| = 2^-126 also when the exact result lies in [2^-126 − 2^-150,
  // 2^-126): the subnormal grid rounds it up, but under an unbounded exponent
  // it rounds to below 2^-126 (tiny, so flushed) unless it is at least
  // 2^-126 − 2^-151. Recompute scaled by 2^64, where nothing underflows. The
  // scaling is exact: an exact result this small forces |acc| and the smaller
  // factor far below 2^63 (a larger one would leave a·b + acc, if nonzero, a
  // multiple of a much larger power of two).
  const bool scale_a = std::fabs(a) <= std::fabs(b);
  const float scaled = std::fma(scale_a ? a * 0x1p64f : a, scale_a ? b : b * 0x1p64f, acc * 0x1p64f);
  return std::fabs(scaled) < 0x1p-62f ? std::copysign(0.0f, sum) : sum;
}

// ---------------------------------------------------------------------------
// The references

void sgemm_reference(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = accumulate ? c[i * c_rs + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a[i * a_rs + p * a_cs], b[p * b_rs + j * b_cs], acc);
      c[i * c_rs + j] = acc;
    }
}

void bf16gemm_reference(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                        const uint16_t* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = accumulate ? c[i * c_rs + j] : 0.0f;
      for (int64_t q = 0; 2 * q < k; ++q) {
        const int64_t even = 2 * q, odd = 2 * q + 1;
        const uint16_t a_odd = odd < k ? a[i * a_rs + odd * a_cs] : 0;
        const uint16_t b_odd = odd < k ? b[odd * b_rs + j * b_cs] : 0;
        acc = bf16_dot_step(acc, a_odd, b_odd);
        acc = bf16_dot_step(acc, a[i * a_rs + even * a_cs], b[even * b_rs + j * b_cs]);
      }
      c[i * c_rs + j] = acc;
    }
}

// ---------------------------------------------------------------------------
// The portable paths: the chain in i, p, j order (B's rows read in order),
// threads splitting the rows of C.

namespace {

constexpr int64_t kPortableRowsPerTask = 16;

void zero_rows_if_fresh(int64_t rows, int64_t n, float* c, int64_t c_rs, bool accumulate) {
  if (accumulate) return;
  for (int64_t i = 0; i < rows; ++i) std::fill(c + i * c_rs, c + i * c_rs + n, 0.0f);
}

void sgemm_portable(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                    int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads) {
  const int64_t tasks = (m + kPortableRowsPerTask - 1) / kPortableRowsPerTask;
  WorkerPool::shared().parallel_for(tasks, threads, [&](int64_t task, int) {
    const int64_t i0 = task * kPortableRowsPerTask, i1 = std::min(m, i0 + kPortableRowsPerTask);
    zero_rows_if_fresh(i1 - i0, n, c + i0 * c_rs, c_rs, accumulate);
    for (int64_t i = i0; i < i1; ++i) {
      float* c_row = c + i * c_rs;
      for (int64_t p = 0; p < k; ++p) {
        const float a_ip = a[i * a_rs + p * a_cs];
        const float* b_row = b + p * b_rs;
        for (int64_t j = 0; j < n; ++j) c_row[j] = std::fma(a_ip, b_row[j * b_cs], c_row[j]);
      }
    }
  });
}

void bf16gemm_portable(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                       const uint16_t* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate,
                       int threads) {
  const int64_t tasks = (m + kPortableRowsPerTask - 1) / kPortableRowsPerTask;
  WorkerPool::shared().parallel_for(tasks, threads, [&](int64_t task, int) {
    const int64_t i0 = task * kPortableRowsPerTask, i1 = std::min(m, i0 + kPortableRowsPerTask);
    zero_rows_if_fresh(i1 - i0, n, c + i0 * c_rs, c_rs, accumulate);
    for (int64_t i = i0; i < i1; ++i) {
      float* c_row = c + i * c_rs;
      for (int64_t q = 0; 2 * q < k; ++q) {
        const int64_t even = 2 * q, odd = 2 * q + 1;
        const uint16_t a_odd = odd < k ? a[i * a_rs + odd * a_cs] : 0;
        const uint16_t a_even = a[i * a_rs + even * a_cs];
        for (int64_t j = 0; j < n; ++j) {
          const uint16_t b_odd = odd < k ? b[odd * b_rs + j * b_cs] : 0;
          const float acc = bf16_dot_step(c_row[j], a_odd, b_odd);
          c_row[j] = bf16_dot_step(acc, a_even, b[even * b_rs + j * b_cs]);
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------
// The blocked driver of the AVX2 and AVX-512 paths.
//
// Loops, outermost first (BLIS's, with the threads on C's tiles):
//   row super-blocks of ≤ kPackedALimit packed A (bounds the packing buffer)
//     phase 1, in parallel: pack all of the super-block's A, every k block
//     phase 2, in parallel over C tiles (mc × nc, disjoint):
//       k blocks of kc, in increasing order (the chain's order):
//         pack B (kc × nc) into the thread's buffer
//         the block product (gemm_avx512.cpp, gemm_avx2.cpp): B panels ×
//         A micro-panels
// (Prefetching the B rows a thread packs next, spread over the block's
// micro-kernel calls, was tried: it cut the packing time by a quarter to a
// third but slowed the micro-kernels by more; a net loss, measured.)
// Each k block begins every micro-tile by loading its C (14 × 32 on AVX-512)
// from wherever the last block left it (L3 for a large tile), misses no
// prefetcher foresees; long k blocks make those loads rare. A B panel
// (kc × 32 on AVX-512) is read from L2 by the A micro-panels that pass it.
// Everything but the tile (the k block, the tile bounds in bytes) is the
// same for both instruction sets.

// A 64-byte-aligned buffer, grown on demand and kept for the next call.
class PackingBuffer {
 public:
  ~PackingBuffer() { std::free(data_); }
  template <typename T>
  T* get(int64_t elements) {
    const size_t bytes = (static_cast<size_t>(elements) * sizeof(T) + 63) / 64 * 64;
    if (bytes > capacity_) {
      std::free(data_);
      data_ = std::aligned_alloc(64, bytes);
      if (data_ == nullptr) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
      capacity_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Each thread's buffers: A for the calls it makes, B for the tiles it runs.
thread_local PackingBuffer tls_packed_a;
thread_local PackingBuffer tls_packed_b;

// k per block, in packed units (f32 elements, bf16 pairs, or widened bf16
// elements): a B panel of kc × 32 units is 128 KiB, an eighth of a 1 MiB L2.
// Against 256 (a panel in L1, but C reloaded four times as often), measured
// in one process on one thread: 1024³ f32 93.5 → 99.9 GFLOP/s, 256×768×50304
// 91.4 → 94.6 (kc 768), bf16 pairs at 1024³ 192 → 203.
constexpr int64_t kBlockUnits = 1024;
// The rows of A packed at once: 2 Mi units (8 MiB; 512 × 4096 f32). Beyond
// it, B is packed once more for each further super-block of rows.
constexpr int64_t kPackedALimit = int64_t{2} << 20;

// The rows of a tile: at most this many (rounded to whole micro-panels).
constexpr int64_t kMaxTileRows = 512;
// The largest f32 operand read in place rather than packed: half of a
// core's L2 on the machines quire ships a profile for (1 MiB and 2 MiB L2).
constexpr int64_t kInPlaceBytes = 512 << 10;

// The kernels of one instruction set for the blocked driver: its register
// tile, and its packing and block products (gemm.h, gemm_detail).
#if defined(__x86_64__)
struct Avx512Kernels {
  static constexpr int64_t kTileRows = gemm_detail::kAvx512TileRows;
  static constexpr int64_t kTileCols = gemm_detail::kAvx512TileCols;
  // A C tile (of the driver, mc × nc) is at most this many bytes, to stay in
  // L2 with its B block.
  static constexpr int64_t kTileCBytes = 512 << 10;
  static constexpr auto pack_a_f32 = gemm_detail::pack_a_f32_avx512;
  static constexpr auto pack_b_f32 = gemm_detail::pack_b_f32_avx512;
  static constexpr auto pack_a_bf16_as_f32 = gemm_detail::pack_a_bf16_as_f32_avx512;
  static constexpr auto pack_b_bf16_as_f32 = gemm_detail::pack_b_bf16_as_f32_avx512;
  static constexpr auto sgemm_block = gemm_detail::sgemm_block_avx512;
  static constexpr auto bf16gemm_fma_block = gemm_detail::bf16gemm_fma_block_avx512;
};

struct Avx2Kernels {
  static constexpr int64_t kTileRows = gemm_detail::kAvx2TileRows;
  static constexpr int64_t kTileCols = gemm_detail::kAvx2TileCols;
  // Narrower C tiles than AVX-512's: on the AMD EPYC (Zen 4, 1 MiB L2),
  // one thread, sgemm / OpenBLAS Haswell at 1024³ and the three transformer
  // shapes went from 0.94–0.99, 0.94–0.95, 0.88–0.93, 0.90–0.98 at 512 KiB
  // to 0.96, 0.92–0.94, 0.92–0.93, 1.00 at 128 KiB (256 and 64 KiB in
  // between or below; other k blocks, or tiles of at most 128 or 256 rows,
  // no better; docs/performance.md).
  static constexpr int64_t kTileCBytes = 128 << 10;
  static constexpr auto pack_a_f32 = gemm_detail::pack_a_f32_avx2;
  static constexpr auto pack_b_f32 = gemm_detail::pack_b_f32_avx2;
  static constexpr auto pack_a_bf16_as_f32 = gemm_detail::pack_a_bf16_as_f32_avx2;
  static constexpr auto pack_b_bf16_as_f32 = gemm_detail::pack_b_bf16_as_f32_avx2;
  static constexpr auto sgemm_block = gemm_detail::sgemm_block_avx2;
  static constexpr auto bf16gemm_fma_block = gemm_detail::bf16gemm_fma_block_avx2;
};
#endif

#if defined(__aarch64__)
struct NeonKernels {
  static constexpr int64_t kTileRows = gemm_detail::kNeonTileRows;
  static constexpr int64_t kTileCols = gemm_detail::kNeonTileCols;
  // AVX2's bound: a C tile of 128 KiB beside its B block fits the 1 MiB or
  // larger L2 of current aarch64 server cores. Not yet measured on one.
  static constexpr int64_t kTileCBytes = 128 << 10;
  static constexpr auto pack_a_f32 = gemm_detail::pack_a_f32_neon;
  static constexpr auto pack_b_f32 = gemm_detail::pack_b_f32_neon;
  static constexpr auto pack_a_bf16_as_f32 = gemm_detail::pack_a_bf16_as_f32_neon;
  static constexpr auto pack_b_bf16_as_f32 = gemm_detail::pack_b_bf16_as_f32_neon;
  static constexpr auto sgemm_block = gemm_detail::sgemm_block_neon;
  static constexpr auto bf16gemm_fma_block = gemm_detail::bf16gemm_fma_block_neon;
};
#endif

// A kind of product on the blocked driver: its element, its packed word, how
// k elements map to packed k units (the micro-kernel's steps), and the
// kernels (with their tile) that run it.
template <typename Kernels>
struct F32Kind {
  using Element = float;
  using Packed = float;
  static constexpr int64_t kTileRows = Kernels::kTileRows, kTileCols = Kernels::kTileCols;
  static constexpr int64_t kTileCBytes = Kernels::kTileCBytes;
  static constexpr int64_t kBlockMultiple = 1;  // k blocks start at multiples of this
  static int64_t packed_units(int64_t k) { return k; }
  static void pack_a(const float* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
    Kernels::pack_a_f32(a, a_rs, a_cs, rows, kc, dst);
  }
  static void pack_b(const float* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst) {
    Kernels::pack_b_f32(b, b_rs, b_cs, kc, cols, dst);
  }
  static void block(const gemm_detail::PackedBlock<float>& block) { Kernels::sgemm_block(block); }
  static constexpr bool kReadsInPlace = true;  // the tiles can read A and B where they lie (PackedBlock)
};

#if defined(__x86_64__)
// VDPBF16PS (AVX-512 only): one unit is a pair of k.
struct Bf16PairKind {
  using Element = uint16_t;
  using Packed = uint32_t;
  static constexpr int64_t kTileRows = Avx512Kernels::kTileRows, kTileCols = Avx512Kernels::kTileCols;
  static constexpr int64_t kTileCBytes = Avx512Kernels::kTileCBytes;
  static constexpr int64_t kBlockMultiple = 2;
  static int64_t packed_units(int64_t k) { return (k + 1) / 2; }
  static void pack_a(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, uint32_t* dst) {
    gemm_detail::pack_a_bf16_avx512(a, a_rs, a_cs, rows, kc, dst);
  }
  static void pack_b(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, uint32_t* dst) {
    gemm_detail::pack_b_bf16_avx512(b, b_rs, b_cs, kc, cols, dst);
  }
  static void block(const gemm_detail::PackedBlock<uint32_t>& block) { gemm_detail::bf16gemm_block_avx512(block); }
  static constexpr bool kReadsInPlace = false;
};
#endif

// bf16 widened to f32, pairs swapped and an odd k padded: 2⌈k/2⌉ units.
template <typename Kernels>
struct Bf16WidenedKind {
  using Element = uint16_t;
  using Packed = float;
  static constexpr int64_t kTileRows = Kernels::kTileRows, kTileCols = Kernels::kTileCols;
  static constexpr int64_t kTileCBytes = Kernels::kTileCBytes;
  static constexpr int64_t kBlockMultiple = 2;
  static int64_t packed_units(int64_t k) { return (k + 1) / 2 * 2; }
  static void pack_a(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t rows, int64_t kc, float* dst) {
    Kernels::pack_a_bf16_as_f32(a, a_rs, a_cs, rows, kc, dst);
  }
  static void pack_b(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t cols, float* dst) {
    Kernels::pack_b_bf16_as_f32(b, b_rs, b_cs, kc, cols, dst);
  }
  static void block(const gemm_detail::PackedBlock<float>& block) { Kernels::bf16gemm_fma_block(block); }
  static constexpr bool kReadsInPlace = false;
};

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// How a product is cut: k blocks, C tiles.
struct Blocking {
  int64_t kc;          // k per block, elements (a multiple of the unit)
  int64_t super_rows;  // rows of A packed at once (a multiple of mc)
  int64_t mc;          // rows per tile (a multiple of the tile's rows)
  int64_t nc;          // columns per tile (a multiple of the tile's columns)
};

template <typename Kind>
Blocking choose_blocking(int64_t m, int64_t n, int64_t k, int threads) {
  Blocking blocking;
  // Equal k blocks of at most kBlockUnits packed units, each starting at a
  // multiple of the kind's block multiple (a bf16 pair is never split).
  const int64_t units = Kind::packed_units(k);
  const int64_t k_blocks = ceil_div(units, kBlockUnits);
  const int64_t steps = ceil_div(k, Kind::kBlockMultiple);
  blocking.kc = ceil_div(steps, k_blocks) * Kind::kBlockMultiple;

  const int64_t m_tiles = ceil_div(m, kMaxTileRows);
  blocking.mc = ceil_div(ceil_div(m, m_tiles), Kind::kTileRows) * Kind::kTileRows;
  const int64_t super_tiles = std::max<int64_t>(1, kPackedALimit / (units * blocking.mc));
  blocking.super_rows = super_tiles * blocking.mc;

  // Column tiles: at most as wide as L2 allows; among the widths up to three
  // times narrower, the widest whose tiles share out most evenly over the
  // threads (rounds of `threads` tiles, the last tile possibly narrower).
  const int64_t panels = ceil_div(n, Kind::kTileCols);
  const int64_t max_tile_panels =
      std::max<int64_t>(1, Kind::kTileCBytes / (blocking.mc * Kind::kTileCols * static_cast<int64_t>(sizeof(float))));
  const int64_t row_tiles = ceil_div(std::min(m, blocking.super_rows), blocking.mc);
  const auto evenness = [&](int64_t tile_panels) {
    const int64_t tiles = row_tiles * ceil_div(panels, tile_panels);
    const int64_t rounds = ceil_div(tiles, threads);
    return static_cast<double>(row_tiles * panels) / static_cast<double>(rounds * threads * tile_panels);
  };
  const int64_t widest = std::min(panels, max_tile_panels);
  int64_t tile_panels = widest;
  for (int64_t candidate = widest - 1; candidate >= std::max<int64_t>(1, widest / 3); --candidate)
    if (evenness(candidate) > evenness(tile_panels) + 0.01) tile_panels = candidate;
  blocking.nc = tile_panels * Kind::kTileCols;
  return blocking;
}

/// The bytes between an operand's first and last elements (rows × cols, at
/// strides rs and cs), plus one element: what reading it in place touches.
int64_t span_bytes(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return ((rows - 1) * std::abs(rs) + (cols - 1) * std::abs(cs) + 1) * static_cast<int64_t>(sizeof(float));
}

/// Whether the tiles read B where it lies (PackedBlock::b_in_place): f32,
/// B's columns adjacent, and B within kInPlaceBytes.
template <typename Kind>
bool read_b_in_place(int64_t k, int64_t n, int64_t b_rs, int64_t b_cs) {
  if constexpr (!Kind::kReadsInPlace) {
    return false;
  } else {
    return b_cs == 1 && span_bytes(k, n, b_rs, b_cs) <= kInPlaceBytes;
  }
}

/// Whether the tiles read A where it lies (PackedBlock::a_in_place): f32 and
/// A within kInPlaceBytes, at any strides (each step of k broadcasts one
/// element of each of a tile's rows).
template <typename Kind>
bool read_a_in_place(int64_t m, int64_t k, int64_t a_rs, int64_t a_cs) {
  if constexpr (!Kind::kReadsInPlace) {
    return false;
  } else {
    return span_bytes(m, k, a_rs, a_cs) <= kInPlaceBytes;
  }
}

template <typename Kind>
void blocked_gemm(int64_t m, int64_t n, int64_t k, const typename Kind::Element* a, int64_t a_rs, int64_t a_cs,
                  const typename Kind::Element* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate,
                  int threads, OperandReads reads = OperandReads::InPlaceWhereSmall) {
  using Packed = typename Kind::Packed;
  const Blocking blocking = choose_blocking<Kind>(m, n, k, threads);
  const int64_t units = Kind::packed_units(k);
  const int64_t k_blocks = ceil_div(k, blocking.kc);
  WorkerPool& pool = WorkerPool::shared();

  // Operands small enough to stay in L2 are read where they lie (f32): the
  // tiles then find their rows as near as packed ones, and packing them was
  // a third of a 256³ product in the training step's profile (pack_a 4.5–9 %
  // and pack_b 3 % of the samples against the micro-kernel's 29 %); an A in
  // place also spares the product its packing phase's launch. On one thread
  // at 256³, warm: 102 → 108 GFLOP/s (x · w), 98 → 102 (ct · wᵀ).
  // bf16 operands are always packed (pairs, or widened to f32).
  const bool in_place = reads == OperandReads::InPlaceWhereSmall;
  const bool a_in_place = in_place && read_a_in_place<Kind>(m, k, a_rs, a_cs);
  const bool b_in_place = in_place && read_b_in_place<Kind>(k, n, b_rs, b_cs);

  for (int64_t i_super = 0; i_super < m; i_super += blocking.super_rows) {
    const int64_t rows = std::min(blocking.super_rows, m - i_super);
    // Packed A: the k block from element pc at packed_units(pc)·rows, within
    // it the micro-panel of row i at i·(the block's units).
    Packed* packed_a = a_in_place ? nullptr : tls_packed_a.get<Packed>(units * rows);
    const int64_t row_groups = ceil_div(rows, blocking.mc);
    // Each row group's micro-panels are shared out among the threads too: a
    // 256-row operand is one group, which one thread alone packed.
    const int64_t chunks = std::min<int64_t>(threads, ceil_div(blocking.mc, Kind::kTileRows));
    if (!a_in_place)
      pool.parallel_for(k_blocks * row_groups * chunks, threads, [&](int64_t task, int) {
        const int64_t chunk = task % chunks, group = task / chunks % row_groups;
        const int64_t pc = task / chunks / row_groups * blocking.kc, i0 = group * blocking.mc;
        const int64_t kc = std::min(blocking.kc, k - pc);
        const int64_t panels = ceil_div(std::min(blocking.mc, rows - i0), Kind::kTileRows);
        const int64_t r0 = i0 + chunk * panels / chunks * Kind::kTileRows;
        const int64_t r1 = std::min(i0 + (chunk + 1) * panels / chunks * Kind::kTileRows, std::min(i0 + blocking.mc, rows));
        if (r0 >= r1) return;
        Kind::pack_a(a + (i_super + r0) * a_rs + pc * a_cs, a_rs, a_cs, r1 - r0, kc,
                     packed_a + Kind::packed_units(pc) * rows + r0 * Kind::packed_units(kc));
      });

    // Phase 2: C tiles in parallel, each through every k block in order.
    const int64_t n_tiles = ceil_div(n, blocking.nc);
    pool.parallel_for(row_groups * n_tiles, threads, [&](int64_t task, int) {
      const int64_t i0 = task / n_tiles * blocking.mc, j0 = task % n_tiles * blocking.nc;
      const int64_t tile_rows = std::min(blocking.mc, rows - i0), tile_cols = std::min(blocking.nc, n - j0);
      Packed* packed_b = b_in_place ? nullptr
                                    : tls_packed_b.get<Packed>(blocking.nc / Kind::kTileCols *
                                                               gemm_detail::b_panel_stride(Kind::packed_units(blocking.kc), Kind::kTileCols));
      for (int64_t pc = 0; pc < k; pc += blocking.kc) {
        const int64_t kc = std::min(blocking.kc, k - pc);
        const int64_t kc_units = Kind::packed_units(kc);
        // (No arithmetic on the null buffers of operands read in place.)
        gemm_detail::PackedBlock<Packed> block{
            kc_units,  tile_rows,
            tile_cols, a_in_place ? nullptr : packed_a + Kind::packed_units(pc) * rows + i0 * kc_units,
            packed_b,  c + (i_super + i0) * c_rs + j0,
            c_rs,      accumulate || pc > 0};
        if constexpr (Kind::kReadsInPlace) {
          if (a_in_place) {
            block.a = a + (i_super + i0) * a_rs + pc * a_cs;
            block.a_in_place = true;
            block.a_rs = a_rs;
            block.a_cs = a_cs;
          }
          if (b_in_place) {
            block.b = b + pc * b_rs + j0;
            block.b_in_place = true;
            block.b_rs = b_rs;
          }
        }
        if (!b_in_place) Kind::pack_b(b + pc * b_rs + j0 * b_cs, b_rs, b_cs, kc, tile_cols, packed_b);
        Kind::block(block);
      }
    });
  }
}

void zero_or_keep(int64_t m, int64_t n, float* c, int64_t c_rs, bool accumulate) {
  zero_rows_if_fresh(m, n, c, c_rs, accumulate);
}

void require_available(GemmPath path, const char* product) {
  if (!gemm_path_available(path))
    throw std::invalid_argument(std::string(product) + ": path " + gemm_path_name(path) + " is not available here");
}

}  // namespace

// ---------------------------------------------------------------------------
// Entry points

void sgemm_on(GemmPath path, int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads,
              OperandReads reads) {
  require_available(path, "sgemm");
  threads = std::max(threads, 1);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return zero_or_keep(m, n, c, c_rs, accumulate);
  switch (path) {
    case GemmPath::Portable:
      return sgemm_portable(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads);
#if defined(__x86_64__)
    case GemmPath::Avx2:
      return blocked_gemm<F32Kind<Avx2Kernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads,
                                                reads);
    case GemmPath::Avx512:
      return blocked_gemm<F32Kind<Avx512Kernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads,
                                                  reads);
#else
    case GemmPath::Avx2:
    case GemmPath::Avx512: break;  // not available here: require_available refused it
#endif
#if defined(__aarch64__)
    case GemmPath::Neon:
      return blocked_gemm<F32Kind<NeonKernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads,
                                                reads);
#else
    case GemmPath::Neon: break;  // not available here: require_available refused it
#endif
    case GemmPath::Avx2FmaBf16:
    case GemmPath::Avx512Bf16:
    case GemmPath::Avx512FmaBf16:
    case GemmPath::NeonFmaBf16:
      throw std::invalid_argument(std::string("sgemm: path ") + gemm_path_name(path) + " is bf16gemm's");
  }
  throw std::logic_error(std::string("sgemm: path ") + gemm_path_name(path) + " is not built here");
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
           int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads) {
  sgemm_on(sgemm_path(), m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads);
}

void bf16gemm_on(GemmPath path, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                 const uint16_t* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate,
                 int threads) {
  require_available(path, "bf16gemm");
  threads = std::max(threads, 1);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return zero_or_keep(m, n, c, c_rs, accumulate);
  switch (path) {
    case GemmPath::Portable:
      return bf16gemm_portable(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads);
#if defined(__x86_64__)
    case GemmPath::Avx512Bf16:
      return blocked_gemm<Bf16PairKind>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads);
    case GemmPath::Avx2FmaBf16:
      return blocked_gemm<Bf16WidenedKind<Avx2Kernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate,
                                                        threads);
    case GemmPath::Avx512FmaBf16:
      return blocked_gemm<Bf16WidenedKind<Avx512Kernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate,
                                                          threads);
#else
    case GemmPath::Avx512Bf16:
    case GemmPath::Avx2FmaBf16:
    case GemmPath::Avx512FmaBf16: break;  // not available here: require_available refused it
#endif
#if defined(__aarch64__)
    case GemmPath::NeonFmaBf16:
      return blocked_gemm<Bf16WidenedKind<NeonKernels>>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate,
                                                        threads);
#else
    case GemmPath::NeonFmaBf16: break;  // not available here: require_available refused it
#endif
    case GemmPath::Avx2:
    case GemmPath::Avx512:
    case GemmPath::Neon:
      throw std::invalid_argument(std::string("bf16gemm: path ") + gemm_path_name(path) + " is sgemm's");
  }
  throw std::logic_error(std::string("bf16gemm: path ") + gemm_path_name(path) + " is not built here");
}

void bf16gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
              int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, bool accumulate, int threads) {
  bf16gemm_on(bf16gemm_path(), m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, accumulate, threads);
}

}  // namespace quire::native
