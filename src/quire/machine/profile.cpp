#include "quire/machine/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"
#include "quire/io/json_file.h"

namespace quire::machine {

// profiles/ci-2core-avx512.json, embedded by the build (src/CMakeLists.txt).
extern const char* const kShippedProfileJson;

double Profile::roofline_seconds(double bytes, double flops, runtime::FloatType type) const {
  auto it = peak_flops.find(type);
  const double compute = it == peak_flops.end() ? 0 : flops / it->second;
  return std::max(bytes / memory_bandwidth, compute);
}

namespace {

constexpr runtime::FloatType kTypes[] = {runtime::FloatType::F64, runtime::FloatType::F32, runtime::FloatType::BF16,
                                         runtime::FloatType::F16};

}  // namespace

Profile parse_profile(const nlohmann::json& j, const std::string& origin) {
  auto fail = [&](const std::string& key, const std::string& why) {
    throw io::IoError(origin, fmt::format("key `{}`: {}", key, why));
  };
  // A profile is read back, never trusted: every number is finite and in the
  // range a machine can have, since the layout plan multiplies and loops by
  // them (1e9 cores made planning take 13 s; 2^63 printed as a negative count).
  auto number = [&](const nlohmann::json& obj, const std::string& name, const std::string& key, bool zero_ok) {
    if (!obj.is_object() || !obj.contains(name)) fail(key, "missing");
    const bool ok = obj[name].is_number() && std::isfinite(obj[name].get<double>()) &&
                    (zero_ok ? obj[name].get<double>() >= 0 : obj[name].get<double>() > 0);
    if (!ok) fail(key, zero_ok ? "expected a finite number ≥ 0" : "expected a finite positive number");
    return obj[name].get<double>();
  };
  auto positive = [&](const nlohmann::json& obj, const std::string& name, const std::string& key) {
    return number(obj, name, key, false);
  };
  auto count = [&](const nlohmann::json& obj, const std::string& name, const std::string& key, int64_t lo,
                   int64_t hi) {
    if (!obj.is_object() || !obj.contains(name)) fail(key, "missing");
    const nlohmann::json& v = obj[name];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)))
      fail(key, fmt::format("expected an integer in [{}, {}]", lo, hi));
    return v.get<int64_t>();
  };
  auto text = [&](const std::string& name) -> std::string {
    if (!j.contains(name)) return "";
    if (!j[name].is_string()) fail(name, "expected a string");
    const std::string s = j[name].get<std::string>();
    // It is printed to a terminal (`quire info`, plans): no escape sequences.
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7F) fail(name, "holds a control character");
    return s;
  };
  constexpr int64_t kMaxCores = 1 << 16;
  constexpr int64_t kMaxCacheBytes = int64_t{1} << 40;
  if (!j.is_object()) throw io::IoError(origin, "the profile is not a JSON object");
  if (!j.contains("format") || j["format"] != "quire-profile") fail("format", "not \"quire-profile\"");
  if (!j.contains("version") || (j["version"] != 1 && j["version"] != 2)) fail("version", "only versions 1 and 2 are read");
  Profile p;
  p.name = text("name");
  p.source = text("source");
  p.cores = static_cast<int>(count(j, "cores", "cores", 1, kMaxCores));
  p.memory_bandwidth = positive(j, "memory_bandwidth", "memory_bandwidth");
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object()) fail("peak_flops", "missing, or not an object");
  for (runtime::FloatType t : kTypes) {
    const std::string name = runtime::float_type_name(t);
    p.peak_flops[t] = positive(j["peak_flops"], name, "peak_flops." + name);
  }
  if (j["version"] == 1) return p;
  p.vector_bytes = static_cast<int>(count(j, "vector_bytes", "vector_bytes", 1, 1024));
  const nlohmann::json& c = j.contains("caches") ? j["caches"] : nlohmann::json();
  p.caches.l1 = count(c, "l1", "caches.l1", 1, kMaxCacheBytes);
  p.caches.l2 = count(c, "l2", "caches.l2", 1, kMaxCacheBytes);
  p.caches.l3 = count(c, "l3", "caches.l3", 1, kMaxCacheBytes);
  p.caches.l3_shared_by = static_cast<int>(count(c, "l3_shared_by", "caches.l3_shared_by", 1, kMaxCores));
  p.caches.line = static_cast<int>(count(c, "line", "caches.line", 1, 4096));
  const nlohmann::json& b = j.contains("bandwidth") ? j["bandwidth"] : nlohmann::json();
  p.l2_bandwidth = positive(b, "l2", "bandwidth.l2");
  p.l3_bandwidth = positive(b, "l3", "bandwidth.l3");
  const nlohmann::json& m = j.contains("layout_model") ? j["layout_model"] : nlohmann::json();
  LayoutModel model;
  model.launch_seconds = number(m, "launch_seconds", "layout_model.launch_seconds", true);
  model.spawn_seconds = number(m, "spawn_seconds", "layout_model.spawn_seconds", true);
  model.op_seconds = positive(m, "op_seconds", "layout_model.op_seconds");
  model.load_seconds = number(m, "load_seconds", "layout_model.load_seconds", true);
  model.call_seconds = number(m, "call_seconds", "layout_model.call_seconds", true);
  model.fresh_seconds = number(m, "fresh_seconds", "layout_model.fresh_seconds", true);
  model.lane_speedup = positive(m, "lane_speedup", "layout_model.lane_speedup");
  if (m.is_object() && m.contains("packed_flops"))
    model.packed_flops = number(m, "packed_flops", "layout_model.packed_flops", true);
  model.p = positive(m, "p", "layout_model.p");
  model.error = number(m, "error", "layout_model.error", true);
  model.rank_correlation = m.is_object() && m.contains("rank_correlation") && m["rank_correlation"].is_number()
                               ? m["rank_correlation"].get<double>()
                               : (fail("layout_model.rank_correlation", "expected a number"), 0.0);
  model.points = static_cast<int>(count(m, "points", "layout_model.points", 0, 1 << 30));
  p.layout = model;
  return p;
}

