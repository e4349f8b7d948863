#include "quire/interp/core_geometry.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "quire/core/walk.h"
#include "quire/interp/interpreter.h"
#include "quire/runtime/runtime_error.h"

namespace quire::interp {

using core::Op;

int64_t eval_size(const elab::Size& s, const std::map<std::string, int64_t>& dims) {
  auto v = s.evaluate(dims);
  std::vector<std::string> bound;
  if (v && *v >= 1) return *v;
  if (v) {  // `D - 2` at D = 1
    for (const std::string& sym : s.symbols()) bound.push_back(fmt::format("{} = {}", sym, dims.at(sym)));
    throw runtime::RuntimeError(
        fmt::format("the size {} is {} at {}: an axis must have a positive size", s.str(), *v, fmt::join(bound, ", ")));
  }
  for (const std::string& sym : s.symbols()) {
    auto it = dims.find(sym);
    if (it == dims.end())
      throw runtime::RuntimeError(
          fmt::format("the size {} needs the dimension {} (give --dim {}=N)", s.str(), sym, sym));
    bound.push_back(fmt::format("{} = {}", sym, it->second));
  }
  throw runtime::RuntimeError(fmt::format("the size {} is not a whole number at {}", s.str(), fmt::join(bound, ", ")));
}

runtime::AxisMap axis_map(const elab::OperandAlignment& a, int64_t operand_rank, size_t operand_explicit,
                          int64_t result_rest) {
  runtime::AxisMap map;
  int64_t rest = a.rest ? operand_rank - static_cast<int64_t>(operand_explicit) : 0;
  for (int64_t i = 0; i < result_rest; ++i) {
    int64_t k = i - (result_rest - rest);
    map.push_back(k >= 0 ? static_cast<int>(k) : -1);
  }
  for (int j : a.map) map.push_back(j >= 0 ? static_cast<int>(rest + j) : -1);
  return map;
}

runtime::UnaryOp unary_op(Op op) {
  switch (op) {
    case Op::Neg: return runtime::UnaryOp::Neg;
    case Op::Abs: return runtime::UnaryOp::Abs;
    case Op::Exp: return runtime::UnaryOp::Exp;
    case Op::Log: return runtime::UnaryOp::Log;
    case Op::Sqrt: return runtime::UnaryOp::Sqrt;
    case Op::Rsqrt: return runtime::UnaryOp::Rsqrt;
    case Op::Tanh: return runtime::UnaryOp::Tanh;
    case Op::Erf: return runtime::UnaryOp::Erf;
    case Op::Sigmoid: return runtime::UnaryOp::Sigmoid;
    case Op::Relu: return runtime::UnaryOp::Relu;
    case Op::Gelu: return runtime::UnaryOp::Gelu;
    case Op::GeluTanh: return runtime::UnaryOp::GeluTanh;
    case Op::Silu: return runtime::UnaryOp::Silu;
    case Op::Log1p:
      return runtime::UnaryOp::Log1p;
    case Op::Expm1:
      return runtime::UnaryOp::Expm1;
    case Op::Softplus:
      return runtime::UnaryOp::Softplus;
    case Op::Not:
      return runtime::UnaryOp::Not;
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
    case Op::PowConst:
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
      break;
  }
  throw std::logic_error(
      fmt::format("internal: `{}` is not a unary element-wise operation", core::op_info(op).spelling));
}

runtime::BinaryOp binary_op(Op op) {
  switch (op) {
    case Op::Add: return runtime::BinaryOp::Add;
    case Op::Sub: return runtime::BinaryOp::Sub;
    case Op::Mul: return runtime::BinaryOp::Mul;
    case Op::Div: return runtime::BinaryOp::Div;
    case Op::PowConst:
    case Op::Pow: return runtime::BinaryOp::Pow;
    case Op::Min: return runtime::BinaryOp::Min;
    case Op::Max: return runtime::BinaryOp::Max;
    case Op::Lt: return runtime::BinaryOp::Lt;
    case Op::Le: return runtime::BinaryOp::Le;
    case Op::Gt: return runtime::BinaryOp::Gt;
    case Op::Ge: return runtime::BinaryOp::Ge;
    case Op::Eq: return runtime::BinaryOp::Eq;
    case Op::Ne:
      return runtime::BinaryOp::Ne;
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
      break;
  }
  throw std::logic_error(
      fmt::format("internal: `{}` is not a binary element-wise operation", core::op_info(op).spelling));
}

runtime::ReduceOp reduce_op(Op op) {
  switch (op) {
    case Op::Sum: return runtime::ReduceOp::Sum;
    case Op::Mean: return runtime::ReduceOp::Mean;
    case Op::ReduceMax: return runtime::ReduceOp::Max;
    case Op::ReduceMin: return runtime::ReduceOp::Min;
    case Op::LogSumExp:
      return runtime::ReduceOp::LogSumExp;
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
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::PowConst:
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
      break;
  }
  throw std::logic_error(fmt::format("internal: `{}` is not a reduction", core::op_info(op).spelling));
}

runtime::ContractPlan contract_plan(int rest_a, int rest_b, const elab::TensorType& ta, const elab::TensorType& tb,
                                    const std::vector<int>& axes, const std::vector<std::pair<int, int>>& pairs) {
  if (tb.rest && rest_b != rest_a)
    throw runtime::RuntimeError(fmt::format(
        "contract: the operands' `...` are the same axes, but the first holds {} and the second {}", rest_a, rest_b));
  const int lead_b = tb.rest ? rest_b : 0;
  runtime::ContractPlan plan;
  for (int i = 0; i < rest_a; ++i) plan.result.push_back({i, tb.rest ? i : -1});
  for (int i = 0; i < static_cast<int>(ta.axes.size()); ++i) {
    if (i == axes[0]) continue;
    int b = -1;
    for (const auto& [pa, pb] : pairs)
      if (pa == i) b = lead_b + pb;
    plan.result.push_back({rest_a + i, b});
  }
  for (int j = 0; j < static_cast<int>(tb.axes.size()); ++j) {
    if (j == axes[1]) continue;
    bool batch = false;
    for (const auto& [pa, pb] : pairs) batch = batch || pb == j;
    if (!batch) plan.result.push_back({-1, lead_b + j});
  }
  plan.contracted = {{rest_a + axes[0], lead_b + axes[1]}};
  return plan;
}

runtime::ScanAxes scan_axes(const core::Instr& in, int rest) {
  return {rest + in.axes.at(0), rest + in.axes.at(1), rest + in.axes.at(2)};
}

std::vector<int> merge_permutation(int rest, int explicit_axes, const std::vector<int>& merged) {
  int first = *std::min_element(merged.begin(), merged.end());
  std::vector<int> perm;
  for (int i = 0; i < rest; ++i) perm.push_back(i);
  for (int i = 0; i < explicit_axes; ++i) {
    if (i == first)
      for (int a : merged) perm.push_back(rest + a);
    if (std::find(merged.begin(), merged.end(), i) == merged.end()) perm.push_back(rest + i);
  }
  return perm;
}

runtime::AxisMap reduced_map(int rank, int rest, bool all_axes, const std::vector<int>& axes) {
  runtime::AxisMap map;
  int kept = 0;
  for (int i = 0; i < rank; ++i) {
    bool reduced = all_axes || std::find(axes.begin(), axes.end(), i - rest) != axes.end();
    map.push_back(reduced ? -1 : kept++);
  }
  return map;
}

std::vector<int> reduced_axes(int rank, int rest, bool all_axes, const std::vector<int>& axes) {
  std::vector<int> out;
  if (all_axes) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
  } else {
    for (int a : axes) out.push_back(rest + a);
  }
  return out;
}

RunDims::Dims RunDims::callee_dims(const core::Instr& in, const Dims& caller) const {
  if (in.callee < 0) throw EvalError("a call whose callee did not elaborate");
  return core::callee_dims(prog.functions.at(static_cast<size_t>(in.callee)), in, run,
                           [&](const elab::Size& s) -> std::optional<int64_t> { return eval_size(s, caller); });
}

}  // namespace quire::interp
