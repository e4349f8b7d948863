#pragma once
// Reading a JSON artifact (an envelope, a realization, a machine profile):
// the file's text parsed, or an IoError naming the file and why.

#include <string>

#include <nlohmann/json.hpp>

namespace quire::io {

/// The parsed file. IoError(path, "cannot open: …") or IoError(path, "not JSON: …").
nlohmann::json read_json(const std::string& path);

}  // namespace quire::io
