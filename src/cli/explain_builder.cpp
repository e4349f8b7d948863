#include "explain_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common.h"
#include "quire/io/atomic_file.h"
#include "quire/support/sha256.h"
#include "self_command.h"

namespace quire::cli {

namespace {

using explain::BarChart;
using explain::Commands;
using explain::Document;
using explain::Listing;
using explain::Paragraph;
using explain::Section;
using explain::Table;
using nlohmann::json;

/// A printout longer than this is shown by its first kShownLines lines, the
/// whole of it being in its listing file: the document stays readable for a
/// GPT's hundreds of kernels and the file keeps every line.
constexpr size_t kInlineLines = 160;
constexpr size_t kShownLines = 60;
/// The bars of a chart of sites: the largest, where the reader looks first.
constexpr size_t kChartBars = 15;

size_t count_lines(const std::string& text) {
  size_t n = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

std::string first_lines(const std::string& text, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n && at != std::string::npos; ++i) {
    at = text.find('\n', at);
    if (at != std::string::npos) ++at;
  }
  return at == std::string::npos ? text : text.substr(0, at);
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

std::string sci(double v) { return fmt::format("{:.3e}", v); }

/// One command the document ran: what it printed and where that was kept.
struct Ran {
  std::string name;  ///< its listing: listings/NAME.txt
  std::string line;  ///< the command line, $DOC unexpanded
  std::string section;
  CommandOutput output;
};

class Builder {
 public:
  Builder(const ExplainRequest& r, const elab::Program& prog, std::string doc)
      : r_(r), prog_(prog), doc_(std::move(doc)) {}

  Document build() {
    Document d;
    d.title = fmt::format("{} of {}{}", r_.step ? r_.entry + "'s training step" : "`" + r_.entry + "`", r_.file,
                          r_.solved() ? fmt::format(", under a budget of {}", r_.budget) : "");
    // The sections are built in pipeline order (each may read what an
    // earlier one wrote: the envelope, the realization), then the summary
    // and the parameters, which cite them, are put first.
    std::vector<Section> body;
    body.push_back(source());
    body.push_back(elaboration());
    body.push_back(core());
    body.push_back(differentiation());
    body.push_back(egraph());
    for (Section& s : precision()) body.push_back(std::move(s));
    body.push_back(fusion());
    body.push_back(layout());
    body.push_back(kernels());
    body.push_back(targets());
    body.push_back(measured());
    body.push_back(sites());
    for (Section& s : memory()) body.push_back(std::move(s));
    d.sections.push_back(parameters());
    d.sections.push_back(summary());
    for (Section& s : body) d.sections.push_back(std::move(s));
    d.sections.push_back(appendix());
    d.links = site_links_;
    return d;
  }

 private:
  // ---- running commands ----

  /// Runs `quire ARGS` ($DOC standing for the document's folder), keeps its
  /// printout in listings/NAME.txt and for the appendix, and returns it.
  /// A failure is an error when `required` (every program supports the
  /// command), and otherwise what the section says instead.
  const Ran& run(const std::string& name, const std::string& section, const std::vector<std::string>& args,
                 bool required) {
    std::vector<std::string> expanded = args;
    for (std::string& a : expanded) replace_all(a, "$DOC", doc_);
    Ran ran{name, command_line(args), section, run_self(expanded)};
    replace_all(ran.output.out, doc_, "$DOC");
    replace_all(ran.output.err, doc_, "$DOC");
    if (ran.output.status != 0 && required) {
      // The child's own "quire: error: " prefix would repeat this message's.
      std::string why = first_lines(ran.output.err, 6);
      replace_all(why, "quire: error: ", "");
      throw UsageError(fmt::format("`{}` failed (exit status {}): {}", ran.line, ran.output.status, why));
    }
    if (ran.output.status == 0) io::write_file_atomically(doc_ + "/listings/" + name + ".txt", ran.output.out);
    ran_.push_back(std::move(ran));
    return ran_.back();
  }

  /// A printout as the document shows it, or why there is none.
  void show(Section& s, const Ran& ran) {
    if (ran.output.status != 0) {
      s.blocks.push_back(Paragraph{
          fmt::format("Not available for this program: the command ended with exit status {}:", ran.output.status)});
      s.blocks.push_back(Listing{ran.output.err});
    } else if (count_lines(ran.output.out) > kInlineLines) {
      s.blocks.push_back(Listing{first_lines(ran.output.out, kShownLines) + "…\n"});
      s.blocks.push_back(Paragraph{fmt::format("The first {} of {} lines; the whole printout is `listings/{}.txt`.",
                                               kShownLines, count_lines(ran.output.out), ran.name)});
    } else {
      s.blocks.push_back(Listing{ran.output.out});
    }
    s.blocks.push_back(Commands{{ran.line}});
  }

  /// A command run for figures only (JSON): recorded in the appendix, not shown.
  std::optional<json> figures(const std::string& name, const std::string& section,
                              const std::vector<std::string>& args) {
    const Ran& ran = run(name, section, args, false);
    if (ran.output.status != 0) return std::nullopt;
    try {
      return json::parse(ran.output.out);
    } catch (const json::exception&) {
      throw std::runtime_error(fmt::format("`{}` printed no JSON", ran.line));
    }
  }

  // ---- the flags every command shares ----

  std::vector<std::string> with_dims(std::vector<std::string> args) const {
    for (const std::string& d : r_.dims) {
      args.push_back("--dim");
      args.push_back(d);
    }
    return args;
  }
  /// The types every later stage uses: the solved realization, or the policy.
  std::vector<std::string> types() const {
    if (r_.solved()) return {"--realize", "@$DOC/artifacts/realization.json"};
    return {"--precision", r_.precision};
  }
  /// Under --step the stages print the objective's gradient, as training runs it.
  std::vector<std::string> grad() const {
    if (!r_.step) return {};
    return {"--grad"};
  }
  /// The arguments of the commands that evaluate the entry.
  std::vector<std::string> inputs() const {
    if (r_.inputs.empty()) return {};
    return {"--inputs", r_.inputs};
  }
  std::vector<std::string> profile() const {
    if (r_.profile.empty()) return {};
    return {"--profile", r_.profile};
  }
  static std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  std::string types_text() const {
    return r_.solved() ? "the realization solved in §6.3" : fmt::format("the policy {}", r_.precision);
  }

  // ---- the sections ----

  Section parameters() {
    Section s{"parameters", "The parameters", 2, {}};
    std::string dims;
    for (const std::string& d : r_.dims) dims += (dims.empty() ? "" : ", ") + d;
    std::string consts;
    const elab::FileInfo& main = prog_.files.at(static_cast<size_t>(prog_.main_file));
    for (int f : prog_.file_order) {
      const elab::FileInfo& file = prog_.files.at(static_cast<size_t>(f));
      if (file.prelude) continue;
      for (const elab::ConstInfo& c : file.consts)
        consts += (consts.empty() ? "" : ", ") + fmt::format("{} = {}", c.name, c.value);
    }
    std::string dim_flags;
    for (const std::string& d : r_.dims) dim_flags += (dim_flags.empty() ? "" : " ") + ("--dim " + d);
    std::vector<std::vector<std::string>> rows = {
        {"Program", "`" + r_.file + "`", "the command line"},
        {"Entry", "`" + r_.entry + "`", r_.step ? "the training run's objective (--step)" : "--entry " + r_.entry},
        {"Dimensions", dims.empty() ? "none" : dims, dims.empty() ? "no --dim" : dim_flags},
        {"Constants", consts.empty() ? "none" : consts, "the files'"},
        {"Weights", fmt::format("the initialization, seed {}", r_.seed), fmt::format("--seed {}", r_.seed)},
        {"Inputs", r_.inputs.empty() ? fmt::format("drawn from seed {}", r_.seed) : "`" + r_.inputs + "`",
         r_.inputs.empty() ? "no --inputs" : "--inputs " + r_.inputs},
        {"Realization",
         r_.solved() ? fmt::format("solved under a budget of {} relative to the output", r_.budget)
                     : fmt::format("the policy {}", r_.precision),
         r_.solved() ? "--budget " + r_.budget : "--precision " + r_.precision},
        {"Exact reference", fmt::format("MPFR at {} bits", r_.bits), fmt::format("--bits {}", r_.bits)},
        {"Machine", r_.profile.empty() ? "the profile that ships with quire" : "the profile `" + r_.profile + "`",
         r_.profile.empty() ? "no --profile" : "--profile " + r_.profile},
        {"Differentiation", "--remat " + r_.remat, r_.step ? "--remat" : "applies to gradients the entry takes"},
        {"Optimizer (e-graph)", "none: quire has no e-graph optimizer", "—"},
        {"Targets", fmt::format("{}", fmt::join(r_.targets, ", ")), "--target"},
        {"Measured", r_.measure ? "yes (§11)" : "no", r_.measure ? "--measure" : "no --measure"},
    };
    (void)main;
    s.blocks.push_back(Table{{"Parameter", "Value", "Where it comes from"}, rows, {}});
    s.blocks.push_back(Paragraph{
        "Each section ends with the commands that print what it shows; `$DOC` is this document's folder, which "
        "holds every file it names. `$DOC/SHA256SUMS` holds the SHA-256 of every file written there."});
    std::vector<std::vector<std::string>> artifacts;
    auto artifact = [&](const std::string& what, const std::string& rel, const std::string& provenance) {
      std::string digest = "—";
      try {
        digest = support::sha256_hex(io::read_file(doc_ + "/" + rel)).substr(0, 16) + "…";
      } catch (const std::exception&) {
        return;  // not written for this program (its command is not available)
      }
      artifacts.push_back({what, "`$DOC/" + rel + "`", provenance, "`" + digest + "`"});
    };
    if (!r_.profile.empty()) {
      artifacts.push_back({"the machine profile", "`" + r_.profile + "`", "given",
                           "`" + support::sha256_hex(io::read_file(r_.profile)).substr(0, 16) + "…`"});
    }
    artifact("the envelope", "artifacts/envelope.json", "computed in this run");
    if (r_.solved()) artifact("the realization", "artifacts/realization.json", "computed in this run");
    artifact("the layout plan", "artifacts/plan.json", "computed in this run");
    if (wants("pytorch"))
      artifact("the PyTorch module's README", "artifacts/pytorch/README.md", "computed in this run");
    if (wants("c") && !r_.step)
      artifact("the C program's README", "artifacts/c/README.md", "computed in this run");
    s.blocks.push_back(Paragraph{"The artifacts it was made from or wrote:"});
    s.blocks.push_back(Table{{"What", "Path", "Provenance", "SHA-256"}, artifacts, {}});
    return s;
  }

  Section summary() {
    Section s{"summary", "§0 Summary", 2, {}};
    std::vector<std::vector<std::string>> rows;
    if (precision_json_) {
      std::map<std::string, int> by_type;
      int stored = 0;
      for (const json& site : (*precision_json_)["sites"]) {
        if (site.value("reason", "") == "carried") continue;
        ++stored;
        ++by_type[site.value("type", "?")];
      }
      std::string types;
      for (const auto& [t, n] : by_type) types += (types.empty() ? "" : ", ") + fmt::format("{} in {}", n, t);
      rows.push_back(
          {"Realization", fmt::format("{} stored values: {}", stored, types), "decision", "[§6.3](#realization)"});
    }
    if (r_.solved())
      rows.push_back({"Budget", r_.budget + " relative to the output", "parameter", "[§6.3](#realization)"});
    for (const auto& [label, line] : check_lines_) rows.push_back({label, line.first, line.second, "[§6.4](#bound)"});
    if (fusion_json_ && (*fusion_json_)["launches"].is_number()) {
      const int64_t without = (*fusion_json_)["launches"], with = (*fusion_json_)["fused_launches"];
      rows.push_back({"Fusion",
                      fmt::format("{} launches a call without it, {} with it: {} saved", without, with, without - with),
                      "decision", "[§7](#fusion)"});
    }
    if (plan_json_) {
      int64_t points = 0, launches = 0;
      double predicted = 0;
      for (const json& nest : (*plan_json_)["nests"]) {
        points += static_cast<int64_t>(nest["ranked"].size());
        launches += nest["launches"].get<int64_t>();
        predicted += nest["launches"].get<double>() * nest["ranked"][0]["cost"]["seconds"].get<double>();
      }
      rows.push_back({"Layout plan",
                      fmt::format("{} nests, {} points costed; predicted {:.4g} µs a call over the nests",
                                  (*plan_json_)["nests"].size(), points, predicted * 1e6),
                      "decision, estimate", "[§8](#layout)"});
      rows.push_back({"Kernels",
                      fmt::format("{} distinct, {} launches a call", (*plan_json_)["nests"].size(), launches), "fact",
                      "[§9](#kernels)"});
    }
    if (c_files_ > 0)
      rows.push_back({"C program", fmt::format("{} files, {} lines, and the recorded call", c_files_, c_lines_), "fact",
                      "[§10](#targets)"});
    if (!pytorch_files_.empty())
      rows.push_back({"PyTorch module", fmt::format("{} files, {} lines", pytorch_files_.size(), pytorch_lines_),
                      "fact", "[§10](#targets)"});
    if (memory_json_)
      rows.push_back({"Memory",
                      fmt::format("{} bytes a call: the inputs, {}, and the peak of live bytes, {}",
                                  (*memory_json_)["needs"].get<int64_t>(), (*memory_json_)["inputs"].get<int64_t>(),
                                  (*memory_json_)["peak"]["bytes"].get<int64_t>()),
                      "fact", "[§13](#memory)"});
    if (measured_) rows.push_back({"Measured", *measured_, "measurement", "[§11](#measured)"});
    s.blocks.push_back(Table{{"What", "Outcome", "Kind", "Where"}, rows, {}});
    s.blocks.push_back(Paragraph{
        "A fact is a property of the program or of the compilation; a decision is what the compiler chose; a "
        "parameter is what the command line set; a bound holds for the inputs its envelope covers and names "
        "them; an estimate ranks and does not guarantee; a measurement was taken in this run, against the exact "
        "reference unless it is a time."});
    return s;
  }

  Section source() {
    Section s{"source", "§1 The source", 2, {}};
    s.blocks.push_back(Paragraph{"The entry's file and the files it imports, as the compiler reads them."});
    for (int f : prog_.file_order) {
      const elab::FileInfo& file = prog_.files.at(static_cast<size_t>(f));
      if (file.prelude) continue;
      const SourceFile& src = prog_.sources.file(file.id);
      std::string numbered;
      size_t line = 1;
      size_t at = 0;
      const std::string& text = src.text;
      while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        numbered += fmt::format("{:>4}  {}\n", line++, text.substr(at, end - at));
        at = end + 1;
      }
      s.blocks.push_back(Paragraph{"`" + file.path + "`"});
      s.blocks.push_back(Listing{numbered});
    }
    const Ran& check = run("check", "§1", {"check", r_.file}, true);
    s.blocks.push_back(Paragraph{check.output.err.empty()
                                     ? "Diagnostics: none (`quire check` reports no error and no warning)."
                                     : "Diagnostics, as `quire check` prints them:"});
    if (!check.output.err.empty()) s.blocks.push_back(Listing{check.output.err});
    s.blocks.push_back(Commands{{check.line}});
    return s;
  }

  Section elaboration() {
    Section s{"elaboration", "§2 Elaboration", 2, {}};
    s.blocks.push_back(Paragraph{
        "Elaboration resolves the imports, binds the constants, instantiates every module with its dimensions, and "
        "checks shapes, regularity classes and effects. Its output is the program with every instance named and "
        "every parameter's shape known."});
    show(s, run("elab", "§2", {"dump", r_.file, "--stage", "elab"}, true));
    s.blocks.push_back(Paragraph{"Types, regularity and effects, as `quire check --summary` prints them:"});
    show(s, run("summary", "§2", {"check", r_.file, "--summary"}, true));
    return s;
  }

  Section core() {
    Section s{"core", "§3 Core", 2, {}};
    s.blocks.push_back(Paragraph{
        "Core is the program in A-normal form: one typed operation per line, the parameter trees explicit, a "
        "`stack{L}` a fold. A site is named `<function>/%<n>`; that name is the thread every later section follows "
        "(§12)."});
    const Ran& ran = run("core", "§3", {"dump", r_.file, "--stage", "core", "--entry", r_.entry}, true);
    has_grad_ = ran.output.out.find(".vjp") != std::string::npos;
    show(s, ran);
    return s;
  }

  Section differentiation() {
    Section s{"differentiation", "§4 Differentiation", 2, {}};
    s.blocks.push_back(
        Paragraph{"Differentiation turns each gradient into a reverse sweep: a `.vjp` function that runs the function "
                  "forward, keeps what the sweep needs (`--remat store`) or recomputes it (`--remat recompute`), and "
                  "propagates the cotangents back."});
    if (r_.step) {
      s.blocks.push_back(Paragraph{fmt::format(
          "The training step differentiates `{}` with respect to its parameters; its reverse sweep:", r_.entry)});
      show(s, run("vjp", "§4", {"dump", r_.file, "--stage", "vjp", "--entry", r_.entry}, true));
    } else if (has_grad_) {
      s.blocks.push_back(Paragraph{fmt::format(
          "`{}` takes a gradient: its reverse sweeps are the `.vjp` functions of §3's listing.", r_.entry)});
    } else {
      s.blocks.push_back(Paragraph{fmt::format(
          "`{}` takes no gradient, so its compiled program holds no reverse sweep. The sensitivities of §6.2 come "
          "from one reverse sweep at {} bits in the exact reference, which is not part of the compiled program; "
          "`--step` explains the training step instead.",
          r_.entry, r_.bits)});
    }
    return s;
  }

  Section egraph() {
    Section s{"egraph", "§5 The e-graph optimizer", 2, {}};
    s.blocks.push_back(
        Paragraph{"Not run: quire has no e-graph optimizer yet. Every function is compiled as Core (§3) states it; no "
                  "rewrite changes an operation or its order, which is what lets the kernels give the reference "
                  "interpreter's bits."});
    return s;
  }

  std::vector<Section> precision() {
    std::vector<Section> out;
    Section top{"precision", "§6 Precision: from a budget to a type per site", 2, {}};
    top.blocks.push_back(Paragraph{
        r_.solved() ? "A budget bounds the distance between what the machine computes and the mathematics. Four "
                      "steps turn it into types: measure how large the values get (the envelope), rank where error "
                      "matters (the sensitivities), solve for the cheapest types the estimate allows, then measure "
                      "the candidate against the exact reference."
                    : fmt::format("No --budget: every value takes its type from the policy {}. The envelope and the "
                                  "sensitivities say where that policy's error comes from, and §6.4 bounds and "
                                  "measures it.",
                                  r_.precision)});
    out.push_back(std::move(top));

    Section env{"envelope", "§6.1 The envelope", 3, {}};
    env.blocks.push_back(Paragraph{fmt::format(
        "The exact interpreter runs the entry once at {} bits and records the largest |x| at every site, and at "
        "each sum and contraction its condition number.",
        r_.bits)});
    const Ran& calibrate = run("envelope", "§6.1",
                               cat(with_dims({"calibrate", r_.file, "--precision", "--entry", r_.entry}),
                                   cat({"--bits", std::to_string(r_.bits), "--seed", std::to_string(r_.seed)},
                                       cat(inputs(), {"--out", "$DOC/artifacts/envelope.json"}))),
                               false);
    have_envelope_ = calibrate.output.status == 0;
    show(env, calibrate);
    out.push_back(std::move(env));

    Section sens{"sensitivities", "§6.2 The sensitivities", 3, {}};
    sens.blocks.push_back(
        Paragraph{"‖∂L/∂v‖₁ at each site, from one reverse sweep: how much an error at the site moves the output."});
    const std::vector<std::string> sens_args =
        cat(with_dims({"dump", r_.file, "--stage", "sensitivity", "--entry", r_.entry}),
            cat({"--bits", std::to_string(r_.bits), "--seed", std::to_string(r_.seed)}, inputs()));
    const Ran& sensitivity = run("sensitivity", "§6.2", sens_args, false);
    show(sens, sensitivity);
    if (sensitivity.output.status == 0) {
      sensitivity_json_ = figures("sensitivity-json", "§6.2", cat(sens_args, {"--format", "json"}));
      if (sensitivity_json_) {
        BarChart chart{"The largest sensitivities", "‖∂L/∂v‖₁", {}, {}};
        std::vector<std::pair<double, std::string>> ranked;
        for (const json& site : (*sensitivity_json_)["sites"])
          if (site["l1"].is_number()) ranked.push_back({site["l1"].get<double>(), site["site"].get<std::string>()});
        std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        for (size_t i = 0; i < ranked.size(); ++i) {
          sensitive_sites_.push_back(ranked[i].second);
          if (i >= kChartBars) continue;
          chart.labels.push_back(ranked[i].second);
          chart.values.push_back(ranked[i].first);
        }
        if (!chart.labels.empty()) sens.blocks.push_back(std::move(chart));
      }
    }
    out.push_back(std::move(sens));

    Section real{"realization", "§6.3 The realization", 3, {}};
    if (r_.solved()) {
      real.blocks.push_back(Paragraph{
          "The solver ranks the values the program stores by sensitivity, narrows the cheapest first while its "
          "first-order estimate stays under the budget, then measures the candidate against the exact reference "
          "and widens until the measurement holds."});
      if (!have_envelope_)
        throw std::runtime_error("--budget: the envelope (§6.1) could not be computed for this entry");
      // Under --step the budget bounds the gradient, which training computes.
      std::vector<std::string> of;
      if (r_.step) of = {"--of", "gradient"};
      const Ran& solve =
          run("solve", "§6.3",
              cat(cat({"solve", r_.file, "--precision", "$DOC/artifacts/envelope.json", "--budget", r_.budget},
                      cat(of, profile())),
                  {"--out", "$DOC/artifacts/realization.json"}),
              true);
      show(real, solve);
      const std::vector<std::pair<std::string, int>> shares = largest_shares();
      if (!shares.empty()) {
        BarChart chart{"Each decision's term of the solver's estimate, the largest first", "term", {}, {}};
        for (const auto& [site, rank] : shares) {
          if (static_cast<size_t>(rank) > kChartBars) break;
          chart.labels.push_back(site);
          chart.values.push_back(term_of(site));
        }
        real.blocks.push_back(std::move(chart));
      }
    }
    real.blocks.push_back(Paragraph{"Every site's type, and why it has it:"});
    const std::vector<std::string> prec_args =
        cat(cat(with_dims({"dump", r_.file, "--stage", "precision", "--entry", r_.entry}), types()), grad());
    show(real, run("precision", "§6.3", prec_args, true));
    precision_json_ = figures("precision-json", "§6.3", cat(prec_args, {"--format", "json"}));
    out.push_back(std::move(real));

    Section bound{"bound", "§6.4 The bound and the measurement", 3, {}};
    if (r_.step && r_.solved()) {
      bound.blocks.push_back(Paragraph{
          "The budget bounds the gradient here: `solve --of gradient` measured the gradient's gap against the "
          "exact reference itself (§6.3's `measured` and `held-out` lines). `check --precision` bounds an entry's "
          "output, so it has no bound to give for this realization."});
    } else if (have_envelope_) {
      bound.blocks.push_back(Paragraph{fmt::format(
          "Under {}, each rule's bound on the output's error, beside the gap measured against the exact reference.",
          types_text())});
      std::vector<std::string> check_args = {"check", r_.file, "--precision", "$DOC/artifacts/envelope.json"};
      if (r_.solved())
        check_args = cat(check_args, {"--realize", "@$DOC/artifacts/realization.json"});
      else
        check_args = cat(check_args, {"--policy", r_.precision});
      const Ran& check = run("bound", "§6.4", cat(check_args, {"--measure", "--bits", std::to_string(r_.bits)}), false);
      show(bound, check);
      if (check.output.status == 0) read_check_figures(check.output.out);
    } else {
      bound.blocks.push_back(Paragraph{"Not available: without an envelope (§6.1) there is nothing to bound over."});
    }
    out.push_back(std::move(bound));
    return out;
  }

  /// The bound and the measurement, for §0, from `check --precision`'s lines
  /// `bound    cond  …` and `measured  …`.
  void read_check_figures(const std::string& text) {
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(at, end - at);
      at = end + 1;
      const size_t first = line.find_first_not_of(' ');
      if (first == std::string::npos) continue;
      line = line.substr(first);
      auto rest = [&](size_t from) {
        const size_t s = line.find_first_not_of(' ', from);
        return s == std::string::npos ? std::string() : line.substr(s);
      };
      if (line.rfind("measured", 0) == 0) check_lines_["Measured gap"] = {rest(8), "measurement"};
      if (line.rfind("bound", 0) == 0) {
        const size_t rule = line.find_first_not_of(' ', 5);
        const size_t rule_end = line.find(' ', rule);
        if (rule == std::string::npos || rule_end == std::string::npos) continue;
        check_lines_["Bound, rule " + line.substr(rule, rule_end - rule)] = {rest(rule_end), "bound"};
      }
      if (line.rfind("estimate", 0) == 0) {
        const size_t rule = line.find_first_not_of(' ', 8);
        const size_t rule_end = line.find(' ', rule);
        if (rule == std::string::npos || rule_end == std::string::npos) continue;
        check_lines_["Estimate, rule " + line.substr(rule, rule_end - rule)] = {rest(rule_end), "estimate"};
      }
    }
  }

