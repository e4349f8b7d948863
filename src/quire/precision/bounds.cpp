// The bound walk (bounds.h): each site's bound from its operands', per rule.
// The element-wise operations' propagation rules are in elementwise_bounds.h,
// the rules of a rounding, a kernel's own error and an accumulation's in
// rounding_rules.h (both shared with the running walk); the sums,
// contractions and copies are bounded in `step` below, beside the shapes it
// computes. The printout and the JSON are in bounds_print.cpp.
//
// Notation. For a real value v at one evaluation: M, m its envelope's largest
// and smallest |x|; n its element count; δ the bound of the rule being
// computed (componentwise and cond: max_i |v̂_i − v_i|; normwise: E ≥
// ‖v̂ − v‖_F, which is also ≥ max_i |v̂_i − v_i|, so every domain condition
// below reads δ = E under normwise). u_T, η_T: T's unit roundoff and smallest
// subnormal. One rounding to T of a value ŵ with |ŵ| ≤ M + δ adds
// u_T·(M + δ) + η_T/2.

#include "quire/precision/bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/core_geometry.h"
#include "quire/precision/elementwise_bounds.h"
#include "quire/precision/number_text.h"
#include "quire/precision/rounding_rules.h"
#include "quire/precision/running_bounds.h"
#include "quire/runtime/kernels.h"
#include "quire/support/text.h"

namespace quire::precision {

using core::Op;
using runtime::ElemKind;
using runtime::FloatType;
using runtime::Shape;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kComp = static_cast<int>(BoundRule::Componentwise);
constexpr int kNorm = static_cast<int>(BoundRule::Normwise);
constexpr int kCond = static_cast<int>(BoundRule::Cond);
constexpr int kMaxDepth = 256;  // calls are acyclic; this guards the invariant (as the interpreters)
using PerRule = std::array<double, kEnvelopeRules>;

bool is_real_tensor(const elab::Type& t) {
  return t.kind == elab::TypeKind::Tensor && t.tensor.elem == elab::Elem::Real;
}

ElemKind elem_kind(const elab::Type& t) {
  switch (t.tensor.elem) {
    case elab::Elem::I32:
      return ElemKind::I32;
    case elab::Elem::I64:
      return ElemKind::I64;
    case elab::Elem::Bool:
      return ElemKind::Bool;
    default:
      return ElemKind::Real;
  }
}

// ---------------------------------------------------------------------------
// The abstract value.

/// A value as the walk sees it: its shape and, for a real tensor, the type its
/// elements are values of, its exact magnitudes and each rule's error bound.
/// An integer tensor's error bounds |î − i|; a boolean's is 1 where it may
/// flip. `cause` indexes the walk's causes where an error is +inf.
struct Bounded {
  enum class Kind { Tensor, Key, Tuple, Params, Host } kind = Kind::Tensor;
  Shape shape;
  ElemKind elem = ElemKind::Real;
  FloatType type = FloatType::F64;
  double max_abs = kInf;  ///< unknown until the envelope (or the samples) says
  double min_abs = 0;
  PerRule error{};
  std::array<int, kEnvelopeRules> cause{-1, -1, -1};
  std::vector<Bounded> elements;
  std::shared_ptr<const std::map<std::string, Bounded>> params;  ///< relative path → leaf
  std::string path;                                              ///< a parameter leaf: its path in the entry's tree
  double input_rounding = -1;  ///< an entry argument's rounding, not yet charged to a site (the estimate)

  int64_t size() const { return runtime::element_count(shape); }
  bool real() const { return kind == Kind::Tensor && elem == ElemKind::Real; }
  bool tensor() const { return kind == Kind::Tensor; }
};

using Tree = std::map<std::string, Bounded>;

/// Appends the real leaves of a value (tuples' elements, trees' leaves).
void real_leaves(const Bounded& v, std::vector<const Bounded*>& out, int depth = 0) {
  if (depth > 64) return;
  if (v.real()) out.push_back(&v);
  for (const Bounded& e : v.elements) real_leaves(e, out, depth + 1);
  if (v.params)
    for (const auto& [p, leaf] : *v.params) real_leaves(leaf, out, depth + 1);
}

/// The realized type of a value passed to a function (as interp's carry_of).
Carry carry_of(const Bounded& v, int depth = 0) {
  Carry c;
  if (depth > 64) return c;
  if (v.real()) c.type = v.type;
  if (v.kind == Bounded::Kind::Tuple) {
    c.tuple = true;
    for (const Bounded& e : v.elements) c.elements.push_back(carry_of(e, depth + 1));
  }
  return c;
}

/// Broadcasting's result shape (runtime::broadcast_result_shape, on shapes alone).
Shape broadcast(const std::vector<std::pair<const Shape*, runtime::AxisMap>>& operands, int rank) {
  Shape s(static_cast<size_t>(rank), 1);
  for (size_t i = 0; i < s.size(); ++i)
    for (const auto& [shape, map] : operands) {
      const int a = map.at(i);
      if (a < 0) continue;
      const int64_t size = shape->at(static_cast<size_t>(a));
      if (size == 1) continue;
      if (s[i] == 1)
        s[i] = size;
      else if (s[i] != size)
        throw std::invalid_argument(fmt::format("operands broadcast to sizes {} and {}", s[i], size));
    }
  return s;
}

// ---------------------------------------------------------------------------
// The walk.

/// One site's running record over its evaluations.
struct SiteRecord {
  SiteBound bound;
  std::set<std::string> types;
  double largest_rounding = 0;  ///< the largest rounding of v in its type where it is rounded
  /// The (storage, accumulator) types of its evaluations that round it: the
  /// estimate takes the largest of their terms.
  std::set<std::pair<FloatType, FloatType>> rounded_as;
};

class BoundWalk {
 public:
  BoundWalk(const elab::Program& prog, const std::map<std::string, int64_t>& dims, const Realization& r,
            const Envelope& e)
      : prog_(prog), dims_(dims), realization_(r) {
    for (const SiteEnvelope& s : e.sites) sites_by_name_[s.site] = &s;
  }

  /// Walks the entry on abstract arguments built from the samples.
  Bounded run(int entry, const std::vector<std::vector<interp::Value>>& samples) {
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(entry));
    if (samples.empty()) throw std::invalid_argument("bounds: the envelope has no samples to take its inputs from");
    std::vector<Bounded> args;
    for (size_t i = 0; i < fn.args.size(); ++i) {
      std::vector<const interp::Value*> values;
      for (const auto& s : samples) {
        if (s.size() != fn.args.size())
          throw std::invalid_argument(
              fmt::format("`{}` takes {} arguments; a sample has {}", fn.name, fn.args.size(), s.size()));
        values.push_back(&s[i]);
      }
      args.push_back(entry_argument(values, core::site_name(fn, fn.args[i].id), 0));
    }
    return eval(entry, std::move(args), dims_, 0, core::Numerics::Default);
  }

  std::vector<InfiniteCause> causes;
  std::vector<SiteRecord> records;
  std::map<std::string, std::set<std::string>> param_readers;  ///< path → the Field sites that read it
  std::map<std::string, double> input_roundings;               ///< entry argument site → its rounding
  std::map<std::string, FloatType> input_types;                ///< entry argument site → the type it is rounded to
  std::set<std::string> min_abs_sites;                         ///< sites whose bound needs the envelope's min |x|
  std::set<std::string> condition_sites;                       ///< sums whose cond S came from their condition
  double worst_condition_used = 0;

 private:
  using Why = std::array<std::string, kEnvelopeRules>;

  /// The per-site facts the envelope gives (M, m, condition), checked against the walk's size.
  const SiteEnvelope* envelope_of(const std::string& site, int64_t elements) const {
    auto it = sites_by_name_.find(site);
    if (it == sites_by_name_.end()) return nullptr;
    if (it->second->elements < elements)
      throw std::invalid_argument(fmt::format(
          "the envelope records {} elements at {}, but the program has {} there at its dimensions: the envelope was "
          "calibrated on another program or at other dimensions",
          it->second->elements, site, elements));
    return it->second;
  }

