// The running bound (running_bounds.h): one walk per sample over the exact
// run's values, each element's error carried beside its exact value as a
// linear form over the run's local errors (error_forms.h).
//
// Notation, per element: v_i the exact value (the exact reference's, rounded
// to the nearest double: |v_i| lies within 2u_f64 + η of that double's, which
// `above` and `below` allow for), T_i its error's bound (the form's total).
// Each step builds its result's forms from its operands':
//
//   - a copy moves each element's form (index maps from the interpreter's own
//     kernels run on element numbers, element_maps.h);
//   - an element-wise f is linearized at the exact value: slope·form plus a
//     second-order remainder (elementwise_bounds.h), or, where that is larger
//     or undefined, the Lipschitz rule's bound alone;
//   - a sum or contraction adds its terms' forms (a product's, each factor's
//     times the other's exact value) and one new local error, the running
//     error of its accumulation: each step's rounding bounded by u_a times a
//     bound on the partial sum it rounds, in the kernel's order (Higham,
//     Accuracy and Stability, §3.3);
//   - every rounding (the f64 kernel's, a store's, a read-down's) adds a new
//     local error u_t·(|v_i| + T_i) + η_t/2 (rounding_rules.h), and a library
//     function its own 8·u·scale.

#include "quire/precision/running_bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/exact/exact_interpreter.h"
#include "quire/interp/core_geometry.h"
#include "quire/precision/element_maps.h"
#include "quire/precision/elementwise_bounds.h"
#include "quire/precision/error_forms.h"
#include "quire/precision/rounding_rules.h"
#include "quire/runtime/kernels.h"
#include "quire/runtime/scan_order.h"

namespace quire::precision {

using core::Op;
using runtime::ElemKind;
using runtime::FloatType;
using runtime::Shape;
using runtime::Tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxDepth = 256;  // calls are acyclic; this guards the invariant (as the interpreters)
const double kTiny64 = tiny(FloatType::F64);

/// Bounds on |v| for the exact value v whose nearest double is x: |v| ≤ |x|/(1 − u) + η/2.
double above(double x) { return std::fabs(x) * (1 + 2 * kU64) + kTiny64; }
double below(double x) { return std::max(0.0, std::fabs(x) * (1 - 2 * kU64) - kTiny64); }
/// How far the exact value may be from its double x.
double slack(double x) { return 2 * kU64 * std::fabs(x) + kTiny64; }

/// Bounds on |a − b| for the exact values whose nearest doubles are a and b
/// (the difference of the doubles is itself rounded: one more u).
double spread(double a, double b) { return std::fabs(a - b) * (1 + kU64) + slack(a) + slack(b); }
double separation(double a, double b) { return std::max(0.0, std::fabs(a - b) * (1 - kU64) - slack(a) - slack(b)); }

/// Element i of a tensor of any kind, as a double.
double element(const Tensor& t, size_t i) { return t.is_real() ? t.reals[i] : static_cast<double>(t.ints[i]); }

/// 0, 1, …, n − 1: an operand read element for element.
std::vector<int64_t> identity(size_t n) {
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(i);
  return out;
}

/// The terms of each result element of an accumulation, in the kernel's order (element_maps.h).
using TermLists = std::vector<std::vector<int64_t>>;

// ---------------------------------------------------------------------------
// The exact run's values.

/// One sample's exact values, by the site that computed them, in the order
/// evaluated: the k-th evaluation of a site in the walk is its k-th in the
/// exact run, since both walk Core with core/walk.h.
class Trace {
 public:
  void record(const core::Function& fn, const core::Instr& in, const exact::ExactValue& v) {
    if (v.kind == exact::ExactValue::Kind::Tensor || v.kind == exact::ExactValue::Kind::Params)
      values_[{&fn, in.id}].push_back(exact::to_f64(v));
    // A literal the double holds exactly (1.0, 0.5) is no error at all.
    if (in.op == core::Op::Const && v.kind == exact::ExactValue::Kind::Tensor && v.is_real && v.real.elems.size() == 1) {
      const exact::Big& decimal = v.real.elems[0];
      const double literal = in.attr<core::attr::Literal>().value;
      if (std::isfinite(literal) && exact::sub(decimal, exact::Big(literal, decimal.bits())).is_zero())
        exact_literals_.insert({&fn, in.id});
    }
  }
  /// Whether the double of literal `in` is its decimal exactly.
  bool exact_literal(const core::Function& fn, const core::Instr& in) const {
    return exact_literals_.count({&fn, in.id}) > 0;
  }
  /// The next evaluation's value of a site whose type is a tensor or a tree.
  const interp::Value& next(const core::Function& fn, const core::Instr& in) {
    const Key key{&fn, in.id};
    const std::vector<interp::Value>& seen = values_[key];
    size_t& at = next_[key];
    if (at >= seen.size())
      throw std::logic_error(fmt::format("internal: the running bound evaluates {} more often than the exact run did",
                                         core::site_name(fn, in.id)));
    return seen[at++];
  }

 private:
  using Key = std::pair<const core::Function*, int>;
  std::map<Key, std::vector<interp::Value>> values_;
  std::map<Key, size_t> next_;
  std::set<Key> exact_literals_;
};

// ---------------------------------------------------------------------------
// The walk.

/// A value on one sample: the exact reference's elements (reals rounded to
/// doubles; integers and booleans as they are) and, for a tensor, each
/// element's error: a real's form, an integer's bound on |î − i|, a boolean's
/// 1 where it may flip. `type`: the realized type a real tensor's elements
/// are values of.
struct Sampled {
  enum class Kind { Tensor, Key, Tuple, Params, Host } kind = Kind::Tensor;
  Tensor exact;
  SharedForms error;
  FloatType type = FloatType::F64;
  int cause = -1;  ///< into the walk's causes, where an element's error is +inf
  std::vector<Sampled> elements;
  std::shared_ptr<const std::map<std::string, Sampled>> params;

