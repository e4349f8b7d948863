#pragma once
// Rounding an f64 value to a narrower IEEE-style binary format, to nearest
// with ties to even, in one step (no double rounding through f32). Used by the
// reference interpreter for explicit casts (`x as bf16`) while it holds every
// value in f64.

#include <cmath>
#include <string_view>

namespace quire::runtime {

/// A binary floating-point format: `precision` significand bits (with the
/// implicit one), exponents of normal numbers in [min_exp, max_exp].
struct FloatFormat {
  int precision;
  int min_exp;
  int max_exp;
};

inline constexpr FloatFormat kF32{24, -126, 127};
inline constexpr FloatFormat kBf16{8, -126, 127};
inline constexpr FloatFormat kF16{11, -14, 15};

/// x rounded to `f` (ties to even; subnormals kept; overflow to ±inf; NaN, ±inf
/// and ±0 unchanged). Exact arithmetic: ldexp and nearbyint do not round here.
inline double round_to_format(double x, FloatFormat f) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = std::ilogb(x);
  if (e < f.min_exp) e = f.min_exp;  // below the normal range the spacing stays fixed
  int shift = e - (f.precision - 1);
  double r = std::ldexp(std::nearbyint(std::ldexp(x, -shift)), shift);
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.precision), f.max_exp);
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}

}  // namespace quire::runtime
