#pragma once
// The tensor kernels of the reference interpreter. Their results define the
// reference bits of quire, so every kernel is deterministic, single-threaded
// and evaluates exactly the expressions written beside each operation, in the
// stated order: no fast-math, no reassociation, no fused multiply-add (the
// kernel sources switch floating-point contraction off themselves).
//
// The interpreter resolves names, broadcasting and axis choices statically and
// calls these with positional axis indices and explicit alignment maps; the
// kernels do the arithmetic. Failures: RuntimeError for what depends on the
// data or on run-time sizes, KernelMisuse for a call that breaks a stated
// precondition (runtime_error.h).
//
// Families: elementwise.cpp (unary, binary, where, broadcasting), reduce.cpp,
// contract.cpp (contract, dot), restructure.cpp (exact copies, no arithmetic).
//
// NaN: where a result is NaN, the kernels promise "a NaN", not its sign or
// payload, except that Max/Min (binary and reduction) return the first NaN
// operand itself. exp and erf (and so sigmoid, silu and the erf GELU, which are
// written with them) are quire's own (elementary.h), compiled into the
// runtime and pasted into every kernel, so their bits do not depend on a libm;
// log, tanh, sqrt and pow are the C library's (glibc's libm).

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "quire/runtime/float_types.h"
#include "quire/runtime/runtime_error.h"
#include "quire/runtime/tensor.h"