  bool tensor() const { return kind == Kind::Tensor; }
  bool real() const { return kind == Kind::Tensor && exact.is_real(); }
  size_t size() const { return static_cast<size_t>(exact.size()); }
  /// T_i: element i's error bound.
  double bound(size_t i) const { return error->total[i]; }
};

using SampledTree = std::map<std::string, Sampled>;

Sampled exact_tensor(Tensor exact) {
  Sampled s;
  s.error = exact_forms(static_cast<size_t>(exact.size()));
  s.exact = std::move(exact);
  return s;
}

void real_leaves(const Sampled& v, std::vector<const Sampled*>& out, int depth = 0) {
  if (depth > 64) return;
  if (v.real()) out.push_back(&v);
  for (const Sampled& e : v.elements) real_leaves(e, out, depth + 1);
  if (v.params)
    for (const auto& [p, leaf] : *v.params) real_leaves(leaf, out, depth + 1);
}

Carry carry_of(const Sampled& v, int depth = 0) {
  Carry c;
  if (depth > 64) return c;
  if (v.real()) c.type = v.type;
  if (v.kind == Sampled::Kind::Tuple) {
    c.tuple = true;
    for (const Sampled& e : v.elements) c.elements.push_back(carry_of(e, depth + 1));
  }
  return c;
}

class RunningWalk {
 public:
  RunningWalk(const elab::Program& prog, const std::map<std::string, int64_t>& dims, const Realization& r,
              Trace& trace, ErrorSymbols& symbols)
      : prog_(prog), dims_(dims), realization_(r), trace_(trace), symbols_(symbols), build_(symbols) {}

  Sampled run(int entry, const std::vector<interp::Value>& args) {
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(entry));
    if (args.size() != fn.args.size())
      throw std::invalid_argument(
          fmt::format("`{}` takes {} arguments; a sample has {}", fn.name, fn.args.size(), args.size()));
    std::vector<Sampled> sampled;
    for (size_t i = 0; i < args.size(); ++i)
      sampled.push_back(entry_argument(args[i], core::site_name(fn, fn.args[i].id), 0));
    return eval(entry, std::move(sampled), dims_, 0, core::Numerics::Default);
  }

  std::vector<InfiniteCause> causes;
  std::map<std::string, double> sites;  ///< each real site's largest bound

 private:
  // -- Local errors ----------------------------------------------------------

  /// A rounding's own error as a new term of the current element (random: it is one rounding).
  void add_rounding(double error) {
    if (error > 0) build_.add_term(symbols_.fresh(1), error);
  }
  /// A library function's own error: a new term, never taken as random.
  void add_fixed(double error) {
    if (error > 0) build_.add_term(symbols_.fresh(0), error);
  }

  /// Gives up the current element's form for `bound` where that is at most
  /// half the form's own: a form is worth more than its bound today, for
  /// what it may cancel later. Whether it did.
  bool prefer_bound(double bound) {
    if (!(bound < 0.5 * build_.current_total())) return false;
    build_.replace_by_bound(bound);
    return true;
  }

  /// The roundings of the current element, whose exact value is `v`, to each of `types` in turn.
  /// An element with no error so far is its exact value, a double: its
  /// roundings are then known exactly, round_t(v) − v, as an entry's are.
  void add_roundings(double v, const std::vector<FloatType>& types, std::string& why) {
    bool known = build_.current_total() == 0;
    double computed = v;
    for (FloatType t : types) {
      if (known) {
        const double r = runtime::round_to(t, computed);
        if (std::isfinite(r) || !std::isfinite(computed)) {
          build_.add_center(r - computed);  // exact (Sterbenz), and r is the computed value from here on
          computed = r;
          continue;
        }
        known = false;
      }
      const double total = build_.current_total();
      const double e = rounding_error(above(v), total, t);
      if (!std::isfinite(e)) {
        if (why.empty() && std::isfinite(total)) why = overflow_why(above(v), total, t);
        build_.replace_by_bound(kInf);
        return;
      }
      add_rounding(e);
    }
  }

  /// The f64 kernel's own error on the current element: a library function's
  /// (relative to max(|x̂|, |v̂|)), then the rounding.
  void add_kernel(double v, bool library, double x_scale) {
    if (library) add_fixed(library_error(std::max(x_scale, above(v) + build_.current_total())));
    add_rounding(rounding_error(above(v), build_.current_total(), FloatType::F64));
  }

  /// v's elements rounded to `t` (a store, a read-down, a cast).
  Sampled round_to(const Sampled& v, FloatType t, std::string& why) {
    Sampled out = v;
    build_.begin(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      build_.add(*v.error, i, 1);
      add_roundings(v.exact.reals[i], {t}, why);
      build_.next();
    }
    out.error = build_.finish();
    out.type = t;
    return out;
  }

  /// The running error of one accumulation's result element, as a new local
  /// error: its terms' exact values x_t in the kernel's order with their
  /// errors' bounds d_t; `first_rounded`: whether the first step (+0 + x_1)
  /// rounds; `product_bounds` (contractions without fma): each term is a
  /// product rounded once more, of |p̂_t| at most the given bound.
  /// Each step's rounding is at most u_a·|t| + η/2 for the partial sum t it
  /// rounds, |t| ≤ |s_t| + Σ d + the roundings before it, s_t the exact
  /// partial sum (in doubles, padded by its own rounding). Returns the
  /// accumulation's error bound; its root sum of squares goes to the term's spread.
  double add_accumulation(const std::vector<double>& x, const std::vector<double>& d, bool first_rounded, double ua,
                          FloatType acc, const std::vector<double>* product_bounds, double divide_by = 1) {
    const double half_tiny = (tiny(acc) + kTiny64) / 2;
    double s = 0, magnitudes = 0, errors = 0, rounded = 0, squares = 0;
    for (size_t t = 0; t < x.size(); ++t) {
      if (product_bounds) {
        const double e = ua * (*product_bounds)[t] + half_tiny;
        rounded += e;
        squares += e * e;
      }
      s += x[t];
      magnitudes += std::fabs(x[t]);
      errors += d[t];
      if (t == 0 && !first_rounded) continue;
      const double partial = std::fabs(s) + static_cast<double>(t + 1) * (2 * kU64 * magnitudes + kTiny64) + errors +
                             rounded;
      const double e = ua * partial + half_tiny;
      rounded += e;
      squares += e * e;
    }
    if (rounded > 0) {
      const double spread = std::isfinite(rounded) ? std::sqrt(squares) / rounded : 1;
      build_.add_term(symbols_.fresh(spread), rounded / divide_by);
    }
    return rounded / divide_by;
  }

  // -- Values ----------------------------------------------------------------

  /// An entry argument: each real element is off by its own rounding on
  /// entry, round(x_i) − x_i in the realization's input type (each parameter
  /// in its stored type), exactly: a known error, not a bound.
  Sampled entry_argument(const interp::Value& v, const std::string& where, int depth) {
    Sampled s;
    if (depth > 64) return s;
    switch (v.kind) {
      case interp::Value::Kind::Key:
        s.kind = Sampled::Kind::Key;
        return s;
      case interp::Value::Kind::Host:
        s.kind = Sampled::Kind::Host;
        return s;
      case interp::Value::Kind::Tuple:
        s.kind = Sampled::Kind::Tuple;
        for (size_t k = 0; k < v.elements.size(); ++k)
          s.elements.push_back(entry_argument(v.elements[k], fmt::format("{}.{}", where, k), depth + 1));
        return s;
      case interp::Value::Kind::Params: {
        s.kind = Sampled::Kind::Params;
        auto tree = std::make_shared<SampledTree>();
        for (const auto& [path, t] : *v.params) {
          const ParamStorage* stored = realization_.param(path);
          tree->emplace(path, entry_tensor(t, stored ? stored->stored : FloatType::F64,
                                           fmt::format("parameter `{}`", path)));
        }
        s.params = std::move(tree);
        return s;
      }
      case interp::Value::Kind::Tensor:
        return entry_tensor(v.tensor, realization_.input_type(), where);
    }
    return s;
  }

