#pragma once
// The arguments of an entry function for `quire run`: its parameter tree, and
// every other argument either read from an .npz (each under its path: `x`,
// `batch.0`, `batch.1`) or drawn from the seed.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"

namespace quire::interp {

/// The entry's arguments. `params` fills a `params M` first argument. Without
/// `inputs_path`, real tensors are drawn from N(0, 1) under
/// derive_key(key_from_seed(seed), "input:" + path) and keys are that key;
/// integer tensors and host scalars without a default must come from the file.
std::vector<Value> entry_arguments(const elab::Program& prog, int function, const ParamMap* params,
                                   const std::map<std::string, int64_t>& dims, uint64_t seed,
                                   const std::optional<std::string>& inputs_path);

/// A file of samples (`calibrate --samples-from F.npz`): each array holds one
/// argument leaf (under its path, as --inputs names it) for every sample,
/// along its first axis; sample k is the k-th slice of each array. A host
/// scalar's array is 1-D.
struct SampleFile {
  std::string path;
  std::map<std::string, runtime::Tensor> arrays;
  int64_t count = 0;  ///< the samples it holds: the shortest first axis

  /// Reads and checks the file: io::IoError naming it for a file that is not
  /// an .npz, holds no array, or an array of no axes.
  static SampleFile read(const std::string& path);
};

/// The entry's arguments for sample k of `file`, as entry_arguments reads
/// them from an .npz of one sample (the same checks of each array's shape
/// and kind, naming the file); keys are drawn from `seed` + k. io::IoError
/// for k outside the file's samples.
std::vector<Value> sample_arguments(const elab::Program& prog, int function, const ParamMap* params,
                                    const std::map<std::string, int64_t>& dims, uint64_t seed,
                                    const SampleFile& file, int64_t k);

/// The leaves of a value under their paths (`batch.0`): tuples flatten, tensors stay.
void flatten_value(const Value& v, const std::string& path, std::vector<std::pair<std::string, runtime::Tensor>>& out);

/// Checks a value against an argument's declared type at this run's
/// dimensions: kind, element type and sizes (a `...` takes any leading axes;
/// a parameter tree needs every path of its model at its shape). EvalError
/// "WHAT: expected …, found …" otherwise.
void check_argument(const elab::Program& prog, const elab::Type& declared, const Value& v,
                    const std::map<std::string, int64_t>& dims, const std::string& what, int depth = 0);

/// The shape of a tensor type without `...` at this run's dimensions
/// (EvalError for `...`, an unbound dimension or a size below 1).
runtime::Shape concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims);
/// EvalError where `shape` (t's at `dims`) has more than elab::kMaxElements
/// elements, naming the dims t's sizes use: each dim is at most 2^40, but their
/// product can pass any bound and wrap int64.
void check_element_count(const elab::TensorType& t, const runtime::Shape& shape,
                         const std::map<std::string, int64_t>& dims);

}  // namespace quire::interp
