#pragma once
// Helpers shared by the unit tests of elaboration and of the interpreter:
// programs elaborated from in-memory files, their diagnostics as
// "line:col Ecode message" strings, and Core printouts.

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/core/printer.h"
#include "quire/elab/elaborator.h"

namespace quire::elab::testing {

/// A program elaborated from in-memory files, with its diagnostics.
struct Elaborated {
  DiagnosticSink sink;
  std::unique_ptr<Program> prog;

  bool ok() const { return !sink.has_errors(); }
  /// Each error as "file:line:col Ecode message", in report order.
  std::vector<std::string> errors() const {
    std::vector<std::string> out;
    for (const Diagnostic& d : sink.all()) {
      if (d.severity != Severity::Error) continue;
      LineCol lc = prog->sources.line_col(d.range.begin);
      out.push_back(fmt::format("{}:{}:{} {} {}", prog->sources.file(d.range.begin.file).path, lc.line, lc.column,
                                d.code, d.message));
    }
    return out;
  }
  /// Whether some error has this code, starts at line:col of `file` and
  /// contains `fragment` in its message.
  bool has_error(const std::string& code, uint32_t line, uint32_t col, const std::string& fragment,
                 const std::string& file = "main.qr") const {
    for (const Diagnostic& d : sink.all()) {
      LineCol lc = prog->sources.line_col(d.range.begin);
      if (d.code == code && lc.line == line && lc.column == col &&
          prog->sources.file(d.range.begin.file).path == file && d.message.find(fragment) != std::string::npos)
        return true;
    }
    return false;
  }
  /// The hint of the first error with this code ("" if none).
  std::string hint_of(const std::string& code) const {
    for (const Diagnostic& d : sink.all())
      if (d.code == code) return d.hint;
    return "";
  }
  std::string rendered() const { return sink.render(prog->sources); }
  /// A function by name; fails the test (and returns the first) when absent.
  const core::Function& fn(const std::string& name) const {
    int f = prog->find_function(name);
    if (f < 0) throw std::runtime_error("no function " + name);
    return prog->functions[f];
  }
  std::string type(const Type& t) const { return prog->printer()(t); }
  /// The Core text of one function (the functions it calls excluded).
  std::string core_of(const std::string& name) const {
    std::string all = core::print_core(*prog);
    std::string head = "fn " + name;
    size_t at = all.find(head + "(");
    if (at == std::string::npos) at = all.find(head + "{");
    if (at == std::string::npos) return "";
    size_t end = all.find("\n}\n", at);
    return all.substr(at, end == std::string::npos ? std::string::npos : end + 3 - at);
  }
};

/// Elaborates `main` among in-memory `files` (path → text; imports are
/// resolved relative to the importing file, as on disk).
inline std::unique_ptr<Elaborated> elaborate_files(const std::map<std::string, std::string>& files,
                                                   const std::string& main = "main.qr") {
  auto e = std::make_unique<Elaborated>();
  FileReader reader = [files](const std::string& path, std::string& error) -> std::optional<std::string> {
    auto it = files.find(std::filesystem::path(path).lexically_normal().generic_string());
    if (it == files.end()) {
      error = "no such file";
      return std::nullopt;
    }
    return it->second;
  };
  e->prog = elaborate(main, e->sink, reader);
  return e;
}

/// Elaborates one file, `main.qr`.
inline std::unique_ptr<Elaborated> elaborate_text(const std::string& text) {
  return elaborate_files({{"main.qr", text}});
}

/// The shipped tutorial's 07_train.qr (as `main.qr`) with the files it imports.
inline std::unique_ptr<Elaborated> elaborate_tutorial() {
  const std::filesystem::path dir = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial";
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::map<std::string, std::string> files;
  for (const char* name : {"01_linear.qr", "02_norm.qr", "03_block.qr", "04_loss.qr", "05_dropout.qr", "06_tower.qr"})
    files[name] = read(dir / name);
  files["main.qr"] = read(dir / "07_train.qr");
  return elaborate_files(files);
}

/// The tutorial's Linear and RMSNorm, for tests that build on them.
inline const char* kLinear = R"(module Linear{In Out : dim} {
  param w : ℝ[In, Out]  init = xavier_uniform
  param b : ℝ[Out]      init = zeros

  fn apply(x : ℝ[..., In]) -> ℝ[..., Out] =
    x · w + b
}
)";

}  // namespace quire::elab::testing
