// quire plan FILE --entry E [--dim B=4] [--precision P | --realize @r.json] [--profile P.json] [--threads N]
//   [--cost] [--out plan.json]
//
// The layout plan of one call of the entry (kernel/layout.h): every kernel
// the call launches, its operands, the points of its layout space, the best
// prediction, how many points the model cannot tell from it, and the layout
// taken; with --cost, every point's prediction in its terms. The kernels are
// those `dump --stage kernel` prints: the compiled program's, lowered at the
// shapes of the call.

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/grad/vjp.h"
#include "quire/io/atomic_file.h"
#include "quire/kernel/layout.h"
#include "quire/realize/realization.h"
#include "quire/support/sha256.h"

namespace quire::cli {

namespace {

std::string micros(double seconds) { return fmt::format("{:.4g} µs", seconds * 1e6); }

std::string operands(const kernel::Kernel& k) {
  std::string out;
  for (int b = 0; b < k.output(); ++b)
    out += (out.empty() ? "" : " ") + runtime::shape_string(k.buffers[static_cast<size_t>(b)].shape);
  return out;
}

std::string terms_row(const kernel::CostTerms& c) {
  auto us = [](double s) { return fmt::format("{:>9.4f}", s * 1e6); };
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {}  {}", us(c.total), us(c.launch), us(c.spawn), us(c.fresh),
                     us(c.product), us(c.work), us(c.loads), us(c.calls), us(c.l2), us(c.l3), us(c.mem), c.bound_by);
}

nlohmann::ordered_json cost_json(const kernel::CostTerms& c) {
  return {{"seconds", c.total}, {"launch", c.launch}, {"spawn", c.spawn}, {"fresh", c.fresh},
          {"product", c.product}, {"work", c.work},     {"loads", c.loads},   {"calls", c.calls}, {"l2", c.l2},
          {"l3", c.l3},         {"mem", c.mem},       {"bound_by", c.bound_by}};
}

}  // namespace

