#include "quire/kernel/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "quire/kernel/kernel_interpreter.h"

namespace quire::kernel {

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "interp") return Backend::Interp;
  if (name == "kernels") return Backend::Kernels;
  if (name == "native") return Backend::Native;
  return std::nullopt;
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Interp: return "interp";
    case Backend::Kernels: return "kernels";
    case Backend::Native: return "native";
  }
  return "?";
}

runtime::Tensor InterpretingRunner::run(int, const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) {
  return run_kernel(k, inputs);
}

KernelEngine::KernelEngine(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                           bool half_intermediates, KernelRunner& runner, std::function<void(const std::string&)> warn)
    : catalog_(std::make_shared<KernelCatalog>(prog, entry, dims, half_intermediates)),
      active_(&runner),
      warn_(std::move(warn)) {}

KernelEngine::KernelEngine(std::shared_ptr<KernelCatalog> catalog, KernelRunner& runner,
                           std::function<void(const std::string&)> warn)
    : catalog_(std::move(catalog)), active_(&runner), warn_(std::move(warn)) {
  std::vector<std::pair<int, const Kernel*>> kernels;
  for (size_t k = 0; k < catalog_->kernels().size(); ++k)
    kernels.emplace_back(static_cast<int>(k), &catalog_->kernels()[k].kernel);
  launches_.resize(kernels.size(), 0);
  try {
    active_->add_all(kernels);
  } catch (const std::exception& e) {
    fell_back_ = e.what();
    if (warn_) warn_(fell_back_);
    active_ = &fallback_;
  }
}

void KernelEngine::add(int id) {
  if (launches_.size() <= static_cast<size_t>(id)) launches_.resize(static_cast<size_t>(id) + 1, 0);
  try {
    active_->add(id, catalog_->kernels()[static_cast<size_t>(id)].kernel);
  } catch (const std::exception& e) {
    if (active_ == &fallback_) throw;
    fell_back_ = e.what();
    if (warn_) warn_(fell_back_);
    active_ = &fallback_;
  }
}

std::optional<interp::Value> KernelEngine::launch(int function, int root, bool fused,
                                                  const std::vector<interp::Value>& env,
                                                  const precision::FunctionRealization* table) {
  bool added = false;
  const LaunchOutcome& o = catalog_->outcome(function, root, fused, env, table, &added);
  if (added) add(o.kernel);
  if (o.kernel < 0) {
    runtime_launches_ += o.steps;
    return std::nullopt;
  }
  std::vector<const runtime::Tensor*> inputs;
  inputs.reserve(o.inputs.size());
  // -1: a packed product's scratch, which the runner fills.
  for (int v : o.inputs) inputs.push_back(v < 0 ? nullptr : &env[static_cast<size_t>(v)].tensor);
  return run(o.kernel, inputs);
}

interp::Value KernelEngine::run(int kernel, const std::vector<const runtime::Tensor*>& inputs) {
  const KernelRecord& rec = catalog_->kernels().at(static_cast<size_t>(kernel));
  interp::Value out = interp::Value::of(active_->run(kernel, rec.kernel, inputs));
  const ElemType t = rec.kernel.buffers.back().type;
  if (is_float(t)) out.type = float_of(t);
  ++launches_[static_cast<size_t>(kernel)];
  ++kernel_launches_;
  return out;
}

}  // namespace quire::kernel
