#pragma once
// `quire export --target pytorch`: the functions that chosen entries reach, as
// PyTorch modules (docs/export.md). One Python module per source file that
// holds a reached function (`06_tower.qr` → `_06_tower.py`), the prelude's
// reached functions in `quire_prelude.py`, the helpers in `quire_runtime.py`,
// and a README.md saying how to load parameters and call the entries.
//
// Requires: an elaborated program without errors. The translation reads
// elaborated Core (no realization: it computes in float64 as the reference
// interpreter does under --precision f64) and keeps every site's value as a
// Python variable, so that a reader can follow Core line by line.

#include <stdexcept>
#include <string>
#include <vector>

#include "quire/core/program.h"

namespace quire::exports {

/// An entry that reaches an operation PyTorch cannot be given (the reverse
/// sweep's own): the message names the function and the site.
struct ExportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One file of the export: its name in the output folder and its text.
struct ExportedFile {
  std::string name;
  std::string text;
};

/// The modules for `entries` (function indices), the runtime helpers and the
/// README, in a stable order: the user's files in the program's file order,
/// then quire_prelude.py, quire_runtime.py and README.md. `source` is the
/// program's path as the command line gave it (for the README's commands).
std::vector<ExportedFile> export_pytorch(const elab::Program& prog, const std::vector<int>& entries,
                                         const std::string& source);

}  // namespace quire::exports
