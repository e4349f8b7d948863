// The time one training step's gradient spends outside its kernels, with the
// kernels lowered as the interpreter's walk meets them (as every run did
// before the compile step), taken from the compiled program under that walk,
// and with the compiled program run by the executor (as `quire train` runs
// it now), in one process.
//
//   python3 bench/train_step.py --write-program tower.qr
//   build/bench/bench_host_overhead tower.qr [--dim B=256] [--threads 1,2] [--steps 20] [--fma]
//
// The step is the objective's vjp (forward and reverse sweep; the
// optimizer's update is not in it) on the native backend, f32, `--remat
// store` as `quire train` runs it. "kernels" is the time inside the runner's
// kernel calls; "outside" is the rest of the step: the interpreter's walk,
// the launches' look-ups, host steps (parameter trees, stacking, the
// reference kernels) and allocation. Medians over the steps after two not
// counted.

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/elab/elaborator.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/params.h"
#include "quire/kernel/engine.h"
#include "quire/native/native_runner.h"

namespace {

using namespace quire;

/// A runner that times the kernel calls of the runner it wraps.
class TimingRunner : public kernel::KernelRunner {
 public:
  explicit TimingRunner(kernel::KernelRunner& inner) : inner_(inner) {}
  runtime::Tensor run(int id, const kernel::Kernel& k, const std::vector<const runtime::Tensor*>& inputs) override {
    const auto start = bench::Clock::now();
    runtime::Tensor out = inner_.run(id, k, inputs);
    seconds += bench::seconds_since(start);
    return out;
  }
  void add(int id, const kernel::Kernel& k) override { inner_.add(id, k); }
  double seconds = 0;

 private:
  kernel::KernelRunner& inner_;
};

struct Figures {
  double step = 0, kernels = 0;
};

/// Kernels lowered as the interpreter's walk meets them; taken from the
/// compiled program under that walk; or the compiled program run by the
/// executor, which does not walk Core.
enum class Mode { AsMet, Compiled, Executed };

Figures measure(elab::Program& prog, int vjp, const std::vector<interp::Value>& args,
                const std::map<std::string, int64_t>& dims, const precision::RealizeOptions& options, int threads,
                Mode mode, int steps) {
  std::unique_ptr<kernel::KernelRunner> native = native::make_runner(kernel::Backend::Native, threads);
  TimingRunner runner(*native);
  const machine::Profile profile = machine::shipped_profile();
  compile::CompileRequest request;
  request.entry = vjp;
  request.dims = dims;
  request.realize = options;
  request.remat = interp::Remat::Store;
  request.profile = &profile;
  request.threads = threads;
  compile::CompiledProgram c = compile::compile(prog, request);
  std::unique_ptr<kernel::KernelEngine> engine;
  if (mode != Mode::AsMet) {
    engine = std::make_unique<kernel::KernelEngine>(c.catalog, runner);
  } else {
    engine = std::make_unique<kernel::KernelEngine>(prog, vjp, dims, options.half_intermediates, runner);
    engine->set_plan(profile, threads);
  }
  interp::Interpreter interp(prog, dims, c.realization.get());
  interp.set_remat(interp::Remat::Store);
  interp.set_launcher(engine.get());
  std::optional<compile::Executor> executor;
  if (mode == Mode::Executed) executor.emplace(prog, c, *engine);
  std::vector<double> step, inside;
  for (int s = 0; s < steps + 2; ++s) {
    runner.seconds = 0;
    const auto start = bench::Clock::now();
    if (mode == Mode::Executed)
      executor->call(args);
    else
      interp.call(vjp, args);
    if (s < 2) continue;  // the first lowers and compiles (or loads) every kernel
    step.push_back(bench::seconds_since(start));
    inside.push_back(runner.seconds);
  }
  return {bench::median(step), bench::median(inside)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_host_overhead PROGRAM.qr [--dim B=256] [--threads 1,2] [--steps N] [--fma]\n");
    return 2;
  }
  std::string path = argv[1];
  std::map<std::string, int64_t> dims = {{"B", 256}};
  std::vector<int> threads = {1, 2};
  int steps = 20;
  bool fma = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dim" && i + 1 < argc) {
      const std::string d = argv[++i];
      const size_t eq = d.find('=');
      dims[d.substr(0, eq)] = std::atoll(d.c_str() + eq + 1);
    } else if (a == "--threads" && i + 1 < argc) {
      threads.clear();
      for (const char* p = argv[++i]; *p;) {
        threads.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--fma") {
      fma = true;
    } else {
      std::fprintf(stderr, "bench_host_overhead: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  DiagnosticSink diags;
  auto prog = elab::elaborate(path, diags);
  if (diags.has_errors()) {
    std::fprintf(stderr, "%s", diags.render(prog->sources).c_str());
    return 1;
  }
  const int loss = prog->find_function("loss");
  if (loss < 0) {
    std::fprintf(stderr, "bench_host_overhead: %s has no `loss`\n", path.c_str());
    return 1;
  }
  const core::Function& fn = prog->functions[static_cast<size_t>(loss)];
  const interp::ParamMap params = interp::init_params(*prog, fn.args[0].type.params, 0, dims);
  std::vector<interp::Value> args = interp::entry_arguments(*prog, loss, &params, dims, 0, std::nullopt);
  args.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
  const int vjp = grad::vjp(*prog, loss, {0});
  precision::RealizeOptions options;
  options.policy = precision::Policy::F32;
  options.fused_products = fma;
  std::printf("the gradient of `loss` (%s, f32, --product-step %s, --remat store), median of %d steps\n", path.c_str(),
              fma ? "fma" : "separate", steps);
  std::printf("%-8s %-10s %10s %10s %10s %8s\n", "threads", "kernels", "step ms", "inside ms", "outside ms", "outside");
  for (int t : threads) {
    for (Mode mode : {Mode::AsMet, Mode::Compiled, Mode::Executed}) {
      const Figures f = measure(*prog, vjp, args, dims, options, t, mode, steps);
      const char* name = mode == Mode::AsMet ? "as met" : mode == Mode::Compiled ? "compiled" : "executed";
      std::printf("%-8d %-10s %10.3f %10.3f %10.3f %7.1f%%\n", t, name, f.step * 1e3,
                  f.kernels * 1e3, (f.step - f.kernels) * 1e3, 100 * (f.step - f.kernels) / f.step);
    }
  }
  return 0;
}
