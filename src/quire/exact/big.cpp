#include "quire/exact/big.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace quire::exact {

namespace {

mpfr_prec_t checked_bits(int bits) {
  if (bits < kMinBits || bits > kMaxBits)
    throw std::invalid_argument(fmt::format("a precision of {} bits is outside [{}, {}]", bits, kMinBits, kMaxBits));
  return static_cast<mpfr_prec_t>(bits);
}

/// The constants of gelu and gelu_tanh at one precision, computed once per
/// thread and precision (a run uses one precision throughout).
struct Constants {
  int bits = 0;
  Big sqrt2{kMinBits};          ///< √2
  Big sqrt_2_over_pi{kMinBits};  ///< √(2/π)
  Big cubic{kMinBits};          ///< 0.044715, the decimal, rounded at N bits
};

const Constants& constants(int bits) {
  thread_local Constants c;
  if (c.bits == bits) return c;
  c.sqrt2 = Big(2.0, bits);
  mpfr_sqrt(c.sqrt2.get(), c.sqrt2.get(), MPFR_RNDN);
  Big pi(bits);
  mpfr_const_pi(pi.get(), MPFR_RNDN);
  c.sqrt_2_over_pi = Big(2.0, bits);
  mpfr_div(c.sqrt_2_over_pi.get(), c.sqrt_2_over_pi.get(), pi.get(), MPFR_RNDN);
  mpfr_sqrt(c.sqrt_2_over_pi.get(), c.sqrt_2_over_pi.get(), MPFR_RNDN);
  c.cubic = Big::from_decimal("0.044715", bits);
  c.bits = bits;
  return c;
}

template <class F>
Big unary(const Big& x, F f) {
  Big r(x.bits());
  f(r.get(), x.get(), MPFR_RNDN);
  return r;
}

template <class F>
Big binary(const Big& a, const Big& b, F f) {
  Big r(a.bits());
  f(r.get(), a.get(), b.get(), MPFR_RNDN);
  return r;
}

}  // namespace

Big::Big(int bits) {
  mpfr_init2(v_, checked_bits(bits));
  mpfr_set_zero(v_, 1);
}

Big::Big(double v, int bits) {
  mpfr_init2(v_, checked_bits(bits));
  mpfr_set_d(v_, v, MPFR_RNDN);  // exact: bits ≥ 53
}

Big::Big(const Big& other) {
  mpfr_init2(v_, mpfr_get_prec(other.v_));
  mpfr_set(v_, other.v_, MPFR_RNDN);
}

Big::Big(Big&& other) noexcept {
  mpfr_init2(v_, mpfr_get_prec(other.v_));
  mpfr_set_zero(v_, 1);
  mpfr_swap(v_, other.v_);
}

Big& Big::operator=(const Big& other) {
  if (this == &other) return *this;
  mpfr_set_prec(v_, mpfr_get_prec(other.v_));
  mpfr_set(v_, other.v_, MPFR_RNDN);
  return *this;
}

Big& Big::operator=(Big&& other) noexcept {
  if (this != &other) mpfr_swap(v_, other.v_);  // swaps precisions too
  return *this;
}

Big::~Big() { mpfr_clear(v_); }

Big Big::from_decimal(const std::string& text, int bits) {
  Big r(bits);
  if (mpfr_set_str(r.v_, text.c_str(), 10, MPFR_RNDN) != 0)
    throw std::invalid_argument(fmt::format("`{}` is not a decimal number", text));
  return r;
}

Big Big::from_int(int64_t v, int bits) {
  Big r(bits);
  mpfr_set_sj(r.v_, static_cast<intmax_t>(v), MPFR_RNDN);
  return r;
}

int Big::digits_for(int bits) { return static_cast<int>(std::ceil(bits * std::log10(2.0))) + 1; }

std::string Big::str(int digits) const {
  if (mpfr_nan_p(v_)) return "nan";
  if (mpfr_inf_p(v_)) return mpfr_signbit(v_) ? "-inf" : "inf";
  if (mpfr_zero_p(v_)) return mpfr_signbit(v_) ? "-0" : "0";
  if (digits < 1) digits = 1;
  mpfr_exp_t e = 0;
  char* s = mpfr_get_str(nullptr, &e, 10, static_cast<size_t>(digits), v_, MPFR_RNDN);
  std::string m(s);
  mpfr_free_str(s);
  // m is [-]d1d2…dn with value 0.d1d2…dn × 10^e = d1.d2…dn × 10^(e-1).
  std::string sign;
  if (!m.empty() && m[0] == '-') {
    sign = "-";
    m.erase(0, 1);
  }
  std::string out = sign + m.substr(0, 1);
  if (m.size() > 1) out += "." + m.substr(1);
  return out + fmt::format("e{}", static_cast<long>(e) - 1);
}

