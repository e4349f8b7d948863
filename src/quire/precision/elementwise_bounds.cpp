#include "quire/precision/elementwise_bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

#include "quire/precision/number_text.h"

namespace quire::precision {

using core::Op;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Propagated unary_rule(const core::Instr& in, const RuleOperand& x, bool normwise, double count) {
  const double M = x.max_abs, m = x.min_abs, d = x.error;
  const double top = std::isnan(x.top) ? M : x.top, bottom = std::isnan(x.bottom) ? -M : x.bottom;
  Propagated out;
  auto needs_min = [&](const char* what) {
    out.reads_min_abs = true;
    if (m > d) return true;
    out.why = fmt::format("{} of values whose smallest |x| ({}) is not above their error ({})", what, sci(m), sci(d));
    return false;
  };
  double L = 1;
  switch (in.op) {
    case Op::Neg:
    case Op::Abs:
    case Op::Relu:
    case Op::Tanh:
      L = 1;
      break;
    case Op::Sigmoid:
      L = 0.25;
      break;
    case Op::Erf:
      L = 2 / std::sqrt(std::numbers::pi);
      break;
    case Op::Gelu:
    case Op::GeluTanh:
      L = 1.13;
      break;  // max |gelu'| = 1.1289…
    case Op::Silu:
      L = 1.1;
      break;  // max |silu'| = 1.0998…
    case Op::Softplus:
      L = 1;
      break;  // softplus' = sigmoid ∈ (0, 1)
    case Op::Expm1:
      L = std::exp(top + d);
      break;  // as exp
    case Op::Log1p:
      // log1p' = 1/(1 + x) ≤ 1/(1 + bottom − δ) where every x ≥ bottom − δ > −1.
      if (bottom - d > -1) {
        L = 1 / (1 + (bottom - d));
      } else {
        L = kInf;
        out.why = fmt::format("log1p of values that may reach −1 (largest |x| {}, error {})", sci(M), sci(d));
      }
      break;
    case Op::Exp:
      L = std::exp(top + d);  // exp' = exp, largest at the top of [x − δ, x + δ]
      break;
    case Op::Log:
      L = needs_min("a logarithm") ? 1 / (m - d) : kInf;
      break;
    case Op::Rsqrt:
      L = needs_min("a reciprocal square root") ? 0.5 * std::pow(m - d, -1.5) : kInf;
      break;
    case Op::Sqrt: {
      // |√a − √b| ≤ √|a − b| always; ≤ |a − b| / (2√(m − δ)) away from 0.
      const double root =
          normwise ? std::sqrt(d) * std::pow(count, 0.25) : std::sqrt(d);
      double lip = kInf;
      if (m > d) {
        out.reads_min_abs = true;
        lip = d / (2 * std::sqrt(m - d));
      }
      out.error = std::min(root, lip);
      L = -1;
      break;
    }
    case Op::PowConst: {
      const double p = in.attr<core::attr::Exponent>().value;
      if (p == 0) {
        L = 0;
      } else if (p >= 1 && p == std::floor(p)) {
        L = p * std::pow(M + d, p - 1);
      } else {
        L = needs_min(fmt::format("a power {}", p).c_str())
                ? std::fabs(p) * std::max(std::pow(m - d, p - 1), std::pow(M + d, p - 1))
                : kInf;
      }
      break;
    }
    case Op::Not:
      L = 1;
      break;
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Cast:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::Pow:
    case Op::Min:
    case Op::Max:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::Iota:
    case Op::OneHot:
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::GatherGrad:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      // Not one operand's element-wise function: Real and Cast returned above,
      // and every other operation has no one-operand element-wise form.
      throw std::logic_error(fmt::format("internal: the bound of `{}` has no Lipschitz constant", core::op_info(in.op).spelling));
  }
  if (L >= 0) out.error = times(L, d);
  return out;
}

Propagated binary_rule(Op op, const RuleOperand& a, const RuleOperand& b, double ea, double eb, bool normwise) {
  Propagated out;
  switch (op) {
    case Op::Add:
    case Op::Sub:
      out.error = ea + eb;
      break;
    case Op::Mul:
      out.error = times(ea, b.max_abs + b.error) + times(a.max_abs, eb);
      break;
    case Op::Div: {
      // â/b̂ − a/b = ((â − a)·b − a·(b̂ − b)) / (b·b̂): ≤ δa/(m_b − δb) + M_a·δb/(m_b·(m_b − δb)).
      out.reads_min_abs = true;
      const double mb = b.min_abs, db = b.error;
      if (!(mb > db)) {
        out.error = kInf;
        out.why = fmt::format("a division by values whose smallest |x| ({}) is not above their error ({})", sci(mb),
                             sci(db));
        break;
      }
      out.error = ea / (mb - db) + times(a.max_abs, eb) / (mb * (mb - db));
      break;
    }
    case Op::Min:
    case Op::Max:
      out.error = normwise ? std::sqrt(ea * ea + eb * eb) : std::max(ea, eb);
      break;
    case Op::Pow:
      if (a.error == 0 && b.error == 0) {
        out.error = 0;
      } else {
        out.error = kInf;
        out.why = "not covered: `pow` with an exponent that is a tensor";
      }
      break;
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Neg:
    case Op::Abs:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Relu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Not:
    case Op::Cast:
    case Op::PowConst:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::Iota:
    case Op::OneHot:
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::GatherGrad:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      out.error = kInf;
      out.why = fmt::format("not covered: `{}`", core::op_info(op).spelling);
      break;
  }
  return out;
}

}  // namespace quire::precision

