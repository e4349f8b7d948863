#include "quire/support/diagnostics.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace quire {

namespace {
/// The most code points of a source line an error shows, and how many of them
/// come before the caret when the line must be cut.
constexpr size_t kShownColumns = 120;
constexpr size_t kColumnsBeforeCaret = 40;
}  // namespace

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
  // Show the line with non-printable bytes replaced, so binary input stays
  // readable; `starts[i]` is where code point i begins in `shown`.
  std::string shown;
  std::vector<size_t> starts;
  for (unsigned char c : line) {
    if ((c & 0xC0) != 0x80) starts.push_back(shown.size());
    if (c == '\t') shown += ' ';
    else if (c < 0x20 || c == 0x7F) shown += '?';
    else shown += static_cast<char>(c);
  }
  const size_t cps = starts.size();
  starts.push_back(shown.size());
  // Caret width: the range's code points, clipped to the line.
  size_t width = 0;
  const std::string& text = file.text;
  for (uint32_t i = d.range.begin.offset; i < d.range.begin.offset + d.range.length && i < text.size(); ++i) {
    if (text[i] == '\n') break;
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++width;
  }
  width = std::max<size_t>(width, 1);
  size_t col = std::min<size_t>(lc.column - 1, cps);
  // A long line (generated code, a minified file, hostile input) is shown as a
  // window that starts a little before the caret, each cut marked with `…`:
  // an error must stay readable, not print the whole line.
  size_t first = 0, last = cps;
  if (cps > kShownColumns) {
    first = std::min(col > kColumnsBeforeCaret ? col - kColumnsBeforeCaret : 0, cps - kShownColumns);
    last = first + kShownColumns;
  }
  const std::string before = first > 0 ? "…" : "";
  const std::string after = last < cps ? "…" : "";
  out += fmt::format("{:5} | {}{}{}\n", lc.line, before, shown.substr(starts[first], starts[last] - starts[first]), after);
  width = std::min(width, std::max<size_t>(last, col + 1) - col);
  col = col - first + (first > 0 ? 1 : 0);
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
