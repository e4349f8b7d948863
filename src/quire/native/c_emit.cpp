#include "quire/native/c_emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "quire/kernel/exp_erf_pairs.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/kernel_walk.h"
#include "quire/runtime/elementary.h"
#include "quire/runtime/float_types.h"
#include "quire/runtime/runtime_error.h"

namespace quire::native {

namespace {

using kernel::ElemType;
using kernel::Expr;
using kernel::ExprKind;
using kernel::Kernel;
using kernel::Stmt;
using kernel::StmtKind;

/// A double as C source that reads back as exactly that double: a hex float
/// for finite values (no decimal round trip to trust), the bit pattern for
/// infinities and NaNs (keeping a NaN's sign and payload).
std::string c_double(double v) {
  // quire_elem_from_bits is elementary.inc's, which every kernel's C includes.
  if (!std::isfinite(v)) return fmt::format("quire_elem_from_bits(0x{:016x}u)", std::bit_cast<uint64_t>(v));
  char text[64];
  std::snprintf(text, sizeof text, "%a", v);
  return text;
}

// The C helper of each operation is `quire_` + the runtime's name of it, so
// the op tables of runtime/kernels.h need no second copy here.
std::string unary_function(runtime::UnaryOp op) { return std::string("quire_") + runtime::op_name(op); }
std::string binary_function(runtime::BinaryOp op) { return std::string("quire_") + runtime::op_name(op); }
std::string round_function(runtime::FloatType t) { return std::string("quire_round_") + runtime::float_type_name(t); }

// Each helper below is the C twin of the runtime's f64 expression named in
// its comment: same formula, same association, same constants. Changing one
// side without the other breaks CEmit's bit-for-bit tests.
constexpr const char* kHelpers = R"(
/* runtime::round_to for a format of `precision` significant bits whose
   normal numbers start at 2^min_exp, with `spacing` = 2^(min_exp - precision
   + 1) its subnormals' step: ties to even in ONE step from the double (never
   through float). A normal result keeps the top precision - 1 mantissa bits
   of the double, rounded on its bit pattern; the carry of a round-up moves
   into the exponent as it should, up to the pattern of infinity. Below 2^min_exp
   the step is fixed: |x| / spacing is exact (a power of two, the quotient a
   normal double) and rounds to an integer below 2^precision as round_to's
   round_half_even does. */
static inline double quire_round_narrow(double x, int precision, int min_exp, double spacing, double largest,
                                        int has_infinities) {
  {
    /* The common case first, with no other branch: a normal result. */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint64_t magnitude = bits & UINT64_C(0x7FFFFFFFFFFFFFFF);
    const int exponent = (int)(magnitude >> 52) - 1023;
    const int dropped = 52 - (precision - 1);
    const uint64_t rounded = (magnitude + (UINT64_C(1) << (dropped - 1)) - 1 + ((magnitude >> dropped) & 1)) &
                             ~((UINT64_C(1) << dropped) - 1);
    double r;
    memcpy(&r, &rounded, sizeof r);
    if (exponent >= min_exp && exponent < 1024 && r <= largest) return copysign(r, x); /* not NaN or ∞ */
  }
  if (isnan(x)) return copysign(NAN, x);
  if (isinf(x)) return has_infinities ? x : copysign(largest, x);
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint64_t sign = bits & UINT64_C(0x8000000000000000);
  uint64_t magnitude = bits ^ sign;
  const int exponent = (int)(magnitude >> 52) - 1023; /* -1023 for zero and the double's subnormals */
  double r;
  if (exponent >= min_exp) {
    const int dropped = 52 - (precision - 1);
    const uint64_t half = UINT64_C(1) << (dropped - 1);
    const uint64_t kept_lsb = (magnitude >> dropped) & 1;
    magnitude = (magnitude + half - 1 + kept_lsb) & ~((UINT64_C(1) << dropped) - 1);
    memcpy(&r, &magnitude, sizeof r);
  } else {
    const double scaled = fabs(x) / spacing;
    double whole = floor(scaled);
    const double frac = scaled - whole;
    if (frac > 0.5 || (frac == 0.5 && fmod(whole, 2.0) == 1.0)) whole += 1.0;
    r = whole * spacing;
  }
  if (r > largest) return has_infinities ? copysign(INFINITY, x) : copysign(largest, x);
  return copysign(r, x);
}

static inline double quire_round_f64(double x) { return isnan(x) ? copysign(NAN, x) : x; }
static inline double quire_round_f32(double x) { return (double)(float)x; }
/* quire_round_bf16 of an f32 value f (a bf16 site's f32 rounding is
   done): bf16 keeps f32's exponent range, so ties to even on the f32 bit
   pattern is the same rounding, subnormals, the carry into infinity and
   NaN's canonical quiet pattern with f's sign included. Branch-free on
   float lanes, so a loop around it vectorizes, as quire_round_narrow's
   cases do not. */
static inline float quire_round_bf16_of_f32f(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  const uint32_t rounded = (b + UINT32_C(0x7FFF) + ((b >> 16) & 1u)) & UINT32_C(0xFFFF0000);
  const uint32_t nan = (b & UINT32_C(0x80000000)) | UINT32_C(0x7FC00000);
  const uint32_t r = f != f ? nan : rounded;
  float o;
  memcpy(&o, &r, sizeof o);
  return o;
}
/* The same on the double that holds the f32 value. */
static inline double quire_round_bf16_of_f32(double x) { return (double)quire_round_bf16_of_f32f((float)x); }
/* runtime::round_f16_of_f32: f16 from an f32 value f, ties to even on its
   f32 bit pattern as bf16's is, branch-free so that a loop around it
   vectorizes (the compiler's _Float16 conversion left GCC 12's loops scalar:
   the f16 GELU gradient ran at a third of bf16's): 13 bits dropped in f16's
   normal range, the carry moving into the exponent; past the largest finite
   f16 (65504), infinity; below 2^-14, the multiples of 2^-24 that its
   subnormals are, by the sum with 0.5 (whose ulp is 2^-24; the sum rounds
   ties to even, and taking 0.5 back is exact); a NaN the quiet NaN of its
   sign, as round_to makes it. */
static inline float quire_round_f16_of_f32f(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  const uint32_t sign = b & UINT32_C(0x80000000);
  const uint32_t mag = b ^ sign;
  const uint32_t rounded = (mag + UINT32_C(0xFFF) + ((mag >> 13) & 1u)) & UINT32_C(0xFFFFE000);
  const uint32_t normal = rounded > UINT32_C(0x477FE000) ? UINT32_C(0x7F800000) : rounded;
  float a;
  memcpy(&a, &mag, sizeof a);
  const float small = (a + 0.5f) - 0.5f;
  uint32_t sub;
  memcpy(&sub, &small, sizeof sub);
  const uint32_t m = mag < UINT32_C(0x38800000) ? sub : normal;
  const uint32_t r = mag > UINT32_C(0x7F800000) ? (sign | UINT32_C(0x7FC00000)) : (sign | m);
  float o;
  memcpy(&o, &r, sizeof o);
  return o;
}
static inline double quire_round_f16_of_f32(double x) { return (double)quire_round_f16_of_f32f((float)x); }

/* runtime::apply_unary */
static inline double quire_neg(double x) { return -x; }
static inline double quire_abs(double x) { return fabs(x); }
static inline double quire_log(double x) { return log(x); }
static inline double quire_sqrt(double x) { return sqrt(x); }
static inline double quire_rsqrt(double x) { return 1.0 / sqrt(x); }
static inline double quire_tanh(double x) { return tanh(x); }
static inline double quire_sigmoid(double x) { return 1.0 / (1.0 + quire_exp(-x)); }
/* NaN > 0 is false, so NaN needs its own test to propagate; -0.0 falls to +0.0. */
static inline double quire_relu(double x) { return isnan(x) ? x : (x > 0.0 ? x : 0.0); }
static inline double quire_gelu(double x) { return 0.5 * x * (1.0 + quire_erf(x * quire_sqrt1_2)); }
static inline double quire_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(quire_sqrt2_over_pi * (x + quire_gelu_tanh_cubic * x * x * x)));
}
static inline double quire_silu(double x) { return x * quire_sigmoid(x); }
static inline double quire_not(double x) { return x == 0.0 ? 1.0 : 0.0; }

