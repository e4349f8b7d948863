// element_count and allocatable_count: what a shape may hold, refused the same
// way wherever its zeros stand.

#include "quire/runtime/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "quire/runtime/runtime_error.h"

namespace quire::runtime {
namespace {

constexpr int64_t kGiga = int64_t{1} << 30;

TEST(ElementCount, CountsAndTheScalar) {
  EXPECT_EQ(element_count({}), 1);
  EXPECT_EQ(element_count({2, 3, 4}), 24);
  EXPECT_EQ(element_count({2, 0, 4}), 0);
  EXPECT_EQ(element_count({int64_t{1} << 59}), int64_t{1} << 59);
}

TEST(ElementCount, TheBoundDoesNotDependOnWhereAZeroStands) {
  // 2^60 nonzero elements with a zero anywhere is refused; a zero used to
  // pass when it came first and fail when it came last.
  for (const Shape& shape : {Shape{0, kGiga, kGiga}, Shape{kGiga, 0, kGiga}, Shape{kGiga, kGiga, 0}}) {
    EXPECT_EQ(allocatable_count(shape), std::nullopt) << shape_string(shape);
    EXPECT_THROW(element_count(shape), RuntimeError) << shape_string(shape);
  }
  EXPECT_EQ(allocatable_count({0, kGiga, kGiga / 4}), 0);
  EXPECT_EQ(allocatable_count({kGiga, kGiga / 2, 0}), 0);
}

TEST(ElementCount, NegativeAndOverflowingShapesAreRefused) {
  EXPECT_EQ(allocatable_count({-1}), std::nullopt);
  EXPECT_EQ(allocatable_count({2, -3, 0}), std::nullopt);
  EXPECT_EQ(allocatable_count({int64_t{1} << 62, 4}), std::nullopt);
  EXPECT_EQ(allocatable_count({(int64_t{1} << 59) + 1}), std::nullopt);
}

TEST(ElementCount, EveryStrideOfAHeldShapeIsBelowTheBound) {
  const std::vector<int64_t> strides = contiguous_strides({0, kGiga, kGiga / 2});
  EXPECT_EQ(strides, (std::vector<int64_t>{kGiga * (kGiga / 2), kGiga / 2, 1}));
}

}  // namespace
}  // namespace quire::runtime
