#include "quire/runtime/float_types.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>


namespace quire::runtime {
namespace {

// An independent description of each format, written from the format specs
// (not from kFloatTypes), and a bit-level reference encoder and decoder that
// work on integers: they build or take apart f64 bit patterns directly and
// never call ldexp, ilogb or the FPU's rounding, unlike float_types.cpp.
struct ReferenceFormat {
  FloatType type;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinities;  // false: OCP E4M3FN, S.1111.111 is NaN, no Inf
  uint64_t quiet_nan;
};

constexpr ReferenceFormat kRefF32{FloatType::F32, 8, 23, 127, true, 0x7FC00000};
constexpr ReferenceFormat kRefBf16{FloatType::BF16, 8, 7, 127, true, 0x7FC0};
constexpr ReferenceFormat kRefF16{FloatType::F16, 5, 10, 15, true, 0x7E00};
constexpr ReferenceFormat kRefE4M3{FloatType::FP8E4M3, 4, 3, 7, false, 0x7F};
constexpr ReferenceFormat kRefE5M2{FloatType::FP8E5M2, 5, 2, 15, true, 0x7E};

/// The formats small enough to enumerate (2^16 or 2^8 patterns).
constexpr ReferenceFormat kEnumerable[] = {kRefBf16, kRefF16, kRefE4M3, kRefE5M2};
/// Every format narrower than f64.
constexpr ReferenceFormat kNarrower[] = {kRefF32, kRefBf16, kRefF16, kRefE4M3, kRefE5M2};

int storage_bits(const ReferenceFormat& f) { return 1 + f.exponent_bits + f.mantissa_bits; }
uint64_t sign_mask(const ReferenceFormat& f) { return uint64_t{1} << (storage_bits(f) - 1); }
uint64_t exponent_max(const ReferenceFormat& f) { return (uint64_t{1} << f.exponent_bits) - 1; }
uint64_t mantissa_max(const ReferenceFormat& f) { return (uint64_t{1} << f.mantissa_bits) - 1; }

bool reference_is_nan(const ReferenceFormat& f, uint64_t bits) {
  uint64_t e = (bits >> f.mantissa_bits) & exponent_max(f), m = bits & mantissa_max(f);
  if (e != exponent_max(f)) return false;
  return f.has_infinities ? m != 0 : m == mantissa_max(f);
}

/// The pattern of the largest finite magnitude.
uint64_t reference_max_finite(const ReferenceFormat& f) {
  return f.has_infinities ? ((exponent_max(f) - 1) << f.mantissa_bits) | mantissa_max(f)
                          : (exponent_max(f) << f.mantissa_bits) | (mantissa_max(f) - 1);
}

/// What a rounding that leaves the finite range produces: ±Inf, or ±max (e4m3).
uint64_t reference_overflow(const ReferenceFormat& f, uint64_t sign) {
  return sign | (f.has_infinities ? exponent_max(f) << f.mantissa_bits : reference_max_finite(f));
}

/// The f64 bit pattern of a (non-NaN) pattern of f, assembled field by field.
uint64_t reference_decode(const ReferenceFormat& f, uint64_t bits) {
  uint64_t sign = ((bits >> (storage_bits(f) - 1)) & 1) << 63;
  uint64_t e = (bits >> f.mantissa_bits) & exponent_max(f), m = bits & mantissa_max(f);
  if (f.has_infinities && e == exponent_max(f)) return sign | uint64_t{0x7FF} << 52;  // m == 0: Inf
  if (e == 0 && m == 0) return sign;
  int64_t exponent;
  uint64_t fraction;  // the bits after the leading one, left-aligned to f64's 52
  if (e == 0) {       // subnormal m × 2^(1 − bias − mbits): normalise m
    int lead = std::bit_width(m) - 1;
    exponent = 1 - f.bias - f.mantissa_bits + lead;
    fraction = (m - (uint64_t{1} << lead)) << (52 - lead);
  } else {
    exponent = static_cast<int64_t>(e) - f.bias;
    fraction = m << (52 - f.mantissa_bits);
  }
  return sign | static_cast<uint64_t>(exponent + 1023) << 52 | fraction;
}

/// x's pattern in f, rounded to nearest even by shifting x's integer
/// significand and inspecting the discarded bits.
uint64_t reference_encode(const ReferenceFormat& f, double x) {
  uint64_t b = std::bit_cast<uint64_t>(x);
  uint64_t sign = (b >> 63) ? sign_mask(f) : 0;
  int64_t e64 = (b >> 52) & 0x7FF;
  uint64_t m64 = b & ((uint64_t{1} << 52) - 1);
  if (e64 == 0x7FF) return m64 != 0 ? sign | f.quiet_nan : reference_overflow(f, sign);
  if (e64 == 0 && m64 == 0) return sign;
  // |x| = sig × 2^q exactly.
  uint64_t sig = e64 != 0 ? (uint64_t{1} << 52) | m64 : m64;
  int64_t q = (e64 != 0 ? e64 : 1) - 1075;
  int64_t top = std::bit_width(sig) - 1 + q;  // floor(log2 |x|)
  int64_t min_exp = 1 - f.bias;
  int64_t quantum = std::max(top, min_exp) - f.mantissa_bits;  // f's spacing there is 2^quantum
  int64_t shift = quantum - q;
  uint64_t n;  // |x| / 2^quantum rounded
  if (shift <= 0) {
    n = sig << -shift;
  } else if (shift > 60) {
    n = 0;  // sig < 2^53 is below half of 2^shift
  } else {
    n = sig >> shift;
    uint64_t rest = sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (n & 1))) ++n;
  }
  if (n == uint64_t{1} << (f.mantissa_bits + 1)) {  // carried into the next binade
    n >>= 1;
    ++quantum;
  }
  if (n < uint64_t{1} << f.mantissa_bits) return sign | n;  // subnormal or zero
  int64_t field = quantum + f.mantissa_bits + f.bias;
  uint64_t mantissa = n - (uint64_t{1} << f.mantissa_bits);
  uint64_t pattern = static_cast<uint64_t>(field) << f.mantissa_bits | mantissa;
  if (field > static_cast<int64_t>(exponent_max(f)) || pattern > reference_max_finite(f))
    return reference_overflow(f, sign);
  return sign | pattern;
}

