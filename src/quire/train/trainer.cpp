#include "quire/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <set>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/compile/memory.h"
#include "quire/distributed/handshake.h"
#include "quire/distributed/reduction.h"
#include "quire/grad/vjp.h"
#include "quire/interp/envelope_guard.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/native/native_runner.h"
#include "quire/realize/realization.h"
#include "quire/runtime/element_scan.h"
#include "quire/support/diagnostics.h"
#include "quire/support/sha256.h"
#include "quire/train/checkpoint.h"
#include "quire/train/data.h"
#include "quire/train/loss_curve.h"
#include "quire/train/metrics.h"
#include "quire/train/optimizer.h"
#include "quire/train/pace.h"
#include "quire/train/progress.h"
#include "quire/train/ranks.h"
#include "quire/train/run_lock.h"
#include "quire/train/shards.h"
#include "quire/train/step_program.h"

namespace quire::train {

using support::sha256_hex;

namespace {

namespace fs = std::filesystem;
using interp::ParamMap;
using interp::Value;
using runtime::FloatType;

/// A note at `loc` with its source line and caret.
std::string source_note(const elab::Program& prog, const SourceRange& loc, const std::string& message) {
  Diagnostic d;
  d.severity = Severity::Note;
  d.range = loc;
  d.message = message;
  return render_diagnostic(prog.sources, d);
}

/// A number for messages: "nan" whatever its sign bit, "inf", "-inf", or the shortest exact form.
std::string number(double x) { return std::isnan(x) ? "nan" : fmt::format("{}", x); }

// In the view each gradient has: widening a kernel's f32 gradient only to
// look at it cost more than the check.
bool all_finite(const ParamMap& m) {
  for (const auto& [path, t] : m)
    if (!runtime::all_finite(t.reals)) return false;
  return true;
}

double joint_norm(const ParamMap& m) {
  double sum = 0;
  for (const auto& [path, t] : m)
    for (double g : t.reals) sum += g * g;
  return std::sqrt(sum);
}

/// Everything a run needs, set up once; then step() after step().
class Trainer {
 public:
  Trainer(elab::Program& prog, const TrainOptions& options, std::ostream& out, bool tty)
      : prog_(prog),
        options_(options),
        leader_(!options.world || options.world->rank() == 0),
        out_(leader_ ? out : discard_),
        tty_(tty && leader_) {}

  TrainOutcome run();

 private:
  void set_up();
  void start_fresh();
  void resume();
  /// Each parameter stored in a type whose numbers are f32's (an f32 master,
  /// a bf16 or f16 one) held as f32 alone: the native kernels and the
  /// optimizer's update read and write that view, and the f64 view the
  /// initialization or a checkpoint's reader made would stay beside it for
  /// the whole run (GPT-2 small: 990 MB, docs/memory.md).
  void hold_narrow_params();
  /// One step (TrainError when the run cannot go on).
  void step();
  /// The `evaluate` function's mean over every held-out batch (file order,
  /// the last partial batch left out, as the training batches do), with the
  /// parameters after `step_` steps.
  double held_out_loss();
  /// The batch value of the objective's argument from a loader's tensors.
  Value batch_value(std::vector<runtime::Tensor> batch) const;
  /// The first non-finite site of the step just evaluated, shard by shard
  /// (`args[i]` the arguments of this process's i-th shard), as a note.
  std::string explain_nonfinite(const std::vector<std::vector<Value>>& args);
  /// Under MPI: every rank must be about to run what rank 0 runs (distributed/handshake.h).
  void agree_with_ranks();
  /// ", 3 shards of 3+3+2 rows on 3 ranks (one each)": the start message's words for the shards.
  std::string shards_text() const;
  /// --memory-limit: a MemoryLimitError when one step needs more (trainer.h, MEMORY).
  void refuse_over_limit(int64_t limit, const precision::RealizeOptions& realize);
  void write_checkpoint_now();
  nlohmann::json trainer_state() const;
  /// Closes the run: a checkpoint of where it stopped (unless `failed`: the
  /// data has moved past a step that made no update), the loss curve, --params-out.
  void finish(bool failed = false);

  elab::Program& prog_;
  const TrainOptions& options_;
  /// Writes the run's files and prints progress: the only process, or rank 0 of an MPI run.
  bool leader_;
  std::ostream discard_{nullptr};  ///< where the other ranks' progress goes: nowhere
  std::ostream& out_;
  bool tty_;

