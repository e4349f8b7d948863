#include "quire/runtime/gemm.h"

#include <gtest/gtest.h>

#include "quire/runtime/gemm_testing.h"
#include "quire/runtime/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace quire::native {
namespace {

using namespace gemm_testing;

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

// Bit equality; with `nan_is_nan`, two NaNs of any sign and payload match
// (sgemm promises a NaN, not which).
testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want, bool nan_is_nan) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "sizes differ";
  for (size_t e = 0; e < got.size(); ++e) {
    if (bits_of(got[e]) == bits_of(want[e])) continue;
    if (nan_is_nan && std::isnan(got[e]) && std::isnan(want[e])) continue;
    return testing::AssertionFailure() << "element " << e << ": got 0x" << std::hex << bits_of(got[e]) << " (" << got[e]
                                       << "), want 0x" << bits_of(want[e]) << " (" << want[e] << ")";
  }
  return testing::AssertionSuccess();
}

// Edge sizes around the tiles (AVX-512's 14 × 32, AVX2's 6 × 16, NEON's 8 × 12) and the k block (1024 f32, 2048 bf16
// on VDPBF16PS, 1024 widened: 1025 makes two f32 blocks, 2050 two of each
// kind, and the odd 3101 four f32 blocks and two of bf16 pairs, the last one
// shorter), and sizes that make several row tiles (> 512 rows) and column
// tiles.
const Shape kEdgeShapes[] = {{1, 1, 1},     {1, 15, 16},   {15, 16, 17},  {16, 17, 33}, {17, 33, 100}, {33, 100, 1},
                             {14, 32, 15},  {15, 33, 257}, {20, 40, 260}, {3, 1, 600},  {100, 33, 15}, {9, 20, 1025},
                             {3, 35, 2050}, {2, 17, 3101}, {530, 40, 3},  {5, 1100, 20}};

// Small shapes in every combination of layouts, accumulating or not; larger
// ones (over 10⁴ multiply-adds) in two (contiguous rows; then column-major A,
// gapped B, accumulating), to keep the suite fast under the sanitizers.
std::vector<EdgeCase> edge_cases() {
  std::vector<EdgeCase> cases;
  for (Shape s : kEdgeShapes) {
    if (s.m * s.n * s.k > 10000) {
      cases.push_back({s, Layout::RowMajor, Layout::RowMajor, false});
      cases.push_back({s, Layout::ColumnMajor, Layout::Gapped, true});
      continue;
    }
    for (Layout la : kLayouts)
      for (Layout lb : kLayouts)
        for (bool accumulate : {false, true}) cases.push_back({s, la, lb, accumulate});
  }
  return cases;
}

std::string describe(const EdgeCase& e) {
  return std::to_string(e.shape.m) + "x" + std::to_string(e.shape.n) + "x" + std::to_string(e.shape.k) + ", A " +
         layout_name(e.a_layout) + ", B " + layout_name(e.b_layout) + (e.accumulate ? ", accumulating" : "");
}

// Every path of each product, and those of them this CPU runs (the others
// are left out here; the tests that need one path skip where it is missing).
constexpr GemmPath kSgemmPaths[] = {GemmPath::Portable, GemmPath::Avx2, GemmPath::Avx512, GemmPath::Neon};
constexpr GemmPath kBf16gemmPaths[] = {GemmPath::Portable, GemmPath::Avx2FmaBf16, GemmPath::Avx512Bf16,
                                       GemmPath::Avx512FmaBf16, GemmPath::NeonFmaBf16};

/// The paths of `paths` this CPU has.
std::vector<GemmPath> available(std::span<const GemmPath> paths) {
  std::vector<GemmPath> out;
  for (GemmPath p : paths)
    if (gemm_path_available(p)) out.push_back(p);
  return out;
}
std::vector<GemmPath> available(std::initializer_list<GemmPath> paths) {
  return available(std::span<const GemmPath>(paths.begin(), paths.size()));
}

// ---------------------------------------------------------------------------
// sgemm

