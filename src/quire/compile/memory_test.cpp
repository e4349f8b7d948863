// The memory of one call (memory.h), counted without running anything:
// what the count finds holds together (each instance as often as the host
// program runs it, the frames' shares nested, the largest blocks named by
// the steps that allocate them, an arena whose values never overlap), and
// `quire memory`'s errors, as a user meets them. Whether the count is what
// a run allocates is memory_allocation_test.cpp's question.

#include "quire/compile/memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "quire/compile/memory_testing.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/params.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/support/cli_testing.h"

namespace quire::compile {
namespace {

using interp::Value;

CallMemory checked_count(elab::Program& prog, int fn, const std::vector<Value>& args,
                         const std::map<std::string, int64_t>& dims, precision::Policy policy, interp::Remat remat) {
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize.policy = policy;
  request.remat = remat;
  request.arguments = &args;
  const CompiledProgram c = compile(prog, request);
  const CallMemory m = count_call_memory(prog, c);
  // The walk runs each instance as often as the host program says one call does.
  for (const InstanceMemory& im : m.instances)
    EXPECT_EQ(im.runs, c.host.functions.at(static_cast<size_t>(im.instance)).evaluations) << "#" << im.instance;
  // The entry's frame holds everything live at the peak; each frame on the
  // way down holds no more than the one that called it.
  if (!m.peak_at.empty()) {
    EXPECT_EQ(m.peak_at.front().bytes, m.peak_bytes);
    for (size_t k = 1; k < m.peak_at.size(); ++k) EXPECT_LE(m.peak_at[k].bytes, m.peak_at[k - 1].bytes);
  }
  for (const InstanceMemory& im : m.instances) EXPECT_LE(im.share, im.own_peak);
  // The largest blocks live at the peak, largest first, together no more
  // than the peak: a tensor's is its buffer's bytes at its storage type.
  const std::vector<LiveValue>& largest = m.largest_at_peak;
  EXPECT_LE(largest.size(), kLargestAtPeak);
  EXPECT_FALSE(largest.empty());
  int64_t named = 0;
  for (size_t k = 0; k < largest.size(); ++k) {
    if (k > 0) {
      EXPECT_LE(largest[k].bytes, largest[k - 1].bytes);
    }
    named += largest[k].bytes;
    const HostFunction& h = c.host.functions.at(static_cast<size_t>(largest[k].instance));
    auto b = std::find_if(h.buffers.begin(), h.buffers.end(),
                          [&](const HostBuffer& x) { return x.value == largest[k].value; });
    if (!largest[k].leaf.empty()) continue;  // a gradient tree's leaf: the tree's buffer counts none
    EXPECT_NE(b, h.buffers.end()) << "#" << largest[k].instance << " %" << largest[k].value;
    if (b != h.buffers.end()) {
      EXPECT_EQ(b->bytes, largest[k].bytes);
    }
  }
  EXPECT_LE(named, m.peak_bytes);
  // The arena: values whose lives overlap never share a byte, every offset is
  // aligned, and it holds at least the peak.
  const std::vector<PlacedValue>& placed = m.placed;
  EXPECT_GE(m.arena_bytes, m.peak_bytes);
  for (size_t a = 0; a < placed.size(); ++a) {
    EXPECT_EQ(placed[a].offset % kArenaAlignment, 0);
    EXPECT_LT(placed[a].life.start, placed[a].life.end);
    EXPECT_LE(placed[a].offset + placed[a].life.bytes, m.arena_bytes);
    for (size_t b = a + 1; b < placed.size(); ++b) {
      const bool together = placed[a].life.start < placed[b].life.end && placed[b].life.start < placed[a].life.end;
      const bool apart = placed[a].offset + placed[a].life.bytes <= placed[b].offset ||
                         placed[b].offset + placed[b].life.bytes <= placed[a].offset;
      if (together && !apart) ADD_FAILURE() << "values " << a << " and " << b << " overlap in the arena";
    }
  }
  EXPECT_LE(m.kept_at_peak, m.peak_bytes);
  if (remat == interp::Remat::Recompute) {
    EXPECT_EQ(m.kept_at_peak, 0);
  }
  // Counted again, the same.
  const CallMemory again = count_call_memory(prog, c);
  EXPECT_EQ(again.peak_bytes, m.peak_bytes);
  EXPECT_EQ(again.arena_bytes, m.arena_bytes);
  return m;
}

const char* remat_label(interp::Remat r) { return r == interp::Remat::Store ? "store" : "recompute"; }

TEST(Memory, TheTutorialsCountHoldsTogether) {
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
    for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16}) {
      SCOPED_TRACE(fmt::format("{}, {}", remat_label(remat), static_cast<int>(policy)));
      auto e = elab::testing::elaborate_tutorial();
      ASSERT_TRUE(e->ok()) << e->rendered();
      elab::Program& prog = *e->prog;
      const std::map<std::string, int64_t> dims = {{"B", 4}};
      const int loss = prog.find_function("loss");
      const std::vector<Value> args = kernel::testing::drawn_arguments(prog, loss, dims);
      const CallMemory forward = checked_count(prog, loss, args, dims, policy, remat);
      EXPECT_GT(forward.peak_bytes, 0);
      // The training step's gradient: the vjp with respect to θ, its cotangent 1.
      const int vjp = grad::vjp(prog, loss, {0});
      std::vector<Value> with_ct = args;
      with_ct.push_back(Value::of(runtime::Tensor::scalar(1.0)));
      const CallMemory backward = checked_count(prog, vjp, with_ct, dims, policy, remat);
      EXPECT_GT(backward.peak_bytes, forward.peak_bytes);
      // The gradient is among the vjp's outputs: a block for every
      // parameter, at least 2 bytes an element.
      EXPECT_GE(backward.output_bytes, forward.output_bytes + 2 * forward.parameter_elements);
      if (remat == interp::Remat::Store) {
        EXPECT_GT(backward.kept_at_peak, 0);
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

TEST(Memory, TheArenaPlacesTheLargestFirstInTheLowestGap) {
  // a [0, 4) 256 B, b [1, 3) 128 B, c [3, 6) 128 B, d [4, 6) 64 B, e [0, 1) 64 B.
  const Placement p = place_by_size({{0, 4, 256}, {1, 3, 128}, {3, 6, 128}, {4, 6, 64}, {0, 1, 64}});
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 256, 256, 0, 256}));
  EXPECT_EQ(p.arena_bytes, 384);  // the peak: a, b and c's time, 256 + 128
  // Sizes round up to the alignment; a value alone takes its aligned size.
  EXPECT_EQ(place_by_size({{0, 1, 1}}).arena_bytes, kArenaAlignment);
  EXPECT_THROW(place_by_size({{2, 2, 8}}), std::logic_error);
}

