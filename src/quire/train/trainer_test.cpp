#include "quire/train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "quire/core/printer.h"
#include "quire/elab/elaborator.h"
#include "quire/grad/vjp.h"
#include "quire/io/atomic_file.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/io/npy.h"
#include "quire/runtime/allocation_log.h"
#include "quire/runtime/kernels.h"
#include "quire/runtime/random.h"
#include "quire/train/checkpoint.h"
#include "quire/train/data.h"
#include "quire/train/metrics.h"
#include "quire/train/checkpoint_testing.h"
#include "quire/train/run_lock.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

namespace fs = std::filesystem;
using quire::testing::error_of;
using quire::testing::ScratchDir;
using testing::corrupt_checkpoint;
using testing::reseal;
using runtime::FloatType;

const std::string kTutorial = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";

std::unique_ptr<elab::Program> load(const std::string& path) {
  DiagnosticSink sink;
  auto prog = elab::elaborate(path, sink);
  EXPECT_FALSE(sink.has_errors()) << sink.render(prog->sources);
  return prog;
}

struct TrainedRun {
  TrainOutcome outcome;
  std::string output;
};

/// Trains `program` (a fresh elaboration each time, as a new process would).
TrainedRun train_file(const std::string& program, TrainOptions options) {
  auto prog = load(program);
  std::ostringstream out;
  TrainedRun r;
  r.outcome = train(*prog, options, out, /*tty=*/false);
  r.output = out.str();
  return r;
}

/// The final parameters of a run, as the bytes of its --params-out file.
std::string bytes_of(const std::string& path) { return io::read_file(path); }

// A small regression, y = x · [[1], [-2], [0.5]] + 0.25, with its data: 48
// samples, batches of 8, 3 epochs, a checkpoint every 5 steps.
struct Regression {
  ScratchDir dir{"trainer"};
  std::string program;
  explicit Regression(const std::string& precision_body = "", const std::string& extra = "",
                      const std::string& data_shape = "3", const std::string& extra_args = "") {
    program = dir.file("reg.qr");
    std::ofstream(program) << R"(dim B
module Lin {
  param w : ℝ[3, 1]  init = xavier_uniform
  param b : ℝ[1]     init = zeros
  fn apply(x : ℝ[..., 3]) -> ℝ[..., 1] = x · w + b
}
fn loss(θ : params Lin, batch : (ℝ[batch: B, 3], ℝ[batch: B, 1]))" + extra_args + R"() -> ℝ[] =
  let (x, y) = batch
  )" + (precision_body.empty() ? std::string("mean((Lin.apply(θ, x) - y)^2)") : precision_body) +
                                  R"(
optimizer adamw {
  lr : f64 = 0.05
  weight_decay : f64 = 0.01
  schedule : linear(warmup = 2)
  )" + extra + R"(
}
training run {
  model     = Lin
  objective = loss
  optimizer = adamw
  data      = stream "pairs.npz" |> shuffle(seed = 5) |> batch(B = 8)
  epochs    : nat = 3
  checkpoint every 5 steps to "ckpt/"
}
)";
    const int64_t n = 48;
    runtime::Tensor x = runtime::Tensor::real({n, std::stoll(data_shape)});
    runtime::Tensor y = runtime::Tensor::real({n, 1});
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0.25;
      const double w[3] = {1.0, -2.0, 0.5};
      for (int64_t j = 0; j < x.shape[1]; ++j) {
        x.reals[i * x.shape[1] + j] = std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(j));
        if (j < 3) sum += w[j] * x.reals[i * x.shape[1] + j];
      }
      y.reals[i] = sum;
    }
    io::write_npz(dir.file("pairs.npz"), {{"0", x}, {"1", y}});
  }
  TrainOptions options(const std::string& run_dir, const std::string& out = "") const {
    TrainOptions o;
    o.run_dir = dir.file(run_dir);
    o.params_out = out.empty() ? "" : dir.file(out);
    return o;
  }
};

TEST(Trainer, TheTutorialTrainsBelow1e3WithinItsEpochs) {
  ScratchDir dir("trainer");
  TrainOptions o;
  o.run_dir = dir.file("run");
  const TrainedRun r = train_file(kTutorial, o);
  EXPECT_TRUE(r.outcome.finished());
  EXPECT_EQ(r.outcome.total_steps, 1280);  // 1024 samples, batch 8, 10 epochs
  const std::vector<StepRecord> steps = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(steps.size(), 1280u);
  // The last epoch's 128 losses, and the last one, are under 1e-3; the first is not.
  double last_epoch = 0;
  for (size_t i = steps.size() - 128; i < steps.size(); ++i) last_epoch += steps[i].loss / 128;
  EXPECT_LT(last_epoch, 1e-3);
  EXPECT_LT(steps.back().loss, 1e-3);
  EXPECT_GT(steps.front().loss, 1.0);
  EXPECT_TRUE(fs::exists(dir.file("run/loss.svg")));
  EXPECT_TRUE(fs::exists(dir.file("run/ckpt/step-00001280/state.json")));
}

