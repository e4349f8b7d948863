#include "quire/interp/reference_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/interpreter.h"
#include "quire/runtime/host_loops.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

using core::Op;
using runtime::FloatType;
using runtime::Tensor;

namespace {

/// Every element rounded to `type` in one step (F64: unchanged).
void round_in_place(Tensor& x, FloatType type) {
  if (type == FloatType::F64) return;
  if (x.reals.holds_narrow()) {
    // Its numbers are f32 numbers already (a compiled kernel's output, an
    // f32 parameter): f32 leaves them, and a half rounds them in the f32
    // view, which the next kernel reads without a conversion.
    if (type == FloatType::F32) return;
    float* f = x.reals.narrow_for_writing();
    if (type == FloatType::BF16) {
      for (size_t i = 0, n = x.reals.size(); i < n; ++i) f[i] = runtime::round_bf16_of_f32(f[i]);
      return;
    }
    if (type == FloatType::F16) {
      for (size_t i = 0, n = x.reals.size(); i < n; ++i) f[i] = runtime::round_f16_of_f32(f[i]);
      return;
    }
    for (size_t i = 0, n = x.reals.size(); i < n; ++i) f[i] = static_cast<float>(runtime::round_to(type, f[i]));
    return;
  }
  if (type == FloatType::F32) {
    // Rounded into an f32 view that replaces the f64 one: the conversion is
    // the rounding (round_to's own fast path; NaN keeps round_to's quieting),
    // a compiled kernel reads the result as it is, and a reader of f64
    // widens it once.
    // The conversion runs as one vectorized loop, and only a result that is
    // not finite sends the NaNs through round_to.
    runtime::RealStorage rounded = runtime::RealStorage::narrow_for_overwrite(x.reals.size());
    float* f = rounded.narrow_for_writing();
    const double* v = std::as_const(x.reals).data();
    const size_t n = x.reals.size();
    if (!runtime::round_to_f32(v, f, n))
      for (size_t i = 0; i < n; ++i)
        if (std::isnan(v[i])) f[i] = static_cast<float>(runtime::round_to(type, v[i]));
    x.reals = std::move(rounded);
    return;
  }
  for (double& v : x.reals) v = runtime::round_to(type, v);
}

/// The storage type a cast's target names: `f32acc` keeps the f32 accumulator.

}  // namespace

int64_t value_bytes(const Value& v, int depth) {
  if (depth > 64) return 0;
  if (v.kind == Value::Kind::Tuple) {
    int64_t sum = 0;
    for (const Value& e : v.elements) sum += value_bytes(e, depth + 1);
    return sum;
  }
  if (v.kind != Value::Kind::Tensor) return 0;
  return v.tensor.size() * (v.tensor.is_real() ? runtime::float_type_info(v.type).storage_bits / 8 : 8);
}

int64_t written_bytes(const precision::SiteType* site, const Value& v) {
  if (!site || site->reason == precision::Reason::Carried || site->reason == precision::Reason::Input) return 0;
  return v.kind == Value::Kind::Tensor ? value_bytes(v) : 0;
}

Value ValueStructure::copy_of(const Value& stacked, int64_t i) {
  auto out = std::make_shared<ParamMap>();
  for (const auto& [path, t] : *stacked.params) {
    if (t.shape.empty()) throw EvalError(fmt::format("stacked parameter `{}` has no stack axis", path));
    Tensor s = runtime::slice(t, 0, i, i + 1, 1);
    runtime::Shape shape(t.shape.begin() + 1, t.shape.end());
    out->emplace(path, runtime::reshape(s, shape));
  }
  return Value::of_params(std::move(out));
}

