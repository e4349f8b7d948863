// Elementwise kernels: unary, binary and where over broadcast operands, and
// the broadcasting machinery (alignment maps) the other families share.
// Requires: operands well formed (tensor.h's invariant), kinds the operation
// takes (checked, KernelMisuse). Each result element is computed from its own
// operand elements alone, by the expression its op documents in kernels.h.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

#include "quire/runtime/elementary.h"
#include "quire/runtime/kernels.h"

// The reference bits forbid fused multiply-add (gelu_tanh's x + 0.044715*x³
// must round twice). GCC contracts by default in C++ wherever the target has
// FMA (-ffp-contract=fast) and ignores the standard pragma; Clang honours it.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {

namespace detail {

void misuse(const char* op, const std::string& what) {
  throw KernelMisuse(fmt::format("internal: {}: {}", op, what));
}

std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) break;
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_string(index);
}

void require_well_formed(const Tensor& t, const char* op) {
  for (int64_t d : t.shape)
    if (d < 0) misuse(op, fmt::format("operand of shape {} has a negative size", shape_string(t.shape)));
  const size_t held = t.is_real() ? t.reals.size() : t.ints.size();
  if (held != static_cast<size_t>(t.size()))
    misuse(op, fmt::format("{} operand of shape {} holds {} values, not {}", elem_kind_name(t.kind),
                           shape_string(t.shape), held, t.size()));
}

void require_axis(int axis, int64_t rank, const char* op) {
  if (axis < 0 || axis >= rank) misuse(op, fmt::format("axis {} of a rank-{} operand", axis, rank));
}

RealStorage to_reals(const std::vector<int64_t>& ints) {
  RealStorage reals = RealStorage::for_overwrite(ints.size());
  double* r = reals.data();
  for (size_t i = 0; i < ints.size(); ++i) r[i] = static_cast<double>(ints[i]);
  return reals;
}

namespace {

// The structural half of a map's contract (its length, its entries in range,
// no axis twice) is the interpreter's; the sizes behind it are the data's.
void check_map(const char* op, size_t operand, const Tensor& t, const AxisMap& map, size_t rank) {
  if (map.size() != rank)
    misuse(op, fmt::format("map of operand {} has {} entries for a result of rank {}", operand, map.size(), rank));
  std::vector<bool> fed(t.shape.size(), false);
  for (int axis : map) {
    if (axis == -1) continue;
    if (axis < -1 || axis >= static_cast<int>(t.rank()))
      misuse(op, fmt::format("map of operand {} names axis {} of a rank-{} operand", operand, axis, t.rank()));
    if (fed[axis]) misuse(op, fmt::format("map of operand {} names axis {} twice", operand, axis));
    fed[axis] = true;
  }
  for (size_t axis = 0; axis < fed.size(); ++axis)
    if (!fed[axis] && t.shape[axis] != 1)
      throw RuntimeError(fmt::format("{}: axis {} of operand {} has size {} but feeds no result axis", op, axis,
                                     operand, t.shape[axis]));
}

}  // namespace

Shape broadcast_shape(const char* op, const std::vector<std::pair<const Tensor*, AxisMap>>& operands, int rank) {
  if (rank < 0) misuse(op, fmt::format("result rank {}", rank));
  for (size_t k = 0; k < operands.size(); ++k) {
    require_well_formed(*operands[k].first, op);
    check_map(op, k, *operands[k].first, operands[k].second, static_cast<size_t>(rank));
  }
  Shape shape(static_cast<size_t>(rank), 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t setter = 0;  // the operand that gave result axis i its size, once it is not 1
    for (size_t k = 0; k < operands.size(); ++k) {
      const int axis = operands[k].second[i];
      if (axis < 0) continue;
      const int64_t size = operands[k].first->shape[axis];
      if (size == 1) continue;
      if (shape[i] == 1) {
        shape[i] = size;
        setter = k;
      } else if (size != shape[i]) {
        throw RuntimeError(fmt::format("{}: result axis {} has size {} in operand {} but {} in operand {}", op, i,
                                       shape[i], setter, size, k));
      }
    }
  }
  return shape;
}

std::vector<int64_t> aligned_strides(const char* op, const Tensor& t, const AxisMap& map, const Shape& result) {
  require_well_formed(t, op);
  check_map(op, 0, t, map, result.size());
  const std::vector<int64_t> own = contiguous_strides(t.shape);
  std::vector<int64_t> strides(result.size(), 0);
  for (size_t i = 0; i < result.size(); ++i) {
    const int axis = map[i];
    if (axis < 0 || t.shape[axis] == 1) continue;  // broadcast: every result index reads the one element
    if (t.shape[axis] != result[i])
      throw RuntimeError(fmt::format("{}: axis {} of the operand has size {} but result axis {} has size {}", op,
                                     axis, t.shape[axis], i, result[i]));
    strides[i] = own[axis];
  }
  return strides;
}

}  // namespace detail

