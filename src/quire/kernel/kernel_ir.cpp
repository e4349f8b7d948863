#include "quire/kernel/kernel_ir.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "quire/runtime/host_loops.h"

namespace quire::kernel {

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::F64: return "f64";
    case ElemType::F32: return "f32";
    case ElemType::BF16: return "bf16";
    case ElemType::F16: return "f16";
    case ElemType::I32: return "i32";
    case ElemType::I64: return "i64";
    case ElemType::Bool: return "bool";
  }
  return "?";
}

bool held_as_f32(ElemType t) { return t == ElemType::F32 || t == ElemType::BF16 || t == ElemType::F16; }

bool is_float(ElemType t) {
  return t == ElemType::F64 || t == ElemType::F32 || t == ElemType::BF16 || t == ElemType::F16;
}

runtime::FloatType float_of(ElemType t) {
  switch (t) {
    case ElemType::F32: return runtime::FloatType::F32;
    case ElemType::BF16: return runtime::FloatType::BF16;
    case ElemType::F16: return runtime::FloatType::F16;
    default: return runtime::FloatType::F64;
  }
}

ElemType elem_of(runtime::FloatType t) {
  switch (t) {
    case runtime::FloatType::F32: return ElemType::F32;
    case runtime::FloatType::BF16: return ElemType::BF16;
    case runtime::FloatType::F16: return ElemType::F16;
    default: return ElemType::F64;
  }
}

int KernelBuilder::buffer(ElemType type, runtime::Shape shape) {
  k_.buffers.push_back(Buffer{type, std::move(shape)});
  return static_cast<int>(k_.buffers.size()) - 1;
}

int KernelBuilder::add(Expr e) {
  k_.exprs.push_back(std::move(e));
  return static_cast<int>(k_.exprs.size()) - 1;
}

int KernelBuilder::constant(double v) {
  Expr e;
  e.kind = ExprKind::Const;
  e.value = v;
  return add(std::move(e));
}

int KernelBuilder::load(int buffer, Affine index) {
  Expr e;
  e.kind = ExprKind::Load;
  e.buffer = buffer;
  e.index = std::move(index);
  return add(std::move(e));
}

int KernelBuilder::scalar(int s) {
  Expr e;
  e.kind = ExprKind::Scalar;
  e.scalar = s;
  return add(std::move(e));
}

int KernelBuilder::unary(runtime::UnaryOp op, int a) {
  Expr e;
  e.kind = ExprKind::Unary;
  e.unary = op;
  e.a = a;
  return add(std::move(e));
}

int KernelBuilder::binary(runtime::BinaryOp op, int a, int b) {
  Expr e;
  e.kind = ExprKind::Binary;
  e.binary = op;
  e.a = a;
  e.b = b;
  return add(std::move(e));
}

int KernelBuilder::where(int cond, int a, int b) {
  Expr e;
  e.kind = ExprKind::Where;
  e.a = cond;
  e.b = a;
  e.c = b;
  return add(std::move(e));
}

int KernelBuilder::fma(int a, int b, int c, runtime::FloatType t) {
  if (t != runtime::FloatType::F64 && t != runtime::FloatType::F32)
    throw runtime::KernelMisuse(fmt::format("kernel fma: rounds to f64 or f32, not {}", runtime::float_type_name(t)));
  Expr e;
  e.kind = ExprKind::Fma;
  e.type = t;
  e.a = a;
  e.b = b;
  e.c = c;
  return add(std::move(e));
}

int KernelBuilder::round(runtime::FloatType t, int a) {
  if (t == runtime::FloatType::F64) return a;
  // Rounding twice to one type is rounding once.
  const Expr& x = k_.exprs.at(static_cast<size_t>(a));
  if (x.kind == ExprKind::Round && x.type == t) return a;
  Expr e;
  e.kind = ExprKind::Round;
  e.type = t;
  e.a = a;
  return add(std::move(e));
}

int KernelBuilder::finite(int a) {
  Expr e;
  e.kind = ExprKind::Finite;
  e.a = a;
  return add(std::move(e));
}

