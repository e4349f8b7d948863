// The interpreter under a realization: each rule of the numerics issue, its
// bits checked against an independent computation in C++'s own float
// arithmetic (IEEE binary32, correctly rounded for + - * / and sqrt) and the
// one-step rounding of float_types.h.

#include <random>

#include "quire/grad/vjp.h"
#include "quire/interp/interp_testing.h"
#include "quire/realize/realization.h"

// The references below must round each float product and sum separately.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::interp {
namespace {

using precision::Policy;
using runtime::FloatType;
using runtime::round_to;
using testing::Program;
using testing::reals;
using testing::same_bits;

double bf16(double x) { return round_to(FloatType::BF16, x); }
double f16(double x) { return round_to(FloatType::F16, x); }

/// Calls `fn` under `policy`, as `quire run --precision` does.
Value run_under(const Program& p, const std::string& fn, const std::vector<Value>& args, Policy policy,
                bool half_intermediates = false) {
  precision::Realization r = precision::realize(p.prog(), p.index(fn), {policy, half_intermediates}, p.dims);
  Interpreter interp(p.prog(), p.dims, &r);
  return interp.call(p.index(fn), args);
}

std::vector<double> random_values(size_t n, uint64_t seed, double lo = -4, double hi = 4) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

TEST(TypedInterpreter, F64PolicyGivesTheBitsOfThePlainInterpreter) {
  Program p(R"(fn f(x : ℝ[n: 64], y : ℝ[n: 64]) -> ℝ[] =
  let z = exp(x) / (y * y + 1.5)
  sum(z) + logsumexp(axis n, x * 0.1)
)");
  auto x = reals({64}, random_values(64, 1));
  auto y = reals({64}, random_values(64, 2));
  Value plain = p.call("f", {Value::of(x), Value::of(y)});
  Value typed = run_under(p, "f", {Value::of(x), Value::of(y)}, Policy::F64);
  EXPECT_TRUE(same_bits(typed.tensor.reals[0], plain.tensor.reals[0]));
  EXPECT_EQ(typed.type, FloatType::F64);
}

// `matmul(x, w, out = f64)` under bf16: the operands enter as f32 and are
// read down to bf16, the product accumulates left to right in f64 and the
// f64 accumulator is stored: the bits of that sum computed here in double.
TEST(TypedInterpreter, OutF64ProductUnderBf16StoresTheF64Accumulator) {
  Program p(R"(fn f(x : ℝ[b: 3, 64], w : ℝ[64, 5]) -> ℝ[b: 3, 5] =
  matmul(x, w, out = f64)
)");
  const std::vector<double> xs = random_values(3 * 64, 11), ws = random_values(64 * 5, 12);
  Value r = run_under(p, "f", {Value::of(reals({3, 64}, xs)), Value::of(reals({64, 5}, ws))}, Policy::BF16);
  EXPECT_EQ(r.type, FloatType::F64);
  auto read = [](double v) { return bf16(static_cast<float>(v)); };  // entered as f32, read down
  for (int b = 0; b < 3; ++b)
    for (int o = 0; o < 5; ++o) {
      double acc = 0.0;
      for (int k = 0; k < 64; ++k) acc = acc + read(xs[b * 64 + k]) * read(ws[k * 5 + o]);
      EXPECT_TRUE(same_bits(r.tensor.reals[b * 5 + o], acc)) << b << "," << o;
    }
}

// A half value computes in f32 and rounds once on store: the reference is
// binary32 arithmetic on the rounded operands, then one rounding to bf16.
TEST(TypedInterpreter, HalfArithmeticIsF32ArithmeticRoundedOnceOnStore) {
  Program p(R"(fn f(x : ℝ[n: 4096], y : ℝ[n: 4096]) -> (ℝ[n: 4096], ℝ[n: 4096], ℝ[n: 4096], ℝ[n: 4096]) =
  let a = x as bf16
  let b = y as bf16
  (a * b, a + b, a / b, sqrt(a * a))
)");
  auto xs = random_values(4096, 3), ys = random_values(4096, 4, 0.01, 3);
  Value r = run_under(p, "f", {Value::of(reals({4096}, xs)), Value::of(reals({4096}, ys))}, Policy::BF16);
  ASSERT_EQ(r.elements.size(), 4u);
  for (const Value& e : r.elements) EXPECT_EQ(e.type, FloatType::BF16);
  for (size_t i = 0; i < xs.size(); ++i) {
    // The inputs enter as f32, then `as bf16` rounds them once from f32.
    const float a = static_cast<float>(bf16(static_cast<float>(xs[i])));
    const float b = static_cast<float>(bf16(static_cast<float>(ys[i])));
    const float aa = static_cast<float>(bf16(a * a));  // the product is stored (bf16) before sqrt reads it
    EXPECT_TRUE(same_bits(r.elements[0].tensor.reals[i], bf16(a * b))) << i;
    EXPECT_TRUE(same_bits(r.elements[1].tensor.reals[i], bf16(a + b))) << i;
    EXPECT_TRUE(same_bits(r.elements[2].tensor.reals[i], bf16(a / b))) << i;
    EXPECT_TRUE(same_bits(r.elements[3].tensor.reals[i], bf16(std::sqrt(aa)))) << i;
  }
}

TEST(TypedInterpreter, F32PolicyIsBinary32Arithmetic) {
  Program p(R"(fn f(x : ℝ[n: 512], y : ℝ[n: 512]) -> ℝ[n: 512] = (x * y + x) / y - 0.1)");
  auto xs = random_values(512, 5), ys = random_values(512, 6, 0.5, 2);
  Value r = run_under(p, "f", {Value::of(reals({512}, xs)), Value::of(reals({512}, ys))}, Policy::F32);
  EXPECT_EQ(r.type, FloatType::F32);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = static_cast<float>(xs[i]), y = static_cast<float>(ys[i]);
    const float want = (x * y + x) / y - 0.1f;  // the constant is rounded to f32 as well
    EXPECT_TRUE(same_bits(r.tensor.reals[i], want)) << i;
  }
}