Shape broadcast_result_shape(const std::vector<std::pair<const Tensor*, AxisMap>>& operands, int rank) {
  return detail::broadcast_shape("broadcast", operands, rank);
}

std::vector<int64_t> aligned_strides(const Tensor& t, const AxisMap& map, const Shape& result) {
  return detail::aligned_strides("broadcast", t, map, result);
}

namespace {

using detail::misuse;
using detail::StridedWalk;

// Integer results are held in int64_t; an I32 result must also fit 32 bits.
bool fits(ElemKind kind, int64_t v) {
  return kind != ElemKind::I32 ||
         (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max());
}

// The f64 view of an operand: its own reals, or its integers converted into `scratch`.
const RealStorage& real_values(const Tensor& t, RealStorage& scratch) {
  if (t.is_real()) return t.reals;
  scratch = detail::to_reals(t.ints);
  return scratch;
}

// Every caller sets every element, so a real result is not zero-filled first.
Tensor empty_result(ElemKind kind, Shape shape) {
  return kind == ElemKind::Real ? Tensor::real_for_overwrite(std::move(shape))
                                : Tensor::integer(kind, std::move(shape));
}

// ---------------------------------------------------------------------------
// Unary

constexpr double kSqrt2OverPi = 0x1.9884533d43651p-1;  // √(2/π) rounded to nearest f64
constexpr double kGeluTanhCubic = 0.044715;

double sigmoid(double x) { return 1.0 / (1.0 + elementary_exp(-x)); }

// One row per UnaryOp, in enum order: name, then the f64 expression (kernels.h states each).
struct UnaryRow {
  UnaryOp op;
  const char* name;
  double (*real)(double);
};

constexpr UnaryRow kUnaryTable[] = {
    {UnaryOp::Neg, "neg", [](double x) { return -x; }},
    {UnaryOp::Abs, "abs", [](double x) { return std::fabs(x); }},
    {UnaryOp::Exp, "exp", elementary_exp},
    {UnaryOp::Log, "log", [](double x) { return std::log(x); }},
    {UnaryOp::Sqrt, "sqrt", [](double x) { return std::sqrt(x); }},
    {UnaryOp::Rsqrt, "rsqrt", [](double x) { return 1.0 / std::sqrt(x); }},
    {UnaryOp::Tanh, "tanh", [](double x) { return std::tanh(x); }},
    {UnaryOp::Erf, "erf", elementary_erf},
    {UnaryOp::Sigmoid, "sigmoid", sigmoid},
    // NaN > 0 is false, so NaN needs its own test to propagate; -0.0 falls to +0.0.
    {UnaryOp::Relu, "relu", [](double x) { return std::isnan(x) ? x : (x > 0.0 ? x : 0.0); }},
    {UnaryOp::Gelu, "gelu", [](double x) { return 0.5 * x * (1.0 + elementary_erf(x * M_SQRT1_2)); }},
    {UnaryOp::GeluTanh, "gelu_tanh",
     [](double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x))); }},
    {UnaryOp::Silu, "silu", [](double x) { return x * sigmoid(x); }},
    {UnaryOp::Log1p, "log1p", elementary_log1p},
    {UnaryOp::Expm1, "expm1", elementary_expm1},
    {UnaryOp::Softplus, "softplus", elementary_softplus},
    {UnaryOp::Not, "not", nullptr},  // Bool only
};

const UnaryRow& row(UnaryOp op) { return kUnaryTable[static_cast<size_t>(op)]; }

constexpr bool unary_table_in_enum_order() {
  for (size_t i = 0; i < std::size(kUnaryTable); ++i)
    if (static_cast<size_t>(kUnaryTable[i].op) != i) return false;
  return std::size(kUnaryTable) == static_cast<size_t>(UnaryOp::Not) + 1;
}
static_assert(unary_table_in_enum_order(), "kUnaryTable must list every UnaryOp in enum order");

// ---------------------------------------------------------------------------
// Binary

struct BinaryRow {
  BinaryOp op;
  const char* name;
  const char* symbol;  // for overflow messages
};

