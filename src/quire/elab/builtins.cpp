// The built-in functions of the language (`exp`, `sum`, `matmul`, `slice`,
// `uniform`, …): each one's checks of its arguments and the Core it lowers to.
// They are members of BodyLowering (body_lowering.h), which lowers their
// operands and emits their instructions.

#include <fmt/format.h>

#include <cmath>

#include "quire/elab/body_lowering.h"

namespace quire::elab {

using core::Instr;
using core::Op;
using OK = Operand::Kind;

namespace {

std::string axes_list(const TensorType& t) {
  std::vector<std::string> names;
  for (size_t i = 0; i < t.axes.size(); ++i)
    names.push_back(t.axes[i].name.empty() ? fmt::format("positional {}", i) : "`" + t.axes[i].name + "`");
  if (names.empty()) return t.rest ? "only `...`" : "no axes";
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

BodyLowering::BuiltinArgs BodyLowering::split_args(const ast::Expr& e) {
  BuiltinArgs b;
  for (const ast::Arg& a : e.args) {
    switch (a.kind) {
      case ast::Arg::Kind::Positional:
        b.positional.push_back(&a);
        break;
      case ast::Arg::Kind::Axis:
        b.axes.push_back(&a);
        break;
      case ast::Arg::Kind::Keyword:
        b.keywords.push_back(&a);
        break;
      case ast::Arg::Kind::AxisSize:
        b.sizes.push_back(&a);
        break;
      case ast::Arg::Kind::Rename:
        b.renames.push_back(&a);
        break;
    }
  }
  return b;
}

bool BodyLowering::expect_args(const std::string& name, const ast::Expr& e, const BuiltinArgs& b, size_t min_pos,
                               size_t max_pos, bool axes, bool sizes, const std::set<std::string>& keywords) {
  bool ok = true;
  if (b.positional.size() < min_pos || b.positional.size() > max_pos) {
    error("E0405", e.range,
          min_pos == max_pos
              ? fmt::format("`{}` takes {} value argument(s), given {}", name, min_pos, b.positional.size())
              : fmt::format("`{}` takes {} to {} value arguments, given {}", name, min_pos, max_pos,
                            b.positional.size()));
    ok = false;
  }
  if (!axes && !b.axes.empty()) {
    error("E0405", b.axes[0]->range, fmt::format("`{}` takes no `axis` argument", name));
    ok = false;
  }
  if (!sizes && !b.sizes.empty()) {
    error("E0405", b.sizes[0]->range, fmt::format("`{}` takes no `name: size` argument", name));
    ok = false;
  }
  if (name != "rename" && !b.renames.empty()) {
    error("E0405", b.renames[0]->range, fmt::format("`{}` takes no `old → new` argument", name),
          "`rename(x, t → s)` renames an axis");
    ok = false;
  }
  for (const ast::Arg* k : b.keywords)
    if (!k->name || !keywords.count(k->name->text)) {
      error("E0405", k->range, fmt::format("`{}` has no argument `{}`", name, k->name ? k->name->text : "?"));
      ok = false;
    }
  return ok;
}

int BodyLowering::axis_index(const TensorType& t, const ast::Ident& name, const char* op) {
  int i = t.find(name.text);
  if (i < 0)
    error("E0403", name.range, fmt::format("{}: {} has no axis named `{}`", op, show(t), name.text),
          fmt::format("its axes: {}", axes_list(t)));
  return i;
}

std::optional<double> BodyLowering::keyword_const(const BuiltinArgs& b, const std::string& key, double fallback) {
  for (const ast::Arg* k : b.keywords)
    if (k->name && k->name->text == key && k->value) {
      bool is_int = false;
      auto v = el_.eval_const(*k->value, fi_, is_int);
      if (!v) return std::nullopt;
      return *v;
    }
  return fallback;
}

NOINLINE std::optional<Operand> BodyLowering::lower_builtin(const std::string& name, const ast::Expr& e) {
  // Every built-in function: its name, the operation it lowers to (the first,
  // where it emits several), and the member that checks a call and lowers it.
  struct Builtin {
    std::string_view name;
    Op op;
    BuiltinLowering lower;
  };
  static const Builtin kBuiltins[] = {
      {"abs", Op::Abs, &BodyLowering::builtin_unary},
      {"exp", Op::Exp, &BodyLowering::builtin_unary},
      {"log", Op::Log, &BodyLowering::builtin_unary},
      {"sqrt", Op::Sqrt, &BodyLowering::builtin_unary},
      {"rsqrt", Op::Rsqrt, &BodyLowering::builtin_unary},
      {"tanh", Op::Tanh, &BodyLowering::builtin_unary},
      {"erf", Op::Erf, &BodyLowering::builtin_unary},
      {"sigmoid", Op::Sigmoid, &BodyLowering::builtin_unary},
      {"relu", Op::Relu, &BodyLowering::builtin_unary},
      {"gelu", Op::Gelu, &BodyLowering::builtin_unary},
      {"gelu_tanh", Op::GeluTanh, &BodyLowering::builtin_unary},
      {"silu", Op::Silu, &BodyLowering::builtin_unary},
      {"log1p", Op::Log1p, &BodyLowering::builtin_unary},
      {"expm1", Op::Expm1, &BodyLowering::builtin_unary},
      {"softplus", Op::Softplus, &BodyLowering::builtin_unary},
      {"not", Op::Not, &BodyLowering::builtin_unary},
      {"sum", Op::Sum, &BodyLowering::builtin_reduction},
      {"mean", Op::Mean, &BodyLowering::builtin_reduction},
      {"logsumexp", Op::LogSumExp, &BodyLowering::builtin_reduction},
      {"max", Op::ReduceMax, &BodyLowering::builtin_extremum},
      {"min", Op::ReduceMin, &BodyLowering::builtin_extremum},
      {"argmax", Op::ReduceMax, &BodyLowering::builtin_arg_extremum},
      {"argmin", Op::ReduceMin, &BodyLowering::builtin_arg_extremum},
      {"where", Op::Where, &BodyLowering::builtin_where},
      {"real", Op::Real, &BodyLowering::builtin_real},
      {"matmul", Op::Dot, &BodyLowering::builtin_matmul},
      {"dot", Op::Dot, &BodyLowering::builtin_matmul},
      {"contract", Op::Contract, &BodyLowering::builtin_contract},
      {"transpose", Op::Transpose, &BodyLowering::builtin_transpose},
      {"split", Op::SplitAxis, &BodyLowering::builtin_split},
      {"merge", Op::MergeAxes, &BodyLowering::builtin_merge},
      {"rename", Op::SplitAxis, &BodyLowering::builtin_rename},
      {"concat", Op::Concat, &BodyLowering::builtin_concat},
      {"slice", Op::Slice, &BodyLowering::builtin_slice},
      {"gather", Op::Gather, &BodyLowering::builtin_gather},
      {"pick", Op::Pick, &BodyLowering::builtin_pick},
      {"scan", Op::Scan, &BodyLowering::builtin_scan},
      {"one_hot", Op::OneHot, &BodyLowering::builtin_one_hot},
      {"ι", Op::Iota, &BodyLowering::builtin_iota},  // `iota` is the same identifier (docs/language.md §1)
      {"uniform", Op::Uniform, &BodyLowering::builtin_draw},
      {"normal", Op::Normal, &BodyLowering::builtin_draw},
      {"bernoulli", Op::Bernoulli, &BodyLowering::builtin_draw},
  };
  for (const Builtin& builtin : kBuiltins)
    if (builtin.name == name) return (this->*builtin.lower)(name, builtin.op, e, split_args(e));
  return std::nullopt;
}

/// `max(x, y)` and `min(x, y)` are element-wise; with an axis (or one operand) they reduce.
NOINLINE Operand BodyLowering::builtin_extremum(const std::string& name, Op op, const ast::Expr& e,
                                                const BuiltinArgs& b) {
  if (b.positional.size() == 2 && b.axes.empty()) return builtin_min_max(name, op, e, b);
  return builtin_reduction(name, op, e, b);
}

NOINLINE Operand BodyLowering::builtin_unary(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, false, false, {})) return Operand::error();
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  Elem elem = x->type.tensor.elem;
  if ((op == Op::Not) != (elem == Elem::Bool)) {
    error("E0406", e.range,
          op == Op::Not ? "`not` takes a boolean tensor"
                        : fmt::format("`{}` takes a real tensor, given {}", name, show(x->type)),
          op == Op::Not ? "" : "convert with `as ℝ`");
    return Operand::error();
  }
  if (elem != Elem::Real && elem != Elem::Bool && op != Op::Abs) {
    error("E0406", e.range, fmt::format("`{}` takes a real tensor, given {}", name, show(x->type)),
          "convert with `as ℝ`");
    return Operand::error();
  }
  return elementwise(op, {*x}, e.range, elem);
}

NOINLINE Operand BodyLowering::builtin_min_max(const std::string& name, Op op, const ast::Expr& e,
                                               const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 2, false, false, {})) return Operand::error();
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto y = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!x || !y) return Operand::error();
  if (x->type.tensor.elem == Elem::Bool || y->type.tensor.elem == Elem::Bool) {
    error("E0406", e.range, fmt::format("`{}` needs numbers, not booleans", name), "convert with `as ℝ`");
    return Operand::error();
  }
  return elementwise(op == Op::ReduceMax ? Op::Max : Op::Min, {*x, *y}, e.range,
                     arithmetic_elem(x->type.tensor.elem, y->type.tensor.elem));
}

