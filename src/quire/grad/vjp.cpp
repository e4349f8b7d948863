#include "quire/grad/vjp.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "quire/core/verify.h"

namespace quire::grad {

using core::Instr;
using core::Op;
namespace attr = core::attr;
using elab::OperandAlignment;
using elab::TensorType;
using elab::Type;
using elab::TypeKind;

namespace {

bool is_real(const Type& t) { return t.kind == TypeKind::Tensor && t.tensor.elem == elab::Elem::Real; }

bool differentiable_at(const Type& t, int depth) {
  if (depth > 64) return false;
  if (is_real(t) || t.kind == TypeKind::Params) return true;
  if (t.kind == TypeKind::Tuple)
    for (const Type& e : t.elements)
      if (differentiable_at(e, depth + 1)) return true;
  return false;
}

/// A value's cotangent while the reverse sweep runs: a tensor's (a value of
/// the vjp, 0 while none has arrived), a tuple's per element, a tree's as the
/// contributions made to its leaves and sub-trees.
struct Ct {
  int leaf = 0;
  std::vector<Ct> elements;
  std::vector<std::pair<std::string, int>> tree;  ///< path → contribution; "p." or "" for a sub-tree

  bool empty() const {
    if (leaf || !tree.empty()) return false;
    for (const Ct& e : elements)
      if (!e.empty()) return false;
    return true;
  }
};

OperandAlignment identity(const TensorType& t) {
  OperandAlignment a;
  a.rest = t.rest;
  for (size_t i = 0; i < t.axes.size(); ++i) a.map.push_back(static_cast<int>(i));
  return a;
}

OperandAlignment scalar_into(const TensorType& result) {
  OperandAlignment a;
  a.map.assign(result.axes.size(), -1);
  return a;
}

/// Whether reading an operand of type `x` through `a` into `result` is the
/// identity, so that its cotangent needs no sum (all `...` of one function
/// stand for the same axes).
bool is_identity(const OperandAlignment& a, const TensorType& x, const TensorType& result) {
  if (a.rest != result.rest || x.rest != result.rest || x.axes.size() != result.axes.size()) return false;
  for (size_t i = 0; i < a.map.size(); ++i)
    if (a.map[i] != static_cast<int>(i) || !(x.axes[i].size == result.axes[i].size)) return false;
  return a.map.size() == result.axes.size();
}

std::string vjp_name(const core::Function& f, const std::vector<int>& wrt) {
  if (wrt == differentiable_args(f)) return f.name + ".vjp";
  std::vector<std::string> parts;
  for (int i : wrt) parts.push_back(std::to_string(i));
  return fmt::format("{}.vjp[{}]", f.name, fmt::join(parts, ","));
}

class Builder {
 public:
  Builder(elab::Program& prog, int function, std::vector<int> wrt)
      : prog_(prog), src_(prog.functions.at(function)), wrt_(std::move(wrt)) {}

  core::Function build(const std::string& name) {
    out_.name = name;
    out_.module = src_.module;
    out_.dims = src_.dims;
    out_.file = src_.file;
    out_.loc = src_.loc;
    out_.uses_rand = src_.uses_rand;
    out_.checked = true;
    out_.args = src_.args;
    core::FnArg ct;
    ct.id = static_cast<int>(src_.args.size()) + 1;
    ct.name = "ct";
    ct.type = src_.result;
    ct.loc = src_.loc;
    out_.args.push_back(ct);
    out_.arg_regularity.assign(out_.args.size(), core::Regularity::Smooth);
    remap_.assign(src_.value_count() + 1, 0);
    for (const core::FnArg& a : src_.args) remap_[a.id] = a.id;
    // The forward sweep: f's instructions, renumbered after the extra argument.
    for (const Instr& in : src_.body) {
      Instr copy = in;
      for (int& a : copy.args) a = remap_.at(a);
      remap_[in.id] = emit(std::move(copy));
    }
    // The reverse sweep, seeded with `ct` at the result.
    cts_.assign(src_.value_count() + 1, Ct{});
    Instr seed_at;
    seed_at.loc = src_.loc;
    seed(cts_[src_.result_value], src_.result, ct.id, seed_at);
    // When the sweep reaches instruction k every reader of its value (a later
    // instruction) has run its rule, so cts_[in.id] is the total cotangent.
    out_.cotangent_of.assign(src_.value_count() + 1, 0);
    for (size_t k = src_.body.size(); k-- > 0;) {
      const Instr& in = src_.body[k];
      if (is_real(in.type)) out_.cotangent_of[in.id] = cts_[in.id].leaf;
      if (!cts_[in.id].empty()) reverse(in);
    }
    for (const core::FnArg& a : src_.args)
      if (is_real(a.type)) out_.cotangent_of[a.id] = cts_[a.id].leaf;
    // The result: the forward's, then each requested cotangent.
    Instr at;
    at.loc = src_.loc;
    std::vector<int> parts{remap_.at(src_.result_value)};
    std::vector<Type> types{src_.result};
    for (int i : wrt_) {
      const core::FnArg& a = src_.args.at(i);
      parts.push_back(materialize(cts_[a.id], a.type, a.id, at));
      types.push_back(a.type);
    }
    Type result = Type::make_tuple(types);
    out_.result = result;
    out_.result_value = emit(make(Op::MakeTuple, result, parts, at));
    return std::move(out_);
  }

