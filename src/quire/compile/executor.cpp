#include "quire/compile/executor.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/inputs.h"
#include "quire/interp/reference_step.h"
#include "quire/runtime/runtime_error.h"

namespace quire::compile {

using core::Op;
using interp::Value;

namespace {

const core::Instr& instr_of(const core::Function& fn, int value) {
  return fn.body.at(static_cast<size_t>(value - static_cast<int>(fn.args.size()) - 1));
}

std::string geometry_text(const Value& v) {
  const runtime::Tensor& t = v.tensor;
  const std::string elem = t.is_real() ? runtime::float_type_name(v.type) : runtime::elem_kind_name(t.kind);
  return fmt::format("{}{}", elem, runtime::shape_string(t.shape));
}

/// A call's argument against the one the program was compiled for: the
/// kernels were lowered at those shapes and types.
void check_geometry(const Value& compiled, const Value& given, const std::string& what, int depth = 0) {
  if (depth > 64) throw interp::EvalError(fmt::format("{} nests too deeply", what));
  auto fail = [&](const std::string& expected, const std::string& found) {
    throw interp::EvalError(fmt::format(
        "{}: the program was compiled for {}, given {} (compile it again for these shapes)", what, expected, found));
  };
  auto kind_name = [](Value::Kind k) {
    switch (k) {
      case Value::Kind::Tensor:
        return "a tensor";
      case Value::Kind::Key:
        return "a key";
      case Value::Kind::Tuple:
        return "a tuple";
      case Value::Kind::Params:
        return "a parameter tree";
      case Value::Kind::Host:
        return "a host scalar";
    }
    return "a value";
  };
  if (compiled.kind != given.kind) fail(kind_name(compiled.kind), kind_name(given.kind));
  switch (compiled.kind) {
    case Value::Kind::Tensor:
      if (compiled.tensor.kind != given.tensor.kind || compiled.tensor.shape != given.tensor.shape ||
          (compiled.tensor.is_real() && compiled.type != given.type))
        fail(geometry_text(compiled), geometry_text(given));
      return;
    case Value::Kind::Tuple:
      if (compiled.elements.size() != given.elements.size())
        fail(fmt::format("a tuple of {}", compiled.elements.size()),
             fmt::format("a tuple of {}", given.elements.size()));
      for (size_t i = 0; i < compiled.elements.size(); ++i)
        check_geometry(compiled.elements[i], given.elements[i], fmt::format("{}.{}", what, i), depth + 1);
      return;
    case Value::Kind::Params:
      for (const auto& [path, t] : *compiled.params) {
        auto it = given.params->find(path);
        if (it == given.params->end()) fail(fmt::format("a tree with `{}`", path), "a tree without it");
        if (it->second.shape != t.shape)
          fail(fmt::format("`{}` of shape {}", path, runtime::shape_string(t.shape)),
               runtime::shape_string(it->second.shape));
      }
      return;
    case Value::Kind::Key:
    case Value::Kind::Host:
      return;
  }
}

}  // namespace

Executor::Executor(const elab::Program& prog, const CompiledProgram& compiled, kernel::KernelEngine& engine)
    : prog_(prog),
      compiled_(compiled),
      host_(compiled.host),
      engine_(engine),
      half_intermediates_(compiled.realization && compiled.realization->half_intermediates) {
  if (&engine.catalog() != compiled.catalog.get())
    throw std::logic_error("internal: the executor's engine runs another catalog than the compiled program's");
  released_after_.reserve(host_.functions.size());
  for (const HostFunction& h : host_.functions)
    released_after_.push_back(released_after(h, prog_.functions.at(static_cast<size_t>(h.function))));
}

Value Executor::call(const std::vector<Value>& args) {
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(host_.entry));
  if (args.size() != fn.args.size())
    throw interp::EvalError(fmt::format("`{}` takes {} arguments, given {}", fn.name, fn.args.size(), args.size()));
  const HostFunction& root = host_.functions.at(static_cast<size_t>(host_.root));
  std::vector<Value> cast;
  cast.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    cast.push_back(compiled_.realization ? interp::cast_entry_argument(*compiled_.realization, args[i]) : args[i]);
    const std::string what = fmt::format("argument `{}`", fn.args[i].name);
    interp::check_argument(prog_, fn.args[i].type, cast.back(), root.dims, what);
    check_geometry(host_.arguments.at(i), cast.back(), what);
  }
  return run(host_.root, std::move(cast), 0);
}

