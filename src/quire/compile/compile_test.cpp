// The compiled program against a run: the kernels, their numbering and
// their launch counts that `compile` finds without running are those a
// kernel engine lowers while the interpreter walks the same call; a run on
// the compiled catalog lowers nothing more and gives the same bits; and the
// executor, running the host program without the interpreter, gives the
// reference interpreter's bits and counts.

#include "quire/compile/compile.h"

#include <gtest/gtest.h>

#include "quire/compile/build_host.h"
#include "quire/compile/executor.h"
#include "quire/kernel/generated_programs_testing.h"
#include "quire/kernel/kernel_testing.h"

namespace quire::compile {
namespace {

using interp::Value;
using kernel::testing::every_policy;
using kernel::testing::expect_same;

struct Compared {
  int64_t launches = 0;
};

/// Compiles `fn` for `args`, runs the same call with a kernel engine that
/// lowers as it goes, and runs it again on the compiled catalog; expects the
/// same kernels, counts and bits.
Compared expect_compiled_as_run(elab::Program& prog, int fn, const std::vector<Value>& args,
                                const std::map<std::string, int64_t>& dims, const precision::RealizeOptions& options,
                                interp::Remat remat, const machine::Profile* plan = nullptr) {
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize = options;
  request.remat = remat;
  request.profile = plan;
  request.threads = 2;
  request.arguments = &args;
  const CompiledProgram c = compile(prog, request);

  kernel::InterpretingRunner runner;
  kernel::KernelEngine lazy(prog, fn, dims, options.half_intermediates, runner);
  if (plan) lazy.set_plan(*plan, 2);
  interp::Interpreter walked(prog, dims, c.realization.get());
  walked.set_remat(remat);
  walked.set_launcher(&lazy);
  const Value want = walked.call(fn, args);

  // The same kernels, in the same order, launched as often.
  EXPECT_EQ(c.catalog->kernels().size(), lazy.kernels().size());
  for (size_t k = 0; k < std::min(c.catalog->kernels().size(), lazy.kernels().size()); ++k) {
    EXPECT_EQ(c.catalog->kernels()[k].text, lazy.kernels()[k].text) << "k" << k;
    EXPECT_EQ(c.catalog->kernels()[k].sites, lazy.kernels()[k].sites) << "k" << k;
    EXPECT_EQ(c.host.launches.at(k), lazy.launches().at(k)) << "k" << k;
  }
  EXPECT_EQ(c.host.kernel_launches, lazy.kernel_launches());
  EXPECT_EQ(c.host.reference_launches, lazy.runtime_launches());
  EXPECT_EQ(compile::print_kernels(prog, c.host), lazy.print());

  // On the compiled catalog: nothing new is lowered, and the bits are the run's.
  const size_t lowered = c.catalog->lowered();
  kernel::KernelEngine compiled(c.catalog, runner);
  interp::Interpreter run(prog, dims, c.realization.get());
  run.set_remat(remat);
  run.set_launcher(&compiled);
  expect_same(run.call(fn, args), want, "result");
  EXPECT_EQ(c.catalog->lowered(), lowered);
  EXPECT_EQ(compiled.launches(), c.host.launches);

  // The executor: the reference interpreter's bits (the interpreter alone,
  // without kernels) and the counts of the walk that launched the kernels.
  kernel::KernelEngine executed(c.catalog, runner);
  Executor executor(prog, c, executed);
  const Value got = executor.call(args);
  interp::Interpreter reference(prog, dims, c.realization.get());
  reference.set_remat(remat);
  expect_same(got, reference.call(fn, args), "executed");
  expect_same(got, want, "executed");
  EXPECT_EQ(executed.launches(), c.host.launches);
  EXPECT_EQ(executed.runtime_launches(), c.host.reference_launches);
  EXPECT_EQ(executor.stats().evaluated, walked.stats().evaluated);
  EXPECT_EQ(executor.stats().reused, walked.stats().reused);
  EXPECT_EQ(executor.stats().forwards_repeated, walked.stats().forwards_repeated);
  EXPECT_EQ(executor.stats().stored_bytes_peak, walked.stats().stored_bytes_peak);
  // A second call runs the same steps: the same bits again.
  expect_same(executor.call(args), got, "executed again");
  return {c.host.kernel_launches};
}

TEST(Compile, TheTutorialsLossAndItsGradientAsARunLowersThem) {
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store}) {
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(kernel::testing::label(o) + (remat == interp::Remat::Store ? ", remat store" : ", recompute"));
      auto e = elab::testing::elaborate_tutorial();
      ASSERT_TRUE(e->ok()) << e->rendered();
      elab::Program& prog = *e->prog;
      const std::map<std::string, int64_t> dims = {{"B", 4}};
      const int loss = prog.find_function("loss");
      const std::vector<Value> args = kernel::testing::drawn_arguments(prog, loss, dims);
      EXPECT_GT(expect_compiled_as_run(prog, loss, args, dims, o, remat).launches, 0);
      const int vjp = grad::vjp(prog, loss, {0});
      std::vector<Value> with_ct = args;
      with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
      EXPECT_GT(expect_compiled_as_run(prog, vjp, with_ct, dims, o, remat).launches, 0);
    }
  }
}

