#pragma once
// A real number held by GNU MPFR at a fixed precision of N bits, and the
// scalar functions of Core's element-wise operations computed at N bits: the
// arithmetic of the exact reference (exact_interpreter.h).
//
// Every function rounds to nearest at the precision of its first operand,
// once per MPFR call: a function MPFR has (exp, erf, tanh, sqrt, …) is one
// correctly rounded call; the others (sigmoid, gelu, silu, …) are the
// expression kernels.h states for them, each step rounded at N bits, with
// their constants (√2, √(2/π), 0.044715) computed at N bits, never from a
// double. Special values (NaN, ±inf, ±0) follow the kernels' rules where they
// state one (relu, min/max, rsqrt(-0) = -inf), else MPFR's (which follow
// C's Annex F for the functions both have).

#include <cstdint>  // before mpfr.h: it declares the intmax_t functions only then
#include <mpfr.h>

#include <string>

namespace quire::exact {

/// The precisions a Big takes: at least a double's, so that every f64 input
/// converts exactly; at most what a print of all its digits stays readable at.
constexpr int kMinBits = 53;
constexpr int kMaxBits = 4096;

class Big {
 public:
  /// +0 at `bits` of precision (kMinBits ≤ bits ≤ kMaxBits, else std::invalid_argument).
  explicit Big(int bits = 128);
  /// `v` exactly (every double fits in 53 bits).
  Big(double v, int bits);
  Big(const Big& other);
  /// Leaves `other` a valid +0 of its precision.
  Big(Big&& other) noexcept;
  Big& operator=(const Big& other);
  Big& operator=(Big&& other) noexcept;
  ~Big();

  /// A decimal string ("0.1", "-2.5e-3") rounded to nearest at N bits.
  static Big from_decimal(const std::string& text, int bits);
  /// An integer, rounded to nearest at N bits (exact for |v| ≤ 2^53, or N ≥ 63).
  static Big from_int(int64_t v, int bits);

  int bits() const { return static_cast<int>(mpfr_get_prec(v_)); }
  /// Rounded to the nearest double (ties to even; overflow to ±inf).
  double to_double() const { return mpfr_get_d(v_, MPFR_RNDN); }
  /// `digits` significant decimal digits, rounded to nearest: "-1.2345e-05",
  /// "0" for zeros ("-0" for -0), "nan", "inf", "-inf".
  std::string str(int digits) const;
  /// The significant digits that tell N-bit values apart: ⌈N·log10(2)⌉ + 1.
  static int digits_for(int bits);

  bool is_nan() const { return mpfr_nan_p(v_) != 0; }
  bool is_zero() const { return mpfr_zero_p(v_) != 0; }
  bool sign_bit() const { return mpfr_signbit(v_) != 0; }

  mpfr_ptr get() { return v_; }
  mpfr_srcptr get() const { return v_; }

 private:
  mpfr_t v_;
};

// Arithmetic, at the first operand's precision.
Big add(const Big& a, const Big& b);
Big sub(const Big& a, const Big& b);
Big mul(const Big& a, const Big& b);
Big div(const Big& a, const Big& b);
Big pow(const Big& a, const Big& b);  ///< mpfr_pow (pow(x, 2) is x² correctly rounded, as the kernel's x*x)
/// The kernels' Max/Min: the first NaN operand if either is NaN; max(-0, +0) = +0,
/// min(-0, +0) = -0; else the larger / smaller.
Big max(const Big& a, const Big& b);
Big min(const Big& a, const Big& b);

// Unary functions; kernels.h's UnaryOp states each one's expression.
Big neg(const Big& x);
Big abs(const Big& x);
Big exp(const Big& x);
Big log(const Big& x);
Big sqrt(const Big& x);
Big rsqrt(const Big& x);  ///< 1/√x correctly rounded (mpfr_rec_sqrt); ±0 → ±inf as 1.0/sqrt(x)
Big tanh(const Big& x);
Big erf(const Big& x);
Big sigmoid(const Big& x);    ///< 1 / (1 + exp(-x))
Big relu(const Big& x);       ///< NaN stays; x > 0 ? x : +0
Big gelu(const Big& x);       ///< 0.5 · x · (1 + erf(x / √2))
Big gelu_tanh(const Big& x);  ///< 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x · x · x)))
Big silu(const Big& x);       ///< x · sigmoid(x)
Big log1p(const Big& x);      ///< log(1 + x) correctly rounded (mpfr_log1p)
Big expm1(const Big& x);      ///< exp(x) − 1 correctly rounded (mpfr_expm1)
Big softplus(const Big& x);   ///< x > 20 ? x : log(1 + exp(x)), the kernel's threshold (F.softplus)

// IEEE comparisons: false when either is NaN, except ne.
bool lt(const Big& a, const Big& b);
bool le(const Big& a, const Big& b);
bool gt(const Big& a, const Big& b);
bool ge(const Big& a, const Big& b);
bool eq(const Big& a, const Big& b);
bool ne(const Big& a, const Big& b);

}  // namespace quire::exact
