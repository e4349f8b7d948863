// The products of runtime/gemm.h on the paths this processor chooses (under
// QUIRE_ISA), digested, for tests/system/gemm_aarch64_qemu.py to compare
// across processors: the same program built for x86-64 and for aarch64 (run
// under qemu-user) must print the same digest on every path.
//
//   gemm_digest     prints "sgemm PATH", "bf16gemm PATH", "digest HEX";
//                   exits 1 naming the first case whose bits differ from the
//                   reference, or from another thread count or way of
//                   reading the operands.
//
// It is built from the product's own sources alone (gemm*.cpp, isa.cpp,
// workers.cpp: no other library), so that the cross build needs nothing but
// the cross compiler. The digest is FNV-1a over each result's bits, sgemm's
// NaNs made one NaN first (the contract leaves their payloads open).
//
// Cases (gemm_testing.h's operands, which depend on the seeds alone): every
// size of {1, 7, 17, 33, 257} in m, n and k (k also 1030), row-major,
// column-major and gapped operands, accumulating or not, with sparse special
// values; k across one and several k blocks (1025, 2053, 3101); dense special
// values; and bf16 products at the underflow edge (DAZ, FTZ) and in the
// window where tininess before and after rounding differ.
// Each on 1 and 2 threads, sgemm's also with its operands packed and read in
// place.

#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "quire/runtime/gemm.h"
#include "quire/runtime/gemm_testing.h"

namespace {

using namespace quire::native;
using namespace quire::native::gemm_testing;

// Products over this many multiply-adds are left out of the size grid: the
// emulator runs the references at a few tens of millions a second.
constexpr int64_t kMaxGridMultiplyAdds = 1'200'000;

struct Digest {
  uint64_t hash = 0xCBF29CE484222325u;
  void add(uint32_t word) {
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= (word >> (8 * byte)) & 0xFFu;
      hash *= 0x100000001B3u;
    }
  }
};

std::string describe(const char* product, const Shape& s, Layout a, Layout b, bool accumulate) {
  return std::string(product) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
         ", A " + layout_name(a) + ", B " + layout_name(b) + (accumulate ? ", accumulating" : "");
}

// Whether `got` has `want`'s bits, any NaN matching any NaN where `nan_is_nan`;
// else prints the first difference.
bool same_bits(const std::vector<float>& got, const std::vector<float>& want, bool nan_is_nan,
               const std::string& what) {
  for (size_t e = 0; e < got.size(); ++e) {
    const uint32_t g = std::bit_cast<uint32_t>(got[e]), w = std::bit_cast<uint32_t>(want[e]);
    if (g == w || (nan_is_nan && std::isnan(got[e]) && std::isnan(want[e]))) continue;
    std::fprintf(stderr, "gemm_digest: %s: element %zu is 0x%08" PRIx32 ", want 0x%08" PRIx32 "\n", what.c_str(), e, g,
                 w);
    return false;
  }
  return true;
}

class Run {
 public:
  bool ok = true;
  Digest digest;

  void sgemm_case(const Shape& s, Layout la, Layout lb, bool accumulate, ValueSource& values) {
    if (!ok) return;
    const auto a = make_matrix<float>(s.m, s.k, la, [&] { return values.f32(); });
    const auto b = make_matrix<float>(s.k, s.n, lb, [&] { return values.f32(); });
    const OutputMatrix start = make_output(s.m, s.n, values);
    OutputMatrix want = start;
    sgemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, accumulate);
    const std::string what = describe("sgemm", s, la, lb, accumulate);
    std::vector<float> first;
    for (OperandReads reads : {OperandReads::InPlaceWhereSmall, OperandReads::Packed})
      for (int threads : {1, 2}) {
        OutputMatrix got = start;
        sgemm_on(sgemm_path(), s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs,
                 accumulate, threads, reads);
        const std::string run = what + (reads == OperandReads::Packed ? ", packed, " : ", in place, ") +
                                std::to_string(threads) + " threads";
        ok = ok && same_bits(got.data, want.data, true, run + " against the reference");
        // One path's runs agree exactly, NaN payloads included.
        if (first.empty())
          first = got.data;
        else
          ok = ok && same_bits(got.data, first, false, run + " against the first run");
      }
    for (float x : first) digest.add(std::isnan(x) ? 0x7FC00000u : std::bit_cast<uint32_t>(x));
  }

  template <typename Draw>
  void bf16gemm_case(const Shape& s, Layout la, Layout lb, const OutputMatrix& start, bool accumulate, Draw&& draw) {
    if (!ok) return;
    const auto a = make_matrix<uint16_t>(s.m, s.k, la, draw);
    const auto b = make_matrix<uint16_t>(s.k, s.n, lb, draw);
    OutputMatrix want = start;
    bf16gemm_reference(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, want.data.data(), want.rs, accumulate);
    const std::string what = describe("bf16gemm", s, la, lb, accumulate);
    std::vector<float> first;
    for (int threads : {1, 2}) {
      OutputMatrix got = start;
      bf16gemm(s.m, s.n, s.k, a.ptr(), a.rs, a.cs, b.ptr(), b.rs, b.cs, got.data.data(), got.rs, accumulate, threads);
      ok = ok && same_bits(got.data, want.data, false, what + ", " + std::to_string(threads) + " threads");
      if (first.empty()) first = got.data;
    }
    for (float x : first) digest.add(std::bit_cast<uint32_t>(x));
  }
};

}  // namespace