  const elab::TrainingInfo* run_ = nullptr;
  int objective_ = -1;
  bool keyed_ = false;  ///< the objective takes a key: each step passes step_key(seed, step)
  int vjp_ = -1;
  std::map<std::string, int64_t> dims_;
  std::string data_path_;
  std::string run_dir_;
  std::unique_ptr<RunLock> lock_;  ///< held from set_up to the end of the run
  std::string checkpoint_dir_;  ///< empty: the run writes no checkpoints
  int64_t checkpoint_every_ = 0;
  std::optional<Dataset> data_;
  std::optional<Dataset> held_out_;  ///< the `evaluate` clause's data, when the run has one
  std::unique_ptr<compile::CompiledProgram> held_out_compiled_;
  /// Its own runner: a runner keeps the kernels it compiled by their number in one catalog.
  std::unique_ptr<kernel::KernelRunner> held_out_runner_;
  std::unique_ptr<kernel::KernelEngine> held_out_engine_;
  std::unique_ptr<compile::Executor> held_out_executor_;  ///< the evaluate function, compiled once
  std::unique_ptr<precision::Realization> held_out_realization_;  ///< under --backend interp
  std::unique_ptr<interp::Interpreter> held_out_interp_;
  std::unique_ptr<Loader> loader_;
  distributed::Communicator* world_ = nullptr;  ///< the ranks of an MPI run, or null
  int shards_ = 1;                              ///< the shards of every step (shards.h)
  std::vector<RowRange> shard_rows_;            ///< each shard's rows of a batch, in shard order
  int first_shard_ = 0;                         ///< the shards this process computes: first_shard_ …
  int local_shards_ = 1;                        ///< … and how many (all of them, or a rank's one)
  /// The step's vjp by shard rows: one program, or two when the batch does not split evenly.
  std::map<int64_t, std::unique_ptr<StepProgram>> steps_;
  const precision::Realization* realization_ = nullptr;  ///< the step's (every step program's policy is the same)
  std::string policy_label_;  ///< the policy, or the solved realization's fingerprint (`f64+solved:…`)
  /// Under a realization with ranges: each step's narrowed values checked
  /// against them (interp/envelope_guard.h), counted in the metrics.
  std::unique_ptr<interp::EnvelopeGuard> guard_;
  bool guard_warned_ = false;  ///< the first step beyond a range is said once on stderr
  machine::Profile profile_;  ///< the layouts' plan reads it (kept for the engine's lifetime)
  FloatType master_ = FloatType::F64;
  io::StoreTypes param_types_;
  ParamMap params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;
  std::unique_ptr<MetricsFile> metrics_;
  std::unique_ptr<Progress> progress_;

