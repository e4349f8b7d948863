#include "quire/machine/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "quire/io/io_error.h"
#include "quire/io/json_file.h"

namespace quire::machine {

double Profile::roofline_seconds(double bytes, double flops, runtime::FloatType type) const {
  auto it = peak_flops.find(type);
  const double compute = it == peak_flops.end() ? 0 : flops / it->second;
  return std::max(bytes / memory_bandwidth, compute);
}

Profile read_profile(const std::string& path) {
  const nlohmann::json j = io::read_json(path);
  auto fail = [&](const std::string& key, const std::string& why) {
    throw io::IoError(path, fmt::format("key `{}`: {}", key, why));
  };
  auto positive = [&](const nlohmann::json& obj, const std::string& name, const std::string& key) {
    if (!obj.is_object() || !obj.contains(name)) fail(key, "missing");
    if (!obj[name].is_number() || !(obj[name].get<double>() > 0)) fail(key, "expected a positive number");
    return obj[name].get<double>();
  };
  if (!j.is_object()) throw io::IoError(path, "the profile is not a JSON object");
  if (!j.contains("format") || j["format"] != "quire-profile") fail("format", "not \"quire-profile\"");
  if (!j.contains("version") || j["version"] != 1) fail("version", "only version 1 is read");
  Profile p;
  p.name = j.value("name", "");
  p.source = j.value("source", "");
  p.cores = static_cast<int>(positive(j, "cores", "cores"));
  p.memory_bandwidth = positive(j, "memory_bandwidth", "memory_bandwidth");
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object()) fail("peak_flops", "missing, or not an object");
  for (runtime::FloatType t : {runtime::FloatType::F64, runtime::FloatType::F32, runtime::FloatType::BF16,
                               runtime::FloatType::F16}) {
    const std::string name = runtime::float_type_name(t);
    p.peak_flops[t] = positive(j["peak_flops"], name, "peak_flops." + name);
  }
  return p;
}

}  // namespace quire::machine
