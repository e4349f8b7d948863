// Printing fusion's result: `quire dump --stage realize` (text and JSON),
// and the words each group and stored value is described in.

#include "quire/kernel/fusion_print.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "quire/core/printer.h"
#include "quire/support/text.h"

namespace quire::kernel {

using core::Function;
using core::Instr;
using core::Op;

namespace {

/// `ms : ℝ[...] = mean axis model %4`
std::string instr_line(const elab::Program& prog, const Function& fn, int id) {
  const size_t k = static_cast<size_t>(id) - fn.args.size() - 1;
  if (id <= static_cast<int>(fn.args.size()) || k >= fn.body.size()) return fn.value_name(id);
  const Instr& in = fn.body[k];
  return fmt::format("{} : {} = {}", fn.value_name(id), prog.printer()(in.type), core::print_instr(prog, fn, in));
}

/// A step's operation with the attributes that change what it computes.
std::string step_name(const Instr& in) {
  const char* spelling = core::op_info(in.op).spelling;
  switch (in.op) {
    case Op::PowConst:
      return fmt::format("pow {}", in.attr<core::attr::Exponent>().value);
    case Op::Cast:
      return fmt::format("cast {}", core::cast_target_name(in.attr<core::attr::CastTo>().target));
    case Op::Dot:
      switch (in.attr<core::attr::ProductOut>().out) {
        case core::attr::ProductOut::Out::Policy: break;
        case core::attr::ProductOut::Out::F32: return "dot out=f32";
        case core::attr::ProductOut::Out::F64: return "dot out=f64";
      }
      break;
    case Op::Expand:
      if (in.attr<core::attr::ExpandOf>().mean) return "expand_mean";
      break;
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
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
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
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
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
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;
  }
  return spelling;
}

std::string nest_text(const FunctionFusion& ff, const StoredValue& s, LaunchKind kind) {
  if (s.group < 0) return launch_kind_name(kind);
  const FusionGroup& g = ff.groups[static_cast<size_t>(s.group)];
  if (g.steps.size() == 1) return "alone";
  return fmt::format("ends a group of {}", g.steps.size());
}

std::string dims_text(const std::map<std::string, int64_t>& dims) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : dims) parts.push_back(fmt::format("{} = {}", name, value));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string inputs_text(const Function& fn, const FusionGroup& g) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < g.inputs.size(); ++i) parts.push_back(fmt::format("i{} = {}", i, fn.value_name(g.inputs[i])));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string group_expression(const Function& fn, const FusionGroup& g) {
  std::vector<std::string> steps;
  for (int id : g.steps) {
    const Instr& in = fn.body.at(static_cast<size_t>(id) - fn.args.size() - 1);
    std::vector<std::string> operands;
    for (int a : in.args) {
      auto step = std::find(g.steps.begin(), g.steps.end(), a);
      if (step != g.steps.end()) {
        operands.push_back(fmt::format("s{}", step - g.steps.begin()));
        continue;
      }
      auto input = std::find(g.inputs.begin(), g.inputs.end(), a);
      operands.push_back(fmt::format("i{}", input - g.inputs.begin()));
    }
    steps.push_back(fmt::format("{}({})", step_name(in), fmt::join(operands, ",")));
  }
  return fmt::format("{}", fmt::join(steps, ";"));
}