 private:
  // ---------------------------------------------------------------- emitting

  int emit(Instr in) {
    in.id = out_.value_count() + 1;
    out_.body.push_back(std::move(in));
    return out_.body.back().id;
  }

  /// An instruction of the reverse sweep, at the forward instruction `at`'s
  /// place and with its numerics mark.
  static Instr make(Op op, Type type, std::vector<int> args, const Instr& at) {
    Instr in;
    in.op = op;
    in.attrs = core::default_attrs(op);
    in.type = std::move(type);
    in.args = std::move(args);
    in.loc = at.loc;
    in.numerics = at.numerics;
    return in;
  }

  int constant(double v, const Instr& at) {
    Instr in = make(Op::Const, Type::real_scalar(), {}, at);
    in.set(attr::Literal{v});
    return emit(std::move(in));
  }

  const Type& type_of(int out_id) const { return out_.type_of(out_id); }

  /// An element-wise instruction whose result has `result`'s axes and `elem`.
  int elementwise(Op op, const TensorType& result, elab::Elem elem,
                  std::vector<std::pair<int, OperandAlignment>> operands, const Instr& at) {
    TensorType t = result;
    t.elem = elem;
    Instr in = make(op, Type::make_tensor(t), {}, at);
    for (auto& [id, a] : operands) {
      in.args.push_back(id);
      in.align.push_back(std::move(a));
    }
    return emit(std::move(in));
  }

  /// A unary element-wise instruction on x, in x's own type.
  int unary(Op op, int x, const Instr& at) {
    const TensorType& t = type_of(x).tensor;
    return elementwise(op, t, elab::Elem::Real, {{x, identity(t)}}, at);
  }

  /// An operation on values of the result's type R (each given with its
  /// alignment into R; `same` for values already of type R).
  struct Term {
    int id;
    OperandAlignment align;
  };
  Term same(int id) const { return {id, identity(r_)}; }
  Term scalar(double v, const Instr& at) { return {constant(v, at), scalar_into(r_)}; }
  Term operand(const Instr& fwd, size_t k) const { return {remap_.at(fwd.args[k]), fwd.align.at(k)}; }
  int op2(Op op, Term a, Term b, const Instr& at, elab::Elem elem = elab::Elem::Real) {
    return elementwise(op, r_, elem, {{a.id, std::move(a.align)}, {b.id, std::move(b.align)}}, at);
  }
  int where(Term c, Term a, Term b, const Instr& at) {
    return elementwise(Op::Where, r_, elab::Elem::Real,
                       {{c.id, std::move(c.align)}, {a.id, std::move(a.align)}, {b.id, std::move(b.align)}}, at);
  }

  // ------------------------------------------------------------- cotangents

  /// Gives `value` (of `type`) the cotangent held by the vjp's value `id`.
  void seed(Ct& c, const Type& type, int id, const Instr& at, int depth = 0) {
    if (depth > 64) return;
    if (is_real(type)) {
      c.leaf = id;
    } else if (type.kind == TypeKind::Params) {
      c.tree.push_back({"", id});
    } else if (type.kind == TypeKind::Tuple) {
      c.elements.resize(type.elements.size());
      for (size_t k = 0; k < type.elements.size(); ++k) {
        if (!differentiable(type.elements[k])) continue;
        Instr get = make(Op::TupleGet, type.elements[k], {id}, at);
        get.set(attr::Element{static_cast<int>(k)});
        seed(c.elements[k], type.elements[k], emit(std::move(get)), at, depth + 1);
      }
    }
  }

