#include "quire/precision/solver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/grad/vjp.h"
#include "quire/interp/interpreter.h"
#include "quire/precision/measure.h"
#include "quire/precision/number_text.h"
#include "quire/realize/realization_file.h"
#include "quire/support/text.h"

namespace quire::precision {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* name(FloatType t) { return runtime::float_type_name(t); }
double unit_roundoff(FloatType t) { return runtime::float_type_info(t).unit_roundoff; }
int64_t bytes_per(FloatType t) { return runtime::float_type_info(t).storage_bits / 8; }

bool is_real_tensor(const elab::Type& t) { return t.is_tensor() && t.tensor.elem == elab::Elem::Real; }

/// Comparisons and a Bernoulli's probability: a rounding error can flip what
/// they return, which first-order reasoning does not see. (A where's branches,
/// a gather's table and integer inputs are read smoothly.)
bool reads_discontinuously(core::Op op) {
  switch (op) {
    case core::Op::Lt:
    case core::Op::Le:
    case core::Op::Gt:
    case core::Op::Ge:
    case core::Op::Eq:
    case core::Op::Ne:
    case core::Op::Bernoulli: return true;
    case core::Op::Const:
    case core::Op::ConstInt:
    case core::Op::ConstBool:
    case core::Op::HostConst:
    case core::Op::Real:
    case core::Op::Field:
    case core::Op::TupleGet:
    case core::Op::MakeTuple:
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
    case core::Op::Cast:
    case core::Op::Add:
    case core::Op::Sub:
    case core::Op::Mul:
    case core::Op::Div:
    case core::Op::PowConst:
    case core::Op::Pow:
    case core::Op::Min:
    case core::Op::Max:
    case core::Op::Where:
    case core::Op::Sum:
    case core::Op::Mean:
    case core::Op::ReduceMax:
    case core::Op::ReduceMin:
    case core::Op::LogSumExp:
    case core::Op::Dot:
    case core::Op::Contract:
    case core::Op::SplitAxis:
    case core::Op::MergeAxes:
    case core::Op::Transpose:
    case core::Op::Concat:
    case core::Op::Slice:
    case core::Op::Gather:
    case core::Op::Pick:
    case core::Op::Iota:
    case core::Op::OneHot:
    case core::Op::KeySplit:
    case core::Op::Uniform:
    case core::Op::Normal:
    case core::Op::Call:
    case core::Op::Fold:
    case core::Op::SumTo:
    case core::Op::Expand:
    case core::Op::ContractGradA:
    case core::Op::ContractGradB:
    case core::Op::ReshapeAs:
    case core::Op::MergeGrad:
    case core::Op::ConcatGrad:
    case core::Op::SliceGrad:
    case core::Op::PickGrad:
    case core::Op::Scan:
    case core::Op::ScanGradA:
    case core::Op::GatherGrad:
    case core::Op::ZerosLike:
    case core::Op::MakeParams:
    case core::Op::FoldVjp:
      return false;
  }
  throw std::logic_error("internal: an operation outside ops.def");
}

/// max and min pick an operand: where two tie, an error in the one not picked
/// moves the result while its cotangent, and so its term, is 0.
bool picks_an_operand(core::Op op) {
  return op == core::Op::Max || op == core::Op::Min || op == core::Op::ReduceMax || op == core::Op::ReduceMin;
}

/// Where each function's values are read by a discontinuous operation: the
/// value's own function, or (through its arguments) a callee's.
class Discontinuities {
 public:
  Discontinuities(const elab::Program& prog, const std::set<int>& functions) : prog_(prog) {
    for (int f : functions) scan(f);
    // Arguments read discontinuously in a callee make the caller's operand so;
    // a chain of calls settles within one pass per function.
    for (size_t pass = 0; pass <= functions.size(); ++pass) {
      bool changed = false;
      for (int f : functions) changed = propagate(f) || changed;
      if (!changed) break;
    }
  }

  /// "read by `lt` at loss/%9", or "" when no discontinuous operation reads it.
  std::string flip(const std::string& site) const {
    auto it = flips_.find(site);
    return it == flips_.end() ? "" : it->second;
  }
  std::string tie(const std::string& site) const {
    auto it = ties_.find(site);
    return it == ties_.end() ? "" : it->second;
  }

