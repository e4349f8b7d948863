// quire train FILE [--precision f64|f32|bf16|f16] [--half-intermediates] [--seed N]
//   [--params INIT.safetensors] [--run-dir DIR] [--resume] [--max-steps N]
//   [--params-out F.safetensors] [--dim NAME=N] [--remat store|recompute] [--log-every N]
//   [--backend native|kernels|interp] [--threads N] [--library-kernels on|off] [--profile P.json]
//   [--realize @realization.json] [--shards N] [--rank-timeout SECONDS] [--memory-limit BYTES]
// mpirun -n N quire train FILE …
//
// Runs the file's `training run` block (quire/train/trainer.h). The progress
// line is redrawn in place when stdout is a terminal, printed as plain lines
// otherwise. Started by an MPI launcher, this process is one rank of the run
// (quire/distributed/launch.h); an error on any rank is printed by that rank
// and ends every rank at once, so that none waits for it.

#include <fmt/format.h>
#include <unistd.h>

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/distributed/launch.h"
#include "quire/train/trainer.h"

namespace quire::cli {

Handler setup_train(CLI::App& sub) {
  struct Options {
    std::string file;
    std::vector<std::string> dims;
    int64_t max_steps = -1;
    std::string remat = "store";
    std::string backend = "native";
    std::string library_kernels = "on";
    std::string realize;
    std::string memory_limit;
    double rank_timeout = 600;
    train::TrainOptions train;
  };
  auto o = std::make_shared<Options>();
  o->train.threads = default_threads();
  o->train.fused_products = true;  // --product-step fma, the default
  sub.add_option("file", o->file, "the program (.qr) with a `training run` block")->required();
  CLI::Option* precision_flag = sub.add_option("--precision", o->train.precision, "the run policy: f64 (default), f32, bf16 or f16")
      ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_flag("--half-intermediates", o->train.half_intermediates,
               "round every intermediate step of a half value to the half (reductions accumulate in it)");
  add_product_step_option(sub, o->train.fused_products);
  sub.add_option("--seed", o->train.seed, "seed of the parameters' initialization (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--params", o->train.params_in, "start from the parameters of a safetensors file instead of the seed");
  sub.add_option("--run-dir", o->train.run_dir,
                 "where metrics, the loss curve and relative checkpoint folders go (default runs/<file's stem>)")
      ->check(non_empty("an empty folder name: give a path, or leave the flag out for runs/<file's stem>", "DIR"));
  sub.add_flag("--resume", o->train.resume, "continue from the newest valid checkpoint");
  sub.add_option("--max-steps", o->max_steps, "stop, with a checkpoint, once this many steps are done in all")
      ->check(CLI::NonNegativeNumber);
  add_output_option(sub, "--params-out", o->train.params_out, "write the final parameters to a safetensors file");
  sub.add_option("--dim", o->dims, "bind a dimension other than the batch's, NAME=SIZE (repeatable)");
  sub.add_option("--remat", o->remat,
                 "store (default): keep the forward values of calls for the backward pass; recompute: evaluate them "
                 "again there")
      ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_option("--backend", o->backend,
                 "native (the fused loop nests compiled as C, default), kernels (the same nests in the kernel "
                 "interpreter) or interp (the reference interpreter): the same bits")
      ->check(CLI::IsMember({"native", "kernels", "interp"}));
  sub.add_option("--threads", o->train.threads,
                 "threads a native kernel may use (default: the machine's cores); the same bits")
      ->check(CLI::Range(1, 256));
  sub.add_option("--library-kernels", o->library_kernels,
                 "on (default): the native backend runs the prelude's attention functions and layer_norm, and their gradients, as "
                 "one fused kernel each where their sites are f32 (the same bits); off: their lines")
      ->check(CLI::IsMember({"on", "off"}));
  sub.add_option("--profile", o->train.profile,
                 "the machine profile the kernels' layouts are planned under (default: this machine's: the one that "
                 "ships where it describes this machine, else one measured here on first use and kept)");
  sub.add_option("--log-every", o->train.log_every, "print a plain progress line every N steps (default: about 50 lines)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--realize", o->realize,
                 "train under the solver's decisions for the objective, @realization.json (`quire solve --out`); its "
                 "policy replaces --precision");
  sub.add_option("--shards", o->train.shards,
                 "split each batch into N shards, computed one after another and summed in a fixed order: the bits "
                 "of `mpirun -n N quire train` (default 1: the batch whole)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--memory-limit", o->memory_limit,
                 "refuse the run before its first step if one step needs more bytes than this: the vjp's inputs and "
                 "peak (as `quire memory --grad` counts them) and the optimizer's state (64MiB, 2GB, 1048576)");
  sub.add_option("--rank-timeout", o->rank_timeout,
                 "under mpirun: the seconds a rank waits for another's message before it ends the run naming it "
                 "(default 600; a rank whose process ends is named at once)")
      ->check(CLI::PositiveNumber);
  auto run = [o, precision_flag]() {
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    if (!o->memory_limit.empty()) o->train.memory_limit = parse_bytes("--memory-limit", o->memory_limit);
    auto prog = load_program(o->file);
    if (!prog) return 1;
    if (!o->realize.empty()) {
      o->train.realization_path = o->realize[0] == '@' ? o->realize.substr(1) : o->realize;
      o->train.realization = precision::read_realization_file(o->train.realization_path);
    }
    o->train.dims = parse_dims(o->dims, *prog);
    if (o->max_steps >= 0) o->train.max_steps = o->max_steps;
    o->train.remat = *interp::parse_remat(o->remat);
    o->train.backend = *kernel::parse_backend(o->backend);
    o->train.library_kernels = o->library_kernels == "on";
    if (o->train.backend == kernel::Backend::Native) o->train.profile = execution_profile(o->train.profile);
    // A launcher hands its ranks a terminal of its own whatever its output
    // is, so under one the progress is plain lines.
    train::train(*prog, o->train, std::cout, ::isatty(STDOUT_FILENO) == 1 && !o->train.world);
    return 0;
  };
  return [o, run]() {
    std::unique_ptr<distributed::Communicator> world;
    try {
      world = distributed::join_launched_job(o->rank_timeout);
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
    if (!world) return run();
    o->train.world = world.get();
    int status = 0;
    try {
      status = run();
    } catch (...) {
      status = report_error(fmt::format("quire: rank {}", world->rank()));
    }
    // Any rank's failure ends every rank: the others would wait for its next message.
    if (status != 0) world->abort(status);
    return 0;
  };
}

}  // namespace quire::cli
