// The memory of one call (memory.h) against a run: the peak the host program's
// count finds without running anything is the peak of live bytes the executor
// measures while it runs the same call (EvalStats::live_bytes_peak), under
// `--remat store` and `recompute`, for the tutorial's loss and its vjp (the
// training step's gradient) and for the GPT example's. They are equal by
// construction only if the count replays the executor's frames exactly: its
// stores, its releases after each last reader, the callees' frames on top,
// a fold's copies one after the other and the kept forwards held until the
// frame that kept them returns. And `quire memory`'s errors, as a user meets
// them.

#include "quire/compile/memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "quire/compile/executor.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/params.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/support/cli_testing.h"

namespace quire::compile {
namespace {

using interp::Value;

struct Counted {
  CallMemory counted;
  int64_t measured = 0;
};

Counted count_and_measure(elab::Program& prog, int fn, const std::vector<Value>& args,
                          const std::map<std::string, int64_t>& dims, precision::Policy policy, interp::Remat remat) {
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize.policy = policy;
  request.remat = remat;
  request.arguments = &args;
  const CompiledProgram c = compile(prog, request);
  Counted out{count_call_memory(prog, c), 0};
  kernel::InterpretingRunner runner;
  kernel::KernelEngine engine(c.catalog, runner);
  Executor executor(prog, c, engine);
  executor.call(args);
  out.measured = executor.stats().live_bytes_peak;
  // The walk runs each instance as often as the host program says one call does.
  for (const InstanceMemory& im : out.counted.instances)
    EXPECT_EQ(im.runs, c.host.functions.at(static_cast<size_t>(im.instance)).evaluations) << "#" << im.instance;
  // The entry's frame holds everything live at the peak; each frame on the
  // way down holds no more than the one that called it.
  if (!out.counted.peak_at.empty()) {
    EXPECT_EQ(out.counted.peak_at.front().bytes, out.counted.peak_bytes);
    for (size_t k = 1; k < out.counted.peak_at.size(); ++k)
      EXPECT_LE(out.counted.peak_at[k].bytes, out.counted.peak_at[k - 1].bytes);
  }
  for (const InstanceMemory& im : out.counted.instances) EXPECT_LE(im.share, im.own_peak);
  EXPECT_LE(out.counted.kept_at_peak, out.counted.peak_bytes);
  if (remat == interp::Remat::Recompute) {
    EXPECT_EQ(out.counted.kept_at_peak, 0);
  }
  // A second call measures the same.
  executor.reset_stats();
  executor.call(args);
  EXPECT_EQ(executor.stats().live_bytes_peak, out.measured);
  return out;
}

const char* remat_label(interp::Remat r) { return r == interp::Remat::Store ? "store" : "recompute"; }

TEST(Memory, TheTutorialsPeakIsTheExecutorsMeasuredPeak) {
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
    for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16}) {
      SCOPED_TRACE(fmt::format("{}, {}", remat_label(remat), static_cast<int>(policy)));
      auto e = elab::testing::elaborate_tutorial();
      ASSERT_TRUE(e->ok()) << e->rendered();
      elab::Program& prog = *e->prog;
      const std::map<std::string, int64_t> dims = {{"B", 4}};
      const int loss = prog.find_function("loss");
      const std::vector<Value> args = kernel::testing::drawn_arguments(prog, loss, dims);
      const Counted forward = count_and_measure(prog, loss, args, dims, policy, remat);
      EXPECT_EQ(forward.counted.peak_bytes, forward.measured);
      EXPECT_GT(forward.counted.peak_bytes, 0);
      // The training step's gradient: the vjp with respect to θ, its cotangent 1.
      const int vjp = grad::vjp(prog, loss, {0});
      std::vector<Value> with_ct = args;
      with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
      const Counted backward = count_and_measure(prog, vjp, with_ct, dims, policy, remat);
      EXPECT_EQ(backward.counted.peak_bytes, backward.measured);
      EXPECT_GT(backward.counted.peak_bytes, forward.counted.peak_bytes);
      if (remat == interp::Remat::Store) {
        EXPECT_GT(backward.counted.kept_at_peak, 0);
      }
    }
}

TEST(Memory, TheTutorialsFiguresAtB4InF64) {
  // By hand from `quire dump --stage host`: the inputs are θ (4·4·3 + 4·3 +
  // 4·4 + 4 + 4·3 … elements, 8 bytes each) and the batch's two B×4 tensors.
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  CompileRequest request;
  request.entry = prog.find_function("loss");
  request.dims = {{"B", 4}};
  const CompiledProgram c = compile(prog, request);
  const CallMemory m = count_call_memory(prog, c);
  EXPECT_EQ(m.parameter_bytes, 8 * m.parameter_elements);
  EXPECT_EQ(m.parameter_bytes, c.realization->param_bytes());
  EXPECT_EQ(m.input_bytes, m.parameter_bytes + 2 * 4 * 4 * 8);
  EXPECT_EQ(m.output_bytes, 8);
  ASSERT_GE(m.peak_at.size(), 2u);  // inside the tower
  EXPECT_EQ(m.peak_bytes % 8, 0);
}

std::unique_ptr<elab::testing::Elaborated> elaborate_gpt() {
  const std::filesystem::path path = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "gpt" / "gpt.qr";
  std::ifstream in(path, std::ios::binary);
  return elab::testing::elaborate_files(
      {{"main.qr", std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())}});
}