  int64_t step_ = 0;  ///< steps done
  int64_t target_ = 0;  ///< the step this call stops at
  int64_t last_checkpoint_step_ = -1;
  /// What the run wrote or verified: only those count toward keeping K
  /// (checkpoint.h), so refused checkpoints never push the run's own out.
  CheckpointRetention retention_;
  TrainOutcome outcome_;
  std::chrono::steady_clock::time_point started_;
  RecentPace pace_;  ///< the throughput and time left, from the recent steps
};

TrainOutcome Trainer::run() {
  set_up();
  if (options_.resume) resume();
  else start_fresh();
  outcome_.start_step = step_;
  outcome_.total_steps = loader_->total_steps();
  outcome_.last_loss = std::numeric_limits<double>::quiet_NaN();
  target_ = loader_->total_steps();
  if (options_.max_steps) target_ = std::min(target_, *options_.max_steps);
  outcome_.shards = shards_;
  if (leader_) {
    metrics_ = std::make_unique<MetricsFile>((fs::path(run_dir_) / "metrics.jsonl").string(), step_);
    if (!metrics_->repair().empty()) std::cerr << "quire: warning: " << metrics_->repair() << "\n";
  }
  started_ = std::chrono::steady_clock::now();
  while (step_ < target_) step();
  finish();
  return outcome_;
}

void Trainer::set_up() {
  run_ = prog_.training();
  const std::string& main_path = prog_.files[prog_.main_file].path;
  if (!run_) throw TrainError(fmt::format("{}: the file has no `training run` block to run", main_path));
  objective_ = run_->objective;
  // A copy: grad::vjp below appends to prog_.functions, which moves its elements.
  const core::Function objective = prog_.functions[objective_];
  keyed_ = objective.args.size() == 3;

  // Dimensions: the batch's from `batch(B = b)`, the rest from the command line;
  // the shards' rows of each batch (shards.h).
  world_ = options_.world;
  if (world_ && options_.shards != 1 && options_.shards != world_->size())
    throw TrainError(fmt::format("--shards {} on {} ranks: an MPI run computes one shard per rank, so its shards "
                                 "are its ranks (leave --shards out, or give {})",
                                 options_.shards, world_->size(), world_->size()));
  shards_ = world_ ? world_->size() : options_.shards;
  try {
    dims_ = run_dims(*run_, options_.dims);
    shard_rows_ = split_rows(run_->batch_size, shards_);
  } catch (const DataError& e) {
    throw TrainError(e.what());
  }
  first_shard_ = world_ ? world_->rank() : 0;
  local_shards_ = world_ ? 1 : shards_;

  // A bad optimizer block is the user's error, at the field to blame.
  auto optimizer_diagnostic = [&](const OptimizerError& e) {
    Diagnostic d;
    d.code = "E0602";
    d.range = e.loc;
    d.message = e.what();
    return TrainError(render_diagnostic(prog_.sources, d), /*diagnostic=*/true);
  };
  OptimizerConfig config;
  try {
    config = OptimizerConfig::from(prog_.optimizers.at(run_->optimizer));
  } catch (const OptimizerError& e) {
    throw optimizer_diagnostic(e);
  }

  // The data, relative to the program's file, checked before anything runs.
  // A rank of an MPI run reads only its shards' rows where the file allows
  // (data.h, READING); one process reads every row of every batch anyway,
  // --shards or not, so it reads the file whole and checks it before step 1.
  data_path_ = training_file(prog_, run_->data.front().path);
  const SampleSpec spec = sample_spec(prog_, objective.args.at(1).type, run_->batch_dim, dims_);
  data_ = Dataset::open(data_path_, spec, world_ ? DataReading::Rows : DataReading::Whole);
  loader_ = std::make_unique<Loader>(*data_, loader_options(*run_));

  // Outputs: the run folder, and the checkpoint folder inside it unless absolute.
  run_dir_ = options_.run_dir.empty() ? (fs::path("runs") / fs::path(main_path).stem()).string() : options_.run_dir;
  if (leader_) {
    std::error_code ec;
    fs::create_directories(run_dir_, ec);
    if (ec) throw io::IoError(run_dir_, fmt::format("cannot create the run folder: {}", ec.message()));
    lock_ = std::make_unique<RunLock>(run_dir_);
  }
  if (!run_->checkpoint_dir.empty()) {
    fs::path dir = (fs::path(run_dir_) / run_->checkpoint_dir).lexically_normal();
    if (!dir.has_filename() && dir.has_parent_path()) dir = dir.parent_path();  // "run/ckpt/" names as "run/ckpt"
    checkpoint_dir_ = dir.string();
    checkpoint_every_ = run_->checkpoint_unit == "epochs" ? run_->checkpoint_every * loader_->steps_per_epoch()
                                                          : run_->checkpoint_every;
  }

  // The ranks agree on what they run before any of them compiles it.
  if (world_) agree_with_ranks();

  // The gradient, realized under the policy like the forward.
  vjp_ = grad::vjp(prog_, objective_, {0});
  precision::RealizeOptions realize;
  const auto policy = precision::parse_policy(options_.precision);
  if (!policy) throw TrainError(fmt::format("--precision {}: not a policy (f64, f32, bf16, f16)", options_.precision));
  realize.policy = *policy;
  realize.half_intermediates = options_.half_intermediates;
  realize.fused_products = options_.fused_products;
  policy_label_ = options_.precision;
  if (options_.realization) {
    // The solver's decisions for the objective's forward values apply to the
    // vjp's copies of them. A realization of the output leaves the backward
    // sweep at the policy; one of the gradient (`solve --of gradient`) was
    // solved over this very vjp and decides its reverse sweep too.
    const precision::RealizationFile& file = *options_.realization;
    const std::string& where = options_.realization_path;
    if (file.entry != objective.name)
      throw TrainError(fmt::format("--realize {}: the realization was solved for `{}`, not for the objective `{}`", where,
                                   file.entry, objective.name));
    const int decided = file.of == precision::BudgetOf::Gradient ? vjp_ : objective_;
    std::vector<std::string> problems = precision::check_assignment(prog_, decided, file.assignment, dims_);
    if (!problems.empty())
      throw TrainError(fmt::format("--realize {}: {} of its decisions cannot apply:\n  {}", where, problems.size(),
                                   fmt::join(problems, "\n  ")));
    realize.policy = file.assignment.policy;
    realize.assignment = &file.assignment;
    realize.keep_masters = true;
    const std::string decisions =
        precision::realization_file_json(file.entry, file.assignment, nullptr)["decisions"].dump();
    policy_label_ = fmt::format("{}+solved:{}", precision::policy_name(file.assignment.policy),
                                sha256_hex(decisions).substr(0, 12));
  }
  const bool compiled = options_.backend != kernel::Backend::Interp;
  if (compiled) profile_ = machine::planning_profile(options_.profile);
  if (options_.realization && options_.realization->ranges)
    guard_ = std::make_unique<interp::EnvelopeGuard>(options_.realization->ranges->limits(), &prog_);
  // The step at each row count this process's shards hold, compiled once.
  StepSettings settings;
  settings.realize = realize;
  settings.remat = options_.remat;
  settings.backend = options_.backend;
  settings.threads = options_.threads;
  // A solver's realization is watched site by site (the envelope guard),
  // which a library kernel's inner sites would escape: its lines run.
  settings.library_kernels = options_.library_kernels && !guard_;
  settings.profile = &profile_;
  settings.guard = guard_.get();
  for (int s = first_shard_; s < first_shard_ + local_shards_; ++s) {
    const int64_t rows = shard_rows_[static_cast<size_t>(s)].rows();
    if (steps_.count(rows)) continue;
    std::map<std::string, int64_t> dims = dims_;
    dims[run_->batch_dim] = rows;
    steps_[rows] = std::make_unique<StepProgram>(prog_, vjp_, std::move(dims), settings);
  }
  realization_ = &steps_.begin()->second->realization();
  // The held-out evaluation (rank 0's alone): its data checked now, its function compiled once.
  if (run_->evaluate >= 0 && leader_) {
    const std::string path = training_file(prog_, run_->evaluate_path);
    held_out_.emplace(Dataset::open(path, spec));
    if (held_out_->samples() < run_->batch_size)
      throw TrainError(fmt::format("{}: the held-out data has {} samples, fewer than one batch of {}", path,
                                   held_out_->samples(), run_->batch_size));
    // Under the run's policy (a solved realization is the objective's alone).
    precision::RealizeOptions held = realize;
    held.assignment = nullptr;
    if (compiled) {
      compile::CompileRequest request;
      request.entry = run_->evaluate;
      request.dims = dims_;
      request.realize = held;
      request.remat = options_.remat;
      request.profile = &profile_;
      request.threads = options_.threads;
      request.library_kernels = options_.backend == kernel::Backend::Native && options_.library_kernels && !guard_;
      held_out_compiled_ = std::make_unique<compile::CompiledProgram>(compile::compile(prog_, request));
      held_out_runner_ = native::make_runner(options_.backend, options_.threads);
      held_out_engine_ = std::make_unique<kernel::KernelEngine>(held_out_compiled_->catalog, *held_out_runner_,
                                                                native::warn_native_unavailable);
      held_out_executor_ = std::make_unique<compile::Executor>(prog_, *held_out_compiled_, *held_out_engine_);
    } else {
      held_out_realization_ =
          std::make_unique<precision::Realization>(precision::realize(prog_, run_->evaluate, held, dims_));
      held_out_interp_ = std::make_unique<interp::Interpreter>(prog_, dims_, held_out_realization_.get());
    }
  }
  master_ = realize.policy == precision::Policy::F64 ? FloatType::F64 : FloatType::F32;
  if (realize.policy == precision::Policy::F16) scaler_.emplace(options_.loss_scale);

  std::set<std::string> frozen;
  for (const precision::ParamStorage& p : realization_->params) {
    param_types_.by_name[p.path] = io::store_type_of(p.stored);
    if (p.frozen) frozen.insert(p.path);
  }
  const elab::ParamsType& model = objective.args[0].type.params;
  params_ = options_.params_in.empty() ? interp::init_params(prog_, model, options_.seed, dims_)
                                       : interp::load_params(options_.params_in, prog_, model, dims_);
  // Each parameter at its stored type from the start: the f32 master a
  // PyTorch run would hold after `.float()`.
  for (auto& [path, t] : params_)
    if (const precision::ParamStorage* p = realization_->param(path); p && t.is_real())
      for (double& x : t.reals) x = runtime::round_to(p->stored, x);
  hold_narrow_params();
  // A stacked parameter's leading axes are its copies (`stack{L}`): Muon
  // takes each copy's matrix. The declaration has the copy's own axes.
  try {
    optimizer_ = std::make_unique<Optimizer>(config, params_, frozen, stacked_copies(prog_, model));
  } catch (const OptimizerError& e) {
    throw optimizer_diagnostic(e);
  }
  optimizer_->set_threads(options_.threads);
  optimizer_->set_backend(options_.backend);
  if (options_.memory_limit) refuse_over_limit(*options_.memory_limit, realize);

  progress_ = std::make_unique<Progress>(
      out_, tty_, options_.log_every > 0 ? options_.log_every : default_log_every(loader_->total_steps()));
  int64_t elements = 0;
  for (const auto& [path, t] : params_) elements += t.size();
  progress_->message(fmt::format(
      "training {}: objective `{}`, {} parameters ({} elements), {} {}, {} ({} samples, batch {}: {} steps × {} epochs "
      "= {}), policy {}{}, remat {}{}",
      main_path, objective.name, params_.size(), elements, optimizer_kind_name(config.kind),
      fmt::format("lr {} {}", config.lr, config.schedule.to_string()), data_path_, data_->samples(), run_->batch_size,
      loader_->steps_per_epoch(), loader_->options().epochs, loader_->total_steps(), policy_label_,
      scaler_ ? fmt::format(" (loss scale {})", scaler_->scale()) : "", interp::remat_name(options_.remat),
      shards_ == 1 ? std::string() : shards_text()));
}

void Trainer::hold_narrow_params() {
  for (auto& [path, t] : params_)
    if (const precision::ParamStorage* p = realization_->param(path);
        p && t.is_real() && p->stored != FloatType::F64 && t.reals.holds_f32_numbers())
      t.reals.narrow_for_writing();
}

void Trainer::refuse_over_limit(int64_t limit, const precision::RealizeOptions& realize) {
  // The largest shard's step (the others need no more), compiled for the
  // count where the run interprets it.
  const auto largest = std::prev(steps_.end());
  std::unique_ptr<compile::CompiledProgram> counted;
  const compile::CompiledProgram* c = largest->second->compiled();
  if (!c) {
    compile::CompileRequest request;
    request.entry = vjp_;
    request.dims = dims_;
    request.dims[run_->batch_dim] = largest->first;
    request.realize = realize;
    request.remat = options_.remat;
    counted = std::make_unique<compile::CompiledProgram>(compile::compile(prog_, request));
    c = counted.get();
  }
  const compile::CallMemory m = compile::count_call_memory(prog_, *c);
  const int64_t state = optimizer_->state_bytes(master_);
  if (auto refusal = compile::memory_limit_refusal(prog_, *c, m, limit, "one training step", state,
                                                   fmt::format("the {} state", optimizer_kind_name(optimizer_->config().kind))))
    throw compile::MemoryLimitError(*refusal);
}

std::string Trainer::shards_text() const {
  std::string rows;
  for (const RowRange& r : shard_rows_) rows += fmt::format("{}{}", rows.empty() ? "" : "+", r.rows());
  return fmt::format(", {} shards of {} rows{}", shards_, rows,
                     world_ ? fmt::format(" on {} ranks (one each)", world_->size()) : std::string(" in this process"));
}

nlohmann::json Trainer::trainer_state() const {
  return {{"precision", policy_label_},
          {"half_intermediates", options_.half_intermediates},
          {"product_step", options_.fused_products ? "fma" : "separate"},
          {"total_steps", loader_->total_steps()},
          {"batch_size", run_->batch_size},
          {"shards", shards_},
          {"optimizer", optimizer_->state_json()}};
}

void Trainer::start_fresh() {
  if (checkpoint_dir_.empty() || !leader_) return;
  // Starting over would interleave a new run's checkpoints with an old one's.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir_, ec))
    if (entry.path().filename().string().rfind("step-", 0) == 0)
      throw TrainError(fmt::format(
          "{} holds checkpoints of an earlier run ({}): pass --resume to continue it, or remove the folder (or "
          "choose another --run-dir) to start over",
          checkpoint_dir_, entry.path().filename().string()));
}

void Trainer::resume() {
  if (checkpoint_dir_.empty())
    throw TrainError("--resume: the training run writes no checkpoints (add `checkpoint every N steps to \"dir/\"`)");
  std::optional<Checkpoint> chosen;
  if (leader_) {
    LatestCheckpoint latest = find_latest(checkpoint_dir_);
    for (const RefusedCheckpoint& r : latest.refused)
      progress_->message(fmt::format("refused checkpoint {}", r.message()));
    chosen = std::move(latest.checkpoint);
  }
  if (world_) chosen = share_checkpoint(*world_, std::move(chosen));
  if (!chosen) {
    progress_->message(fmt::format("no valid checkpoint in {}: starting from step 0", checkpoint_dir_));
    return;
  }
  const Checkpoint& c = *chosen;
  auto refuse = [&](const std::string& why) { return TrainError(fmt::format("cannot resume from {}: {}", c.path, why)); };
  const nlohmann::json expected = trainer_state();
  for (const char* key : {"precision", "half_intermediates", "total_steps", "batch_size"}) {
    if (!c.state.trainer.is_object() || !c.state.trainer.contains(key))
      throw refuse(fmt::format("its state has no trainer.{}", key));
    if (c.state.trainer[key] != expected[key])
      throw refuse(fmt::format("it was written with {} = {}, this run has {} (a resume must repeat the run)", key,
                               c.state.trainer[key].dump(), expected[key].dump()));
  }
  // Checkpoints written before --product-step existed stepped separately.
  const nlohmann::json step = c.state.trainer.value("product_step", nlohmann::json("separate"));
  if (step != expected["product_step"])
    throw refuse(fmt::format("it was written with product_step = {}, this run has {} (a resume must repeat the run)",
                             step.dump(), expected["product_step"].dump()));
  const nlohmann::json shuffle = loader_->options().shuffle_seed ? nlohmann::json(*loader_->options().shuffle_seed)
                                                                 : nlohmann::json(nullptr);
  if (!c.state.random.is_object() || c.state.random.value("shuffle_seed", nlohmann::json()) != shuffle)
    throw refuse("its data order (shuffle seed) differs from this run's");
  // The objective's keys: step n draws from step_key(seed, n), so the resumed
  // steps draw what the uninterrupted run would have drawn only under its seed.
  if (keyed_) {
    const nlohmann::json seed = c.state.random.value("key_seed", nlohmann::json());
    if (!seed.is_number_unsigned() || seed.get<uint64_t>() != options_.seed)
      throw refuse(fmt::format("its steps drew their keys from --seed {}, this run's is {} (pass --seed {} to resume it)",
                               seed.is_null() ? std::string("(none recorded)") : seed.dump(), options_.seed,
                               seed.is_null() ? std::string("…") : seed.dump()));
  }

  // The parameters: the same paths and shapes as the model's.
  ParamMap restored;
  for (const auto& [name, t] : c.params) restored[name] = t;
  for (const auto& [path, t] : params_) {
    auto it = restored.find(path);
    if (it == restored.end()) throw refuse(fmt::format("parameter `{}` is missing", path));
    if (it->second.kind != t.kind || it->second.shape != t.shape)
      throw refuse(fmt::format("parameter `{}` has shape {}, the model's is {}", path,
                               runtime::shape_string(it->second.shape), runtime::shape_string(t.shape)));
  }
  if (restored.size() != params_.size())
    for (const auto& [path, t] : restored)
      if (!params_.count(path)) throw refuse(fmt::format("parameter `{}` is not the model's", path));
  // Every step takes one batch, so the step alone says where the data is.
  const int64_t per_epoch = loader_->steps_per_epoch();
  const DataPosition expected_position{c.state.step / per_epoch, c.state.step % per_epoch,
                                       c.state.step * run_->batch_size};
  if (c.state.data != expected_position)
    throw refuse(fmt::format("its data_position (epoch {}, batch {}, {} samples) is not where step {} leaves the data "
                             "(epoch {}, batch {}, {} samples)",
                             c.state.data.epoch, c.state.data.batch, c.state.data.samples, c.state.step,
                             expected_position.epoch, expected_position.batch, expected_position.samples));
  try {
    optimizer_->restore(c.optimizer, c.state.trainer.value("optimizer", nlohmann::json()));
    // Updates are skipped only under f16 loss scaling; otherwise every step made one.
    const int64_t updates = optimizer_->steps_taken();
    if (updates != c.state.schedule_step)
      throw refuse(fmt::format("its trainer.optimizer.step {} is not its schedule_step {}", updates,
                               c.state.schedule_step));
    if (scaler_ ? updates > c.state.step : updates != c.state.step)
      throw refuse(fmt::format("its trainer.optimizer.step {} does not fit step {}{}", updates, c.state.step,
                               scaler_ ? "" : " (every step of this run updates)"));
    if (scaler_) scaler_->restore(c.state.loss_scale);
    loader_->seek(c.state.data);
  } catch (const OptimizerError& e) {
    throw refuse(e.what());
  } catch (const LossScaleError& e) {
    throw refuse(e.what());
  } catch (const DataError& e) {
    throw refuse(e.what());
  }
  // Another shard count sums other shards: the run goes on, but its bits
  // from here are not the uninterrupted run's.
  const int64_t before = c.state.trainer.value("shards", int64_t{1});
  if (before != shards_)
    progress_->message(fmt::format("note: {} was written by a run of {} shard{}, this one has {}: the steps from here "
                                   "differ in their bits from those of the run never stopped (resume with {} for "
                                   "its bits)",
                                   c.path, before, before == 1 ? "" : "s", shards_,
                                   before == 1 ? std::string("one process and no --shards")
                                               : fmt::format("{} shards or ranks", before)));
  params_ = std::move(restored);
  hold_narrow_params();
  retention_.trust(c.path);
  step_ = c.state.step;
  last_checkpoint_step_ = step_;
  outcome_.checkpoint = c.path;
  progress_->message(fmt::format("resumed from {} (step {}, epoch {})", c.path, c.state.step, c.state.epoch));
}

std::string Trainer::explain_nonfinite(const std::vector<std::vector<Value>>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const int s = first_shard_ + static_cast<int>(i);
    StepProgram& program = *steps_.at(shard_rows_[static_cast<size_t>(s)].rows());
    const std::optional<interp::NonFiniteSite> site = program.first_nonfinite(args[i]);
    if (!site) continue;
    const std::string shard = shards_ == 1 ? std::string() : fmt::format(" of shard {} (rows {} to {})", s,
                                                                         shard_rows_[static_cast<size_t>(s)].begin,
                                                                         shard_rows_[static_cast<size_t>(s)].end - 1);
    return source_note(prog_, site->loc,
                       fmt::format("the first value{} that was not finite, in evaluation order: `{}` ({}) = {}", shard,
                                   site->site, site->op, number(site->value)));
  }
  return fmt::format("no stored value{} was found not finite when the step was evaluated again\n",
                     world_ ? fmt::format(" of rank {}'s shard", world_->rank()) : std::string());
}

void Trainer::agree_with_ranks() {
  RunDescription what;
  what.data_path = data_path_;
  if (run_->evaluate >= 0) what.held_out_path = training_file(prog_, run_->evaluate_path);
  what.dims = dims_;
  what.run_dir = run_dir_;
  try {
    distributed::agree(*world_, describe_run(prog_, options_, what));
  } catch (const distributed::HandshakeError& e) {
    throw TrainError(e.what());
  }
}

void Trainer::step() {
  const DataPosition at = loader_->position();
  const std::vector<RowRange> mine(shard_rows_.begin() + first_shard_,
                                   shard_rows_.begin() + first_shard_ + local_shards_);
  std::optional<std::vector<std::vector<runtime::Tensor>>> parts = loader_->next_rows(mine);
  if (!parts) throw std::logic_error("internal: the loader ran out before the run's last step");
  const double seed = scaler_ ? scaler_->scale() : 1.0;
  auto params = std::make_shared<const ParamMap>(params_);
  std::vector<std::vector<Value>> args(static_cast<size_t>(local_shards_));
  double loss = 0;
  ParamMap grads;
  std::vector<distributed::ReductionBuffer> terms;
  if (guard_) guard_->reset();
  for (int i = 0; i < local_shards_; ++i) {
    const int s = first_shard_ + i;
    const RowRange rows = shard_rows_[static_cast<size_t>(s)];
    std::vector<Value>& a = args[static_cast<size_t>(i)];
    a = {Value::of_params(params), batch_value(std::move((*parts)[static_cast<size_t>(i)]))};
    if (keyed_) a.push_back(Value::of_key(shard_key(options_.seed, step_, s, shards_)));
    a.push_back(Value::of(runtime::Tensor::scalar(seed)));
    StepProgram& program = *steps_.at(rows.rows());
    const Value result = program.call(a);
    outcome_.per_step = program.stats();
    const double shard_loss = result.elements.at(0).tensor.reals.at(0);
    if (shards_ == 1) {
      loss = shard_loss;
      grads = *result.elements.at(1).params;
      continue;
    }
    if (grads.empty()) grads = *result.elements.at(1).params;  // the layout of the sum's gradient
    const double weight = static_cast<double>(rows.rows()) / static_cast<double>(run_->batch_size);
    terms.push_back(shard_term(*result.elements.at(1).params, shard_loss, weight, master_));
  }
  if (shards_ > 1) {
    const auto started = std::chrono::steady_clock::now();
    if (world_) distributed::sum_across_ranks(*world_, terms.front());
    else distributed::sum_in_process(terms);
    outcome_.reduction_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    outcome_.reduction_bytes = static_cast<int64_t>(terms.front().bytes());
    loss = summed_loss(terms.front());
    grads = summed_gradient(terms.front(), grads, master_);
    terms.clear();
  }

  StepRecord record;
  record.step = step_ + 1;
  if (guard_) {
    record.envelope_exceeded = guard_->count();
    if (guard_->first() && !guard_warned_) {
      guard_warned_ = true;
      Diagnostic d;
      d.severity = Severity::Warning;
      d.code = "W0801";
      d.range = guard_->first()->loc;
      d.message = fmt::format("step {}: {} ({} values left their ranges in this step; each step's count is "
                              "`envelope_exceeded` in the metrics)",
                              record.step, interp::exceeded_message(*guard_->first()), guard_->count());
      std::cerr << render_diagnostic(prog_.sources, d);
    }
  }
  record.total_steps = loader_->total_steps();
  record.epoch = at.epoch;
  record.epochs = loader_->options().epochs;
  record.loss = loss;
  record.lr = optimizer_->config().schedule.lr_at(optimizer_->steps_taken(), optimizer_->config().lr,
                                                  loader_->total_steps());
  // Under loss scaling, unscale() below checks the gradients itself.
  if (!std::isfinite(loss) || (!scaler_ && !all_finite(grads))) {
    record.grad_norm = joint_norm(grads);
    if (metrics_) metrics_->append(record);
    progress_->finish();
    const std::string what = !std::isfinite(loss) ? fmt::format("the loss is {}", number(loss))
                                                  : fmt::format("the gradient is not finite (norm {})", number(record.grad_norm));
    const std::string note = explain_nonfinite(args);
    finish(/*failed=*/true);
    throw TrainError(fmt::format("step {} (epoch {}): {}; training stopped before updating the parameters{}\n{}",
                                 record.step, at.epoch, what,
                                 last_checkpoint_step_ >= 0 ? fmt::format(" (the last checkpoint is step {})",
                                                                          last_checkpoint_step_)
                                                            : "",
                                 note));
  }
  bool take = true;
  if (scaler_) {
    record.loss_scale = scaler_->scale();
    take = scaler_->unscale(grads);
    if (!take) {
      record.grad_norm = joint_norm(grads);
      scaler_->update(true);
      record.skipped = true;
      ++outcome_.skipped;
      std::string note = explain_nonfinite(args);
      if (!note.empty() && note.back() == '\n') note.pop_back();
      progress_->message(fmt::format("step {}: gradients not finite at loss scale {}: update skipped, scale now {}\n{}",
                                     record.step, *record.loss_scale, scaler_->scale(), note));
    }
  }
  if (take) {
    // The arguments' copy of the parameters shares their elements: dropped
    // first, so that the update writes them in place instead of copying
    // every parameter (copy on write).
    args.clear();
    params.reset();
    const StepReport report = optimizer_->step(params_, grads, master_, loader_->total_steps());
    record.lr = report.lr;
    record.grad_norm = report.grad_norm;
    record.clipped = report.clipped;
    if (scaler_) scaler_->update(false);
  }
  ++step_;
  outcome_.last_loss = loss;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  record.elapsed_s = elapsed;
  pace_.step_done(elapsed);
  record.samples_per_s = pace_.samples_per_s(run_->batch_size);
  record.eta_s = pace_.seconds_left(target_ - step_);
  if (held_out_ && (step_ % run_->evaluate_every == 0 || step_ == loader_->total_steps() || step_ == target_)) {
    record.held_out_loss = held_out_loss();
    progress_->message(fmt::format("step {}: held-out loss {} ({} on {} held-out samples)", step_,
                                   number(*record.held_out_loss), prog_.functions[run_->evaluate].name,
                                   held_out_->samples()));
  }
  if (metrics_) metrics_->append(record);
  progress_->step(record);
  if (leader_ && checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0) write_checkpoint_now();
}

Value Trainer::batch_value(std::vector<runtime::Tensor> batch) const {
  if (!data_->spec().tuple) return Value::of(std::move(batch.front()));
  std::vector<Value> elements;
  for (runtime::Tensor& t : batch) elements.push_back(Value::of(std::move(t)));
  return Value::of_tuple(std::move(elements));
}

double Trainer::held_out_loss() {
  LoaderOptions order;
  order.batch_size = run_->batch_size;
  Loader batches(*held_out_, order);
  const auto params = std::make_shared<const ParamMap>(params_);
  double sum = 0;
  int64_t count = 0;
  while (std::optional<std::vector<runtime::Tensor>> batch = batches.next()) {
    std::vector<Value> args{Value::of_params(params), batch_value(std::move(*batch))};
    if (keyed_)
      args.push_back(Value::of_key(runtime::derive_key(runtime::key_from_seed(options_.seed),
                                                       fmt::format("train:held-out:{}:{}", step_, count))));
    const Value loss = held_out_executor_ ? held_out_executor_->call(args)
                                          : held_out_interp_->call(run_->evaluate, args);
    sum += loss.tensor.reals.at(0);
    ++count;
  }
  return sum / static_cast<double>(count);
}

void Trainer::write_checkpoint_now() {
  CheckpointState state;
  state.step = step_;
  state.data = loader_->position();
  state.epoch = state.data.epoch;
  state.schedule_step = optimizer_->steps_taken();
  state.loss_scale = scaler_ ? scaler_->state_json() : nlohmann::json(nullptr);
  state.random = {{"shuffle_seed", loader_->options().shuffle_seed ? nlohmann::json(*loader_->options().shuffle_seed)
                                                                    : nlohmann::json(nullptr)}};
  if (keyed_) state.random["key_seed"] = options_.seed;
  state.trainer = trainer_state();
  io::NamedTensors params(params_.begin(), params_.end());
  const io::StoreTypes optimizer_types = io::store_type_of(master_);
  outcome_.checkpoint = write_checkpoint(checkpoint_dir_, state, params, param_types_, optimizer_->state_tensors(),
                                         optimizer_types, retention_);
  last_checkpoint_step_ = step_;
  progress_->message(fmt::format("checkpoint {}", outcome_.checkpoint));
}

void Trainer::finish(bool failed) {
  progress_->finish();
  outcome_.steps_done = step_;
  if (!leader_) return;  // rank 0 writes the run's files
  // A run that stops (at its end or at --max-steps) leaves a checkpoint of where it stopped.
  if (!failed && !checkpoint_dir_.empty() && last_checkpoint_step_ != step_) write_checkpoint_now();
  const std::string metrics_path = metrics_->path();
  std::vector<CurvePoint> points;
  for (const StepRecord& r : read_metrics(metrics_path)) points.push_back({r.step, r.loss, r.skipped, r.held_out_loss});
  const std::string curve = (fs::path(run_dir_) / "loss.svg").string();
  write_loss_curve(curve, points,
                   fmt::format("{}: loss per step ({})", prog_.files[prog_.main_file].path, policy_label_));
  if (!options_.params_out.empty())
    interp::save_params(options_.params_out, prog_, prog_.functions[objective_].args[0].type.params, params_,
                        param_types_);
  if (!failed) {
    progress_->message(fmt::format("stopped at step {} of {}{}, last loss {}: metrics {}, loss curve {}", step_,
                                   loader_->total_steps(), step_ >= loader_->total_steps() ? " (done)" : "",
                                   number(outcome_.last_loss), metrics_path, curve));
    if (step_ > outcome_.start_step)
      progress_->message(fmt::format(
          "{} (remat {}): {} instructions evaluated, {} forward values reused, {} callee forwards evaluated "
          "again, {} bytes written at their sites, at most {} kept for the reverse sweep",
          shards_ == 1 ? "one step" : "one shard of a step", interp::remat_name(options_.remat), outcome_.per_step.evaluated, outcome_.per_step.reused,
          outcome_.per_step.forwards_repeated, outcome_.per_step.written_bytes, outcome_.per_step.stored_bytes_peak));
    if (shards_ > 1 && step_ > outcome_.start_step)
      progress_->message(fmt::format(
          "the shards' sum{}: {} bytes a shard a step, {:.1f} µs a step on average{}", shards_text(),
          outcome_.reduction_bytes,
          1e6 * outcome_.reduction_seconds / static_cast<double>(step_ - outcome_.start_step),
          world_ ? " on rank 0 (messages, waiting for the slowest rank included)" : " (additions in this process)"));
  }
}

}  // namespace

runtime::Key step_key(uint64_t seed, int64_t step) {
  return runtime::derive_key(runtime::key_from_seed(seed), fmt::format("train:step:{}", step));
}

TrainOutcome train(elab::Program& prog, const TrainOptions& options, std::ostream& out, bool tty) {
  Trainer trainer(prog, options, out, tty);
  return trainer.run();
}

}  // namespace quire::train
