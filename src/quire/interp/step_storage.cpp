#include "quire/interp/step_storage.h"

#include "quire/core/ir.h"
#include "quire/interp/core_geometry.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

using core::Op;

StepStorage step_storage(const core::Function& fn, const core::Instr& in, const std::vector<runtime::Shape>& shapes) {
  StepStorage s;
  s.reads.assign(in.args.size(), true);
  // An operand whose shape alone the step takes: a draw's `like`, the model
  // operand of a cotangent rule (the x of `sum_to(ct, x)`).
  auto shape_only = [&](int k) {
    if (k >= 0 && static_cast<size_t>(k) < s.reads.size()) s.reads[static_cast<size_t>(k)] = false;
  };
  // As evaluate_step takes its operands: k's leading (`...`) axes are those
  // its static type does not name.
  auto explicit_count = [&](size_t k) { return static_cast<int>(fn.type_of(in.args.at(k)).tensor.axes.size()); };
  auto rest_of = [&](size_t k) { return static_cast<int>(shapes.at(k).size()) - explicit_count(k); };
  switch (in.op) {
    case Op::SplitAxis:  // runtime::reshape
      s.shares = true;
      break;
    case Op::ReshapeAs:
      s.shares = true;
      shape_only(1);
      break;
    case Op::Transpose: {
      std::vector<int> perm;
      for (int i = 0; i < rest_of(0); ++i) perm.push_back(i);
      for (int a : in.axes) perm.push_back(rest_of(0) + a);
      s.shares = runtime::transpose_shares(shapes.at(0), perm);
      break;
    }
    case Op::MergeAxes:  // a transpose, then a reshape
      s.shares = runtime::transpose_shares(shapes.at(0), merge_permutation(rest_of(0), explicit_count(0), in.axes));
      break;
    case Op::MergeGrad: {  // a reshape of the cotangent, then a transpose
      const std::vector<int> perm = merge_permutation(rest_of(1), explicit_count(1), in.axes);
      runtime::Shape permuted;
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) {
        permuted.push_back(shapes.at(1).at(static_cast<size_t>(perm[i])));
        inverse.at(static_cast<size_t>(perm[i])) = static_cast<int>(i);
      }
      s.shares = runtime::transpose_shares(permuted, inverse);
      shape_only(1);
      break;
    }
    case Op::Slice: {
      const core::attr::Range& r = in.attr<core::attr::Range>();
      s.shares = runtime::slice_shares(shapes.at(0), rest_of(0) + in.axes.at(0), r.start, r.stop, r.step);
      break;
    }
    case Op::ConcatGrad: {  // the part's slice of the cotangent; the parts give it its place
      const int axis = rest_of(1) + in.axes.at(0);
      const size_t part = static_cast<size_t>(in.attr<core::attr::Element>().index);
      int64_t offset = 0;
      for (size_t k = 0; k < part; ++k) offset += shapes.at(1 + k).at(static_cast<size_t>(axis));
      const int64_t size = shapes.at(1 + part).at(static_cast<size_t>(axis));
      s.shares = runtime::slice_shares(shapes.at(0), axis, offset, offset + size, 1);
      for (size_t k = 1; k < in.args.size(); ++k) shape_only(static_cast<int>(k));
      break;
    }
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
      shape_only(core::draw_like(in));
      break;
    case Op::ZerosLike:
      shape_only(0);
      break;
    case Op::SumTo:
    case Op::Expand:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::GatherGrad:
      shape_only(1);
      break;
    case Op::ScanGradA:  // λ, h, and a for its shape
      shape_only(2);
      break;
    case Op::Scan:
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
    case Op::Call:
    case Op::Fold:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;
  }
  return s;
}

}  // namespace quire::interp