constexpr BinaryRow kBinaryTable[] = {
    {BinaryOp::Add, "add", "+"}, {BinaryOp::Sub, "sub", "-"}, {BinaryOp::Mul, "mul", "*"},
    {BinaryOp::Div, "div", "/"}, {BinaryOp::Pow, "pow", "**"}, {BinaryOp::Min, "min", "min"},
    {BinaryOp::Max, "max", "max"}, {BinaryOp::Lt, "lt", "<"},   {BinaryOp::Le, "le", "<="},
    {BinaryOp::Gt, "gt", ">"},     {BinaryOp::Ge, "ge", ">="},  {BinaryOp::Eq, "eq", "=="},
    {BinaryOp::Ne, "ne", "!="},    {BinaryOp::And, "and", "and"}, {BinaryOp::Or, "or", "or"},
};

const BinaryRow& row(BinaryOp op) { return kBinaryTable[static_cast<size_t>(op)]; }

constexpr bool binary_table_in_enum_order() {
  for (size_t i = 0; i < std::size(kBinaryTable); ++i)
    if (static_cast<size_t>(kBinaryTable[i].op) != i) return false;
  return std::size(kBinaryTable) == static_cast<size_t>(BinaryOp::Or) + 1;
}
static_assert(binary_table_in_enum_order(), "kBinaryTable must list every BinaryOp in enum order");

// The common kind two operands are read in: Bool only with Bool, Real absorbs integers.
std::optional<ElemKind> promote(ElemKind a, ElemKind b) {
  if (a == ElemKind::Bool || b == ElemKind::Bool)
    return a == b ? std::optional<ElemKind>(ElemKind::Bool) : std::nullopt;
  if (a == ElemKind::Real || b == ElemKind::Real) return ElemKind::Real;
  if (a == ElemKind::I64 || b == ElemKind::I64) return ElemKind::I64;
  return ElemKind::I32;
}

// Walks the broadcast result in row-major order, handing f the two operand
// elements and the result position.
template <class A, class B, class Out, class F>
void map2(const Shape& shape, const A& a, std::vector<int64_t> as, const B& b, std::vector<int64_t> bs,
          Out& out_storage, F f) {
  StridedWalk<2> walk(shape, {std::move(as), std::move(bs)});
  const size_t n = out_storage.size();
  auto* out = out_storage.data();
  for (size_t i = 0; i < n; ++i, walk.next()) out[i] = f(a[walk.offset(0)], b[walk.offset(1)], i);
}

void binary_reals(BinaryOp op, const Tensor& a, std::vector<int64_t> as, const Tensor& b, std::vector<int64_t> bs,
                  Tensor& out) {
  RealStorage a_scratch, b_scratch;
  const RealStorage& av = real_values(a, a_scratch);
  const RealStorage& bv = real_values(b, b_scratch);
  const Shape& s = out.shape;
  auto real = [&](auto f) {
    map2(s, av, std::move(as), bv, std::move(bs), out.reals, [&](double x, double y, size_t) { return f(x, y); });
  };
  auto test = [&](auto f) {
    map2(s, av, std::move(as), bv, std::move(bs), out.ints,
         [&](double x, double y, size_t) { return static_cast<int64_t>(f(x, y)); });
  };
  switch (op) {
    case BinaryOp::Add: return real([](double x, double y) { return x + y; });
    case BinaryOp::Sub: return real([](double x, double y) { return x - y; });
    case BinaryOp::Mul: return real([](double x, double y) { return x * y; });
    case BinaryOp::Div: return real([](double x, double y) { return x / y; });
    case BinaryOp::Pow:
      // Squaring is the common case (variance, L2) and x*x is exact-rounded,
      // where libm's pow need not be; only a literal scalar exponent qualifies
      // so that the choice never depends on the data.
      if (b.rank() == 0 && bv[0] == 2.0) return real([](double x, double) { return x * x; });
      return real([](double x, double y) { return std::pow(x, y); });
    case BinaryOp::Min: return real(detail::min_real);
    case BinaryOp::Max: return real(detail::max_real);
    case BinaryOp::Lt: return test([](double x, double y) { return x < y; });
    case BinaryOp::Le: return test([](double x, double y) { return x <= y; });
    case BinaryOp::Gt: return test([](double x, double y) { return x > y; });
    case BinaryOp::Ge: return test([](double x, double y) { return x >= y; });
    case BinaryOp::Eq: return test([](double x, double y) { return x == y; });
    case BinaryOp::Ne: return test([](double x, double y) { return x != y; });
    case BinaryOp::And:
    case BinaryOp::Or: break;
  }
  misuse(row(op).name, "reached the real path with a Bool-only op");
}

