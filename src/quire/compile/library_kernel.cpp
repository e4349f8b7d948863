#include "quire/compile/library_kernel.h"

#include <fmt/format.h>

#include <stdexcept>

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
  }
  return "?";
}

namespace {

bool is_vjp(LibraryKernel k) { return k == LibraryKernel::AttentionVjp || k == LibraryKernel::CausalAttentionVjp; }

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
      return fmt::format("{} rounds each product step twice (`--product-step separate`); the kernel's products "
                         "are fused",
                         where);
  }
  return "";
}

bool real_f32(const Value& v) {
  return v.kind == Value::Kind::Tensor && v.tensor.is_real() && v.type == FloatType::F32 && v.tensor.rank() >= 2;
}

runtime::Shape leading(const runtime::Shape& s) { return runtime::Shape(s.begin(), s.end() - 2); }

}  // namespace

LibraryChoice choose_library_kernel(const elab::Program& prog, int function, const std::vector<Value>& args,
                                    const precision::FunctionRealization* table, const precision::Realization* r) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(function));
  const int base = fn.primal >= 0 ? fn.primal : function;
  if (!prog.in_prelude(base)) return {};
  const std::string& name = prog.functions.at(static_cast<size_t>(base)).name;
  LibraryKernel kernel = LibraryKernel::None;
  if (name == "attention") kernel = fn.primal >= 0 ? LibraryKernel::AttentionVjp : LibraryKernel::Attention;
  if (name == "causal_attention")
    kernel = fn.primal >= 0 ? LibraryKernel::CausalAttentionVjp : LibraryKernel::CausalAttention;
  if (kernel == LibraryKernel::None) return {};
  auto refuse = [](std::string why) { return LibraryChoice{LibraryKernel::None, std::move(why)}; };
  if (!table || !r) return refuse("its sites are f64, and the kernel computes f32 only");
  const size_t arity = is_vjp(kernel) ? 4 : 3;
  if (args.size() != arity) return refuse(fmt::format("it is called with {} arguments", args.size()));
  for (const Value& a : args)
    if (!real_f32(a))
      return refuse(a.kind == Value::Kind::Tensor && a.tensor.is_real()
                        ? fmt::format("an argument is {}, and the kernel computes f32 only",
                                      runtime::float_type_name(a.type))
                        : std::string("an argument is not a real tensor of two axes or more"));
  const runtime::Shape &q = args[0].tensor.shape, &k = args[1].tensor.shape, &v = args[2].tensor.shape;
  if (leading(q) != leading(k) || leading(q) != leading(v))
    return refuse("q, k and v do not share their leading axes (a broadcast operand)");
  if (is_vjp(kernel)) {
    runtime::Shape out = q;
    out.back() = v.back();
    if (args[3].tensor.shape != out) return refuse("its cotangent does not have the result's shape");
  }
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
      if (c.type != FloatType::F32) return refuse(fmt::format("`{}` is called with arguments not all f32", g.name));
    if (std::string why = sites_block(g, t); !why.empty()) return refuse(why);
    for (const core::Instr& in : g.body) {
      if (in.op != core::Op::Call) continue;
      const core::Function& callee = prog.functions.at(static_cast<size_t>(in.callee));
      for (const precision::FunctionRealization& ct : r->functions)
        if (ct.function == in.callee)
          if (std::string why = sites_block(callee, ct); !why.empty()) return refuse(why);
    }
  }
  return {kernel, ""};
}

runtime::AttentionShape library_attention_shape(const std::vector<runtime::Shape>& args) {
  if (args.size() < 3) throw std::logic_error("internal: an attention kernel without q, k and v");
  const runtime::Shape &q = args[0], &k = args[1], &v = args[2];
  runtime::AttentionShape s;
  s.heads = runtime::element_count(leading(q));
  s.queries = q[q.size() - 2];
  s.keys = k[k.size() - 2];
  s.width = q.back();
  s.value_width = v.back();
  return s;
}

std::vector<runtime::Shape> library_result_shapes(LibraryKernel k, const std::vector<runtime::Shape>& args) {
  if (args.size() < 3) throw std::logic_error("internal: an attention kernel without q, k and v");
  runtime::Shape out = args[0];
  out.back() = args[2].back();
  if (!is_vjp(k)) return {out};
  return {out, args[0], args[1], args[2]};
}

int64_t library_scratch_bytes(LibraryKernel k, const std::vector<runtime::Shape>& args, int threads) {
  const runtime::AttentionShape s = library_attention_shape(args);
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(threads, s.heads));
  return slots * runtime::attention_scratch_bytes(s, is_vjp(k));
}

Value run_library_kernel(LibraryKernel k, const std::vector<const Value*>& args, int threads) {
  std::vector<runtime::Shape> shapes;
  std::vector<const float*> in;
  for (const Value* a : args) {
    if (!a || !real_f32(*a)) throw std::logic_error("internal: a library kernel's operand is not an f32 tensor");
    shapes.push_back(a->tensor.shape);
    in.push_back(a->tensor.reals.narrow());
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
  runtime::AttentionShape s = library_attention_shape(shapes);
  switch (k) {
    case LibraryKernel::Attention:
    case LibraryKernel::CausalAttention:
      s.causal = k == LibraryKernel::CausalAttention;
      runtime::attention_forward_f32(s, in[0], in[1], in[2], out[0], threads);
      return std::move(results[0]);
    case LibraryKernel::AttentionVjp:
    case LibraryKernel::CausalAttentionVjp:
      s.causal = k == LibraryKernel::CausalAttentionVjp;
      runtime::attention_backward_f32(s, in[0], in[1], in[2], in[3], out[0], out[1], out[2], out[3], threads);
      return Value::of_tuple(std::move(results));
    case LibraryKernel::None:
      break;
  }
  throw std::logic_error("internal: no library kernel to run");
}

}  // namespace quire::compile