NOINLINE Operand BodyLowering::builtin_reduction(const std::string& name, Op op, const ast::Expr& e,
                                                 const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, true, false, {})) return Operand::error();
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  const TensorType& t = x->type.tensor;
  if (t.elem == Elem::Bool || (t.elem != Elem::Real && (op == Op::Mean || op == Op::LogSumExp))) {
    error("E0406", e.range, fmt::format("`{}` takes a real tensor, given {}", name, show(x->type)));
    return Operand::error();
  }
  Instr in = make(op, Type::real_scalar(), {x->id}, e.range);
  in.type.tensor.elem = t.elem;
  if (b.axes.empty()) {
    in.all_axes = true;
    return emit(std::move(in));
  }
  std::set<int> chosen;
  for (const ast::Arg* a : b.axes) {
    int i = axis_index(t, *a->name, name.c_str());
    if (i < 0) return Operand::error();
    if (!chosen.insert(i).second) {
      error("E0403", a->range, fmt::format("axis `{}` is named twice", a->name->text));
      return Operand::error();
    }
  }
  in.axes.assign(chosen.begin(), chosen.end());
  TensorType out = t;
  out.axes.clear();
  for (size_t i = 0; i < t.axes.size(); ++i)
    if (!chosen.count(static_cast<int>(i))) out.axes.push_back(t.axes[i]);
  in.type = Type::make_tensor(out);
  return emit(std::move(in));
}

