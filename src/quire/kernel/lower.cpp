#include "quire/kernel/lower.h"

#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "quire/interp/core_geometry.h"
#include "quire/realize/realization.h"

namespace quire::kernel {

namespace {

using core::Op;
using runtime::FloatType;
using runtime::Shape;

/// Why a group has no kernel: thrown inside, returned by lower_group.
struct NotLowered {
  std::string why;
};

ElemType elem_of_kind(runtime::ElemKind k, FloatType real) {
  switch (k) {
    case runtime::ElemKind::I32: return ElemType::I32;
    case runtime::ElemKind::I64: return ElemType::I64;
    case runtime::ElemKind::Bool: return ElemType::Bool;
    case runtime::ElemKind::Real: break;
  }
  return elem_of(real);
}

runtime::ElemKind kind_of(ElemType t) {
  switch (t) {
    case ElemType::I32: return runtime::ElemKind::I32;
    case ElemType::I64: return runtime::ElemKind::I64;
    case ElemType::Bool: return runtime::ElemKind::Bool;
    default: return runtime::ElemKind::Real;
  }
}

bool is_product(Op op) { return core::op_info(op).product; }

bool is_reduction(Op op) {
  return op == Op::Sum || op == Op::Mean || op == Op::ReduceMax || op == Op::ReduceMin || op == Op::LogSumExp;
}

class GroupLowering {
 public:
  GroupLowering(const core::Function& fn, const FusionGroup& g, const precision::FunctionRealization* table,
                bool half_intermediates, const std::vector<interp::Value>& env, bool packing)
      : fn_(fn),
        g_(g),
        table_(table),
        half_intermediates_(half_intermediates),
        packing_(packing),
        env_(env),
        b_(title(fn, g)) {}

  LoweredLaunch run() {
    const core::Instr& first = instr(g_.steps.front());
    Shape result;
    if (is_product(first.op))
      result = product_geometry(first).shape;
    else if (is_reduction(first.op))
      result = reduction_geometry(first).kept_shape;
    else if (first.op == Op::SumTo)
      result = operand(first.args.at(1)).shape;
    // Element-wise steps: their shapes follow from their operands, in order;
    // every step must have the root's shape (a member read through a
    // broadcast would need its own nest).
    for (size_t k = 0; k < g_.steps.size(); ++k) {
      const core::Instr& in = instr(g_.steps[k]);
      const bool folds = k == 0 && (is_product(in.op) || is_reduction(in.op) || in.op == Op::SumTo);
      const Shape shape = folds ? result : elementwise_shape(in);
      if (k > 0 && shape != result)
        throw NotLowered{fmt::format("{} has shape {}, the group's first step {}", value_name(in.id),
                                     runtime::shape_string(shape), runtime::shape_string(result))};
      if (k == 0) result = shape;
      members_[in.id].shape = shape;
      members_[in.id].type = result_type(in);
    }
    for (int v : g_.inputs)
      if (loaded(v)) input_buffer(v);
    if (packing_) {
      if (!is_product(first.op)) throw NotLowered{"no product to pack"};
      scratch_ = b_.buffer(ElemType::F32, result);
      inputs_.push_back(-1);
    }
    // The output is the last buffer: inputs are all declared before it.
    const int out = b_.buffer(members_.at(g_.root()).type, result);
    std::vector<Stmt>* body = open_nest(b_.kernel().body, result, /*independent=*/true, result_vars_);
    for (int v : g_.steps) emit_step(instr(v), *body);
    body->push_back(store_stmt(out, contiguous_index(result, result_vars_), b_.scalar(members_.at(g_.root()).scalar)));
    LoweredLaunch l;
    b_.kernel().product = packed_;
    l.kernel = b_.take();
    l.inputs = inputs_;
    return l;
  }

 private:
  struct Member {
    Shape shape;
    ElemType type = ElemType::F64;
    int scalar = -1;
  };
  struct Operand {
    Shape shape;
    ElemType type = ElemType::F64;
    bool member = false;
  };
  struct Reduction {
    Shape kept_shape;
    std::vector<int> axes;  // reduced axes of the operand
    int64_t count = 1;
  };
  struct Product {
    Shape shape;
    runtime::ContractPlan plan;
    int a = 0, b = 0;  // operand indices into the instruction's args
  };

  static std::string title(const core::Function& fn, const FusionGroup& g) {
    std::string t;
    for (int v : g.steps) {
      const core::Instr& in = fn.body.at(static_cast<size_t>(v - static_cast<int>(fn.args.size()) - 1));
      t += (t.empty() ? "" : "+") + std::string(core::op_info(in.op).spelling);
    }
    return t;
  }

