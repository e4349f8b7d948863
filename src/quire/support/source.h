#pragma once
// Source files and positions. A SourceLoc is a byte offset in one file; lines
// and columns are computed on demand (columns count Unicode code points, so a
// caret lands under `γ` whatever its UTF-8 length).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quire {

using FileId = uint32_t;

/// A position in a source file: which file, which byte.
struct SourceLoc {
  FileId file = 0;
  uint32_t offset = 0;
};

/// A span of source text: where it starts and how many bytes it covers.
struct SourceRange {
  SourceLoc begin;
  uint32_t length = 0;
};

/// One loaded source file and the byte offset of each line's start.
struct SourceFile {
  std::string path;  ///< as the user or the import named it (diagnostics print it)
  std::string text;
  std::vector<uint32_t> line_starts;
};

struct LineCol {
  uint32_t line = 0;    ///< 1-based
  uint32_t column = 0;  ///< 1-based, in code points
};

/// Owns every source file of one compilation; FileIds index into it.
class SourceManager {
 public:
  FileId add(std::string path, std::string text);
  const SourceFile& file(FileId id) const { return *files_.at(id); }
  size_t size() const { return files_.size(); }
  LineCol line_col(SourceLoc loc) const;
  /// The text of a 1-based line, without its newline.
  std::string_view line_text(FileId id, uint32_t line) const;

 private:
  std::vector<std::unique_ptr<SourceFile>> files_;
};

}  // namespace quire
