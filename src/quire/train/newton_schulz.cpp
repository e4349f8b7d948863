// Muon's orthogonalization (newton_schulz.h): the prelude's functions called
// from a program of their own, compiled once per shape and master type.
// Requires: the prelude defines newton_schulz and newton_schulz_tall with the
// signature `(g : ℝ[..., i: R, j: C], a, b, c, eps : f64)`.
// Keeps: the reference interpreter's bits on every backend.
#include "quire/train/newton_schulz.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/elab/elaborator.h"
#include "quire/interp/interpreter.h"
#include "quire/machine/profile.h"
#include "quire/native/native_runner.h"
#include "quire/realize/realization.h"

namespace quire::train {

namespace {

constexpr const char* kPath = "<muon>/newton_schulz.qr";

/// A double as a literal that reads back as the same double: fmt's shortest
/// round-trip form ("3.4445", "-4.775", "1e-07").
std::string literal(double x) {
  if (!std::isfinite(x)) throw std::logic_error(fmt::format("internal: Newton–Schulz setting {} is not finite", x));
  return fmt::format("{}", x);
}

}  // namespace

/// One call compiled (or realized, for the reference interpreter) at its shape.
struct NewtonSchulz::Compiled {
  std::map<std::string, int64_t> dims;
  int entry = -1;
  machine::Profile profile;
  std::unique_ptr<kernel::KernelRunner> runner;
  std::unique_ptr<compile::CompiledProgram> program;
  std::unique_ptr<kernel::KernelEngine> engine;
  std::unique_ptr<compile::Executor> executor;
  std::unique_ptr<precision::Realization> realization;  ///< the reference interpreter's, without a runner
  std::unique_ptr<interp::Interpreter> interpreter;
};

NewtonSchulz::NewtonSchulz(NewtonSchulzSettings settings, kernel::Backend backend, int threads)
    : backend_(backend), threads_(threads < 1 ? 1 : threads) {
  const std::string args = fmt::format("{}, {}, {}, {}", literal(settings.a), literal(settings.b), literal(settings.c),
                                       literal(settings.eps));
  source_ = fmt::format(
      "-- Muon's calls of the prelude's Newton–Schulz iteration: L matrices of R rows and C columns.\n"
      "dim L R C\n"
      "fn wide(g : ℝ[copies: L, i: R, j: C]) -> ℝ[copies: L, i: R, j: C] = newton_schulz(g, {0})\n"
      "fn tall(g : ℝ[copies: L, i: R, j: C]) -> ℝ[copies: L, i: R, j: C] = newton_schulz_tall(g, {0})\n",
      args);
  DiagnosticSink sink;
  const std::string text = source_;
  elab::FileReader reader = [text](const std::string& path, std::string& error) -> std::optional<std::string> {
    if (path == kPath) return text;
    error = "no such file";
    return std::nullopt;
  };
  prog_ = elab::elaborate(kPath, sink, reader);
  if (sink.has_errors())
    throw std::logic_error("internal: Muon's call of the prelude's newton_schulz does not elaborate:\n" +
                           sink.render(prog_->sources));
}

NewtonSchulz::~NewtonSchulz() = default;

runtime::Tensor NewtonSchulz::operator()(NewtonSchulzForm form, const runtime::Tensor& g, runtime::FloatType master) {
  if (!g.is_real() || g.shape.size() != 3)
    throw std::logic_error(
        fmt::format("internal: Newton–Schulz of a {} tensor, not [L, R, C]", runtime::shape_string(g.shape)));
  const Key key{form, g.shape[0], g.shape[1], g.shape[2], master};
  std::unique_ptr<Compiled>& slot = compiled_[key];
  if (!slot) {
    auto c = std::make_unique<Compiled>();
    c->dims = {{"L", g.shape[0]}, {"R", g.shape[1]}, {"C", g.shape[2]}};
    c->entry = prog_->find_function(form == NewtonSchulzForm::Wide ? "wide" : "tall");
    precision::RealizeOptions realize;
    realize.policy = master == runtime::FloatType::F64 ? precision::Policy::F64 : precision::Policy::F32;
    c->runner = native::make_runner(backend_, threads_);
    if (c->runner) {
      c->profile = machine::planning_profile("");
      compile::CompileRequest request;
      request.entry = c->entry;
      request.dims = c->dims;
      request.realize = realize;
      request.profile = &c->profile;
      request.threads = threads_;
      c->program = std::make_unique<compile::CompiledProgram>(compile::compile(*prog_, request));
      c->engine =
          std::make_unique<kernel::KernelEngine>(c->program->catalog, *c->runner, native::warn_native_unavailable);
      c->executor = std::make_unique<compile::Executor>(*prog_, *c->program, *c->engine);
    } else {
      c->realization = std::make_unique<precision::Realization>(precision::realize(*prog_, c->entry, realize, c->dims));
      c->interpreter = std::make_unique<interp::Interpreter>(*prog_, c->dims, c->realization.get());
    }
    slot = std::move(c);
  }
  const std::vector<interp::Value> args{interp::Value::of(g)};
  interp::Value result = slot->executor ? slot->executor->call(args) : slot->interpreter->call(slot->entry, args);
  return std::move(result.tensor);
}

}  // namespace quire::train