Value Executor::run(int id, std::vector<Value> args, int depth, const Saved* reuse,
                    std::shared_ptr<const Saved>* keep) {
  if (depth > interp::kMaxCallDepth) throw interp::EvalError("calls nest deeper than the interpreter allows");
  const HostFunction& h = host_.functions.at(static_cast<size_t>(id));
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(h.function));
  std::vector<Value> env(static_cast<size_t>(fn.value_count()) + 1);
  for (size_t i = 0; i < args.size(); ++i) env[i + 1] = std::move(args[i]);
  // A reusing vjp's forward instructions are its primal's, one for one:
  // their values come from the forward the caller kept.
  Kept kept;
  if (h.mode == FrameMode::Reusing) {
    if (!reuse || fn.primal < 0)
      throw std::logic_error(fmt::format("internal: `{}` reuses a forward the run did not keep", fn.name));
    const core::Function& primal = prog_.functions.at(static_cast<size_t>(fn.primal));
    for (size_t k = 0; k < static_cast<size_t>(h.first); ++k)
      env[static_cast<size_t>(fn.body[k].id)] = reuse->env.at(static_cast<size_t>(primal.body[k].id));
    kept = reuse->kept.for_vjp(primal, fn);
    stats_.reused += h.first;
  } else if (fn.primal >= 0 && depth > 0) {
    ++stats_.forwards_repeated;  // a nested vjp evaluates its primal's forward itself
  }
  // A frame keeps its callees' forwards when a reverse sweep will read them.
  Kept* keeping =
      host_.remat == interp::Remat::Store && (fn.primal >= 0 || h.mode == FrameMode::Kept) ? &kept : nullptr;
  const std::vector<std::vector<int>>& released = released_after_[static_cast<size_t>(id)];
  auto finish = [&](const core::Instr& in) {
    Value& v = env[static_cast<size_t>(in.id)];
    if (h.table)
      if (const auto& site = h.table->values[static_cast<size_t>(in.id)]) {
        interp::store_at_site(fn, in, *site, half_intermediates_, v);
        stats_.written_bytes += interp::written_bytes(&*site, v);
      }
    interp::check_site_value(prog_, fn, in, v, h.dims);
    if (guard_) guard_->observe(fn, in, v);
    ++stats_.evaluated;
  };
  std::vector<const runtime::Tensor*> inputs;
  for (size_t k = 0; k < h.steps.size(); ++k) {
    const HostStep& s = h.steps[k];
    const core::Instr* at = &instr_of(fn, s.value);
    try {
      switch (s.kind) {
        case HostStep::Kind::Kernel: {
          inputs.clear();
          // -1: a packed product's scratch, which the runner fills.
          for (int v : s.inputs) inputs.push_back(v < 0 ? nullptr : &env[static_cast<size_t>(v)].tensor);
          Value v = engine_.run(s.kernel, inputs);
          // A kernel stores its root at the site's type, rounded as store_at_site would.
          if (h.table)
            if (const auto& site = h.table->values[static_cast<size_t>(s.value)];
                site && v.kind == Value::Kind::Tensor && v.tensor.is_real() && v.type != site->storage)
              throw std::logic_error(fmt::format("internal: the kernel of {} stored {}, not {}",
                                                 core::site_name(fn, s.value), runtime::float_type_name(v.type),
                                                 runtime::float_type_name(site->storage)));
          interp::check_site_value(prog_, fn, *at, v, h.dims);
          if (guard_) guard_->observe(fn, *at, v);
          if (h.table)
            if (const auto& site = h.table->values[static_cast<size_t>(s.value)])
              stats_.written_bytes += interp::written_bytes(&*site, v);
          env[static_cast<size_t>(s.value)] = std::move(v);
          // The kernel evaluated every step of its group: the count is the backend's work.
          stats_.evaluated += s.launch_steps;
          break;
        }
        case HostStep::Kind::Reference:
          engine_.count_reference(s.launch_steps);
          for (int m : s.steps) {
            at = &instr_of(fn, m);
            env[static_cast<size_t>(m)] = interp::evaluate_step(fn, *at, env, h.dims, h.table);
            finish(*at);
          }
          break;
        case HostStep::Kind::Host:
          env[static_cast<size_t>(s.value)] = interp::evaluate_step(fn, *at, env, h.dims, h.table);
          finish(*at);
          break;
        case HostStep::Kind::Call:
        case HostStep::Kind::Fold:
        case HostStep::Kind::FoldVjp:
          env[static_cast<size_t>(s.value)] = call_step(s, *at, h, env, keeping, depth);
          finish(*at);
          break;
        case HostStep::Kind::Library: {
          // The whole function: its result, every instruction's work done.
          std::vector<const Value*> operands;
          for (int v : s.reads) operands.push_back(&env[static_cast<size_t>(v)]);
          env[static_cast<size_t>(s.value)] = run_library_kernel(s.library, operands, host_.threads);
          stats_.evaluated += static_cast<int64_t>(fn.body.size());
          break;
        }
      }
    } catch (const runtime::RuntimeError& e) {
      throw interp::error_at(prog_, fn, *at, e);
    }
    if (!keep)
      for (int v : released[k]) env[static_cast<size_t>(v)] = Value{};
  }
  // The frame ends here: its result moves out unless the frame is kept.
  Value result =
      keep ? env[static_cast<size_t>(fn.result_value)] : std::move(env[static_cast<size_t>(fn.result_value)]);
  if (keep) {
    auto saved = std::make_shared<Saved>();
    for (const core::Instr& in : fn.body) saved->bytes += interp::value_bytes(env[static_cast<size_t>(in.id)]);
    saved->env = std::move(env);
    saved->kept = std::move(kept);
    saved->live = &stored_bytes_;
    stored_bytes_ += saved->bytes;
    stats_.stored_bytes_peak = std::max(stats_.stored_bytes_peak, stored_bytes_);
    *keep = std::move(saved);
  }
  return result;
}