  Sampled entry_tensor(const Tensor& t, FloatType type, const std::string& where) {
    Sampled s = exact_tensor(t);
    if (!t.is_real()) return s;
    build_.begin(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      const double x = t.reals[i], r = runtime::round_to(type, x);
      if (std::isfinite(r) || !std::isfinite(x))
        build_.add_center(r - x);
      else
        build_.replace_by_bound(kInf);  // it overflows on entry
      build_.next();
    }
    s.error = build_.finish();
    s.type = type;
    if (!std::isfinite(s.error->largest())) {
      causes.push_back({where, "its values overflow on entry"});
      s.cause = static_cast<int>(causes.size()) - 1;
    }
    return s;
  }

  Sampled eval(int function, std::vector<Sampled> args, const std::map<std::string, int64_t>& dims, int depth,
               core::Numerics context) {
    if (depth > kMaxDepth) throw std::logic_error("internal: calls nest deeper than the running bound allows");
    const core::Function& fn = prog_.functions.at(static_cast<size_t>(function));
    if (!fn.checked || fn.result_value == 0)
      throw std::invalid_argument(fmt::format("`{}` did not elaborate", fn.name));
    if (args.size() != fn.args.size())
      throw std::logic_error(
          fmt::format("internal: `{}` takes {} arguments, given {}", fn.name, fn.args.size(), args.size()));
    std::vector<Carry> carries;
    for (const Sampled& a : args) carries.push_back(carry_of(a));
    const FunctionRealization* table = realization_.find(function, context, signature(carries));
    if (!table)
      throw std::logic_error(fmt::format("internal: `{}` is called with {} inside {}, which the realization did not reach",
                                         fn.name, signature(carries), core::numerics_name(context)));
    std::vector<Sampled> env(static_cast<size_t>(fn.value_count() + 1));
    for (size_t i = 0; i < args.size(); ++i) env[i + 1] = std::move(args[i]);
    for (const core::Instr& in : fn.body)
      env[static_cast<size_t>(in.id)] = instruction(fn, in, env, dims, depth, context, *table);
    return env[static_cast<size_t>(fn.result_value)];
  }

  /// One instruction: its result's errors before the store, the store's
  /// roundings, the cause of any +inf, and the site's record.
  Sampled instruction(const core::Function& fn, const core::Instr& in, const std::vector<Sampled>& env,
                      const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
                      const FunctionRealization& table) {
    const std::string site = core::site_name(fn, in.id);
    const std::optional<SiteType>& st = table.values.at(static_cast<size_t>(in.id));
    std::string why;
    std::optional<FloatType> lies_in = FloatType::F64;  // nullopt: 0s and 1s, exact in every type
    const interp::Value* exact = nullptr;
    if (in.type.kind == elab::TypeKind::Tensor || in.type.kind == elab::TypeKind::Params)
      exact = &trace_.next(fn, in);
    Sampled v = step(fn, in, site, env, exact, dims, depth, context, table, st ? &*st : nullptr, why, lies_in);
    if (v.real()) {
      if (!st) {
        v.type = FloatType::F64;  // no table entry: the kernel's f64 value, as the interpreter keeps it
      } else if (st->reason != Reason::Carried) {
        const std::vector<FloatType> types = store_roundings(*st, realization_.half_intermediates, in.op, lies_in);
        if (!types.empty()) {
          build_.begin(v.size());
          for (size_t i = 0; i < v.size(); ++i) {
            build_.add(*v.error, i, 1);
            add_roundings(v.exact.reals[i], types, why);
            build_.next();
          }
          v.error = build_.finish();
        }
        v.type = st->storage;
      }
    }
    settle(v, in, env, site, why);
    if (in.type.is_tensor() && in.type.tensor.elem == elab::Elem::Real && v.real()) {
      double& worst = sites[site];
      worst = std::max(worst, v.error->largest());
    }
    return v;
  }

  /// Where an element's bound is +inf: the first operand's cause, or a new
  /// one at this site with the reason the step gave.
  void settle(Sampled& v, const core::Instr& in, const std::vector<Sampled>& env, const std::string& site,
              const std::string& why) {
    if (!v.tensor() || !v.error) return;
    if (std::isfinite(v.error->largest())) {
      v.cause = -1;
      return;
    }
    if (v.cause >= 0) return;
    for (int a : in.args) {
      std::vector<const Sampled*> leaves;
      const Sampled& operand = env.at(static_cast<size_t>(a));
      if (operand.tensor())
        leaves.push_back(&operand);
      else
        real_leaves(operand, leaves);
      for (const Sampled* leaf : leaves)
        if (leaf->cause >= 0) {
          v.cause = leaf->cause;
          return;
        }
    }
    causes.push_back({site, why.empty() ? "the bound grows past the largest double" : why});
    v.cause = static_cast<int>(causes.size()) - 1;
  }

  Sampled step(const core::Function& fn, const core::Instr& in, const std::string& site,
               const std::vector<Sampled>& env, const interp::Value* exact,
               const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
               const FunctionRealization& table, const SiteType* st, std::string& why,
               std::optional<FloatType>& lies_in);

  /// This walk as the Core walker's domain (core/walk.h).
  struct Callees;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  const Realization& realization_;
  Trace& trace_;
  ErrorSymbols& symbols_;
  FormBuilder build_;
};

/// Elements [first, first + count) of forms, as forms of their own.
SharedForms slice_forms(const ErrorForms& f, size_t first, size_t count, ErrorSymbols& symbols) {
  FormBuilder b(symbols);
  b.begin(count);
  for (size_t i = 0; i < count; ++i) {
    b.add(f, first + i, 1);
    b.next();
  }
  return b.finish();
}

struct RunningWalk::Callees : interp::RunDims {
  using Value = Sampled;
  using Forward = core::NoForward;
  RunningWalk& walk;
  int depth;            ///< of the calling frame
  core::Numerics mode;  ///< the numerics form the callee runs in