namespace quire::precision {

namespace {

/// Standard normal density and distribution.
double phi(double x) { return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi); }
double Phi(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
double logistic(double x) { return 1 / (1 + std::exp(-x)); }

// sup |f''| over the real line of the bounded-curvature functions (their
// maxima: tanh 4/(3√3) = 0.76980, erf 2√(2/(eπ)) = 0.96788, sigmoid
// 1/(6√3) = 0.096225, gelu 2φ(0) = 0.79788, gelu_tanh 0.79790 (numerically),
// silu 1/2, softplus 1/4), rounded up.
constexpr double kTanhCurvature = 0.7699;
constexpr double kErfCurvature = 0.9679;
constexpr double kSigmoidCurvature = 0.0963;
constexpr double kGeluCurvature = 0.7980;
constexpr double kSiluCurvature = 0.5001;
constexpr double kSoftplusCurvature = 0.25;

}  // namespace

Linearized unary_linearization(const core::Instr& in, double x, double delta) {
  Linearized out;
  const double d = delta, half_d2 = delta * delta / 2;
  // f' at x and sup|f''| over [x − δ, x + δ].
  auto smooth = [&](double slope, double curvature) {
    out.slope = slope;
    out.remainder = times(curvature, half_d2);
    out.valid = std::isfinite(slope) && !std::isnan(out.remainder);
  };
  switch (in.op) {
    case Op::Neg:
      smooth(-1, 0);
      break;
    case Op::Abs:
      if (std::fabs(x) > d) smooth(x > 0 ? 1 : -1, 0);  // else a kink within δ: Lipschitz
      break;
    case Op::Relu:
      if (std::fabs(x) > d) smooth(x > 0 ? 1 : 0, 0);
      break;
    case Op::Exp:
    case Op::Expm1:
      smooth(std::exp(x), std::exp(x + d));
      break;
    case Op::Log:
      if (x > d) smooth(1 / x, 1 / ((x - d) * (x - d)));
      break;
    case Op::Log1p:
      if (1 + x > d) smooth(1 / (1 + x), 1 / ((1 + x - d) * (1 + x - d)));
      break;
    case Op::Sqrt:
      if (x > d) smooth(0.5 / std::sqrt(x), 0.25 * std::pow(x - d, -1.5));
      break;
    case Op::Rsqrt:
      if (x > d) smooth(-0.5 * std::pow(x, -1.5), 0.75 * std::pow(x - d, -2.5));
      break;
    case Op::Tanh: {
      const double t = std::tanh(x);
      smooth(1 - t * t, kTanhCurvature);
      break;
    }
    case Op::Erf:
      smooth(2 / std::sqrt(std::numbers::pi) * std::exp(-x * x), kErfCurvature);
      break;
    case Op::Sigmoid: {
      const double s = logistic(x);
      smooth(s * (1 - s), kSigmoidCurvature);
      break;
    }
    case Op::Gelu:
      smooth(Phi(x) + x * phi(x), kGeluCurvature);
      break;
    case Op::GeluTanh: {
      // 0.5·x·(1 + tanh(k(x + 0.044715x³))), k = √(2/π).
      const double k = std::sqrt(2 / std::numbers::pi);
      const double t = std::tanh(k * (x + 0.044715 * x * x * x));
      smooth(0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x), kGeluCurvature);
      break;
    }
    case Op::Silu: {
      const double s = logistic(x);
      smooth(s * (1 + x * (1 - s)), kSiluCurvature);
      break;
    }
    case Op::Softplus:
      smooth(logistic(x), kSoftplusCurvature);
      break;
    case Op::PowConst: {
      const double p = in.attr<core::attr::Exponent>().value;
      if (p == 0) {
        smooth(0, 0);
      } else if (p == 1) {
        smooth(1, 0);
      } else if (p == 2) {
        smooth(2 * x, 2);  // (x + e)² − x² − 2xe = e²
      } else if (p > 2 && p == std::floor(p)) {
        smooth(p * std::pow(x, p - 1), p * (p - 1) * std::pow(std::fabs(x) + d, p - 2));
      } else if (x > d) {
        // x^p on (0, ∞): f'' = p(p − 1)x^(p−2), largest at one end of the interval.
        smooth(p * std::pow(x, p - 1),
               std::fabs(p * (p - 1)) * std::max(std::pow(x - d, p - 2), std::pow(x + d, p - 2)));
      }
      break;
    }
    case Op::Not:
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Cast:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::Pow:
    case Op::Min:
    case Op::Max:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::Iota:
    case Op::OneHot:
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::GatherGrad:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;  // not a real function of one real operand: no form
  }
  return out;
}