  /// An entry argument from every sample's value of it: its shape, its
  /// magnitudes over the samples, and the rounding of the cast on entry.
  /// `where` names it in a cause ("loss/%2", "parameter `w`").
  Bounded entry_argument(const std::vector<const interp::Value*>& values, const std::string& where, int depth) {
    Bounded b;
    if (depth > 64) return b;
    const interp::Value& first = *values.front();
    switch (first.kind) {
      case interp::Value::Kind::Key:
        b.kind = Bounded::Kind::Key;
        return b;
      case interp::Value::Kind::Host:
        b.kind = Bounded::Kind::Host;
        return b;
      case interp::Value::Kind::Tuple: {
        b.kind = Bounded::Kind::Tuple;
        for (size_t k = 0; k < first.elements.size(); ++k) {
          std::vector<const interp::Value*> parts;
          for (const interp::Value* v : values) parts.push_back(&v->elements.at(k));
          b.elements.push_back(entry_argument(parts, fmt::format("{}.{}", where, k), depth + 1));
        }
        return b;
      }
      case interp::Value::Kind::Params: {
        b.kind = Bounded::Kind::Params;
        auto tree = std::make_shared<Tree>();
        for (const auto& [leaf_path, t] : *first.params) {
          std::vector<const runtime::Tensor*> leaves;
          for (const interp::Value* v : values) leaves.push_back(&v->params->at(leaf_path));
          const ParamStorage* stored = realization_.param(leaf_path);
          Bounded leaf = entry_tensor(leaves, stored ? stored->stored : FloatType::F64,
                                      fmt::format("parameter `{}`", leaf_path), /*given=*/true);
          leaf.path = leaf_path;
          leaf.input_rounding = -1;  // a parameter's rounding is charged to its path
          tree->emplace(leaf_path, std::move(leaf));
        }
        b.params = std::move(tree);
        return b;
      }
      case interp::Value::Kind::Tensor: {
        std::vector<const runtime::Tensor*> tensors;
        for (const interp::Value* v : values) tensors.push_back(&v->tensor);
        return entry_tensor(tensors, realization_.input_type(), where);
      }
    }
    return b;
  }

  /// A tensor argument over the samples, cast to `type` (reals) on entry.
  /// `given`: the values are the ones every covered run has (the parameters
  /// the envelope was calibrated with), so their cast's error is the one
  /// measured on them, exactly (|round(x) − x| is exact in doubles), not
  /// u·max|x|; data arguments vary between inputs and take u·max|x|.
  Bounded entry_tensor(const std::vector<const runtime::Tensor*>& tensors, FloatType type, const std::string& where,
                       bool given = false) {
    Bounded b;
    b.shape = tensors.front()->shape;
    b.elem = tensors.front()->kind;
    b.max_abs = 0;
    b.min_abs = kInf;
    double rounding = 0;
    for (const runtime::Tensor* t : tensors) {
      if (t->shape != b.shape) throw std::invalid_argument("the samples' arguments differ in shape");
      if (t->is_real()) {
        for (double x : t->reals) {
          b.max_abs = std::max(b.max_abs, std::fabs(x));
          b.min_abs = std::min(b.min_abs, std::fabs(x));
          rounding = std::max(rounding, std::fabs(runtime::round_to(type, x) - x));
        }
      } else {
        for (int64_t x : t->ints) {
          b.max_abs = std::max(b.max_abs, std::fabs(static_cast<double>(x)));
          b.min_abs = std::min(b.min_abs, std::fabs(static_cast<double>(x)));
        }
      }
    }
    if (b.size() == 0) b.min_abs = 0;
    if (!b.real()) return b;
    b.type = FloatType::F64;
    b.input_rounding = rounding;
    Why why;
    if (given && std::isfinite(rounding)) {
      b.error[kComp] = b.error[kCond] = rounding;
      b.error[kNorm] = std::sqrt(static_cast<double>(b.size())) * rounding;
    } else if (!holds(type, FloatType::F64)) {
      round_to(b, type, &why);
    }
    b.type = type;
    for (int r = 0; r < kEnvelopeRules; ++r)
      if (!std::isfinite(b.error[r])) {
        causes.push_back({where, why[r].empty() ? "its values overflow on entry" : why[r]});
        b.cause[r] = static_cast<int>(causes.size()) - 1;
      }
    return b;
  }

  /// One rounding of v's elements to `t`: each rule's error grows by
  /// u_t·(M + δ) + η_t/2 (rounded(); under normwise, u_t·(√n·M + E) + √n·η_t/2).
  void round_to(Bounded& v, FloatType t, Why* why) const {
    const double u = unit(t), half_tiny = tiny(t) / 2, root_n = std::sqrt(static_cast<double>(v.size()));
    for (int r = 0; r < kEnvelopeRules; ++r) {
      double& d = v.error[r];
      const double componentwise = rounded(d, v.max_abs, t);
      if (!std::isfinite(componentwise)) {
        if (why && (*why)[r].empty()) (*why)[r] = overflow_why(v.max_abs, d, t);
        d = kInf;
        continue;
      }
      d = r == kNorm ? d + u * (times(root_n, v.max_abs) + d) + root_n * half_tiny : componentwise;
    }
    v.type = t;
  }

  Bounded eval(int function, std::vector<Bounded> args, const std::map<std::string, int64_t>& dims, int depth,
               core::Numerics context) {
    if (depth > kMaxDepth) throw std::logic_error("internal: calls nest deeper than the bound walk allows");
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
    if (!fn.checked || fn.result_value == 0)
      throw std::invalid_argument(fmt::format("`{}` did not elaborate", fn.name));
    if (args.size() != fn.args.size())
      throw std::logic_error(
          fmt::format("internal: `{}` takes {} arguments, given {}", fn.name, fn.args.size(), args.size()));
    std::vector<Carry> carries;
    for (const Bounded& a : args) carries.push_back(carry_of(a));
    const std::string sig = signature(carries);
    const FunctionRealization* table = realization_.find(function, context, sig);
    if (!table)
      throw std::logic_error(
          fmt::format("internal: `{}` is called with {} inside {}, which the realization did not reach", fn.name, sig,
                      core::numerics_name(context)));
    std::vector<Bounded> env(static_cast<size_t>(fn.value_count() + 1));
    for (size_t i = 0; i < args.size(); ++i) {
      if (depth == 0 && args[i].real() && args[i].input_rounding >= 0) {
        input_roundings[core::site_name(fn, fn.args[i].id)] = args[i].input_rounding;
        input_types[core::site_name(fn, fn.args[i].id)] = args[i].type;
        args[i].input_rounding = -1;
      }
      env[i + 1] = std::move(args[i]);
    }
    for (const core::Instr& in : fn.body) {
      env[static_cast<size_t>(in.id)] =
          instruction(fn, in, core::site_name(fn, in.id), env, dims, depth, context, *table);
    }
    return env[static_cast<size_t>(fn.result_value)];
  }

  /// One instruction: its result's bounds before the store, the store's
  /// rounding, the causes of any +inf, and the site's record.
  Bounded instruction(const core::Function& fn, const core::Instr& in, const std::string& site,
                      const std::vector<Bounded>& env, const std::map<std::string, int64_t>& dims, int depth,
                      core::Numerics context, const FunctionRealization& table) {
    const std::optional<SiteType>& st = table.values.at(static_cast<size_t>(in.id));
    Why why;
    std::optional<FloatType> lies_in = FloatType::F64;  // nullopt: 0s and 1s, exact in every type
    bool computed = false;  // the kernel rounds (an f64 operation, a library function, a sum)
    Bounded v = step(fn, in, site, env, dims, depth, context, table, st ? &*st : nullptr, why, lies_in, computed);
    bool rounded = computed;
    if (v.real()) {
      if (!st) {
        v.type = FloatType::F64;  // no table entry: the kernel's f64 value, as the interpreter keeps it
      } else if (st->reason != Reason::Carried) {
        for (FloatType t : store_roundings(*st, realization_.half_intermediates, in.op, lies_in)) {
          round_to(v, t, &why);
          rounded = true;
        }
        v.type = st->storage;
      }
    }
    settle(v, in, env, site, why);
    if (is_real_tensor(in.type) && v.real()) record(fn, in, site, v, st ? &*st : nullptr, rounded);
    return v;
  }