std::string memory_reason_text(const elab::Program& prog, const Function& fn, const StoredValue& v) {
  const std::string reader = v.reader ? instr_line(prog, fn, v.reader) : "?";
  switch (v.reason) {
    case MemoryReason::Result:
      return "the function's result";
    case MemoryReason::ReadByCall:
      return fmt::format("read by {}: a call", reader);
    case MemoryReason::ReadByFold:
      return fmt::format("read by {}: a fold", reader);
    case MemoryReason::ReadByReduction:
      return fmt::format("read by {}: a reduction", reader);
    case MemoryReason::ReadByProduct:
      return fmt::format("read by {}: a product", reader);
    case MemoryReason::ReadByMovement:
      return fmt::format("read by {}: data movement", reader);
    case MemoryReason::ReadByDraw:
      return fmt::format("read by {}: a draw", reader);
    case MemoryReason::ReadByStructure:
      return fmt::format("read by {}: a tuple or tree the function does not return", reader);
    case MemoryReason::OtherShape:
      return fmt::format("read by {}, of another shape", reader);
    case MemoryReason::Unread:
      return "nothing reads it";
    case MemoryReason::SeveralGroups:
      return "read by more than one group";
    case MemoryReason::SizeLimit:
      return fmt::format("the size limit: the group of {} holds {} steps", reader, kMaxGroupSteps);
    case MemoryReason::ProductTaken:
      return fmt::format("read by {}, whose group is already another product's epilogue", reader);
    case MemoryReason::NotElementWise:
      return fmt::format("not element-wise ({})",
                         launch_kind_name(launch_kind(fn.body.at(static_cast<size_t>(v.value) - fn.args.size() - 1))));
  }
  return "?";
}

std::string print_fusion(const elab::Program& prog, const Fusion& f) {
  if (f.entry < 0) return "";
  const std::string& entry = prog.functions[static_cast<size_t>(f.entry)].name;
  std::string out = fmt::format(
      "Fusion of {}{}: element-wise operations of one shape share one loop nest, a group,\n"
      "whose intermediates never reach memory; a product takes the group that alone reads it\n"
      "as its epilogue. iN is a group's input N, sN its step N; a group holds at most {} steps.\n\n",
      entry, f.dims.empty() ? "" : " at " + dims_text(f.dims), kMaxGroupSteps);
  int groups = 0, fused_away = 0;
  for (const FunctionFusion& ff : f.functions) {
    groups += ff.fused_groups();
    fused_away += ff.launches - ff.fused_launches;
  }
  out += fmt::format("In the functions {} reaches, {}, {} fused away:\n\n", entry, plural(groups, "group", "groups"),
                     plural(fused_away, "let", "lets"));
  for (const FunctionFusion& ff : f.functions) {
    const Function& fn = prog.functions[static_cast<size_t>(ff.function)];
    out += fmt::format("fn {} — {}, {}, {}, {} saved\n", fn.name, plural(ff.lets, "let", "lets"),
                       plural(ff.launches, "launch", "launches"), plural(ff.fused_groups(), "group", "groups"),
                       plural(ff.launches - ff.fused_launches, "launch", "launches"));
    for (const FusionGroup& g : ff.groups) {
      if (g.steps.size() < 2) continue;
      out += fmt::format("  {} = {} [{}, {}{}] {}\n", fn.value_name(g.root()), group_expression(fn, g),
                         plural(static_cast<int64_t>(g.inputs.size()), "input", "inputs"),
                         plural(static_cast<int64_t>(g.steps.size()), "step", "steps"),
                         g.epilogue ? ", a product's epilogue" : "", inputs_text(fn, g));
    }
  }

  out +=
      "\nEvery value that reaches memory, and why: a group's root (its last step), or a launch\n"
      "no group holds. A value joins its readers' group when they are all in that one group,\n"
      "element-wise and of its shape, and the group stays within its size limit.\n\n";
  std::vector<std::array<std::string, 4>> rows;
  rows.push_back({"value", "nest", "line", "reaches memory because"});
  for (const FunctionFusion& ff : f.functions) {
    const Function& fn = prog.functions[static_cast<size_t>(ff.function)];
    for (const StoredValue& s : ff.stored) {
      const Instr& in = fn.body.at(static_cast<size_t>(s.value) - fn.args.size() - 1);
      rows.push_back({core::site_name(fn, s.value), nest_text(ff, s, launch_kind(in)), instr_line(prog, fn, s.value),
                      memory_reason_text(prog, fn, s)});
    }
  }
  size_t w0 = 0, w1 = 0;
  for (const auto& r : rows) {
    w0 = std::max(w0, code_points(r[0]));
    w1 = std::max(w1, code_points(r[1]));
  }
  for (const auto& r : rows) out += fmt::format("{}  {}  {} — {}\n", pad_columns(r[0], w0), pad_columns(r[1], w1), r[2], r[3]);

  out += fmt::format("\nLaunches over one call of {}: each function's, times the evaluations of it.\n\n", entry);
  std::vector<std::array<std::string, 4>> counts;
  counts.push_back({"function", "launches", "fused", "evaluations"});
  for (const FunctionFusion& ff : f.functions)
    counts.push_back({prog.functions[static_cast<size_t>(ff.function)].name, std::to_string(ff.launches),
                      std::to_string(ff.fused_launches), ff.evaluations ? std::to_string(*ff.evaluations) : "?"});
  std::array<size_t, 4> w{};
  for (const auto& r : counts)
    for (size_t i = 0; i < 4; ++i) w[i] = std::max(w[i], code_points(r[i]));
  for (const auto& r : counts) {
    out += pad_columns(r[0], w[0]);
    for (size_t i = 1; i < 4; ++i) out += std::string(2 + w[i] - code_points(r[i]), ' ') + r[i];
    out += "\n";
  }
  if (f.launches && f.fused_launches)
    out += fmt::format("\nOver one call, fusion takes {} to {}.\n", plural(*f.launches, "launch", "launches"),
                       *f.fused_launches);
  else
    out += fmt::format("\nThe launches over one call are unknown: {}.\n", f.unknown);
  return out;
}