/// argmax(axis a, x) (argmin with min): the first position along `a` of the
/// largest element, a NaN counting as larger than every number (PyTorch's
/// torch.argmax). Written in Core's own operations, so every pass knows it:
///   m    = max axis a x                  (a NaN if the slice holds one)
///   hit  = where(m ≠ m, x ≠ x, x == m)   (the NaNs if any, else the maxima)
///   pos  = iota(a: A);  last = max pos   (A − 1)
///   result = min axis a where(hit, pos, last)   : i32, x's axes without a
/// `m` and `hit` are aligned by construction (m's axes are x's but `a`), never
/// by broadcasting's rule, which could pair a positional axis of m with `a`.
NOINLINE Operand BodyLowering::builtin_arg_extremum(const std::string& name, Op op, const ast::Expr& e,
                                                    const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, true, false, {})) return Operand::error();
  if (b.axes.size() != 1) {
    error("E0405", e.range, fmt::format("`{}(axis a, x)` finds a position along one named axis", name));
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  const TensorType& t = x->type.tensor;
  if (t.elem == Elem::Bool) {
    error("E0406", e.range, fmt::format("`{}` takes a real or integer tensor, given {}", name, show(x->type)),
          "convert with `as ℝ`");
    return Operand::error();
  }
  const int i = axis_index(t, *b.axes[0]->name, name.c_str());
  if (i < 0) return Operand::error();
  const Size count = t.axes[static_cast<size_t>(i)].size;
  if (auto c = count.constant_value(); c && *c > (int64_t{1} << 31)) {
    error("E0404", b.axes[0]->range, fmt::format("`{}`'s positions are i32: its axis holds at most 2^31", name));
    return Operand::error();
  }
  OperandAlignment whole;  // x, and every value of x's shape
  whole.rest = t.rest;
  for (size_t k = 0; k < t.axes.size(); ++k) whole.map.push_back(static_cast<int>(k));
  // map[j]: the operand's axis read at x's axis j (-1: repeated along it).
  OperandAlignment reduced;  // x's shape without `a`
  reduced.rest = t.rest;
  TensorType without = t;
  without.axes.erase(without.axes.begin() + i);
  for (int k = 0; k < static_cast<int>(t.axes.size()); ++k) reduced.map.push_back(k < i ? k : k == i ? -1 : k - 1);
  auto typed = [](TensorType shape, Elem elem) {
    shape.elem = elem;
    return Type::make_tensor(shape);
  };
  // An element-wise step whose result is x's shape (or `shape`): some operand reads each of its axes.
  auto elementwise_of = [&](Op o, Elem elem, std::vector<std::pair<int, OperandAlignment>> operands,
                            const TensorType* shape = nullptr) {
    Instr in = make(o, typed(shape ? *shape : t, elem), {}, e.range);
    for (auto& [id, a] : operands) {
      in.args.push_back(id);
      in.align.push_back(std::move(a));
    }
    return emit(std::move(in)).id;
  };
  Instr max = make(op, Type::make_tensor(without), {x->id}, e.range);
  max.axes = {i};
  const int m = emit(std::move(max)).id;
  int hit = elementwise_of(Op::Eq, Elem::Bool, {{x->id, whole}, {m, reduced}});
  if (t.elem == Elem::Real) {
    OperandAlignment same;
    same.rest = t.rest;
    for (size_t k = 0; k < without.axes.size(); ++k) same.map.push_back(static_cast<int>(k));
    const int m_nan = elementwise_of(Op::Ne, Elem::Bool, {{m, same}, {m, same}}, &without);
    const int x_nan = elementwise_of(Op::Ne, Elem::Bool, {{x->id, whole}, {x->id, whole}});
    hit = elementwise_of(Op::Where, Elem::Bool, {{m_nan, reduced}, {x_nan, whole}, {hit, whole}});
  }
  TensorType positions;
  positions.elem = Elem::I32;
  positions.axes.push_back(t.axes[static_cast<size_t>(i)]);
  Instr iota = make(Op::Iota, Type::make_tensor(positions), {}, e.range);
  iota.sizes = {count};
  const int pos = emit(std::move(iota)).id;
  Instr largest = make(Op::ReduceMax, typed(TensorType{}, Elem::I32), {pos}, e.range);
  largest.all_axes = true;
  const int last = emit(std::move(largest)).id;
  OperandAlignment along, scalar;  // iota's one axis is `a`; the scalar is read everywhere
  for (int k = 0; k < static_cast<int>(t.axes.size()); ++k) {
    along.map.push_back(k == i ? 0 : -1);
    scalar.map.push_back(-1);
  }
  const int candidates = elementwise_of(Op::Where, Elem::I32, {{hit, whole}, {pos, along}, {last, scalar}});
  Instr first = make(Op::ReduceMin, typed(without, Elem::I32), {candidates}, e.range);
  first.axes = {i};
  return emit(std::move(first));
}

NOINLINE Operand BodyLowering::builtin_where(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 3, 3, false, false, {})) return Operand::error();
  auto c = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto x = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  auto y = tensor(lower(*b.positional[2]->value), b.positional[2]->range);
  if (!c || !x || !y) return Operand::error();
  if (c->type.tensor.elem != Elem::Bool) {
    error("E0406", b.positional[0]->range, fmt::format("`where` needs a boolean condition, given {}", show(c->type)),
          "compare, e.g. `where(x > 0, x, 0)`");
    return Operand::error();
  }
  Elem ex = x->type.tensor.elem, ey = y->type.tensor.elem;
  if ((ex == Elem::Bool) != (ey == Elem::Bool)) {
    error("E0406", e.range,
          fmt::format("`where` chooses between {} and {}: a boolean and a number", show(x->type), show(y->type)),
          "convert with `as ℝ`");
    return Operand::error();
  }
  return elementwise(Op::Where, {*c, *x, *y}, e.range, ex == Elem::Bool ? Elem::Bool : arithmetic_elem(ex, ey));
}