 private:
  void mark(const core::Function& fn, int value, const std::string& why) {
    if (value <= static_cast<int>(fn.args.size())) {
      if (arg_flips_[&fn].emplace(value - 1, why).second) dirty_ = true;
      return;
    }
    flips_.emplace(core::site_name(fn, value), why);
  }

  void scan(int f) {
    const core::Function& fn = prog_.functions[static_cast<size_t>(f)];
    for (const core::Instr& in : fn.body) {
      if (!reads_discontinuously(in.op) && !picks_an_operand(in.op)) continue;
      const std::string at =
          fmt::format("`{}` at {}", core::op_info(in.op).spelling, core::site_name(fn, in.id));
      for (int a : in.args) {
        if (!is_real_tensor(fn.type_of(a))) continue;
        if (reads_discontinuously(in.op))
          mark(fn, a, "read by " + at);
        else if (a > static_cast<int>(fn.args.size()))
          ties_.emplace(core::site_name(fn, a), "read by " + at);
      }
    }
  }

  bool propagate(int f) {
    const core::Function& fn = prog_.functions[static_cast<size_t>(f)];
    dirty_ = false;
    for (const core::Instr& in : fn.body) {
      if (in.op != core::Op::Call && in.op != core::Op::Fold) continue;
      auto it = arg_flips_.find(&prog_.functions[static_cast<size_t>(in.callee)]);
      if (it == arg_flips_.end()) continue;
      for (const auto& [position, why] : it->second) {
        // A fold's callee takes (θ copy, acc): its operands are (stack, x).
        const size_t operand = static_cast<size_t>(position);
        if (operand < in.args.size()) mark(fn, in.args[operand], why);
      }
    }
    return dirty_;
  }

  const elab::Program& prog_;
  std::map<std::string, std::string> flips_;
  std::map<std::string, std::string> ties_;
  std::map<const core::Function*, std::map<int, std::string>> arg_flips_;
  bool dirty_ = false;
};

/// Readers of each value in its function; the result counts its caller's read.
std::vector<int64_t> reader_counts(const core::Function& fn) {
  std::vector<int64_t> reads(static_cast<size_t>(fn.value_count() + 1), 0);
  for (const core::Instr& in : fn.body)
    for (int a : in.args) reads[static_cast<size_t>(a)] += 1;
  if (fn.result_value > 0) reads[static_cast<size_t>(fn.result_value)] += 1;
  return reads;
}

/// The cost model: bytes, or the profile's roofline time.
struct Costs {
  const machine::Profile* profile = nullptr;

  double bytes(const Choice& c, FloatType t) const {
    const double moved = static_cast<double>(c.evaluations) * static_cast<double>(c.elements) *
                         static_cast<double>(bytes_per(t));
    return c.param ? moved : moved * static_cast<double>(1 + c.reads);
  }
  double of(const Choice& c, FloatType t) const {
    if (!profile) return bytes(c, t);
    const double flops = c.param ? 0
                                 : static_cast<double>(c.evaluations) * static_cast<double>(c.elements) *
                                       static_cast<double>(c.terms);
    return profile->roofline_seconds(bytes(c, t), flops, t);
  }
};

/// The type a choice narrows to next, if any: f64 → f32 → the better half
/// (the smaller rounding error; bf16 on a tie), within what it allows.
std::optional<FloatType> next_narrower(const Choice& c) {
  auto allows = [&](FloatType t) { return std::find(c.allowed.begin(), c.allowed.end(), t) != c.allowed.end(); };
  if (c.type == FloatType::F64 && allows(FloatType::F32)) return FloatType::F32;
  if (c.type == FloatType::F64 || c.type == FloatType::F32) {
    std::optional<FloatType> best;
    for (FloatType t : {FloatType::BF16, FloatType::F16})
      if (allows(t) && (!best || c.rounding.at(t) < c.rounding.at(*best))) best = t;
    return best;
  }
  return std::nullopt;
}

/// A move waiting in the queue.
struct Offer {
  size_t choice = 0;
  FloatType to = FloatType::F64;
  double saving = 0;
  double added = 0;
  double ratio() const { return added > 0 ? saving / added : kInf; }
};

/// The queue's order: saving per unit of estimate, then saving, then the
/// choices' own order: deterministic whatever the platform's sort.
struct WorseOffer {
  bool operator()(const Offer& a, const Offer& b) const {
    if (a.ratio() != b.ratio()) return a.ratio() < b.ratio();
    if (a.saving != b.saving) return a.saving < b.saving;
    return a.choice > b.choice;
  }
};

Assignment assignment_of(const std::vector<Choice>& choices) {
  Assignment a;
  a.policy = Policy::F64;
  for (const Choice& c : choices) {
    if (c.type == FloatType::F64) continue;
    (c.param ? a.params : a.sites)[c.name] = c.type;
    if (!c.param && c.accumulates() && c.accumulator != FloatType::F32) a.accumulators[c.name] = c.accumulator;
  }
  return a;
}

}  // namespace

