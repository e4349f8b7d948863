#pragma once
// What the tests of gemm.h's products share: operands at any strides filled
// from a small deterministic generator, C with sentinels in its row padding,
// and the grid of edge sizes. gemm_test.cpp checks every path here against
// the references; tests/gemm_digest.cpp computes the same kind of products
// on another processor (aarch64 under qemu-user) and digests their bits. The
// values depend on the seed alone, never on the compiler or the processor:
// every draw is sequenced and integer-only.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <iterator>
#include <limits>
#include <vector>

namespace quire::native::gemm_testing {

// A rows × cols matrix read as data[i*rs + j*cs].
template <typename T>
struct StridedMatrix {
  std::vector<T> data;
  int64_t rs = 0, cs = 0;
  const T* ptr() const { return data.data(); }
};

enum class Layout { RowMajor, ColumnMajor, Gapped };
inline constexpr Layout kLayouts[] = {Layout::RowMajor, Layout::ColumnMajor, Layout::Gapped};

inline const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::RowMajor:
      return "row-major";
    case Layout::ColumnMajor:
      return "column-major";
    case Layout::Gapped:
      return "gapped";
  }
  return "?";
}

// Fills every element through `draw`, the gaps between them too (a path that
// read a gap would then differ from the reference).
template <typename T, typename Draw>
StridedMatrix<T> make_matrix(int64_t rows, int64_t cols, Layout layout, Draw&& draw) {
  StridedMatrix<T> m;
  switch (layout) {
    case Layout::RowMajor:
      m.rs = cols, m.cs = 1;
      break;
    case Layout::ColumnMajor:
      m.rs = 1, m.cs = rows;
      break;
    case Layout::Gapped:
      m.rs = 2 * cols + 3, m.cs = 2;
      break;  // every other element, rows padded
  }
  const int64_t size = rows == 0 || cols == 0 ? 1 : (rows - 1) * m.rs + (cols - 1) * m.cs + 1;
  m.data.resize(size);
  for (T& x : m.data) x = draw();
  return m;
}

// Values whose exponents vary (2^-6 to 2^7 in magnitude, random signs and
// significands), so that any change of order or rounding shows; with
// probability special_rate a special value instead. A small generator
// (SplitMix64) rather than <random>'s distributions, which dominate the
// suite's time in the unoptimized sanitizer build.
struct ValueSource {
  uint64_t state;
  double special_rate;

  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
  }
  bool special() { return static_cast<double>(next() >> 11) * 0x1p-53 < special_rate; }

  float f32() {
    if (special()) {
      static const float kSpecials[] = {0.0f,
                                        -0.0f,
                                        std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        std::bit_cast<float>(0x7FC00123u),  // quiet NaN, payload
                                        std::bit_cast<float>(0xFF812345u),  // signalling NaN, negative
                                        0x1p-149f,
                                        -0x1.8p-140f,
                                        0x1p-126f,
                                        std::numeric_limits<float>::max(),
                                        -0x1p100f,
                                        0x1p-100f};
      return kSpecials[next() % std::size(kSpecials)];
    }
    const uint64_t r = next();
    const uint32_t sign = r & 1, exponent = 127 - 6 + (r >> 1) % 14, significand = (r >> 8) & 0x7FFFFF;
    return std::bit_cast<float>(sign << 31 | exponent << 23 | significand);
  }

  uint16_t bf16() {
    if (special()) {
      static const uint16_t kSpecials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFF85,   // ±0, ±∞, NaNs
                                           0x0001, 0x807F, 0x0080, 0x7F7F, 0x1F80, 0x2000};  // subnormals, extremes
      return kSpecials[next() % std::size(kSpecials)];
    }
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(f32()) >> 16);
  }

  // bf16 near 2^-64 (2^-76 … 2^-49, a quarter 2^12 larger), whose products
  // lie near 2^-150 … 2^-98: with C near ±2^-126 (below), DAZ, FTZ and where
  // tininess is detected decide most results.
  uint16_t bf16_near_underflow() {
    const uint64_t exponent_draw = next(), lift_draw = next(), sign_draw = next(), significand_draw = next();
    const int exponent = -76 + static_cast<int>(exponent_draw % 16) + (lift_draw % 4 == 0 ? 12 : 0);
    return static_cast<uint16_t>((sign_draw & 1) << 15 | static_cast<uint32_t>(exponent + 127) << 7 |
                                 (significand_draw & 0x7F));
  }
  // f32 within a few units of ±2^-126, subnormal or normal.
  float f32_near_underflow() {
    const uint64_t sign_draw = next(), offset_draw = next();
    return std::bit_cast<float>(static_cast<uint32_t>(sign_draw & 1) << 31 |
                                (0x00800000u - 2 + static_cast<uint32_t>(offset_draw % 6)));
  }
};

// The C operand: m × n with rows of c_rs = n + 3 elements; the padding holds
// a sentinel that no path may touch.
inline constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;
struct OutputMatrix {
  std::vector<float> data;
  int64_t rs;
};
inline OutputMatrix make_output(int64_t m, int64_t n, ValueSource& values) {
  OutputMatrix c{std::vector<float>(std::max<int64_t>(1, m * (n + 3))), n + 3};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c.rs; ++j)
      c.data[i * c.rs + j] = j < n ? values.f32() : std::bit_cast<float>(kSentinelBits);
  return c;
}

struct Shape {
  int64_t m, n, k;
};

struct EdgeCase {
  Shape shape;
  Layout a_layout, b_layout;
  bool accumulate;
};

// Every size of {1, 7, 17, 33, 257} in each dimension (k also 1030, past
// the k block of 1024), the layouts taken in turn and every other case
// accumulating; products over `max_multiply_adds` are left out (to keep the
// suite fast under the sanitizers, or under an emulator).
inline std::vector<EdgeCase> size_grid(int64_t max_multiply_adds) {
  const int64_t sizes[] = {1, 7, 17, 33, 257};
  std::vector<EdgeCase> cases;
  int turn = 0;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{17}, int64_t{33}, int64_t{257}, int64_t{1030}}) {
        if (m * n * k > max_multiply_adds) continue;
        cases.push_back({{m, n, k}, kLayouts[turn % 3], kLayouts[turn / 3 % 3], turn % 2 == 1});
        ++turn;
      }
  return cases;
}

}  // namespace quire::native::gemm_testing
