// RealStorage: copies share the elements until one of them is written, and a
// write never reaches another copy.

#include "quire/runtime/real_storage.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace quire::runtime