namespace quire::runtime {

// ---------------------------------------------------------------------------
// Broadcasting

/// An operand's alignment with a result of rank R: R entries; entry i is the
/// operand axis that feeds result axis i, or -1 where the operand lacks that
/// axis (it broadcasts). An operand axis of size 1 fed into a result axis of
/// size n > 1 also broadcasts. Every operand axis appears exactly once, except
/// that an axis of size 1 may be absent. A map may permute the operand's axes.
using AxisMap = std::vector<int>;

/// The result shape (rank `rank`) of broadcasting the operands through their
/// maps: result axis i has the size its operands agree on, sizes 1 giving way;
/// an axis no operand feeds has size 1. RuntimeError when two operands feed one
/// result axis with sizes n ≠ m, both ≠ 1, or when an absent axis is not of
/// size 1; KernelMisuse for a malformed map.
Shape broadcast_result_shape(const std::vector<std::pair<const Tensor*, AxisMap>>& operands, int rank);

/// The strides (in elements of `t`) with which `t` is read along each axis of
/// `result`: `t`'s contiguous stride for a mapped axis, 0 for an absent or
/// broadcast one. Requires map.size() == result.size(), with sizes checked as
/// in broadcast_result_shape (RuntimeError / KernelMisuse).
std::vector<int64_t> aligned_strides(const Tensor& t, const AxisMap& map, const Shape& result);

// ---------------------------------------------------------------------------
// Elementwise (elementwise.cpp)

/// Unary operations. The expression beside each is the contract, evaluated
/// left to right in f64 exactly as written (x³ is (x*x)*x):
enum class UnaryOp : uint8_t {
  Neg,       ///< -x (flips the sign: -(+0.0) = -0.0); ints: checked negation
  Abs,       ///< std::fabs(x) (abs(-0.0) = +0.0); ints: checked |x|
  Exp,       ///< elementary_exp(x) (elementary.h: quire's own, not libm's)
  Log,       ///< std::log(x)
  Sqrt,      ///< std::sqrt(x)
  Rsqrt,     ///< 1.0 / std::sqrt(x)  (rsqrt(-0.0) = -inf)
  Tanh,      ///< std::tanh(x)
  Erf,       ///< elementary_erf(x) (elementary.h)
  Sigmoid,   ///< 1.0 / (1.0 + elementary_exp(-x))
  Relu,      ///< isnan(x) ? x : (x > 0.0 ? x : +0.0)  (relu(-0.0) = +0.0); ints: x > 0 ? x : 0
  Gelu,      ///< 0.5 * x * (1.0 + elementary_erf(x * M_SQRT1_2))  (gelu(-inf) = NaN: -inf * 0)
  GeluTanh,  ///< 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))), k = √(2/π) = 0x1.9884533d43651p-1
  Silu,      ///< x * (1.0 / (1.0 + elementary_exp(-x)))  (silu(-inf) = NaN: -inf * 0)
  Log1p,     ///< elementary_log1p(x): libm's log1p(x) (elementary.h)
  Expm1,     ///< elementary_expm1(x): libm's expm1(x) (elementary.h)
  Softplus,  ///< elementary_softplus(x): x > 20 ? x : log1p(elementary_exp(x)), as F.softplus (beta 1, threshold 20)
  Not,       ///< Bool only: 1 - x
};

/// "neg", "gelu_tanh", …: the operation's name in messages.
const char* op_name(UnaryOp op);

/// The kind of `op` applied to `operand`, or nullopt when `op` does not take it.
/// Reals → Real. I32/I64: Neg, Abs, Relu keep the kind (overflow is a
/// RuntimeError); the others convert each element to f64 and give Real.
/// Bool: Not only, giving Bool.
std::optional<ElemKind> unary_result_kind(UnaryOp op, ElemKind operand);

/// y[i] = op(x[i]); y.shape = x.shape, y.kind = unary_result_kind(op, x.kind).
Tensor unary(UnaryOp op, const Tensor& x);

/// The f64 expression of a real unary operation (not Not) on one element:
/// what unary() computes for each element of a real operand.
double apply_unary(UnaryOp op, double x);

/// Binary operations, evaluated as written on the two (promoted) elements a, b:
enum class BinaryOp : uint8_t {
  Add,  ///< a + b
  Sub,  ///< a - b
  Mul,  ///< a * b
  Div,  ///< a / b (IEEE: 1/0 = inf)
  Pow,  ///< std::pow(a, b); when b is a rank-0 tensor equal to 2.0, a * a instead
  Min,  ///< NaN if either is (the first NaN operand); min(-0.0, +0.0) = -0.0; else the smaller
  Max,  ///< NaN if either is (the first NaN operand); max(-0.0, +0.0) = +0.0; else the larger
  Lt,   ///< a < b   (IEEE: any comparison with NaN is false, except Ne)
  Le,   ///< a <= b
  Gt,   ///< a > b
  Ge,   ///< a >= b
  Eq,   ///< a == b
  Ne,   ///< a != b
  And,  ///< Bool only
  Or,   ///< Bool only
};

/// "add", "pow", "lt", …: the operation's name in messages.
const char* op_name(BinaryOp op);

/// The f64 expression of a binary operation on two real elements, as binary()
/// computes it for real operands; a comparison gives 1.0 or 0.0. Pow is
/// std::pow here: the squaring of a literal 2 is the caller's choice.
double apply_binary(BinaryOp op, double a, double b);

/// The kind of `a op b`, or nullopt when `op` does not take those kinds.
/// Operands are promoted first: Real with Real or with an integer → Real (the
/// integer converted to f64, exact for |v| ≤ 2^53, rounded to nearest beyond);
/// I32 with I32 → I32; I32/I64 with I64 → I64. Bool mixes with nothing.
/// Add/Sub/Mul/Min/Max give the promoted kind (integer overflow, including
/// leaving the i32 range, is a RuntimeError). Div and Pow always compute in f64
/// and give Real (true division). Comparisons give Bool and also take two Bools
/// for Eq/Ne. And/Or take two Bools and give Bool.
std::optional<ElemKind> binary_result_kind(BinaryOp op, ElemKind a, ElemKind b);

/// c[i] = a[am(i)] op b[bm(i)] over the broadcast result of rank `result_rank`
/// (shape: broadcast_result_shape({{&a, am}, {&b, bm}}, result_rank)).
Tensor binary(BinaryOp op, const Tensor& a, const AxisMap& am, const Tensor& b, const AxisMap& bm,
              int result_rank);

/// r[i] = cond[cm(i)] ? a[am(i)] : b[bm(i)] over the broadcast result of rank
/// `result_rank`. cond is Bool; a and b are promoted as in binary_result_kind
/// (Bool only with Bool); the chosen element is copied, never recomputed.
Tensor where(const Tensor& cond, const AxisMap& cm, const Tensor& a, const AxisMap& am, const Tensor& b,
             const AxisMap& bm, int result_rank);

// ---------------------------------------------------------------------------
// Reductions (reduce.cpp)

/// Reductions over some axes. For each result element the reduced elements are
/// visited in row-major order of the reduced axes and folded left to right
/// into one f64 accumulator:
enum class ReduceOp : uint8_t {
  Sum,        ///< acc = 0.0; acc = acc + x. Empty: +0.0
  Mean,       ///< Sum / double(count). Empty: NaN
  Max,        ///< acc = first; acc = binary Max(acc, x) (first NaN wins). Empty: RuntimeError
  Min,        ///< acc = first; acc = binary Min(acc, x) (first NaN wins). Empty: RuntimeError
  LogSumExp,  ///< m = Max; m if m is ±inf or NaN, else m + std::log(Σ elementary_exp(x - m)) with the
              ///< Σ folded as in Sum. Empty: -inf
};

/// "sum", "logsumexp", …: the operation's name in messages.
const char* op_name(ReduceOp op);

/// The kind of reducing a tensor of kind `operand`, or nullopt when `op` does not
/// take it: Real → Real; I32/I64: Sum/Max/Min keep the kind (Sum overflow is a
/// RuntimeError), Mean/LogSumExp convert each element to f64 and give Real;
/// Bool: none.
std::optional<ElemKind> reduce_result_kind(ReduceOp op, ElemKind operand);

/// x: shape S; axes: sorted, unique indices into S (all of them for a full
/// reduction, none for a copy). Result: S without the reduced axes. An empty
/// reduced axis is an error for Max/Min only when the result has elements.
///
/// `acc` is the accumulator's type (Real operands only). F64 is the fold as
/// written above. A narrower type rounds every step to it (round_to), which
/// is that type's own arithmetic: Sum `acc = r(acc + x)`; Mean `r(Sum / n)`;
/// LogSumExp `e = r(exp(r(x - m)))`, `acc = r(acc + e)`, `r(m + r(log(acc)))`.
/// Max and Min are exact in any type.
Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, FloatType acc = FloatType::F64);

