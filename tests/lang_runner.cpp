// The language tests: every tests/lang/**/*.qr is checked, and the set of
// (line, code) pairs of its errors must equal the expectations written inline
// on the lines they concern:
//
//     let y = x · w    -- expect error[E0402]
//
// A file without expectations must check clean.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "quire/elab/elaborator.h"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> lang_files() {
  std::vector<std::string> out;
  fs::path root = fs::path(QUIRE_SOURCE_DIR) / "tests" / "lang";
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file() && entry.path().extension() == ".qr") out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

class LanguageTest : public testing::TestWithParam<std::string> {};

TEST_P(LanguageTest, DiagnosticsMatchExpectations) {
  const std::string path = GetParam();
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::set<std::pair<uint32_t, std::string>> expected;
  // `-- expect error[E1234]`, possibly several on one line.
  const std::string marker = "expect error[";
  std::istringstream lines(text);
  std::string line;
  uint32_t n = 0;
  while (std::getline(lines, line)) {
    ++n;
    size_t comment = line.find("--");
    for (size_t at = line.find(marker, comment == std::string::npos ? line.size() : comment);
         at != std::string::npos; at = line.find(marker, at + 1)) {
      size_t code = at + marker.size();
      if (line.size() >= code + 6 && line[code] == 'E' && line[code + 5] == ']') expected.insert({n, line.substr(code, 5)});
    }
  }
  quire::DiagnosticSink diags;
  auto prog = quire::elab::elaborate(path, diags);
  std::set<std::pair<uint32_t, std::string>> actual;
  for (const quire::Diagnostic& d : diags.all()) {
    if (d.severity != quire::Severity::Error) continue;
    // Errors in imported files count on the line of the file they are in only
    // when it is this file; others are reported by that file's own test.
    if (prog->sources.file(d.range.begin.file).path != path) {
      actual.insert({0, d.code});
      continue;
    }
    actual.insert({prog->sources.line_col(d.range.begin).line, d.code});
  }
  EXPECT_EQ(actual, expected) << "diagnostics of " << path << ":\n" << diags.render(prog->sources);
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string rel = fs::relative(info.param, fs::path(QUIRE_SOURCE_DIR) / "tests" / "lang").string();
  std::string name;
  for (char c : rel) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Lang, LanguageTest, testing::ValuesIn(lang_files()), test_name);

}  // namespace