TEST(GemmSgemm, ReferenceIsTheFmaChainInIncreasingK) {
  // 2^24, then 2^24 + 1 ties back to 2^24, then − 2^24: 0. Any other order
  // (or pairwise sums) gives 1.
  const float a[] = {1.0f, 1.0f, 1.0f};
  const float b[] = {0x1p24f, 1.0f, -0x1p24f};
  float c = 42.0f;
  sgemm_reference(1, 1, 3, a, 3, 1, b, 1, 1, &c, 1, false);
  EXPECT_EQ(c, 0.0f);
  // Fused: (1 + 2^-12)² − 1 = 2^-11 + 2^-24 exactly, where a rounded product gives 2^-11.
  const float x = 1.0f + 0x1p-12f;
  c = -1.0f;
  sgemm_reference(1, 1, 1, &x, 1, 1, &x, 1, 1, &c, 1, true);
  EXPECT_EQ(c, 0x1p-11f + 0x1p-24f);
}

TEST(GemmSgemm, EveryPathMatchesTheReferenceOnEdgeShapes) {
  ValueSource values{1, 0.002};
  const std::vector<GemmPath> paths = available(kSgemmPaths);
  for (const EdgeCase& e : edge_cases()) {
    const auto a = make_matrix<float>(e.shape.m, e.shape.k, e.a_layout, [&] { return values.f32(); });
    const auto b = make_matrix<float>(e.shape.k, e.shape.n, e.b_layout, [&] { return values.f32(); });
    const OutputMatrix start = make_output(e.shape.m, e.shape.n, values);
    OutputMatrix want = start;
    sgemm_reference(e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(),
                    want.rs, e.accumulate);
    for (GemmPath path : paths)
      for (OperandReads reads : {OperandReads::InPlaceWhereSmall, OperandReads::Packed}) {
        OutputMatrix got = start;
        sgemm_on(path, e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(),
                 got.rs, e.accumulate, 2, reads);
        ASSERT_TRUE(same_bits(got.data, want.data, true))
            << gemm_path_name(path) << " " << describe(e)
            << (reads == OperandReads::Packed ? ", operands packed" : ", small operands in place");
      }
  }
}

/// Every path of `paths` against the reference on the size grid, on 1 and 2
/// threads: sgemm's (T = float) or bf16gemm's (T = uint16_t, bf16 bits),
/// whose NaN payloads are exact where sgemm's are not promised.
template <typename T>
void expect_the_reference_on_the_size_grid(uint64_t seed, const std::vector<GemmPath>& paths) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  ValueSource values{seed, 0.001};
  auto draw = [&]() -> T {
    if constexpr (kF32)
      return values.f32();
    else
      return values.bf16();
  };
  for (const EdgeCase& e : size_grid(4'000'000)) {
    const auto a = make_matrix<T>(e.shape.m, e.shape.k, e.a_layout, draw);
    const auto b = make_matrix<T>(e.shape.k, e.shape.n, e.b_layout, draw);
    const OutputMatrix start = make_output(e.shape.m, e.shape.n, values);
    OutputMatrix want = start;
    if constexpr (kF32)
      sgemm_reference(e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(),
                      want.rs, e.accumulate);
    else
      bf16gemm_reference(e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(),
                         want.rs, e.accumulate);
    for (GemmPath path : paths)
      for (int threads : {1, 2}) {
        OutputMatrix got = start;
        if constexpr (kF32)
          sgemm_on(path, e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(),
                   got.rs, e.accumulate, threads);
        else
          bf16gemm_on(path, e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs,
                      got.data.data(), got.rs, e.accumulate, threads);
        ASSERT_TRUE(same_bits(got.data, want.data, kF32))
            << gemm_path_name(path) << " " << describe(e) << ", " << threads << " threads";
      }
  }
}

TEST(GemmSgemm, EveryPathMatchesTheReferenceOnASizeGrid) {
  expect_the_reference_on_the_size_grid<float>(11, available(kSgemmPaths));
}

TEST(GemmSgemm, SpecialValuesFollowTheReference) {
  // Dense specials: infinities, NaNs, subnormals and overflow in most chains.
  ValueSource values{2, 0.3};
  for (GemmPath path : available(kSgemmPaths))
    for (Shape s : {Shape{15, 33, 7}, Shape{30, 70, 40}}) {
      const auto a = make_matrix<float>(s.m, s.k, Layout::RowMajor, [&] { return values.f32(); });
      const auto b = make_matrix<float>(s.k, s.n, Layout::RowMajor, [&] { return values.f32(); });
      OutputMatrix want = make_output(s.m, s.n, values), got = want;
      sgemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, true);
      for (OperandReads reads : {OperandReads::InPlaceWhereSmall, OperandReads::Packed}) {
        OutputMatrix result = got;
        sgemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, result.data.data(), result.rs, true, 2,
                 reads);
        EXPECT_TRUE(same_bits(result.data, want.data, true)) << gemm_path_name(path);
      }
    }
}

