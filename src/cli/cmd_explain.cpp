// quire explain FILE --entry E [--dim B=4 ...] [--budget B | --precision P] [--profile P.json]
//   [--remat store|recompute] [--target native,pytorch] [--measure] [--step] [--seed S] [--bits N]
//   [--sites N] -o DIR
//
// What the compiler does to one program, as one document: DIR/explain.md and
// DIR/explain.html, built from the printouts of the commands its appendix
// lists (run again by this binary), with every artifact they wrote in
// DIR/artifacts, every printout whole in DIR/listings and DIR/SHA256SUMS over
// all of it. Without --measure the same command gives the same bytes.
// docs/explain.md describes the document.

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>
#include <utility>

#include "commands.h"
#include "common.h"
#include "explain_builder.h"
#include "quire/compile/compile.h"
#include "quire/exact/big.h"
#include "quire/explain/document.h"
#include "quire/io/atomic_file.h"
#include "quire/machine/profile.h"
#include "quire/support/sha256.h"

namespace quire::cli {

namespace {

namespace fs = std::filesystem;

const char* const kTargets[] = {"native", "pytorch", "c"};

std::vector<std::string> parse_targets(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string t;
  while (std::getline(in, t, ',')) {
    bool known = false;
    for (const char* k : kTargets) known = known || t == k;
    if (!known)
      throw UsageError(
          fmt::format("--target {}: `{}` is not a target; give native, c, pytorch or several, "
                      "comma-separated",
                      text, t));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  if (out.empty()) throw UsageError("--target: give native, c, pytorch or several, comma-separated");
  return out;
}

/// The folder the document is written to, made if need be and checked
/// writable before anything runs: a mistake there is found in a second, not
/// after a minute of calibration.
std::string prepare_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("-o {}: cannot create the folder: {}", dir, ec.message()));
  if (!fs::is_directory(dir)) throw UsageError(fmt::format("-o {}: not a folder", dir));
  const std::string abs = fs::canonical(dir, ec).string();
  if (ec) throw UsageError(fmt::format("-o {}: {}", dir, ec.message()));
  for (const char* sub : {"artifacts", "listings"}) {
    fs::create_directories(abs + "/" + sub, ec);
    if (ec) throw UsageError(fmt::format("-o {}: cannot create {}/: {}", dir, sub, ec.message()));
  }
  try {
    io::write_file_atomically(abs + "/listings/.probe", "");
  } catch (const io::IoError& e) {
    throw UsageError(fmt::format("-o {}: cannot write there: {}", dir, e.what()));
  }
  fs::remove(abs + "/listings/.probe", ec);
  return abs;
}

/// Removes what an earlier document left in the folders quire writes, so
/// that a listing of a command no longer run cannot linger beside the new
/// document (and in its checksums). Other files in DIR are left alone.
void clear_previous(const std::string& abs) {
  std::error_code ec;
  for (const char* sub : {"artifacts", "listings"}) {
    fs::remove_all(abs + "/" + sub, ec);
    fs::create_directories(abs + "/" + sub, ec);
    if (ec) throw UsageError(fmt::format("{}/{}: cannot make it anew: {}", abs, sub, ec.message()));
  }
}

/// `sha256sum`'s format ("digest  path"), every file under the folder but
/// this one, by path: `cd DIR && sha256sum -c SHA256SUMS` checks them.
std::string checksums(const std::string& abs) {
  std::vector<std::string> paths;
  for (const auto& entry : fs::recursive_directory_iterator(abs)) {
    if (!entry.is_regular_file()) continue;
    const std::string rel = entry.path().lexically_relative(abs).string();
    if (rel != "SHA256SUMS") paths.push_back(rel);
  }
  std::sort(paths.begin(), paths.end());
  std::string out;
  for (const std::string& p : paths) out += support::sha256_hex(io::read_file(abs + "/" + p)) + "  " + p + "\n";
  return out;
}

}  // namespace

