#include "quire/kernel/catalog.h"

#include <fmt/format.h>

#include <algorithm>

#include "quire/core/printer.h"
#include "quire/kernel/lower.h"

namespace quire::kernel {

KernelCatalog::KernelCatalog(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                             bool half_intermediates)
    : prog_(prog), dims_(dims), half_intermediates_(half_intermediates), fusion_(fuse(prog, entry, dims)) {}

const FunctionFusion& KernelCatalog::fusion_of(int function) {
  if (const FunctionFusion* f = fusion_.find(function)) return *f;
  // A function the entry does not reach (a caller evaluating another entry):
  // group it on its own.
  Fusion more = fuse(prog_, function, dims_);
  for (FunctionFusion& f : more.functions)
    if (!fusion_.find(f.function)) fusion_.functions.push_back(std::move(f));
  return *fusion_.find(function);
}

HostListing& KernelCatalog::host_of(int function, const precision::FunctionRealization* table) {
  const std::string signature = table ? table->signature : std::string();
  HostListing& host = hosts_[{function, signature}];
  host.function = function;
  host.signature = signature;
  return host;
}

namespace {

/// By value number: whether the function's result reads it, through any
/// chain of instructions. Every instruction is pure (a draw is a function of
/// its key), so one the result does not read need not run.
std::vector<bool> read_by_result(const core::Function& fn) {
  std::vector<bool> live(static_cast<size_t>(fn.value_count()) + 1, false);
  live.at(static_cast<size_t>(fn.result_value)) = true;
  for (size_t k = fn.body.size(); k-- > 0;) {
    const core::Instr& in = fn.body[k];
    if (!live[static_cast<size_t>(in.id)]) continue;
    for (int a : in.args)
      if (a > 0) live.at(static_cast<size_t>(a)) = true;
  }
  return live;
}

}  // namespace

const interp::LaunchGroups& KernelCatalog::groups(int function, bool fused,
                                                  const precision::FunctionRealization* table) {
  auto key = std::make_pair(function, fused);
  if (seen_.insert({function, table}).second)
    host_of(function, table);  // listed by print() even when it launches nothing
  if (auto it = groups_.find(key); it != groups_.end()) return it->second;
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
  const FunctionFusion& ff = fusion_of(function);
  interp::LaunchGroups g;
  const size_t n = static_cast<size_t>(fn.value_count()) + 1;
  g.computed_by.assign(n, 0);
  g.steps.assign(n, {});
  if (fused) {
    for (const FusionGroup& group : ff.groups) {
      g.steps[static_cast<size_t>(group.root())] = group.steps;
      for (int m : group.steps)
        if (m != group.root()) g.computed_by[static_cast<size_t>(m)] = group.root();
    }
    for (const StoredValue& s : ff.stored)
      if (s.group < 0) g.steps[static_cast<size_t>(s.value)] = {s.value};
    // A vjp's reverse sweep also computes the cotangents of values no
    // result needs (of a constant, of `real p`): the precision stages read
    // them (precision/sensitivity.h), a run need not. An instruction the
    // result does not read is skipped (computed_by −1), unless its fusion
    // group holds one that the result reads.
    if (fn.primal >= 0) {
      const std::vector<bool> live = read_by_result(fn);
      for (const core::Instr& in : fn.body) {
        const size_t id = static_cast<size_t>(in.id);
        if (live[id] || g.computed_by[id] != 0) continue;
        bool needed = false;
        for (int m : g.steps[id]) needed = needed || live[static_cast<size_t>(m)];
        if (needed) continue;
        for (int m : g.steps[id]) g.computed_by[static_cast<size_t>(m)] = -1;
        g.steps[id].clear();
        g.computed_by[id] = -1;
      }
    }
  } else {
    for (const core::Instr& in : fn.body)
      if (launch_kind(in) != LaunchKind::None) g.steps[static_cast<size_t>(in.id)] = {in.id};
  }
  return groups_.emplace(key, std::move(g)).first->second;
}

FusionGroup KernelCatalog::group_for(int function, int root, bool fused) {
  const FunctionFusion& ff = fusion_of(function);
  if (fused) {
    const int index = ff.group_of.at(static_cast<size_t>(root));
    if (index >= 0) return ff.groups.at(static_cast<size_t>(index));
  }
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
  FusionGroup g;
  g.steps = {root};
  const core::Instr& in = fn.body.at(static_cast<size_t>(root - static_cast<int>(fn.args.size()) - 1));
  for (int a : in.args)
    if (std::find(g.inputs.begin(), g.inputs.end(), a) == g.inputs.end()) g.inputs.push_back(a);
  return g;
}

std::string KernelCatalog::site_text(int function, const FusionGroup& g) const {
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
  std::string text = core::site_name(fn, g.steps.front());
  for (size_t k = 1; k < g.steps.size(); ++k) text += fmt::format("+%{}", g.steps[k]);
  return text;
}

const LaunchOutcome& KernelCatalog::outcome(int function, int root, bool fused, const std::vector<interp::Value>& env,
                                            const precision::FunctionRealization* table, bool* added_kernel) {
  if (added_kernel) *added_kernel = false;
  // One lowering per launch and input geometry: the nest depends on nothing else.
  const FunctionFusion& ff = fusion_of(function);
  const int index = fused ? ff.group_of.at(static_cast<size_t>(root)) : -1;
  const std::vector<int>* reads = index >= 0 ? &ff.groups[static_cast<size_t>(index)].inputs : nullptr;
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
  const core::Instr& in = fn.body.at(static_cast<size_t>(root - static_cast<int>(fn.args.size()) - 1));
  if (!reads) reads = &in.args;
  std::vector<int64_t> key = {function, root, fused ? 1 : 0, static_cast<int64_t>(reinterpret_cast<intptr_t>(table))};
  for (int v : *reads) {
    const interp::Value& x = env.at(static_cast<size_t>(v));
    key.push_back(static_cast<int64_t>(x.kind));
    if (x.kind != interp::Value::Kind::Tensor) continue;
    key.push_back(static_cast<int64_t>(x.tensor.kind));
    key.push_back(static_cast<int64_t>(x.type));
    key.push_back(static_cast<int64_t>(x.tensor.shape.size()));
    key.insert(key.end(), x.tensor.shape.begin(), x.tensor.shape.end());
  }
  if (auto it = outcomes_.find(key); it != outcomes_.end()) return it->second;
  const FusionGroup g = group_for(function, root, fused);
  LaunchOutcome o;
  o.steps = static_cast<int64_t>(g.steps.size());
  std::variant<LoweredLaunch, std::string> lowered = lower_group(fn, g, table, half_intermediates_, env);
  if (auto* l = std::get_if<LoweredLaunch>(&lowered)) {
    // The nest before its layout names it: the plan is a function of the nest.
    auto [at, added] = kernel_by_text_.emplace(print_kernel(l->kernel), static_cast<int>(kernels_.size()));
    if (added) {
      std::optional<KernelPlan> plan;
      if (profile_) {
        plan = plan_kernel(l->kernel, *profile_, threads_, l->packed ? &l->packed->kernel : nullptr);
        if (plan->chosen().pack) {
          // The packed variant runs in its place: its own nest, its scratch input.
          std::shared_ptr<LoweredLaunch> packed = l->packed;
          *l = std::move(*packed);
        }
        apply_layout(l->kernel, plan->chosen());
      }
      std::string text = print_kernel(l->kernel);
      kernels_.push_back(KernelRecord{std::move(l->kernel), std::move(text), std::move(plan), {}});
      if (added_kernel) *added_kernel = true;
    }
    o.kernel = at->second;
    // The nest a record runs is the plain or the packed one, as its plan chose
    // (a launch that found the record takes the same variant of its own lowering).
    const bool packed = kernels_[static_cast<size_t>(o.kernel)].kernel.product.has_value();
    o.inputs = packed && !added && l->packed ? l->packed->inputs : std::move(l->inputs);
    KernelRecord& rec = kernels_[static_cast<size_t>(o.kernel)];
    std::string site = site_text(function, g);
    if (std::find(rec.sites.begin(), rec.sites.end(), site) == rec.sites.end()) rec.sites.push_back(std::move(site));
  } else {
    o.why = std::get<std::string>(lowered);
  }
  HostListing& host = host_of(function, table);
  if (o.kernel < 0) {
    host.runtime_at.emplace(root, o.why);
  } else {
    std::vector<int>& at = host.kernels_at[root];
    if (std::find(at.begin(), at.end(), o.kernel) == at.end()) at.push_back(o.kernel);
  }
  return outcomes_.emplace(std::move(key), std::move(o)).first->second;
}

std::string KernelCatalog::print(const std::vector<int64_t>& launches, int64_t kernel_launches,
                                 int64_t runtime_launches) const {
  std::string out =
      fmt::format("-- {} kernels, {} launches; {} launches without a kernel ran on the reference kernels\n",
                  kernels_.size(), kernel_launches, runtime_launches);
  for (size_t k = 0; k < kernels_.size(); ++k) {
    const KernelRecord& r = kernels_[k];
    const int64_t n = k < launches.size() ? launches[k] : 0;
    std::string sites;
    for (const std::string& s : r.sites) sites += (sites.empty() ? "" : ", ") + s;
    out += fmt::format("\n// k{}: {} launch{} at {}\n{}", k, n, n == 1 ? "" : "es", sites, r.text);
  }
  out += "\n-- the host: each realized function's launches, calls and folds, in body order\n";
  for (const auto& [key, host] : hosts_) {
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(host.function));
    out += fmt::format("\n{}{}\n", fn.name, host.signature.empty() ? "" : " " + host.signature);
    for (const core::Instr& in : fn.body) {
      const std::string site = core::site_name(fn, in.id);
      if (auto k = host.kernels_at.find(in.id); k != host.kernels_at.end()) {
        std::string ids;
        for (int id : k->second) ids += fmt::format("{}k{}", ids.empty() ? "" : ", ", id);
        out += fmt::format("  {}: {}\n", site, ids);
      } else if (auto r = host.runtime_at.find(in.id); r != host.runtime_at.end()) {
        out += fmt::format("  {}: reference kernels ({})\n", site, r->second);
      } else if (in.op == core::Op::Call || in.op == core::Op::Fold || in.op == core::Op::FoldVjp) {
        out += fmt::format("  {}: {} {}\n", site, core::op_info(in.op).spelling,
                           in.callee >= 0 ? prog_.functions.at(static_cast<size_t>(in.callee)).name : "?");
      }
    }
  }
  return out;
}

}  // namespace quire::kernel
