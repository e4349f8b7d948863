#include "quire/interp/interpreter.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "quire/core/printer.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/inputs.h"
#include "quire/interp/kept_forward.h"
#include "quire/interp/reference_step.h"
#include "quire/runtime/element_scan.h"
#include "quire/runtime/host_loops.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

using core::Op;
using runtime::Tensor;

namespace {

constexpr int kMaxCallDepth = 256;  // calls are acyclic; this guards the invariant

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

Interpreter::Kept Interpreter::rekeyed(const Kept& kept, const core::Function& primal, const core::Function& vjp) {
  const std::map<int, int> to_vjp = vjp_numbers(primal, vjp);
  Kept out;
  renumber_into(kept.calls, to_vjp, out.calls);
  renumber_into(kept.folds, to_vjp, out.folds);
  return out;
}

Value Interpreter::eval(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
                        int depth, core::Numerics context, const Saved* reuse, std::shared_ptr<const Saved>* keep) {
  if (depth > kMaxCallDepth) throw EvalError("calls nest deeper than the interpreter allows");
  const core::Function& fn = prog_.functions.at(function);
  if (!fn.checked || fn.result_value == 0) throw EvalError(fmt::format("`{}` did not elaborate", fn.name));
  if (args.size() != fn.args.size())
    throw EvalError(fmt::format("`{}` takes {} arguments, given {}", fn.name, fn.args.size(), args.size()));
  std::vector<Value> env(fn.value_count() + 1);
  for (size_t i = 0; i < args.size(); ++i) {
    if (depth == 0) check_argument(prog_, fn.args[i].type, args[i], dims, fmt::format("argument `{}`", fn.args[i].name));
    env[i + 1] = args[i];
  }
  const precision::FunctionRealization* table = nullptr;
  if (realization_) {
    std::vector<precision::Carry> carries;
    for (const Value& a : args) carries.push_back(carry_of(a));
    std::string sig = precision::signature(carries);
    table = realization_->find(function, context, sig);
    if (!table)
      throw std::logic_error(fmt::format("internal: `{}` is called with {} inside {}, which the realization did not reach",
                                         fn.name, sig, core::numerics_name(context)));
  }
  // A vjp's forward instructions are its primal's, one for one: under Store
  // they come from the primal's evaluation that the caller's forward kept.
  size_t first = 0;
  Kept kept;
  if (reuse && fn.primal >= 0) {
    const core::Function& primal = prog_.functions.at(fn.primal);
    for (; first < primal.body.size(); ++first) env[fn.body[first].id] = reuse->env.at(primal.body[first].id);
    kept = rekeyed(reuse->kept, primal, fn);
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
    if (watch_nonfinite_ && !first_nonfinite_)
      if (std::optional<double> bad = first_nonfinite_element(env[in.id]))
        first_nonfinite_ = NonFiniteSite{fn.name, core::site_name(fn, in.id), core::op_info(in.op).spelling, in.loc, *bad};
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
      LineCol lc = prog_.sources.line_col(at->loc.begin);
      throw EvalError(fmt::format("{}:{}:{}: in {}: {}", prog_.sources.file(at->loc.begin.file).path, lc.line,
                                  lc.column, core::site_name(fn, at->id), e.what()));
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
Value Interpreter::step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                        const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
                        const precision::FunctionRealization* table, Kept* kept) {
  if (!core::op_info(in.op).calls) return evaluate_step(fn, in, env, dims, table);
  auto arg = [&](size_t k) -> const Value& { return env.at(in.args.at(k)); };
  const core::Numerics mode = in.numerics != core::Numerics::Default ? in.numerics : context;
  if (in.op == Op::FoldVjp) {
    // The fold forward, keeping each copy's input, then each copy's vjp from the last.
    const std::map<std::string, int64_t> callee_dims =
        interp::callee_dims(prog_.functions.at(in.callee), in, /*first=*/1, dims_, dims);
    int64_t copies = eval_size(in.sizes.at(0), dims);
    const ParamMap& stacked = *arg(0).params;
    std::vector<Value> thetas, inputs;
    for (int64_t i = 0; i < copies; ++i)
      thetas.push_back(Value::of_params(std::make_shared<const ParamMap>(fold_copy(stacked, i))));
    const SavedFold* saved = nullptr;
    if (kept)
      if (auto it = kept->folds.find({in.callee, {in.args.at(0), in.args.at(1)}}); it != kept->folds.end())
        saved = it->second.get();
    Value carried = arg(1);
    if (saved) {
      inputs = saved->inputs;
      carried = saved->result;
    } else {
      for (int64_t i = 0; i < copies; ++i) {
        inputs.push_back(carried);
        carried = eval(in.callee, {thetas[i], carried}, callee_dims, depth + 1, mode);
      }
      stats_.forwards_repeated += copies;
    }
    Value ct = arg(2);
    std::vector<ParamMap> grads(copies);
    for (int64_t i = copies; i-- > 0;) {
      Value r = eval(in.attr<core::attr::VjpOf>().function, {thetas[i], inputs[i], ct}, callee_dims, depth + 1, mode,
                     saved ? saved->copies.at(static_cast<size_t>(i)).get() : nullptr);
      grads[i] = *r.elements.at(1).params;
      ct = r.elements.at(2);
    }
    return Value::of_tuple({carried, ct, Value::of_params(std::make_shared<const ParamMap>(stack_copies(stacked, grads)))});
  }
  // a call or a fold
  if (in.callee < 0) throw EvalError("a call whose callee did not elaborate");
  const core::Function& callee = prog_.functions[in.callee];
  const std::map<std::string, int64_t> callee_dims =
      interp::callee_dims(callee, in, /*first=*/in.op == Op::Fold ? 1 : 0, dims_, dims);
  if (in.op == Op::Call) {
    std::vector<Value> args;
    for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(k));
    if (!kept) return eval(in.callee, args, callee_dims, depth + 1, mode);
    if (callee.primal >= 0) {
      // A vjp: its operands are the forward call's, then the cotangent.
      std::vector<int> forward(in.args.begin(), in.args.end() - 1);
      auto it = kept->calls.find({callee.primal, forward});
      return eval(in.callee, args, callee_dims, depth + 1, mode, it != kept->calls.end() ? it->second.get() : nullptr);
    }
    std::shared_ptr<const Saved> saved;
    Value result = eval(in.callee, args, callee_dims, depth + 1, mode, nullptr, &saved);
    kept->calls[{in.callee, in.args}] = std::move(saved);
    return result;
  }
  int64_t copies = eval_size(in.sizes.at(0), dims);
  const ParamMap& stacked = *arg(0).params;
  Value carried = arg(1);
  auto saved = kept ? std::make_shared<SavedFold>() : nullptr;
  for (int64_t i = 0; i < copies; ++i) {
    Value theta = Value::of_params(std::make_shared<const ParamMap>(fold_copy(stacked, i)));
    if (saved) {
      saved->inputs.push_back(carried);
      saved->copies.emplace_back();
    }
    carried = eval(in.callee, {theta, carried}, callee_dims, depth + 1, mode, nullptr,
                   saved ? &saved->copies.back() : nullptr);
  }
  if (saved) {
    saved->result = carried;
    kept->folds[{in.callee, in.args}] = std::move(saved);
  }
  return carried;
}

}  // namespace quire::interp