TEST(GemmSgemm, ThreadCountChangesNoBit) {
  ValueSource values{3, 0.0};
  const Shape s{40, 70, 300};
  const auto a = make_matrix<float>(s.m, s.k, Layout::RowMajor, [&] { return values.f32(); });
  const auto b = make_matrix<float>(s.k, s.n, Layout::RowMajor, [&] { return values.f32(); });
  const OutputMatrix start = make_output(s.m, s.n, values);
  for (GemmPath path : available(kSgemmPaths)) {
    OutputMatrix one = start;
    sgemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, one.data.data(), one.rs, true, 1);
    for (int threads : {2, 3}) {
      OutputMatrix many = start;
      sgemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, many.data.data(), many.rs, true,
               threads);
      EXPECT_TRUE(same_bits(many.data, one.data, false)) << gemm_path_name(path) << ", " << threads << " threads";
    }
  }
}

TEST(GemmSgemm, LongKSplitsRowsIntoSeveralPackedBlocks) {
  // 530 rows × 4000 k exceed the packed-A buffer (2 Mi elements): the rows
  // are packed and multiplied in two super-blocks, on either tile.
  const std::vector<GemmPath> blocked = available({GemmPath::Avx2, GemmPath::Avx512, GemmPath::Neon});
  if (blocked.empty()) GTEST_SKIP() << "neither AVX2, AVX-512 nor NEON here";
  ValueSource values{4, 0.0};
  const Shape s{530, 1, 4000};
  const auto a = make_matrix<float>(s.m, s.k, Layout::RowMajor, [&] { return values.f32(); });
  const auto b = make_matrix<float>(s.k, s.n, Layout::RowMajor, [&] { return values.f32(); });
  OutputMatrix want = make_output(s.m, s.n, values);
  const OutputMatrix start = want;
  sgemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, false);
  for (GemmPath path : blocked) {
    OutputMatrix got = start;
    sgemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs, false, 2);
    EXPECT_TRUE(same_bits(got.data, want.data, false)) << gemm_path_name(path);
  }
}

TEST(GemmSgemm, EmptyProductsWriteZerosOrNothing) {
  const float a[] = {1.0f}, b[] = {1.0f};
  for (GemmPath path : available(kSgemmPaths)) {
    std::vector<float> c = {-0.0f, 7.0f, -0.0f, 7.0f};
    sgemm_on(path, 2, 2, 0, a, 0, 0, b, 0, 0, c.data(), 2, true, 2);  // k = 0, accumulating: C unchanged
    EXPECT_TRUE(same_bits(c, {-0.0f, 7.0f, -0.0f, 7.0f}, false));
    sgemm_on(path, 2, 2, 0, a, 0, 0, b, 0, 0, c.data(), 2, false, 2);  // k = 0: the chain's +0
    EXPECT_TRUE(same_bits(c, {0.0f, 0.0f, 0.0f, 0.0f}, false));
    sgemm_on(path, 0, 2, 5, a, 0, 0, b, 0, 0, c.data(), 2, false, 2);  // m = 0: nothing
    sgemm_on(path, 2, 0, 5, a, 0, 0, b, 0, 0, c.data(), 2, false, 2);  // n = 0: nothing
    EXPECT_TRUE(same_bits(c, {0.0f, 0.0f, 0.0f, 0.0f}, false));
  }
}