  /// Adds the cotangent `more` into `c`, both of `type`.
  void merge(Ct& c, const Ct& more, const Type& type, const Instr& at, int depth = 0) {
    if (depth > 64) return;
    if (more.leaf) {
      if (!c.leaf) {
        c.leaf = more.leaf;
      } else {
        const TensorType& t = type.tensor;
        c.leaf = elementwise(Op::Add, t, elab::Elem::Real, {{c.leaf, identity(t)}, {more.leaf, identity(t)}}, at);
      }
    }
    c.tree.insert(c.tree.end(), more.tree.begin(), more.tree.end());
    if (!more.elements.empty()) {
      c.elements.resize(more.elements.size());
      for (size_t k = 0; k < more.elements.size(); ++k)
        merge(c.elements[k], more.elements[k], type.elements.at(k), at, depth + 1);
    }
  }

  /// Adds the vjp's value `id` (of forward value `value`'s type) to its cotangent.
  void add(int value, int id, const Instr& at) {
    Ct more;
    seed(more, src_.type_of(value), id, at);
    merge(cts_[value], more, src_.type_of(value), at);
  }

  /// Adds `id`, which has the forward result's shape, to operand k of `fwd`,
  /// summed onto the operand's shape where the operation broadcast it.
  void add_summed(const Instr& fwd, size_t k, int id) {
    int x = fwd.args[k];
    const TensorType& xt = src_.type_of(x).tensor;
    if (!is_identity(fwd.align.at(k), xt, fwd.type.tensor)) {
      Instr in = make(Op::SumTo, src_.type_of(x), {id, remap_.at(x)}, fwd);
      in.align = {fwd.align.at(k)};
      id = emit(std::move(in));
    }
    add(x, id, fwd);
  }

  /// The cotangent `c` of the forward value held by the vjp's `value` (of
  /// `type`) as one value: zeros where nothing arrived, a tree built from its
  /// contributions; a value that cannot have one is passed as it is.
  int materialize(const Ct& c, const Type& type, int value, const Instr& at, int depth = 0) {
    if (depth > 64) return value;
    if (is_real(type)) return c.leaf ? c.leaf : emit(make(Op::ZerosLike, type, {value}, at));
    if (type.kind == TypeKind::Params) {
      Instr in = make(Op::MakeParams, type, {value}, at);
      for (const auto& [path, id] : c.tree) {
        in.args.push_back(id);
        in.paths.push_back(path);
      }
      return emit(std::move(in));
    }
    if (type.kind == TypeKind::Tuple) {
      std::vector<int> parts;
      for (size_t k = 0; k < type.elements.size(); ++k) {
        Instr get = make(Op::TupleGet, type.elements[k], {value}, at);
        get.set(attr::Element{static_cast<int>(k)});
        int element = emit(std::move(get));
        parts.push_back(materialize(k < c.elements.size() ? c.elements[k] : Ct{}, type.elements[k], element, at, depth + 1));
      }
      return emit(make(Op::MakeTuple, type, parts, at));
    }
    return value;
  }

  // ------------------------------------------------------------------ rules