/* runtime::apply_binary; min and max are runtime::detail::min_real and max_real */
static inline double quire_add(double a, double b) { return a + b; }
static inline double quire_sub(double a, double b) { return a - b; }
static inline double quire_mul(double a, double b) { return a * b; }
static inline double quire_div(double a, double b) { return a / b; }
static inline double quire_pow(double a, double b) { return pow(a, b); }
static inline double quire_min(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline double quire_max(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline double quire_lt(double a, double b) { return a < b ? 1.0 : 0.0; }
static inline double quire_le(double a, double b) { return a <= b ? 1.0 : 0.0; }
static inline double quire_gt(double a, double b) { return a > b ? 1.0 : 0.0; }
static inline double quire_ge(double a, double b) { return a >= b ? 1.0 : 0.0; }
static inline double quire_eq(double a, double b) { return a == b ? 1.0 : 0.0; }
static inline double quire_ne(double a, double b) { return a != b ? 1.0 : 0.0; }
static inline double quire_and(double a, double b) { return a != 0.0 && b != 0.0 ? 1.0 : 0.0; }
static inline double quire_or(double a, double b) { return a != 0.0 || b != 0.0 ? 1.0 : 0.0; }
)";

/// Writes one kernel's function. Every expression becomes a `const double t<n>`
/// temporary, once per statement however often the statement's tree refers
/// to it; a `where` evaluates only its chosen side (as the interpreter does),
/// so temporaries first needed inside a side stay inside it.
class FunctionWriter {
 public:
  explicit FunctionWriter(const Kernel& k)
      : k_(k), in_scope_(static_cast<size_t>(k.loop_vars), false), f32_scalar_(f32_scalars(k)) {}

  std::string write(const std::string& symbol) {
    out_ += fmt::format("void {}(const void* const* inputs, void* output, int64_t lo, int64_t hi) {{\n", symbol);
    split_ = kernel::split_loop(k_);
    // [lo, hi) is the part of the split loop this call runs (kernel_ir.h's split_loop).
    if (!split_) line(1, "(void)lo; (void)hi;");
    for (int b = 0; b < static_cast<int>(k_.buffers.size()); ++b) {
      const char* type = held_in_ints(b) ? "int64_t" : held_in_floats(b) ? "float" : "double";
      if (b == k_.output())
        line(1, fmt::format("{0}* const b{1} = ({0}*)output;", type, b));
      else
        line(1, fmt::format("const {0}* const b{1} = (const {0}*)inputs[{1}];", type, b));
    }
    // An input the nest may not read: a packed product's operand (the
    // product reads it, before the nest), an expand's shape operand.
    for (int b = 0; b < k_.output(); ++b) line(1, fmt::format("(void)b{};", b));
    // run_kernel starts every scalar at 0.
    for (int s = 0; s < k_.scalars; ++s) line(1, fmt::format("{} s{} = 0.0;", scalar_type(s), s));
    statements(k_.body, 1);
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  bool held_in_ints(int b) const {
    return kernel::held_kind(k_.buffers[static_cast<size_t>(b)].type) != runtime::ElemKind::Real;
  }
  // The narrow float types are held as f32 (kernel::held_as_f32): a load
  // widens exactly, and a store narrows exactly, its value having been rounded
  // to the buffer's type by the kernel (kernel_ir.h).
  bool held_in_floats(int b) const { return kernel::held_as_f32(k_.buffers[static_cast<size_t>(b)].type); }

  // The iterations a `#pragma omp simd` runs at once. The layout's lanes are
  // f64 lanes (the arithmetic is f64), but GCC sizes its vectors by the
  // narrowest type a loop loads: with f32 buffers, simdlen(lanes) gave 8
  // floats in a ymm and the f64 arithmetic in two ymm even on AVX-512; twice
  // the lanes fill a zmm with floats and run the f64 in whole zmm (the GELU's
  // erf: 11.6 → 6.5 ns an element). Bits do not depend on it: each lane is
  // one iteration.
  int simdlen(int lanes) const {
    for (size_t b = 0; b < k_.buffers.size(); ++b)
      if (held_in_floats(static_cast<int>(b))) return 2 * lanes;
    return lanes;
  }

  void line(int depth, const std::string& text) {
    out_.append(static_cast<size_t>(depth) * 2, ' ');
    out_ += text;
    out_ += '\n';
  }

  [[noreturn]] void malformed(const std::string& what) const {
    throw runtime::KernelMisuse(fmt::format("internal: kernel {}: {}", k_.title, what));
  }

  int checked_buffer(int b) const {
    if (b < 0 || b >= static_cast<int>(k_.buffers.size())) malformed(fmt::format("no buffer %{}", b));
    return b;
  }

  void statements(const std::vector<Stmt>& body, int depth) {
    for (const Stmt& s : body) {
      memo_.clear();
      switch (s.kind) {
        case StmtKind::Loop: {
          // A variable bound twice on one path would make the inner loop
          // reset the outer one's counter, which the interpreter does and C's
          // scoping would not: refuse it rather than diverge.
          if (s.var < 0 || s.var >= k_.loop_vars || in_scope_[static_cast<size_t>(s.var)])
            malformed(fmt::format("loop variable i{} is not free here", s.var));
          if (s.lanes > 1 && !tile_ && kernel::holds_loop(s.body)) {
            lane_tiles(s, depth);
            break;
          }
          if (s.lanes > 1 && !tile_ && !fast_ && holds_fast_site(s.body)) {
            fast_lanes(s, depth);
            break;
          }
          if (s.lanes > 1) simd_pragma(s, depth, "");
          if (&s == split_)
            line(depth, fmt::format("for (int64_t i{0} = lo; i{0} < hi; ++i{0}) {{", s.var));
          else
            line(depth, fmt::format("for (int64_t i{0} = 0; i{0} < {1}; ++i{0}) {{", s.var, s.extent));
          in_scope_[static_cast<size_t>(s.var)] = true;
          statements(s.body, depth + 1);
          in_scope_[static_cast<size_t>(s.var)] = false;
          line(depth, "}");
          break;
        }
        case StmtKind::Set: {
          if (s.scalar < 0 || s.scalar >= k_.scalars) malformed(fmt::format("no scalar s{}", s.scalar));
          if (tile_ && !in_lane_) {
            lane_statement(s, depth);
            break;
          }
          const std::string v = value(s.expr, depth);
          line(depth, fmt::format("{} = {}{};", scalar_name(s.scalar), float_scalar(s.scalar) ? "(float)" : "", v));
          break;
        }
        case StmtKind::Store: {
          if (tile_ && !in_lane_) {
            lane_statement(s, depth);
            break;
          }
          const int b = checked_buffer(s.buffer);
          if (b != k_.output()) malformed(fmt::format("a store into input %{}", b));
          const std::string v = value(s.expr, depth);
          const std::string at = fmt::format("b{}[{}]", b, index(s.index));
          // The conversions of run_kernel's store.
          if (held_in_floats(b))
            line(depth, fmt::format("{} = (float){};", at, v));
          else if (!held_in_ints(b))
            line(depth, fmt::format("{} = {};", at, v));
          else if (k_.buffers[static_cast<size_t>(b)].type == ElemType::Bool)
            line(depth, fmt::format("{} = {} != 0.0 ? 1 : 0;", at, v));
          else
            line(depth, fmt::format("{} = (int64_t){};", at, v));
          break;
        }
      }
    }
  }

  /// Whether expression i's value is an f32 value, given the scalars marked
  /// as holding f32 values alone (`f32`): a constant that f32 holds, a load
  /// of a buffer held as f32, a marked scalar, an f32 fma, a rounding to f32
  /// or a narrower type, or a `where` between two such.
  static bool holds_f32_value(const Kernel& k, const std::vector<bool>& f32, int i) {
    if (i < 0 || i >= static_cast<int>(k.exprs.size())) return false;
    const Expr& e = k.exprs[static_cast<size_t>(i)];
    switch (e.kind) {
      case ExprKind::Const:
        return runtime::round_to(runtime::FloatType::F32, e.value) == e.value;  // false for NaN
      case ExprKind::Load:
        return e.buffer >= 0 && e.buffer < static_cast<int>(k.buffers.size()) &&
               kernel::held_as_f32(k.buffers[static_cast<size_t>(e.buffer)].type);
      case ExprKind::Scalar:
        return e.scalar >= 0 && e.scalar < k.scalars && f32[static_cast<size_t>(e.scalar)];
      case ExprKind::Where:
        return holds_f32_value(k, f32, e.b) && holds_f32_value(k, f32, e.c);
      case ExprKind::Fma:
        return e.type == runtime::FloatType::F32;
      case ExprKind::Round:  // every narrower type's numbers are f32's
        return e.type != runtime::FloatType::F64;
      case ExprKind::Unary:
      case ExprKind::Binary:
      case ExprKind::Finite:
        return false;
    }
    return false;
  }

  /// Which scalars hold f32 values alone: every assignment to them (and
  /// their starting 0) is an f32 value, exactly. Such a scalar is declared
  /// `float`: the conversions to and from double are exact, so the bits are
  /// the kernel interpreter's, and the compiler, which may then narrow a
  /// double operation on two floats rounded back to float into the float
  /// operation (the same value: f64 holds more than twice f32's digits), runs
  /// a fold over f32 values in float registers and float arrays. (A column
  /// sum of a 256 × 256 f32 matrix, in a lane tile whose accumulators are
  /// arrays: 0.27 → 0.035 ns an element here, docs/performance.md.)
  static std::vector<bool> f32_scalars(const Kernel& k) {
    const std::vector<std::pair<int, int>> sets = kernel::assignments(k.body);
    std::vector<bool> f32(static_cast<size_t>(std::max(k.scalars, 0)), true);
    // The marks only fall, so the loop below ends.
    auto holds_f32 = [&](int i) { return holds_f32_value(k, f32, i); };
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& [scalar, expr] : sets)
        if (scalar >= 0 && scalar < k.scalars && f32[static_cast<size_t>(scalar)] && !holds_f32(expr)) {
          f32[static_cast<size_t>(scalar)] = false;
          changed = true;
        }
    }
    return f32;
  }

  /// (scalar, expression) of every assignment among `body`'s statements,
  /// loops included, in order.
  /// Whether scalar `scalar` is a C float (f32_scalars).
  bool float_scalar(int scalar) const {
    return scalar >= 0 && scalar < k_.scalars && f32_scalar_[static_cast<size_t>(scalar)];
  }
  const char* scalar_type(int scalar) const { return float_scalar(scalar) ? "float" : "double"; }

  /// A scalar's C name: in a lane tile, a scalar the tile's iterations set is
  /// one element per lane.
  std::string scalar_name(int scalar) const {
    if (tile_ && tile_->own.count(scalar)) return fmt::format("s{}_v[i{}_l]", scalar, tile_->var);
    return fmt::format("s{}", scalar);
  }

  /// A loop with lanes whose body holds loops (a fold inside each element):
  /// the vectorizer does not widen a loop around another, so the loop is cut
  /// into tiles of 4 × `lanes` iterations whose scalars are arrays, and
  /// the lanes move inward, around each assignment and store, with the inner
  /// loops run once for the whole tile. Each lane is still one iteration,
  /// running the same operations in the same order on its own scalars, so
  /// the bits are the loop's; the iterations past the last whole tile run as
  /// the plain loop.
  void lane_tiles(const Stmt& s, int depth) {
    // A tile of 4 vectors: each step of an inner loop loads what the lanes
    // share once for 4 vectors of work, and the tile's scalars still fit in
    // registers (at 256³, tiles of 1, 2, 4 and 8 vectors ran an f32 product
    // in 7.4, 6.0, 4.1 and 5.1 ms here: docs/performance.md).
    // A loop shorter than 4 vectors takes the whole vectors it has: a tile
    // wider than the loop would leave every iteration to the scalar loop
    // after it (a head's 16 columns under lanes 8 ran scalar so).
    const int w = s.lanes * static_cast<int>(std::clamp<int64_t>(s.extent / s.lanes, 1, kTileVectors));
    const std::string begin = &s == split_ ? "lo" : "0";
    const std::string end = &s == split_ ? "hi" : fmt::format("{}", s.extent);
    Tile tile{s.var, s.lanes, w, kernel::scalars_set_in(s.body)};
    line(depth, fmt::format("int64_t i{}_t = {};", s.var, begin));
    line(depth, fmt::format("for (; i{0}_t + {1} <= {2}; i{0}_t += {1}) {{", s.var, w, end));
    for (int sc : tile.own) line(depth + 1, fmt::format("{} s{}_v[{}] = {{0}};", scalar_type(sc), sc, w));
    tile_ = tile;
    in_scope_[static_cast<size_t>(s.var)] = true;
    statements(s.body, depth + 1);
    tile_.reset();
    line(depth, "}");
    line(depth, fmt::format("for (int64_t i{0} = i{0}_t; i{0} < {1}; ++i{0}) {{", s.var, end));
    statements(s.body, depth + 1);
    in_scope_[static_cast<size_t>(s.var)] = false;
    line(depth, "}");
  }

  /// One assignment or store of a lane tile, for every lane. Where the lanes
  /// read (or write) memory with a stride, vectors would need a gather for
  /// each access, and GCC leaves such a loop scalar with the tile's scalars
  /// in memory (a load, an add and a store for every element of a row sum).
  /// Unrolled whole instead, the lanes' scalars are registers: RMSNorm's row
  /// sums, 256 × 256 f32, ran at 0.56 ns an element as a simd loop and
  /// 0.15 unrolled (docs/performance.md). Each lane still runs its own
  /// iteration's operations in order, so the bits are the same.
  void lane_statement(const Stmt& s, int depth) {
    if (strided_across_lanes(s))
      line(depth, fmt::format("#pragma GCC unroll {}", tile_->width));
    else
      line(depth, fmt::format("#pragma omp simd simdlen({})", simdlen(tile_->lanes)));
    line(depth, fmt::format("for (int64_t i{0}_l = 0; i{0}_l < {1}; ++i{0}_l) {{", tile_->var, tile_->width));
    // (void): a statement that sets a scalar alone reads no index.
    line(depth + 1, fmt::format("const int64_t i{0} = i{0}_t + i{0}_l; (void)i{0};", tile_->var));
    in_lane_ = true;
    statements(std::vector<Stmt>{s}, depth + 1);
    in_lane_ = false;
    line(depth, "}");
  }

  /// Whether statement s, in the current lane tile, reads or writes memory
  /// at a stride other than one element from lane to lane.
  bool strided_across_lanes(const Stmt& s) const {
    auto strided = [&](const kernel::Affine& a) {
      return std::any_of(a.terms.begin(), a.terms.end(),
                         [&](const auto& term) { return term.first == tile_->var && term.second != 1; });
    };
    if (s.kind == StmtKind::Store && strided(s.index)) return true;
    const std::vector<int> read = kernel::reached(k_, {s.expr});
    return std::any_of(read.begin(), read.end(), [&](int i) {
      const Expr& e = k_.exprs[static_cast<size_t>(i)];
      return e.kind == ExprKind::Load && strided(e.index);
    });
  }

  bool valid_expr(int e) const { return e >= 0 && e < static_cast<int>(k_.exprs.size()); }

  /// The expressions in the trees of `pending` (the roots), each once,
  /// invalid operands left out.
  /// The expressions `body`'s statements compute, loops included.
  /// op when e is round_f32(op(a)) for a unary op, else nullptr.
  /// A rounding to f32 of erf or gelu: elementary_fast.inc has a shortcut
  /// to its bits.
  bool is_fast_site(const Expr& e) const {
    const Expr* op = kernel::rounded_f32_unary(k_, e);
    return op && (op->unary == runtime::UnaryOp::Erf || op->unary == runtime::UnaryOp::Gelu);
  }

  /// Whether expression i's value is an f32 value, the scalars' marks final.
  bool holds_f32_value(int i) const { return holds_f32_value(k_, f32_scalar_, i); }

  /// Whether a statement of `body` computes a fast site.
  bool holds_fast_site(const std::vector<Stmt>& body) const {
    const std::vector<int> computed = kernel::reached(k_, kernel::statement_exprs(body));
    return std::any_of(computed.begin(), computed.end(),
                       [&](int i) { return is_fast_site(k_.exprs[static_cast<size_t>(i)]); });
  }

  /// A loop with lanes whose iterations round erf or gelu to f32: cut into
  /// blocks of kFastBlock iterations, each run first with the fast functions
  /// of elementary_fast.inc, which OR into `quire_doubt` whether any result
  /// might round differently from the reference's, and then, only in a block
  /// in doubt, again with the reference's functions. Each iteration writes
  /// only its own elements from its own scalars, so running a block twice
  /// leaves the second run's values, and every value kept is the
  /// reference's. QUIRE_FAST_F32 (the prelude's) is 0 where the compiler has
  /// no fused multiply-add instruction: every block then runs the reference.
  void fast_lanes(const Stmt& s, int depth) {
    const std::string begin = &s == split_ ? "lo" : "0";
    const std::string end = &s == split_ ? "hi" : fmt::format("{}", s.extent);
    const std::string var = fmt::format("i{}", s.var);
    line(depth, fmt::format("for (int64_t {0}_b = {1}; {0}_b < {2}; {0}_b += {3}) {{", var, begin, end, kFastBlock));
    line(depth + 1, fmt::format("const int64_t {0}_e = {1} - {0}_b < {2} ? {1} : {0}_b + {2};", var, end, kFastBlock));
    line(depth + 1, "int64_t quire_doubt = !QUIRE_FAST_F32;");
    line(depth + 1, "if (QUIRE_FAST_F32) {");
    fast_ = true;
    exp_partner_ = kernel::exp_erf_partners(k_, s.body);
    block_loop(s, depth + 2, " reduction(|:quire_doubt)");
    exp_partner_.clear();
    fast_ = false;
    line(depth + 1, "}");
    line(depth + 1, "if (quire_doubt) {");
    block_loop(s, depth + 2, "");
    line(depth + 1, "}");
    line(depth, "}");
  }

  /// The pragma of a loop with lanes, `clauses` appended. Each lane is one
  /// iteration: the same operations in the same order per element. The
  /// scalars an iteration sets are its own.
  void simd_pragma(const Stmt& s, int depth, const std::string& clauses) {
    std::string names;
    for (int sc : kernel::scalars_set_in(s.body)) names += fmt::format("{}s{}", names.empty() ? "" : ", ", sc);
    line(depth, fmt::format("#pragma omp simd simdlen({}){}{}", simdlen(s.lanes),
                            names.empty() ? "" : fmt::format(" private({})", names), clauses));
  }

  /// One run of a fast_lanes block: the loop's pragma and body over [_b, _e).
  void block_loop(const Stmt& s, int depth, const std::string& reduction) {
    simd_pragma(s, depth, reduction);
    line(depth, fmt::format("for (int64_t i{0} = i{0}_b; i{0} < i{0}_e; ++i{0}) {{", s.var));
    in_scope_[static_cast<size_t>(s.var)] = true;
    statements(s.body, depth + 1);
    in_scope_[static_cast<size_t>(s.var)] = false;
    line(depth, "}");
  }

  /// round_f32(erf(a)) or round_f32(gelu(a)) in a fast block: the
  /// approximation, its doubt, and its rounding.
  std::string fast_site(int i, int depth) {
    const Expr& op = k_.exprs[static_cast<size_t>(k_.exprs[static_cast<size_t>(i)].a)];
    const std::string a = value(op.a, depth);
    const char* name = op.unary == runtime::UnaryOp::Erf ? "erf" : "gelu";
    return believed(i, fmt::format("quire_fast_{}({})", name, a), fmt::format("quire_fast_{}_window({})", name, a),
                    depth);
  }

  /// round_f32(exp(w)) in a fast block beside erf(u) (exp_partners): exp
  /// from the factor erf's erfc computes (elementary_fast.inc's
  /// quire_fast_exp_near), u evaluated again from the inputs.
  std::string fast_exp_site(int i, int depth) {
    const Expr& op = k_.exprs[static_cast<size_t>(k_.exprs[static_cast<size_t>(i)].a)];
    const std::string w = value(op.a, depth);
    const std::string u = value(exp_partner_.at(i), depth);
    return believed(i, fmt::format("quire_fast_exp_near({}, {})", u, w),
                    fmt::format("quire_fast_exp_near_window({}, {})", u, w), depth);
  }

  /// Site i's value from a shortcut: the approximation, its doubt ORed into
  /// the block's, and its rounding to f32.
  std::string believed(int i, const std::string& approximation, const std::string& window, int depth) {
    const std::string approx = fmt::format("t{}", temps_++);
    line(depth, fmt::format("const double {} = {};", approx, approximation));
    line(depth, fmt::format("quire_doubt |= quire_f32_doubt({}, {});", approx, window));
    const std::string rounded = fmt::format("t{}", temps_++);
    line(depth, fmt::format("const double {} = quire_round_f32({});", rounded, approx));
    return memo_[i] = rounded;
  }

  std::string index(const kernel::Affine& a) const {
    std::string text;
    for (const auto& [var, coeff] : a.terms) {
      if (var < 0 || var >= k_.loop_vars || !in_scope_[static_cast<size_t>(var)])
        malformed(fmt::format("index uses i{} outside its loop", var));
      if (!text.empty()) text += " + ";
      text += coeff == 1 ? fmt::format("i{}", var) : fmt::format("{} * i{}", coeff, var);
    }
    if (text.empty()) return fmt::format("{}", a.offset);
    if (a.offset != 0) text += fmt::format(" + {}", a.offset);
    return text;
  }

  /// The C text of expression i's value, declaring at `depth` the temporaries it needs.
  std::string value(int i, int depth) {
    if (i < 0 || i >= static_cast<int>(k_.exprs.size())) malformed(fmt::format("no expression {}", i));
    if (auto it = memo_.find(i); it != memo_.end()) return it->second;
    const Expr& e = k_.exprs[static_cast<size_t>(i)];
    switch (e.kind) {
      case ExprKind::Const:
        return c_double(e.value);
      case ExprKind::Scalar:
        if (e.scalar < 0 || e.scalar >= k_.scalars) malformed(fmt::format("no scalar s{}", e.scalar));
        return scalar_name(e.scalar);
      case ExprKind::Where:
        return where(i, e, depth);
      default:
        break;
    }
    std::string text;
    bool as_float = false;  // declared float: an f32 value computed in float (float_site)
    switch (e.kind) {
      case ExprKind::Load: {
        const int b = checked_buffer(e.buffer);
        as_float = held_in_floats(b);
        text = fmt::format("{}b{}[{}]", held_in_ints(b) ? "(double)" : "", b, index(e.index));
        break;
      }
      case ExprKind::Unary:
        text = fmt::format("{}({})", unary_function(e.unary), value(e.a, depth));
        break;
      case ExprKind::Binary: {
        const std::string a = value(e.a, depth);
        text = fmt::format("{}({}, {})", binary_function(e.binary), a, value(e.b, depth));
        break;
      }
      case ExprKind::Fma: {
        const std::string a = value(e.a, depth);
        const std::string b = value(e.b, depth);
        // fmaf on the f32 values (exact conversions).
        as_float = e.type == runtime::FloatType::F32;
        text = as_float ? fmt::format("fmaf({}, {}, {})", as_float_text(a), as_float_text(b),
                                      as_float_text(value(e.c, depth)))
                        : fmt::format("fma({}, {}, {})", a, b, value(e.c, depth));
        break;
      }
      case ExprKind::Round:
        if (fast_ && is_fast_site(e)) return fast_site(i, depth);
        if (fast_ && exp_partner_.count(i)) return fast_exp_site(i, depth);
        if (e.type == runtime::FloatType::F32) {
          as_float = true;
          text = float_site(e.a, depth);
          break;
        }
        if ((e.type == runtime::FloatType::BF16 || e.type == runtime::FloatType::F16) && holds_f32_value(e.a)) {
          as_float = true;
          text = fmt::format("quire_round_{}_of_f32f({})", runtime::float_type_name(e.type), float_value(e.a, depth));
          break;
        }
        text = fmt::format("{}({})", round_function(e.type), value(e.a, depth));
        break;
      case ExprKind::Finite:
        text = fmt::format("(isfinite({}) ? 1.0 : 0.0)", value(e.a, depth));
        break;
      case ExprKind::Const:
      case ExprKind::Scalar:
      case ExprKind::Where:
        break;
    }
    const std::string name = fmt::format("t{}", temps_++);
    line(depth, fmt::format("const {} {} = {};", as_float ? "float" : "double", name, text));
    if (as_float) float_temps_.insert(name);
    return memo_[i] = name;
  }

  /// A C value as a float: itself when it names a float, else cast (exact,
  /// its value being an f32 value).
  std::string as_float_text(const std::string& v) const {
    return float_temps_.count(v) ? v : fmt::format("(float){}", v);
  }

  /// The C text, as a float, of expression i, which holds an f32 value.
  std::string float_value(int i, int depth) {
    const Expr& e = k_.exprs[static_cast<size_t>(i)];
    if (e.kind == ExprKind::Const) return fmt::format("(float){}", c_double(e.value));
    if (e.kind == ExprKind::Scalar && float_scalar(e.scalar)) return scalar_name(e.scalar);
    return as_float_text(value(i, depth));
  }

  /// The C text, as a float, of expression i rounded to f32. Where i is
  /// +, −, ×, ÷, √, negation or |·| of f32 values, the float operation
  /// itself: f64 has more than 2 · 24 + 2 significant bits, so rounding the
  /// f64 result to f32 is the same number as the one correctly rounded f32
  /// operation (the double rounding is innocuous for these five operations,
  /// Figueroa 1995), and a kernel over f32 data then computes in float
  /// vectors, twice the lanes, with no conversions. Otherwise the f64 value
  /// narrowed.
  std::string float_site(int i, int depth) {
    const Expr& e = k_.exprs[static_cast<size_t>(i)];
    if (e.kind == ExprKind::Binary && holds_f32_value(e.a) && holds_f32_value(e.b)) {
      const char* op = e.binary == runtime::BinaryOp::Add   ? "+"
                       : e.binary == runtime::BinaryOp::Sub ? "-"
                       : e.binary == runtime::BinaryOp::Mul ? "*"
                       : e.binary == runtime::BinaryOp::Div ? "/"
                                                            : nullptr;
      if (op) {
        const std::string a = float_value(e.a, depth);
        return fmt::format("{} {} {}", a, op, float_value(e.b, depth));
      }
    }
    if (e.kind == ExprKind::Unary && holds_f32_value(e.a)) {
      if (e.unary == runtime::UnaryOp::Sqrt) return fmt::format("sqrtf({})", float_value(e.a, depth));
      if (e.unary == runtime::UnaryOp::Neg) return fmt::format("-{}", float_value(e.a, depth));
      if (e.unary == runtime::UnaryOp::Abs) return fmt::format("fabsf({})", float_value(e.a, depth));
    }
    return fmt::format("(float){}", value(i, depth));
  }

  /// Whether expression i costs nothing to compute whatever a condition
  /// says: a constant, a scalar, a load (every load of a kernel is inside
  /// its buffer) or a value this statement has already computed.
  bool free_to_compute(int i) const {
    if (memo_.count(i)) return true;
    const ExprKind kind = k_.exprs[static_cast<size_t>(i)].kind;
    return kind == ExprKind::Const || kind == ExprKind::Scalar || kind == ExprKind::Load;
  }

  std::string where(int i, const Expr& e, int depth) {
    const std::string cond = value(e.a, depth);
    const std::string name = fmt::format("t{}", temps_++);
    const bool as_float = holds_f32_value(i);
    if (free_to_compute(e.b) && free_to_compute(e.c)) {
      // Both sides at once and a select, which vectorizes; a branch on a
      // mask (dropout's) mispredicts and keeps the loop scalar.
      const std::string type = as_float ? "float" : "double";
      const std::string b = value(e.b, depth);
      const std::string c = value(e.c, depth);
      line(depth, fmt::format("const {0} {1} = {2} != 0.0 ? ({0}){3} : ({0}){4};", type, name, cond, b, c));
      if (as_float) float_temps_.insert(name);
      return memo_[i] = name;
    }
    line(depth, fmt::format("{} {};", as_float ? "float" : "double", name));
    if (as_float) float_temps_.insert(name);
    line(depth, fmt::format("if ({} != 0.0) {{", cond));
    side(name, e.b, depth + 1);
    line(depth, "} else {");
    side(name, e.c, depth + 1);
    line(depth, "}");
    return memo_[i] = name;
  }

  void side(const std::string& result, int expr, int depth) {
    const std::map<int, std::string> outside = memo_;
    line(depth, fmt::format("{} = {};", result, value(expr, depth)));
    memo_ = outside;
  }

  const Kernel& k_;
  std::string out_;
  std::vector<bool> in_scope_;       ///< by loop variable: bound by an enclosing loop
  std::map<int, std::string> memo_;  ///< expression → its temporary, within the current statement
  std::set<std::string> float_temps_;  ///< the temporaries declared float
  int temps_ = 0;
  const Stmt* split_ = nullptr;  ///< the loop whose range the caller gives
  /// Inside a lane tile (lane_tiles): its loop variable, lanes, and the
  /// scalars its iterations set, which are arrays of lanes there.
  struct Tile {
    int var = -1;
    int lanes = 1;  ///< the layout's vector lanes
    int width = 1;  ///< iterations per tile: lanes × (kTileVectors, or fewer in a shorter loop)
    std::set<int> own;
  };
  static constexpr int kTileVectors = 4;
  /// Iterations per fast_lanes block: a block in doubt (about 256 · 2^-19
  /// of them) runs twice, so a short block wastes little, and 256 is a
  /// training step's rows' width or a multiple of the rows' widths.
  static constexpr int kFastBlock = 256;
  bool fast_ = false;  ///< inside a fast_lanes block's first run
  std::map<int, int> exp_partner_;  ///< in that run: exp_partners of its body
  std::vector<bool> f32_scalar_;  ///< f32_scalars(k_)
  std::optional<Tile> tile_;
  bool in_lane_ = false;  ///< inside a tile's loop over its lanes
};

