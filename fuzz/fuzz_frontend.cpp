// Feeds arbitrary bytes to the front end as a program's main file: the lexer,
// the parser and the elaborator must return diagnostics, never crash, hang or
// recurse without bound; whatever elaborates is printed and realized under
// every policy (the realization must accept every program the language does). The tutorial's files are importable (from memory), so
// mutations of programs that import them reach elaboration's deeper paths.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "quire/core/printer.h"
#include "quire/elab/elaborator.h"
#include "quire/elab/summary.h"
#include "quire/realize/realization.h"

namespace {

const std::map<std::string, std::string>& tutorial_files() {
  static const std::map<std::string, std::string> files = [] {
    std::map<std::string, std::string> out;
    std::filesystem::path dir = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial";
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".qr") {
        std::ifstream in(e.path(), std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        out["fuzz/" + e.path().filename().string()] = ss.str();
      }
    return out;
  }();
  return files;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string main(reinterpret_cast<const char*>(data), size);
  quire::elab::FileReader reader = [&](const std::string& path, std::string& error) -> std::optional<std::string> {
    if (path == "fuzz/main.qr") return main;
    auto it = tutorial_files().find(path);
    if (it != tutorial_files().end()) return it->second;
    error = "No such file or directory";
    return std::nullopt;
  };
  quire::DiagnosticSink diags;
  auto prog = quire::elab::elaborate("fuzz/main.qr", diags, reader);
  std::string rendered = diags.render(prog->sources);
  if (!diags.has_errors()) {
    // The printers must handle whatever elaborates.
    rendered += quire::elab::print_summary(*prog);
    rendered += quire::elab::print_elab(*prog);
    rendered += quire::core::print_core(*prog);
    const quire::precision::Policy policies[] = {quire::precision::Policy::F32, quire::precision::Policy::BF16};
    const quire::FileId main_file = prog->files[prog->main_file].id;
    for (size_t f = 0; f < prog->functions.size(); ++f)
      for (quire::precision::Policy p : policies) {
        if (prog->functions[f].file != main_file) continue;
        auto r = quire::precision::realize(*prog, static_cast<int>(f), {p, false}, {});
        rendered += quire::precision::print_realization(*prog, r);
      }
  }
  return 0;
}