  const core::Instr& instr(int v) const {
    return fn_.body.at(static_cast<size_t>(v - static_cast<int>(fn_.args.size()) - 1));
  }
  std::string value_name(int v) const { return fn_.value_name(v); }

  const precision::SiteType* site(int v) const {
    if (!table_) return nullptr;
    const auto& s = table_->values.at(static_cast<size_t>(v));
    return s ? &*s : nullptr;
  }

  Operand operand(int v) const {
    if (auto it = members_.find(v); it != members_.end()) return {it->second.shape, it->second.type, true};
    const interp::Value& val = env_.at(static_cast<size_t>(v));
    if (val.kind != interp::Value::Kind::Tensor) throw NotLowered{fmt::format("{} is not a tensor", value_name(v))};
    return {val.tensor.shape, elem_of_kind(val.tensor.kind, val.type), false};
  }

  // The run-time leading (`...`) axes of operand k of `in`.
  int rest_of(const core::Instr& in, size_t k) const {
    const Operand o = operand(in.args.at(k));
    return static_cast<int>(o.shape.size()) - static_cast<int>(fn_.type_of(in.args.at(k)).tensor.axes.size());
  }

  std::vector<runtime::AxisMap> elementwise_maps(const core::Instr& in, int& rank) const {
    int64_t result_rest = 0;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.at(k).rest) result_rest = std::max<int64_t>(result_rest, rest_of(in, k));
    rank = static_cast<int>(result_rest + static_cast<int64_t>(in.type.tensor.axes.size()));
    std::vector<runtime::AxisMap> maps;
    for (size_t k = 0; k < in.args.size(); ++k) {
      const Operand o = operand(in.args[k]);
      if (in.args.size() == 1) {  // a unary operation keeps its operand's shape
        runtime::AxisMap id(o.shape.size());
        for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<int>(i);
        maps.push_back(id);
        rank = static_cast<int>(o.shape.size());
      } else {
        maps.push_back(interp::axis_map(in.align.at(k), static_cast<int64_t>(o.shape.size()),
                                        fn_.type_of(in.args[k]).tensor.axes.size(), result_rest));
      }
    }
    return maps;
  }

  /// Whether a step of the group reads v's elements (expand's second operand
  /// gives its shape alone: no buffer, no loads).
  bool loaded(int v) const {
    for (int s : g_.steps) {
      const core::Instr& in = instr(s);
      for (size_t k = 0; k < in.args.size(); ++k)
        if (in.args[k] == v && reads_elements(in, k)) return true;
    }
    return false;
  }

  Shape elementwise_shape(const core::Instr& in) const {
    if (in.op == Op::Expand) return operand(in.args.at(1)).shape;
    if (!core::op_info(in.op).elementwise) throw NotLowered{fmt::format("{} is not element-wise", value_name(in.id))};
    int rank = 0;
    const std::vector<runtime::AxisMap> maps = elementwise_maps(in, rank);
    Shape shape(static_cast<size_t>(rank), 1);
    for (size_t k = 0; k < maps.size(); ++k) {
      const Operand o = operand(in.args[k]);
      std::vector<bool> fed(o.shape.size(), false);
      for (size_t i = 0; i < maps[k].size(); ++i) {
        const int axis = maps[k][i];
        if (axis < 0) continue;
        fed[static_cast<size_t>(axis)] = true;
        const int64_t size = o.shape[static_cast<size_t>(axis)];
        if (size == 1) continue;
        if (shape[i] != 1 && shape[i] != size) throw NotLowered{"operand sizes disagree"};
        shape[i] = size;
      }
      for (size_t a = 0; a < fed.size(); ++a)
        if (!fed[a] && o.shape[a] != 1) throw NotLowered{"an operand axis feeds no result axis"};
    }
    return shape;
  }