int main() {
  try {
    std::printf("sgemm %s\nbf16gemm %s\n", gemm_path_name(sgemm_path()), gemm_path_name(bf16gemm_path()));
    Run run;
    // The size grid.
    ValueSource f32_values{11, 0.001}, bf16_values{12, 0.001};
    for (const EdgeCase& e : size_grid(kMaxGridMultiplyAdds)) {
      run.sgemm_case(e.shape, e.a_layout, e.b_layout, e.accumulate, f32_values);
      const OutputMatrix start = make_output(e.shape.m, e.shape.n, bf16_values);
      run.bf16gemm_case(e.shape, e.a_layout, e.b_layout, start, e.accumulate, [&] { return bf16_values.bf16(); });
    }
    // k across k blocks: 1025 is two f32 blocks (1024 each) and two of
    // widened bf16 (1026 units); 2053 and 3101 three and four, the last
    // shorter and odd.
    for (const Shape s : {Shape{9, 13, 1025}, Shape{17, 12, 2053}, Shape{3, 25, 3101}}) {
      run.sgemm_case(s, Layout::RowMajor, Layout::RowMajor, true, f32_values);
      run.sgemm_case(s, Layout::ColumnMajor, Layout::Gapped, false, f32_values);
      const OutputMatrix start = make_output(s.m, s.n, bf16_values);
      run.bf16gemm_case(s, Layout::RowMajor, Layout::ColumnMajor, start, true, [&] { return bf16_values.bf16(); });
    }
    // Dense special values: infinities, NaNs, subnormals, overflow in most chains.
    ValueSource f32_specials{2, 0.3}, bf16_specials{7, 0.3};
    for (const Shape s : {Shape{15, 33, 7}, Shape{30, 70, 41}}) {
      run.sgemm_case(s, Layout::RowMajor, Layout::RowMajor, true, f32_specials);
      const OutputMatrix start = make_output(s.m, s.n, bf16_specials);
      run.bf16gemm_case(s, Layout::RowMajor, Layout::RowMajor, start, true, [&] { return bf16_specials.bf16(); });
    }
    // bf16 at the underflow edge: products near 2^-150 … 2^-98 against C
    // near ±2^-126, one or two pairs and more.
    ValueSource edge{9, 0.0};
    for (int64_t k : {1, 2, 3, 4, 9}) {
      const Shape s{16, 40, k};
      OutputMatrix start{std::vector<float>(s.m * (s.n + 3)), s.n + 3};
      for (float& x : start.data) x = edge.f32_near_underflow();
      run.bf16gemm_case(s, Layout::RowMajor, Layout::RowMajor, start, true, [&] { return edge.bf16_near_underflow(); });
    }
    // bf16 in the window where tininess is detected differently: C ±2^-126
    // and products of magnitude 2^-154 … 2^-150 of either sign, so that
    // many exact results lie just below 2^-126 and round up to it. The step
    // (x86's tininess after rounding) keeps 2^-126 there; AArch64's FPCR.FZ
    // (tininess before rounding) flushes it, and NeonFmaBf16 must redo the
    // tile.
    ValueSource window{13, 0.0};
    const auto window_bf16 = [&] {
      const uint64_t sign = window.next() & 1, exponent = 127 - 77 + window.next() % 2, significand = window.next();
      return static_cast<uint16_t>(sign << 15 | exponent << 7 | (significand & 0x7F));
    };
    for (int64_t k : {1, 2, 5}) {
      const Shape s{9, 13, k};
      OutputMatrix start{std::vector<float>(s.m * (s.n + 3)), s.n + 3};
      for (float& x : start.data) x = window.next() % 2 == 0 ? 0x1p-126f : -0x1p-126f;
      run.bf16gemm_case(s, Layout::RowMajor, Layout::RowMajor, start, true, window_bf16);
    }
    if (!run.ok) return 1;
    std::printf("digest %016" PRIx64 "\n", run.digest.hash);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_digest: %s\n", e.what());
    return 1;
  }
}
