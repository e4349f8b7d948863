#include "quire/explain/document.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "quire/support/text.h"

namespace quire::explain {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

/// A value as the charts print it: four significant digits, the exponent
/// always shown, as quire's printouts write magnitudes (1.234e-5).
std::string chart_value(double v) { return fmt::format("{:.3e}", v); }

// ---- Markdown ----

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

void markdown_table(std::string& out, const std::vector<std::string>& header,
                    const std::vector<std::vector<std::string>>& rows, const std::vector<std::string>& row_ids = {}) {
  out += "|";
  for (const std::string& h : header) out += " " + markdown_cell(h) + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "|";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      // A row's anchor rides in its first cell, where a link to it lands.
      const std::string anchor = c == 0 && r < row_ids.size() ? "<a id=\"" + row_ids[r] + "\"></a>" : "";
      out += " " + anchor + markdown_cell(rows[r][c]) + " |";
    }
    out += "\n";
  }
  out += "\n";
}

/// A fence longer than any run of backquotes in `text`, so that a listing
/// holding ``` (a Markdown README, say) cannot end its own block.
std::string fence_for(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

void markdown_block(std::string& out, const Block& block) {
  std::visit(Overloaded{
                 [&](const Paragraph& p) { out += p.text + "\n\n"; },
                 [&](const Table& t) { markdown_table(out, t.header, t.rows, t.row_ids); },
                 [&](const Listing& l) {
                   const std::string fence = fence_for(l.text);
                   out += fence + "text\n" + l.text;
                   if (!l.text.empty() && l.text.back() != '\n') out += "\n";
                   out += fence + "\n\n";
                 },
                 [&](const BarChart& c) {
                   out += c.caption + "\n\n";
                   std::vector<std::vector<std::string>> rows;
                   for (size_t i = 0; i < c.labels.size(); ++i) rows.push_back({c.labels[i], chart_value(c.values[i])});
                   markdown_table(out, {"", c.unit}, rows);
                 },
                 [&](const Commands& c) {
                   if (c.lines.empty()) return;
                   out += c.lines.size() == 1 ? "Command:\n\n" : "Commands:\n\n";
                   const std::string text = fmt::format("{}\n", fmt::join(c.lines, "\n"));
                   const std::string fence = fence_for(text);
                   out += fence + "sh\n" + text + fence + "\n\n";
                 },
             },
             block);
}

// ---- HTML ----

/// HTML text: the XML escape serves HTML5 too (support/text.h).
std::string escape_html(const std::string& text) { return xml_escape(text); }

/// A character that can continue a name (a site's `Block.apply/%9`): a
/// linked name must not be part of a longer one (`loss/%7` in `loss/%70`).
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '%' ||
         c == '.' || c == '/' || (static_cast<unsigned char>(c) & 0x80) != 0;
}

/// Escaped `text` with every whole occurrence of a linked name made a link
/// to its anchor (the longest name wins where two start at one place).
std::string linked_html(const std::string& text, const std::map<std::string, std::string>& links) {
  if (links.empty()) return escape_html(text);
  std::string out;
  size_t plain_from = 0;
  for (size_t i = 0; i < text.size();) {
    const std::pair<const std::string, std::string>* best = nullptr;
    if (i == 0 || !name_char(text[i - 1]))
      for (const auto& link : links)
        if (text.compare(i, link.first.size(), link.first) == 0 &&
            (i + link.first.size() == text.size() || !name_char(text[i + link.first.size()])) &&
            (!best || link.first.size() > best->first.size()))
          best = &link;
    if (!best) {
      ++i;
      continue;
    }
    out += escape_html(text.substr(plain_from, i - plain_from));
    out += "<a href=\"#" + best->second + "\">" + escape_html(best->first) + "</a>";
    i += best->first.size();
    plain_from = i;
  }
  return out + escape_html(text.substr(plain_from));
}

/// Prose with its backquoted spans as <code> (linked names linked) and its
/// `[text](#anchor)` as links; an unmatched backquote or bracket is kept as
/// a character.
std::string inline_html(const std::string& text, const std::map<std::string, std::string>& links) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '`') {
      const size_t close = text.find('`', i + 1);
      if (close != std::string::npos) {
        out += "<code>" + linked_html(text.substr(i + 1, close - i - 1), links) + "</code>";
        i = close + 1;
        continue;
      }
    }
    if (text[i] == '[') {
      const size_t mid = text.find("](#", i + 1);
      const size_t close = mid == std::string::npos ? mid : text.find(')', mid + 3);
      if (close != std::string::npos && text.find('`', i) > mid) {
        out += "<a href=\"#" + escape_html(text.substr(mid + 3, close - mid - 3)) + "\">" +
               escape_html(text.substr(i + 1, mid - i - 1)) + "</a>";
        i = close + 1;
        continue;
      }
    }
    out += escape_html(std::string(1, text[i]));
    ++i;
  }
  return out;
}