// ---------------------------------------------------------------------------
// Contraction (contract.cpp)

/// One axis of a contraction's result: a batch axis has both ≥ 0 (the sizes
/// must agree), an outer axis of one operand has the other's entry -1.
struct ResultAxis {
  int a_axis = -1;
  int b_axis = -1;
};

/// a, b: Real. The result's axes are `result` in order; `contracted` lists the
/// (a axis, b axis) pairs summed over. Every axis of a and of b appears exactly
/// once across `result` and `contracted` (KernelMisuse otherwise); paired axes
/// must agree in size (RuntimeError). Each result element is
///   acc = 0.0; for each contracted index tuple in row-major order of the pairs
///   as listed: acc = acc + a[…] * b[…]   (rounded product, then rounded sum)
/// so an empty contraction gives +0.0.
///
/// `acc` is the accumulator's type: F64 as written; a narrower type rounds the
/// product and every partial sum to it, `acc = r(acc + r(a*b))`, which for
/// f32 is exactly f32 arithmetic (a product of two f32 values is exact in f64).
///
/// `step` Fused makes each step one fused multiply-add rounded once to the
/// accumulator, `acc = fma(a, b, acc)`: std::fma for F64, fmaf for F32 (the
/// chain the native backend's sgemm computes). It requires an F64 or F32
/// accumulator and operands that are values of it (KernelMisuse otherwise:
/// the realization asks for it only there, realize/realization.h).
enum class ProductStep : uint8_t { Separate, Fused };
Tensor contract(const Tensor& a, const Tensor& b, const std::vector<ResultAxis>& result,
                const std::vector<std::pair<int, int>>& contracted, FloatType acc = FloatType::F64,
                ProductStep step = ProductStep::Separate);