NOINLINE Operand BodyLowering::builtin_real(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, false, false, {})) return Operand::error();
  Operand v = lower(*b.positional[0]->value);
  if (v.kind == OK::Value && v.type.kind == TypeKind::Tensor) {
    error("E0401", e.range, "`real` turns a host scalar into ℝ[]; this is already a tensor", "use `x as ℝ` to convert");
    return Operand::error();
  }
  if (auto r = real_scalar(v, e.range)) return *r;  // real(true) is 1, not a bool[]
  auto t = tensor(v, e.range);
  if (!t) return Operand::error();
  return *t;
}

NOINLINE Operand BodyLowering::builtin_matmul(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 2, false, false, {"out"})) return Operand::error();
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto w = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!x || !w) return Operand::error();
  Operand r = dot(*x, *w, e.range);
  for (const ast::Arg* k : b.keywords) {
    if (!k->value || k->value->kind != ast::ExprKind::Name || (k->value->name != "f32" && k->value->name != "f64")) {
      error("E0401", k->range, "`out =` takes f32 (the accumulator's type)");
      return Operand::error();
    }
    if (r.ok())
      fn_.body.back().set(core::attr::ProductOut{k->value->name == "f32" ? core::attr::ProductOut::Out::F32
                                                                         : core::attr::ProductOut::Out::F64});
  }
  return r;
}

NOINLINE Operand BodyLowering::builtin_transpose(const std::string& name, Op, const ast::Expr& e,
                                                 const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, true, false, {})) return Operand::error();
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  if (b.axes.size() != 2) {
    error("E0405", e.range, "`transpose(x, axis a, axis b)` swaps two named axes");
    return Operand::error();
  }
  int i = axis_index(x->type.tensor, *b.axes[0]->name, "transpose");
  int j = axis_index(x->type.tensor, *b.axes[1]->name, "transpose");
  if (i < 0 || j < 0) return Operand::error();
  TensorType out = x->type.tensor;
  std::swap(out.axes[i], out.axes[j]);
  Instr in = make(Op::Transpose, Type::make_tensor(out), {x->id}, e.range);
  in.axes = identity_map(out.axes.size());
  std::swap(in.axes[i], in.axes[j]);
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_split(const std::string&, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (b.axes.empty() && b.positional.size() == 1 && b.sizes.empty()) {
    Operand k = lower(*b.positional[0]->value);
    if (!k.ok()) return Operand::error();
    if (k.kind != OK::Value || k.type.kind != TypeKind::Key) {
      error("E0401", e.range, "`split(k)` splits a key; to split an axis write `split(axis a, x, p: P, q: Q)`");
      return Operand::error();
    }
    return emit(make(Op::KeySplit, Type::make_tuple({Type::make_key(), Type::make_key()}), {k.id}, e.range));
  }
  return lower_split(e, b);
}

NOINLINE Operand BodyLowering::builtin_concat(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 1024, true, false, {})) return Operand::error();
  if (b.axes.size() != 1) {
    error("E0405", e.range, "`concat(axis a, x, y, …)` joins along one named axis");
    return Operand::error();
  }
  std::vector<Operand> xs;
  for (const ast::Arg* p : b.positional) {
    auto x = tensor(lower(*p->value), p->range);
    if (!x) return Operand::error();
    xs.push_back(*x);
  }
  int i = axis_index(xs[0].type.tensor, *b.axes[0]->name, "concat");
  if (i < 0) return Operand::error();
  TensorType out = xs[0].type.tensor;
  bool ok = true;
  std::vector<int> ids = {xs[0].id};
  for (size_t k = 1; k < xs.size(); ++k) {
    TensorType other = xs[k].type.tensor;
    int j = other.find(b.axes[0]->name->text);
    bool same = j == i && other.rest == out.rest && other.elem == out.elem && other.axes.size() == out.axes.size();
    for (size_t a = 0; same && a < out.axes.size(); ++a)
      if (static_cast<int>(a) != i && !(other.axes[a] == out.axes[a])) same = false;
    if (!same) {
      error("E0402", b.positional[k]->range,
            fmt::format("concat: {} does not match {} except along `{}`", show(other), show(xs[0].type.tensor),
                        b.axes[0]->name->text));
      return Operand::error();
    }
    out.axes[i].size = Size::add(out.axes[i].size, other.axes[j].size, ok);
    ids.push_back(xs[k].id);
  }
  if (!ok) {
    error("E0404", e.range, fmt::format("concat: the sizes along `{}` add past 2^63", b.axes[0]->name->text));
    return Operand::error();
  }
  Instr in = make(Op::Concat, Type::make_tensor(out), ids, e.range);
  in.axes = {i};
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_slice(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 3, 4, true, false, {})) return Operand::error();
  if (b.axes.size() != 1) {
    error("E0405", e.range, "`slice(axis a, x, start, stop[, step])` cuts one named axis");
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  int i = axis_index(x->type.tensor, *b.axes[0]->name, "slice");
  if (i < 0) return Operand::error();
  int64_t bounds[3] = {0, 0, 1};
  for (size_t k = 1; k < b.positional.size(); ++k) {
    bool is_int = false;
    auto v = el_.eval_const(*b.positional[k]->value, fi_, is_int);
    if (!v) return Operand::error();
    if (!is_int || *v < 0 || (k == 3 && *v < 1)) {
      error("E0404", b.positional[k]->range,
            k == 3 ? "a slice's step is a positive integer" : "a slice's bounds are natural-number constants");
      return Operand::error();
    }
    // A double holds every integer up to 2^53 exactly; past it the bound is
    // not the number written, and 2^63 does not convert to int64 at all.
    if (*v > 9007199254740992.0) {
      error("E0404", b.positional[k]->range,
            fmt::format("a slice's {} must be at most 2^53; no axis is that long", k == 3 ? "step" : "bound"));
      return Operand::error();
    }
    bounds[k - 1] = static_cast<int64_t>(*v);
  }
  auto size = x->type.tensor.axes[i].size.constant_value();
  if (bounds[1] <= bounds[0] || (size && bounds[1] > *size)) {
    error("E0404", e.range,
          fmt::format("slice [{}, {}) of axis `{}` (size {}) is empty or out of range", bounds[0], bounds[1],
                      b.axes[0]->name->text, x->type.tensor.axes[i].size.str()));
    return Operand::error();
  }
  TensorType out = x->type.tensor;
  out.axes[i].size = Size::constant((bounds[1] - bounds[0] + bounds[2] - 1) / bounds[2]);
  Instr in = make(Op::Slice, Type::make_tensor(out), {x->id}, e.range);
  in.axes = {i};
  in.set(core::attr::Range{bounds[0], bounds[1], bounds[2]});
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_gather(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 2, true, false, {})) return Operand::error();
  auto table = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto ids = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!table || !ids) return Operand::error();
  const TensorType& t = table->type.tensor;
  const TensorType& it = ids->type.tensor;
  if (it.elem != Elem::I32 && it.elem != Elem::I64) {
    error("E0406", b.positional[1]->range, fmt::format("gather's ids are integers, given {}", show(it)));
    return Operand::error();
  }
  if (t.rest) {
    error("E0401", b.positional[0]->range, "gather's table needs known axes (no `...`)");
    return Operand::error();
  }
  int i = 0;
  if (b.axes.size() == 1)
    i = axis_index(t, *b.axes[0]->name, "gather");
  else if (!b.axes.empty()) {
    error("E0405", e.range, "gather looks up along one axis");
    return Operand::error();
  }
  if (i < 0) return Operand::error();
  if (it.rest && i != 0) {
    error("E0401", e.range, "with `...` ids, gather looks up along the table's first axis");
    return Operand::error();
  }
  TensorType out;
  out.elem = t.elem;
  out.rest = it.rest;
  out.axes.assign(t.axes.begin(), t.axes.begin() + i);
  out.axes.insert(out.axes.end(), it.axes.begin(), it.axes.end());
  out.axes.insert(out.axes.end(), t.axes.begin() + i + 1, t.axes.end());
  if (!unique_names(out, e.range)) return Operand::error();
  Instr in = make(Op::Gather, Type::make_tensor(out), {table->id, ids->id}, e.range);
  in.axes = {i};
  return emit(std::move(in));
}

