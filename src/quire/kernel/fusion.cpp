#include "quire/kernel/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "quire/core/printer.h"
#include "quire/core/walk.h"

namespace quire::kernel {

using core::Function;
using core::Instr;
using core::Op;

LaunchKind launch_kind(const Instr& in) {
  switch (in.op) {
    // A host value made a scalar tensor: the kernels that read it take it as an argument.
    case Op::Real:
      return LaunchKind::None;
    case Op::Dot:
    case Op::Contract:
    case Op::ContractGradA:
    case Op::ContractGradB:
      return LaunchKind::Product;
    // A reduction's cotangent repeated along the axes it removed (a mean's
    // share divided by their count): each element reads one element of its
    // operand, as a broadcast operand of `add` or `mul` is read, so it shares
    // its readers' nest instead of filling memory with the copies.
    case Op::Expand:
      return LaunchKind::ElementWise;
    case Op::ZerosLike:
    case Op::Iota:
    case Op::OneHot:
      return LaunchKind::DataMovement;
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
      return LaunchKind::Draw;
    // A split (a rename among them) and its cotangent keep every element
    // where it is, row-major: the host gives the operand's elements a new
    // shape (they share storage, tensor.h), no kernel copies them.
    case Op::SplitAxis:
    case Op::ReshapeAs:
      return LaunchKind::None;
    case Op::Const:
    case Op::ConstInt:
    case Op::ConstBool:
    case Op::HostConst:
    case Op::Field:
    case Op::TupleGet:
    case Op::MakeTuple:
    case Op::MakeParams:
    case Op::KeySplit:
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
      return LaunchKind::None;
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
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::SumTo:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::GatherGrad:
      break;
    // A scan's steps run one after another, by its reference kernel, and so
    // does the cotangent of its a, which reads the states beside each step.
    case Op::Scan:
    case Op::ScanGradA:
      return LaunchKind::Reduction;
  }
  // The rest by the operation table's columns, so that a new operation
  // takes the kind its flags give it.
  const core::OpInfo& info = core::op_info(in.op);
  if (info.elementwise) return in.type.is_tensor() ? LaunchKind::ElementWise : LaunchKind::None;
  if (info.reduction) return LaunchKind::Reduction;
  if (info.copies) return LaunchKind::DataMovement;
  return LaunchKind::None;
}

bool reads_elements(const Instr& in, size_t k) { return !(in.op == Op::Expand && k == 1); }

const char* launch_kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::None:
      return "not a launch";
    case LaunchKind::ElementWise:
      return "element-wise";
    case LaunchKind::Reduction:
      return "a reduction";
    case LaunchKind::Product:
      return "a product";
    case LaunchKind::DataMovement:
      return "data movement";
    case LaunchKind::Draw:
      return "a draw";
  }
  return "?";
}

const char* memory_reason_key(MemoryReason r) {
  switch (r) {
    case MemoryReason::Result:
      return "result";
    case MemoryReason::ReadByCall:
      return "read_by_call";
    case MemoryReason::ReadByFold:
      return "read_by_fold";
    case MemoryReason::ReadByReduction:
      return "read_by_reduction";
    case MemoryReason::ReadByProduct:
      return "read_by_product";
    case MemoryReason::ReadByMovement:
      return "read_by_data_movement";
    case MemoryReason::ReadByDraw:
      return "read_by_draw";
    case MemoryReason::ReadByStructure:
      return "read_by_structure";
    case MemoryReason::OtherShape:
      return "other_shape";
    case MemoryReason::Unread:
      return "unread";
    case MemoryReason::SeveralGroups:
      return "several_groups";
    case MemoryReason::SizeLimit:
      return "size_limit";
    case MemoryReason::ProductTaken:
      return "product_taken";
    case MemoryReason::NotElementWise:
      return "not_element_wise";
  }
  return "?";
}

int FunctionFusion::fused_groups() const {
  return static_cast<int>(
      std::count_if(groups.begin(), groups.end(), [](const FusionGroup& g) { return g.steps.size() > 1; }));
}

const FunctionFusion* Fusion::find(int function) const {
  for (const FunctionFusion& f : functions)
    if (f.function == function) return &f;
  return nullptr;
}

