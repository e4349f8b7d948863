#include "quire/support/text.h"

namespace quire {

namespace {

bool starts_code_point(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) != 0x80; }

}  // namespace

size_t code_points(std::string_view text) {
  size_t n = 0;
  for (char byte : text) n += starts_code_point(byte) ? 1 : 0;
  return n;
}

std::string pad_columns(std::string_view text, size_t width) {
  const size_t n = code_points(text);
  std::string out(text);
  if (n < width) out.append(width - n, ' ');
  return out;
}

std::string clip_columns(std::string_view text, size_t width) {
  if (code_points(text) <= width) return std::string(text);
  const size_t kept = width >= 3 ? width - 3 : 0;
  size_t points = 0, end = 0;
  for (; end < text.size(); ++end) {
    if (starts_code_point(text[end]) && points++ == kept) break;
  }
  return std::string(text.substr(0, end)) + "...";
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r')
      out += c;
  }
  return out;
}

}  // namespace quire
