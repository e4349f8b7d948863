#include "quire/runtime/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace quire::runtime {

namespace {

double sample_variance(const RealStorage& xs) {
  double mean = 0, var = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  for (double x : xs) var += (x - mean) * (x - mean);
  return var / static_cast<double>(xs.size() - 1);
}

const Key kKey = derive_key(key_from_seed(2024), "blocks.proj.w");

}  // namespace

TEST(Init, FansFollowTheTable) {
  EXPECT_EQ(compute_fans({}, 0).fan_in, 1);
  EXPECT_EQ(compute_fans({7}, 0).fan_out, 7);
  const Fans dense = compute_fans({64, 256}, 0);  // [In, Out]
  EXPECT_EQ(dense.fan_in, 64);
  EXPECT_EQ(dense.fan_out, 256);
  const Fans conv = compute_fans({3, 5, 5, 16}, 0);  // [In, kh, kw, Out]
  EXPECT_EQ(conv.fan_in, 75);
  EXPECT_EQ(conv.fan_out, 400);
  const Fans stacked = compute_fans({12, 64, 256}, 1);  // stack{12} of [64, 256]
  EXPECT_EQ(stacked.fan_in, 64);
  EXPECT_EQ(stacked.fan_out, 256);
  EXPECT_EQ(compute_fans({12, 64}, 1).fan_in, 64);
  EXPECT_EQ(compute_fans({12, 64}, 2).fan_in, 1);
  EXPECT_THROW(compute_fans({12, 64}, 3), std::invalid_argument);
  EXPECT_THROW(compute_fans({12, 64}, -1), std::invalid_argument);
}

TEST(Init, ZerosAndOnesAreExact) {
  const Tensor z = initialize({InitSpec::Zeros}, kKey, {3, 4}, 0);
  EXPECT_EQ(z.kind, ElemKind::Real);
  EXPECT_EQ(z.shape, (Shape{3, 4}));
  EXPECT_EQ(z.reals, std::vector<double>(12, 0.0));
  EXPECT_EQ(initialize({InitSpec::Ones}, kKey, {2, 3, 4}, 1).reals, std::vector<double>(24, 1.0));
  EXPECT_EQ(initialize({InitSpec::Ones}, kKey, {}, 0).reals, std::vector<double>{1.0});
}

TEST(Init, ShapesIncludingScalarsAndEmpty) {
  for (auto kind : {InitSpec::Normal, InitSpec::XavierUniform, InitSpec::XavierNormal, InitSpec::KaimingUniform}) {
    InitSpec spec{kind, 1.0};
    EXPECT_EQ(initialize(spec, kKey, {4, 0}, 0).reals.size(), 0u) << init_name(kind);
    EXPECT_EQ(initialize(spec, kKey, {0, 4, 5}, 1).shape, (Shape{0, 4, 5})) << init_name(kind);
    EXPECT_EQ(initialize(spec, kKey, {}, 0).reals.size(), 1u) << init_name(kind);
    EXPECT_EQ(initialize(spec, kKey, {2, 3, 5}, 1).shape, (Shape{2, 3, 5})) << init_name(kind);
  }
}

TEST(Init, XavierUniformRespectsItsBoundAndIgnoresTheStackAxis) {
  // stack{8} of [100, 300]: the bound is that of one [100, 300] weight.
  const Tensor t = initialize({InitSpec::XavierUniform}, kKey, {8, 100, 300}, 1);
  const double bound = std::sqrt(6.0 / 400.0);
  double max_abs = 0;
  for (double x : t.reals) max_abs = std::max(max_abs, std::abs(x));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.99 * bound);  // the draws reach the bound: not the fans of [8·100, 300]
  // U(-b, b): variance b²/3; 240 000 draws, 5 standard errors (kurtosis 9/5).
  const double var = bound * bound / 3;
  EXPECT_NEAR(sample_variance(t.reals), var, 5 * std::sqrt(0.8 / 240000.0) * var);
}

TEST(Init, StackedCopiesAreDrawnAsOneTensor) {
  // All copies drawn at once: the stacked tensor is the flat draw of its key.
  const Tensor t = initialize({InitSpec::XavierUniform}, kKey, {4, 10, 20}, 1);
  const double bound = std::sqrt(6.0 / 30.0);
  for (size_t i = 0; i < t.reals.size(); ++i) ASSERT_EQ(t.reals[i], uniform_at(kKey, i, -bound, bound));
  // ...so the copies differ.
  EXPECT_NE(std::vector<double>(t.reals.begin(), t.reals.begin() + 200),
            std::vector<double>(t.reals.begin() + 200, t.reals.begin() + 400));
}

TEST(Init, XavierNormalAndKaimingStatistics) {
  const Tensor xn = initialize({InitSpec::XavierNormal}, kKey, {200, 300}, 0);
  const double var_xn = 2.0 / 500.0;
  EXPECT_NEAR(sample_variance(xn.reals), var_xn, 5 * std::sqrt(2.0 / 60000.0) * var_xn);

  const Tensor ku = initialize({InitSpec::KaimingUniform}, kKey, {3, 200, 100}, 1);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 200.0);
  for (double x : ku.reals) ASSERT_LE(std::abs(x), bound);
  const double var_ku = bound * bound / 3;  // = 2 / fan_in
  EXPECT_NEAR(sample_variance(ku.reals), var_ku, 5 * std::sqrt(0.8 / 60000.0) * var_ku);
}

TEST(Init, NormalAndUniformUseTheirArguments) {
  const Tensor n = initialize({InitSpec::Normal, 0.02}, kKey, {50000}, 0);
  EXPECT_NEAR(sample_variance(n.reals), 0.0004, 5 * std::sqrt(2.0 / 50000.0) * 0.0004);
  const Tensor u = initialize({InitSpec::Uniform, -0.5, 0.25}, kKey, {50000}, 0);
  for (double x : u.reals) {
    ASSERT_GE(x, -0.5);
    ASSERT_LE(x, 0.25);
  }
  EXPECT_THROW(initialize({InitSpec::Normal, -1.0}, kKey, {3}, 0), std::invalid_argument);
  EXPECT_THROW(initialize({InitSpec::Uniform, 1.0, 0.0}, kKey, {0}, 0), std::invalid_argument);
}

TEST(Init, DeterministicPerPathKey) {
  const InitSpec spec{InitSpec::XavierNormal};
  EXPECT_EQ(initialize(spec, kKey, {16, 32}, 0).reals, initialize(spec, kKey, {16, 32}, 0).reals);
  const Key other = derive_key(key_from_seed(2024), "blocks.proj.b");
  EXPECT_NE(initialize(spec, kKey, {16, 32}, 0).reals, initialize(spec, other, {16, 32}, 0).reals);
}

TEST(Init, ParsesEveryName) {
  for (const char* name :
       {"zeros", "ones", "normal", "uniform", "xavier_uniform", "xavier_normal", "kaiming_uniform"}) {
    const auto spec = parse_init_name(name);
    ASSERT_TRUE(spec.has_value()) << name;
    EXPECT_STREQ(init_name(spec->kind), name);
    EXPECT_EQ(spec->a, 0.0);
  }
  EXPECT_EQ(parse_init_name("kaiming_normal"), std::nullopt);
  EXPECT_EQ(parse_init_name(""), std::nullopt);
}

}  // namespace quire::runtime