// --memory-limit's refusal: a call that needs exactly the limit runs; one
// byte less and it is refused with its figures and the values at the peak.
TEST(Memory, ALimitBelowTheNeedRefusesTheCallWithItsFigures) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  CompileRequest request;
  request.entry = prog.find_function("loss");
  request.dims = {{"B", 4}};
  const CompiledProgram c = compile(prog, request);
  const CallMemory m = count_call_memory(prog, c);
  const int64_t needs = m.input_bytes + m.peak_bytes;
  EXPECT_FALSE(memory_limit_refusal(prog, c, m, needs, "one call of `loss`"));
  const auto refusal = memory_limit_refusal(prog, c, m, needs - 1, "one call of `loss`");
  ASSERT_TRUE(refusal);
  EXPECT_TRUE(refusal->starts_with(fmt::format(
      "one call of `loss` needs {} bytes, over --memory-limit {}: its inputs {}", needs, needs - 1, m.input_bytes)))
      << *refusal;
  EXPECT_NE(refusal->find("the largest values live at the peak:\n"), std::string::npos) << *refusal;
  // State added on top (a training step's optimizer) is counted and named.
  const auto with_state = memory_limit_refusal(prog, c, m, needs, "one training step", 64, "the adamw state");
  ASSERT_TRUE(with_state);
  EXPECT_NE(with_state->find(fmt::format("needs {} bytes", needs + 64)), std::string::npos) << *with_state;
  EXPECT_NE(with_state->find("the adamw state 64"), std::string::npos) << *with_state;
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
  Outcome j = quire::testing::run_quire("memory " + tutorial_train() +
                                        " --entry loss --dim B=4 --format json --grad --remat store");
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

