// quire's command line: a thin layer over libquire. Every subcommand is one
// row of the table below; docs/cli.md describes each.

#include <fmt/format.h>

#include <malloc.h>

#include <iostream>
#include <map>

#include "commands.h"
#include "common.h"
#include "quire/runtime/isa.h"

namespace {

const quire::cli::Command kCommands[] = {
    {"check", "check a program: diagnostics, or nothing (--summary prints what it elaborated)", quire::cli::setup_check},
    {"dump", "print a stage's result: tokens, ast, elab, core, vjp, precision, sensitivity, realize, kernel", quire::cli::setup_dump},
    {"run", "evaluate an entry function under a precision policy (natively compiled kernels by default)", quire::cli::setup_run},
    {"plan", "the layout plan: every kernel's layout space, predictions and the layout taken, under a machine profile",
     quire::cli::setup_plan},
    {"memory", "what one call of an entry needs: parameters, inputs, outputs, the peak of live bytes and each call's share",
     quire::cli::setup_memory},
    {"calibrate", "measure an entry in the exact reference: every site's largest |x|, condition number, rounding error",
     quire::cli::setup_calibrate},
    {"solve", "choose a storage type for every stored value under an error budget, measured against the exact reference",
     quire::cli::setup_solve},
    {"train", "run the file's training run: optimizer, data, checkpoints, metrics", quire::cli::setup_train},
    {"sample", "generate text from trained parameters: the program's sampling entry, one call per character",
     quire::cli::setup_sample},
    {"explain", "the document of what the compiler does to one entry, every stage with its reasons: `-o DIR`",
     quire::cli::setup_explain},
    {"export", "write the functions an entry reaches as PyTorch modules, one per source file: `--target pytorch -o DIR`",
     quire::cli::setup_export},
    {"profile", "measure this machine for the layout plan (`profile calibrate -o P.json`), or print a profile (`profile show`)",
     quire::cli::setup_profile},
};

}  // namespace

int main(int argc, char** argv) {
  // A call allocates its values afresh; glibc serves blocks above 32 MiB by
  // mmap and returns them on free, so every call of a large program would
  // fault in and zero its tensors' pages again (most of a 64 MiB element-wise
  // call's time). Kept on the heap, they are reused from one call to the next.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"quire: a typed tensor language, its compiler and runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "quire 0.1.0");
  std::map<CLI::App*, quire::cli::Handler> handlers;
  for (const quire::cli::Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    handlers[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    // A bad QUIRE_ISA is the user's error, reported before any command runs:
    // found later, where a kernel is first compiled, it would only turn the
    // native backend off with a warning.
    quire::runtime::widest_isa();
    for (auto& [sub, handler] : handlers)
      if (sub->parsed()) return handler();
  } catch (...) {
    return quire::cli::report_error();
  }
  return 1;
}