  Section fusion() {
    Section s{"fusion", "§7 Fusion", 2, {}};
    s.blocks.push_back(Paragraph{
        "Fusion groups the element-wise operations that can share one loop nest: a value inside a group never "
        "reaches memory. Each value that does is listed with the reason."});
    const std::vector<std::string> args =
        cat(with_dims({"dump", r_.file, "--stage", "realize", "--entry", r_.entry}), grad());
    show(s, run("fusion", "§7", args, true));
    fusion_json_ = figures("fusion-json", "§7", cat(args, {"--format", "json"}));
    return s;
  }

  Section layout() {
    Section s{"layout", "§8 The machine and the layout plan", 2, {}};
    s.blocks.push_back(Paragraph{
        "Each nest has a space of layouts (vector lanes, a split over workers, for a product a register tile and "
        "packing). The plan takes the point the profile's cost model predicts fastest; \"within 1 + u\" counts the "
        "points the model cannot tell from the best."});
    s.blocks.push_back(
        Paragraph{"The profile describes the machine as the cost model sees it, with the constants "
                  "fitted on its calibration:"});
    std::vector<std::string> profile_args = {"profile", "show"};
    if (!r_.profile.empty()) profile_args.push_back(r_.profile);
    show(s, run("profile", "§8", profile_args, true));
    s.blocks.push_back(Paragraph{"The plan, with every point's prediction in its terms (`--cost`):"});
    const Ran& plan = run("plan", "§8",
                          cat(cat(with_dims({"plan", r_.file, "--entry", r_.entry}), cat(types(), profile())),
                              cat(grad(), {"--cost", "--out", "$DOC/artifacts/plan.json"})),
                          true);
    show(s, plan);
    try {
      plan_json_ = json::parse(io::read_file(doc_ + "/artifacts/plan.json"));
    } catch (const json::exception&) {
      throw std::runtime_error("the plan quire wrote ($DOC/artifacts/plan.json) does not parse");
    }
    if (!plan_json_->at("nests").empty()) {
      BarChart chart{"Each nest's predicted time a call (its best layout's prediction × its launches)", "µs", {}, {}};
      for (const json& nest : (*plan_json_)["nests"]) {
        std::string label = nest["nest"].get<std::string>();
        if (!nest["sites"].empty()) label += " " + nest["sites"][0].get<std::string>();
        chart.labels.push_back(label);
        chart.values.push_back(nest["launches"].get<double>() * nest["ranked"][0]["cost"]["seconds"].get<double>() *
                               1e6);
      }
      s.blocks.push_back(std::move(chart));
    }
    return s;
  }

