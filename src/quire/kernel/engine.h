#pragma once
// The kernel engine: runs the kernels of the kernel backends. A compiled
// program's executor (compile/executor.h) asks it to run each kernel step's
// kernel (`run`); the reference interpreter can also drive it, walking the
// program (calls, folds, tuples, parameter trees, the realization's tables,
// stored forwards; interp/launcher.h) and handing every launch to it, and
// the engine finds the launch's kernel in the catalog (catalog.h: lowered
// once per distinct input geometry, by the compile step ahead of the run or
// when first met). Either way it runs the kernel: through
// the kernel interpreter (`--backend kernels`), or through a compiled runner
// (native/). A launch without a kernel (data movement, draws, integer
// arithmetic; lower.h says which) is evaluated by the reference kernels, one
// instruction at a time, and counted as such.
//
// What the engine counts over its runs (each kernel's launches) is what
// `print` adds to the catalog's listing.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/launcher.h"
#include "quire/kernel/catalog.h"
#include "quire/kernel/fusion.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/kernel/layout.h"

namespace quire::kernel {

/// How `run` and `train` compute launches: the reference interpreter one
/// instruction at a time, or the engine's kernels, run by the kernel
/// interpreter or compiled (native/native_runner.h). The same bits.
enum class Backend : uint8_t { Interp, Kernels, Native };
std::optional<Backend> parse_backend(std::string_view name);  ///< "interp", "kernels", "native"
const char* backend_name(Backend b);

/// Runs a kernel on its inputs: the kernel interpreter, or compiled code.
class KernelRunner {
 public:
  virtual ~KernelRunner() = default;
  virtual runtime::Tensor run(int kernel_id, const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) = 0;
  /// Called once per new kernel, before its first run.
  virtual void add(int kernel_id, const Kernel& k) {
    (void)kernel_id;
    (void)k;
  }
  /// Called once with every kernel of a compiled catalog, before any run, in
  /// place of add() for each: a runner may prepare them together (the native
  /// runner compiles them side by side). By default, add() for each in turn.
  virtual void add_all(const std::vector<std::pair<int, const Kernel*>>& kernels) {
    for (const auto& [id, k] : kernels) add(id, *k);
  }
};

/// The kernel interpreter as a runner.
class InterpretingRunner : public KernelRunner {
 public:
  runtime::Tensor run(int kernel_id, const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) override;
};

class KernelEngine : public interp::Launcher {
 public:
  /// `runner` (kept by reference) runs the kernels. `dims` are the run's.
  /// When the runner cannot take a kernel (`add` throws: no C compiler, a
  /// failed compile, an unwritable cache), `warn` receives the reason once
  /// and every kernel from then on runs in the kernel interpreter: the same
  /// bits, more slowly. The engine lowers launches as it meets them.
  KernelEngine(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
               bool half_intermediates, KernelRunner& runner,
               std::function<void(const std::string&)> warn = nullptr);
  /// Runs the kernels of a catalog the compile step filled (compile/compile.h):
  /// each is given to the runner now, before the first launch, and a launch
  /// only looks its kernel up.
  KernelEngine(std::shared_ptr<KernelCatalog> catalog, KernelRunner& runner,
               std::function<void(const std::string&)> warn = nullptr);

  /// Plans every new kernel under `profile` for at most `threads` threads
  /// and runs it at the layout taken (layout.h); without this, kernels keep
  /// the default layout (scalar, not split).
  void set_plan(const machine::Profile& profile, int threads) { catalog_->set_plan(profile, threads); }

  const interp::LaunchGroups& groups(int function, bool fused, const precision::FunctionRealization* table) override {
    return catalog_->groups(function, fused, table);
  }
  std::optional<interp::Value> launch(int function, int root, bool fused, const std::vector<interp::Value>& env,
                                      const precision::FunctionRealization* table) override;

  /// Runs kernel `kernel` of the catalog on `inputs` (by input buffer;
  /// nullptr: a packed product's scratch) and counts the launch: what a
  /// compiled program's executor asks for (compile/executor.h).
  interp::Value run(int kernel, const std::vector<const runtime::Tensor*>& inputs);
  /// Counts `steps` instructions evaluated by the reference kernels (a launch without a kernel).
  void count_reference(int64_t steps) { runtime_launches_ += steps; }

  const std::vector<KernelRecord>& kernels() const { return catalog_->kernels(); }
  const KernelCatalog& catalog() const { return *catalog_; }
  /// Runs of each kernel so far, by kernel id.
  const std::vector<int64_t>& launches() const { return launches_; }
  /// Launches evaluated by the reference kernels (no kernel), so far.
  int64_t runtime_launches() const { return runtime_launches_; }
  /// Kernel runs so far.
  int64_t kernel_launches() const { return kernel_launches_; }
  /// Why the runner given was abandoned for the kernel interpreter ("" if it was not).
  const std::string& fell_back() const { return fell_back_; }

  /// `quire dump --stage kernel` as this engine ran it: every kernel with
  /// its runs and the sites that launch it, then the host listing.
  std::string print() const { return catalog_->print(launches_, kernel_launches_, runtime_launches_); }

 private:
  /// Gives kernel `id` to the runner, or falls back to the kernel interpreter.
  void add(int id);

  std::shared_ptr<KernelCatalog> catalog_;
  InterpretingRunner fallback_;
  KernelRunner* active_;  ///< the runner given, or fallback_ once that failed
  std::function<void(const std::string&)> warn_;
  std::string fell_back_;
  std::vector<int64_t> launches_;
  int64_t runtime_launches_ = 0;
  int64_t kernel_launches_ = 0;
};

}  // namespace quire::kernel