void binary_ints(BinaryOp op, const Tensor& a, std::vector<int64_t> as, const Tensor& b, std::vector<int64_t> bs,
                 Tensor& out) {
  const ElemKind kind = out.kind;
  const Shape& s = out.shape;
  auto run = [&](auto f) { map2(s, a.ints, std::move(as), b.ints, std::move(bs), out.ints, f); };
  // Arithmetic that leaves int64, or i32 for an I32 result, is the data's fault.
  auto checked = [&](auto f) {
    run([&](int64_t x, int64_t y, size_t i) {
      int64_t r = 0;
      if (f(x, y, &r) || !fits(kind, r))
        throw RuntimeError(fmt::format("{}: {} {} {} at {} overflows {}", row(op).name, x, row(op).symbol, y,
                                       detail::index_string(static_cast<int64_t>(i), s), elem_kind_name(kind)));
      return r;
    });
  };
  auto plain = [&](auto f) { run([&](int64_t x, int64_t y, size_t) -> int64_t { return f(x, y); }); };
  switch (op) {
    case BinaryOp::Add: return checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); });
    case BinaryOp::Sub: return checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); });
    case BinaryOp::Mul: return checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); });
    case BinaryOp::Min: return plain([](int64_t x, int64_t y) { return y < x ? y : x; });
    case BinaryOp::Max: return plain([](int64_t x, int64_t y) { return y > x ? y : x; });
    case BinaryOp::Lt: return plain([](int64_t x, int64_t y) { return x < y; });
    case BinaryOp::Le: return plain([](int64_t x, int64_t y) { return x <= y; });
    case BinaryOp::Gt: return plain([](int64_t x, int64_t y) { return x > y; });
    case BinaryOp::Ge: return plain([](int64_t x, int64_t y) { return x >= y; });
    case BinaryOp::Eq: return plain([](int64_t x, int64_t y) { return x == y; });
    case BinaryOp::Ne: return plain([](int64_t x, int64_t y) { return x != y; });
    case BinaryOp::And: return plain([](int64_t x, int64_t y) { return x != 0 && y != 0; });
    case BinaryOp::Or: return plain([](int64_t x, int64_t y) { return x != 0 || y != 0; });
    case BinaryOp::Div:
    case BinaryOp::Pow: break;
  }
  misuse(row(op).name, "reached the integer path with a real-only op");
}

}  // namespace

const char* op_name(UnaryOp op) { return row(op).name; }

double apply_unary(UnaryOp op, double x) {
  if (op == UnaryOp::Not) return x == 0.0 ? 1.0 : 0.0;
  return row(op).real(x);
}

double apply_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Min: return detail::min_real(a, b);
    case BinaryOp::Max: return detail::max_real(a, b);
    case BinaryOp::Lt: return a < b ? 1.0 : 0.0;
    case BinaryOp::Le: return a <= b ? 1.0 : 0.0;
    case BinaryOp::Gt: return a > b ? 1.0 : 0.0;
    case BinaryOp::Ge: return a >= b ? 1.0 : 0.0;
    case BinaryOp::Eq: return a == b ? 1.0 : 0.0;
    case BinaryOp::Ne: return a != b ? 1.0 : 0.0;
    case BinaryOp::And: return a != 0.0 && b != 0.0 ? 1.0 : 0.0;
    case BinaryOp::Or: return a != 0.0 || b != 0.0 ? 1.0 : 0.0;
  }
  misuse("binary", fmt::format("operation {}", static_cast<int>(op)));
}
const char* op_name(BinaryOp op) { return row(op).name; }

std::optional<ElemKind> unary_result_kind(UnaryOp op, ElemKind operand) {
  if (operand == ElemKind::Bool) return op == UnaryOp::Not ? std::optional<ElemKind>(ElemKind::Bool) : std::nullopt;
  if (op == UnaryOp::Not) return std::nullopt;
  if (operand == ElemKind::Real) return ElemKind::Real;
  if (op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu) return operand;
  return ElemKind::Real;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = op_name(op);
  detail::require_well_formed(x, name);
  const std::optional<ElemKind> kind = unary_result_kind(op, x.kind);
  if (!kind) misuse(name, fmt::format("does not take a {} operand", elem_kind_name(x.kind)));
  Tensor out = empty_result(*kind, x.shape);
  const size_t n = static_cast<size_t>(x.size());
  if (op == UnaryOp::Not) {
    for (size_t i = 0; i < n; ++i) out.ints[i] = x.ints[i] == 0 ? 1 : 0;
  } else if (*kind == ElemKind::Real) {
    RealStorage scratch;
    const double* xv = real_values(x, scratch).data();
    double (*f)(double) = row(op).real;
    double* o = out.reals.data();
    for (size_t i = 0; i < n; ++i) o[i] = f(xv[i]);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = x.ints[i];
      int64_t r = v;
      bool overflow = false;
      if (op == UnaryOp::Neg || (op == UnaryOp::Abs && v < 0)) overflow = __builtin_sub_overflow(int64_t{0}, v, &r);
      if (op == UnaryOp::Relu) r = v > 0 ? v : 0;
      if (overflow || !fits(*kind, r))
        throw RuntimeError(fmt::format("{}: {} at {} overflows {}", name, v,
                                       detail::index_string(static_cast<int64_t>(i), x.shape), elem_kind_name(*kind)));
      out.ints[i] = r;
    }
  }
  return out;
}