TEST(Trainer, SameSeedSameBitsAnotherSeedOthers) {
  Regression reg;
  train_file(reg.program, reg.options("a", "a.safetensors"));
  train_file(reg.program, reg.options("b", "b.safetensors"));
  TrainOptions other = reg.options("c", "c.safetensors");
  other.seed = 1;
  train_file(reg.program, other);
  EXPECT_EQ(bytes_of(reg.dir.file("a.safetensors")), bytes_of(reg.dir.file("b.safetensors")));
  EXPECT_NE(bytes_of(reg.dir.file("a.safetensors")), bytes_of(reg.dir.file("c.safetensors")));
}

TEST(Trainer, StoppingAndResumingGivesTheBitsOfARunNeverStopped) {
  for (const char* precision : {"f64", "f32", "bf16", "f16"}) {
    Regression reg;
    TrainOptions whole = reg.options("whole", "whole.safetensors");
    whole.precision = precision;
    const TrainedRun uninterrupted = train_file(reg.program, whole);
    ASSERT_EQ(uninterrupted.outcome.steps_done, 18);
    // Stops at a checkpoint (5), between checkpoints (7: --max-steps writes one), and mid-epoch (13).
    TrainOptions part = reg.options("parts", "parts.safetensors");
    part.precision = precision;
    int64_t start = 0;
    for (int64_t stop : {5, 7, 13}) {
      part.max_steps = stop;
      const TrainedRun r = train_file(reg.program, part);
      EXPECT_EQ(r.outcome.start_step, start) << precision;
      EXPECT_EQ(r.outcome.steps_done, stop) << precision;
      part.resume = true;
      start = stop;
    }
    part.max_steps.reset();
    const TrainedRun last = train_file(reg.program, part);
    EXPECT_EQ(last.outcome.start_step, 13);
    EXPECT_TRUE(last.outcome.finished());
    EXPECT_EQ(bytes_of(reg.dir.file("whole.safetensors")), bytes_of(reg.dir.file("parts.safetensors"))) << precision;
    // The optimizer's state too, and every step logged once.
    EXPECT_EQ(bytes_of(reg.dir.file("whole/ckpt/step-00000018/optimizer.safetensors")),
              bytes_of(reg.dir.file("parts/ckpt/step-00000018/optimizer.safetensors")))
        << precision;
    const std::vector<StepRecord> a = read_metrics(reg.dir.file("whole/metrics.jsonl"));
    const std::vector<StepRecord> b = read_metrics(reg.dir.file("parts/metrics.jsonl"));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i].step, static_cast<int64_t>(i + 1));
      EXPECT_EQ(a[i].loss, b[i].loss) << precision << " step " << i + 1;
      EXPECT_EQ(a[i].grad_norm, b[i].grad_norm);
    }
  }
}

TEST(Trainer, AKeyedObjectiveDrawsFromTheStepsKey) {
  // The loss is the step's uniform draw, so each metrics line shows which key the step had.
  Regression reg("sum(uniform(k, u: 1)) + 0.0 * mean((Lin.apply(θ, x) - y)^2)", "", "3", ", k : key");
  for (uint64_t seed : {0u, 7u}) {
    TrainOptions o = reg.options(fmt::format("run{}", seed));
    o.seed = seed;
    train_file(reg.program, o);
    const std::vector<StepRecord> steps = read_metrics(reg.dir.file(fmt::format("run{}/metrics.jsonl", seed)));
    ASSERT_EQ(steps.size(), 18u);
    for (size_t i = 0; i < steps.size(); ++i)
      EXPECT_EQ(steps[i].loss, runtime::draw_uniform(step_key(seed, static_cast<int64_t>(i)), {1}, 0.0, 1.0).reals[0])
          << "seed " << seed << " step " << i + 1;
  }
  // step_key's formula (docs/training.md).
  const runtime::Key k = step_key(7, 3);
  const runtime::Key expected = runtime::derive_key(runtime::key_from_seed(7), "train:step:3");
  EXPECT_EQ(k.k0, expected.k0);
  EXPECT_EQ(k.k1, expected.k1);
}

