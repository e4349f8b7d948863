#include "quire/compile/executor.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/interp/inputs.h"
#include "quire/interp/reference_step.h"
#include "quire/runtime/runtime_error.h"

namespace quire::compile {

using core::Op;
using interp::Value;

namespace {

constexpr int kMaxCallDepth = 256;  // as the interpreter's: the host program's calls are acyclic

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
    throw interp::EvalError(fmt::format("{}: the program was compiled for {}, given {} (compile it again for these shapes)",
                                        what, expected, found));
  };
  auto kind_name = [](Value::Kind k) {
    switch (k) {
      case Value::Kind::Tensor: return "a tensor";
      case Value::Kind::Key: return "a key";
      case Value::Kind::Tuple: return "a tuple";
      case Value::Kind::Params: return "a parameter tree";
      case Value::Kind::Host: return "a host scalar";
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
        fail(fmt::format("a tuple of {}", compiled.elements.size()), fmt::format("a tuple of {}", given.elements.size()));
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
  // Each value is released after the last step that reads it, or after the
  // step that writes it when nothing reads it; a frame's result stays.
  released_after_.resize(host_.functions.size());
  for (size_t i = 0; i < host_.functions.size(); ++i) {
    const HostFunction& h = host_.functions[i];
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(h.function));
    std::vector<std::vector<int>>& released = released_after_[i];
    released.resize(h.steps.size());
    for (const HostBuffer& b : h.buffers) {
      if (b.value == fn.result_value) continue;
      const int k = b.last_read >= 0 ? b.last_read : b.first_write;
      if (k >= 0 && static_cast<size_t>(k) < h.steps.size()) released[static_cast<size_t>(k)].push_back(b.value);
    }
  }
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

Value Executor::run(int id, std::vector<Value> args, int depth, const Saved* reuse, std::shared_ptr<const Saved>* keep) {
  if (depth > kMaxCallDepth) throw interp::EvalError("calls nest deeper than the interpreter allows");
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
  Kept* keeping = host_.remat == interp::Remat::Store && (fn.primal >= 0 || h.mode == FrameMode::Kept) ? &kept : nullptr;
  const std::vector<std::vector<int>>& released = released_after_[static_cast<size_t>(id)];
  auto finish = [&](const core::Instr& in) {
    Value& v = env[static_cast<size_t>(in.id)];
    if (h.table)
      if (const auto& site = h.table->values[static_cast<size_t>(in.id)])
        interp::store_at_site(fn, in, *site, half_intermediates_, v);
    interp::check_site_value(prog_, fn, in, v, h.dims);
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
      }
    } catch (const runtime::RuntimeError& e) {
      LineCol lc = prog_.sources.line_col(at->loc.begin);
      throw interp::EvalError(fmt::format("{}:{}:{}: in {}: {}", prog_.sources.file(at->loc.begin.file).path, lc.line,
                                          lc.column, core::site_name(fn, at->id), e.what()));
    }
    if (!keep)
      for (int v : released[k]) env[static_cast<size_t>(v)] = Value{};
  }
  // The frame ends here: its result moves out unless the frame is kept.
  Value result = keep ? env[static_cast<size_t>(fn.result_value)] : std::move(env[static_cast<size_t>(fn.result_value)]);
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

Value Executor::call_step(const HostStep& s, const core::Instr& in, const HostFunction& h, std::vector<Value>& env,
                          Kept* keeping, int depth) {
  auto arg = [&](size_t k) -> const Value& { return env.at(static_cast<size_t>(in.args.at(k))); };
  auto internal = [&](const char* what) {
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(h.function));
    return std::logic_error(fmt::format("internal: {}: {}", core::site_name(fn, in.id), what));
  };
  if (s.kind == HostStep::Kind::Call) {
    const HostFunction& callee = host_.functions.at(static_cast<size_t>(s.callee));
    std::vector<Value> args;
    args.reserve(in.args.size());
    for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(k));
    switch (callee.mode) {
      case FrameMode::Fused:
        return run(s.callee, std::move(args), depth + 1);
      case FrameMode::Kept: {
        if (!keeping) throw internal("a kept call in a frame that keeps nothing");
        std::shared_ptr<const Saved> saved;
        Value result = run(s.callee, std::move(args), depth + 1, nullptr, &saved);
        keeping->calls[{in.callee, in.args}] = std::move(saved);
        return result;
      }
      case FrameMode::Reusing: {
        // A vjp: its operands are the forward call's, then the cotangent.
        const int primal = prog_.functions.at(static_cast<size_t>(in.callee)).primal;
        std::vector<int> forward(in.args.begin(), in.args.end() - 1);
        if (!keeping) throw internal("a vjp call reusing a forward in a frame that keeps nothing");
        auto it = keeping->calls.find({primal, forward});
        if (it == keeping->calls.end()) throw internal("a vjp call whose forward was not kept");
        return run(s.callee, std::move(args), depth + 1, it->second.get());
      }
    }
    throw internal("a call without a frame mode");
  }
  const interp::ParamMap& stacked = *arg(0).params;
  const int64_t copies = s.count;
  if (s.kind == HostStep::Kind::Fold) {
    if (s.copies.size() != static_cast<size_t>(copies)) throw internal("a fold without an instance per copy");
    Value carried = arg(1);
    auto saved = keeping ? std::make_shared<Kept::Fold>() : nullptr;
    for (int64_t i = 0; i < copies; ++i) {
      Value theta = Value::of_params(std::make_shared<const interp::ParamMap>(interp::fold_copy(stacked, i)));
      if (saved) {
        saved->inputs.push_back(carried);
        saved->copies.emplace_back();
      }
      carried = run(s.copies[static_cast<size_t>(i)], {std::move(theta), std::move(carried)}, depth + 1, nullptr,
                    saved ? &saved->copies.back() : nullptr);
    }
    if (saved) {
      saved->result = carried;
      keeping->folds[{in.callee, in.args}] = std::move(saved);
    }
    return carried;
  }
  // fold_vjp: the forward (unless it was kept), keeping each copy's input,
  // then each copy's vjp from the last.
  std::vector<Value> thetas, inputs;
  for (int64_t i = 0; i < copies; ++i)
    thetas.push_back(Value::of_params(std::make_shared<const interp::ParamMap>(interp::fold_copy(stacked, i))));
  const Kept::Fold* saved = nullptr;
  if (keeping)
    if (auto it = keeping->folds.find({in.callee, {in.args.at(0), in.args.at(1)}}); it != keeping->folds.end())
      saved = it->second.get();
  Value carried = arg(1);
  if (saved) {
    inputs = saved->inputs;
    carried = saved->result;
  } else {
    if (s.copies.size() != static_cast<size_t>(copies)) throw internal("a fold_vjp whose forward was kept at compile time");
    for (int64_t i = 0; i < copies; ++i) {
      inputs.push_back(carried);
      carried = run(s.copies[static_cast<size_t>(i)], {thetas[static_cast<size_t>(i)], carried}, depth + 1);
    }
    stats_.forwards_repeated += copies;
  }
  if (s.vjp_copies.size() != static_cast<size_t>(copies)) throw internal("a fold_vjp without a vjp instance per copy");
  Value ct = arg(2);
  std::vector<interp::ParamMap> grads(static_cast<size_t>(copies));
  for (int64_t i = copies; i-- > 0;) {
    const size_t c = static_cast<size_t>(i);
    const Saved* reuse = saved ? saved->copies.at(c).get() : nullptr;
    if ((host_.functions.at(static_cast<size_t>(s.vjp_copies[c])).mode == FrameMode::Reusing) != (reuse != nullptr))
      throw internal("a fold_vjp copy whose kept forward differs from the compiled one");
    Value r = run(s.vjp_copies[c], {thetas[c], inputs[c], std::move(ct)}, depth + 1, reuse);
    grads[c] = *r.elements.at(1).params;
    ct = r.elements.at(2);
  }
  return Value::of_tuple({carried, ct, Value::of_params(std::make_shared<const interp::ParamMap>(
                                           interp::stack_copies(stacked, grads)))});
}

}  // namespace quire::compile
