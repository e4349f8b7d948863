#pragma once
// The kernel IR: the loop nests the backends run (DESIGN.md §4,
// docs/backends.md#kernels). One kernel computes one launch of a realized
// function: a fusion group (element-wise steps, possibly headed by a
// product) or a reduction, at concrete shapes and realized types.
//
// A kernel names its buffers (inputs first, the output last, each with its
// element type and shape), a tree of statements and an arena of expressions.
// Statements are loops (`for i0 in 0..N`, marked where the loop's iterations
// are independent and may be divided among worker threads, and with the
// vector lanes the layout gives it), assignments to scalars (`s0 = …`) and
// stores (`%2[…] = …`). An index is affine in the loop variables and flat:
// the element offset into the row-major buffer.
// The output starts as zeros, and a kernel may read it back (accumulate in
// it). A kernel that never reads its output stores every element of it (the
// lowering's kernels all do), so the runners hand such a kernel a buffer that
// is not zero-filled first (output_for).
//
// Semantics (the kernel interpreter, kernel_interpreter.h, defines them and
// the native backend reproduces them): every expression is an f64 value.
// A load converts the element to f64 exactly (a bool is 0 or 1); a store
// converts back, exactly, because every value stored in a narrower buffer has
// been rounded to that type by an explicit `round` first. Unary and binary
// operations are runtime::apply_unary / apply_binary (the reference
// interpreter's expressions); `fma` is the fused multiply-add, rounded once
// (to f64, or to f32 as `fmaf`, whose operands are f32 values), and appears
// only where a kernel asks for it. Nothing is reassociated:
// reductions run in the loop order the kernel states.

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quire/runtime/float_types.h"
#include "quire/runtime/kernels.h"
#include "quire/runtime/tensor.h"

namespace quire::kernel {

/// A buffer's element type: a float type or an integer or boolean kind.
enum class ElemType : uint8_t { F64, F32, BF16, F16, I32, I64, Bool };
const char* elem_type_name(ElemType t);  ///< "f32", "bool"
bool is_float(ElemType t);
/// The float type of a float ElemType (F64 for the others).
runtime::FloatType float_of(ElemType t);
ElemType elem_of(runtime::FloatType t);  ///< F64, F32, BF16, F16 (the fp8 types have no buffers)
/// Whether a compiled kernel holds a buffer of this type as f32 values: the
/// narrow float types (f32, bf16, f16), whose numbers f32 represents exactly
/// (runtime::RealStorage's f32 view). f64 is held as f64.
bool held_as_f32(ElemType t);

struct Buffer {
  ElemType type = ElemType::F64;
  runtime::Shape shape;
};

/// offset + Σ coeff · i_var: an element offset into a row-major buffer.
struct Affine {
  int64_t offset = 0;
  std::vector<std::pair<int, int64_t>> terms;  ///< (loop variable, coefficient), coefficient ≠ 0
};

enum class ExprKind : uint8_t {
  Const,   ///< value
  Load,    ///< buffer[index]
  Scalar,  ///< the scalar `scalar`
  Unary,   ///< unary(a)
  Binary,  ///< binary(a, b)
  Where,   ///< a ≠ 0 ? b : c
  Fma,     ///< a · b + c, rounded once to `type`: F64 (fma) or F32 (fmaf, on operands that are f32 values)
  Round,   ///< a rounded to `type` (runtime::round_to)
  Finite,  ///< 1 if a is finite, else 0
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  double value = 0;
  int buffer = -1;
  Affine index;
  int scalar = -1;
  runtime::UnaryOp unary = runtime::UnaryOp::Neg;
  runtime::BinaryOp binary = runtime::BinaryOp::Add;
  runtime::FloatType type = runtime::FloatType::F64;
  int a = -1, b = -1, c = -1;  ///< operands, indices into Kernel::exprs
};

enum class StmtKind : uint8_t { Loop, Set, Store };

struct Stmt {
  StmtKind kind = StmtKind::Loop;
  // Loop: for var in 0..extent { body }
  int var = -1;
  int64_t extent = 0;
  std::vector<Stmt> body;
  bool independent = false;  ///< no iteration reads what another writes: it may be split over workers
  int lanes = 1;             ///< vector lanes the layout gives the loop (1: scalar)
  // Set: scalar `scalar` = exprs[expr]; Store: buffers[buffer][index] = exprs[expr]
  int scalar = -1;
  int buffer = -1;
  Affine index;
  int expr = -1;
};

/// A product computed before the nest runs, by a packed matrix multiply
/// (register tiles of C, k-blocks, operands packed into panels: the native
/// backend's sgemm, runtime/gemm.h), into the f32 buffer `scratch` that the
/// nest then reads in place of the product's fold. For every batch index
/// and every C[i, j] it is the chain
///     acc = +0; for p = 0 .. k−1, increasing: acc = fmaf(A[i, p], B[p, j], acc)
/// — the fold a `--product-step fma` f32 site states — so packing, tiling
/// and blocking change no bit. Operands are read as the site reads them
/// (rounded to `a_read` / `b_read` first where it reads them down).
struct PackedProduct {
  int a = -1, b = -1;      ///< input buffers of the operands
  runtime::FloatType a_read = runtime::FloatType::F64, b_read = runtime::FloatType::F64;  ///< F64: as held
  int64_t m = 1, n = 1, k = 0;
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0;  ///< A[i, p] = a[i·a_rs + p·a_cs], B[p, j] = b[p·b_rs + j·b_cs]
  std::vector<int64_t> batch;                      ///< batch extents, outermost first (C is [batch…, m, n], row-major)
  std::vector<int64_t> a_batch, b_batch;           ///< each batch axis's stride in a and in b
  int scratch = -1;                                ///< the input buffer C is written to (f32)
};

/// One batch's C = A·B on f32 operands, A[i, p] = a[i·a_rs + p·a_cs] (m × k)
/// and B[p, j] = b[p·b_rs + j·b_cs] (k × n), into the row-major m × n C
/// (overwritten), by the chain PackedProduct states: native::sgemm_reference
/// (the definition) or native::sgemm (the packed kernels).
using PackedMultiply = std::function<void(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                                          const float* b, int64_t b_rs, int64_t b_cs, float* c)>;

struct Kernel {
  std::string title;             ///< "fused 2 steps", "mean axis model", "dot+add"
  std::vector<Buffer> buffers;   ///< the inputs, then the output (the last)
  std::vector<Expr> exprs;
  std::vector<Stmt> body;
  int loop_vars = 0;
  int scalars = 0;
  int split = 1;  ///< threads the layout divides the split loop over (1: none; layout.h)
  /// Set when the layout packs the kernel's product (layout.h): the runner
  /// computes it into its scratch input before the nest runs.
  std::optional<PackedProduct> product;