// Under f32 the mean's gradient gives each element the f32 quotient of its
// row's cotangent by the count (interpreter.cpp's Expand, which divides in
// f32 before it broadcasts): by 3, and by 4 as the product with 1/4.
TEST(TypedInterpreter, F32MeanGradientIsTheF32ShareOfTheCotangent) {
  Program p(R"(fn m3(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = mean(axis m, x)
fn m4(x : ℝ[b: 2, m: 4]) -> ℝ[b: 2] = mean(axis m, x)
)");
  for (int count : {3, 4}) {
    const int v = grad::vjp(*p.e->prog, p.index(fmt::format("m{}", count)), {0});
    precision::Realization r = precision::realize(p.prog(), v, {Policy::F32, false}, p.dims);
    Interpreter interp(p.prog(), p.dims, &r);
    const std::vector<double> ct = {static_cast<double>(0x1.555556p-2f), static_cast<double>(-0x1.8p-3f)};
    Value out = interp.call(
        v, {Value::of(reals({2, count}, random_values(static_cast<size_t>(2 * count), 9))), Value::of(reals({2}, ct))});
    const runtime::Tensor& g = out.elements[1].tensor;
    ASSERT_EQ(g.shape, (runtime::Shape{2, count}));
    for (int b = 0; b < 2; ++b)
      for (int j = 0; j < count; ++j)
        EXPECT_TRUE(same_bits(g.reals[static_cast<size_t>(b * count + j)],
                              static_cast<float>(ct[static_cast<size_t>(b)]) / static_cast<float>(count)))
            << count << ": " << b << ", " << j;
  }
}

/// x [3, K] · w [K, 4] with bf16 operands and a binary32 accumulator, in k order.
std::vector<float> f32_products(const std::vector<double>& x, const std::vector<double>& w, int k_size) {
  std::vector<float> out(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < k_size; ++k) {
        const float a = static_cast<float>(bf16(static_cast<float>(x[i * k_size + k])));
        const float b = static_cast<float>(bf16(static_cast<float>(w[k * 4 + j])));
        const float prod = a * b;
        acc = acc + prod;
      }
      out[i * 4 + j] = acc;
    }
  return out;
}

TEST(TypedInterpreter, MatmulOutF32StoresTheF32AccumulatorOfTheRoundedOperands) {
  Program p(R"(fn wide(x : ℝ[3, 37], w : ℝ[37, 4]) -> ℝ[3, 4] = matmul(x, w, out = f32)
fn plain(x : ℝ[3, 37], w : ℝ[37, 4]) -> ℝ[3, 4] = x · w
)");
  auto xs = random_values(3 * 37, 7), ws = random_values(37 * 4, 8);
  std::vector<Value> args{Value::of(reals({3, 37}, xs)), Value::of(reals({37, 4}, ws))};
  std::vector<float> want = f32_products(xs, ws, 37);
  Value wide = run_under(p, "wide", args, Policy::BF16);
  Value plain = run_under(p, "plain", args, Policy::BF16);
  EXPECT_EQ(wide.type, FloatType::F32);
  EXPECT_EQ(plain.type, FloatType::BF16);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(wide.tensor.reals[i], want[i])) << i;
    EXPECT_TRUE(same_bits(plain.tensor.reals[i], bf16(want[i]))) << i;
  }
  // Under f32 operands `out = f32` changes no value.
  Value wide32 = run_under(p, "wide", args, Policy::F32);
  Value plain32 = run_under(p, "plain", args, Policy::F32);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(wide32.tensor.reals[i], plain32.tensor.reals[i]));
}

