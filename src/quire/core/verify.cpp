#include "quire/core/verify.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/core/printer.h"

namespace quire::core {

std::vector<std::string> verify(const Function& fn, size_t functions) {
  std::vector<std::string> problems;
  if (!fn.checked) return problems;  // a function with errors never reaches the later stages
  auto problem = [&](int id, const std::string& what) {
    problems.push_back(fmt::format("{}: {}", site_name(fn, id), what));
  };
  for (size_t i = 0; i < fn.args.size(); ++i)
    if (fn.args[i].id != static_cast<int>(i) + 1)
      problems.push_back(fmt::format("{}: argument {} is numbered %{}", fn.name, i, fn.args[i].id));
  const int values = fn.value_count();
  for (size_t k = 0; k < fn.body.size(); ++k) {
    const Instr& in = fn.body[k];
    const int want = static_cast<int>(fn.args.size() + k) + 1;
    if (in.id != want) {
      problem(in.id,
              fmt::format("instruction {} is numbered %{}, not %{}: sites must follow body order", k, in.id, want));
      continue;
    }
    const OpInfo& info = op_info(in.op);
    if (info.arity >= 0 && static_cast<int>(in.args.size()) != info.arity)
      problem(in.id, fmt::format("`{}` takes {} operands, it has {}", info.spelling, info.arity, in.args.size()));
    for (int a : in.args)
      if (a < 1 || a >= in.id) problem(in.id, fmt::format("operand %{} is not defined before its use", a));
    if (info.elementwise && in.op != Op::Real && in.align.size() != in.args.size())
      problem(in.id, fmt::format("element-wise `{}` has {} alignments for {} operands", info.spelling, in.align.size(),
                                 in.args.size()));
    if (info.elementwise || info.reduction)
      for (int a : in.args)
        if (a >= 1 && a < in.id && in.op != Op::Real && !fn.type_of(a).is_tensor())
          problem(in.id, fmt::format("operand %{} of `{}` is not a tensor", a, info.spelling));
    if (info.calls)
      if (in.callee < 0 || static_cast<size_t>(in.callee) >= functions)
        problem(in.id,
                fmt::format("`{}` names function {}, which the program does not have", info.spelling, in.callee));
    if (in.attrs.index() != info.attrs) {
      problem(in.id, fmt::format("`{}` carries {} attributes, not {}", info.name, attr_family_name(in.attrs.index()),
                                 attr_family_name(info.attrs)));
      continue;
    }
    if (info.draws) {
      const size_t base = in.op == Op::Bernoulli ? 2 : 1;
      if (in.args.size() != base && in.args.size() != base + 1)
        problem(in.id, fmt::format("`{}` takes {} operands, or {} with the one it takes its shape from", info.spelling,
                                   base, base + 1, in.args.size()));
    }
    if ((in.op == Op::Fold && in.args.size() < 2) || (in.op == Op::FoldVjp && in.args.size() < 3))
      problem(in.id, fmt::format("`{}` takes at least {} operands, it has {}", info.spelling,
                                 in.op == Op::Fold ? 2 : 3, in.args.size()));
    if (in.op == Op::FoldVjp)
      if (const int v = in.attr<attr::VjpOf>().function; v < 0 || static_cast<size_t>(v) >= functions)
        problem(in.id, fmt::format("`fold_vjp` names vjp {}, which the program does not have", v));
    if (in.op == Op::TupleGet || in.op == Op::ConcatGrad) {
      // TupleGet reads an element of its tuple; ConcatGrad's part is one of its operands after the cotangent.
      const int k = in.attr<attr::Element>().index;
      const int a = in.args.empty() ? 0 : in.args[0];
      const size_t count = in.op == Op::ConcatGrad ? (in.args.empty() ? 0 : in.args.size() - 1)
                           : a >= 1 && a < in.id && fn.type_of(a).kind == elab::TypeKind::Tuple
                               ? fn.type_of(a).elements.size()
                               : 0;
      if (k < 0 || static_cast<size_t>(k) >= count)
        problem(in.id, fmt::format("`{}` reads element {} of {}", info.name, k, count));
    }
    if (in.op == Op::Slice || in.op == Op::SliceGrad)
      if (const attr::Range& r = in.attr<attr::Range>(); r.step < 1 || r.start < 0 || r.stop < r.start)
        problem(in.id, fmt::format("`{}` has the range [{}:{}:{}]", info.name, r.start, r.stop, r.step));
  }
  if (fn.result_value < 1 || fn.result_value > values)
    problems.push_back(fmt::format("{}: its result %{} is not one of its values", fn.name, fn.result_value));
  return problems;
}

void verify_or_throw(const std::vector<Function>& functions, size_t first) {
  std::vector<std::string> all;
  for (size_t f = first; f < functions.size(); ++f)
    for (std::string& p : verify(functions[f], functions.size())) all.push_back(std::move(p));
  if (all.empty()) return;
  throw std::logic_error(fmt::format("internal: Core breaks its invariants:\n  {}", fmt::join(all, "\n  ")));
}

}  // namespace quire::core
