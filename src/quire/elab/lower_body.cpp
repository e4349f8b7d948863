// The body pass of elaboration: type-checks one function's expressions and
// lowers them to Core, one typed instruction per value (A-normal form). The
// built-in functions are lowered in builtins.cpp; body_lowering.h states what
// the pass requires and produces.

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "quire/elab/body_lowering.h"
#include "quire/grad/vjp.h"

namespace quire::elab {

using core::Instr;
using core::Op;
using OK = Operand::Kind;

// Above the parser's 200 levels (E0202 there), with room for the body's own
// block: whatever parses is lowered; this only guards the recursion.
constexpr int kMaxDepth = 256;

void BodyLowering::run() {
  Elaborator::SizeParamsInScope sizes(el_, fn_.module < 0 ? fn_.dims : std::vector<std::string>{});
  scopes_.emplace_back();
  for (const core::FnArg& a : fn_.args) {
    Operand op;
    op.kind = OK::Value;
    op.id = a.id;
    op.type = a.type;
    op.loc = a.loc;
    scopes_.back().names[a.name] = op;
  }
  if (mi_ >= 0) scopes_.back().names["theta"] = scopes_.back().names["θ"];
  // Default values are constants: check them here, where they are declared.
  for (const ast::FnArg& a : decl_.args)
    if (a.default_value) {
      bool is_int = false;
      el_.eval_const(*a.default_value, fi_, is_int);
    }
  if (!decl_.body) return;
  Operand result = lower(*decl_.body);
  if (!result.ok() || !fn_.checked) {
    fn_.checked = false;
    return;
  }
  auto id = convert_to(result, fn_.result, decl_.body->range, "the function's result");
  if (!id) {
    fn_.checked = false;
    return;
  }
  fn_.result_value = *id;
}

void BodyLowering::error(const char* code, SourceRange at, std::string message, std::string hint) {
  el_.error(code, at, std::move(message), std::move(hint));
  fn_.checked = false;
}

Operand BodyLowering::emit(Instr in) {
  in.id = fn_.value_count() + 1;
  in.numerics = numerics_;
  Operand op;
  op.kind = OK::Value;
  op.id = in.id;
  op.type = in.type;
  op.loc = in.loc;
  fn_.body.push_back(std::move(in));
  return op;
}

Instr BodyLowering::make(Op op, Type type, std::vector<int> args, SourceRange loc) {
  Instr in;
  in.op = op;
  in.attrs = core::default_attrs(op);
  in.type = std::move(type);
  in.args = std::move(args);
  in.loc = loc;
  return in;
}

std::optional<Operand> BodyLowering::real_scalar(const Operand& op, SourceRange loc) {
  if (op.kind == OK::Literal) {
    Instr in = make(Op::Const, Type::real_scalar(), {}, loc);
    in.set(core::attr::Literal{op.number});
    return emit(std::move(in));
  }
  if (op.kind == OK::Value && op.type.kind == TypeKind::Scalar)
    return emit(make(Op::Real, Type::real_scalar(), {op.id}, loc));
  return std::nullopt;
}

std::optional<Operand> BodyLowering::tensor(const Operand& op, SourceRange loc, const char* what) {
  bool boolean = (op.kind == OK::Literal && op.is_bool) ||
                 (op.kind == OK::Value && op.type.kind == TypeKind::Scalar && op.type.scalar == ScalarKind::Bool);
  if (auto r = real_scalar(op, loc)) {
    if (!boolean) return r;
    TensorType b;
    b.elem = Elem::Bool;
    Instr cast = make(Op::Cast, Type::make_tensor(b), {r->id}, loc);
    cast.set(core::attr::CastTo{core::CastTarget::Bool});
    cast.align = {{{}, false}};
    return emit(std::move(cast));
  }
  switch (op.kind) {
    case OK::Error:
      return std::nullopt;
    case OK::Value:
      if (op.type.kind == TypeKind::Tensor) return op;
      error("E0401", loc, fmt::format("{} is {}, not a tensor", what, show(op.type)));
      return std::nullopt;
    default:
      error("E0401", loc,
            fmt::format("{} is a {}, not a value", what,
                        op.kind == OK::Module ? "module"
                        : op.kind == OK::File ? "file alias"
                        : op.kind == OK::Use  ? "sub-module"
                                              : "function"),
            op.kind == OK::Function ? "call it with (…)" : "");
      return std::nullopt;
  }
}

std::optional<Operand> BodyLowering::lookup_local(const std::string& name) {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->names.find(name);
    if (found != it->names.end()) return found->second;
  }
  return std::nullopt;
}

Operand BodyLowering::lookup(const std::string& name, SourceRange loc) {
  if (auto local = lookup_local(name)) return *local;
  if (mi_ >= 0) {
    const ModuleInfo& m = prog_.modules[mi_];
    for (const ParamInfo& p : m.params)
      if (p.name == name) return field(self_tree(), name, loc);
    for (size_t u = 0; u < m.uses.size(); ++u)
      if (m.uses[u].name == name) {
        return named(OK::Use, static_cast<int>(u), loc);
      }
    auto f = m.fns.find(name);
    if (f != m.fns.end()) {
      Operand op;
      op.kind = OK::Function;
      op.index = f->second;
      op.number = 1;  // a call of the module's own function: θ passes implicitly
      op.loc = loc;
      return op;
    }
  }
  if (auto op = lookup_in_file(fi_, name, loc)) return *op;
  if (int f = prelude_function(name); f >= 0) return named(OK::Function, f, loc);
  if (std::optional<double> v = special_literal(name)) {
    Operand op;
    op.kind = OK::Literal;
    op.number = *v;
    op.loc = loc;
    return op;
  }
  for (const std::string& d : prog_.files[fi_].dims)
    if (d == name) {
      error("E0401", loc, fmt::format("`{}` is a dimension, not a value", name));
      return Operand::error();
    }
  if (mi_ >= 0)
    for (const std::string& d : prog_.modules[mi_].dims)
      if (d == name) {
        error("E0401", loc, fmt::format("`{}` is a dimension, not a value", name));
        return Operand::error();
      }
  if (mi_ < 0)
    for (const std::string& d : fn_.dims)
      if (d == name) {
        error("E0401", loc, fmt::format("`{}` is a size parameter, not a value", name));
        return Operand::error();
      }
  error("E0303", loc, fmt::format("unknown name `{}`", name), suggestion(name));
  return Operand::error();
}