TEST(Trainer, AKeyedObjectiveResumesWithTheBitsOfARunNeverStoppedOnEveryBackend) {
  // A dropout of the prediction, scaled as PyTorch's F.dropout scales it.
  Regression reg("let p = Lin.apply(θ, x)\n  let keep = bernoulli(k, 0.75, batch: B)\n"
                 "  mean((where(keep, p / 0.75, 0.0) - y)^2)",
                 "", "3", ", k : key");
  for (kernel::Backend backend : {kernel::Backend::Interp, kernel::Backend::Kernels}) {
    const std::string name = kernel::backend_name(backend);
    TrainOptions whole = reg.options(name + "-whole", name + "-whole.safetensors");
    whole.seed = 3;
    whole.backend = backend;
    train_file(reg.program, whole);
    TrainOptions part = reg.options(name + "-part", name + "-part.safetensors");
    part.seed = 3;
    part.backend = backend;
    part.max_steps = 7;
    train_file(reg.program, part);
    part.max_steps.reset();
    part.resume = true;
    const TrainedRun resumed = train_file(reg.program, part);
    EXPECT_EQ(resumed.outcome.start_step, 7);
    EXPECT_EQ(bytes_of(reg.dir.file(name + "-whole.safetensors")), bytes_of(reg.dir.file(name + "-part.safetensors")))
        << name;
    // A resume under another seed would draw other keys: refused.
    part.seed = 4;
    EXPECT_EQ(error_of<TrainError>([&] { train_file(reg.program, part); }),
              "cannot resume from " + reg.dir.file(name + "-part/ckpt/step-00000018") +
                  ": its steps drew their keys from --seed 3, this run's is 4 (pass --seed 3 to resume it)");
  }
  EXPECT_EQ(bytes_of(reg.dir.file("interp-whole.safetensors")), bytes_of(reg.dir.file("kernels-whole.safetensors")));
}

TEST(Trainer, TheHeldOutLossIsEvaluatedEveryNStepsAndAfterTheLast) {
  Regression reg;
  {
    std::string text = io::read_file(reg.program);
    const std::string line = "  checkpoint every 5 steps to \"ckpt/\"\n";
    ASSERT_NE(text.find(line), std::string::npos);
    text.replace(text.find(line), line.size(), line + "  evaluate loss every 4 steps on \"pairs.npz\"\n");
    std::ofstream(reg.program) << text;
  }
  const TrainedRun r = train_file(reg.program, reg.options("run", "final.safetensors"));
  const std::vector<StepRecord> steps = read_metrics(reg.dir.file("run/metrics.jsonl"));
  ASSERT_EQ(steps.size(), 18u);
  for (const StepRecord& s : steps)
    EXPECT_EQ(s.held_out_loss.has_value(), s.step % 4 == 0 || s.step == 18) << "step " << s.step;
  // After the last step: the objective's mean over the file's 6 batches of 8, in order, at the final parameters.
  auto prog = load(reg.program);
  const int loss = prog->find_function("loss");
  const interp::ParamMap final = interp::load_params(reg.dir.file("final.safetensors"), *prog,
                                                     prog->functions[static_cast<size_t>(loss)].args[0].type.params, {});
  const io::NamedTensors data = io::read_npz(reg.dir.file("pairs.npz"));
  interp::Interpreter interp(*prog, {{"B", 8}});
  double sum = 0;
  for (int64_t b = 0; b < 6; ++b) {
    std::vector<interp::Value> pair;
    for (const auto& [name, t] : data) pair.push_back(interp::Value::of(runtime::slice(t, 0, 8 * b, 8 * b + 8, 1)));
    sum += interp.call(loss, {interp::Value::of_params(std::make_shared<const interp::ParamMap>(final)), interp::Value::of_tuple(pair)})
               .tensor.reals.at(0);
  }
  EXPECT_EQ(*steps.back().held_out_loss, sum / 6);
  EXPECT_NE(r.output.find("step 18: held-out loss"), std::string::npos) << r.output;
  EXPECT_NE(io::read_file(reg.dir.file("run/loss.svg")).find("class=\"held-out\""), std::string::npos);
}

TEST(Trainer, StoringAndRecomputingTheForwardGiveTheSameBits) {
  // The tutorial's gradient calls through a fold of blocks, each calling a
  // norm and a linear layer: every kind of call a reverse sweep revisits.
  for (const char* precision : {"f64", "bf16", "f16"}) {
    ScratchDir dir("trainer");
    TrainOptions o;
    o.precision = precision;
    o.max_steps = 30;
    o.run_dir = dir.file("store");
    o.params_out = dir.file("store.safetensors");
    const TrainedRun store = train_file(kTutorial, o);
    o.remat = interp::Remat::Recompute;
    o.run_dir = dir.file("recompute");
    o.params_out = dir.file("recompute.safetensors");
    const TrainedRun recompute = train_file(kTutorial, o);
    EXPECT_EQ(bytes_of(dir.file("store.safetensors")), bytes_of(dir.file("recompute.safetensors"))) << precision;
    // Store evaluates less and keeps forward values; recompute keeps none.
    EXPECT_LT(store.outcome.per_step.evaluated, recompute.outcome.per_step.evaluated);
    EXPECT_GT(store.outcome.per_step.reused, 0);
    EXPECT_EQ(recompute.outcome.per_step.reused, 0);
    // Store evaluates each callee's forward once: the fold's vjp and every
    // nested vjp (the blocks', their norms' and linear layers') find it kept.
    EXPECT_EQ(store.outcome.per_step.forwards_repeated, 0) << precision;
    EXPECT_GT(recompute.outcome.per_step.forwards_repeated, 0);
    EXPECT_GT(store.outcome.per_step.stored_bytes_peak, 0);
    EXPECT_EQ(recompute.outcome.per_step.stored_bytes_peak, 0);
  }
}

