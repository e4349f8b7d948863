#include "quire/kernel/kernel_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "quire/runtime/gemm.h"
#include "quire/runtime/runtime_error.h"

// The IR's semantics round each product and sum on its own; only an explicit
// `fma` fuses. GCC contracts by default wherever the target has FMA and
// ignores the standard pragma (see runtime/elementwise.cpp).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::kernel {

runtime::ElemKind held_kind(ElemType t) {
  switch (t) {
    case ElemType::I32: return runtime::ElemKind::I32;
    case ElemType::I64: return runtime::ElemKind::I64;
    case ElemType::Bool: return runtime::ElemKind::Bool;
    default: return runtime::ElemKind::Real;
  }
}

namespace {

class Machine {
 public:
  Machine(const Kernel& k, const std::vector<const runtime::Tensor*>& inputs, runtime::Tensor& out)
      : k_(k), vars_(static_cast<size_t>(k.loop_vars), 0), scalars_(static_cast<size_t>(k.scalars), 0.0) {
    buffers_ = inputs;
    buffers_.push_back(&out);
    out_ = &out;
  }

  void run(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      switch (s.kind) {
        case StmtKind::Loop:
          for (int64_t i = 0; i < s.extent; ++i) {
            vars_[static_cast<size_t>(s.var)] = i;
            run(s.body);
          }
          break;
        case StmtKind::Set: scalars_[static_cast<size_t>(s.scalar)] = eval(s.expr); break;
        case StmtKind::Store: {
          const double v = eval(s.expr);
          const int64_t at = offset(s.index);
          if (out_->is_real())
            out_->reals[static_cast<size_t>(at)] = v;
          else
            out_->ints[static_cast<size_t>(at)] =
                out_->kind == runtime::ElemKind::Bool ? (v != 0.0 ? 1 : 0) : static_cast<int64_t>(v);
          break;
        }
      }
    }
  }

 private:
  int64_t offset(const Affine& a) const {
    int64_t at = a.offset;
    for (const auto& [var, coeff] : a.terms) at += coeff * vars_[static_cast<size_t>(var)];
    return at;
  }

  double eval(int i) const {
    const Expr& e = k_.exprs[static_cast<size_t>(i)];
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Load: {
        const runtime::Tensor& t = *buffers_[static_cast<size_t>(e.buffer)];
        const size_t at = static_cast<size_t>(offset(e.index));
        return t.is_real() ? t.reals[at] : static_cast<double>(t.ints[at]);
      }
      case ExprKind::Scalar: return scalars_[static_cast<size_t>(e.scalar)];
      case ExprKind::Unary: return runtime::apply_unary(e.unary, eval(e.a));
      case ExprKind::Binary: {
        const double a = eval(e.a);
        return runtime::apply_binary(e.binary, a, eval(e.b));
      }
      case ExprKind::Where: return eval(e.a) != 0.0 ? eval(e.b) : eval(e.c);
      case ExprKind::Fma: {
        const double a = eval(e.a);
        const double b = eval(e.b);
        const double c = eval(e.c);
        if (e.type == runtime::FloatType::F32)
          return std::fma(static_cast<float>(a), static_cast<float>(b), static_cast<float>(c));
        return std::fma(a, b, c);
      }
      case ExprKind::Round: return runtime::round_to(e.type, eval(e.a));
      case ExprKind::Finite: return std::isfinite(eval(e.a)) ? 1.0 : 0.0;
    }
    return 0.0;
  }

  const Kernel& k_;
  std::vector<const runtime::Tensor*> buffers_;
  runtime::Tensor* out_ = nullptr;
  std::vector<int64_t> vars_;
  std::vector<double> scalars_;
};

}  // namespace

void check_inputs(const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) {
  if (inputs.size() + 1 != k.buffers.size())
    throw runtime::KernelMisuse(
        fmt::format("internal: kernel {}: {} inputs for {} input buffers", k.title, inputs.size(), k.buffers.size() - 1));
  for (size_t b = 0; b < inputs.size(); ++b) {
    const Buffer& buf = k.buffers[b];
    if (!inputs[b]) {
      // A packed product's scratch is the runner's to fill.
      if (k.product && static_cast<int>(b) == k.product->scratch) continue;
      throw runtime::KernelMisuse(fmt::format("internal: kernel {}: input %{} is missing", k.title, b));
    }
    const runtime::Tensor& t = *inputs[b];
    const bool real = held_kind(buf.type) == runtime::ElemKind::Real;
    if (t.shape != buf.shape || t.is_real() != real)
      throw runtime::KernelMisuse(fmt::format("internal: kernel {}: input %{} is {}{}, not {}{}", k.title, b,
                                              runtime::elem_kind_name(t.kind), runtime::shape_string(t.shape),
                                              elem_type_name(buf.type), runtime::shape_string(buf.shape)));
    const size_t held = real ? t.reals.size() : t.ints.size();
    if (held != static_cast<size_t>(t.size()))
      throw runtime::KernelMisuse(fmt::format("internal: kernel {}: input %{} of shape {} holds {} values", k.title, b,
                                              runtime::shape_string(t.shape), held));
  }
}

runtime::Tensor run_kernel(const Kernel& k, const std::vector<const runtime::Tensor*>& given) {
  check_inputs(k, given);
  // A packed product by its definition, one chain at a time.
  runtime::Tensor scratch;
  const std::vector<const runtime::Tensor*> inputs = with_packed_product(
      k, given,
      [](int64_t m, int64_t n, int64_t kk, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
         int64_t b_cs, float* c) { native::sgemm_reference(m, n, kk, a, a_rs, a_cs, b, b_rs, b_cs, c, n, false); },
      scratch);
  runtime::Tensor out = output_for(k);
  Machine(k, inputs, out).run(k.body);
  return out;
}

runtime::Tensor output_for(const Kernel& k, bool narrow) {
  const Buffer& ob = k.buffers.back();
  const runtime::ElemKind kind = held_kind(ob.type);
  if (kind != runtime::ElemKind::Real) return runtime::Tensor::integer(kind, ob.shape);
  const bool zeros = reads_output(k);
  if (!narrow || !held_as_f32(ob.type))
    return zeros ? runtime::Tensor::real(ob.shape) : runtime::Tensor::real_for_overwrite(ob.shape);
  runtime::Tensor out;
  out.shape = ob.shape;
  out.reals = runtime::RealStorage::narrow_for_overwrite(static_cast<size_t>(out.size()));
  if (zeros) std::fill_n(out.reals.narrow_for_writing(), out.reals.size(), 0.0f);
  return out;
}

}  // namespace quire::kernel
