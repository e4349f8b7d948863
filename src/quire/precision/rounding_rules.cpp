#include "quire/precision/rounding_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "quire/precision/number_text.h"

namespace quire::precision {

using core::Op;
using runtime::FloatType;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

double unit(FloatType t) { return runtime::float_type_info(t).unit_roundoff; }
double tiny(FloatType t) { return runtime::float_type_info(t).smallest_subnormal; }

bool holds(FloatType wide, FloatType narrow) {
  const auto& w = runtime::float_type_info(wide);
  const auto& n = runtime::float_type_info(narrow);
  return w.precision >= n.precision && w.min_exp <= n.min_exp && w.max_exp >= n.max_exp &&
         w.smallest_subnormal <= n.smallest_subnormal;
}

FloatType join(FloatType a, FloatType b) {
  if (holds(a, b)) return a;
  if (holds(b, a)) return b;
  return FloatType::F64;
}

bool library_function(const core::Instr& in) {
  switch (in.op) {
    case Op::PowConst:
      return in.attr<core::attr::Exponent>().value != 2;  // x² is x·x, correctly rounded
    case Op::Exp:
    case Op::Log:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Pow:
      return true;
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
    case Op::Sqrt:
    case Op::Relu:
    case Op::Not:
    case Op::Cast:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
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
      return false;
  }
  throw std::logic_error("internal: an operation outside ops.def");
}

double gamma(double j, double u) {
  if (j <= 0) return 0;
  const double ju = j * u;
  return ju >= 1 ? kInf : ju / (1 - ju);
}

double step_unit(FloatType acc) { return acc == FloatType::F64 ? kU64 : (1 + kU64) * (1 + unit(acc)) - 1; }

double sum_steps(double k, bool mean, bool terms_rounded) { return (mean ? k : k - 1) + (terms_rounded ? 1 : 0); }

double rounding_error(double magnitude, double error, FloatType t) {
  const double u = unit(t);
  if (!((magnitude + error) * (1 + u) <= runtime::float_type_info(t).largest_finite)) return kInf;
  return u * (magnitude + error) + tiny(t) / 2;
}

double rounded(double error, double magnitude, FloatType t) { return error + rounding_error(magnitude, error, t); }

std::string overflow_why(double magnitude, double error, FloatType t) {
  return fmt::format("its values (up to {} with their error) may overflow {}", sci(magnitude + error),
                     runtime::float_type_name(t));
}

double library_error(double scale) { return 8 * kU64 * scale; }

double kernel_charged(double error, double magnitude, double library_scale) {
  double d = error;
  if (library_scale >= 0) d += library_error(library_scale);
  return d + kU64 * (magnitude + d) + tiny(FloatType::F64) / 2;
}

double logsumexp_rounding(double k, double ua, double x_scale, double out_scale, double sum_gamma) {
  const double term = (1 + std::expm1(ua * 2 * x_scale)) * (1 + 4 * kU64) * (1 + ua) - 1;
  const double theta = (1 + term) * (1 + sum_gamma) - 1;
  if (!(theta < 1)) return kInf;
  double local =
      -std::log1p(-theta) + (4 * kU64 + ua) * (std::log(std::max(k, 1.0) * (1 + theta)) - std::log1p(-theta));
  local += ua * (out_scale + local);
  return local;
}

std::vector<FloatType> store_roundings(const SiteType& st, bool half_intermediates, core::Op op,
                                       std::optional<FloatType> lies_in) {
  std::vector<FloatType> out;
  const FloatType t = st.storage;
  const bool via_f32 = is_half(t) && !half_intermediates && !core::op_info(op).stored_directly;
  if (via_f32 && !(lies_in && holds(FloatType::F32, *lies_in))) {
    out.push_back(FloatType::F32);
    lies_in = FloatType::F32;
  }
  if (!(lies_in && holds(t, *lies_in))) out.push_back(t);
  return out;
}

bool reads_down(const SiteType* st, const std::optional<SiteType>& operand_site, FloatType operand_type) {
  return st && st->read_down && operand_type != st->read_as && !(operand_site && operand_site->weak);
}

}  // namespace quire::precision