Value ValueStructure::stack(const Value& stacked, const std::vector<Value>& grads) {
  const int64_t copies = static_cast<int64_t>(grads.size());
  // Each leaf's copies stacked along a new leading axis, copy 0 first.
  // (Every element is some copy's: no zero fill. Copies all held in f32
  // stack as f32.)
  auto stacked_grads = std::make_shared<ParamMap>();
  for (const auto& [path, t] : *stacked.params) {
    const size_t n = t.reals.size();
    const size_t per_copy = copies > 0 ? n / static_cast<size_t>(copies) : 0;
    bool narrow = copies > 0;
    for (int64_t i = 0; i < copies; ++i) narrow = narrow && grads[i].params->at(path).reals.holds_narrow();
    Tensor g;
    g.shape = t.shape;
    if (narrow) {
      g.reals = runtime::RealStorage::narrow_for_overwrite(n);
      float* to = g.reals.narrow_for_writing();
      for (int64_t i = 0; i < copies; ++i)
        std::copy_n(grads[i].params->at(path).reals.narrow(), per_copy, to + static_cast<size_t>(i) * per_copy);
    } else {
      g.reals = runtime::RealStorage::for_overwrite(n);
      double* to = g.reals.data();
      for (int64_t i = 0; i < copies; ++i)
        std::copy_n(std::as_const(grads[i].params->at(path).reals).data(), per_copy,
                    to + static_cast<size_t>(i) * per_copy);
    }
    stacked_grads->emplace(path, std::move(g));
  }
  return Value::of_params(std::move(stacked_grads));
}

void store_at_site(const core::Function& fn, const core::Instr& in, const precision::SiteType& site,
                   bool half_intermediates, Value& v) {
  if (v.kind != Value::Kind::Tensor || !v.tensor.is_real()) return;
  if (site.reason == precision::Reason::Carried) {
    // A call's result or a tuple's element keeps the type it was stored in;
    // the realization predicted that type, and this is where it is checked.
    if (v.type != site.storage)
      throw std::logic_error(fmt::format("internal: {} was realized as {} but carries a {} value",
                                         core::site_name(fn, in.id), runtime::float_type_name(site.storage),
                                         runtime::float_type_name(v.type)));
    return;
  }
  // Already of the site's type (an element of an input tuple, a parameter
  // read at its stored type): rounding changes no bit, and a half's rounding
  // would copy the storage it shares with its source.
  if (v.type == site.storage) return;
  const bool via_f32 = precision::is_half(site.storage) && !half_intermediates && !core::op_info(in.op).stored_directly;
  if (via_f32) round_in_place(v.tensor, FloatType::F32);
  round_in_place(v.tensor, site.storage);
  v.type = site.storage;
}

void check_site_value(const elab::Program& prog, const core::Function& fn, const core::Instr& in, const Value& v,
                      const std::map<std::string, int64_t>& dims) {
  if (!in.type.is_tensor()) return;
  const elab::TensorType& t = in.type.tensor;
  auto fail = [&](const std::string& what) {
    throw std::logic_error(
        fmt::format("internal: {} is {} but its value {}", core::site_name(fn, in.id), prog.printer().tensor(t), what));
  };
  if (v.kind != Value::Kind::Tensor) fail("is not a tensor");
  const runtime::Shape& shape = v.tensor.shape;
  size_t n = t.axes.size();
  if (shape.size() < n || (!t.rest && shape.size() != n)) fail("has shape " + runtime::shape_string(shape));
  for (size_t i = 0; i < n; ++i) {
    auto want = t.axes[i].size.evaluate(dims);
    if (want && *want != shape[shape.size() - n + i]) fail("has shape " + runtime::shape_string(shape));
  }
  bool want_int = t.elem == elab::Elem::I32 || t.elem == elab::Elem::I64;
  bool is_int = v.tensor.kind == runtime::ElemKind::I32 || v.tensor.kind == runtime::ElemKind::I64;
  if (want_int != is_int || (t.elem == elab::Elem::Bool) != (v.tensor.kind == runtime::ElemKind::Bool))
    fail(fmt::format("holds {} elements", runtime::elem_kind_name(v.tensor.kind)));
}

