#include "quire/train/ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "quire/interp/interpreter.h"
#include "quire/io/npy_rows.h"
#include "quire/support/sha256.h"

namespace quire::train {

namespace {

std::string read_bytes(const std::string& path, const char* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io::IoError(path, fmt::format("cannot be read {}", why));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// "1234 bytes, sha256 …": a file's identity for the handshake.
std::string file_digest(const std::string& path) {
  const std::string bytes = read_bytes(path, "to compare it with the other ranks'");
  return fmt::format("{} bytes, sha256 {}", bytes.size(), support::sha256_hex(bytes));
}

/// The most rows, and about the most bytes, a data file's sample takes: a
/// cost bounded whatever the file's size (a few milliseconds), spread wide
/// enough that two different files of one shape almost always differ in it.
constexpr int64_t kSampleRows = 1024;
constexpr uint64_t kSampleBytes = uint64_t{4} << 20;

/// A data file's identity for the handshake without reading it whole, for an
/// .npy whose ranks read it by rows (data.h, READING): its size, and the
/// SHA-256 of its header and of K rows spread evenly over it, the first and
/// the last included (row ⌊k·(N−1)/(K−1)⌋ for k = 0 … K−1; K = min(N, 1024,
/// max(2, 4 MiB / the row's bytes))). Anything else is digested whole, as it
/// is read whole. See docs/distributed.md for what this finds and misses.
std::string data_digest(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return file_digest(path);
  std::optional<io::NpyRows> rows;
  try {
    rows.emplace(io::NpyRows::open(path));
  } catch (const io::IoError&) {
    return file_digest(path);  // an .npz, or not an .npy this rank can read: its bytes as they are
  }
  if (!rows->rows_readable() || rows->rows() == 0) return file_digest(path);
  const int64_t n = rows->rows();
  const auto by_bytes = static_cast<int64_t>(rows->row_bytes() == 0 ? kSampleRows : kSampleBytes / rows->row_bytes());
  const int64_t k = std::min({n, kSampleRows, std::max<int64_t>(2, by_bytes)});
  std::string sampled = rows->header_bytes();
  for (int64_t i = 0; i < k; ++i) {
    // ⌊i·(n−1)/(k−1)⌋ without forming i·(n−1), which could pass 2^63.
    const int64_t row = k == 1 ? 0 : (n - 1) / (k - 1) * i + (n - 1) % (k - 1) * i / (k - 1);
    sampled += rows->read_raw(row, 1);
  }
  return fmt::format("{} bytes, sha256 {} of its header and {} of its {} rows (spread from the first to the last)",
                     rows->file_size(), support::sha256_hex(sampled), k, n);
}

}  // namespace

nlohmann::json describe_run(const elab::Program& prog, const TrainOptions& options, const RunDescription& run) {
  std::string sources;
  int files = 0;
  for (const elab::FileInfo& f : prog.files)
    if (!f.prelude) {
      sources += support::sha256_hex(prog.sources.file(f.id).text) + "\n";
      ++files;
    }
  const LossScaleConfig& scale = options.loss_scale;
  nlohmann::json fields = {
      {"quire_version", kQuireVersion},
      {"ranks", options.world ? options.world->size() : 1},
      {"program", fmt::format("sha256 {} of its {} files", support::sha256_hex(sources), files)},
      {"data", data_digest(run.data_path)},
      {"precision", options.precision},
      {"half_intermediates", options.half_intermediates},
      {"product_step", options.fused_products ? "fma" : "separate"},
      {"remat", interp::remat_name(options.remat)},
      {"seed", options.seed},
      {"dims", run.dims},
      {"resume", options.resume},
      {"max_steps", options.max_steps ? nlohmann::json(*options.max_steps) : nlohmann::json(nullptr)},
      {"run_dir", run.run_dir},
      {"loss_scale", fmt::format("init {} growth {} backoff {} interval {}", scale.init_scale, scale.growth_factor,
                                 scale.backoff_factor, scale.growth_interval)},
  };
  if (!run.held_out_path.empty()) fields["held_out_data"] = data_digest(run.held_out_path);
  if (!options.params_in.empty()) fields["params"] = file_digest(options.params_in);
  if (options.realization) fields["realization"] = file_digest(options.realization_path);
  return fields;
}

std::optional<Checkpoint> share_checkpoint(distributed::Communicator& world, std::optional<Checkpoint> chosen) {
  auto state_digest = [](const std::string& folder) {
    return support::sha256_hex(
        read_bytes((std::filesystem::path(folder) / "state.json").string(), "to compare it with rank 0's"));
  };
  if (world.rank() == 0) {
    const std::string named = chosen ? chosen->path + "\n" + state_digest(chosen->path) : std::string();
    for (int r = 1; r < world.size(); ++r) distributed::send_text(world, r, named);
    return chosen;
  }
  const std::string named = distributed::receive_text(world, 0);
  if (named.empty()) return std::nullopt;
  const size_t newline = named.find('\n');
  const std::string folder = named.substr(0, newline);
  const std::string expected = newline == std::string::npos ? std::string() : named.substr(newline + 1);
  const std::string why =
      fmt::format("rank {} cannot resume from {}, the checkpoint rank 0 resumes from", world.rank(), folder);
  const char* shared = "every rank must see the one run folder: a folder shared by every node";
  try {
    Checkpoint c = read_checkpoint(folder);
    if (state_digest(folder) != expected)
      throw TrainError(fmt::format("{}: its state.json here is not rank 0's ({})", why, shared));
    return c;
  } catch (const io::IoError& e) {
    throw TrainError(fmt::format("{}: {} ({})", why, e.what(), shared));
  }
}

}  // namespace quire::train
