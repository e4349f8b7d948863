// quire solve FILE --precision envelope.json --budget B [--of output|gradient] [--relative|--absolute]
//   [--profile P.json] [--types f32,bf16,f16] [--discontinuous wide|measure]
//   [--negligible θ] [--held-out K] [--headroom H] [--sites N] [--out realization.json]
//
// The solver (docs/precision.md "The solver"): the envelope's entry gets a
// storage type for every value it stores and every parameter, ranked by
// sensitivity (one exact reverse sweep per envelope sample, the largest
// kept), narrowed while the first-order estimate stays inside the budget,
// then measured against the exact reference and widened until the
// measurement holds. The printout explains every decision; --out writes
// the decisions (atomically) for `run`, `train` and `check --realize @FILE`.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"
#include "quire/io/json_file.h"
#include "quire/machine/profile.h"
#include "quire/precision/measure.h"
#include "quire/realize/realization_file.h"
#include "quire/precision/sensitivity.h"
#include "quire/precision/solver.h"

namespace quire::cli {

Handler setup_solve(CLI::App& sub) {
  struct Options {
    std::string file, envelope, profile, out, types = "f32,bf16,f16", discontinuous = "wide", of = "output";
    double budget = -1;
    bool relative = false, absolute = false;
    int held_out = 32;
    double headroom = 4;
    int sites = 30;
    double negligible = 1e-3;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--precision", o->envelope, "the envelope: `quire calibrate … --out envelope.json`")->required();
  sub.add_option("--budget", o->budget, "the error allowed at the output (relative to its magnitude unless --absolute)")
      ->required();
  sub.add_option("--of", o->of,
                 "what the budget bounds: output (the entry's result, default) or gradient (∂θ of the entry's vjp, "
                 "which `quire train --realize` runs: the backward sweep's types are solved too)")
      ->check(CLI::IsMember({"output", "gradient"}));
  sub.add_flag("--relative", o->relative, "the budget is a fraction of the output's largest |y| (the default)");
  sub.add_flag("--absolute", o->absolute, "the budget is an absolute error");
  sub.add_option("--profile", o->profile, "price values by this machine profile's roofline time (default: bytes)");
  sub.add_option("--types", o->types, "the types a value may narrow to, comma-separated (default f32,bf16,f16)");
  sub.add_option("--discontinuous", o->discontinuous,
                 "values a comparison reads: wide (default, not offered) or measure (offered; the measurement decides)")
      ->check(CLI::IsMember({"wide", "measure"}));
  sub.add_option("--negligible", o->negligible,
                 "rule 2's θ: a value whose first narrowing saves less than θ times the mean value's all-f64 cost is "
                 "not offered (default 1e-3)")
      ->check(CLI::Range(0.0, 1.0));
  sub.add_option("--held-out", o->held_out, "fresh samples, drawn as the envelope's were, that must be inside the budget too (default 32)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--headroom", o->headroom,
                 "a type is offered only where the samples' largest |v| times this is finite in it (default 4)")
      ->check(CLI::Range(1.0, 1e300));
  sub.add_option("--sites", o->sites, "rows per table (default 30; -1: all)");
  add_output_option(sub, "--out", o->out, "write the realization (atomically); without it nothing is written");
  return [o]() {
    if (o->relative && o->absolute) throw UsageError("--relative and --absolute: give one");
    if (!(o->budget >= 0) || std::isinf(o->budget))
      throw UsageError(fmt::format("--budget {}: expected a finite number ≥ 0", o->budget));
    precision::SolveOptions options;
    options.budget = o->budget;
    options.relative = !o->absolute;
    options.measure_discontinuous = o->discontinuous == "measure";
    options.held_out = o->held_out;
    options.headroom = o->headroom;
    options.negligible = o->negligible;
    options.menu.clear();
    std::stringstream types(o->types);
    for (std::string t; std::getline(types, t, ',');) {
      auto type = runtime::parse_float_type(t);
      if (!type || *type == runtime::FloatType::F64)
        throw UsageError(fmt::format("--types {}: `{}` is not one of f32, bf16, f16", o->types, t));
      options.menu.push_back(*type);
    }
    std::optional<machine::Profile> profile;
    if (!o->profile.empty()) {
      profile = machine::read_profile(o->profile);
      options.profile = &*profile;
    }
    const precision::Envelope envelope =
        precision::envelope_from_json(io::read_json(o->envelope), o->envelope);
    if (envelope.result.empty())
      throw UsageError(fmt::format("--precision {}: a version 1 envelope; calibrate again for the solver", o->envelope));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    const int entry = find_entry(*prog, envelope.entry);
    const elab::Type& result = prog->functions[static_cast<size_t>(entry)].result;
    if (!result.is_tensor() || result.tensor.elem != elab::Elem::Real || !result.tensor.axes.empty() ||
        result.tensor.rest)
      throw UsageError(fmt::format(
          "`{}` returns {}: the solver ranks values by ∂L/∂v, which needs an entry returning one real ℝ[] (reduce "
          "the output to a loss)",
          envelope.entry, prog->printer()(result)));
    for (const auto& [dim, size] : envelope.dims)
      if (std::find(prog->dims.begin(), prog->dims.end(), dim) == prog->dims.end())
        throw UsageError(fmt::format("--precision {}: the envelope binds {} = {}, which `{}` does not declare",
                                     o->envelope, dim, size, o->file));
    const bool gradient = o->of == "gradient";
    if (gradient && (prog->functions[static_cast<size_t>(entry)].args.empty() ||
                     prog->functions[static_cast<size_t>(entry)].args[0].type.kind != elab::TypeKind::Params))
      throw UsageError(fmt::format("--of gradient: `{}` takes no parameters first, so it has no ∂θ to budget",
                                   envelope.entry));
    auto solve = [&]() {
      if (gradient) return precision::solve_gradient(*prog, entry, envelope, options);
      // The sensitivities of every calibration sample, the largest kept.
      const auto samples = precision::envelope_samples(*prog, entry, envelope, 0, envelope.samples);
      std::vector<precision::Sensitivities> each;
      try {
        for (const auto& args : samples)
          each.push_back(precision::sensitivities(*prog, entry, envelope.dims, args, envelope.bits));
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());  // an entry that takes a gradient itself
      }
      return precision::solve(*prog, entry, envelope, precision::largest_of(each), options);
    };
    const precision::Solution solution = solve();
    std::cout << precision::print_solution(solution, o->sites);
    if (!o->out.empty()) {
      if (!solution.accepted) {
        std::cout << fmt::format("solve: nothing written to {}: no realization is inside the budget\n", o->out);
        return 1;
      }
      const precision::DecisionRanges ranges = precision::decision_ranges(solution);
      io::write_file_atomically(o->out, precision::realization_file_json(solution.entry, solution.assignment,
                                                                         precision::solution_report(solution), &ranges,
                                                                         solution.of)
                                                .dump(2) +
                                            "\n");
      std::cout << fmt::format("solve: wrote {}\n", o->out);
    }
    return solution.accepted ? 0 : 1;
  };
}

}  // namespace quire::cli
