// The operation table (core/ops.def): its names are unique, its spellings
// shared only where the language shares them, and its flags agree with each
// other: the passes read each flag alone, so a row whose flags contradict (a
// product that is not a reduction, a copy rounded through f32) would be
// treated inconsistently by two passes.

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "quire/core/ir.h"

namespace quire::core {
namespace {

std::vector<Op> every_op() {
  return {
#define QUIRE_OP(E, N, S, A, REG, FLAGS, ATTRS) Op::E,
#include "quire/core/ops.def"
#undef QUIRE_OP
  };
}

TEST(OpsTable, FlagsAgreeWithEachOther) {
  for (Op op : every_op()) {
    const OpInfo& info = op_info(op);
    SCOPED_TRACE(info.spelling);
    if (info.product) {
      EXPECT_TRUE(info.reduction) << "a product sums over k: it is a reduction";
    }
    if (info.copies) {
      EXPECT_TRUE(info.stored_directly) << "a copy is stored as its operand was, without rounding twice";
      EXPECT_FALSE(info.elementwise || info.reduction);
    }
    if (info.selects || info.compares) {
      EXPECT_TRUE(info.elementwise);
    }
    if (info.compares) {
      EXPECT_EQ(info.regularity, Regularity::Discontinuous);
      EXPECT_EQ(info.arity, 2);
    }
    if (info.calls || info.draws) {
      EXPECT_FALSE(info.elementwise || info.reduction || info.copies);
    }
    EXPECT_FALSE(info.elementwise && info.reduction);
  }
}

TEST(OpsTable, EachOperationStartsWithItsAttributeFamily) {
  for (Op op : every_op()) {
    SCOPED_TRACE(op_info(op).name);
    EXPECT_LT(op_info(op).attrs, std::variant_size_v<Attrs>);
    EXPECT_EQ(default_attrs(op).index(), op_info(op).attrs);
  }
  EXPECT_EQ(op_info(Op::Slice).attrs, attr_index<attr::Range>());
  EXPECT_EQ(op_info(Op::Dot).attrs, attr_index<attr::ProductOut>());
  EXPECT_EQ(op_info(Op::Contract).attrs, attr_index<attr::None>());
}

TEST(OpsTable, NamesAreUniqueAndFindTheirOperation) {
  std::set<std::string> seen;
  for (Op op : every_op()) {
    const std::string name = op_info(op).name;
    EXPECT_TRUE(seen.insert(name).second) << name << " names two operations";
    EXPECT_EQ(op_by_name(name), op) << name;
  }
  EXPECT_EQ(op_by_name("max"), Op::Max);
  EXPECT_EQ(op_by_name("reduce_max"), Op::ReduceMax);
  EXPECT_EQ(op_by_name("pow_const"), Op::PowConst);
  EXPECT_EQ(op_by_name("nonesuch"), std::nullopt);
}

TEST(OpsTable, OnlyTheLanguagesOwnSharedSpellingsAreShared) {
  // max and min spell both the element-wise and the reducing operation, and
  // pow both of its forms, as the language does; every other spelling is
  // its row's name.
  for (Op op : every_op()) {
    const OpInfo& info = op_info(op);
    const std::string spelling = info.spelling;
    if (spelling == info.name) continue;
    EXPECT_TRUE(op == Op::ReduceMax || op == Op::ReduceMin || op == Op::PowConst)
        << info.name << " is spelled " << spelling;
  }
}

TEST(OpsTable, TheFlagsArePlacedWhereThePassesExpectThem) {
  EXPECT_TRUE(op_info(Op::Dot).product);
  EXPECT_TRUE(op_info(Op::ContractGradB).product);
  EXPECT_FALSE(op_info(Op::Sum).product);
  EXPECT_TRUE(op_info(Op::Transpose).copies);
  EXPECT_FALSE(op_info(Op::OneHot).copies);
  EXPECT_TRUE(op_info(Op::OneHot).stored_directly);
  EXPECT_TRUE(op_info(Op::Cast).stored_directly);
  EXPECT_FALSE(op_info(Op::Exp).stored_directly);
  EXPECT_TRUE(op_info(Op::Relu).selects);
  EXPECT_FALSE(op_info(Op::Mul).selects);
  EXPECT_TRUE(op_info(Op::Ne).compares);
  EXPECT_TRUE(op_info(Op::Bernoulli).draws);
  EXPECT_TRUE(op_info(Op::FoldVjp).calls);
}

}  // namespace
}  // namespace quire::core