TEST(GemmSgemm, PathsAreNamedAndChosenByTheCpu) {
  EXPECT_STREQ(gemm_path_name(GemmPath::Portable), "portable");
  EXPECT_STREQ(gemm_path_name(GemmPath::Avx2), "avx2");
  EXPECT_STREQ(gemm_path_name(GemmPath::Avx2FmaBf16), "avx2-fma-bf16");
  EXPECT_STREQ(gemm_path_name(GemmPath::Avx512), "avx512");
  EXPECT_STREQ(gemm_path_name(GemmPath::Avx512Bf16), "avx512-bf16");
  EXPECT_STREQ(gemm_path_name(GemmPath::Avx512FmaBf16), "avx512-fma-bf16");
  EXPECT_STREQ(gemm_path_name(GemmPath::Neon), "neon");
  EXPECT_STREQ(gemm_path_name(GemmPath::NeonFmaBf16), "neon-fma-bf16");
  EXPECT_TRUE(gemm_path_available(GemmPath::Portable));
  // Each instruction set's paths, and what sgemm and bf16gemm choose under it.
  using runtime::Isa;
  EXPECT_EQ(gemm_path_available(GemmPath::Avx2), runtime::cpu_isa() >= Isa::Avx2);
  EXPECT_EQ(gemm_path_available(GemmPath::Avx2FmaBf16), runtime::cpu_isa() >= Isa::Avx2);
  EXPECT_EQ(gemm_path_available(GemmPath::Avx512), runtime::cpu_isa() >= Isa::Avx512);
  EXPECT_EQ(gemm_path_available(GemmPath::Neon), runtime::cpu_isa() == Isa::Neon);
  EXPECT_EQ(gemm_path_available(GemmPath::NeonFmaBf16), runtime::cpu_isa() == Isa::Neon);
  EXPECT_EQ(sgemm_path_for(Isa::Baseline), GemmPath::Portable);
  EXPECT_EQ(sgemm_path_for(Isa::Neon), GemmPath::Neon);
  EXPECT_EQ(sgemm_path_for(Isa::Avx2), GemmPath::Avx2);
  EXPECT_EQ(sgemm_path_for(Isa::Avx512), GemmPath::Avx512);
  EXPECT_EQ(bf16gemm_path_for(Isa::Baseline), GemmPath::Portable);
  EXPECT_EQ(bf16gemm_path_for(Isa::Neon), GemmPath::NeonFmaBf16);
  EXPECT_EQ(bf16gemm_path_for(Isa::Avx2), GemmPath::Avx2FmaBf16);
  if (gemm_path_available(GemmPath::Avx512)) {
    const GemmPath chosen = bf16gemm_path_for(Isa::Avx512);
    EXPECT_TRUE(chosen == GemmPath::Avx512Bf16 || chosen == GemmPath::Avx512FmaBf16) << gemm_path_name(chosen);
  }
  // Here: the widest instruction set the CPU has under QUIRE_ISA's cap.
  EXPECT_EQ(sgemm_path(), sgemm_path_for(runtime::widest_isa()));
  EXPECT_TRUE(gemm_path_available(sgemm_path()));
  EXPECT_TRUE(gemm_path_available(bf16gemm_path()));
  EXPECT_EQ(sgemm_tile_columns(GemmPath::Portable), 1);
  EXPECT_EQ(sgemm_tile_columns(GemmPath::Avx2), 16);
  EXPECT_EQ(sgemm_tile_columns(GemmPath::Avx512), 32);
  EXPECT_EQ(sgemm_tile_columns(GemmPath::Neon), 12);
  float c = 0.0f;
  const float one = 1.0f;
  const uint16_t one_bf16 = 0x3F80;
  EXPECT_THROW(sgemm_on(GemmPath::Avx512Bf16, 1, 1, 1, &one, 1, 1, &one, 1, 1, &c, 1, false, 1),
               std::invalid_argument);
  EXPECT_THROW(sgemm_on(GemmPath::Avx2FmaBf16, 1, 1, 1, &one, 1, 1, &one, 1, 1, &c, 1, false, 1),
               std::invalid_argument);
  EXPECT_THROW(bf16gemm_on(GemmPath::Avx2, 1, 1, 1, &one_bf16, 1, 1, &one_bf16, 1, 1, &c, 1, false, 1),
               std::invalid_argument);
  EXPECT_THROW(sgemm_on(GemmPath::NeonFmaBf16, 1, 1, 1, &one, 1, 1, &one, 1, 1, &c, 1, false, 1),
               std::invalid_argument);
  EXPECT_THROW(bf16gemm_on(GemmPath::Neon, 1, 1, 1, &one_bf16, 1, 1, &one_bf16, 1, 1, &c, 1, false, 1),
               std::invalid_argument);
}