/// numpy.tensordot(x, w, axes=1): x [..., K] · w [K, ...] → x.shape[:-1] + w.shape[1:],
/// contracting x's last axis with w's first (both of rank ≥ 1, Real).
Tensor dot(const Tensor& x, const Tensor& w, FloatType acc = FloatType::F64,
           ProductStep step = ProductStep::Separate);

/// The arguments of one contract call: its result axes and contracted pairs.
struct ContractPlan {
  std::vector<ResultAxis> result;
  std::vector<std::pair<int, int>> contracted;
};
/// dot(x, w)'s plan for operands of ranks xr and wr.
ContractPlan dot_plan(int xr, int wr);
/// The plans of the two cotangents of y = contract(a, b, fwd): with ct shaped
/// as y, ∂a = contract(ct, b, adjoint_a(fwd, rank a)) and ∂b = contract(a, ct,
/// adjoint_b(fwd, rank b)). Each sums over the axes the other operand (or ct)
/// alone has, in increasing axis order, by contract's own fold.
ContractPlan contract_adjoint_a(const ContractPlan& fwd, int a_rank);
ContractPlan contract_adjoint_b(const ContractPlan& fwd, int b_rank);

// ---------------------------------------------------------------------------
// The linear recurrence (scan.cpp)

/// The axes of a scan: t (the steps) and n (the state) index x's axes, m
/// indexes a's axes; a's axes are x's with m (as long as n) inserted at m.
struct ScanAxes {
  int t = 0, n = 0, m = 0;
};

/// h[p, t, n] = x[p, t, n] + Σ_m a[p, t, n, m] · h[p, t − 1, m] along t, the
/// batch p every other axis (written here with t before n and m last; any
/// order is taken), and h at the first step just x there (a is not read at
/// that step: the state before it is absent, not zero). Each state element is
///   s = r(x[t, n]); for m = 0, 1, …: s = r(s + r(a[t, n, m] · h[t − 1, m]))
/// with r rounding to `acc` (F64: unrounded), and the next step reads s as
/// it is: the accumulator's type carries from step to step.
/// `adjoint` is the recurrence a forward scan's cotangent follows: from the
/// last t down, h[t, n] = x[t, n] + Σ_m a[t + 1, m, n] · h[t + 1, m] (a's
/// first step unread), in the same order and rounding.
Tensor scan(const Tensor& a, const Tensor& x, const ScanAxes& axes, bool adjoint, FloatType acc = FloatType::F64);

/// The cotangent of a scan's a, given λ (the cotangent of its x, shaped as
/// x) and h (its result): a's shape, +0.0 at t = 0, and elsewhere the one
/// product λ[t, n] · h[t − 1, m] (the adjoint's: λ[t − 1, m] · h[t, n]),
/// in f64 (for f32 operands, exact before the store rounds it).
Tensor scan_grad_a(const Tensor& lambda, const Tensor& h, const ScanAxes& axes, bool adjoint);

// ---------------------------------------------------------------------------
// Adjoints (adjoint.cpp): the cotangents of broadcasting, slicing and gathering,
// which scatter or sum rather than copy. Each sum folds in row-major order of
// ct, every step rounded to `acc` (F64: unrounded).

/// The adjoint of broadcasting an operand of `shape` through `map` (as in
/// aligned_strides) to ct's shape: r[j] = Σ ct[i] over the i that read operand
/// element j, starting from +0.0.
Tensor sum_to(const Tensor& ct, const AxisMap& map, const Shape& shape, FloatType acc = FloatType::F64);

/// The adjoint of slice(x, axis, start, stop, step) for x of `shape`: +0.0
/// everywhere except the sliced positions, which hold ct's elements.
Tensor slice_adjoint(const Tensor& ct, const Shape& shape, int axis, int64_t start, int64_t stop, int64_t step);