namespace {

/// One shape: a group is one loop nest over it. Element types may differ (a
/// comparison's bool result shares its operands' nest).
bool same_shape(const elab::Type& a, const elab::Type& b) {
  return a.is_tensor() && b.is_tensor() && a.tensor.rest == b.tensor.rest && a.tensor.axes == b.tensor.axes;
}

/// How a reader stops a value from joining its group, if it does.
std::optional<MemoryReason> blocking(const Instr& reader, const elab::Type& value_type) {
  switch (reader.op) {
    case Op::Call:
      return MemoryReason::ReadByCall;
    case Op::Fold:
    case Op::FoldVjp:
      return MemoryReason::ReadByFold;
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
    case Op::KeySplit:
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
    case Op::ZerosLike:
    case Op::MakeParams:
      break;
  }
  switch (launch_kind(reader)) {
    case LaunchKind::ElementWise:
      if (same_shape(reader.type, value_type)) return std::nullopt;
      return MemoryReason::OtherShape;
    case LaunchKind::Reduction:
      return MemoryReason::ReadByReduction;
    case LaunchKind::Product:
      return MemoryReason::ReadByProduct;
    case LaunchKind::DataMovement:
      return MemoryReason::ReadByMovement;
    case LaunchKind::Draw:
      return MemoryReason::ReadByDraw;
    case LaunchKind::None:
      break;
  }
  // A tuple or a parameter tree (the only other instructions that take a tensor).
  return MemoryReason::ReadByStructure;
}

class FunctionGrouper {
 public:
  explicit FunctionGrouper(const Function& fn) : fn_(fn) {}

  FunctionFusion run(int function) {
    FunctionFusion out;
    out.function = function;
    out.lets = static_cast<int>(fn_.body.size());
    const size_t values = static_cast<size_t>(fn_.value_count()) + 1;
    out.group_of.assign(values, -1);
    readers_.assign(values, {});
    for (const Instr& in : fn_.body)
      for (size_t k = 0; k < in.args.size(); ++k) {
        const int a = in.args[k];
        if (reads_elements(in, k) && a >= 1 && static_cast<size_t>(a) < values &&
            (readers_[a].empty() || readers_[a].back() != in.id))
          readers_[a].push_back(in.id);
      }
    mark_result(fn_.result_value, 0);

    // Last instruction first: a value's readers are placed before it is.
    std::vector<StoredValue> stored;
    for (size_t k = fn_.body.size(); k-- > 0;) {
      const Instr& in = fn_.body[k];
      const LaunchKind kind = launch_kind(in);
      if (kind == LaunchKind::None) continue;
      ++out.launches;
      StoredValue why = decide(in, kind, out);
      if (why.group >= 0) {  // joins
        FusionGroup& g = out.groups[static_cast<size_t>(why.group)];
        g.steps.push_back(in.id);
        g.epilogue = g.epilogue || kind == LaunchKind::Product;
        out.group_of[static_cast<size_t>(in.id)] = why.group;
        continue;
      }
      if (kind == LaunchKind::ElementWise) {
        why.group = static_cast<int>(out.groups.size());
        out.groups.push_back(FusionGroup{{in.id}, {}, false});
        out.group_of[static_cast<size_t>(in.id)] = why.group;
      }
      stored.push_back(why);
    }

    // Steps in body order, a product first: its operands are the group's
    // inputs, so it depends on no other step.
    for (FusionGroup& g : out.groups) {
      std::sort(g.steps.begin(), g.steps.end(), [&](int a, int b) {
        const bool pa = launch_kind(instr(a)) == LaunchKind::Product, pb = launch_kind(instr(b)) == LaunchKind::Product;
        return pa != pb ? pa : a < b;
      });
      std::set<int> members(g.steps.begin(), g.steps.end());
      for (int s : g.steps)
        for (int a : instr(s).args)
          if (!members.count(a) && std::find(g.inputs.begin(), g.inputs.end(), a) == g.inputs.end())
            g.inputs.push_back(a);
    }
    // Groups by their roots' body order; the indices move with them.
    std::vector<size_t> order(out.groups.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return out.groups[a].root() < out.groups[b].root(); });
    std::vector<int> renumber(order.size());
    std::vector<FusionGroup> sorted;
    for (size_t i = 0; i < order.size(); ++i) {
      renumber[order[i]] = static_cast<int>(i);
      sorted.push_back(std::move(out.groups[order[i]]));
    }
    out.groups = std::move(sorted);
    for (int& g : out.group_of)
      if (g >= 0) g = renumber[static_cast<size_t>(g)];
    for (StoredValue& s : stored)
      if (s.group >= 0) s.group = renumber[static_cast<size_t>(s.group)];

