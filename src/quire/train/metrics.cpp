#include "quire/train/metrics.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "quire/io/atomic_file.h"

namespace quire::train {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

/// A double as JSON: a number when finite, else the string for its class
/// (the sign of a NaN carries no meaning here, so every NaN is "nan").
ordered_json real_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

const json& field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw std::runtime_error(fmt::format("missing key `{}`", key));
  return *it;
}

int64_t integer_field(const json& j, const char* key) {
  const json& v = field(j, key);
  // An unsigned beyond int64_t is is_number_integer() too, and get<int64_t>
  // would wrap it to a negative step.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error(fmt::format("key `{}` is out of range", key));
  if (v.is_number_integer()) return v.get<int64_t>();
  throw std::runtime_error(fmt::format("key `{}` is not an integer", key));
}

double real_value(const json& v, const char* key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw std::runtime_error(fmt::format("key `{}` is not a number (nor \"nan\", \"inf\", \"-inf\")", key));
}

double real_field(const json& j, const char* key) { return real_value(field(j, key), key); }

bool bool_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_boolean()) throw std::runtime_error(fmt::format("key `{}` is not a boolean", key));
  return v.get<bool>();
}

/// The complete lines of a metrics file (without their '\n'); text after
/// the last '\n' is a line torn by a kill and is left out.
std::vector<std::string_view> complete_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) break;
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

/// Line `number` (from 1) of the file at `path`, parsed.
StepRecord parse_line(const std::string& path, size_t number, std::string_view line) {
  auto fail = [&](const std::string& reason) -> StepRecord {
    throw io::IoError(fmt::format("{}:{}", path, number), reason);
  };
  if (line.empty()) return fail("empty line");
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    return fail(fmt::format("invalid JSON at column {}", e.byte));
  }
  if (!j.is_object()) return fail("not a JSON object");
  try {
    return step_record_from_json(j);
  } catch (const std::runtime_error& e) {
    return fail(e.what());
  }
}

std::string errno_text(std::string_view what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

}  // namespace

ordered_json to_json(const StepRecord& r) {
  ordered_json j;
  j["step"] = r.step;
  j["total_steps"] = r.total_steps;
  j["epoch"] = r.epoch;
  j["epochs"] = r.epochs;
  j["loss"] = real_json(r.loss);
  j["lr"] = real_json(r.lr);
  j["grad_norm"] = real_json(r.grad_norm);
  j["clipped"] = r.clipped;
  j["skipped"] = r.skipped;
  if (r.loss_scale) j["loss_scale"] = real_json(*r.loss_scale);
  j["samples_per_s"] = real_json(r.samples_per_s);
  j["elapsed_s"] = real_json(r.elapsed_s);
  j["eta_s"] = real_json(r.eta_s);
  if (r.held_out_loss) j["held_out_loss"] = real_json(*r.held_out_loss);
  if (r.envelope_exceeded) j["envelope_exceeded"] = *r.envelope_exceeded;
  return j;
}

StepRecord step_record_from_json(const json& j) {
  if (!j.is_object()) throw std::runtime_error("a step record is not a JSON object");
  StepRecord r;
  r.step = integer_field(j, "step");
  r.total_steps = integer_field(j, "total_steps");
  r.epoch = integer_field(j, "epoch");
  r.epochs = integer_field(j, "epochs");
  r.loss = real_field(j, "loss");
  r.lr = real_field(j, "lr");
  r.grad_norm = real_field(j, "grad_norm");
  r.clipped = bool_field(j, "clipped");
  r.skipped = bool_field(j, "skipped");
  if (auto it = j.find("loss_scale"); it != j.end()) r.loss_scale = real_value(*it, "loss_scale");
  r.samples_per_s = real_field(j, "samples_per_s");
  r.elapsed_s = real_field(j, "elapsed_s");
  r.eta_s = real_field(j, "eta_s");
  if (auto it = j.find("held_out_loss"); it != j.end()) r.held_out_loss = real_value(*it, "held_out_loss");
  if (j.contains("envelope_exceeded")) r.envelope_exceeded = integer_field(j, "envelope_exceeded");
  return r;
}

MetricsFile::MetricsFile(const std::string& path, int64_t keep_through_step) : path_(path) {
  // A fresh run owes nothing to an old file, not even that it parses.
  if (keep_through_step <= 0) {
    io::write_file_atomically(path, "");
  } else {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      const std::string text = io::read_file(path);
      std::string kept;
      bool dropped = false;
      size_t number = 0;
      for (std::string_view line : complete_lines(text)) {
        ++number;
        if (parse_line(path, number, line).step > keep_through_step) {
          dropped = true;
        } else {
          kept.append(line);
          kept.push_back('\n');
        }
      }
      const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (complete != text.size())
        repair_ = fmt::format("{}: its last line was cut short ({} bytes after line {}, a step's metrics being "
                              "written when the run stopped): truncated to the last complete line",
                              path, text.size() - complete, number);
      if (dropped || kept.size() != text.size()) io::write_file_atomically(path, kept);
    }
  }
  file_.reset(std::fopen(path.c_str(), "ab"));
  if (!file_) throw io::IoError(path, errno_text("cannot open for appending"));
}

void MetricsFile::append(const StepRecord& r) {
  const std::string line = to_json(r).dump() + '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size())
    throw io::IoError(path_, errno_text("cannot write"));
  if (std::fflush(file_.get()) != 0) throw io::IoError(path_, errno_text("cannot write"));
}

std::vector<StepRecord> read_metrics(const std::string& path) {
  const std::string text = io::read_file(path);
  std::vector<StepRecord> records;
  size_t number = 0;
  for (std::string_view line : complete_lines(text)) records.push_back(parse_line(path, ++number, line));
  return records;
}

}  // namespace quire::train
