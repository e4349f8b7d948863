#pragma once
// The vocabulary shared by quire's file formats (npy.h, safetensors.h,
// atomic_file.h): the one error they throw, the choice of how reals are
// stored, and the named tensors a file holds.

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "quire/runtime/float_types.h"
#include "quire/runtime/tensor.h"

namespace quire::io {

/// A file that cannot be read or written, or whose bytes are malformed.
/// what() is always "PATH: reason", where reason may itself name a part of
/// the file ("entry `batch.1.npy`: truncated header ..."), so a user can find
/// the bad byte range from the message alone.
struct IoError : std::runtime_error {
  /// `path` is the file as the user named it; `reason` says what is wrong.
  IoError(const std::string& path, const std::string& reason)
      : std::runtime_error(path + ": " + reason), path(path), reason(reason) {}

  std::string path;    ///< the file, as given by the caller
  std::string reason;  ///< the message without the path
};

/// How Real tensors are written. Reals are held as f64; a narrower type
/// rounds each value to nearest, ties to even (float_types.h), which is exact
/// for a value already of that type (a result realized in bf16). NumPy has no
/// bf16: an .npy or .npz writes BF16 as <f4, which holds every bf16 value
/// exactly. Integer and Bool tensors are stored in their own types whatever
/// this says.
enum class StoreType {
  F64,
  F32,
  BF16,
  F16,
};

/// The store type a value of a float type is written in: F32, BF16 and F16
/// for themselves, F64 for f64 and for the fp8 types (files do not store
/// fp8, and f64 holds every fp8 value exactly).
inline StoreType store_type_of(runtime::FloatType t) {
  switch (t) {
    case runtime::FloatType::F32: return StoreType::F32;
    case runtime::FloatType::BF16: return StoreType::BF16;
    case runtime::FloatType::F16: return StoreType::F16;
    default: return StoreType::F64;
  }
}

/// The store type of each tensor of a file: one for all, or by name.
struct StoreTypes {
  StoreTypes(StoreType all = StoreType::F64) : all(all) {}  // NOLINT: one type for all is the common case
  StoreType all;
  std::map<std::string, StoreType> by_name;  ///< overrides `all` for the tensors it names
  StoreType of(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? all : it->second;
  }
};

/// Named tensors in file order: an .npz's entries, a safetensors file's tensors.
using NamedTensors = std::vector<std::pair<std::string, runtime::Tensor>>;

}  // namespace quire::io