nlohmann::ordered_json fusion_json(const elab::Program& prog, const Fusion& f) {
  nlohmann::ordered_json j;
  if (f.entry < 0) return j;
  j["entry"] = prog.functions[static_cast<size_t>(f.entry)].name;
  j["dims"] = nlohmann::ordered_json::object();
  for (const auto& [name, value] : f.dims) j["dims"][name] = value;
  j["size_limit"] = kMaxGroupSteps;
  j["functions"] = nlohmann::ordered_json::array();
  for (const FunctionFusion& ff : f.functions) {
    const Function& fn = prog.functions[static_cast<size_t>(ff.function)];
    nlohmann::ordered_json jf;
    jf["name"] = fn.name;
    jf["lets"] = ff.lets;
    jf["launches"] = ff.launches;
    jf["fused_launches"] = ff.fused_launches;
    jf["evaluations"] = ff.evaluations ? nlohmann::ordered_json(*ff.evaluations) : nlohmann::ordered_json(nullptr);
    jf["groups"] = nlohmann::ordered_json::array();
    for (const FusionGroup& g : ff.groups) {
      if (g.steps.size() < 2) continue;
      nlohmann::ordered_json jg;
      jg["root"] = core::site_name(fn, g.root());
      jg["expression"] = group_expression(fn, g);
      jg["steps"] = nlohmann::ordered_json::array();
      for (int s : g.steps) jg["steps"].push_back(core::site_name(fn, s));
      jg["inputs"] = nlohmann::ordered_json::array();
      for (int i : g.inputs) jg["inputs"].push_back(core::site_name(fn, i));
      jg["epilogue"] = g.epilogue;
      jf["groups"].push_back(std::move(jg));
    }
    jf["stored"] = nlohmann::ordered_json::array();
    for (const StoredValue& s : ff.stored) {
      const Instr& in = fn.body.at(static_cast<size_t>(s.value) - fn.args.size() - 1);
      nlohmann::ordered_json js;
      js["site"] = core::site_name(fn, s.value);
      js["line"] = instr_line(prog, fn, s.value);
      js["nest"] = nest_text(ff, s, launch_kind(in));
      js["reason"] = memory_reason_key(s.reason);
      js["reader"] = s.reader ? nlohmann::ordered_json(core::site_name(fn, s.reader)) : nlohmann::ordered_json(nullptr);
      js["why"] = memory_reason_text(prog, fn, s);
      jf["stored"].push_back(std::move(js));
    }
    j["functions"].push_back(std::move(jf));
  }
  j["launches"] = f.launches ? nlohmann::ordered_json(*f.launches) : nlohmann::ordered_json(nullptr);
  j["fused_launches"] = f.fused_launches ? nlohmann::ordered_json(*f.fused_launches) : nlohmann::ordered_json(nullptr);
  j["unknown"] = f.unknown.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.unknown);
  return j;
}

}  // namespace quire::kernel
