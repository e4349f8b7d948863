#include "quire/runtime/float_types.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace quire::runtime {

namespace {

/// A quiet f64 NaN carrying the sign of `sign_source`.
double quiet_nan_like(double sign_source) {
  return std::copysign(std::numeric_limits<double>::quiet_NaN(), sign_source);
}

/// n rounded to an integer, ties to even; n ≥ 0 and below 2^53. Written out
/// rather than std::nearbyint so that it does not depend on the FPU rounding
/// mode. floor and the subtraction are exact for such n.
double round_half_even(double n) {
  double whole = std::floor(n);
  double frac = n - whole;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(whole, 2.0) == 1.0)) whole += 1.0;
  return whole;
}

/// The one rounding every conversion derives from: finite x rounded to nearest
/// (ties to even) among the numbers with `precision` significant bits whose
/// exponent is at least min_exp (so subnormals keep a fixed spacing), with no
/// upper exponent bound; the caller decides about overflow.
///
/// Exact in f64 for every quire format: with e = max(ilogb x, min_exp) the
/// spacing of the target there is 2^(e − p + 1); scaling |x| by its inverse
/// gives a value below 2^p ≤ 2^53 with no bits lost (the scale is a power of
/// two and the result is not an f64 subnormal), rounding it is exact, and
/// scaling back gives an integer below 2^p times a power of two no smaller
/// than 2^-1074, which f64 holds (or ∞ if the exponent passes 1023, which is
/// overflow for every format).
double round_significand(double x, int precision, int min_exp) {
  if (x == 0) return x;
  int e = std::max(std::ilogb(x), min_exp);
  int shift = e - (precision - 1);
  double scaled = std::ldexp(std::fabs(x), -shift);
  return std::copysign(std::ldexp(round_half_even(scaled), shift), x);
}

/// The sign bit of `x` placed at bit storage_bits − 1.
uint64_t sign_bit(const FloatTypeInfo& f, double x) {
  return std::signbit(x) ? uint64_t{1} << (f.storage_bits - 1) : 0;
}

/// The pattern of ±Inf (only for formats that have one).
uint64_t infinity_bits(const FloatTypeInfo& f, double x) {
  uint64_t exponent_all_ones = (uint64_t{1} << f.exponent_bits()) - 1;
  return sign_bit(f, x) | exponent_all_ones << f.mantissa_bits();
}

}  // namespace

const char* float_type_name(FloatType t) { return float_type_info(t).name; }

std::optional<FloatType> parse_float_type(std::string_view name) {
  for (const FloatTypeInfo& f : kFloatTypes)
    if (name == f.name) return f.type;
  return std::nullopt;
}

double round_to_general(FloatType t, double x) {
  const FloatTypeInfo& f = float_type_info(t);
  if (std::isnan(x)) return quiet_nan_like(x);
  if (t == FloatType::F64) return x;
  // The processor's conversion to binary32 is this same rounding (float_types.h).
  if (t == FloatType::F32) return static_cast<double>(static_cast<float>(x));
  if (std::isinf(x)) return f.has_infinities ? x : std::copysign(f.largest_finite, x);
  double r = round_significand(x, f.precision, f.min_exp);
  if (std::fabs(r) > f.largest_finite)
    return f.has_infinities ? std::copysign(std::numeric_limits<double>::infinity(), x)
                            : std::copysign(f.largest_finite, x);
  return r;
}

uint64_t encode_bits(FloatType t, double x) {
  const FloatTypeInfo& f = float_type_info(t);
  if (std::isnan(x)) return sign_bit(f, x) | f.quiet_nan_bits;
  if (t == FloatType::F64) return std::bit_cast<uint64_t>(x);
  double r = round_to(t, x);  // e4m3 has saturated: r is ±Inf only where f has Inf
  if (std::isinf(r)) return infinity_bits(f, x);
  if (r == 0) return sign_bit(f, x);
  // r is exact in the format: split it into the exponent and mantissa fields.
  int e = std::ilogb(r);
  uint64_t exponent_field = 0;
  if (e < f.min_exp) {
    e = f.min_exp;  // subnormal: field 0, spacing that of the smallest binade
  } else {
    exponent_field = static_cast<uint64_t>(e + f.exponent_bias());
  }
  // The significand as an integer below 2^p (exact: r has p significant bits).
  auto significand = static_cast<uint64_t>(std::ldexp(std::fabs(r), f.mantissa_bits() - e));
  uint64_t mantissa = significand & ((uint64_t{1} << f.mantissa_bits()) - 1);
  return sign_bit(f, x) | exponent_field << f.mantissa_bits() | mantissa;
}

double decode_bits(FloatType t, uint64_t bits) {
  const FloatTypeInfo& f = float_type_info(t);
  if (t == FloatType::F64) {
    double v = std::bit_cast<double>(bits);
    return std::isnan(v) ? quiet_nan_like(v) : v;
  }
  const int m = f.mantissa_bits();
  const uint64_t exponent_max = (uint64_t{1} << f.exponent_bits()) - 1;
  const uint64_t mantissa_max = (uint64_t{1} << m) - 1;
  const bool negative = (bits >> (f.storage_bits - 1)) & 1;
  const uint64_t exponent_field = (bits >> m) & exponent_max;
  const uint64_t mantissa = bits & mantissa_max;
  const double sign = negative ? -1.0 : 1.0;
  if (exponent_field == exponent_max) {
    if (f.has_infinities) {
      return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : quiet_nan_like(sign);
    }
    if (mantissa == mantissa_max) return quiet_nan_like(sign);  // e4m3: S.1111.111 only
  }
  if (exponent_field == 0) return sign * std::ldexp(static_cast<double>(mantissa), f.min_exp - m);
  int e = static_cast<int>(exponent_field) - f.exponent_bias();
  return sign * std::ldexp(static_cast<double>((uint64_t{1} << m) | mantissa), e - m);
}

uint32_t encode_f32(double x) { return static_cast<uint32_t>(encode_bits(FloatType::F32, x)); }
double decode_f32(uint32_t bits) { return decode_bits(FloatType::F32, bits); }
uint16_t encode_bf16(double x) { return static_cast<uint16_t>(encode_bits(FloatType::BF16, x)); }
double decode_bf16(uint16_t bits) { return decode_bits(FloatType::BF16, bits); }
uint16_t encode_f16(double x) { return static_cast<uint16_t>(encode_bits(FloatType::F16, x)); }
double decode_f16(uint16_t bits) { return decode_bits(FloatType::F16, bits); }
uint8_t encode_fp8e4m3(double x) { return static_cast<uint8_t>(encode_bits(FloatType::FP8E4M3, x)); }
double decode_fp8e4m3(uint8_t bits) { return decode_bits(FloatType::FP8E4M3, bits); }
uint8_t encode_fp8e5m2(double x) { return static_cast<uint8_t>(encode_bits(FloatType::FP8E5M2, x)); }
double decode_fp8e5m2(uint8_t bits) { return decode_bits(FloatType::FP8E5M2, bits); }

}  // namespace quire::runtime
