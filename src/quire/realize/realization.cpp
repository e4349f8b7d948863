#include "quire/realize/realization.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "quire/core/printer.h"
#include "quire/core/walk.h"

namespace quire::precision {

using core::Numerics;
using core::Op;

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "f64") return Policy::F64;
  if (name == "f32") return Policy::F32;
  if (name == "bf16") return Policy::BF16;
  if (name == "f16") return Policy::F16;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::F64: return "f64";
    case Policy::F32: return "f32";
    case Policy::BF16: return "bf16";
    case Policy::F16: return "f16";
  }
  return "?";
}

FloatType policy_type(Policy p) {
  switch (p) {
    case Policy::F64: return FloatType::F64;
    case Policy::F32: return FloatType::F32;
    case Policy::BF16: return FloatType::BF16;
    case Policy::F16: return FloatType::F16;
  }
  return FloatType::F64;
}

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::Policy: return "policy";
    case Reason::Island: return "island";
    case Reason::LibraryMark: return "library mark";
    case Reason::Region: return "region";
    case Reason::ParamMark: return "parameter mark";
    case Reason::Frozen: return "frozen";
    case Reason::Master: return "master";
    case Reason::Cast: return "cast";
    case Reason::OutRequest: return "out request";
    case Reason::Carried: return "carried";
    case Reason::Input: return "input";
    case Reason::Solved: return "solved";
  }
  return "?";
}

bool is_half(FloatType t) { return t == FloatType::BF16 || t == FloatType::F16; }

