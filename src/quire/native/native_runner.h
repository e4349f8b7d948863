#pragma once
// The native backend's kernel runner: each kernel emitted as C (c_emit.h),
// compiled through the object cache (c_compiler.h) when the engine first
// meets it, and then called directly on the tensors' storage. Its outputs
// are the kernel interpreter's, bit for bit (kernel_interpreter.h).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quire/kernel/engine.h"
#include "quire/native/c_compiler.h"

namespace quire::native {

class NativeRunner : public kernel::KernelRunner {
 public:
  /// `settings`: the compiler and cache directory (the environment's by default).
  explicit NativeRunner(CompilerSettings settings = CompilerSettings::from_environment());

  /// Emits and compiles `k` (or finds it in the cache); NativeError on failure.
  void add(int kernel_id, const kernel::Kernel& k) override;
  /// Emits every kernel, compiles those the cache lacks in one batch per
  /// core, side by side (CCompiler::prepare_batched), then adds each.
  void add_all(const std::vector<std::pair<int, const kernel::Kernel*>>& kernels) override;
  /// Runs `k` on its inputs (in buffer order), checked as run_kernel checks
  /// them (KernelMisuse). A kernel not added yet is added first.
  runtime::Tensor run(int kernel_id, const kernel::Kernel& k,
                      const std::vector<const runtime::Tensor*>& inputs) override;

  /// Threads a launch may use (≥ 1; 1 by default): a kernel whose layout
  /// splits its split loop (Kernel::split, layout.h) divides it among the
  /// process's worker pool, over at most this many threads. Any count gives
  /// the same bits.
  void set_threads(int threads) { threads_ = threads < 1 ? 1 : threads; }
  int threads() const { return threads_; }

  int64_t compilations() const { return compiler_.compilations(); }  ///< compiler runs
  int64_t built() const { return compiler_.built(); }  ///< kernels compiled (several to a run in a batch)
  /// Launches whose split loop was divided among several threads.
  int64_t split_launches() const { return split_launches_; }
  int64_t cache_hits() const { return compiler_.cache_hits(); }
  /// Packed products run (sgemm, gemm.h) ahead of their kernels' nests.
  int64_t packed_products() const { return packed_products_; }
  /// Of those, the products whose nest was skipped (kernel::stores_product_as_is).
  int64_t products_as_is() const { return products_as_is_; }

 private:
  using KernelFunction = void (*)(const void* const* inputs, void* output, int64_t lo, int64_t hi);

  void add_emitted(int kernel_id, const kernel::Kernel& k, const std::string& source);

  CCompiler compiler_;
  std::map<int, KernelFunction> functions_;  ///< by kernel id
  std::map<int, bool> as_is_;                ///< by kernel id: kernel::stores_product_as_is, asked when added
  int threads_ = 1;
  int64_t split_launches_ = 0;
  int64_t packed_products_ = 0;
  int64_t products_as_is_ = 0;
};

/// The runner a backend runs kernels with: the kernel interpreter for
/// Kernels, a NativeRunner on `threads` threads for Native; nullptr for
/// Interp (no engine at all).
std::unique_ptr<kernel::KernelRunner> make_runner(kernel::Backend backend, int threads);

/// The warning `run` and `train` print when the native runner gives way to
/// the kernel interpreter (KernelEngine's `warn`).
void warn_native_unavailable(const std::string& why);

}  // namespace quire::native