namespace {

std::string affine_text(const Affine& a) {
  std::string out;
  for (const auto& [var, coeff] : a.terms) {
    if (!out.empty()) out += " + ";
    out += coeff == 1 ? fmt::format("i{}", var) : fmt::format("{}*i{}", coeff, var);
  }
  if (a.offset != 0 || out.empty()) out += out.empty() ? fmt::format("{}", a.offset) : fmt::format(" + {}", a.offset);
  return out;
}

const char* binary_symbol(runtime::BinaryOp op) {
  switch (op) {
    case runtime::BinaryOp::Add: return "+";
    case runtime::BinaryOp::Sub: return "-";
    case runtime::BinaryOp::Mul: return "*";
    case runtime::BinaryOp::Div: return "/";
    case runtime::BinaryOp::Lt: return "<";
    case runtime::BinaryOp::Le: return "<=";
    case runtime::BinaryOp::Gt: return ">";
    case runtime::BinaryOp::Ge: return ">=";
    case runtime::BinaryOp::Eq: return "==";
    case runtime::BinaryOp::Ne: return "!=";
    default: return nullptr;  // printed as a call
  }
}

std::string expr_text(const Kernel& k, int i) {
  const Expr& e = k.exprs.at(static_cast<size_t>(i));
  switch (e.kind) {
    case ExprKind::Const: return fmt::format("{}", e.value);  // the shortest text that reads back to it
    case ExprKind::Load: return fmt::format("%{}[{}]", e.buffer, affine_text(e.index));
    case ExprKind::Scalar: return fmt::format("s{}", e.scalar);
    case ExprKind::Unary: return fmt::format("{}({})", runtime::op_name(e.unary), expr_text(k, e.a));
    case ExprKind::Binary:
      if (const char* sym = binary_symbol(e.binary))
        return fmt::format("({} {} {})", expr_text(k, e.a), sym, expr_text(k, e.b));
      return fmt::format("{}({}, {})", runtime::op_name(e.binary), expr_text(k, e.a), expr_text(k, e.b));
    case ExprKind::Where:
      return fmt::format("where({}, {}, {})", expr_text(k, e.a), expr_text(k, e.b), expr_text(k, e.c));
    case ExprKind::Fma:
      return fmt::format("{}({}, {}, {})", e.type == runtime::FloatType::F32 ? "fmaf" : "fma", expr_text(k, e.a),
                         expr_text(k, e.b), expr_text(k, e.c));
    case ExprKind::Round:
      return fmt::format("{}({})", runtime::float_type_name(e.type), expr_text(k, e.a));
    case ExprKind::Finite: return fmt::format("finite({})", expr_text(k, e.a));
  }
  return "?";
}

void print_stmts(const Kernel& k, const std::vector<Stmt>& body, int depth, std::string& out) {
  const std::string pad(static_cast<size_t>(2 * depth), ' ');
  for (const Stmt& s : body) {
    switch (s.kind) {
      case StmtKind::Loop: {
        std::string marks;
        if (s.independent) marks += " independent";
        if (s.lanes > 1) marks += fmt::format(" lanes {}", s.lanes);
        out += fmt::format("{}for i{} in 0..{}{} {{\n", pad, s.var, s.extent, marks);
        print_stmts(k, s.body, depth + 1, out);
        out += pad + "}\n";
        break;
      }
      case StmtKind::Set: out += fmt::format("{}s{} = {}\n", pad, s.scalar, expr_text(k, s.expr)); break;
      case StmtKind::Store:
        out += fmt::format("{}%{}[{}] = {}\n", pad, s.buffer, affine_text(s.index), expr_text(k, s.expr));
        break;
    }
  }
}

std::string buffer_text(const Kernel& k, int b) {
  const Buffer& buf = k.buffers.at(static_cast<size_t>(b));
  return fmt::format("%{} : {}{}", b, elem_type_name(buf.type), runtime::shape_string(buf.shape));
}

int64_t expr_flops(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Unary:
    case ExprKind::Binary: return 1;
    case ExprKind::Fma: return 2;
    default: return 0;
  }
}

}  // namespace

