#pragma once
// The kernel engine: the host side of the kernel backends. The reference
// interpreter walks the program (calls, folds, tuples, parameter trees, the
// realization's tables, stored forwards; interp/launcher.h) and hands every
// launch to the engine, which lowers it once per distinct input geometry
// (kernel/lower.h), keeps one kernel per distinct nest, and runs it: through
// the kernel interpreter (`--backend kernels`), or through a compiled runner
// (native/). A launch without a kernel (data movement, draws, integer
// arithmetic; lower.h says which) is evaluated by the reference kernels, one
// instruction at a time, and counted as such.
//
// What the engine records over its runs (each kernel, the sites that launch
// it and how often; the host's steps per realized function) is what
// `quire dump --stage kernel` prints.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "quire/elab/program.h"
#include "quire/interp/launcher.h"
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
};

/// The kernel interpreter as a runner.
class InterpretingRunner : public KernelRunner {
 public:
  runtime::Tensor run(int kernel_id, const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) override;
};

struct KernelRecord {
  Kernel kernel;                   ///< with its layout applied, when the engine plans
  std::string text;                ///< print_kernel(kernel)
  std::optional<KernelPlan> plan;  ///< its layout plan, when the engine plans
  int64_t launches = 0;            ///< runs so far
  std::vector<std::string> sites;  ///< the sites whose launch it is (`Linear.apply/%3+%5`), in first-run order
};

class KernelEngine : public interp::Launcher {
 public:
  /// `runner` (kept by reference) runs the kernels. `dims` are the run's.
  /// When the runner cannot take a kernel (`add` throws: no C compiler, a
  /// failed compile, an unwritable cache), `warn` receives the reason once
  /// and every kernel from then on runs in the kernel interpreter: the same
  /// bits, more slowly.
  KernelEngine(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
               bool half_intermediates, KernelRunner& runner,
               std::function<void(const std::string&)> warn = nullptr);

  /// Plans every new kernel under `profile` (kept by reference) for at most
  /// `threads` threads and runs it at the layout taken (layout.h); without
  /// this, kernels keep the default layout (scalar, not split).
  void set_plan(const machine::Profile& profile, int threads) {
    profile_ = &profile;
    threads_ = threads;
  }

  const interp::LaunchGroups& groups(int function, bool fused, const precision::FunctionRealization* table) override;
  std::optional<interp::Value> launch(int function, int root, bool fused, const std::vector<interp::Value>& env,
                                      const precision::FunctionRealization* table) override;

  const std::vector<KernelRecord>& kernels() const { return kernels_; }
  /// Launches evaluated by the reference kernels (no kernel), so far.
  int64_t runtime_launches() const { return runtime_launches_; }
  /// Kernel runs so far.
  int64_t kernel_launches() const { return kernel_launches_; }
  /// Why the runner given was abandoned for the kernel interpreter ("" if it was not).
  const std::string& fell_back() const { return fell_back_; }

  /// `quire dump --stage kernel`: every kernel with the sites that launch
  /// it, then the host program of every realized function evaluated.
  std::string print() const;

 private:
  struct Outcome {
    int kernel = -1;  ///< index into kernels_, or -1: no kernel
    std::vector<int> inputs;
    std::string why;  ///< when there is no kernel
    int64_t steps = 0;  ///< instructions the launch computes
  };
  /// One realized function as the host ran it: per root, the kernels it launched or why none.
  struct HostFunction {
    int function = -1;
    std::string signature;
    std::map<int, std::vector<int>> kernels_at;  ///< root → kernel ids, in first-run order
    std::map<int, std::string> runtime_at;       ///< root → why no kernel
  };

  const FunctionFusion& fusion_of(int function);
  HostFunction& host_of(int function, const precision::FunctionRealization* table);
  FusionGroup group_for(int function, int root, bool fused);
  std::string site_text(int function, const FusionGroup& g) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  bool half_intermediates_;
  const machine::Profile* profile_ = nullptr;
  int threads_ = 1;
  InterpretingRunner fallback_;
  KernelRunner* active_;  ///< the runner given, or fallback_ once that failed
  std::function<void(const std::string&)> warn_;
  std::string fell_back_;
  Fusion fusion_;
  std::map<std::pair<int, bool>, interp::LaunchGroups> groups_;
  /// By launch key: function, root, fused, table, and each input's kind,
  /// type and shape (numbers, so that finding a launch's kernel formats nothing).
  std::map<std::vector<int64_t>, Outcome> outcomes_;
  std::map<std::string, int> kernel_by_text_;
  std::vector<KernelRecord> kernels_;
  std::map<std::pair<int, std::string>, HostFunction> hosts_;  ///< by (function, signature)
  std::set<std::pair<int, const precision::FunctionRealization*>> seen_;  ///< evaluations host_of has listed
  int64_t runtime_launches_ = 0;
  int64_t kernel_launches_ = 0;
};

}  // namespace quire::kernel
