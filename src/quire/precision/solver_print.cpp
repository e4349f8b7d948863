#include "quire/precision/solver.h"

// The solver's printout (print_solution) and its report in the artifact
// (solution_report, decision_ranges): what each decision is and why.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "quire/precision/measure.h"
#include "quire/precision/number_text.h"
#include "quire/support/text.h"

namespace quire::precision {

namespace {

const char* name(FloatType t) { return runtime::float_type_name(t); }
int64_t bytes_per(FloatType t) { return runtime::float_type_info(t).storage_bits / 8; }
double share_of(double term, double estimate) { return estimate > 0 ? 100.0 * term / estimate : 0; }

std::string pct(double v) { return fmt::format("{:.3f} %", v); }

/// What n held-out samples all inside the budget support: if a fraction p of
/// the inputs drawn as they were fell outside, n draws would all land inside
/// with probability (1 − p)^n, which is below 5 % once p ≥ 1 − 0.05^(1/n)
/// (about 3/n, the rule of three). Rounded up to a tenth of a percent.
std::string held_out_confidence(size_t n) {
  const double p = 1 - std::pow(0.05, 1.0 / static_cast<double>(n));
  return fmt::format("at 95 % confidence, fewer than {:.1f} % of inputs drawn as these were fall outside",
                     std::ceil(p * 1000) / 10);
}

std::string cost_text(double v, bool seconds) { return seconds ? sci(v) : fmt::format("{:.0f}", v); }

}  // namespace

std::string print_solution(const Solution& s, int sites) {
  const bool seconds = s.cost_unit != "bytes";
  auto limit = [&](size_t n) { return sites < 0 ? n : std::min(n, static_cast<size_t>(sites)); };
  std::string out;
  const bool gradient = s.of == BudgetOf::Gradient;
  if (gradient)
    out += fmt::format("solve: the gradient of `{}` (∂θ, by `{}`) under a budget of {} on ‖∂θ − ∂θ*‖₂{} (‖∂θ*‖₂ up to "
                       "{})\n",
                       s.entry, s.function, sci(s.budget), s.relative ? " / ‖∂θ*‖₂, each sample's own" : ", absolute",
                       sci(s.magnitude));
  else
    out += s.relative ? fmt::format("solve: `{}` under a budget of {} relative ({} absolute, |output| {})\n", s.entry,
                                    sci(s.budget), sci(s.budget_absolute), sci(s.magnitude))
                      : fmt::format("solve: `{}` under a budget of {} absolute (|output| {})\n", s.entry,
                                    sci(s.budget_absolute), sci(s.magnitude));
  int offered = 0, narrowed = 0, site_choices = 0, param_choices = 0, params_narrowed = 0;
  std::map<std::string, std::vector<std::string>> unoffered_by_rule;
  std::map<FloatType, int> param_types;
  double param_bytes = 0, param_bytes_f64 = 0;
  for (const Choice& c : s.choices) {
    (c.param ? param_choices : site_choices) += 1;
    if (c.rule == Unoffered::None) ++offered;
    if (c.type != FloatType::F64) (c.param ? params_narrowed : narrowed) += 1;
    if (c.param) {
      param_types[c.type] += 1;
      param_bytes += static_cast<double>(c.elements * bytes_per(c.type));
      param_bytes_f64 += static_cast<double>(c.elements * 8);
    }
    switch (c.rule) {
      case Unoffered::None: break;
      case Unoffered::OneElement: unoffered_by_rule["of one element (rule 1)"].push_back(c.name); break;
      case Unoffered::NegligibleTraffic: unoffered_by_rule["of negligible traffic (rule 2)"].push_back(c.name); break;
      case Unoffered::Discontinuity:
        unoffered_by_rule["kept wide at a discontinuity (rule 3)"].push_back(c.name);
        break;
      case Unoffered::NoNarrowerType: unoffered_by_rule["with no narrower type allowed"].push_back(c.name); break;
    }
  }
  int fixed = 0, carried = 0;
  for (const Follower& f : s.followers) (f.role == "carried" ? carried : fixed) += 1;
  int wide_accumulators = 0;
  for (const Choice& c : s.choices)
    wide_accumulators += c.accumulates() && c.type != FloatType::F64 && c.accumulator == FloatType::F64 ? 1 : 0;
  out += fmt::format("  sites       {} decided, {} stored away from f64{}; {} carried or fixed by the program\n",
                     site_choices, narrowed,
                     wide_accumulators ? fmt::format(" ({} of them accumulating in f64)", wide_accumulators) : "",
                     carried + fixed);
  if (param_choices > 0) {
    std::vector<std::string> by_type;
    for (const auto& [t, n] : param_types)
      if (t != FloatType::F64) by_type.push_back(fmt::format("{} {}", n, name(t)));
    out += fmt::format("  parameters  {} decided by path, {} stored away from f64{}: {} bytes at rest against {} in f64\n",
                       param_choices, params_narrowed,
                       by_type.empty() ? "" : fmt::format(" ({})", fmt::join(by_type, ", ")), param_bytes,
                       param_bytes_f64);
  }
  out += fmt::format("  offered     {} of {} choices\n", offered, s.choices.size());
  for (const auto& [rule, names] : unoffered_by_rule) {
    std::vector<std::string> shown(names.begin(), names.begin() + static_cast<long>(limit(names.size())));
    out += fmt::format("  rules       {} {} not offered: {}{}\n", names.size(), rule, fmt::join(shown, ", "),
                       shown.size() < names.size() ? ", …" : "");
  }
  out += fmt::format("  cost        {} against {} all-f64 ({:.2f}x), in {}\n", cost_text(s.cost, seconds),
                     cost_text(s.cost_all_f64, seconds), s.cost > 0 ? s.cost_all_f64 / s.cost : 1.0, s.cost_unit);
  out += fmt::format("  proposal    {} before measurement widened anything\n", cost_text(s.proposal_cost, seconds));
  if (gradient)
    out += fmt::format("  estimate    {} (Σ of the terms, each the gradient's change with that choice alone narrowed, "
                       "measured on the calibration samples; it ranks, it does not guarantee)\n",
                       sci(s.estimate));
  else
    out += fmt::format("  estimate    {} (the choices' roundings weighted by ∂L/∂v element by element, and their "
                       "accumulations; first order: it ranks, it does not guarantee)\n",
                       sci(s.estimate));
  const double worst = s.worst_measured();
  out += fmt::format("  measured    {} {}against the exact reference at {} bits, the worst of {} {}, after {} widening "
                     "round{} — {}\n",
                     sci(worst), gradient ? (s.relative ? "(‖∂θ − ∂θ*‖₂ / ‖∂θ*‖₂) " : "(‖∂θ − ∂θ*‖₂) ") : "", s.bits,
                     s.measured.size(), s.measured.size() == 1 ? "sample" : "samples",
                     s.rounds.size(), s.rounds.size() == 1 ? "" : "s",
                     s.accepted ? "inside the budget" : "OUTSIDE the budget even at f64: no realization is accepted");
  if (!s.held_out.empty()) {
    Gaps g;
    g.per_sample = s.held_out;
    const int inside = g.inside(s.budget_absolute);
    const size_t n = s.held_out.size();
    const std::string from = s.held_out_file.empty()
                                 ? fmt::format("fresh samples (seeds {}…{})", s.held_out_seeds.front(),
                                               s.held_out_seeds.back())
                                 : fmt::format("samples held out ({}…{} of {})", s.held_out_seeds.front(),
                                               s.held_out_seeds.back(), s.held_out_file);
    out += fmt::format("  held-out    {} the worst of {} {}; {} of {} inside the budget{}{}\n", sci(g.worst()), n, from,
                       inside, n, static_cast<size_t>(inside) == n ? ": " + held_out_confidence(n) : "",
                       s.held_out_note.empty() ? "" : " (" + s.held_out_note + ")");
  } else if (!s.held_out_note.empty()) {
    out += fmt::format("  held-out    {}\n", s.held_out_note);
  }
  out += "  optimal     not searched: the greedy order is a heuristic, and the measurement is what holds\n";

  // The decisions, by term.
  std::vector<const Choice*> rows;
  for (const Choice& c : s.choices)
    if (c.rule == Unoffered::None) rows.push_back(&c);
  std::stable_sort(rows.begin(), rows.end(), [](const Choice* a, const Choice* b) { return a->term() > b->term(); });
  out += fmt::format("\nThe decisions, each with its term of the estimate in its type{}:\n",
                     limit(rows.size()) < rows.size() ? fmt::format(" (the {} largest)", limit(rows.size())) : "");
  out += fmt::format("  {:<26} {:<30} {:<5} {:>9} {:>11} {:>11} {:>11} {:>9}\n", "site", "operation", "type", "elements",
                     "|v|", "s", "term", "share");
  for (size_t i = 0; i < limit(rows.size()); ++i) {
    const Choice& c = *rows[i];
    out += fmt::format("  {} {} {:<5} {:>9} {:>11} {:>11} {:>11} {:>9}\n", pad_columns(c.name, 26),
                       pad_columns(clip_columns(c.operation, 30), 30), name(c.type),
                       c.elements, sci(c.magnitude), sci(c.sensitivity), sci(c.term()), pct(share_of(c.term(), s.estimate)));
  }

  // Why each decision has its type: its moves in order.
  out += fmt::format("\nThe moves (saving in {}, the estimate's growth, the estimate after):\n", s.cost_unit);
  std::vector<const Choice*> moved;
  for (const Choice* c : rows)
    if (!c->moves.empty()) moved.push_back(c);
  for (size_t i = 0; i < limit(moved.size()); ++i) {
    const Choice& c = *moved[i];
    std::vector<std::string> parts;
    for (const Move& m : c.moves)
      parts.push_back(fmt::format("to {}{} (move {}): saves {}, adds {}, then {}{}", name(m.to),
                                  m.wide_accumulator ? " accumulating in f64" : "", m.number,
                                  cost_text(m.saving, seconds), sci(m.added), sci(m.estimate_after),
                                  m.undone_in_round ? fmt::format(", undone in widening round {}", m.undone_in_round)
                                                    : ""));
    out += fmt::format("  {}: {}{}\n", c.name, fmt::join(parts, "; "), c.note.empty() ? "" : fmt::format(" [{}]", c.note));
  }
  std::vector<const Choice*> stayed;
  for (const Choice* c : rows)
    if (c->moves.empty()) stayed.push_back(c);
  if (!stayed.empty()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < limit(stayed.size()); ++i) names.push_back(stayed[i]->name);
    out += fmt::format("  {} offered and kept at f64 (its next move would leave the budget): {}{}\n", stayed.size(),
                       fmt::join(names, ", "), names.size() < stayed.size() ? ", …" : "");
  }
  for (const WideningRound& w : s.rounds) {
    std::vector<std::string> widened;
    for (const auto& [who, to] : w.widened) widened.push_back(fmt::format("{} → {}", who, name(to)));
    out += fmt::format("  widening round {}: measured {} > {}; widened {}\n", w.round, sci(w.measured_before),
                       sci(s.budget_absolute), fmt::join(widened, ", "));
  }