/// The adjoint of gather(table, axis, ids) for a table of `shape`: +0.0, then
/// for each position of ids in row-major order, r[p, ids[i], q] += ct[p, i, q].
Tensor gather_adjoint(const Tensor& ct, const Shape& shape, int axis, const Tensor& ids, FloatType acc = FloatType::F64);

/// The adjoint of pick(x, axis, ids) for an x of `shape`: +0.0, with
/// r[p, ids[p, q], q] = ct[p, q]. Each position of x receives at most one
/// element of ct, so nothing is summed and nothing rounds.
Tensor pick_adjoint(const Tensor& ct, const Shape& shape, int axis, const Tensor& ids);

// ---------------------------------------------------------------------------
// Restructuring (restructure.cpp): exact copies of elements, no arithmetic.
// Every operation keeps the element kind, except one_hot and cast_kind.

/// x: shape S, perm a permutation of 0..rank-1 → result axis i = S[perm[i]].
Tensor transpose(const Tensor& x, const std::vector<int>& perm);
/// Whether transpose of a real x of `shape` shares x's elements instead of
/// copying them: when the view is dense already (the axes it moves have
/// size 1). A slice and broadcast_to decide so too (copy_view).
bool transpose_shares(const Shape& shape, const std::vector<int>& perm);

/// x: shape S → shape `shape`, the same elements in row-major order.
/// RuntimeError unless the element counts agree.
Tensor reshape(const Tensor& x, Shape shape);

/// parts: ≥ 1 tensors of one kind and one rank, equal on every axis but `axis`
/// (RuntimeError otherwise) → their concatenation along `axis`.
Tensor concat(const std::vector<const Tensor*>& parts, int axis);

/// x: shape S → S with S[axis] replaced by the length of Python's
/// range(start, stop, step) after Python's slice clipping: a negative start or
/// stop counts from the end, then each is clipped to [0, S[axis]]; step ≥ 1.
Tensor slice(const Tensor& x, int axis, int64_t start, int64_t stop, int64_t step);
/// Whether slice of a real x of `shape` shares x's elements: when the view is
/// dense (a range of the leading axis, say).
bool slice_shares(const Shape& shape, int axis, int64_t start, int64_t stop, int64_t step);

/// table: shape T, ids: I32/I64 of shape I → T[:axis] + I + T[axis+1:], where
/// r[p, i, q] = table[p, ids[i], q]. An id outside [0, T[axis]) is a
/// RuntimeError naming the id, its index in ids and the size (the first such
/// id in row-major order).
Tensor gather(const Tensor& table, int axis, const Tensor& ids);

/// x: shape P + [N] + Q (axis = len(P)), ids: I32/I64 of shape P + Q →
/// shape P + Q, where r[p, q] = x[p, ids[p, q], q]: one element picked along
/// `axis` at each position (NumPy's take_along_axis with the axis squeezed).
/// ids of another shape is a misuse; an id outside [0, N) is a RuntimeError
/// naming the id, its index in ids and the size (the first in row-major order).
Tensor pick(const Tensor& x, int axis, const Tensor& ids);

/// ids: I32/I64 of shape I, n ≥ 0 → Real of shape I + [n]: 1.0 at [i, ids[i]],
/// +0.0 elsewhere. An id outside [0, n) is a RuntimeError.
Tensor one_hot(const Tensor& ids, int64_t n);

/// I32 of shape [n]: 0, 1, …, n − 1. n must be in [0, 2^31] (the i32 range
/// holds every position); otherwise a RuntimeError.
Tensor iota(int64_t n);

/// x converted element by element to `kind`, same shape:
///   real → int: truncation toward zero; NaN or a value outside the target
///     range is a RuntimeError.
///   int → real: exact for |v| ≤ 2^53, rounded to nearest-even beyond.
///   I64 → I32: RuntimeError outside the i32 range.
///   → bool: v != 0 (so NaN → true); bool → others: 0/1.
Tensor cast_kind(const Tensor& x, ElemKind kind);