Linearized binary_linearization(Op op, double a, double b, double delta_a, double delta_b) {
  Linearized out;
  switch (op) {
    case Op::Add:
      out = {1, 1, 0, true};
      break;
    case Op::Sub:
      out = {1, -1, 0, true};
      break;
    case Op::Mul:
      // (a + ea)(b + eb) − ab = b·ea + a·eb + ea·eb.
      out = {b, a, times(delta_a, delta_b), true};
      break;
    case Op::Div: {
      // â/b̂ − a/b − (ea/b − a·eb/b²) = −(ea·b − a·eb)·eb / (b²·b̂), |b̂| ≥ |b| − δb.
      const double mb = std::fabs(b);
      if (!(mb > delta_b)) break;
      out = {1 / b, -a / (b * b), (delta_a * mb + times(std::fabs(a), delta_b)) * delta_b / (mb * mb * (mb - delta_b)),
             true};
      break;
    }
    case Op::Min:
    case Op::Max: {
      // The exact run's winner; where the other may overtake it (|a − b| ≤ δa + δb), by at most δa + δb.
      const bool a_wins = op == Op::Max ? a >= b : a <= b;
      const bool separated = std::fabs(a - b) > delta_a + delta_b;
      out = {a_wins ? 1.0 : 0.0, a_wins ? 0.0 : 1.0, separated ? 0 : delta_a + delta_b, true};
      break;
    }
    case Op::Pow:
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Neg:
    case Op::Abs:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Relu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Not:
    case Op::Cast:
    case Op::PowConst:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::Iota:
    case Op::OneHot:
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::GatherGrad:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;  // `pow` with a tensor exponent, and the non-arithmetic operations: no form
  }
  return out;
}

}  // namespace quire::precision