  int output() const { return static_cast<int>(buffers.size()) - 1; }
};

/// `inputs` with the scratch of `k`'s packed product filled, when `k` has one
/// and the scratch is null: each batch multiplied by `multiply`, and C held
/// in `scratch` at the scratch buffer's shape, as f32 alone. An operand the
/// site reads as held (an f32 view that reading rounds nowhere) is read in
/// place, at its strides; another is first gathered into f32, rounded as the
/// site reads it. Otherwise `inputs` unchanged.
std::vector<const runtime::Tensor*> with_packed_product(const Kernel& k,
                                                        const std::vector<const runtime::Tensor*>& inputs,
                                                        const PackedMultiply& multiply, runtime::Tensor& scratch);

/// Whether any expression of `k` loads from its output buffer.
bool reads_output(const Kernel& k);

/// Whether `k`'s nest stores its packed product as it is: an f32 output of
/// the scratch's shape, each element written once, at its row-major place,
/// with the scratch's element there (rounded to f32, which changes no f32
/// value). The output is then the scratch itself, and a runner may skip the
/// nest (a copy of every element).
bool stores_product_as_is(const Kernel& k);
/// Whether `body` holds a loop among its own statements.
bool holds_loop(const std::vector<Stmt>& body);
/// The scalars `body` sets, its loops' bodies included.
std::set<int> scalars_set_in(const std::vector<Stmt>& body);

/// A statement: `for var in 0..extent { body }`, `scalar = expr`, and
/// `buffer[index] = expr` (exprs are indices into the kernel's exprs).
Stmt loop_stmt(int var, int64_t extent, std::vector<Stmt> body, bool independent = false);
Stmt set_stmt(int scalar, int expr);
Stmt store_stmt(int buffer, Affine index, int expr);

/// Builds a kernel's expressions and statements.
class KernelBuilder {
 public:
  explicit KernelBuilder(std::string title) { k_.title = std::move(title); }
  int buffer(ElemType type, runtime::Shape shape);
  int constant(double v);
  int load(int buffer, Affine index);
  int scalar(int s);
  int unary(runtime::UnaryOp op, int a);
  int binary(runtime::BinaryOp op, int a, int b);
  int where(int cond, int a, int b);
  /// a · b + c rounded once to `t` (F64 or F32; KernelMisuse otherwise).
  int fma(int a, int b, int c, runtime::FloatType t = runtime::FloatType::F64);
  /// a rounded to t; F64 returns a itself.
  int round(runtime::FloatType t, int a);
  int finite(int a);
  int new_scalar() { return k_.scalars++; }
  int new_loop_var() { return k_.loop_vars++; }

  Kernel& kernel() { return k_; }
  Kernel take() { return std::move(k_); }

 private:
  int add(Expr e);
  Kernel k_;
};

/// The loop a backend may divide among worker threads: the kernel's only
/// top-level statement, when it is an independent loop; nullptr otherwise.
/// Its iterations write disjoint elements and read nothing another writes,
/// so any division gives the same bits.
const Stmt* split_loop(const Kernel& k);

/// The kernel in the IR's text form, as `quire dump --stage kernel` prints it:
/// `kernel <title> (%0 : f32[4, 4], …) -> %2 : f32[4, 4] { … }`. Two kernels
/// with the same text are the same nest.
std::string print_kernel(const Kernel& k);

/// Σ of `per_node` over the expression tree rooted at `e`.
int64_t count_in_expr(const Kernel& k, int e, const std::function<int64_t(const Expr&)>& per_node);
/// Σ of `per_statement` over every assignment and store one run of `body`
/// executes (a loop's body counted once per iteration).
int64_t count_executed(const Kernel& k, const std::vector<Stmt>& body,
                       const std::function<int64_t(const Stmt&)>& per_statement);

/// The number of floating-point operations one run of the kernel performs
/// (loads, stores, rounding and selects excluded), for the plan and reports.
int64_t kernel_flops(const Kernel& k);

}  // namespace quire::kernel
