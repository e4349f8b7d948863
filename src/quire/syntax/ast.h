#pragma once
// The syntax tree of one .qr file, as the parser builds it: names are not yet
// resolved, types are not yet checked. Every node keeps its SourceRange so that
// later stages can point at it. Nodes are owned by unique_ptr; a file's tree is
// immutable once parsed.
//
// The grammar is docs/grammar.md; the parser (parser.h) is its only producer.
// After a syntax error the parser leaves placeholders (is_placeholder below)
// where a node could not be read; a tree with errors is for printing only.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quire/support/source.h"

namespace quire::ast {

struct Expr;
struct TypeExpr;
struct ModuleRef;
using ExprPtr = std::unique_ptr<Expr>;
using TypePtr = std::unique_ptr<TypeExpr>;

/// An identifier in its canonical spelling: a whole identifier spelled as the
/// ASCII name of a Greek letter is that letter (`theta` → "θ", `Gamma` → "Γ");
/// `ℝ` stays "ℝ" and `R` stays "R" (only an element type reads them as "real").
struct Ident {
  std::string text;
  SourceRange range;
};

// ---------------------------------------------------------------- types

/// One axis of a tensor type: `...`, `model: D`, `D`, `4`, `heads: D / H`.
struct AxisExpr {
  enum class Kind { Rest, Sized } kind = Kind::Sized;
  std::optional<Ident> name;  ///< `model` in `model: D`; none for positional axes
  ExprPtr size;               ///< a size expression (number, dim/const name, + - * /); null for Rest
  SourceRange range;
};

enum class TypeKind {
  Tensor,  ///< elem[axes]: `ℝ[batch: B, model: 4]`, `i32[B]`, `ℝ[]`
  Tuple,   ///< (T1, T2, ...)
  Params,  ///< `params Module` / `params t.Tower` / `params Linear{4, 4}`: a parameter tree
  Scalar,  ///< a host scalar: nat, int, f64, bool
  Key,     ///< `key`: a random key
};

struct TypeExpr {
  TypeKind kind = TypeKind::Tensor;
  SourceRange range;
  std::string elem;              ///< Tensor: "real" (ℝ/R), "i32", "i64", "bool"; Scalar: "nat"/"int"/"f64"/"bool"
  std::vector<AxisExpr> axes;    ///< Tensor
  std::vector<TypePtr> elements; ///< Tuple
  std::vector<Ident> module;     ///< Params: the qualified module name, e.g. {t, Tower}
  std::vector<ExprPtr> module_args;  ///< Params: `{4, 4}` if given
  /// Params of a stack, `params stack{L}(Block)`: the whole reference (then
  /// `module` and `module_args` are empty); null for a plain reference.
  std::unique_ptr<ModuleRef> module_ref;
};

// ---------------------------------------------------------------- expressions

enum class ExprKind {
  Number,     ///< 1, 2.5, 1e-6 (text kept; `is_integer` says whether it had no '.'/exponent)
  Bool,       ///< true / false
  String,     ///< "path" (only in data pipelines and checkpoint clauses)
  Name,       ///< x, θ, eps, t (a module alias), ...
  Member,     ///< base.field: `θ.w`, `t.Tower`, `proj.apply`; field in `name`
  TupleIndex, ///< base.0: tuple element; index in `index`
  Call,       ///< callee(args): callee is children[0]; args in `args`
  Binary,     ///< children[0] op children[1]
  Unary,      ///< op children[0] (only negation)
  Cast,       ///< children[0] as <type name>; the target in `name` ("f32", "bf16", "f32acc", "real", "i32", ...)
  Tuple,      ///< (a, b, ...): at least two elements, or `()` for none
  Block,      ///< { let-lines; final }: `lets` then children[0]
  Numerics,   ///< numerics(high) { block }: `name` = "high"; children[0] is a Block
  Precision,  ///< precision(bf16) { block }: `name` = "bf16"/"f16"/...; children[0] is a Block
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Dot, Lt, Le, Gt, Ge, Eq, Ne };
/// The operator in its canonical spelling: "+", "·", "≤", ...
const char* binary_op_spelling(BinaryOp op);

/// One argument of a call.
///  - Positional: `x`
///  - Axis:       `axis model` (reductions, transpose, concat, split, ...)
///  - Keyword:    `out = f32`, `seed = 3`, `eps = 1e-5`
///  - AxisSize:   `heads: H` (split, merge, random draws' shapes, one_hot)
///  - Rename:     `t → s` (rename; also `t -> s`)
struct Arg {
  enum class Kind { Positional, Axis, Keyword, AxisSize, Rename } kind = Kind::Positional;
  std::optional<Ident> name;  ///< Axis: the axis; Keyword/AxisSize: the key; Rename: the old name
  ExprPtr value;              ///< Positional/Keyword/AxisSize; Rename: the new name (a Name)
  SourceRange range;
};

struct Pattern;
using PatternPtr = std::unique_ptr<Pattern>;

/// A let pattern: a name, `_`, or a tuple of patterns `(x, y)`.
struct Pattern {
  enum class Kind { Name, Wildcard, Tuple } kind = Kind::Name;
  Ident name;
  std::vector<PatternPtr> elements;
  SourceRange range;
};

struct Let {
  PatternPtr pattern;
  TypePtr annotation;  ///< optional `let x : T = e`
  ExprPtr value;
  SourceRange range;
};

struct Expr {
  Expr() = default;
  Expr(Expr&&) = default;
  Expr& operator=(Expr&&) = default;
  /// Frees the subtrees from a worklist: a chain `a + b + …` is as deep as it
  /// is long, and the implicit destructor would recurse once per level.
  ~Expr();

