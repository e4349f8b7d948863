#pragma once
// Elaboration: from the syntax trees of a program's files to the elaborated
// program (program.h) with every function in Core.
//
// Requires: a path to the main file. Produces: the prelude's files loaded
// beside the program's (quire/prelude/prelude.h; their functions are indexed
// after the program's), imports resolved (relative to the importing file; a
// cycle is an error naming the chain), constants bound, modules instantiated
// at their dimensions, every parameter's path and shape, every function body
// type-checked (shapes, named axes, broadcasting; a generic function's size
// parameters inferred at each call) and lowered to Core, regularity classes
// per argument and the effect Rand.
// Errors go to the sink; elaboration continues past them and reports many.
// A program with errors is returned too (for dumps), but must not be run.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "quire/core/program.h"
#include "quire/support/diagnostics.h"

namespace quire::elab {

/// Reads a file's text; nullopt with `error` set when it cannot. Tests and
/// the fuzzer substitute an in-memory reader.
using FileReader = std::function<std::optional<std::string>(const std::string& path, std::string& error)>;
FileReader disk_reader();

/// Elaborates the program whose main file is `path`. Diagnostics are rendered
/// against `program->sources`.
std::unique_ptr<Program> elaborate(const std::string& path, DiagnosticSink& diags,
                                   const FileReader& reader = disk_reader());

/// The limits that keep elaboration bounded on hostile input.
inline constexpr int kMaxImportDepth = 64;
inline constexpr int kMaxModuleDepth = 64;
/// Parameter tensors of one module's tree (flattening a tree of shared
/// sub-modules can otherwise take exponential time).
inline constexpr int64_t kMaxParameterTensors = int64_t{1} << 20;

}  // namespace quire::elab
