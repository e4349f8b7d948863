// quire check FILE [--summary]: diagnostics, or nothing and exit 0.
//
// quire check --precision envelope.json FILE [--realize @realization.json |
//   --policy P] [--measure] [--held-out K] [--sites N] [--bits N] [--out bounds.json]
//
// The bounds (docs/precision.md, "Bounds and the measurement"): the error of
// the envelope's entry under a realization (the solver's decisions with
// --realize, else the policy, f64 by default), bounded by three rules
// conditional on the envelope and by the running rule, conditional on the
// envelope's own samples, beside two estimates (the first-order one, and the
// probabilistic one with its confidence). The entry and its dimensions are the
// envelope's. With --measure the realization also runs against the exact
// reference on the envelope's samples and on K fresh ones (default 4), and
// each bound is printed beside the measured gap. With --out the report is
// written as JSON (atomically).

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "quire/elab/summary.h"
#include "quire/exact/big.h"
#include "quire/interp/interpreter.h"
#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"
#include "quire/io/json_file.h"
#include "quire/precision/bounds.h"
#include "quire/precision/bounds_print.h"
#include "quire/precision/envelope.h"
#include "quire/precision/measure.h"
#include "quire/realize/realization.h"

namespace quire::cli {

namespace {

struct PrecisionOptions {
  std::string envelope, realize, policy, out;
  bool measure = false;
  int held_out = -1;  ///< -1: 4 with --measure
  int sites = 10;
  int bits = 0;  ///< 0: the envelope's
};

int check_precision(elab::Program& prog, const std::string& file, const PrecisionOptions& o) {
  const precision::Envelope envelope = precision::envelope_from_json(io::read_json(o.envelope), o.envelope);
  const int entry = prog.find_function(envelope.entry);
  if (entry < 0)
    throw UsageError(fmt::format("--precision {}: the envelope is of `{}`, which {} does not define", o.envelope,
                                 envelope.entry, file));
  const std::map<std::string, int64_t>& dims = envelope.dims;
  if (std::vector<std::string> problems = precision::envelope_mismatches(prog, entry, envelope); !problems.empty())
    throw UsageError(fmt::format("--precision {}: the envelope does not describe `{}` of {}:\n  {}", o.envelope,
                                 envelope.entry, file, fmt::join(problems, "\n  ")));
  const int bits = o.bits > 0 ? o.bits : envelope.bits;

  std::vector<std::vector<interp::Value>> samples;
  try {
    samples = precision::envelope_samples(prog, entry, envelope, 0, envelope.samples);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--precision {}: {}", o.envelope, e.what()));
  }

  // The sensitivities first: they append the entry's vjp to the program.
  std::optional<precision::Sensitivities> sens;
  std::string sens_failed;
  const elab::Type& result = prog.functions[static_cast<size_t>(entry)].result;  // (before the vjp is appended)
  const bool scalar = result.kind == elab::TypeKind::Tensor && result.tensor.elem == elab::Elem::Real &&
                      result.tensor.axes.empty() && !result.tensor.rest;
  if (scalar) {
    try {
      sens = precision::envelope_sensitivities(prog, entry, dims, samples, bits);
    } catch (const std::invalid_argument& e) {
      sens_failed = e.what();
    } catch (const interp::EvalError& e) {
      sens_failed = e.what();
    }
  }

  precision::RealizeOptions options;
  std::optional<precision::RealizationFile> solved;
  std::string label;
  if (!o.realize.empty()) {
    solved = load_realization(o.realize, prog, entry, dims);
    options.policy = solved->assignment.policy;
    options.assignment = &solved->assignment;
    label =
        fmt::format("{}+solved ({} {}, {} {})", precision::policy_name(options.policy), solved->assignment.sites.size(),
                    solved->assignment.sites.size() == 1 ? "site" : "sites", solved->assignment.params.size(),
                    solved->assignment.params.size() == 1 ? "parameter" : "parameters");
  } else if (!o.policy.empty()) {
    auto p = precision::parse_policy(o.policy);
    if (!p) throw UsageError(fmt::format("--policy {}: expected f64, f32, bf16 or f16", o.policy));
    options.policy = *p;
  }
  const precision::Realization realization = precision::realize(prog, entry, options, dims);

  precision::BoundsReport report;
  try {
    report = precision::bound_errors(prog, entry, dims, realization, envelope, samples, sens ? &*sens : nullptr);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--precision {}: {}", o.envelope, e.what()));
  }
  if (!label.empty()) report.label = label;
  report.envelope_path = o.envelope;
  if (!sens && !sens_failed.empty()) report.estimate_absent = "the sensitivities could not be computed: " + sens_failed;

  if (o.measure) {
    const std::vector<exact::ExactValue> reference = precision::exact_outputs(prog, entry, dims, samples, bits);
    const precision::Gaps gaps = precision::measure_gaps(prog, entry, dims, realization, samples, reference);
    report.measured = precision::MeasuredGap{gaps.worst(), static_cast<int>(samples.size()),
                                             envelope.samples_file.empty() ? envelope.seed : 0, bits,
                                             envelope.samples_file};
    const precision::HeldOutSource source = precision::held_out_source(envelope, o.held_out < 0 ? 4 : o.held_out);
    if (source.count == 0) {
      report.held_out_absent = source.none;
    } else {
      const auto fresh = precision::envelope_samples(prog, entry, envelope, envelope.samples, source.count);
      const precision::Gaps more = precision::measure_gaps(prog, entry, dims, realization, fresh,
                                                           precision::exact_outputs(prog, entry, dims, fresh, bits));
      report.held_out = precision::MeasuredGap{more.worst(), source.count, source.first, bits, envelope.samples_file};
    }
  }
  std::cout << precision::print_bounds(report, o.sites);
  if (!o.out.empty()) {
    io::write_file_atomically(o.out, precision::bounds_json(report).dump(2) + "\n");
    std::cout << fmt::format("check: wrote {}\n", o.out);
  }
  return 0;
}

}  // namespace

Handler setup_check(CLI::App& sub) {
  auto file = std::make_shared<std::string>();
  auto summary = std::make_shared<bool>(false);
  auto o = std::make_shared<PrecisionOptions>();
  sub.add_option("file", *file, "the program (.qr)")->required();
  sub.add_flag("--summary", *summary, "print types, regularity, effects, parameters and the training run");
  sub.add_option("--precision", o->envelope,
                 "bound the error of the envelope's entry (envelope.json from `quire calibrate --out`)");
  sub.add_option("--realize", o->realize, "with --precision: the solver's realization, @realization.json");
  sub.add_option("--policy", o->policy, "with --precision and without --realize: f64 (default), f32, bf16 or f16");
  sub.add_flag("--measure", o->measure,
               "with --precision: measure the realization against the exact reference on the envelope's samples");
  sub.add_option("--held-out", o->held_out, "with --measure: how many fresh samples to measure too (default 4)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--sites", o->sites, "with --precision: the sites listed, largest bounds first (default 10)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--bits", o->bits, "with --precision: the exact reference's bits (default: the envelope's)");
  add_output_option(sub, "--out", o->out, "with --precision: write the bounds as JSON (atomically)");
  return [file, summary, o]() {
    if (o->envelope.empty() && (o->measure || !o->realize.empty() || !o->policy.empty() || o->held_out >= 0 ||
                                o->bits != 0 || !o->out.empty()))
      throw UsageError(
          "--realize, --policy, --measure, --held-out, --bits and --out apply with --precision envelope.json");
    if (!o->realize.empty() && !o->policy.empty())
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --policy", o->realize));
    if (o->held_out >= 0 && !o->measure) throw UsageError("--held-out applies with --measure");
    if (o->bits != 0 && (o->bits < exact::kMinBits || o->bits > exact::kMaxBits))
      throw UsageError(
          fmt::format("--bits {}: the exact reference takes {} to {} bits", o->bits, exact::kMinBits, exact::kMaxBits));
    auto prog = load_program(*file);
    if (!prog) return 1;
    if (*summary) std::cout << elab::print_summary(*prog);
    if (!o->envelope.empty()) return check_precision(*prog, *file, *o);
    return 0;
  };
}

}  // namespace quire::cli
