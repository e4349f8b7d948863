#pragma once
// The envelope: what the values of a run are, measured in the exact reference
// (DESIGN.md §5 step 1, docs/precision.md). The entry runs in the exact
// interpreter at N bits on one or more samples; at every site whose value is
// a real tensor the envelope records, as the maximum over every element and
// every evaluation of the site (calls, fold copies, samples):
//
//   - elements: the value's element count;
//   - max_abs: the largest |x|;
//   - condition (sums and contractions only): Σ|terms| / |Σ terms|, the
//     worst over the result's elements; Σ|terms| is the same reduction run on
//     the absolute values of the operands (ExactInterpreter::absolute_terms);
//   - rounding[T] for T in f32, bf16, f16: the largest |round_T(x) − x|, and
//     relative[T] = rounding[T] / (u_T · max_abs) with u_T = 2^-p.
//
// These are facts about the samples run, and nothing more: another input may
// take a site further. Every later stage that uses them (the solver, the
// bounds) is conditional on the envelope and says so.
//
// Requires: an elaborated program without errors; arguments that check
// against the entry's types. Produces: an Envelope, its JSON (the artifact
// `quire solve` reads) and its printout.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/ir.h"
#include "quire/core/program.h"
#include "quire/exact/big.h"
#include "quire/interp/value.h"
#include "quire/runtime/float_types.h"

namespace quire::precision {

/// The types a site may be narrowed to, in the order tables and files list them.
inline constexpr runtime::FloatType kCandidateTypes[] = {runtime::FloatType::F32, runtime::FloatType::BF16,
                                                         runtime::FloatType::F16};

/// The most samples one calibration runs (and an envelope may claim): each is a
/// run of the exact interpreter, and `solve` measures its candidates on them all.
inline constexpr int kMaxSamples = 4096;

/// One site's measurements. Non-finite values are kept as they are: a NaN
/// anywhere in a maximum makes it NaN; an overflow makes it +inf.
struct SiteEnvelope {
  std::string site;      ///< core::site_name: "RMSNorm.apply/%4"
  std::string function;  ///< "RMSNorm.apply"
  std::string op;        ///< the operation's name (ops.def): "sum", "reduce_max"
  core::Op op_code = core::Op::Const;
  int64_t elements = 0;
  double max_abs = 0;
  double min_abs = 0;       ///< the smallest |x| (a divisor's, a logarithm's distance from 0)
  int64_t evaluations = 0;  ///< how often one sample evaluates the site (calls, fold copies), the most over samples
  /// Sums and contractions: the worst Σ|terms| / |Σ terms| (≥ 1; +inf where a
  /// sum is exactly 0 with nonzero terms; 0/0 counts as 1).
  std::optional<double> condition;
  /// Sums and contractions: the terms one result element adds (a product's
  /// contracted size, a sum's reduced count), the most over its evaluations.
  std::optional<int64_t> terms;
  std::map<std::string, double> rounding;  ///< type name → max |round_T(x) − x|
  std::map<std::string, double> relative;  ///< type name → rounding / (u_T · max_abs); 0 when both are 0
};

/// One parameter leaf's values, from the tree the samples share (its path,
/// `blocks.proj.w`, is how the solver keys its decision).
struct ParamEnvelope {
  std::string path;
  int64_t elements = 0;
  double max_abs = 0;
  std::map<std::string, double> rounding;  ///< type name → max |round_T(x) − x| over its elements
  std::map<std::string, double> relative;  ///< as SiteEnvelope::relative
};

struct Envelope {
  std::string entry;
  std::string result;       ///< the site of the entry's result (`loss/%7`)
  double result_max_abs = 0;  ///< its largest |x|: the output's magnitude a relative budget scales
  int bits = 128;
  int samples = 0;
  uint64_t seed = 0;  ///< the seed of the samples' draws (recorded, not used by calibrate)
  std::string params_file;  ///< where the parameters came from: a file, or "" for the draw from `seed`
  std::string inputs_file;  ///< the sample's arguments, when read from an .npz (one sample)
  /// The samples' arguments, when read from a file of samples (interp::SampleFile):
  /// sample k is its k-th slice, and held-out samples are the slices after them.
  std::string samples_file;
  std::map<std::string, int64_t> dims;
  /// By function in program order (Program::functions), then by value number.
  std::vector<SiteEnvelope> sites;
  /// The entry's parameter leaves in declaration order (empty for an entry without θ).
  std::vector<ParamEnvelope> params;

  const SiteEnvelope* site(const std::string& name) const;
  const ParamEnvelope* param(const std::string& path) const;
};

/// Runs `entry` in the exact interpreter at `bits` on each sample (a full
/// argument list, θ first for a module's function) and measures every site.
/// std::invalid_argument without samples; interp::EvalError as the run throws.
Envelope calibrate(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                   const std::vector<std::vector<interp::Value>>& samples, int bits);

/// |round_T(x) − x|, exact at x's precision: x rounded to T's precision
/// with T's exponent range (subnormals, and ±inf beyond the largest finite).
/// NaN for a NaN x; 0 for ±inf (T holds infinities).
exact::Big rounding_error(const exact::Big& x, runtime::FloatType t);

/// fl_T(x) − x: rounding_error with its sign; ±inf where x overflows T (the
/// sign of x), NaN for a NaN x, 0 for ±inf.
exact::Big signed_rounding_error(const exact::Big& x, runtime::FloatType t);

/// The artifact: {"format": "quire-envelope", "version": 3, entry, result,
/// result_max_abs, bits, samples, seed, params_file, inputs_file, samples_file, dims,
/// unit_roundoff, sites: [...], params: [...]}; non-finite numbers are the
/// strings "inf", "-inf", "nan". Version 1 files (without min_abs,
/// evaluations, params and the result) are read with those empty, and
/// version 2 files (without samples_file) with no file of samples.
nlohmann::ordered_json envelope_json(const Envelope& e);

/// Reads envelope_json's format back. io::IoError(`path`, "key `sites[3].max_abs`: …")
/// for a malformed file.
Envelope envelope_from_json(const nlohmann::json& j, const std::string& path = "envelope");

/// Three tables: the `top` largest |x|; the sums and contractions by worst
/// condition number; the rounding errors, ascending by bf16/(u·max|x|).
std::string print_envelope(const Envelope& e, int top = 10);

}  // namespace quire::precision
