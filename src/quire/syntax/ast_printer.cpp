#include "quire/syntax/ast_printer.h"

#include <fmt/format.h>

namespace quire::syntax {

namespace {

/// What a placeholder left by a syntax error prints as.
constexpr const char* kError = "<error>";

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

std::string ident(const ast::Ident& id) { return id.text.empty() ? kError : id.text; }

std::string qualname(const std::vector<ast::Ident>& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) out += (i ? "." : "") + ident(name[i]);
  return out.empty() ? kError : out;
}

template <typename T, typename F>
std::string joined(const std::vector<T>& items, F print, std::string_view separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += print(items[i]);
  }
  return out;
}

std::string expr_or_error(const ast::ExprPtr& e) { return e ? print_expr(*e) : kError; }
std::string type_or_error(const ast::TypePtr& t) { return t ? print_type(*t) : kError; }

std::string pattern(const ast::Pattern& p) {
  switch (p.kind) {
    case ast::Pattern::Kind::Name: return ident(p.name);
    case ast::Pattern::Kind::Wildcard: return "_";
    case ast::Pattern::Kind::Tuple:
      return "(" + joined(p.elements, [](const ast::PatternPtr& e) { return pattern(*e); }) + ")";
  }
  return kError;
}

std::string let_line(const ast::Let& let) {
  std::string out = "let " + (let.pattern ? pattern(*let.pattern) : std::string(kError));
  if (let.annotation) out += " : " + print_type(*let.annotation);
  return out + " = " + expr_or_error(let.value);
}

std::string arg(const ast::Arg& a) {
  std::string name = a.name ? ident(*a.name) : kError;
  switch (a.kind) {
    case ast::Arg::Kind::Positional: return expr_or_error(a.value);
    case ast::Arg::Kind::Axis: return "axis " + name;
    case ast::Arg::Kind::Keyword: return name + " = " + expr_or_error(a.value);
    case ast::Arg::Kind::AxisSize: return name + ": " + expr_or_error(a.value);
    case ast::Arg::Kind::Rename: return name + " → " + expr_or_error(a.value);
  }
  return kError;
}

std::string child(const ast::Expr& e, size_t i) {
  return i < e.children.size() ? expr_or_error(e.children[i]) : kError;
}

/// A block inline: `{ let a = 1; a }`.
std::string inline_block(const ast::Expr& block) {
  if (block.kind != ast::ExprKind::Block) return "{ " + print_expr(block) + " }";
  std::string out = "{ ";
  for (const ast::Let& let : block.lets) out += let_line(let) + "; ";
  return out + child(block, 0) + " }";
}

std::string axis(const ast::AxisExpr& a) {
  if (a.kind == ast::AxisExpr::Kind::Rest) return "...";
  std::string size = expr_or_error(a.size);
  return a.name ? ident(*a.name) + ": " + size : size;
}

class FilePrinter {
 public:
  std::string run(const ast::File& file) {
    if (!file.order.empty()) {
      for (const ast::ItemRef& item : file.order) print_item(file, item);
      return out_;
    }
    // A tree built by hand may lack `order`: print by kind.
    auto all = [&](ast::ItemKind kind, size_t count) {
      for (size_t i = 0; i < count; ++i) print_item(file, {kind, i});
    };
    all(ast::ItemKind::Import, file.imports.size());
    all(ast::ItemKind::Dim, file.dims.size());
    all(ast::ItemKind::Const, file.consts.size());
    all(ast::ItemKind::Module, file.modules.size());
    all(ast::ItemKind::Fn, file.fns.size());
    all(ast::ItemKind::Optimizer, file.optimizers.size());
    all(ast::ItemKind::Training, file.trainings.size());
    return out_;
  }

 private:
  void line(int indent, const std::string& text) { out_ += std::string(2 * indent, ' ') + text + "\n"; }

  void print_item(const ast::File& file, const ast::ItemRef& item) {
    switch (item.kind) {
      case ast::ItemKind::Import: {
        const ast::ImportDecl& d = file.imports.at(item.index);
        return line(0, fmt::format("import {} as {}", quoted(d.path), ident(d.alias)));
      }
      case ast::ItemKind::Dim:
        return line(0, "dim " + joined(file.dims.at(item.index).names, ident, " "));
      case ast::ItemKind::Const: {
        const ast::ConstDecl& d = file.consts.at(item.index);
        return line(0, fmt::format("const {} : {} = {}", ident(d.name), type_or_error(d.type), expr_or_error(d.value)));
      }
      case ast::ItemKind::Module: return print_module(file.modules.at(item.index));
      case ast::ItemKind::Fn: return print_fn(0, file.fns.at(item.index));
      case ast::ItemKind::Optimizer: {
        const ast::OptimizerDecl& d = file.optimizers.at(item.index);
        line(0, "optimizer " + ident(d.name));
        for (const ast::Field& f : d.fields) print_field(f);
        return;
      }
      case ast::ItemKind::Training: return print_training(file.trainings.at(item.index));
    }
  }

