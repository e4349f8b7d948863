#pragma once
// The vector instruction set the runtime's hand-written paths may use: what
// the processor reports, capped by the environment variable QUIRE_ISA. Every
// path that chooses its instructions at run time (the products of gemm.h,
// AdamW's element loop, the FMA peak the calibration measures, the native
// backend's C compiler flags) asks widest_isa(), so that one variable makes
// a machine with AVX-512 behave as one with AVX2 or with the baseline only:
// to measure the narrower paths where they are not the default, or to keep a
// program on the paths of a smaller machine.
//
// Functions marked QUIRE_WIDEST_VECTORS (widest_vectors.h) are chosen by the
// loader (GCC's target_clones) from the processor alone; the cap does not
// reach them. They hold host loops whose results do not depend on the
// instructions.

#include <cstdint>
#include <string_view>

namespace quire::runtime {

/// The x86-64 vector levels the runtime has paths for, narrowest first.
enum class Isa : uint8_t {
  Baseline,  ///< x86-64's own SSE2 (and any non-x86 processor): portable code only
  Avx2,      ///< AVX2 with FMA and F16C: 256-bit vectors, 16 ymm registers
  Avx512,    ///< AVX-512F/BW/DQ/VL with FMA: 512-bit vectors, 32 zmm registers
};

/// "baseline", "avx2", "avx512": QUIRE_ISA's values.
const char* isa_name(Isa isa);

/// What this processor supports, checked with __builtin_cpu_supports.
Isa cpu_isa();

/// The cap a QUIRE_ISA value names ("avx512", "avx2", "baseline"); an empty
/// value is no cap (Avx512). Anything else is a RuntimeError that names the
/// variable, the value and the accepted values.
Isa isa_cap(std::string_view value);

/// cpu_isa() capped by QUIRE_ISA, which is read once per process: a cap
/// above what the processor has is the processor's. A bad value throws
/// RuntimeError (isa_cap) on every call.
Isa widest_isa();

}  // namespace quire::runtime
