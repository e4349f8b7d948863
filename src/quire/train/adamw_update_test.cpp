#include "quire/train/adamw_update.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace quire::train {
namespace {

// Values of every kind an update meets: ordinary, tiny, subnormal, huge,
// signed zeros, infinities and NaNs (in the gradient, the state and the
// parameter).
double draw(std::mt19937_64& rng, bool f32) {
  std::uniform_int_distribution<int> kind(0, 199);  // rare specials: most vectors are clean
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  double x = 0;
  switch (kind(rng)) {
    case 0: x = std::numeric_limits<double>::quiet_NaN(); break;
    case 1: x = -inf; break;
    case 2: x = inf; break;
    case 3: x = -0.0; break;
    case 4: x = unit(rng) * 1e-40; break;   // f32 subnormal
    case 5: x = unit(rng) * 1e-310; break;  // f64 subnormal
    case 6: x = unit(rng) * 1e30; break;
    default: x = unit(rng); break;
  }
  return f32 ? static_cast<double>(static_cast<float>(x)) : x;
}

struct Case {
  runtime::FloatType master;
  bool p_f32, grad_f32, clipped, decays, lerp_from_self;
};

template <typename T>
std::vector<T> column(std::mt19937_64& rng, size_t n, bool f32) {
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(draw(rng, f32));
  return out;
}

// The vector loop (with the scalar loop for its tail and its NaN vectors)
// over a state held as S, against the scalar loop over an f64 state: the same
// bits, so an f32 master's f32 state changes nothing.
template <typename S, typename P, typename G>
void expect_same_bits(AdamWVectors vectors, const Case& k, std::mt19937_64& rng) {
  constexpr size_t kN = 1003;  // whole vectors and a tail
  const bool f32 = k.master == runtime::FloatType::F32;
  AdamWConstants c;
  c.master = k.master;
  c.clipped = k.clipped;
  c.coef = 0.37;
  c.decays = k.decays;
  c.decay = 1.0 - 1e-3 * 0.01;
  c.m_weight = k.lerp_from_self ? 0.1 : 0.75;
  c.beta2 = 0.999;
  c.v_weight = 1.0 - 0.999;
  c.bias_correction2_sqrt = 0.0316;
  c.eps = 1e-8;
  c.neg_step_size = -0.01;
  const std::vector<double> m0 = column<double>(rng, kN, f32);
  std::vector<double> v0 = column<double>(rng, kN, f32);
  for (double& x : v0) x = std::abs(x);  // a second moment; −0 and −inf stay among the parameters' values
  const std::vector<P> p0 = column<P>(rng, kN, f32 || k.p_f32);
  const std::vector<G> grad = column<G>(rng, kN, k.grad_f32);

  std::vector<double> m_want = m0, v_want = v0;
  std::vector<P> p_want = p0;
  for (size_t i = 0; i < kN; ++i) adamw_element(c, i, m_want.data(), v_want.data(), p_want.data(), grad.data());

  std::vector<S> m(m0.begin(), m0.end()), v(v0.begin(), v0.end());
  std::vector<P> p = p0;
  size_t vector_elements = 0;
  constexpr bool state_f32 = std::is_same_v<S, float>;
  for (size_t i = 0; i < kN;) {
    const size_t from = i;
    i = vectors(c, i, kN, m.data(), v.data(), state_f32, p.data(), k.p_f32, grad.data(), k.grad_f32);
    vector_elements += i - from;
    for (const size_t stop = std::min(kN, i + 8); i < stop; ++i) adamw_element(c, i, m.data(), v.data(), p.data(), grad.data());
  }
  EXPECT_GT(vector_elements, kN / 4) << "most vectors have no NaN, so the vector loop must have run";
  auto bits = [](auto x) { return std::bit_cast<uint64_t>(static_cast<double>(x)); };
  // Every number's bits; NaN for NaN. Which of two NaN operands an x86
  // addition passes on (and so the result's sign) is the operand order the
  // compiler chose for each inlined copy of the update, and no contract of
  // quire keeps a NaN's payload (docs/language.md §9).
  auto expect_same = [&](double got, double want, const char* what, size_t i) {
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(got)) << what << ", element " << i;
    else
      ASSERT_EQ(bits(got), bits(want)) << what << ", element " << i;
  };
  for (size_t i = 0; i < kN; ++i) {
    expect_same(m[i], m_want[i], "m", i);
    expect_same(v[i], v_want[i], "v", i);
    expect_same(static_cast<double>(p[i]), static_cast<double>(p_want[i]), "p", i);
  }
}

// Every case of one vector loop.
void expect_every_case(AdamWVectors vectors) {
  std::mt19937_64 rng(11);
  for (runtime::FloatType master : {runtime::FloatType::F64, runtime::FloatType::F32})
    for (bool grad_f32 : {false, true})
      for (bool clipped : {false, true})
        for (bool decays : {false, true})
          for (bool lerp_from_self : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "master " << (master == runtime::FloatType::F32 ? "f32" : "f64")
                                              << " grad_f32 " << grad_f32 << " clipped " << clipped << " decays "
                                              << decays << " lerp_from_self " << lerp_from_self);
            Case k{master, false, grad_f32, clipped, decays, lerp_from_self};
            if (grad_f32)
              expect_same_bits<double, double, float>(vectors, k, rng);
            else
              expect_same_bits<double, double, double>(vectors, k, rng);
            if (master == runtime::FloatType::F32) {  // an f32 master's f32 views: the parameter, then the state too
              k.p_f32 = true;
              if (grad_f32) {
                expect_same_bits<double, float, float>(vectors, k, rng);
                expect_same_bits<float, float, float>(vectors, k, rng);
              } else {
                expect_same_bits<double, float, double>(vectors, k, rng);
                expect_same_bits<float, float, double>(vectors, k, rng);
              }
            }
          }
}

// Every vector loop this processor runs under QUIRE_ISA's cap, the narrower
// ones too.
TEST(AdamWUpdate, EveryVectorLoopGivesTheScalarLoopsBits) {
  int paths = 0;
  for (runtime::Isa isa : {runtime::Isa::Avx512, runtime::Isa::Avx2}) {
    const AdamWVectors vectors = adamw_vectors_for(runtime::FloatType::F64, isa);
    if (isa > runtime::widest_isa() || vectors == nullptr) continue;
    SCOPED_TRACE(runtime::isa_name(isa));
    expect_every_case(vectors);
    ++paths;
  }
  if (paths == 0) GTEST_SKIP() << "no vector loop here (or QUIRE_ISA caps them)";
}

TEST(AdamWUpdate, OnlyF64AndF32MastersAreVectorized) {
  for (runtime::Isa isa : {runtime::Isa::Avx512, runtime::Isa::Avx2, runtime::Isa::Neon, runtime::Isa::Baseline}) {
    EXPECT_EQ(adamw_vectors_for(runtime::FloatType::BF16, isa), nullptr);
    EXPECT_EQ(adamw_vectors_for(runtime::FloatType::F16, isa), nullptr);
  }
  EXPECT_EQ(adamw_vectors_for(runtime::FloatType::F32, runtime::Isa::Baseline), nullptr);
#if defined(__x86_64__)
  EXPECT_EQ(adamw_vectors_for(runtime::FloatType::F32, runtime::Isa::Avx2), &adamw_vectors_avx2);
  EXPECT_EQ(adamw_vectors_for(runtime::FloatType::F64, runtime::Isa::Avx512), &adamw_vectors_avx512);
#endif
}

}  // namespace
}  // namespace quire::train
