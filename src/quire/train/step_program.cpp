#include "quire/train/step_program.h"

#include "quire/native/native_runner.h"

namespace quire::train {

StepProgram::StepProgram(elab::Program& prog, int vjp, std::map<std::string, int64_t> dims,
                         const StepSettings& settings)
    : vjp_(vjp), dims_(std::move(dims)) {
  runner_ = native::make_runner(settings.backend, settings.threads);
  if (runner_) {
    // The step compiled once, here: every kernel lowered, planned and given
    // to the runner (compiled, for native) before the first step; every step
    // is then the executor running its host program, Core not walked.
    compile::CompileRequest request;
    request.entry = vjp_;
    request.dims = dims_;
    request.realize = settings.realize;
    request.remat = settings.remat;
    request.profile = settings.profile;
    request.threads = settings.threads;
    request.library_kernels = settings.backend == kernel::Backend::Native && settings.library_kernels;
    compiled_ = std::make_unique<compile::CompiledProgram>(compile::compile(prog, request));
    engine_ = std::make_unique<kernel::KernelEngine>(compiled_->catalog, *runner_, native::warn_native_unavailable);
    executor_ = std::make_unique<compile::Executor>(prog, *compiled_, *engine_);
    realization_ = compiled_->realization.get();
  } else {
    reference_realization_ =
        std::make_unique<precision::Realization>(precision::realize(prog, vjp_, settings.realize, dims_));
    realization_ = reference_realization_.get();
  }
  interp_ = std::make_unique<interp::Interpreter>(prog, dims_, realization_);
  interp_->set_remat(settings.remat);
  if (settings.guard) {
    if (executor_) executor_->set_guard(settings.guard);
    interp_->set_guard(settings.guard);
  }
  // A failed step is walked again by the reference interpreter on the
  // engine, each launch alone, so that every value exists to be checked.
  if (engine_) interp_->set_launcher(engine_.get());
}

interp::Value StepProgram::call(const std::vector<interp::Value>& args) {
  interp::Value result;
  if (executor_) {
    executor_->reset_stats();
    result = executor_->call(args);
    stats_ = executor_->stats();
  } else {
    interp_->reset_stats();
    result = interp_->call(vjp_, args);
    stats_ = interp_->stats();
  }
  return result;
}

std::optional<interp::NonFiniteSite> StepProgram::first_nonfinite(const std::vector<interp::Value>& args) {
  interp_->watch_nonfinite(true);
  interp_->call(vjp_, args);
  std::optional<interp::NonFiniteSite> site = interp_->first_nonfinite();
  interp_->watch_nonfinite(false);
  return site;
}

}  // namespace quire::train
