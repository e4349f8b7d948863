#include "quire/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <utility>

#include "quire/io/atomic_file.h"
#include "quire/io/safetensors.h"
#include "quire/support/sha256.h"

namespace quire::train {

using support::sha256_hex;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kParamsFile = "params.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kFormat = "quire-checkpoint";
constexpr const char* kStateChecksumField = "state_sha256";

/// Flushes a folder's entries (a rename or a new file in it) to the disk.
void fsync_folder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw io::IoError(path, fmt::format("cannot open the folder to fsync it: {}", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw io::IoError(path, fmt::format("cannot fsync the folder: {}", std::strerror(saved)));
}

/// The step of a folder named step-<digits>, or nullopt for any other name.
std::optional<int64_t> step_of_folder_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;  // 18 digits cannot overflow int64
  return std::stoll(digits);
}

/// The step folders of `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> step_folders(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> folders;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return folders;
  fs::directory_iterator it(dir, ec);
  if (ec) throw io::IoError(dir, fmt::format("cannot list the checkpoint folder: {}", ec.message()));
  for (const fs::directory_entry& entry : it) {
    const std::optional<int64_t> step = step_of_folder_name(entry.path().filename().string());
    if (step && entry.is_directory(ec)) folders.emplace_back(*step, entry.path().string());
  }
  std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return folders;
}

// ---- state.json ----

/// A state.json field that a checkpoint folder failed on: thrown as IoError(folder, "state.json: …").
[[noreturn]] void refuse_state(const std::string& folder, const std::string& what) {
  throw io::IoError(folder, fmt::format("{}: {}", kStateFile, what));
}

const json& member(const std::string& folder, const json& object, const std::string& key, const std::string& where) {
  const std::string name = where.empty() ? key : where + "." + key;
  if (!object.is_object()) refuse_state(folder, fmt::format("`{}` is not an object", where));
  auto it = object.find(key);
  if (it == object.end()) refuse_state(folder, fmt::format("missing field `{}`", name));
  return *it;
}

int64_t natural(const std::string& folder, const json& object, const std::string& key, const std::string& where = "") {
  const json& v = member(folder, object, key, where);
  const std::string name = where.empty() ? key : where + "." + key;
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  refuse_state(folder, fmt::format("field `{}` is not a natural number", name));
}

std::string text(const std::string& folder, const json& object, const std::string& key, const std::string& where = "") {
  const json& v = member(folder, object, key, where);
  if (!v.is_string())
    refuse_state(folder, fmt::format("field `{}` is not a string", where.empty() ? key : where + "." + key));
  return v.get<std::string>();
}

/// What state.json records of one tensor file.
struct FileRecord {
  int64_t bytes = 0;
  std::string sha256;
};

struct ParsedState {
  CheckpointState state;
  FileRecord params;
  FileRecord optimizer;
};

ParsedState parse_state_json(const json& j, const std::string& folder);

/// Parses and checks state.json of `folder` (a step-<step> folder or any other).
ParsedState parse_state(const std::string& folder) {
  const std::string path = (fs::path(folder) / kStateFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw io::IoError(folder, fmt::format("missing {}", kStateFile));
  std::string bytes;
  try {
    bytes = io::read_file(path);
  } catch (const io::IoError& e) {
    refuse_state(folder, e.reason);
  }
  const json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) refuse_state(folder, "truncated or invalid JSON");
  return parse_state_json(j, folder);
}