  Section kernels() {
    Section s{"kernels", "§9 The kernels and the host", 2, {}};
    s.blocks.push_back(Paragraph{
        "Each launch lowered to a kernel at the shapes and types it runs at, then the host program: the steps "
        "one call runs, in order."});
    std::vector<std::string> extra = cat(cat(types(), profile()), grad());
    if (r_.step) extra = cat(extra, {"--remat", r_.remat});
    show(s, run("kernels", "§9", cat(with_dims({"dump", r_.file, "--stage", "kernel", "--entry", r_.entry}), extra),
                true));
    show(s, run("host", "§9", cat(with_dims({"dump", r_.file, "--stage", "host", "--entry", r_.entry}), extra), true));
    return s;
  }

  Section targets() {
    Section s{"targets", "§10 Targets", 2, {}};
    if (wants("native"))
      s.blocks.push_back(
          Paragraph{"native: the kernels of §9, written as C and compiled by the system's C compiler when a call first "
                    "needs them (cached by the digest of their source and compiler), run by the host program of §9."});
    if (wants("pytorch")) {
      const Ran& exported =
          run("pytorch", "§10",
              {"export", r_.file, "--target", "pytorch", "-o", "$DOC/artifacts/pytorch", "--entry", r_.entry}, false);
      if (exported.output.status == 0) {
        s.blocks.push_back(
            Paragraph{"pytorch: one module per source file, parameters loaded from a safetensors file by path "
                      "(docs/export.md), in `$DOC/artifacts/pytorch`:"});
        std::vector<std::vector<std::string>> rows;
        for (const std::string& name : exported_files()) {
          const std::string text = io::read_file(doc_ + "/artifacts/pytorch/" + name);
          pytorch_lines_ += count_lines(text);
          pytorch_files_.push_back(name);
          rows.push_back({"`" + name + "`", std::to_string(count_lines(text)),
                          "`" + support::sha256_hex(text).substr(0, 16) + "…`"});
        }
        s.blocks.push_back(Table{{"File", "Lines", "SHA-256"}, rows, {}});
        s.blocks.push_back(Commands{{exported.line}});
      } else {
        s.blocks.push_back(Paragraph{"pytorch:"});
        show(s, exported);
      }
    }
    if (wants("c")) c_target(s);
    return s;
  }

