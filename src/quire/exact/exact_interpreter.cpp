#include "quire/exact/exact_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/inputs.h"
#include "quire/realize/realization.h"
#include "quire/runtime/kernels.h"
#include "quire/runtime/scan_order.h"

namespace quire::exact {

using core::Op;
using interp::EvalError;
using runtime::Shape;
using runtime::Tensor;
// One translation of Core's geometry for both interpreters (interp/core_geometry.h).
using interp::axis_map;
using interp::binary_op;
using interp::contract_plan;
using interp::eval_size;
using interp::merge_permutation;
using interp::reduce_op;
using interp::reduced_axes;
using interp::reduced_map;
using interp::scan_axes;
using interp::subtree;
using interp::unary_op;

namespace {

// ---------------------------------------------------------------------------
// Index tensors: the runtime kernels move f64 positions 0, 1, …, n-1 (exact up
// to 2^53), and the Big elements follow the positions they return.

Tensor iota(const Shape& shape, double first = 0) {
  Tensor t = Tensor::real(shape);
  for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = first + static_cast<double>(i);
  return t;
}

size_t position(double p) { return static_cast<size_t>(p); }

/// The elements of `pool` at the positions `where` holds, in `where`'s shape.
BigTensor pick(const std::vector<const Big*>& pool, const Tensor& where) {
  BigTensor r;
  r.shape = where.shape;
  r.elems.reserve(where.reals.size());
  for (double p : where.reals) r.elems.push_back(*pool.at(position(p)));
  return r;
}

BigTensor pick(const BigTensor& x, const Tensor& where) {
  std::vector<const Big*> pool;
  pool.reserve(x.elems.size());
  for (const Big& e : x.elems) pool.push_back(&e);
  return pick(pool, where);
}

/// A restructuring kernel applied to a value: an integer tensor directly, a
/// real one through its positions.
template <class Kernel>
ExactValue moved(const ExactValue& x, Kernel kernel) {
  if (!x.is_real) {
    ExactValue v;
    v.is_real = false;
    v.other = kernel(x.other);
    return v;
  }
  return ExactValue::of(pick(x.real, kernel(iota(x.real.shape))));
}

const Shape& shape_of(const ExactValue& v) { return v.is_real ? v.real.shape : v.other.shape; }

/// A tensor's elements as Bigs: a real one as it is, an integer one converted
/// (the kernels' promotion, exact here) into `scratch`.
const BigTensor& reals_of(const ExactValue& v, BigTensor& scratch, int bits) {
  if (v.is_real) return v.real;
  scratch = to_big(v.other, bits);
  return scratch;
}

std::vector<size_t> positions(const Tensor& where) {
  std::vector<size_t> r;
  r.reserve(where.reals.size());
  for (double p : where.reals) r.push_back(position(p));
  return r;
}

/// For each element of the broadcast result (row-major), the position of the
/// operand element it reads: broadcast_to of the operand's positions.
std::vector<size_t> read_positions(const Tensor& operand_positions, const runtime::AxisMap& map, const Shape& result) {
  return positions(runtime::broadcast_to(operand_positions, map, result));
}

// ---------------------------------------------------------------------------
// Element-wise arithmetic at N bits.

Big apply_unary(Op op, const Big& x) {
  switch (op) {
    case Op::Neg: return neg(x);
    case Op::Abs: return abs(x);
    case Op::Exp: return exp(x);
    case Op::Log: return log(x);
    case Op::Sqrt: return sqrt(x);
    case Op::Rsqrt: return rsqrt(x);
    case Op::Tanh: return tanh(x);
    case Op::Erf: return erf(x);
    case Op::Sigmoid: return sigmoid(x);
    case Op::Relu: return relu(x);
    case Op::Gelu: return gelu(x);
    case Op::GeluTanh: return gelu_tanh(x);
    case Op::Silu: return silu(x);
    case Op::Log1p:
      return log1p(x);
    case Op::Expm1:
      return expm1(x);
    case Op::Softplus:
      return softplus(x);
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
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
  throw std::logic_error(fmt::format("internal: `{}` is not a real unary operation", core::op_info(op).spelling));
}

Big apply_binary(Op op, const Big& a, const Big& b) {
  switch (op) {
    case Op::Add: return add(a, b);
    case Op::Sub: return sub(a, b);
    case Op::Mul: return mul(a, b);
    case Op::Div: return div(a, b);
    case Op::PowConst:
    case Op::Pow: return pow(a, b);
    case Op::Min: return min(a, b);
    case Op::Max: return max(a, b);
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
  throw std::logic_error(fmt::format("internal: `{}` is not a real binary operation", core::op_info(op).spelling));
}

bool apply_comparison(Op op, const Big& a, const Big& b) {
  switch (op) {
    case Op::Lt: return lt(a, b);
    case Op::Le: return le(a, b);
    case Op::Gt: return gt(a, b);
    case Op::Ge: return ge(a, b);
    case Op::Eq: return eq(a, b);
    case Op::Ne:
      return ne(a, b);
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
  throw std::logic_error(fmt::format("internal: `{}` is not a comparison", core::op_info(op).spelling));
}

// ---------------------------------------------------------------------------
// Reductions and contractions, in the order kernels.h states.

/// reduce(op, x, axes) at N bits: each result element folds its slice in
/// row-major order of the reduced axes, left to right, from +0 (Sum) or from
/// the first element (Max, Min).
BigTensor reduce(Op op, const BigTensor& x, const std::vector<int>& axes, int bits) {
  const runtime::ReduceOp rop = reduce_op(op);
  // The kernel decides the result's shape, the empty cases and their errors.
  Tensor probe = runtime::reduce(rop, Tensor::real(x.shape), axes);
  if (axes.empty()) return x;  // a copy, no fold (which would turn -0 into +0)
  std::vector<int> perm;
  for (int d = 0; d < static_cast<int>(x.rank()); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) perm.push_back(d);
  perm.insert(perm.end(), axes.begin(), axes.end());
  // Row i of the permuted positions is result element i's slice, in order.
  const std::vector<size_t> slice = positions(runtime::transpose(iota(x.shape), perm));
  const size_t out_size = probe.reals.size();
  const size_t count = out_size > 0 ? slice.size() / out_size : 0;
  if (count == 0) return to_big(probe, bits);  // +0, NaN or -inf as the kernel gives them
  BigTensor r;
  r.shape = probe.shape;
  r.elems.reserve(out_size);
  for (size_t i = 0; i < out_size; ++i) {
    const size_t* s = slice.data() + i * count;
    auto fold = [&](auto f) {
      Big acc = x.elems[s[0]];
      for (size_t k = 1; k < count; ++k) acc = f(acc, x.elems[s[k]]);
      return acc;
    };
    auto sum = [&]() {
      Big acc(bits);
      for (size_t k = 0; k < count; ++k) acc = add(acc, x.elems[s[k]]);
      return acc;
    };
    switch (rop) {
      case runtime::ReduceOp::Sum: r.elems.push_back(sum()); break;
      case runtime::ReduceOp::Mean:
        r.elems.push_back(div(sum(), Big::from_int(static_cast<int64_t>(count), bits)));
        break;
      case runtime::ReduceOp::Max: r.elems.push_back(fold([](const Big& a, const Big& b) { return max(a, b); })); break;
      case runtime::ReduceOp::Min: r.elems.push_back(fold([](const Big& a, const Big& b) { return min(a, b); })); break;
      case runtime::ReduceOp::LogSumExp: {
        Big m = fold([](const Big& a, const Big& b) { return max(a, b); });
        if (!mpfr_number_p(m.get())) {  // ±inf or NaN: the result is m itself
          r.elems.push_back(m);
          break;
        }
        Big acc(bits);
        for (size_t k = 0; k < count; ++k) acc = add(acc, exp(sub(x.elems[s[k]], m)));
        r.elems.push_back(add(m, log(acc)));
        break;
      }
    }
  }
  return r;
}

/// contract(a, b, result, contracted) at N bits: acc = +0; acc = acc + a·b
/// over the contracted index tuples in row-major order of the pairs as listed.
BigTensor contract(const BigTensor& a, const BigTensor& b, const runtime::ContractPlan& plan, int bits) {
  // The kernel checks the plan and the sizes and gives the result's shape.
  Tensor probe = runtime::contract(Tensor::real(a.shape), Tensor::real(b.shape), plan.result, plan.contracted);
  const std::vector<int64_t> as = runtime::contiguous_strides(a.shape);
  const std::vector<int64_t> bs = runtime::contiguous_strides(b.shape);
  // Each result axis's step in a and in b (a batch axis steps both).
  std::vector<int64_t> a_step, b_step;
  for (const runtime::ResultAxis& r : plan.result) {
    a_step.push_back(r.a_axis >= 0 ? as[r.a_axis] : 0);
    b_step.push_back(r.b_axis >= 0 ? bs[r.b_axis] : 0);
  }
  // The contracted tuples' offsets, in row-major order of the pairs.
  Shape tuple_shape;
  for (auto [ax, bx] : plan.contracted) tuple_shape.push_back(a.shape[ax]);
  const int64_t tuples = runtime::element_count(tuple_shape);
  std::vector<int64_t> a_tuple(static_cast<size_t>(tuples)), b_tuple(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t rem = t, ao = 0, bo = 0;
    for (size_t p = plan.contracted.size(); p-- > 0;) {
      const int64_t idx = rem % tuple_shape[p];
      rem /= tuple_shape[p];
      ao += idx * as[plan.contracted[p].first];
      bo += idx * bs[plan.contracted[p].second];
    }
    a_tuple[static_cast<size_t>(t)] = ao;
    b_tuple[static_cast<size_t>(t)] = bo;
  }
  BigTensor r;
  r.shape = probe.shape;
  r.elems.reserve(probe.reals.size());
  for (int64_t i = 0; i < static_cast<int64_t>(probe.reals.size()); ++i) {
    int64_t rem = i, ao = 0, bo = 0;
    for (size_t d = r.shape.size(); d-- > 0;) {
      const int64_t idx = rem % r.shape[d];
      rem /= r.shape[d];
      ao += idx * a_step[d];
      bo += idx * b_step[d];
    }
    Big acc(bits);
    for (int64_t t = 0; t < tuples; ++t)
      acc = add(acc, mul(a.elems[static_cast<size_t>(ao + a_tuple[t])], b.elems[static_cast<size_t>(bo + b_tuple[t])]));
    r.elems.push_back(std::move(acc));
  }
  return r;
}

/// Adds ct[i] into out[where[i]] for each i in row-major order of ct (the
/// adjoints' fold: sum_to, gather_grad).
void scatter_add(BigTensor& out, const std::vector<size_t>& where, const BigTensor& ct) {
  if (where.size() != ct.elems.size())
    throw std::logic_error(fmt::format("internal: a scatter of {} cotangent elements to {} places", ct.elems.size(),
                                       where.size()));
  for (size_t i = 0; i < where.size(); ++i) out.elems.at(where[i]) = add(out.elems[where[i]], ct.elems[i]);
}

BigTensor& real_leaf(BigParamMap& tree, const std::string& path, const Shape& shape, const core::Function& fn,
                     const core::Instr& in) {
  auto it = tree.find(path);
  if (it == tree.end() || it->second.shape != shape)
    throw std::logic_error(fmt::format("internal: {} adds to the leaf `{}`, which the tree does not have so",
                                       core::site_name(fn, in.id), path));
  return it->second;
}

/// A real literal's value at N bits: the decimal its source text spells
/// (`0.044715`, `1e-6`), when the site is such a literal and the elaborator's
/// double is that decimal's rounding; otherwise (a folded constant, `2.0 *
/// 3.0`) the double itself.
Big literal(const elab::Program& prog, const core::Instr& in, int bits) {
  const SourceFile& file = prog.sources.file(in.loc.begin.file);
  if (in.loc.begin.offset + in.loc.length <= file.text.size() && in.loc.length > 0 && in.loc.length < 64) {
    const std::string text = file.text.substr(in.loc.begin.offset, in.loc.length);
    if (text.find_first_not_of("0123456789.eE+-") == std::string::npos) {
      try {
        Big decimal = Big::from_decimal(text, bits);
        if (decimal.to_double() == in.attr<core::attr::Literal>().value) return decimal;
      } catch (const std::invalid_argument&) {
      }
    }
  }
  return Big(in.attr<core::attr::Literal>().value, bits);
}

}  // namespace

// ---------------------------------------------------------------------------

ExactInterpreter::ExactInterpreter(const elab::Program& prog, std::map<std::string, int64_t> dims, int bits)
    : prog_(prog), dims_(std::move(dims)), bits_(bits) {
  if (bits < kMinBits || bits > kMaxBits)
    throw std::invalid_argument(fmt::format("a precision of {} bits is outside [{}, {}]", bits, kMinBits, kMaxBits));
}

ExactValue from_f64(const interp::Value& v, int bits) {
  switch (v.kind) {
    case interp::Value::Kind::Tensor: return ExactValue::of(v.tensor, bits);
    case interp::Value::Kind::Key: return ExactValue::of_key(v.key);
    case interp::Value::Kind::Host: return ExactValue::of_host(v.host);
    case interp::Value::Kind::Tuple: {
      std::vector<ExactValue> elements;
      for (const interp::Value& e : v.elements) elements.push_back(from_f64(e, bits));
      return ExactValue::of_tuple(std::move(elements));
    }
    case interp::Value::Kind::Params: {
      auto tree = std::make_shared<BigParamMap>();
      if (v.params)
        for (const auto& [path, t] : *v.params) tree->emplace(path, to_big(t, bits));
      return ExactValue::of_params(std::move(tree));
    }
  }
  return ExactValue{};
}

interp::Value to_f64(const ExactValue& v) {
  switch (v.kind) {
    case ExactValue::Kind::Tensor: return interp::Value::of(v.is_real ? to_f64(v.real) : v.other);
    case ExactValue::Kind::Key: return interp::Value::of_key(v.key);
    case ExactValue::Kind::Host: return interp::Value::of_host(v.host);
    case ExactValue::Kind::Tuple: {
      std::vector<interp::Value> elements;
      for (const ExactValue& e : v.elements) elements.push_back(to_f64(e));
      return interp::Value::of_tuple(std::move(elements));
    }
    case ExactValue::Kind::Params: {
      auto tree = std::make_shared<interp::ParamMap>();
      if (v.params)
        for (const auto& [path, t] : *v.params) tree->emplace(path, to_f64(t));
      return interp::Value::of_params(std::move(tree));
    }
  }
  return interp::Value{};
}

void flatten(const ExactValue& v, const std::string& path, std::vector<std::pair<std::string, ExactValue>>& out) {
  switch (v.kind) {
    case ExactValue::Kind::Tensor: out.emplace_back(path, v); return;
    case ExactValue::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i) flatten(v.elements[i], fmt::format("{}.{}", path, i), out);
      return;
    case ExactValue::Kind::Host: out.emplace_back(path, ExactValue::of(Tensor::scalar(v.host), kMinBits)); return;
    case ExactValue::Kind::Key: {
      Tensor t = Tensor::integer(runtime::ElemKind::I64, {2});
      t.ints = {v.key.k0, v.key.k1};
      out.emplace_back(path, ExactValue::of(t, kMinBits));
      return;
    }
    case ExactValue::Kind::Params:
      for (const auto& [p, t] : *v.params) out.emplace_back(path + "." + p, ExactValue::of(t));
      return;
  }
}

ExactValue ExactInterpreter::call(int function, const std::vector<interp::Value>& args) {
  const core::Function& fn = prog_.functions.at(function);
  if (args.size() != fn.args.size())
    throw EvalError(fmt::format("`{}` takes {} arguments, given {}", fn.name, fn.args.size(), args.size()));
  std::vector<ExactValue> exact;
  for (size_t i = 0; i < args.size(); ++i) {
    interp::check_argument(prog_, fn.args[i].type, args[i], dims_, fmt::format("argument `{}`", fn.args[i].name));
    exact.push_back(from_f64(args[i], bits_));
  }
  return eval(function, exact, dims_, 0);
}

void ExactInterpreter::check_result(const core::Function& fn, const core::Instr& in, const ExactValue& v,
                                    const std::map<std::string, int64_t>& dims) const {
  if (!in.type.is_tensor()) return;
  const elab::TensorType& t = in.type.tensor;
  auto fail = [&](const std::string& what) {
    throw std::logic_error(fmt::format("internal: exact: {} is {} but its value {}", core::site_name(fn, in.id),
                                       prog_.printer().tensor(t), what));
  };
  if (v.kind != ExactValue::Kind::Tensor) fail("is not a tensor");
  const Shape& shape = shape_of(v);
  if (v.is_real && v.real.elems.size() != static_cast<size_t>(v.real.size()))
    fail(fmt::format("holds {} elements for shape {}", v.real.elems.size(), runtime::shape_string(shape)));
  size_t n = t.axes.size();
  if (shape.size() < n || (!t.rest && shape.size() != n)) fail("has shape " + runtime::shape_string(shape));
  for (size_t i = 0; i < n; ++i) {
    auto want = t.axes[i].size.evaluate(dims);
    if (want && *want != shape[shape.size() - n + i]) fail("has shape " + runtime::shape_string(shape));
  }
  const bool want_real = t.elem != elab::Elem::I32 && t.elem != elab::Elem::I64 && t.elem != elab::Elem::Bool;
  if (want_real != v.is_real || (!v.is_real && (t.elem == elab::Elem::Bool) != (v.other.kind == runtime::ElemKind::Bool)))
    fail(want_real ? "is not real" : fmt::format("holds {} elements", v.is_real ? "real" : runtime::elem_kind_name(v.other.kind)));
}

ExactValue ExactInterpreter::eval(int function, const std::vector<ExactValue>& args,
                                  const std::map<std::string, int64_t>& dims, int depth) {
  const core::Function& fn = interp::frame_function(prog_, function, args.size(), depth);
  std::vector<ExactValue> env(static_cast<size_t>(fn.value_count() + 1));
  for (size_t i = 0; i < args.size(); ++i) env[i + 1] = args[i];
  for (const core::Instr& in : fn.body) {
    try {
      env[in.id] = step(fn, in, env, dims, depth);
      check_result(fn, in, env[in.id], dims);
    } catch (const runtime::RuntimeError& e) {
      throw interp::error_at(prog_, fn, in, e);
    }
    if (observer_) observer_(fn, in, env[in.id], env);
  }
  return env[fn.result_value];
}

bool ExactInterpreter::adds_terms(Op op) {
  switch (op) {
    case Op::Sum:
    case Op::Mean:
    case Op::Dot:
    case Op::Contract:
    case Op::SumTo:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::GatherGrad: return true;
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
    case Op::Scan:
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
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
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
    case Op::Expand:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::ScanGradA:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      return false;
  }
  throw std::logic_error("internal: an operation outside ops.def");
}

ExactValue ExactInterpreter::absolute_terms(const core::Function& fn, const core::Instr& in,
                                            const std::vector<ExactValue>& env, bool ones) {
  if (!adds_terms(in.op))
    throw std::logic_error(fmt::format("internal: {} (`{}`) adds no terms", core::site_name(fn, in.id),
                                       core::op_info(in.op).spelling));
  // Only the operands' slots are filled: `step` reads nothing else for these operations.
  if (absolute_env_.size() < env.size()) absolute_env_.resize(env.size());
  std::vector<ExactValue>& absolute = absolute_env_;
  for (size_t k = 0; k < in.args.size(); ++k) {
    const ExactValue& x = env.at(static_cast<size_t>(in.args[k]));
    ExactValue& a = absolute.at(static_cast<size_t>(in.args[k]));
    const bool positions = in.op == Op::GatherGrad && k == 2;  // ids: where to add, not what
    if (x.kind != ExactValue::Kind::Tensor || positions || (!x.is_real && x.other.kind == runtime::ElemKind::Bool)) {
      a = x;  // keys, trees, indices and booleans (0 or 1) as they are
    } else if (!x.is_real) {
      a = x;
      a.other = runtime::unary(runtime::UnaryOp::Abs, x.other);
    } else {
      BigTensor t;
      t.shape = x.real.shape;
      t.elems.reserve(x.real.elems.size());
      for (const Big& e : x.real.elems) t.elems.push_back(ones ? Big(1.0, e.bits()) : abs(e));
      a = ExactValue::of(std::move(t));
    }
  }
  // None of these operations calls a function or reads a dimension.
  ExactValue result;
  try {
    result = step(fn, in, absolute, dims_, 0);
  } catch (...) {
    for (int a : in.args) absolute.at(static_cast<size_t>(a)) = ExactValue{};
    throw;
  }
  for (int a : in.args) absolute.at(static_cast<size_t>(a)) = ExactValue{};
  return result;
}

struct ExactInterpreter::Callees : interp::RunDims {
  using Value = ExactValue;
  using Forward = core::NoForward;
  ExactInterpreter& self;
  const core::Function& fn;  ///< the caller, and its instruction `in`
  const core::Instr& in;
  int depth;

  ExactValue evaluate(const core::Evaluation<Forward>& e, const std::vector<ExactValue>& args, const Dims& dims) {
    return self.eval(e.function, args, dims, depth + 1);
  }
  /// Copy `i` of a stack: every leaf loses its leading axis.
  static ExactValue copy_of(const ExactValue& stacked, int64_t i) {
    auto out = std::make_shared<BigParamMap>();
    for (const auto& [path, t] : *stacked.params) {
      if (t.shape.empty()) throw EvalError(fmt::format("stacked parameter `{}` has no stack axis", path));
      BigTensor s;
      s.shape.assign(t.shape.begin() + 1, t.shape.end());
      const size_t per_copy = static_cast<size_t>(s.size());
      auto first = t.elems.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * per_copy);
      s.elems.assign(first, first + static_cast<std::ptrdiff_t>(per_copy));
      out->emplace(path, std::move(s));
    }
    return ExactValue::of_params(std::move(out));
  }
  /// A fold's further operand as copy i sees it: a key is copy_key(k, i).
  static ExactValue for_copy(const ExactValue& operand, int64_t i) {
    return operand.kind == ExactValue::Kind::Key ? ExactValue::of_key(runtime::copy_key(operand.key, i)) : operand;
  }
  /// Each leaf's copies stacked along a new leading axis, copy 0 first.
  ExactValue stack(const ExactValue& stacked, const std::vector<ExactValue>& grads) const {
    auto out = std::make_shared<BigParamMap>();
    for (const auto& [path, t] : *stacked.params) {
      BigTensor g;
      g.shape = t.shape;
      for (const ExactValue& copy : grads) {
        const BigTensor& part = copy.params->at(path);
        g.elems.insert(g.elems.end(), part.elems.begin(), part.elems.end());
      }
      if (g.elems.size() != static_cast<size_t>(g.size()))
        throw std::logic_error(fmt::format("internal: {}: the copies' gradients of `{}` do not fill its stack",
                                           core::site_name(fn, in.id), path));
      out->emplace(path, std::move(g));
    }
    return ExactValue::of_params(std::move(out));
  }
  static ExactValue tuple(std::vector<ExactValue> elements) { return ExactValue::of_tuple(std::move(elements)); }
  static ExactValue element(const ExactValue& tuple, size_t k) { return tuple.elements.at(k); }
};

ExactValue ExactInterpreter::step(const core::Function& fn, const core::Instr& in, const std::vector<ExactValue>& env,
                                  const std::map<std::string, int64_t>& dims, int depth) {
  const int bits = bits_;
  auto arg = [&](size_t k) -> const ExactValue& { return env.at(in.args.at(k)); };
  auto explicit_count = [&](size_t k) { return fn.type_of(in.args.at(k)).tensor.axes.size(); };
  auto rank_of = [&](size_t k) { return static_cast<int64_t>(shape_of(arg(k)).size()); };
  // Leading (`...`) axes of operand k at run time.
  auto rest_of = [&](size_t k) { return static_cast<int>(rank_of(k) - static_cast<int64_t>(explicit_count(k))); };
  // Operand k's elements as Bigs (an integer operand converted).
  std::vector<BigTensor> scratch(in.args.size());
  auto real_arg = [&](size_t k) -> const BigTensor& { return reals_of(arg(k), scratch.at(k), bits); };
  auto big = [&](double x) { return Big(x, bits); };
  const core::OpInfo& info = core::op_info(in.op);
  switch (in.op) {
    case Op::Const: return ExactValue::of(BigTensor{{}, {literal(prog_, in, bits)}});
    case Op::HostConst: return ExactValue::of_host(in.attr<core::attr::Literal>().value);
    case Op::ConstInt: return ExactValue::of_host(static_cast<double>(in.attr<core::attr::Integer>().value));
    case Op::ConstBool: return ExactValue::of_host(in.attr<core::attr::Boolean>().value ? 1.0 : 0.0);
    case Op::Real: return ExactValue::of(BigTensor{{}, {big(arg(0).host)}});
    case Op::Field: {
      const BigParamMap& tree = *arg(0).params;
      if (in.type.kind == elab::TypeKind::Tensor) {
        const std::string& name = in.attr<core::attr::Member>().name;
        auto it = tree.find(name);
        if (it == tree.end()) throw runtime::RuntimeError(fmt::format("parameter `{}` is missing", name));
        return ExactValue::of(it->second);
      }
      return ExactValue::of_params(std::make_shared<const BigParamMap>(subtree(tree, in.attr<core::attr::Member>().name)));
    }
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
    case Op::TupleGet:
    case Op::MakeTuple: {
      Callees callees{{prog_, dims_}, *this, fn, in, depth};
      return core::walk_structural(callees, in, arg, dims);
    }
    case Op::Cast: {
      const ExactValue& x = arg(0);
      if (const std::optional<runtime::ElemKind> integer = precision::cast_integer_kind(in.attr<core::attr::CastTo>().target)) {
        const runtime::ElemKind kind = *integer;
        ExactValue v;
        v.is_real = false;
        if (!x.is_real) {
          v.other = runtime::cast_kind(x.other, kind);
        } else if (kind == runtime::ElemKind::Bool) {
          v.other = Tensor::integer(kind, x.real.shape);
          for (size_t i = 0; i < x.real.elems.size(); ++i) v.other.ints[i] = x.real.elems[i].is_zero() ? 0 : 1;
        } else {
          // Truncation toward zero at N bits first, so that a value just below an
          // integer does not round up to it on the way to f64.
          Tensor truncated = Tensor::real(x.real.shape);
          for (size_t i = 0; i < x.real.elems.size(); ++i) {
            Big r(bits);
            mpfr_trunc(r.get(), x.real.elems[i].get());
            truncated.reals[i] = r.to_double();
          }
          v.other = runtime::cast_kind(truncated, kind);
        }
        return v;
      }
      // To a float type: no realization, so the value stays exact.
      return ExactValue::of(real_arg(0));
    }
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
      break;
  }
  if (info.elementwise) {
    int64_t result_rest = 0;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.at(k).rest) result_rest = std::max<int64_t>(result_rest, rest_of(k));
    const int rank = static_cast<int>(result_rest + static_cast<int64_t>(in.type.tensor.axes.size()));
    auto map = [&](size_t k) { return axis_map(in.align.at(k), rank_of(k), explicit_count(k), result_rest); };
    if (in.args.size() == 1 && in.op != Op::PowConst) {  // identity alignment
      const ExactValue& x = arg(0);
      const bool keeps_ints = in.op == Op::Not || in.op == Op::Neg || in.op == Op::Abs || in.op == Op::Relu;
      if (!x.is_real && keeps_ints) {
        ExactValue v;
        v.is_real = false;
        v.other = runtime::unary(unary_op(in.op), x.other);
        return v;
      }
      const BigTensor& xs = real_arg(0);
      BigTensor r;
      r.shape = xs.shape;
      r.elems.reserve(xs.elems.size());
      for (const Big& e : xs.elems) r.elems.push_back(apply_unary(in.op, e));
      return ExactValue::of(std::move(r));
    }
    // Operand k's positions, and its alignment with the result.
    std::vector<Tensor> where;
    std::vector<runtime::AxisMap> maps;
    for (size_t k = 0; k < in.args.size(); ++k) {
      where.push_back(iota(shape_of(arg(k))));
      maps.push_back(map(k));
    }
    BigTensor exponent;  // `pow 2 x`: the literal exponent, a scalar read by every element
    if (in.op == Op::PowConst) {
      exponent = BigTensor{{}, {big(in.attr<core::attr::Exponent>().value)}};
      where.push_back(iota({}));
      maps.push_back(runtime::AxisMap(static_cast<size_t>(rank), -1));
    }
    std::vector<std::pair<const Tensor*, runtime::AxisMap>> operands;
    for (size_t k = 0; k < where.size(); ++k) operands.emplace_back(&where[k], maps[k]);
    const Shape shape = runtime::broadcast_result_shape(operands, rank);
    std::vector<std::vector<size_t>> reads;
    for (size_t k = 0; k < where.size(); ++k) reads.push_back(read_positions(where[k], maps[k], shape));
    const size_t n = static_cast<size_t>(runtime::element_count(shape));
    if (in.op == Op::Where) {
      const Tensor& cond = arg(0).other;
      if (!arg(1).is_real && !arg(2).is_real) {
        ExactValue v;
        v.is_real = false;
        v.other = runtime::where(cond, maps[0], arg(1).other, maps[1], arg(2).other, maps[2], rank);
        return v;
      }
      const BigTensor& a = real_arg(1);
      const BigTensor& b = real_arg(2);
      BigTensor r;
      r.shape = shape;
      for (size_t i = 0; i < n; ++i)
        r.elems.push_back(cond.ints.at(reads[0][i]) != 0 ? a.elems[reads[1][i]] : b.elems[reads[2][i]]);
      return ExactValue::of(std::move(r));
    }
    const bool in_reals = (where.size() == 2 && (arg(0).is_real || arg(1).is_real)) || in.op == Op::Div ||
                          in.op == Op::Pow || in.op == Op::PowConst;
    if (!in_reals) {  // integers and booleans: the kernel's own arithmetic, exact already
      ExactValue v;
      v.is_real = false;
      v.other = runtime::binary(binary_op(in.op), arg(0).other, maps[0], arg(1).other, maps[1], rank);
      return v;
    }
    const BigTensor& a = real_arg(0);
    const BigTensor& b = in.args.size() == 1 ? exponent : real_arg(1);
    if (core::op_info(in.op).compares) {
      ExactValue v;
      v.is_real = false;
      v.other = Tensor::integer(runtime::ElemKind::Bool, shape);
      for (size_t i = 0; i < n; ++i)
        v.other.ints[i] = apply_comparison(in.op, a.elems[reads[0][i]], b.elems[reads[1][i]]) ? 1 : 0;
      return v;
    }
    BigTensor r;
    r.shape = shape;
    r.elems.reserve(n);
    for (size_t i = 0; i < n; ++i) r.elems.push_back(apply_binary(in.op, a.elems[reads[0][i]], b.elems[reads[1][i]]));
    return ExactValue::of(std::move(r));
  }
  switch (in.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp: {
      const std::vector<int> axes = reduced_axes(static_cast<int>(rank_of(0)), rest_of(0), in.all_axes, in.axes);
      const ExactValue& x = arg(0);
      if (!x.is_real && (in.op == Op::Sum || in.op == Op::ReduceMax || in.op == Op::ReduceMin)) {
        ExactValue v;
        v.is_real = false;
        v.other = runtime::reduce(reduce_op(in.op), x.other, axes);
        return v;
      }
      return ExactValue::of(reduce(in.op, real_arg(0), axes, bits));
    }
    case Op::Dot:
      return ExactValue::of(contract(real_arg(0), real_arg(1),
                                     runtime::dot_plan(static_cast<int>(rank_of(0)), static_cast<int>(rank_of(1))), bits));
    case Op::Contract:
      return ExactValue::of(contract(real_arg(0), real_arg(1),
                                     contract_plan(rest_of(0), rest_of(1), fn.type_of(in.args[0]).tensor,
                                                   fn.type_of(in.args[1]).tensor, in.axes, in.pairs),
                                     bits));
    case Op::Transpose: {
      int rest = rest_of(0);
      std::vector<int> perm;
      for (int i = 0; i < rest; ++i) perm.push_back(i);
      for (int a : in.axes) perm.push_back(rest + a);
      return moved(arg(0), [&](const Tensor& t) { return runtime::transpose(t, perm); });
    }
    case Op::SplitAxis: {
      const Shape& x = shape_of(arg(0));
      int at = rest_of(0) + in.axes[0];
      Shape shape(x.begin(), x.begin() + at);
      for (const elab::Size& s : in.sizes) shape.push_back(eval_size(s, dims));
      shape.insert(shape.end(), x.begin() + at + 1, x.end());
      return moved(arg(0), [&](const Tensor& t) { return runtime::reshape(t, shape); });
    }
    case Op::MergeAxes: {
      int rest = rest_of(0);
      int first = *std::min_element(in.axes.begin(), in.axes.end());
      std::vector<int> perm = merge_permutation(rest, static_cast<int>(explicit_count(0)), in.axes);
      return moved(arg(0), [&](const Tensor& x) {
        Tensor t = runtime::transpose(x, perm);
        Shape shape;
        int at = rest + first;
        int64_t merged = 1;
        for (size_t i = 0; i < t.shape.size(); ++i) {
          int ii = static_cast<int>(i);
          if (ii >= at && ii < at + static_cast<int>(in.axes.size())) {
            merged *= t.shape[i];
            if (ii == at + static_cast<int>(in.axes.size()) - 1) shape.push_back(merged);
          } else {
            shape.push_back(t.shape[i]);
          }
        }
        return runtime::reshape(t, shape);
      });
    }
    case Op::Concat: {
      const int axis = rest_of(0) + in.axes[0];
      bool any_real = false;
      for (size_t k = 0; k < in.args.size(); ++k) any_real = any_real || arg(k).is_real;
      if (!any_real) {
        std::vector<const Tensor*> parts;
        for (size_t k = 0; k < in.args.size(); ++k) parts.push_back(&arg(k).other);
        ExactValue v;
        v.is_real = false;
        v.other = runtime::concat(parts, axis);
        return v;
      }
      // The parts' positions numbered on from each other into one pool.
      std::vector<Tensor> where;
      std::vector<const Big*> pool;
      for (size_t k = 0; k < in.args.size(); ++k) {
        const BigTensor& part = real_arg(k);
        where.push_back(iota(part.shape, static_cast<double>(pool.size())));
        for (const Big& e : part.elems) pool.push_back(&e);
      }
      std::vector<const Tensor*> parts;
      for (const Tensor& w : where) parts.push_back(&w);
      return ExactValue::of(pick(pool, runtime::concat(parts, axis)));
    }
    case Op::Slice: {
      // The static type fixes the slice's length; a symbolic axis shorter than
      // `stop` would silently clip it, so that is an error (as in the reference).
      int axis = rest_of(0) + in.axes[0];
      int64_t size = shape_of(arg(0)).at(static_cast<size_t>(axis));
      const core::attr::Range& r = in.attr<core::attr::Range>();
      if (r.stop > size)
        throw runtime::RuntimeError(fmt::format("slice [{}, {}) of axis `{}` is out of range: the axis has size {}",
                                                r.start, r.stop,
                                                fn.type_of(in.args[0]).tensor.axes.at(in.axes[0]).name, size));
      return moved(arg(0), [&](const Tensor& t) { return runtime::slice(t, axis, r.start, r.stop, r.step); });
    }
    case Op::Gather: {
      const Tensor& ids = arg(1).other;
      return moved(arg(0), [&](const Tensor& t) { return runtime::gather(t, in.axes[0], ids); });
    }
    case Op::Pick: {
      const Tensor& ids = arg(1).other;
      const int axis = rest_of(0) + in.axes[0];
      return moved(arg(0), [&](const Tensor& t) { return runtime::pick(t, axis, ids); });
    }
    case Op::OneHot: return ExactValue::of(runtime::one_hot(arg(0).other, eval_size(in.sizes.at(0), dims)), bits);
    case Op::Iota: return ExactValue::of(runtime::iota(eval_size(in.sizes.at(0), dims)), bits);
    case Op::KeySplit: {
      auto [a, b] = runtime::split_key(arg(0).key);
      return ExactValue::of_tuple({ExactValue::of_key(a), ExactValue::of_key(b)});
    }
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli: {
      // quire's draws are defined in f64 (Philox); their values enter exactly.
      Shape shape;
      if (const int like = core::draw_like(in); like >= 0) shape = shape_of(arg(static_cast<size_t>(like)));
      for (const elab::Size& s : in.sizes) shape.push_back(eval_size(s, dims));
      if (in.op == Op::Uniform) {
        const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
        return ExactValue::of(runtime::draw_uniform(arg(0).key, shape, d.first, d.second), bits);
      }
      if (in.op == Op::Normal) {
        const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
        return ExactValue::of(runtime::draw_normal(arg(0).key, shape, d.first, d.second), bits);
      }
      double p = real_arg(1).elems.at(0).to_double();
      if (!(p >= 0 && p <= 1)) throw runtime::RuntimeError(fmt::format("bernoulli: probability {} is outside [0, 1]", p));
      return ExactValue::of(runtime::draw_bernoulli(arg(0).key, shape, p), bits);
    }
    case Op::SumTo: {
      // ct has the forward result's shape; x's alignment in the forward op says what it summed over.
      const BigTensor& ct = real_arg(0);
      int result_rest = static_cast<int>(ct.rank() - static_cast<int64_t>(explicit_count(0)));
      runtime::AxisMap map = axis_map(in.align.at(0), rank_of(1), explicit_count(1), result_rest);
      const Shape& shape = shape_of(arg(1));
      BigTensor r = BigTensor::filled(shape, bits);
      scatter_add(r, read_positions(iota(shape), map, ct.shape), ct);
      return ExactValue::of(std::move(r));
    }
    case Op::Expand: {
      const BigTensor& ct = real_arg(0);
      const Shape& x = shape_of(arg(1));
      BigTensor r = pick(ct, runtime::broadcast_to(iota(ct.shape),
                                                   reduced_map(static_cast<int>(x.size()), rest_of(1), in.all_axes, in.axes), x));
      if (in.attr<core::attr::ExpandOf>().mean && ct.size() > 0) {
        const Big count = Big::from_int(runtime::element_count(x) / ct.size(), bits);
        for (Big& e : r.elems) e = div(e, count);
      }
      return ExactValue::of(std::move(r));
    }
    case Op::ContractGradA:
    case Op::ContractGradB: {
      const BigTensor& ct = real_arg(0);
      const BigTensor& a = real_arg(1);
      const BigTensor& b = real_arg(2);
      runtime::ContractPlan fwd =
          in.attr<core::attr::ProductForm>().dot ? runtime::dot_plan(static_cast<int>(a.rank()), static_cast<int>(b.rank()))
                          : contract_plan(rest_of(1), rest_of(2), fn.type_of(in.args[1]).tensor, fn.type_of(in.args[2]).tensor,
                                          in.axes, in.pairs);
      if (in.op == Op::ContractGradA)
        return ExactValue::of(contract(ct, b, runtime::contract_adjoint_a(fwd, static_cast<int>(a.rank())), bits));
      return ExactValue::of(contract(a, ct, runtime::contract_adjoint_b(fwd, static_cast<int>(b.rank())), bits));
    }
    case Op::ReshapeAs: {
      const Shape shape = shape_of(arg(1));
      return moved(arg(0), [&](const Tensor& t) { return runtime::reshape(t, shape); });
    }
    case Op::MergeGrad: {
      const Shape& x = shape_of(arg(1));
      std::vector<int> perm = merge_permutation(rest_of(1), static_cast<int>(explicit_count(1)), in.axes);
      Shape permuted;
      for (int p : perm) permuted.push_back(x[static_cast<size_t>(p)]);
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int>(i);
      return moved(arg(0),
                   [&](const Tensor& t) { return runtime::transpose(runtime::reshape(t, permuted), inverse); });
    }
    case Op::ConcatGrad: {
      int axis = rest_of(1) + in.axes.at(0);
      int64_t offset = 0;
      const size_t part = static_cast<size_t>(in.attr<core::attr::Element>().index);
      for (size_t k = 0; k < part; ++k) offset += shape_of(arg(1 + k)).at(static_cast<size_t>(axis));
      int64_t size = shape_of(arg(1 + part)).at(static_cast<size_t>(axis));
      return moved(arg(0), [&](const Tensor& t) { return runtime::slice(t, axis, offset, offset + size, 1); });
    }
    case Op::SliceGrad: {
      // Positions numbered from 1, so that the kernel's +0.0 fill marks the places ct does not reach.
      const BigTensor& ct = real_arg(0);
      const core::attr::Range& range = in.attr<core::attr::Range>();
      Tensor where = runtime::slice_adjoint(iota(ct.shape, 1), shape_of(arg(1)), rest_of(1) + in.axes.at(0), range.start,
                                            range.stop, range.step);
      BigTensor r = BigTensor::filled(where.shape, bits);
      for (size_t i = 0; i < where.reals.size(); ++i)
        if (where.reals[i] != 0) r.elems[i] = ct.elems.at(position(where.reals[i]) - 1);
      return ExactValue::of(std::move(r));
    }
    case Op::Scan: {
      // The recurrence in MPFR, in the kernel's order (runtime/scan_order.h).
      const BigTensor& a = real_arg(0);
      const BigTensor& x = real_arg(1);
      BigTensor h = BigTensor::filled(x.shape, bits);
      runtime::scan_order(x.shape, scan_axes(in, rest_of(1)), in.attr<core::attr::ScanOf>().adjoint,
                          [&](int64_t o, int64_t a0, int64_t a_step, int64_t h0, int64_t h_step, int64_t terms) {
                            Big s = x.elems.at(static_cast<size_t>(o));
                            for (int64_t m = 0; m < terms; ++m)
                              s = add(s, mul(a.elems.at(static_cast<size_t>(a0 + m * a_step)),
                                             h.elems.at(static_cast<size_t>(h0 + m * h_step))));
                            h.elems[static_cast<size_t>(o)] = std::move(s);
                          });
      return ExactValue::of(std::move(h));
    }
    case Op::ScanGradA: {
      const BigTensor& l = real_arg(0);
      const BigTensor& h = real_arg(1);
      BigTensor r = BigTensor::filled(shape_of(arg(2)), bits);
      runtime::scan_grad_a_order(h.shape, scan_axes(in, rest_of(1)), in.attr<core::attr::ScanOf>().adjoint,
                                 [&](int64_t o, int64_t li, int64_t hi) {
                                   r.elems.at(static_cast<size_t>(o)) =
                                       mul(l.elems.at(static_cast<size_t>(li)), h.elems.at(static_cast<size_t>(hi)));
                                 });
      return ExactValue::of(std::move(r));
    }
    case Op::PickGrad: {
      const BigTensor& ct = real_arg(0);
      Tensor where = runtime::pick_adjoint(iota(ct.shape, 1), shape_of(arg(1)), rest_of(1) + in.axes.at(0), arg(2).other);
      BigTensor r = BigTensor::filled(where.shape, bits);
      for (size_t i = 0; i < where.reals.size(); ++i)
        if (where.reals[i] != 0) r.elems[i] = ct.elems.at(position(where.reals[i]) - 1);
      return ExactValue::of(std::move(r));
    }
    case Op::GatherGrad: {
      const BigTensor& ct = real_arg(0);
      const Shape& table = shape_of(arg(1));
      Tensor where = runtime::gather(iota(table), in.axes.at(0), arg(2).other);
      if (where.shape != ct.shape)
        throw std::logic_error(fmt::format("internal: {}: ct has shape {}, the gather {}", core::site_name(fn, in.id),
                                           runtime::shape_string(ct.shape), runtime::shape_string(where.shape)));
      BigTensor r = BigTensor::filled(table, bits);
      scatter_add(r, positions(where), ct);
      return ExactValue::of(std::move(r));
    }
    case Op::ZerosLike: return ExactValue::of(BigTensor::filled(shape_of(arg(0)), bits));
    case Op::MakeParams: {
      // Every leaf of the model tree at +0, then each part added where its path says, in order.
      BigParamMap out;
      for (const auto& [path, t] : *arg(0).params) out.emplace(path, BigTensor::filled(t.shape, bits));
      auto add_to = [&](const std::string& path, const BigTensor& t) {
        BigTensor& leaf = real_leaf(out, path, t.shape, fn, in);
        for (size_t i = 0; i < t.elems.size(); ++i) leaf.elems[i] = add(leaf.elems[i], t.elems[i]);
      };
      for (size_t k = 1; k < in.args.size(); ++k) {
        const std::string& path = in.paths.at(k - 1);
        const ExactValue& part = arg(k);
        if (part.kind == ExactValue::Kind::Params) {
          for (const auto& [p, t] : *part.params) add_to(path + p, t);
        } else {
          add_to(path, real_arg(k));
        }
      }
      return ExactValue::of_params(std::make_shared<const BigParamMap>(std::move(out)));
    }
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
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
      break;
  }
  throw EvalError(fmt::format("the exact interpreter has no case for `{}`", info.spelling));
}

}  // namespace quire::exact
