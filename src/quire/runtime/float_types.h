#pragma once
// quire's float storage types and the conversions of an f64 value into them.
//
// Every conversion rounds to nearest, ties to even, in ONE step from f64 (never
// through f32, which would round twice). The formats (precision p counts the
// implicit bit; exponents are those of normal numbers, value = 1.m × 2^e):
//
//   type     bits  p   min_exp max_exp  infinities  largest finite
//   f64       64  53   -1022   1023     yes         (2 − 2^-52) × 2^1023
//   f32       32  24    -126    127     yes         (2 − 2^-23) × 2^127
//   bf16      16   8    -126    127     yes         (2 − 2^-7) × 2^127
//   f16       16  11     -14     15     yes         65504
//   fp8e4m3    8   4      -6      8     no          448    (OCP E4M3FN: bias 7)
//   fp8e5m2    8   3     -14     15     yes         57344  (bias 15, IEEE-like)
//
// fp8e4m3 is the OCP "E4M3FN" format: exponent field 15 holds normal numbers
// except S.1111.111, its only NaN; it has no infinity. fp8 types are storage
// only (the formats Hopper tensor cores read); arithmetic happens wider.
//
// The rules, for every type T:
//   - NaN → T's quiet NaN with the sign kept: f64 0x7FF8…, f32 0x7FC00000,
//     bf16 0x7FC0, f16 0x7E00, e5m2 0x7E, e4m3 0x7F, each | sign bit. Any NaN
//     pattern decodes to a quiet f64 NaN of the same sign (payloads dropped).
//   - ±0 → ±0; subnormals are produced and decoded exactly.
//   - A value below half the smallest subnormal goes to ±0; exactly half ties
//     to even, which is zero.
//   - Overflow (the value rounded with an unbounded exponent exceeds the
//     largest finite) and ±Inf → ±Inf; for e4m3, which has no Inf, both
//     saturate to ±448. That is NVIDIA's satfinite conversion; PyTorch and
//     ml_dtypes give NaN instead.
//   - round_to(T, x) == decode_T(encode_T(x)) for every x, NaN included.
//
// Written by hand rather than taken from a library: libraries round f64 to
// bf16/fp8 through f32 (ml_dtypes, Eigen do) and differ on fp8 overflow and
// NaN patterns; quire needs one-step rounding with the semantics above.

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace quire::runtime {

/// The storage types of reals, widest first.
enum class FloatType : uint8_t { F64, F32, BF16, F16, FP8E4M3, FP8E5M2 };

inline constexpr int kFloatTypeCount = 6;

/// The properties of one storage type (one row of kFloatTypes).
struct FloatTypeInfo {
  FloatType type;
  const char* name;           ///< as written in quire source: "bf16"
  int storage_bits;           ///< 1 sign + exponent bits + (precision − 1)
  int precision;              ///< p: significand bits including the implicit one
  int min_exp;                ///< exponent of the smallest normal number
  int max_exp;                ///< exponent of the largest finite number
  bool has_infinities;        ///< false: overflow saturates (e4m3)
  double unit_roundoff;       ///< u = 2^-p, the relative error bound of one rounding
  double largest_finite;      ///< ±this is the widest finite value
  double smallest_subnormal;  ///< 2^(min_exp − p + 1)
  uint64_t quiet_nan_bits;    ///< the canonical NaN, positive sign

  constexpr int mantissa_bits() const { return precision - 1; }
  constexpr int exponent_bits() const { return storage_bits - precision; }
  constexpr int exponent_bias() const { return 1 - min_exp; }
};

/// The table of storage types, indexed by FloatType.
inline constexpr FloatTypeInfo kFloatTypes[kFloatTypeCount] = {
    {FloatType::F64, "f64", 64, 53, -1022, 1023, true, 0x1p-53, 0x1.fffffffffffffp1023, 0x1p-1074, 0x7FF8000000000000},
    {FloatType::F32, "f32", 32, 24, -126, 127, true, 0x1p-24, 0x1.fffffep127, 0x1p-149, 0x7FC00000},
    {FloatType::BF16, "bf16", 16, 8, -126, 127, true, 0x1p-8, 0x1.fep127, 0x1p-133, 0x7FC0},
    {FloatType::F16, "f16", 16, 11, -14, 15, true, 0x1p-11, 0x1.ffcp15, 0x1p-24, 0x7E00},
    // 448 = 1.110b × 2^8: 1.111b × 2^8 is the NaN pattern.
    {FloatType::FP8E4M3, "fp8e4m3", 8, 4, -6, 8, false, 0x1p-4, 0x1.cp8, 0x1p-9, 0x7F},
    {FloatType::FP8E5M2, "fp8e5m2", 8, 3, -14, 15, true, 0x1p-3, 0x1.cp15, 0x1p-16, 0x7E},
};
static_assert(
    [] {
      for (int i = 0; i < kFloatTypeCount; ++i)
        if (static_cast<int>(kFloatTypes[i].type) != i) return false;
      return true;
    }(),
    "kFloatTypes is indexed by FloatType");

constexpr const FloatTypeInfo& float_type_info(FloatType t) { return kFloatTypes[static_cast<int>(t)]; }

/// "f64", "f32", "bf16", "f16", "fp8e4m3", "fp8e5m2".
const char* float_type_name(FloatType t);
/// The inverse of float_type_name; nullopt for any other string.
std::optional<FloatType> parse_float_type(std::string_view name);

/// round_to for every case the inline fast path below does not take.
double round_to_general(FloatType t, double x);

/// x rounded to t's values (see the rules above), as an f64. Inline for a
/// number under f64 or f32, what the interpreters and the optimizer round
/// per element: the processor's conversion to binary32 is this rounding
/// (to nearest even, gradual underflow, overflow to ±inf; fast-math, which
/// would flush subnormals, is never on). A NaN takes the general path,
/// which makes it the quiet NaN of its sign.
inline double round_to(FloatType t, double x) {
  if (!std::isnan(x)) {
    if (t == FloatType::F64) return x;
    if (t == FloatType::F32) return static_cast<double>(static_cast<float>(x));
    if (t == FloatType::BF16 || t == FloatType::F16) {
      // A normal result: the top precision − 1 mantissa bits of the double,
      // ties to even on its bit pattern in one step (the carry of a round-up
      // moves into the exponent), as the general path rounds it and
      // native/c_emit.cpp's quire_round_narrow does; what leaves the format's
      // normal finite range takes the general path.
      const FloatTypeInfo& f = float_type_info(t);
      const uint64_t bits = std::bit_cast<uint64_t>(x);
      const uint64_t sign = bits & UINT64_C(0x8000000000000000);
      const uint64_t magnitude = bits ^ sign;
      const int exponent = static_cast<int>(magnitude >> 52) - 1023;
      if (exponent >= f.min_exp && exponent <= f.max_exp) {
        const int dropped = 52 - f.mantissa_bits();
        const uint64_t kept_lsb = (magnitude >> dropped) & 1;
        const uint64_t rounded =
            (magnitude + (UINT64_C(1) << (dropped - 1)) - 1 + kept_lsb) & ~((UINT64_C(1) << dropped) - 1);
        const double r = std::bit_cast<double>(rounded);
        if (r <= f.largest_finite) return std::bit_cast<double>(rounded | sign);
      }
    }
  }
  return round_to_general(t, x);
}

/// round_to(BF16, f) for an f32 value f, as a float: bf16 keeps f32's
/// exponent range, so ties to even on f's bit pattern is the same rounding
/// (subnormals, the carry into infinity, and a NaN made the quiet NaN of its
/// sign included), with no branch for a loop around it to stumble on.
inline float round_bf16_of_f32(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (b + UINT32_C(0x7FFF) + ((b >> 16) & 1u)) & UINT32_C(0xFFFF0000);
  const uint32_t nan = (b & UINT32_C(0x80000000)) | UINT32_C(0x7FC00000);
  // NaN told by the bits (a magnitude above infinity's) and chosen by a mask,
  // which a loop of these vectorizes, where `f != f ? … : …` left a branch.
  const uint32_t is_nan = 0u - static_cast<uint32_t>((b & UINT32_C(0x7FFFFFFF)) > UINT32_C(0x7F800000));
  return std::bit_cast<float>((nan & is_nan) | (rounded & ~is_nan));
}

/// round_to(F16, f) for an f32 value f, as a float, without a branch (the
/// native kernels' quire_round_f16_of_f32f is its C twin, native/c_emit.cpp):
/// in f16's normal range ties to even on f's bit pattern with 13 bits
/// dropped, the carry moving into the exponent; past the largest finite
/// f16 (65504), infinity; below 2^-14, the nearest multiple of 2^-24 (f16's
/// subnormal step), ties to even, by the sum with 0.5, whose ulp is 2^-24
/// (taking 0.5 back is exact); a NaN the quiet NaN of its sign.
inline float round_f16_of_f32(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  const uint32_t sign = b & UINT32_C(0x80000000);
  const uint32_t mag = b ^ sign;
  const uint32_t rounded = (mag + UINT32_C(0xFFF) + ((mag >> 13) & 1u)) & UINT32_C(0xFFFFE000);
  const uint32_t normal = rounded > UINT32_C(0x477FE000) ? UINT32_C(0x7F800000) : rounded;
  const uint32_t sub = std::bit_cast<uint32_t>((std::bit_cast<float>(mag) + 0.5f) - 0.5f);
  const uint32_t m = mag < UINT32_C(0x38800000) ? sub : normal;
  return std::bit_cast<float>(mag > UINT32_C(0x7F800000) ? (sign | UINT32_C(0x7FC00000)) : (sign | m));
}

/// x rounded to t, as t's bit pattern in the low storage_bits bits.
uint64_t encode_bits(FloatType t, double x);
/// The value of t's bit pattern `bits` (bits above storage_bits are ignored).
double decode_bits(FloatType t, uint64_t bits);

uint32_t encode_f32(double x);
double decode_f32(uint32_t bits);
uint16_t encode_bf16(double x);
double decode_bf16(uint16_t bits);
uint16_t encode_f16(double x);
double decode_f16(uint16_t bits);
uint8_t encode_fp8e4m3(double x);
double decode_fp8e4m3(uint8_t bits);
uint8_t encode_fp8e5m2(double x);
double decode_fp8e5m2(uint8_t bits);

}  // namespace quire::runtime