// Under an f32 policy, on the native backend, the masters and AdamW's
// moments are held as f32 alone,
// through steps and checkpoints: no f64 view of a parameter's size is live
// when the run's memory peaks (the allocation log sees every view made
// during the run), where f64 views of the parameters and the moments once
// tripled GPT-2 small's memory (docs/memory.md).
TEST(Trainer, AnF32RunHoldsItsMastersAndMomentsAsF32Alone) {
  ScratchDir dir("trainer");
  const std::string program = dir.file("wide.qr");
  std::ofstream(program) << R"(dim B
module Lin {
  param w : ℝ[29, 3]  init = xavier_uniform
  fn apply(x : ℝ[..., 29]) -> ℝ[..., 3] = x · w
}
fn loss(θ : params Lin, batch : (ℝ[batch: B, 29], ℝ[batch: B, 3])) -> ℝ[] =
  let (x, y) = batch
  mean((Lin.apply(θ, x) - y)^2)
optimizer adamw { lr : f64 = 0.01 }
training run {
  model     = Lin
  objective = loss
  optimizer = adamw
  data      = stream "pairs.npz" |> batch(B = 8)
  epochs    : nat = 2
  checkpoint every 2 steps to "ckpt/"
}
)";
  runtime::Tensor x = runtime::Tensor::real({16, 29}), y = runtime::Tensor::real({16, 3});
  for (size_t i = 0; i < x.reals.size(); ++i) x.reals[i] = std::sin(0.3 * static_cast<double>(i));
  for (size_t i = 0; i < y.reals.size(); ++i) y.reals[i] = std::cos(0.7 * static_cast<double>(i));
  io::write_npz(dir.file("pairs.npz"), {{"0", x}, {"1", y}});
  for (const char* precision : {"f32", "f64"}) {
    SCOPED_TRACE(precision);
    TrainOptions o;
    o.precision = precision;
    o.backend = kernel::Backend::Native;  // the CLI's default: the reference walk reads f64
    o.run_dir = dir.file(std::string("run-") + precision);
    runtime::AllocationLog log;
    const TrainedRun r = train_file(program, o);
    EXPECT_TRUE(r.outcome.finished());
    int64_t f64_params = 0, f32_params = 0;
    for (const runtime::LoggedAllocation& a : log.live_at_peak()) {
      if (a.bytes == 29 * 3 * 8 && a.held == runtime::HeldAs::F64) ++f64_params;
      if (a.bytes == 29 * 3 * 4 && a.held == runtime::HeldAs::F32) ++f32_params;
    }
    if (std::string(precision) == "f32") {
      EXPECT_EQ(f64_params, 0) << "an f64 view of w, its gradient or a moment";
      EXPECT_GE(f32_params, 3) << "w and its two moments";
    } else {
      EXPECT_GE(f64_params, 3) << "an f64 run holds them in f64";
    }
  }
}

