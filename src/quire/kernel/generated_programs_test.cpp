// Random programs (generated_programs.h) through the kernel engine on the
// kernel interpreter, against the reference interpreter, bit for bit: each
// function on arguments with special values, each tower (parameters, a stack
// folded) on its initial parameters, and their vjps on finite values
// (forward values recomputed, and stored), under every policy, unplanned and
// with every kernel at its widest layout.

#include "quire/kernel/generated_programs.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/kernel_testing.h"

namespace quire::kernel {
namespace {

using testing::every_policy;
using testing::expect_same;
using testing::label;

void expect_reference_bits(bool module_programs, int count) {
  const machine::Profile eager = testing::eager_profile();
  InterpretingRunner runner;
  int64_t launches = 0;
  for (int seed = 0; seed < testing::generated_program_count(count); ++seed) {
    const testing::GeneratedCase c = testing::generated_case(static_cast<uint64_t>(seed), module_programs);
    SCOPED_TRACE("seed " + std::to_string(seed) + ":\n" + c.program.source);
    ASSERT_TRUE(c.e->ok()) << c.e->rendered();
    for (const precision::RealizeOptions& o : every_policy()) {
      for (const machine::Profile* plan : {static_cast<const machine::Profile*>(nullptr), &eager}) {
        SCOPED_TRACE(label(o) + (plan ? ", every kernel at its widest layout" : ", unplanned"));
        const testing::Runs forward =
            testing::run_both(*c.e->prog, c.f, c.specials, {}, o, runner, interp::Remat::Recompute, plan, 2);
        expect_same(forward.kernels, forward.reference, "f");
        launches += forward.kernel_launches;
        for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store}) {
          const testing::Runs backward = testing::run_both(*c.e->prog, c.vjp, c.finite, {}, o, runner, remat, plan, 2);
          expect_same(backward.kernels, backward.reference,
                      remat == interp::Remat::Store ? "f.vjp (remat store)" : "f.vjp");
          launches += backward.kernel_launches;
        }
      }
    }
    if (::testing::Test::HasFailure()) return;  // one program's failures at a time
  }
  EXPECT_GT(launches, 0) << "the programs' operations run as kernels";
}

TEST(GeneratedPrograms, HaveTheReferenceBitsOnTheKernelInterpreter) { expect_reference_bits(false, 200); }

TEST(GeneratedPrograms, TowersAndTheirGradientsHaveTheReferenceBitsOnTheKernelInterpreter) {
  expect_reference_bits(true, 60);
}

}  // namespace
}  // namespace quire::kernel