TEST(Compile, PlannedKernelsAreThoseARunPlans) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims = {{"B", 64}};
  const int vjp = grad::vjp(prog, prog.find_function("loss"), {0});
  std::vector<Value> args = kernel::testing::drawn_arguments(prog, prog.find_function("loss"), dims);
  args.push_back(Value::of(runtime::Tensor::scalar(1.0)));
  const machine::Profile eager = kernel::testing::eager_profile();
  const machine::Profile shipped = machine::shipped_profile();
  for (const machine::Profile* p : {&eager, &shipped}) {
    precision::RealizeOptions o;
    o.policy = precision::Policy::F32;
    o.fused_products = true;
    expect_compiled_as_run(prog, vjp, args, dims, o, interp::Remat::Store, p);
  }
}

TEST(Compile, GeneratedProgramsAndTheirGradientsAsARunLowersThem) {
  const std::vector<precision::RealizeOptions> policies = every_policy();
  for (bool towers : {false, true}) {
    kernel::testing::for_each_generated_case(towers, towers ? 20 : 60, [&](const kernel::testing::GeneratedCase& c) {
      for (size_t i = 0; i < policies.size(); i += towers ? 1 : 3) {
        SCOPED_TRACE(kernel::testing::label(policies[i]));
        expect_compiled_as_run(*c.e->prog, c.f, c.specials, {}, policies[i], interp::Remat::Recompute);
        for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
          expect_compiled_as_run(*c.e->prog, c.vjp, c.finite, {}, policies[i], remat);
      }
    });
  }
}

TEST(Compile, TheHostProgramListsBuffersWithTheirLives) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  CompileRequest request;
  request.entry = prog.find_function("loss");
  request.dims = {{"B", 4}};
  request.realize.policy = precision::Policy::BF16;
  const CompiledProgram c = compile(prog, request);
  const HostFunction& root = c.host.functions.at(static_cast<size_t>(c.host.root));
  EXPECT_EQ(root.evaluations, 1);
  const core::Function& loss = prog.functions[static_cast<size_t>(request.entry)];
  bool result_seen = false;
  for (const HostBuffer& b : root.buffers) {
    if (b.kind != Value::Kind::Tensor) continue;
    // Each stored value is written before it is last read, and the result lives to the end.
    if (b.first_write >= 0 && b.last_read >= 0) {
      EXPECT_LT(b.first_write, b.last_read) << loss.value_name(b.value);
    }
    if (b.value == loss.result_value) {
      result_seen = true;
      EXPECT_EQ(b.last_read, static_cast<int>(root.steps.size()));
      EXPECT_EQ(b.type, runtime::FloatType::BF16);
      EXPECT_EQ(b.bytes, 2);
    }
  }
  EXPECT_TRUE(result_seen);
  // Each of the 4 linear layers (3 blocks' and the head) runs once a call.
  int64_t linear = 0;
  for (const HostFunction& h : c.host.functions)
    if (prog.functions[static_cast<size_t>(h.function)].name == "Linear.apply") linear += h.evaluations;
  EXPECT_EQ(linear, 4);
  // Printed and written as JSON, each instance once.
  const std::string text = print_host(prog, c.host);
  EXPECT_NE(text.find("#0 loss"), std::string::npos) << text;
  EXPECT_NE(text.find("fold 3 ×"), std::string::npos) << text;
  EXPECT_EQ(host_json(prog, c.host)["functions"].size(), c.host.functions.size());
}