TEST(Memory, TheGptsPeakIsTheExecutorsMeasuredPeak) {
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store}) {
    SCOPED_TRACE(remat_label(remat));
    auto e = elaborate_gpt();
    ASSERT_TRUE(e->ok()) << e->rendered();
    elab::Program& prog = *e->prog;
    const std::map<std::string, int64_t> dims = {{"B", 2}};
    const int loss = prog.find_function("loss");
    // θ drawn; the batch's token ids (i, t) ↦ (7·i + t) mod V, its targets the next; a key.
    const core::Function& f = prog.functions.at(static_cast<size_t>(loss));
    std::vector<Value> args{Value::of_params(std::make_shared<const interp::ParamMap>(
        interp::init_params(prog, f.args[0].type.params, 7, dims)))};
    std::vector<Value> batch;
    for (int64_t shift : {0, 1}) {
      runtime::Tensor ids = runtime::Tensor::integer(runtime::ElemKind::I32, {2, 32});
      for (int64_t k = 0; k < ids.size(); ++k) ids.ints[static_cast<size_t>(k)] = (7 * (k / 32) + k % 32 + shift) % 76;
      batch.push_back(Value::of(std::move(ids)));
    }
    args.push_back(Value::of_tuple(std::move(batch)));
    args.push_back(Value::of_key(runtime::Key{3, 5}));
    const Counted forward = count_and_measure(prog, loss, args, dims, precision::Policy::F32, remat);
    EXPECT_EQ(forward.counted.peak_bytes, forward.measured);
    // The attention's scores alone, B·H·T·T f32, are live at some point.
    EXPECT_GE(forward.counted.peak_bytes, 2 * 4 * 32 * 32 * 4);
    const int vjp = grad::vjp(prog, loss, {0});
    std::vector<Value> with_ct = args;
    with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
    const Counted backward = count_and_measure(prog, vjp, with_ct, dims, precision::Policy::F32, remat);
    EXPECT_EQ(backward.counted.peak_bytes, backward.measured);
    EXPECT_GT(backward.counted.peak_bytes, forward.counted.peak_bytes);
  }
}

// `quire memory` as a user meets it.
using Cli = quire::testing::CliTest;
using quire::testing::Outcome;

std::string tutorial_train() {
  return (std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial" / "07_train.qr").string();
}

TEST_F(Cli, MemoryPrintsTheTutorialsCount) {
  Outcome o = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(o.output.starts_with("quire memory: `loss` at B = 4 in f64, remat recompute:")) << o.output;
  Outcome j = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --format json --grad --remat store");
  EXPECT_EQ(j.status, 0) << j.output;
  const auto parsed = nlohmann::json::parse(j.output);
  EXPECT_EQ(parsed["format"], "quire-memory");
  EXPECT_EQ(parsed["remat"], "store");
  EXPECT_GT(parsed["peak"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(parsed["peak"]["kept"].get<int64_t>(), 0);
}

TEST_F(Cli, MemoryRefusesBadInputInOneLine) {
  auto expect_error = [](const std::string& args, const std::string& fragment) {
    Outcome o = quire::testing::run_quire("memory " + args);
    EXPECT_EQ(o.status, 1) << args << ": " << o.output;
    EXPECT_TRUE(o.output.starts_with("quire: error: ")) << args << ": " << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << args << ": " << o.output;
    EXPECT_EQ(o.output.find('\n'), o.output.size() - 1) << args << ": not one line: " << o.output;
  };
  expect_error(tutorial_train() + " --entry nothing --dim B=4", "nothing");
  expect_error(tutorial_train() + " --entry loss", "B");
  expect_error(tutorial_train() + " --entry loss --dim B=4 --realize @" + write("r.json", "{ not json"), "r.json");
  expect_error(tutorial_train() + " --entry loss --dim B=4 --realize @/no/such/file.json", "/no/such/file.json");
  expect_error(tutorial_train() + " --entry loss --dim B=4 --realize @x.json --precision f32", "--precision");
}

// A realization of the gradient (`solve --of gradient`) names the reverse
// sweep's sites: `memory --grad` counts the step under it, narrower than
// under f64; without --grad (the loss alone), like `run`, it is refused.
TEST_F(Cli, MemoryCountsTheStepUnderAGradientsRealization) {
  const std::string env = file("env.json");
  const std::string r = file("rg.json");
  Outcome c = quire::testing::run_quire("calibrate " + tutorial_train() + " --entry loss --dim B=4 --samples 2 --out " +
                                        env);
  ASSERT_EQ(c.status, 0) << c.output;
  Outcome s = quire::testing::run_quire("solve " + tutorial_train() + " --precision " + env +
                                        " --of gradient --budget 1e-2 --held-out 4 --out " + r);
  ASSERT_EQ(s.status, 0) << s.output;
  auto peak = [](const Outcome& o) { return nlohmann::json::parse(o.output)["peak"]["bytes"].get<int64_t>(); };
  Outcome narrowed = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --grad --realize @" +
                                               r + " --format json");
  ASSERT_EQ(narrowed.status, 0) << narrowed.output;
  Outcome f64 = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --grad --format json");
  ASSERT_EQ(f64.status, 0) << f64.output;
  EXPECT_LT(peak(narrowed), peak(f64));
  Outcome loss_alone = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --realize @" + r);
  EXPECT_EQ(loss_alone.status, 1) << loss_alone.output;
  EXPECT_NE(loss_alone.output.find("solved for the gradient of `loss`"), std::string::npos) << loss_alone.output;
  Outcome run = quire::testing::run_quire("run " + tutorial_train() + " --entry loss --dim B=4 --realize @" + r);
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("`quire train --realize` runs"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace quire::compile
