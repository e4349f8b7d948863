#include "quire/native/native_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "quire/kernel/kernel_interpreter.h"
#include "quire/native/c_emit.h"
#include "quire/runtime/gemm.h"
#include "quire/runtime/workers.h"
#include "quire/runtime/runtime_error.h"

namespace quire::native {


NativeRunner::NativeRunner(CompilerSettings settings) : compiler_(std::move(settings)) {}

void NativeRunner::add(int kernel_id, const kernel::Kernel& k) { add_emitted(kernel_id, k, emit_c(k)); }

void NativeRunner::add_emitted(int kernel_id, const kernel::Kernel& k, const std::string& source) {
  void* address = compiler_.load(source, kKernelSymbol);
  functions_[kernel_id] = reinterpret_cast<KernelFunction>(address);
  as_is_[kernel_id] = kernel::stores_product_as_is(k);
}

void NativeRunner::add_all(const std::vector<std::pair<int, const kernel::Kernel*>>& kernels) {
  std::vector<std::string> sources;
  sources.reserve(kernels.size());
  for (const auto& [id, k] : kernels) sources.push_back(emit_c(*k));
  compiler_.prepare_batched(sources, kKernelSymbol, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (size_t i = 0; i < kernels.size(); ++i) add_emitted(kernels[i].first, *kernels[i].second, sources[i]);
}

runtime::Tensor NativeRunner::run(int kernel_id, const kernel::Kernel& k,
                                  const std::vector<const runtime::Tensor*>& given) {
  kernel::check_inputs(k, given);
  // A packed product on sgemm, whose contract is the chain PackedProduct
  // states on any path and thread count, over the layout's threads.
  const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(k.split, threads_)));
  runtime::Tensor scratch;
  const std::vector<const runtime::Tensor*> inputs = kernel::with_packed_product(
      k, given,
      [&](int64_t m, int64_t n, int64_t kk, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
          int64_t b_cs, float* c) { sgemm(m, n, kk, a, a_rs, a_cs, b, b_rs, b_cs, c, n, false, threads); },
      scratch);
  if (inputs != given) ++packed_products_;
  if (!functions_.count(kernel_id)) add(kernel_id, k);
  // A nest that only copies the product out: the product is the output.
  if (inputs != given && as_is_.at(kernel_id)) {
    ++products_as_is_;
    return scratch;
  }
  // The narrow float buffers as f32 (c_emit.h), the others as f64 or int64.
  runtime::Tensor out = kernel::output_for(k, /*narrow=*/true);
  std::vector<const void*> data;
  data.reserve(inputs.size());
  for (size_t b = 0; b < inputs.size(); ++b) {
    const runtime::Tensor& t = *inputs[b];
    if (!t.is_real())
      data.push_back(t.ints.data());
    else if (kernel::held_as_f32(k.buffers[b].type))
      data.push_back(t.reals.narrow());
    else
      data.push_back(t.reals.data());
  }
  void* output = !out.is_real()                               ? static_cast<void*>(out.ints.data())
                 : kernel::held_as_f32(k.buffers.back().type) ? static_cast<void*>(out.reals.narrow_for_writing())
                                                              : static_cast<void*>(out.reals.data());
  const KernelFunction f = functions_.at(kernel_id);
  const kernel::Stmt* split = kernel::split_loop(k);
  if (!split) {
    f(data.data(), output, 0, 0);
    return out;
  }
  // The layout's split (layout.h), never more threads than the run allows.
  const int64_t extent = split->extent;
  const int64_t parts = std::min<int64_t>({extent, k.split, threads_});
  if (parts < 2) {
    f(data.data(), output, 0, extent);
    return out;
  }
  ++split_launches_;
  WorkerPool::shared().parallel_for(parts, static_cast<int>(parts), [&](int64_t part, int) {
    f(data.data(), output, part * extent / parts, (part + 1) * extent / parts);
  });
  return out;
}

std::unique_ptr<kernel::KernelRunner> make_runner(kernel::Backend backend, int threads) {
  switch (backend) {
    case kernel::Backend::Interp: return nullptr;
    case kernel::Backend::Kernels: return std::make_unique<kernel::InterpretingRunner>();
    case kernel::Backend::Native: {
      auto runner = std::make_unique<NativeRunner>();
      runner->set_threads(threads);
      return runner;
    }
  }
  return nullptr;
}

void warn_native_unavailable(const std::string& why) {
  std::cerr << fmt::format(
      "quire: warning: the native backend is unavailable, so the kernels run in the kernel interpreter "
      "(the same bits, slower): {}\n",
      why);
}

}  // namespace quire::native