std::optional<FloatType> named_float_type(core::CastTarget t) {
  switch (t) {
    case core::CastTarget::F64: return FloatType::F64;
    case core::CastTarget::F32:
    case core::CastTarget::F32Acc: return FloatType::F32;
    case core::CastTarget::Bf16: return FloatType::BF16;
    case core::CastTarget::F16: return FloatType::F16;
    case core::CastTarget::Real:
    case core::CastTarget::I32:
    case core::CastTarget::I64:
    case core::CastTarget::Bool: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<runtime::ElemKind> cast_integer_kind(core::CastTarget t) {
  switch (t) {
    case core::CastTarget::I32: return runtime::ElemKind::I32;
    case core::CastTarget::I64: return runtime::ElemKind::I64;
    case core::CastTarget::Bool: return runtime::ElemKind::Bool;
    case core::CastTarget::Real:
    case core::CastTarget::F64:
    case core::CastTarget::F32:
    case core::CastTarget::F32Acc:
    case core::CastTarget::Bf16:
    case core::CastTarget::F16: return std::nullopt;
  }
  return std::nullopt;
}

std::string signature(const std::vector<Carry>& args) {
  std::function<std::string(const Carry&)> one = [&](const Carry& c) -> std::string {
    if (c.tuple) {
      std::vector<std::string> parts;
      for (const Carry& e : c.elements) parts.push_back(one(e));
      return fmt::format("({})", fmt::join(parts, ", "));
    }
    return c.type ? runtime::float_type_name(*c.type) : "-";
  };
  std::vector<std::string> parts;
  for (const Carry& c : args) parts.push_back(one(c));
  return fmt::format("({})", fmt::join(parts, ", "));
}

const FunctionRealization* Realization::find(int function, Numerics context, const std::string& sig) const {
  for (const FunctionRealization& f : functions)
    if (f.function == function && f.context == context && f.signature == sig) return &f;
  return nullptr;
}

const FunctionRealization* Realization::find(int function, Numerics context) const {
  for (const FunctionRealization& f : functions)
    if (f.function == function && f.context == context) return &f;
  return nullptr;
}

FloatType Realization::input_type() const { return is_half(policy_type(policy)) ? FloatType::F32 : policy_type(policy); }

const ParamStorage* Realization::param(const std::string& path) const {
  if (param_index.size() == params.size()) {
    auto it = param_index.find(path);
    return it == param_index.end() ? nullptr : &params[it->second];
  }
  for (const ParamStorage& p : params)
    if (p.path == path) return &p;
  return nullptr;
}

int64_t Realization::param_bytes() const {
  int64_t total = 0;
  for (const ParamStorage& p : params) total += p.elements * runtime::float_type_info(p.stored).storage_bits / 8;
  return total;
}

namespace {

const char* name(FloatType t) { return runtime::float_type_name(t); }

bool is_real_tensor(const elab::Type& t) { return t.kind == elab::TypeKind::Tensor && t.tensor.elem == elab::Elem::Real; }

/// The wider of two storage types (more significand bits; f16 over bf16).
FloatType wider(FloatType a, FloatType b) {
  return runtime::float_type_info(a).precision >= runtime::float_type_info(b).precision ? a : b;
}

bool is_region(Numerics m) { return m == Numerics::RegionBf16 || m == Numerics::RegionF16; }

/// The products: a fold of multiply-adds, whose steps round to the accumulator.
bool is_product(Op op) { return core::op_info(op).product; }

/// Operations whose result takes its operand's type: copies, and `expand`
/// (a copy, divided by a count for a mean's cotangent).
bool is_copy(Op op) { return core::op_info(op).copies || op == Op::Expand; }

class Realizer {
 public:
  Realizer(const elab::Program& prog, const RealizeOptions& options) : prog_(prog), options_(options) {
    out_.policy = options.policy;
    out_.half_intermediates = options.half_intermediates;
    out_.fused_products = options.fused_products;
  }

  Realization run(int entry, const std::map<std::string, int64_t>& dims) {
    out_.entry = entry;
    dims_ = dims;
    const core::Function& fn = prog_.functions[entry];
    bool has_params = !fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params;
    std::vector<Carry> args;
    for (const core::FnArg& a : fn.args) args.push_back(input_carry(a.type, 0));
    realize_function(entry, Numerics::Default, args, has_params ? std::optional<std::string>("") : std::nullopt, 0);
    if (has_params) realize_params(fn.args[0].type.params, dims);
    for (size_t i = 0; i < out_.params.size(); ++i) out_.param_index.emplace(out_.params[i].path, i);
    // Callers before callees, in the order the walk first reached them.
    std::stable_sort(out_.functions.begin(), out_.functions.end(),
                     [&](const FunctionRealization& a, const FunctionRealization& b) {
                       return first_reached_.at(table_key(a)) < first_reached_.at(table_key(b));
                     });
    return std::move(out_);
  }

 private:
  FloatType policy() const { return policy_type(options_.policy); }
  bool half_policy() const { return is_half(policy()); }
  FloatType half_acc(FloatType storage) const { return options_.half_intermediates ? storage : FloatType::F32; }

  /// An entry argument's type: real tensors enter at the input type.
  Carry input_carry(const elab::Type& t, int depth) const {
    Carry c;
    if (depth > 64) return c;
    if (is_real_tensor(t)) c.type = out_.input_type();
    if (t.kind == elab::TypeKind::Tuple) {
      c.tuple = true;
      for (const elab::Type& e : t.elements) c.elements.push_back(input_carry(e, depth + 1));
    }
    return c;
  }

  bool from_prelude(const core::Instr& in) const {
    for (const elab::FileInfo& f : prog_.files)
      if (f.id == in.loc.begin.file) return f.prelude;
    return false;
  }

  /// The parameter a Field instruction reads, when its tree's module is known.
  const elab::ParamInfo* param_decl(const core::Function& fn, const core::Instr& in) const {
    const elab::Type& tree = fn.type_of(in.args.at(0));
    if (tree.kind != elab::TypeKind::Params || tree.params.module < 0) return nullptr;
    for (const elab::ParamInfo& p : prog_.modules[tree.params.module].params)
      if (p.name == in.attr<core::attr::Member>().name) return &p;
    return nullptr;
  }

  /// The realized type of a site computed by `in` in `mode` from operands of
  /// the given types (nullopt for non-real operands).
  SiteType site_type(const core::Function& fn, const core::Instr& in, Numerics mode,
                     const std::vector<std::optional<SiteType>>& table, bool reads_high) const {
    const FloatType p = policy();
    const bool reduces = core::op_info(in.op).reduction;
    const bool product = is_product(in.op);
    const bool constant = in.op == Op::Const || in.op == Op::Real || in.op == Op::OneHot || in.op == Op::ZerosLike;
    const std::string under = fmt::format("under --precision {}", policy_name(options_.policy));
    if (in.op == Op::Cast) {
      const core::CastTarget target = in.attr<core::attr::CastTo>().target;
      if (target == core::CastTarget::F32Acc)
        return {FloatType::F32, FloatType::F32, false, false, Reason::Cast, "`as f32acc`: the f32 accumulator is kept"};
      if (std::optional<FloatType> t = named_float_type(target))
        return {*t, *t, false, false, Reason::Cast, fmt::format("`as {}`", core::cast_target_name(target))};
    }
    if (is_region(mode)) {
      FloatType r = mode == Numerics::RegionBf16 ? FloatType::BF16 : FloatType::F16;
      if (constant)
        return {FloatType::F32, FloatType::F32, false, true, Reason::Region,
                "a scalar constant inside precision(…): kept f32, not read down"};
      return {r, reduces ? half_acc(r) : r, true, false, Reason::Region,
              fmt::format("inside precision({}): operands cast down, stored {}", name(r), name(r)), r};
    }
    // `matmul(…, out = f64)`: the f64 accumulator is stored under any policy
    // narrower than f64 (under f64 it changes nothing); a half policy still
    // reads the operands down. Inside a region the region wins (above).
    if (core::requested_out(in) == core::attr::ProductOut::Out::F64 && p != FloatType::F64)
      return {FloatType::F64,
              FloatType::F64,
              half_policy(),
              false,
              Reason::OutRequest,
              fmt::format("{} operands, the f64 accumulator stored (`out = f64`)", name(p)),
              half_policy() ? p : FloatType::F64};
    if (mode == Numerics::High) {
      FloatType t = half_policy() ? FloatType::F32 : p;
      Reason reason = from_prelude(in) ? Reason::LibraryMark : Reason::Island;
      return {t, t, false, constant, reason,
              fmt::format("{} {}", reason == Reason::LibraryMark ? "a library function's numerics(high)" : "inside numerics(high)", under)};
    }
    if (in.op == Op::Field) {
      const elab::ParamInfo* decl = param_decl(fn, in);
      if (decl && decl->numerics_high && half_policy())
        return {FloatType::F32, FloatType::F32, false, false, Reason::ParamMark,
                "a `numerics high` parameter: its master is read directly"};
      return {p, p, false, false, Reason::Policy,
              half_policy() ? fmt::format("the parameter's master cast down to {} once a step", name(p))
                            : fmt::format("the parameter, in the policy's {}", name(p))};
    }
    if (!half_policy()) return {p, p, false, constant, Reason::Policy, fmt::format("the policy's {}", name(p))};
    // A half policy.
    if (constant) return {FloatType::F32, FloatType::F32, false, true, Reason::Policy, "a scalar constant stays f32 beside half values"};
    if (reads_high)
      return {FloatType::F32, FloatType::F32, false, false, Reason::ParamMark, "reads a `numerics high` parameter: computes in f32"};
    if (product) {
      if (core::requested_out(in) == core::attr::ProductOut::Out::F32)
        return {FloatType::F32, FloatType::F32, true, false, Reason::OutRequest,
                fmt::format("{} operands, the f32 accumulator stored (`out = f32`)", name(p)), p};
      return {p, half_acc(p), true, false, Reason::Policy,
              fmt::format("a product: {} operands, accumulated in {}", name(p), name(half_acc(p))), p};
    }
    if (in.op == Op::LogSumExp)
      return {FloatType::F32, FloatType::F32, false, false, Reason::LibraryMark,
              "logsumexp is sensitive (the prelude's mark): computed and kept in f32"};
    if (core::op_info(in.op).draws)
      return {FloatType::F32, FloatType::F32, false, false, Reason::Policy, "a random draw is made in f32"};
    // Element-wise, reductions and copies: the half once a half operand is met.
    bool meets_half = false;
    std::optional<FloatType> widest;
    for (int a : in.args) {
      const auto& st = table[a];
      if (!st || st->weak) continue;
      meets_half = meets_half || is_half(st->storage);
      widest = widest ? wider(*widest, st->storage) : st->storage;
    }
    if (meets_half)
      return {p, reduces ? half_acc(p) : p, false, false, Reason::Policy,
              is_copy(in.op) ? fmt::format("a copy of a half value ({})", name(p)) : fmt::format("meets a half value ({}) {}", name(p), under)};
    FloatType t = widest.value_or(FloatType::F32);
    return {t, t, false, false, Reason::Policy, fmt::format("no half operand: stays {} {}", name(t), under)};
  }

  /// Whether a product site's steps can be fused multiply-adds: an f64 or
  /// f32 accumulator, and every operand, as the site reads it, a value of it
  /// (a fused f32 step is fmaf, which takes f32 operands).
  static bool fma_defined(const core::Instr& in, const SiteType& st, const std::vector<std::optional<SiteType>>& table) {
    if (!is_product(in.op)) return false;
    if (st.accumulator != FloatType::F64 && st.accumulator != FloatType::F32) return false;
    for (int a : in.args) {
      const auto& operand = table[a];
      if (!operand) continue;
      const FloatType read = st.read_down && !operand->weak ? st.read_as : operand->storage;
      if (wider(read, st.accumulator) != st.accumulator) return false;
    }
    return true;
  }

  /// The assignment's decision for `in`, over the type the policy gave it.
  /// Explicit types (casts, `out = f32`) and regions keep theirs; a caller
  /// checks an assignment against them first (check_assignment).
  void apply_decision(const core::Function& fn, const core::Instr& in, const std::map<int, std::string>& tree_path,
                      SiteType& st) const {
    if (st.reason == Reason::Cast || st.reason == Reason::OutRequest || st.reason == Reason::Region) return;
    const Assignment& a = *options_.assignment;
    if (in.op == Op::Field) {
      auto it = tree_path.find(in.args.at(0));
      if (it == tree_path.end()) return;
      const std::string path = it->second + in.attr<core::attr::Member>().name;
      auto d = a.params.find(path);
      if (d == a.params.end()) return;
      st = {d->second, d->second, false, false, Reason::Solved, fmt::format("reads `{}`, decided {}", path, name(d->second))};
      return;
    }
    const std::string site = core::decision_site(prog_, fn, in);
    auto d = a.sites.find(site);
    if (d == a.sites.end()) return;
    auto wide = a.accumulators.find(site);
    const FloatType acc = d->second == FloatType::F64 ? FloatType::F64
                          : wide != a.accumulators.end() ? wide->second
                                                         : FloatType::F32;
    st = {d->second, core::op_info(in.op).reduction ? acc : d->second, false, false, Reason::Solved,
          fmt::format("decided {}{}{}", name(d->second),
                      site == core::site_name(fn, in.id) ? "" : fmt::format(" at {}", site),
                      wide != a.accumulators.end() && d->second != FloatType::F64
                          ? fmt::format(", accumulating in {}", name(wide->second))
                          : "")};
  }

  /// The realizer as the Core walker's domain (core/walk.h): a value is its
  /// realized type; a callee is realized in the caller's numerics, its
  /// parameter reads recorded under the caller's tree path. A fold's θ and
  /// its gradients carry no type (their reads are the paths').
  struct Callees {
    using Value = Carry;
    using Dims = core::NoDims;  // every function is realized at the run's dimensions
    using Forward = core::NoForward;
    Realizer& r;
    Numerics mode;
    const std::optional<std::string>& prefix;
    int depth;  ///< of the calling frame

    static Dims callee_dims(const core::Instr&, Dims) { return {}; }
    /// The fold's copy count at the run's dimensions (8 if unknown), at most
    /// 8 for a fold, whose copies reach their fixed point sooner (settled),
    /// and 64 for a fold_vjp, whose cotangents are realized copy by copy.
    int64_t copies(const core::Instr& in, Dims) const {
      const int64_t n = in.sizes.empty() ? 8 : in.sizes[0].evaluate(r.dims_).value_or(8);
      return std::min<int64_t>(n, in.op == Op::Fold ? 8 : 64);
    }
    Carry evaluate(const core::Evaluation<Forward>& e, const std::vector<Carry>& args, Dims) {
      return r.realize_function(e.function, mode, args, prefix, depth + 1);
    }
    static bool settled(const Carry& before, const Carry& after) { return before == after; }
    static Carry copy_of(const Carry&, int64_t) { return {}; }
    static Carry for_copy(const Carry& operand, int64_t) { return operand; }
    static Carry stack(const Carry&, const std::vector<Carry>&) { return {}; }
    static Carry tuple(std::vector<Carry> elements) {
      Carry c;
      c.tuple = true;
      c.elements = std::move(elements);
      return c;
    }
    static Carry element(const Carry& tuple, size_t k) {
      return tuple.tuple && k < tuple.elements.size() ? tuple.elements[k] : Carry{};
    }
  };

  /// Why a call's, a fold's or a tuple element's site has the type it carries.
  std::string structural_why(const core::Instr& in) const {
    if (in.op == Op::Call)
      return fmt::format("the result of {}", core::site_name(prog_.functions[in.callee],
                                                             prog_.functions[in.callee].result_value));
    if (in.op == Op::Fold) return fmt::format("the result of the last copy of {}", prog_.functions[in.callee].name);
    if (in.op == Op::TupleGet) return "a tuple's element, as stored";
    return "";  // a tuple (a fold_vjp's among them) has no site type
  }

  /// Realizes `f` in `context` for `args`, recording the parameter reads
  /// under `theta_prefix`; returns the result's type.
  Carry realize_function(int f, Numerics context, const std::vector<Carry>& args,
                         std::optional<std::string> theta_prefix, int depth) {
    if (f < 0 || depth > 256) return {};
    const std::string sig = signature(args);
    first_reached_.emplace(table_key(f, context, sig), first_reached_.size());
    const std::string key = fmt::format("{}|{}|{}|{}", f, static_cast<int>(context), sig, theta_prefix.value_or("-"));
    if (const FunctionRealization* done = out_.find(f, context, sig); done && walked_.count(key)) return done->result;
    walked_.insert(key);
    const core::Function& fn = prog_.functions[f];
    FunctionRealization r;
    r.function = f;
    r.context = context;
    r.signature = sig;
    r.args = args;
    r.values.resize(fn.value_count() + 1);
    std::vector<Carry> carry(fn.value_count() + 1);
    for (size_t i = 0; i < fn.args.size() && i < args.size(); ++i) {
      int id = fn.args[i].id;
      carry[id] = args[i];
      if (is_real_tensor(fn.args[i].type) && args[i].type) {
        FloatType t = *args[i].type;
        r.values[id] = depth == 0 ? SiteType{t, t, false, false, Reason::Input,
                                             half_policy() ? "data enters in f32 and stays f32 until it meets a half value"
                                                           : fmt::format("an argument of the entry, cast to {} on entry", name(t))}
                                  : SiteType{t, t, false, false, Reason::Carried, "an argument: the caller's value"};
      }
    }
    std::map<int, std::string> tree_path;
    if (theta_prefix && !fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params) tree_path[fn.args[0].id] = *theta_prefix;
    std::set<int> high_reads;  // values that read a `numerics high` parameter
    for (const core::Instr& in : fn.body) {
      Numerics mode = in.numerics != Numerics::Default ? in.numerics : context;
      auto carried = [&](const Carry& c, std::string why) {
        carry[in.id] = c;
        if (is_real_tensor(in.type) && c.type) r.values[in.id] = SiteType{*c.type, *c.type, false, false, Reason::Carried, std::move(why)};
      };
      switch (in.op) {
        case Op::Call:
        case Op::Fold:
        case Op::FoldVjp:
        case Op::TupleGet:
        case Op::MakeTuple: {
          // As the interpreter runs them: a fold_vjp's copies forward, then
          // their vjps from the last copy back, each realized for the types it meets.
          std::optional<std::string> prefix;
          if (!in.args.empty())
            if (auto it = tree_path.find(in.args[0]); it != tree_path.end()) prefix = it->second;
          Callees callees{*this, mode, prefix, depth};
          carried(core::walk_structural(
                      callees, in, [&](size_t k) -> const Carry& { return carry[in.args.at(k)]; }, core::NoDims{}),
                  structural_why(in));
          continue;
        }
        case Op::Field: {
          auto it = tree_path.find(in.args.at(0));
          std::string path = it != tree_path.end() ? it->second + in.attr<core::attr::Member>().name : "";
          if (in.type.kind == elab::TypeKind::Params) {
            if (it != tree_path.end()) tree_path[in.id] = path + ".";
            continue;
          }
          const elab::ParamInfo* decl = param_decl(fn, in);
          if (decl && decl->numerics_high) high_reads.insert(in.id);
          break;
        }
        case Op::Const:
        case Op::ConstInt:
        case Op::ConstBool:
        case Op::HostConst:
        case Op::Real:
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
      if (!is_real_tensor(in.type)) continue;
      bool reads_high = false;
      if (in.op != Op::Field && in.op != Op::Cast)
        for (int a : in.args) reads_high = reads_high || high_reads.count(a) > 0;
      SiteType st = site_type(fn, in, mode, r.values, reads_high);
      if (options_.assignment) apply_decision(fn, in, tree_path, st);
      if (options_.fused_products) st.fma = fma_defined(in, st, r.values);
      r.values[in.id] = st;
      carry[in.id].type = st.storage;
      if (in.op == Op::Field) {
        if (auto it = tree_path.find(in.args.at(0)); it != tree_path.end())
          reads_[it->second + in.attr<core::attr::Member>().name].push_back({st.storage, core::site_name(fn, in.id)});
      }
    }
    r.result = fn.result_value > 0 ? carry[fn.result_value] : Carry{};
    Carry result = r.result;
    if (!out_.find(f, context, sig)) out_.functions.push_back(std::move(r));
    return result;
  }

  void realize_params(const elab::ParamsType& model, const std::map<std::string, int64_t>& dims) {
    auto types = prog_.flatten(model);
    auto decls = prog_.flatten_decls(model);
    FloatType p = policy();
    FloatType master = p == FloatType::F64 ? FloatType::F64 : FloatType::F32;
    for (size_t i = 0; i < types.size(); ++i) {
      ParamStorage s;
      s.path = types[i].first;
      s.frozen = decls[i]->frozen;
      s.numerics_high = decls[i]->numerics_high;
      s.elements = 1;
      for (const elab::Axis& a : types[i].second.axes) s.elements *= a.size.evaluate(dims).value_or(0);
      const auto& reads = reads_[s.path];
      if (s.frozen) {
        // Stored as its readers read it: the widest read type, if any reader reads it.
        FloatType widest = reads.empty() ? master : reads.front().first;
        std::string wide_site = reads.empty() ? "" : reads.front().second;
        for (const auto& [t, site] : reads)
          if (wider(t, widest) == t && t != widest) {
            widest = t;
            wide_site = site;
          }
        s.stored = widest;
        s.reason = Reason::Frozen;
        s.why = reads.empty() ? "frozen, and read nowhere: kept at the master type"
                : is_half(widest) ? fmt::format("frozen: every reader reads {}, so it is stored so (rounded once)", name(widest))
                                  : fmt::format("frozen: read in {} at {}", name(widest), wide_site);
      } else if (s.numerics_high) {
        s.stored = master;
        s.reason = Reason::ParamMark;
        s.why = "`numerics high`: its master is read directly";
      } else if (auto d = options_.assignment ? options_.assignment->params.find(s.path)
                                              : std::map<std::string, FloatType>::const_iterator{};
                 options_.assignment && d != options_.assignment->params.end()) {
        s.stored = options_.keep_masters ? master : d->second;
        s.reason = Reason::Solved;
        s.why = options_.keep_masters ? fmt::format("the trained master stays {}; reads are rounded to the decision's {}",
                                                    name(master), name(d->second))
                                      : fmt::format("decided {}", name(d->second));
      } else {
        s.stored = master;
        s.reason = Reason::Master;
        s.why = is_half(p) ? fmt::format("the trained master stays {}; reads are cast to {} once a step", name(master), name(p))
                           : fmt::format("the trained value, in the policy's {}", name(master));
      }
      out_.params.push_back(s);
    }
  }

  static std::string table_key(int f, Numerics context, const std::string& sig) {
    return fmt::format("{}|{}|{}", f, static_cast<int>(context), sig);
  }
  static std::string table_key(const FunctionRealization& r) { return table_key(r.function, r.context, r.signature); }

  const elab::Program& prog_;
  RealizeOptions options_;
  Realization out_;
  std::map<std::string, int64_t> dims_;
  std::map<std::string, size_t> first_reached_;
  std::set<std::string> walked_;
  std::map<std::string, std::vector<std::pair<FloatType, std::string>>> reads_;
};

}  // namespace

Realization realize(const elab::Program& prog, int entry, const RealizeOptions& options,
                    const std::map<std::string, int64_t>& dims) {
  Realizer r(prog, options);
  return r.run(entry, dims);
}

std::string print_realization(const elab::Program& prog, const Realization& r) {
  std::string out = fmt::format("realization of `{}` under --precision {}{}{}\n", prog.functions[r.entry].name,
                                policy_name(r.policy), r.half_intermediates ? " --half-intermediates" : "",
                                r.fused_products ? " --product-step fma" : "");
  out += fmt::format("{:<28} {:<10} {:<6} {:<6} {:<14} {}\n", "site", "op", "type", "acc", "reason", "why");
  for (const FunctionRealization& fr : r.functions) {
    const core::Function& fn = prog.functions[fr.function];
    if (fr.function != r.entry || fr.context != Numerics::Default)
      out += fmt::format("-- {}{}{}\n", fn.name, fr.signature,
                         fr.context != Numerics::Default ? fmt::format(" inside {}", core::numerics_name(fr.context)) : "");
    for (int id = 1; id <= fn.value_count(); ++id) {
      const auto& st = fr.values[id];
      if (!st) continue;
      bool is_arg = id <= static_cast<int>(fn.args.size());
      const char* op = is_arg ? "arg" : core::op_info(fn.body[id - fn.args.size() - 1].op).spelling;
      bool reduces = !is_arg && (core::op_info(fn.body[id - fn.args.size() - 1].op).reduction);
      out += fmt::format("{:<28} {:<10} {:<6} {:<6} {:<14} {}\n", core::site_name(fn, id), op, name(st->storage),
                         reduces ? name(st->accumulator) : "", reason_name(st->reason),
                         st->fma ? st->why + "; each step one fused multiply-add" : st->why);
    }
  }
  if (!r.params.empty()) {
    out += fmt::format("{:<28} {:<6} {:>10} {:<14} {}\n", "parameter", "stored", "bytes", "reason", "why");
    for (const ParamStorage& p : r.params)
      out += fmt::format("{:<28} {:<6} {:>10} {:<14} {}\n", p.path, name(p.stored),
                         p.elements * runtime::float_type_info(p.stored).storage_bits / 8, reason_name(p.reason), p.why);
    out += fmt::format("parameters at rest: {} bytes\n", r.param_bytes());
  }
  return out;
}

nlohmann::ordered_json realization_json(const elab::Program& prog, const Realization& r) {
  nlohmann::ordered_json j;
  j["entry"] = prog.functions[r.entry].name;
  j["policy"] = policy_name(r.policy);
  j["half_intermediates"] = r.half_intermediates;
  if (r.fused_products) j["product_step"] = "fma";
  j["sites"] = nlohmann::ordered_json::array();
  for (const FunctionRealization& fr : r.functions) {
    const core::Function& fn = prog.functions[fr.function];
    for (int id = 1; id <= fn.value_count(); ++id) {
      const auto& st = fr.values[id];
      if (!st) continue;
      bool is_arg = id <= static_cast<int>(fn.args.size());
      nlohmann::ordered_json s;
      s["site"] = core::site_name(fn, id);
      s["op"] = is_arg ? "arg" : core::op_info(fn.body[id - fn.args.size() - 1].op).spelling;
      s["type"] = name(st->storage);
      s["accumulator"] = name(st->accumulator);
      if (st->fma) s["step"] = "fma";
      s["reason"] = reason_name(st->reason);
      s["why"] = st->why;
      if (fr.context != Numerics::Default) s["context"] = core::numerics_name(fr.context);
      if (fr.function != r.entry) s["arguments"] = fr.signature;
      j["sites"].push_back(s);
    }
  }
  j["params"] = nlohmann::ordered_json::array();
  for (const ParamStorage& p : r.params)
    j["params"].push_back({{"path", p.path},
                           {"stored", name(p.stored)},
                           {"reason", reason_name(p.reason)},
                           {"why", p.why},
                           {"elements", p.elements},
                           {"bytes", p.elements * runtime::float_type_info(p.stored).storage_bits / 8}});
  j["param_bytes"] = r.param_bytes();
  return j;
}

}  // namespace quire::precision