  /// Where an error is +inf (or NaN): the first operand's cause, or a new
  /// one at this site with the reason the step gave.
  void settle(Bounded& v, const core::Instr& in, const std::vector<Bounded>& env, const std::string& site,
              const Why& why) {
    if (!v.tensor()) return;
    for (int r = 0; r < kEnvelopeRules; ++r) {
      if (std::isfinite(v.error[r])) {
        v.cause[r] = -1;
        continue;
      }
      v.error[r] = kInf;
      if (v.cause[r] >= 0) continue;
      for (int a : in.args) {
        std::vector<const Bounded*> leaves;
        const Bounded& operand = env.at(static_cast<size_t>(a));
        if (operand.tensor())
          leaves.push_back(&operand);
        else
          real_leaves(operand, leaves);
        for (const Bounded* leaf : leaves)
          if (leaf->cause[r] >= 0 && !std::isfinite(leaf->error[r])) {
            v.cause[r] = leaf->cause[r];
            break;
          }
        if (v.cause[r] >= 0) break;
      }
      if (v.cause[r] >= 0) continue;
      causes.push_back({site, why[r].empty() ? "the bound grows past the largest double" : why[r]});
      v.cause[r] = static_cast<int>(causes.size()) - 1;
    }
  }

  void record(const core::Function& fn, const core::Instr& in, const std::string& site, const Bounded& v,
              const SiteType* st, bool rounded) {
    auto [it, fresh] = record_index_.emplace(site, records.size());
    if (fresh) {
      SiteRecord rec;
      rec.bound.site = site;
      rec.bound.function = fn.name;
      rec.bound.op = core::op_info(in.op).spelling;
      const SiteEnvelope* e = sites_by_name_.count(site) ? sites_by_name_.at(site) : nullptr;
      rec.bound.magnitude = e ? e->max_abs : kNaN;
      if (e) rec.bound.condition = e->condition;
      records.push_back(std::move(rec));
    }
    SiteRecord& rec = records[it->second];
    SiteBound& b = rec.bound;
    b.evaluations += 1;
    b.elements = std::max(b.elements, v.size());
    rec.types.insert(runtime::float_type_name(v.type));
    for (int r = 0; r < kEnvelopeRules; ++r)
      if (std::isnan(b.bound[r]) || !(v.error[r] <= b.bound[r])) b.bound[r] = v.error[r];
    if (!std::isfinite(v.error[kComp]) && !b.infinite && v.cause[kComp] >= 0)
      b.infinite = causes.at(static_cast<size_t>(v.cause[kComp]));
    // The estimate: the rounding of v in its realized type, where v is rounded at all.
    const bool carried = st && st->reason == Reason::Carried;
    double r = 0;
    if (rounded && !carried) {
      rec.rounded_as.insert({v.type, st ? st->accumulator : v.type});
      const SiteEnvelope* e = sites_by_name_.count(site) ? sites_by_name_.at(site) : nullptr;
      const double m = e ? e->max_abs : v.max_abs;
      r = unit(v.type) * m;
      if (e && v.type != FloatType::F64)
        if (auto found = e->rounding.find(runtime::float_type_name(v.type)); found != e->rounding.end())
          r = found->second;
    }
    if (in.op == Op::TupleGet && v.input_rounding >= 0) {
      r = std::max(r, v.input_rounding);
      rec.rounded_as.insert({v.type, v.type});
    }
    rec.largest_rounding = std::max(rec.largest_rounding, r);
  }

  Bounded step(const core::Function& fn, const core::Instr& in, const std::string& site,
               const std::vector<Bounded>& env, const std::map<std::string, int64_t>& dims, int depth,
               core::Numerics context, const FunctionRealization& table, const SiteType* st, Why& why,
               std::optional<FloatType>& lies_in, bool& computed);
  /// This walk as the Core walker's domain (core/walk.h).
  struct Callees;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  const Realization& realization_;
  std::map<std::string, const SiteEnvelope*> sites_by_name_;
  std::map<std::string, size_t> record_index_;
};

struct BoundWalk::Callees : interp::RunDims {
  using Value = Bounded;
  using Forward = core::NoForward;
  BoundWalk& walk;
  int depth;            ///< of the calling frame
  core::Numerics mode;  ///< the numerics form the callee runs in

  Bounded evaluate(const core::Evaluation<Forward>& e, std::vector<Bounded> args, const Dims& dims) {
    return walk.eval(e.function, std::move(args), dims, depth + 1, mode);
  }
  /// Every copy's θ has the same bounds: the leaves without their stack axis.
  static Bounded copy_of(const Bounded& stacked, int64_t) {
    auto tree = std::make_shared<Tree>(*stacked.params);
    for (auto& [path, leaf] : *tree)
      if (!leaf.shape.empty()) leaf.shape.erase(leaf.shape.begin());
    Bounded theta;
    theta.kind = Bounded::Kind::Params;
    theta.params = std::move(tree);
    return theta;
  }
  /// A fold's further operand (a key, booleans, integers): every copy's is alike.
  static Bounded for_copy(const Bounded& operand, int64_t) { return operand; }
  /// Each leaf stacks its copies: the largest error, the Frobenius norms' root
  /// sum of squares (summed from the last copy, the reverse sweep's order).
  static Bounded stack(const Bounded& stacked, const std::vector<Bounded>& grads) {
    auto tree = std::make_shared<Tree>();
    for (const auto& [path, leaf] : *stacked.params) {
      Bounded g = leaf;
      g.error = {};
      g.cause = {-1, -1, -1};
      g.max_abs = 0;
      g.type = FloatType::F64;
      double squares = 0;
      for (auto copy = grads.rbegin(); copy != grads.rend(); ++copy) {
        const Bounded& part = copy->params->at(path);
        g.error[kComp] = std::max(g.error[kComp], part.error[kComp]);
        g.error[kCond] = std::max(g.error[kCond], part.error[kCond]);
        squares += part.error[kNorm] * part.error[kNorm];
        g.max_abs = std::max(g.max_abs, part.max_abs);
        for (int r = 0; r < kEnvelopeRules; ++r)
          if (part.cause[r] >= 0 && g.cause[r] < 0) g.cause[r] = part.cause[r];
      }
      g.error[kNorm] = std::sqrt(squares);
      tree->emplace(path, std::move(g));
    }
    Bounded grads_tree;
    grads_tree.kind = Bounded::Kind::Params;
    grads_tree.params = std::move(tree);
    return grads_tree;
  }
  static Bounded tuple(std::vector<Bounded> elements) {
    Bounded t;
    t.kind = Bounded::Kind::Tuple;
    t.elements = std::move(elements);
    return t;
  }
  static Bounded element(const Bounded& tuple, size_t k) { return tuple.elements.at(k); }
};

