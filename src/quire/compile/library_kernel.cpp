#include "quire/compile/library_kernel.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/runtime/layer_norm.h"

namespace quire::compile {

using interp::Value;
using runtime::FloatType;

const char* library_kernel_name(LibraryKernel k) {
  switch (k) {
    case LibraryKernel::None:
      return "none";
    case LibraryKernel::Attention:
      return "attention";
    case LibraryKernel::CausalAttention:
      return "causal_attention";
    case LibraryKernel::AttentionVjp:
      return "attention.vjp";
    case LibraryKernel::CausalAttentionVjp:
      return "causal_attention.vjp";
    case LibraryKernel::CausalSelfAttention:
      return "causal_self_attention";
    case LibraryKernel::CausalSelfAttentionVjp:
      return "causal_self_attention.vjp";
    case LibraryKernel::LayerNorm:
      return "layer_norm";
    case LibraryKernel::LayerNormVjp:
      return "layer_norm.vjp";
    case LibraryKernel::DropoutAddLayerNorm:
      return "dropout_add_layer_norm";
    case LibraryKernel::DropoutAddLayerNormVjp:
      return "dropout_add_layer_norm.vjp";
  }
  return "?";
}

namespace {

bool is_vjp(LibraryKernel k) {
  return k == LibraryKernel::AttentionVjp || k == LibraryKernel::CausalAttentionVjp ||
         k == LibraryKernel::CausalSelfAttentionVjp || k == LibraryKernel::LayerNormVjp ||
         k == LibraryKernel::DropoutAddLayerNormVjp;
}

bool is_norm(LibraryKernel k) { return k == LibraryKernel::LayerNorm || k == LibraryKernel::LayerNormVjp; }

bool is_residual(LibraryKernel k) {
  return k == LibraryKernel::DropoutAddLayerNorm || k == LibraryKernel::DropoutAddLayerNormVjp;
}

bool is_self(LibraryKernel k) {
  return k == LibraryKernel::CausalSelfAttention || k == LibraryKernel::CausalSelfAttentionVjp;
}

/// The arguments that are f32 tensors: q, k, v (and ct); qkv (and ct); x, γ,
/// β (and ct); y, x, γ, β (whose vjp's ct is a tuple).
std::vector<size_t> tensor_arguments(LibraryKernel k) {
  if (is_residual(k)) return {1, 3, 4, 5};
  if (is_self(k)) return is_vjp(k) ? std::vector<size_t>{0, 4} : std::vector<size_t>{0};
  if (is_norm(k)) return is_vjp(k) ? std::vector<size_t>{0, 1, 2, 4} : std::vector<size_t>{0, 1, 2};
  return is_vjp(k) ? std::vector<size_t>{0, 1, 2, 3} : std::vector<size_t>{0, 1, 2};
}

/// Why `table`'s sites are not what the kernel computes ("" when they are):
/// every real site f32, read as it is, reductions accumulating in f32 and
/// products one fused multiply-add a step.
std::string sites_block(const core::Function& fn, const precision::FunctionRealization& table) {
  for (const core::Instr& in : fn.body) {
    if (static_cast<size_t>(in.id) >= table.values.size()) continue;
    const auto& site = table.values[static_cast<size_t>(in.id)];
    if (!site) continue;
    const std::string where = fmt::format("{}/{}", fn.name, fn.value_name(in.id));
    if (site->storage != FloatType::F32 || site->read_down)
      return fmt::format("{} is {}, and the kernel computes f32 only", where,
                         runtime::float_type_name(site->read_down ? site->read_as : site->storage));
    const core::OpInfo& op = core::op_info(in.op);
    if ((op.reduction || op.product) && site->accumulator != FloatType::F32)
      return fmt::format("{} accumulates in {}", where, runtime::float_type_name(site->accumulator));
    if (op.product && !site->fma)
      return fmt::format("{} rounds each product step twice (`--product-step separate`); the kernel's are fused",
                         where);
  }
  return "";
}

bool real_f32(const Value& v) {
  return v.kind == Value::Kind::Tensor && v.tensor.is_real() && v.type == FloatType::F32 && v.tensor.rank() >= 1;
}

runtime::Shape leading(const runtime::Shape& s) { return runtime::Shape(s.begin(), s.end() - 2); }

}  // namespace

LibraryKernel library_kernel_of(const elab::Program& prog, int function) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(function));
  const int base = fn.primal >= 0 ? fn.primal : function;
  if (!prog.in_prelude(base)) return LibraryKernel::None;
  const std::string& name = prog.functions.at(static_cast<size_t>(base)).name;
  const bool vjp = fn.primal >= 0;
  // A vjp with respect to some arguments only (`grad(f, wrt = x)` of the
  // function itself) returns other cotangents than the kernel's.
  if (vjp && fn.name != prog.functions.at(static_cast<size_t>(base)).name + ".vjp") return LibraryKernel::None;
  if (name == "attention") return vjp ? LibraryKernel::AttentionVjp : LibraryKernel::Attention;
  if (name == "causal_attention") return vjp ? LibraryKernel::CausalAttentionVjp : LibraryKernel::CausalAttention;
  if (name == "causal_self_attention")
    return vjp ? LibraryKernel::CausalSelfAttentionVjp : LibraryKernel::CausalSelfAttention;
  if (name == "layer_norm") return vjp ? LibraryKernel::LayerNormVjp : LibraryKernel::LayerNorm;
  if (name == "dropout_add_layer_norm")
    return vjp ? LibraryKernel::DropoutAddLayerNormVjp : LibraryKernel::DropoutAddLayerNorm;
  return LibraryKernel::None;
}

