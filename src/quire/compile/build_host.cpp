#include "quire/compile/build_host.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "quire/core/kept_forward.h"
#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/inputs.h"
#include "quire/interp/reference_step.h"
#include "quire/runtime/runtime_error.h"

namespace quire::compile {

using core::Op;
using interp::Value;

namespace {

runtime::ElemKind elem_kind(elab::Elem e) {
  switch (e) {
    case elab::Elem::Real:
      return runtime::ElemKind::Real;
    case elab::Elem::I32:
      return runtime::ElemKind::I32;
    case elab::Elem::I64:
      return runtime::ElemKind::I64;
    case elab::Elem::Bool:
      return runtime::ElemKind::Bool;
  }
  throw std::logic_error("internal: an element type without a kind");
}

/// A tensor that has a kind, a type and a shape but no elements: what lowering reads.
Value shaped(runtime::ElemKind kind, runtime::Shape shape, runtime::FloatType type = runtime::FloatType::F64) {
  runtime::Tensor t;
  t.kind = kind;
  t.shape = std::move(shape);
  Value v = Value::of(std::move(t));
  v.type = type;
  return v;
}

/// The entry's arguments as the interpreter receives them after the entry's
/// casts: real tensors at the realization's input type, parameters by path.
Value entry_value(const elab::Program& prog, const elab::Type& type, const std::string& path,
                  const std::map<std::string, int64_t>& dims, const precision::Realization* r, int depth) {
  if (depth > 64) throw interp::EvalError(fmt::format("argument `{}` nests too deeply", path));
  switch (type.kind) {
    case elab::TypeKind::Tuple: {
      std::vector<Value> elems;
      for (size_t i = 0; i < type.elements.size(); ++i)
        elems.push_back(entry_value(prog, type.elements[i], fmt::format("{}.{}", path, i), dims, r, depth + 1));
      return Value::of_tuple(std::move(elems));
    }
    case elab::TypeKind::Key:
      return Value::of_key(runtime::Key{});
    case elab::TypeKind::Scalar:
      return Value::of_host(0);
    case elab::TypeKind::Params: {
      auto tree = std::make_shared<interp::ParamMap>();
      for (const auto& [leaf, t] : prog.flatten(type.params)) {
        runtime::Tensor s;
        s.shape = interp::concrete_shape(t, dims);
        tree->emplace(leaf, std::move(s));
      }
      return Value::of_params(std::move(tree));
    }
    case elab::TypeKind::Tensor: {
      if (type.tensor.rest)
        throw interp::EvalError(fmt::format("argument `{}` has `...` axes: an entry needs known shapes", path));
      const runtime::ElemKind kind = elem_kind(type.tensor.elem);
      const runtime::FloatType t = r && kind == runtime::ElemKind::Real ? r->input_type() : runtime::FloatType::F64;
      return shaped(kind, interp::concrete_shape(type.tensor, dims), t);
    }
  }
  throw std::logic_error("internal: an argument type without a kind");
}

/// A call's argument as the entry's casts leave it, without its elements.
Value geometry_of(const Value& v, const precision::Realization* r, int depth = 0) {
  if (depth > 64) throw interp::EvalError("an argument nests too deeply");
  switch (v.kind) {
    case Value::Kind::Tensor:
      return shaped(v.tensor.kind, v.tensor.shape, r && v.tensor.is_real() ? r->input_type() : runtime::FloatType::F64);
    case Value::Kind::Tuple: {
      std::vector<Value> elems;
      for (const Value& e : v.elements) elems.push_back(geometry_of(e, r, depth + 1));
      return Value::of_tuple(std::move(elems));
    }
    case Value::Kind::Params: {
      auto tree = std::make_shared<interp::ParamMap>();
      for (const auto& [path, t] : *v.params) {
        runtime::Tensor s;
        s.kind = t.kind;
        s.shape = t.shape;
        tree->emplace(path, std::move(s));
      }
      return Value::of_params(std::move(tree));
    }
    case Value::Kind::Key:
    case Value::Kind::Host:
      return v;
  }
  throw std::logic_error("internal: a value without a kind");
}

/// The leading (`...`) axes of a value whose static type has `explicit_axes` named ones.
runtime::Shape rest_of(const Value& v, size_t explicit_axes) {
  const runtime::Shape& s = v.tensor.shape;
  if (s.size() < explicit_axes) throw std::logic_error("internal: a value has fewer axes than its type names");
  return runtime::Shape(s.begin(), s.end() - static_cast<std::ptrdiff_t>(explicit_axes));
}

/// Right-aligned broadcast of two leading-axis shapes (a size-1 axis stretches).
runtime::Shape broadcast(const runtime::Shape& a, const runtime::Shape& b) {
  runtime::Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

/// One frame of the walk: what an instance's evaluation leaves for its callers.
struct Frame {
  std::vector<Value> env;  ///< by value number
  /// `--remat store`: the kept forwards of its calls and folds (each the
  /// instance that computed it), keyed as the interpreter keys them.
  core::KeptForwards<Value, int> kept;
};

class Walk {
 public:
  Walk(const elab::Program& prog, const std::map<std::string, int64_t>& dims, const precision::Realization* r,
       kernel::KernelCatalog& catalog, interp::Remat remat, bool library_kernels, HostProgram& out)
      : prog_(prog),
        run_dims_(dims),
        r_(r),
        catalog_(catalog),
        remat_(remat),
        library_kernels_(library_kernels),
        out_(out) {}

  /// The instance of `function` on `args`: walked now unless an identical one was.
  int instance(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
               core::Numerics context, FrameMode mode, int reuse_from, int depth);

  const std::vector<Value>& env(int instance) const { return frames_.at(static_cast<size_t>(instance)).env; }
  const Value& result(int instance) const {
    const HostFunction& h = out_.functions[static_cast<size_t>(instance)];
    const core::Function& fn = prog_.functions[static_cast<size_t>(h.function)];
    return frames_[static_cast<size_t>(instance)].env[static_cast<size_t>(fn.result_value)];
  }

 private:
  /// This walk as the Core walker's domain (core/walk.h).
  struct Callees;
  /// Walks a call, a fold or a fold_vjp, appends its step and returns its value.
  Value call_step(int id, const core::Instr& in, Frame& frame, bool keeping, int depth);
  /// The value an instruction computes, from its operands' shapes; a call's
  /// is `call()`'s (null where none can be: a group's members).
  Value computed(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                 const std::map<std::string, int64_t>& dims, const precision::FunctionRealization* table,
                 const std::function<Value()>& call = nullptr) const;
  runtime::Shape leading_axes(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env) const;
  std::string key_of(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
                     core::Numerics context, FrameMode mode, int reuse_from) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> run_dims_;
  const precision::Realization* r_;
  kernel::KernelCatalog& catalog_;
  interp::Remat remat_;
  bool library_kernels_;
  HostProgram& out_;
  std::vector<Frame> frames_;  ///< by instance
  std::map<std::string, int> by_key_;
};

void geometry_key(const Value& v, std::string& key, int depth = 0) {
  if (depth > 64) throw std::logic_error("internal: a value nests too deeply");
  switch (v.kind) {
    case Value::Kind::Tensor:
      key += fmt::format("t{}:{}[{}]", static_cast<int>(v.tensor.kind), static_cast<int>(v.type),
                         fmt::join(v.tensor.shape, ","));
      return;
    case Value::Kind::Key:
      key += "k";
      return;
    case Value::Kind::Host:
      key += "h";
      return;
    case Value::Kind::Tuple:
      key += "(";
      for (const Value& e : v.elements) {
        geometry_key(e, key, depth + 1);
        key += ";";
      }
      key += ")";
      return;
    case Value::Kind::Params:
      key += "{";
      if (v.params)
        for (const auto& [path, t] : *v.params) key += fmt::format("{}[{}];", path, fmt::join(t.shape, ","));
      key += "}";
      return;
  }
}

std::string Walk::key_of(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
                         core::Numerics context, FrameMode mode, int reuse_from) const {
  std::string key =
      fmt::format("{}|{}|{}|{}|", function, static_cast<int>(context), static_cast<int>(mode), reuse_from);
  for (const auto& [name, size] : dims) key += fmt::format("{}={},", name, size);
  key += "|";
  for (const Value& a : args) {
    geometry_key(a, key);
    key += "|";
  }
  return key;
}

runtime::Shape Walk::leading_axes(const core::Function& fn, const core::Instr& in,
                                  const std::vector<Value>& env) const {
  if (!in.type.is_tensor() || !in.type.tensor.rest) return {};
  auto operand_rest = [&](size_t k) {
    const int a = in.args.at(k);
    return rest_of(env.at(static_cast<size_t>(a)), fn.type_of(a).tensor.axes.size());
  };
  if (core::op_info(in.op).elementwise) {
    // The result's `...` is its operands' broadcast, as the runtime aligns them.
    runtime::Shape rest;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.empty() || in.align.at(k).rest) rest = broadcast(rest, operand_rest(k));
    return rest;
  }
  switch (in.op) {
    // The `...` of the operand the result takes its shape from: the ids of a
    // gather, the primal operand of a cotangent.
    case Op::Gather:
    case Op::Pick:
    case Op::SumTo:
    case Op::Expand:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::GatherGrad:
    case Op::ContractGradA:
    case Op::Scan:       // x's
    case Op::ScanGradA:  // h's, which is a's
      return operand_rest(1);
    case Op::ContractGradB:
      return operand_rest(2);
    // A draw like x has x's `...`.
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
      if (const int like = core::draw_like(in); like >= 0) return operand_rest(static_cast<size_t>(like));
      break;
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::OneHot:
    case Op::ZerosLike:
      return operand_rest(0);
    case Op::Iota:
      return {};  // no operand: only its own axis
    // Element-wise (taken above), or values whose shape is not computed here.
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Real:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::Neg:
    case Op::Abs:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Relu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Not:
    case Op::Cast:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::PowConst:
    case Op::Pow:
    case Op::Min:
    case Op::Max:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::KeySplit:
    case Op::Call:
    case Op::Fold:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;
  }
  throw std::logic_error(fmt::format("internal: {} ({}) has `...` axes the host program cannot place",
                                     core::site_name(fn, in.id), core::op_info(in.op).spelling));
}

Value Walk::computed(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                     const std::map<std::string, int64_t>& dims, const precision::FunctionRealization* table,
                     const std::function<Value()>& call) const {
  auto arg = [&](size_t k) -> const Value& { return env.at(static_cast<size_t>(in.args.at(k))); };
  Value v;
  switch (in.op) {
    case Op::Const:
    case Op::Real:
      v = shaped(runtime::ElemKind::Real, {});
      break;
    case Op::HostConst:
    case Op::ConstInt:
    case Op::ConstBool:
      return Value::of_host(0);
    case Op::Field: {
      const interp::ParamMap& tree = *arg(0).params;
      if (in.type.kind == elab::TypeKind::Tensor) {
        const std::string& name = in.attr<core::attr::Member>().name;
        auto it = tree.find(name);
        if (it == tree.end()) throw runtime::RuntimeError(fmt::format("parameter `{}` is missing", name));
        v = shaped(it->second.kind, it->second.shape);
        break;
      }
      return Value::of_params(
          std::make_shared<const interp::ParamMap>(interp::subtree(tree, in.attr<core::attr::Member>().name)));
    }
    case Op::TupleGet:
    case Op::MakeTuple: {
      interp::ValueStructure values;
      return core::walk_tuple(values, in, arg);
    }
    case Op::KeySplit:
      return Value::of_tuple({Value::of_key(runtime::Key{}), Value::of_key(runtime::Key{})});
    case Op::MakeParams:
      return Value::of_params(arg(0).params);  // the model tree's shapes
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
      if (!call)
        throw std::logic_error(fmt::format("internal: {} is a call inside a group", core::site_name(fn, in.id)));
      return call();
    case Op::Neg:
    case Op::Abs:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Relu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Not:
    case Op::Cast:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::PowConst:
    case Op::Pow:
    case Op::Min:
    case Op::Max:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::Iota:
    case Op::OneHot:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::GatherGrad:
    case Op::ZerosLike: {
      // The static type names every axis but the `...` ones; the operands give those.
      runtime::Shape shape = leading_axes(fn, in, env);
      for (const elab::Axis& a : in.type.tensor.axes) shape.push_back(interp::eval_size(a.size, dims));
      v = shaped(elem_kind(in.type.tensor.elem), std::move(shape));
      break;
    }
  }
  // Stored at its site's type, as the interpreter's store() leaves it.
  if (table && v.tensor.is_real())
    if (const auto& site = table->values.at(static_cast<size_t>(in.id));
        site && site->reason != precision::Reason::Carried)
      v.type = site->storage;
  return v;
}

struct Walk::Callees : interp::RunDims, interp::ValueStructure {
  using Forward = int;  ///< a kept forward: the instance that computed it
  Walk& walk;
  HostStep& step;       ///< the call's, which records the instances it runs
  int depth;            ///< of the calling frame
  core::Numerics mode;  ///< the numerics form the callee runs in

