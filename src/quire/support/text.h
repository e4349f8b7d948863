// Columns of UTF-8 text in the printed tables: a name counts its code points,
// not its bytes, and is cut only between characters; a count and its noun;
// text made safe inside XML and HTML.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quire {

/// The code points of UTF-8 text: the columns it takes (wide characters aside).
size_t code_points(std::string_view text);

/// `text` followed by spaces up to `width` code points (as it is when longer).
std::string pad_columns(std::string_view text, size_t width);

/// `text` as it is if it has at most `width` code points; else its first
/// `width − 3` code points and "...", never a character cut in two.
std::string clip_columns(std::string_view text, size_t width);

/// "1 group", "3 groups": `n` and the noun that agrees with it.
std::string plural(int64_t n, const char* one, const char* many);

/// Text for XML (and HTML) character data and attribute values: & < > "
/// escaped. XML 1.0 forbids most control characters outright (no escape
/// makes them legal), so they are dropped; tab, newline and return stay.
std::string xml_escape(std::string_view text);

}  // namespace quire