ParsedState parse_state_json(const json& j, const std::string& folder) {
  if (!j.is_object()) refuse_state(folder, "not a JSON object");
  if (text(folder, j, "format") != kFormat) refuse_state(folder, fmt::format("`format` is not \"{}\"", kFormat));
  const int64_t version = natural(folder, j, "format_version");
  if (version > kCheckpointFormatVersion)
    refuse_state(folder, fmt::format("format version {} is newer than this quire reads ({})", version,
                                     kCheckpointFormatVersion));
  if (version < kCheckpointFormatVersion)
    refuse_state(folder, fmt::format("format version {} is older than this quire reads ({}: its state is covered "
                                     "by a checksum)",
                                     version, kCheckpointFormatVersion));
  // Checked before any field is believed: a flipped digit in a counter
  // decodes as well as the right one.
  const std::string recorded = text(folder, j, kStateChecksumField);
  json sealed = j;
  sealed.erase(kStateChecksumField);
  if (sha256_hex(sealed.dump()) != recorded) refuse_state(folder, "checksum mismatch (the state was changed after it was written)");
  ParsedState parsed;
  CheckpointState& s = parsed.state;
  s.quire_version = text(folder, j, "quire_version");
  s.step = natural(folder, j, "step");
  s.epoch = natural(folder, j, "epoch");
  const json& position = member(folder, j, "data_position", "");
  s.data.epoch = natural(folder, position, "epoch", "data_position");
  s.data.batch = natural(folder, position, "batch", "data_position");
  s.data.samples = natural(folder, position, "samples", "data_position");
  s.schedule_step = natural(folder, j, "schedule_step");
  s.loss_scale = member(folder, j, "loss_scale", "");
  s.random = member(folder, j, "random", "");
  s.trainer = member(folder, j, "trainer", "");
  const json& files = member(folder, j, "files", "");
  for (auto [name, record] : {std::pair{kParamsFile, &parsed.params}, std::pair{kOptimizerFile, &parsed.optimizer}}) {
    const json& entry = member(folder, files, name, "files");
    const std::string where = fmt::format("files.{}", name);
    record->bytes = natural(folder, entry, "bytes", where);
    record->sha256 = text(folder, entry, "sha256", where);
  }
  if (s.epoch != s.data.epoch)
    refuse_state(folder, fmt::format("`epoch` {} is not `data_position.epoch` {}", s.epoch, s.data.epoch));
  if (s.schedule_step > s.step)
    refuse_state(folder, fmt::format("`schedule_step` {} is past `step` {}", s.schedule_step, s.step));
  const std::optional<int64_t> folder_step = step_of_folder_name(fs::path(folder).filename().string());
  if (folder_step && *folder_step != s.step)
    refuse_state(folder, fmt::format("step {} does not match the folder's name", s.step));
  return parsed;
}

json state_json(const CheckpointState& s, const FileRecord& params, const FileRecord& optimizer) {
  const auto file = [](const FileRecord& r) { return json{{"bytes", r.bytes}, {"sha256", r.sha256}}; };
  json j{
      {"format", kFormat},
      {"format_version", kCheckpointFormatVersion},
      {"quire_version", kQuireVersion},
      {"step", s.step},
      {"epoch", s.epoch},
      {"data_position", {{"epoch", s.data.epoch}, {"batch", s.data.batch}, {"samples", s.data.samples}}},
      {"schedule_step", s.schedule_step},
      {"loss_scale", s.loss_scale},
      {"random", s.random},
      {"trainer", s.trainer},
      {"files", {{kParamsFile, file(params)}, {kOptimizerFile, file(optimizer)}}},
  };
  // Over the compact dump of every other field: nlohmann::json orders keys
  // and prints numbers the same way after a parse, so a reader recomputes it.
  j[kStateChecksumField] = sha256_hex(j.dump());
  return j;
}

// ---- tensor files ----

/// The store type of each real tensor of a safetensors file, from its header.
/// Requires bytes that decode_safetensors accepted (so the header is sound).
io::StoreTypes store_types_of(const std::string& bytes) {
  io::StoreTypes types;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const json header = json::parse(bytes.substr(8, length), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return types;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__" || !info.is_object() || !info.contains("dtype") || !info["dtype"].is_string()) continue;
    const std::string dtype = info["dtype"].get<std::string>();
    if (dtype == "F64") types.by_name[name] = io::StoreType::F64;
    else if (dtype == "F32") types.by_name[name] = io::StoreType::F32;
    else if (dtype == "BF16") types.by_name[name] = io::StoreType::BF16;
    else if (dtype == "F16") types.by_name[name] = io::StoreType::F16;
  }
  return types;
}