  Sampled evaluate(const core::Evaluation<Forward>& e, std::vector<Sampled> args, const Dims& dims) {
    return walk.eval(e.function, std::move(args), dims, depth + 1, mode);
  }
  /// Copy i of a stacked tree: every leaf's slice i, without the stack axis.
  Sampled copy_of(const Sampled& stacked, int64_t i) const {
    auto tree = std::make_shared<SampledTree>();
    for (const auto& [path, leaf] : *stacked.params) {
      if (leaf.exact.shape.empty()) throw std::logic_error(fmt::format("internal: `{}` has no stack axis", path));
      const Shape shape(leaf.exact.shape.begin() + 1, leaf.exact.shape.end());
      const size_t per_copy = static_cast<size_t>(runtime::element_count(shape));
      Sampled copy = leaf;
      copy.exact = runtime::reshape(runtime::slice(leaf.exact, 0, i, i + 1, 1), shape);
      copy.error = slice_forms(*leaf.error, static_cast<size_t>(i) * per_copy, per_copy, walk.symbols_);
      tree->emplace(path, std::move(copy));
    }
    Sampled theta;
    theta.kind = Sampled::Kind::Params;
    theta.params = std::move(tree);
    return theta;
  }
  /// A fold's further operand (a key, booleans, integers): the draws it feeds are the same in both runs.
  static Sampled for_copy(const Sampled& operand, int64_t) { return operand; }
  /// Each leaf's copies stacked along a new leading axis, copy 0 first.
  Sampled stack(const Sampled& stacked, const std::vector<Sampled>& grads) const {
    auto tree = std::make_shared<SampledTree>();
    for (const auto& [path, leaf] : *stacked.params) {
      Sampled g;
      std::vector<Tensor> exact;
      FormBuilder b(walk.symbols_);
      b.begin(leaf.size());
      for (const Sampled& copy : grads) {
        const Sampled& part = copy.params->at(path);
        Shape one = part.exact.shape;
        one.insert(one.begin(), 1);
        exact.push_back(runtime::reshape(part.exact, one));
        for (size_t i = 0; i < part.size(); ++i) {
          b.add(*part.error, i, 1);
          b.next();
        }
        if (part.cause >= 0 && g.cause < 0) g.cause = part.cause;
      }
      std::vector<const Tensor*> parts;
      for (const Tensor& t : exact) parts.push_back(&t);
      g.exact = parts.empty() ? Tensor::real(leaf.exact.shape) : runtime::concat(parts, 0);
      g.error = b.finish();
      if (g.error->size() != g.size())
        throw std::logic_error(fmt::format("internal: the copies' gradients of `{}` do not fill its stack", path));
      tree->emplace(path, std::move(g));
    }
    Sampled out;
    out.kind = Sampled::Kind::Params;
    out.params = std::move(tree);
    return out;
  }
  static Sampled tuple(std::vector<Sampled> elements) {
    Sampled t;
    t.kind = Sampled::Kind::Tuple;
    t.elements = std::move(elements);
    return t;
  }
  static Sampled element(const Sampled& tuple, size_t k) { return tuple.elements.at(k); }
};

