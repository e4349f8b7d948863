#pragma once
// The explain document as data: sections of paragraphs, tables, listings,
// bar charts and command lines, rendered once as Markdown and once as one
// self-contained HTML file (inline CSS and SVG, no JavaScript, nothing
// fetched). Both renderings are functions of the document alone, so the same
// document gives the same bytes.

#include <map>
#include <string>
#include <variant>
#include <vector>

namespace quire::explain {

/// A paragraph of prose. `code` spans are written between backquotes in
/// `text`, and links to a section or a row as `[text](#anchor)`, both in
/// Markdown's own notation; the HTML rendering makes them <code> and <a>.
struct Paragraph {
  std::string text;
};

/// A table: a header row and rows of as many cells. A cell may hold
/// backquoted code spans, as a paragraph does.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_ids;  ///< an anchor per row (empty, or one per row)
};

/// A printout, verbatim (monospace, no markup inside).
struct Listing {
  std::string text;
};

/// Horizontal bars, one per label, drawn to scale (the largest value fills
/// the width). In Markdown it is a table of the values; in HTML an SVG
/// chart with the values printed beside the bars.
struct BarChart {
  std::string caption;
  std::string unit;  ///< what a value is, e.g. "‖∂L/∂v‖₁"
  std::vector<std::string> labels;
  std::vector<double> values;  ///< ≥ 0, one per label
};

/// Command lines that print what a section shows, each one runnable as it
/// stands ($DOC being the document's folder).
struct Commands {
  std::vector<std::string> lines;
};

using Block = std::variant<Paragraph, Table, Listing, BarChart, Commands>;

/// A section: `id` is its anchor (letters, digits, '-'), `heading` what it is
/// called ("§7 Fusion"), and `level` 2 for a section, 3 for a subsection.
struct Section {
  std::string id;
  std::string heading;
  int level = 2;
  std::vector<Block> blocks;
};

struct Document {
  std::string title;
  std::vector<Section> sections;
  /// Names that the HTML links wherever a listing or a code span shows them
  /// whole (a site name, `Block.apply/%9`, to its row in §12), by anchor.
  std::map<std::string, std::string> links;
};

/// The document as GitHub-flavoured Markdown: a `#` title, `##`/`###`
/// headings each after an `<a id>` of its anchor (so `[…](#id)` links
/// resolve), pipe tables (a `|` in a cell escaped),
/// listings fenced with enough backquotes to enclose their text.
std::string render_markdown(const Document& doc);

/// The document as one HTML5 file: a table of contents linking to every
/// section, inline CSS, each chart an inline SVG, every text escaped.
std::string render_html(const Document& doc);

}  // namespace quire::explain