Handler setup_explain(CLI::App& sub) {
  struct Options {
    ExplainRequest request;
    std::string out, targets = "native,c,pytorch";
  };
  auto o = std::make_shared<Options>();
  ExplainRequest& r = o->request;
  sub.add_option("file", r.file, "the program (.qr)")->required();
  CLI::Option* entry_flag = sub.add_option("--entry", r.entry, "the function explained");
  sub.add_option("--dim", r.dims, "bind a dimension, NAME=SIZE (repeatable)");
  CLI::Option* budget_flag = sub.add_option(
      "--budget", r.budget, "solve every stored value's type under this error, relative to the output (e.g. 1e-3)");
  CLI::Option* precision_flag =
      sub.add_option("--precision", r.precision, "the run policy when no --budget is given (default f64)")
          ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_option("--profile", r.profile,
                 "the machine profile the layouts are planned under (default: the one that ships)")
      ->check(non_empty("--profile names a file", "FILE"));
  sub.add_option("--inputs", r.inputs,
                 "the entry's arguments, each under its path in an .npz (x, batch.0), as `run` reads them; integer "
                 "arguments (token ids) must be given so")
      ->check(non_empty("--inputs names a file", "FILE.npz"));
  sub.add_option("--remat", r.remat, "how a gradient's backward pass gets its forward values: recompute or store")
      ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_option("--target", o->targets, "the targets shown: native, c, pytorch (comma-separated; default all three)");
  sub.add_flag("--measure", r.measure, "time the entry (§11): the one section that changes between runs");
  sub.add_flag("--step", r.step, "explain the training run's step (its objective's gradient) instead of one entry");
  sub.add_option("--seed", r.seed, "seed of the parameters and inputs, as `quire run` draws them (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--bits", r.bits, "the bits of the exact reference (default 128)");
  sub.add_option("--sites", r.sites, "how many sites §12 follows through the stages (default 12)")
      ->check(CLI::Range(0, 1000));
  sub.add_option("--site", r.follow, "a site §12 follows through every stage, e.g. Block.apply/%9 (repeatable)");
  add_output_option(sub, "-o,--out", o->out, "the folder the document and its artifacts are written to")->required();
  return [o, entry_flag, budget_flag, precision_flag]() {
    ExplainRequest& r = o->request;
    r.targets = parse_targets(o->targets);
    if (budget_flag->count() > 0) {
      double b = 0;
      try {
        size_t used = 0;
        b = std::stod(r.budget, &used);
        if (used != r.budget.size()) b = NAN;
      } catch (const std::exception&) {
        b = NAN;
      }
      if (!(b > 0) || !std::isfinite(b))
        throw UsageError(fmt::format("--budget {}: the budget must be a number above 0 (e.g. 1e-3)", r.budget));
      if (precision_flag->count() > 0)
        throw UsageError("--budget solves the types: leave out --precision, or drop --budget to explain a policy");
    }
    if (o->out == "-") throw UsageError("-o -: the document is a folder of files; give a folder");
    auto prog = load_program(r.file);
    if (!prog) return 1;
    const elab::FileInfo& main = prog->files.at(static_cast<size_t>(prog->main_file));
    if (r.step) {
      if (!main.training) throw UsageError(fmt::format("--step: {} has no training run to explain", r.file));
      const std::string objective = prog->functions.at(static_cast<size_t>(main.training->objective)).name;
      if (entry_flag->count() > 0 && r.entry != objective)
        throw UsageError(
            fmt::format("--step explains the training run's objective `{}`: leave out --entry {}", objective, r.entry));
      r.entry = objective;
      // The step runs at the batch its training run binds, unless --dim says.
      const std::string& batch = main.training->batch_dim;
      bool given = false;
      for (const std::string& d : r.dims) given = given || d.rfind(batch + "=", 0) == 0;
      if (!batch.empty() && !given) r.dims.push_back(fmt::format("{}={}", batch, main.training->batch_size));
    } else if (r.entry.empty()) {
      throw UsageError("give --entry NAME (the function explained), or --step for the training run's step");
    }
    {
      // Every stage compiles the entry at its dimensions: compiled once here,
      // a dimension left unbound is refused now, not after the commands that
      // need no size have run.
      compile::CompileRequest request;
      request.entry = find_entry(*prog, r.entry);
      request.dims = parse_dims(r.dims, *prog);
      compile::compile(std::as_const(*prog), request);
    }
    if (!r.profile.empty()) machine::planning_profile(r.profile);  // a profile that does not parse, refused now
    if (r.bits < exact::kMinBits || r.bits > exact::kMaxBits)
      throw UsageError(
          fmt::format("--bits {}: the exact reference takes {} to {} bits", r.bits, exact::kMinBits, exact::kMaxBits));
    const std::string abs = prepare_folder(o->out);
    clear_previous(abs);
    const explain::Document doc = build_explain_document(r, *prog, abs);
    io::write_file_atomically(abs + "/explain.md", explain::render_markdown(doc));
    io::write_file_atomically(abs + "/explain.html", explain::render_html(doc));
    io::write_file_atomically(abs + "/SHA256SUMS", checksums(abs));
    std::cout << fmt::format("quire explain: {} sections written to {}/explain.md and {}/explain.html\n",
                             doc.sections.size(), o->out, o->out);
    return 0;
  };
}

}  // namespace quire::cli