// The cap through the environment, in a process of its own (QUIRE_ISA is
// read once per process): under QUIRE_ISA=avx2 a CPU with AVX-512 runs
// sgemm on Avx2 and bf16gemm on Avx2FmaBf16, and a product still gives the
// reference's bits. Exits with 0 if so.
[[noreturn]] void exit_with_avx2_cap_result() {
  setenv("QUIRE_ISA", "avx2", 1);
  ValueSource values{10, 0.0};
  const Shape s{33, 40, 70};
  const auto a = make_matrix<float>(s.m, s.k, Layout::RowMajor, [&] { return values.f32(); });
  const auto b = make_matrix<float>(s.k, s.n, Layout::RowMajor, [&] { return values.f32(); });
  OutputMatrix want = make_output(s.m, s.n, values), got = want;
  sgemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, true);
  sgemm(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs, true, 2);
  const bool chosen = runtime::widest_isa() == runtime::Isa::Avx2 && sgemm_path() == GemmPath::Avx2 &&
                      bf16gemm_path() == GemmPath::Avx2FmaBf16;
  std::exit(chosen && same_bits(got.data, want.data, false) ? 0 : 1);
}

TEST(GemmSgemm, IsaCapOfAvx2ChoosesTheAvx2Paths) {
  if (runtime::cpu_isa() < runtime::Isa::Avx2) GTEST_SKIP() << "this CPU lacks AVX2+FMA+F16C";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: nothing chosen yet
  EXPECT_EXIT(exit_with_avx2_cap_result(), testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// The bf16 step against VDPBF16PS

#if defined(__x86_64__)
// acc[j] = VDPBF16PS(acc[j], a pair j, b pair j) for 16 lanes; a pair is
// (even element) | (odd element) << 16.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16ps_16(float* acc, const uint32_t* a, const uint32_t* b) {
  const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)va, (__m512bh)vb));
}
#endif

// The instruction on one lane, or nullopt where the CPU lacks it.
std::optional<uint32_t> instruction_pair(uint32_t acc, uint16_t a_even, uint16_t a_odd, uint16_t b_even,
                                         uint16_t b_odd) {
#if defined(__x86_64__)
  if (!gemm_path_available(GemmPath::Avx512Bf16)) return std::nullopt;
  float lanes[16];
  uint32_t a[16], b[16];
  for (int j = 0; j < 16; ++j) {
    lanes[j] = float_from_bits(acc);
    a[j] = a_even | uint32_t{a_odd} << 16;
    b[j] = b_even | uint32_t{b_odd} << 16;
  }
  dpbf16ps_16(lanes, a, b);
  return bits_of(lanes[0]);
#else
  (void)acc, (void)a_even, (void)a_odd, (void)b_even, (void)b_odd;
  return std::nullopt;
#endif
}

uint32_t emulated_pair(uint32_t acc, uint16_t a_even, uint16_t a_odd, uint16_t b_even, uint16_t b_odd) {
  return bits_of(bf16_dot_step(bf16_dot_step(float_from_bits(acc), a_odd, b_odd), a_even, b_even));
}

uint16_t bf(float x) { return bf16_from_float(x); }

