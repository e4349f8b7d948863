#pragma once
// The subcommands of `quire`: one table of {name, help, setup}. Each setup
// adds its options to a CLI11 subcommand and returns the handler to run.

#include <CLI/CLI.hpp>

#include <functional>

namespace quire::cli {

using Handler = std::function<int()>;

struct Command {
  const char* name;
  const char* help;
  Handler (*setup)(CLI::App& sub);
};

Handler setup_calibrate(CLI::App& sub);
Handler setup_check(CLI::App& sub);
Handler setup_dump(CLI::App& sub);
Handler setup_explain(CLI::App& sub);
Handler setup_export(CLI::App& sub);
Handler setup_memory(CLI::App& sub);
Handler setup_plan(CLI::App& sub);
Handler setup_profile(CLI::App& sub);
Handler setup_run(CLI::App& sub);
Handler setup_sample(CLI::App& sub);
Handler setup_solve(CLI::App& sub);
Handler setup_train(CLI::App& sub);

}  // namespace quire::cli