std::string library_types_block(const elab::Program& prog, int function, const precision::Realization* r) {
  if (!r) return "its sites are f64, and the kernel computes f32 only";
  const core::Function& fn = prog.functions.at(static_cast<size_t>(function));
  const int base = fn.primal >= 0 ? fn.primal : function;
  // Every table the run has of the function and of its vjp, and of their
  // callees (the mask, the softmax and their vjps): a forward kept for a
  // reverse sweep holds its result alone, so the two take the kernel together.
  auto related = [&](int f) {
    const core::Function& g = prog.functions.at(static_cast<size_t>(f));
    return f == base || g.primal == base;
  };
  for (const precision::FunctionRealization& t : r->functions) {
    if (!related(t.function)) continue;
    const core::Function& g = prog.functions.at(static_cast<size_t>(t.function));
    for (const precision::Carry& c : t.args)
      if (c.type && *c.type != FloatType::F32)
        return fmt::format("`{}` is called with an argument of {}, and the kernel computes f32 only", g.name,
                           runtime::float_type_name(*c.type));
    if (std::string why = sites_block(g, t); !why.empty()) return why;
    for (const core::Instr& in : g.body) {
      if (in.op != core::Op::Call) continue;
      const core::Function& callee = prog.functions.at(static_cast<size_t>(in.callee));
      for (const precision::FunctionRealization& ct : r->functions)
        if (ct.function == in.callee)
          if (std::string why = sites_block(callee, ct); !why.empty()) return why;
    }
  }
  return "";
}