  // Not offered.
  std::vector<const Choice*> unoffered;
  for (const Choice& c : s.choices)
    if (c.rule != Unoffered::None) unoffered.push_back(&c);
  if (!unoffered.empty()) {
    out += "\nNot offered, left at f64:\n";
    for (size_t i = 0; i < limit(unoffered.size()); ++i)
      out += fmt::format("  {}: {}\n", unoffered[i]->name, unoffered[i]->unoffered);
  }

  // Followers.
  if (!s.followers.empty()) {
    out += "\nThe values the solver does not decide (no term, no cost of their own):\n";
    out += fmt::format("  {:<26} {:<30} {:<34} {:>11} {:>11}\n", "site", "operation", "role", "|v|", "s");
    for (size_t i = 0; i < limit(s.followers.size()); ++i) {
      const Follower& f = s.followers[i];
      out += fmt::format("  {} {} {:<34} {:>11} {:>11}\n", pad_columns(f.site, 26),
                         pad_columns(clip_columns(f.operation, 30), 30), f.role, sci(f.magnitude),
                         sci(f.sensitivity));
    }
  }
  return out;
}

DecisionRanges decision_ranges(const Solution& s) {
  DecisionRanges r;
  r.headroom = s.headroom;
  for (const Choice& c : s.choices)
    if (!c.param && c.type != FloatType::F64) r.sites.emplace(c.name, c.magnitude);
  return r;
}

