#include "quire/native/native_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "quire/kernel/kernel_interpreter.h"
#include "quire/native/c_emit.h"
#include "quire/native/gemm.h"
#include "quire/native/workers.h"
#include "quire/runtime/runtime_error.h"

namespace quire::native {


NativeRunner::NativeRunner(CompilerSettings settings) : compiler_(std::move(settings)) {}

void NativeRunner::add(int kernel_id, const kernel::Kernel& k) {
  void* address = compiler_.load(emit_c(k), kKernelSymbol);
  functions_[kernel_id] = reinterpret_cast<KernelFunction>(address);
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
      [&](int64_t m, int64_t n, int64_t kk, const float* a, const float* b, float* c) {
        sgemm(m, n, kk, a, kk, 1, b, n, 1, c, n, false, threads);
      },
      scratch);
  if (inputs != given) ++packed_products_;
  if (!functions_.count(kernel_id)) add(kernel_id, k);
  runtime::Tensor out = kernel::output_for(k);
  std::vector<const void*> data;
  data.reserve(inputs.size());
  for (const runtime::Tensor* t : inputs)
    data.push_back(t->is_real() ? static_cast<const void*>(t->reals.data()) : static_cast<const void*>(t->ints.data()));
  void* output = out.is_real() ? static_cast<void*>(out.reals.data()) : static_cast<void*>(out.ints.data());
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