TEST(GemmBf16Step, DocumentedCases) {
  // Each row: acc, a even, a odd, b even, b odd → the instruction's result on
  // this CPU (an Emerald Rapids Xeon). The emulation must give it everywhere;
  // where the instruction exists it is checked too.
  struct Case {
    const char* what;
    uint32_t acc;
    uint16_t a_even, a_odd, b_even, b_odd;
    uint32_t want;
  };
  const Case cases[] = {
      {"odd element first: (1 − 1) + 2^-30", bits_of(1.0f), bf(0x1p-30f), bf(-1.0f), bf(1.0f), bf(1.0f), 0x30800000},
      {"fused: 2^128 − max f32 is finite", bits_of(-0x1.fffffep127f), 0, bf(0x1p64f), 0, bf(0x1p64f), 0x73800000},
      {"fused: 2^-126 + 2^-130 is kept", bits_of(0x1p-126f), 0, bf(0x1p-70f), 0, bf(0x1p-60f), 0x00880000},
      {"DAZ on acc: 2^-127 counts as 0", 0x00400000, 0, bf(0x1p-126f), 0, bf(1.0f), 0x00800000},
      {"DAZ on a bf16 subnormal", 0, 0x0001, 0, bf(0x1p100f), 0, 0x00000000},
      {"DAZ keeps the sign: −subnormal · 1 + −0", 0x80000000, 0x8000, 0x8001, 0, bf(1.0f), 0x80000000},
      {"FTZ between the two steps", 0, bf(0x1p-126f), bf(0x1p-64f), bf(1.0f), bf(0x1p-63f), 0x00800000},
      {"tininess after rounding: 2^-126 − 2^-152 rounds up", bits_of(0x1p-126f), 0, bf(0x1p-76f), 0, bf(-0x1p-76f),
       0x00800000},
      {"2^-126 − 2^-150 is tiny: flushed", bits_of(0x1p-126f), 0, bf(0x1p-75f), 0, bf(-0x1p-75f), 0x00000000},
      {"a flushed result keeps its sign", 0, bf(-0.0f), bf(0x1p-70f), 0, bf(-0x1p-70f), 0x80000000},
      {"exact cancellation gives +0", bits_of(1.0f), bf(-0.0f), bf(-1.0f), 0, bf(1.0f), 0x00000000},
      {"∞ · 0 gives the default NaN", 0, 0, 0x7F80, 0, 0, 0xFFC00000},
      {"∞ − ∞ gives the default NaN", bits_of(-INFINITY), 0, 0x7F80, 0, bf(1.0f), 0xFFC00000},
      {"a signalling NaN acc is quieted, payload kept", 0x7F800001, 0, 0, 0, 0, 0x7FC00001},
      {"a's NaN before acc's", 0x7FC00077, 0x7FC3, 0, bf(1.0f), 0, 0x7FC30000},
      {"a's NaN before b's", 0, 0x7FC3, 0, 0xFFC5, 0, 0x7FC30000},
      {"b's signalling NaN, quieted", 0, 0, bf(1.0f), 0, 0xFFA5, 0xFFE50000},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(emulated_pair(c.acc, c.a_even, c.a_odd, c.b_even, c.b_odd), c.want) << c.what;
    if (auto hw = instruction_pair(c.acc, c.a_even, c.a_odd, c.b_even, c.b_odd)) {
      EXPECT_EQ(*hw, c.want) << c.what;
    }
  }
}