std::optional<ElemKind> binary_result_kind(BinaryOp op, ElemKind a, ElemKind b) {
  const std::optional<ElemKind> common = promote(a, b);
  if (!common) return std::nullopt;
  const bool boolean = *common == ElemKind::Bool;
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Min:
    case BinaryOp::Max: return boolean ? std::nullopt : common;
    case BinaryOp::Div:
    case BinaryOp::Pow: return boolean ? std::nullopt : std::optional<ElemKind>(ElemKind::Real);
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge: return boolean ? std::nullopt : std::optional<ElemKind>(ElemKind::Bool);
    case BinaryOp::Eq:
    case BinaryOp::Ne: return ElemKind::Bool;
    case BinaryOp::And:
    case BinaryOp::Or: return boolean ? common : std::nullopt;
  }
  return std::nullopt;
}

Tensor binary(BinaryOp op, const Tensor& a, const AxisMap& am, const Tensor& b, const AxisMap& bm, int result_rank) {
  const char* name = op_name(op);
  detail::require_well_formed(a, name);
  detail::require_well_formed(b, name);
  const std::optional<ElemKind> kind = binary_result_kind(op, a.kind, b.kind);
  if (!kind)
    misuse(name, fmt::format("does not take {} and {} operands", elem_kind_name(a.kind), elem_kind_name(b.kind)));
  Shape shape = detail::broadcast_shape(name, {{&a, am}, {&b, bm}}, result_rank);
  std::vector<int64_t> as = detail::aligned_strides(name, a, am, shape);
  std::vector<int64_t> bs = detail::aligned_strides(name, b, bm, shape);
  Tensor out = empty_result(*kind, std::move(shape));
  // Div and Pow compute in f64 even on integers; comparisons of reals give Bool.
  const bool in_reals = a.is_real() || b.is_real() || op == BinaryOp::Div || op == BinaryOp::Pow;
  if (in_reals)
    binary_reals(op, a, std::move(as), b, std::move(bs), out);
  else
    binary_ints(op, a, std::move(as), b, std::move(bs), out);
  return out;
}

Tensor where(const Tensor& cond, const AxisMap& cm, const Tensor& a, const AxisMap& am, const Tensor& b,
             const AxisMap& bm, int result_rank) {
  const char* name = "where";
  for (const Tensor* t : {&cond, &a, &b}) detail::require_well_formed(*t, name);
  if (cond.kind != ElemKind::Bool)
    misuse(name, fmt::format("condition is {}, not bool", elem_kind_name(cond.kind)));
  const std::optional<ElemKind> kind = promote(a.kind, b.kind);
  if (!kind)
    misuse(name, fmt::format("cannot choose between {} and {}", elem_kind_name(a.kind), elem_kind_name(b.kind)));
  Shape shape = detail::broadcast_shape(name, {{&cond, cm}, {&a, am}, {&b, bm}}, result_rank);
  StridedWalk<3> walk(shape, {detail::aligned_strides(name, cond, cm, shape), detail::aligned_strides(name, a, am, shape),
                              detail::aligned_strides(name, b, bm, shape)});
  Tensor out = empty_result(*kind, std::move(shape));
  const size_t n = static_cast<size_t>(out.size());
  if (*kind == ElemKind::Real) {
    RealStorage a_scratch, b_scratch;
    const double* av = real_values(a, a_scratch).data();
    const double* bv = real_values(b, b_scratch).data();
    double* o = out.reals.data();
    for (size_t i = 0; i < n; ++i, walk.next())
      o[i] = cond.ints[walk.offset(0)] != 0 ? av[walk.offset(1)] : bv[walk.offset(2)];
  } else {
    for (size_t i = 0; i < n; ++i, walk.next())
      out.ints[i] = cond.ints[walk.offset(0)] != 0 ? a.ints[walk.offset(1)] : b.ints[walk.offset(2)];
  }
  return out;
}

}  // namespace quire::runtime
