// quire calibrate [--precision] FILE --entry NAME [--dim B=4] [--bits N] [--samples K] [--seed N]
//   [--params F.safetensors] [--inputs F.npz | --samples-from S.npz] [--out envelope.json] [--top N]
//
// The envelope (docs/precision.md): the entry runs in the exact reference at
// N bits on K samples, and every site's largest |x|, condition number (sums
// and contractions) and rounding error in f32, bf16 and f16 are printed as
// three tables and, with --out, written as JSON (atomically). Without --out
// nothing is written.
//
// The parameters are read from --params or drawn once from --seed; sample k's
// other arguments are drawn from seed + k (as `quire run --seed seed+k` would
// draw them), read from --inputs, which is one sample, or taken from
// --samples-from, a file of samples (interp::SampleFile): sample k is the
// k-th slice of each of its arrays, and the slices after the K calibrated are
// what `solve` and `check --measure` hold out. `--samples-from run` takes the
// training run's own batches (its data stream, in its order): the first
// K + 32 are written beside the envelope as such a file (ENVELOPE.samples.npz)
// and used as one.

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/exact/big.h"
#include "quire/interp/inputs.h"
#include "quire/interp/params.h"
#include "quire/io/atomic_file.h"
#include "quire/io/npy.h"
#include "quire/precision/envelope.h"
#include "quire/train/data.h"

