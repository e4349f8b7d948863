// Each operation carries the attribute family ops.def names for it: set() and
// attr() refuse any other, verify() reports one, and the families' names and
// the cast targets' spellings are the ones the printouts use.

#include "quire/core/attrs.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "quire/core/ir.h"
#include "quire/core/verify.h"
#include "quire/elab/elab_testing.h"

namespace quire::core {
namespace {

TEST(CoreAttrs, SetAcceptsOnlyTheFamilyTheTableNames) {
  Instr slice;
  slice.op = Op::Slice;
  slice.set(attr::Range{1, 5, 2});
  EXPECT_EQ(slice.attr<attr::Range>().start, 1);
  EXPECT_EQ(slice.attr<attr::Range>().stop, 5);
  EXPECT_EQ(slice.attr<attr::Range>().step, 2);
  // A tuple index is not a slice's attribute, nor is a slice's range a tuple index.
  EXPECT_THROW(slice.set(attr::Element{3}), std::logic_error);
  EXPECT_THROW((void)slice.attr<attr::Element>(), std::logic_error);

  Instr dot;
  dot.op = Op::Dot;
  dot.set(attr::ProductOut{attr::ProductOut::Out::F64});
  EXPECT_EQ(requested_out(dot), attr::ProductOut::Out::F64);
  // Only Dot carries `out =`: a contraction's cotangent carries its form instead.
  Instr grad;
  grad.op = Op::ContractGradA;
  EXPECT_THROW(grad.set(attr::ProductOut{attr::ProductOut::Out::F32}), std::logic_error);
  grad.set(attr::ProductForm{true});
  EXPECT_EQ(requested_out(grad), attr::ProductOut::Out::Policy);

  Instr add;
  add.op = Op::Add;
  EXPECT_THROW(add.set(attr::Literal{1.0}), std::logic_error);
}

TEST(CoreAttrs, TheErrorNamesTheOperationAndBothFamilies) {
  Instr field;
  field.op = Op::Field;
  field.id = 7;
  field.set(attr::Member{"w"});
  try {
    (void)field.attr<attr::CastTo>();
    FAIL() << "read a cast target from a field";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "internal: field at %7 carries Member attributes, not CastTo");
  }
}

TEST(CoreAttrs, FamilyNamesFollowTheVariant) {
  EXPECT_STREQ(attr_family_name(attr_index<attr::None>()), "None");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Literal>()), "Literal");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Integer>()), "Integer");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Boolean>()), "Boolean");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Member>()), "Member");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Element>()), "Element");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Exponent>()), "Exponent");
  EXPECT_STREQ(attr_family_name(attr_index<attr::CastTo>()), "CastTo");
  EXPECT_STREQ(attr_family_name(attr_index<attr::ProductOut>()), "ProductOut");
  EXPECT_STREQ(attr_family_name(attr_index<attr::Range>()), "Range");
  EXPECT_STREQ(attr_family_name(attr_index<attr::DrawParams>()), "DrawParams");
  EXPECT_STREQ(attr_family_name(attr_index<attr::ExpandOf>()), "ExpandOf");
  EXPECT_STREQ(attr_family_name(attr_index<attr::ProductForm>()), "ProductForm");
  EXPECT_STREQ(attr_family_name(attr_index<attr::VjpOf>()), "VjpOf");
}

TEST(CoreAttrs, CastTargetsReadBackAsTheyAreSpelled) {
  for (CastTarget t : {CastTarget::Real, CastTarget::F64, CastTarget::F32, CastTarget::Bf16, CastTarget::F16,
                       CastTarget::F32Acc, CastTarget::I32, CastTarget::I64, CastTarget::Bool})
    EXPECT_EQ(parse_cast_target(cast_target_name(t)), t) << cast_target_name(t);
  EXPECT_EQ(parse_cast_target("real"), CastTarget::Real);
  EXPECT_EQ(parse_cast_target("f8"), std::nullopt);
}

TEST(CoreAttrs, ElaboratedInstructionsCarryTheirFamily) {
  auto e = elab::testing::elaborate_text(R"(
fn f(x : ℝ[n: 8], w : ℝ[8, 3]) -> ℝ[3] =
  let s = slice(axis n, x, 1, 7, 2)
  let y = (x as f32) · w
  let z = matmul(x, w, out = f64)
  (sum(s) + 0.5) ^ 3 * (y + z)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const Function& fn = e->prog->functions.at(static_cast<size_t>(e->prog->find_function("f")));
  int slices = 0, casts = 0, outs = 0, powers = 0, literals = 0;
  for (const Instr& in : fn.body) {
    EXPECT_EQ(in.attrs.index(), op_info(in.op).attrs) << op_info(in.op).name;
    if (in.op == Op::Slice) {
      ++slices;
      EXPECT_EQ(in.attr<attr::Range>().start, 1);
      EXPECT_EQ(in.attr<attr::Range>().stop, 7);
      EXPECT_EQ(in.attr<attr::Range>().step, 2);
    }
    if (in.op == Op::Cast && in.attr<attr::CastTo>().target == CastTarget::F32) ++casts;
    if (requested_out(in) == attr::ProductOut::Out::F64) ++outs;
    if (in.op == Op::PowConst && in.attr<attr::Exponent>().value == 3) ++powers;
    if (in.op == Op::Const && in.attr<attr::Literal>().value == 0.5) ++literals;
  }
  EXPECT_EQ(slices, 1);
  EXPECT_EQ(casts, 1);
  EXPECT_EQ(outs, 1);
  EXPECT_EQ(powers, 1);
  EXPECT_EQ(literals, 1);
  EXPECT_TRUE(verify(fn, e->prog->functions.size()).empty());
}

}  // namespace
}  // namespace quire::core
