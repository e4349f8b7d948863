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
      L = std::exp(M + d);
      break;  // as exp
    case Op::Log1p:
      // log1p' = 1/(1 + x) ≤ 1/(1 − M − δ) where every x ≥ −(M + δ) > −1.
      if (M + d < 1) {
        L = 1 / (1 - (M + d));
      } else {
        L = kInf;
        out.why = fmt::format("log1p of values that may reach −1 (largest |x| {}, error {})", sci(M), sci(d));
      }
      break;
    case Op::Exp:
      L = std::exp(M + d);
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