    std::reverse(stored.begin(), stored.end());
    out.stored = std::move(stored);
    out.fused_launches = static_cast<int>(out.groups.size()) +
                         static_cast<int>(std::count_if(out.stored.begin(), out.stored.end(),
                                                        [](const StoredValue& s) { return s.group < 0; }));
    return out;
  }

 private:
  const Function& fn_;
  std::vector<std::vector<int>> readers_;  ///< by value: the instructions reading it, in body order
  std::set<int> result_parts_;             ///< the result, and what the tuples and trees it is made of hold

  const Instr& instr(int id) const { return fn_.body.at(static_cast<size_t>(id) - fn_.args.size() - 1); }
  bool is_instr(int id) const { return id > static_cast<int>(fn_.args.size()) && id < fn_.value_count() + 1; }

  void mark_result(int id, int depth) {
    if (depth > 64 || !result_parts_.insert(id).second || !is_instr(id)) return;
    const Instr& in = instr(id);
    if (in.op == Op::MakeTuple || in.op == Op::MakeParams)
      for (int a : in.args) mark_result(a, depth + 1);
  }

  /// Whether `in` joins a group (the returned group ≥ 0) or reaches memory, and why.
  StoredValue decide(const Instr& in, LaunchKind kind, const FunctionFusion& out) const {
    StoredValue s;
    s.value = in.id;
    if (result_parts_.count(in.id)) {
      s.reason = MemoryReason::Result;
      return s;
    }
    const std::vector<int>& readers = readers_[static_cast<size_t>(in.id)];
    for (int r : readers)
      if (std::optional<MemoryReason> stop = blocking(instr(r), in.type)) {
        s.reason = *stop;
        s.reader = r;
        return s;
      }
    if (readers.empty()) {
      s.reason = MemoryReason::Unread;
      return s;
    }
    std::set<int> groups;
    for (int r : readers) groups.insert(out.group_of[static_cast<size_t>(r)]);
    if (kind != LaunchKind::ElementWise && kind != LaunchKind::Product) {
      s.reason = MemoryReason::NotElementWise;
      return s;
    }
    // Every reader left is an element-wise launch, so each is in a group.
    if (groups.size() > 1) {
      s.reason = MemoryReason::SeveralGroups;
      return s;
    }
    s.reader = readers.front();
    const FusionGroup& g = out.groups[static_cast<size_t>(*groups.begin())];
    if (static_cast<int>(g.steps.size()) >= kMaxGroupSteps) {
      s.reason = MemoryReason::SizeLimit;
      return s;
    }
    if (kind == LaunchKind::Product && g.epilogue) {
      s.reason = MemoryReason::ProductTaken;
      return s;
    }
    s.group = *groups.begin();
    return s;
  }
};

/// A size's value under `dims`, or nullopt (an unbound symbol, a quotient
/// that does not divide, a negative count).
std::optional<int64_t> evaluate(const elab::Size& s, const std::map<std::string, int64_t>& dims) {
  std::optional<int64_t> v = s.evaluate(dims);
  if (v && *v < 0) return std::nullopt;
  return v;
}