TEST(Trainer, ACorruptedCheckpointIsRefusedAndThePreviousOneUsed) {
  Regression reg;
  const TrainedRun whole = train_file(reg.program, reg.options("whole", "whole.safetensors"));
  TrainOptions part = reg.options("part", "part.safetensors");
  part.max_steps = 12;  // checkpoints at 5, 10 and 12
  train_file(reg.program, part);
  // Flip one byte of step 12's parameters.
  const std::string params = reg.dir.file("part/ckpt/step-00000012/params.safetensors");
  std::string bytes = io::read_file(params);
  bytes[bytes.size() - 3] ^= 0x01;
  io::write_file_atomically(params, bytes);
  part.max_steps.reset();
  part.resume = true;
  const TrainedRun resumed = train_file(reg.program, part);
  EXPECT_NE(resumed.output.find("refused checkpoint " + fs::path(reg.dir.file("part/ckpt/step-00000012")).string() +
                                ": params.safetensors: checksum mismatch"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + reg.dir.file("part/ckpt/step-00000010") + " (step 10"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.outcome.start_step, 10);
  EXPECT_EQ(bytes_of(reg.dir.file("whole.safetensors")), bytes_of(reg.dir.file("part.safetensors")));
}

TEST(Trainer, AResumeThatRefusedEveryCheckpointKeepsItsOwn) {
  Regression reg;
  train_file(reg.program, reg.options("run"));  // keeps steps 10, 15 and 18
  for (const char* step : {"10", "15", "18"}) corrupt_checkpoint(reg.dir.file(std::string("run/ckpt/step-000000") + step));
  TrainOptions o = reg.options("run");
  o.resume = true;
  o.max_steps = 9;  // writes 5 and 9, both older than every refused one
  const TrainedRun resumed = train_file(reg.program, o);
  EXPECT_NE(resumed.output.find("starting from step 0"), std::string::npos) << resumed.output;
  EXPECT_TRUE(fs::exists(reg.dir.file("run/ckpt/step-00000005")));
  const LatestCheckpoint latest = find_latest(reg.dir.file("run/ckpt"));
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_EQ(latest.checkpoint->state.step, 9);
  EXPECT_EQ(latest.refused.size(), 3u);
}

TEST(Trainer, AResumeChecksTheStateAgainstItsStep) {
  Regression reg;
  TrainOptions o = reg.options("run");
  o.max_steps = 5;
  train_file(reg.program, o);
  o.resume = true;
  const std::string folder = reg.dir.file("run/ckpt/step-00000005");
  // Consistent in itself (the loader would seek there), but not where 5 steps leave the data.
  reseal(folder, [](nlohmann::json& j) { j["data_position"] = {{"epoch", 0}, {"batch", 4}, {"samples", 32}}; });
  EXPECT_EQ(error_of<TrainError>([&] { train_file(reg.program, o); }),
            "cannot resume from " + folder +
                ": its data_position (epoch 0, batch 4, 32 samples) is not where step 5 leaves the data (epoch 0, "
                "batch 5, 40 samples)");
  reseal(folder, [](nlohmann::json& j) {
    j["data_position"] = {{"epoch", 0}, {"batch", 5}, {"samples", 40}};
    j["trainer"]["optimizer"]["step"] = 4;
  });
  EXPECT_EQ(error_of<TrainError>([&] { train_file(reg.program, o); }),
            "cannot resume from " + folder + ": its trainer.optimizer.step 4 is not its schedule_step 5");
  reseal(folder, [](nlohmann::json& j) { j["schedule_step"] = 4; });
  EXPECT_EQ(error_of<TrainError>([&] { train_file(reg.program, o); }),
            "cannot resume from " + folder + ": its trainer.optimizer.step 4 does not fit step 5 (every step of this "
                                             "run updates)");
}

TEST(Trainer, AnotherRunOnTheFolderIsRefusedNamingItsPid) {
  Regression reg;
  fs::create_directories(reg.dir.file("run"));
  const RunLock held(reg.dir.file("run"));
  EXPECT_EQ(error_of<io::IoError>([&] { train_file(reg.program, reg.options("run")); }),
            reg.dir.file("run") + ": another `quire train` (pid " + std::to_string(::getpid()) +
                ") is running on this run folder: wait for it to end, or choose another --run-dir");
}

TEST(Trainer, ATornMetricsLineIsRepairedAndSaidOnStderr) {
  Regression reg;
  TrainOptions o = reg.options("run");
  o.max_steps = 5;
  train_file(reg.program, o);
  const std::string metrics = reg.dir.file("run/metrics.jsonl");
  io::write_file_atomically(metrics, io::read_file(metrics) + R"({"step":6,"tot)");
  o.resume = true;
  o.max_steps = 7;
  ::testing::internal::CaptureStderr();
  train_file(reg.program, o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("quire: warning: " + metrics + ": its last line was cut short"), std::string::npos) << err;
  std::vector<int64_t> steps;
  for (const StepRecord& r : read_metrics(metrics)) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(Trainer, DataOfTheWrongShapeIsRefusedBeforeTraining) {
  Regression reg("", "", /*data_shape=*/"4");
  const std::string message = error_of<io::IoError>([&] { train_file(reg.program, reg.options("run")); });
  EXPECT_EQ(message, reg.dir.file("pairs.npz") +
                         ": array `0`: expected shape [N, 3] for N samples of ℝ[3], found [48, 4]");
  EXPECT_FALSE(fs::exists(reg.dir.file("run/metrics.jsonl")));
}

TEST(Trainer, F16RecoversFromAnOverflowBySkippingAndRescaling) {
  // The tutorial under f16: GradScaler's first scale, 2^16, overflows the
  // half gradients; the step is skipped, the scale halved, and training goes on.
  ScratchDir dir("trainer");
  TrainOptions o;
  o.run_dir = dir.file("run");
  o.precision = "f16";
  o.max_steps = 200;
  const TrainedRun r = train_file(kTutorial, o);
  EXPECT_GE(r.outcome.skipped, 1);
  const std::vector<StepRecord> steps = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(steps.size(), 200u);
  ASSERT_TRUE(steps[0].skipped) << r.output;
  EXPECT_EQ(steps[0].loss_scale, 65536.0);
  EXPECT_EQ(steps[1].loss_scale, 32768.0);
  EXPECT_NE(r.output.find("step 1: gradients not finite at loss scale 65536: update skipped, scale now 32768"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("note: the first value that was not finite"), std::string::npos) << r.output;
  int64_t taken = 0;
  for (const StepRecord& s : steps) taken += !s.skipped;
  EXPECT_GE(taken, 190);
  EXPECT_LT(steps.back().loss, steps.front().loss / 10);
}

TEST(Trainer, ANonFiniteLossStopsTheRunAndNamesItsFirstSite) {
  // log of a negative number: the forward value at that site is NaN.
  Regression reg("mean(log(Lin.apply(θ, x) - y - 100.0))");
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, reg.options("run")); });
  EXPECT_NE(message.find("step 1 (epoch 0): the loss is nan; training stopped before updating the parameters"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("reg.qr:9:8: note: the first value that was not finite, in evaluation order"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("`loss.vjp[0]/%10` (log) = nan\n"), std::string::npos) << message;
  EXPECT_NE(message.find("mean(log(Lin.apply(θ, x) - y - 100.0))"), std::string::npos) << message;
  // No checkpoint of a step that made no update.
  EXPECT_FALSE(fs::exists(reg.dir.file("run/ckpt")));
  EXPECT_EQ(read_metrics(reg.dir.file("run/metrics.jsonl")).size(), 1u);
}

TEST(Trainer, ANonFiniteGradientWithAFiniteLossStopsTheRun) {
  // sqrt(z − z) is 0, but its derivative at 0 is infinite: the loss is
  // finite and the gradient is not (the check reads each gradient's bits).
  Regression reg("mean(Lin.apply(θ, x) - y) * 0.0 + mean(sqrt(Lin.apply(θ, x) - Lin.apply(θ, x)))");
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, reg.options("run")); });
  EXPECT_NE(message.find("step 1 (epoch 0): the gradient is not finite"), std::string::npos) << message;
  EXPECT_NE(message.find("training stopped before updating the parameters"), std::string::npos) << message;
}

