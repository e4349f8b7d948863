#pragma once
// The vector instruction set the runtime's hand-written paths may use: what
// the processor reports, capped by the environment variable QUIRE_ISA. Every
// path that chooses its instructions at run time (the products of gemm.h,
// AdamW's element loop, the FMA peak the calibration measures, the native
// backend's C compiler flags) asks widest_isa(), so that one variable makes
// a machine with AVX-512 behave as one with AVX2 or with the baseline only,
// and an aarch64 machine as one without NEON paths: to measure the narrower
// paths where they are not the default, or to keep a program on the paths of
// a smaller machine.
//
// Functions marked QUIRE_WIDEST_VECTORS (widest_vectors.h) are chosen by the
// loader (GCC's target_clones) from the processor alone; the cap does not
// reach them. They hold host loops whose results do not depend on the
// instructions.

#include <cstdint>
#include <string_view>

namespace quire::runtime {

/// The vector levels the runtime has paths for, narrowest first. Neon is
/// aarch64's one level (Advanced SIMD is part of every aarch64 processor),
/// Avx2 and Avx512 are x86-64's; a processor has Baseline and the levels of
/// its own architecture, so the order compares widths, and only within an
/// architecture (capped_isa).
enum class Isa : uint8_t {
  Baseline,  ///< portable code only: x86-64's own SSE2, or any processor without a level below
  Neon,      ///< aarch64's Advanced SIMD: 128-bit vectors, 32 registers, fused multiply-add
  Avx2,      ///< AVX2 with FMA and F16C: 256-bit vectors, 16 ymm registers
  Avx512,    ///< AVX-512F/BW/DQ/VL with FMA: 512-bit vectors, 32 zmm registers
};

/// "baseline", "neon", "avx2", "avx512": QUIRE_ISA's values.
const char* isa_name(Isa isa);

/// What this processor supports: on x86-64 checked with
/// __builtin_cpu_supports, on aarch64 Neon (mandatory there), elsewhere
/// Baseline.
Isa cpu_isa();

/// The cap a QUIRE_ISA value names ("avx512", "avx2", "neon", "baseline");
/// an empty value is no cap (Avx512). Anything else is a RuntimeError that
/// names the variable, the value and the accepted values.
Isa isa_cap(std::string_view value);

/// A processor's level `cpu` under `cap`: the narrower of the two, where a
/// cap above the processor's level is the processor's. A cap of another
/// architecture counts by its width: neon on x86-64 is Baseline (SSE2's
/// width, and x86 has no NEON), avx2 or avx512 on aarch64 is Neon.
Isa capped_isa(Isa cpu, Isa cap);

/// capped_isa(cpu_isa(), the cap QUIRE_ISA names), QUIRE_ISA being read
/// once per process. A bad value throws RuntimeError (isa_cap) on every call.
Isa widest_isa();

}  // namespace quire::runtime