  ExprKind kind = ExprKind::Name;
  SourceRange range;
  std::string name;     ///< Name/Member field/Cast target/Numerics and Precision argument/String contents/Number text
  double number = 0;    ///< Number
  int64_t integer = 0;  ///< Number with is_integer: the exact value (0 after an E0102 overflow)
  bool is_integer = false;  ///< Number written without '.' or exponent
  bool boolean = false; ///< Bool
  int index = 0;        ///< TupleIndex
  BinaryOp binary = BinaryOp::Add;
  std::vector<ExprPtr> children;
  std::vector<Arg> args;   ///< Call
  std::vector<Let> lets;   ///< Block
};

// ---------------------------------------------------------------- declarations

struct FnArg {
  Ident name;
  TypePtr type;
  ExprPtr default_value;  ///< may be null
  SourceRange range;
};

struct FnDecl {
  Ident name;
  /// `fn softmax{N}(…)`: size parameters, inferred at each call from the
  /// arguments' axes (top-level functions only; the parser rejects them in a module).
  std::vector<Ident> size_params;
  std::vector<FnArg> args;
  TypePtr result;
  ExprPtr body;  ///< a Block (let-lines and the final expression)
  SourceRange range;
};

struct ParamDecl {
  Ident name;
  TypePtr type;
  ExprPtr init;     ///< `init = xavier_uniform` / `normal(0.02)` / `uniform(-1, 1)`; null means zeros
  bool numerics_high = false;
  bool frozen = false;
  SourceRange range;
};

/// `Linear{D, D}`, `norm.RMSNorm{D}`, `stack{L}(Block)`.
struct ModuleRef {
  bool is_stack = false;
  ExprPtr stack_count;              ///< stack{L}
  std::unique_ptr<ModuleRef> inner; ///< stack{L}(inner)
  std::vector<Ident> name;          ///< qualified name, e.g. {norm, RMSNorm}
  std::vector<ExprPtr> args;        ///< dimension arguments `{D, D}`
  SourceRange range;
};

struct UseDecl {
  Ident name;
  ModuleRef module;
  SourceRange range;
};

struct ModuleDecl {
  Ident name;
  std::vector<Ident> dims;  ///< `{In Out : dim}`
  std::vector<ParamDecl> params;
  std::vector<UseDecl> uses;
  std::vector<FnDecl> fns;
  SourceRange range;
};

struct ImportDecl {
  std::string path;  ///< as written, relative to the importing file
  Ident alias;
  SourceRange range;
};

struct DimDecl {
  std::vector<Ident> names;  ///< `dim B` / `dim B T`
  SourceRange range;
};

struct ConstDecl {
  Ident name;
  TypePtr type;  ///< a Scalar type: nat, int, f64, bool
  ExprPtr value;
  SourceRange range;
};

/// A `key : type = value` or `key = value` line inside an optimizer or a training run.
struct Field {
  Ident key;
  TypePtr type;  ///< optional
  ExprPtr value; ///< an expression; `cosine(warmup = 20)` is a Call
  SourceRange range;
};

struct OptimizerDecl {
  Ident name;  ///< `optimizer adamw { ... }`: the name is also the algorithm unless `kind = ...`
  std::vector<Field> fields;
  SourceRange range;
};

/// One stage of a data pipeline: `stream "file.npy"`, `shuffle(seed = 3)`, `batch(B = 8)`.
struct PipelineStage {
  Ident name;        ///< "stream", "shuffle", "batch", ...
  std::string path;  ///< stream's file
  std::vector<Arg> args;
  SourceRange range;
};

struct CheckpointClause {
  ExprPtr every;     ///< the N of `every N steps`
  std::string unit;  ///< "steps" (or "epochs")
  std::string dir;   ///< "ckpt/"
  SourceRange range;
};

/// `evaluate held_out every 50 steps on "data/val.npz"`
struct EvaluateClause {
  Ident function;    ///< the function evaluated on the held-out data
  ExprPtr every;     ///< the N of `every N steps`
  std::string unit;  ///< "steps"
  std::string path;  ///< the held-out data, relative to the program's file
  SourceRange range;
};

struct TrainingDecl {
  std::vector<Field> fields;              ///< model, objective, optimizer, epochs, ...
  std::vector<PipelineStage> data;        ///< `data = stream ... |> ...`
  std::optional<SourceRange> data_range;
  std::optional<CheckpointClause> checkpoint;
  std::optional<EvaluateClause> evaluate;
  SourceRange range;
};

enum class ItemKind { Import, Dim, Const, Module, Fn, Optimizer, Training };

/// A top-level item: which list of File holds it, and where in that list.
struct ItemRef {
  ItemKind kind = ItemKind::Import;
  size_t index = 0;
};

/// One parsed .qr file. Top-level items keep their source order in `order`.
struct File {
  FileId file = 0;
  std::vector<ImportDecl> imports;
  std::vector<DimDecl> dims;
  std::vector<ConstDecl> consts;
  std::vector<ModuleDecl> modules;
  std::vector<FnDecl> fns;
  std::vector<OptimizerDecl> optimizers;
  std::vector<TrainingDecl> trainings;
  std::vector<ItemRef> order;  ///< every item above, in source order
};

// ---------------------------------------------------------------- helpers

/// "Number", "Call", ...: for dumps and internal errors.
const char* expr_kind_name(ExprKind kind);

/// The parser's stand-in for an expression it could not read (an empty Name).
inline bool is_placeholder(const Expr& e) { return e.kind == ExprKind::Name && e.name.empty(); }
/// The parser's stand-in for a type it could not read (a Tensor without elem).
inline bool is_placeholder(const TypeExpr& t) { return t.kind == TypeKind::Tensor && t.elem.empty(); }
/// The parser's stand-in for a pattern it could not read (a Name without text).
inline bool is_placeholder(const Pattern& p) { return p.kind == Pattern::Kind::Name && p.name.text.empty(); }

}  // namespace quire::ast
