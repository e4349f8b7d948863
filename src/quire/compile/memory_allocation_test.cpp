// The memory of one call (memory.h) against every allocation of a real run:
// the native backend runs the call with the allocation log installed
// (runtime/allocation_log.h), which sees every f64 and f32 view of a real
// tensor's elements allocated and released, and the most bytes live at once
// must be the peak that count_call_memory finds without running anything.
//
// The log is installed after the caller's values exist (θ, the batch, cast
// to the realization's input types ahead of the call), so it measures the
// call's allocations on top of them: what the count calls the peak, its
// inputs apart. A first call runs before, unlogged: whatever a call leaves
// made on the caller's values (a view of one) is the caller's after it.
//
// The runtime holds a real tensor as f64, as f32, or both (real_storage.h),
// so the count is made at the widths the native backend holds values at
// (Widths::Native): a bf16 or f16 value as f32 (4 bytes), never 2. Integer,
// boolean and key tensors are not in the log (their elements are not a
// RealStorage), so they count 0 there too. Beyond that the two must agree,
// byte for byte, or by a difference the case states and explains.
//
// The calls compared are the loss's and its vjp's (the training step's
// gradient), of the tutorial at B = 4 and 32 and of the GPT example at
// B = 2, under both remats, and generated programs and their vjps.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "quire/compile/executor.h"
#include "quire/compile/memory.h"
#include "quire/compile/memory_testing.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/reference_step.h"
#include "quire/kernel/generated_programs_testing.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/native/native_runner.h"
#include "quire/native/native_testing.h"
#include "quire/runtime/allocation_log.h"

namespace quire::compile {
namespace {

using interp::Value;

struct Logged {
  CallMemory counted;  ///< at the storage types, as `quire memory` prints it
  CallMemory held;     ///< at the widths the native backend holds values in
  int64_t peak = 0;    ///< the log's peak over one call
  std::vector<runtime::LoggedAllocation> at_peak;
  int64_t left = 0;  ///< what the call left allocated (its result)
};

Logged count_and_log(elab::Program& prog, int fn, const std::vector<Value>& args,
                     const std::map<std::string, int64_t>& dims, precision::Policy policy, interp::Remat remat) {
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize.policy = policy;
  request.remat = remat;
  request.arguments = &args;
  const CompiledProgram c = compile(prog, request);
  Logged out;
  out.counted = count_call_memory(prog, c);
  out.held = count_call_memory(prog, c, {.widths = Widths::Native, .integers = false});
  native::NativeRunner runner;
  kernel::KernelEngine engine(c.catalog, runner);
  EXPECT_EQ(engine.fell_back(), "") << "the native backend did not run";
  Executor executor(prog, c, engine);
  // The caller's values as the call takes them, so that the call casts nothing.
  std::vector<Value> cast;
  for (const Value& a : args) cast.push_back(c.realization ? interp::cast_entry_argument(*c.realization, a) : a);
  executor.call(cast);
  {
    runtime::AllocationLog log;
    Value result = executor.call(cast);
    out.peak = log.peak_bytes();
    out.at_peak = log.live_at_peak();
    out.left = log.live_bytes();
  }
  // The entry's result (the loss; and the gradient, for a vjp) is all the call leaves allocated.
  EXPECT_EQ(out.left, out.held.output_bytes);
  return out;
}

const char* remat_label(interp::Remat r) { return r == interp::Remat::Store ? "store" : "recompute"; }

std::string figures(const Logged& l) {
  std::string live;
  for (const runtime::LoggedAllocation& a : l.at_peak)
    live += fmt::format("{}{} {}", live.empty() ? "" : ", ", a.bytes, runtime::held_as_name(a.held));
  return fmt::format("counted {} (at the storage types {}), logged {}: {}", l.held.peak_bytes, l.counted.peak_bytes,
                     l.peak, live);
}

/// The log's peak is the count's, and what was live at it adds up to it;
/// a call that `allocates` (every one but a generated identity) has one.
void expect_agree(const Logged& l, const std::string& what, bool allocates = true) {
  EXPECT_EQ(l.peak, l.held.peak_bytes) << what << ": " << figures(l);
  int64_t sum = 0;
  for (const runtime::LoggedAllocation& a : l.at_peak) sum += a.bytes;
  EXPECT_EQ(sum, l.peak) << what;
  if (allocates) {
    EXPECT_GT(l.peak, 0) << what;
  }
}

class MemoryAllocation : public native::testing::FreshCacheTest {};

TEST_F(MemoryAllocation, TheTutorialsLoggedPeakIsItsCountedPeak) {
  for (int64_t b : {4, 32})
    for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
      for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16}) {
        const std::string what =
            fmt::format("tutorial B = {}, {}, {}", b, precision::policy_name(policy), remat_label(remat));
        SCOPED_TRACE(what);
        auto e = elab::testing::elaborate_tutorial();
        ASSERT_TRUE(e->ok()) << e->rendered();
        elab::Program& prog = *e->prog;
        const std::map<std::string, int64_t> dims = {{"B", b}};
        const int loss = prog.find_function("loss");
        const std::vector<Value> args = kernel::testing::drawn_arguments(prog, loss, dims);
        expect_agree(count_and_log(prog, loss, args, dims, policy, remat), what);
        // The training step's gradient: the vjp with respect to θ, its cotangent 1.
        const int vjp = grad::vjp(prog, loss, {0});
        std::vector<Value> with_ct = args;
        with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
        expect_agree(count_and_log(prog, vjp, with_ct, dims, policy, remat), what + ", its vjp");
      }
}