LibraryChoice choose_library_kernel(const elab::Program& prog, int function, const std::vector<Value>& args,
                                    const precision::FunctionRealization* table, const precision::Realization* r) {
  const LibraryKernel kernel = library_kernel_of(prog, function);
  if (kernel == LibraryKernel::None) return {};
  auto refuse = [](std::string why) { return LibraryChoice{LibraryKernel::None, std::move(why)}; };
  if (!table || !r) return refuse("its sites are f64, and the kernel computes f32 only");
  const size_t arity = is_residual(kernel)                     ? (is_vjp(kernel) ? 8 : 7)
                       : is_self(kernel) || is_norm(kernel) ? (is_vjp(kernel) ? 5 : 4)
                                                            : (is_vjp(kernel) ? 4 : 3);
  if (args.size() != arity) return refuse(fmt::format("it is called with {} arguments", args.size()));
  for (size_t i : tensor_arguments(kernel)) {
    const Value& a = args[i];
    if (!real_f32(a))
      return refuse(
          a.kind == Value::Kind::Tensor && a.tensor.is_real()
              ? fmt::format("an argument is {}, and the kernel computes f32 only", runtime::float_type_name(a.type))
              : std::string("an argument is not a real tensor"));
  }
  std::vector<runtime::Shape> shapes;
  for (const Value& a : args) shapes.push_back(a.kind == Value::Kind::Tensor ? a.tensor.shape : runtime::Shape{});
  if (is_residual(kernel)) {
    const runtime::Shape& x = shapes[3];
    if (shapes[1] != x) return refuse("y and x differ in shape (a broadcast operand)");
    if (shapes[4] != runtime::Shape{x.back()} || shapes[5] != runtime::Shape{x.back()})
      return refuse("γ and β are not vectors of x's last axis");
    if (args[0].kind != Value::Kind::Key || args[2].kind != Value::Kind::Host || args[6].kind != Value::Kind::Host)
      return refuse("its key, p and eps are not a key and two numbers");
    if (is_vjp(kernel)) {
      const Value& ct = args[7];
      if (ct.kind != Value::Kind::Tuple || ct.elements.size() != 2 || !real_f32(ct.elements[0]) ||
          !real_f32(ct.elements[1]) || ct.elements[0].tensor.shape != x || ct.elements[1].tensor.shape != x)
        return refuse("its cotangents are not two f32 tensors of the result's shape");
    }
  } else if (is_norm(kernel)) {
    const runtime::Shape& x = shapes[0];
    if (shapes[1] != runtime::Shape{x.back()} || shapes[2] != runtime::Shape{x.back()} ||
        args[3].kind != Value::Kind::Host)
      return refuse("γ and β are not vectors of x's last axis, or eps is not a number");
  } else if (is_self(kernel)) {
    if (shapes[0].size() < 2) return refuse("qkv has fewer than two axes");
    const runtime::Shape& qkv = shapes[0];
    if (args[1].kind != Value::Kind::Tensor || args[1].tensor.rank() != 1 || args[1].tensor.shape[0] <= 0 ||
        args[2].kind != Value::Kind::Host || args[3].kind != Value::Kind::Key)
      return refuse("its heads, p and key are not an i32 vector, a number and a key");
    const int64_t heads = args[1].tensor.shape[0];
    if (qkv.back() % 3 != 0 || (qkv.back() / 3) % heads != 0)
      return refuse(fmt::format("{} heads do not divide a third of {} columns", heads, qkv.back()));
  } else {
    const runtime::Shape &q = shapes[0], &k = shapes[1], &v = shapes[2];
    if (q.size() < 2 || k.size() < 2 || v.size() < 2) return refuse("q, k or v has fewer than two axes");
    if (leading(q) != leading(k) || leading(q) != leading(v))
      return refuse("q, k and v do not share their leading axes (a broadcast operand)");
  }
  if (is_vjp(kernel) && !is_residual(kernel) && shapes.back() != library_result_shapes(kernel, shapes)[0])
    return refuse("its cotangent does not have the result's shape");
  if (std::string why = library_types_block(prog, function, r); !why.empty()) return refuse(why);
  return {kernel, ""};
}

std::vector<LibraryVerdict> library_plan(const elab::Program& prog, const precision::Realization& r) {
  std::vector<LibraryVerdict> plan;
  for (const precision::FunctionRealization& t : r.functions)
    if (library_kernel_of(prog, t.function) != LibraryKernel::None)
      plan.push_back({&t, library_types_block(prog, t.function, &r)});
  return plan;
}

namespace {

/// The name of the prelude function that value `value` of `fn` is a call of
/// ("" when it is not a call, or not of a prelude function).
std::string prelude_call_at(const elab::Program& prog, const core::Function& fn, int value) {
  const int first = static_cast<int>(fn.args.size()) + 1;
  if (value < first || value >= first + static_cast<int>(fn.body.size())) return "";
  const core::Instr& in = fn.body[static_cast<size_t>(value - first)];
  if (in.op != core::Op::Call || !prog.in_prelude(in.callee)) return "";
  return prog.functions.at(static_cast<size_t>(in.callee)).name;
}

}  // namespace