// `run` and `train` under --memory-limit: refused before anything runs (no
// result, no step, no metrics), status 1, the figures `quire memory` prints.
TEST_F(Cli, RunAndTrainRefuseWhatPassesTheMemoryLimit) {
  Outcome counted = quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --format json");
  ASSERT_EQ(counted.status, 0) << counted.output;
  const int64_t needs = nlohmann::json::parse(counted.output)["needs"].get<int64_t>();
  for (const char* backend : {"native", "interp"}) {
    const std::string run =
        fmt::format("run {} --entry loss --dim B=4 --backend {} --memory-limit ", tutorial_train(), backend);
    Outcome over = quire::testing::run_quire(run + std::to_string(needs - 1));
    EXPECT_EQ(over.status, 1) << over.output;
    EXPECT_TRUE(over.output.starts_with(fmt::format("quire: error: one call of `loss` needs {} bytes", needs)))
        << over.output;
    EXPECT_EQ(over.output.find("result ="), std::string::npos) << over.output;
    Outcome fits = quire::testing::run_quire(run + std::to_string(needs));
    EXPECT_EQ(fits.status, 0) << fits.output;
  }
  for (const char* bad : {"12XB", "0", "-5", "MiB", "99999999999999999TiB"}) {
    Outcome o = quire::testing::run_quire("run " + tutorial_train() + " --entry loss --dim B=4 --memory-limit " + bad);
    EXPECT_EQ(o.status, 1) << bad << ": " << o.output;
    EXPECT_NE(o.output.find(fmt::format("--memory-limit {}: ", bad)), std::string::npos) << o.output;
  }
  Outcome unit = quire::testing::run_quire("run " + tutorial_train() + " --entry loss --dim B=4 --memory-limit 1KiB");
  EXPECT_NE(unit.output.find("over --memory-limit 1024:"), std::string::npos) << unit.output;
  const std::string dir = file("run");
  Outcome train =
      quire::testing::run_quire("train " + tutorial_train() + " --max-steps 2 --memory-limit 4KiB --run-dir " + dir);
  EXPECT_EQ(train.status, 1) << train.output;
  EXPECT_NE(train.output.find("quire: error: one training step needs "), std::string::npos) << train.output;
  EXPECT_NE(train.output.find(", the adamw state "), std::string::npos) << train.output;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir) / "metrics.jsonl"));
  Outcome trains = quire::testing::run_quire("train " + tutorial_train() +
                                             " --max-steps 2 --memory-limit 1MiB --run-dir " + file("run2"));
  EXPECT_EQ(trains.status, 0) << trains.output;
}

// `memory --step`: the training step under both remats, its parts adding up
// to what it needs, the same figure `train --memory-limit` checks.
TEST_F(Cli, MemoryStepCountsTheTrainingStepUnderBothRemats) {
  Outcome o = quire::testing::run_quire("memory " + tutorial_train() + " --step --format json");
  ASSERT_EQ(o.status, 0) << o.output;
  const auto j = nlohmann::json::parse(o.output);
  EXPECT_EQ(j["format"], "quire-memory-step");
  EXPECT_EQ(j["optimizer"], "adamw");
  EXPECT_EQ(j["dims"]["B"], 8);  // the run's batch
  const auto& store = j["remat"]["store"];
  const auto& recompute = j["remat"]["recompute"];
  for (const auto* r : {&store, &recompute}) {
    const auto& c = *r;
    EXPECT_EQ(c["needs"].get<int64_t>(), c["parameters"].get<int64_t>() + c["batch"].get<int64_t>() +
                                             c["peak"].get<int64_t>() + c["optimizer_state"].get<int64_t>());
    EXPECT_EQ(c["optimizer_state"].get<int64_t>(), 2 * c["gradient"].get<int64_t>());  // AdamW's two moments, f64
    EXPECT_EQ(c["gradient"].get<int64_t>(), c["parameters"].get<int64_t>());           // f64 masters, nothing frozen
    EXPECT_EQ(c["peak"], c["call"]["peak"]["bytes"]);
    // The vjp returns the gradient (and the loss): the update holds it, in place, under the vjp's peak.
    EXPECT_GE(c["call"]["outputs"].get<int64_t>(), c["gradient"].get<int64_t>());
    EXPECT_LE(c["update"].get<int64_t>(), c["needs"].get<int64_t>());
    EXPECT_LE(c["gradient_at_peak"].get<int64_t>(), c["call"]["outputs"].get<int64_t>());
  }
  EXPECT_GT(store["kept"].get<int64_t>(), 0);
  EXPECT_EQ(recompute["kept"].get<int64_t>(), 0);
  EXPECT_GT(store["peak"].get<int64_t>(), recompute["peak"].get<int64_t>());
  // The step's peak is `memory --grad`'s at the run's batch.
  Outcome grad = quire::testing::run_quire("memory " + tutorial_train() +
                                           " --entry loss --dim B=8 --grad --remat store --format json");
  ASSERT_EQ(grad.status, 0) << grad.output;
  EXPECT_EQ(nlohmann::json::parse(grad.output)["peak"]["bytes"], store["peak"]);
  // train --memory-limit refuses one byte under the store step's need, and names it.
  const int64_t needs = store["needs"].get<int64_t>();
  Outcome train = quire::testing::run_quire("train " + tutorial_train() + " --max-steps 1 --run-dir " + file("r") +
                                            " --memory-limit " + std::to_string(needs - 1));
  EXPECT_EQ(train.status, 1) << train.output;
  EXPECT_NE(train.output.find(fmt::format("one training step needs {} bytes", needs)), std::string::npos)
      << train.output;
  // Bad invocations, one line each.
  for (const std::string& args : {tutorial_train() + " --step --entry loss", tutorial_train(),
                                  tutorial_train() + " --step --grad", tutorial_train() + " --step --remat store",
                                  write("plain.qr", "fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n") + " --step"}) {
    Outcome bad = quire::testing::run_quire("memory " + args);
    EXPECT_EQ(bad.status, 1) << args << ": " << bad.output;
    EXPECT_TRUE(bad.output.starts_with("quire: error: ")) << args << ": " << bad.output;
  }
}

