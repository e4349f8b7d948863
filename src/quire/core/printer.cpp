#include "quire/core/printer.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

namespace quire::core {

std::string site_name(const Function& fn, int id) { return fmt::format("{}/%{}", fn.name, id); }

std::pair<const Function*, const Instr*> decision_instr(const elab::Program& prog, const Function& fn, const Instr& in) {
  if (fn.primal >= 0) {
    const Function& primal = prog.functions.at(static_cast<size_t>(fn.primal));
    const size_t k = static_cast<size_t>(&in - fn.body.data());
    if (k < primal.body.size()) return {&primal, &primal.body[k]};
  }
  return {&fn, &in};
}

std::string decision_site(const elab::Program& prog, const Function& fn, const Instr& in) {
  const auto [site_fn, site_in] = decision_instr(prog, fn, in);
  return site_name(*site_fn, site_in->id);
}

std::vector<int> reachable_functions(const elab::Program& prog, int root) {
  std::vector<int> order;
  std::vector<bool> seen(prog.functions.size(), false);
  std::function<void(int)> visit = [&](int f) {
    if (f < 0 || seen[f]) return;
    seen[f] = true;
    for (const Instr& in : prog.functions[f].body) {
      if (op_info(in.op).calls) visit(in.callee);
      if (in.op == Op::FoldVjp) visit(in.attr<attr::VjpOf>().function);
    }
    order.push_back(f);
  };
  visit(root);
  return order;
}

namespace {

std::string axis_label(const elab::TensorType& t, int i) {
  if (i < 0 || i >= static_cast<int>(t.axes.size())) return "?";
  return t.axes[i].name.empty() ? std::to_string(i) : t.axes[i].name;
}

std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

std::string print_instr(const elab::Program& prog, const Function& fn, const Instr& in) {
  auto arg = [&](size_t k) { return k < in.args.size() ? fn.value_name(in.args[k]) : std::string("?"); };
  auto operand_type = [&](size_t k) -> const elab::TensorType& { return fn.type_of(in.args.at(k)).tensor; };
  const OpInfo& info = op_info(in.op);
  std::vector<std::string> args;
  for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(k));
  // A fold's operands after θ and x, which every copy takes: "; with %3, %4".
  auto further = [&](size_t first, size_t last) {
    std::vector<std::string> names;
    for (size_t k = first; k < last; ++k) names.push_back(arg(k));
    return names.empty() ? std::string() : fmt::format("; with {}", fmt::join(names, ", "));
  };
  switch (in.op) {
    case Op::Const:
    case Op::HostConst: return number(in.attr<attr::Literal>().value);
    case Op::ConstInt: return std::to_string(in.attr<attr::Integer>().value);
    case Op::ConstBool: return in.attr<attr::Boolean>().value ? "true" : "false";
    case Op::Field: return fmt::format("{}.{}", arg(0), in.attr<attr::Member>().name);
    case Op::TupleGet: return fmt::format("{}.{}", arg(0), in.attr<attr::Element>().index);
    case Op::MakeTuple: return fmt::format("({})", fmt::join(args, ", "));
    case Op::PowConst: return fmt::format("pow {} {}", number(in.attr<attr::Exponent>().value), arg(0));
    case Op::Pow: return fmt::format("pow {}, {}", arg(0), arg(1));
    case Op::Cast: return fmt::format("cast {} {}", cast_target_name(in.attr<attr::CastTo>().target), arg(0));
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp: {
      if (in.all_axes) return fmt::format("{} {}", info.spelling, arg(0));
      std::vector<std::string> axes;
      for (int a : in.axes) axes.push_back("axis " + axis_label(operand_type(0), a));
      return fmt::format("{} {} {}", info.spelling, fmt::join(axes, " "), arg(0));
    }
    case Op::Dot:
      switch (in.attr<attr::ProductOut>().out) {
        case attr::ProductOut::Out::Policy: return fmt::format("dot {}, {}", arg(0), arg(1));
        case attr::ProductOut::Out::F32: return fmt::format("dot {}, {} out=f32", arg(0), arg(1));
        case attr::ProductOut::Out::F64: return fmt::format("dot {}, {} out=f64", arg(0), arg(1));
      }
      return "dot ?";
    case Op::Contract: return fmt::format("contract axis {} {}, {}", axis_label(operand_type(0), in.axes[0]), arg(0), arg(1));
    case Op::Transpose: {
      std::vector<std::string> perm;
      for (int a : in.axes) perm.push_back(axis_label(operand_type(0), a));
      return fmt::format("transpose ({}) {}", fmt::join(perm, ", "), arg(0));
    }
    case Op::SplitAxis: {
      std::vector<std::string> parts;
      for (size_t k = 0; k < in.sizes.size(); ++k) {
        const elab::Axis& a = in.type.tensor.axes[in.axes[0] + k];
        parts.push_back(fmt::format("{}: {}", a.name, a.size.str()));
      }
      return fmt::format("split axis {} ({}) {}", axis_label(operand_type(0), in.axes[0]), fmt::join(parts, ", "), arg(0));
    }
    case Op::MergeAxes: {
      std::vector<std::string> axes;
      for (int a : in.axes) axes.push_back("axis " + axis_label(operand_type(0), a));
      return fmt::format("merge {} {}", fmt::join(axes, " "), arg(0));
    }
    case Op::Concat: return fmt::format("concat axis {} {}", axis_label(operand_type(0), in.axes[0]), fmt::join(args, ", "));
    case Op::Slice: {
      const attr::Range& r = in.attr<attr::Range>();
      return fmt::format("slice axis {} [{}:{}:{}] {}", axis_label(operand_type(0), in.axes[0]), r.start, r.stop, r.step,
                         arg(0));
    }
    case Op::Gather: return fmt::format("gather axis {} {}, {}", axis_label(operand_type(0), in.axes[0]), arg(0), arg(1));
    case Op::Pick: return fmt::format("pick axis {} {}, {}", axis_label(operand_type(0), in.axes[0]), arg(0), arg(1));
    case Op::OneHot: return fmt::format("one_hot {} {}", in.sizes.empty() ? "?" : in.sizes[0].str(), arg(0));
    case Op::Iota: return fmt::format("iota {}", in.sizes.empty() ? "?" : in.sizes[0].str());
    case Op::Uniform: {
      const attr::DrawParams& d = in.attr<attr::DrawParams>();
      return fmt::format("uniform [{}, {}) {}{}", number(d.first), number(d.second), arg(0),
                         draw_like(in) >= 0 ? " like " + arg(1) : "");
    }
    case Op::Normal: {
      const attr::DrawParams& d = in.attr<attr::DrawParams>();
      return fmt::format("normal (mean {}, std {}) {}{}", number(d.first), number(d.second), arg(0),
                         draw_like(in) >= 0 ? " like " + arg(1) : "");
    }
    case Op::Bernoulli:
      return fmt::format("bernoulli {}, {}{}", arg(0), arg(1), draw_like(in) >= 0 ? " like " + arg(2) : "");
    case Op::Call:
    case Op::Fold: {
      const Function* callee = in.callee >= 0 ? &prog.functions[in.callee] : nullptr;
      std::string name = callee ? callee->name : "?";
      std::vector<std::string> dims;
      size_t first_dim = in.op == Op::Fold ? 1 : 0;
      for (size_t k = first_dim; k < in.sizes.size(); ++k)
        dims.push_back(fmt::format("{} = {}", callee && k - first_dim < callee->dims.size() ? callee->dims[k - first_dim] : "?",
                                   in.sizes[k].str()));
      std::string dim_text = dims.empty() ? "" : fmt::format("{{{}}}", fmt::join(dims, ", "));
      if (in.op == Op::Fold)
        return fmt::format("fold {} {}{}(stacked {}; acc {}{})", in.sizes.empty() ? "?" : in.sizes[0].str(), name,
                           dim_text, arg(0), arg(1), further(2, in.args.size()));
      return fmt::format("call {}{}({})", name, dim_text, fmt::join(args, ", "));
    }
    case Op::SumTo: {
      std::vector<std::string> map;
      for (int j : in.align.at(0).map) map.push_back(j < 0 ? "_" : std::to_string(j));
      return fmt::format("sum_to [{}{}] {}, {}", in.align[0].rest ? "..., " : "", fmt::join(map, ", "), arg(0), arg(1));
    }
    case Op::Expand: {
      std::string what = in.attr<attr::ExpandOf>().mean ? "expand_mean" : "expand";
      if (in.all_axes) return fmt::format("{} {}, {}", what, arg(0), arg(1));
      std::vector<std::string> axes;
      for (int a : in.axes) axes.push_back("axis " + axis_label(operand_type(1), a));
      return fmt::format("{} {} {}, {}", what, fmt::join(axes, " "), arg(0), arg(1));
    }
    case Op::ContractGradA:
    case Op::ContractGradB:
      if (in.attr<attr::ProductForm>().dot) return fmt::format("{} (dot) {}, {}, {}", info.spelling, arg(0), arg(1), arg(2));
      return fmt::format("{} (contract axis {}) {}, {}, {}", info.spelling, axis_label(operand_type(1), in.axes.at(0)),
                         arg(0), arg(1), arg(2));
    case Op::ConcatGrad:
      return fmt::format("concat_grad axis {} part {} {}", axis_label(operand_type(1), in.axes.at(0)),
                         in.attr<attr::Element>().index,
                         fmt::join(args, ", "));
    case Op::SliceGrad: {
      const attr::Range& r = in.attr<attr::Range>();
      return fmt::format("slice_grad axis {} [{}:{}:{}] {}, {}", axis_label(operand_type(1), in.axes.at(0)), r.start,
                         r.stop, r.step, arg(0), arg(1));
    }
    case Op::Scan:
    case Op::ScanGradA: {
      // x (scan's operand 1) and h (scan_grad_a's operand 1) have t and n; a has m.
      const std::string axes = fmt::format("axis {}, axis {}, axis {}", axis_label(operand_type(1), in.axes.at(0)),
                                           axis_label(operand_type(1), in.axes.at(1)),
                                           axis_label(operand_type(in.op == Op::Scan ? 0 : 2), in.axes.at(2)));
      const char* adjoint = in.attr<attr::ScanOf>().adjoint ? " (adjoint)" : "";
      return in.op == Op::Scan ? fmt::format("scan{} {} {}, {}", adjoint, axes, arg(0), arg(1))
                               : fmt::format("scan_grad_a{} {} {}, {}, {}", adjoint, axes, arg(0), arg(1), arg(2));
    }
    case Op::PickGrad:
      return fmt::format("pick_grad axis {} {}, {}, {}", axis_label(operand_type(1), in.axes.at(0)), arg(0), arg(1), arg(2));
    case Op::GatherGrad:
      return fmt::format("gather_grad axis {} {}, {}, {}", axis_label(operand_type(1), in.axes.at(0)), arg(0), arg(1), arg(2));
    case Op::MakeParams: {
      std::vector<std::string> parts;
      for (size_t k = 1; k < in.args.size(); ++k)
        parts.push_back(fmt::format("{}: {}", k - 1 < in.paths.size() && !in.paths[k - 1].empty() ? in.paths[k - 1] : "(all)", arg(k)));
      return fmt::format("params like {} {{{}}}", arg(0), fmt::join(parts, ", "));
    }
    case Op::FoldVjp: {
      const Function* callee = in.callee >= 0 ? &prog.functions[in.callee] : nullptr;
      const int v = in.attr<attr::VjpOf>().function;
      const Function* vjp = v >= 0 && static_cast<size_t>(v) < prog.functions.size() ? &prog.functions[v] : nullptr;
      const size_t last = in.args.empty() ? 0 : in.args.size() - 1;
      return fmt::format("fold_vjp {} {} then {}(stacked {}; acc {}{}; ct {})", in.sizes.empty() ? "?" : in.sizes[0].str(),
                         callee ? callee->name : "?", vjp ? vjp->name : "?", arg(0), arg(1), further(2, last), arg(last));
    }
    case core::Op::Real:
    case core::Op::Neg:
    case core::Op::Abs:
    case core::Op::Exp:
    case core::Op::Log:
    case core::Op::Sqrt:
    case core::Op::Rsqrt:
    case core::Op::Tanh:
    case core::Op::Erf:
    case core::Op::Sigmoid:
    case core::Op::Relu:
    case core::Op::Gelu:
    case core::Op::GeluTanh:
    case core::Op::Silu:
    case core::Op::Log1p:
    case core::Op::Expm1:
    case core::Op::Softplus:
    case core::Op::Not:
    case core::Op::Add:
    case core::Op::Sub:
    case core::Op::Mul:
    case core::Op::Div:
    case core::Op::Min:
    case core::Op::Max:
    case core::Op::Lt:
    case core::Op::Le:
    case core::Op::Gt:
    case core::Op::Ge:
    case core::Op::Eq:
    case core::Op::Ne:
    case core::Op::Where:
    case core::Op::KeySplit:
    case core::Op::ReshapeAs:
    case core::Op::MergeGrad:
    case core::Op::ZerosLike:
      return fmt::format("{} {}", info.spelling, fmt::join(args, ", "));
  }
  throw std::logic_error("internal: an operation outside ops.def");
}

static std::string signature(const elab::Program& prog, const Function& fn) {
  elab::TypePrinter tp = prog.printer();
  std::vector<std::string> args;
  for (const FnArg& a : fn.args) args.push_back(fmt::format("{} : {}", a.name, tp(a.type)));
  std::string dims = fn.dims.empty() ? "" : fmt::format("{{{}}}", fmt::join(fn.dims, " "));
  return fmt::format("fn {}{}({}) -> {}", fn.name, dims, fmt::join(args, ", "), tp(fn.result));
}

std::string print_core(const elab::Program& prog, int reachable_from) {
  std::vector<int> which = reachable_from >= 0 ? reachable_functions(prog, reachable_from) : prog.shown_functions();
  elab::TypePrinter tp = prog.printer();
  std::string out;
  for (int f : which) {
    const Function& fn = prog.functions[f];
    out += signature(prog, fn) + " {\n";
    for (const Instr& in : fn.body) {
      std::string mark = in.numerics == Numerics::Default ? "" : fmt::format("  -- {}", numerics_name(in.numerics));
      out += fmt::format("  {} : {} = {}{}\n", fn.value_name(in.id), tp(in.type), print_instr(prog, fn, in), mark);
    }
    out += fmt::format("  return {}\n}}\n\n", fn.result_value ? fn.value_name(fn.result_value) : "?");
  }
  return out;
}

nlohmann::ordered_json core_json(const elab::Program& prog, int reachable_from) {
  std::vector<int> which = reachable_from >= 0 ? reachable_functions(prog, reachable_from) : prog.shown_functions();
  elab::TypePrinter tp = prog.printer();
  nlohmann::ordered_json fns = nlohmann::ordered_json::array();
  for (int f : which) {
    const Function& fn = prog.functions[f];
    nlohmann::ordered_json j;
    j["name"] = fn.name;
    j["dims"] = fn.dims;
    j["args"] = nlohmann::ordered_json::array();
    for (const FnArg& a : fn.args)
      j["args"].push_back({{"site", site_name(fn, a.id)}, {"name", a.name}, {"type", tp(a.type)}});
    j["result"] = tp(fn.result);
    j["body"] = nlohmann::ordered_json::array();
    for (const Instr& in : fn.body) {
      LineCol lc = prog.sources.line_col(in.loc.begin);
      nlohmann::ordered_json ij;
      ij["site"] = site_name(fn, in.id);
      if (!in.name.empty()) ij["name"] = in.name;
      ij["op"] = op_info(in.op).name;
      ij["type"] = tp(in.type);
      ij["text"] = print_instr(prog, fn, in);
      std::vector<std::string> args;
      for (int a : in.args) args.push_back(site_name(fn, a));
      ij["args"] = args;
      if (in.numerics != Numerics::Default) ij["numerics"] = numerics_name(in.numerics);
      ij["file"] = prog.sources.file(in.loc.begin.file).path;
      ij["line"] = lc.line;
      ij["col"] = lc.column;
      j["body"].push_back(ij);
    }
    j["return"] = fn.result_value ? site_name(fn, fn.result_value) : "";
    fns.push_back(j);
  }
  nlohmann::ordered_json root;
  root["functions"] = fns;
  return root;
}

}  // namespace quire::core
