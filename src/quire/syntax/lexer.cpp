#include "quire/syntax/lexer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace quire::syntax {

namespace {

/// One decoded code point, or `ok == false` for a byte that starts no valid
/// UTF-8 sequence (then `length` is 1, so the lexer skips exactly that byte).
struct CodePoint {
  uint32_t value = 0;
  uint32_t length = 1;
  bool ok = false;
};

/// Strict UTF-8: rejects overlong forms, surrogates and values past U+10FFFF,
/// so that every accepted identifier has exactly one byte spelling.
CodePoint decode_utf8(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true};
  uint32_t length = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (length == 0 || b0 > 0xF4 || i + length > s.size()) return {};
  uint32_t value = b0 & (0x7F >> length);
  for (uint32_t k = 1; k < length; ++k) {
    unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return {};
    value = (value << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kMinimum[length] || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return {};
  return {value, length, true};
}

bool is_ascii_letter(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/// The Greek letters that may appear in identifiers (U+0391–U+03A9, U+03B1–U+03C9).
bool is_greek(uint32_t c) { return (c >= 0x391 && c <= 0x3A9) || (c >= 0x3B1 && c <= 0x3C9); }

constexpr uint32_t kDoubleStruckR = 0x211D;  // ℝ

/// ASCII names of the Greek letters: a whole identifier spelled so is the
/// letter (`theta` and `θ` are one identifier), capitalized for capitals.
struct GreekName {
  const char* ascii;
  const char* lower;
  const char* upper;
};
constexpr GreekName kGreekNames[] = {
    {"alpha", "α", "Α"}, {"beta", "β", "Β"},     {"gamma", "γ", "Γ"},     {"delta", "δ", "Δ"},
    {"epsilon", "ε", "Ε"}, {"zeta", "ζ", "Ζ"},   {"eta", "η", "Η"},       {"theta", "θ", "Θ"},
    {"iota", "ι", "Ι"},  {"kappa", "κ", "Κ"},    {"lambda", "λ", "Λ"},    {"mu", "μ", "Μ"},
    {"nu", "ν", "Ν"},    {"xi", "ξ", "Ξ"},       {"omicron", "ο", "Ο"},   {"pi", "π", "Π"},
    {"rho", "ρ", "Ρ"},   {"sigma", "σ", "Σ"},    {"tau", "τ", "Τ"},       {"upsilon", "υ", "Υ"},
    {"phi", "φ", "Φ"},   {"chi", "χ", "Χ"},      {"psi", "ψ", "Ψ"},       {"omega", "ω", "Ω"},
};

std::string canonical_identifier(std::string_view word) {
  for (const GreekName& g : kGreekNames) {
    std::string_view ascii = g.ascii;
    if (word == ascii) return g.lower;
    if (word.size() == ascii.size() && word[0] == ascii[0] - 'a' + 'A' && word.substr(1) == ascii.substr(1))
      return g.upper;
  }
  return std::string(word);
}

/// Why a character cannot start a token, for the E0101 hint.
std::string unexpected_hint(uint32_t c) {
  switch (c) {
    case ';': return "lines end at a line break; quire has no `;`";
    case '\'': return "strings are written in double quotes";
    case '|': return "the pipeline operator is `|>`";
    case '!': return "`not equal` is `!=` (or `≠`)";
    case 0x2212: return "write the minus sign as `-`";
    case 0xD7: return "write multiplication as `*`, or `·` (`@`) for a contraction";
    default: return "identifiers use ASCII letters, digits, `_` and Greek letters";
  }
}

class Lexer {
 public:
  Lexer(const SourceManager& sources, FileId file, DiagnosticSink& sink)
      : file_(file), text_(sources.file(file).text), sink_(sink) {}

  std::vector<Token> run() {
    while (pos_ < text_.size()) step();
    flush_unexpected();
    push(TokenKind::End, pos_, 0, "");
    return std::move(tokens_);
  }

 private:
  SourceRange range(size_t begin, size_t length) const {
    return {{file_, static_cast<uint32_t>(begin)}, static_cast<uint32_t>(length)};
  }

  void push(TokenKind kind, size_t begin, size_t length, std::string text) {
    Token t;
    t.kind = kind;
    t.range = range(begin, length);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  bool starts_with(std::string_view s) const { return text_.substr(pos_, s.size()) == s; }

  // Consecutive characters that start no token are one E0101, so a binary
  // file costs one diagnostic per run of garbage rather than one per byte.
  void note_unexpected(CodePoint c) {
    if (!in_unexpected_) {
      in_unexpected_ = true;
      unexpected_begin_ = pos_;
      unexpected_first_ = c;
    }
    pos_ += c.length;
  }

  void flush_unexpected() {
    if (!in_unexpected_) return;
    in_unexpected_ = false;
    const CodePoint& c = unexpected_first_;
    size_t length = pos_ - unexpected_begin_;
    std::string what;
    std::string hint;
    if (!c.ok) {
      what = fmt::format("invalid UTF-8 byte 0x{:02X}", static_cast<unsigned char>(text_[unexpected_begin_]));
      hint = "quire source files are UTF-8 text";
    } else if (c.value < 0x20 || c.value == 0x7F) {
      what = fmt::format("unexpected control character U+{:04X}", c.value);
      hint = "quire source files are UTF-8 text";
    } else {
      what = fmt::format("unexpected character `{}` (U+{:04X})", text_.substr(unexpected_begin_, c.length), c.value);
      hint = unexpected_hint(c.value);
    }
    if (length > c.length) what += fmt::format(" (and {} more bytes that start no token)", length - c.length);
    sink_.error("E0101", range(unexpected_begin_, length), what, hint);
  }

  void step() {
    unsigned char b = static_cast<unsigned char>(text_[pos_]);
    if (b == ' ' || b == '\t' || b == '\r') {
      flush_unexpected();
      ++pos_;
      return;
    }
    CodePoint c = decode_utf8(text_, pos_);
    if (!c.ok || !starts_token(c.value)) {
      note_unexpected(c);
      return;
    }
    flush_unexpected();
    if (b == '\n') {
      push(TokenKind::Newline, pos_, 1, "");
      ++pos_;
    } else if (starts_with("--")) {
      skip_comment();
    } else if (is_digit(c.value)) {
      lex_number();
    } else if (is_ascii_letter(c.value) || c.value == '_' || is_greek(c.value)) {
      lex_word();
    } else if (c.value == kDoubleStruckR) {
      push(TokenKind::Ident, pos_, c.length, "ℝ");
      pos_ += c.length;
    } else if (c.value == '"') {
      lex_string();
    } else {
      lex_operator();
    }
  }

  /// Whether `c` can begin a token (or is whitespace handled before).
  bool starts_token(uint32_t c) const {
    if (c == '\n' || is_digit(c) || is_ascii_letter(c) || c == '_' || is_greek(c) || c == kDoubleStruckR) return true;
    if (c == '"') return true;
    return operator_at().first != TokenKind::End;
  }

  /// The operator starting at pos_ and its byte length; End when none does.
  std::pair<TokenKind, size_t> operator_at() const {
    // Most bytes start no operator: reject them before searching the table.
    static constexpr std::string_view kFirstBytes = "()[]{},:.=+-*/^<>!|@\xC2\xE2";
    if (kFirstBytes.find(text_[pos_]) == std::string_view::npos) return {TokenKind::End, 0};
    struct Spelling {
      std::string_view text;
      TokenKind kind;
    };
    // Longest spellings first: `...` before `.`, `->` before `-`, `<=` before `<`.
    static constexpr Spelling kOperators[] = {
        {"...", TokenKind::Ellipsis}, {"…", TokenKind::Ellipsis}, {"->", TokenKind::Arrow},
        {"→", TokenKind::Arrow},      {"<=", TokenKind::Le},      {"≤", TokenKind::Le},
        {">=", TokenKind::Ge},        {"≥", TokenKind::Ge},       {"!=", TokenKind::Ne},
        {"≠", TokenKind::Ne},         {"==", TokenKind::EqEq},    {"|>", TokenKind::Pipe},
        {"·", TokenKind::Dot},        {"@", TokenKind::Dot},      {"(", TokenKind::LParen},
        {")", TokenKind::RParen},     {"[", TokenKind::LBracket}, {"]", TokenKind::RBracket},
        {"{", TokenKind::LBrace},     {"}", TokenKind::RBrace},   {",", TokenKind::Comma},
        {":", TokenKind::Colon},      {".", TokenKind::Period},   {"=", TokenKind::Assign},
        {"+", TokenKind::Plus},       {"-", TokenKind::Minus},    {"*", TokenKind::Star},
        {"/", TokenKind::Slash},      {"^", TokenKind::Caret},    {"<", TokenKind::Lt},
        {">", TokenKind::Gt},
    };
    for (const Spelling& s : kOperators)
      if (starts_with(s.text)) return {s.kind, s.text.size()};
    return {TokenKind::End, 0};
  }

  void lex_operator() {
    auto [kind, length] = operator_at();
    push(kind, pos_, length, token_kind_spelling(kind));
    pos_ += length;
  }

  void skip_comment() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }

  void lex_word() {
    size_t begin = pos_;
    while (pos_ < text_.size()) {
      CodePoint c = decode_utf8(text_, pos_);
      if (!c.ok || !(is_ascii_letter(c.value) || is_digit(c.value) || c.value == '_' || is_greek(c.value))) break;
      pos_ += c.length;
    }
    std::string_view word = text_.substr(begin, pos_ - begin);
    TokenKind kind = keyword_kind(word);
    push(kind, begin, word.size(), kind == TokenKind::Ident ? canonical_identifier(word) : std::string(word));
  }

  void lex_number() {
    size_t begin = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    // After `.` a number is a tuple index: `pair.0.1` is two indices, not 0.1.
    bool index_only = !tokens_.empty() && tokens_.back().kind == TokenKind::Period;
    bool is_float = false;
    if (!index_only) {
      if (pos_ + 1 < text_.size() && text_[pos_] == '.' && is_digit(text_[pos_ + 1])) {
        is_float = true;
        ++pos_;
        while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
      }
      if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
        size_t digits = pos_ + 1;
        if (digits < text_.size() && (text_[digits] == '+' || text_[digits] == '-')) ++digits;
        if (digits < text_.size() && is_digit(text_[digits])) {
          is_float = true;
          pos_ = digits;
          while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
        }
      }
    }
    std::string spelled(text_.substr(begin, pos_ - begin));
    push(is_float ? TokenKind::Float : TokenKind::Int, begin, spelled.size(), spelled);
    Token& t = tokens_.back();
    if (is_float) {
      double value = std::strtod(spelled.c_str(), nullptr);
      if (std::isinf(value)) {
        sink_.error("E0102", t.range, fmt::format("number `{}` is too large for a 64-bit float", spelled),
                    "the largest finite f64 is about 1.8e308");
        value = 0;
      }
      t.number = value;  // an underflow to 0 or a subnormal is not an error
      return;
    }
    int64_t value = 0;
    for (char d : spelled) {
      if (value > (std::numeric_limits<int64_t>::max() - (d - '0')) / 10) {
        sink_.error("E0102", t.range, fmt::format("integer `{}` does not fit in 64 bits", spelled),
                    "the largest integer is 9223372036854775807; write a float (`1e20`) for a larger number");
        value = 0;
        break;
      }
      value = value * 10 + (d - '0');
    }
    t.integer = value;
    t.number = static_cast<double>(value);
  }

  void lex_string() {
    size_t begin = pos_++;
    std::string contents;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        size_t end = pos_;
        if (end > begin && text_[end - 1] == '\r') --end;
        sink_.error("E0103", range(begin, end - begin), "unterminated string",
                    "close the string with `\"` before the end of the line");
        push(TokenKind::String, begin, end - begin, std::move(contents));
        return;
      }
      char ch = text_[pos_];
      if (ch == '"') {
        ++pos_;
        push(TokenKind::String, begin, pos_ - begin, std::move(contents));
        return;
      }
      if (ch == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] != '\n') {
        char e = text_[pos_ + 1];
        const char* decoded = e == '"' ? "\"" : e == '\\' ? "\\" : e == 'n' ? "\n" : e == 't' ? "\t" : nullptr;
        if (decoded) {
          contents += decoded;
          pos_ += 2;
          continue;
        }
        CodePoint c = decode_utf8(text_, pos_ + 1);
        sink_.error("E0104", range(pos_, 1 + c.length),
                    fmt::format("unknown escape `\\{}` in a string", c.ok ? text_.substr(pos_ + 1, c.length) : "?"),
                    "the escapes are `\\\"`, `\\\\`, `\\n` and `\\t`");
        ++pos_;  // keep the escaped character itself
        continue;
      }
      CodePoint c = decode_utf8(text_, pos_);
      if (!c.ok || (c.value < 0x20 && c.value != '\t') || c.value == 0x7F) {
        sink_.error("E0101", range(pos_, c.length),
                    c.ok ? fmt::format("unexpected control character U+{:04X} in a string", c.value)
                         : fmt::format("invalid UTF-8 byte 0x{:02X} in a string", static_cast<unsigned char>(ch)),
                    "write a line break as `\\n` and a tab as `\\t`");
        pos_ += c.length;
        continue;
      }
      contents.append(text_.substr(pos_, c.length));
      pos_ += c.length;
    }
  }

  FileId file_;
  std::string_view text_;
  DiagnosticSink& sink_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  bool in_unexpected_ = false;
  size_t unexpected_begin_ = 0;
  CodePoint unexpected_first_;
};

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

}  // namespace

std::vector<Token> lex(const SourceManager& sources, FileId file, DiagnosticSink& sink) {
  return Lexer(sources, file, sink).run();
}

std::string dump_tokens(const SourceManager& sources, const std::vector<Token>& tokens) {
  std::string out;
  for (const Token& t : tokens) {
    LineCol lc = sources.line_col(t.range.begin);
    out += fmt::format("{}:{} {}", lc.line, lc.column, token_kind_name(t.kind));
    if (t.kind == TokenKind::String) out += " " + quoted(t.text);
    else if (t.kind != TokenKind::Newline && t.kind != TokenKind::End) out += " " + t.text;
    out += '\n';
  }
  return out;
}

}  // namespace quire::syntax
