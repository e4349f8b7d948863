// Expressions, blocks, types, patterns and module references: the recursive
// part of the grammar. Every production that can recurse holds a Nesting
// guard, so the C++ stack depth is bounded by kMaxNesting whatever the input.

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

#include "quire/syntax/parser_internal.h"

namespace quire::syntax::detail {

namespace {

ast::ExprPtr make_expr(ast::ExprKind kind, SourceRange range) {
  auto e = std::make_unique<ast::Expr>();
  e->kind = kind;
  e->range = range;
  return e;
}

std::optional<ast::BinaryOp> comparison(TokenKind k) {
  switch (k) {
    case TokenKind::Lt: return ast::BinaryOp::Lt;
    case TokenKind::Le: return ast::BinaryOp::Le;
    case TokenKind::Gt: return ast::BinaryOp::Gt;
    case TokenKind::Ge: return ast::BinaryOp::Ge;
    case TokenKind::EqEq: return ast::BinaryOp::Eq;
    case TokenKind::Ne: return ast::BinaryOp::Ne;
    default: return std::nullopt;
  }
}

/// `ℝ` and its ASCII twin `R` name the real element type where a type is read.
bool is_real(std::string_view name) { return name == "ℝ" || name == "R"; }
bool is_element_type(std::string_view name) {
  return is_real(name) || name == "i32" || name == "i64" || name == "bool";
}
bool is_scalar_type(std::string_view name) {
  return name == "nat" || name == "int" || name == "f64" || name == "bool";
}

/// The levels of the tree under `root`, root included, walked without recursion.
size_t expr_height(const ast::Expr& root) {
  std::vector<std::pair<const ast::Expr*, size_t>> pending{{&root, 1}};
  size_t height = 0;
  while (!pending.empty()) {
    auto [e, level] = pending.back();
    pending.pop_back();
    height = std::max(height, level);
    for (const ast::ExprPtr& c : e->children)
      if (c) pending.push_back({c.get(), level + 1});
    for (const ast::Arg& a : e->args)
      if (a.value) pending.push_back({a.value.get(), level + 1});
    for (const ast::Let& l : e->lets)
      if (l.value) pending.push_back({l.value.get(), level + 1});
  }
  return height;
}

}  // namespace

ast::ExprPtr Parser::placeholder_expr() { return make_expr(ast::ExprKind::Name, {peek().range.begin, 0}); }

ast::ExprPtr Parser::binary(ast::BinaryOp op, ast::ExprPtr lhs, ast::ExprPtr rhs) {
  auto e = make_expr(ast::ExprKind::Binary, range_from(lhs->range));
  e->binary = op;
  e->children.push_back(std::move(lhs));
  e->children.push_back(std::move(rhs));
  return e;
}

// ---------------------------------------------------------------- operators, loosest first

ast::ExprPtr Parser::parse_expr() {
  Nesting nesting(*this);
  if (!nesting.ok()) return placeholder_expr();
  ast::ExprPtr e = parse_compare();
  // Chains are built by loops, not recursion, so only their result shows how
  // deep they are. Each enclosing parse_expr (at most kMaxNesting) measures
  // again; the first to see the excess replaces the tree.
  const size_t height = expr_height(*e);
  if (height <= kMaxExprHeight) return e;
  sink_.error("E0202", e->range,
              fmt::format("expression too deep: its tree has {} levels, more than {}", height, kMaxExprHeight),
              "a chain of operators is one level per operator; bind parts of it with `let` lines");
  return make_expr(ast::ExprKind::Name, e->range);
}

ast::ExprPtr Parser::parse_compare() {
  ast::ExprPtr lhs = parse_cast();
  std::optional<ast::BinaryOp> op = comparison(peek().kind);
  if (!op) return lhs;
  advance();
  ast::ExprPtr e = binary(*op, std::move(lhs), parse_cast());
  if (comparison(peek().kind))
    error_expected("the end of the comparison", "comparisons do not chain; parenthesize one of them");
  return e;
}

ast::ExprPtr Parser::parse_cast() {
  ast::ExprPtr e = parse_additive();
  while (at(TokenKind::KwAs)) {
    advance();
    if (!at(TokenKind::Ident)) {
      error_expected("a type name after `as` (`f32`, `bf16`, `f32acc`, ...)");
      break;
    }
    const Token& target = advance();
    auto cast = make_expr(ast::ExprKind::Cast, range_from(e->range));
    cast->name = is_real(target.text) ? "real" : target.text;
    cast->children.push_back(std::move(e));
    e = std::move(cast);
  }
  return e;
}

ast::ExprPtr Parser::parse_additive() {
  ast::ExprPtr e = parse_multiplicative();
  while (at(TokenKind::Plus) || at(TokenKind::Minus)) {
    ast::BinaryOp op = advance().kind == TokenKind::Plus ? ast::BinaryOp::Add : ast::BinaryOp::Sub;
    e = binary(op, std::move(e), parse_multiplicative());
  }
  return e;
}

ast::ExprPtr Parser::parse_multiplicative() {
  ast::ExprPtr e = parse_unary();
  while (at(TokenKind::Star) || at(TokenKind::Slash) || at(TokenKind::Dot)) {
    TokenKind k = advance().kind;
    ast::BinaryOp op = k == TokenKind::Star ? ast::BinaryOp::Mul : k == TokenKind::Slash ? ast::BinaryOp::Div : ast::BinaryOp::Dot;
    e = binary(op, std::move(e), parse_unary());
  }
  return e;
}

ast::ExprPtr Parser::parse_unary() {
  if (!at(TokenKind::Minus)) return parse_power();
  SourceRange start = advance().range;
  Nesting nesting(*this);
  if (!nesting.ok()) return placeholder_expr();
  ast::ExprPtr operand = parse_unary();
  auto e = make_expr(ast::ExprKind::Unary, range_from(start));
  e->children.push_back(std::move(operand));
  return e;
}

ast::ExprPtr Parser::parse_power() {
  ast::ExprPtr base = parse_postfix();
  if (!at(TokenKind::Caret)) return base;
  advance();
  Nesting nesting(*this);
  // The exponent is a unary: `x^-1`, and `a^b^c` is `a^(b^c)`.
  ast::ExprPtr exponent = nesting.ok() ? parse_unary() : placeholder_expr();
  return binary(ast::BinaryOp::Pow, std::move(base), std::move(exponent));
}

ast::ExprPtr Parser::parse_postfix() {
  ast::ExprPtr e = parse_primary();
  if (ast::is_placeholder(*e)) return e;
  while (true) {
    if (at(TokenKind::Period)) {
      advance();
      if (at(TokenKind::Ident)) {
        const Token& field = advance();
        auto member = make_expr(ast::ExprKind::Member, range_from(e->range));
        member->name = field.text;
        member->children.push_back(std::move(e));
        e = std::move(member);
      } else if (at(TokenKind::Int)) {
        const Token& index = advance();
        if (index.integer > INT_MAX)
          error("E0102", index.range, fmt::format("tuple index `{}` is out of range", index.text));
        auto element = make_expr(ast::ExprKind::TupleIndex, range_from(e->range));
        element->index = index.integer > INT_MAX ? 0 : static_cast<int>(index.integer);
        element->children.push_back(std::move(e));
        e = std::move(element);
      } else {
        error_expected("a field name or a tuple index after `.`");
        return e;
      }
    } else if (at(TokenKind::LParen)) {
      const Token& open = advance();
      std::vector<ast::Arg> args = parse_args(open);
      auto call = make_expr(ast::ExprKind::Call, range_from(e->range));
      call->children.push_back(std::move(e));
      call->args = std::move(args);
      e = std::move(call);
    } else {
      return e;
    }
  }
}

ast::ExprPtr Parser::parse_primary() {
  const Token& t = peek();
  switch (t.kind) {
    case TokenKind::Int:
    case TokenKind::Float: {
      advance();
      auto e = make_expr(ast::ExprKind::Number, t.range);
      e->name = t.text;
      e->number = t.number;
      e->integer = t.integer;
      e->is_integer = t.kind == TokenKind::Int;
      return e;
    }
    case TokenKind::KwTrue:
    case TokenKind::KwFalse: {
      advance();
      auto e = make_expr(ast::ExprKind::Bool, t.range);
      e->boolean = t.kind == TokenKind::KwTrue;
      return e;
    }
    case TokenKind::String:
    case TokenKind::Ident: {
      advance();
      auto e = make_expr(t.kind == TokenKind::String ? ast::ExprKind::String : ast::ExprKind::Name, t.range);
      e->name = t.text;
      return e;
    }
    case TokenKind::LParen: return parse_paren();
    case TokenKind::KwNumerics: return parse_marked_block(ast::ExprKind::Numerics);
    case TokenKind::KwPrecision: return parse_marked_block(ast::ExprKind::Precision);
    case TokenKind::LBrace: return parse_braced_block();
    default: error_expected("an expression"); return placeholder_expr();
  }
}

ast::ExprPtr Parser::parse_paren() {
  const Token& open = advance();
  if (accept(TokenKind::RParen)) return make_expr(ast::ExprKind::Tuple, range_from(open.range));
  ast::ExprPtr first = parse_expr();
  if (!at(TokenKind::Comma)) {
    expect_closing(TokenKind::RParen, open);
    first->range = range_from(open.range);  // the caret covers the parentheses
    return first;
  }
  auto tuple = make_expr(ast::ExprKind::Tuple, open.range);
  tuple->children.push_back(std::move(first));
  while (accept(TokenKind::Comma)) tuple->children.push_back(parse_expr());
  expect_closing(TokenKind::RParen, open);
  tuple->range = range_from(open.range);
  return tuple;
}

ast::ExprPtr Parser::parse_marked_block(ast::ExprKind kind) {
  const Token& keyword = advance();
  auto e = make_expr(kind, keyword.range);
  const Token& open = peek();
  if (expect(TokenKind::LParen, fmt::format("after `{}`", keyword.text))) {
    if (at(TokenKind::Ident)) e->name = advance().text;
    else error_expected(kind == ast::ExprKind::Numerics ? "a numerics mark (`high`)" : "a precision (`bf16`, `f16`)");
    expect_closing(TokenKind::RParen, open);
  }
  if (at(TokenKind::LBrace)) {
    e->children.push_back(parse_braced_block());
  } else {
    error_expected(fmt::format("`{{` to begin the `{}` block", keyword.text));
    e->children.push_back(placeholder_expr());
  }
  e->range = range_from(keyword.range);
  return e;
}

ast::ExprPtr Parser::parse_braced_block() {
  const Token& open = advance();
  ast::ExprPtr block = parse_body();
  while (accept(TokenKind::Newline)) {
  }
  if (!at(TokenKind::RBrace)) {
    error_expected(fmt::format("`}}` to close the `{{` opened at {}", position(open.range)),
                   "a block is `let` lines and one final expression");
    // Skip the rest of the block, but not into the next declaration if the `}` is missing.
    size_t depth = 0;
    while (!at(TokenKind::End) && !(depth == 0 && at(TokenKind::RBrace))) {
      TokenKind k = peek().kind;
      if (previous().kind == TokenKind::Newline && starts_declaration(k) && k != TokenKind::KwLet) break;
      if (k == TokenKind::LParen || k == TokenKind::LBracket || k == TokenKind::LBrace) ++depth;
      else if ((k == TokenKind::RParen || k == TokenKind::RBracket || k == TokenKind::RBrace) && depth > 0) --depth;
      advance();
    }
  }
  accept(TokenKind::RBrace);
  block->range = range_from(open.range);
  return block;
}

ast::ExprPtr Parser::parse_body() {
  while (accept(TokenKind::Newline)) {
  }
  auto block = make_expr(ast::ExprKind::Block, peek().range);
  ast::ExprPtr value;
  while (true) {
    while (accept(TokenKind::Newline)) {
    }
    synchronize();
    if (at(TokenKind::KwLet)) {
      block->lets.push_back(parse_let());
      if (at(TokenKind::Newline)) continue;
      if (!at(TokenKind::RBrace) && !at(TokenKind::End)) {
        error_expected("end of line after the `let` line");
        skip_to_line_end();
        if (at(TokenKind::Newline)) continue;
      }
    }
    if (at(TokenKind::RBrace) || at(TokenKind::End) || starts_declaration(peek().kind)) {
      error_expected(block->lets.empty() ? "an expression" : "the final expression after the `let` lines",
                     "a body is `let` lines and one final expression, its value");
      value = placeholder_expr();
      break;
    }
    value = parse_expr();
    break;
  }
  block->children.push_back(std::move(value));
  block->range = range_from(block->range);
  return block;
}

ast::Let Parser::parse_let() {
  ast::Let let;
  SourceRange start = advance().range;
  let.pattern = parse_pattern();
  if (accept(TokenKind::Colon)) let.annotation = parse_type();
  if (expect(TokenKind::Assign, "and the value in the `let` line")) let.value = parse_expr();
  else let.value = placeholder_expr();
  let.range = range_from(start);
  return let;
}

std::vector<ast::Arg> Parser::parse_args(const Token& open) {
  std::vector<ast::Arg> args;
  if (accept(TokenKind::RParen)) return args;
  while (true) {
    args.push_back(parse_arg());
    if (accept(TokenKind::Comma)) continue;
    if (!accept(TokenKind::RParen))
      error_expected(fmt::format("`,` or `)` to close the `(` opened at {}", position(open.range)));
    return args;
  }
}

ast::Arg Parser::parse_arg() {
  ast::Arg a;
  SourceRange start = peek().range;
  if (at_word("axis") && at(TokenKind::Ident, 1)) {
    advance();
    a.kind = ast::Arg::Kind::Axis;
    a.name = expect_ident("an axis name");
  } else if (at(TokenKind::Ident) && at(TokenKind::Arrow, 1)) {
    a.kind = ast::Arg::Kind::Rename;
    a.name = expect_ident("an axis name");
    advance();
    const Token& to = peek();
    auto name = std::make_unique<ast::Expr>();
    name->kind = ast::ExprKind::Name;
    name->range = to.range;
    name->name = expect_ident("the axis's new name after `→`").text;
    a.value = std::move(name);
  } else if (at(TokenKind::Ident) && (at(TokenKind::Assign, 1) || at(TokenKind::Colon, 1))) {
    a.kind = at(TokenKind::Assign, 1) ? ast::Arg::Kind::Keyword : ast::Arg::Kind::AxisSize;
    a.name = expect_ident("an argument name");
    advance();
    a.value = parse_expr();
  } else {
    a.value = parse_expr();
  }
  a.range = range_from(start);
  return a;
}

// ---------------------------------------------------------------- types

ast::TypePtr Parser::placeholder_type() {
  auto t = std::make_unique<ast::TypeExpr>();
  t->range = {peek().range.begin, 0};
  return t;
}

ast::TypePtr Parser::parse_type() {
  Nesting nesting(*this);
  if (!nesting.ok()) return placeholder_type();
  const Token& t = peek();
  auto type = std::make_unique<ast::TypeExpr>();
  type->range = t.range;
  if (t.kind == TokenKind::Ident) {
    if (is_element_type(t.text) && at(TokenKind::LBracket, 1)) return parse_tensor_type();
    if (is_scalar_type(t.text) || t.text == "key") {
      advance();
      type->kind = t.text == "key" ? ast::TypeKind::Key : ast::TypeKind::Scalar;
      type->elem = t.text == "key" ? "" : t.text;
      return type;
    }
    if (is_element_type(t.text)) {
      advance();
      error_expected(fmt::format("`[` and the axes after `{}`", t.text), "a scalar tensor is `ℝ[]`");
      return placeholder_type();
    }
  } else if (t.kind == TokenKind::KwParams) {
    advance();
    type->kind = ast::TypeKind::Params;
    ast::ModuleRef ref = parse_modref();
    if (ref.is_stack) {
      type->module_ref = std::make_unique<ast::ModuleRef>(std::move(ref));
    } else {
      type->module = std::move(ref.name);
      type->module_args = std::move(ref.args);
    }
    type->range = range_from(t.range);
    return type;
  } else if (t.kind == TokenKind::LParen) {
    const Token& open = advance();
    type->kind = ast::TypeKind::Tuple;
    type->elements.push_back(parse_type());
    bool grouping = !at(TokenKind::Comma);
    while (accept(TokenKind::Comma)) type->elements.push_back(parse_type());
    expect_closing(TokenKind::RParen, open);
    if (grouping) type = std::move(type->elements.front());  // `(T)` is T
    type->range = range_from(open.range);
    return type;
  }
  error_expected("a type (`ℝ[...]`, `i32[...]`, `(T, U)`, `params M`, `key`, `nat`, `int`, `f64` or `bool`)");
  return placeholder_type();
}

ast::TypePtr Parser::parse_tensor_type() {
  const Token& elem = advance();
  auto type = std::make_unique<ast::TypeExpr>();
  type->kind = ast::TypeKind::Tensor;
  type->elem = is_real(elem.text) ? "real" : elem.text;
  const Token& open = advance();  // `[`
  if (!accept(TokenKind::RBracket)) {
    while (true) {
      type->axes.push_back(parse_axis());
      if (accept(TokenKind::Comma)) continue;
      if (!accept(TokenKind::RBracket))
        error_expected(fmt::format("`,` or `]` to close the `[` opened at {}", position(open.range)));
      break;
    }
  }
  type->range = range_from(elem.range);
  return type;
}

ast::AxisExpr Parser::parse_axis() {
  ast::AxisExpr axis;
  SourceRange start = peek().range;
  if (accept(TokenKind::Ellipsis)) {
    axis.kind = ast::AxisExpr::Kind::Rest;
  } else {
    if (at(TokenKind::Ident) && at(TokenKind::Colon, 1)) {
      axis.name = expect_ident("an axis name");
      advance();
    }
    axis.size = parse_expr();
  }
  axis.range = range_from(start);
  return axis;
}

ast::TypePtr Parser::parse_scalar_type() {
  if (at(TokenKind::Ident) && is_scalar_type(peek().text)) {
    const Token& t = advance();
    auto type = std::make_unique<ast::TypeExpr>();
    type->kind = ast::TypeKind::Scalar;
    type->elem = t.text;
    type->range = t.range;
    return type;
  }
  error_expected("a scalar type (`nat`, `int`, `f64` or `bool`)");
  return placeholder_type();
}

// ---------------------------------------------------------------- patterns and module references

ast::PatternPtr Parser::parse_pattern() {
  auto p = std::make_unique<ast::Pattern>();
  p->range = {peek().range.begin, 0};
  Nesting nesting(*this);
  if (!nesting.ok()) return p;
  if (at(TokenKind::Ident)) {
    const Token& t = advance();
    p->kind = t.text == "_" ? ast::Pattern::Kind::Wildcard : ast::Pattern::Kind::Name;
    p->name = {t.text, t.range};
    p->range = t.range;
    return p;
  }
  if (at(TokenKind::LParen)) {
    const Token& open = advance();
    p->kind = ast::Pattern::Kind::Tuple;
    p->elements.push_back(parse_pattern());
    bool grouping = !at(TokenKind::Comma);
    while (accept(TokenKind::Comma)) p->elements.push_back(parse_pattern());
    expect_closing(TokenKind::RParen, open);
    if (grouping) p = std::move(p->elements.front());  // `(x)` is x
    p->range = range_from(open.range);
    return p;
  }
  error_expected("a pattern (a name, `_` or a tuple `(a, b)`)");
  return p;
}

std::vector<ast::Ident> Parser::parse_qualname(std::string_view what) {
  std::vector<ast::Ident> name;
  name.push_back(expect_ident(what));
  while (at(TokenKind::Period) && at(TokenKind::Ident, 1)) {
    advance();
    name.push_back(expect_ident(what));
  }
  return name;
}

ast::ModuleRef Parser::parse_modref() {
  ast::ModuleRef ref;
  SourceRange start = peek().range;
  ref.range = {start.begin, 0};
  Nesting nesting(*this);
  if (!nesting.ok()) return ref;
  if (accept(TokenKind::KwStack)) {
    ref.is_stack = true;
    const Token& brace = peek();
    if (expect(TokenKind::LBrace, "and the number of copies after `stack` (`stack{L}(Block)`)")) {
      ref.stack_count = parse_expr();
      expect_closing(TokenKind::RBrace, brace);
    }
    const Token& paren = peek();
    if (expect(TokenKind::LParen, "and the stacked module (`stack{L}(Block)`)")) {
      ref.inner = std::make_unique<ast::ModuleRef>(parse_modref());
      expect_closing(TokenKind::RParen, paren);
    }
    if (!ref.stack_count) ref.stack_count = placeholder_expr();
    if (!ref.inner) ref.inner = std::make_unique<ast::ModuleRef>();
  } else {
    ref.name = parse_qualname("a module name");
    if (at(TokenKind::LBrace)) {
      const Token& open = advance();
      while (true) {
        ref.args.push_back(parse_expr());
        if (accept(TokenKind::Comma)) continue;
        if (!accept(TokenKind::RBrace))
          error_expected(fmt::format("`,` or `}}` to close the `{{` opened at {}", position(open.range)));
        break;
      }
    }
  }
  ref.range = range_from(start);
  return ref;
}

}  // namespace quire::syntax::detail