  void reverse(const Instr& in) {
    const Ct& ct = cts_[in.id];
    const int y = remap_.at(in.id);
    if (in.type.kind == TypeKind::Tensor) r_ = in.type.tensor;
    const int g = ct.leaf;
    auto x = [&](size_t k) { return remap_.at(in.args.at(k)); };
    auto real_operand = [&](size_t k) { return is_real(src_.type_of(in.args.at(k))); };
    switch (in.op) {
      // --- structure
      case Op::Field: {
        int tree = in.args[0];
        if (in.type.kind == TypeKind::Params) {
          for (const auto& [path, id] : ct.tree)
            cts_[tree].tree.push_back({in.attr<attr::Member>().name + "." + path, id});
        } else {
          cts_[tree].tree.push_back({in.attr<attr::Member>().name, g});
        }
        return;
      }
      case Op::TupleGet: {
        Ct more;
        const Type& tt = src_.type_of(in.args[0]);
        more.elements.resize(tt.elements.size());
        more.elements.at(static_cast<size_t>(in.attr<attr::Element>().index)) = ct;
        merge(cts_[in.args[0]], more, tt, in);
        return;
      }
      case Op::MakeTuple:
        for (size_t k = 0; k < in.args.size() && k < ct.elements.size(); ++k)
          merge(cts_[in.args[k]], ct.elements[k], src_.type_of(in.args[k]), in);
        return;
      case Op::Call: return reverse_call(in, y);
      case Op::Fold: return reverse_fold(in, y);
      // --- no cotangent flows through these
      case Op::Const:
      case Op::ConstInt:
      case Op::ConstBool:
      case Op::HostConst:
      case Op::Real:
      case Op::Iota:
      case Op::OneHot:
      case Op::KeySplit:
      case Op::Uniform:
      case Op::Normal:
      case Op::Bernoulli:
        return;
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
    if (!g) return;
    switch (in.op) {
      // --- one operand, element-wise (operand and result share a type)
      case Op::Neg: return add(in.args[0], unary(Op::Neg, g, in), in);
      case Op::Exp: return add(in.args[0], op2(Op::Mul, same(g), same(y), in), in);
      case Op::Log: return add(in.args[0], op2(Op::Div, same(g), same(x(0)), in), in);
      case Op::Sqrt:  // g · 0.5 / y
        return add(in.args[0], op2(Op::Div, same(op2(Op::Mul, same(g), scalar(0.5, in), in)), same(y), in), in);
      case Op::Rsqrt: {  // g · (-0.5 · y³)
        int y3 = op2(Op::Mul, same(op2(Op::Mul, same(y), same(y), in)), same(y), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(op2(Op::Mul, scalar(-0.5, in), same(y3), in)), in), in);
      }
      case Op::Tanh: {  // g · (1 − y²)
        int d = op2(Op::Sub, scalar(1.0, in), same(op2(Op::Mul, same(y), same(y), in)), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::Erf: {  // g · (2/√π) · exp(−x²)
        int e = unary(Op::Exp, unary(Op::Neg, op2(Op::Mul, same(x(0)), same(x(0)), in), in), in);
        int d = op2(Op::Mul, scalar(M_2_SQRTPI, in), same(e), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::Sigmoid: {  // g · y · (1 − y)
        int d = op2(Op::Mul, same(y), same(op2(Op::Sub, scalar(1.0, in), same(y), in)), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::Relu: {  // g where x > 0, else 0 (0 at x = 0, as PyTorch)
        int pos = op2(Op::Gt, same(x(0)), scalar(0.0, in), in, elab::Elem::Bool);
        return add(in.args[0], where(same(pos), same(g), scalar(0.0, in), in), in);
      }
      case Op::Abs: {  // g · sign(x), sign(0) = 0
        int pos = op2(Op::Gt, same(x(0)), scalar(0.0, in), in, elab::Elem::Bool);
        int neg = op2(Op::Lt, same(x(0)), scalar(0.0, in), in, elab::Elem::Bool);
        int inner = where(same(neg), same(unary(Op::Neg, g, in)), scalar(0.0, in), in);
        return add(in.args[0], where(same(pos), same(g), same(inner), in), in);
      }
      case Op::Gelu: {  // g · (Φ(x) + x·φ(x)), Φ(x) = ½(1 + erf(x/√2)), φ(x) = exp(−x²/2)/√(2π)
        int cdf = op2(Op::Mul, scalar(0.5, in),
                      same(op2(Op::Add, scalar(1.0, in),
                               same(unary(Op::Erf, op2(Op::Mul, same(x(0)), scalar(M_SQRT1_2, in), in), in)), in)),
                      in);
        int sq = op2(Op::Mul, same(x(0)), same(x(0)), in);
        int pdf = op2(Op::Mul, scalar(0.5 * M_2_SQRTPI * M_SQRT1_2, in),
                      same(unary(Op::Exp, op2(Op::Mul, scalar(-0.5, in), same(sq), in), in)), in);
        int d = op2(Op::Add, same(cdf), same(op2(Op::Mul, same(x(0)), same(pdf), in)), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::GeluTanh: {
        // t = tanh(k(x + c·x³)); d = ½(1 + t) + ½x(1 − t²)·k(1 + 3c·x²)
        const double k = 0x1.9884533d43651p-1, c = 0.044715;
        int x3 = op2(Op::Mul, same(op2(Op::Mul, same(op2(Op::Mul, scalar(c, in), same(x(0)), in)), same(x(0)), in)),
                     same(x(0)), in);
        int t = unary(Op::Tanh, op2(Op::Mul, scalar(k, in), same(op2(Op::Add, same(x(0)), same(x3), in)), in), in);
        int left = op2(Op::Mul, scalar(0.5, in), same(op2(Op::Add, scalar(1.0, in), same(t), in)), in);
        int one_minus = op2(Op::Sub, scalar(1.0, in), same(op2(Op::Mul, same(t), same(t), in)), in);
        int inner = op2(Op::Add, scalar(1.0, in),
                        same(op2(Op::Mul, same(op2(Op::Mul, scalar(3 * c, in), same(x(0)), in)), same(x(0)), in)), in);
        int right = op2(Op::Mul, same(op2(Op::Mul, same(op2(Op::Mul, scalar(0.5, in), same(x(0)), in)), same(one_minus), in)),
                        same(op2(Op::Mul, scalar(k, in), same(inner), in)), in);
        return add(in.args[0], op2(Op::Mul, same(g), same(op2(Op::Add, same(left), same(right), in)), in), in);
      }
      case Op::Silu: {  // s = sigmoid(x); g · s · (1 + x(1 − s))
        int s = unary(Op::Sigmoid, x(0), in);
        int d = op2(Op::Mul, same(s),
                    same(op2(Op::Add, scalar(1.0, in),
                             same(op2(Op::Mul, same(x(0)), same(op2(Op::Sub, scalar(1.0, in), same(s), in)), in)), in)),
                    in);
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::Log1p:  // g / (1 + x)
        return add(in.args[0], op2(Op::Div, same(g), same(op2(Op::Add, scalar(1.0, in), same(x(0)), in)), in), in);
      case Op::Expm1:  // g · exp(x)
        return add(in.args[0], op2(Op::Mul, same(g), same(unary(Op::Exp, x(0), in)), in), in);
      case Op::Softplus:  // g · sigmoid(x)
        return add(in.args[0], op2(Op::Mul, same(g), same(unary(Op::Sigmoid, x(0), in)), in), in);
      case Op::Cast:
        if (real_operand(0)) add(in.args[0], g, in);  // a rounding: its cotangent passes as it is
        return;
      case Op::PowConst: {  // x^n, n a literal: g · n · x^(n−1)
        int d;
        const double n = in.attr<attr::Exponent>().value;
        if (n == 2.0) {
          d = op2(Op::Mul, scalar(2.0, in), same(x(0)), in);
        } else {
          Instr p = make(Op::PowConst, in.type, {x(0)}, in);
          p.set(attr::Exponent{n - 1});
          p.align = {identity(r_)};
          d = op2(Op::Mul, scalar(n, in), same(emit(std::move(p))), in);
        }
        return add(in.args[0], op2(Op::Mul, same(g), same(d), in), in);
      }
      case Op::Pow: {
        // a^b: ∂a = g · b · a^(b−1), ∂b = g · y · log(a)
        if (real_operand(0)) {
          int bm1 = op2(Op::Sub, operand(in, 1), scalar(1.0, in), in);
          int p = op2(Op::Pow, operand(in, 0), same(bm1), in);
          add_summed(in, 0, op2(Op::Mul, same(g), same(op2(Op::Mul, operand(in, 1), same(p), in)), in));
        }
        if (real_operand(1)) {
          int log_a = unary(Op::Log, x(0), in);
          int d = op2(Op::Mul, same(y), {log_a, in.align.at(0)}, in);
          add_summed(in, 1, op2(Op::Mul, same(g), same(d), in));
        }
        return;
      }
      // --- two operands, broadcast
      case Op::Add:
        if (real_operand(0)) add_summed(in, 0, g);
        if (real_operand(1)) add_summed(in, 1, g);
        return;
      case Op::Sub:
        if (real_operand(0)) add_summed(in, 0, g);
        if (real_operand(1)) add_summed(in, 1, unary(Op::Neg, g, in));
        return;
      case Op::Mul:
        if (real_operand(0)) add_summed(in, 0, op2(Op::Mul, same(g), operand(in, 1), in));
        if (real_operand(1)) add_summed(in, 1, op2(Op::Mul, same(g), operand(in, 0), in));
        return;
      case Op::Div:  // ∂a = g / b, ∂b = −(g · y) / b
        if (real_operand(0)) add_summed(in, 0, op2(Op::Div, same(g), operand(in, 1), in));
        if (real_operand(1))
          add_summed(in, 1, unary(Op::Neg, op2(Op::Div, same(op2(Op::Mul, same(g), same(y), in)), operand(in, 1), in), in));
        return;
      case Op::Max:
      case Op::Min: {
        // To the chosen operand; a tie splits the cotangent in halves, as PyTorch's maximum/minimum do.
        int pick = op2(in.op == Op::Max ? Op::Gt : Op::Lt, operand(in, 0), operand(in, 1), in, elab::Elem::Bool);
        int tie = op2(Op::Eq, operand(in, 0), operand(in, 1), in, elab::Elem::Bool);
        int half = op2(Op::Mul, same(g), scalar(0.5, in), in);
        if (real_operand(0))
          add_summed(in, 0, where(same(pick), same(g), same(where(same(tie), same(half), scalar(0.0, in), in)), in));
        if (real_operand(1))
          add_summed(in, 1, where(same(pick), scalar(0.0, in), same(where(same(tie), same(half), same(g), in)), in));
        return;
      }
      case Op::Where:
        if (real_operand(1)) add_summed(in, 1, where(operand(in, 0), same(g), scalar(0.0, in), in));
        if (real_operand(2)) add_summed(in, 2, where(operand(in, 0), scalar(0.0, in), same(g), in));
        return;
      // --- reductions
      case Op::Sum:
      case Op::Mean:
        if (real_operand(0)) add(in.args[0], expand(in, g, in.op == Op::Mean), in);
        return;
      case Op::ReduceMax:
      case Op::ReduceMin: {
        if (!real_operand(0)) return;
        // To every element equal to the extreme, shared equally among ties (PyTorch's amax/amin).
        const TensorType& xt = src_.type_of(in.args[0]).tensor;
        int at_extreme = elementwise(Op::Eq, xt, elab::Elem::Bool,
                                     {{x(0), identity(xt)}, {expand(in, y, false), identity(xt)}}, in);
        int ones = elementwise(Op::Where, xt, elab::Elem::Real,
                               {{at_extreme, identity(xt)}, {constant(1.0, in), scalar_into(xt)},
                                {constant(0.0, in), scalar_into(xt)}}, in);
        Instr count = make(Op::Sum, in.type, {ones}, in);
        count.axes = in.axes;
        count.all_axes = in.all_axes;
        int share = op2(Op::Div, same(g), same(emit(std::move(count))), in);
        int d = elementwise(Op::Where, xt, elab::Elem::Real,
                            {{at_extreme, identity(xt)}, {expand(in, share, false), identity(xt)},
                             {constant(0.0, in), scalar_into(xt)}}, in);
        return add(in.args[0], d, in);
      }
      case Op::LogSumExp: {  // g · exp(x − y), y broadcast back
        if (!real_operand(0)) return;
        const TensorType& xt = src_.type_of(in.args[0]).tensor;
        int diff = elementwise(Op::Sub, xt, elab::Elem::Real, {{x(0), identity(xt)}, {expand(in, y, false), identity(xt)}}, in);
        int soft = elementwise(Op::Exp, xt, elab::Elem::Real, {{diff, identity(xt)}}, in);
        int d = elementwise(Op::Mul, xt, elab::Elem::Real, {{expand(in, g, false), identity(xt)}, {soft, identity(xt)}}, in);
        return add(in.args[0], d, in);
      }
      // --- products
      case Op::Dot:
      case Op::Contract:
        for (int side = 0; side < 2; ++side) {
          Instr d = make(side == 0 ? Op::ContractGradA : Op::ContractGradB, src_.type_of(in.args[side]), {g, x(0), x(1)}, in);
          d.set(attr::ProductForm{in.op == Op::Dot});
          d.axes = in.axes;
          d.pairs = in.pairs;
          add(in.args[side], emit(std::move(d)), in);
        }
        return;
      // --- restructuring: the cotangent is moved back
      case Op::Transpose: {
        Instr t = make(Op::Transpose, src_.type_of(in.args[0]), {g}, in);
        t.axes.assign(in.axes.size(), 0);
        for (size_t i = 0; i < in.axes.size(); ++i) t.axes[static_cast<size_t>(in.axes[i])] = static_cast<int>(i);
        return add(in.args[0], emit(std::move(t)), in);
      }
      case Op::SplitAxis: return add(in.args[0], emit(make(Op::ReshapeAs, src_.type_of(in.args[0]), {g, x(0)}, in)), in);
      case Op::MergeAxes: {
        Instr m = make(Op::MergeGrad, src_.type_of(in.args[0]), {g, x(0)}, in);
        m.axes = in.axes;
        return add(in.args[0], emit(std::move(m)), in);
      }
      case Op::Concat:
        for (size_t k = 0; k < in.args.size(); ++k) {
          Instr c = make(Op::ConcatGrad, src_.type_of(in.args[k]), {g}, in);
          for (size_t j = 0; j < in.args.size(); ++j) c.args.push_back(x(j));
          c.axes = in.axes;
          c.set(attr::Element{static_cast<int>(k)});
          add(in.args[k], emit(std::move(c)), in);
        }
        return;
      case Op::Slice: {
        Instr s = make(Op::SliceGrad, src_.type_of(in.args[0]), {g, x(0)}, in);
        s.axes = in.axes;
        s.set(in.attr<attr::Range>());
        return add(in.args[0], emit(std::move(s)), in);
      }
      case Op::Pick: {
        Instr s = make(Op::PickGrad, src_.type_of(in.args[0]), {g, x(0), x(1)}, in);
        s.axes = in.axes;
        return add(in.args[0], emit(std::move(s)), in);
      }
      case Op::Scan: {
        // x's cotangent λ follows the other direction's recurrence through
        // the same a (a forward scan's, the adjoint: from the last step down,
        // a[t + 1] transposed); a's is λ times the neighbouring state.
        const bool adjoint = in.attr<attr::ScanOf>().adjoint;
        Instr l = make(Op::Scan, src_.type_of(in.args[1]), {x(0), g}, in);
        l.axes = in.axes;
        l.set(attr::ScanOf{!adjoint});
        const int lambda = emit(std::move(l));
        Instr d = make(Op::ScanGradA, src_.type_of(in.args[0]), {lambda, y, x(0)}, in);
        d.axes = in.axes;
        d.set(attr::ScanOf{adjoint});
        add(in.args[0], emit(std::move(d)), in);
        return add(in.args[1], lambda, in);
      }
      case Op::Gather: {
        Instr s = make(Op::GatherGrad, src_.type_of(in.args[0]), {g, x(0), x(1)}, in);
        s.axes = in.axes;
        return add(in.args[0], emit(std::move(s)), in);
      }
      case Op::Const:
      case Op::ConstInt:
      case Op::ConstBool:
      case Op::HostConst:
      case Op::Real:
      case Op::Field:
      case Op::TupleGet:
      case Op::MakeTuple:
      case Op::Not:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne:
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
      case Op::ScanGradA:
      case Op::GatherGrad:
      case Op::ZerosLike:
      case Op::MakeParams:
      case Op::FoldVjp:
        break;
    }
    // Comparisons, `not`, and the reverse sweep's own operations carry no cotangent
    // of a real value; any other real operation here is a missing rule.
    if (core::op_info(in.op).regularity != core::Regularity::Discontinuous)
      throw std::logic_error(fmt::format("internal: no gradient rule for `{}`", core::op_info(in.op).spelling));
  }

  /// `g` (shaped as the reduction's result) repeated along the axes the
  /// reduction `in` removed from its operand; divided by their count for a mean.
  int expand(const Instr& in, int g, bool mean) {
    Instr e = make(Op::Expand, src_.type_of(in.args[0]), {g, remap_.at(in.args[0])}, in);
    e.axes = in.axes;
    e.all_axes = in.all_axes;
    e.set(attr::ExpandOf{mean});
    return emit(std::move(e));
  }

  void reverse_call(const Instr& in, int y) {
    const int callee = in.callee;
    const std::vector<int> d = differentiable_args(prog_.functions.at(callee));
    if (d.empty()) return;
    int callee_vjp = grad::vjp(prog_, callee, d);
    std::vector<Type> types{in.type};
    for (int j : d) types.push_back(src_.type_of(in.args.at(j)));
    Instr call = make(Op::Call, Type::make_tuple(types), {}, in);
    for (int a : in.args) call.args.push_back(remap_.at(a));
    call.args.push_back(materialize(cts_[in.id], in.type, y, in));
    call.callee = callee_vjp;
    call.sizes = in.sizes;
    int r = emit(std::move(call));
    for (size_t k = 0; k < d.size(); ++k) {
      Instr get = make(Op::TupleGet, types[k + 1], {r}, in);
      get.set(attr::Element{static_cast<int>(k + 1)});
      add(in.args.at(d[k]), emit(std::move(get)), in);
    }
  }

  void reverse_fold(const Instr& in, int y) {
    const int callee = in.callee;
    const std::vector<int> d = differentiable_args(prog_.functions.at(callee));
    // A copy's further operands (keys, booleans, integers) take no cotangent:
    // elaboration admits nothing else there.
    if (d != std::vector<int>{0, 1})
      throw std::logic_error(fmt::format("internal: the stack's `{}` has differentiable operands besides (θ, x)",
                                         prog_.functions.at(callee).name));
    int callee_vjp = grad::vjp(prog_, callee, d);
    const Type& theta = src_.type_of(in.args.at(0));
    const Type& acc = src_.type_of(in.args.at(1));
    std::vector<int> operands;
    for (int a : in.args) operands.push_back(remap_.at(a));
    operands.push_back(materialize(cts_[in.id], in.type, y, in));
    Instr f = make(Op::FoldVjp, Type::make_tuple({in.type, acc, theta}), std::move(operands), in);
    f.callee = callee;
    f.set(attr::VjpOf{callee_vjp});
    f.sizes = in.sizes;
    int r = emit(std::move(f));
    for (int k : {1, 2}) {
      Instr get = make(Op::TupleGet, k == 1 ? acc : theta, {r}, in);
      get.set(attr::Element{k});
      add(in.args.at(k == 1 ? 1 : 0), emit(std::move(get)), in);
    }
  }

  elab::Program& prog_;
  const core::Function src_;  // a copy: prog_.functions grows while callees' vjps are built
  std::vector<int> wrt_;
  core::Function out_;
  std::vector<int> remap_;  // forward value → the vjp's value
  std::vector<Ct> cts_;     // by forward value
  TensorType r_;            // the result type of the instruction being reversed
};

}  // namespace

bool differentiable(const elab::Type& t) { return differentiable_at(t, 0); }

std::vector<int> differentiable_args(const core::Function& f) {
  std::vector<int> out;
  for (size_t i = 0; i < f.args.size(); ++i)
    if (differentiable(f.args[i].type)) out.push_back(static_cast<int>(i));
  return out;
}

int vjp(elab::Program& prog, int function, const std::vector<int>& wrt) {
  const core::Function& f = prog.functions.at(function);
  if (!f.checked) throw std::logic_error(fmt::format("internal: `{}` did not elaborate; it has no vjp", f.name));
  for (int i : wrt)
    if (i < 0 || i >= static_cast<int>(f.args.size()) || !differentiable(f.args[i].type))
      throw std::logic_error(fmt::format("internal: argument {} of `{}` is not differentiable", i, f.name));
  const std::string name = vjp_name(f, wrt);
  for (size_t k = 0; k < prog.functions.size(); ++k)
    if (prog.functions[k].name == name && prog.functions[k].file == f.file) return static_cast<int>(k);
  const size_t first_new = prog.functions.size();
  Builder b(prog, function, wrt);
  core::Function built = b.build(name);
  built.primal = function;
  prog.functions.push_back(std::move(built));
  // The sweep and the vjps it added for its callees keep Core's invariants (core/verify.h).
  if (core::kVerifyCore) core::verify_or_throw(prog.functions, first_new);
  return static_cast<int>(prog.functions.size()) - 1;
}

}  // namespace quire::grad