TEST(GemmBf16Step, EmulationMatchesTheInstructionOnRandomInputs) {
#if defined(__x86_64__)
  if (!gemm_path_available(GemmPath::Avx512Bf16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  ValueSource source{5, 0.0};
  auto rng = [&] { return source.next(); };
  // Four families, 16 lanes × 8192 calls each: uniformly random bits (every
  // class: NaNs with payloads, infinities, subnormals), values near the
  // underflow threshold (products and acc around 2^-126, where DAZ and FTZ
  // decide), the edge of tininess (below), and ordinary values whose sums round.
  auto near_threshold_bf16 = [&] {
    const uint32_t sign = rng() & 1, exponent = 64 + rng() % 8 - 4 + (rng() % 3 == 0 ? 60 : 0);
    return static_cast<uint16_t>(sign << 15 | (exponent & 0xFF) << 7 | (rng() & 0x7F));
  };
  auto near_threshold_f32 = [&] {
    const uint32_t sign = rng() & 1, exponent = rng() % 6;  // subnormal to 2^-122
    return sign << 31 | exponent << 23 | static_cast<uint32_t>(rng() & 0x7FFFFF);
  };
  // Products of about 2^-150 against acc ≈ ±2^-126: results just below
  // 2^-126, where rounding and tininess decide between 2^-126 and 0.
  auto tininess_edge_bf16 = [&](int exponent) {
    const uint32_t sign = rng() & 1;
    return static_cast<uint16_t>(sign << 15 | static_cast<uint32_t>(exponent + 127) << 7 | (rng() & 0x7F));
  };
  auto tininess_edge_pair = [&](bool first) {
    const int e = -153 + static_cast<int>(rng() % 9), ea = e / 2;
    return std::pair{tininess_edge_bf16(first ? ea : e - ea), tininess_edge_bf16(first ? e - ea : ea)};
  };
  int64_t compared = 0, mismatches = 0;
  for (int family = 0; family < 4; ++family)
    for (int call = 0; call < 8192; ++call) {
      float acc[16];
      uint32_t a[16], b[16];
      for (int j = 0; j < 16; ++j) {
        if (family == 0) {
          acc[j] = float_from_bits(static_cast<uint32_t>(rng()));
          a[j] = static_cast<uint32_t>(rng()), b[j] = static_cast<uint32_t>(rng());
        } else if (family == 1) {
          acc[j] = float_from_bits(near_threshold_f32());
          a[j] = near_threshold_bf16() | uint32_t{near_threshold_bf16()} << 16;
          b[j] = near_threshold_bf16() | uint32_t{near_threshold_bf16()} << 16;
        } else if (family == 2) {
          acc[j] = float_from_bits(static_cast<uint32_t>(rng() & 1) << 31 | (0x00800000u + rng() % 4));
          const auto [a_odd, b_odd] = tininess_edge_pair(true);
          const auto [a_even, b_even] = rng() % 2 ? tininess_edge_pair(false) : std::pair<uint16_t, uint16_t>{0, 0};
          a[j] = a_even | uint32_t{a_odd} << 16;
          b[j] = b_even | uint32_t{b_odd} << 16;
        } else {
          acc[j] = source.f32();
          a[j] = bf(source.f32()) | uint32_t{bf(source.f32())} << 16;
          b[j] = bf(source.f32()) | uint32_t{bf(source.f32())} << 16;
        }
      }
      float hw[16];
      std::copy(acc, acc + 16, hw);
      dpbf16ps_16(hw, a, b);
      for (int j = 0; j < 16; ++j) {
        const uint32_t want = bits_of(hw[j]);
        const uint32_t got = emulated_pair(bits_of(acc[j]), a[j] & 0xFFFF, a[j] >> 16, b[j] & 0xFFFF, b[j] >> 16);
        ++compared;
        if (got != want && ++mismatches <= 5)
          ADD_FAILURE() << std::hex << "acc 0x" << bits_of(acc[j]) << " a 0x" << a[j] << " b 0x" << b[j]
                        << ": instruction 0x" << want << ", emulation 0x" << got;
      }
    }
  EXPECT_EQ(mismatches, 0) << "of " << compared;
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

TEST(GemmBf16, ConversionRoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(float_from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf16_from_float(float_from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(bf16_from_float(float_from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(bf16_from_float(float_from_bits(0x7F7FFFFFu)), 0x7F80);  // overflow to ∞
  EXPECT_EQ(bf16_from_float(float_from_bits(0xFF800001u)), 0xFFC0);  // NaN: quiet, sign kept
  EXPECT_EQ(bf16_to_float(0x4049), float_from_bits(0x40490000u));
}

TEST(GemmBf16, ReferenceIsThePairChain) {
  // k = 3: pairs (0, 1) then (2, pad). acc = −0: the padded step adds
  // +0 · +0 first, which turns −0 into +0, before A[2]·B[2] = −0.
  const uint16_t a[] = {bf(1.0f), bf(1.0f), bf(-0.0f)};
  const uint16_t b[] = {bf(-1.0f), bf(1.0f), bf(1.0f)};
  float c = -0.0f;
  bf16gemm_reference(1, 1, 3, a, 3, 1, b, 1, 1, &c, 1, true);
  EXPECT_EQ(bits_of(c), 0u);  // (−0 + 1 − 1) = +0, + (+0) = +0, + (−0) = +0
  // The odd element comes first: acc 1, pair (2^-30, −1): 1 − 1 = 0, + 2^-30.
  const uint16_t a2[] = {bf(0x1p-30f), bf(-1.0f)};
  const uint16_t b2[] = {bf(1.0f), bf(1.0f)};
  c = 1.0f;
  bf16gemm_reference(1, 1, 2, a2, 2, 1, b2, 1, 1, &c, 1, true);
  EXPECT_EQ(c, 0x1p-30f);
}

TEST(GemmBf16, EveryPathMatchesTheReferenceOnEdgeShapes) {
  ValueSource values{6, 0.002};
  const std::vector<GemmPath> paths =
      available(kBf16gemmPaths);
  for (const EdgeCase& e : edge_cases()) {
    const auto a = make_matrix<uint16_t>(e.shape.m, e.shape.k, e.a_layout, [&] { return values.bf16(); });
    const auto b = make_matrix<uint16_t>(e.shape.k, e.shape.n, e.b_layout, [&] { return values.bf16(); });
    const OutputMatrix start = make_output(e.shape.m, e.shape.n, values);
    OutputMatrix want = start;
    bf16gemm_reference(e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(),
                       want.rs, e.accumulate);
    for (GemmPath path : paths) {
      OutputMatrix got = start;
      bf16gemm_on(path, e.shape.m, e.shape.n, e.shape.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(),
                  got.rs, e.accumulate, 2);
      ASSERT_TRUE(same_bits(got.data, want.data, false)) << gemm_path_name(path) << " " << describe(e);
    }
  }
}

TEST(GemmBf16, EveryPathMatchesTheReferenceOnASizeGrid) {
  expect_the_reference_on_the_size_grid<uint16_t>(12, available(kBf16gemmPaths));
}

TEST(GemmBf16, SpecialValuesFollowTheReferenceExactly) {
  ValueSource values{7, 0.3};
  for (GemmPath path : available(kBf16gemmPaths))
    for (Shape s : {Shape{15, 33, 7}, Shape{30, 70, 41}}) {
      const auto a = make_matrix<uint16_t>(s.m, s.k, Layout::RowMajor, [&] { return values.bf16(); });
      const auto b = make_matrix<uint16_t>(s.k, s.n, Layout::RowMajor, [&] { return values.bf16(); });
      OutputMatrix want = make_output(s.m, s.n, values), got = want;
      bf16gemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, true);
      bf16gemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs, true, 2);
      EXPECT_TRUE(same_bits(got.data, want.data, false)) << gemm_path_name(path);
    }
}

TEST(GemmBf16, EveryPathMatchesTheReferenceAtTheUnderflowEdge) {
  // Products near 2^-150 and 2^-126 against C ≈ ±2^-126, one or two pairs:
  // DAZ, FTZ and tininess after rounding decide most results. This is where
  // the FMA path's MXCSR environment must agree with VDPBF16PS.
  ValueSource source{9, 0.0};
  auto rng = [&] { return source.next(); };
  auto edge_bf16 = [&] {
    const int exponent = -76 + static_cast<int>(rng() % 16) + (rng() % 4 == 0 ? 12 : 0);
    return static_cast<uint16_t>((rng() & 1) << 15 | static_cast<uint32_t>(exponent + 127) << 7 | (rng() & 0x7F));
  };
  for (int64_t k : {1, 2, 3, 4}) {
    const Shape s{16, 40, k};
    const auto a = make_matrix<uint16_t>(s.m, s.k, Layout::RowMajor, edge_bf16);
    const auto b = make_matrix<uint16_t>(s.k, s.n, Layout::RowMajor, edge_bf16);
    OutputMatrix start{std::vector<float>(s.m * (s.n + 3)), s.n + 3};
    for (float& x : start.data)
      x = float_from_bits(static_cast<uint32_t>(rng() & 1) << 31 | (0x00800000u - 2 + static_cast<uint32_t>(rng() % 6)));
    for (GemmPath path : available(kBf16gemmPaths)) {
      OutputMatrix want = start, got = start;
      bf16gemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, true);
      bf16gemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs, true, 1);
      EXPECT_TRUE(same_bits(got.data, want.data, false)) << gemm_path_name(path) << ", k = " << k;
    }
  }
}

TEST(GemmBf16, ThreadCountChangesNoBit) {
  ValueSource values{8, 0.0};
  const Shape s{30, 70, 301};
  const auto a = make_matrix<uint16_t>(s.m, s.k, Layout::RowMajor, [&] { return values.bf16(); });
  const auto b = make_matrix<uint16_t>(s.k, s.n, Layout::RowMajor, [&] { return values.bf16(); });
  const OutputMatrix start = make_output(s.m, s.n, values);
  for (GemmPath path : available(kBf16gemmPaths)) {
    OutputMatrix one = start;
    bf16gemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, one.data.data(), one.rs, false, 1);
    for (int threads : {2, 3}) {
      OutputMatrix many = start;
      bf16gemm_on(path, s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, many.data.data(), many.rs, false,
                  threads);
      EXPECT_TRUE(same_bits(many.data, one.data, false)) << gemm_path_name(path) << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace quire::native