TEST_F(Cli, MemoryCountsTheLibraryKernelsATrainingStepRuns) {
  // Under f32 `memory` realizes as `train` does (fused product steps), so
  // the GPT example's attention and norms are library kernels that keep
  // their arguments and results, not the lines' T × T values; with
  // `--product-step separate` they run, and are counted as, their lines.
  const std::string gpt = (std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "gpt" / "gpt.qr").string();
  auto store_peak = [&](const std::string& extra) -> int64_t {
    const Outcome o = quire::testing::run_quire("memory " + gpt + " --step --precision f32 --format json" + extra);
    EXPECT_EQ(o.status, 0) << o.output;
    if (o.status != 0) return 0;
    return nlohmann::json::parse(o.output)["remat"]["store"]["peak"].get<int64_t>();
  };
  const int64_t fused = store_peak("");
  const int64_t lines = store_peak(" --product-step separate");
  EXPECT_GT(fused, 0);
  EXPECT_LT(fused, lines);
}

// A realization of the gradient (`solve --of gradient`) names the reverse
// sweep's sites: `memory --grad` counts the step under it, narrower than
// under f64; without --grad (the loss alone), like `run`, it is refused.
TEST_F(Cli, MemoryCountsTheStepUnderAGradientsRealization) {
  const std::string env = file("env.json");
  const std::string r = file("rg.json");
  Outcome c =
      quire::testing::run_quire("calibrate " + tutorial_train() + " --entry loss --dim B=4 --samples 2 --out " + env);
  ASSERT_EQ(c.status, 0) << c.output;
  Outcome s = quire::testing::run_quire("solve " + tutorial_train() + " --precision " + env +
                                        " --of gradient --budget 1e-2 --held-out 4 --out " + r);
  ASSERT_EQ(s.status, 0) << s.output;
  auto peak = [](const Outcome& o) { return nlohmann::json::parse(o.output)["peak"]["bytes"].get<int64_t>(); };
  Outcome narrowed = quire::testing::run_quire("memory " + tutorial_train() +
                                               " --entry loss --dim B=4 --grad --realize @" + r + " --format json");
  ASSERT_EQ(narrowed.status, 0) << narrowed.output;
  Outcome f64 =
      quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --grad --format json");
  ASSERT_EQ(f64.status, 0) << f64.output;
  EXPECT_LT(peak(narrowed), peak(f64));
  Outcome loss_alone =
      quire::testing::run_quire("memory " + tutorial_train() + " --entry loss --dim B=4 --realize @" + r);
  EXPECT_EQ(loss_alone.status, 1) << loss_alone.output;
  EXPECT_NE(loss_alone.output.find("solved for the gradient of `loss`"), std::string::npos) << loss_alone.output;
  Outcome run = quire::testing::run_quire("run " + tutorial_train() + " --entry loss --dim B=4 --realize @" + r);
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("`quire train --realize` runs"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace quire::compile