namespace quire::cli {

namespace {

/// How many of the run's batches past the calibrated ones are written for
/// `solve` and `check` to hold out (solve's default --held-out).
constexpr int64_t kRunHeldOut = 32;

/// `--samples-from run`: the first `samples` + kRunHeldOut batches of the
/// training run of `prog` written as a file of samples beside `out`; its path.
std::string write_run_batches(const elab::Program& prog, const std::string& file, int entry, const std::string& out,
                              int samples, std::map<std::string, int64_t>& dims) {
  const elab::TrainingInfo* run = prog.training();
  if (!run) throw UsageError(fmt::format("--samples-from run: {} has no `training run` block", file));
  if (run->objective != entry)
    throw UsageError(fmt::format("--samples-from run: the run's batches are arguments of its objective `{}`, not of `{}`",
                                 prog.functions[static_cast<size_t>(run->objective)].name,
                                 prog.functions[static_cast<size_t>(entry)].name));
  if (out.empty() || out == "-")
    throw UsageError("--samples-from run: the batches are written beside the envelope: give --out FILE");
  dims = train::run_dims(*run, dims);
  const std::string data = train::training_file(prog, run->data.front().path);
  const auto arrays = train::run_batches_as_samples(prog, data, dims, samples + kRunHeldOut);
  const int64_t batches = arrays.empty() ? 0 : arrays.front().second.shape.front();
  if (batches < samples)
    throw UsageError(fmt::format("--samples {}: the run takes {} batches of {}", samples, batches, data));
  const std::string path = std::filesystem::path(out).replace_extension(".samples.npz").string();
  io::write_npz(path, arrays);
  std::cout << fmt::format("calibrate: the run's first {} batches (of {}) written to {}\n", batches, data, path);
  return path;
}

}  // namespace

Handler setup_calibrate(CLI::App& sub) {
  struct Options {
    std::string file, entry, params, inputs, samples_from, out;
    std::vector<std::string> dims;
    int64_t seed = 0;
    int bits = 128;
    int samples = 1;
    int top = 10;
    bool precision = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_flag("--precision", o->precision,
               "what is calibrated: the precision envelope (the default, and today the only kind; accepted so that "
               "`quire calibrate --precision FILE` reads as the design writes it)");
  sub.add_option("--entry", o->entry, "the function to measure (e.g. loss, Tower.apply)")->required();
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  sub.add_option("--bits", o->bits, "the bits of every real in the exact reference (default 128)");
  sub.add_option("--samples", o->samples,
                 "how many samples to run; sample k draws its inputs from seed + k (default 1)");
  sub.add_option("--seed", o->seed, "seed of the parameters' draw and of the first sample's inputs (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--params", o->params, "read the parameters from a safetensors file");
  sub.add_option("--inputs", o->inputs, "read the arguments from an .npz, each under its path (one sample)");
  sub.add_option("--samples-from", o->samples_from,
                 "take the samples from an .npz holding each argument's samples along a first axis: sample k is "
                 "slice k, and the slices after the --samples calibrated are held out by solve and check; `run`: "
                 "the training run's batches (the first K + 32, written beside --out)");
  add_output_option(sub, "--out", o->out, "write the envelope as JSON (atomically); without it nothing is written");
  sub.add_option("--top", o->top, "rows per printed table (default 10)")->check(CLI::NonNegativeNumber);
  return [o]() {
    if (o->bits < exact::kMinBits || o->bits > exact::kMaxBits)
      throw UsageError(
          fmt::format("--bits {}: the exact reference takes {} to {} bits", o->bits, exact::kMinBits, exact::kMaxBits));
    if (o->samples < 1) throw UsageError(fmt::format("--samples {}: at least one sample is needed", o->samples));
    if (o->samples > precision::kMaxSamples)
      throw UsageError(fmt::format("--samples {}: at most {} samples", o->samples, precision::kMaxSamples));
    if (!o->inputs.empty() && o->samples != 1)
      throw UsageError(fmt::format("--inputs {} is one sample; --samples {} asks for more", o->inputs, o->samples));
    auto npz = [](const std::string& path) { return path.size() >= 4 && path.compare(path.size() - 4, 4, ".npz") == 0; };
    if (!o->inputs.empty() && !npz(o->inputs))
      throw UsageError(fmt::format("--inputs {}: inputs are read from an .npz", o->inputs));
    const bool from_run = o->samples_from == "run";
    if (!o->samples_from.empty() && !from_run && !npz(o->samples_from))
      throw UsageError(fmt::format("--samples-from {}: samples are read from an .npz", o->samples_from));
    if (!o->samples_from.empty() && !o->inputs.empty())
      throw UsageError(fmt::format("--inputs {} and --samples-from {}: the samples come from one or the other",
                                   o->inputs, o->samples_from));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    auto dims = parse_dims(o->dims, *prog);
    const int entry = find_entry(*prog, o->entry);
    if (from_run) o->samples_from = write_run_batches(*prog, o->file, entry, o->out, o->samples, dims);
    const core::Function& fn = prog->functions[static_cast<size_t>(entry)];
    std::optional<interp::ParamMap> params = entry_params(*prog, fn, o->params, static_cast<uint64_t>(o->seed), dims);
    const interp::ParamMap* params_ptr = params ? &*params : nullptr;
    if (!params && !o->params.empty()) {
      throw UsageError(fmt::format("`{}` takes no parameter tree: --params does not apply", fn.name));
    }
    std::optional<std::string> inputs;
    if (!o->inputs.empty()) inputs = o->inputs;
    std::vector<std::vector<interp::Value>> samples;
    if (!o->samples_from.empty()) {
      const interp::SampleFile file = interp::SampleFile::read(o->samples_from);
      if (file.count < o->samples)
        throw UsageError(fmt::format("--samples {}: {} holds {} samples (the shortest first axis of its arrays)",
                                     o->samples, o->samples_from, file.count));
      for (int k = 0; k < o->samples; ++k)
        samples.push_back(
            interp::sample_arguments(*prog, entry, params_ptr, dims, static_cast<uint64_t>(o->seed), file, k));
    } else {
      for (int k = 0; k < o->samples; ++k)
        samples.push_back(interp::entry_arguments(*prog, entry, params_ptr, dims,
                                                  static_cast<uint64_t>(o->seed) + static_cast<uint64_t>(k), inputs));
    }
    precision::Envelope envelope = precision::calibrate(*prog, entry, dims, samples, o->bits);
    envelope.seed = static_cast<uint64_t>(o->seed);
    envelope.params_file = o->params;
    envelope.inputs_file = o->inputs;
    envelope.samples_file = o->samples_from;
    std::cout << precision::print_envelope(envelope, o->top);
    if (!o->out.empty()) {
      io::write_file_atomically(o->out, precision::envelope_json(envelope).dump(2) + "\n");
      std::cout << fmt::format("calibrate: wrote {}\n", o->out);
    }
    return 0;
  };
}

}  // namespace quire::cli