/// x broadcast through `map` (as for AxisMap) to the shape `result`: every
/// element of the result is a copy of the element of x it aligns with.
Tensor broadcast_to(const Tensor& x, const AxisMap& map, const Shape& result);

// ---------------------------------------------------------------------------
// Shared by the kernel families; not part of the interpreter's API.
namespace detail {

/// Visits every multi-index of `shape` in row-major order, keeping the flat
/// offset of that index in each of N strided operands (offset = base +
/// Σ index[d] * strides[d]). The caller calls next() size-1 times after
/// construction; one more wraps back to the start.
template <std::size_t N>
class StridedWalk {
 public:
  StridedWalk(const Shape& shape, std::array<std::vector<int64_t>, N> strides,
              std::array<int64_t, N> base = {})
      : shape_(shape), strides_(std::move(strides)), index_(shape.size(), 0), offset_(base) {}

  const std::array<int64_t, N>& offsets() const { return offset_; }
  int64_t offset(std::size_t k) const { return offset_[k]; }

  void next() {
    for (std::size_t d = shape_.size(); d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) offset_[k] += strides_[k][d];
      if (++index_[d] < shape_[d]) return;
      // Carry: rewind axis d to 0 and advance the next outer axis.
      for (std::size_t k = 0; k < N; ++k) offset_[k] -= strides_[k][d] * shape_[d];
      index_[d] = 0;
    }
  }

 private:
  Shape shape_;
  std::array<std::vector<int64_t>, N> strides_;
  std::vector<int64_t> index_;
  std::array<int64_t, N> offset_;
};

/// Binary Max on f64 (BinaryOp::Max; ReduceOp::Max folds it): the first NaN
/// operand if either is NaN, +0.0 over -0.0, else the larger.
inline double max_real(double a, double b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? b : a;  // equal: only ±0 differ, and +0.0 is the larger
  return a > b ? a : b;
}

/// Binary Min on f64 (BinaryOp::Min; ReduceOp::Min folds it): the first NaN
/// operand if either is NaN, -0.0 under +0.0, else the smaller.
inline double min_real(double a, double b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? a : b;  // equal: only ±0 differ, and -0.0 is the smaller
  return a < b ? a : b;
}

/// "[3, 7]": the multi-index of row-major position `flat` in `shape`, for messages.
std::string index_string(int64_t flat, const Shape& shape);

/// Throws KernelMisuse("internal: <op>: <what>").
[[noreturn]] void misuse(const char* op, const std::string& what);

/// broadcast_result_shape with `op` naming the operation in messages.
Shape broadcast_shape(const char* op, const std::vector<std::pair<const Tensor*, AxisMap>>& operands, int rank);

/// aligned_strides with `op` naming the operation in messages.
std::vector<int64_t> aligned_strides(const char* op, const Tensor& t, const AxisMap& map, const Shape& result);

/// Throws KernelMisuse("internal: <op>: <what>") unless the storage of `t`
/// matches its kind and shape (tensor.h's invariant).
void require_well_formed(const Tensor& t, const char* op);

/// Throws KernelMisuse unless 0 <= axis < rank.
void require_axis(int axis, int64_t rank, const char* op);

/// Integers as the f64 values the real kernels read.
RealStorage to_reals(const std::vector<int64_t>& ints);

/// A strided view of an operand: its shape, its elements' strides in the
/// operand and the offset of its first element.
struct View {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t start = 0;
};
/// The view slice(x, axis, start, stop, step) of an x of shape `x` takes.
View slice_view(const Shape& x, int axis, int64_t start, int64_t stop, int64_t step);

/// Whether a copy of these operands' elements keeps them in their f32 view:
/// every one real and held as f32 (a copy moves numbers; f32 numbers stay
/// f32, half the bytes and no conversion for the compiled kernel that reads
/// the copy). Otherwise copies are made in f64.
bool copies_narrow(std::initializer_list<const Tensor*> sources);

}  // namespace detail

}  // namespace quire::runtime