TEST(Trainer, AResumeMustRepeatThePolicy) {
  Regression reg;
  TrainOptions o = reg.options("run");
  o.max_steps = 5;
  train_file(reg.program, o);
  o.resume = true;
  o.precision = "bf16";
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, o); });
  EXPECT_EQ(message, "cannot resume from " + reg.dir.file("run/ckpt/step-00000005") +
                         ": it was written with precision = \"f64\", this run has \"bf16\" (a resume must repeat the run)");
}

TEST(Trainer, AResumeMustRepeatTheProductStep) {
  Regression reg;
  TrainOptions o = reg.options("run");
  o.precision = "f32";
  o.fused_products = true;
  o.max_steps = 5;
  train_file(reg.program, o);
  o.resume = true;
  o.fused_products = false;
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, o); });
  EXPECT_EQ(message, "cannot resume from " + reg.dir.file("run/ckpt/step-00000005") +
                         ": it was written with product_step = \"fma\", this run has \"separate\" (a resume must "
                         "repeat the run)");
  // The same step resumes.
  o.fused_products = true;
  o.max_steps = 7;
  EXPECT_NO_THROW(train_file(reg.program, o));
}

// Under the solver's decisions (`--realize`): the forward values it narrowed
// are rounded in the objective's vjp, the run still converges, stopping and
// resuming gives the same bits, and a resume under other decisions is refused.
TEST(Trainer, ASolvedRealizationTrainsAndResumes) {
  Regression reg;
  auto prog = load(reg.program);
  const int loss = prog->find_function("loss");
  const core::Function& fn = prog->functions.at(static_cast<size_t>(loss));
  precision::RealizationFile solved;
  solved.entry = "loss";
  for (const core::Instr& in : fn.body)
    if (in.op == core::Op::Sub) solved.assignment.sites[core::site_name(fn, in.id)] = FloatType::BF16;
  solved.assignment.params["w"] = FloatType::F32;
  ASSERT_EQ(solved.assignment.sites.size(), 1u);

  TrainOptions whole = reg.options("whole", "whole.safetensors");
  whole.realization = solved;
  const TrainedRun w = train_file(reg.program, whole);
  EXPECT_TRUE(w.outcome.finished());
  EXPECT_NE(w.output.find("policy f64+solved:"), std::string::npos) << w.output;
  TrainOptions f64 = reg.options("f64", "f64.safetensors");
  train_file(reg.program, f64);
  EXPECT_NE(bytes_of(reg.dir.file("whole.safetensors")), bytes_of(reg.dir.file("f64.safetensors")));
  // The same descent as f64, to the rounding of one bf16 value a step.
  const std::vector<StepRecord> solved_steps = read_metrics(reg.dir.file("whole/metrics.jsonl"));
  const std::vector<StepRecord> f64_steps = read_metrics(reg.dir.file("f64/metrics.jsonl"));
  ASSERT_EQ(solved_steps.size(), f64_steps.size());
  EXPECT_LT(solved_steps.back().loss, solved_steps.front().loss);
  EXPECT_NEAR(solved_steps.back().loss, f64_steps.back().loss, 0.02 * f64_steps.back().loss);
  EXPECT_NE(solved_steps.back().loss, f64_steps.back().loss);

  TrainOptions part = reg.options("part", "part.safetensors");
  part.realization = solved;
  part.max_steps = 7;
  train_file(reg.program, part);
  part.max_steps.reset();
  part.resume = true;
  train_file(reg.program, part);
  EXPECT_EQ(bytes_of(reg.dir.file("part.safetensors")), bytes_of(reg.dir.file("whole.safetensors")));

  TrainOptions other = reg.options("part");
  other.resume = true;
  other.realization = solved;
  other.realization->assignment.params["w"] = FloatType::BF16;
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, other); });
  EXPECT_NE(message.find("it was written with precision = \"f64+solved:"), std::string::npos) << message;

  TrainOptions wrong = reg.options("wrong");
  wrong.realization = solved;
  wrong.realization->assignment.params["nope"] = FloatType::F32;
  wrong.realization_path = "r.json";
  EXPECT_EQ(error_of<TrainError>([&] { train_file(reg.program, wrong); }),
            "--realize r.json: 1 of its decisions cannot apply:\n  parameter `nope` is not in `loss`'s parameter tree");
}