std::vector<ResidualNormHint> residual_norm_hints(const elab::Program& prog, const precision::Realization& r) {
  std::vector<ResidualNormHint> hints;
  std::vector<bool> seen(prog.functions.size(), false);
  for (const precision::FunctionRealization& t : r.functions) {
    // A vjp's forward lines are its primal's, which says it already.
    const bool vjp = prog.functions.at(static_cast<size_t>(t.function)).primal >= 0;
    if (seen.at(static_cast<size_t>(t.function)) || prog.in_prelude(t.function) || vjp) continue;
    seen[static_cast<size_t>(t.function)] = true;
    const core::Function& fn = prog.functions.at(static_cast<size_t>(t.function));
    const int first = static_cast<int>(fn.args.size()) + 1;
    for (const core::Instr& in : fn.body) {
      if (prelude_call_at(prog, fn, in.id) != "layer_norm" || in.args.empty()) continue;
      const int sum = in.args[0];
      if (sum < first || sum >= first + static_cast<int>(fn.body.size())) continue;
      const core::Instr& add = fn.body[static_cast<size_t>(sum - first)];
      if (add.op != core::Op::Add || add.args.size() != 2) continue;
      for (int operand : add.args)
        if (prelude_call_at(prog, fn, operand) == "dropout") {
          hints.push_back({t.function, in.id});
          break;
        }
    }
  }
  return hints;
}

std::string print_library_plan(const elab::Program& prog, const precision::Realization& r) {
  std::string out;
  for (const LibraryVerdict& v : library_plan(prog, r)) {
    const precision::FunctionRealization& t = *v.table;
    const core::Function& fn = prog.functions.at(static_cast<size_t>(t.function));
    out += fmt::format(
        "  {} {}{}: {}\n", fn.name, t.signature,
        t.context == core::Numerics::Default ? "" : fmt::format(" in {}", core::numerics_name(t.context)),
        v.why_not.empty() ? std::string("one library kernel, the lines fused into one pass (the native backend)")
                          : "its lines: " + v.why_not);
  }
  std::string hints;
  for (const ResidualNormHint& h : residual_norm_hints(prog, r)) {
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    hints += fmt::format("  {}/{}: {}\n", fn.name, fn.value_name(h.value), kResidualNormHint);
  }
  if (!out.empty()) out = "\n-- library kernels: the prelude functions that have one, by realization\n" + out;
  if (!hints.empty()) out += "\n-- residual norms not fused: the layer norm of a sum with a dropout\n" + hints;
  return out;
}

nlohmann::ordered_json library_plan_json(const elab::Program& prog, const precision::Realization& r) {
  nlohmann::ordered_json plan = nlohmann::ordered_json::array();
  for (const LibraryVerdict& v : library_plan(prog, r))
    plan.push_back({{"function", prog.functions.at(static_cast<size_t>(v.table->function)).name},
                    {"signature", v.table->signature},
                    {"library_kernel", v.why_not.empty()},
                    {"why_not", v.why_not}});
  for (const ResidualNormHint& h : residual_norm_hints(prog, r)) {
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    plan.push_back({{"function", fn.name},
                    {"value", fn.value_name(h.value)},
                    {"library_kernel", false},
                    {"why_not", kResidualNormHint}});
  }
  return plan;
}

runtime::AttentionShape library_attention_shape(LibraryKernel k, const std::vector<runtime::Shape>& args) {
  runtime::AttentionShape s;
  if (is_self(k)) {
    if (args.size() < 2 || args[0].size() < 2 || args[1].size() != 1)
      throw std::logic_error("internal: a self-attention kernel without qkv and heads");
    const runtime::Shape& qkv = args[0];
    const int64_t heads = args[1][0];
    s.heads = runtime::element_count(leading(qkv)) * heads;
    s.queries = s.keys = qkv[qkv.size() - 2];
    s.width = s.value_width = qkv.back() / 3 / heads;
    s.causal = true;
    return s;
  }
  if (args.size() < 3) throw std::logic_error("internal: an attention kernel without q, k and v");
  const runtime::Shape &q = args[0], &key = args[1], &v = args[2];
  s.heads = runtime::element_count(leading(q));
  s.queries = q[q.size() - 2];
  s.keys = key[key.size() - 2];
  s.width = q.back();
  s.value_width = v.back();
  s.causal = k == LibraryKernel::CausalAttention || k == LibraryKernel::CausalAttentionVjp;
  return s;
}