Bounded BoundWalk::step(const core::Function& fn, const core::Instr& in, const std::string& site,
                        const std::vector<Bounded>& env, const std::map<std::string, int64_t>& dims, int depth,
                        core::Numerics context, const FunctionRealization& table, const SiteType* st, Why& why,
                        std::optional<FloatType>& lies_in, bool& computed) {
  // Operands, read down to the site's type where it reads down (scalar constants excepted).
  std::vector<Bounded> down(in.args.size());
  std::vector<bool> is_down(in.args.size(), false);
  if (st && st->read_down)
    for (size_t k = 0; k < in.args.size(); ++k) {
      const Bounded& v = env.at(static_cast<size_t>(in.args[k]));
      const auto& operand_site = table.values.at(static_cast<size_t>(in.args[k]));
      if (!v.real() || !reads_down(st, operand_site, v.type)) continue;
      down[k] = v;
      is_down[k] = true;
      if (holds(st->read_as, v.type))
        down[k].type = st->read_as;
      else
        round_to(down[k], st->read_as, &why);
    }
  auto arg = [&](size_t k) -> const Bounded& {
    return is_down.at(k) ? down[k] : env.at(static_cast<size_t>(in.args.at(k)));
  };
  auto explicit_count = [&](size_t k) { return fn.type_of(in.args.at(k)).tensor.axes.size(); };
  auto rest_of = [&](size_t k) {
    return static_cast<int>(static_cast<int64_t>(arg(k).shape.size()) - static_cast<int64_t>(explicit_count(k)));
  };
  const core::Numerics mode = in.numerics != core::Numerics::Default ? in.numerics : context;
  const FloatType acc = st ? st->accumulator : FloatType::F64;

  // The result, with the envelope's magnitudes once its shape is known.
  Bounded out;
  auto tensor_result = [&](Shape shape) {
    out.kind = Bounded::Kind::Tensor;
    out.shape = std::move(shape);
    out.elem = in.type.is_tensor() ? elem_kind(in.type) : ElemKind::Real;
    out.max_abs = kInf;
    out.min_abs = 0;
    if (out.elem != ElemKind::Real) return;
    if (const SiteEnvelope* e = envelope_of(site, out.size())) {
      out.max_abs = e->max_abs;
      out.min_abs = e->min_abs;
    } else {
      // Without its magnitude no rounding or product of it is bounded: +inf wherever M is needed.
      for (int r = 0; r < kEnvelopeRules; ++r) why[r] = "not covered: the envelope records no magnitude for this site";
    }
  };
  // The f64 kernel's rounding of a computed element (and a library function's own error).
  // (kernel_charged: a library function's 8·u·(max(|x|, |v|) + δx), then the rounding.)
  auto charge_kernel = [&](const Bounded& x, bool library) {
    computed = true;
    lies_in = FloatType::F64;
    const double root_n = std::sqrt(static_cast<double>(out.size()));
    const double scale = std::max(x.max_abs, out.max_abs);
    for (int r = 0; r < kEnvelopeRules; ++r) {
      double& d = out.error[r];
      if (r != kNorm) {
        d = kernel_charged(d, out.max_abs, library ? scale + x.error[r] : -1);
        continue;
      }
      if (library) d += 8 * kU64 * (times(root_n, scale) + x.error[r]);
      d = d + kU64 * (times(root_n, out.max_abs) + d) + root_n * tiny(FloatType::F64) / 2;
    }
  };

  switch (in.op) {
    case Op::Const: {
      tensor_result({});
      // The f64 literal against its decimal; `inf` and `nan` are exactly what they say.
      const double literal = in.attr<core::attr::Literal>().value;
      for (int r = 0; r < kEnvelopeRules; ++r) out.error[r] = std::isfinite(literal) ? kU64 * std::fabs(literal) : 0;
      computed = true;                               // a rounding of its decimal, for the estimate
      return out;
    }
    case Op::HostConst:
    case Op::ConstInt:
    case Op::ConstBool:
      out.kind = Bounded::Kind::Host;
      return out;
    case Op::Real:
      tensor_result({});
      return out;  // a host f64, the same in both interpreters
    case Op::Field: {
      const Bounded& tree = arg(0);
      if (!tree.params) throw std::logic_error("internal: a field of something that is not a parameter tree");
      if (in.type.kind == elab::TypeKind::Tensor) {
        const std::string& name = in.attr<core::attr::Member>().name;
        auto it = tree.params->find(name);
        if (it == tree.params->end()) throw std::invalid_argument(fmt::format("parameter `{}` is missing", name));
        const Bounded& leaf = it->second;
        tensor_result(leaf.shape);
        out.error = leaf.error;
        out.cause = leaf.cause;
        out.path = leaf.path;
        lies_in = leaf.type;
        if (!leaf.path.empty()) param_readers[leaf.path].insert(site);
        return out;
      }
      out.kind = Bounded::Kind::Params;
      auto sub = std::make_shared<Tree>(interp::subtree(*tree.params, in.attr<core::attr::Member>().name));
      out.params = std::move(sub);
      return out;
    }
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
    case Op::TupleGet:
    case Op::MakeTuple: {
      Callees callees{{prog_, dims_}, *this, depth, mode};
      out = core::walk_structural(callees, in, arg, dims);
      if (out.real()) {
        // Carried (a call's result, a tuple's element): its own bounds, with
        // the envelope's magnitudes (the same values).
        if (const SiteEnvelope* e = envelope_of(site, out.size())) {
          out.max_abs = e->max_abs;
          out.min_abs = e->min_abs;
        }
        lies_in = out.type;
      }
      if (in.op == Op::TupleGet && depth > 0) out.input_rounding = -1;
      return out;
    }
    case Op::KeySplit: {
      out.kind = Bounded::Kind::Tuple;
      Bounded key;
      key.kind = Bounded::Kind::Key;
      out.elements = {key, key};
      return out;
    }
    case Op::Cast: {
      const Bounded& x = arg(0);
      tensor_result(x.shape);
      const core::CastTarget target = in.attr<core::attr::CastTo>().target;
      if (precision::cast_integer_kind(target)) {
        // Truncation moves an integer by at most 1 more than its operand's error; a boolean may flip.
        for (int r = 0; r < kEnvelopeRules; ++r) {
          const double d = x.error[r];
          out.error[r] = d == 0 ? 0 : (target == core::CastTarget::Bool ? 1 : d + 1);
          out.cause[r] = x.cause[r];
        }
        return out;
      }
      out.error = x.error;
      out.cause = x.cause;
      lies_in = x.real() ? x.type : FloatType::F64;  // integers convert exactly below 2^53
      const FloatType t = precision::named_float_type(target).value_or(FloatType::F64);
      if (!holds(t, *lies_in)) {
        round_to(out, t, &why);
        computed = true;
      }
      lies_in = t;
      return out;
    }
    case Op::MakeParams: {
      // Each leaf: +0, then the parts its path names added in f64.
      std::map<std::string, std::vector<const Bounded*>> parts;
      for (size_t k = 1; k < in.args.size(); ++k) {
        const std::string& path = in.paths.at(k - 1);
        const Bounded& part = arg(k);
        if (part.kind == Bounded::Kind::Params) {
          for (const auto& [p, leaf] : *part.params) parts[path + p].push_back(&leaf);
        } else {
          parts[path].push_back(&part);
        }
      }
      auto tree = std::make_shared<Tree>();
      for (const auto& [path, model] : *arg(0).params) {
        Bounded leaf;
        leaf.shape = model.shape;
        leaf.path = model.path;
        leaf.max_abs = 0;
        leaf.type = FloatType::F64;
        const auto found = parts.find(path);
        const std::vector<const Bounded*> none;
        const std::vector<const Bounded*>& adds = found == parts.end() ? none : found->second;
        PerRule terms{};
        for (const Bounded* p : adds) {
          leaf.max_abs += p->max_abs;
          for (int r = 0; r < kEnvelopeRules; ++r) {
            leaf.error[r] += p->error[r];
            if (p->cause[r] >= 0 && leaf.cause[r] < 0) leaf.cause[r] = p->cause[r];
          }
        }
        const double g = gamma(static_cast<double>(adds.size()) - 1, kU64);
        const double root_n = std::sqrt(static_cast<double>(leaf.size()));
        for (int r = 0; r < kEnvelopeRules; ++r)
          terms[r] =
              r == kNorm ? g * (times(root_n, leaf.max_abs) + leaf.error[r]) : g * (leaf.max_abs + leaf.error[r]);
        for (int r = 0; r < kEnvelopeRules; ++r) leaf.error[r] += terms[r];
        tree->emplace(path, std::move(leaf));
      }
      out.kind = Bounded::Kind::Params;
      out.params = std::move(tree);
      return out;
    }
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
    case Op::ZerosLike:
      break;
  }

  const core::OpInfo& info = core::op_info(in.op);
  if (info.elementwise) {
    int64_t result_rest = 0;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.at(k).rest) result_rest = std::max<int64_t>(result_rest, rest_of(k));
    const int rank = static_cast<int>(result_rest + static_cast<int64_t>(in.type.tensor.axes.size()));
    std::vector<std::pair<const Shape*, runtime::AxisMap>> maps;
    for (size_t k = 0; k < in.args.size(); ++k)
      maps.emplace_back(&arg(k).shape, interp::axis_map(in.align.at(k), static_cast<int64_t>(arg(k).shape.size()),
                                                        explicit_count(k), result_rest));
    tensor_result(in.args.size() == 1 && in.op != Op::PowConst ? arg(0).shape : broadcast(maps, rank));
    const double n_out = static_cast<double>(out.size());
    // Normwise: an operand of n_x elements broadcast into n_y multiplies its norm by √(n_y/n_x).
    auto spread = [&](size_t k) {
      const double n = static_cast<double>(arg(k).size());
      return n == 0 ? 0.0 : std::sqrt(n_out / n);
    };
    auto norm_of = [&](size_t k, int r) { return r == kNorm ? times(arg(k).error[r], spread(k)) : arg(k).error[r]; };
    // Booleans and integers: a comparison may flip where a real operand is off at all.
    if (out.elem == ElemKind::Bool && in.op != Op::Where) {
      for (int r = 0; r < kEnvelopeRules; ++r) {
        bool off = false;
        for (size_t k = 0; k < in.args.size(); ++k) off = off || arg(k).error[r] > 0;
        out.error[r] = off ? 1 : 0;
      }
      return out;
    }
    const Bounded& x = arg(0);
    if (in.op == Op::Where && !out.real()) {
      for (int r = 0; r < kEnvelopeRules; ++r) {
        bool off = false;
        for (size_t k = 0; k < in.args.size(); ++k) off = off || arg(k).error[r] > 0;
        out.error[r] = !off ? 0 : out.elem == ElemKind::Bool ? 1 : kInf;
      }
      return out;
    }
    if (in.op == Op::Where) {
      const Bounded& c = arg(0);
      const Bounded& a = arg(1);
      const Bounded& b = arg(2);
      lies_in = a.real() && b.real() ? join(a.type, b.type) : FloatType::F64;
      for (int r = 0; r < kEnvelopeRules; ++r) {
        const double flip = c.error[r] > 0 ? 1 : 0;
        if (r == kNorm) {
          const double ea = norm_of(1, r), eb = norm_of(2, r);
          out.error[r] = std::sqrt(ea * ea + eb * eb) + times(flip * std::sqrt(n_out), a.max_abs + b.max_abs);
        } else {
          out.error[r] = std::max(a.error[r], b.error[r]) + times(flip, a.max_abs + b.max_abs);
        }
        if (flip > 0 && !std::isfinite(out.error[r]))
          why[r] = "its condition may flip, and a branch has no recorded magnitude";
      }
      return out;
    }
    if (in.args.size() == 1) {
      // x ↦ f(x), with f's Lipschitz constant L over the enlarged domain [m − δ, M + δ].
      const double M = x.max_abs, m = x.min_abs;
      for (int r = 0; r < kEnvelopeRules; ++r) {
        const Propagated p = unary_rule(in, {M, m, x.error[r]}, r == kNorm, static_cast<double>(x.size()));
        out.error[r] = p.error;
        if (!p.why.empty()) why[r] = p.why;
        if (p.reads_min_abs) min_abs_sites.insert(site);
      }
      if (core::op_info(in.op).selects) {
        lies_in = x.type;
        return out;
      }
      if (in.op == Op::PowConst && in.attr<core::attr::Exponent>().value == 0) {
        out.error = {};
        lies_in = std::nullopt;
        return out;
      }
      if (!out.real()) return out;
      charge_kernel(x, library_function(in));
      return out;
    }
    // Two operands, broadcast.
    const Bounded& a = arg(0);
    const Bounded& b = arg(1);
    for (int r = 0; r < kEnvelopeRules; ++r) {
      // δ, or E broadcast under normwise
      const Propagated p = binary_rule(in.op, {a.max_abs, a.min_abs, a.error[r]}, {b.max_abs, b.min_abs, b.error[r]},
                                       norm_of(0, r), norm_of(1, r), r == kNorm);
      out.error[r] = p.error;
      if (!p.why.empty()) why[r] = p.why;
      if (p.reads_min_abs) min_abs_sites.insert(site);
    }
    if (out.elem != ElemKind::Real) return out;  // integer arithmetic is exact
    if (core::op_info(in.op).selects) {
      lies_in = a.real() && b.real() ? join(a.type, b.type) : FloatType::F64;
      return out;
    }
    charge_kernel(a, library_function(in));
    return out;
  }

  // Sums over k terms and contractions of k pairs, accumulated in `acc`.
  const SiteEnvelope* me = nullptr;
  auto condition = [&]() -> std::optional<double> {
    if (!me || !me->condition || !std::isfinite(*me->condition)) return std::nullopt;
    return me->condition;
  };
  // x summed k terms to an element (a mean's divided by k), each step rounded to `acc`.
  auto sum_of = [&](const Bounded& x, double k, bool mean) {
    const double ua = step_unit(acc);
    // The first step adds a term to +0: exact unless the term needs rounding to acc itself.
    const double steps = sum_steps(k, mean, !(x.real() && holds(acc, x.type)));
    const double g = gamma(steps, ua);
    const double n_x = static_cast<double>(x.size());
    for (int r = 0; r < kEnvelopeRules; ++r) {
      const double d = x.error[r];
      if (r == kNorm) {
        // Per output, |Σ δ_i| ≤ √k·‖δ‖₂ and Σ|x̂_i| ≤ √k·‖x̂‖₂ (Cauchy–Schwarz).
        const double prop = mean ? d / std::sqrt(k) : std::sqrt(k) * d;
        const double s = std::sqrt(k) * (times(std::sqrt(n_x), x.max_abs) + d);
        out.error[r] = prop + times(g, mean ? s / k : s);
        continue;
      }
      const double prop = mean ? d : k * d;
      double s = times(k, x.max_abs + d);  // Σ|x̂_i| with every term at its largest
      if (r == kCond)
        if (auto c = condition()) {
          const double by_condition = mean ? k * (times(*c, out.max_abs) + d) : times(*c, out.max_abs) + k * d;
          if (by_condition < s) {
            s = by_condition;
            condition_sites.insert(site);
            worst_condition_used = std::max(worst_condition_used, *c);
          }
        }
      out.error[r] = prop + times(g, mean ? s / k : s);
    }
    computed = true;
    lies_in = acc;
  };
  // Σ over k pairs p_i·q_i, each product and each step rounded to `acc`: γ_k.
  auto contraction_of = [&](const Bounded& p, const Bounded& q, double k) {
    const double g = gamma(k, step_unit(acc));
    const double np = std::sqrt(static_cast<double>(p.size())), nq = std::sqrt(static_cast<double>(q.size()));
    for (int r = 0; r < kEnvelopeRules; ++r) {
      const double dp = p.error[r], dq = q.error[r];
      if (r == kNorm) {
        // ‖δC‖ ≤ ‖δP‖(‖Q‖ + ‖δQ‖) + ‖P‖‖δQ‖ + γ_k·‖P̂‖‖Q̂‖, with ‖P‖ ≤ √n·M.
        const double P = times(np, p.max_abs), Q = times(nq, q.max_abs);
        out.error[r] = times(dp, Q + dq) + times(P, dq) + times(g, times(P + dp, Q + dq));
        continue;
      }
      const double prop = k * (times(dp, q.max_abs + dq) + times(p.max_abs, dq));
      double s = times(k, times(p.max_abs + dp, q.max_abs + dq));
      if (r == kCond)
        if (auto c = condition()) {
          const double by_condition = times(*c, out.max_abs) + prop;
          if (by_condition < s) {
            s = by_condition;
            condition_sites.insert(site);
            worst_condition_used = std::max(worst_condition_used, *c);
          }
        }
      out.error[r] = prop + times(g, s);
    }
    computed = true;
    lies_in = acc;
  };
  auto shape_of_plan = [&](const runtime::ContractPlan& plan, const Shape& a, const Shape& b, double& k) {
    Shape s;
    for (const runtime::ResultAxis& ax : plan.result)
      s.push_back(ax.a_axis >= 0 ? a.at(static_cast<size_t>(ax.a_axis)) : b.at(static_cast<size_t>(ax.b_axis)));
    k = 1;
    for (auto [pa, pb] : plan.contracted) k *= static_cast<double>(a.at(static_cast<size_t>(pa)));
    return s;
  };

  switch (in.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp: {
      const Bounded& x = arg(0);
      const std::vector<int> axes =
          interp::reduced_axes(static_cast<int>(x.shape.size()), rest_of(0), in.all_axes, in.axes);
      Shape shape;
      for (int i = 0; i < static_cast<int>(x.shape.size()); ++i)
        if (std::find(axes.begin(), axes.end(), i) == axes.end()) shape.push_back(x.shape[static_cast<size_t>(i)]);
      tensor_result(shape);
      me = envelope_of(site, out.size());
      const double k = out.size() > 0 ? static_cast<double>(x.size()) / static_cast<double>(out.size()) : 0;
      if (!out.real()) {  // an integer sum, max or min: exact on exact integers
        for (int r = 0; r < kEnvelopeRules; ++r) out.error[r] = in.op == Op::Sum ? k * x.error[r] : x.error[r];
        return out;
      }
      if (in.op == Op::ReduceMax || in.op == Op::ReduceMin) {
        out.error = x.error;  // Lipschitz 1 per slice (its ∞-norm is at most its 2-norm)
        lies_in = x.real() ? x.type : FloatType::F64;
        return out;
      }
      if (in.op == Op::LogSumExp) {
        // |lse(x̂) − lse(x)| ≤ max|δ|; the kernel's m + log Σ exp(x − m) adds, relative to Σ ∈ [1, k]:
        // each term's x − m rounding (|x − m| ≤ 2(M + δ)), the library's exp and its rounding, the
        // sum's γ_(k−1); then log's library error and rounding, and the final add's rounding.
        const double ua = step_unit(acc);
        const double root_n = std::sqrt(static_cast<double>(out.size()));
        for (int r = 0; r < kEnvelopeRules; ++r) {
          const double d = x.error[r];
          const double local = logsumexp_rounding(k, ua, x.max_abs + d, out.max_abs + d, gamma(k - 1, ua));
          if (!std::isfinite(local)) {
            out.error[r] = kInf;
            why[r] = "logsumexp's terms lose every digit to their rounding";
            continue;
          }
          out.error[r] = d + (r == kNorm ? root_n * local : local);
        }
        computed = true;
        lies_in = acc;
        return out;
      }
      if (k == 0) {
        out.error = {};
        lies_in = std::nullopt;  // an empty sum is +0 (an empty mean's NaN is the exact one too)
        return out;
      }
      sum_of(x, k, in.op == Op::Mean);
      return out;
    }
    case Op::Dot:
    case Op::Contract: {
      const Bounded& a = arg(0);
      const Bounded& b = arg(1);
      const runtime::ContractPlan plan =
          in.op == Op::Dot ? runtime::dot_plan(static_cast<int>(a.shape.size()), static_cast<int>(b.shape.size()))
                           : interp::contract_plan(rest_of(0), rest_of(1), fn.type_of(in.args[0]).tensor,
                                                   fn.type_of(in.args[1]).tensor, in.axes, in.pairs);
      double k = 0;
      tensor_result(shape_of_plan(plan, a.shape, b.shape, k));
      me = envelope_of(site, out.size());
      contraction_of(a, b, k);
      return out;
    }
    case Op::ContractGradA:
    case Op::ContractGradB: {
      const Bounded& ct = arg(0);
      const Bounded& a = arg(1);
      const Bounded& b = arg(2);
      const runtime::ContractPlan fwd =
          in.attr<core::attr::ProductForm>().dot ? runtime::dot_plan(static_cast<int>(a.shape.size()), static_cast<int>(b.shape.size()))
                          : interp::contract_plan(rest_of(1), rest_of(2), fn.type_of(in.args[1]).tensor,
                                                  fn.type_of(in.args[2]).tensor, in.axes, in.pairs);
      double k = 0;
      if (in.op == Op::ContractGradA) {
        const runtime::ContractPlan p = runtime::contract_adjoint_a(fwd, static_cast<int>(a.shape.size()));
        tensor_result(shape_of_plan(p, ct.shape, b.shape, k));
        me = envelope_of(site, out.size());
        contraction_of(ct, b, k);
      } else {
        const runtime::ContractPlan p = runtime::contract_adjoint_b(fwd, static_cast<int>(b.shape.size()));
        tensor_result(shape_of_plan(p, a.shape, ct.shape, k));
        me = envelope_of(site, out.size());
        contraction_of(a, ct, k);
      }
      return out;
    }
    case Op::Scan: {
      // Step t's error e_t from e_(t−1): the terms' errors, N·(δa·(M_h + e) + M_a·e), x's δx, and
      // the step's roundings, γ_(N+2) of Σ|terms| (x rounded to acc, N products, N sums; Higham
      // §3.1); e_0 is x's with its rounding. So e_t ≤ c + ρ·e_(t−1), taken step by step over T.
      // M_h is the result's own envelope. Under normwise each E bounds the largest error too, and
      // the result's E is √n times the largest.
      const Bounded& a = arg(0);
      const Bounded& x = arg(1);
      tensor_result(x.shape);
      me = envelope_of(site, out.size());
      const runtime::ScanAxes ax = interp::scan_axes(in, rest_of(1));
      const double steps = x.shape.empty() ? 0 : static_cast<double>(x.shape.at(static_cast<size_t>(ax.t)));
      const double states = static_cast<double>(x.shape.at(static_cast<size_t>(ax.n)));
      const double g = gamma(states + 2, step_unit(acc));
      const double root_n = std::sqrt(static_cast<double>(out.size()));
      for (int r = 0; r < kEnvelopeRules; ++r) {
        const double da = a.error[r], dx = x.error[r], Mh = out.max_abs;
        const double rho = times(states, da + a.max_abs) * (1 + g);
        const double c =
            dx + times(states, times(da, Mh)) + times(g, x.max_abs + dx + times(states, times(a.max_abs + da, Mh)));
        double e = dx + times(g, x.max_abs + dx);
        for (double t = 1; t < steps && std::isfinite(e); ++t) e = c + times(rho, e);
        out.error[r] = r == kNorm ? times(root_n, e) : e;
        if (!std::isfinite(out.error[r])) why[r] = "the scan's steps amplify its error past every bound";
      }
      computed = true;
      lies_in = acc;
      return out;
    }
    case Op::ScanGradA: {
      // One product per element, λ·h (each element of either read by N products): its
      // propagation, then the f64 kernel's rounding.
      const Bounded& l = arg(0);
      const Bounded& h = arg(1);
      tensor_result(arg(2).shape);
      const runtime::ScanAxes ax = interp::scan_axes(in, rest_of(1));
      const double states = static_cast<double>(h.shape.at(static_cast<size_t>(ax.n)));
      for (int r = 0; r < kEnvelopeRules; ++r) {
        const double e = times(l.error[r], h.max_abs + h.error[r]) + times(l.max_abs, h.error[r]);
        out.error[r] = r == kNorm ? times(std::sqrt(states), e) : e;
      }
      charge_kernel(l, false);
      return out;
    }
    case Op::SumTo: {
      const Bounded& ct = arg(0);
      tensor_result(arg(1).shape);
      me = envelope_of(site, out.size());
      const double k = out.size() > 0 ? static_cast<double>(ct.size()) / static_cast<double>(out.size()) : 0;
      sum_of(ct, std::max(k, 1.0), false);
      return out;
    }
    case Op::GatherGrad: {
      const Bounded& ct = arg(0);
      tensor_result(arg(1).shape);
      me = envelope_of(site, out.size());
      if (arg(2).error[kComp] > 0 || arg(2).error[kNorm] > 0) {
        for (int r = 0; r < kEnvelopeRules; ++r) {
          out.error[r] = kInf;
          why[r] = "not covered: gather_grad with ids that may differ from the exact ones";
        }
        return out;
      }
      // As many terms per element as there are ids, at worst (every id the same row).
      sum_of(ct, std::max(1.0, static_cast<double>(arg(2).size())), false);
      return out;
    }
    case Op::Expand: {
      const Bounded& ct = arg(0);
      tensor_result(arg(1).shape);
      const double copies = ct.size() > 0 ? static_cast<double>(out.size()) / static_cast<double>(ct.size()) : 1;
      const bool mean = in.attr<core::attr::ExpandOf>().mean;
      const double count = mean ? copies : 1;
      for (int r = 0; r < kEnvelopeRules; ++r)
        out.error[r] = (r == kNorm ? times(ct.error[r], std::sqrt(copies)) : ct.error[r]) / count;
      out.cause = ct.cause;
      if (mean)
        charge_kernel(ct, false);
      else
        lies_in = ct.type;
      return out;
    }
    case Op::ZerosLike:
      tensor_result(arg(0).shape);
      lies_in = std::nullopt;
      return out;
    case Op::Iota:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli: {
      Shape shape;
      if (const int like = core::draw_like(in); like >= 0) shape = arg(static_cast<size_t>(like)).shape;
      for (const elab::Size& s : in.sizes) shape.push_back(interp::eval_size(s, dims));
      tensor_result(shape);
      if (in.op == Op::Bernoulli)
        for (int r = 0; r < kEnvelopeRules; ++r) out.error[r] = arg(1).error[r] > 0 ? 1 : 0;  // a draw may flip
      return out;  // the same f64 draws in both interpreters
    }
    case Op::OneHot: {
      const Bounded& ids = arg(0);
      Shape shape = ids.shape;
      shape.push_back(interp::eval_size(in.sizes.at(0), dims));
      tensor_result(shape);
      for (int r = 0; r < kEnvelopeRules; ++r)
        out.error[r] = ids.error[r] > 0 ? (r == kNorm ? std::sqrt(2.0 * static_cast<double>(ids.size())) : 1) : 0;
      lies_in = std::nullopt;
      return out;
    }
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
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::KeySplit:
    case Op::Call:
    case Op::Fold:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
    case Op::MakeParams:
    case Op::FoldVjp:
      break;
  }

  // Restructuring: exact copies of elements.
  const Bounded& x = arg(0);
  Shape shape;
  switch (in.op) {
    case Op::Transpose: {
      const int rest = rest_of(0);
      for (int i = 0; i < rest; ++i) shape.push_back(x.shape.at(static_cast<size_t>(i)));
      for (int a : in.axes) shape.push_back(x.shape.at(static_cast<size_t>(rest + a)));
      break;
    }
    case Op::SplitAxis: {
      const int at = rest_of(0) + in.axes.at(0);
      shape.assign(x.shape.begin(), x.shape.begin() + at);
      for (const elab::Size& s : in.sizes) shape.push_back(interp::eval_size(s, dims));
      shape.insert(shape.end(), x.shape.begin() + at + 1, x.shape.end());
      break;
    }
    case Op::MergeAxes: {
      const int rest = rest_of(0);
      const int first = *std::min_element(in.axes.begin(), in.axes.end());
      const std::vector<int> perm = interp::merge_permutation(rest, static_cast<int>(explicit_count(0)), in.axes);
      Shape permuted;
      for (int p : perm) permuted.push_back(x.shape.at(static_cast<size_t>(p)));
      const int at = rest + first, count = static_cast<int>(in.axes.size());
      int64_t merged = 1;
      for (int i = 0; i < static_cast<int>(permuted.size()); ++i) {
        if (i >= at && i < at + count) {
          merged *= permuted[static_cast<size_t>(i)];
          if (i == at + count - 1) shape.push_back(merged);
        } else {
          shape.push_back(permuted[static_cast<size_t>(i)]);
        }
      }
      break;
    }
    case Op::Concat: {
      const size_t axis = static_cast<size_t>(rest_of(0) + in.axes.at(0));
      shape = x.shape;
      shape.at(axis) = 0;
      for (size_t k = 0; k < in.args.size(); ++k) shape.at(axis) += arg(k).shape.at(axis);
      break;
    }
    case Op::Slice: {
      const size_t axis = static_cast<size_t>(rest_of(0) + in.axes.at(0));
      const int64_t size = x.shape.at(axis);
      const core::attr::Range& range = in.attr<core::attr::Range>();
      int64_t start = range.start, stop = range.stop;
      const int64_t stride = std::max<int64_t>(range.step, 1);
      if (start < 0) start += size;
      if (stop < 0) stop += size;
      start = std::clamp<int64_t>(start, 0, size);
      stop = std::clamp<int64_t>(stop, 0, size);
      shape = x.shape;
      shape[axis] = stop > start ? (stop - start + stride - 1) / stride : 0;
      break;
    }
    case Op::Gather: {
      const size_t axis = static_cast<size_t>(in.axes.at(0));
      const Shape& ids = arg(1).shape;
      shape.assign(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis));
      shape.insert(shape.end(), ids.begin(), ids.end());
      shape.insert(shape.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape.end());
      break;
    }
    case Op::Pick:
      shape = arg(1).shape;
      break;
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::SliceGrad:
    case Op::PickGrad:
      shape = arg(1).shape;
      break;
    case Op::ConcatGrad: {
      const size_t axis = static_cast<size_t>(rest_of(1) + in.axes.at(0));
      shape = x.shape;
      shape.at(axis) = arg(1 + static_cast<size_t>(in.attr<core::attr::Element>().index)).shape.at(axis);
      break;
    }
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
    case Op::Iota:
    case Op::OneHot:
    case Op::KeySplit:
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
    case Op::Call:
    case Op::Fold:
    case Op::SumTo:
    case Op::Expand:
    case Op::ContractGradA:
    case Op::ContractGradB:
    case Op::GatherGrad:
    case Op::Scan:
    case Op::ScanGradA:
    case Op::ZerosLike:
    case Op::MakeParams:
    case Op::FoldVjp:
      tensor_result(x.shape);
      for (int r = 0; r < kEnvelopeRules; ++r) {
        out.error[r] = kInf;
        why[r] = fmt::format("not covered: `{}`", info.spelling);
      }
      return out;
  }
  tensor_result(shape);
  if (!out.real()) {
    out.error = x.error;
    return out;
  }
  lies_in = x.real() ? x.type : FloatType::F64;
  out.error = x.error;
  out.cause = x.cause;
  if (in.op == Op::Concat) {
    // The largest part's error; the parts' norms add in squares.
    double squares = 0;
    for (size_t k = 0; k < in.args.size(); ++k) {
      const Bounded& part = arg(k);
      out.error[kComp] = std::max(out.error[kComp], part.error[kComp]);
      out.error[kCond] = std::max(out.error[kCond], part.error[kCond]);
      squares += part.error[kNorm] * part.error[kNorm];
      if (part.real()) lies_in = join(*lies_in, part.type);
    }
    out.error[kNorm] = std::sqrt(squares);
  }
  if (in.op == Op::Pick) {
    // Each element of x is picked at most once: ‖δy‖ ≤ ‖δx‖. An id that may
    // differ picks another element: + 2·M for each.
    for (int r = 0; r < kEnvelopeRules; ++r)
      if (arg(1).error[r] > 0)
        out.error[r] += r == kNorm ? times(std::sqrt(static_cast<double>(out.size())), 2 * x.max_abs) : 2 * x.max_abs;
  }
  if (in.op == Op::Gather) {
    const Bounded& ids = arg(1);
    const double n_ids = static_cast<double>(ids.size());
    for (int r = 0; r < kEnvelopeRules; ++r) {
      // Each id's row once: ‖δy‖ ≤ √(ids)·‖δt‖. An id that may differ picks another row: + 2·M.
      const bool moved = ids.error[r] > 0;
      if (r == kNorm)
        out.error[r] = times(std::sqrt(n_ids), x.error[r]) +
                       (moved ? times(std::sqrt(static_cast<double>(out.size())), 2 * x.max_abs) : 0);
      else
        out.error[r] = x.error[r] + (moved ? 2 * x.max_abs : 0);
    }
  }
  return out;
}

}  // namespace

