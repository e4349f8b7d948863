// quire profile calibrate -o profile.json [--quick] [--name NAME]
// quire profile show [FILE]
//
// Measures this machine and fits the layout plan's cost model
// (quire/calibrate/calibrate.h), then writes the version 2 profile atomically
// and prints what was measured and how well the model fits. The output's
// folder is checked first, so that a bad -o fails before a minute of
// measuring rather than after it.

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/io/io_error.h"
#include "quire/calibrate/calibrate.h"
#include "quire/machine/profile.h"
#include "quire/machine/profile_print.h"
#include "quire/native/c_compiler.h"

namespace quire::cli {

namespace {

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw io::IoError(path, "cannot write the profile: this is a folder");
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec))
    throw io::IoError(path, fmt::format("cannot write the profile: the folder `{}` does not exist", dir));
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw io::IoError(path, fmt::format("cannot write the profile: the folder `{}` is not writable", dir));
}

}  // namespace

Handler setup_profile(CLI::App& sub) {
  struct Options {
    std::string out, name, shown;
    bool quick = false;
  };
  auto o = std::make_shared<Options>();
  sub.require_subcommand(1);
  CLI::App* calibrate = sub.add_subcommand(
      "calibrate", "measure this machine (caches, bandwidths, peak rates, spawn) and fit the layout plan's cost model");
  add_output_option(*calibrate, "-o,--out", o->out, "write the profile here (atomically)")->required();
  calibrate->add_flag("--quick", o->quick,
                     "a small calibration set and short measurements (seconds): what run and train measure on "
                     "first use; fits the launch and one scale of the shipped model's other constants");
  calibrate->add_option("--name", o->name, "the profile's name (default: the output file's stem)");
  CLI::App* show = sub.add_subcommand(
      "show", "print a profile as the cost models read it: the machine and the layout model's fitted constants");
  show->add_option("file", o->shown, "the profile (default: the one that ships)")
      ->check(non_empty("the profile is a file", "FILE"));
  return [o, show]() {
    if (show->parsed()) {
      std::cout << machine::print_profile(o->shown.empty() ? machine::shipped_profile() : machine::read_profile(o->shown));
      return 0;
    }
    check_writable(o->out);
    machine::CalibrationOptions options;
    options.name = o->name.empty() ? std::filesystem::path(o->out).stem().string() : o->name;
    options.quick = o->quick;
    options.progress = [](const std::string& step) { std::cerr << "calibrate: " << step << "…\n"; };
    machine::Calibration c;
    try {
      c = machine::calibrate(options);
    } catch (const native::NativeError& e) {
      std::cerr << "quire: error: the calibration compiles kernels natively, and cannot: " << e.what() << "\n";
      return 1;
    }
    machine::write_profile(o->out, c.profile);
    std::cout << machine::print_calibration(c);
    std::cout << fmt::format("calibrate: wrote {}\n", o->out);
    return 0;
  };
}

}  // namespace quire::cli