std::string library_launch_text(LibraryKernel k, const std::vector<runtime::Shape>& args) {
  if (is_residual(k)) {
    if (args.size() < 4 || args[3].empty()) throw std::logic_error("internal: a residual norm kernel without x");
    return fmt::format("{} rows of {}, the dropout, the residual add and the norm in one pass{}",
                       runtime::element_count(args[3]) / args[3].back(), args[3].back(),
                       is_vjp(k) ? ", and the columns' sums of dγ and dβ" : "");
  }
  if (is_norm(k)) {
    if (args.empty() || args[0].empty()) throw std::logic_error("internal: a layer norm kernel without x");
    return fmt::format("{} rows of {}, one pass {}", runtime::element_count(args[0]) / args[0].back(), args[0].back(),
                       is_vjp(k) ? "and the columns' sums of dγ and dβ" : "over each");
  }
  const runtime::AttentionShape a = library_attention_shape(k, args);
  return fmt::format("{} heads, T = {}, S = {}, D = {}, E = {}, blocks of {} query rows{}", a.heads, a.queries, a.keys,
                     a.width, a.value_width, runtime::kAttentionBlockRows,
                     a.causal ? ", the keys the mask hides skipped" : "");
}

std::vector<runtime::Shape> library_result_shapes(LibraryKernel k, const std::vector<runtime::Shape>& args) {
  if (is_residual(k)) {
    if (args.size() < 6) throw std::logic_error("internal: a residual norm kernel without y, x, γ and β");
    if (!is_vjp(k)) return {args[3], args[3]};
    return {args[3], args[3], args[1], args[3], args[4], args[5]};
  }
  if (is_norm(k)) {
    if (args.size() < 3) throw std::logic_error("internal: a layer norm kernel without x, γ and β");
    if (!is_vjp(k)) return {args[0]};
    return {args[0], args[0], args[1], args[2]};
  }
  if (is_self(k)) {
    if (args.empty() || args[0].empty()) throw std::logic_error("internal: a self-attention kernel without qkv");
    runtime::Shape out = args[0];
    out.back() /= 3;
    if (!is_vjp(k)) return {out};
    return {out, args[0]};
  }
  if (args.size() < 3) throw std::logic_error("internal: an attention kernel without q, k and v");
  runtime::Shape out = args[0];
  out.back() = args[2].back();
  if (!is_vjp(k)) return {out};
  return {out, args[0], args[1], args[2]};
}

size_t library_result_leaves(LibraryKernel k) { return is_residual(k) ? 2 : 1; }

int64_t library_scratch_bytes(LibraryKernel k, const std::vector<runtime::Shape>& args, int threads) {
  if (is_residual(k)) {
    const runtime::Shape& x = args.at(3);
    return runtime::dropout_add_layer_norm_scratch_bytes(runtime::element_count(x) / x.back(), x.back(), threads,
                                                         is_vjp(k));
  }
  if (is_norm(k))
    return runtime::layer_norm_scratch_bytes(runtime::element_count(args.at(0)) / args.at(0).back(),
                                             args.at(0).back(), threads, is_vjp(k));
  const runtime::AttentionShape s = library_attention_shape(k, args);
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(threads, s.heads));
  return slots * runtime::attention_scratch_bytes(s, is_vjp(k));
}