  ElemType result_type(const core::Instr& in) const {
    const precision::SiteType* s = site(in.id);
    auto real = [&] { return s ? elem_of(s->storage) : ElemType::F64; };
    auto kind = [&](size_t k) { return kind_of(operand(in.args.at(k)).type); };
    auto unsupported = [&](const std::string& what) {
      return NotLowered{fmt::format("{} ({}) {}", value_name(in.id), core::op_info(in.op).spelling, what)};
    };
    if (is_product(in.op)) return real();
    if (in.op == Op::Expand) {
      if (kind(0) != runtime::ElemKind::Real) throw unsupported("repeats a cotangent that is not real");
      return real();
    }
    if (in.op == Op::SumTo) {
      if (kind(0) != runtime::ElemKind::Real) throw unsupported("sums a cotangent that is not real");
      return real();
    }
    if (is_reduction(in.op)) {
      if (kind(0) != runtime::ElemKind::Real && in.op != Op::Mean && in.op != Op::LogSumExp)
        throw unsupported("reduces integers");
      return real();
    }
    if (in.op == Op::Cast) {
      if (!precision::named_float_type(in.attr<core::attr::CastTo>().target))
        throw unsupported("casts to an integer kind");
      return real();
    }
    if (in.op == Op::Where) {
      if (kind(0) != runtime::ElemKind::Bool) throw unsupported("chooses by a condition that is not bool");
      const runtime::ElemKind a = kind(1), b = kind(2);
      if (a == runtime::ElemKind::Bool && b == runtime::ElemKind::Bool) return ElemType::Bool;
      if (a == runtime::ElemKind::Real || b == runtime::ElemKind::Real) return real();
      throw unsupported("chooses between integers");
    }
    if (in.op == Op::PowConst) return real();
    if (in.args.size() == 1) {
      const std::optional<runtime::ElemKind> k = runtime::unary_result_kind(interp::unary_op(in.op), kind(0));
      if (!k || (*k != runtime::ElemKind::Real && *k != runtime::ElemKind::Bool)) throw unsupported("computes integers");
      return *k == runtime::ElemKind::Bool ? ElemType::Bool : real();
    }
    const runtime::BinaryOp op = interp::binary_op(in.op);
    const bool in_reals = kind(0) == runtime::ElemKind::Real || kind(1) == runtime::ElemKind::Real ||
                          op == runtime::BinaryOp::Div || op == runtime::BinaryOp::Pow;
    // Two booleans compare exactly as 0 and 1; integers keep the reference kernels' exact int64 arithmetic.
    const bool booleans = kind(0) == runtime::ElemKind::Bool && kind(1) == runtime::ElemKind::Bool;
    if (!in_reals && !booleans) throw unsupported("computes on integers");
    const std::optional<runtime::ElemKind> k = runtime::binary_result_kind(op, kind(0), kind(1));
    if (!k) throw unsupported("takes these operand kinds in no kernel");
    return *k == runtime::ElemKind::Bool ? ElemType::Bool : real();
  }

  int input_buffer(int v) {
    if (auto it = buffers_.find(v); it != buffers_.end()) return it->second;
    const Operand o = operand(v);
    const int b = b_.buffer(o.type, o.shape);
    buffers_[v] = b;
    inputs_.push_back(v);
    return b;
  }

  static Affine contiguous_index(const Shape& shape, const std::vector<int>& vars) {
    Affine a;
    const std::vector<int64_t> strides = runtime::contiguous_strides(shape);
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != 1) a.terms.emplace_back(vars.at(d), strides[d]);
    return a;
  }

  // Operand k of `in` at the result element the loops stand on, as the step
  // reads it: a member's scalar, or a load through its alignment, read down
  // to the site's half where the site says so.
  int read_operand(const core::Instr& in, size_t k, const runtime::AxisMap& map) {
    const int v = in.args.at(k);
    const Operand o = operand(v);
    int e = -1;
    if (o.member) {
      bool identity = map.size() == o.shape.size() && o.shape == members_.at(g_.root()).shape;
      for (size_t i = 0; identity && i < map.size(); ++i) identity = map[i] == static_cast<int>(i);
      if (!identity) throw NotLowered{fmt::format("{} is read through a broadcast inside its group", value_name(v))};
      e = b_.scalar(members_.at(v).scalar);
    } else {
      Affine a;
      const std::vector<int64_t> strides = runtime::contiguous_strides(o.shape);
      for (size_t i = 0; i < map.size(); ++i) {
        const int axis = map[i];
        if (axis < 0 || o.shape[static_cast<size_t>(axis)] == 1) continue;
        a.terms.emplace_back(result_vars_.at(i), strides[static_cast<size_t>(axis)]);
      }
      e = b_.load(input_buffer(v), std::move(a));
    }
    return read_down(in, v, o, e);
  }

  int read_down(const core::Instr& in, int v, const Operand& o, int e) { return b_.round(read_type(in, v, o), e); }

  // The step's value rounded as the site is stored.
  int store_round(const core::Instr& in, int e) {
    const precision::SiteType* s = site(in.id);
    if (!s || !is_float(members_.at(in.id).type)) return e;
    if (precision::is_half(s->storage) && !half_intermediates_ && !core::op_info(in.op).stored_directly)
      e = b_.round(FloatType::F32, e);
    return b_.round(s->storage, e);
  }

  FloatType accumulator(const core::Instr& in) const {
    const precision::SiteType* s = site(in.id);
    return s ? s->accumulator : FloatType::F64;
  }

  void set(std::vector<Stmt>& body, int scalar, int expr) { body.push_back(set_stmt(scalar, expr)); }

