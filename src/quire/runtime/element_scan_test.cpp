// The element scans: every flagged value is found wherever it stands (in a
// whole block of 16, in the tail, first, last), in the f32 view and the f64
// one, and the values that are not flagged pass; the largest magnitude is
// the largest |x| wherever it stands, +inf or NaN where one is.
#include "quire/runtime/element_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace quire::runtime {
namespace {

template <typename T>
std::vector<T> harmless() {
  using L = std::numeric_limits<T>;
  return {T(0), T(1), T(-2.5), L::max(), L::lowest(), L::min(), L::denorm_min(), -L::denorm_min()};
}

/// Storages of n harmless elements, as f64 and in an f32 view.
RealStorage wide(const std::vector<double>& v) {
  RealStorage s(v.size(), 0.0);
  std::copy(v.begin(), v.end(), s.data());
  return s;
}
RealStorage narrow(const std::vector<float>& v) {
  RealStorage s = RealStorage::narrow_for_overwrite(v.size());
  std::copy(v.begin(), v.end(), s.narrow_for_writing());
  return s;
}

template <typename T>
std::vector<T> filled(size_t n) {
  const std::vector<T> h = harmless<T>();
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = h[i % h.size()];
  return v;
}

template <typename T>
RealStorage storage(const std::vector<T>& v) {
  if constexpr (sizeof(T) == 4)
    return narrow(v);
  else
    return wide(v);
}

template <typename T>
void check_scans() {
  using L = std::numeric_limits<T>;
  const T signaling = L::signaling_NaN();
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 40u, 1000u}) {
    SCOPED_TRACE(n);
    const std::vector<T> clean = filled<T>(n);
    EXPECT_TRUE(all_finite(storage(clean)));
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      if (at >= n) continue;
      SCOPED_TRACE(at);
      for (T bad : {L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(), signaling}) {
        std::vector<T> v = clean;
        v[at] = bad;
        EXPECT_FALSE(all_finite(storage(v))) << bad;
      }
    }
  }
}

TEST(ElementScan, EveryFlaggedValueIsFoundWhereverItStandsInTheF32View) { check_scans<float>(); }

TEST(ElementScan, EveryFlaggedValueIsFoundWhereverItStandsInTheF64View) { check_scans<double>(); }

template <typename T>
void check_largest() {
  using L = std::numeric_limits<T>;
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 40u, 1000u}) {
    SCOPED_TRACE(n);
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = T(i % 7) * (i % 2 ? T(-0.25) : T(0.5));  // |x| ≤ 3
    const double clean = largest_magnitude(storage(v));
    double want = 0;
    for (T x : v) want = std::max(want, std::fabs(double(x)));
    EXPECT_EQ(clean, want);
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      if (at >= n) continue;
      SCOPED_TRACE(at);
      for (T big : {T(-1e30), T(1e30), T(4)}) {
        std::vector<T> w = v;
        w[at] = big;
        EXPECT_EQ(largest_magnitude(storage(w)), std::max(want, std::fabs(double(big))));
      }
      std::vector<T> w = v;
      w[at] = -L::infinity();
      EXPECT_EQ(largest_magnitude(storage(w)), std::numeric_limits<double>::infinity());
      w[at] = -L::quiet_NaN();
      EXPECT_TRUE(std::isnan(largest_magnitude(storage(w))));
    }
  }
}

TEST(ElementScan, TheLargestMagnitudeIsFoundWhereverItStandsInEitherView) {
  check_largest<float>();
  check_largest<double>();
}

}  // namespace
}  // namespace quire::runtime
