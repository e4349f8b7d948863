#include "quire/support/diagnostics.h"

#include <fmt/format.h>

namespace quire {

void DiagnosticSink::error(std::string code, SourceRange range, std::string message, std::string hint) {
  add({Severity::Error, std::move(code), range, true, std::move(message), std::move(hint)});
}

void DiagnosticSink::warning(std::string code, SourceRange range, std::string message, std::string hint) {
  add({Severity::Warning, std::move(code), range, true, std::move(message), std::move(hint)});
}

void DiagnosticSink::add(Diagnostic d) {
  if (d.severity == Severity::Error) {
    if (error_count_ >= max_errors_) return;
    ++error_count_;
  }
  diagnostics_.push_back(std::move(d));
}

static const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Note: return "note";
  }
  return "error";
}

std::string render_diagnostic(const SourceManager& sources, const Diagnostic& d) {
  std::string head = d.code.empty() ? severity_name(d.severity) : fmt::format("{}[{}]", severity_name(d.severity), d.code);
  const SourceFile& file = sources.file(d.range.begin.file);
  if (!d.has_location) {
    std::string out = fmt::format("{}: {}: {}\n", file.path, head, d.message);
    if (!d.hint.empty()) out += fmt::format("  hint: {}\n", d.hint);
    return out;
  }
  LineCol lc = sources.line_col(d.range.begin);
  std::string out = fmt::format("{}:{}:{}: {}: {}\n", file.path, lc.line, lc.column, head, d.message);
  std::string_view line = sources.line_text(d.range.begin.file, lc.line);
  // Show the line with non-printable bytes replaced, so binary input stays readable.
  std::string shown;
  size_t cps = 0;
  for (unsigned char c : line) {
    if (c == '\t') shown += ' ';
    else if (c < 0x20 || c == 0x7F) shown += '?';
    else shown += static_cast<char>(c);
    if ((c & 0xC0) != 0x80) ++cps;
  }
  out += fmt::format("{:5} | {}\n", lc.line, shown);
  // Caret width: the range's code points, clipped to the line.
  size_t width = 0;
  const std::string& text = file.text;
  for (uint32_t i = d.range.begin.offset; i < d.range.begin.offset + d.range.length && i < text.size(); ++i) {
    if (text[i] == '\n') break;
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++width;
  }
  width = std::max<size_t>(width, 1);
  size_t col = lc.column - 1;
  if (col > cps) col = cps;
  out += fmt::format("{:5} | {}{}\n", "", std::string(col, ' '), std::string(width, '^'));
  if (!d.hint.empty()) out += fmt::format("{:5} = hint: {}\n", "", d.hint);
  return out;
}

std::string DiagnosticSink::render(const SourceManager& sources) const {
  std::string out;
  for (const Diagnostic& d : diagnostics_) out += render_diagnostic(sources, d);
  if (saturated()) out += fmt::format("error: stopped after {} errors\n", max_errors_);
  return out;
}

}  // namespace quire