// A realization of the gradient (`solve --of gradient`) decides the reverse
// sweep too: a step under it writes fewer bytes than an f64 step, and the run
// still descends. The same decisions read as the output's are refused, the
// objective alone storing no reverse-sweep value.
TEST(Trainer, AGradientRealizationDecidesTheBackwardSweep) {
  Regression reg;
  auto prog = load(reg.program);
  const int loss = prog->find_function("loss");
  const int vjp = grad::vjp(*prog, loss, {0});
  const core::Function& fn = prog->functions.at(static_cast<size_t>(vjp));
  const core::Function& primal = prog->functions.at(static_cast<size_t>(fn.primal));
  precision::RealizationFile solved;
  solved.entry = "loss";
  solved.of = precision::BudgetOf::Gradient;
  for (size_t k = primal.body.size(); k < fn.body.size(); ++k)
    if (fn.body[k].op == core::Op::Mul && fn.body[k].type.is_tensor())
      solved.assignment.sites[core::site_name(fn, fn.body[k].id)] = FloatType::BF16;
  ASSERT_FALSE(solved.assignment.sites.empty());

  TrainOptions narrowed = reg.options("narrowed");
  narrowed.realization = solved;
  const TrainedRun n = train_file(reg.program, narrowed);
  const TrainedRun w = train_file(reg.program, reg.options("f64"));
  EXPECT_TRUE(n.outcome.finished());
  EXPECT_LT(n.outcome.per_step.written_bytes, w.outcome.per_step.written_bytes);
  EXPECT_GT(n.outcome.per_step.written_bytes, 0);
  const std::vector<StepRecord> steps = read_metrics(reg.dir.file("narrowed/metrics.jsonl"));
  EXPECT_LT(steps.back().loss, steps.front().loss);

  TrainOptions as_output = reg.options("as-output");
  as_output.realization = solved;
  as_output.realization->of = precision::BudgetOf::Output;
  as_output.realization_path = "r.json";
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, as_output); });
  EXPECT_NE(message.find("is not a value `loss` stores"), std::string::npos) << message;
}

// Under a realization with ranges, each step counts the values it stored
// beyond them (`envelope_exceeded` in the metrics), and the first such step
// is said once on stderr with its source line; without ranges there is no
// count.
TEST(Trainer, UnderRangesEachStepCountsTheValuesBeyondThem) {
  Regression reg;
  auto prog = load(reg.program);
  const core::Function& fn = prog->functions.at(static_cast<size_t>(prog->find_function("loss")));
  precision::RealizationFile solved;
  solved.entry = "loss";
  std::string sub;
  for (const core::Instr& in : fn.body)
    if (in.op == core::Op::Sub) sub = core::site_name(fn, in.id);
  solved.assignment.sites[sub] = FloatType::BF16;
  auto steps_under = [&](const char* run, std::optional<double> magnitude, std::string& err) {
    TrainOptions o = reg.options(run);
    o.realization = solved;
    if (magnitude) o.realization->ranges = precision::DecisionRanges{1, {{sub, *magnitude}}};
    ::testing::internal::CaptureStderr();
    train_file(reg.program, o);
    err = ::testing::internal::GetCapturedStderr();
    return read_metrics(reg.dir.file(std::string(run) + "/metrics.jsonl"));
  };
  std::string err;
  const std::vector<StepRecord> tight = steps_under("tight", 1e-12, err);
  ASSERT_FALSE(tight.empty());
  for (const StepRecord& r : tight) {
    ASSERT_TRUE(r.envelope_exceeded.has_value()) << r.step;
    EXPECT_GE(*r.envelope_exceeded, 1) << r.step;
  }
  EXPECT_NE(err.find("warning[W0801]: step 1: `" + sub + "` (sub) stored |v| = "), std::string::npos) << err;
  EXPECT_EQ(err.find("W0801", err.find("W0801") + 1), std::string::npos) << "said once: " << err;
  const std::vector<StepRecord> loose = steps_under("loose", 1e300, err);
  for (const StepRecord& r : loose) EXPECT_EQ(r.envelope_exceeded, std::optional<int64_t>(0)) << r.step;
  EXPECT_EQ(err.find("W0801"), std::string::npos) << err;
  for (const StepRecord& r : steps_under("none", std::nullopt, err)) EXPECT_FALSE(r.envelope_exceeded.has_value());
}

