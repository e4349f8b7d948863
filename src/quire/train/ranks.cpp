#include "quire/train/ranks.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "quire/interp/interpreter.h"
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
      {"data", file_digest(run.data_path)},
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
  if (!run.held_out_path.empty()) fields["held_out_data"] = file_digest(run.held_out_path);
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