uint64_t bits_of(double x) { return std::bit_cast<uint64_t>(x); }

/// encode/decode through the typed entry points, so that those are tested too.
uint64_t typed_encode(FloatType t, double x) {
  switch (t) {
    case FloatType::F32:
      return encode_f32(x);
    case FloatType::BF16:
      return encode_bf16(x);
    case FloatType::F16:
      return encode_f16(x);
    case FloatType::FP8E4M3:
      return encode_fp8e4m3(x);
    case FloatType::FP8E5M2:
      return encode_fp8e5m2(x);
    case FloatType::F64:
      break;
  }
  return encode_bits(t, x);
}
double typed_decode(FloatType t, uint64_t bits) {
  switch (t) {
    case FloatType::F32:
      return decode_f32(static_cast<uint32_t>(bits));
    case FloatType::BF16:
      return decode_bf16(static_cast<uint16_t>(bits));
    case FloatType::F16:
      return decode_f16(static_cast<uint16_t>(bits));
    case FloatType::FP8E4M3:
      return decode_fp8e4m3(static_cast<uint8_t>(bits));
    case FloatType::FP8E5M2:
      return decode_fp8e5m2(static_cast<uint8_t>(bits));
    case FloatType::F64:
      break;
  }
  return decode_bits(t, bits);
}

TEST(FloatTypes, NamesParseBack) {
  for (const FloatTypeInfo& f : kFloatTypes) {
    EXPECT_EQ(parse_float_type(float_type_name(f.type)), f.type);
    EXPECT_EQ(&float_type_info(f.type), &f);
  }
  EXPECT_STREQ(float_type_name(FloatType::FP8E4M3), "fp8e4m3");
  EXPECT_EQ(parse_float_type("bf16"), FloatType::BF16);
  EXPECT_EQ(parse_float_type("fp8"), std::nullopt);
  EXPECT_EQ(parse_float_type("F32"), std::nullopt);
  EXPECT_EQ(parse_float_type(""), std::nullopt);
}