double Choice::term_in(FloatType t) const {
  if (!alone.empty()) return alone.at(t);
  return stored_term(weighted, t, sensitivity, rounding.at(t)) + accumulation_in(t);
}

double Choice::accumulation_in(FloatType t, std::optional<FloatType> acc) const {
  // A narrowed reduction accumulates in f32 unless its accumulator is decided
  // wide (realization.h's Assignment::accumulators).
  return accumulation_term(accumulated, terms, t == FloatType::F64 ? FloatType::F64 : acc.value_or(accumulator));
}

double Solution::worst_measured() const {
  Gaps g;
  g.per_sample = measured;
  return g.worst();
}

namespace {

/// What a solve of the output and one of the gradient differ in.
struct Target {
  int function = -1;  ///< whose stored values are the choices: the entry, or its vjp
  std::vector<SiteEnvelope> sites;  ///< by decision site (core::decision_site)
  const Sensitivities* sensitivities = nullptr;  ///< the output's ∂L/∂v (none for a gradient)
  /// Fills each offered choice's `alone` (the gradient's terms), or empty.
  std::function<void(std::vector<Choice>&)> measure_terms;
  /// The gaps of an assignment on the calibration samples and on the held-out ones.
  std::function<std::pair<Gaps, Gaps>(const Assignment&)> measure;
};

/// The solve itself (solver.h's steps 1–4) over `target`, into `s`, whose
/// entry, budget and held-out fields the caller has set.
void solve_for(const elab::Program& prog, const Envelope& envelope, const Target& target,
               const SolveOptions& options, Solution& s) {
  const std::map<std::string, int64_t>& dims = envelope.dims;
  s.cost_unit = options.profile ? fmt::format("s (the roofline of profile {})",
                                              options.profile->name.empty() ? "given" : options.profile->name)
                                : "bytes";
  const Costs costs{options.profile};

  // The base: the f64 policy, whose tables say which sites the function
  // stores and which marks bind them.
  RealizeOptions base_options;
  base_options.policy = Policy::F64;
  const Realization base = realize(prog, target.function, base_options, dims);
  const std::map<std::string, SiteFreedom> freedoms = site_freedoms(prog, base);
  std::set<int> reached;
  for (const FunctionRealization& fr : base.functions) reached.insert(fr.function);
  const Discontinuities discontinuities(prog, reached);

  // r(T): the envelope's measurement; f64's is charged u·|v|, or r(f32)
  // when that is smaller (an f32 value is an f64 value: a site exact in f32
  // is exact in f64).
  auto rounding_of = [&](double magnitude, const std::map<std::string, double>& measured, FloatType t) {
    auto it = measured.find(name(t == FloatType::F64 ? FloatType::F32 : t));
    const double bound = unit_roundoff(t) * magnitude;
    if (it == measured.end()) return bound;
    return t == FloatType::F64 ? std::min(bound, it->second) : it->second;
  };
  // The range: a type is offered only when the largest |v| any sample saw,
  // times the headroom, is finite in it (a NaN magnitude fits nothing), so
  // that inputs a little larger than the samples' do not overflow it. The
  // types it keeps out are said in the choice's note.
  auto menu_for = [&](bool at_least_f32, double magnitude, std::string& excluded) {
    std::vector<FloatType> allowed{FloatType::F64};
    std::vector<std::string> out_of_range;
    for (FloatType t : options.menu) {
      if (t == FloatType::F64 || (at_least_f32 && is_half(t))) continue;
      const double largest = runtime::float_type_info(t).largest_finite;
      if (magnitude * options.headroom <= largest)
        allowed.push_back(t);
      else
        out_of_range.push_back(fmt::format("{} (largest finite {})", name(t), sci(largest)));
    }
    if (!out_of_range.empty())
      excluded = fmt::format("range: |v| up to {} times the headroom {} leaves out {}", sci(magnitude),
                             options.headroom, fmt::join(out_of_range, ", "));
    return allowed;
  };
  auto join_note = [](std::string& note, const std::string& more) {
    if (!more.empty()) note = note.empty() ? more : note + "; " + more;
  };

  // Lookups by name, built once: the analysis stays linear in the program's size.
  std::unordered_map<std::string, const SiteEnvelope*> envelope_of;
  for (const SiteEnvelope& e : target.sites) envelope_of.emplace(e.site, &e);
  std::unordered_map<std::string, const SiteSensitivity*> sensitivity_of;
  if (target.sensitivities)
    for (const SiteSensitivity& e : target.sensitivities->sites) sensitivity_of.emplace(e.site, &e);
  auto find = [](const auto& map, const std::string& key) {
    auto it = map.find(key);
    return it == map.end() ? nullptr : it->second;
  };

  // The sites, in program order, each once: a vjp's copy of a forward value
  // is its primal's site (core::decision_site).
  std::set<std::string> listed;
  for (int f : reached) {
    const core::Function& fn = prog.functions[static_cast<size_t>(f)];
    const std::vector<int64_t> reads = reader_counts(fn);
    for (const core::Instr& in : fn.body) {
      if (!is_real_tensor(in.type)) continue;
      const std::string site = core::decision_site(prog, fn, in);
      if (!listed.insert(site).second) continue;
      const SiteEnvelope* env = find(envelope_of, site);
      if (!env) continue;  // never evaluated on the samples: nothing to base a choice on
      const SiteSensitivity* sens = find(sensitivity_of, site);
      auto freedom = freedoms.find(site);
      if (freedom == freedoms.end()) continue;
      const SiteFreedom& fr = freedom->second;
      if (!fr.stored || fr.fixed) {
        Follower follower;
        follower.site = site;
        follower.operation = core::print_instr(prog, fn, in);
        follower.role = !fr.stored ? "carried" : in.op == core::Op::Field ? "follows its parameter" : "fixed: " + fr.fixed_why;
        follower.magnitude = env->max_abs;
        follower.sensitivity = sens ? sens->l1 : 0;
        s.followers.push_back(std::move(follower));
        continue;
      }
      Choice c;
      c.name = site;
      c.operation = core::print_instr(prog, fn, in);
      c.elements = env->elements;
      c.evaluations = std::max<int64_t>(env->evaluations, 1);
      c.reads = reads[static_cast<size_t>(in.id)];
      c.terms = env->terms.value_or(1);
      c.magnitude = env->max_abs;
      c.sensitivity = sens ? sens->l1 : 0;
      if (sens) {
        c.weighted = sens->weighted;
        c.accumulated = sens->accumulated;
      }
      std::string excluded;
      c.allowed = menu_for(fr.at_least_f32, env->max_abs, excluded);
      for (FloatType t : c.allowed) c.rounding[t] = rounding_of(env->max_abs, env->rounding, t);
      if (fr.at_least_f32) c.note = fmt::format("never below f32: {}", fr.floor_why);
      if (const std::string why = discontinuities.flip(site); !why.empty()) {
        if (options.measure_discontinuous) {
          c.note = fmt::format("{}: offered, and the measurement decides (a flip is not first order)", why);
        } else {
          c.rule = Unoffered::Discontinuity;
          c.unoffered = fmt::format("kept wide: {}, which may flip (rule 3)", why);
        }
      } else if (const std::string tie = discontinuities.tie(site); !tie.empty()) {
        c.note = fmt::format("{}: a tie is not first order; the measurement decides", tie);
      }
      join_note(c.note, excluded);
      s.choices.push_back(std::move(c));
    }
  }
  // The parameters, by path.
  std::unordered_map<std::string, const ParamEnvelope*> param_envelope_of;
  for (const ParamEnvelope& e : envelope.params) param_envelope_of.emplace(e.path, &e);
  std::unordered_map<std::string, const ParamSensitivity*> param_sensitivity_of;
  if (target.sensitivities)
    for (const ParamSensitivity& e : target.sensitivities->params) param_sensitivity_of.emplace(e.path, &e);
  for (const ParamStorage& p : base.params) {
    const ParamEnvelope* env = find(param_envelope_of, p.path);
    if (!env) continue;
    const ParamSensitivity* sens = find(param_sensitivity_of, p.path);
    Choice c;
    c.param = true;
    c.name = p.path;
    c.operation = "a parameter, by its path";
    c.elements = env->elements;
    c.magnitude = env->max_abs;
    c.sensitivity = sens ? sens->l1 : 0;
    if (sens) c.weighted = sens->weighted;
    std::string excluded;
    c.allowed = menu_for(p.numerics_high, env->max_abs, excluded);
    for (FloatType t : c.allowed) c.rounding[t] = rounding_of(env->max_abs, env->rounding, t);
    c.rounding[FloatType::F64] = 0;  // a parameter's values are f64 values: exact there
    if (p.numerics_high) c.note = "never below f32: a `numerics high` parameter";
    join_note(c.note, excluded);
    s.choices.push_back(std::move(c));
  }

  // The rules that leave a choice unoffered.
  for (const Choice& c : s.choices) s.cost_all_f64 += costs.of(c, FloatType::F64);
  // Rule 2 measures against the mean choice, not the whole: in a program of n
  // similar values each is 1/n of the cost, and a fraction of the whole would
  // leave every value of a large program unoffered.
  s.theta_cost = s.choices.empty() ? 0 : options.negligible * s.cost_all_f64 / static_cast<double>(s.choices.size());
  for (Choice& c : s.choices) {
    if (c.rule != Unoffered::None) continue;
    if (c.elements == 1) {
      c.rule = Unoffered::OneElement;
      c.unoffered = "one element, no traffic to save (rule 1)";
      continue;
    }
    const std::optional<FloatType> first = next_narrower(c);
    if (!first) {
      c.rule = Unoffered::NoNarrowerType;
      c.unoffered = "no narrower type on the menu";
      continue;
    }
    const double saving = costs.of(c, FloatType::F64) - costs.of(c, *first);
    if (saving < s.theta_cost) {
      c.rule = Unoffered::NegligibleTraffic;
      c.unoffered = fmt::format("its first narrowing saves {} {}, under θ times the mean choice's cost, {} (rule 2)", sci(saving),
                                options.profile ? "s" : "bytes", sci(s.theta_cost));
    }
  }

  // A gradient's terms: each offered choice's narrowing measured alone.
  if (target.measure_terms) target.measure_terms(s.choices);

  // Narrowing, best saving per unit of estimate first.
  double estimate = 0;
  for (const Choice& c : s.choices) estimate += c.term();
  std::priority_queue<Offer, std::vector<Offer>, WorseOffer> queue;
  auto offer_next = [&](size_t i) {
    const Choice& c = s.choices[i];
    const std::optional<FloatType> to = next_narrower(c);
    if (!to) return;
    // A term never shrinks as a type narrows: a narrower type's values are
    // values of the wider one, so each element's rounding can only grow.
    const double added = std::max(0.0, c.term_in(*to) - c.term_in(c.type));
    queue.push({i, *to, costs.of(c, c.type) - costs.of(c, *to), added});
  };
  for (size_t i = 0; i < s.choices.size(); ++i)
    if (s.choices[i].rule == Unoffered::None) offer_next(i);
  while (!queue.empty()) {
    const Offer o = queue.top();
    queue.pop();
    Choice& c = s.choices[o.choice];
    // A move that saves nothing, or would leave the budget, ends its choice's
    // narrowing, unless a sum's accumulation is what leaves it: then the
    // move is taken with its accumulator kept at f64, if that fits.
    if (!(o.saving > 0)) continue;
    double added = o.added;
    bool wide = false;
    if (!(estimate + added <= s.budget_absolute)) {
      if (!c.accumulates() || c.accumulator == FloatType::F64) continue;
      const double stored = c.term_in(o.to) - c.accumulation_in(o.to);
      added = std::max(0.0, stored + c.accumulation_in(o.to, FloatType::F64) - c.term_in(c.type));
      if (!(estimate + added <= s.budget_absolute)) continue;
      c.accumulator = FloatType::F64;
      wide = true;
    }
    estimate += added;
    c.type = o.to;
    c.moves.push_back({++s.moves, o.to, wide, o.saving, added, estimate, 0});
    offer_next(o.choice);
  }
  for (const Choice& c : s.choices) s.proposal_cost += costs.of(c, c.type);

  // Measurement, widening the largest terms while a gap exceeds the budget:
  // on the calibration samples and on held-out ones, inputs the envelope
  // never saw (target.measure). Both must be inside for the realization to
  // be accepted.
  Gaps held_out;
  auto measure = [&]() {
    s.assignment = assignment_of(s.choices);
    Gaps calibration;
    std::tie(calibration, held_out) = target.measure(s.assignment);
    return calibration;
  };
  Gaps gaps = measure();
  for (int round = 1;; ++round) {
    // A NaN gap is never inside: max() would drop it, so it is asked apart.
    const double worst = std::isnan(held_out.worst()) ? held_out.worst() : std::max(gaps.worst(), held_out.worst());
    if (gaps.worst() <= s.budget_absolute &&
        held_out.inside(s.budget_absolute) == static_cast<int>(held_out.per_sample.size())) {
      s.accepted = true;
      break;
    }
    std::vector<size_t> narrowed;
    for (size_t i = 0; i < s.choices.size(); ++i)
      if (s.choices[i].type != FloatType::F64) narrowed.push_back(i);
    if (narrowed.empty()) break;  // f64 everywhere, and still outside: not accepted
    std::stable_sort(narrowed.begin(), narrowed.end(),
                     [&](size_t a, size_t b) { return s.choices[a].term() > s.choices[b].term(); });
    const size_t count = std::min(narrowed.size(), size_t{1} << std::min(round - 1, 62));
    WideningRound w;
    w.round = round;
    w.measured_before = worst;
    for (size_t k = 0; k < count; ++k) {
      Choice& c = s.choices[narrowed[k]];
      // A term its f32 accumulation dominates widens the accumulator first.
      if (c.accumulates() && c.accumulator == FloatType::F32 &&
          c.accumulation_in(c.type) > c.term() - c.accumulation_in(c.type)) {
        c.accumulator = FloatType::F64;
        w.widened.push_back({c.name + "'s accumulator", FloatType::F64});
        continue;
      }
      auto last = std::find_if(c.moves.rbegin(), c.moves.rend(), [](const Move& m) { return m.undone_in_round == 0; });
      last->undone_in_round = round;
      auto before = std::find_if(std::next(last), c.moves.rend(), [](const Move& m) { return m.undone_in_round == 0; });
      c.type = before == c.moves.rend() ? FloatType::F64 : before->to;
      w.widened.push_back({c.name, c.type});
    }
    s.rounds.push_back(std::move(w));
    gaps = measure();
  }
  s.measured = gaps.per_sample;
  s.held_out = held_out.per_sample;
  s.estimate = 0;
  s.cost = 0;
  for (const Choice& c : s.choices) {
    s.estimate += c.term();
    s.cost += costs.of(c, c.type);
  }
}

/// The checks both solves make of their arguments.
void check_solve_arguments(const core::Function& entry_fn, const Envelope& envelope, const SolveOptions& options) {
  if (envelope.entry != entry_fn.name)
    throw std::invalid_argument(fmt::format("the envelope is of `{}`, not of `{}`", envelope.entry, entry_fn.name));
  if (!(options.budget >= 0) || std::isinf(options.budget))
    throw std::invalid_argument(fmt::format("the budget {} is not a finite number ≥ 0", options.budget));
}

/// Held-out samples as the options ask: their arguments, and the solution's
/// account of where they come from.
std::vector<std::vector<interp::Value>> held_out_samples(const elab::Program& prog, int entry,
                                                         const Envelope& envelope, int wanted, Solution& s) {
  if (wanted <= 0) return {};
  const HeldOutSource source = held_out_source(envelope, wanted);
  s.held_out_note = source.count == 0 ? "none: " + source.none : source.short_of;
  s.held_out_file = envelope.samples_file;
  for (int j = 0; j < source.count; ++j) s.held_out_seeds.push_back(source.first + static_cast<uint64_t>(j));
  return envelope_samples(prog, entry, envelope, envelope.samples, source.count);
}

/// Each sample's arguments with the cotangent 1 of a scalar result appended:
/// a vjp's arguments, as a training step seeds it.
std::vector<std::vector<interp::Value>> with_unit_cotangent(std::vector<std::vector<interp::Value>> samples) {
  for (auto& args : samples) args.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
  return samples;
}

/// The vjp's sites as the decisions name them: a forward copy is its
/// primal's site, and where one site is stored by several functions (the
/// primal's own call and a vjp's copy) its evaluations add and its
/// magnitudes and roundings are the largest.
std::vector<SiteEnvelope> by_decision_site(const elab::Program& prog, const Envelope& calibrated) {
  std::map<std::string, std::string> decision_of;  // the function's own site → the decision's
  for (const core::Function& fn : prog.functions)
    for (const core::Instr& in : fn.body) {
      const std::string own = core::site_name(fn, in.id);
      const std::string decided = core::decision_site(prog, fn, in);
      if (own != decided) decision_of.emplace(own, decided);
    }
  std::vector<SiteEnvelope> out;
  std::unordered_map<std::string, size_t> index;
  for (const SiteEnvelope& e : calibrated.sites) {
    auto d = decision_of.find(e.site);
    const std::string site = d == decision_of.end() ? e.site : d->second;
    auto [it, fresh] = index.emplace(site, out.size());
    if (fresh) {
      out.push_back(e);
      out.back().site = site;
      continue;
    }
    SiteEnvelope& into = out[it->second];
    into.evaluations += e.evaluations;
    into.max_abs = std::isnan(into.max_abs) || std::isnan(e.max_abs) ? std::nan("") : std::max(into.max_abs, e.max_abs);
    into.min_abs = std::min(into.min_abs, e.min_abs);
    for (auto& [type, r] : into.rounding)
      if (auto other = e.rounding.find(type); other != e.rounding.end()) r = std::max(r, other->second);
    if (e.condition) into.condition = std::max(into.condition.value_or(1), *e.condition);
  }
  return out;
}

}  // namespace