  void print_module(const ast::ModuleDecl& m) {
    std::string head = "module " + ident(m.name);
    if (!m.dims.empty()) head += "{" + joined(m.dims, ident, " ") + " : dim}";
    line(0, head);
    for (const ast::ParamDecl& p : m.params) {
      std::string text = fmt::format("param {} : {}", ident(p.name), type_or_error(p.type));
      if (p.init) text += " init = " + print_expr(*p.init);
      if (p.numerics_high) text += " numerics high";
      if (p.frozen) text += " frozen";
      line(1, text);
    }
    for (const ast::UseDecl& u : m.uses) line(1, fmt::format("use {} : {}", ident(u.name), print_modref(u.module)));
    for (const ast::FnDecl& f : m.fns) print_fn(1, f);
  }

  void print_fn(int indent, const ast::FnDecl& f) {
    std::string args = joined(f.args, [](const ast::FnArg& a) {
      std::string text = fmt::format("{} : {}", ident(a.name), type_or_error(a.type));
      if (a.default_value) text += " = " + print_expr(*a.default_value);
      return text;
    });
    std::string size_params = f.size_params.empty() ? "" : "{" + joined(f.size_params, ident, " ") + "}";
    line(indent, fmt::format("fn {}{}({}) -> {} =", ident(f.name), size_params, args, type_or_error(f.result)));
    if (!f.body) return line(indent + 1, kError);
    if (f.body->kind != ast::ExprKind::Block) return line(indent + 1, print_expr(*f.body));
    for (const ast::Let& let : f.body->lets) line(indent + 1, let_line(let));
    line(indent + 1, child(*f.body, 0));
  }

  void print_field(const ast::Field& f) {
    std::string text = ident(f.key);
    if (f.type) text += " : " + print_type(*f.type);
    line(1, text + " = " + expr_or_error(f.value));
  }

  void print_training(const ast::TrainingDecl& t) {
    line(0, "training run");
    for (const ast::Field& f : t.fields) print_field(f);
    if (t.data_range) {
      std::string stages = joined(
          t.data,
          [](const ast::PipelineStage& s) {
            if (!s.path.empty() || s.name.text == "stream") return fmt::format("{} {}", ident(s.name), quoted(s.path));
            return s.args.empty() ? ident(s.name) : fmt::format("{}({})", ident(s.name), joined(s.args, arg));
          },
          " |> ");
      line(1, "data = " + stages);
    }
    if (t.checkpoint)
      line(1, fmt::format("checkpoint every {} {} to {}", expr_or_error(t.checkpoint->every),
                          t.checkpoint->unit.empty() ? kError : t.checkpoint->unit, quoted(t.checkpoint->dir)));
    if (t.evaluate)
      line(1, fmt::format("evaluate {} every {} {} on {}", ident(t.evaluate->function), expr_or_error(t.evaluate->every),
                          t.evaluate->unit.empty() ? kError : t.evaluate->unit, quoted(t.evaluate->path)));
  }

  std::string out_;
};

}  // namespace

std::string print_expr(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::Number: return e.name;
    case ast::ExprKind::Bool: return e.boolean ? "true" : "false";
    case ast::ExprKind::String: return quoted(e.name);
    case ast::ExprKind::Name: return e.name.empty() ? kError : e.name;
    case ast::ExprKind::Member: return child(e, 0) + "." + e.name;
    case ast::ExprKind::TupleIndex: return child(e, 0) + "." + std::to_string(e.index);
    case ast::ExprKind::Call: return child(e, 0) + "(" + joined(e.args, arg) + ")";
    case ast::ExprKind::Binary:
      return fmt::format("({} {} {})", child(e, 0), ast::binary_op_spelling(e.binary), child(e, 1));
    case ast::ExprKind::Unary: return "(-" + child(e, 0) + ")";
    case ast::ExprKind::Cast: return fmt::format("({} as {})", child(e, 0), e.name);
    case ast::ExprKind::Tuple: return "(" + joined(e.children, expr_or_error) + ")";
    case ast::ExprKind::Block: return inline_block(e);
    case ast::ExprKind::Numerics:
    case ast::ExprKind::Precision:
      return fmt::format("{}({}) {}", e.kind == ast::ExprKind::Numerics ? "numerics" : "precision",
                         e.name.empty() ? kError : e.name,
                         e.children.empty() || !e.children[0] ? kError : inline_block(*e.children[0]));
  }
  return kError;
}

std::string print_type(const ast::TypeExpr& t) {
  switch (t.kind) {
    case ast::TypeKind::Tensor:
      if (t.elem.empty()) return kError;
      return (t.elem == "real" ? "ℝ" : t.elem) + "[" + joined(t.axes, axis) + "]";
    case ast::TypeKind::Tuple: return "(" + joined(t.elements, type_or_error) + ")";
    case ast::TypeKind::Params: {
      if (t.module_ref) return "params " + print_modref(*t.module_ref);
      std::string out = "params " + qualname(t.module);
      if (!t.module_args.empty()) out += "{" + joined(t.module_args, expr_or_error) + "}";
      return out;
    }
    case ast::TypeKind::Scalar: return t.elem;
    case ast::TypeKind::Key: return "key";
  }
  return kError;
}

std::string print_modref(const ast::ModuleRef& ref) {
  if (ref.is_stack)
    return fmt::format("stack{{{}}}({})", expr_or_error(ref.stack_count), ref.inner ? print_modref(*ref.inner) : kError);
  std::string out = qualname(ref.name);
  if (!ref.args.empty()) out += "{" + joined(ref.args, expr_or_error) + "}";
  return out;
}

std::string print_ast(const ast::File& file) { return FilePrinter().run(file); }

}  // namespace quire::syntax