TEST_F(MemoryAllocation, TheGptsLoggedPeakIsItsCountedPeak) {
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
    for (precision::Policy policy : {precision::Policy::F32, precision::Policy::BF16}) {
      const std::string what = fmt::format("gpt B = 2, {}, {}", precision::policy_name(policy), remat_label(remat));
      SCOPED_TRACE(what);
      auto e = testing::elaborate_gpt();
      ASSERT_TRUE(e->ok()) << e->rendered();
      elab::Program& prog = *e->prog;
      const std::map<std::string, int64_t> dims = {{"B", 2}};
      const int loss = prog.find_function("loss");
      const std::vector<Value> args = testing::gpt_loss_arguments(prog, loss);
      const Logged l = count_and_log(prog, loss, args, dims, policy, remat);
      const int vjp = grad::vjp(prog, loss, {0});
      std::vector<Value> with_ct = args;
      with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
      const Logged backward = count_and_log(prog, vjp, with_ct, dims, policy, remat);
      expect_agree(l, what);
      expect_agree(backward, what + ", its vjp");
    }
}

// Programs nobody wrote by hand (kernel/generated_programs_testing.h):
// functions of every operation on special values, towers of folds and
// calls, and their vjps, in f64 and f32 under both remats.
TEST_F(MemoryAllocation, GeneratedProgramsAndTheirGradientsAllocateWhatIsCounted) {
  for (bool towers : {false, true})
    kernel::testing::for_each_generated_case(towers, towers ? 8 : 16, [&](const kernel::testing::GeneratedCase& c) {
      for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32}) {
        const std::string what = fmt::format("{}", precision::policy_name(policy));
        SCOPED_TRACE(what);
        expect_agree(count_and_log(*c.e->prog, c.f, c.specials, {}, policy, interp::Remat::Recompute), what, false);
        for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
          expect_agree(count_and_log(*c.e->prog, c.vjp, c.finite, {}, policy, remat),
                       what + ", its vjp, " + remat_label(remat), false);
      }
    });
}

TEST_F(MemoryAllocation, ScansAndTheirGradientsAllocateWhatIsCounted) {
  // The recurrences' reference kernels: matrix_scan's island, linear_scan's
  // transposes around it, the adjoint scan and a's cotangent in the vjp.
  auto e = elab::testing::elaborate_text(R"(dim B
fn f(a : ℝ[b: B, t: 6, n: 3, m: 3], x : ℝ[b: B, t: 6, n: 3], c : ℝ[b: B, t: 6, k: 4]) -> ℝ[] =
  sum(tanh(matrix_scan(a * 0.5, x))) + sum(linear_scan(tanh(c), c) * c)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  const int f = prog.find_function("f");
  const int vjp = grad::vjp(prog, f, {0, 1, 2});
  for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16})
    for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store}) {
      const std::string what = fmt::format("scans, {}, {}", precision::policy_name(policy), remat_label(remat));
      SCOPED_TRACE(what);
      const std::map<std::string, int64_t> dims = {{"B", 2}};
      const std::vector<Value> args = kernel::testing::drawn_arguments(prog, f, dims);
      expect_agree(count_and_log(prog, f, args, dims, policy, remat), what);
      std::vector<Value> with_ct = args;
      with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
      expect_agree(count_and_log(prog, vjp, with_ct, dims, policy, remat), what + ", its vjp");
    }
}

}  // namespace
}  // namespace quire::compile