TEST(FloatTypes, TableAgreesWithTheFormats) {
  EXPECT_EQ(float_type_info(FloatType::F64).largest_finite, std::numeric_limits<double>::max());
  EXPECT_EQ(float_type_info(FloatType::F64).smallest_subnormal, std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(float_type_info(FloatType::F32).largest_finite, std::numeric_limits<float>::max());
  EXPECT_EQ(float_type_info(FloatType::F32).smallest_subnormal, std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(float_type_info(FloatType::F16).largest_finite, 65504.0);
  EXPECT_EQ(float_type_info(FloatType::FP8E4M3).largest_finite, 448.0);
  EXPECT_EQ(float_type_info(FloatType::FP8E5M2).largest_finite, 57344.0);
  for (const ReferenceFormat& r : kNarrower) {
    const FloatTypeInfo& f = float_type_info(r.type);
    SCOPED_TRACE(f.name);
    EXPECT_EQ(f.storage_bits, storage_bits(r));
    EXPECT_EQ(f.precision, r.mantissa_bits + 1);
    EXPECT_EQ(f.exponent_bias(), r.bias);
    EXPECT_EQ(f.has_infinities, r.has_infinities);
    EXPECT_EQ(f.quiet_nan_bits, r.quiet_nan);
    EXPECT_EQ(f.unit_roundoff, std::ldexp(1.0, -f.precision));
    EXPECT_EQ(bits_of(f.largest_finite), reference_decode(r, reference_max_finite(r)));
    EXPECT_EQ(bits_of(f.smallest_subnormal), reference_decode(r, 1));
    EXPECT_EQ(f.max_exp, std::ilogb(f.largest_finite));
    EXPECT_EQ(bits_of(std::ldexp(1.0, f.min_exp)), reference_decode(r, uint64_t{1} << r.mantissa_bits));
  }
}

// decode(every pattern) against the reference; encode(decode(p)) == p; NaN
// patterns decode to NaN of their sign and re-encode to the canonical one.
TEST(FloatTypes, EveryPatternRoundTrips) {
  for (const ReferenceFormat& r : kEnumerable) {
    SCOPED_TRACE(float_type_name(r.type));
    int nans = 0, mismatches = 0;
    for (uint64_t p = 0; p < (uint64_t{1} << storage_bits(r)); ++p) {
      double v = typed_decode(r.type, p);
      bool negative = (p & sign_mask(r)) != 0;
      if (reference_is_nan(r, p)) {
        ++nans;
        bool ok = std::isnan(v) && std::signbit(v) == negative &&
                  typed_encode(r.type, v) == (r.quiet_nan | (negative ? sign_mask(r) : 0)) &&
                  std::isnan(round_to(r.type, v)) && std::signbit(round_to(r.type, v)) == negative;
        if (!ok && ++mismatches < 10) ADD_FAILURE() << "NaN pattern 0x" << std::hex << p;
        continue;
      }
      bool ok = bits_of(v) == reference_decode(r, p) && typed_encode(r.type, v) == p &&
                bits_of(round_to(r.type, v)) == bits_of(v);
      if (!ok && ++mismatches < 10) ADD_FAILURE() << "pattern 0x" << std::hex << p << " decodes to " << v;
    }
    EXPECT_EQ(mismatches, 0);
    // bf16: 2 × (2^7 − 1); f16: 2 × (2^10 − 1); e4m3: 2; e5m2: 2 × 3.
    int expected_nans = r.has_infinities ? 2 * static_cast<int>(mantissa_max(r)) : 2;
    EXPECT_EQ(nans, expected_nans);
  }
}

/// Checks the rounding of the midpoint of the adjacent positive patterns
/// k, k+1 of r and of its neighbours one f64 ulp either side, both signs.
/// Returns the number of failed checks.
int check_pair(const ReferenceFormat& r, uint64_t k) {
  double lo = typed_decode(r.type, k), hi = typed_decode(r.type, k + 1);
  double mid = lo + (hi - lo) / 2;  // exact: both have ≤ 24 significant bits
  uint64_t even = (k % 2 == 0) ? k : k + 1;
  int failures = 0;
  for (uint64_t sign : {uint64_t{0}, sign_mask(r)}) {
    double s = sign ? -1.0 : 1.0;
    struct Case {
      double x;
      uint64_t expected;
    } cases[] = {
        {s * mid, even | sign},
        {s * std::nextafter(mid, 0.0), k | sign},
        {s * std::nextafter(mid, INFINITY), (k + 1) | sign},
    };
    for (const Case& c : cases) {
      uint64_t got = typed_encode(r.type, c.x);
      bool ok = got == c.expected && bits_of(round_to(r.type, c.x)) == bits_of(typed_decode(r.type, c.expected));
      if (!ok && ++failures < 10)
        ADD_FAILURE() << float_type_name(r.type) << ": " << c.x << " → 0x" << std::hex << got << ", expected 0x"
                      << c.expected;
    }
  }
  return failures;
}

// Every adjacent pair of finite patterns of bf16, f16 and both fp8 types: the
// midpoint goes to the even pattern, one f64 ulp below/above it to the lower/
// upper one. Pattern 0 and 1 cover "smallest subnormal / 2 → 0, just above →
// smallest subnormal".
TEST(FloatRounding, EveryMidpointTiesToEven) {
  for (const ReferenceFormat& r : kEnumerable) {
    int failures = 0;
    for (uint64_t k = 0; k < reference_max_finite(r); ++k) failures += check_pair(r, k);
    EXPECT_EQ(failures, 0) << float_type_name(r.type);
  }
}

// f32 has 2^31 pairs: check, in every binade, the first and last 256 and
// 2048 random ones.
TEST(FloatRounding, F32MidpointsTieToEven) {
  std::mt19937_64 rng(20240611);
  int failures = 0;
  for (uint64_t field = 0; field < 255; ++field) {
    uint64_t base = field << 23;
    for (uint64_t m = 0; m < 256; ++m) failures += check_pair(kRefF32, base + m);
    for (uint64_t m = (1u << 23) - 256; m < (1u << 23); ++m) {
      if (base + m < reference_max_finite(kRefF32)) failures += check_pair(kRefF32, base + m);
    }
    for (int i = 0; i < 2048; ++i) failures += check_pair(kRefF32, base + rng() % ((1u << 23) - 1));
  }
  EXPECT_EQ(failures, 0);
}

// The edges of the range and the special values, for every narrower type.
TEST(FloatRounding, RangeEdgesAndSpecials) {
  for (const ReferenceFormat& r : kNarrower) {
    const FloatTypeInfo& f = float_type_info(r.type);
    SCOPED_TRACE(f.name);
    const FloatType t = r.type;
    const uint64_t max = reference_max_finite(r), neg = sign_mask(r);
    const uint64_t inf = reference_overflow(r, 0);                     // e4m3: 448
    const double half_ulp = std::ldexp(1.0, f.max_exp - f.precision);  // the spacing at the top is 2^(max_exp − p + 1)
    const double edge = f.largest_finite + half_ulp;  // the midpoint to the next power of two's pattern
    // e4m3: 448 + 16 = 464 ties to 448 (even); the others tie to 2^(max_exp+1), i.e. overflow.
    EXPECT_EQ(typed_encode(t, edge), f.has_infinities ? inf : max);
    EXPECT_EQ(typed_encode(t, std::nextafter(edge, 0.0)), max);
    EXPECT_EQ(typed_encode(t, std::nextafter(edge, INFINITY)), inf);
    EXPECT_EQ(typed_encode(t, -std::nextafter(edge, INFINITY)), inf | neg);
    EXPECT_EQ(typed_encode(t, f.largest_finite), max);
    EXPECT_EQ(typed_encode(t, 1e300), inf);
    EXPECT_EQ(typed_encode(t, std::numeric_limits<double>::max()), inf);
    EXPECT_EQ(typed_encode(t, -std::numeric_limits<double>::max()), inf | neg);
    EXPECT_EQ(round_to(t, 1e300), f.has_infinities ? INFINITY : f.largest_finite);
    // Underflow.
    EXPECT_EQ(typed_encode(t, f.smallest_subnormal / 2), 0u);
    EXPECT_EQ(typed_encode(t, -f.smallest_subnormal / 2), neg);
    EXPECT_EQ(typed_encode(t, std::nextafter(f.smallest_subnormal / 2, 1.0)), 1u);
    EXPECT_EQ(typed_encode(t, std::numeric_limits<double>::denorm_min()), 0u);
    EXPECT_EQ(typed_encode(t, f.smallest_subnormal * 1.5), 2u);  // tie between 1 and 2: even
    // Zeros, infinities, NaN.
    EXPECT_EQ(typed_encode(t, 0.0), 0u);
    EXPECT_EQ(typed_encode(t, -0.0), neg);
    EXPECT_TRUE(std::signbit(round_to(t, -0.0)));
    EXPECT_EQ(typed_encode(t, INFINITY), inf);
    EXPECT_EQ(typed_encode(t, -INFINITY), inf | neg);
    EXPECT_EQ(round_to(t, -INFINITY), f.has_infinities ? -INFINITY : -448.0);
    EXPECT_EQ(typed_encode(t, std::numeric_limits<double>::quiet_NaN()), r.quiet_nan);
    EXPECT_EQ(typed_encode(t, -std::numeric_limits<double>::quiet_NaN()), r.quiet_nan | neg);
    EXPECT_EQ(typed_encode(t, std::numeric_limits<double>::signaling_NaN()), r.quiet_nan);
    EXPECT_TRUE(std::isnan(round_to(t, NAN)));
    EXPECT_TRUE(std::signbit(round_to(t, -std::numeric_limits<double>::quiet_NaN())));
  }
  EXPECT_EQ(encode_bf16(-0.0), 0x8000);
  EXPECT_EQ(encode_f16(NAN), 0x7E00);
  EXPECT_EQ(encode_fp8e4m3(-NAN), 0xFF);
  EXPECT_EQ(encode_fp8e4m3(1e9), 0x7E);
  EXPECT_EQ(encode_fp8e5m2(-INFINITY), 0xFC);
  EXPECT_EQ(encode_fp8e5m2(61440.0), 0x7C);  // 57344 + half ulp → Inf
}

// One step from f64, not through f32: 1 + 2^-8 + 2^-30 is above the bf16
// midpoint 1 + 2^-8, but f32 would first round it onto that midpoint (and
// then to 1).
TEST(FloatRounding, NoDoubleRoundingThroughF32) {
  double x = 1 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(round_to(FloatType::BF16, x), 1 + 0x1p-7);
  EXPECT_EQ(round_to(FloatType::BF16, static_cast<double>(static_cast<float>(x))), 1.0);
  EXPECT_EQ(encode_f16(1 + 0x1p-11 + 0x1p-30), 0x3C01);
  EXPECT_EQ(encode_fp8e4m3(1 + 0x1p-4 + 0x1p-30), 0x39);
  EXPECT_EQ(encode_fp8e5m2(1 + 0x1p-3 + 0x1p-30), 0x3D);
}

TEST(FloatRounding, F64IsTheIdentity) {
  for (double x : {0.0, -0.0, 1.0 / 3, 0x1p-1074, -1e308, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(bits_of(round_to(FloatType::F64, x)), bits_of(x));
    EXPECT_EQ(encode_bits(FloatType::F64, x), bits_of(x));
    EXPECT_EQ(bits_of(decode_bits(FloatType::F64, bits_of(x))), bits_of(x));
  }
  EXPECT_EQ(encode_bits(FloatType::F64, -std::numeric_limits<double>::signaling_NaN()), 0xFFF8000000000000u);
}

/// Random f64 values around r's range: exponents from below its smallest
/// subnormal to above its largest finite; a quarter with the bits below r's
/// precision set to an exact tie, an eighth with them cleared.
double random_near_range(std::mt19937_64& rng, const ReferenceFormat& r) {
  int64_t lo = 1 - r.bias - r.mantissa_bits - 3, hi = static_cast<int64_t>(exponent_max(r)) - r.bias + 2;
  int64_t exponent = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  uint64_t mantissa = rng() & ((uint64_t{1} << 52) - 1);
  int dropped = 52 - r.mantissa_bits;
  switch (rng() % 8) {
    case 0:
    case 1:
      mantissa = (mantissa >> dropped << dropped) | (uint64_t{1} << (dropped - 1));
      break;
    case 2:
      mantissa = mantissa >> dropped << dropped;
      break;
    default:
      break;
  }
  uint64_t sign = (rng() & 1) << 63;
  return std::bit_cast<double>(sign | static_cast<uint64_t>(exponent + 1023) << 52 | mantissa);
}

/// 10^6 f64 and 10^6 f32 inputs per narrower type: half spread over every
/// exponent (any bit pattern, subnormals included), half around the type's range.
TEST(FloatRounding, Bf16OfAnF32ValueOnItsBitPatternIsRoundTo) {
  // Every 251st f32 pattern, and every pattern around the binade edges, the
  // bf16 ties and the largest finite values, both signs.
  int failures = 0;
  auto check = [&](uint32_t pattern) {
    const float f = std::bit_cast<float>(pattern);
    const double want = round_to(FloatType::BF16, static_cast<double>(f));
    const double got = static_cast<double>(round_bf16_of_f32(f));
    const bool ok = std::isnan(want) ? std::isnan(got) && std::signbit(got) == std::signbit(want) &&
                                           std::bit_cast<uint32_t>(round_bf16_of_f32(f)) ==
                                               (std::bit_cast<uint32_t>(static_cast<float>(want)) | 0x7FC00000u)
                                     : bits_of(got) == bits_of(want);
    if (!ok && ++failures < 10) ADD_FAILURE() << std::hex << "0x" << pattern << std::hexfloat << ": " << got << " vs " << want;
  };
  for (uint64_t p = 0; p <= 0xFFFFFFFFu; p += 251) check(static_cast<uint32_t>(p));
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t exponent = 0; exponent <= 255; ++exponent)
      for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, 0x17FFFu, 0x18000u, 0x7F7FFFu})
        for (uint32_t mantissa : {0u, 0x10000u, 0x7F0000u})
          check(sign | exponent << 23 | ((mantissa | low) & 0x7FFFFFu));
  EXPECT_EQ(failures, 0);
}

