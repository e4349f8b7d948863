#include "quire/interp/step_storage.h"

#include "quire/core/ir.h"
#include "quire/interp/core_geometry.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

using core::Op;

namespace {

bool shares_operand(const core::Function& fn, const core::Instr& in, const std::vector<runtime::Shape>& shapes) {
  // As evaluate_step takes its operands: k's leading (`...`) axes are those
  // its static type does not name.
  auto explicit_count = [&](size_t k) { return static_cast<int>(fn.type_of(in.args.at(k)).tensor.axes.size()); };
  auto rest_of = [&](size_t k) { return static_cast<int>(shapes.at(k).size()) - explicit_count(k); };
  switch (in.op) {
    case Op::SplitAxis:
    case Op::ReshapeAs:
      return true;  // runtime::reshape
    case Op::Transpose: {
      std::vector<int> perm;
      for (int i = 0; i < rest_of(0); ++i) perm.push_back(i);
      for (int a : in.axes) perm.push_back(rest_of(0) + a);
      return runtime::transpose_shares(shapes.at(0), perm);
    }
    case Op::MergeAxes:  // a transpose, then a reshape
      return runtime::transpose_shares(shapes.at(0), merge_permutation(rest_of(0), explicit_count(0), in.axes));
    case Op::MergeGrad: {  // a reshape of the cotangent, then a transpose
      const std::vector<int> perm = merge_permutation(rest_of(1), explicit_count(1), in.axes);
      runtime::Shape permuted;
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) {
        permuted.push_back(shapes.at(1).at(static_cast<size_t>(perm[i])));
        inverse.at(static_cast<size_t>(perm[i])) = static_cast<int>(i);
      }
      return runtime::transpose_shares(permuted, inverse);
    }
    case Op::Slice: {
      const core::attr::Range& r = in.attr<core::attr::Range>();
      return runtime::slice_shares(shapes.at(0), rest_of(0) + in.axes.at(0), r.start, r.stop, r.step);
    }
    case Op::ConcatGrad: {  // the part's slice of the cotangent
      const int axis = rest_of(1) + in.axes.at(0);
      const size_t part = static_cast<size_t>(in.attr<core::attr::Element>().index);
      int64_t offset = 0;
      for (size_t k = 0; k < part; ++k) offset += shapes.at(1 + k).at(static_cast<size_t>(axis));
      const int64_t size = shapes.at(1 + part).at(static_cast<size_t>(axis));
      return runtime::slice_shares(shapes.at(0), axis, offset, offset + size, 1);
    }
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
    case Op::Pow:
    case Op::PowConst:
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
    case Op::Concat:
    case Op::Gather:
    case Op::Pick:
    case Op::OneHot:
    case Op::Iota:
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
    case Op::SliceGrad:
    case Op::GatherGrad:
    case Op::PickGrad:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      return false;
  }
  return false;
}

/// The operand whose shape alone `in` takes, or -1: a draw's `like`, the
/// model operand of a cotangent rule (the x of `sum_to(ct, x)`).
int shape_only_operand(const core::Instr& in) {
  switch (in.op) {
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
      return core::draw_like(in);
    case Op::ZerosLike:
      return 0;
    case Op::SumTo:
    case Op::Expand:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::GatherGrad:
      return 1;
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
    case Op::Pow:
    case Op::PowConst:
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
    case Op::OneHot:
    case Op::Iota:
    case Op::KeySplit:
    case Op::Call:
    case Op::Fold:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::MakeParams:
    case Op::FoldVjp:
      return -1;
    case Op::ConcatGrad:  // every part's shape alone: handled by the caller
      return -1;
  }
  return -1;
}

}  // namespace

StepStorage step_storage(const core::Function& fn, const core::Instr& in, const std::vector<runtime::Shape>& shapes) {
  StepStorage s;
  s.shares = shares_operand(fn, in, shapes);
  s.reads.assign(in.args.size(), true);
  // concat's cotangent reads ct alone; the parts give the slice its place.
  if (in.op == Op::ConcatGrad)
    for (size_t k = 1; k < s.reads.size(); ++k) s.reads[k] = false;
  if (const int k = shape_only_operand(in); k >= 0 && static_cast<size_t>(k) < s.reads.size())
    s.reads[static_cast<size_t>(k)] = false;
  return s;
}

}  // namespace quire::interp