Value cast_entry_argument(const precision::Realization& r, const Value& v, int depth) {
  Value out = v;
  if (depth > 64) return out;
  if (v.kind == Value::Kind::Tensor && v.tensor.is_real()) {
    out.type = r.input_type();
    round_in_place(out.tensor, out.type);
  } else if (v.kind == Value::Kind::Tuple) {
    for (Value& e : out.elements) e = cast_entry_argument(r, e, depth + 1);
  } else if (v.kind == Value::Kind::Params && v.params) {
    // Each parameter at its stored type: an f32 master, a frozen one as its readers read it.
    auto tree = std::make_shared<ParamMap>(*v.params);
    for (auto& [path, t] : *tree)
      if (const precision::ParamStorage* p = r.param(path); p && t.is_real()) round_in_place(t, p->stored);
    out.params = std::move(tree);
  }
  return out;
}

namespace {

/// evaluate_step's value, its type f64 unless carried (a tuple's element).
Value computed_step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                    const std::map<std::string, int64_t>& dims, const precision::FunctionRealization* table) {
  auto arg = [&](size_t k) -> const Value& { return env.at(in.args.at(k)); };
  const precision::SiteType* site = table && table->values[in.id] ? &*table->values[in.id] : nullptr;
  // A site that reads down sees its real operands rounded to its type (scalar constants excepted).
  std::vector<std::optional<Tensor>> down(in.args.size());
  if (site && site->read_down)
    for (size_t k = 0; k < in.args.size(); ++k) {
      const Value& v = arg(k);
      const auto& operand_site = table->values[in.args[k]];
      if (v.kind != Value::Kind::Tensor || !v.tensor.is_real() || v.type == site->read_as) continue;
      if (operand_site && operand_site->weak) continue;
      down[k] = v.tensor;
      round_in_place(*down[k], site->read_as);
    }
  auto tensor_arg = [&](size_t k) -> const Tensor& { return down.at(k) ? *down[k] : arg(k).tensor; };
  const FloatType acc = site ? site->accumulator : FloatType::F64;
  const runtime::ProductStep step = site && site->fma ? runtime::ProductStep::Fused : runtime::ProductStep::Separate;
  auto explicit_count = [&](size_t k) { return fn.type_of(in.args.at(k)).tensor.axes.size(); };
  // Leading (`...`) axes of operand k at run time.
  auto rest_of = [&](size_t k) {
    return static_cast<int>(tensor_arg(k).rank() - static_cast<int64_t>(explicit_count(k)));
  };
  const core::OpInfo& info = core::op_info(in.op);
  switch (in.op) {
    case Op::Const:
      return Value::of(Tensor::scalar(in.attr<core::attr::Literal>().value));
    case Op::HostConst:
      return Value::of_host(in.attr<core::attr::Literal>().value);
    case Op::ConstInt:
      return Value::of_host(static_cast<double>(in.attr<core::attr::Integer>().value));
    case Op::ConstBool:
      return Value::of_host(in.attr<core::attr::Boolean>().value ? 1.0 : 0.0);
    case Op::Real:
      return Value::of(Tensor::scalar(arg(0).host));
    case Op::Field: {
      const ParamMap& tree = *arg(0).params;
      if (in.type.kind == elab::TypeKind::Tensor) {
        const std::string& name = in.attr<core::attr::Member>().name;
        auto it = tree.find(name);
        if (it == tree.end()) throw runtime::RuntimeError(fmt::format("parameter `{}` is missing", name));
        return Value::of(it->second);
      }
      return Value::of_params(std::make_shared<const ParamMap>(subtree(tree, in.attr<core::attr::Member>().name)));
    }
    case Op::TupleGet:
    case Op::MakeTuple: {
      ValueStructure values;
      return core::walk_tuple(values, in, arg);
    }
    case Op::Cast: {
      const core::CastTarget t = in.attr<core::attr::CastTo>().target;
      if (std::optional<runtime::ElemKind> kind = precision::cast_integer_kind(t))
        return Value::of(runtime::cast_kind(tensor_arg(0), *kind));
      Tensor r = tensor_arg(0).is_real() ? tensor_arg(0) : runtime::cast_kind(tensor_arg(0), runtime::ElemKind::Real);
      round_in_place(r, precision::named_float_type(t).value_or(FloatType::F64));
      return Value::of(std::move(r));
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
  if (info.elementwise) {
    int64_t result_rest = 0;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.at(k).rest) result_rest = std::max<int64_t>(result_rest, rest_of(k));
    int rank = static_cast<int>(result_rest + static_cast<int64_t>(in.type.tensor.axes.size()));
    auto map = [&](size_t k) { return axis_map(in.align.at(k), tensor_arg(k).rank(), explicit_count(k), result_rest); };
    if (in.op == Op::PowConst) {
      Tensor e = Tensor::scalar(in.attr<core::attr::Exponent>().value);
      return Value::of(
          runtime::binary(runtime::BinaryOp::Pow, tensor_arg(0), map(0), e, runtime::AxisMap(rank, -1), rank));
    }
    if (in.args.size() == 1) return Value::of(runtime::unary(unary_op(in.op), tensor_arg(0)));  // identity alignment
    if (in.op == Op::Where)
      return Value::of(runtime::where(tensor_arg(0), map(0), tensor_arg(1), map(1), tensor_arg(2), map(2), rank));
    return Value::of(runtime::binary(binary_op(in.op), tensor_arg(0), map(0), tensor_arg(1), map(1), rank));
  }
  switch (in.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp: {
      const std::vector<int> axes =
          reduced_axes(static_cast<int>(tensor_arg(0).rank()), rest_of(0), in.all_axes, in.axes);
      return Value::of(
          runtime::reduce(reduce_op(in.op), tensor_arg(0), axes, tensor_arg(0).is_real() ? acc : FloatType::F64));
    }
    case Op::Dot:
      return Value::of(runtime::dot(tensor_arg(0), tensor_arg(1), acc, step));
    case Op::Contract: {
      runtime::ContractPlan plan = contract_plan(rest_of(0), rest_of(1), fn.type_of(in.args[0]).tensor,
                                                 fn.type_of(in.args[1]).tensor, in.axes, in.pairs);
      return Value::of(runtime::contract(tensor_arg(0), tensor_arg(1), plan.result, plan.contracted, acc, step));
    }
    case Op::Transpose: {
      int rest = rest_of(0);
      std::vector<int> perm;
      for (int i = 0; i < rest; ++i) perm.push_back(i);
      for (int a : in.axes) perm.push_back(rest + a);
      return Value::of(runtime::transpose(tensor_arg(0), perm));
    }
    case Op::SplitAxis: {
      const Tensor& x = tensor_arg(0);
      int at = rest_of(0) + in.axes[0];
      runtime::Shape shape(x.shape.begin(), x.shape.begin() + at);
      for (const elab::Size& s : in.sizes) shape.push_back(eval_size(s, dims));
      shape.insert(shape.end(), x.shape.begin() + at + 1, x.shape.end());
      return Value::of(runtime::reshape(x, shape));
    }
    case Op::MergeAxes: {
      const Tensor& x = tensor_arg(0);
      int rest = rest_of(0);
      int first = *std::min_element(in.axes.begin(), in.axes.end());
      Tensor t = runtime::transpose(x, merge_permutation(rest, static_cast<int>(explicit_count(0)), in.axes));
      runtime::Shape shape;
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
      return Value::of(runtime::reshape(t, shape));
    }
    case Op::Concat: {
      std::vector<const Tensor*> parts;
      for (size_t k = 0; k < in.args.size(); ++k) parts.push_back(&tensor_arg(k));
      return Value::of(runtime::concat(parts, rest_of(0) + in.axes[0]));
    }
    case Op::Slice: {
      // The static type fixes the slice's length; a symbolic axis shorter
      // than `stop` would silently clip it, so that is an error here.
      int axis = rest_of(0) + in.axes[0];
      int64_t size = tensor_arg(0).shape.at(axis);
      const core::attr::Range& r = in.attr<core::attr::Range>();
      if (r.stop > size)
        throw runtime::RuntimeError(fmt::format("slice [{}, {}) of axis `{}` is out of range: the axis has size {}",
                                                r.start, r.stop, fn.type_of(in.args[0]).tensor.axes.at(in.axes[0]).name,
                                                size));
      return Value::of(runtime::slice(tensor_arg(0), axis, r.start, r.stop, r.step));
    }
    case Op::Gather:
      return Value::of(runtime::gather(tensor_arg(0), in.axes[0], tensor_arg(1)));
    case Op::Pick:
      return Value::of(runtime::pick(tensor_arg(0), rest_of(0) + in.axes[0], tensor_arg(1)));
    case Op::Scan:
      return Value::of(runtime::scan(tensor_arg(0), tensor_arg(1), scan_axes(in, rest_of(1)),
                                     in.attr<core::attr::ScanOf>().adjoint, acc));
    case Op::OneHot:
      return Value::of(runtime::one_hot(tensor_arg(0), eval_size(in.sizes.at(0), dims)));
    case Op::Iota:
      return Value::of(runtime::iota(eval_size(in.sizes.at(0), dims)));
    case Op::KeySplit: {
      auto [a, b] = runtime::split_key(arg(0).key);
      return Value::of_tuple({Value::of_key(a), Value::of_key(b)});
    }
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli: {
      runtime::Shape shape;
      if (const int like = core::draw_like(in); like >= 0) shape = tensor_arg(static_cast<size_t>(like)).shape;
      for (const elab::Size& s : in.sizes) shape.push_back(eval_size(s, dims));
      if (in.op == Op::Uniform) {
        const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
        return Value::of(runtime::draw_uniform(arg(0).key, shape, d.first, d.second));
      }
      if (in.op == Op::Normal) {
        const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
        return Value::of(runtime::draw_normal(arg(0).key, shape, d.first, d.second));
      }
      double p = tensor_arg(1).reals.at(0);
      if (!(p >= 0 && p <= 1))
        throw runtime::RuntimeError(fmt::format("bernoulli: probability {} is outside [0, 1]", p));
      return Value::of(runtime::draw_bernoulli(arg(0).key, shape, p));
    }
    case Op::SumTo: {
      // ct has the forward result's shape; x's alignment in the forward op says what it summed over.
      const Tensor& ct = tensor_arg(0);
      int result_rest = static_cast<int>(ct.rank() - static_cast<int64_t>(explicit_count(0)));
      runtime::AxisMap map = axis_map(in.align.at(0), tensor_arg(1).rank(), explicit_count(1), result_rest);
      return Value::of(runtime::sum_to(ct, map, tensor_arg(1).shape, acc));
    }
    case Op::Expand: {
      const Tensor& ct = tensor_arg(0);
      const Tensor& x = tensor_arg(1);
      const runtime::AxisMap map = reduced_map(static_cast<int>(x.rank()), rest_of(1), in.all_axes, in.axes);
      if (in.attr<core::attr::ExpandOf>().mean && ct.size() > 0) {
        // The mean's share, v / count, taken of ct's elements before the
        // broadcast copies them: each element of the result is the share of
        // the element it copies either way, and ct is the count times
        // smaller. Over a power of two it is v · (1 / count): the same real
        // quotient, so the same rounding, at a multiplication's cost.
        const double count = static_cast<double>(x.size() / ct.size());
        int exponent = 0;
        const bool power_of_two = std::frexp(count, &exponent) == 0.5;
        const double factor = power_of_two ? 1.0 / count : count;
        const size_t n = ct.reals.size();
        Tensor q;
        q.shape = ct.shape;
        if (ct.reals.holds_narrow() && site && site->reason != precision::Reason::Carried &&
            site->storage == FloatType::F32 && count < 0x1p24) {
          // Stored as f32 next: the f32 quotient of f32 numbers is the f64
          // quotient rounded to f32 (f64's 53 bits make the double rounding
          // innocuous; a power of two's product is exact in both), so the
          // share is computed in f32, the broadcast copies f32 numbers, and
          // the store has nothing to round.
          q.reals = runtime::RealStorage::narrow_for_overwrite(n);
          runtime::scale(ct.reals.narrow(), static_cast<float>(factor), !power_of_two, q.reals.narrow_for_writing(), n);
        } else {
          q.reals = runtime::RealStorage::for_overwrite(n);
          if (ct.reals.holds_narrow())
            runtime::scale(ct.reals.narrow(), factor, !power_of_two, q.reals.data(), n);
          else
            runtime::scale(ct.reals.data(), factor, !power_of_two, q.reals.data(), n);
        }
        return Value::of(runtime::broadcast_to(q, map, x.shape));
      }
      return Value::of(runtime::broadcast_to(ct, map, x.shape));
    }
    case Op::ContractGradA:
    case Op::ContractGradB: {
      const Tensor& a = tensor_arg(1);
      const Tensor& b = tensor_arg(2);
      runtime::ContractPlan fwd = in.attr<core::attr::ProductForm>().dot
                                      ? runtime::dot_plan(static_cast<int>(a.rank()), static_cast<int>(b.rank()))
                                      : contract_plan(rest_of(1), rest_of(2), fn.type_of(in.args[1]).tensor,
                                                      fn.type_of(in.args[2]).tensor, in.axes, in.pairs);
      if (in.op == Op::ContractGradA) {
        runtime::ContractPlan p = runtime::contract_adjoint_a(fwd, static_cast<int>(a.rank()));
        return Value::of(runtime::contract(tensor_arg(0), b, p.result, p.contracted, acc, step));
      }
      runtime::ContractPlan p = runtime::contract_adjoint_b(fwd, static_cast<int>(b.rank()));
      return Value::of(runtime::contract(a, tensor_arg(0), p.result, p.contracted, acc, step));
    }
    case Op::ReshapeAs:
      return Value::of(runtime::reshape(tensor_arg(0), tensor_arg(1).shape));
    case Op::MergeGrad: {
      const Tensor& x = tensor_arg(1);
      std::vector<int> perm = merge_permutation(rest_of(1), static_cast<int>(explicit_count(1)), in.axes);
      runtime::Shape permuted;
      for (int p : perm) permuted.push_back(x.shape[p]);
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
      return Value::of(runtime::transpose(runtime::reshape(tensor_arg(0), permuted), inverse));
    }
    case Op::ConcatGrad: {
      int axis = rest_of(1) + in.axes.at(0);
      int64_t offset = 0;
      const size_t part = static_cast<size_t>(in.attr<core::attr::Element>().index);
      for (size_t k = 0; k < part; ++k) offset += tensor_arg(1 + k).shape.at(axis);
      int64_t size = tensor_arg(1 + part).shape.at(axis);
      return Value::of(runtime::slice(tensor_arg(0), axis, offset, offset + size, 1));
    }
    case Op::SliceGrad: {
      const core::attr::Range& r = in.attr<core::attr::Range>();
      return Value::of(runtime::slice_adjoint(tensor_arg(0), tensor_arg(1).shape, rest_of(1) + in.axes.at(0), r.start,
                                              r.stop, r.step));
    }
    case Op::ScanGradA:
      return Value::of(runtime::scan_grad_a(tensor_arg(0), tensor_arg(1), scan_axes(in, rest_of(1)),
                                            in.attr<core::attr::ScanOf>().adjoint));
    case Op::PickGrad:
      return Value::of(
          runtime::pick_adjoint(tensor_arg(0), tensor_arg(1).shape, rest_of(1) + in.axes.at(0), tensor_arg(2)));
    case Op::GatherGrad:
      return Value::of(runtime::gather_adjoint(tensor_arg(0), tensor_arg(1).shape, in.axes.at(0), tensor_arg(2), acc));
    case Op::ZerosLike:
      return Value::of(Tensor::real(tensor_arg(0).shape));
    case Op::MakeParams: {
      // Each leaf of the model tree: its one part itself (shared, not
      // copied), the sum of its parts in order, or +0.0 where none arrived.
      // A sum starts from its first part (no +0.0 first: 0.0 + x is not x
      // for x = -0.0), and a part is read in the view it has (a kernel's
      // gradient in its f32 view). What a leaf holds depends on the program
      // alone, never on its numbers, so `quire memory` can count it.
      std::vector<std::pair<std::string, const Tensor*>> parts;
      for (size_t k = 1; k < in.args.size(); ++k) {
        const std::string& path = in.paths.at(k - 1);
        const Value& part = arg(k);
        if (part.kind == Value::Kind::Params) {
          for (const auto& [p, t] : *part.params) parts.emplace_back(path + p, &t);
        } else {
          parts.emplace_back(path, &part.tensor);
        }
      }
      std::map<std::string, int> parts_of;
      for (const auto& [path, t] : parts) ++parts_of[path];
      ParamMap out;
      for (const auto& [path, t] : *arg(0).params) {
        Tensor leaf;
        leaf.shape = t.shape;
        if (!parts_of.count(path)) leaf.reals = runtime::RealStorage(static_cast<size_t>(t.size()), 0.0);
        out.emplace(path, std::move(leaf));
      }
      std::set<std::string> written;
      for (const auto& [path, t] : parts) {
        auto it = out.find(path);
        if (it == out.end() || it->second.shape != t->shape)
          throw std::logic_error(fmt::format("internal: {} adds to the leaf `{}`, which the tree does not have so",
                                             core::site_name(fn, in.id), path));
        const bool first = written.insert(path).second;
        if (first && parts_of.at(path) == 1) {
          it->second.reals = t->reals;
          continue;
        }
        const size_t n = t->reals.size();
        if (first) it->second.reals = runtime::RealStorage::for_overwrite(n);
        double* sum = it->second.reals.data();
        auto accumulate = [&](const auto* part) {
          if (first)
            for (size_t i = 0; i < n; ++i) sum[i] = part[i];
          else
            for (size_t i = 0; i < n; ++i) sum[i] = sum[i] + part[i];
        };
        if (t->reals.holds_narrow())
          accumulate(t->reals.narrow());
        else
          accumulate(t->reals.data());
      }
      return Value::of_params(std::make_shared<const ParamMap>(std::move(out)));
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
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
      break;
  }
  throw EvalError(fmt::format("the reference kernels have no case for `{}`", info.spelling));
}

}  // namespace

Value evaluate_step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                    const std::map<std::string, int64_t>& dims, const precision::FunctionRealization* table) {
  Value v = computed_step(fn, in, env, dims, table);
  // A copy moves its operands' numbers: it has their type (when they agree
  // and no site reads them down), so storing it at its site rounds nothing
  // and copies nothing it shares (a split, a dense slice).
  if (core::op_info(in.op).copies && v.kind == Value::Kind::Tensor && v.tensor.is_real()) {
    const precision::SiteType* site = table && table->values[in.id] ? &*table->values[in.id] : nullptr;
    const Value& x = env.at(in.args.at(0));
    bool same =
        x.kind == Value::Kind::Tensor && x.tensor.is_real() && !(site && site->read_down && site->read_as != x.type);
    if (in.op == Op::Concat)
      for (int a : in.args) same = same && env.at(static_cast<size_t>(a)).type == x.type;
    if (same) v.type = x.type;
  }
  return v;
}

}  // namespace quire::interp
