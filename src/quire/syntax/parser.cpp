// Lines, error recovery, top-level items and the declarations inside modules,
// optimizers and training runs. Expressions, types, patterns and module
// references are in parser_expr.cpp.

#include "quire/syntax/parser.h"

#include <fmt/format.h>

#include <algorithm>

#include "quire/syntax/lexer.h"
#include "quire/syntax/parser_internal.h"

namespace quire::syntax {

namespace detail {

namespace {

bool opens(TokenKind k) { return k == TokenKind::LParen || k == TokenKind::LBracket || k == TokenKind::LBrace; }
bool closes(TokenKind k) { return k == TokenKind::RParen || k == TokenKind::RBracket || k == TokenKind::RBrace; }

TokenKind opener_of(TokenKind closer) {
  return closer == TokenKind::RParen ? TokenKind::LParen
         : closer == TokenKind::RBracket ? TokenKind::LBracket
                                         : TokenKind::LBrace;
}

/// Tokens after which a line cannot end: the next line continues the expression.
bool continues_line(TokenKind k) {
  switch (k) {
    case TokenKind::Plus: case TokenKind::Minus: case TokenKind::Star: case TokenKind::Slash:
    case TokenKind::Caret: case TokenKind::Dot: case TokenKind::Lt: case TokenKind::Le:
    case TokenKind::Gt: case TokenKind::Ge: case TokenKind::EqEq: case TokenKind::Ne:
    case TokenKind::Comma: case TokenKind::Assign: case TokenKind::Colon: case TokenKind::Arrow:
    case TokenKind::LParen: case TokenKind::LBracket: case TokenKind::LBrace: case TokenKind::Pipe:
    case TokenKind::KwAs: case TokenKind::Period:
      return true;
    default:
      return false;
  }
}

/// In a training run, `optimizer = adamw` is a setting, not the start of an item.
bool is_setting(const Token& next) { return next.kind == TokenKind::Assign || next.kind == TokenKind::Colon; }

}  // namespace

bool starts_item(TokenKind k) {
  switch (k) {
    case TokenKind::KwImport: case TokenKind::KwDim: case TokenKind::KwConst: case TokenKind::KwModule:
    case TokenKind::KwFn: case TokenKind::KwOptimizer: case TokenKind::KwTraining:
      return true;
    default:
      return false;
  }
}

bool starts_declaration(TokenKind k) {
  return starts_item(k) || k == TokenKind::KwParam || k == TokenKind::KwUse || k == TokenKind::KwLet;
}

std::vector<Token> significant_lines(std::vector<Token> tokens) {
  std::vector<Token> out;
  out.reserve(tokens.size());
  std::vector<TokenKind> open;  // the brackets open at this point, innermost last
  size_t i = 0;
  while (i < tokens.size()) {
    if (tokens[i].kind == TokenKind::Newline) {
      size_t next = i;
      while (next < tokens.size() && tokens[next].kind == TokenKind::Newline) ++next;
      TokenKind following = next < tokens.size() ? tokens[next].kind : TokenKind::End;
      bool in_brackets = !open.empty() && open.back() != TokenKind::LBrace;
      bool continued = !out.empty() && continues_line(out.back().kind);
      // A declaration never continues an expression, nor sits inside ( ) or
      // [ ]: those were left open or unfinished by mistake. Ending the line
      // here keeps the mistake to its own line instead of swallowing the next.
      if (starts_declaration(following)) {
        while (!open.empty() && open.back() != TokenKind::LBrace) open.pop_back();
        in_brackets = false;
        continued = false;
      }
      bool ends_line = !in_brackets && !continued && !out.empty() && out.back().kind != TokenKind::Newline &&
                       following != TokenKind::Pipe;
      if (ends_line) out.push_back(std::move(tokens[i]));
      i = next;
      continue;
    }
    TokenKind k = tokens[i].kind;
    if (opens(k)) {
      open.push_back(k);
    } else if (closes(k)) {
      // A closer pops back to its opener; one with no opener changes nothing.
      auto it = std::find(open.rbegin(), open.rend(), opener_of(k));
      if (it != open.rend()) open.erase(std::next(it).base(), open.end());
    }
    out.push_back(std::move(tokens[i]));
    ++i;
  }
  if (out.empty() || out.back().kind != TokenKind::End) out.push_back(Token{});
  return out;
}

Parser::Parser(const SourceManager& sources, FileId file, DiagnosticSink& sink, std::vector<Token> tokens,
               std::vector<uint32_t> quiet_lines)
    : sources_(sources),
      file_(file),
      sink_(sink),
      tokens_(significant_lines(std::move(tokens))),
      quiet_lines_(std::move(quiet_lines)) {
  // "found end of file" points at the end of the last line, not at the empty
  // line after the file's final line break.
  const std::string& text = sources_.file(file_).text;
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  tokens_.back().range = {{file_, static_cast<uint32_t>(end)}, 0};
}

// ---------------------------------------------------------------- cursor

const Token& Parser::peek(size_t ahead) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }

bool Parser::at_word(std::string_view word, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.kind == TokenKind::Ident && t.text == word;
}

const Token& Parser::advance() {
  const Token& t = tokens_[pos_];
  if (t.kind != TokenKind::End) ++pos_;
  return t;
}

bool Parser::accept(TokenKind kind) {
  if (!at(kind)) return false;
  advance();
  return true;
}

const Token& Parser::previous() const { return tokens_[pos_ == 0 ? 0 : pos_ - 1]; }

SourceRange Parser::range_from(SourceRange start) const {
  const Token& last = previous();
  uint32_t end = last.range.begin.offset + last.range.length;
  if (pos_ == 0 || end < start.begin.offset) return {start.begin, 0};
  return {start.begin, end - start.begin.offset};
}

bool Parser::at_line_end() const {
  return at(TokenKind::Newline) || at(TokenKind::End) || at(TokenKind::RBrace);
}

// ---------------------------------------------------------------- errors

void Parser::error(const char* code, SourceRange range, std::string message, std::string hint) {
  if (panicking_) return;
  panicking_ = true;
  // A line with a lexical error (an unterminated string, a stray character)
  // reads wrongly from there on: what the parser finds there is its echo.
  uint32_t line = sources_.line_col(range.begin).line;
  if (std::binary_search(quiet_lines_.begin(), quiet_lines_.end(), line)) return;
  sink_.error(code, range, std::move(message), std::move(hint));
}

std::string Parser::describe(const Token& token) const {
  std::string_view raw =
      std::string_view(sources_.file(file_).text).substr(token.range.begin.offset, token.range.length);
  switch (token.kind) {
    case TokenKind::End: return "end of file";
    case TokenKind::Newline: return "end of line";
    case TokenKind::Ident: return fmt::format("identifier `{}`", raw);
    case TokenKind::Int:
    case TokenKind::Float: return fmt::format("number `{}`", raw);
    case TokenKind::String: return fmt::format("string {}", raw);
    default: return is_keyword(token.kind) ? fmt::format("keyword `{}`", raw) : fmt::format("`{}`", raw);
  }
}

std::string Parser::position(SourceRange range) const {
  LineCol lc = sources_.line_col(range.begin);
  return fmt::format("{}:{}", lc.line, lc.column);
}

void Parser::error_expected(std::string_view what, std::string hint) {
  error("E0201", peek().range, fmt::format("expected {}, found {}", what, describe(peek())), std::move(hint));
}

/// How an expected token is named in a message: the ASCII twin where there is one,
/// since that is what can be typed everywhere.
static std::string expected_spelling(TokenKind kind) {
  switch (kind) {
    case TokenKind::Arrow: return "`->`";
    case TokenKind::Ellipsis: return "`...`";
    case TokenKind::Ident: return "a name";
    case TokenKind::String: return "a string";
    default: return fmt::format("`{}`", token_kind_spelling(kind));
  }
}

bool Parser::expect(TokenKind kind, std::string_view context) {
  if (accept(kind)) return true;
  std::string what = expected_spelling(kind);
  if (!context.empty()) what = fmt::format("{} {}", what, context);
  error_expected(what);
  return false;
}

bool Parser::expect_closing(TokenKind closer, const Token& opener) {
  if (accept(closer)) return true;
  error_expected(fmt::format("`{}` to close the `{}` opened at {}", token_kind_spelling(closer),
                             token_kind_spelling(opener.kind), position(opener.range)));
  return false;
}

ast::Ident Parser::expect_ident(std::string_view what) {
  if (at(TokenKind::Ident)) {
    const Token& t = advance();
    return {t.text, t.range};
  }
  error_expected(what);
  return {"", {peek().range.begin, 0}};
}

bool Parser::expect_word(std::string_view word, std::string_view context) {
  if (at_word(word)) {
    advance();
    return true;
  }
  error_expected(fmt::format("`{}` {}", word, context));
  return false;
}

// ---------------------------------------------------------------- recovery

bool Parser::enter_nesting() {
  if (++depth_ <= kMaxNesting) return true;
  if (!depth_reported_) {
    depth_reported_ = true;
    // Reported even amid another error: it explains what follows, and the limit is hit once.
    sink_.error("E0202", peek().range, fmt::format("nesting too deep: more than {} levels", kMaxNesting),
                "expressions, types and patterns nest at most 200 deep together; name a part with a `let` line");
  }
  panicking_ = true;
  skip_nested_group();
  return false;
}

void Parser::skip_nested_group() {
  size_t depth = 0;
  while (!at(TokenKind::End)) {
    TokenKind k = peek().kind;
    if (depth == 0 && (closes(k) || k == TokenKind::Comma || k == TokenKind::Newline)) return;
    if (opens(k)) ++depth;
    else if (closes(k)) --depth;
    advance();
  }
}

void Parser::skip_to_line_end() {
  std::vector<TokenKind> open;
  while (!at(TokenKind::End)) {
    TokenKind k = peek().kind;
    // Inside a `{ }` group lines continue; a NEWLINE left inside ( ) or [ ]
    // means significant_lines closed them (a declaration follows): stop there.
    // A declaration other than `let` never continues a `{ }` block either.
    if (k == TokenKind::Newline && (open.empty() || open.back() != TokenKind::LBrace ||
                                    (starts_declaration(peek(1).kind) && !at(TokenKind::KwLet, 1))))
      return;
    if (k == TokenKind::RBrace && open.empty()) return;
    if (opens(k)) open.push_back(k);
    else if (closes(k) && !open.empty()) open.pop_back();
    advance();
  }
}

void Parser::skip_to_item() {
  int braces = 0;
  do {
    TokenKind k = peek().kind;
    if (k == TokenKind::LBrace) ++braces;
    if (k == TokenKind::RBrace) braces = std::max(0, braces - 1);
    advance();
    if (previous().kind != TokenKind::Newline) continue;
    // A `fn` line inside the braces of a module being skipped is a member, not an item.
    TokenKind next = peek().kind;
    if (starts_item(next) && (braces == 0 || next != TokenKind::KwFn)) return;
  } while (!at(TokenKind::End));
}

void Parser::skip_to_member() {
  size_t depth = 0;
  bool first = true;
  while (!at(TokenKind::End)) {
    TokenKind k = peek().kind;
    if (depth == 0 && k == TokenKind::RBrace) return;
    if (!first && previous().kind == TokenKind::Newline) {
      if (depth == 0 && (k == TokenKind::KwParam || k == TokenKind::KwUse || k == TokenKind::KwFn)) return;
      if (starts_item(k) && k != TokenKind::KwFn) return;  // the module was never closed
    }
    if (opens(k)) ++depth;
    else if (closes(k) && depth > 0) --depth;
    advance();
    first = false;
  }
}

void Parser::finish_line(std::string_view what) {
  // After a block left unclosed the parser already stands at the next line.
  if (at_line_end() || previous().kind == TokenKind::Newline) return;
  error_expected(fmt::format("end of line after {}", what));
  skip_to_line_end();
}

// ---------------------------------------------------------------- items

ast::File Parser::parse_file() {
  ast::File file;
  file.file = file_;
  while (!at(TokenKind::End)) {
    if (accept(TokenKind::Newline)) continue;
    synchronize();
    size_t start = pos_;
    parse_item(file);
    if (pos_ == start) advance();  // every round consumes a token, so the loop ends
  }
  return file;
}

void Parser::parse_item(ast::File& file) {
  auto record = [&](ast::ItemKind kind, size_t size) { file.order.push_back({kind, size - 1}); };
  switch (peek().kind) {
    case TokenKind::KwImport:
      file.imports.push_back(parse_import());
      record(ast::ItemKind::Import, file.imports.size());
      return finish_line("the import");
    case TokenKind::KwDim:
      file.dims.push_back(parse_dim());
      record(ast::ItemKind::Dim, file.dims.size());
      return finish_line("the dimension names");
    case TokenKind::KwConst:
      file.consts.push_back(parse_const());
      record(ast::ItemKind::Const, file.consts.size());
      return finish_line("the constant");
    case TokenKind::KwModule:
      file.modules.push_back(parse_module());
      record(ast::ItemKind::Module, file.modules.size());
      return finish_line("the module's `}`");
    case TokenKind::KwFn: {
      ast::FnDecl fn;
      bool header_read = parse_fn(fn);
      file.fns.push_back(std::move(fn));
      record(ast::ItemKind::Fn, file.fns.size());
      if (header_read) return finish_line("the function's result");
      return skip_to_item();  // without its header the body's lines cannot be read
    }
    case TokenKind::KwOptimizer:
      file.optimizers.push_back(parse_optimizer());
      record(ast::ItemKind::Optimizer, file.optimizers.size());
      return finish_line("the optimizer's `}`");
    case TokenKind::KwTraining:
      file.trainings.push_back(parse_training());
      record(ast::ItemKind::Training, file.trainings.size());
      return finish_line("the training run's `}`");
    case TokenKind::KwParam:
    case TokenKind::KwUse:
      error("E0203", peek().range, fmt::format("`{}` can only appear inside a `module`", peek().text),
            peek().kind == TokenKind::KwParam ? "a parameter belongs to a module: `module M { param w : ℝ[4] }`"
                                              : "a sub-module belongs to a module: `module M { use proj : Linear{4, 4} }`");
      return skip_to_item();
    case TokenKind::KwLet:
      error("E0203", peek().range, "`let` can only appear in a function body or a block",
            "a top-level value is a `const`: `const D : nat = 4`");
      return skip_to_item();
    case TokenKind::RBrace:
      error("E0204", peek().range, "unexpected `}` at top level: no module, block or run is open");
      return skip_to_item();
    default:
      error("E0204", peek().range,
            fmt::format("expected an item (`import`, `dim`, `const`, `module`, `fn`, `optimizer` or `training`), "
                        "found {}",
                        describe(peek())),
            "a function's body is its `let` lines and one final expression; a second expression line is not part "
            "of it");
      return skip_to_item();
  }
}

ast::ImportDecl Parser::parse_import() {
  ast::ImportDecl d;
  SourceRange start = advance().range;
  if (at(TokenKind::String)) d.path = advance().text;
  else error_expected("the imported file's name (a string)");
  if (expect(TokenKind::KwAs, "and the import's alias")) d.alias = expect_ident("the import's alias");
  d.range = range_from(start);
  return d;
}

ast::DimDecl Parser::parse_dim() {
  ast::DimDecl d;
  SourceRange start = advance().range;
  d.names.push_back(expect_ident("a dimension name after `dim`"));
  while (at(TokenKind::Ident)) d.names.push_back(expect_ident("a dimension name"));
  d.range = range_from(start);
  return d;
}

ast::ConstDecl Parser::parse_const() {
  ast::ConstDecl d;
  SourceRange start = advance().range;
  d.name = expect_ident("the constant's name");
  if (expect(TokenKind::Colon, "and the constant's type (`const D : nat = 4`)")) d.type = parse_scalar_type();
  else d.type = placeholder_type();
  if (expect(TokenKind::Assign, "and the constant's value")) d.value = parse_expr();
  else d.value = placeholder_expr();
  d.range = range_from(start);
  return d;
}

// ---------------------------------------------------------------- braced bodies

template <typename Line>
void Parser::parse_braced_lines(const Token& open, std::string_view what, bool fn_lines, Line line) {
  while (true) {
    if (accept(TokenKind::Newline)) continue;
    if (accept(TokenKind::RBrace)) return;
    // A top-level item here means the `}` was forgotten: stop, and let the
    // top level read the item.
    TokenKind k = peek().kind;
    bool item = starts_item(k) && !(fn_lines && k == TokenKind::KwFn) && !is_setting(peek(1));
    if (at(TokenKind::End) || item) {
      synchronize();
      error_expected(fmt::format("`}}` to close the `{{` opened at {}", position(open.range)),
                     fmt::format("{} is not closed", what));
      return;
    }
    synchronize();
    size_t start = pos_;
    line();
    if (pos_ == start && !at(TokenKind::RBrace)) advance();
  }
}

ast::ModuleDecl Parser::parse_module() {
  ast::ModuleDecl m;
  SourceRange start = advance().range;
  m.name = expect_ident("the module's name");
  // `{In Out : dim}` before the body: the body's `{` is never followed by a
  // name (its lines start with `param`, `use` or `fn`).
  if (at(TokenKind::LBrace) && at(TokenKind::Ident, 1)) {
    const Token& open = advance();
    while (at(TokenKind::Ident)) m.dims.push_back(expect_ident("a dimension name"));
    expect(TokenKind::Colon, "and `dim` after the module's dimension names");
    expect(TokenKind::KwDim, "after `:` (a module's dimensions are `{In Out : dim}`)");
    expect_closing(TokenKind::RBrace, open);
  }
  const Token& open = peek();
  if (!expect(TokenKind::LBrace, "to begin the module's body")) {
    m.range = range_from(start);
    return m;
  }
  std::string what = fmt::format("module `{}`", m.name.text);
  parse_braced_lines(open, what, true, [&] { parse_member(m); });
  m.range = range_from(start);
  return m;
}

void Parser::parse_member(ast::ModuleDecl& module) {
  switch (peek().kind) {
    case TokenKind::KwParam:
      module.params.push_back(parse_param());
      return finish_line("the parameter");
    case TokenKind::KwUse:
      module.uses.push_back(parse_use());
      return finish_line("the sub-module");
    case TokenKind::KwFn: {
      ast::FnDecl fn;
      bool header_read = parse_fn(fn);
      // A module's functions take the module's dimensions; their sizes are
      // fixed by the instance, so there is nothing left to infer at a call.
      if (!fn.size_params.empty())
        error("E0203", fn.size_params.front().range, "a module's function cannot declare size parameters",
              fmt::format("use the module's dimensions (`module {}{{N : dim}}`), or make it a top-level function",
                          module.name.text));
      module.fns.push_back(std::move(fn));
      if (header_read) return finish_line("the function's result");
      return skip_to_member();
    }
    case TokenKind::KwLet:
      error("E0203", peek().range, "`let` can only appear in a function body or a block",
            "a module holds `param`, `use` and `fn` lines");
      return skip_to_member();
    default:
      error_expected(fmt::format("`param`, `use`, `fn` or `}}` in module `{}`", module.name.text),
                     "a function's body is its `let` lines and one final expression; a second expression line "
                     "is not part of it");
      return skip_to_member();
  }
}

ast::ParamDecl Parser::parse_param() {
  ast::ParamDecl p;
  SourceRange start = advance().range;
  p.name = expect_ident("the parameter's name");
  if (expect(TokenKind::Colon, "and the parameter's type")) p.type = parse_type();
  else p.type = placeholder_type();
  if (accept(TokenKind::KwInit)) {
    if (expect(TokenKind::Assign, "after `init`")) p.init = parse_expr();
    else p.init = placeholder_expr();
  }
  while (true) {
    if (accept(TokenKind::KwFrozen)) {
      p.frozen = true;
    } else if (at(TokenKind::KwNumerics)) {
      advance();
      if (expect_word("high", "after `numerics` (a parameter is marked `numerics high`)")) p.numerics_high = true;
    } else {
      break;
    }
  }
  p.range = range_from(start);
  return p;
}

ast::UseDecl Parser::parse_use() {
  ast::UseDecl u;
  SourceRange start = advance().range;
  u.name = expect_ident("the sub-module's name");
  if (expect(TokenKind::Colon, "and the sub-module's module (`use proj : Linear{D, D}`)")) u.module = parse_modref();
  u.range = range_from(start);
  return u;
}

bool Parser::parse_fn(ast::FnDecl& fn) {
  SourceRange start = advance().range;
  bool ok = [&] {
    fn.name = expect_ident("the function's name");
    if (fn.name.text.empty()) return false;
    // `{N M}`, `{N, M}` or `{N M : dim}`: the module header's spelling, with
    // commas allowed since a call site never writes them.
    if (at(TokenKind::LBrace)) {
      const Token& brace = advance();
      while (true) {
        fn.size_params.push_back(expect_ident("a size parameter's name"));
        if (fn.size_params.back().text.empty()) return false;
        if (accept(TokenKind::Comma) || at(TokenKind::Ident)) continue;
        break;
      }
      if (accept(TokenKind::Colon) && !expect(TokenKind::KwDim, "after `:` (size parameters are `{N M}` or `{N M : dim}`)"))
        return false;
      if (!expect_closing(TokenKind::RBrace, brace)) return false;
    }
    const Token& open = peek();
    if (!expect(TokenKind::LParen, "and the function's arguments")) return false;
    if (!accept(TokenKind::RParen)) {
      while (true) {
        fn.args.push_back(parse_fn_arg());
        if (accept(TokenKind::Comma)) continue;
        if (accept(TokenKind::RParen)) break;
        error_expected(fmt::format("`,` or `)` to close the `(` opened at {}", position(open.range)));
        return false;
      }
    }
    if (!expect(TokenKind::Arrow, "and the result type after the arguments")) return false;
    fn.result = parse_type();
    if (!expect(TokenKind::Assign, "before the function's body")) return false;
    fn.body = parse_body();
    return true;
  }();
  if (!fn.result) fn.result = placeholder_type();
  if (!fn.body) fn.body = placeholder_expr();
  fn.range = range_from(start);
  return ok;
}

ast::FnArg Parser::parse_fn_arg() {
  ast::FnArg a;
  SourceRange start = peek().range;
  a.name = expect_ident("an argument's name");
  if (!a.name.text.empty() && expect(TokenKind::Colon, "and the argument's type")) a.type = parse_type();
  else a.type = placeholder_type();
  if (accept(TokenKind::Assign)) a.default_value = parse_expr();
  a.range = range_from(start);
  return a;
}

// ---------------------------------------------------------------- optimizers and training runs

ast::OptimizerDecl Parser::parse_optimizer() {
  ast::OptimizerDecl o;
  SourceRange start = advance().range;
  o.name = expect_ident("the optimizer's name (`optimizer adamw { ... }`)");
  const Token& open = peek();
  if (expect(TokenKind::LBrace, "to begin the optimizer's settings")) {
    parse_braced_lines(open, fmt::format("optimizer `{}`", o.name.text), false, [&] {
      if ((at(TokenKind::Ident) || is_keyword(peek().kind)) && is_setting(peek(1))) {
        o.fields.push_back(parse_field());
        return finish_line("the setting");
      }
      error_expected("a setting (`name = value` or `name : type = value`)");
      skip_to_line_end();
    });
  }
  o.range = range_from(start);
  return o;
}

ast::TrainingDecl Parser::parse_training() {
  ast::TrainingDecl t;
  SourceRange start = advance().range;
  expect_word("run", "after `training` (`training run { ... }`)");
  const Token& open = peek();
  if (expect(TokenKind::LBrace, "to begin the training run")) {
    parse_braced_lines(open, "the training run", false, [&] { parse_training_item(t); });
  }
  t.range = range_from(start);
  return t;
}

void Parser::parse_training_item(ast::TrainingDecl& t) {
  const Token& first = peek();
  if (at_word("data") && at(TokenKind::Assign, 1)) {
    if (t.data_range) error("E0205", first.range, "the training run's `data` is given twice", "keep one `data = ...` line");
    advance();
    advance();
    t.data.clear();
    t.data.push_back(parse_stage());
    while (accept(TokenKind::Pipe)) t.data.push_back(parse_stage());
    t.data_range = range_from(first.range);
  } else if (at_word("checkpoint") && at_word("every", 1)) {
    if (t.checkpoint)
      error("E0205", first.range, "the training run's `checkpoint` is given twice", "keep one `checkpoint` line");
    t.checkpoint = parse_checkpoint();
  } else if (at_word("evaluate") && at(TokenKind::Ident, 1) && at_word("every", 2)) {
    if (t.evaluate)
      error("E0205", first.range, "the training run's `evaluate` is given twice", "keep one `evaluate` line");
    t.evaluate = parse_evaluate();
  } else if ((at(TokenKind::Ident) || is_keyword(first.kind)) && is_setting(peek(1))) {
    t.fields.push_back(parse_field());
  } else {
    error_expected(
        "a setting (`name = value`), `data = ...`, `checkpoint every N steps to \"dir\"` or `evaluate f every N steps "
        "on \"file\"`");
    return skip_to_line_end();
  }
  finish_line("the setting");
}

bool Parser::assign_ahead_on_line() const {
  size_t depth = 0;
  for (size_t i = pos_; i < tokens_.size(); ++i) {
    TokenKind k = tokens_[i].kind;
    if (depth == 0 && (k == TokenKind::Newline || k == TokenKind::End || closes(k))) return false;
    if (depth == 0 && k == TokenKind::Assign) return true;
    if (opens(k)) ++depth;
    else if (closes(k)) --depth;
  }
  return false;
}

ast::Field Parser::parse_field() {
  ast::Field f;
  const Token& key = advance();
  f.key = {key.text, key.range};
  if (accept(TokenKind::Assign)) {
    f.value = parse_expr();
  } else {
    advance();  // `:`
    // `lr : f64 = 0.01` annotates; `schedule : cosine(warmup = 20)` (no `=`
    // outside brackets) gives the value directly, as the tutorial writes it.
    if (assign_ahead_on_line()) {
      f.type = parse_type();
      if (expect(TokenKind::Assign, "and the setting's value")) f.value = parse_expr();
    } else {
      f.value = parse_expr();
    }
  }
  if (!f.value) f.value = placeholder_expr();
  f.range = range_from(key.range);
  return f;
}

ast::PipelineStage Parser::parse_stage() {
  ast::PipelineStage s;
  SourceRange start = peek().range;
  if (at_word("stream") && at(TokenKind::String, 1)) {
    const Token& name = advance();
    s.name = {name.text, name.range};
    s.path = advance().text;
  } else if (at(TokenKind::Ident)) {
    const Token& name = advance();
    s.name = {name.text, name.range};
    if (at(TokenKind::LParen)) s.args = parse_args(advance());
  } else {
    error_expected("a pipeline stage (`stream \"file\"`, `shuffle(seed = 3)`, `batch(B = 8)`)");
  }
  s.range = range_from(start);
  return s;
}

ast::CheckpointClause Parser::parse_checkpoint() {
  ast::CheckpointClause c;
  SourceRange start = advance().range;  // `checkpoint`
  advance();                            // `every`
  c.every = parse_expr();
  ast::Ident unit = expect_ident("the unit of `every` (`steps` or `epochs`)");
  c.unit = unit.text;
  if (expect_word("to", "and the checkpoint directory (`to \"ckpt/\"`)")) {
    if (at(TokenKind::String)) c.dir = advance().text;
    else error_expected("the checkpoint directory (a string)");
  }
  c.range = range_from(start);
  return c;
}

ast::EvaluateClause Parser::parse_evaluate() {
  ast::EvaluateClause c;
  SourceRange start = advance().range;  // `evaluate`
  c.function = expect_ident("the function to evaluate");
  advance();  // `every`
  c.every = parse_expr();
  c.unit = expect_ident("the unit of `every` (`steps`)").text;
  if (expect_word("on", "and the held-out data (`on \"data/val.npz\"`)")) {
    if (at(TokenKind::String)) c.path = advance().text;
    else error_expected("the held-out data's file (a string)");
  }
  c.range = range_from(start);
  return c;
}

}  // namespace detail

ast::File parse_tokens(const SourceManager& sources, FileId file, std::vector<Token> tokens, DiagnosticSink& sink) {
  return detail::Parser(sources, file, sink, std::move(tokens), {}).parse_file();
}

ast::File parse_file(const SourceManager& sources, FileId file, DiagnosticSink& sink) {
  size_t before = sink.all().size();
  std::vector<Token> tokens = lex(sources, file, sink);
  std::vector<uint32_t> lexical_error_lines;
  for (size_t i = before; i < sink.all().size(); ++i)
    if (sink.all()[i].severity == Severity::Error) lexical_error_lines.push_back(sources.line_col(sink.all()[i].range.begin).line);
  std::sort(lexical_error_lines.begin(), lexical_error_lines.end());
  return detail::Parser(sources, file, sink, std::move(tokens), std::move(lexical_error_lines)).parse_file();
}

}  // namespace quire::syntax