nlohmann::ordered_json solution_report(const Solution& s) {
  nlohmann::ordered_json j;
  j["of"] = budget_of_name(s.of);
  j["function"] = s.function;
  j["budget"] = json_number(s.budget);
  j["relative"] = s.relative;
  j["output_magnitude"] = json_number(s.magnitude);
  j["budget_absolute"] = json_number(s.budget_absolute);
  j["cost_unit"] = s.cost_unit;
  j["cost"] = json_number(s.cost);
  j["cost_all_f64"] = json_number(s.cost_all_f64);
  j["proposal_cost"] = json_number(s.proposal_cost);
  j["estimate"] = json_number(s.estimate);
  j["bits"] = s.bits;
  j["measured"] = nlohmann::ordered_json::array();
  for (double g : s.measured) j["measured"].push_back(json_number(g));
  j["accepted"] = s.accepted;
  j["widening_rounds"] = s.rounds.size();
  j["held_out"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < s.held_out.size(); ++k)
    j["held_out"].push_back(
        {{s.held_out_file.empty() ? "seed" : "sample", s.held_out_seeds[k]}, {"gap", json_number(s.held_out[k])}});
  if (!s.held_out_file.empty()) j["held_out_file"] = s.held_out_file;
  j["choices"] = nlohmann::ordered_json::array();
  for (const Choice& c : s.choices) {
    nlohmann::ordered_json o;
    o["name"] = c.name;
    o["kind"] = c.param ? "parameter" : "site";
    o["operation"] = c.operation;
    o["type"] = name(c.type);
    o["elements"] = c.elements;
    o["magnitude"] = json_number(c.magnitude);
    o["sensitivity"] = json_number(c.sensitivity);
    o["term"] = json_number(c.term());
    if (c.accumulates() && c.type != FloatType::F64) o["accumulator"] = name(c.accumulator);
    if (!c.unoffered.empty()) o["unoffered"] = c.unoffered;
    if (!c.note.empty()) o["note"] = c.note;
    o["moves"] = nlohmann::ordered_json::array();
    for (const Move& m : c.moves)
      o["moves"].push_back({{"number", m.number},
                            {"to", name(m.to)},
                            {"saving", json_number(m.saving)},
                            {"added", json_number(m.added)},
                            {"estimate_after", json_number(m.estimate_after)},
                            {"undone_in_round", m.undone_in_round}});
    j["choices"].push_back(std::move(o));
  }
  j["followers"] = nlohmann::ordered_json::array();
  for (const Follower& f : s.followers) j["followers"].push_back({{"site", f.site}, {"role", f.role}});
  return j;
}

}  // namespace quire::precision
