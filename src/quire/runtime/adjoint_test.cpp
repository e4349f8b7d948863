#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>

#include "quire/runtime/float_types.h"
#include "quire/runtime/kernels.h"

namespace quire::runtime {
namespace {

// gather_adjoint sums ct's rows into the table's in ct's row-major order,
// each step rounded to the accumulator: checked against that loop written
// out, for every accumulator, with ids that repeat (the sums that round) and
// a table axis that is not the first. Under an f32 accumulator the sums are
// held as f32 alone (no f64 table beside them).
TEST(GatherAdjoint, SumsInRowMajorOrderRoundingEachStepToTheAccumulator) {
  const Shape shape = {2, 5, 3};  // outer 2, table axis 1 of size 5, inner 3
  Tensor ids = Tensor::integer(ElemKind::I32, {7});
  const int64_t chosen[7] = {4, 1, 4, 0, 4, 1, 2};
  for (int i = 0; i < 7; ++i) ids.ints[static_cast<size_t>(i)] = chosen[i];
  Tensor ct = Tensor::real({2, 7, 3});
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t k = 0; k < ct.reals.size(); ++k) ct.reals[k] = u(rng) * (k % 5 == 0 ? 1e-9 : 1.0);
  for (FloatType acc : {FloatType::F64, FloatType::F32, FloatType::BF16}) {
    SCOPED_TRACE(float_type_name(acc));
    std::vector<double> want(static_cast<size_t>(element_count(shape)), 0.0);
    int64_t k = 0;
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t i = 0; i < 7; ++i)
        for (int64_t q = 0; q < 3; ++q, ++k) {
          double& r = want[static_cast<size_t>((p * 5 + chosen[i]) * 3 + q)];
          r = acc == FloatType::F64 ? r + ct.reals[static_cast<size_t>(k)]
                                    : round_to(acc, r + ct.reals[static_cast<size_t>(k)]);
        }
    const Tensor got = gather_adjoint(ct, shape, 1, ids, acc);
    ASSERT_EQ(got.shape, shape);
    if (acc == FloatType::F32) {
      EXPECT_TRUE(got.reals.holds_narrow() && !got.reals.holds_wide());
    }
    for (size_t e = 0; e < want.size(); ++e)
      EXPECT_EQ(std::bit_cast<uint64_t>(got.reals[e]), std::bit_cast<uint64_t>(want[e])) << "element " << e;
  }
}

}  // namespace
}  // namespace quire::runtime