TEST(TypedInterpreter, HalfIntermediatesAccumulateInTheHalf) {
  Program p(R"(fn f(x : ℝ[n: 3000]) -> ℝ[] = sum(x as f16))");
  auto xs = random_values(3000, 9, 0, 1);
  Value a = Value::of(reals({3000}, xs));
  float acc32 = 0.0f;
  double acc16 = 0.0;
  for (double x : xs) {
    const float h = static_cast<float>(f16(static_cast<float>(x)));
    acc32 = acc32 + h;
    acc16 = f16(acc16 + h);
  }
  Value normal = run_under(p, "f", {a}, Policy::F16);
  Value halves = run_under(p, "f", {a}, Policy::F16, true);
  EXPECT_TRUE(same_bits(normal.tensor.reals[0], f16(acc32)));
  EXPECT_TRUE(same_bits(halves.tensor.reals[0], acc16));
  EXPECT_NE(normal.tensor.reals[0], halves.tensor.reals[0]) << "past 1024 an f16 accumulator drops terms under 0.5";
}

// Data stays f32 under a half policy until it meets a half value; an island's
// output stays f32 until it does; a parameter's read is the half.
TEST(TypedInterpreter, F32ValuesStayF32UntilTheyMeetAHalf) {
  Program p(R"(module M {
  param w : ℝ[4]  init = ones
  fn apply(x : ℝ[4]) -> (ℝ[4], ℝ[4], ℝ[4]) =
    let d = x * 3.0
    let s = numerics(high) { exp(d) }
    (d, s, s * w)
}
fn f(θ : params M, x : ℝ[4]) -> (ℝ[4], ℝ[4], ℝ[4]) = M.apply(θ, x)
)");
  auto xs = random_values(4, 10, -1, 1);
  ParamMap w{{"w", reals({4}, {0.3, 0.7, 1.1, -2.5})}};
  Value r = run_under(p, "f", {testing::tree(w), Value::of(reals({4}, xs))}, Policy::BF16);
  EXPECT_EQ(r.elements[0].type, FloatType::F32);
  EXPECT_EQ(r.elements[1].type, FloatType::F32);
  EXPECT_EQ(r.elements[2].type, FloatType::BF16);
  for (size_t i = 0; i < 4; ++i) {
    const float d = static_cast<float>(xs[i]) * 3.0f;
    EXPECT_TRUE(same_bits(r.elements[0].tensor.reals[i], d));
    const float s = static_cast<float>(std::exp(static_cast<double>(d)));  // exp computed wide, stored f32
    EXPECT_TRUE(same_bits(r.elements[1].tensor.reals[i], s));
    // w's master (f32) is read cast down to bf16; the product computes in f32 and rounds once.
    const float wb = static_cast<float>(bf16(static_cast<float>(w.at("w").reals[i])));
    EXPECT_TRUE(same_bits(r.elements[2].tensor.reals[i], bf16(s * wb)));
  }
}

// A region around a whole computation is not the bf16 policy: the region casts
// its f32 inputs down, the policy keeps data f32 until it meets a parameter.
TEST(TypedInterpreter, ARegionCastsItsInputsDownThePolicyDoesNot) {
  Program p(R"(fn policy(x : ℝ[n: 64]) -> ℝ[n: 64] = x * x + x
fn region(x : ℝ[n: 64]) -> ℝ[n: 64] = precision(bf16) { x * x + x }
fn back(x : ℝ[n: 64]) -> ℝ[n: 64] = precision(bf16) { x * x } + x
)");
  auto xs = random_values(64, 11);
  Value a = Value::of(reals({64}, xs));
  Value under_policy = run_under(p, "policy", {a}, Policy::BF16);
  Value in_region = run_under(p, "region", {a}, Policy::F32);
  Value read_back = run_under(p, "back", {a}, Policy::F32);
  EXPECT_EQ(under_policy.type, FloatType::F32);
  EXPECT_EQ(in_region.type, FloatType::BF16);
  EXPECT_EQ(read_back.type, FloatType::F32);
  int differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = static_cast<float>(xs[i]);
    const float xb = static_cast<float>(bf16(x));
    EXPECT_TRUE(same_bits(under_policy.tensor.reals[i], x * x + x));
    const float sq = static_cast<float>(bf16(xb * xb));
    EXPECT_TRUE(same_bits(in_region.tensor.reals[i], bf16(sq + xb)));
    // Outside the region, under f32, the bf16 square is read as it is by an f32 add.
    EXPECT_TRUE(same_bits(read_back.tensor.reals[i], sq + x));
    differ += under_policy.tensor.reals[i] != in_region.tensor.reals[i];
  }
  EXPECT_GT(differ, 32);
}

