#pragma once
// What the subcommands share: loading and elaborating a program with its
// diagnostics printed, and parsing `--dim NAME=N` flags.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/machine/profile.h"
#include "quire/realize/realization.h"
#include "quire/realize/realization_file.h"

namespace quire::cli {

/// A user's mistake in a flag or a file (not in the program): printed as
/// `quire: error: …` and exit status 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Prints the exception in flight (call it in a catch block) as
/// `WHO: error: …`, or `WHO: internal error: …` for a broken invariant of
/// quire's, and returns the exit status: 1, or 2 for an internal error.
/// `who` is "quire", or "quire: rank R" for a rank of an MPI run.
int report_error(const std::string& who = "quire");

/// Elaborates the program, printing its diagnostics to stderr. Returns null
/// when it has errors.
std::unique_ptr<elab::Program> load_program(const std::string& path);

/// `--memory-limit`'s value: a whole number of bytes, with an optional unit
/// (B; kB, MB, GB, TB by 1000; KiB, MiB, GiB, TiB by 1024), above 0. A
/// UsageError naming the flag and the accepted forms otherwise.
int64_t parse_bytes(const std::string& flag, const std::string& text);

/// `B=4` flags → {B: 4}; each name must be a `dim` of the program and each size ≥ 1.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& flags, const elab::Program& prog);

/// The parameter tree `fn` takes first: read from `file` (when given) or
/// initialized from `seed`; nullopt when `fn` takes none.
std::optional<interp::ParamMap> entry_params(const elab::Program& prog, const core::Function& fn,
                                             const std::string& file, uint64_t seed,
                                             const std::map<std::string, int64_t>& dims);

/// `--realize @realization.json` (the `@` is optional): the solver's
/// decisions, checked against `entry` (their file must name it) and the
/// program's marks; a UsageError naming the file and every problem. A
/// gradient's decisions (`solve --of gradient`) are checked against
/// `entry_vjp`, the entry's vjp the command evaluates, and refused where
/// it evaluates none (-1).
precision::RealizationFile load_realization(const std::string& flag, const elab::Program& prog, int entry,
                                            const std::map<std::string, int64_t>& dims, int entry_vjp = -1);

/// Adds `--product-step fma|separate` to `sub`, writing `fused` (true for
/// fma, which `fused` should start as: the default): how a product's steps
/// round (precision::RealizeOptions::fused_products). Returns the option, so
/// that a command can tell whether it was given.
CLI::Option* add_product_step_option(CLI::App& sub, bool& fused);

/// Adds an option naming a file to write (io::write_file_atomically: `-` is
/// standard output, a symbolic link is followed, a device or FIFO is written
/// in place). An empty name is refused by the flag's name: it would read as
/// "not given" and write nothing without a word.
CLI::Option* add_output_option(CLI::App& sub, const std::string& flags, std::string& path, const std::string& help);
/// A check that refuses an empty value with `why` (a path flag given "" would
/// read as not given and fall back without a word); `name` is its type in --help.
CLI::Validator non_empty(const std::string& why, const std::string& name);

/// The threads a native kernel may use unless --threads says: the machine's cores.
int default_threads();

/// The profile file `quire run` and `quire train` plan the native kernels'
/// layouts under ("" for the shipped one): --profile's file when given; else
/// QUIRE_PROFILE's (`shipped`, `machine`, or a profile file, read as
/// --profile's; a UsageError naming the variable where no such file
/// exists); else (and for `machine`) the profile for this machine
/// (quire/calibrate/machine_profile.h), measured once, on first use, with a
/// note on stderr.
std::string execution_profile(const std::string& given);

/// `--grad`: the arguments a training step differentiates `entry` with
/// respect to: θ, or every argument that can have a cotangent when it takes
/// no parameters; a UsageError when there is none.
std::vector<int> gradient_wrt(const elab::Program& prog, int entry);

/// The entry function by name (`loss`, `Tower.apply`), or a UsageError listing the choices.
int find_entry(const elab::Program& prog, const std::string& name);

}  // namespace quire::cli