Big add(const Big& a, const Big& b) { return binary(a, b, mpfr_add); }
Big sub(const Big& a, const Big& b) { return binary(a, b, mpfr_sub); }
Big mul(const Big& a, const Big& b) { return binary(a, b, mpfr_mul); }
Big div(const Big& a, const Big& b) { return binary(a, b, mpfr_div); }
Big pow(const Big& a, const Big& b) { return binary(a, b, mpfr_pow); }

Big max(const Big& a, const Big& b) {
  if (a.is_nan()) return a;
  if (b.is_nan()) return b;
  if (mpfr_equal_p(a.get(), b.get())) return a.sign_bit() ? b : a;  // equal: only ±0 differ, +0 is the larger
  return mpfr_greater_p(a.get(), b.get()) ? a : b;
}

Big min(const Big& a, const Big& b) {
  if (a.is_nan()) return a;
  if (b.is_nan()) return b;
  if (mpfr_equal_p(a.get(), b.get())) return a.sign_bit() ? a : b;  // equal: -0 is the smaller
  return mpfr_less_p(a.get(), b.get()) ? a : b;
}

Big neg(const Big& x) { return unary(x, mpfr_neg); }
Big abs(const Big& x) { return unary(x, mpfr_abs); }
Big exp(const Big& x) { return unary(x, mpfr_exp); }
Big log(const Big& x) { return unary(x, mpfr_log); }
Big sqrt(const Big& x) { return unary(x, mpfr_sqrt); }
Big tanh(const Big& x) { return unary(x, mpfr_tanh); }
Big erf(const Big& x) { return unary(x, mpfr_erf); }

Big rsqrt(const Big& x) {
  // mpfr_rec_sqrt(-0) is +inf; the kernel's 1.0 / sqrt(-0.0) is -inf.
  if (x.is_zero()) return div(Big(1.0, x.bits()), x);
  return unary(x, mpfr_rec_sqrt);
}

Big sigmoid(const Big& x) {
  const Big one(1.0, x.bits());
  return div(one, add(one, exp(neg(x))));
}

Big relu(const Big& x) {
  if (x.is_nan()) return x;
  return mpfr_sgn(x.get()) > 0 ? x : Big(x.bits());
}

Big gelu(const Big& x) {
  const int n = x.bits();
  const Big half(0.5, n), one(1.0, n);
  return mul(mul(half, x), add(one, erf(div(x, constants(n).sqrt2))));
}

Big gelu_tanh(const Big& x) {
  const int n = x.bits();
  const Constants& c = constants(n);
  const Big half(0.5, n), one(1.0, n);
  Big cube = mul(mul(mul(c.cubic, x), x), x);  // 0.044715 * x * x * x, left to right as the kernel
  return mul(mul(half, x), add(one, tanh(mul(c.sqrt_2_over_pi, add(x, cube)))));
}

Big silu(const Big& x) { return mul(x, sigmoid(x)); }
Big log1p(const Big& x) { return unary(x, mpfr_log1p); }
Big expm1(const Big& x) { return unary(x, mpfr_expm1); }

Big softplus(const Big& x) {
  // The threshold is part of the operation (F.softplus returns x above 20),
  // so the exact value is the same piecewise function; NaN falls to log1p.
  if (gt(x, Big(20.0, x.bits()))) return x;
  return log1p(exp(x));
}

bool lt(const Big& a, const Big& b) { return mpfr_less_p(a.get(), b.get()) != 0; }
bool le(const Big& a, const Big& b) { return mpfr_lessequal_p(a.get(), b.get()) != 0; }
bool gt(const Big& a, const Big& b) { return mpfr_greater_p(a.get(), b.get()) != 0; }
bool ge(const Big& a, const Big& b) { return mpfr_greaterequal_p(a.get(), b.get()) != 0; }
bool eq(const Big& a, const Big& b) { return mpfr_equal_p(a.get(), b.get()) != 0; }
bool ne(const Big& a, const Big& b) { return !eq(a, b); }

}  // namespace quire::exact
