#pragma once
// Helpers every family of unit tests uses: the message of an expected
// exception, and a scratch folder that disappears with the test.

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace quire::testing {

/// What `f()` threw as an E, or "(no error)" when it returned.
template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

/// A fresh folder under the system's temporary folder (`quire-<tag>-XXXXXX`), removed after.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag) {
    std::string pattern = (std::filesystem::temp_directory_path() / ("quire-" + tag + "-XXXXXX")).string();
    path = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// The names in the folder, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    for (const auto& e : std::filesystem::directory_iterator(path)) result.push_back(e.path().filename().string());
    std::sort(result.begin(), result.end());
    return result;
  }
};

/// The whole content of a text file ("" if it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace quire::testing