TEST(Trainer, AFreshRunDoesNotMixWithAnEarlierRunsCheckpoints) {
  Regression reg;
  TrainOptions o = reg.options("run");
  o.max_steps = 5;
  train_file(reg.program, o);
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, o); });
  EXPECT_EQ(message, reg.dir.file("run/ckpt") +
                         " holds checkpoints of an earlier run (step-00000005): pass --resume to continue it, or "
                         "remove the folder (or choose another --run-dir) to start over");
}

TEST(Trainer, ABadOptimizerFieldIsPlacedInTheSource) {
  Regression reg("", "beta1 = 1.5");
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, reg.options("run")); });
  EXPECT_NE(message.find("reg.qr:14:3: error[E0602]: optimizer `adamw`: field `beta1`: must be in [0, 1), got 1.5"),
            std::string::npos)
      << message;
}

TEST(Trainer, AMuonRunResumesWithTheBitsOfARunNeverStoppedOnEveryBackend) {
  // Muon takes w [3, 1] (newton_schulz_tall), its AdamW takes b.
  Regression reg("", "kind = muon\n  adamw_lr = 0.01");
  for (kernel::Backend backend : {kernel::Backend::Interp, kernel::Backend::Kernels})
    for (const char* precision : {"f64", "f32"}) {
      const std::string name = fmt::format("{}-{}", kernel::backend_name(backend), precision);
      TrainOptions whole = reg.options(name + "-whole", name + "-whole.safetensors");
      whole.backend = backend;
      whole.precision = precision;
      const TrainedRun r = train_file(reg.program, whole);
      EXPECT_NE(r.output.find(", muon lr 0.05 linear(warmup = 2),"), std::string::npos) << r.output;
      TrainOptions part = reg.options(name + "-part", name + "-part.safetensors");
      part.backend = backend;
      part.precision = precision;
      part.max_steps = 7;
      train_file(reg.program, part);
      part.max_steps.reset();
      part.resume = true;
      EXPECT_EQ(train_file(reg.program, part).outcome.start_step, 7);
      EXPECT_EQ(bytes_of(reg.dir.file(name + "-whole.safetensors")), bytes_of(reg.dir.file(name + "-part.safetensors")))
          << name;
      EXPECT_EQ(bytes_of(reg.dir.file(name + "-whole/ckpt/step-00000018/optimizer.safetensors")),
                bytes_of(reg.dir.file(name + "-part/ckpt/step-00000018/optimizer.safetensors")))
          << name;
    }
  for (const char* precision : {"f64", "f32"})
    EXPECT_EQ(bytes_of(reg.dir.file(fmt::format("interp-{}-whole.safetensors", precision))),
              bytes_of(reg.dir.file(fmt::format("kernels-{}-whole.safetensors", precision))))
        << precision;
}

TEST(Trainer, AMuonFieldNamingNoParameterIsPlacedInTheSource) {
  Regression reg("", "kind = muon\n  adamw_params = \"head\"");
  const std::string message = error_of<TrainError>([&] { train_file(reg.program, reg.options("run")); });
  EXPECT_NE(message.find("reg.qr:15:3: error[E0602]: optimizer `adamw`: field `adamw_params`: `head` names no "
                         "trainable parameter"),
            std::string::npos)
      << message;
}

TEST(Trainer, AProgramWithoutATrainingRunIsRefused) {
  ScratchDir dir("trainer");
  const std::string program = dir.file("plain.qr");
  std::ofstream(program) << "fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n";
  TrainOptions o;
  o.run_dir = dir.file("run");
  EXPECT_EQ(error_of<TrainError>([&] { train_file(program, o); }),
            program + ": the file has no `training run` block to run");
}

}  // namespace
}  // namespace quire::train