Value run_library_kernel(LibraryKernel k, const std::vector<const Value*>& args, int threads) {
  std::vector<runtime::Shape> shapes;
  for (const Value* a : args) {
    if (!a) throw std::logic_error("internal: a library kernel without an operand");
    shapes.push_back(a->kind == Value::Kind::Tensor ? a->tensor.shape : runtime::Shape{});
  }
  std::vector<const float*> in(args.size(), nullptr);
  for (size_t i : tensor_arguments(k)) {
    if (i >= args.size() || !real_f32(*args[i]))
      throw std::logic_error("internal: a library kernel's operand is not an f32 tensor");
    in[i] = args[i]->tensor.reals.narrow();
  }
  std::vector<Value> results;
  std::vector<float*> out;
  for (runtime::Shape& shape : library_result_shapes(k, shapes)) {
    runtime::Tensor t;
    t.shape = std::move(shape);
    t.reals = runtime::RealStorage::narrow_for_overwrite(static_cast<size_t>(t.size()));
    Value v = Value::of(std::move(t));
    v.type = FloatType::F32;
    results.push_back(std::move(v));
  }
  for (Value& v : results) out.push_back(v.tensor.reals.narrow_for_writing());
  auto tuple = [](std::vector<Value> parts) { return Value::of_tuple(std::move(parts)); };
  const runtime::AttentionShape s =
      is_norm(k) || is_residual(k) ? runtime::AttentionShape{} : library_attention_shape(k, shapes);
  switch (k) {
    case LibraryKernel::Attention:
    case LibraryKernel::CausalAttention:
      runtime::attention_forward_f32(s, in[0], in[1], in[2], out[0], threads);
      return std::move(results[0]);
    case LibraryKernel::AttentionVjp:
    case LibraryKernel::CausalAttentionVjp:
      runtime::attention_backward_f32(s, in[0], in[1], in[2], in[3], out[0], out[1], out[2], out[3], threads);
      return Value::of_tuple(std::move(results));
    case LibraryKernel::CausalSelfAttention:
    case LibraryKernel::CausalSelfAttentionVjp: {
      // dropout(k, w, p) on the weights.
      const int64_t heads = shapes[1][0];
      const runtime::AttentionLayout layout = runtime::AttentionLayout::fused_qkv(s, heads);
      const runtime::DropoutDraw dropout = runtime::DropoutDraw::of(args[3]->key, args[2]->host);
      const int64_t third = heads * s.width;
      const float* qkv = in[0];
      if (k == LibraryKernel::CausalSelfAttention) {
        runtime::attention_forward_f32(s, layout, dropout, qkv, qkv + third, qkv + 2 * third, out[0], threads);
        return std::move(results[0]);
      }
      float* dqkv = out[1];
      runtime::attention_backward_f32(s, layout, dropout, qkv, qkv + third, qkv + 2 * third, in[4], out[0], dqkv,
                                      dqkv + third, dqkv + 2 * third, true, threads);
      return Value::of_tuple(std::move(results));
    }
    case LibraryKernel::LayerNorm:
    case LibraryKernel::LayerNormVjp: {
      const int64_t width = shapes[0].back();
      const int64_t rows = runtime::element_count(shapes[0]) / width;
      const float eps = static_cast<float>(args[3]->host);  // the lines' `real eps`, an f32 site
      if (k == LibraryKernel::LayerNorm) {
        runtime::layer_norm_forward_f32(rows, width, in[0], in[1], in[2], eps, out[0], threads);
        return std::move(results[0]);
      }
      runtime::layer_norm_backward_f32(rows, width, in[0], in[1], in[2], eps, in[4], out[0], out[1], out[2], out[3],
                                       threads);
      return Value::of_tuple(std::move(results));
    }
    case LibraryKernel::DropoutAddLayerNorm:
    case LibraryKernel::DropoutAddLayerNormVjp: {
      const int64_t width = shapes[3].back();
      const int64_t rows = runtime::element_count(shapes[3]) / width;
      const runtime::DropoutDraw drop = runtime::DropoutDraw::of(args[0]->key, args[2]->host);
      const float eps = static_cast<float>(args[6]->host);  // the lines' `real eps`, an f32 site
      if (k == LibraryKernel::DropoutAddLayerNorm) {
        runtime::dropout_add_layer_norm_forward_f32(rows, width, in[1], drop, in[3], in[4], in[5], eps, out[0], out[1],
                                                    threads);
        return library_result(k, std::move(results), tuple);
      }
      const Value& ct = *args[7];
      if (ct.kind != Value::Kind::Tuple || ct.elements.size() != 2 || !real_f32(ct.elements[0]) ||
          !real_f32(ct.elements[1]))
        throw std::logic_error("internal: a residual norm vjp's cotangents are not two f32 tensors");
      runtime::dropout_add_layer_norm_backward_f32(rows, width, in[1], drop, in[3], in[4], in[5], eps,
                                                   ct.elements[0].tensor.reals.narrow(),
                                                   ct.elements[1].tensor.reals.narrow(), out[0], out[1], out[2],
                                                   out[3], out[4], out[5], threads);
      return library_result(k, std::move(results), tuple);
    }
    case LibraryKernel::None:
      break;
  }
  throw std::logic_error("internal: no library kernel to run");
}

}  // namespace quire::compile