Sampled RunningWalk::step(const core::Function& fn, const core::Instr& in, const std::string& site,
                          const std::vector<Sampled>& env, const interp::Value* exact,
                          const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
                          const FunctionRealization& table, const SiteType* st, std::string& why,
                          std::optional<FloatType>& lies_in) {
  // Operands, read down to the site's type where it reads down (scalar constants excepted).
  std::vector<std::optional<Sampled>> down(in.args.size());
  for (size_t k = 0; k < in.args.size(); ++k) {
    const Sampled& v = env.at(static_cast<size_t>(in.args[k]));
    if (!v.real() || !reads_down(st, table.values.at(static_cast<size_t>(in.args[k])), v.type)) continue;
    if (holds(st->read_as, v.type)) {
      down[k] = v;
      down[k]->type = st->read_as;
    } else {
      down[k] = round_to(v, st->read_as, why);
    }
  }
  auto arg = [&](size_t k) -> const Sampled& {
    return down.at(k) ? *down[k] : env.at(static_cast<size_t>(in.args.at(k)));
  };
  auto explicit_count = [&](size_t k) { return fn.type_of(in.args.at(k)).tensor.axes.size(); };
  auto rest_of = [&](size_t k) {
    return static_cast<int>(arg(k).exact.rank() - static_cast<int64_t>(explicit_count(k)));
  };
  const core::Numerics mode = in.numerics != core::Numerics::Default ? in.numerics : context;
  const FloatType acc = st ? st->accumulator : FloatType::F64;
  const double ua = step_unit(acc);

  // The result: the exact run's elements, no error yet.
  Sampled out;
  if (exact && exact->kind == interp::Value::Kind::Tensor) out = exact_tensor(exact->tensor);
  const Shape shape = out.exact.shape;
  const size_t n_out = out.size();
  auto value = [&](size_t j) { return out.exact.reals[j]; };
  // Forms that only bound, one per result element.
  auto bounds = [&](auto&& f) {
    std::vector<double> b(n_out);
    for (size_t j = 0; j < n_out; ++j) b[j] = f(j);
    out.error = bound_forms(b);
  };

  switch (in.op) {
    case Op::Const: {
      // The f64 literal against its decimal: none where the double holds it, else within u_f64·|c|.
      const double literal = in.attr<core::attr::Literal>().value;
      build_.begin(1);
      if (!trace_.exact_literal(fn, in)) add_fixed(std::isfinite(literal) ? kU64 * std::fabs(literal) : 0);
      build_.next();
      out.error = build_.finish();
      return out;
    }
    case Op::HostConst:
    case Op::ConstInt:
    case Op::ConstBool:
      out.kind = Sampled::Kind::Host;
      return out;
    case Op::Real:
      return out;  // a host f64, the same in both interpreters
    case Op::Field: {
      const Sampled& tree = arg(0);
      if (!tree.params) throw std::logic_error("internal: a field of something that is not a parameter tree");
      const std::string& name = in.attr<core::attr::Member>().name;
      if (in.type.kind == elab::TypeKind::Tensor) {
        auto it = tree.params->find(name);
        if (it == tree.params->end()) throw std::invalid_argument(fmt::format("parameter `{}` is missing", name));
        out.error = it->second.error;
        out.cause = it->second.cause;
        out.type = lies_in.emplace(it->second.type);
        return out;
      }
      out = Sampled{};
      out.kind = Sampled::Kind::Params;
      out.params = std::make_shared<SampledTree>(interp::subtree(*tree.params, name));
      return out;
    }
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
    case Op::TupleGet:
    case Op::MakeTuple: {
      Callees callees{{prog_, dims_}, *this, depth, mode};
      Sampled carried = core::walk_structural(callees, in, arg, dims);
      if (carried.tensor() && exact && carried.size() != n_out)
        throw std::logic_error(fmt::format("internal: {} carries {} elements, the exact run {}", site,
                                           carried.size(), n_out));
      if (carried.real()) lies_in = carried.type;  // carried: its own errors and type
      return carried;
    }
    case Op::KeySplit: {
      Sampled key;
      key.kind = Sampled::Kind::Key;
      out = Sampled{};
      out.kind = Sampled::Kind::Tuple;
      out.elements = {key, key};
      return out;
    }
    case Op::Cast: {
      const Sampled& x = arg(0);
      const core::CastTarget target = in.attr<core::attr::CastTo>().target;
      if (precision::cast_integer_kind(target)) {
        // Truncation moves an integer by at most 1 more than its operand's error; a boolean may flip.
        bounds([&](size_t i) {
          const double d = x.bound(i);
          return d == 0 ? 0.0 : (target == core::CastTarget::Bool ? 1.0 : d + 1);
        });
        return out;
      }
      out.error = x.error;
      lies_in = x.real() ? x.type : FloatType::F64;  // integers convert exactly below 2^53
      const FloatType t = precision::named_float_type(target).value_or(FloatType::F64);
      if (!holds(t, *lies_in)) out.error = round_to(out, t, why).error;
      lies_in = t;
      return out;
    }
    case Op::MakeParams: {
      // Each leaf: +0, then the parts its path names added in f64, in order (an accumulation).
      std::map<std::string, std::vector<const Sampled*>> parts;
      for (size_t k = 1; k < in.args.size(); ++k) {
        const std::string& path = in.paths.at(k - 1);
        const Sampled& part = arg(k);
        if (part.kind == Sampled::Kind::Params) {
          for (const auto& [p, leaf] : *part.params) parts[path + p].push_back(&leaf);
        } else {
          parts[path].push_back(&part);
        }
      }
      if (!exact || exact->kind != interp::Value::Kind::Params || !exact->params)
        throw std::logic_error(fmt::format("internal: the exact run's {} is not a parameter tree", site));
      auto tree = std::make_shared<SampledTree>();
      for (const auto& [path, model] : *arg(0).params) {
        Sampled leaf = exact_tensor(exact->params->at(path));
        const auto found = parts.find(path);
        if (found != parts.end()) {
          build_.begin(leaf.size());
          std::vector<double> x, d;
          for (size_t i = 0; i < leaf.size(); ++i) {
            x.clear();
            d.clear();
            for (const Sampled* p : found->second) {
              build_.add(*p->error, i, 1);
              x.push_back(p->exact.reals[i]);
              d.push_back(p->bound(i));
            }
            add_accumulation(x, d, false, kU64, FloatType::F64, nullptr);
            build_.next();
          }
          leaf.error = build_.finish();
          for (const Sampled* p : found->second)
            if (p->cause >= 0 && leaf.cause < 0) leaf.cause = p->cause;
        }
        tree->emplace(path, std::move(leaf));
      }
      out = Sampled{};
      out.kind = Sampled::Kind::Params;
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
    // Which element of each operand each result element reads, as the kernels broadcast them.
    int64_t result_rest = 0;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (in.align.at(k).rest) result_rest = std::max<int64_t>(result_rest, rest_of(k));
    std::vector<std::vector<int64_t>> src(in.args.size());
    for (size_t k = 0; k < in.args.size(); ++k) {
      if (in.args.size() == 1 && in.op != Op::PowConst) {
        src[k] = identity(n_out);  // the identity alignment
        continue;
      }
      src[k] = aligned_elements(arg(k).exact.shape,
                                interp::axis_map(in.align.at(k), arg(k).exact.rank(), explicit_count(k), result_rest),
                                shape);
    }
    auto x_of = [&](size_t k, size_t j) { return element(arg(k).exact, static_cast<size_t>(src[k][j])); };
    auto d_of = [&](size_t k, size_t j) { return arg(k).bound(static_cast<size_t>(src[k][j])); };
    // A comparison flips only where its operands may cross: |a − b| ≤ δa + δb.
    if (!out.real() && in.op != Op::Where && in.args.size() == 2 && out.exact.kind == ElemKind::Bool) {
      bounds([&](size_t j) {
        const double within = d_of(0, j) + d_of(1, j);
        return within > 0 && separation(x_of(0, j), x_of(1, j)) <= within ? 1.0 : 0.0;
      });
      return out;
    }
    if (in.op == Op::Where) {
      const Sampled& a = arg(1);
      const Sampled& b = arg(2);
      lies_in = a.real() && b.real() ? join(a.type, b.type) : FloatType::F64;
      if (!out.real()) {
        bounds([&](size_t j) {
          const bool flips = d_of(0, j) > 0;
          const double chosen = x_of(0, j) != 0 ? d_of(1, j) : d_of(2, j);
          if (!flips) return chosen;
          return out.exact.kind == ElemKind::Bool ? 1.0 : kInf;
        });
        if (!std::isfinite(out.error->largest())) why = "its condition may flip between integer branches";
        return out;
      }
      // The exact run's branch; where the condition may flip, the other branch's
      // value may be taken instead: |b̂ − a| ≤ |b − a| + δb, or relative to a's form, + δa.
      build_.begin(n_out);
      for (size_t j = 0; j < n_out; ++j) {
        const size_t chosen = x_of(0, j) != 0 ? 1 : 2;
        build_.add(*arg(chosen).error, static_cast<size_t>(src[chosen][j]), 1);
        if (d_of(0, j) > 0) {
          const double gap = spread(x_of(1, j), x_of(2, j));
          build_.add_rest(gap + d_of(1, j) + d_of(2, j));
          const double lipschitz = std::max(d_of(1, j), d_of(2, j)) + gap;
          prefer_bound(lipschitz);
        }
        build_.next();
      }
      out.error = build_.finish();
      return out;
    }
    const bool library = library_function(in);
    if (in.args.size() == 1) {
      // x ↦ f(x): linearized at x, or f's Lipschitz constant over [x − δ, x + δ].
      if (!out.real()) {
        bounds([&](size_t j) { return d_of(0, j); });  // not, or an integer's neg, abs, relu: Lipschitz 1
        return out;
      }
      const bool kernel = !info.selects && !(in.op == Op::PowConst && in.attr<core::attr::Exponent>().value == 0);
      build_.begin(n_out);
      for (size_t j = 0; j < n_out; ++j) {
        const double x = x_of(0, j), d = d_of(0, j), sl = slack(x);
        const Linearized lin = unary_linearization(in, x, d + sl);
        const Propagated lipschitz = unary_rule(in, {above(x), below(x), d, x + sl, x - sl}, false, 1);
        if (lin.valid) {
          build_.add(*arg(0).error, static_cast<size_t>(src[0][j]), lin.slope);
          build_.add_rest(lin.remainder);
          prefer_bound(lipschitz.error);
        } else {
          build_.replace_by_bound(lipschitz.error);
        }
        if (!std::isfinite(build_.current_total()) && why.empty()) why = lipschitz.why;
        if (kernel) add_kernel(value(j), library, above(x) + d);
        build_.next();
      }
      out.error = build_.finish();
      if (info.selects) lies_in = arg(0).type;
      if (in.op == Op::PowConst && in.attr<core::attr::Exponent>().value == 0) lies_in = std::nullopt;
      return out;
    }
    // Two operands, broadcast.
    if (!out.real()) {  // integer arithmetic is exact: its operands' errors, by the Lipschitz rule
      bounds([&](size_t j) {
        const double a = x_of(0, j), b = x_of(1, j);
        return binary_rule(in.op, {above(a), below(a), d_of(0, j)}, {above(b), below(b), d_of(1, j)}, d_of(0, j),
                           d_of(1, j), false)
            .error;
      });
      return out;
    }
    build_.begin(n_out);
    for (size_t j = 0; j < n_out; ++j) {
      const double a = x_of(0, j), b = x_of(1, j), da = d_of(0, j), db = d_of(1, j);
      const Linearized lin = binary_linearization(in.op, a, b, da + slack(a), db + slack(b));
      const Propagated lipschitz =
          binary_rule(in.op, {above(a), below(a), da}, {above(b), below(b), db}, da, db, false);
      if (lin.valid) {
        build_.add(*arg(0).error, static_cast<size_t>(src[0][j]), lin.slope);
        build_.add(*arg(1).error, static_cast<size_t>(src[1][j]), lin.slope_b);
        build_.add_rest(lin.remainder);
        prefer_bound(lipschitz.error);
      } else {
        build_.replace_by_bound(lipschitz.error);
      }
      if (!std::isfinite(build_.current_total()) && why.empty()) why = lipschitz.why;
      if (!info.selects) add_kernel(value(j), library, above(a) + da);
      build_.next();
    }
    out.error = build_.finish();
    if (info.selects) lies_in = arg(0).real() && arg(1).real() ? join(arg(0).type, arg(1).type) : FloatType::F64;
    return out;
  }

  // Accumulations: each result element's terms, its form Σ of theirs, and its running error.
  // `terms[j]`: the operand elements (for a contraction, pairs) result element j adds, in the kernel's order.
  auto accumulate = [&](const Sampled& x, const TermLists& terms, bool mean, bool first_rounded) {
    build_.begin(n_out);
    std::vector<double> xs, ds;
    for (size_t j = 0; j < n_out; ++j) {
      const double k = static_cast<double>(terms[j].size());
      xs.clear();
      ds.clear();
      for (int64_t i : terms[j]) {
        build_.add(*x.error, static_cast<size_t>(i), mean ? 1 / k : 1);
        xs.push_back(element(x.exact, static_cast<size_t>(i)));
        ds.push_back(x.bound(static_cast<size_t>(i)));
      }
      add_accumulation(xs, ds, first_rounded, ua, acc, nullptr, mean ? k : 1);
      // A mean divides the sum by its count: one more rounding, in the accumulator.
      if (mean) add_rounding(ua * (above(value(j)) + build_.current_total()) + (tiny(acc) + kTiny64) / 2);
      build_.next();
    }
    out.error = build_.finish();
    lies_in = acc;
  };

  switch (in.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::LogSumExp: {
      const Sampled& x = arg(0);
      const int rank = static_cast<int>(x.exact.rank());
      const runtime::AxisMap map = interp::reduced_map(rank, rest_of(0), in.all_axes, in.axes);
      const TermLists terms = reduced_elements(x.exact.shape, map, shape);
      if (x.size() == 0) {
        lies_in = std::nullopt;  // an empty sum is +0, an empty logsumexp −inf (a mean's NaN is the exact one too)
        return out;
      }
      if (!out.real()) {  // an integer sum, max or min: exact on exact integers
        bounds([&](size_t j) {
          double d = 0;
          for (int64_t i : terms[j])
            d = in.op == Op::Sum ? d + x.bound(static_cast<size_t>(i)) : std::max(d, x.bound(static_cast<size_t>(i)));
          return d;
        });
        return out;
      }
      if (in.op == Op::Sum || in.op == Op::Mean) {
        accumulate(x, terms, in.op == Op::Mean, !(x.real() && holds(acc, x.type)));
        return out;
      }
      build_.begin(n_out);
      for (size_t j = 0; j < n_out; ++j) {
        double widest = 0, scale = 0;  // max δ_i, max |x̂_i|
        for (int64_t i : terms[j]) {
          widest = std::max(widest, x.bound(static_cast<size_t>(i)));
          scale = std::max(scale, above(x.exact.reals[static_cast<size_t>(i)]) + x.bound(static_cast<size_t>(i)));
        }
        if (in.op == Op::LogSumExp) {
          // lse(x̂) − lse(x) = Σ p_i·e_i + q, p the exact softmax, |q| ≤ ½·max e_i² (its Hessian
          // diag(p) − ppᵀ is at most diag(p)); p in doubles is off by ≤ 2·(slack + k·u) in 1-norm.
          const double m = value(j);
          double loose = 0;
          for (int64_t i : terms[j]) {
            const double xi = x.exact.reals[static_cast<size_t>(i)];
            build_.add(*x.error, static_cast<size_t>(i), std::exp(xi - m));
            loose = std::max(loose, slack(xi));
          }
          loose += slack(m) + static_cast<double>(terms[j].size()) * kU64;
          build_.add_rest(widest * widest / 2 + 4 * loose * widest);
          prefer_bound(widest);  // Lipschitz 1 in the ∞-norm
          const double k = static_cast<double>(terms[j].size());
          const double local =
              logsumexp_rounding(k, ua, scale, above(m) + build_.current_total(), gamma(k - 1, ua));
          if (!std::isfinite(local) && why.empty()) why = "logsumexp's terms lose every digit to their rounding";
          add_fixed(local);
        } else {
          // The exact run's largest (smallest); another may overtake it by at most its lead's shortfall.
          const bool max = in.op == Op::ReduceMax;
          int64_t winner = terms[j].front();
          for (int64_t i : terms[j]) {
            const double xi = x.exact.reals[static_cast<size_t>(i)], xw = x.exact.reals[static_cast<size_t>(winner)];
            if (max ? xi > xw : xi < xw) winner = i;
          }
          const double xw = x.exact.reals[static_cast<size_t>(winner)], dw = x.bound(static_cast<size_t>(winner));
          double overtake = 0;
          for (int64_t i : terms[j]) {
            if (i == winner) continue;
            const double xi = x.exact.reals[static_cast<size_t>(i)];
            overtake = std::max(overtake, x.bound(static_cast<size_t>(i)) + dw - separation(xi, xw));
          }
          build_.add(*x.error, static_cast<size_t>(winner), 1);
          build_.add_rest(overtake);
          prefer_bound(widest);
        }
        build_.next();
      }
      out.error = build_.finish();
      lies_in = in.op == Op::LogSumExp ? acc : x.type;
      return out;
    }
    case Op::Dot:
    case Op::Contract:
    case Op::ContractGradA:
    case Op::ContractGradB: {
      // The interpreter's plan (interp/reference_step.cpp): which operands are multiplied, and how.
      size_t pi = 0, qi = 1;
      runtime::ContractPlan plan;
      if (in.op == Op::Dot) {
        plan = runtime::dot_plan(static_cast<int>(arg(0).exact.rank()), static_cast<int>(arg(1).exact.rank()));
      } else if (in.op == Op::Contract) {
        plan = interp::contract_plan(rest_of(0), rest_of(1), fn.type_of(in.args[0]).tensor,
                                     fn.type_of(in.args[1]).tensor, in.axes, in.pairs);
      } else {
        const int ra = static_cast<int>(arg(1).exact.rank()), rb = static_cast<int>(arg(2).exact.rank());
        const runtime::ContractPlan fwd =
            in.attr<core::attr::ProductForm>().dot
                ? runtime::dot_plan(ra, rb)
                : interp::contract_plan(rest_of(1), rest_of(2), fn.type_of(in.args[1]).tensor,
                                        fn.type_of(in.args[2]).tensor, in.axes, in.pairs);
        // ∂a = contract(ct, b, adjoint_a), ∂b = contract(a, ct, adjoint_b).
        if (in.op == Op::ContractGradA) {
          plan = runtime::contract_adjoint_a(fwd, ra);
          qi = 2;
        } else {
          plan = runtime::contract_adjoint_b(fwd, rb);
          pi = 1;
          qi = 0;
        }
      }
      const Sampled& p = arg(pi);
      const Sampled& q = arg(qi);
      const ContractionTerms terms = contraction_terms(plan, p.exact.shape, q.exact.shape);
      const size_t k = terms.k;
      const bool fused = st && st->fma;
      build_.begin(n_out);
      std::vector<double> products, errors, product_bounds;
      for (size_t j = 0; j < n_out; ++j) {
        products.clear();
        errors.clear();
        product_bounds.clear();
        double second_order = 0;
        for (size_t t = j * k; t < (j + 1) * k; ++t) {
          const size_t ia = static_cast<size_t>(terms.p_at[t]), ib = static_cast<size_t>(terms.q_at[t]);
          const double a = p.exact.reals[ia], b = q.exact.reals[ib], da = p.bound(ia), db = q.bound(ib);
          // a·eb + b·ea, and ea·eb (widened by the doubles' distance from the exact values).
          build_.add(*p.error, ia, b);
          build_.add(*q.error, ib, a);
          second_order += (da + slack(a)) * (db + slack(b));
          products.push_back(a * b);
          const double e = times(da, above(b)) + times(above(a), db) + times(da, db);
          errors.push_back(e);
          product_bounds.push_back(above(a) * above(b) + e);
        }
        build_.add_rest(second_order);
        add_accumulation(products, errors, fused, ua, acc, fused ? nullptr : &product_bounds);
        build_.next();
      }
      out.error = build_.finish();
      lies_in = acc;
      return out;
    }
    case Op::Scan: {
      // A bound per element, carried along the recurrence in the kernel's order
      // (runtime/scan_order.h): x's bound, each term's a·e_(t−1) + δa·(|h| + e_(t−1)), and the
      // step's roundings, γ_(N+2) of Σ|terms| (x rounded to acc, N products, N sums). The
      // states' errors feed the next step, so the result's elements bound without a form.
      const Sampled& a = arg(0);
      const Sampled& x = arg(1);
      std::vector<double> e(n_out, 0);
      const runtime::ScanAxes ax = interp::scan_axes(in, rest_of(1));
      const double g = gamma(static_cast<double>(x.exact.shape.at(static_cast<size_t>(ax.n))) + 2, ua);
      runtime::scan_order(x.exact.shape, ax, in.attr<core::attr::ScanOf>().adjoint,
                          [&](int64_t o, int64_t a0, int64_t a_step, int64_t h0, int64_t h_step, int64_t terms) {
                            const size_t j = static_cast<size_t>(o);
                            double prop = x.bound(j), size = above(x.exact.reals[j]) + x.bound(j);
                            for (int64_t m = 0; m < terms; ++m) {
                              const size_t ia = static_cast<size_t>(a0 + m * a_step),
                                           ih = static_cast<size_t>(h0 + m * h_step);
                              const double av = above(a.exact.reals[ia]), hv = above(out.exact.reals[ih]);
                              prop += times(av, e[ih]) + times(a.bound(ia), hv + e[ih]);
                              size += times(av + a.bound(ia), hv + e[ih]);
                            }
                            e[j] = prop + times(g, size);
                          });
      bounds([&](size_t j) { return e[j]; });
      lies_in = acc;
      return out;
    }
    case Op::ScanGradA: {
      // One product per element, λ·h, then the f64 kernel's rounding.
      const Sampled& l = arg(0);
      const Sampled& h = arg(1);
      build_.begin(n_out);
      std::vector<std::pair<size_t, size_t>> reads(n_out, {SIZE_MAX, SIZE_MAX});
      runtime::scan_grad_a_order(h.exact.shape, interp::scan_axes(in, rest_of(1)),
                                 in.attr<core::attr::ScanOf>().adjoint, [&](int64_t o, int64_t li, int64_t hi) {
                                   reads[static_cast<size_t>(o)] = {static_cast<size_t>(li), static_cast<size_t>(hi)};
                                 });
      for (size_t j = 0; j < n_out; ++j) {
        const auto [li, hi] = reads[j];
        if (li != SIZE_MAX) {
          const double lv = l.exact.reals[li], hv = h.exact.reals[hi];
          build_.add(*l.error, li, hv);
          build_.add(*h.error, hi, lv);
          build_.add_rest((l.bound(li) + slack(lv)) * (h.bound(hi) + slack(hv)));
          add_fixed(kU64 * (above(lv) + l.bound(li)) * (above(hv) + h.bound(hi)));
        }
        build_.next();
      }
      out.error = build_.finish();
      lies_in = FloatType::F64;
      return out;
    }
    case Op::SumTo:
    case Op::GatherGrad: {
      // Sums of the cotangent's elements into the operand's, in the cotangent's order.
      const Sampled& ct = arg(0);
      if (in.op == Op::GatherGrad && arg(2).error->largest() > 0) {
        bounds([](size_t) { return kInf; });
        why = "not covered: gather_grad with ids that may differ from the exact ones";
        return out;
      }
      TermLists terms;
      if (in.op == Op::SumTo) {
        const int result_rest = static_cast<int>(ct.exact.rank() - static_cast<int64_t>(explicit_count(0)));
        terms = summed_to(ct.exact.shape,
                          interp::axis_map(in.align.at(0), arg(1).exact.rank(), explicit_count(1), result_rest),
                          arg(1).exact.shape);
      } else {
        terms = gathered_back(arg(1).exact.shape, in.axes.at(0), arg(2).exact, n_out);
      }
      accumulate(ct, terms, false, !(ct.real() && holds(acc, ct.type)));
      return out;
    }
    case Op::Expand: {
      // Copies of the cotangent's elements, each divided by a mean's count (a rounding).
      const Sampled& ct = arg(0);
      const runtime::AxisMap map = interp::reduced_map(static_cast<int>(arg(1).exact.rank()), rest_of(1),
                                                       in.all_axes, in.axes);
      const std::vector<int64_t> from = aligned_elements(ct.exact.shape, map, shape);
      const bool mean = in.attr<core::attr::ExpandOf>().mean;
      const double count = ct.size() > 0 ? static_cast<double>(n_out) / static_cast<double>(ct.size()) : 1;
      build_.begin(n_out);
      for (size_t j = 0; j < n_out; ++j) {
        build_.add(*ct.error, static_cast<size_t>(from[j]), mean ? 1 / count : 1);
        if (mean) add_kernel(value(j), false, 0);
        build_.next();
      }
      out.error = build_.finish();
      out.cause = ct.cause;
      if (!mean) lies_in = ct.type;
      return out;
    }
    case Op::ZerosLike:
      lies_in = std::nullopt;
      return out;
    case Op::Iota:
    case Op::Uniform:
    case Op::Normal:
      return out;  // the same f64 draws in both interpreters
    case Op::Bernoulli:
      if (arg(1).error->largest() > 0) bounds([](size_t) { return 1.0; });  // a draw may flip
      return out;
    case Op::OneHot:
      if (arg(0).error->largest() > 0) bounds([](size_t) { return 1.0; });
      lies_in = std::nullopt;
      return out;
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

  // Restructuring: exact copies of elements, so each element's form moves with it.
  switch (in.op) {
    case Op::Transpose:
    case Op::SplitAxis:
    case Op::MergeAxes:
    case Op::Concat:
    case Op::Slice:
    case Op::Gather:
    case Op::Pick:
    case Op::ReshapeAs:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
    case Op::PickGrad: {
      std::vector<const Tensor*> operands;
      for (size_t k = 0; k < in.args.size(); ++k) operands.push_back(&arg(k).exact);
      const CopiedFrom from = copied_from(fn, in, operands, dims);
      const Sampled& x = arg(0);
      const bool moved = ((in.op == Op::Gather || in.op == Op::Pick) && arg(1).error->largest() > 0) ||
                         (in.op == Op::PickGrad && arg(2).error->largest() > 0);
      double swap = 0;
      if (moved)  // an id that may differ picks another row (element): |t̂[id'] − t[id]| ≤ max |t̂| + max |t|
        for (size_t i = 0; i < x.size(); ++i) swap = std::max(swap, 2 * above(x.exact.reals[i]) + x.bound(i));
      build_.begin(n_out);
      for (size_t j = 0; j < n_out; ++j) {
        if (from.operand[j] >= 0)
          build_.add(*arg(static_cast<size_t>(from.operand[j])).error, static_cast<size_t>(from.element[j]), 1);
        build_.add_rest(swap);
        build_.next();
      }
      out.error = build_.finish();
      out.cause = x.cause;
      lies_in = x.real() ? x.type : FloatType::F64;
      if (in.op == Op::Concat)
        for (size_t k = 0; k < in.args.size(); ++k)
          if (arg(k).real()) lies_in = join(*lies_in, arg(k).type);
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
      break;
  }
  bounds([](size_t) { return kInf; });
  why = fmt::format("not covered: `{}`", info.spelling);
  return out;
}

}  // namespace

RunningBounds running_bounds(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                             const Realization& r, const std::vector<std::vector<interp::Value>>& samples, int bits,
                             double confidence) {
  RunningBounds out;
  out.samples = static_cast<int>(samples.size());
  out.confidence = confidence;
  for (const std::vector<interp::Value>& args : samples) {
    Trace trace;
    exact::ExactInterpreter exact_run(prog, dims, bits);
    exact_run.set_observer([&](const core::Function& fn, const core::Instr& in, const exact::ExactValue& value,
                               const std::vector<exact::ExactValue>&) { trace.record(fn, in, value); });
    exact_run.call(entry, args);

    ErrorSymbols symbols;
    RunningWalk walk(prog, dims, r, trace, symbols);
    const Sampled result = walk.run(entry, args);
    for (const auto& [site, d] : walk.sites) out.sites[site] = std::max(out.sites[site], d);

    // The bound, and the cause of an infinite one.
    std::vector<const Sampled*> leaves;
    real_leaves(result, leaves);
    size_t elements = 0;
    for (const Sampled* leaf : leaves) {
      elements += leaf->size();
      const double worst = leaf->error->largest();
      if (worst > out.bound || (!std::isfinite(worst) && !out.infinite && leaf->cause >= 0)) {
        out.bound = std::max(out.bound, worst);
        if (!std::isfinite(worst) && leaf->cause >= 0) out.infinite = walk.causes.at(static_cast<size_t>(leaf->cause));
      }
    }
    // The estimate: each output element's Azuma–Hoeffding event fails with probability
    // 2·exp(−λ²/2); over every element of every sample, at most 1 − confidence.
    const double events = static_cast<double>(elements) * static_cast<double>(samples.size());
    const double lambda = events > 0 ? std::sqrt(2 * std::log(2 * events / (1 - confidence))) : 0;
    out.lambda = lambda;
    out.events = events;
    for (const Sampled* leaf : leaves)
      for (size_t i = 0; i < leaf->size(); ++i)
        out.estimate = std::max(out.estimate, leaf->error->estimate(i, symbols, lambda));
  }
  return out;
}

}  // namespace quire::precision
