#include "quire/support/source.h"

#include <algorithm>

namespace quire {

FileId SourceManager::add(std::string path, std::string text) {
  auto file = std::make_unique<SourceFile>();
  file->path = std::move(path);
  file->text = std::move(text);
  file->line_starts.push_back(0);
  for (uint32_t i = 0; i < file->text.size(); ++i)
    if (file->text[i] == '\n') file->line_starts.push_back(i + 1);
  files_.push_back(std::move(file));
  return static_cast<FileId>(files_.size() - 1);
}

LineCol SourceManager::line_col(SourceLoc loc) const {
  const SourceFile& f = file(loc.file);
  uint32_t offset = std::min<uint32_t>(loc.offset, static_cast<uint32_t>(f.text.size()));
  auto it = std::upper_bound(f.line_starts.begin(), f.line_starts.end(), offset);
  uint32_t line = static_cast<uint32_t>(it - f.line_starts.begin());
  uint32_t start = f.line_starts[line - 1];
  uint32_t column = 1;
  for (uint32_t i = start; i < offset; ++i)
    if ((static_cast<unsigned char>(f.text[i]) & 0xC0) != 0x80) ++column;  // count code points
  return {line, column};
}

std::string_view SourceManager::line_text(FileId id, uint32_t line) const {
  const SourceFile& f = file(id);
  if (line == 0 || line > f.line_starts.size()) return {};
  uint32_t start = f.line_starts[line - 1];
  uint32_t end = line < f.line_starts.size() ? f.line_starts[line] - 1 : static_cast<uint32_t>(f.text.size());
  std::string_view text(f.text.data() + start, end - start);
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return text;
}

}  // namespace quire
