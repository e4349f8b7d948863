#include "quire/core/ir.h"

#include <fmt/format.h>

#include <stdexcept>

namespace quire::core {

const char* regularity_name(Regularity r) {
  switch (r) {
    case Regularity::Smooth: return "C∞";
    case Regularity::Continuous: return "C⁰";
    case Regularity::Discontinuous: return "discontinuous";
  }
  return "?";
}

const char* numerics_name(Numerics n) {
  switch (n) {
    case Numerics::Default: return "";
    case Numerics::High: return "numerics(high)";
    case Numerics::RegionBf16: return "precision(bf16)";
    case Numerics::RegionF16: return "precision(f16)";
  }
  return "";
}

const OpInfo& op_info(Op op) {
  static const OpInfo table[] = {
#define QUIRE_OP(E, S, A, EW, R, REG, CALLS) {S, A, EW, R, Regularity::REG, CALLS},
#include "quire/core/ops.def"
#undef QUIRE_OP
  };
  return table[static_cast<size_t>(op)];
}

std::optional<Op> op_by_spelling(std::string_view spelling) {
  static constexpr Op kOps[] = {
#define QUIRE_OP(E, S, A, EW, R, REG, CALLS) Op::E,
#include "quire/core/ops.def"
#undef QUIRE_OP
  };
  for (Op op : kOps)
    if (spelling == op_info(op).spelling) return op;
  return std::nullopt;
}

bool copies_elements(Op op) {
  switch (op) {
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
      return true;
    case core::Op::Const:
    case core::Op::ConstInt:
    case core::Op::ConstBool:
    case core::Op::HostConst:
    case core::Op::Real:
    case core::Op::Field:
    case core::Op::TupleGet:
    case core::Op::MakeTuple:
    case core::Op::Neg:
    case core::Op::Abs:
    case core::Op::Exp:
    case core::Op::Log:
    case core::Op::Sqrt:
    case core::Op::Rsqrt:
    case core::Op::Tanh:
    case core::Op::Erf:
    case core::Op::Sigmoid:
    case core::Op::Relu:
    case core::Op::Gelu:
    case core::Op::GeluTanh:
    case core::Op::Silu:
    case core::Op::Log1p:
    case core::Op::Expm1:
    case core::Op::Softplus:
    case core::Op::Not:
    case core::Op::Cast:
    case core::Op::Add:
    case core::Op::Sub:
    case core::Op::Mul:
    case core::Op::Div:
    case core::Op::Pow:
    case core::Op::Min:
    case core::Op::Max:
    case core::Op::Lt:
    case core::Op::Le:
    case core::Op::Gt:
    case core::Op::Ge:
    case core::Op::Eq:
    case core::Op::Ne:
    case core::Op::Where:
    case core::Op::Sum:
    case core::Op::Mean:
    case core::Op::ReduceMax:
    case core::Op::ReduceMin:
    case core::Op::LogSumExp:
    case core::Op::Dot:
    case core::Op::Contract:
    case core::Op::OneHot:
    case core::Op::KeySplit:
    case core::Op::Uniform:
    case core::Op::Normal:
    case core::Op::Bernoulli:
    case core::Op::Call:
    case core::Op::Fold:
    case core::Op::SumTo:
    case core::Op::Expand:
    case core::Op::ContractGradA:
    case core::Op::ContractGradB:
    case core::Op::GatherGrad:
    case core::Op::ZerosLike:
    case core::Op::MakeParams:
    case core::Op::FoldVjp:
      return false;
  }
  throw std::logic_error("internal: an operation outside ops.def");
}

const elab::Type& Function::type_of(int id) const {
  if (id >= 1 && id <= static_cast<int>(args.size())) return args[id - 1].type;
  size_t k = static_cast<size_t>(id) - args.size() - 1;
  if (k < body.size()) return body[k].type;
  throw std::logic_error("Core invariant: value %" + std::to_string(id) + " is not defined in " + name);
}

std::string Function::value_name(int id) const {
  if (id >= 1 && id <= static_cast<int>(args.size())) return args[id - 1].name;
  size_t k = static_cast<size_t>(id) - args.size() - 1;
  if (k < body.size() && !body[k].name.empty()) return body[k].name;
  return fmt::format("%{}", id);
}

}  // namespace quire::core
