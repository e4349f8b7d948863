// core::verify finds each broken invariant it states, on Core the elaborator
// made and then damaged by hand; Core as elaborated and differentiated holds them.

#include "quire/core/verify.h"

#include <gtest/gtest.h>

#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/kernel/generated_programs_testing.h"

namespace quire::core {
namespace {

constexpr const char* kProgram = R"(
fn f(x : ℝ[n: 3], y : ℝ[n: 3]) -> ℝ[] = sum(exp(x) * y + x)
)";

struct Damaged {
  std::unique_ptr<elab::testing::Elaborated> e;
  Function fn;
};

Damaged elaborated() {
  Damaged d;
  d.e = elab::testing::elaborate_text(kProgram);
  EXPECT_TRUE(d.e->ok()) << d.e->rendered();
  d.fn = d.e->prog->functions.at(static_cast<size_t>(d.e->prog->find_function("f")));
  return d;
}

bool mentions(const std::vector<std::string>& problems, const std::string& what) {
  for (const std::string& p : problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

TEST(CoreVerify, ElaboratedAndDifferentiatedCoreHoldsEveryInvariant) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  for (const Function& fn : e->prog->functions) EXPECT_TRUE(verify(fn, e->prog->functions.size()).empty()) << fn.name;
  const size_t before = e->prog->functions.size();
  grad::vjp(*e->prog, e->prog->find_function("loss"), {0});
  ASSERT_GT(e->prog->functions.size(), before);
  EXPECT_NO_THROW(verify_or_throw(e->prog->functions));
}

TEST(CoreVerify, GeneratedProgramsAndTheirVjpsHoldEveryInvariant) {
  for (bool towers : {false, true})
    kernel::testing::for_each_generated_case(towers, 200, [](const kernel::testing::GeneratedCase& c) {
      EXPECT_NO_THROW(verify_or_throw(c.e->prog->functions));
    });
}

TEST(CoreVerify, AnOperandUsedBeforeItIsDefined) {
  Damaged d = elaborated();
  Instr& first = d.fn.body.front();
  first.args.at(0) = d.fn.result_value;  // a later value
  EXPECT_TRUE(mentions(verify(d.fn, 1), "is not defined before its use"));
}

TEST(CoreVerify, AnInstructionOutOfOrder) {
  Damaged d = elaborated();
  std::swap(d.fn.body.front().id, d.fn.body.back().id);
  EXPECT_TRUE(mentions(verify(d.fn, 1), "sites must follow body order"));
}

TEST(CoreVerify, AnOperandCountTheTableDoesNotAllow) {
  Damaged d = elaborated();
  for (Instr& in : d.fn.body)
    if (in.op == Op::Mul) in.args.pop_back();
  const auto problems = verify(d.fn, 1);
  EXPECT_TRUE(mentions(problems, "`mul` takes 2 operands, it has 1")) << ::testing::PrintToString(problems);
}

TEST(CoreVerify, AnElementWiseOperandWithoutItsAlignment) {
  Damaged d = elaborated();
  for (Instr& in : d.fn.body)
    if (in.op == Op::Add) in.align.pop_back();
  EXPECT_TRUE(mentions(verify(d.fn, 1), "element-wise `add` has 1 alignments for 2 operands"));
}

TEST(CoreVerify, ACallOfAFunctionThatDoesNotExist) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  Function fn = e->prog->functions.at(static_cast<size_t>(e->prog->find_function("loss")));
  for (Instr& in : fn.body)
    if (in.op == Op::Call) in.callee = 100000;
  EXPECT_TRUE(mentions(verify(fn, e->prog->functions.size()), "which the program does not have"));
  std::vector<Function> all = e->prog->functions;
  all.push_back(fn);
  EXPECT_THROW(verify_or_throw(all), std::logic_error);
}

TEST(CoreVerify, AnInstructionCarryingAnotherOperationsAttributes) {
  Damaged d = elaborated();
  for (Instr& in : d.fn.body)
    if (in.op == Op::Exp) in.attrs = attr::Range{0, 1, 1};  // past set(), which would refuse it
  EXPECT_TRUE(mentions(verify(d.fn, 1), "`exp` carries Range attributes, not None"));
}

TEST(CoreVerify, ATupleElementOrASliceOutOfRange) {
  auto e = elab::testing::elaborate_text(R"(
fn f(x : ℝ[n: 8]) -> ℝ[] =
  let (a, b) = (x, slice(axis n, x, 2, 6))
  sum(a) + sum(b)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  Function fn = e->prog->functions.at(static_cast<size_t>(e->prog->find_function("f")));
  EXPECT_TRUE(verify(fn, 1).empty());
  for (Instr& in : fn.body) {
    if (in.op == Op::TupleGet) in.attr<attr::Element>().index = 2;
    if (in.op == Op::Slice) in.attr<attr::Range>().step = 0;
  }
  const auto problems = verify(fn, 1);
  EXPECT_TRUE(mentions(problems, "`get` reads element 2 of 2")) << ::testing::PrintToString(problems);
  EXPECT_TRUE(mentions(problems, "`slice` has the range [2:6:0]")) << ::testing::PrintToString(problems);
}

TEST(CoreVerify, AResultThatIsNotAValue) {
  Damaged d = elaborated();
  d.fn.result_value = d.fn.value_count() + 1;
  EXPECT_TRUE(mentions(verify(d.fn, 1), "is not one of its values"));
}

}  // namespace
}  // namespace quire::core