/// Reads one tensor file of `folder` and checks it against its record.
io::NamedTensors read_tensor_file(const std::string& folder, const char* name, const FileRecord& record,
                                  io::StoreTypes& types) {
  const std::string path = (fs::path(folder) / name).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw io::IoError(folder, fmt::format("missing {}", name));
  std::string bytes;
  try {
    bytes = io::read_file(path);
  } catch (const io::IoError& e) {
    throw io::IoError(folder, fmt::format("{}: {}", name, e.reason));
  }
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < record.bytes)
    throw io::IoError(folder, fmt::format("{}: truncated ({} bytes, state.json records {})", name, size, record.bytes));
  if (size != record.bytes)
    throw io::IoError(folder, fmt::format("{}: {} bytes, state.json records {}", name, size, record.bytes));
  if (sha256_hex(bytes) != record.sha256) throw io::IoError(folder, fmt::format("{}: checksum mismatch", name));
  try {
    io::NamedTensors tensors = io::decode_safetensors(bytes, path);
    types = store_types_of(bytes);
    return tensors;
  } catch (const io::IoError& e) {
    throw io::IoError(folder, fmt::format("{}: {}", name, e.reason));
  }
}

void remove_folder(const std::string& path, const char* why) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw io::IoError(path, fmt::format("cannot remove {}: {}", why, ec.message()));
}

/// A name beside `folder` that no reader takes for a checkpoint
/// (step-<digits>.refused, .refused.1, …) and that nothing else holds.
std::string set_aside_name(const std::string& folder) {
  std::error_code ec;
  std::string name = folder + ".refused";
  for (int n = 1; fs::exists(fs::symlink_status(name, ec)); ++n) name = fmt::format("{}.refused.{}", folder, n);
  return name;
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) { return fmt::format("step-{:08d}", step); }

CheckpointRetention::CheckpointRetention(int keep) : keep_(keep) {}

void CheckpointRetention::trust(const std::string& folder) { readable_[folder] = true; }

bool CheckpointRetention::trusted(const std::string& folder) {
  auto it = readable_.find(folder);
  if (it != readable_.end()) return it->second;
  bool readable = true;
  try {
    read_checkpoint(folder);
  } catch (const io::IoError&) {
    readable = false;
  }
  return readable_[folder] = readable;
}

void CheckpointRetention::prune(const std::string& dir, const std::string& written) {
  int kept = 0;
  for (const auto& [step, folder] : step_folders(dir)) {
    if (!trusted(folder)) continue;
    if (kept < keep_) {
      ++kept;
      continue;
    }
    if (folder == written)
      throw io::IoError(written, fmt::format("the checkpoint just written would not be kept: {} newer checkpoints in {} "
                                             "count toward keeping {}",
                                             kept, dir, keep_));
    remove_folder(folder, "an old checkpoint");
    readable_.erase(folder);
  }
}

std::string write_checkpoint(const std::string& dir, const CheckpointState& state, const io::NamedTensors& params,
                             const io::StoreTypes& param_types, const io::NamedTensors& optimizer,
                             const io::StoreTypes& optimizer_types, int keep) {
  if (keep < 1) throw io::IoError(dir, fmt::format("keep at least one checkpoint, not {}", keep));
  CheckpointRetention retention(keep);
  return write_checkpoint(dir, state, params, param_types, optimizer, optimizer_types, retention);
}