const char* bound_rule_name(BoundRule r) {
  switch (r) {
    case BoundRule::Componentwise:
      return "componentwise";
    case BoundRule::Normwise:
      return "normwise";
    case BoundRule::Cond:
      return "cond";
    case BoundRule::Running:
      return "running";
  }
  return "?";
}

Sensitivities envelope_sensitivities(elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                                     const std::vector<std::vector<interp::Value>>& samples, int bits) {
  if (samples.empty()) throw std::invalid_argument("sensitivities: no samples");
  Sensitivities out;
  std::map<std::string, size_t> index;
  for (const std::vector<interp::Value>& args : samples) {
    Sensitivities s = sensitivities(prog, entry, dims, args, bits);
    if (out.entry.empty()) {
      out.entry = s.entry;
      out.bits = s.bits;
    }
    for (SiteSensitivity& site : s.sites) {
      auto [it, fresh] = index.emplace(site.site, out.sites.size());
      if (fresh)
        out.sites.push_back(site);
      else if (std::isnan(site.l1) || site.l1 > out.sites[it->second].l1)
        out.sites[it->second].l1 = site.l1;
    }
  }
  return out;
}

std::vector<std::string> envelope_mismatches(const elab::Program& prog, int entry, const Envelope& e) {
  std::vector<std::string> out;
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  if (e.entry != fn.name) out.push_back(fmt::format("the envelope is of `{}`, not of `{}`", e.entry, fn.name));
  for (const auto& [name, size] : e.dims)
    if (std::find(prog.dims.begin(), prog.dims.end(), name) == prog.dims.end())
      out.push_back(fmt::format("its dimension `{}` = {} is not a dimension of the program", name, size));
  std::map<std::string, const core::Instr*> instrs;
  for (const core::Function& f : prog.functions)
    for (const core::Instr& in : f.body) instrs[core::site_name(f, in.id)] = &in;
  for (const SiteEnvelope& s : e.sites) {
    auto it = instrs.find(s.site);
    if (it == instrs.end()) {
      out.push_back(fmt::format("its site {} is not a site of the program", s.site));
    } else if (it->second->op != s.op_code) {
      out.push_back(fmt::format("its site {} is a `{}`, but the program's is a `{}`", s.site, s.op,
                                core::op_info(it->second->op).name));
    }
    if (out.size() >= 8) break;  // enough to see that it is another program
  }
  if (!e.result.empty() && e.result != core::site_name(fn, fn.result_value))
    out.push_back(
        fmt::format("its result is {}, but `{}` returns {}", e.result, fn.name, core::site_name(fn, fn.result_value)));
  return out;
}