/// An SVG of horizontal bars: a row of 18 px per label, the label on the
/// left, the bar scaled to the largest value, the value after it.
std::string svg_chart(const BarChart& c) {
  constexpr int kRow = 18, kLabelWidth = 260, kBarWidth = 360, kValueWidth = 90;
  const int height = kRow * static_cast<int>(c.labels.size()) + 4;
  const int width = kLabelWidth + kBarWidth + kValueWidth;
  double largest = 0;
  for (double v : c.values) largest = std::max(largest, v);
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"{}\">\n",
      width, height, width, height, escape_html(c.caption));
  for (size_t i = 0; i < c.labels.size(); ++i) {
    const int y = kRow * static_cast<int>(i) + 2;
    const double share = largest > 0 && std::isfinite(c.values[i]) ? c.values[i] / largest : 0;
    const double bar = std::max(0.0, share) * (kBarWidth - 8);
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"label\">{}</text>"
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" class=\"bar\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" class=\"value\">{}</text>\n",
        kLabelWidth - 6, y + 13, escape_html(c.labels[i]), kLabelWidth, y + 2, bar, kRow - 4, kLabelWidth + bar + 4,
        y + 13, chart_value(c.values[i]));
  }
  out += "</svg>\n";
  return out;
}

class HtmlWriter {
 public:
  explicit HtmlWriter(const Document& doc) : links_(doc.links) {}

  void block(std::string& out, const Block& b) const {
    std::visit(Overloaded{
                   [&](const Paragraph& p) { out += "<p>" + inline_html(p.text, links_) + "</p>\n"; },
                   [&](const Table& t) { table(out, t); },
                   [&](const Listing& l) { out += "<pre>" + linked_html(l.text, links_) + "</pre>\n"; },
                   [&](const BarChart& c) {
                     out += "<figure>\n" + svg_chart(c) + "<figcaption>" + inline_html(c.caption, links_) + " (" +
                            escape_html(c.unit) + ")</figcaption>\n</figure>\n";
                   },
                   [&](const Commands& c) {
                     if (c.lines.empty()) return;
                     out += std::string("<p class=\"commands\">") + (c.lines.size() == 1 ? "Command:" : "Commands:") +
                            "</p>\n<pre class=\"commands\">";
                     for (const std::string& line : c.lines) out += escape_html(line) + "\n";
                     out += "</pre>\n";
                   },
               },
               b);
  }

 private:
  void table(std::string& out, const Table& t) const {
    out += "<table>\n<thead><tr>";
    for (const std::string& h : t.header) out += "<th>" + inline_html(h, {}) + "</th>";
    out += "</tr></thead>\n<tbody>\n";
    for (size_t r = 0; r < t.rows.size(); ++r) {
      // A row with an anchor is where its name's links land: its own
      // first cell does not link to itself.
      const bool anchored = r < t.row_ids.size();
      out += anchored ? "<tr id=\"" + t.row_ids[r] + "\">" : "<tr>";
      for (size_t c = 0; c < t.rows[r].size(); ++c)
        out += "<td>" + inline_html(t.rows[r][c], anchored && c == 0 ? no_links_ : links_) + "</td>";
      out += "</tr>\n";
    }
    out += "</tbody>\n</table>\n";
  }

  const std::map<std::string, std::string>& links_;
  const std::map<std::string, std::string> no_links_;
};

constexpr const char* kStyle =
    R"(body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;line-height:1.45;color:#1b1b1b}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ccc}h3{margin-top:1.6rem}
pre{background:#f6f6f4;padding:.6rem .8rem;overflow-x:auto;font-size:.82rem;line-height:1.3}
pre.commands{background:#eef3f8}p.commands{margin-bottom:.2rem;font-size:.9rem;color:#444}
code{background:#f1f1ee;padding:0 .2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.88rem}th,td{border:1px solid #d4d4d0;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f1f1ee}nav ol{columns:2}figure{margin:.8rem 0}figcaption{font-size:.85rem;color:#444}
svg .label{font:11px monospace;fill:#222}svg .value{font:11px monospace;fill:#444}svg .bar{fill:#4a78a8}
)";

}  // namespace

std::string render_markdown(const Document& doc) {
  std::string out = "# " + doc.title + "\n\n";
  for (const Section& s : doc.sections) {
    out +=
        "<a id=\"" + s.id + "\"></a>\n\n" + std::string(static_cast<size_t>(s.level), '#') + " " + s.heading + "\n\n";
    for (const Block& b : s.blocks) markdown_block(out, b);
  }
  while (out.size() >= 2 && out.compare(out.size() - 2, 2, "\n\n") == 0) out.pop_back();
  return out;
}

std::string render_html(const Document& doc) {
  const HtmlWriter writer(doc);
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                    escape_html(doc.title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<h1>" +
                    inline_html(doc.title, {}) + "</h1>\n<nav>\n<ol>\n";
  for (const Section& s : doc.sections)
    if (s.level == 2) out += "<li><a href=\"#" + s.id + "\">" + escape_html(s.heading) + "</a></li>\n";
  out += "</ol>\n</nav>\n";
  for (const Section& s : doc.sections) {
    out += fmt::format("<section id=\"{}\">\n<h{}>{}</h{}>\n", s.id, s.level, escape_html(s.heading), s.level);
    for (const Block& b : s.blocks) writer.block(out, b);
    out += "</section>\n";
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace quire::explain
