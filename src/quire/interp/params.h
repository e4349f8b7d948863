#pragma once
// A run's parameters: initialized from a seed (each by its path, so one's
// value does not depend on declaration order), read from and written to
// safetensors files keyed by path (`blocks.proj.w`).

#include <cstdint>
#include <map>
#include <string>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/io/io_error.h"

namespace quire::interp {

/// The parameters of a model at a run's dimensions, drawn from `seed`: each
/// from derive_key(key_from_seed(seed), path) with its initializer.
ParamMap init_params(const elab::Program& prog, const elab::ParamsType& model, uint64_t seed,
                     const std::map<std::string, int64_t>& dims);

/// Reads parameters from a safetensors file and checks them against the model:
/// every path present with its shape, and no others (io::IoError naming the
/// file, the path and the reason).
ParamMap load_params(const std::string& path, const elab::Program& prog, const elab::ParamsType& model,
                     const std::map<std::string, int64_t>& dims);

/// Writes parameters as safetensors in the model's declaration order, each at
/// its store type (f64 unless `types` says otherwise: a run under a policy
/// writes every parameter at the type the realization stores it in).
void save_params(const std::string& path, const elab::Program& prog, const elab::ParamsType& model,
                 const ParamMap& params, const io::StoreTypes& types = io::StoreType::F64);

}  // namespace quire::interp