Solution solve(const elab::Program& prog, int entry, const Envelope& envelope, const Sensitivities& sensitivities,
               const SolveOptions& options) {
  const core::Function& entry_fn = prog.functions.at(static_cast<size_t>(entry));
  check_solve_arguments(entry_fn, envelope, options);
  if (sensitivities.entry != entry_fn.name)
    throw std::invalid_argument(
        fmt::format("the sensitivities are of `{}`, not of `{}`", sensitivities.entry, entry_fn.name));
  Solution s;
  s.entry = entry_fn.name;
  s.function = entry_fn.name;
  s.budget = options.budget;
  s.relative = options.relative;
  s.headroom = options.headroom;
  s.magnitude = envelope.result_max_abs;
  s.budget_absolute = options.relative ? options.budget * envelope.result_max_abs : options.budget;
  s.bits = envelope.bits;
  s.samples = envelope.samples;

  const std::map<std::string, int64_t>& dims = envelope.dims;
  const auto samples = envelope_samples(prog, entry, envelope, 0, envelope.samples);
  const auto reference = exact_outputs(prog, entry, dims, samples, envelope.bits);
  const auto fresh = held_out_samples(prog, entry, envelope, options.held_out, s);
  const auto fresh_reference = exact_outputs(prog, entry, dims, fresh, envelope.bits);

  Target target;
  target.function = entry;
  target.sites = envelope.sites;
  target.sensitivities = &sensitivities;
  target.measure = [&](const Assignment& a) {
    RealizeOptions ro;
    ro.policy = Policy::F64;
    ro.assignment = &a;
    const Realization r = realize(prog, entry, ro, dims);
    return std::pair{measure_gaps(prog, entry, dims, r, samples, reference),
                     measure_gaps(prog, entry, dims, r, fresh, fresh_reference)};
  };
  solve_for(prog, envelope, target, options, s);
  return s;
}