BoundsReport bound_errors(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                          const Realization& r, const Envelope& e,
                          const std::vector<std::vector<interp::Value>>& samples, const Sensitivities* sens) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  if (r.entry != entry)
    throw std::invalid_argument(fmt::format("the realization is of `{}`, not of `{}`",
                                            prog.functions.at(static_cast<size_t>(r.entry)).name, fn.name));
  if (std::vector<std::string> problems = envelope_mismatches(prog, entry, e); !problems.empty())
    throw std::invalid_argument(
        fmt::format("the envelope does not describe `{}`: {}", fn.name, fmt::join(problems, "; ")));
  BoundWalk walk(prog, dims, r, e);
  const Bounded result = walk.run(entry, samples);

  BoundsReport b;
  b.entry = fn.name;
  b.result = core::site_name(fn, fn.result_value);
  b.label = std::string(policy_name(r.policy)) + (r.half_intermediates ? " --half-intermediates" : "");
  b.magnitude = e.result_max_abs;
  b.tensor_output = e.site(b.result) != nullptr;
  b.samples = e.samples;
  b.envelope_sites = static_cast<int>(e.sites.size());
  b.seed = e.seed;
  b.params_file = e.params_file;
  b.inputs_file = e.inputs_file;

  // Each rule's output bound: the largest over the result's real leaves.
  std::vector<const Bounded*> leaves;
  real_leaves(result, leaves);
  const std::string conditional =
      fmt::format("the envelope's {}: every value within its recorded max |x|", plural(e.samples, "sample", "samples"));
  const std::string away_from_zero =
      walk.min_abs_sites.empty()
          ? ""
          : fmt::format(", and above its recorded min |x| at {} (divisions, logarithms, roots)",
                        plural(static_cast<int64_t>(walk.min_abs_sites.size()), "site", "sites"));
  for (int k = 0; k < kEnvelopeRules; ++k) {
    RuleBound& rule = b.rules[static_cast<size_t>(k)];
    const Bounded* worst = nullptr;
    for (const Bounded* leaf : leaves)
      if (!worst || !(leaf->error[k] <= worst->error[k])) worst = leaf;
    rule.bound = worst ? worst->error[k] : 0;
    rule.covers = "conditional on " + conditional + away_from_zero;
    if (k == kNorm) rule.covers += "; norms ‖v‖_F ≤ √n·max |v|";
    if (k == kCond)
      rule.covers += walk.condition_sites.empty()
                         ? "; no sum's condition number was smaller than its componentwise bound"
                         : fmt::format("; {} no worse conditioned than recorded (the worst {})",
                                       plural(static_cast<int64_t>(walk.condition_sites.size()), "sum or contraction",
                                              "sums and contractions"),
                                       sci(walk.worst_condition_used));
    if (worst && !std::isfinite(worst->error[k]) && worst->cause[k] >= 0) {
      rule.infinite = walk.causes.at(static_cast<size_t>(worst->cause[k]));
      rule.covers += fmt::format("; +inf from {}: {}", rule.infinite->site, rule.infinite->why);
    }
  }

  // The running bound and the probabilistic estimate: the samples' own exact runs.
  const RunningBounds running = running_bounds(prog, entry, dims, r, samples, e.bits);
  const std::string k_samples = plural(static_cast<int64_t>(samples.size()), "sample", "samples");
  RuleBound& rule = b.rules[static_cast<size_t>(BoundRule::Running)];
  rule.bound = running.bound;
  rule.infinite = running.infinite;
  rule.covers = fmt::format(
      "conditional on the envelope's own {}, not on other inputs: each element's error carried beside its exact "
      "value (the exact reference at {} bits) as a linear form over the run's roundings",
      k_samples, e.bits);
  if (rule.infinite) rule.covers += fmt::format("; +inf from {}: {}", rule.infinite->site, rule.infinite->why);
  b.probabilistic.estimate = running.estimate;
  b.probabilistic.confidence = running.confidence;
  b.probabilistic.lambda = running.lambda;
  b.probabilistic.events = running.events;
  b.probabilistic.covers = fmt::format(
      "an estimate, not a bound: the running walk's forms on the envelope's {} with every rounding taken as an "
      "independent, mean-zero random error: each output element within λ = {:.2f} times the root sum of squares of "
      "its roundings' bounds (Azuma–Hoeffding); all {} together with probability ≥ {:g} % under that model",
      k_samples, running.lambda,
      plural(static_cast<int64_t>(running.events), "output element", "output elements of the samples"),
      running.confidence * 100);

  for (SiteRecord& rec : walk.records) {
    std::vector<std::string> types(rec.types.begin(), rec.types.end());
    rec.bound.type = fmt::format("{}", fmt::join(types, "/"));
    auto found = running.sites.find(rec.bound.site);
    rec.bound.bound[static_cast<size_t>(BoundRule::Running)] = found == running.sites.end() ? kNaN : found->second;
    b.sites.push_back(rec.bound);
  }

  // The first-order estimate, the solver's (solver.h): each value rounded,
  // an entry argument or a parameter read in a narrower type, by its
  // element-weighted rounding in its type, and each sum's accumulation.
  const bool scalar = fn.result.kind == elab::TypeKind::Tensor && fn.result.tensor.elem == elab::Elem::Real &&
                      fn.result.tensor.axes.empty() && !fn.result.tensor.rest;
  if (!scalar) {
    b.estimate_absent = fmt::format("`{}` does not return ℝ[], so it has no sensitivities", fn.name);
  } else if (!sens) {
    b.estimate_absent = "no sensitivities were given";
  } else {
    std::map<std::string, const SiteSensitivity*> by_site;
    for (const SiteSensitivity& site : sens->sites) by_site[site.site] = &site;
    double estimate = 0;
    for (const SiteRecord& rec : walk.records) {
      auto it = by_site.find(rec.bound.site);
      if (it == by_site.end()) continue;  // no cotangent reaches it
      const SiteSensitivity& s = *it->second;
      const SiteEnvelope* env = e.site(rec.bound.site);
      const int64_t terms = env && env->terms ? *env->terms : 1;
      double worst = 0;
      for (const auto& [stored, accumulator] : rec.rounded_as)
        worst = std::max(worst, stored_term(s.weighted, stored, s.l1, rec.largest_rounding) +
                                    accumulation_term(s.accumulated, terms, accumulator));
      estimate += worst;
    }
    for (const auto& [site, rounding] : walk.input_roundings) {
      auto it = by_site.find(site);
      if (it == by_site.end()) continue;
      estimate += stored_term(it->second->weighted, walk.input_types.at(site), it->second->l1, rounding);
    }
    for (const auto& [path, readers] : walk.param_readers) {
      const ParamStorage* stored = r.param(path);
      if (!stored || stored->stored == FloatType::F64) continue;  // f64 parameters enter exactly
      const ParamEnvelope* p = e.param(path);
      double rounding = p ? p->max_abs * unit(stored->stored) : kInf;
      if (p)
        if (auto it = p->rounding.find(runtime::float_type_name(stored->stored)); it != p->rounding.end())
          rounding = it->second;
      double l1 = 0;
      for (const std::string& site : readers)
        if (auto it = by_site.find(site); it != by_site.end()) l1 += it->second->l1;
      const ParamSensitivity* ps = sens->param(path);
      estimate += stored_term(ps ? ps->weighted : WeightedRounding{}, stored->stored, l1, rounding);
    }
    b.estimate = estimate;
  }
  return b;
}

}  // namespace quire::precision
