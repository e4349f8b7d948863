#pragma once
// How the precision stages write a number: in their tables, five significant
// digits with an unpadded exponent ("7.4759e0", "1.6222e-9"); in their JSON
// artifacts, the number, or the strings "inf", "-inf", "nan" (JSON has no
// non-finite numbers).

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace quire::precision {

inline std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{:.4e}", v);  // "7.4759e+00"
  const size_t e = s.find('e');
  return s.substr(0, e + 1) + std::to_string(std::stoi(s.substr(e + 1)));
}

/// "1.23e2": three significant digits, as the printouts' ratios show them.
inline std::string short_sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{:.2e}", v);
  const size_t e = s.find('e');
  return s.substr(0, e + 1) + std::to_string(std::stoi(s.substr(e + 1)));
}

inline nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace quire::precision