  // A loop nest over `shape`, one loop an axis, appended to `body`; its
  // variables are appended to `vars`. Returns the innermost body.
  std::vector<Stmt>* open_nest(std::vector<Stmt>& body, const Shape& shape, bool independent, std::vector<int>& vars) {
    std::vector<Stmt>* at = &body;
    for (int64_t extent : shape) {
      vars.push_back(b_.new_loop_var());
      at->push_back(loop_stmt(vars.back(), extent, {}, independent));
      at = &at->back().body;
    }
    return at;
  }

  // A fold loop nest over `shape` (not independent).
  std::vector<Stmt>* open_fold(std::vector<Stmt>& body, const Shape& shape, std::vector<int>& vars) {
    return open_nest(body, shape, /*independent=*/false, vars);
  }

  void emit_step(const core::Instr& in, std::vector<Stmt>& body) {
    Member& m = members_.at(in.id);
    m.scalar = b_.new_scalar();
    int value = -1;
    if (is_product(in.op))
      value = emit_product(in, body);
    else if (is_reduction(in.op))
      value = emit_reduction(in, body);
    else if (in.op == Op::SumTo)
      value = emit_sum_to(in, body);
    else if (in.op == Op::Expand)
      value = emit_expand(in);
    else
      value = emit_elementwise(in);
    set(body, m.scalar, store_round(in, value));
  }

  int emit_elementwise(const core::Instr& in) {
    int rank = 0;
    const std::vector<runtime::AxisMap> maps = elementwise_maps(in, rank);
    std::vector<int> x;
    for (size_t k = 0; k < in.args.size(); ++k) x.push_back(read_operand(in, k, maps[k]));
    if (in.op == Op::Cast) {
      const FloatType t = *precision::named_float_type(in.attr<core::attr::CastTo>().target);
      return b_.round(t, x[0]);
    }
    if (in.op == Op::Where) return b_.where(x[0], x[1], x[2]);
    if (in.op == Op::PowConst) {
      // `pow 2 x` squares (runtime/kernels.h: a literal 2 is x*x).
      const double n = in.attr<core::attr::Exponent>().value;
      if (n == 2.0) return b_.binary(runtime::BinaryOp::Mul, x[0], x[0]);
      return b_.binary(runtime::BinaryOp::Pow, x[0], b_.constant(n));
    }
    if (in.args.size() == 1) return b_.unary(interp::unary_op(in.op), x[0]);
    const runtime::BinaryOp op = interp::binary_op(in.op);
    if (op == runtime::BinaryOp::Pow && operand(in.args[1]).shape.empty()) {
      // A rank-0 exponent equal to 2 squares; the test is the reference kernel's.
      const int two = b_.binary(runtime::BinaryOp::Eq, x[1], b_.constant(2.0));
      return b_.where(two, b_.binary(runtime::BinaryOp::Mul, x[0], x[0]), b_.binary(op, x[0], x[1]));
    }
    return b_.binary(op, x[0], x[1]);
  }

  // expand(g, like): g's element at the result's kept axes, the axes the
  // reduction removed read through a broadcast; a mean's share is that
  // element divided by their count. The reference (interpreter.cpp) divides
  // each element of g once and copies the quotient; dividing at every copy
  // gives each the same quotient, rounded as the site stores it.
  int emit_expand(const core::Instr& in) {
    const Shape& shape = members_.at(in.id).shape;
    const runtime::AxisMap map =
        interp::reduced_map(static_cast<int>(shape.size()), rest_of(in, 1), in.all_axes, in.axes);
    const int g = read_operand(in, 0, map);
    if (!in.attr<core::attr::ExpandOf>().mean) return g;
    int64_t count = 1;
    for (size_t i = 0; i < map.size(); ++i)
      if (map[i] < 0) count *= shape[i];
    return b_.binary(runtime::BinaryOp::Div, g, b_.constant(static_cast<double>(count)));
  }