TEST(FloatRounding, F16OfAnF32ValueWithoutABranchIsRoundTo) {
  // Every 251st f32 pattern, and every pattern around the binade edges, the
  // f16 ties (13 bits dropped), its subnormal steps and its largest finite
  // value, both signs.
  int failures = 0;
  auto check = [&](uint32_t pattern) {
    const float f = std::bit_cast<float>(pattern);
    const double want = round_to(FloatType::F16, static_cast<double>(f));
    const float r = round_f16_of_f32(f);
    const bool ok = std::isnan(want) ? std::isnan(r) && std::signbit(r) == std::signbit(want) &&
                                           (std::bit_cast<uint32_t>(r) & 0x7FFFFFFFu) == 0x7FC00000u
                                     : bits_of(static_cast<double>(r)) == bits_of(want);
    if (!ok && ++failures < 10)
      ADD_FAILURE() << std::hex << "0x" << pattern << std::hexfloat << ": " << static_cast<double>(r) << " vs " << want;
  };
  for (uint64_t p = 0; p <= 0xFFFFFFFFu; p += 251) check(static_cast<uint32_t>(p));
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t exponent = 0; exponent <= 255; ++exponent)
      for (uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x2FFFu, 0x3000u, 0x3001u, 0x7FFFFFu})
        for (uint32_t mantissa : {0u, 0x2000u, 0x7FE000u, 0x400000u})
          check(sign | exponent << 23 | ((mantissa | low) & 0x7FFFFFu));
  EXPECT_EQ(failures, 0);
}