std::string print_kernel(const Kernel& k) {
  std::string out = fmt::format("kernel {} (", k.title);
  for (int b = 0; b < k.output(); ++b) out += (b > 0 ? ", " : "") + buffer_text(k, b);
  out += fmt::format(") -> {}{} {{\n", buffer_text(k, k.output()), k.split > 1 ? fmt::format(" split {}", k.split) : "");
  if (const std::optional<PackedProduct>& p = k.product) {
    std::string batch;
    for (int64_t e : p->batch) batch += fmt::format("{} × ", e);
    auto read = [](runtime::FloatType t) {
      return t == runtime::FloatType::F64 ? std::string() : fmt::format(" read as {}", runtime::float_type_name(t));
    };
    out += fmt::format(
        "  %{} = packed product {}{} × {} × {}: acc = fmaf(A[i, p], B[p, j], acc), p increasing; "
        "A = %{}{} (rows {}, cols {}), B = %{}{} (rows {}, cols {})\n",
        p->scratch, batch, p->m, p->n, p->k, p->a, read(p->a_read), p->a_rs, p->a_cs, p->b, read(p->b_read), p->b_rs,
        p->b_cs);
  }
  print_stmts(k, k.body, 1, out);
  out += "}\n";
  return out;
}

namespace {

// Element offset of batch index `t` (row-major over `extents`) under `strides`.
int64_t batch_offset(const std::vector<int64_t>& extents, const std::vector<int64_t>& strides, int64_t t) {
  int64_t offset = 0;
  for (size_t d = extents.size(); d-- > 0;) {
    offset += (t % extents[d]) * strides[d];
    t /= extents[d];
  }
  return offset;
}

// One operand of a packed product as f32: where batch `t` of it starts, and
// its row and column strides.
struct Operand {
  const float* values = nullptr;  // in place (with batch_strides), or null: `gathered`
  int64_t rs = 0, cs = 0;
  const std::vector<int64_t>* batch_strides = nullptr;  // null: gathered, batches contiguous
  std::vector<float> gathered;
  int64_t rows = 0, cols = 0;

  const float* batch(const PackedProduct& p, int64_t t) const {
    return batch_strides ? values + batch_offset(p.batch, *batch_strides, t) : gathered.data() + t * rows * cols;
  }
};

// A [batch…, rows, cols] operand of `t`: its f32 view in place when the site
// reads it as held (rounding an f32, bf16 or f16 number to f64 or f32, or to
// its own type, changes nothing), else copied out as f32, rounded to `read`
// first (the values are f32 numbers either way: the site's operands are).
Operand operand(const PackedProduct& p, const runtime::Tensor& t, ElemType held,
                const std::vector<int64_t>& batch_strides, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                runtime::FloatType read) {
  const int64_t batches = runtime::element_count(p.batch);
  int64_t last = 0;  // the largest offset read, checked once against the tensor
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t base = batch_offset(p.batch, batch_strides, b);
    last = std::max(last, base + (rows - 1) * rs + (cols - 1) * cs);
  }
  if (rows > 0 && cols > 0 && (last < 0 || static_cast<size_t>(last) >= t.reals.size()))
    throw runtime::KernelMisuse(fmt::format("internal: packed product: an operand of {} values read at {}", t.reals.size(), last));
  Operand o;
  o.rows = rows;
  o.cols = cols;
  const bool as_held = held_as_f32(held) &&
                       (read == runtime::FloatType::F64 || read == runtime::FloatType::F32 || read == float_of(held));
  if (as_held) {
    o.values = t.reals.narrow();
    o.rs = rs;
    o.cs = cs;
    o.batch_strides = &batch_strides;
    return o;
  }
  o.gathered.resize(static_cast<size_t>(batches * rows * cols));
  // Copied in the order the operand is laid out in: column by column where
  // its columns are contiguous (a transposed operand), else row by row, so
  // that the inner loop reads and writes along one line and vectorizes.
  const bool by_columns = rs == 1 && cs != 1;
  o.rs = by_columns ? 1 : cols;
  o.cs = by_columns ? rows : 1;
  const int64_t lines = by_columns ? cols : rows, along = by_columns ? rows : cols;
  const int64_t line_stride = by_columns ? cs : rs, step = by_columns ? rs : cs;
  float* out = o.gathered.data();
  // Each batch's lines through copy_line(from, to), `along` elements each.
  auto each_line = [&](const auto* v, auto copy_line) {
    for (int64_t b = 0; b < batches; ++b) {
      const auto* base = v + batch_offset(p.batch, batch_strides, b);
      for (int64_t l = 0; l < lines; ++l, out += along) copy_line(base + l * line_stride, out);
    }
  };
  auto gather = [&](const auto* v) {  // from the view the operand has
    each_line(v, [&](const auto* from, float* to) {
      for (int64_t e = 0; e < along; ++e) {
        const double x = from[e * step];
        to[e] = static_cast<float>(read == runtime::FloatType::F64 ? x : runtime::round_to(read, x));
      }
    });
  };
  // f32 values read as bf16 or f16 (f32 masters under a half policy): the
  // rounding on their bit patterns, in the widest vectors where the line is
  // contiguous.
  auto gather_rounded = [&](auto round) {
    each_line(t.reals.narrow(), [&](const float* from, float* to) {
      if (step == 1)
        runtime::round_half_of_f32(read, from, to, static_cast<size_t>(along));
      else
        for (int64_t e = 0; e < along; ++e) to[e] = round(from[e * step]);
    });
  };
  if (t.reals.holds_narrow() && read == runtime::FloatType::BF16) {
    gather_rounded(runtime::round_bf16_of_f32);
  } else if (t.reals.holds_narrow() && read == runtime::FloatType::F16) {
    gather_rounded(runtime::round_f16_of_f32);
  } else if (t.reals.holds_narrow()) {
    gather(t.reals.narrow());
  } else {
    gather(t.reals.data());
  }
  return o;
}

}  // namespace