  Reduction reduction_geometry(const core::Instr& in) const {
    const Operand x = operand(in.args.at(0));
    Reduction r;
    r.axes = interp::reduced_axes(static_cast<int>(x.shape.size()), rest_of(in, 0), in.all_axes, in.axes);
    size_t next = 0;
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (next < r.axes.size() && r.axes[next] == static_cast<int>(d)) {
        r.count *= x.shape[d];
        ++next;
      } else {
        r.kept_shape.push_back(x.shape[d]);
      }
    }
    if (r.count == 0) throw NotLowered{fmt::format("{} reduces an empty axis", value_name(in.id))};
    return r;
  }

  int emit_reduction(const core::Instr& in, std::vector<Stmt>& body) {
    const Reduction r = reduction_geometry(in);
    const Operand x = operand(in.args.at(0));
    const std::vector<int64_t> strides = runtime::contiguous_strides(x.shape);
    // The operand's index: kept axes from the result's loops, reduced ones from the fold's.
    Shape reduced_shape;
    for (int a : r.axes) reduced_shape.push_back(x.shape[static_cast<size_t>(a)]);
    const FloatType acc = accumulator(in);
    auto fold = [&](int init, auto step) {
      const int s = b_.new_scalar();
      set(body, s, init);
      std::vector<int> vars;
      std::vector<Stmt>* inner = open_fold(body, reduced_shape, vars);
      Affine index;
      size_t next = 0, kept = 0;
      for (size_t d = 0; d < x.shape.size(); ++d) {
        const bool reduced = next < r.axes.size() && r.axes[next] == static_cast<int>(d);
        const int var = reduced ? vars[next++] : result_vars_.at(kept++);
        if (x.shape[d] != 1) index.terms.emplace_back(var, strides[d]);
      }
      const int load = read_down(in, in.args[0], x, b_.load(input_buffer(in.args[0]), index));
      set(*inner, s, step(b_.scalar(s), load));
      return s;
    };
    auto r_acc = [&](int e) { return b_.round(acc, e); };
    using runtime::BinaryOp;
    if (r.axes.empty()) {  // a copy: no fold (a fold would turn -0.0 into +0.0)
      Affine index = contiguous_index(x.shape, result_vars_);
      return read_down(in, in.args[0], x, b_.load(input_buffer(in.args[0]), index));
    }
    switch (in.op) {
      case Op::Sum: return b_.scalar(fold(b_.constant(0.0), [&](int a, int v) { return r_acc(b_.binary(BinaryOp::Add, a, v)); }));
      case Op::Mean: {
        const int s = fold(b_.constant(0.0), [&](int a, int v) { return r_acc(b_.binary(BinaryOp::Add, a, v)); });
        return r_acc(b_.binary(BinaryOp::Div, b_.scalar(s), b_.constant(static_cast<double>(r.count))));
      }
      // max(-inf, x) and min(+inf, x) are x itself, NaN included: the fold
      // starting there equals the reference's fold from the first element.
      case Op::ReduceMax:
        return b_.scalar(fold(b_.constant(-std::numeric_limits<double>::infinity()),
                              [&](int a, int v) { return b_.binary(BinaryOp::Max, a, v); }));
      case Op::ReduceMin:
        return b_.scalar(fold(b_.constant(std::numeric_limits<double>::infinity()),
                              [&](int a, int v) { return b_.binary(BinaryOp::Min, a, v); }));
      case Op::LogSumExp: {
        const int m = fold(b_.constant(-std::numeric_limits<double>::infinity()),
                           [&](int a, int v) { return b_.binary(BinaryOp::Max, a, v); });
        const int mv = b_.scalar(m);
        const int s = fold(b_.constant(0.0), [&](int a, int v) {
          const int e = r_acc(b_.unary(runtime::UnaryOp::Exp, r_acc(b_.binary(BinaryOp::Sub, v, b_.scalar(m)))));
          return r_acc(b_.binary(BinaryOp::Add, a, e));
        });
        const int lse =
            r_acc(b_.binary(BinaryOp::Add, mv, r_acc(b_.unary(runtime::UnaryOp::Log, b_.scalar(s)))));
        // ±inf or NaN: the result is the maximum itself.
        return b_.where(b_.finite(mv), lse, mv);
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
    throw NotLowered{"not a reduction"};
  }

  // sum_to(ct, x): the adjoint of broadcasting x into ct's shape. Each of x's
  // elements is the sum of the cotangent elements it was broadcast to,
  // folded from 0 in the cotangent's row-major order, every step rounded to
  // the accumulator: the reference's walk (runtime::sum_to), one element of
  // the result at a time.
  int emit_sum_to(const core::Instr& in, std::vector<Stmt>& body) {
    const Operand ct = operand(in.args.at(0));
    const Shape& shape = members_.at(in.id).shape;
    const runtime::AxisMap map = interp::axis_map(in.align.at(0), static_cast<int64_t>(shape.size()),
                                                  fn_.type_of(in.args.at(1)).tensor.axes.size(), rest_of(in, 0));
    if (map.size() != ct.shape.size()) throw NotLowered{"the cotangent's rank is not its alignment's"};
    // The cotangent's axes that feed an axis of x of the same size are kept;
    // the rest (no axis of x, or one of size 1) are summed over.
    std::vector<bool> fed(shape.size(), false), reduced(ct.shape.size(), false);
    Shape reduced_shape;
    int64_t count = 1;
    for (size_t i = 0; i < map.size(); ++i) {
      const int axis = map[i];
      if (axis >= 0 && shape.at(static_cast<size_t>(axis)) == ct.shape[i]) {
        fed[static_cast<size_t>(axis)] = true;
      } else {
        if (axis >= 0 && shape.at(static_cast<size_t>(axis)) != 1) throw NotLowered{"operand sizes disagree"};
        reduced[i] = true;
        reduced_shape.push_back(ct.shape[i]);
        count *= ct.shape[i];
      }
    }
    for (size_t a = 0; a < shape.size(); ++a)
      if (!fed[a] && shape[a] != 1) throw NotLowered{"an axis of the result takes no cotangent axis"};
    if (count == 0) throw NotLowered{fmt::format("{} sums an empty axis", value_name(in.id))};
    const std::vector<int64_t> strides = runtime::contiguous_strides(ct.shape);
    const int s = b_.new_scalar();
    set(body, s, b_.constant(0.0));
    std::vector<int> vars;
    std::vector<Stmt>* inner = open_fold(body, reduced_shape, vars);
    Affine index;
    for (size_t i = 0, next = 0; i < map.size(); ++i) {
      const int var = reduced[i] ? vars[next++] : result_vars_.at(static_cast<size_t>(map[i]));
      if (ct.shape[i] != 1) index.terms.emplace_back(var, strides[i]);
    }
    const int load = read_down(in, in.args[0], ct, b_.load(input_buffer(in.args[0]), index));
    set(*inner, s, b_.round(accumulator(in), b_.binary(runtime::BinaryOp::Add, b_.scalar(s), load)));
    return b_.scalar(s);
  }

  Product product_geometry(const core::Instr& in) const {
    Product p;
    if (in.op == Op::Dot || in.op == Op::Contract) {
      p.a = 0;
      p.b = 1;
      const Shape as = operand(in.args[0]).shape;
      const Shape bs = operand(in.args[1]).shape;
      p.plan = in.op == Op::Dot ? runtime::dot_plan(static_cast<int>(as.size()), static_cast<int>(bs.size()))
                                : interp::contract_plan(rest_of(in, 0), rest_of(in, 1), fn_.type_of(in.args[0]).tensor,
                                                        fn_.type_of(in.args[1]).tensor, in.axes, in.pairs);
    } else {
      const Shape as = operand(in.args[1]).shape;
      const Shape bs = operand(in.args[2]).shape;
      runtime::ContractPlan fwd =
          in.attr<core::attr::ProductForm>().dot ? runtime::dot_plan(static_cast<int>(as.size()), static_cast<int>(bs.size()))
                          : interp::contract_plan(rest_of(in, 1), rest_of(in, 2), fn_.type_of(in.args[1]).tensor,
                                                  fn_.type_of(in.args[2]).tensor, in.axes, in.pairs);
      if (in.op == Op::ContractGradA) {
        p.plan = runtime::contract_adjoint_a(fwd, static_cast<int>(as.size()));
        p.a = 0;
        p.b = 2;
      } else {
        p.plan = runtime::contract_adjoint_b(fwd, static_cast<int>(bs.size()));
        p.a = 1;
        p.b = 0;
      }
    }
    const Shape as = operand(in.args[static_cast<size_t>(p.a)]).shape;
    const Shape bs = operand(in.args[static_cast<size_t>(p.b)]).shape;
    for (const runtime::ResultAxis& r : p.plan.result) {
      if (r.a_axis >= 0 && r.b_axis >= 0 && as.at(static_cast<size_t>(r.a_axis)) != bs.at(static_cast<size_t>(r.b_axis)))
        throw NotLowered{"batch sizes disagree"};
      p.shape.push_back(r.a_axis >= 0 ? as.at(static_cast<size_t>(r.a_axis)) : bs.at(static_cast<size_t>(r.b_axis)));
    }
    for (auto [ax, bx] : p.plan.contracted)
      if (as.at(static_cast<size_t>(ax)) != bs.at(static_cast<size_t>(bx))) throw NotLowered{"contracted sizes disagree"};
    return p;
  }

  /// The type a site reads operand `v` in: what read_down rounds it to, or F64 (as held).
  FloatType read_type(const core::Instr& in, int v, const Operand& o) const {
    const precision::SiteType* s = site(in.id);
    if (!s || !s->read_down || !is_float(o.type) || float_of(o.type) == s->read_as) return FloatType::F64;
    if (const precision::SiteType* os = site(v); os && os->weak) return FloatType::F64;
    return s->read_as;
  }

  /// Axes `dims` of a row-major operand with `strides` and `shape` as one
  /// axis: its extent and stride (size-1 axes dropped), when they are
  /// consecutive in memory.
  static std::optional<std::pair<int64_t, int64_t>> merged(const std::vector<int>& dims, const Shape& shape,
                                                           const std::vector<int64_t>& strides) {
    std::vector<int> kept;
    for (int d : dims)
      if (shape.at(static_cast<size_t>(d)) != 1) kept.push_back(d);
    if (kept.empty()) return std::pair<int64_t, int64_t>{1, 0};
    int64_t extent = 1;
    for (size_t i = 0; i < kept.size(); ++i) {
      const size_t d = static_cast<size_t>(kept[i]);
      extent *= shape[d];
      if (i + 1 < kept.size()) {
        const size_t next = static_cast<size_t>(kept[i + 1]);
        if (strides[d] != strides[next] * shape[next]) return std::nullopt;
      }
    }
    return std::pair<int64_t, int64_t>{extent, strides[static_cast<size_t>(kept.back())]};
  }

  /// The product as a packed matrix multiply, or NotLowered saying why it is not one.
  /// The packed product's A gives C's rows: the site's first operand, or its
  /// second where the result's axes come batch, then the second operand's,
  /// then the first's (a tied read-out's weight gradient, [v, d] from the
  /// logits' cotangent and the hidden states). Each step of the chain is
  /// fmaf(x, y, acc) either way, and the exact product x · y does not
  /// depend on the order of its factors, so the roles change no bit.
  PackedProduct packing(const core::Instr& in, const Product& p, int va, const Operand& a, int vb, const Operand& b) {
    try {
      return packing_as(in, p, va, a, vb, b, /*swapped=*/false);
    } catch (const NotLowered&) {
      return packing_as(in, p, vb, b, va, a, /*swapped=*/true);
    }
  }

  /// packing() with A the operand `va` (the site's second where `swapped`).
  PackedProduct packing_as(const core::Instr& in, const Product& p, int va, const Operand& a, int vb, const Operand& b,
                           bool swapped) {
    const precision::SiteType* st = site(in.id);
    if (!st || !st->fma || st->accumulator != FloatType::F32)
      throw NotLowered{"the product's steps are not f32 fused multiply-adds"};
    const std::vector<int64_t> sa = runtime::contiguous_strides(a.shape), sb = runtime::contiguous_strides(b.shape);
    PackedProduct k;
    k.a = input_buffer(va);
    k.b = input_buffer(vb);
    k.a_read = read_type(in, va, a);
    k.b_read = read_type(in, vb, b);
    k.scratch = scratch_;
    // The plan's axes of A and of B.
    auto a_axis = [&](const runtime::ResultAxis& r) { return swapped ? r.b_axis : r.a_axis; };
    auto b_axis = [&](const runtime::ResultAxis& r) { return swapped ? r.a_axis : r.b_axis; };
    // Result axes: the batch (both operands), then A's rows, then B's columns.
    std::vector<int> m_dims, n_dims, ka_dims, kb_dims;
    int phase = 0;
    for (size_t i = 0; i < p.plan.result.size(); ++i) {
      const runtime::ResultAxis& r = p.plan.result[i];
      if (p.shape[i] == 1) continue;
      const int here = a_axis(r) >= 0 && b_axis(r) >= 0 ? 0 : a_axis(r) >= 0 ? 1 : 2;
      if (here < phase) throw NotLowered{"the result's axes are not batch, rows, columns in order"};
      phase = here;
      if (here == 0) {
        k.batch.push_back(p.shape[i]);
        k.a_batch.push_back(sa[static_cast<size_t>(a_axis(r))]);
        k.b_batch.push_back(sb[static_cast<size_t>(b_axis(r))]);
      } else if (here == 1) {
        m_dims.push_back(a_axis(r));
      } else {
        n_dims.push_back(b_axis(r));
      }
    }
    for (auto [ax, bx] : p.plan.contracted) {
      ka_dims.push_back(swapped ? bx : ax);
      kb_dims.push_back(swapped ? ax : bx);
    }
    const auto m = merged(m_dims, a.shape, sa), n = merged(n_dims, b.shape, sb);
    const auto ka = merged(ka_dims, a.shape, sa), kb = merged(kb_dims, b.shape, sb);
    if (!m || !n || !ka || !kb) throw NotLowered{"the product's axes do not merge into rows, columns and k"};
    std::tie(k.m, k.a_rs) = *m;
    std::tie(k.n, k.b_cs) = *n;
    std::tie(k.k, k.a_cs) = *ka;
    k.b_rs = kb->second;
    if (k.k == 0 || k.m == 0 || k.n == 0 || runtime::element_count(k.batch) == 0 || ka->first != kb->first)
      throw NotLowered{"an empty product"};
    return k;
  }

  int emit_product(const core::Instr& in, std::vector<Stmt>& body) {
    const Product p = product_geometry(in);
    const int va = in.args.at(static_cast<size_t>(p.a)), vb = in.args.at(static_cast<size_t>(p.b));
    const Operand a = operand(va), b = operand(vb);
    if (a.member || b.member || !is_float(a.type) || !is_float(b.type))
      throw NotLowered{fmt::format("{} multiplies what no kernel reads", value_name(in.id))};
    if (packing_) {
      // The product is computed ahead into the scratch; the nest reads it.
      packed_ = packing(in, p, va, a, vb, b);
      const int s = b_.new_scalar();
      set(body, s, b_.load(scratch_, contiguous_index(p.shape, result_vars_)));
      return b_.scalar(s);
    }
    Shape contracted;
    for (auto [ax, bx] : p.plan.contracted) contracted.push_back(a.shape.at(static_cast<size_t>(ax)));
    const int s = b_.new_scalar();
    set(body, s, b_.constant(0.0));
    std::vector<int> vars;
    std::vector<Stmt>* inner = open_fold(body, contracted, vars);
    const std::vector<int64_t> sa = runtime::contiguous_strides(a.shape), sb = runtime::contiguous_strides(b.shape);
    Affine ia, ib;
    auto term = [](Affine& idx, int var, int64_t stride, int64_t size) {
      if (size != 1) idx.terms.emplace_back(var, stride);
    };
    for (size_t i = 0; i < p.plan.result.size(); ++i) {
      const runtime::ResultAxis& r = p.plan.result[i];
      if (r.a_axis >= 0) term(ia, result_vars_.at(i), sa[static_cast<size_t>(r.a_axis)], a.shape[static_cast<size_t>(r.a_axis)]);
      if (r.b_axis >= 0) term(ib, result_vars_.at(i), sb[static_cast<size_t>(r.b_axis)], b.shape[static_cast<size_t>(r.b_axis)]);
    }
    for (size_t c = 0; c < p.plan.contracted.size(); ++c) {
      auto [ax, bx] = p.plan.contracted[c];
      term(ia, vars[c], sa[static_cast<size_t>(ax)], a.shape[static_cast<size_t>(ax)]);
      term(ib, vars[c], sb[static_cast<size_t>(bx)], b.shape[static_cast<size_t>(bx)]);
    }
    const int x = read_down(in, va, a, b_.load(input_buffer(va), ia));
    const int y = read_down(in, vb, b, b_.load(input_buffer(vb), ib));
    const FloatType acc = accumulator(in);
    const precision::SiteType* st = site(in.id);
    if (st && st->fma) {
      // acc = fma(a, b, acc) rounded once to the accumulator: the site asks for it.
      set(*inner, s, b_.fma(x, y, b_.scalar(s), acc));
      return b_.scalar(s);
    }
    // acc = r(acc + r(a·b)): the reference contraction's fold, unfused.
    const int prod = b_.round(acc, b_.binary(runtime::BinaryOp::Mul, x, y));
    set(*inner, s, b_.round(acc, b_.binary(runtime::BinaryOp::Add, b_.scalar(s), prod)));
    return b_.scalar(s);
  }

  const core::Function& fn_;
  const FusionGroup& g_;
  const precision::FunctionRealization* table_;
  bool half_intermediates_;
  bool packing_;
  int scratch_ = -1;
  std::optional<PackedProduct> packed_;
  const std::vector<interp::Value>& env_;
  KernelBuilder b_;
  std::map<int, Member> members_;
  std::map<int, int> buffers_;
  std::vector<int> inputs_;
  std::vector<int> result_vars_;
};

}  // namespace

std::variant<LoweredLaunch, std::string> lower_group(const core::Function& fn, const FusionGroup& g,
                                                     const precision::FunctionRealization* table,
                                                     bool half_intermediates, const std::vector<interp::Value>& env) {
  const core::Instr& first = fn.body.at(static_cast<size_t>(g.steps.front() - static_cast<int>(fn.args.size()) - 1));
  const bool computes = launch_kind(first) == LaunchKind::ElementWise || is_product(first.op) ||
                        is_reduction(first.op) || first.op == core::Op::SumTo;
  if (!computes) return fmt::format("{} is {}", core::op_info(first.op).spelling, launch_kind_name(launch_kind(first)));
  LoweredLaunch plain;
  try {
    plain = GroupLowering(fn, g, table, half_intermediates, env, false).run();
  } catch (const NotLowered& e) {
    return e.why;
  }
  if (is_product(first.op)) {
    try {
      plain.packed = std::make_shared<LoweredLaunch>(GroupLowering(fn, g, table, half_intermediates, env, true).run());
    } catch (const NotLowered&) {
      // Not packable: the plain nest is the only kernel.
    }
  }
  return plain;
}

}  // namespace quire::kernel