TEST(FloatRounding, RandomValuesMatchTheBitLevelReference) {
  constexpr int kSamples = 1'000'000;
  for (const ReferenceFormat& r : kNarrower) {
    SCOPED_TRACE(float_type_name(r.type));
    std::mt19937_64 rng(0x9e3779b97f4a7c15u + static_cast<uint64_t>(r.type));
    int failures = 0;
    auto check = [&](double x) {
      uint64_t got = typed_encode(r.type, x), want = reference_encode(r, x);
      bool ok = got == want;
      double rounded = round_to(r.type, x), decoded = typed_decode(r.type, got);
      ok = ok && (std::isnan(x) ? std::isnan(rounded) && std::signbit(rounded) == std::signbit(x)
                                : bits_of(rounded) == bits_of(decoded));
      if (r.type == FloatType::F32 && !std::isnan(x))
        ok = ok && got == std::bit_cast<uint32_t>(static_cast<float>(x));  // the hardware's one-step rounding
      if (!ok && ++failures < 10)
        ADD_FAILURE() << std::hexfloat << x << " → 0x" << std::hex << got << ", reference 0x" << want;
    };
    for (int i = 0; i < kSamples / 2; ++i) {
      check(std::bit_cast<double>(rng()));
      check(random_near_range(rng, r));
      check(static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(rng()))));
      check(static_cast<double>(static_cast<float>(random_near_range(rng, r))));
    }
    EXPECT_EQ(failures, 0);
  }
}

}  // namespace
}  // namespace quire::runtime