// `pick(axis n, x, ids)`: x's element at ids along n, one per position of
// ids, whose axes are x's without n (the same names, sizes and order, and
// the same `...`).
NOINLINE Operand BodyLowering::builtin_pick(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 2, true, false, {})) return Operand::error();
  if (b.axes.size() != 1) {
    error("E0405", e.range, "`pick(axis n, x, ids)` names the axis it picks along");
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto ids = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!x || !ids) return Operand::error();
  const TensorType& t = x->type.tensor;
  const TensorType& it = ids->type.tensor;
  if (it.elem != Elem::I32 && it.elem != Elem::I64) {
    error("E0406", b.positional[1]->range, fmt::format("pick's ids are integers, given {}", show(it)));
    return Operand::error();
  }
  const int i = axis_index(t, *b.axes[0]->name, "pick");
  if (i < 0) return Operand::error();
  TensorType out = t;
  out.axes.erase(out.axes.begin() + i);
  if (it.axes != out.axes || it.rest != out.rest) {
    error("E0401", b.positional[1]->range,
          fmt::format("pick's ids must have the axes of x without `{}`, {}; given {}", b.axes[0]->name->text,
                      show(TensorType{it.elem, out.rest, out.axes}), show(it)));
    return Operand::error();
  }
  Instr in = make(Op::Pick, Type::make_tensor(out), {x->id, ids->id}, e.range);
  in.axes = {i};
  return emit(std::move(in));
}