  /// The entry as a standalone C program (`quire export --target c`), its
  /// files listed with their digests.
  void c_target(Section& s) {
    if (r_.step) {
      s.blocks.push_back(Paragraph{
          "c: `quire export --target c` writes an entry; the training step (its schedule and optimizer) is not "
          "exported. Explain the objective without `--step` for its C program."});
      return;
    }
    const Ran& exported =
        run("c", "§10",
            cat(cat(with_dims({"export", r_.file, "--target", "c", "--entry", r_.entry, "--seed",
                               std::to_string(r_.seed), "-o", "$DOC/artifacts/c"}),
                    types()),
                cat(inputs(), profile())),
            false);
    if (exported.output.status != 0) {
      s.blocks.push_back(Paragraph{"c:"});
      show(s, exported);
      return;
    }
    s.blocks.push_back(Paragraph{
        "c: the host program of §9, its kernels and a runtime as a standalone C11 program (libc and libm alone), "
        "in `$DOC/artifacts/c`, with the call recorded in `check/`: `make -C $DOC/artifacts/c check` builds it with "
        "-Wall -Wextra -Werror and compares its outputs with the native backend's, byte for byte (docs/export.md):"});
    std::vector<std::vector<std::string>> rows;
    const std::filesystem::path root = doc_ + "/artifacts/c";
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root))
      if (e.is_regular_file()) names.push_back(std::filesystem::relative(e.path(), root).generic_string());
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string text = io::read_file((root / name).string());
      const bool source = name.find('/') == std::string::npos;
      if (source) {
        c_lines_ += count_lines(text);
        ++c_files_;
      }
      rows.push_back({"`" + name + "`", source ? std::to_string(count_lines(text)) : "-",
                      "`" + support::sha256_hex(text).substr(0, 16) + "…`"});
    }
    s.blocks.push_back(Table{{"File", "Lines", "SHA-256"}, rows, {}});
    s.blocks.push_back(Commands{{exported.line}});
  }

  Section measured() {
    Section s{"measured", "§11 Measured", 2, {}};
    if (!r_.measure) {
      s.blocks.push_back(Paragraph{
          "Not measured: give `--measure`. This is the one section that changes between runs, so it is left out "
          "unless asked for, and the rest of the document is the same bytes for the same command."});
      return s;
    }
    const Ran& ran = run("run", "§11",
                         cat(cat(with_dims({"run", r_.file, "--entry", r_.entry, "--seed", std::to_string(r_.seed)}),
                                 cat(types(), inputs())),
                             cat(profile(), {"--repeat", "20"})),
                         false);
    s.blocks.push_back(
        Paragraph{"Twenty calls of the entry through the native backend, the first compiling its kernels:"});
    show(s, ran);
    if (ran.output.status == 0) measured_ = "20 calls; the times are in §11";
    return s;
  }

  Section sites() {
    Section s{"sites", "§12 Sites through every stage", 2, {}};
    // The sites --site names, then the most sensitive (or, without
    // sensitivities, the stored values in body order) up to --sites.
    // --site's sites first; then, in turn, the largest shares of the
    // solver's estimate (with --budget), the sites of the costliest nests and
    // the largest sensitivities, until --sites more are chosen. Each row says
    // why its site was chosen.
    std::vector<std::string> chosen, why;
    auto choose = [&](const std::string& site, const std::string& reason) {
      if (std::find(chosen.begin(), chosen.end(), site) != chosen.end()) return;
      chosen.push_back(site);
      why.push_back(reason);
    };
    for (const std::string& site : r_.follow) {
      bool known = false;
      if (precision_json_)
        for (const json& j : (*precision_json_)["sites"]) known = known || j["site"] == site;
      if (!known)
        throw UsageError(
            fmt::format("--site {}: `{}` reaches no such site (§6.3 lists them, as `function/%n`)", site, r_.entry));
      choose(site, "--site");
    }
    std::vector<std::pair<std::string, std::string>> shares, nests, sensitive;
    for (const auto& [site, rank] : largest_shares())
      shares.push_back({site, fmt::format("share of the estimate, #{}", rank)});
    for (const auto& [site, nest] : costliest_nests()) nests.push_back({site, "costliest nests: " + nest});
    for (size_t i = 0; i < sensitive_sites_.size(); ++i)
      sensitive.push_back({sensitive_sites_[i], fmt::format("sensitivity, #{}", i + 1)});
    if (sensitive.empty() && precision_json_)
      for (const json& site : (*precision_json_)["sites"])
        if (site.value("reason", "") != "carried") sensitive.push_back({site["site"], "stored, in body order"});
    const size_t wanted = r_.follow.size() + static_cast<size_t>(r_.sites);
    for (size_t i = 0; chosen.size() < wanted && (i < shares.size() || i < nests.size() || i < sensitive.size()); ++i)
      for (const auto* list : {&shares, &nests, &sensitive})
        if (i < list->size() && chosen.size() < wanted) choose((*list)[i].first, (*list)[i].second);
    s.blocks.push_back(Paragraph{fmt::format(
        "{} sites followed through the stages: {}in turn the largest shares of the solver's estimate (§6.3, with "
        "--budget), the values the costliest nests compute (§8) and the largest sensitivities (§6.2). Each row gives "
        "the operation and type (§6.3), the sensitivity, whether the value reaches memory (§7) and the nests that "
        "compute it.",
        chosen.size(), r_.follow.empty() ? "" : "those --site names first, then ")});
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> ids;
    for (const std::string& site : chosen) {
      std::string op = "—", type = "—", sens = "—", memory = "inside a group (never stored)", nest = "—";
      if (precision_json_)
        for (const json& j : (*precision_json_)["sites"])
          if (j["site"] == site) {
            op = j.value("op", "—");
            type = j.value("type", "—") + ": " + j.value("why", "");
          }
      if (sensitivity_json_)
        for (const json& j : (*sensitivity_json_)["sites"])
          if (j["site"] == site && j["l1"].is_number()) sens = sci(j["l1"].get<double>());
      bool seen = false;
      if (fusion_json_)
        for (const json& f : (*fusion_json_)["functions"]) {
          for (const json& st : f["stored"])
            if (st["site"] == site) {
              memory = "stored: " + st.value("why", "");
              seen = true;
            }
          for (const json& g : f["groups"])
            for (const json& step : g["steps"])
              if (step == site && g["root"] != site) {
                memory = "in the group of " + g["root"].get<std::string>() + " (never stored)";
                seen = true;
              }
        }
      if (!seen && op != "—") memory = "not a launch (" + op + ")";
      if (plan_json_) {
        std::string nests;
        for (const json& n : (*plan_json_)["nests"]) {
          bool found = false;
          for (const json& ns : n["sites"]) found = found || nest_computes(ns.get<std::string>(), site);
          if (found) nests += (nests.empty() ? "" : ", ") + n["nest"].get<std::string>();
        }
        if (!nests.empty()) nest = nests;
      }
      const std::string id = fmt::format("site-{}", ids.size() + 1);
      ids.push_back(id);
      site_links_[site] = id;
      rows.push_back({"`" + site + "`", why[ids.size() - 1], op, type, sens, memory, nest,
                      "[§6.2](#sensitivities) [§6.3](#realization) [§7](#fusion) [§8](#layout) [§9](#kernels)"});
    }
    s.blocks.push_back(Table{{"Site", "Followed for", "Operation", "Type and why (§6.3)", "‖∂L/∂v‖₁ (§6.2)",
                              "Memory (§7)", "Nest (§8)", "Stages"},
                             rows,
                             ids});
    s.blocks.push_back(
        Paragraph{"In the HTML document each of these names is a link wherever a listing shows it, to its row here."});
    return s;
  }

  std::vector<Section> memory() {
    std::vector<Section> out;
    Section s{"memory", "§13 Memory", 2, {}};
    s.blocks.push_back(Paragraph{
        "What one call needs, counted from the compiled program at its dimensions and realized types: never a "
        "process's resident size (docs/memory.md)."});
    std::vector<std::string> args =
        cat(with_dims({"memory", r_.file, "--entry", r_.entry}), cat(types(), {"--remat", r_.remat}));
    if (r_.step) args.push_back("--grad");
    show(s, run("memory", "§13", args, true));
    memory_json_ = figures("memory-json", "§13", cat(args, {"--format", "json"}));
    if (!r_.dims.empty()) {
      s.blocks.push_back(Paragraph{"Each buffer's bytes as a polynomial in the entry's dimensions:"});
      show(s, run("memory-symbolic", "§13", cat(args, {"--symbolic"}), false));
    }
    const elab::FileInfo& main = prog_.files.at(static_cast<size_t>(prog_.main_file));
    if (main.training) {
      s.blocks.push_back(Paragraph{fmt::format(
          "The training run's step under the policy {}, at the batch its run binds, with `--remat store` and "
          "`recompute` side by side{}:",
          r_.precision,
          r_.solved() ? " (a realization solved for the entry's value says nothing of its gradient)" : "")});
      show(s, run("memory-step", "§13", {"memory", r_.file, "--step", "--precision", r_.precision}, false));
    }
    out.push_back(std::move(s));
    return out;
  }

  Section appendix() {
    Section s{"appendix", "Appendix: the commands", 2, {}};
    s.blocks.push_back(Paragraph{
        "Every command this document ran, in order, with the section it serves and the file that holds its "
        "printout. Set `DOC` to this document's folder and run one from the folder `quire explain` ran in: it "
        "prints its listing again (the JSON ones give the figures of §0, the charts and §12)."});
    std::vector<std::vector<std::string>> rows;
    static const std::map<std::string, std::string> kAnchors = {
        {"§1", "source"},     {"§2", "elaboration"},     {"§3", "core"},          {"§4", "differentiation"},
        {"§6.1", "envelope"}, {"§6.2", "sensitivities"}, {"§6.3", "realization"}, {"§6.4", "bound"},
        {"§7", "fusion"},     {"§8", "layout"},          {"§9", "kernels"},       {"§10", "targets"},
        {"§11", "measured"},  {"§13", "memory"}};
    for (const Ran& ran : ran_)
      rows.push_back({"[" + ran.section + "](#" + kAnchors.at(ran.section) + ")", "`" + ran.line + "`",
                      ran.output.status == 0 ? "`listings/" + ran.name + ".txt`"
                                             : fmt::format("not available (exit status {})", ran.output.status)});
    s.blocks.push_back(Table{{"Section", "Command", "Printout"}, rows, {}});
    return s;
  }

  // ---- helpers ----

  /// The solver's decisions on sites by their term of the estimate, largest
  /// first, with their rank (from the realization it wrote; none without --budget).
  std::vector<std::pair<std::string, int>> largest_shares() const {
    std::vector<std::pair<std::string, int>> out;
    if (!r_.solved()) return out;
    json realization;
    try {
      realization = json::parse(io::read_file(doc_ + "/artifacts/realization.json"));
    } catch (const std::exception&) {
      return out;
    }
    std::vector<std::pair<double, std::string>> terms;
    for (const json& c : realization["report"]["choices"])
      if (c.value("kind", "") == "site" && c["term"].is_number()) terms.push_back({c["term"], c["name"]});
    std::stable_sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < terms.size(); ++i) out.push_back({terms[i].second, static_cast<int>(i) + 1});
    return out;
  }

  /// A decision's term of the solver's estimate (0 when it has none).
  double term_of(const std::string& site) const {
    const json realization = json::parse(io::read_file(doc_ + "/artifacts/realization.json"));
    for (const json& c : realization["report"]["choices"])
      if (c.value("name", "") == site && c["term"].is_number()) return c["term"].get<double>();
    return 0;
  }

  /// The value each nest stores (the last site of its label), the nests by
  /// their predicted time a call, costliest first.
  std::vector<std::pair<std::string, std::string>> costliest_nests() const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!plan_json_) return out;
    std::vector<std::pair<double, std::pair<std::string, std::string>>> nests;
    for (const json& n : (*plan_json_)["nests"]) {
      const double t = n["launches"].get<double>() * n["ranked"][0]["cost"]["seconds"].get<double>();
      for (const json& label : n["sites"]) {
        const std::string text = label.get<std::string>();
        const size_t slash = text.rfind('/'), plus = text.rfind('+');
        if (slash == std::string::npos) continue;
        const std::string site =
            text.substr(0, slash + 1) + text.substr(plus == std::string::npos ? slash + 1 : plus + 1);
        nests.push_back({t, {site, n["nest"].get<std::string>()}});
      }
    }
    std::stable_sort(nests.begin(), nests.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& n : nests) out.push_back(n.second);
    return out;
  }

  /// Whether a nest's site label (`layer_norm/%12+%13+%14`, a group's
  /// steps in one function) names `site` (`layer_norm/%13`).
  static bool nest_computes(const std::string& label, const std::string& site) {
    const size_t slash = label.rfind('/');
    if (slash == std::string::npos || site.compare(0, slash + 1, label, 0, slash + 1) != 0) return false;
    const std::string wanted = site.substr(slash + 1);
    size_t at = slash + 1;
    while (at <= label.size()) {
      size_t end = label.find('+', at);
      if (end == std::string::npos) end = label.size();
      if (label.compare(at, end - at, wanted) == 0) return true;
      at = end + 1;
    }
    return false;
  }

  bool wants(const std::string& target) const {
    return std::find(r_.targets.begin(), r_.targets.end(), target) != r_.targets.end();
  }

  /// The files `quire export` wrote, sorted by name (its README lists them;
  /// the folder is read so that nothing it wrote goes unlisted).
  std::vector<std::string> exported_files() const {
    std::vector<std::string> names;
    const std::filesystem::path root = doc_ + "/artifacts/pytorch";
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
      if (entry.is_regular_file()) names.push_back(entry.path().lexically_relative(root).string());
    std::sort(names.begin(), names.end());
    return names;
  }

  const ExplainRequest& r_;
  const elab::Program& prog_;
  std::string doc_;
  std::deque<Ran> ran_;  // a deque: a Ran& stays valid while later commands run
  bool has_grad_ = false;
  bool have_envelope_ = false;
  std::optional<json> precision_json_, sensitivity_json_, fusion_json_, plan_json_, memory_json_;
  std::vector<std::string> sensitive_sites_;
  std::map<std::string, std::string> site_links_;  ///< §12's sites → their rows' anchors
  std::map<std::string, std::pair<std::string, std::string>> check_lines_;
  std::vector<std::string> pytorch_files_;
  size_t pytorch_lines_ = 0;
  size_t c_files_ = 0;
  size_t c_lines_ = 0;
  std::optional<std::string> measured_;
};

}  // namespace

explain::Document build_explain_document(const ExplainRequest& request, const elab::Program& prog,
                                         const std::string& doc_dir) {
  return Builder(request, prog, doc_dir).build();
}

}  // namespace quire::cli