TEST(TypedInterpreter, InnermostFormWins) {
  Program p(R"(fn f(x : ℝ[n: 16]) -> (ℝ[n: 16], ℝ[n: 16]) =
  let island_in_region = precision(bf16) { numerics(high) { x * x } }
  let region_in_island = numerics(high) { precision(f16) { x * x } }
  (island_in_region, region_in_island)
)");
  auto xs = random_values(16, 12);
  Value r = run_under(p, "f", {Value::of(reals({16}, xs))}, Policy::BF16);
  EXPECT_EQ(r.elements[0].type, FloatType::F32);
  EXPECT_EQ(r.elements[1].type, FloatType::F16);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = static_cast<float>(xs[i]);
    EXPECT_TRUE(same_bits(r.elements[0].tensor.reals[i], x * x));
    const float h = static_cast<float>(f16(x));  // read down into the f16 region
    EXPECT_TRUE(same_bits(r.elements[1].tensor.reals[i], f16(h * h)));
  }
}

TEST(TypedInterpreter, NumericsHighParameterIsReadAsItsF32Master) {
  Program p(R"(module M {
  param g : ℝ[4]  init = ones  numerics high
  param w : ℝ[4]  init = ones
  fn apply(x : ℝ[4]) -> (ℝ[4], ℝ[4]) = (x * g, x * w)
}
fn f(θ : params M, x : ℝ[4]) -> (ℝ[4], ℝ[4]) = M.apply(θ, x as bf16)
)");
  ParamMap t{{"g", reals({4}, {0.1, 0.2, 0.3, 0.4})}, {"w", reals({4}, {0.1, 0.2, 0.3, 0.4})}};
  Value r = run_under(p, "f", {testing::tree(t), Value::of(reals({4}, {1.7, 2.9, -3.1, 0.35}))}, Policy::BF16);
  EXPECT_EQ(r.elements[0].type, FloatType::F32);
  EXPECT_EQ(r.elements[1].type, FloatType::BF16);
  const double xs[4] = {1.7, 2.9, -3.1, 0.35};
  for (size_t i = 0; i < 4; ++i) {
    const float x = static_cast<float>(bf16(static_cast<float>(xs[i])));
    const float g = static_cast<float>(t.at("g").reals[i]);
    EXPECT_TRUE(same_bits(r.elements[0].tensor.reals[i], x * g));
    EXPECT_TRUE(same_bits(r.elements[1].tensor.reals[i], bf16(x * static_cast<float>(bf16(g)))));
  }
}

// A frozen parameter read only in bf16 is stored in bf16: rounded once, and
// every read sees those bits.
TEST(TypedInterpreter, FrozenParameterStoredAsItsReadersReadIt) {
  Program p(R"(module M {
  param t : ℝ[4]  init = ones  frozen
  fn apply(x : ℝ[4]) -> ℝ[4] = precision(bf16) { x * t }
}
fn f(θ : params M, x : ℝ[4]) -> ℝ[4] = M.apply(θ, x)
)");
  precision::Realization r = precision::realize(p.prog(), p.index("f"), {Policy::F32, false}, {});
  ASSERT_NE(r.param("t"), nullptr);
  EXPECT_EQ(r.param("t")->stored, FloatType::BF16);
  EXPECT_EQ(r.param_bytes(), 8);
  ParamMap t{{"t", reals({4}, {0.1, 0.2, 0.3, 0.4})}};
  Interpreter interp(p.prog(), {}, &r);
  Value v = interp.call(p.index("f"), {testing::tree(t), Value::of(reals({4}, {1, 1, 1, 1}))});
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(v.tensor.reals[i], bf16(t.at("t").reals[i])));
}

TEST(TypedInterpreter, SameProgramSeedAndPolicyGiveTheSameBits) {
  Program p(R"(fn f(x : ℝ[n: 200]) -> ℝ[] = logsumexp(axis n, exp(x as bf16) * 0.5))");
  auto xs = random_values(200, 13);
  Value a = run_under(p, "f", {Value::of(reals({200}, xs))}, Policy::BF16);
  Value b = run_under(p, "f", {Value::of(reals({200}, xs))}, Policy::BF16);
  EXPECT_TRUE(same_bits(a.tensor.reals[0], b.tensor.reals[0]));
}

}  // namespace
}  // namespace quire::interp