std::vector<const runtime::Tensor*> with_packed_product(const Kernel& k,
                                                        const std::vector<const runtime::Tensor*>& inputs,
                                                        const PackedMultiply& multiply, runtime::Tensor& scratch) {
  if (!k.product || inputs.at(static_cast<size_t>(k.product->scratch))) return inputs;
  const PackedProduct& p = *k.product;
  auto held = [&](int b) { return k.buffers.at(static_cast<size_t>(b)).type; };
  const Operand a =
      operand(p, *inputs.at(static_cast<size_t>(p.a)), held(p.a), p.a_batch, p.m, p.k, p.a_rs, p.a_cs, p.a_read);
  const Operand b =
      operand(p, *inputs.at(static_cast<size_t>(p.b)), held(p.b), p.b_batch, p.k, p.n, p.b_rs, p.b_cs, p.b_read);
  const int64_t batches = runtime::element_count(p.batch);
  scratch = runtime::Tensor();
  scratch.shape = k.buffers.at(static_cast<size_t>(p.scratch)).shape;
  scratch.reals = runtime::RealStorage::narrow_for_overwrite(static_cast<size_t>(batches * p.m * p.n));
  float* c = scratch.reals.narrow_for_writing();
  for (int64_t t = 0; t < batches; ++t)
    multiply(p.m, p.n, p.k, a.batch(p, t), a.rs, a.cs, b.batch(p, t), b.rs, b.cs, c + t * p.m * p.n);
  std::vector<const runtime::Tensor*> filled = inputs;
  filled[static_cast<size_t>(p.scratch)] = &scratch;
  return filled;
}

Stmt loop_stmt(int var, int64_t extent, std::vector<Stmt> body, bool independent) {
  Stmt s;
  s.kind = StmtKind::Loop;
  s.var = var;
  s.extent = extent;
  s.body = std::move(body);
  s.independent = independent;
  return s;
}

Stmt set_stmt(int scalar, int expr) {
  Stmt s;
  s.kind = StmtKind::Set;
  s.scalar = scalar;
  s.expr = expr;
  return s;
}

Stmt store_stmt(int buffer, Affine index, int expr) {
  Stmt s;
  s.kind = StmtKind::Store;
  s.buffer = buffer;
  s.index = std::move(index);
  s.expr = expr;
  return s;
}

bool holds_loop(const std::vector<Stmt>& body) {
  return std::any_of(body.begin(), body.end(), [](const Stmt& s) { return s.kind == StmtKind::Loop; });
}

std::set<int> scalars_set_in(const std::vector<Stmt>& body) {
  std::set<int> out;
  for (const Stmt& s : body) {
    if (s.kind == StmtKind::Set) out.insert(s.scalar);
    if (s.kind == StmtKind::Loop) out.merge(scalars_set_in(s.body));
  }
  return out;
}

bool reads_output(const Kernel& k) {
  return std::any_of(k.exprs.begin(), k.exprs.end(),
                     [&](const Expr& e) { return e.kind == ExprKind::Load && e.buffer == k.output(); });
}