Solution solve_gradient(elab::Program& prog, int objective, const Envelope& envelope, const SolveOptions& options) {
  const core::Function& objective_fn = prog.functions.at(static_cast<size_t>(objective));
  check_solve_arguments(objective_fn, envelope, options);
  if (objective_fn.args.empty() || objective_fn.args[0].type.kind != elab::TypeKind::Params)
    throw std::invalid_argument(fmt::format("`{}` takes no parameters first: it has no gradient to budget", objective_fn.name));
  const std::string objective_name = objective_fn.name;  // vjp() below may move the function
  // The function a training step evaluates (train/trainer.h): (L, ∂θ).
  const int vjp = grad::vjp(prog, objective, {0});
  const std::map<std::string, int64_t>& dims = envelope.dims;

  Solution s;
  s.of = BudgetOf::Gradient;
  s.entry = objective_name;
  s.function = prog.functions[static_cast<size_t>(vjp)].name;
  s.budget = options.budget;
  s.relative = options.relative;
  s.headroom = options.headroom;
  s.bits = envelope.bits;
  s.samples = envelope.samples;
  s.budget_absolute = options.budget;  // relative: a fraction of each sample's own ‖∂θ*‖

  const auto samples = with_unit_cotangent(envelope_samples(prog, objective, envelope, 0, envelope.samples));
  const auto reference = exact_outputs(prog, vjp, dims, samples, envelope.bits);
  const auto fresh = with_unit_cotangent(held_out_samples(prog, objective, envelope, options.held_out, s));
  const auto fresh_reference = exact_outputs(prog, vjp, dims, fresh, envelope.bits);
  std::vector<double> norms;  // ‖∂θ*‖ of each calibration sample
  for (const exact::ExactValue& r : reference) {
    norms.push_back(gradient_norm(r));
    s.magnitude = std::max(s.magnitude, norms.back());
  }

  Target target;
  target.function = vjp;
  // The reverse sweep's values have no envelope of the objective's: the
  // vjp's own exact run on the same samples measures every site.
  target.sites = by_decision_site(prog, calibrate(prog, vjp, dims, samples, envelope.bits));
  auto realized = [&](const Assignment& a) {
    RealizeOptions ro;
    ro.policy = Policy::F64;
    ro.assignment = &a;
    ro.keep_masters = true;  // as training reads them: masters at rest, reads rounded
    return realize(prog, vjp, ro, dims);
  };
  target.measure = [&](const Assignment& a) {
    const Realization r = realized(a);
    return std::pair{measure_gradient_gaps(prog, vjp, dims, r, samples, reference, s.relative),
                     measure_gradient_gaps(prog, vjp, dims, r, fresh, fresh_reference, s.relative)};
  };
  // Without second derivatives there is no ∂‖∂θ‖/∂v to weigh a rounding by:
  // each choice's term in T is measured, the gradient's change when that
  // value alone is narrowed to T, against the all-f64 gradient (the largest
  // over the calibration samples). It is not first order: a term holds what
  // the narrowing does, overflow and underflow included.
  target.measure_terms = [&](std::vector<Choice>& choices) {
    const Realization wide = realized(Assignment{});
    std::vector<interp::Value> baseline;
    {
      interp::Interpreter interp(prog, dims, &wide);
      for (const auto& args : samples) baseline.push_back(interp.call(vjp, args));
    }
    for (Choice& c : choices) {
      if (c.rule != Unoffered::None) continue;
      c.alone[FloatType::F64] = 0;
      for (FloatType t : c.allowed) {
        if (t == FloatType::F64) continue;
        Assignment a;
        (c.param ? a.params : a.sites)[c.name] = t;
        const Realization r = realized(a);
        interp::Interpreter interp(prog, dims, &r);
        double worst = 0;
        for (size_t k = 0; k < samples.size(); ++k) {
          const double d = gradient_difference(interp.call(vjp, samples[k]), baseline[k]);
          const double term = s.relative ? (norms[k] > 0 ? d / norms[k] : (d > 0 ? kInf : 0)) : d;
          worst = std::isnan(term) || std::isnan(worst) ? std::nan("") : std::max(worst, term);
        }
        c.alone[t] = std::isnan(worst) ? kInf : worst;  // a NaN is no type to take
      }
      const double r = c.rounding.count(FloatType::F32) ? c.rounding.at(FloatType::F32) : 0;
      if (c.alone.count(FloatType::F32) && r > 0) c.sensitivity = c.alone.at(FloatType::F32) / r;
    }
  };
  solve_for(prog, envelope, target, options, s);
  return s;
}

}  // namespace quire::precision