/// A comment cannot hold `*/`; the IR text does not use it, but a title might.
std::string comment_safe(std::string text) {
  for (size_t at = text.find("*/"); at != std::string::npos; at = text.find("*/", at)) text.replace(at, 2, "* /");
  return text;
}

}  // namespace

std::string c_prelude() {
  // Guarded: a batch of kernels compiled as one unit (c_compiler.h, BATCHES)
  // holds each kernel's whole text, and the prelude is compiled once.
  std::string text =
      "/* Generated by quire's native backend. */\n"
      "#ifndef QUIRE_PRELUDE_INCLUDED\n"
      "#define QUIRE_PRELUDE_INCLUDED\n"
      // The compiler is also told -ffp-contract=off; the pragma keeps the
      // text right under a compiler that honours only the standard's way
      // (GCC ignores it, and warns under -Wall: an exported program is
      // built with -Werror).
      "#if defined(__clang__)\n#pragma STDC FP_CONTRACT OFF\n#endif\n"
      "#include <math.h>\n"
      "#include <stdint.h>\n"
      "#include <string.h>\n\n";
  // The runtime's constants, printed from the same C++ literals so that no
  // hand-converted digit can differ.
  text += fmt::format("static const double quire_sqrt1_2 = {};\n", c_double(M_SQRT1_2));
  text += fmt::format("static const double quire_sqrt2_over_pi = {};\n", c_double(0x1.9884533d43651p-1));
  text += fmt::format("static const double quire_gelu_tanh_cubic = {};\n", c_double(0.044715));
  // exp, erf, log1p, expm1 and softplus: the reference's own source (runtime/elementary.h).
  text += runtime::elementary_c_source();
  // Their f32 shortcuts need a fused multiply-add instruction to be fast.
  text +=
      "#if defined(__FMA__) || defined(__aarch64__)\n#define QUIRE_FAST_F32 1\n#else\n#define QUIRE_FAST_F32 0\n#endif\n";
  text += runtime::elementary_fast_c_source();
  text += kHelpers;
  // The narrow formats' rounding, one wrapper per row of the float-type table.
  for (const runtime::FloatTypeInfo& f : runtime::kFloatTypes) {
    if (f.type == runtime::FloatType::F64 || f.type == runtime::FloatType::F32) continue;
    text += fmt::format("static inline double {}(double x) {{ return quire_round_narrow(x, {}, {}, {}, {}, {}); }}\n",
                        round_function(f.type), f.precision, f.min_exp, c_double(f.smallest_subnormal),
                        c_double(f.largest_finite), f.has_infinities ? 1 : 0);
  }
  return text + "#endif\n";
}

std::string emit_c(const Kernel& k, const std::string& symbol) {
  std::string text = c_prelude();
  text += "\n/*\n" + comment_safe(kernel::print_kernel(k)) + "*/\n";
  text += FunctionWriter(k).write(symbol);
  return text;
}

}  // namespace quire::native
