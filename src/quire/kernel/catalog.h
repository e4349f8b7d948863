#pragma once
// The kernel catalog: every launch of a program lowered once per distinct
// input geometry (kernel/lower.h), one kernel kept per distinct nest,
// planned under a machine profile when one is given (kernel/layout.h).
//
// The compile step (compile/compile.h) fills it ahead of any run, walking
// the host program at the run's shapes; the kernel engine (engine.h) then
// only looks launches up in it. A launch the compile did not foresee (an
// evaluation watched for non-finite values, which runs every launch alone)
// is lowered when first met, as before.
//
// Requires: an elaborated program without errors; the realization tables
// passed to `outcome` outlive the catalog (a launch is keyed by its table).
// Keeps: the kernels in first-lowering order, so that a catalog filled by the
// compile step numbers its kernels as one filled by a run would.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/launcher.h"
#include "quire/kernel/fusion.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/kernel/layout.h"
#include "quire/machine/profile.h"

namespace quire::kernel {

struct KernelRecord {
  Kernel kernel;                   ///< with its layout applied, when the catalog plans
  std::string text;                ///< print_kernel(kernel)
  std::optional<KernelPlan> plan;  ///< its layout plan, when the catalog plans
  std::vector<std::string> sites;  ///< the sites whose launch it is (`Linear.apply/%3+%5`), in first-lowering order
};

/// One launch as lowered: its kernel and the values its buffers read, or why it has none.
struct LaunchOutcome {
  int kernel = -1;          ///< index into kernels(), or -1: no kernel
  std::vector<int> inputs;  ///< by input buffer, the value it reads (-1: a packed product's scratch)
  std::string why;          ///< when there is no kernel
  int64_t steps = 0;        ///< instructions the launch computes
};

/// One realized function as lowered: per root, the kernels it launches or why none.
struct HostListing {
  int function = -1;
  std::string signature;
  std::map<int, std::vector<int>> kernels_at;  ///< root → kernel ids, in first-lowering order
  std::map<int, std::string> runtime_at;       ///< root → why no kernel
};

class KernelCatalog {
 public:
  /// Kernels of what `entry` reaches at the run's `dims`; `half_intermediates` is the realization's.
  KernelCatalog(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                bool half_intermediates);

  /// Plans every new kernel under `profile` (copied) for at most `threads`
  /// threads and keeps it at the layout taken; without this, kernels keep
  /// the default layout (scalar, not split).
  void set_plan(const machine::Profile& profile, int threads) {
    profile_ = profile;
    threads_ = threads;
  }

  /// The groups of `function` under `table`: its fusion groups when
  /// `fused`, else each launch alone (an evaluation whose every value is kept).
  const interp::LaunchGroups& groups(int function, bool fused, const precision::FunctionRealization* table);

  /// The launch of `root` (a group's root when `fused`) with its inputs as
  /// `env` holds them (only their kinds, types and shapes are read), lowered
  /// now if this geometry is new. `added`, when given, is set when a new
  /// kernel joined the catalog.
  const LaunchOutcome& outcome(int function, int root, bool fused, const std::vector<interp::Value>& env,
                               const precision::FunctionRealization* table, bool* added = nullptr);

  const std::vector<KernelRecord>& kernels() const { return kernels_; }
  /// Distinct launches lowered so far (a run on a compiled catalog adds none).
  size_t lowered() const { return outcomes_.size(); }
  /// The realized functions lowered, by (function, signature).
  const std::map<std::pair<int, std::string>, HostListing>& listings() const { return hosts_; }
  const elab::Program& program() const { return prog_; }

  /// `quire dump --stage kernel`: every kernel with its launches per call
  /// (`launches[k]`) and the sites that launch it, then each realized
  /// function's launches, calls and folds in body order.
  std::string print(const std::vector<int64_t>& launches, int64_t kernel_launches, int64_t runtime_launches) const;

 private:
  const FunctionFusion& fusion_of(int function);
  HostListing& host_of(int function, const precision::FunctionRealization* table);
  FusionGroup group_for(int function, int root, bool fused);
  std::string site_text(int function, const FusionGroup& g) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  bool half_intermediates_;
  std::optional<machine::Profile> profile_;
  int threads_ = 1;
  Fusion fusion_;
  std::map<std::pair<int, bool>, interp::LaunchGroups> groups_;
  /// By launch key: function, root, fused, table, and each input's kind,
  /// type and shape (numbers, so that finding a launch's kernel formats nothing).
  std::map<std::vector<int64_t>, LaunchOutcome> outcomes_;
  std::map<std::string, int> kernel_by_text_;
  std::vector<KernelRecord> kernels_;
  std::map<std::pair<int, std::string>, HostListing> hosts_;
  std::set<std::pair<int, const precision::FunctionRealization*>> seen_;  ///< evaluations host_of has listed
};

}  // namespace quire::kernel
