#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "quire/runtime/kernel_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/support/testing.h"

namespace quire::runtime {
namespace {

using namespace kernel_testing;

// Restructuring copies bits, so equality is bitwise (NaN payloads included).
void expect_bits(const RealStorage& got, const RealStorage& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want[i])) << "at " << i;
}

using quire::testing::error_of;

using Ints = std::vector<int64_t>;

Tensor iota(ElemKind kind, Shape shape) {
  Tensor t = Tensor::integer(kind, std::move(shape));
  for (size_t i = 0; i < t.ints.size(); ++i) t.ints[i] = static_cast<int64_t>(i);
  return t;
}

// ---------------------------------------------------------------------------

TEST(Transpose, PermutesAxes) {
  const Tensor m = reals({2, 3}, {1, 2, 3, 4, 5, -0.0});
  const Tensor t = transpose(m, {1, 0});
  EXPECT_EQ(t.shape, (Shape{3, 2}));
  expect_bits(t.reals, {1, 4, 2, 5, 3, -0.0});
  // x [2, 3, 4] → r[k, i, j] = x[i, j, k]
  const Tensor x = iota(ElemKind::I64, {2, 3, 4});
  const Tensor r = transpose(x, {2, 0, 1});
  EXPECT_EQ(r.shape, (Shape{4, 2, 3}));
  EXPECT_EQ(r.kind, ElemKind::I64);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(r.ints[(k * 2 + i) * 3 + j], (i * 3 + j) * 4 + k);
  EXPECT_EQ(transpose(Tensor::scalar(5), {}).reals, std::vector<double>{5});
}

TEST(Transpose, APermutationIsRequired) {
  const Tensor x = iota(ElemKind::I32, {2, 3});
  EXPECT_THROW(transpose(x, {0}), KernelMisuse);
  EXPECT_THROW(transpose(x, {0, 0}), KernelMisuse);
  EXPECT_THROW(transpose(x, {0, 2}), KernelMisuse);
}

TEST(Reshape, KeepsRowMajorOrder) {
  const Tensor x = iota(ElemKind::I32, {2, 3});
  const Tensor y = reshape(x, {3, 1, 2});
  EXPECT_EQ(y.shape, (Shape{3, 1, 2}));
  EXPECT_EQ(y.ints, x.ints);
  EXPECT_EQ(reshape(Tensor::real({1}), {}).shape, Shape{});
  EXPECT_EQ(error_of<RuntimeError>([&] { reshape(x, {4}); }), "reshape: [2, 3] has 6 elements but [4] has 4");
  EXPECT_THROW(reshape(x, {-2, -3}), KernelMisuse);
}

TEST(Concat, JoinsAlongAnAxis) {
  const Tensor a = iota(ElemKind::I64, {2, 2});  // 0 1 / 2 3
  const Tensor b = ints(ElemKind::I64, {2, 1}, {8, 9});
  const Tensor c = ints(ElemKind::I64, {2, 0}, {});
  const Tensor cols = concat({&a, &c, &b}, 1);
  EXPECT_EQ(cols.shape, (Shape{2, 3}));
  EXPECT_EQ(cols.ints, (Ints{0, 1, 8, 2, 3, 9}));
  const Tensor r = reals({1, 2}, {-0.0, kNaN});
  const Tensor rows = concat({&r, &r}, 0);
  EXPECT_EQ(rows.shape, (Shape{2, 2}));
  expect_bits(rows.reals, {-0.0, kNaN, -0.0, kNaN});
  EXPECT_EQ(concat({&a}, 0).ints, a.ints);
}

TEST(Concat, Errors) {
  const Tensor a = iota(ElemKind::I64, {2, 2});
  const Tensor b = iota(ElemKind::I64, {3, 1});
  EXPECT_EQ(error_of<RuntimeError>([&] {
              concat({&a, &b}, 1);
            }),
            "concat: axis 0 has size 2 in part 0 but 3 in part 1");
  const Tensor r = Tensor::real({2, 2});
  const Tensor v = iota(ElemKind::I64, {4});
  EXPECT_THROW(concat({&a, &r}, 0), KernelMisuse);
  EXPECT_THROW(concat({&a, &v}, 0), KernelMisuse);
  EXPECT_THROW(concat({}, 0), KernelMisuse);
  EXPECT_THROW(concat({&a}, 2), KernelMisuse);
}

