#include "quire/io/json_file.h"

#include <fmt/format.h>

#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"

namespace quire::io {

nlohmann::json read_json(const std::string& path) {
  // Every JSON artifact quire writes (envelopes, plans, profiles, states) is far
  // smaller; past this it is not one of them.
  constexpr size_t kMaxJsonBytes = size_t{256} << 20;
  const std::string text = read_file(path, kMaxJsonBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError(path, fmt::format("not JSON: {}", e.what()));
  }
}

}  // namespace quire::io
