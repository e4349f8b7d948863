#pragma once
// The vocabulary shared by quire's file formats (npy.h, safetensors.h,
// atomic_file.h): the one error they throw, the choice of how reals are
// stored, and the named tensors a file holds.

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

/// How Real tensors are written. Reals are f64 in the interpreter; F32 halves
/// checkpoints at the cost of rounding each value to nearest float. Integer
/// and Bool tensors are stored in their own types whatever this says.
enum class StoreType {
  F64,
  F32,
};

/// Named tensors in file order: an .npz's entries, a safetensors file's tensors.
using NamedTensors = std::vector<std::pair<std::string, runtime::Tensor>>;

}  // namespace quire::io
