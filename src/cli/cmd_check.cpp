// quire check FILE [--summary]: diagnostics, or nothing and exit 0.

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/elab/summary.h"

namespace quire::cli {

Handler setup_check(CLI::App& sub) {
  auto file = std::make_shared<std::string>();
  auto summary = std::make_shared<bool>(false);
  sub.add_option("file", *file, "the program (.qr)")->required();
  sub.add_flag("--summary", *summary, "print types, regularity, effects, parameters and the training run");
  return [file, summary]() {
    auto prog = load_program(*file);
    if (!prog) return 1;
    if (*summary) std::cout << elab::print_summary(*prog);
    return 0;
  };
}

}  // namespace quire::cli