// `scan(axis t, axis n, axis m, a, x)`: the linear recurrence
// h[t, n] = x[t, n] + Σ_m a[t, n, m] h[t − 1, m] along t, h[0] = x[0]. x has
// t and n; a has x's axes (the same names, sizes and order, and the same
// `...`) with m, as long as n, added anywhere; the result has x's type.
NOINLINE Operand BodyLowering::builtin_scan(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 2, 2, true, false, {})) return Operand::error();
  if (b.axes.size() != 3) {
    error("E0405", e.range,
          "`scan(axis t, axis n, axis m, a, x)` names the step axis and the state axis of x, and the axis of a "
          "it sums over");
    return Operand::error();
  }
  auto a = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto x = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!a || !x) return Operand::error();
  const TensorType& at = a->type.tensor;
  const TensorType& xt = x->type.tensor;
  for (size_t k = 0; k < 2; ++k) {
    const TensorType& t = k == 0 ? at : xt;
    if (t.elem != Elem::Real) {
      error("E0406", b.positional[k]->range, fmt::format("scan takes real tensors, given {}", show(t)));
      return Operand::error();
    }
  }
  const int t = axis_index(xt, *b.axes[0]->name, "scan");
  const int n = axis_index(xt, *b.axes[1]->name, "scan");
  const int m = axis_index(at, *b.axes[2]->name, "scan");
  if (t < 0 || n < 0 || m < 0) return Operand::error();
  if (t == n) {
    error("E0405", b.axes[1]->range, fmt::format("scan: the state axis `{}` is the step axis", b.axes[1]->name->text));
    return Operand::error();
  }
  TensorType without = at;
  without.axes.erase(without.axes.begin() + m);
  if (without.axes != xt.axes || without.rest != xt.rest) {
    error("E0401", b.positional[0]->range,
          fmt::format("scan's a must have the axes of x and `{}`; without `{}` it is {}, x is {}",
                      b.axes[2]->name->text, b.axes[2]->name->text, show(without), show(xt)));
    return Operand::error();
  }
  if (!(at.axes[static_cast<size_t>(m)].size == xt.axes[static_cast<size_t>(n)].size)) {
    error("E0404", b.axes[2]->range,
          fmt::format("scan: a's `{}` has size {}, but the state axis `{}` has size {}", b.axes[2]->name->text,
                      at.axes[static_cast<size_t>(m)].size.str(), b.axes[1]->name->text,
                      xt.axes[static_cast<size_t>(n)].size.str()));
    return Operand::error();
  }
  Instr in = make(Op::Scan, Type::make_tensor(xt), {a->id, x->id}, e.range);
  in.axes = {t, n, m};
  in.set(core::attr::ScanOf{false});
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_one_hot(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, false, true, {})) return Operand::error();
  auto ids = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!ids) return Operand::error();
  if (ids->type.tensor.elem != Elem::I32 && ids->type.tensor.elem != Elem::I64) {
    error("E0406", b.positional[0]->range, "one_hot takes integer ids");
    return Operand::error();
  }
  if (b.sizes.size() != 1) {
    error("E0405", e.range, "`one_hot(ids, vocab: V)` names the new axis and its size");
    return Operand::error();
  }
  auto n = el_.eval_size(*b.sizes[0]->value, fi_, mi_);
  if (!n) return Operand::error();
  if (auto c = n->constant_value(); c && *c <= 0) {
    error("E0404", b.sizes[0]->range, "an axis must have a positive size");
    return Operand::error();
  }
  TensorType out = ids->type.tensor;
  out.elem = Elem::Real;
  if (out.find(b.sizes[0]->name->text) >= 0) {
    error("E0403", b.sizes[0]->range, fmt::format("the ids already have an axis `{}`", b.sizes[0]->name->text));
    return Operand::error();
  }
  out.axes.push_back({b.sizes[0]->name->text, *n});
  if (exceeds_element_limit(out)) {
    error("E0404", e.range, fmt::format("{} has more than 2^40 elements", show(out)));
    return Operand::error();
  }
  Instr in = make(Op::OneHot, Type::make_tensor(out), {ids->id}, e.range);
  in.sizes = {*n};
  return emit(std::move(in));
}