TEST(Compile, AnEntryOfIntegerIdsCompilesWithoutItsValues) {
  auto e = elab::testing::elaborate_text(R"(
fn f(ids: i32[n: 5], table: ℝ[v: 7, d: 3]) -> ℝ[] = sum(exp(gather(table, ids)))
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  CompileRequest request;
  request.entry = e->prog->find_function("f");
  const CompiledProgram c = compile(*e->prog, request);
  EXPECT_GE(c.catalog->kernels().size(), 1u);
}

TEST(Compile, AnUnboundDimensionIsAnErrorNamingIt) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  CompileRequest request;
  request.entry = e->prog->find_function("loss");
  try {
    compile(*e->prog, request);
    FAIL() << "compiled without B";
  } catch (const interp::EvalError& err) {
    EXPECT_NE(std::string(err.what()).find("B"), std::string::npos) << err.what();
  }
}

TEST(Compile, TheStagesRunInTheirOrder) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  CompileRequest request;
  request.entry = e->prog->find_function("loss");
  request.dims = {{"B", 4}};
  request.wrt = {0};
  std::vector<std::string> seen;
  const CompiledProgram c = compile(*e->prog, request, [&](std::string_view stage, const CompiledProgram& so_far) {
    seen.emplace_back(stage);
    if (stage == "vjp") {
      EXPECT_EQ(e->prog->functions[static_cast<size_t>(so_far.entry)].name, "loss.vjp[0]");
    }
    if (stage == "realize") {
      EXPECT_NE(so_far.realization, nullptr);
    }
  });
  EXPECT_EQ(seen, std::vector<std::string>(stage_names().begin(), stage_names().end()));
  EXPECT_EQ(e->prog->functions[static_cast<size_t>(c.entry)].name, "loss.vjp[0]");
}

TEST(Executor, ARenameOrASplitMovesNoElement) {
  // Each is a host step: no kernel, and the result holds the operand's elements themselves.
  auto e = elab::testing::elaborate_text(R"(fn renamed(x : ℝ[t: 6, d: 2]) -> ℝ[s: 6, d: 2] = rename(x, t → s)
fn heads(x : ℝ[t: 6, d: 2]) -> ℝ[h: 2, u: 3, d: 2] = split(axis t, x, h: 2, u: 3)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const std::vector<Value> args = {Value::of(interp::testing::reals({6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}))};
  for (const char* name : {"renamed", "heads"}) {
    CompileRequest request;
    request.entry = e->prog->find_function(name);
    request.arguments = &args;
    const CompiledProgram c = compile(*e->prog, request);
    EXPECT_EQ(c.host.kernel_launches, 0) << name;
    EXPECT_EQ(c.host.reference_launches, 0) << name;
    kernel::InterpretingRunner runner;
    kernel::KernelEngine engine(c.catalog, runner);
    Executor executor(*e->prog, c, engine);
    const Value out = executor.call(args);
    expect_same(out, interp::Interpreter(*e->prog, {}).call(request.entry, args), name);
    EXPECT_TRUE(out.tensor.reals == args[0].tensor.reals) << name;
    EXPECT_TRUE(out.tensor.reals.shared()) << name << ": the elements were copied";
  }
}

}  // namespace
}  // namespace quire::compile

namespace quire::compile {
namespace {

TEST(Executor, ACallAtOtherShapesThanCompiledIsRefusedNamingTheArgument) {
  auto e = elab::testing::elaborate_text("fn f(x : ℝ[..., n: 3]) -> ℝ[..., n: 3] = exp(x) + 1\n");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const std::vector<Value> compiled_for = {Value::of(interp::testing::reals({2, 3}, {1, 2, 3, 4, 5, 6}))};
  CompileRequest request;
  request.entry = e->prog->find_function("f");
  request.arguments = &compiled_for;
  const CompiledProgram c = compile(*e->prog, request);
  kernel::InterpretingRunner runner;
  kernel::KernelEngine engine(c.catalog, runner);
  Executor executor(*e->prog, c, engine);
  interp::Interpreter reference(*e->prog, {}, c.realization.get());
  expect_same(executor.call(compiled_for), reference.call(request.entry, compiled_for), "f");
  const std::vector<Value> other = {Value::of(interp::testing::reals({1, 3}, {1, 2, 3}))};
  try {
    executor.call(other);
    FAIL() << "ran at a shape it was not compiled for";
  } catch (const interp::EvalError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("argument `x`"), std::string::npos) << what;
    EXPECT_NE(what.find("compiled for f64[2, 3]"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace quire::compile