std::string BodyLowering::suggestion(const std::string& name) {
  // The closest local name by edit distance, if it is close.
  std::string best;
  size_t best_d = 3;
  auto consider = [&](const std::string& cand) {
    size_t n = name.size(), m = cand.size();
    if (n > 64 || m > 64) return;
    std::vector<size_t> prev(m + 1), cur(m + 1);
    for (size_t j = 0; j <= m; ++j) prev[j] = j;
    for (size_t i = 1; i <= n; ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= m; ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (name[i - 1] == cand[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    if (prev[m] < best_d) {
      best_d = prev[m];
      best = cand;
    }
  };
  for (const Scope& s : scopes_)
    for (const auto& [n, op] : s.names) consider(n);
  if (mi_ >= 0) {
    for (const ParamInfo& p : prog_.modules[mi_].params) consider(p.name);
    for (const UseInfo& u : prog_.modules[mi_].uses) consider(u.name);
  }
  return best.empty() ? "" : fmt::format("did you mean `{}`?", best);
}

std::optional<Operand> BodyLowering::lookup_in_file(int file, const std::string& name, SourceRange loc) {
  const FileInfo& f = prog_.files[file];
  for (const ConstInfo& c : f.consts)
    if (c.name == name) {
      Operand op;
      op.kind = OK::Literal;
      op.number = c.value;
      op.is_integer = c.kind != ScalarKind::F64;
      op.is_bool = c.kind == ScalarKind::Bool;
      op.loc = loc;
      return op;
    }
  for (int m : f.modules)
    if (prog_.modules[m].name == name) {
      return named(OK::Module, m, loc);
    }
  for (int fn : f.fns)
    if (prog_.functions[fn].name == name) {
      return named(OK::Function, fn, loc);
    }
  for (const auto& [alias, idx] : f.imports)
    if (alias == name) {
      return named(OK::File, idx, loc);
    }
  return std::nullopt;
}

Operand BodyLowering::named(OK kind, int index, SourceRange loc) {
  Operand op;
  op.kind = kind;
  op.index = index;
  op.loc = loc;
  return op;
}

Operand BodyLowering::self_tree() const {
  Operand op;
  op.kind = OK::Value;
  op.id = 1;
  op.type = fn_.args[0].type;
  return op;
}

Operand BodyLowering::field(const Operand& tree, const std::string& name, SourceRange loc) {
  auto key = std::make_tuple(tree.id, name, numerics_);
  if (auto it = fields_.find(key); it != fields_.end()) return it->second;
  const ParamsType& p = tree.type.params;
  if (!p.stack.empty()) {
    error("E0401", loc, fmt::format("`{}` is a stack of modules: its fields are read by calling its functions", name),
          "call e.g. `blocks.apply(x)`, which folds over the copies");
    return Operand::error();
  }
  const ModuleInfo& m = prog_.modules[p.module];
  std::map<std::string, Size> binding;
  for (size_t i = 0; i < m.dims.size() && i < p.dims.size(); ++i) binding[m.dims[i]] = p.dims[i];
  bool ok = true;
  for (const ParamInfo& param : m.params)
    if (param.name == name) {
      TensorType t = param.type;
      for (Axis& a : t.axes) a.size = a.size.substitute(binding, ok);
      Instr in = make(Op::Field, Type::make_tensor(t), {tree.id}, loc);
      in.set(core::attr::Member{name});
      in.name = name;
      return fields_[key] = emit(std::move(in));
    }
  for (const UseInfo& use : m.uses)
    if (use.name == name) {
      ParamsType inner = use.type;
      for (Size& s : inner.dims) s = s.substitute(binding, ok);
      for (Size& s : inner.stack) s = s.substitute(binding, ok);
      Instr in = make(Op::Field, Type::make_params(inner), {tree.id}, loc);
      in.set(core::attr::Member{name});
      in.name = name;
      return fields_[key] = emit(std::move(in));
    }
  error("E0303", loc, fmt::format("module `{}` has no parameter or sub-module `{}`", m.name, name));
  return Operand::error();
}

Operand BodyLowering::lower(const ast::Expr& e) {
  if (++depth_ > kMaxDepth) {
    --depth_;
    error("E0202", e.range, "expression nested too deeply");
    return Operand::error();
  }
  Operand r = lower_inner(e);
  --depth_;
  return r;
}

Operand BodyLowering::lower_inner(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::Number: {
      Operand op;
      op.kind = OK::Literal;
      op.number = e.number;
      op.is_integer = e.is_integer;
      op.loc = e.range;
      return op;
    }
    case ast::ExprKind::Bool: {
      Operand op;
      op.kind = OK::Literal;
      op.number = e.boolean ? 1 : 0;
      op.is_bool = op.is_integer = true;
      op.loc = e.range;
      return op;
    }
    case ast::ExprKind::String:
      error("E0401", e.range, "a string is not a value here");
      return Operand::error();
    case ast::ExprKind::Name:
      return lookup(e.name, e.range);
    case ast::ExprKind::Member:
      return lower_member(e);
    case ast::ExprKind::TupleIndex:
      return lower_tuple_index(e);
    case ast::ExprKind::Call:
      return lower_call(e);
    case ast::ExprKind::Binary:
      return lower_binary(e);
    case ast::ExprKind::Unary:
      return lower_negation(e);
    case ast::ExprKind::Cast:
      return lower_cast(e);
    case ast::ExprKind::Tuple:
      return lower_tuple(e);
    case ast::ExprKind::Block:
      return lower_block(e);
    case ast::ExprKind::Numerics:
    case ast::ExprKind::Precision:
      return lower_numerics(e);
  }
  return Operand::error();
}

NOINLINE Operand BodyLowering::lower_tuple_index(const ast::Expr& e) {
  if (e.children.empty()) return Operand::error();
  Operand base = lower(*e.children[0]);
  if (!base.ok()) return base;
  if (base.kind != OK::Value || base.type.kind != TypeKind::Tuple) {
    error("E0401", e.range,
          fmt::format("`.{}` reads a tuple's element, but this is {}", e.index,
                      base.kind == OK::Value ? show(base.type) : std::string("not a value")));
    return Operand::error();
  }
  if (e.index < 0 || e.index >= static_cast<int>(base.type.elements.size())) {
    error("E0401", e.range,
          fmt::format("the tuple has {} elements; `.{}` is outside", base.type.elements.size(), e.index));
    return Operand::error();
  }
  Instr in = make(Op::TupleGet, base.type.elements[e.index], {base.id}, e.range);
  in.set(core::attr::Element{e.index});
  return emit(std::move(in));
}

NOINLINE Operand BodyLowering::lower_negation(const ast::Expr& e) {
  if (e.children.empty()) return Operand::error();
  Operand x = lower(*e.children[0]);
  if (x.kind == OK::Literal && !x.is_bool) {
    x.number = -x.number;
    x.loc = e.range;
    return x;
  }
  auto t = tensor(x, e.children[0]->range);
  if (!t) return Operand::error();
  if (t->type.tensor.elem == Elem::Bool) {
    error("E0406", e.range, "cannot negate a boolean tensor", "use not(x)");
    return Operand::error();
  }
  return elementwise(Op::Neg, {*t}, e.range, t->type.tensor.elem);
}

NOINLINE Operand BodyLowering::lower_tuple(const ast::Expr& e) {
  std::vector<int> ids;
  std::vector<Type> types;
  for (const ast::ExprPtr& c : e.children) {
    Operand op = lower(*c);
    if (op.kind == OK::Literal) {
      auto t = tensor(op, c->range);
      if (!t) return Operand::error();
      op = *t;
    }
    if (!op.ok()) return op;
    if (op.kind != OK::Value) {
      error("E0401", c->range, "a tuple holds values");
      return Operand::error();
    }
    ids.push_back(op.id);
    types.push_back(op.type);
  }
  return emit(make(Op::MakeTuple, Type::make_tuple(types), ids, e.range));
}

NOINLINE Operand BodyLowering::lower_numerics(const ast::Expr& e) {
  core::Numerics saved = numerics_;
  if (e.kind == ast::ExprKind::Numerics) {
    if (e.name != "high") {
      error("E0401", e.range, fmt::format("unknown numerics `{}`", e.name), "write numerics(high) { … }");
      return Operand::error();
    }
    numerics_ = core::Numerics::High;
  } else {
    if (e.name == "bf16")
      numerics_ = core::Numerics::RegionBf16;
    else if (e.name == "f16")
      numerics_ = core::Numerics::RegionF16;
    else {
      error("E0401", e.range, fmt::format("unknown precision `{}`", e.name), "precision(bf16) or precision(f16)");
      return Operand::error();
    }
  }
  Operand r = e.children.empty() ? Operand::error() : lower(*e.children[0]);
  // A literal result still belongs to the form: materialize it inside.
  if (r.kind == OK::Literal) {
    auto t = tensor(r, e.range);
    r = t ? *t : Operand::error();
  }
  numerics_ = saved;
  return r;
}

NOINLINE Operand BodyLowering::lower_block(const ast::Expr& e) {
  scopes_.emplace_back();
  for (const ast::Let& let : e.lets) {
    if (!let.value || !let.pattern) continue;
    size_t before = fn_.body.size();
    Operand v = lower(*let.value);
    if (v.ok() && let.annotation) {
      auto t = el_.resolve_type(*let.annotation, fi_, mi_);
      if (t) {
        auto id = convert_to(v, *t, let.value->range, "the annotated let");
        if (id) {
          v.kind = OK::Value;
          v.id = *id;
          v.type = *t;
        } else {
          v = Operand::error();
        }
      }
    }
    bind(*let.pattern, v, before, 0);
  }
  Operand r = e.children.empty() ? Operand::error() : lower(*e.children[0]);
  scopes_.pop_back();
  return r;
}

void BodyLowering::bind(const ast::Pattern& p, const Operand& v, size_t first_new, int depth) {
  if (depth > kMaxDepth) return;
  switch (p.kind) {
    case ast::Pattern::Kind::Wildcard:
      return;
    case ast::Pattern::Kind::Name:
      // The value takes the let's name when this let created it.
      if (v.kind == OK::Value && v.id > static_cast<int>(fn_.args.size())) {
        Instr& in = fn_.body[v.id - fn_.args.size() - 1];
        if (in.name.empty() && static_cast<size_t>(v.id - fn_.args.size() - 1) >= first_new) in.name = p.name.text;
      }
      scopes_.back().names[p.name.text] = v;
      return;
    case ast::Pattern::Kind::Tuple: {
      if (!v.ok()) {
        for (const ast::PatternPtr& sub : p.elements)
          if (sub) bind(*sub, Operand::error(), first_new, depth + 1);
        return;
      }
      if (v.kind != OK::Value || v.type.kind != TypeKind::Tuple || v.type.elements.size() != p.elements.size()) {
        error("E0401", p.range,
              fmt::format("a pattern of {} elements cannot match {}", p.elements.size(),
                          v.kind == OK::Value ? show(v.type) : std::string("this")));
        for (const ast::PatternPtr& sub : p.elements)
          if (sub) bind(*sub, Operand::error(), first_new, depth + 1);
        return;
      }
      for (size_t i = 0; i < p.elements.size(); ++i) {
        if (!p.elements[i] || p.elements[i]->kind == ast::Pattern::Kind::Wildcard) continue;
        Instr in = make(Op::TupleGet, v.type.elements[i], {v.id}, p.elements[i]->range);
        in.set(core::attr::Element{static_cast<int>(i)});
        Operand elem = emit(std::move(in));
        bind(*p.elements[i], elem, fn_.body.size() - 1, depth + 1);
      }
      return;
    }
  }
}

NOINLINE Operand BodyLowering::lower_member(const ast::Expr& e) {
  if (e.children.empty()) return Operand::error();
  Operand base = lower(*e.children[0]);
  if (!base.ok()) return base;
  switch (base.kind) {
    case OK::File: {
      if (auto op = lookup_in_file(base.index, e.name, e.range)) return *op;
      error("E0303", e.range,
            fmt::format("`{}` has no module, function or constant `{}`", prog_.files[base.index].path, e.name));
      return Operand::error();
    }
    case OK::Module: {
      const ModuleInfo& m = prog_.modules[base.index];
      auto f = m.fns.find(e.name);
      if (f == m.fns.end()) {
        error("E0303", e.range, fmt::format("module `{}` has no function `{}`", m.name, e.name));
        return Operand::error();
      }
      Operand op;
      op.kind = OK::Function;
      op.index = f->second;
      op.number = 0;  // θ is passed explicitly
      op.loc = e.range;
      return op;
    }
    case OK::Use: {
      const UseInfo& use = prog_.modules[mi_].uses[base.index];
      if (use.type.module < 0) return Operand::error();
      const ModuleInfo& m = prog_.modules[use.type.module];
      auto f = m.fns.find(e.name);
      if (f == m.fns.end()) {
        error("E0303", e.range,
              fmt::format("module `{}` (sub-module `{}`) has no function `{}`", m.name, use.name, e.name));
        return Operand::error();
      }
      Operand op;
      op.kind = OK::Function;
      op.index = f->second;
      op.number = 2;       // θ.<use> passes implicitly
      op.id = base.index;  // the use
      op.loc = e.range;
      return op;
    }
    case OK::Value:
      if (base.type.kind == TypeKind::Params) return field(base, e.name, e.range);
      error("E0401", e.range, fmt::format("`.{}`: {} has no fields", e.name, show(base.type)));
      return Operand::error();
    default:
      error("E0401", e.range, fmt::format("`.{}` on something that has no members", e.name));
      return Operand::error();
  }
}

NOINLINE Operand BodyLowering::lower_cast(const ast::Expr& e) {
  if (e.children.empty()) return Operand::error();
  Operand x = lower(*e.children[0]);
  auto t = tensor(x, e.children[0]->range);
  if (!t) return Operand::error();
  static const std::map<std::string, Elem> targets = {
      {"f64", Elem::Real}, {"f32", Elem::Real},  {"bf16", Elem::Real}, {"f16", Elem::Real}, {"f32acc", Elem::Real},
      {"ℝ", Elem::Real},   {"real", Elem::Real}, {"i32", Elem::I32},   {"i64", Elem::I64},  {"bool", Elem::Bool}};
  auto it = targets.find(e.name);
  if (it == targets.end()) {
    error("E0401", e.range, fmt::format("cannot cast to `{}`", e.name),
          "f64, f32, bf16, f16, f32acc, ℝ, i32, i64, bool");
    return Operand::error();
  }
  TensorType out = t->type.tensor;
  out.elem = it->second;
  Instr in = make(Op::Cast, Type::make_tensor(out), {t->id}, e.range);
  in.set(core::attr::CastTo{*core::parse_cast_target(e.name)});
  in.align = {{identity_map(out.axes.size()), out.rest}};
  return emit(std::move(in));
}

std::vector<int> BodyLowering::identity_map(size_t n) {
  std::vector<int> m(n);
  for (size_t i = 0; i < n; ++i) m[i] = static_cast<int>(i);
  return m;
}

Operand BodyLowering::elementwise(Op op, const std::vector<Operand>& xs, SourceRange loc, Elem result_elem) {
  std::vector<const TensorType*> types;
  for (const Operand& x : xs) types.push_back(&x.type.tensor);
  std::string err;
  auto alignment = align(types, err);
  if (!alignment) {
    std::vector<std::string> shown;
    for (const Operand& x : xs) shown.push_back(show(x.type));
    error("E0402", loc, fmt::format("cannot broadcast {}: {}", fmt::join(shown, " with "), err),
          "named axes align by name, the others from the right; an axis of size 1 stretches");
    return Operand::error();
  }
  alignment->result.elem = result_elem;
  std::vector<int> ids;
  for (const Operand& x : xs) ids.push_back(x.id);
  Instr in = make(op, Type::make_tensor(alignment->result), ids, loc);
  in.align = alignment->operands;
  return emit(std::move(in));
}

Elem BodyLowering::arithmetic_elem(Elem a, Elem b) {
  if (a == Elem::Real || b == Elem::Real) return Elem::Real;
  if (a == Elem::I64 || b == Elem::I64) return Elem::I64;
  return Elem::I32;
}

NOINLINE Operand BodyLowering::lower_binary(const ast::Expr& e) {
  // A chain `x1 + x2 + … + xn` is left-nested in the tree but flat in the
  // source (the parser does not count it as nesting): walk its left spine
  // in a loop, so that only real nesting deepens the recursion. Values are
  // emitted in the order the recursion would emit them.
  std::vector<const ast::Expr*> spine = {&e};
  while (spine.back()->children.size() == 2 && spine.back()->children[0]->kind == ast::ExprKind::Binary)
    spine.push_back(spine.back()->children[0].get());
  if (spine.back()->children.size() != 2) return Operand::error();
  Operand acc = lower(*spine.back()->children[0]);
  for (auto it = spine.rbegin(); it != spine.rend(); ++it) {
    if ((*it)->children.size() != 2) return Operand::error();
    Operand b = lower(*(*it)->children[1]);
    acc = combine_binary(**it, acc, b);
  }
  return acc;
}

NOINLINE Operand BodyLowering::combine_binary(const ast::Expr& e, const Operand& a, const Operand& b) {
  if (!a.ok() || !b.ok()) return Operand::error();
  // Two literals fold at compile time (they are constants); booleans go on
  // to the tensor path, whose checks they meet.
  if (a.kind == OK::Literal && b.kind == OK::Literal && e.binary != ast::BinaryOp::Dot && !a.is_bool && !b.is_bool) {
    double r = 0;
    bool cmp = false;
    switch (e.binary) {
      case ast::BinaryOp::Add:
        r = a.number + b.number;
        break;
      case ast::BinaryOp::Sub:
        r = a.number - b.number;
        break;
      case ast::BinaryOp::Mul:
        r = a.number * b.number;
        break;
      case ast::BinaryOp::Div:
        r = a.number / b.number;
        break;
      case ast::BinaryOp::Pow:
        r = std::pow(a.number, b.number);
        break;
      default:
        cmp = true;
        break;
    }
    if (!cmp) {
      Operand op;
      op.kind = OK::Literal;
      op.number = r;
      op.is_integer = a.is_integer && b.is_integer && e.binary != ast::BinaryOp::Div && std::isfinite(r) &&
                      r == std::trunc(r);  // 2 ^ -1 is not
      op.loc = e.range;
      return op;
    }
  }
  if (e.binary == ast::BinaryOp::Pow && b.kind == OK::Literal && !b.is_bool) {
    auto x = tensor(a, e.children[0]->range);
    if (!x) return Operand::error();
    if (x->type.tensor.elem == Elem::Bool) {
      error("E0406", e.range, "`^` needs numbers, not booleans");
      return Operand::error();
    }
    Instr in = make(Op::PowConst, Type::make_tensor(x->type.tensor), {x->id}, e.range);
    in.type.tensor.elem = Elem::Real;
    in.set(core::attr::Exponent{b.number});
    in.align = {{identity_map(x->type.tensor.axes.size()), x->type.tensor.rest}};
    return emit(std::move(in));
  }
  auto x = tensor(a, e.children[0]->range, "the left operand");
  auto y = tensor(b, e.children[1]->range, "the right operand");
  if (!x || !y) return Operand::error();
  if (e.binary == ast::BinaryOp::Dot) return dot(*x, *y, e.range);
  Elem ea = x->type.tensor.elem, eb = y->type.tensor.elem;
  Op op = Op::Add;
  bool comparison = false;
  switch (e.binary) {
    case ast::BinaryOp::Add:
      op = Op::Add;
      break;
    case ast::BinaryOp::Sub:
      op = Op::Sub;
      break;
    case ast::BinaryOp::Mul:
      op = Op::Mul;
      break;
    case ast::BinaryOp::Div:
      op = Op::Div;
      break;
    case ast::BinaryOp::Pow:
      op = Op::Pow;
      break;
    case ast::BinaryOp::Lt:
      op = Op::Lt;
      comparison = true;
      break;
    case ast::BinaryOp::Le:
      op = Op::Le;
      comparison = true;
      break;
    case ast::BinaryOp::Gt:
      op = Op::Gt;
      comparison = true;
      break;
    case ast::BinaryOp::Ge:
      op = Op::Ge;
      comparison = true;
      break;
    case ast::BinaryOp::Eq:
      op = Op::Eq;
      comparison = true;
      break;
    case ast::BinaryOp::Ne:
      op = Op::Ne;
      comparison = true;
      break;
    case ast::BinaryOp::Dot:
      break;
  }
  if (!comparison && (ea == Elem::Bool || eb == Elem::Bool)) {
    error("E0406", e.range, fmt::format("`{}` needs numbers, not booleans", ast::binary_op_spelling(e.binary)),
          "convert with `as ℝ`");
    return Operand::error();
  }
  // Booleans compare only with booleans, and only for (in)equality.
  if (comparison && (ea == Elem::Bool || eb == Elem::Bool) && (ea != eb || (op != Op::Eq && op != Op::Ne))) {
    error("E0406", e.range,
          ea != eb ? fmt::format("`{}` compares a boolean with a number", ast::binary_op_spelling(e.binary))
                   : fmt::format("`{}` does not order booleans", ast::binary_op_spelling(e.binary)),
          "booleans take == and ≠ with booleans; convert with `as ℝ` to compare numbers");
    return Operand::error();
  }
  Elem result = comparison ? Elem::Bool : arithmetic_elem(ea, eb);
  if (op == Op::Div || op == Op::Pow) result = Elem::Real;
  return elementwise(op, {*x, *y}, e.range, result);
}

Operand BodyLowering::dot(const Operand& x, const Operand& w, SourceRange loc) {
  const TensorType& a = x.type.tensor;
  const TensorType& b = w.type.tensor;
  if (a.elem != Elem::Real || b.elem != Elem::Real) {
    error("E0406", loc, "`·` multiplies real tensors");
    return Operand::error();
  }
  if (a.axes.empty()) {
    error("E0401", loc, fmt::format("`·` contracts the left operand's last axis, but {} has none", show(a)),
          a.rest ? "`...` cannot be contracted: name the axis in the type" : "use `*` for a scalar product");
    return Operand::error();
  }
  if (b.rest || b.axes.empty()) {
    error("E0401", loc,
          fmt::format("`·` contracts the right operand's first axis; {} has {}", show(b),
                      b.rest ? "`...` there" : "no axis"));
    return Operand::error();
  }
  const Axis& k1 = a.axes.back();
  const Axis& k2 = b.axes.front();
  if (!(k1.size == k2.size)) {
    error("E0402", loc,
          fmt::format("`·` contracts {} of size {} with {} of size {}",
                      k1.name.empty() ? "the last axis" : "`" + k1.name + "`", k1.size.str(),
                      k2.name.empty() ? "the first axis" : "`" + k2.name + "`", k2.size.str()),
          fmt::format("left {}, right {}", show(a), show(b)));
    return Operand::error();
  }
  TensorType out;
  out.rest = a.rest;
  out.axes.assign(a.axes.begin(), a.axes.end() - 1);
  out.axes.insert(out.axes.end(), b.axes.begin() + 1, b.axes.end());
  std::set<std::string> names;
  for (const Axis& ax : out.axes)
    if (!ax.name.empty() && !names.insert(ax.name).second) {
      error("E0402", loc, fmt::format("the product would have two axes named `{}`", ax.name));
      return Operand::error();
    }
  return emit(make(Op::Dot, Type::make_tensor(out), {x.id, w.id}, loc));
}

std::optional<int> BodyLowering::convert_to(const Operand& op, const Type& expected, SourceRange loc,
                                            const std::string& what) {
  if (!op.ok()) return std::nullopt;
  if (expected.kind == TypeKind::Scalar) {
    if (op.kind == OK::Literal) {
      if ((expected.scalar == ScalarKind::Nat || expected.scalar == ScalarKind::Int) && !op.is_integer) {
        error("E0401", loc,
              fmt::format("{} is {}, but {} is not an integer", what, scalar_name(expected.scalar), op.number));
        return std::nullopt;
      }
      if (expected.scalar == ScalarKind::Nat && op.number < 0) {
        error("E0401", loc, fmt::format("{} is nat, but {} is negative", what, op.number));
        return std::nullopt;
      }
      // Integers travel as doubles until here: only those a double holds exactly.
      if ((expected.scalar == ScalarKind::Nat || expected.scalar == ScalarKind::Int) &&
          std::fabs(op.number) > 9007199254740992.0) {
        error("E0401", loc,
              fmt::format("{} is {}, but {} is outside ±2^53, the integers held exactly", what,
                          scalar_name(expected.scalar), op.number));
        return std::nullopt;
      }
      Instr in = make(expected.scalar == ScalarKind::F64    ? Op::HostConst
                      : expected.scalar == ScalarKind::Bool ? Op::ConstBool
                                                            : Op::ConstInt,
                      expected, {}, loc);
      switch (expected.scalar) {
        case ScalarKind::F64:
          in.set(core::attr::Literal{op.number});
          break;
        case ScalarKind::Bool:
          in.set(core::attr::Boolean{op.number != 0});
          break;
        case ScalarKind::Nat:
        case ScalarKind::Int:
          in.set(core::attr::Integer{static_cast<int64_t>(op.number)});
          break;
      }
      return emit(std::move(in)).id;
    }
    if (op.kind == OK::Value && op.type == expected) return op.id;
    error("E0401", loc,
          fmt::format("{} is {}, given {}", what, scalar_name(expected.scalar),
                      op.kind == OK::Value ? show(op.type) : std::string("something else")));
    return std::nullopt;
  }
  Operand v = op;
  if (op.kind == OK::Literal || (op.kind == OK::Value && op.type.kind == TypeKind::Scalar)) {
    if (expected.kind != TypeKind::Tensor) {
      error("E0401", loc, fmt::format("{} is {}, given a number", what, show(expected)));
      return std::nullopt;
    }
    auto t = tensor(op, loc);
    if (!t) return std::nullopt;
    v = *t;
  }
  if (v.kind != OK::Value) {
    error("E0401", loc, fmt::format("{} must be a value", what));
    return std::nullopt;
  }
  RestBinding rb;
  std::string err;
  if (!unify(expected, v.type, {}, rb, err, /*allow_rest=*/false)) {
    error(
        "E0401", loc,
        fmt::format("{} should be {}, but is {}{}", what, show(expected), show(v.type), err.empty() ? "" : ": " + err));
    return std::nullopt;
  }
  return v.id;
}

bool BodyLowering::unify(const Type& declared, const Type& actual, const std::map<std::string, Size>& dims,
                         RestBinding& rb, std::string& err, bool allow_rest, const SizeParams* sp, int depth) {
  if (depth > kMaxDepth) return false;
  if (declared.kind != actual.kind) return false;
  bool ok = true;
  switch (declared.kind) {
    case TypeKind::Scalar:
      return declared.scalar == actual.scalar;
    case TypeKind::Key:
      return true;
    case TypeKind::Params: {
      ParamsType d = declared.params;
      for (Size& s : d.dims) s = s.substitute(dims, ok);
      for (Size& s : d.stack) s = s.substitute(dims, ok);
      return d == actual.params;
    }
    case TypeKind::Tuple:
      if (declared.elements.size() != actual.elements.size()) return false;
      for (size_t i = 0; i < declared.elements.size(); ++i)
        if (!unify(declared.elements[i], actual.elements[i], dims, rb, err, allow_rest, sp, depth + 1)) return false;
      return true;
    case TypeKind::Tensor: {
      const TensorType& d = declared.tensor;
      const TensorType& a = actual.tensor;
      if (d.elem != a.elem) {
        err = fmt::format("element type {} is not {}", elem_name(a.elem), elem_name(d.elem));
        return false;
      }
      size_t n = d.axes.size();
      if (a.axes.size() < n || (!d.rest && (a.axes.size() != n || a.rest))) {
        err = fmt::format("{} explicit axes where {} are declared", a.axes.size(), n);
        if (a.rest && !d.rest) err = "`...` where the declared type has fixed axes";
        return false;
      }
      size_t lead = a.axes.size() - n;
      for (size_t i = 0; i < n; ++i) {
        const Axis& da = d.axes[i];
        const Axis& aa = a.axes[lead + i];
        Size want = da.size.substitute(dims, ok);
        const std::string* param = sp ? sp->bare(da.size) : nullptr;
        std::string shown = aa.name.empty() ? std::to_string(lead + i) : "`" + aa.name + "`";
        if (!(want == aa.size)) {
          if (param && sp->sources.count(*param))
            err = fmt::format("axis {} has size {}, but `{}` is {} (bound by {})", shown, aa.size.str(), *param,
                              want.str(), sp->sources.at(*param));
          else
            err = fmt::format("axis {} has size {} where {} is declared", shown, aa.size.str(), want.str());
          return false;
        }
        if (!param && !da.name.empty() && !aa.name.empty() && da.name != aa.name) {
          err = fmt::format("axis `{}` where `{}` is declared", aa.name, da.name);
          return false;
        }
      }
      if (d.rest) {
        if (!allow_rest && !(a.rest && lead == 0)) {
          err = "`...` is declared but the value has fixed leading axes";
          return false;
        }
        std::vector<Axis> leading(a.axes.begin(), a.axes.begin() + lead);
        if (rb.bound && (rb.rest != a.rest || rb.axes != leading)) {
          err = "the arguments' `...` stand for different leading axes";
          return false;
        }
        rb.bound = true;
        rb.rest = a.rest;
        rb.axes = leading;
      }
      return true;
    }
  }
  return false;
}

Type BodyLowering::instantiate(const Type& declared, const std::map<std::string, Size>& dims, const RestBinding& rb,
                               const SizeParams* sp, int depth) {
  Type t = declared;
  bool ok = true;
  if (depth > kMaxDepth) return t;
  switch (t.kind) {
    case TypeKind::Tensor: {
      for (Axis& a : t.tensor.axes) {
        const std::string* param = sp ? sp->bare(a.size) : nullptr;
        if (param && sp->axis_names.count(*param)) a.name = sp->axis_names.at(*param);
        a.size = a.size.substitute(dims, ok);
      }
      if (t.tensor.rest && rb.bound) {
        std::vector<Axis> axes = rb.axes;
        axes.insert(axes.end(), t.tensor.axes.begin(), t.tensor.axes.end());
        t.tensor.axes = std::move(axes);
        t.tensor.rest = rb.rest;
      }
      return t;
    }
    case TypeKind::Tuple:
      for (Type& e : t.elements) e = instantiate(e, dims, rb, sp, depth + 1);
      return t;
    case TypeKind::Params:
      for (Size& s : t.params.dims) s = s.substitute(dims, ok);
      for (Size& s : t.params.stack) s = s.substitute(dims, ok);
      return t;
    default:
      return t;
  }
}

NOINLINE Operand BodyLowering::lower_call(const ast::Expr& e) {
  if (e.children.empty()) return Operand::error();
  const ast::Expr& callee = *e.children[0];
  if (callee.kind == ast::ExprKind::Call && !callee.children.empty() &&
      callee.children[0]->kind == ast::ExprKind::Name) {
    const std::string& form = callee.children[0]->name;
    if ((form == "grad" || form == "value_and_grad") && !lookup_local(form) && names_builtin(form, callee))
      return lower_gradient_call(callee, e);
  }
  if (callee.kind == ast::ExprKind::Name && !lookup_local(callee.name) && names_builtin(callee.name, e)) {
    std::optional<Operand> builtin = lower_builtin(callee.name, e);
    if (builtin) return *builtin;
  }
  Operand f = lower(callee);
  if (!f.ok()) {
    for (const ast::Arg& a : e.args)
      if (a.value) lower(*a.value);  // still report errors inside the arguments
    return f;
  }
  if (f.kind != OK::Function) {
    error("E0401", callee.range, "this is not a function",
          f.kind == OK::Use ? "call one of its functions, e.g. `.apply(x)`" : "");
    return Operand::error();
  }
  return call_function(f, e);
}

NOINLINE Operand BodyLowering::lower_gradient_call(const ast::Expr& form, const ast::Expr& e) {
  const std::string& name = form.children[0]->name;
  const ast::Expr* target_expr = nullptr;
  const ast::Arg* wrt_arg = nullptr;
  for (const ast::Arg& a : form.args) {
    if (a.kind == ast::Arg::Kind::Positional && !target_expr) {
      target_expr = a.value.get();
    } else if (a.kind == ast::Arg::Kind::Keyword && a.name && a.name->text == "wrt" && !wrt_arg) {
      wrt_arg = &a;
    } else {
      error("E0405", a.range, fmt::format("`{}` takes a function and, optionally, `wrt = argument`", name));
      return Operand::error();
    }
  }
  if (!target_expr) {
    error("E0405", form.range, fmt::format("`{}` takes a function: {}(f) or {}(f, wrt = x)", name, name, name));
    return Operand::error();
  }
  Operand f = lower(*target_expr);
  if (!f.ok()) return f;
  if (f.kind != OK::Function) {
    error("E0401", target_expr->range, fmt::format("`{}` differentiates a function; this is not one", name));
    return Operand::error();
  }
  const core::Function& target = prog_.functions[f.index];
  if (target.module >= 0 && f.number != 0) {
    error("E0401", target_expr->range,
          fmt::format("`{}` takes a module's function with its parameters passed explicitly", name),
          fmt::format("write `{}({})` and pass the parameter tree first", name, target.name));
    return Operand::error();
  }
  if (!(target.result.kind == TypeKind::Tensor && target.result.tensor.elem == Elem::Real &&
        target.result.tensor.axes.empty() && !target.result.tensor.rest)) {
    error("E0401", target_expr->range,
          fmt::format("`{}` differentiates a function returning ℝ[]; `{}` returns {}", name, target.name,
                      show(target.result)));
    return Operand::error();
  }
  int wrt = 0;
  if (wrt_arg) {
    wrt = -1;
    const ast::Expr* v = wrt_arg->value.get();
    if (v && v->kind == ast::ExprKind::Name)
      for (size_t i = 0; i < target.args.size(); ++i)
        if (target.args[i].name == v->name) wrt = static_cast<int>(i);
    if (wrt < 0) {
      error("E0405", wrt_arg->range, fmt::format("`{}` has no argument named so", target.name));
      return Operand::error();
    }
  }
  if (target.args.empty() || !grad::differentiable(target.args[wrt].type)) {
    error("E0401", target_expr->range,
          target.args.empty()
              ? fmt::format("`{}` takes no argument to differentiate", target.name)
              : fmt::format("cannot differentiate with respect to `{}` : {} (a real tensor, a parameter "
                            "tree or a tuple of them)",
                            target.args[wrt].name, show(target.args[wrt].type)));
    return Operand::error();
  }
  Operand call = call_function(f, e);
  if (!call.ok()) return call;
  core::Instr& in = fn_.body.back();
  if (in.op != Op::Call || in.callee != f.index)
    throw std::logic_error("internal: a gradient call did not lower to one call of its function");
  Type grad_type = fn_.type_of(in.args.at(static_cast<size_t>(wrt)));
  Type result = name == "grad" ? grad_type : Type::make_tuple({in.type, grad_type});
  in.type = result;
  in.callee = el_.request_gradient(f.index, wrt, name == "value_and_grad", form.range);
  call.type = result;
  return call;
}

bool BodyLowering::names_builtin(const std::string& name, const ast::Expr& e) const {
  for (const ast::Arg& a : e.args)
    if (a.kind == ast::Arg::Kind::Axis) return true;
  if (mi_ >= 0) {
    const ModuleInfo& m = prog_.modules[mi_];
    if (m.fns.count(name)) return false;
    for (const UseInfo& u : m.uses)
      if (u.name == name) return false;
  }
  if (prog_.files[fi_].prelude) return true;
  for (int f : prog_.files[fi_].fns)
    if (prog_.functions[f].name == name) return false;
  return prelude_function(name) < 0;
}

int BodyLowering::prelude_function(const std::string& name) const {
  for (const FileInfo& file : prog_.files)
    if (file.prelude)
      for (int f : file.fns)
        if (prog_.functions[f].name == name) return f;
  return -1;
}

NOINLINE Operand BodyLowering::call_function(const Operand& f, const ast::Expr& e) {
  const core::Function& target = prog_.functions[f.index];
  const ast::FnDecl& tdecl = *el_.fn_decl(f.index);
  std::vector<int> args;
  std::vector<Size> dims;
  std::vector<Size> stack;
  size_t first_user = 0;  // index into target.args of the first argument the user passes
  if (target.module >= 0) {
    if (f.number == 1) {  // own module: θ as is
      args.push_back(1);
      for (const std::string& d : fn_.dims) dims.push_back(Size::symbol(d));
      first_user = 1;
    } else if (f.number == 2) {  // a sub-module: θ.<use>, read once the arguments are lowered
      const UseInfo& use = prog_.modules[mi_].uses[f.id];
      args.push_back(0);  // placeholder for the sub-tree
      dims = use.type.dims;
      stack = use.type.stack;
      first_user = 1;
    } else {
      first_user = 0;  // θ given explicitly: the first user argument
    }
  }
  // Match the user's arguments to the callee's declared arguments.
  std::vector<const ast::Expr*> given(target.args.size(), nullptr);
  size_t next = first_user;
  bool failed = false;
  for (const ast::Arg& a : e.args) {
    if (a.kind == ast::Arg::Kind::Positional) {
      if (next >= target.args.size()) {
        error("E0405", a.range, fmt::format("`{}` takes {} argument(s)", target.name, target.args.size() - first_user));
        failed = true;
        break;
      }
      given[next++] = a.value.get();
    } else if (a.kind == ast::Arg::Kind::Keyword && a.name) {
      bool found = false;
      for (size_t i = first_user; i < target.args.size(); ++i)
        if (target.args[i].name == a.name->text) {
          if (given[i]) error("E0405", a.range, fmt::format("argument `{}` is given twice", a.name->text));
          given[i] = a.value.get();
          found = true;
        }
      if (!found) {
        error("E0405", a.range, fmt::format("`{}` has no argument `{}`", target.name, a.name->text));
        failed = true;
      }
    } else {
      error("E0405", a.range, fmt::format("`{}` takes values and `name = value` arguments", target.name));
      failed = true;
    }
  }
  if (failed) return Operand::error();
  std::vector<Operand> values(target.args.size());
  for (size_t i = first_user; i < target.args.size(); ++i) {
    if (given[i]) {
      values[i] = lower(*given[i]);
      values[i].loc = given[i]->range;
      continue;
    }
    size_t user_index = i - (target.module >= 0 ? 1 : 0);
    const ast::FnArg* darg = user_index < tdecl.args.size() ? &tdecl.args[user_index] : nullptr;
    if (!darg || !darg->default_value) {
      error("E0405", e.range, fmt::format("`{}` needs its argument `{}`", target.name, target.args[i].name));
      return Operand::error();
    }
    bool is_int = false;
    auto v = el_.eval_const(*darg->default_value, el_.fn_file(f.index), is_int);
    if (!v) return Operand::error();
    values[i].kind = OK::Literal;
    values[i].number = *v;
    values[i].is_integer = is_int;
    values[i].loc = e.range;
  }
  for (size_t i = first_user; i < values.size(); ++i)
    if (!values[i].ok()) return Operand::error();
  if (target.module >= 0 && f.number == 2) {
    // The field of a stacked use is read whole; the fold slices it.
    const UseInfo& use = prog_.modules[mi_].uses[f.id];
    auto key = std::make_tuple(1, use.name, numerics_);
    if (auto it = fields_.find(key); it != fields_.end()) {
      args[0] = it->second.id;
    } else {
      Instr in = make(Op::Field, Type::make_params(use.type), {1}, e.children[0]->range);
      in.set(core::attr::Member{use.name});
      in.name = use.name;
      args[0] = (fields_[key] = emit(std::move(in))).id;
    }
  }
  // θ given explicitly fixes the callee's dimensions.
  if (target.module >= 0 && first_user == 0) {
    const Operand& theta = values[0];
    if (theta.kind != OK::Value || theta.type.kind != TypeKind::Params || theta.type.params.module != target.module) {
      error("E0401", e.args.empty() ? e.range : e.args[0].range,
            fmt::format("`{}` takes the parameters of `{}` first (`params {}`)", target.name,
                        prog_.modules[target.module].name, prog_.modules[target.module].name));
      return Operand::error();
    }
    dims = theta.type.params.dims;
    stack = theta.type.params.stack;
  }
  // A generic callee's size parameters come from the arguments' types;
  // every later use of one is then checked against its binding by unify.
  SizeParams inferred;
  const SizeParams* sp = nullptr;
  if (target.module < 0 && !target.dims.empty()) {
    inferred.names = target.dims;
    for (size_t i = first_user; i < target.args.size(); ++i)
      if (values[i].kind == OK::Value)
        bind_size_params(target.args[i].type, values[i].type, inferred,
                         fmt::format("argument `{}`", target.args[i].name));
    sp = &inferred;
  }
  std::map<std::string, Size> binding = inferred.sizes;
  if (!sp)
    for (size_t i = 0; i < target.dims.size() && i < dims.size(); ++i) binding[target.dims[i]] = dims[i];
  RestBinding rb;
  for (size_t i = first_user; i < target.args.size(); ++i) {
    if (i == 0 && target.module >= 0) {
      args.push_back(values[0].id);
      continue;
    }
    Type declared = target.args[i].type;
    Operand v = values[i];
    if (declared.kind == TypeKind::Scalar || v.kind == OK::Literal) {
      Type want = declared.kind == TypeKind::Tensor ? instantiate(declared, binding, rb, sp) : declared;
      if (declared.kind == TypeKind::Tensor && declared.tensor.rest) want = Type::real_scalar();
      auto id = convert_to(v, want, v.loc, fmt::format("argument `{}` of `{}`", target.args[i].name, target.name));
      if (!id) return Operand::error();
      if (declared.kind == TypeKind::Tensor) {
        std::string err;
        if (!unify(declared, fn_.type_of(*id), binding, rb, err, true, sp)) {
          error("E0401", v.loc, fmt::format("argument `{}` of `{}`: {}", target.args[i].name, target.name, err));
          return Operand::error();
        }
      }
      args.push_back(*id);
      continue;
    }
    if (v.kind != OK::Value) {
      error("E0401", v.loc, fmt::format("argument `{}` of `{}` must be a value", target.args[i].name, target.name));
      return Operand::error();
    }
    std::string err;
    if (!unify(declared, v.type, binding, rb, err, true, sp)) {
      Type shown = instantiate(declared, binding, rb);  // the declared names: the caller's do not matter
      error("E0401", v.loc,
            fmt::format("argument `{}` of `{}` should be {}, but is {}{}", target.args[i].name, target.name,
                        show(shown), show(v.type), err.empty() ? "" : ": " + err));
      return Operand::error();
    }
    args.push_back(v.id);
  }
  if (sp) {
    for (const std::string& p : inferred.names) {
      auto it = inferred.sizes.find(p);
      if (it != inferred.sizes.end()) {
        dims.push_back(it->second);
        continue;
      }
      // Unreachable for a well-declared callee (E0407 otherwise): some
      // argument declares an axis of exactly that size, and unify has matched it.
      if (target.checked)
        error("E0401", e.range,
              fmt::format("cannot infer size parameter `{}` of `{}` from the arguments", p, target.name));
      return Operand::error();
    }
  }
  Type result = instantiate(target.result, binding, rb, sp);
  if (!unique_result_names(result, target.name, e.range)) return Operand::error();
  if (!stack.empty()) {
    // stack{L}(M).f(x): L calls of M.f, each on its copy of the parameters.
    if (stack.size() > 1) {
      error("E0503", e.range, "a stack of stacks is called one level at a time");
      return Operand::error();
    }
    if (target.args.size() < 2 || !(target.args[1].type == target.result)) {
      error("E0503", e.range,
            fmt::format("calling `{}` on a stack folds it over the copies, so it must take (θ, x, …) and return x's type",
                        target.name),
            fmt::format("`{}` is {} → {}", target.name,
                        target.args.size() >= 2 ? show(target.args[1].type) : std::string("not (θ, x, …)"),
                        show(target.result)));
      return Operand::error();
    }
    // Every copy takes the further arguments as they are (a key: its own
    // copy_key, §13.1). They carry no gradient through the stack, so only
    // values that have none may be passed there.
    for (size_t i = 2; i < target.args.size(); ++i) {
      const Type& t = target.args[i].type;
      const bool inert = t.kind == TypeKind::Key || t.kind == TypeKind::Scalar ||
                         (t.kind == TypeKind::Tensor && t.tensor.elem != elab::Elem::Real);
      if (!inert) {
        error("E0503", e.range,
              fmt::format("argument `{}` of `{}` is {}: a stack passes every copy only keys, booleans, integers and "
                          "host scalars besides x",
                          target.args[i].name, target.name, show(t)),
              "compute a real value inside the block, or keep it in the block's parameters");
        return Operand::error();
      }
    }
    Instr in = make(Op::Fold, result, args, e.range);
    in.callee = f.index;
    in.sizes = {stack[0]};
    in.sizes.insert(in.sizes.end(), dims.begin(), dims.end());
    return emit(std::move(in));
  }
  Instr in = make(Op::Call, result, args, e.range);
  in.callee = f.index;
  in.sizes = dims;
  return emit(std::move(in));
}

void BodyLowering::bind_size_params(const Type& declared, const Type& actual, SizeParams& sp, const std::string& source,
                                    int depth) {
  if (depth > kMaxDepth || declared.kind != actual.kind) return;
  if (declared.kind == TypeKind::Tuple) {
    if (declared.elements.size() != actual.elements.size()) return;
    for (size_t i = 0; i < declared.elements.size(); ++i)
      bind_size_params(declared.elements[i], actual.elements[i], sp, source, depth + 1);
    return;
  }
  if (declared.kind != TypeKind::Tensor) return;
  const TensorType& d = declared.tensor;
  const TensorType& a = actual.tensor;
  size_t n = d.axes.size();
  if (a.axes.size() < n || (!d.rest && a.axes.size() != n)) return;
  size_t lead = a.axes.size() - n;
  for (size_t i = 0; i < n; ++i) {
    const std::string* param = sp.bare(d.axes[i].size);
    if (!param || sp.sizes.count(*param)) continue;
    const Axis& bound = a.axes[lead + i];
    sp.sizes[*param] = bound.size;
    sp.axis_names[*param] = bound.name;
    sp.sources[*param] =
        fmt::format("{}, axis {}", source, bound.name.empty() ? std::to_string(lead + i) : "`" + bound.name + "`");
  }
}

bool BodyLowering::unique_result_names(const Type& t, const std::string& callee, SourceRange loc, int depth) {
  if (depth > kMaxDepth) return true;
  if (t.kind == TypeKind::Tuple) {
    for (const Type& e : t.elements)
      if (!unique_result_names(e, callee, loc, depth + 1)) return false;
    return true;
  }
  if (t.kind != TypeKind::Tensor) return true;
  std::set<std::string> names;
  for (const Axis& a : t.tensor.axes)
    if (!a.name.empty() && !names.insert(a.name).second) {
      error("E0403", loc,
            fmt::format("the result of `{}` would be {}, with two axes named `{}`", callee, show(t), a.name),
            "the caller's `...` holds an axis of that name: rename one of them");
      return false;
    }
  return true;
}

void lower_function_body(Elaborator& el, int function) {
  BodyLowering lowering(el, function);
  lowering.run();
}

}  // namespace quire::elab
