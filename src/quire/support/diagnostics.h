#pragma once
// User-facing diagnostics: `file:line:col: error[Ennn]: message`, the source
// line, a caret under the offending text, and an optional hint. Stages report
// into a DiagnosticSink and keep going, so one run finds many errors; the
// catalogue of codes is docs/errors.md.

#include <string>
#include <vector>

#include "quire/support/source.h"

namespace quire {

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  std::string code;  ///< "E0201"; empty for notes
  SourceRange range;
  bool has_location = true;  ///< false for a whole-file problem (e.g. unreadable import)
  std::string message;
  std::string hint;
};

/// Collects diagnostics. After `max_errors` errors it stops recording (and
/// `saturated()` says so) so that garbage input cannot produce unbounded output.
class DiagnosticSink {
 public:
  explicit DiagnosticSink(size_t max_errors = 50) : max_errors_(max_errors) {}

  void error(std::string code, SourceRange range, std::string message, std::string hint = "");
  void warning(std::string code, SourceRange range, std::string message, std::string hint = "");
  void add(Diagnostic d);

  bool has_errors() const { return error_count_ > 0; }
  size_t error_count() const { return error_count_; }
  bool saturated() const { return error_count_ >= max_errors_; }
  const std::vector<Diagnostic>& all() const { return diagnostics_; }

  /// Every diagnostic rendered, in the order reported.
  std::string render(const SourceManager& sources) const;

 private:
  std::vector<Diagnostic> diagnostics_;
  size_t error_count_ = 0;
  size_t max_errors_;
};

/// One diagnostic in the `file:line:col: error[E…]: …` form with the source line and caret.
std::string render_diagnostic(const SourceManager& sources, const Diagnostic& d);

}  // namespace quire
