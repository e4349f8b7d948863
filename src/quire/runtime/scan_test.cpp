#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quire/runtime/kernel_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/support/testing.h"

namespace quire::runtime {
namespace {

using namespace kernel_testing;
using quire::testing::error_of;

// x [b: 2, t: 4, n: 3], a [b: 2, t: 4, n: 3, m: 3]: the recurrence written
// out as plain loops, in f64 or with every step rounded to f32.
std::vector<double> plain_scan(const Tensor& a, const Tensor& x, bool adjoint, bool f32) {
  const auto r = [&](double v) { return f32 ? static_cast<double>(static_cast<float>(v)) : v; };
  std::vector<double> h(x.reals.size());
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i) {
      const int t = adjoint ? 3 - i : i, prev = adjoint ? t + 1 : t - 1;
      for (int n = 0; n < 3; ++n) {
        double s = r(x.reals[static_cast<size_t>((b * 4 + t) * 3 + n)]);
        if (i > 0)
          for (int m = 0; m < 3; ++m) {
            // forward a[t, n, m]; the adjoint a[t + 1, m, n]
            const size_t ai = adjoint ? static_cast<size_t>(((b * 4 + prev) * 3 + m) * 3 + n)
                                      : static_cast<size_t>(((b * 4 + t) * 3 + n) * 3 + m);
            s = r(s + r(a.reals[ai] * h[static_cast<size_t>((b * 4 + prev) * 3 + m)]));
          }
        h[static_cast<size_t>((b * 4 + t) * 3 + n)] = s;
      }
    }
  return h;
}

TEST(Scan, IsTheRecurrenceWrittenOutInEitherDirection) {
  const Tensor a = random_reals({2, 4, 3, 3}, 1, 2);
  const Tensor x = random_reals({2, 4, 3}, 2, 4);
  for (bool adjoint : {false, true})
    for (bool f32 : {false, true}) {
      const Tensor h = scan(a, x, {1, 2, 3}, adjoint, f32 ? FloatType::F32 : FloatType::F64);
      ASSERT_EQ(h.shape, x.shape);
      const std::vector<double> want = plain_scan(a, x, adjoint, f32);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same(h.reals[i], want[i])) << adjoint << f32 << " at " << i;
    }
}

TEST(Scan, TheFirstStepIsXAndDoesNotReadA) {
  // a is NaN at the first step: an absent state is not a zero state (NaN · 0).
  Tensor a = reals({3, 1, 1}, {kNaN, 2.0, 3.0});
  const Tensor x = reals({3, 1}, {-0.0, 1.0, 1.0});
  const Tensor h = scan(a, x, {0, 1, 2}, false);
  EXPECT_TRUE(same(h.reals[0], -0.0));
  EXPECT_TRUE(same(h.reals[1], 1.0));  // 1 + 2·(−0)
  EXPECT_TRUE(same(h.reals[2], 4.0));  // 1 + 3·1
  // The adjoint starts at the last step and never reads a[0].
  const Tensor g = scan(a, x, {0, 1, 2}, true);
  EXPECT_TRUE(same(g.reals[2], 1.0));
  EXPECT_TRUE(same(g.reals[1], 4.0));  // 1 + a[2]·1
  EXPECT_TRUE(same(g.reals[0], 8.0));  // −0 + a[1]·4
}

TEST(Scan, AxesInAnyOrder) {
  // The state before the steps, a's m first: the same numbers as the
  // [t, n] / [t, n, m] layout, moved.
  const Tensor a = random_reals({4, 3, 3}, 3, 1);  // [t, n, m]
  const Tensor x = random_reals({4, 3}, 4, 1);     // [t, n]
  const Tensor h = scan(a, x, {0, 1, 2}, false);
  const Tensor am = transpose(a, {2, 1, 0});  // [m, n, t]
  const Tensor xm = transpose(x, {1, 0});     // [n, t]
  const Tensor hm = scan(am, xm, {1, 0, 0}, false);
  const Tensor back = transpose(hm, {1, 0});
  for (size_t i = 0; i < h.reals.size(); ++i) EXPECT_TRUE(same(back.reals[i], h.reals[i])) << i;
}

TEST(Scan, TheCotangentOfAIsLambdaTimesTheNeighbouringState) {
  const Tensor l = random_reals({2, 4, 3}, 5, 1);
  const Tensor h = random_reals({2, 4, 3}, 6, 1);
  for (bool adjoint : {false, true}) {
    const Tensor d = scan_grad_a(l, h, {1, 2, 3}, adjoint);
    ASSERT_EQ(d.shape, (Shape{2, 4, 3, 3}));
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 4; ++t)
        for (int n = 0; n < 3; ++n)
          for (int m = 0; m < 3; ++m) {
            const auto at = [&](int tt, int nn) { return static_cast<size_t>((b * 4 + tt) * 3 + nn); };
            const double want = t == 0    ? 0.0
                                : adjoint ? l.reals[at(t - 1, m)] * h.reals[at(t, n)]
                                          : l.reals[at(t, n)] * h.reals[at(t - 1, m)];
            EXPECT_TRUE(same(d.reals[static_cast<size_t>(((b * 4 + t) * 3 + n) * 3 + m)], want))
                << adjoint << b << t << n << m;
          }
  }
}

TEST(Scan, EmptyAndMisusedShapes) {
  const Tensor none = scan(Tensor::real({0, 2, 2}), Tensor::real({0, 2}), {0, 1, 2}, false);
  EXPECT_EQ(none.shape, (Shape{0, 2}));
  EXPECT_NE(error_of<KernelMisuse>([] {
              scan(Tensor::real({3, 2, 3}), Tensor::real({3, 2}), {0, 1, 2}, false);
            }).find("a should be"),
            std::string::npos);
  EXPECT_NE(error_of<KernelMisuse>([] {
              scan(Tensor::real({3, 2, 2}), Tensor::real({3, 2}), {1, 1, 2}, false);
            }).find("step axis"),
            std::string::npos);
}

}  // namespace
}  // namespace quire::runtime