  Value evaluate(const core::Evaluation<Forward>& e, const std::vector<Value>& args, const Dims& dims) {
    const FrameMode frame = e.reuse ? FrameMode::Reusing : e.keep ? FrameMode::Kept : FrameMode::Fused;
    const int child = walk.instance(e.function, args, dims, mode, frame, e.reuse ? *e.reuse : -1, depth + 1);
    if (e.keep) *e.keep = child;
    const size_t copy = static_cast<size_t>(e.copy);
    switch (e.role) {
      case core::CallRole::Call:
        step.callee = child;
        break;
      case core::CallRole::FoldCopy:
      case core::CallRole::VjpForward:
        if (copy == 0) step.callee = child;
        step.copies.push_back(child);
        break;
      case core::CallRole::VjpCopy:  // the last copy's first
        if (step.vjp_copies.size() <= copy) step.vjp_copies.resize(copy + 1);
        step.vjp_copies[copy] = child;
        break;
    }
    return walk.result(child);
  }
  /// A fold copy's parameters: every leaf without its leading (stack) axis, shapes only.
  static Value copy_of(const Value& stacked, int64_t) {
    auto tree = std::make_shared<interp::ParamMap>();
    for (const auto& [path, t] : *stacked.params) {
      if (t.shape.empty()) throw interp::EvalError(fmt::format("stacked parameter `{}` has no stack axis", path));
      runtime::Tensor s;
      s.kind = t.kind;
      s.shape.assign(t.shape.begin() + 1, t.shape.end());
      tree->emplace(path, std::move(s));
    }
    return Value::of_params(std::move(tree));
  }
  /// The stacked gradients have the stacked parameters' shapes.
  static Value stack(const Value& stacked, const std::vector<Value>&) { return Value::of_params(stacked.params); }
};

Value Walk::call_step(int id, const core::Instr& in, Frame& frame, bool keeping, int depth) {
  // Copied: the walk below adds instances, which moves out_.functions.
  const core::Numerics context = out_.functions[static_cast<size_t>(id)].context;
  const std::map<std::string, int64_t> dims = out_.functions[static_cast<size_t>(id)].dims;
  HostStep s;
  s.value = in.id;
  s.reads = in.args;
  s.kind = in.op == Op::Call   ? HostStep::Kind::Call
           : in.op == Op::Fold ? HostStep::Kind::Fold
                               : HostStep::Kind::FoldVjp;
  Callees callees{
      {prog_, run_dims_}, {}, *this, s, depth, in.numerics != core::Numerics::Default ? in.numerics : context};
  Value result = core::walk_structural(
      callees, in, [&](size_t k) -> const Value& { return frame.env.at(static_cast<size_t>(in.args.at(k))); }, dims,
      keeping ? &frame.kept : nullptr);
  if (in.op != Op::Call) s.count = callees.copies(in, dims);
  if (in.op == Op::FoldVjp) s.vjp = s.vjp_copies.empty() ? -1 : s.vjp_copies.back();
  out_.functions[static_cast<size_t>(id)].steps.push_back(std::move(s));
  return result;
}

int Walk::instance(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
                   core::Numerics context, FrameMode mode, int reuse_from, int depth) {
  const core::Function& fn = interp::frame_function(prog_, function, args.size(), depth);
  const precision::FunctionRealization* table = interp::realized_table(r_, prog_, function, context, args);
  const std::string key = key_of(function, args, dims, context, mode, reuse_from);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  const int id = static_cast<int>(out_.functions.size());
  by_key_.emplace(key, id);
  {
    HostFunction h;
    h.function = function;
    h.context = context;
    h.signature = table ? table->signature : std::string();
    h.mode = mode;
    h.table = table;
    h.dims = dims;
    h.reused_from = reuse_from;
    out_.functions.push_back(std::move(h));
  }
  frames_.emplace_back();
  Frame frame;
  frame.env.assign(static_cast<size_t>(fn.value_count()) + 1, Value{});
  for (size_t i = 0; i < args.size(); ++i) frame.env[i + 1] = args[i];
  if (library_kernels_) {
    // The whole function as one library kernel: one step from its arguments
    // to its result. A reusing vjp takes nothing of its kept forward, which
    // holds its arguments and result alone.
    const LibraryChoice choice = choose_library_kernel(prog_, function, args, table, r_);
    out_.functions[static_cast<size_t>(id)].library_why_not = choice.why_not;
    if (choice.kernel != LibraryKernel::None) {
      HostStep s;
      s.kind = HostStep::Kind::Library;
      s.library = choice.kernel;
      s.value = fn.result_value;
      for (size_t i = 0; i < args.size(); ++i) s.reads.push_back(static_cast<int>(i) + 1);
      std::vector<runtime::Shape> shapes;
      for (const Value& a : args) shapes.push_back(a.tensor.shape);
      std::vector<Value> results;
      for (runtime::Shape& shape : library_result_shapes(choice.kernel, shapes))
        results.push_back(shaped(runtime::ElemKind::Real, std::move(shape), runtime::FloatType::F32));
      frame.env[static_cast<size_t>(fn.result_value)] = library_result(
          choice.kernel, std::move(results), [](std::vector<Value> parts) { return Value::of_tuple(std::move(parts)); });
      out_.functions[static_cast<size_t>(id)].steps.push_back(std::move(s));
      frames_[static_cast<size_t>(id)] = std::move(frame);
      return id;
    }
  }
  size_t first = 0;
  if (mode == FrameMode::Reusing) {
    // The vjp's forward instructions are its primal's, one for one, each
    // under its own number: their values come from the kept forward.
    const core::Function& primal = prog_.functions.at(static_cast<size_t>(fn.primal));
    const Frame& from = frames_.at(static_cast<size_t>(reuse_from));
    for (; first < primal.body.size(); ++first)
      frame.env[static_cast<size_t>(fn.body[first].id)] = from.env.at(static_cast<size_t>(primal.body[first].id));
    frame.kept = from.kept.for_vjp(primal, fn);
  }
  out_.functions[static_cast<size_t>(id)].first = static_cast<int>(first);
  const bool keeping = remat_ == interp::Remat::Store && (fn.primal >= 0 || mode == FrameMode::Kept);
  const bool fused = mode != FrameMode::Kept;
  const interp::LaunchGroups& groups = catalog_.groups(function, fused, table);
  const int first_value = static_cast<int>(fn.args.size()) + 1 + static_cast<int>(first);
  auto instr_of = [&](int v) -> const core::Instr& {
    return fn.body.at(static_cast<size_t>(v - static_cast<int>(fn.args.size()) - 1));
  };
  for (size_t k = first; k < fn.body.size(); ++k) {
    const core::Instr& in = fn.body[k];
    const core::Instr* at = &in;
    try {
      if (groups.computed_by[static_cast<size_t>(in.id)] != 0) continue;
      const std::vector<int>& members = groups.steps[static_cast<size_t>(in.id)];
      if (members.empty()) {
        // A host step, or a call that appends its own.
        bool called = false;
        Value v = computed(fn, in, frame.env, dims, table, [&] {
          called = true;
          return call_step(id, in, frame, keeping, depth);
        });
        if (!called) {
          HostStep h;
          h.value = in.id;
          h.reads = in.args;
          out_.functions[static_cast<size_t>(id)].steps.push_back(std::move(h));
        }
        frame.env[static_cast<size_t>(in.id)] = std::move(v);
        continue;
      }
      const kernel::LaunchOutcome& o = catalog_.outcome(function, in.id, fused, frame.env, table);
      HostStep s;
      s.value = in.id;
      s.kind = o.kernel >= 0 ? HostStep::Kind::Kernel : HostStep::Kind::Reference;
      s.kernel = o.kernel;
      s.inputs = o.inputs;
      s.why = o.why;
      s.launch_steps = o.steps;
      for (int m : members) {
        if (m < first_value) continue;
        at = &instr_of(m);
        frame.env[static_cast<size_t>(m)] = computed(fn, *at, frame.env, dims, table);
        s.steps.push_back(m);
        // A kernel reads its input buffers (an expand's shape operand has
        // none); the reference kernels read every operand from outside the group.
        if (o.kernel < 0)
          for (int a : at->args)
            if (std::find(members.begin(), members.end(), a) == members.end() &&
                std::find(s.reads.begin(), s.reads.end(), a) == s.reads.end())
              s.reads.push_back(a);
      }
      if (o.kernel >= 0)
        for (int v : o.inputs)
          if (v > 0 && std::find(s.reads.begin(), s.reads.end(), v) == s.reads.end()) s.reads.push_back(v);
      if (o.kernel >= 0) {
        // What the kernel stores is what the walk computed for its root.
        const kernel::Buffer& b = catalog_.kernels()[static_cast<size_t>(o.kernel)].kernel.buffers.back();
        const Value& v = frame.env[static_cast<size_t>(in.id)];
        if (b.shape != v.tensor.shape)
          throw std::logic_error(fmt::format("internal: the kernel of {} stores {}, the host program expects {}",
                                             core::site_name(fn, in.id), runtime::shape_string(b.shape),
                                             runtime::shape_string(v.tensor.shape)));
      }
      out_.functions[static_cast<size_t>(id)].steps.push_back(std::move(s));
    } catch (const runtime::RuntimeError& e) {
      throw interp::error_at(prog_, fn, *at, e);
    }
  }
  frames_[static_cast<size_t>(id)] = std::move(frame);
  return id;
}

/// How many times one call of the entry runs each instance.
void count(HostProgram& host, int instance, int64_t times, int depth = 0) {
  if (depth > interp::kMaxCallDepth) throw std::logic_error("internal: the host program's calls nest too deeply");
  HostFunction& h = host.functions[static_cast<size_t>(instance)];
  h.evaluations += times;
  for (const HostStep& s : h.steps) {
    switch (s.kind) {
      case HostStep::Kind::Kernel:
        host.launches.at(static_cast<size_t>(s.kernel)) += times;
        host.kernel_launches += times;
        break;
      case HostStep::Kind::Reference:
        host.reference_launches += times * s.launch_steps;
        break;
      case HostStep::Kind::Call:
        count(host, s.callee, times, depth + 1);
        break;
      case HostStep::Kind::Fold:
      case HostStep::Kind::FoldVjp:
        for (int c : s.copies) count(host, c, times, depth + 1);
        for (int c : s.vjp_copies) count(host, c, times, depth + 1);
        break;
      case HostStep::Kind::Host:
        break;
      case HostStep::Kind::Library:
        host.library_launches += times;
        break;
    }
  }
}

}  // namespace

int64_t element_bytes(runtime::ElemKind elem, runtime::FloatType type) {
  return elem == runtime::ElemKind::Real   ? runtime::float_type_info(type).storage_bits / 8
         : elem == runtime::ElemKind::I32  ? 4
         : elem == runtime::ElemKind::Bool ? 1
                                           : 8;
}

int64_t buffer_bytes(const Value& v) {
  return v.kind == Value::Kind::Tensor ? v.tensor.size() * element_bytes(v.tensor.kind, v.type) : 0;
}

HostProgram build_host(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                       const precision::Realization* realization, std::shared_ptr<kernel::KernelCatalog> catalog,
                       interp::Remat remat, const std::vector<interp::Value>* arguments, bool library_kernels,
                       int threads) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  if (realization && realization->entry != entry)
    throw std::logic_error(fmt::format("internal: the realization is of `{}`, not of `{}`",
                                       prog.functions.at(static_cast<size_t>(realization->entry)).name, fn.name));
  HostProgram host;
  host.entry = entry;
  host.catalog = catalog;
  std::vector<Value> args;
  if (arguments) {
    if (arguments->size() != fn.args.size())
      throw interp::EvalError(
          fmt::format("`{}` takes {} arguments, given {}", fn.name, fn.args.size(), arguments->size()));
    for (const Value& a : *arguments) args.push_back(geometry_of(a, realization));
  } else {
    for (const core::FnArg& a : fn.args) args.push_back(entry_value(prog, a.type, a.name, dims, realization, 0));
  }
  host.arguments = args;
  host.remat = remat;
  host.threads = std::max(1, threads);
  Walk walk(prog, dims, realization, *catalog, remat, library_kernels, host);
  host.root = walk.instance(entry, args, dims, core::Numerics::Default, FrameMode::Fused, -1, 0);
  host.launches.assign(catalog->kernels().size(), 0);
  count(host, host.root, 1);
  // Every value's bytes and life, within its instance.
  for (size_t i = 0; i < host.functions.size(); ++i) {
    HostFunction& h = host.functions[i];
    const core::Function& f = prog.functions[static_cast<size_t>(h.function)];
    const std::vector<Value>& env = walk.env(static_cast<int>(i));
    // A value read out of an argument (θ.w, a fold copy's slice of the
    // stacked parameters, an element of an input tuple), directly or through
    // such reads, is the caller's storage shared (runtime/real_storage.h),
    // not a copy: it holds no bytes of its own, as the argument holds none in
    // this frame. A tuple's element keeps its type; a parameter read at a
    // half type is rounded from its master into storage of its own, one read
    // at f64 or f32 is not (interp::store_at_site), which takes an f32 site
    // to read an f32 master (as every uniform policy stores them).
    std::vector<bool> borrowed(env.size(), false);
    for (size_t a = 0; a < f.args.size(); ++a) borrowed.at(a + 1) = true;
    for (const core::Instr& in : f.body) {
      const Value& x = env.at(static_cast<size_t>(in.id));
      const bool rounded =
          in.op == Op::Field && x.kind == Value::Kind::Tensor && x.tensor.is_real() && precision::is_half(x.type);
      if ((in.op == Op::Field || in.op == Op::TupleGet) && !rounded && borrowed.at(static_cast<size_t>(in.args.at(0))))
        borrowed.at(static_cast<size_t>(in.id)) = true;
    }
    std::map<int, HostBuffer> buffers;
    auto buffer = [&](int v) -> HostBuffer& {
      HostBuffer& b = buffers[v];
      if (b.value == 0) {
        const Value& x = env.at(static_cast<size_t>(v));
        b.value = v;
        b.kind = x.kind;
        b.elem = x.tensor.kind;
        b.type = x.type;
        b.shape = x.tensor.shape;
        const bool argument = static_cast<size_t>(v) <= f.args.size();  // printed at its bytes, held by the caller
        b.bytes = borrowed.at(static_cast<size_t>(v)) && !argument ? 0 : buffer_bytes(x);
      }
      return b;
    };
    for (size_t a = 0; a < f.args.size(); ++a) buffer(static_cast<int>(a) + 1);
    for (size_t k = 0; k < h.steps.size(); ++k) {
      const HostStep& s = h.steps[k];
      for (int r : s.reads) buffer(r).last_read = static_cast<int>(k);
      for (int w : s.steps.empty() ? std::vector<int>{s.value} : s.steps)
        if (s.kind != HostStep::Kind::Kernel || w == s.value) buffer(w).first_write = static_cast<int>(k);
    }
    buffer(f.result_value).last_read = static_cast<int>(h.steps.size());
    for (auto& [v, b] : buffers) h.buffers.push_back(std::move(b));
  }
  return host;
}

}  // namespace quire::compile