Handler setup_plan(CLI::App& sub) {
  struct Options {
    std::string file, entry, precision = "f64", profile, out, realize;
    std::vector<std::string> dims;
    std::optional<int> threads;
    bool cost = false;
    bool grad = false;
    bool fused_products = true;  // --product-step fma, the default
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--entry", o->entry, "the function whose call is planned")->required();
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  CLI::Option* precision_flag = sub.add_option("--precision", o->precision, "the run policy (f64, f32, bf16, f16)")
                                     ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_option("--realize", o->realize,
                 "the types a solver chose (`quire solve --out`), @FILE, in place of --precision")
      ->check(non_empty("--realize names a file", "@FILE"));
  sub.add_option("--profile", o->profile, "the machine profile (default: the one that ships, profiles/ci-2core-avx512.json)");
  sub.add_option("--threads", o->threads, "threads a split may use (default: the profile's cores)")
      ->check(CLI::Range(1, 256));
  add_product_step_option(sub, o->fused_products);
  sub.add_flag("--cost", o->cost, "print every point's prediction in its terms");
  sub.add_flag("--grad", o->grad,
               "plan the entry's gradient as a training step computes it (with respect to θ, or to every "
               "differentiable argument of an entry without parameters)");
  add_output_option(sub, "--out", o->out, "write the plan as JSON");
  return [o, precision_flag]() {
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    const auto dims = parse_dims(o->dims, *prog);
    const int entry = find_entry(*prog, o->entry);
    const machine::Profile profile = machine::planning_profile(o->profile);
    // The profile's cores by default, so that a plan depends on the profile alone.
    const int threads = o->threads.value_or(profile.cores);
    // The call compiled, not run: a plan needs the shapes, not the arguments'
    // values (so an entry of token ids is planned as any other).
    compile::CompileRequest request;
    request.entry = entry;
    request.dims = dims;
    request.realize.policy = *precision::parse_policy(o->precision);
    request.realize.fused_products = o->fused_products;
    if (o->grad) request.wrt = gradient_wrt(*prog, entry);
    nlohmann::ordered_json realization;  // null unless --realize
    std::optional<precision::RealizationFile> solved;
    if (!o->realize.empty()) {
      // Under --grad the step's vjp is what runs: a gradient's decisions are checked against it.
      solved = load_realization(o->realize, *prog, entry, dims, o->grad ? grad::vjp(*prog, entry, request.wrt) : -1);
      request.realize.policy = solved->assignment.policy;
      request.realize.assignment = &solved->assignment;
      // As training reads them: a trained parameter keeps its master, its reads rounded.
      request.realize.keep_masters = o->grad;
      // The plan names its realization by content: a path would make the same
      // plan's bytes depend on where the file was.
      const std::string path = o->realize[0] == '@' ? o->realize.substr(1) : o->realize;
      realization = {{"file", std::filesystem::path(path).filename().string()},
                     {"sha256", support::sha256_hex(io::read_file(path))}};
    }
    request.profile = &profile;
    request.threads = threads;
    const compile::CompiledProgram compiled = compile::compile(*prog, request);
    const std::vector<kernel::KernelRecord>& records = compiled.catalog->kernels();

    const machine::LayoutModel& m = *profile.layout;
    std::cout << fmt::format("plan of {} under the profile `{}` ({} cores, {} threads allowed): u = {:.3g}, p = {:.3g}\n\n",
                             o->grad ? fmt::format("`{}`'s gradient", o->entry) : fmt::format("`{}`", o->entry), profile.name, profile.cores, threads, m.error, m.p);
    std::cout << fmt::format("{:<5} {:<34} {:<22} {:>9} {:>13} {:>18}  {}\n", "nest", "sites", "operands", "space",
                             "predicted", "undecided", "layout");
    int points = 0;
    nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
    for (size_t k = 0; k < records.size(); ++k) {
      const kernel::KernelRecord& rec = records[k];
      const kernel::KernelPlan& plan = *rec.plan;
      points += static_cast<int>(plan.ranked.size());
      std::string sites;
      for (const std::string& s : rec.sites) sites += (sites.empty() ? "" : ", ") + s;
      std::cout << fmt::format("{:<5} {:<34} {:<22} {:>9} {:>13} {:>18}  {}\n", fmt::format("k{}", k), sites,
                               operands(rec.kernel), fmt::format("{} points", plan.ranked.size()),
                               micros(plan.ranked.front().cost.total), fmt::format("{} within 1 + u", plan.undecided),
                               kernel::layout_text(plan.chosen()));
      nlohmann::ordered_json ranked = nlohmann::ordered_json::array();
      for (const kernel::RankedLayout& rl : plan.ranked)
        ranked.push_back({{"lanes", rl.layout.lanes},
                          {"split", rl.layout.split},
                          {"pack", rl.layout.pack},
                          {"tile", rl.layout.tile},
                          {"order", rl.layout.swap ? "JI" : "IJ"},
                          {"cost", cost_json(rl.cost)}});
      kernels.push_back({{"nest", fmt::format("k{}", k)},
                         {"title", rec.kernel.title},
                         {"sites", rec.sites},
                         {"launches", compiled.host.launches.at(k)},
                         {"operands", operands(rec.kernel)},
                         {"facts",
                          {{"ops", plan.facts.ops},
                           {"moved", plan.facts.moved},
                           {"bytes", plan.facts.bytes},
                           {"calls", plan.facts.calls},
                           {"fresh", plan.facts.fresh},
                           {"split_extent", plan.facts.split_extent},
                           {"independent_extents", plan.facts.independent}}},
                         {"layout",
                          {{"lanes", plan.chosen().lanes},
                           {"split", plan.chosen().split},
                           {"pack", plan.chosen().pack},
                           {"tile", plan.chosen().tile},
                           {"order", plan.chosen().swap ? "JI" : "IJ"}}},
                         {"undecided", plan.undecided},
                         {"ranked", ranked}});
    }
    std::cout << fmt::format("-- {} nests, {} points costed; u = {:.3g}\n", records.size(), points, m.error);
    if (o->cost) {
      std::cout << "\nEach point's prediction in its terms, in µs: λ a launch, spawn starting a split launch, fresh its\n"
                   "output's allocation, product a packed product ahead of the nest, then work, loads, library calls\n"
                   "and the traffic from L2, L3 and memory, combined by the p-norm; `bound by` names the largest.\n";
      for (size_t k = 0; k < records.size(); ++k) {
        const kernel::KernelRecord& rec = records[k];
        std::cout << fmt::format("\nk{} {} {} — {} points\n", k, rec.kernel.title, operands(rec.kernel),
                                 rec.plan->ranked.size());
        std::cout << fmt::format("      {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {}\n",
                                 "predicted", "λ", "spawn", "fresh", "product", "work", "loads", "calls", "L2", "L3",
                                 "mem", "bound by");
        for (size_t i = 0; i < rec.plan->ranked.size(); ++i)
          std::cout << fmt::format("{:<5} {}\n      {}\n", i + 1, terms_row(rec.plan->ranked[i].cost),
                                   kernel::layout_text(rec.plan->ranked[i].layout));
      }
    }
    if (!o->out.empty()) {
      nlohmann::ordered_json j;
      j["format"] = "quire-plan";
      j["version"] = 1;
      j["entry"] = o->entry;
      if (o->grad) j["grad"] = true;
      j["dims"] = dims;
      j["precision"] = solved ? "realized" : o->precision;
      if (solved) j["realization"] = realization;
      j["profile"] = profile.name;
      j["threads"] = threads;
      j["u"] = m.error;
      j["nests"] = kernels;
      io::write_file_atomically(o->out, j.dump(2) + "\n");
    }
    return 0;
  };
}

}  // namespace quire::cli
