#pragma once
// The programs the memory tests count and run: the GPT example
// (examples/gpt/gpt.qr) and its loss's arguments at B = 2.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "quire/elab/elab_testing.h"
#include "quire/interp/params.h"

namespace quire::compile::testing {

inline std::unique_ptr<elab::testing::Elaborated> elaborate_gpt() {
  const std::filesystem::path path = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "gpt" / "gpt.qr";
  std::ifstream in(path, std::ios::binary);
  return elab::testing::elaborate_files(
      {{"main.qr", std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())}});
}

/// The arguments of the GPT's `loss` at B = 2: θ drawn; the batch's token ids
/// (i, t) ↦ (7·i + t) mod V, its targets the next; a key.
inline std::vector<interp::Value> gpt_loss_arguments(const elab::Program& prog, int loss) {
  using interp::Value;
  const std::map<std::string, int64_t> dims = {{"B", 2}};
  const core::Function& f = prog.functions.at(static_cast<size_t>(loss));
  std::vector<Value> args{Value::of_params(
      std::make_shared<const interp::ParamMap>(interp::init_params(prog, f.args[0].type.params, 7, dims)))};
  std::vector<Value> batch;
  for (int64_t shift : {0, 1}) {
    runtime::Tensor ids = runtime::Tensor::integer(runtime::ElemKind::I32, {2, 32});
    for (int64_t k = 0; k < ids.size(); ++k) ids.ints[static_cast<size_t>(k)] = (7 * (k / 32) + k % 32 + shift) % 76;
    batch.push_back(Value::of(std::move(ids)));
  }
  args.push_back(Value::of_tuple(std::move(batch)));
  args.push_back(Value::of_key(runtime::Key{3, 5}));
  return args;
}

}  // namespace quire::compile::testing