/// How many times one call of the entry evaluates each function: each
/// evaluation context (the dimensions it runs under) with its count, callers
/// before callees. Sets `unknown` at the first fold whose count does not evaluate.
void count_evaluations(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& run, Fusion& out) {
  using Contexts = std::map<std::map<std::string, int64_t>, int64_t>;
  std::map<int, Contexts> contexts;
  std::set<int> unknown;
  contexts[entry][run] = 1;
  auto add = [&](int callee, const std::map<std::string, int64_t>& dims, int64_t times) {
    int64_t& n = contexts[callee][dims];
    if (__builtin_add_overflow(n, times, &n)) {
      unknown.insert(callee);
      if (out.unknown.empty())
        out.unknown = fmt::format("{} is evaluated more than 2^63 times", prog.functions[callee].name);
    }
  };
  std::vector<int> order = core::reachable_functions(prog, entry);
  std::reverse(order.begin(), order.end());
  for (int f : order) {
    const Function& fn = prog.functions[static_cast<size_t>(f)];
    const bool f_unknown = unknown.count(f) > 0;
    for (const Instr& in : fn.body) {
      if (in.op != Op::Call && in.op != Op::Fold && in.op != Op::FoldVjp) continue;
      if (in.callee < 0) continue;
      std::vector<int> callees{in.callee};
      if (in.op == Op::FoldVjp)
        if (const int v = in.attr<core::attr::VjpOf>().function; v >= 0 && static_cast<size_t>(v) < prog.functions.size())
          callees.push_back(v);
      if (f_unknown) {
        unknown.insert(callees.begin(), callees.end());
        continue;
      }
      for (const auto& [dims, times] : contexts[f]) {
        int64_t copies = 1;
        if (in.op != Op::Call) {
          std::optional<int64_t> n = in.sizes.empty() ? std::nullopt : evaluate(in.sizes[0], dims);
          if (!n) {
            unknown.insert(callees.begin(), callees.end());
            if (out.unknown.empty()) {
              std::vector<std::string> need;
              if (!in.sizes.empty())
                for (const std::string& s : in.sizes[0].symbols())
                  if (!dims.count(s)) need.push_back(fmt::format("--dim {}=N", s));
              out.unknown = fmt::format("the fold {} runs {} copies{}", core::site_name(fn, in.id),
                                        in.sizes.empty() ? "?" : in.sizes[0].str(),
                                        need.empty() ? "" : fmt::format(": give {}", fmt::join(need, " ")));
            }
            continue;
          }
          copies = *n;
        }
        int64_t total = 0;
        if (__builtin_mul_overflow(times, copies, &total)) {
          unknown.insert(callees.begin(), callees.end());
          if (out.unknown.empty())
            out.unknown = fmt::format("{} runs more than 2^63 copies", core::site_name(fn, in.id));
          continue;
        }
        // A callee's dims as the interpreters bind them, leaving unbound what does not evaluate.
        auto size_at = [&caller = dims](const elab::Size& size) { return evaluate(size, caller); };
        for (int c : callees)
          add(c, core::callee_dims(prog.functions[static_cast<size_t>(c)], in, run, size_at), total);
      }
    }
  }
  for (FunctionFusion& ff : out.functions) {
    if (unknown.count(ff.function)) continue;
    int64_t n = 0;
    bool ok = true;
    for (const auto& [dims, times] : contexts[ff.function]) ok = ok && !__builtin_add_overflow(n, times, &n);
    if (ok)
      ff.evaluations = n;
    else if (out.unknown.empty())
      out.unknown = fmt::format("{} is evaluated more than 2^63 times", prog.functions[ff.function].name);
  }
}

}  // namespace

Fusion fuse(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims) {
  Fusion out;
  out.entry = entry;
  out.dims = dims;
  if (entry < 0 || entry >= static_cast<int>(prog.functions.size())) return out;
  for (int f : core::reachable_functions(prog, entry))
    out.functions.push_back(FunctionGrouper(prog.functions[static_cast<size_t>(f)]).run(f));
  count_evaluations(prog, entry, dims, out);
  int64_t launches = 0, fused = 0;
  for (const FunctionFusion& ff : out.functions) {
    if (!ff.evaluations) return out;
    int64_t a = 0, b = 0;
    if (__builtin_mul_overflow(*ff.evaluations, ff.launches, &a) ||
        __builtin_mul_overflow(*ff.evaluations, ff.fused_launches, &b) ||
        __builtin_add_overflow(launches, a, &launches) || __builtin_add_overflow(fused, b, &fused)) {
      out.unknown = "more than 2^63 launches";
      return out;
    }
  }
  out.launches = launches;
  out.fused_launches = fused;
  return out;
}

}  // namespace quire::kernel
