#pragma once
// The floating-point environment under which the f32 micro-kernels of the
// widened-bf16 paths (Avx2FmaBf16, Avx512FmaBf16; gemm.h) run. Internal to
// gemm_avx2.cpp and gemm_avx512.cpp; x86-64 only.

#include <xmmintrin.h>

namespace quire::native::gemm_detail {

// MXCSR while the bf16-via-FMA tiles run: VDPBF16PS's environment. With
// flush-to-zero, denormals-are-zero and round-to-nearest-even, VFMADD231PS
// (xmm, ymm or zmm: MXCSR governs every VEX and EVEX form alike) gives each
// VDPBF16PS step's bits exactly (x86 detects tininess after rounding, as
// VDPBF16PS does); gemm_test.cpp checks it against the reference.
class Bf16FloatEnvironment {
 public:
  Bf16FloatEnvironment() : saved_(_mm_getcsr()) {
    _mm_setcsr((saved_ & ~kRoundingMask) | kFlushToZero | kDenormalsAreZero);
  }
  ~Bf16FloatEnvironment() { _mm_setcsr(saved_); }
  Bf16FloatEnvironment(const Bf16FloatEnvironment&) = delete;
  Bf16FloatEnvironment& operator=(const Bf16FloatEnvironment&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 1u << 15;
  static constexpr unsigned kDenormalsAreZero = 1u << 6;
  static constexpr unsigned kRoundingMask = 3u << 13;  // 00: to nearest even
  unsigned saved_;
};

}  // namespace quire::native::gemm_detail
