// RealStorage: copies share the elements until one of them is written, and a
// write never reaches another copy; the f32 and f64 views hold the same numbers.

#include "quire/runtime/real_storage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "quire/runtime/tensor.h"

namespace quire::runtime {
namespace {

TEST(RealStorage, CopiesShareTheElementsUntilOneIsWritten) {
  RealStorage a{1.0, 2.0, 3.0};
  const RealStorage b = a;
  EXPECT_TRUE(a.shared());
  EXPECT_EQ(std::as_const(a).data(), b.data()) << "a copy is a reference, not the elements";
  a[1] = 20.0;  // the write makes a's block its own first
  EXPECT_FALSE(a.shared());
  EXPECT_FALSE(b.shared());
  EXPECT_NE(std::as_const(a).data(), b.data());
  EXPECT_EQ(a, (std::vector<double>{1.0, 20.0, 3.0}));
  EXPECT_EQ(b, (std::vector<double>{1.0, 2.0, 3.0})) << "the copy keeps its values";
}

TEST(RealStorage, AWriterAloneWritesInPlace) {
  RealStorage a(4, 0.5);
  const double* before = std::as_const(a).data();
  double* p = a.data();
  EXPECT_EQ(p, before) << "nothing shares the block: no copy";
  p[3] = 7.0;
  EXPECT_EQ(a, (std::vector<double>{0.5, 0.5, 0.5, 7.0}));
}

TEST(RealStorage, ATensorCopiedIntoAValueAndWrittenLeavesTheOriginal) {
  Tensor x = Tensor::real({2, 2}, 1.0);
  Tensor y = x;  // what passing a value into a call does
  for (double& v : y.reals) v *= 3.0;
  EXPECT_EQ(x.reals, (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(y.reals, (std::vector<double>{3.0, 3.0, 3.0, 3.0}));
}

TEST(RealStorage, ForOverwriteHasTheSizeAndEqualityComparesValues) {
  RealStorage a = RealStorage::for_overwrite(5);
  EXPECT_EQ(a.size(), 5u);
  std::fill(a.begin(), a.end(), 2.0);
  EXPECT_EQ(a, RealStorage(5, 2.0));
  EXPECT_FALSE(a == RealStorage(4, 2.0));
  EXPECT_TRUE(RealStorage().empty());
  EXPECT_EQ(RealStorage(), RealStorage::for_overwrite(0));
  EXPECT_EQ(a.to_vector(), (std::vector<double>(5, 2.0)));
  EXPECT_THROW((void)a.at(5), std::out_of_range);
  EXPECT_EQ(Tensor::real_for_overwrite({3, 4}).reals.size(), 12u);
}

TEST(RealStorage, AnF32BlockIsWidenedOnceAndEveryCopySeesTheWideView) {
  RealStorage a = RealStorage::narrow_for_overwrite(3);
  float* f = a.narrow_for_writing();
  f[0] = 1.5f;
  f[1] = -0.0f;
  f[2] = 0x1p-149f;  // the smallest f32 subnormal
  const RealStorage b = a;
  EXPECT_TRUE(a.holds_narrow());
  EXPECT_FALSE(b.holds_wide());
  const double* wide = b.data();  // a reader makes the f64 view, for both copies
  EXPECT_TRUE(a.holds_wide());
  EXPECT_EQ(std::as_const(a).data(), wide);
  EXPECT_EQ(b.narrow(), f) << "the f32 view stays";
  EXPECT_EQ(b, (std::vector<double>{1.5, -0.0, 0x1p-149}));
  EXPECT_TRUE(std::signbit(wide[1]));
}

TEST(RealStorage, AnF64BlockOfF32NumbersIsNarrowedAndAnyOtherIsRefused) {
  const RealStorage a{
      0.5,     -0.0, -0x1.fffffep127, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
      0x1p-149};
  const float* f = a.narrow();
  EXPECT_EQ(f[0], 0.5f);
  EXPECT_TRUE(std::signbit(f[1]));
  EXPECT_EQ(f[2], -0x1.fffffep127f);  // the largest finite f32
  EXPECT_TRUE(std::isinf(f[3]));
  EXPECT_TRUE(std::isnan(f[4]));
  EXPECT_EQ(f[5], 0x1p-149f);
  // 0.1 is no f32 number, nor is 2^-150 (below the smallest subnormal) or 2^128.
  for (double bad : {0.1, 0x1p-150, 0x1p128}) {
    const RealStorage b{1.0, bad};
    EXPECT_THROW((void)b.narrow(), std::logic_error) << bad;
  }
  EXPECT_EQ(RealStorage().narrow(), nullptr);
  // Empty storages of every making hold no block.
  EXPECT_TRUE(RealStorage(0, 1.0).empty());
  EXPECT_EQ(RealStorage(0, 1.0).data(), nullptr);
  EXPECT_EQ(RealStorage::narrow_for_overwrite(0).narrow(), nullptr);
  EXPECT_EQ(Tensor::real({0, 3}).reals.size(), 0u);
}

TEST(RealStorage, AWriteDropsTheOtherViewAndReachesNoCopy) {
  RealStorage a{1.0, 2.0};
  (void)a.narrow();
  const RealStorage b = a;  // shares both views
  a.narrow_for_writing()[0] = 7.0f;
  EXPECT_FALSE(a.holds_wide()) << "a write to the f32 view leaves no stale f64 view";
  EXPECT_EQ(a, (std::vector<double>{7.0, 2.0}));
  EXPECT_EQ(b, (std::vector<double>{1.0, 2.0})) << "the copy keeps its values";
  EXPECT_EQ(b.narrow()[0], 1.0f);
  a[1] = 5.0;
  EXPECT_FALSE(a.holds_narrow()) << "a write to the f64 view leaves no stale f32 view";
  EXPECT_EQ(a.narrow()[1], 5.0f);
  EXPECT_EQ(b.narrow()[1], 2.0f);
}

TEST(RealStorage, AWindowSharesItsElementsUntilEitherIsWritten) {
  RealStorage whole{1.0, 2.0, 3.0, 4.0, 5.0};
  RealStorage window = RealStorage::window(whole, 1, 3);
  EXPECT_EQ(window, (std::vector<double>{2.0, 3.0, 4.0}));
  EXPECT_EQ(std::as_const(window).data(), std::as_const(whole).data() + 1) << "no copy";
  EXPECT_TRUE(whole.shared());
  const RealStorage inner = RealStorage::window(window, 1, 2);  // a window of a window
  EXPECT_EQ(inner, (std::vector<double>{3.0, 4.0}));
  window[0] = 20.0;  // copies out the window's own three elements first
  EXPECT_EQ(window, (std::vector<double>{20.0, 3.0, 4.0}));
  EXPECT_EQ(whole, (std::vector<double>{1.0, 2.0, 3.0, 4.0, 5.0}));
  EXPECT_EQ(inner, (std::vector<double>{3.0, 4.0}));
  whole[3] = 40.0;  // the inner window still shares the block: whole copies
  EXPECT_EQ(inner, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(whole, (std::vector<double>{1.0, 2.0, 3.0, 40.0, 5.0}));
  EXPECT_THROW((void)RealStorage::window(whole, 4, 2), std::out_of_range);
  EXPECT_TRUE(RealStorage::window(whole, 5, 0).empty());
}

TEST(RealStorage, AWindowWidensTheWholeBlockButNarrowsOnlyItsOwnElements) {
  RealStorage narrow = RealStorage::narrow_for_overwrite(4);
  float* f = narrow.narrow_for_writing();
  for (int i = 0; i < 4; ++i) f[i] = 0.5f * static_cast<float>(i);
  const RealStorage a = RealStorage::window(narrow, 2, 2);
  EXPECT_EQ(a, (std::vector<double>{1.0, 1.5}));
  EXPECT_TRUE(narrow.holds_wide()) << "widening is exact: made for the whole block";
  // The rest of an f64 block need not be f32 numbers: a window that holds
  // f32 numbers gets its f32 view from its own elements, and the whole is
  // still refused one.
  const RealStorage wide{0.1, 0.25, 0.75};
  const RealStorage b = RealStorage::window(wide, 1, 2);
  EXPECT_EQ(b.narrow()[0], 0.25f);
  EXPECT_EQ(b.narrow()[1], 0.75f);
  EXPECT_FALSE(wide.holds_narrow());
  EXPECT_THROW((void)wide.narrow(), std::logic_error);
  EXPECT_THROW((void)RealStorage::window(wide, 0, 2).narrow(), std::logic_error);
}

}  // namespace
}  // namespace quire::runtime