TEST(Slice, FollowsPython) {
  const Tensor x = iota(ElemKind::I32, {10});
  auto s = [&](int64_t start, int64_t stop, int64_t step) { return slice(x, 0, start, stop, step).ints; };
  EXPECT_EQ(s(2, 8, 3), (Ints{2, 5}));     // x[2:8:3]
  EXPECT_EQ(s(2, 9, 3), (Ints{2, 5, 8}));  // x[2:9:3]
  EXPECT_EQ(s(-3, 10, 1), (Ints{7, 8, 9}));
  EXPECT_EQ(s(0, -8, 1), (Ints{0, 1}));
  EXPECT_EQ(s(-100, 2, 1), (Ints{0, 1}));
  EXPECT_EQ(s(8, 100, 1), (Ints{8, 9}));
  EXPECT_EQ(s(5, 3, 1), Ints{});
  EXPECT_EQ(s(12, 20, 1), Ints{});
  EXPECT_EQ(s(3, 10, std::numeric_limits<int64_t>::max()), Ints{3});
  EXPECT_EQ(s(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 4), (Ints{0, 4, 8}));
  EXPECT_EQ(slice(x, 0, 5, 3, 1).shape, (Shape{0}));
}

TEST(Slice, AnInnerAxis) {
  // x [2, 4] → x[:, 1::2]
  const Tensor x = reals({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor y = slice(x, 1, 1, 4, 2);
  EXPECT_EQ(y.shape, (Shape{2, 2}));
  expect_bits(y.reals, {1, 3, 5, 7});
  EXPECT_THROW(slice(x, 1, 0, 4, 0), KernelMisuse);
  EXPECT_THROW(slice(x, 1, 0, 4, -1), KernelMisuse);
  EXPECT_THROW(slice(x, 2, 0, 4, 1), KernelMisuse);
}

TEST(Gather, PicksRowsOfATable) {
  // table [4, 2], ids [2, 2] on axis 0 → [2, 2, 2]
  const Tensor table = reals({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  const Tensor ids = ints(ElemKind::I64, {2, 2}, {3, 0, 1, 1});
  const Tensor r = gather(table, 0, ids);
  EXPECT_EQ(r.shape, (Shape{2, 2, 2}));
  expect_bits(r.reals, {30, 31, 0, 1, 10, 11, 10, 11});
  // On an inner axis: table [2, 3, 2], ids [2] on axis 1 → [2, 2, 2]
  const Tensor t3 = iota(ElemKind::I32, {2, 3, 2});
  const Tensor r3 = gather(t3, 1, ints(ElemKind::I32, {2}, {2, 0}));
  EXPECT_EQ(r3.shape, (Shape{2, 2, 2}));
  EXPECT_EQ(r3.kind, ElemKind::I32);
  EXPECT_EQ(r3.ints, (Ints{4, 5, 0, 1, 10, 11, 6, 7}));
  // A scalar id drops the axis.
  const Tensor row = gather(table, 0, ints(ElemKind::I32, {}, {2}));
  EXPECT_EQ(row.shape, (Shape{2}));
  expect_bits(row.reals, {20, 21});
}

TEST(Gather, Errors) {
  const Tensor table = Tensor::real({4, 2});
  EXPECT_EQ(error_of<RuntimeError>([&] {
              gather(table, 0, ints(ElemKind::I64, {2, 2}, {0, 1, 4, 0}));
            }),
            "gather: id 4 at [1, 0] is outside the table's axis 0 of size 4");
  EXPECT_EQ(error_of<RuntimeError>([&] {
              gather(table, 1, ints(ElemKind::I32, {3}, {0, -1, 9}));
            }),
            "gather: id -1 at [1] is outside the table's axis 1 of size 2");
  EXPECT_THROW(gather(table, 0, Tensor::real({2})), KernelMisuse);
  EXPECT_THROW(gather(table, 2, ints(ElemKind::I32, {1}, {0})), KernelMisuse);
}

TEST(Pick, TakesOneElementAlongTheAxisAtEachPosition) {
  // x [2, 3, 2] along the middle axis: r[p, q] = x[p, ids[p, q], q].
  std::vector<double> xs(12);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 10.0 + static_cast<double>(i);
  const Tensor x = reals({2, 3, 2}, xs);
  const Tensor r = pick(x, 1, ints(ElemKind::I32, {2, 2}, {2, 0, 1, 1}));
  EXPECT_EQ(r.shape, (Shape{2, 2}));
  expect_bits(r.reals, {14, 11, 18, 19});
  // Along the last axis, integers kept as integers; along the first.
  const Tensor picked = pick(ints(ElemKind::I64, {2, 3}, {5, 6, 7, 8, 9, 4}), 1, ints(ElemKind::I64, {2}, {2, 0}));
  EXPECT_EQ(picked.kind, ElemKind::I64);
  EXPECT_EQ(picked.ints, (Ints{7, 8}));
  expect_bits(pick(x, 0, ints(ElemKind::I32, {3, 2}, {1, 0, 0, 1, 1, 1})).reals, {16, 11, 12, 19, 20, 21});
}

TEST(Pick, Errors) {
  const Tensor x = Tensor::real({2, 3});
  EXPECT_EQ(error_of<RuntimeError>([&] {
              pick(x, 1, ints(ElemKind::I32, {2}, {0, 3}));
            }),
            "pick: id 3 at [1] is outside axis 1 of size 3");
  EXPECT_EQ(error_of<RuntimeError>([&] {
              pick_adjoint(Tensor::real({2}), {2, 3}, 1, ints(ElemKind::I32, {2}, {-1, 0}));
            }),
            "pick: id -1 at [0] is outside axis 1 of size 3");
  EXPECT_THROW(pick(x, 1, ints(ElemKind::I32, {3}, {0, 0, 0})), KernelMisuse);  // ids of another shape
  EXPECT_THROW(pick(x, 1, Tensor::real({2})), KernelMisuse);
  EXPECT_THROW(pick(x, 2, ints(ElemKind::I32, {2, 3}, {0, 0, 0, 0, 0, 0})), KernelMisuse);
}

TEST(Pick, TheAdjointPutsEachCotangentAtItsIdAlone) {
  const Tensor ct = reals({2, 2}, {1.5, -2.0, 0.25, -0.0});
  const Tensor r = pick_adjoint(ct, {2, 3, 2}, 1, ints(ElemKind::I32, {2, 2}, {2, 0, 1, 1}));
  EXPECT_EQ(r.shape, (Shape{2, 3, 2}));
  expect_bits(r.reals, {0, -2.0, 0, 0, 1.5, 0, 0, 0, 0.25, -0.0, 0, 0});
}

TEST(OneHot, MarksEachId) {
  const Tensor r = one_hot(ints(ElemKind::I32, {2, 2}, {2, 0, 1, 2}), 3);
  EXPECT_EQ(r.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(r.kind, ElemKind::Real);
  expect_bits(r.reals, {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  EXPECT_EQ(error_of<RuntimeError>([] {
              one_hot(ints(ElemKind::I64, {3}, {0, 3, 1}), 3);
            }),
            "one_hot: id 3 at [1] is outside the new axis 1 of size 3");
  EXPECT_THROW(one_hot(ints(ElemKind::I64, {1}, {0}), -1), KernelMisuse);
  EXPECT_THROW(one_hot(Tensor::real({1}), 2), KernelMisuse);
}

TEST(Iota, ThePositionsAsI32) {
  const Tensor r = runtime::iota(5);
  EXPECT_EQ(r.shape, (Shape{5}));
  EXPECT_EQ(r.kind, ElemKind::I32);
  EXPECT_EQ(r.ints, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(runtime::iota(0).ints.empty());
  EXPECT_EQ(error_of<RuntimeError>([] { runtime::iota((int64_t{1} << 31) + 1); }),
            "iota: an axis of size 2147483649 does not fit i32 positions (at most 2^31)");
  EXPECT_THROW(runtime::iota(-1), RuntimeError);
}

TEST(CastKind, RealToIntegerTruncates) {
  const Tensor x = reals({6}, {2.7, -2.7, -0.0, 0.5, 2147483647.9, -2147483648.0});
  const Tensor i = cast_kind(x, ElemKind::I32);
  EXPECT_EQ(i.kind, ElemKind::I32);
  EXPECT_EQ(i.ints, (Ints{2, -2, 0, 0, 2147483647, -2147483648}));
  EXPECT_EQ(cast_kind(reals({2}, {-0x1p63, 0x1.fffffffffffffp62}), ElemKind::I64).ints,
            (Ints{std::numeric_limits<int64_t>::min(), 0x7ffffffffffffc00}));
}

TEST(CastKind, UnrepresentableValuesAreRuntimeErrors) {
  EXPECT_EQ(error_of<RuntimeError>([] {
              cast_kind(reals({2}, {1, kNaN}), ElemKind::I32);
            }),
            "cast: nan at [1] is outside the range of i32");
  EXPECT_EQ(error_of<RuntimeError>([] { cast_kind(reals({1}, {2147483648.0}), ElemKind::I32); }),
            "cast: 2147483648 at [0] is outside the range of i32");
  EXPECT_THROW(cast_kind(reals({1}, {-2147483649.0}), ElemKind::I32), RuntimeError);
  EXPECT_THROW(cast_kind(reals({1}, {0x1p63}), ElemKind::I64), RuntimeError);
  EXPECT_THROW(cast_kind(reals({1}, {-kInf}), ElemKind::I64), RuntimeError);
  EXPECT_EQ(error_of<RuntimeError>([] { cast_kind(ints(ElemKind::I64, {1}, {int64_t{1} << 31}), ElemKind::I32); }),
            "cast: 2147483648 at [0] is outside the range of i32");
}

TEST(CastKind, IntegersToRealsAndBools) {
  const int64_t two53 = int64_t{1} << 53;
  const Tensor r = cast_kind(ints(ElemKind::I64, {3}, {-7, two53, two53 + 1}), ElemKind::Real);
  expect_bits(r.reals, {-7.0, 0x1p53, 0x1p53});  // beyond 2^53: rounded to nearest even
  EXPECT_EQ(cast_kind(ints(ElemKind::I32, {2}, {-5, 5}), ElemKind::I64).ints, (Ints{-5, 5}));
  EXPECT_EQ(cast_kind(reals({4}, {0.0, -0.0, kNaN, 0.25}), ElemKind::Bool).ints, (Ints{0, 0, 1, 1}));
  EXPECT_EQ(cast_kind(ints(ElemKind::I64, {3}, {0, -3, 1}), ElemKind::Bool).ints, (Ints{0, 1, 1}));
  const Tensor b = ints(ElemKind::Bool, {2}, {1, 0});
  expect_bits(cast_kind(b, ElemKind::Real).reals, {1.0, 0.0});
  EXPECT_EQ(cast_kind(b, ElemKind::I32).ints, (Ints{1, 0}));
  expect_bits(cast_kind(reals({1}, {kNaN}), ElemKind::Real).reals, {kNaN});
}

TEST(BroadcastTo, CopiesAlongNewAndSizeOneAxes) {
  // [3] → [2, 3]
  const Tensor v = reals({3}, {1, 2, -0.0});
  const Tensor r = broadcast_to(v, {-1, 0}, {2, 3});
  expect_bits(r.reals, {1, 2, -0.0, 1, 2, -0.0});
  // [2, 1] → [2, 3]
  const Tensor c = ints(ElemKind::I32, {2, 1}, {5, 6});
  EXPECT_EQ(broadcast_to(c, {0, 1}, {2, 3}).ints, (Ints{5, 5, 5, 6, 6, 6}));
  // A transposed map: [2, 3] → r[j, i] = m[i, j]
  const Tensor m = iota(ElemKind::I64, {2, 3});
  const Tensor t = broadcast_to(m, {1, 0}, {3, 2});
  EXPECT_EQ(t.ints, (Ints{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(error_of<RuntimeError>([&] { broadcast_to(v, {0}, {4}); }),
            "broadcast_to: axis 0 of the operand has size 3 but result axis 0 has size 4");
  EXPECT_THROW(broadcast_to(v, {0, 0}, {3, 3}), KernelMisuse);
}

// A copy moves numbers: f32 numbers held as f32 alone stay so, in a result
// held as f32 alone, and the source gains no f64 view (detail::copies_narrow).
// The same numbers as the copy of their f64 form.
TEST(Copies, KeepF32NumbersInTheirF32View) {
  auto narrow = [](Shape shape, std::vector<double> v) {
    Tensor t = reals(std::move(shape), std::move(v));
    Tensor n;
    n.shape = t.shape;
    n.reals = RealStorage::narrow_for_overwrite(t.reals.size());
    float* f = n.reals.narrow_for_writing();
    for (size_t i = 0; i < t.reals.size(); ++i) f[i] = static_cast<float>(t.reals[i]);
    return n;
  };
  const std::vector<double> six = {1.5, -2.0, -0.0, 0.25, 3.0, -7.5};
  const Tensor x = narrow({2, 3}, six), wide = reals({2, 3}, six);
  const Tensor ids = iota(ElemKind::I32, {2});
  Tensor picks = Tensor::integer(ElemKind::I32, {2});
  picks.ints = {2, 0};
  const Tensor ct = narrow({2}, {0.5, -1.0});
  const std::vector<std::pair<Tensor, Tensor>> copies = {
      {gather(x, 0, ids), gather(wide, 0, ids)},
      {pick(x, 1, picks), pick(wide, 1, picks)},
      {concat({&x, &x}, 1), concat({&wide, &wide}, 1)},
      {slice_adjoint(ct, {4}, 0, 0, 4, 2), slice_adjoint(reals({2}, {0.5, -1.0}), {4}, 0, 0, 4, 2)},
      {pick_adjoint(ct, {2, 3}, 1, picks), pick_adjoint(reals({2}, {0.5, -1.0}), {2, 3}, 1, picks)},
  };
  for (size_t k = 0; k < copies.size(); ++k) {
    SCOPED_TRACE(k);
    const Tensor& got = copies[k].first;
    EXPECT_TRUE(got.reals.holds_narrow());
    EXPECT_FALSE(got.reals.holds_wide());
    expect_bits(got.reals, copies[k].second.reals);
  }
  EXPECT_FALSE(x.reals.holds_wide());
  EXPECT_FALSE(ct.reals.holds_wide());
}

}  // namespace
}  // namespace quire::runtime