Profile read_profile(const std::string& path) { return parse_profile(io::read_json(path), path); }

nlohmann::ordered_json profile_json(const Profile& p) {
  nlohmann::ordered_json j;
  j["format"] = "quire-profile";
  j["version"] = p.layout ? 2 : 1;
  j["name"] = p.name;
  j["source"] = p.source;
  j["cores"] = p.cores;
  j["memory_bandwidth"] = p.memory_bandwidth;
  for (runtime::FloatType t : kTypes) j["peak_flops"][runtime::float_type_name(t)] = p.peak_flops.at(t);
  if (!p.layout) return j;
  j["vector_bytes"] = p.vector_bytes;
  j["caches"] = {{"l1", p.caches.l1},
                 {"l2", p.caches.l2},
                 {"l3", p.caches.l3},
                 {"l3_shared_by", p.caches.l3_shared_by},
                 {"line", p.caches.line}};
  j["bandwidth"] = {{"l2", p.l2_bandwidth}, {"l3", p.l3_bandwidth}};
  const LayoutModel& m = *p.layout;
  nlohmann::ordered_json lm;
  lm["launch_seconds"] = m.launch_seconds;
  lm["spawn_seconds"] = m.spawn_seconds;
  lm["op_seconds"] = m.op_seconds;
  lm["load_seconds"] = m.load_seconds;
  lm["call_seconds"] = m.call_seconds;
  lm["fresh_seconds"] = m.fresh_seconds;
  lm["lane_speedup"] = m.lane_speedup;
  if (m.packed_flops > 0) lm["packed_flops"] = m.packed_flops;
  lm["p"] = m.p;
  lm["error"] = m.error;
  lm["rank_correlation"] = m.rank_correlation;
  lm["points"] = m.points;
  j["layout_model"] = lm;
  return j;
}

void write_profile(const std::string& path, const Profile& p) {
  io::write_file_atomically(path, profile_json(p).dump(2) + "\n");
}

Profile planning_profile(const std::string& path) {
  if (path.empty()) return shipped_profile();
  Profile p = read_profile(path);
  if (!p.layout)
    throw io::IoError(path, "a version 1 profile has no layout model; `quire profile calibrate` writes one");
  return p;
}

const Profile& shipped_profile() {
  static const Profile p = parse_profile(nlohmann::json::parse(kShippedProfileJson), "the shipped profile");
  return p;
}

}  // namespace quire::machine
