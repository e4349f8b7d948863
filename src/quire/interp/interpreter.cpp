#include "quire/interp/interpreter.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/inputs.h"
#include "quire/interp/reference_step.h"
#include "quire/runtime/element_scan.h"
#include "quire/runtime/host_loops.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

using core::Op;
using runtime::Tensor;

namespace {

/// The first NaN or infinity among a value's real elements (tuples and
/// parameter trees included), if any.
std::optional<double> first_nonfinite_element(const Value& v, int depth = 0) {
  if (depth > 64) return std::nullopt;
  switch (v.kind) {
    case Value::Kind::Tensor:
      if (v.tensor.is_real())
        for (double x : v.tensor.reals)
          if (!std::isfinite(x)) return x;
      return std::nullopt;
    case Value::Kind::Tuple:
      for (const Value& e : v.elements)
        if (auto bad = first_nonfinite_element(e, depth + 1)) return bad;
      return std::nullopt;
    case Value::Kind::Params:
      if (v.params)
        for (const auto& [path, t] : *v.params)
          if (t.is_real())
            for (double x : t.reals)
              if (!std::isfinite(x)) return x;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

precision::Carry carry_of(const Value& v, int depth) {
  precision::Carry c;
  if (depth > 64) return c;
  if (v.kind == Value::Kind::Tensor && v.tensor.is_real()) c.type = v.type;
  if (v.kind == Value::Kind::Tuple) {
    c.tuple = true;
    for (const Value& e : v.elements) c.elements.push_back(carry_of(e, depth + 1));
  }
  return c;
}

const core::Function& frame_function(const elab::Program& prog, int function, size_t args, int depth) {
  if (depth > kMaxCallDepth) throw EvalError("calls nest deeper than the interpreter allows");
  const core::Function& fn = prog.functions.at(static_cast<size_t>(function));
  if (!fn.checked || fn.result_value == 0) throw EvalError(fmt::format("`{}` did not elaborate", fn.name));
  if (args != fn.args.size())
    throw EvalError(fmt::format("`{}` takes {} arguments, given {}", fn.name, fn.args.size(), args));
  return fn;
}

const precision::FunctionRealization* realized_table(const precision::Realization* r, const elab::Program& prog,
                                                     int function, core::Numerics context,
                                                     const std::vector<Value>& args) {
  if (!r) return nullptr;
  std::vector<precision::Carry> carries;
  for (const Value& a : args) carries.push_back(carry_of(a));
  const std::string sig = precision::signature(carries);
  if (const precision::FunctionRealization* table = r->find(function, context, sig)) return table;
  throw std::logic_error(fmt::format("internal: `{}` is called with {} inside {}, which the realization did not reach",
                                     prog.functions.at(static_cast<size_t>(function)).name, sig,
                                     core::numerics_name(context)));
}

EvalError error_at(const elab::Program& prog, const core::Function& fn, const core::Instr& in,
                   const std::exception& e) {
  const LineCol lc = prog.sources.line_col(in.loc.begin);
  return EvalError(fmt::format("{}:{}:{}: in {}: {}", prog.sources.file(in.loc.begin.file).path, lc.line, lc.column,
                               core::site_name(fn, in.id), e.what()));
}

Interpreter::Interpreter(const elab::Program& prog, std::map<std::string, int64_t> dims,
                         const precision::Realization* realization)
    : prog_(prog), dims_(std::move(dims)), realization_(realization) {}

runtime::Shape Interpreter::concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims) const {
  return interp::concrete_shape(t, dims);
}

std::optional<Remat> parse_remat(std::string_view name) {
  if (name == "recompute") return Remat::Recompute;
  if (name == "store") return Remat::Store;
  return std::nullopt;
}

const char* remat_name(Remat r) { return r == Remat::Store ? "store" : "recompute"; }

Value Interpreter::call(int function, const std::vector<Value>& args) {
  if (!realization_) return eval(function, args, dims_, 0, core::Numerics::Default);
  if (realization_->entry != function)
    throw std::logic_error(fmt::format("internal: the realization is of `{}`, not of `{}`",
                                       prog_.functions.at(realization_->entry).name, prog_.functions.at(function).name));
  std::vector<Value> cast;
  for (const Value& v : args) cast.push_back(cast_entry_argument(*realization_, v));
  return eval(function, cast, dims_, 0, core::Numerics::Default);
}

Value Interpreter::eval(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
                        int depth, core::Numerics context, const Saved* reuse, std::shared_ptr<const Saved>* keep) {
  const core::Function& fn = frame_function(prog_, function, args.size(), depth);
  std::vector<Value> env(fn.value_count() + 1);
  for (size_t i = 0; i < args.size(); ++i) {
    if (depth == 0) check_argument(prog_, fn.args[i].type, args[i], dims, fmt::format("argument `{}`", fn.args[i].name));
    env[i + 1] = args[i];
  }
  const precision::FunctionRealization* table = realized_table(realization_, prog_, function, context, args);
  // A vjp's forward instructions are its primal's, one for one: under Store
  // they come from the primal's evaluation that the caller's forward kept.
  size_t first = 0;
  Kept kept;
  if (reuse && fn.primal >= 0) {
    const core::Function& primal = prog_.functions.at(fn.primal);
    for (; first < primal.body.size(); ++first) env[fn.body[first].id] = reuse->env.at(primal.body[first].id);
    kept = reuse->kept.for_vjp(primal, fn);
    stats_.reused += static_cast<int64_t>(first);
  } else if (fn.primal >= 0 && depth > 0) {
    ++stats_.forwards_repeated;  // a nested vjp evaluates its primal's forward itself
  }
  // A frame keeps its callees' forward values when a reverse sweep will read
  // them: it is a vjp's (its own reverse sweep follows), or a kept one.
  Kept* keeping = remat_ == Remat::Store && (fn.primal >= 0 || keep) ? &kept : nullptr;
  // With a launcher, a group's members wait for its root, whose kernel computes them all.
  const bool fused = !keep && !watch_nonfinite_;
  const LaunchGroups* groups = launcher_ ? &launcher_->groups(function, fused, table) : nullptr;
  const int first_value = static_cast<int>(fn.args.size()) + 1 + static_cast<int>(first);
  auto finish = [&](const core::Instr& in, bool rounded = false) {
    if (!rounded && table && table->values[in.id]) store_at_site(fn, in, *table->values[in.id], realization_->half_intermediates, env[in.id]);
    check_site_value(prog_, fn, in, env[in.id], dims);
    ++stats_.evaluated;
    if (table && table->values[in.id]) stats_.written_bytes += written_bytes(&*table->values[in.id], env[in.id]);
    if (watch_nonfinite_ && !first_nonfinite_)
      if (std::optional<double> bad = first_nonfinite_element(env[in.id]))
        first_nonfinite_ = NonFiniteSite{fn.name, core::site_name(fn, in.id), core::op_info(in.op).spelling, in.loc, *bad};
    if (guard_) guard_->observe(fn, in, env[in.id]);
  };
  for (size_t k = first; k < fn.body.size(); ++k) {
    const core::Instr& in = fn.body[k];
    const core::Instr* at = &in;  // the instruction an error is placed at
    try {
      if (groups && groups->computed_by[in.id] != 0) continue;
      if (groups && !groups->steps[in.id].empty()) {
        if (std::optional<Value> v = launcher_->launch(function, in.id, fused, env, table)) {
          // A kernel stores its root at the site's type, rounded as store() would.
          const auto& site = table ? table->values[in.id] : std::nullopt;
          if (site && v->kind == Value::Kind::Tensor && v->tensor.is_real() && v->type != site->storage)
            throw std::logic_error(fmt::format("internal: the kernel of {} stored {}, not {}", core::site_name(fn, in.id),
                                               runtime::float_type_name(v->type),
                                               runtime::float_type_name(site->storage)));
          env[in.id] = std::move(*v);
          finish(in, /*rounded=*/true);
          // The kernel evaluated every step of the group: the count is the backend's work, not its storage.
          stats_.evaluated += static_cast<int64_t>(groups->steps[in.id].size()) - 1;
          continue;
        }
        // No kernel: the members one at a time (those a reused forward holds already are there).
        for (int m : groups->steps[in.id]) {
          if (m < first_value) continue;
          at = &fn.body[static_cast<size_t>(m - static_cast<int>(fn.args.size()) - 1)];
          env[m] = step(fn, *at, env, dims, depth, context, table, keeping);
          finish(*at);
        }
        continue;
      }
      env[in.id] = step(fn, in, env, dims, depth, context, table, keeping);
      finish(in);
    } catch (const runtime::RuntimeError& e) {
      throw error_at(prog_, fn, *at, e);
    }
  }
  // The frame ends here: its result moves out unless the frame is kept.
  Value result = keep ? env[fn.result_value] : std::move(env[fn.result_value]);
  if (keep) {
    auto saved = std::make_shared<Saved>();
    for (const core::Instr& in : fn.body) saved->bytes += value_bytes(env[in.id]);
    saved->env = std::move(env);
    saved->kept = std::move(kept);
    saved->live = &stored_bytes_;
    stored_bytes_ += saved->bytes;
    stats_.stored_bytes_peak = std::max(stats_.stored_bytes_peak, stored_bytes_);
    *keep = std::move(saved);
  }
  return result;
}

/// Calls, folds and fold_vjps one call level deeper, in the instruction's
/// numerics; under Store a frame's kept forwards are Saved evaluations.
struct Interpreter::Callees : RunDims, ValueStructure {
  using Forward = std::shared_ptr<const Saved>;
  Interpreter& self;
  int depth;            ///< of the calling frame
  core::Numerics mode;  ///< the numerics form the callee runs in

  Value evaluate(const core::Evaluation<Forward>& e, const std::vector<Value>& args, const Dims& dims) {
    if (e.role == core::CallRole::VjpForward) ++self.stats_.forwards_repeated;
    return self.eval(e.function, args, dims, depth + 1, mode, e.reuse ? e.reuse->get() : nullptr, e.keep);
  }
};

Value Interpreter::step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                        const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
                        const precision::FunctionRealization* table, Kept* kept) {
  if (!core::op_info(in.op).calls) return evaluate_step(fn, in, env, dims, table);
  Callees callees{{prog_, dims_}, {}, *this, depth, in.numerics != core::Numerics::Default ? in.numerics : context};
  return core::walk_structural(
      callees, in, [&](size_t k) -> const Value& { return env.at(in.args.at(k)); }, dims, kept);
}

}  // namespace quire::interp