/// The executor as the Core walker's domain (core/walk.h): each evaluation
/// runs the instance the host step compiled for it, which must be of the
/// frame mode (fused, kept, reusing) the walk asks for.
struct Executor::Callees : interp::ValueStructure {
  using Dims = core::NoDims;  // an instance runs under the dims it was compiled at
  using Forward = std::shared_ptr<const Saved>;
  Executor& self;
  const HostStep& step;
  const core::Function& fn;  ///< the caller, and its instruction `in`
  const core::Instr& in;
  int depth;  ///< of the calling frame

  const elab::Program& program() const { return self.prog_; }
  static Dims callee_dims(const core::Instr&, Dims) { return {}; }
  int64_t copies(const core::Instr&, Dims) const { return step.count; }
  Value evaluate(const core::Evaluation<Forward>& e, std::vector<Value> args, Dims) {
    const size_t copy = static_cast<size_t>(e.copy);
    const std::vector<int>& compiled = e.role == core::CallRole::VjpCopy ? step.vjp_copies : step.copies;
    const int instance = e.role == core::CallRole::Call ? step.callee : copy < compiled.size() ? compiled[copy] : -1;
    const FrameMode mode = e.reuse ? FrameMode::Reusing : e.keep ? FrameMode::Kept : FrameMode::Fused;
    if (instance < 0 || self.host_.functions.at(static_cast<size_t>(instance)).mode != mode)
      throw std::logic_error(fmt::format("internal: {}: the host program compiled no {} instance for this evaluation",
                                         core::site_name(fn, in.id), frame_mode_name(mode)));
    if (e.role == core::CallRole::VjpForward) ++self.stats_.forwards_repeated;
    return self.run(instance, std::move(args), depth + 1, e.reuse ? e.reuse->get() : nullptr, e.keep);
  }
};

Value Executor::call_step(const HostStep& s, const core::Instr& in, const HostFunction& h, std::vector<Value>& env,
                          Kept* keeping, int depth) {
  Callees callees{{}, *this, s, prog_.functions.at(static_cast<size_t>(h.function)), in, depth};
  return core::walk_structural(
      callees, in, [&](size_t k) -> const Value& { return env.at(static_cast<size_t>(in.args.at(k))); }, core::NoDims{},
      keeping);
}

}  // namespace quire::compile
