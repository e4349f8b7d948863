#pragma once
// The objective's value and gradient (its vjp), ready to evaluate at one
// batch size: compiled once (every kernel lowered, planned and given to the
// runner) under --backend native or kernels, or walked by the reference
// interpreter under --backend interp. A run of one shard needs one; a run of
// N shards whose batch does not divide evenly needs two (shards.h: the first
// B mod N shards hold one row more), each with the batch dim bound to its
// rows. Every one evaluates the same realization policy; only the shapes differ.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/core/program.h"
#include "quire/interp/envelope_guard.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/engine.h"
#include "quire/machine/profile.h"
#include "quire/realize/realization.h"

namespace quire::train {

/// How every step program of a run is built.
struct StepSettings {
  precision::RealizeOptions realize;
  interp::Remat remat = interp::Remat::Store;
  kernel::Backend backend = kernel::Backend::Interp;
  int threads = 1;
  bool library_kernels = true;  ///< on the native backend (compile::CompileRequest::library_kernels)
  const machine::Profile* profile = nullptr;  ///< the layouts' plan reads it; must outlive the program
  interp::EnvelopeGuard* guard = nullptr;     ///< each step's narrowed values checked against ranges (or none)
};

/// The vjp `vjp` of `prog` at `dims` (the batch dim bound to a shard's rows).
class StepProgram {
 public:
  StepProgram(elab::Program& prog, int vjp, std::map<std::string, int64_t> dims, const StepSettings& settings);

  /// One evaluation: (loss, gradient tree). Resets and then holds stats().
  interp::Value call(const std::vector<interp::Value>& args);
  /// The interpreter's work and memory of the last call.
  const interp::EvalStats& stats() const { return stats_; }
  /// The compiled step under --backend native or kernels; null under interp.
  const compile::CompiledProgram* compiled() const { return compiled_.get(); }
  /// The realization the vjp runs under (the compiled one, or the reference's).
  const precision::Realization& realization() const { return *realization_; }
  /// Evaluates `args` again with every stored value watched: the first site,
  /// in evaluation order, whose value was not finite (none if every one was).
  std::optional<interp::NonFiniteSite> first_nonfinite(const std::vector<interp::Value>& args);

 private:
  int vjp_;
  std::map<std::string, int64_t> dims_;
  std::unique_ptr<kernel::KernelRunner> runner_;  ///< null under --backend interp
  std::unique_ptr<compile::CompiledProgram> compiled_;
  std::unique_ptr<kernel::KernelEngine> engine_;
  std::unique_ptr<compile::Executor> executor_;
  std::unique_ptr<precision::Realization> reference_realization_;  ///< under --backend interp
  const precision::Realization* realization_ = nullptr;
  /// The step under --backend interp, and the walk that names the first non-finite value.
  std::unique_ptr<interp::Interpreter> interp_;
  interp::EvalStats stats_;
};

}  // namespace quire::train
