#include "quire/export/pytorch_ops.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "quire/core/printer.h"
#include "quire/export/pytorch_export.h"

namespace quire::exports {

using core::Op;

std::string python_size(const elab::Size& s) {
  if (std::optional<int64_t> v = s.constant_value()) return std::to_string(*v);
  // Size::str writes "2·D + 1" and "(C / 3) / H". Every quotient of a size
  // divides exactly (elaboration checks it), so Python's floor division,
  // evaluated left to right, gives the same integer.
  std::string text = s.str(), out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "\xc2\xb7") == 0) {  // "·"
      out += " * ";
      i += 2;
    } else if (text.compare(i, 3, " / ") == 0) {
      out += " // ";
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string python_float(double v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  // fmt's shortest form reads back to the same double in Python too; a
  // literal without a point or an exponent would read as an int.
  std::string text = fmt::format("{}", v);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

namespace {

bool is_integral(elab::Elem e) { return e == elab::Elem::I32 || e == elab::Elem::I64 || e == elab::Elem::Bool; }

std::string tuple_text(const std::vector<std::string>& items) {
  if (items.size() == 1) return "(" + items[0] + ",)";
  return fmt::format("({})", fmt::join(items, ", "));
}

std::string list_text(const std::vector<int>& items) { return fmt::format("[{}]", fmt::join(items, ", ")); }

/// The reverse sweep's own operations: they appear only in a vjp, which an
/// export does not take (the gradient is PyTorch's autograd's to compute).
[[noreturn]] void not_exported(const InstrScope& scope, const core::Instr& in) {
  throw ExportError(fmt::format(
      "{}: `{}` is an operation of the reverse sweep and has no PyTorch export; export the function, not its "
      "gradient (PyTorch's autograd differentiates the exported code)",
      core::site_name(scope.fn, in.id), core::op_info(in.op).spelling));
}

class Translation {
 public:
  Translation(const InstrScope& scope, const core::Instr& in) : scope_(scope), in_(in) {}

  const elab::TensorType& type(size_t k) const { return scope_.fn.type_of(in_.args.at(k)).tensor; }
  int explicit_axes(size_t k) const { return static_cast<int>(type(k).axes.size()); }
  std::string operand(size_t k) const { return scope_.value(in_.args.at(k)); }
  /// Operand k as a float64 tensor: an integer or boolean one converted, as
  /// the reference's arithmetic reads it.
  std::string real(size_t k) const {
    return is_integral(type(k).elem) ? operand(k) + ".to(qr.F64)" : operand(k);
  }
  /// An explicit axis of operand k as a dim counted from the right.
  int dim(size_t k, int axis) const { return axis - explicit_axes(k); }

  /// Operand k laid out as the element-wise result (OperandAlignment): left
  /// as it is where PyTorch's broadcasting from the right already aligns it.
  std::string aligned(size_t k, bool to_real) const {
    const elab::OperandAlignment& a = in_.align.at(k);
    const int n = explicit_axes(k), m = static_cast<int>(a.map.size());
    bool native = m >= n && (!a.rest || m == n);
    for (int j = 0; native && j < m; ++j) native = a.map[j] == (j < m - n ? -1 : j - (m - n));
    const std::string x = to_real ? real(k) : operand(k);
    if (native) return x;
    return fmt::format("qr.align({}, {}, {})", x, n, list_text(a.map));
  }

  std::string reduced_dims() const {
    std::vector<std::string> dims;
    for (int a : in_.axes) dims.push_back(std::to_string(dim(0, a)));
    return tuple_text(dims);
  }

  std::string sizes(size_t first) const {
    std::vector<std::string> out;
    for (size_t k = first; k < in_.sizes.size(); ++k) out.push_back(python_size(in_.sizes[k]));
    return out.empty() ? "()" : tuple_text(out);
  }

  /// A draw's shape: its `like` operand's, then its sizes.
  std::string draw_shape() const {
    const int like = core::draw_like(in_);
    if (like < 0) return sizes(0);
    if (in_.sizes.empty()) return fmt::format("tuple({}.shape)", operand(static_cast<size_t>(like)));
    return fmt::format("tuple({}.shape) + {}", operand(static_cast<size_t>(like)), sizes(0));
  }

  std::string call_arguments(std::vector<std::string> args) const {
    for (std::string& kw : scope_.size_keywords(in_)) args.push_back(std::move(kw));
    return fmt::format("{}", fmt::join(args, ", "));
  }

  std::string einsum() const {
    // contract's plan (interp/core_geometry.cpp): `...`, a's axes but the
    // contracted one (each batched with b's axis of the same name), then b's
    // axes that are neither contracted nor batched.
    const elab::TensorType &ta = type(0), &tb = type(1);
    std::string la, lb, out;
    char next = 'a';
    for (size_t i = 0; i < ta.axes.size(); ++i) la += next++;
    lb.assign(tb.axes.size(), ' ');
    lb[static_cast<size_t>(in_.axes[1])] = la[static_cast<size_t>(in_.axes[0])];
    for (const auto& [pa, pb] : in_.pairs) lb[static_cast<size_t>(pb)] = la[static_cast<size_t>(pa)];
    for (char& c : lb)
      if (c == ' ') c = next++;
    const std::string rest = ta.rest || tb.rest ? "..." : "";
    out = rest;
    for (size_t i = 0; i < la.size(); ++i)
      if (static_cast<int>(i) != in_.axes[0]) out += la[i];
    for (size_t j = 0; j < lb.size(); ++j)
      if (la.find(lb[j]) == std::string::npos) out += lb[j];
    return fmt::format("torch.einsum('{}{},{}{}->{}', {}, {})", ta.rest ? "..." : "", la, tb.rest ? "..." : "", lb,
                       out, operand(0), operand(1));
  }

  std::string cast() const {
    const core::CastTarget t = in_.attr<core::attr::CastTo>().target;
    const std::string x = operand(0);
    // A cast to a narrower float rounds once, to nearest even, as PyTorch's
    // conversion does; the value stays a float64 tensor after.
    auto round_to = [&](const char* dtype) { return fmt::format("{}.to(qr.F64).to({}).to(qr.F64)", x, dtype); };
    switch (t) {
      case core::CastTarget::Real:
      case core::CastTarget::F64: return real(0);
      case core::CastTarget::F32:
      case core::CastTarget::F32Acc: return round_to("torch.float32");
      case core::CastTarget::Bf16: return round_to("torch.bfloat16");
      case core::CastTarget::F16: return round_to("torch.float16");
      case core::CastTarget::I32: return x + ".to(torch.int32)";
      case core::CastTarget::I64: return x + ".to(torch.int64)";
      case core::CastTarget::Bool: return fmt::format("({} != 0)", x);
    }
    throw std::logic_error("internal: a cast target outside core::CastTarget");
  }

  /// The value's expression, or nullopt for a fold (several statements).
  std::string expression() const {
    const bool real_result = in_.type.is_tensor() && in_.type.tensor.elem == elab::Elem::Real;
    auto unary = [&](const char* f) { return fmt::format("{}({})", f, real(0)); };
    auto binary_operator = [&](const char* op) {
      return fmt::format("{} {} {}", aligned(0, real_result), op, aligned(1, real_result));
    };
    auto binary_call = [&](const char* f, bool to_real) {
      return fmt::format("{}({}, {})", f, aligned(0, to_real), aligned(1, to_real));
    };
    auto reduce = [&](const char* f, bool to_real) {
      const std::string x = to_real ? real(0) : operand(0);
      if (in_.all_axes) return fmt::format("{}({})", f, x);
      return fmt::format("{}({}, dim={})", f, x, reduced_dims());
    };
    switch (in_.op) {
      case Op::Const: return fmt::format("qr.real({})", python_float(in_.attr<core::attr::Literal>().value));
      case Op::HostConst: return python_float(in_.attr<core::attr::Literal>().value);
      case Op::ConstInt: {
        const int64_t v = in_.attr<core::attr::Integer>().value;
        return in_.type.is_tensor() ? fmt::format("torch.tensor({}, dtype=torch.int64)", v) : std::to_string(v);
      }
      case Op::ConstBool: return in_.attr<core::attr::Boolean>().value ? "True" : "False";
      case Op::Real: return fmt::format("qr.real({})", operand(0));
      case Op::Field: {
        const std::string& name = in_.attr<core::attr::Member>().name;
        if (in_.type.is_tensor()) return fmt::format("{}[\"{}\"]", operand(0), name);
        return fmt::format("qr.subtree({}, \"{}\")", operand(0), name);
      }
      case Op::TupleGet: return fmt::format("{}[{}]", operand(0), in_.attr<core::attr::Element>().index);
      case Op::MakeTuple: {
        std::vector<std::string> items;
        for (size_t k = 0; k < in_.args.size(); ++k) items.push_back(operand(k));
        return items.empty() ? "()" : tuple_text(items);
      }
      case Op::Neg: return fmt::format("torch.neg({})", operand(0));
      case Op::Abs: return fmt::format("torch.abs({})", operand(0));
      case Op::Exp: return unary("torch.exp");
      case Op::Log: return unary("torch.log");
      case Op::Sqrt: return unary("torch.sqrt");
      case Op::Rsqrt: return unary("torch.rsqrt");
      case Op::Tanh: return unary("torch.tanh");
      case Op::Erf: return unary("torch.erf");
      case Op::Sigmoid: return unary("torch.sigmoid");
      case Op::Relu: return unary("torch.relu");
      case Op::Gelu: return unary("F.gelu");
      case Op::GeluTanh: return fmt::format("F.gelu({}, approximate='tanh')", real(0));
      case Op::Silu: return unary("F.silu");
      case Op::Log1p: return unary("torch.log1p");
      case Op::Expm1: return unary("torch.expm1");
      case Op::Softplus: return unary("F.softplus");  // beta 1, threshold 20: quire's own definition
      case Op::Not: return fmt::format("torch.logical_not({})", operand(0));
      case Op::Cast: return cast();
      case Op::Add: return binary_operator("+");
      case Op::Sub: return binary_operator("-");
      case Op::Mul: return binary_operator("*");
      case Op::Div: return fmt::format("{} / {}", aligned(0, true), aligned(1, true));
      case Op::Pow: return binary_call("torch.pow", true);
      case Op::PowConst:
        return fmt::format("torch.pow({}, {})", real(0), python_float(in_.attr<core::attr::Exponent>().value));
      case Op::Min: return binary_call("torch.minimum", real_result);
      case Op::Max: return binary_call("torch.maximum", real_result);
      case Op::Lt: return binary_operator("<");
      case Op::Le: return binary_operator("<=");
      case Op::Gt: return binary_operator(">");
      case Op::Ge: return binary_operator(">=");
      case Op::Eq: return binary_operator("==");
      case Op::Ne: return binary_operator("!=");
      case Op::Where:
        return fmt::format("torch.where({}, {}, {})", aligned(0, false), aligned(1, real_result),
                           aligned(2, real_result));
      case Op::Sum:
        // An integer sum keeps its kind (torch.sum widens to int64).
        return is_integral(type(0).elem) ? fmt::format("{}.to({}.dtype)", reduce("torch.sum", false), operand(0))
                                         : reduce("torch.sum", false);
      case Op::Mean: return reduce("torch.mean", true);
      case Op::ReduceMax: return reduce("torch.amax", false);
      case Op::ReduceMin: return reduce("torch.amin", false);
      case Op::LogSumExp:
        if (in_.all_axes) return fmt::format("torch.logsumexp({0}, dim=qr.all_dims({0}))", real(0));
        return reduce("torch.logsumexp", true);
      case Op::Dot: return fmt::format("torch.tensordot({}, {}, dims=1)", operand(0), operand(1));
      case Op::Contract: return einsum();
      case Op::SplitAxis:
        return fmt::format("qr.split_axis({}, {}, {})", operand(0), dim(0, in_.axes[0]), sizes(0));
      case Op::MergeAxes:
        return fmt::format("qr.merge_axes({}, {}, {})", operand(0), explicit_axes(0), list_text(in_.axes));
      case Op::Transpose:
        return fmt::format("qr.transpose({}, {}, {})", operand(0), explicit_axes(0), list_text(in_.axes));
      case Op::Concat: {
        std::vector<std::string> parts;
        for (size_t k = 0; k < in_.args.size(); ++k) parts.push_back(operand(k));
        return fmt::format("torch.cat([{}], dim={})", fmt::join(parts, ", "), dim(0, in_.axes[0]));
      }
      case Op::Slice: {
        const core::attr::Range& r = in_.attr<core::attr::Range>();
        return fmt::format("qr.slice_axis({}, {}, {}, {}, {})", operand(0), dim(0, in_.axes[0]), r.start, r.stop,
                           r.step);
      }
      // gather's axis is the table's own (a table has no `...`), as the reference reads it.
      case Op::Gather: return fmt::format("qr.gather({}, {}, {})", operand(0), in_.axes[0], operand(1));
      case Op::Pick: return fmt::format("qr.pick({}, {}, {})", operand(0), dim(0, in_.axes[0]), operand(1));
      case Op::Scan:
        if (in_.attr<core::attr::ScanOf>().adjoint) not_exported(scope_, in_);
        return fmt::format("qr.scan({}, {}, {}, {}, {})", operand(0), operand(1), dim(1, in_.axes[0]),
                           dim(1, in_.axes[1]), dim(0, in_.axes[2]));
      case Op::OneHot: return fmt::format("qr.one_hot({}, {})", operand(0), python_size(in_.sizes.at(0)));
      case Op::Iota: return fmt::format("qr.iota({})", python_size(in_.sizes.at(0)));
      case Op::KeySplit: return fmt::format("qr.split_key({})", operand(0));
      case Op::Uniform: {
        const core::attr::DrawParams& d = in_.attr<core::attr::DrawParams>();
        return fmt::format("qr.uniform({}, {}, {}, {})", operand(0), python_float(d.first), python_float(d.second),
                           draw_shape());
      }
      case Op::Normal: {
        const core::attr::DrawParams& d = in_.attr<core::attr::DrawParams>();
        return fmt::format("qr.normal({}, {}, {}, {})", operand(0), python_float(d.first), python_float(d.second),
                           draw_shape());
      }
      case Op::Bernoulli: return fmt::format("qr.bernoulli({}, {}, {})", operand(0), operand(1), draw_shape());
      case Op::Call: {
        std::vector<std::string> args;
        for (size_t k = 0; k < in_.args.size(); ++k) args.push_back(operand(k));
        return fmt::format("{}({})", scope_.callee(in_), call_arguments(std::move(args)));
      }
      case Op::Fold: break;  // statements: translate_instr
      case Op::SumTo:
      case Op::Expand:
      case Op::ContractGradA:
      case Op::ContractGradB:
      case Op::ReshapeAs:
      case Op::MergeGrad:
      case Op::ConcatGrad:
      case Op::SliceGrad:
      case Op::PickGrad:
      case Op::ScanGradA:
      case Op::GatherGrad:
      case Op::ZerosLike:
      case Op::MakeParams:
      case Op::FoldVjp: not_exported(scope_, in_);
    }
    throw std::logic_error(fmt::format("internal: {} has no expression", core::site_name(scope_.fn, in_.id)));
  }

  /// fold n f(stacked θ; acc x; with e…): copy i of θ, the carried value and
  /// each e (a key as copy i sees it) into f, copy 0 first.
  std::vector<std::string> fold(const std::string& target) const {
    std::vector<std::string> args = {fmt::format("qr.copy_of({}, _i)", operand(0)), target};
    for (size_t k = 2; k < in_.args.size(); ++k) {
      const bool key = scope_.fn.type_of(in_.args[k]).kind == elab::TypeKind::Key;
      args.push_back(key ? fmt::format("qr.copy_key({}, _i)", operand(k)) : operand(k));
    }
    return {fmt::format("{} = {}", target, operand(1)),
            fmt::format("for _i in range({}):", python_size(in_.sizes.at(0))),
            fmt::format("    {} = {}({})", target, scope_.callee(in_), call_arguments(std::move(args)))};
  }

 private:
  const InstrScope& scope_;
  const core::Instr& in_;
};

}  // namespace

std::vector<std::string> translate_instr(const InstrScope& scope, const core::Instr& in, const std::string& target) {
  Translation t(scope, in);
  if (in.op == Op::Fold) return t.fold(target);
  return {fmt::format("{} = {}", target, t.expression())};
}

}  // namespace quire::exports