bool stores_product_as_is(const Kernel& k) {
  if (!k.product || k.buffers.empty()) return false;
  const Buffer& out = k.buffers.back();
  const int scratch = k.product->scratch;
  if (scratch < 0 || scratch >= k.output() || out.type != ElemType::F32 ||
      out.shape != k.buffers[static_cast<size_t>(scratch)].shape)
    return false;
  // The loops, outermost first, each the only statement of the one around it.
  std::vector<const Stmt*> loops;
  const std::vector<Stmt>* body = &k.body;
  while (body->size() == 1 && body->front().kind == StmtKind::Loop) {
    loops.push_back(&body->front());
    body = &body->front().body;
  }
  if (loops.size() != out.shape.size()) return false;
  // Each loop runs over its axis; an element's place is its row-major offset.
  std::map<int, int64_t> stride;
  int64_t step = 1;
  for (size_t d = loops.size(); d-- > 0;) {
    if (loops[d]->extent != out.shape[d] || stride.count(loops[d]->var)) return false;
    stride[loops[d]->var] = step;
    step *= loops[d]->extent;
  }
  auto row_major = [&](const Affine& a) {
    if (a.offset != 0) return false;
    std::set<int> seen;
    for (const auto& [var, coeff] : a.terms)
      if (!stride.count(var) || stride.at(var) != coeff || !seen.insert(var).second) return false;
    // A loop of one iteration may be left out of the index.
    return std::all_of(loops.begin(), loops.end(), [&](const Stmt* l) { return l->extent == 1 || seen.count(l->var); });
  };
  // The innermost body: assignments, then the one store, whose value is the
  // scratch's element (through scalars set before it, under f32 roundings).
  std::map<int, size_t> set_at;  // scalar → its assignment's place in the body
  size_t place = body->size();   // of the statement being resolved: the store
  const Stmt* store = nullptr;
  for (size_t i = 0; i < body->size(); ++i) {
    const Stmt& st = (*body)[i];
    if (store || st.kind == StmtKind::Loop) return false;
    if (st.kind == StmtKind::Set && !set_at.emplace(st.scalar, i).second) return false;
    if (st.kind == StmtKind::Store) {
      store = &st;
      place = i;
    }
  }
  if (!store || store->buffer != k.output() || !row_major(store->index)) return false;
  int e = store->expr;
  for (size_t hops = 0; hops <= k.exprs.size() + body->size(); ++hops) {
    if (e < 0 || e >= static_cast<int>(k.exprs.size())) return false;
    const Expr& x = k.exprs[static_cast<size_t>(e)];
    if (x.kind == ExprKind::Scalar) {
      const auto it = set_at.find(x.scalar);
      if (it == set_at.end() || it->second >= place) return false;
      place = it->second;
      e = (*body)[place].expr;
    } else if (x.kind == ExprKind::Round && x.type == runtime::FloatType::F32) {
      e = x.a;
    } else {
      return x.kind == ExprKind::Load && x.buffer == scratch && x.index.offset == store->index.offset &&
             x.index.terms == store->index.terms;
    }
  }
  return false;
}

int64_t count_in_expr(const Kernel& k, int e, const std::function<int64_t(const Expr&)>& per_node) {
  const Expr& x = k.exprs.at(static_cast<size_t>(e));
  int64_t n = per_node(x);
  for (int o : {x.a, x.b, x.c})
    if (o >= 0) n += count_in_expr(k, o, per_node);
  return n;
}

int64_t count_executed(const Kernel& k, const std::vector<Stmt>& body,
                       const std::function<int64_t(const Stmt&)>& per_statement) {
  int64_t total = 0;
  for (const Stmt& s : body)
    total += s.kind == StmtKind::Loop ? s.extent * count_executed(k, s.body, per_statement) : per_statement(s);
  return total;
}

int64_t kernel_flops(const Kernel& k) {
  return count_executed(k, k.body, [&](const Stmt& s) { return count_in_expr(k, s.expr, expr_flops); });
}

const Stmt* split_loop(const Kernel& k) {
  if (k.body.size() != 1 || k.body[0].kind != StmtKind::Loop || !k.body[0].independent) return nullptr;
  return &k.body[0];
}

}  // namespace quire::kernel