std::string write_checkpoint(const std::string& dir, const CheckpointState& state, const io::NamedTensors& params,
                             const io::StoreTypes& param_types, const io::NamedTensors& optimizer,
                             const io::StoreTypes& optimizer_types, CheckpointRetention& retention) {
  if (retention.keep() < 1)
    throw io::IoError(dir, fmt::format("keep at least one checkpoint, not {}", retention.keep()));
  if (state.step < 0)
    throw io::IoError(dir, fmt::format("a checkpoint's step is a natural number, not {}", state.step));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw io::IoError(dir, fmt::format("cannot create the checkpoint folder: {}", ec.message()));

  const std::string name = checkpoint_folder_name(state.step);
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string temporary = (fs::path(dir) / ("." + name + ".tmp")).string();
  const std::string replaced = (fs::path(dir) / ("." + name + ".old")).string();

  // Encode first: an unwritable tensor leaves the folder untouched.
  const std::string params_bytes =
      io::encode_safetensors(params, {}, param_types, (fs::path(final_path) / kParamsFile).string());
  const std::string optimizer_bytes =
      io::encode_safetensors(optimizer, {}, optimizer_types, (fs::path(final_path) / kOptimizerFile).string());
  const FileRecord params_record{static_cast<int64_t>(params_bytes.size()), sha256_hex(params_bytes)};
  const FileRecord optimizer_record{static_cast<int64_t>(optimizer_bytes.size()), sha256_hex(optimizer_bytes)};
  const std::string state_text = state_json(state, params_record, optimizer_record).dump(2) + "\n";

  // A temporary left by a crash is garbage: it was never renamed into place.
  remove_folder(temporary, "a left-over temporary checkpoint");
  fs::create_directory(temporary, ec);
  if (ec) throw io::IoError(temporary, fmt::format("cannot create the folder: {}", ec.message()));
  try {
    // Each write fsyncs its file and the temporary folder (atomic_file.h).
    io::write_file_atomically((fs::path(temporary) / kParamsFile).string(), params_bytes);
    io::write_file_atomically((fs::path(temporary) / kOptimizerFile).string(), optimizer_bytes);
    io::write_file_atomically((fs::path(temporary) / kStateFile).string(), state_text);
    fsync_folder(temporary);
    bool replacing = false;
    if (fs::exists(final_path, ec)) {
      // rename() will not replace a non-empty folder: move the old one aside.
      // One this run cannot read (corrupt, or of a newer format) is kept
      // under a name no reader takes for a checkpoint, never removed.
      const bool readable = retention.trusted(final_path);
      const std::string aside = readable ? replaced : set_aside_name(final_path);
      if (readable) remove_folder(replaced, "a left-over replaced checkpoint");
      if (std::rename(final_path.c_str(), aside.c_str()) != 0)
        throw io::IoError(final_path, fmt::format("cannot move the old checkpoint aside: {}", std::strerror(errno)));
      replacing = readable;
    }
    if (std::rename(temporary.c_str(), final_path.c_str()) != 0)
      throw io::IoError(final_path, fmt::format("cannot rename {} into place: {}", temporary, std::strerror(errno)));
    fsync_folder(dir);
    if (replacing) remove_folder(replaced, "the replaced checkpoint");
  } catch (...) {
    fs::remove_all(temporary, ec);
    throw;
  }
  retention.trust(final_path);
  retention.prune(dir, final_path);
  return final_path;
}

CheckpointState checkpoint_state_from_json(const json& j, const std::string& folder) {
  return parse_state_json(j, folder).state;
}

Checkpoint read_checkpoint(const std::string& path) {
  const ParsedState parsed = parse_state(path);
  Checkpoint checkpoint;
  checkpoint.path = path;
  checkpoint.state = parsed.state;
  checkpoint.params = read_tensor_file(path, kParamsFile, parsed.params, checkpoint.param_types);
  checkpoint.optimizer = read_tensor_file(path, kOptimizerFile, parsed.optimizer, checkpoint.optimizer_types);
  return checkpoint;
}

LatestCheckpoint find_latest(const std::string& dir) {
  LatestCheckpoint latest;
  for (const auto& [step, folder] : step_folders(dir)) {
    try {
      latest.checkpoint = read_checkpoint(folder);
      return latest;
    } catch (const io::IoError& e) {
      latest.refused.push_back({folder, e.reason});
    }
  }
  return latest;
}

}  // namespace quire::train
