// quire export FILE --target pytorch -o DIR [--entry E ...]
//
// Writes the functions the entries reach as PyTorch modules into DIR, one
// module per source file, with the helpers and a README (export/,
// docs/export.md). Without --entry, every function of the main file is an
// entry. Each file is written atomically; nothing is written when an entry
// cannot be exported.

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/export/pytorch_export.h"
#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"

namespace quire::cli {

namespace {

struct ExportOptions {
  std::string file;
  std::string target;
  std::string out;
  std::vector<std::string> entries;
};

/// The entries: those named, or every function of the main file (a vjp
/// elaboration added excepted).
std::vector<int> export_entries(const elab::Program& prog, const std::vector<std::string>& named) {
  std::vector<int> out;
  for (const std::string& name : named) out.push_back(find_entry(prog, name));
  if (!named.empty()) return out;
  const FileId main = prog.files.at(static_cast<size_t>(prog.main_file)).id;
  for (size_t f = 0; f < prog.functions.size(); ++f)
    if (prog.functions[f].file == main && prog.functions[f].primal < 0) out.push_back(static_cast<int>(f));
  if (out.empty()) throw UsageError("the main file has no function to export; name one with --entry");
  return out;
}

int run_export(const ExportOptions& o) {
  if (o.target == "c") throw UsageError("--target c: the C export is not built yet; --target pytorch is");
  if (o.target != "pytorch") throw UsageError(fmt::format("--target {}: unknown target; the target is pytorch", o.target));
  std::unique_ptr<elab::Program> prog = load_program(o.file);
  if (!prog) return 1;
  const std::vector<int> entries = export_entries(*prog, o.entries);
  std::vector<exports::ExportedFile> files;
  try {
    files = exports::export_pytorch(*prog, entries, o.file);
  } catch (const exports::ExportError& e) {
    throw UsageError(fmt::format("cannot export to PyTorch: {}", e.what()));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec || !std::filesystem::is_directory(o.out))
    throw UsageError(fmt::format("-o {}: cannot make the folder ({})", o.out, ec ? ec.message() : "not a folder"));
  size_t lines = 0;
  for (const exports::ExportedFile& f : files) {
    const std::string path = (std::filesystem::path(o.out) / f.name).string();
    try {
      io::write_file_atomically(path, f.text);
    } catch (const io::IoError& e) {
      throw UsageError(fmt::format("-o {}: {}", o.out, e.what()));
    }
    lines += static_cast<size_t>(std::count(f.text.begin(), f.text.end(), '\n'));
  }
  std::vector<std::string> names;
  for (int e : entries) names.push_back(prog->functions[static_cast<size_t>(e)].name);
  std::cout << fmt::format("quire export: {} ({}) as PyTorch: {} files, {} lines, into {}\n",
                           entries.size() == 1 ? "1 entry" : fmt::format("{} entries", entries.size()),
                           fmt::join(names, ", "), files.size(), lines, o.out);
  return 0;
}

}  // namespace

Handler setup_export(CLI::App& sub) {
  auto o = std::make_shared<ExportOptions>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--target", o->target, "what to write: pytorch (the C export is not built yet)")->required();
  sub.add_option("-o,--out", o->out, "the folder to write the modules into (made if missing)")
      ->required()
      ->check(non_empty("-o needs a folder", "DIR"));
  sub.add_option("--entry", o->entries,
                 "a function to export, with everything it calls (repeat for several; default: every function "
                 "of the main file)");
  return [o] { return run_export(*o); };
}

}  // namespace quire::cli
