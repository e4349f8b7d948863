#pragma once
// The reference interpreter's casts (`x as bf16`): one-step rounding of an f64
// value to a narrower storage type. The formats and the rounding live in
// float_types.h; this header keeps the interpreter's spelling.

#include "quire/runtime/float_types.h"

namespace quire::runtime {

using FloatFormat = FloatType;

inline constexpr FloatType kF32 = FloatType::F32;
inline constexpr FloatType kBf16 = FloatType::BF16;
inline constexpr FloatType kF16 = FloatType::F16;

/// x rounded to `f`, to nearest with ties to even (see round_to).
inline double round_to_format(double x, FloatFormat f) { return round_to(f, x); }

}  // namespace quire::runtime
