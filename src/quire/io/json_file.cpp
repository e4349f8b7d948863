#include "quire/io/json_file.h"

#include <fmt/format.h>

#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"

namespace quire::io {

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError(path, fmt::format("not JSON: {}", e.what()));
  }
}

}  // namespace quire::io