/// `iota(t: T)`: the positions 0, 1, …, T − 1 as i32[t: T], the axis named
/// and sized as a draw's are (a causal mask compares two of them).
NOINLINE Operand BodyLowering::builtin_iota(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 0, 0, false, true, {})) return Operand::error();
  if (b.sizes.size() != 1) {
    error("E0405", e.range, "`iota(t: T)` names its one axis and that axis's size");
    return Operand::error();
  }
  auto n = el_.eval_size(*b.sizes[0]->value, fi_, mi_);
  if (!n) return Operand::error();
  if (auto c = n->constant_value(); c && (*c <= 0 || *c > (int64_t{1} << 31))) {
    error("E0404", b.sizes[0]->range,
          *c <= 0 ? "an axis must have a positive size" : "iota's positions are i32: its axis holds at most 2^31");
    return Operand::error();
  }
  TensorType out;
  out.elem = Elem::I32;
  out.axes.push_back({b.sizes[0]->name->text, *n});
  Instr in = make(Op::Iota, Type::make_tensor(out), {}, e.range);
  in.sizes = {*n};
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_contract(const std::string&, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args("contract", e, b, 2, 2, true, false, {"batch"})) return Operand::error();
  if (b.axes.size() != 1) {
    error("E0405", e.range, "`contract(axis d, a, b)` sums over one named axis the two share");
    return Operand::error();
  }
  // `batch = t` or `batch = (t, h)`: the named axes the program means to batch.
  std::map<std::string, SourceRange> meant;
  for (const ast::Arg* k : b.keywords) {
    const ast::Expr& v = *k->value;
    std::vector<const ast::Expr*> names;
    if (v.kind == ast::ExprKind::Tuple)
      for (const auto& c : v.children) names.push_back(c.get());
    else
      names.push_back(&v);
    for (const ast::Expr* n : names) {
      if (n->kind != ast::ExprKind::Name) {
        error("E0405", n->range, "`batch = t` (or `batch = (t, h)`) names the axes contract batches");
        return Operand::error();
      }
      meant.emplace(n->name, n->range);
    }
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  auto y = tensor(lower(*b.positional[1]->value), b.positional[1]->range);
  if (!x || !y) return Operand::error();
  const TensorType& a = x->type.tensor;
  const TensorType& c = y->type.tensor;
  if (a.elem != Elem::Real || c.elem != Elem::Real) {
    error("E0406", e.range, "`contract` multiplies real tensors", "convert with `as ℝ`");
    return Operand::error();
  }
  // Both `...` are the function's leading axes (batch, heads): batched one for one.
  if (c.rest && !a.rest) {
    error("E0401", b.positional[1]->range,
          "contract's second operand has `...` but the first has none: the `...` of both are batched together");
    return Operand::error();
  }
  int ia = axis_index(a, *b.axes[0]->name, "contract");
  int ic = axis_index(c, *b.axes[0]->name, "contract");
  if (ia < 0 || ic < 0) return Operand::error();
  if (!(a.axes[ia].size == c.axes[ic].size)) {
    error("E0402", e.range,
          fmt::format("contract over `{}`: sizes {} and {}", b.axes[0]->name->text, a.axes[ia].size.str(),
                      c.axes[ic].size.str()));
    return Operand::error();
  }
  TensorType out;
  out.rest = a.rest;
  Instr in = make(Op::Contract, Type(), {x->id, y->id}, e.range);
  in.axes = {ia, ic};
  for (size_t i = 0; i < a.axes.size(); ++i)
    if (static_cast<int>(i) != ia) out.axes.push_back(a.axes[i]);
  for (size_t j = 0; j < c.axes.size(); ++j) {
    if (static_cast<int>(j) == ic) continue;
    int shared = c.axes[j].name.empty() ? -1 : a.find(c.axes[j].name);
    if (shared >= 0) {
      if (!(a.axes[shared].size == c.axes[j].size)) {
        error("E0402", e.range,
              fmt::format("contract: batch axis `{}` has sizes {} and {}", c.axes[j].name, a.axes[shared].size.str(),
                          c.axes[j].size.str()));
        return Operand::error();
      }
      in.pairs.push_back({shared, static_cast<int>(j)});
      // Batching pairs each position of the first with the same position of
      // the second only: over two time axes that is the diagonal of q·kᵀ, a
      // slip unless the program says it means it.
      if (meant.erase(c.axes[j].name) == 0)
        el_.diags().warning(
            "W0402", e.range,
            fmt::format("contract batches axis `{}`, which both operands have: each `{}` of the first meets only the "
                        "same `{}` of the second",
                        c.axes[j].name, c.axes[j].name, c.axes[j].name),
            fmt::format("to pair every `{0}` with every other, rename one (`rename(…, {0} → s)`); if batching is "
                        "meant, say `batch = {0}`",
                        c.axes[j].name));
      continue;
    }
    out.axes.push_back(c.axes[j]);
  }
  if (!meant.empty()) {
    error("E0405", meant.begin()->second,
          fmt::format("`batch = {}`: the operands do not share an axis of that name besides `{}`", meant.begin()->first,
                      b.axes[0]->name->text));
    return Operand::error();
  }
  out.elem = Elem::Real;
  in.type = Type::make_tensor(out);
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::lower_split(const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args("split", e, b, 1, 1, true, true, {})) return Operand::error();
  if (b.axes.size() != 1 || b.sizes.size() < 2) {
    error("E0405", e.range, "`split(axis a, x, p: P, q: Q)` splits one axis into named parts");
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  int i = axis_index(x->type.tensor, *b.axes[0]->name, "split");
  if (i < 0) return Operand::error();
  std::vector<Axis> parts;
  Size product = Size::constant(1);
  bool ok = true;
  for (const ast::Arg* s : b.sizes) {
    auto size = el_.eval_size(*s->value, fi_, mi_);
    if (!size) return Operand::error();
    if (auto c = size->constant_value(); c && *c <= 0) {
      error("E0404", s->range, "a part's size is positive");
      return Operand::error();
    }
    parts.push_back({s->name->text, *size});
    product = Size::mul(product, *size, ok);
  }
  if (!ok) {  // a wrapped product could equal the axis's size by accident
    error("E0404", e.range,
          fmt::format("split: the parts' product overflows (it is past 2^63), so it cannot be "
                      "axis `{}`'s size {}",
                      b.axes[0]->name->text, x->type.tensor.axes[i].size.str()));
    return Operand::error();
  }
  if (!(product == x->type.tensor.axes[i].size)) {
    error("E0404", e.range,
          fmt::format("split: the parts multiply to {}, but axis `{}` has size {}", product.str(),
                      b.axes[0]->name->text, x->type.tensor.axes[i].size.str()));
    return Operand::error();
  }
  TensorType out = x->type.tensor;
  out.axes.erase(out.axes.begin() + i);
  out.axes.insert(out.axes.begin() + i, parts.begin(), parts.end());
  if (!unique_names(out, e.range)) return Operand::error();
  Instr in = make(Op::SplitAxis, Type::make_tensor(out), {x->id}, e.range);
  in.axes = {i};
  for (const Axis& p : parts) in.sizes.push_back(p.size);
  return emit(std::move(in));
}

bool BodyLowering::unique_names(const TensorType& t, SourceRange loc) {
  std::set<std::string> names;
  for (const Axis& a : t.axes)
    if (!a.name.empty() && !names.insert(a.name).second) {
      error("E0403", loc, fmt::format("the result would have two axes named `{}`", a.name));
      return false;
    }
  return true;
}

/// rename(x, t → s, …): each named axis takes a new name, in the order
/// written; its size and place stay. In Core a rename is a split of the axis
/// into one part of the new name, which moves no element (the host gives the
/// elements a new type: kernel/fusion.cpp).
NOINLINE Operand BodyLowering::builtin_rename(const std::string& name, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args(name, e, b, 1, 1, false, false, {})) return Operand::error();
  if (b.renames.empty()) {
    error("E0405", e.range, "`rename(x, t → s)` renames axis `t` to `s`: give at least one `old → new`");
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  Operand current = *x;
  for (const ast::Arg* r : b.renames) {
    const int i = axis_index(current.type.tensor, *r->name, "rename");
    if (i < 0) return Operand::error();
    TensorType out = current.type.tensor;
    out.axes[static_cast<size_t>(i)].name = r->value->name;
    if (!unique_names(out, r->range)) return Operand::error();
    Instr in = make(Op::SplitAxis, Type::make_tensor(out), {current.id}, e.range);
    in.axes = {i};
    in.sizes = {out.axes[static_cast<size_t>(i)].size};
    current = emit(std::move(in));
  }
  return current;
}

NOINLINE Operand BodyLowering::builtin_merge(const std::string&, Op, const ast::Expr& e, const BuiltinArgs& b) {
  if (!expect_args("merge", e, b, 1, 1, true, true, {})) return Operand::error();
  if (b.axes.size() < 2 || b.sizes.size() != 1) {
    error("E0405", e.range, "`merge(axis p, axis q, x, a: P·Q)` merges named axes into one, named and sized");
    return Operand::error();
  }
  auto x = tensor(lower(*b.positional[0]->value), b.positional[0]->range);
  if (!x) return Operand::error();
  const TensorType& t = x->type.tensor;
  std::vector<int> merged;
  Size product = Size::constant(1);
  bool ok = true;
  for (const ast::Arg* a : b.axes) {
    int i = axis_index(t, *a->name, "merge");
    if (i < 0) return Operand::error();
    if (std::find(merged.begin(), merged.end(), i) != merged.end()) {
      error("E0403", a->range, fmt::format("axis `{}` is named twice", a->name->text));
      return Operand::error();
    }
    merged.push_back(i);
    product = Size::mul(product, t.axes[i].size, ok);
  }
  auto size = el_.eval_size(*b.sizes[0]->value, fi_, mi_);
  if (!size) return Operand::error();
  if (!ok) {
    error("E0404", e.range, "merge: the axes' product overflows (it is past 2^63)");
    return Operand::error();
  }
  if (!(*size == product)) {
    error("E0404", b.sizes[0]->range,
          fmt::format("merge: the axes multiply to {}, but the result is declared {}", product.str(), size->str()));
    return Operand::error();
  }
  int first = *std::min_element(merged.begin(), merged.end());
  TensorType out = t;
  out.axes.clear();
  for (size_t i = 0; i < t.axes.size(); ++i) {
    if (static_cast<int>(i) == first) out.axes.push_back({b.sizes[0]->name->text, *size});
    if (std::find(merged.begin(), merged.end(), static_cast<int>(i)) == merged.end()) out.axes.push_back(t.axes[i]);
  }
  if (!unique_names(out, e.range)) return Operand::error();
  Instr in = make(Op::MergeAxes, Type::make_tensor(out), {x->id}, e.range);
  in.axes = merged;  // in the order listed: the merged axis is row-major over them
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::builtin_draw(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b) {
  const bool bern = op == Op::Bernoulli;
  std::set<std::string> keys = op == Op::Uniform  ? std::set<std::string>{"low", "high", "like"}
                               : op == Op::Normal ? std::set<std::string>{"mean", "std", "like"}
                                                  : std::set<std::string>{"like"};
  if (!expect_args(name, e, b, bern ? 2 : 1, bern ? 2 : 1, false, true, keys)) return Operand::error();
  Operand k = lower(*b.positional[0]->value);
  if (!k.ok()) return Operand::error();
  if (k.kind != OK::Value || k.type.kind != TypeKind::Key) {
    error("E0401", b.positional[0]->range, fmt::format("`{}` draws from a random key (type `key`) first", name),
          "split keys with `split(k)`");
    return Operand::error();
  }
  TensorType out;
  out.elem = bern ? Elem::Bool : Elem::Real;
  std::vector<Size> sizes;
  // `like = x`: one element per element of x, `...` included.
  std::optional<Operand> like;
  for (const ast::Arg* k : b.keywords)
    if (k->name && k->name->text == "like") {
      like = tensor(lower(*k->value), k->value->range);
      if (!like) return Operand::error();
      if (!b.sizes.empty()) {
        error("E0405", b.sizes[0]->range,
              fmt::format("`{}` takes its shape from `like =` or from `name: size` arguments, not both", name));
        return Operand::error();
      }
      out.rest = like->type.tensor.rest;
      out.axes = like->type.tensor.axes;
    }
  for (const ast::Arg* s : b.sizes) {
    auto size = el_.eval_size(*s->value, fi_, mi_);
    if (!size) return Operand::error();
    if (auto c = size->constant_value(); c && *c <= 0) {
      error("E0404", s->range, "an axis must have a positive size");
      return Operand::error();
    }
    out.axes.push_back({s->name->text, *size});
    sizes.push_back(*size);
  }
  if (!unique_names(out, e.range)) return Operand::error();
  if (exceeds_element_limit(out)) {
    error("E0404", e.range, fmt::format("{} has more than 2^40 elements", show(out)));
    return Operand::error();
  }
  std::vector<int> args = {k.id};
  if (bern) {
    Operand p = lower(*b.positional[1]->value);
    auto pt = tensor(p, b.positional[1]->range);
    if (!pt) return Operand::error();
    if (!pt->type.tensor.is_scalar() || pt->type.tensor.elem != Elem::Real) {
      error("E0401", b.positional[1]->range, "bernoulli's probability is a real scalar ℝ[]");
      return Operand::error();
    }
    args.push_back(pt->id);
  }
  if (like) args.push_back(like->id);
  Instr in = make(op, Type::make_tensor(out), args, e.range);
  in.sizes = sizes;
  auto p1 = keyword_const(b, op == Op::Uniform ? "low" : "mean", 0.0);
  auto p2 = keyword_const(b, op == Op::Uniform ? "high" : "std", 1.0);
  if (!p1 || !p2) return Operand::error();
  if (op == Op::Uniform && !(*p1 < *p2)) {
    error("E0401", e.range, "uniform needs low < high");
    return Operand::error();
  }
  if (op == Op::Normal && *p2 < 0) {
    error("E0401", e.range, "normal needs std ≥ 0");
    return Operand::error();
  }
  if (!bern) in.set(core::attr::DrawParams{*p1, *p2});
  return emit(std::move(in));
}
}  // namespace quire::elab
